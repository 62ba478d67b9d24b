"""The test file's keys as a user reads them: one table per mapping, each key with its value
form, its default and its meaning.

Owns the words of the config reference (``docs/config.md``, written by ``master.config.reference``).
Bounds and defaults are taken from the constants the parsers use (``limits``, ``loader``, ``steps``,
``hosts``, ``verify``, the ``schema`` dataclasses), so a changed number shows in the reference when
it is regenerated. Which keys each mapping accepts is decided by the parsers (``loader.TOP_KEYS``,
``steps.STEP_KEYS``, ...); a test loads a test file that reaches every mapping and checks that the
keys each one accepts are exactly those listed here, so a key added to the loader without a line
here fails it. This module must not parse YAML or validate anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from master.config import gather as gather_rules
from master.config import hosts as host_rules
from master.config import loader
from master.config import steps as step_rules
from master.config import verify as verify_rules
from master.config.catalog import FIO_CRITERIA, IOSEQUENCERS, LUN_ATTRIBUTE_KEYS, LUN_ENGINES
from master.config.limits import (
    MAX_AUTOCORRELATION,
    MAX_BLOCKSIZE_BYTES,
    MAX_DFC_GAIN,
    MAX_FINDINGS_KEPT,
    MAX_IODEPTH,
    MAX_IOPS,
    MAX_IOPS_TOLERANCE_PCT,
    MAX_LIMIT_PERCENT,
    MAX_LUN_BYTES,
    MAX_ROLLUP_QUANTITY,
    MAX_SKEW_WEIGHT,
    MAX_TOTAL_IOPS,
    MAX_WRITE_DATA_RATIO,
    MIN_IOPS,
    MIN_SKEW_WEIGHT,
    format_number,
    show_bytes,
)
from master.config.schema import HostConfig, LunChoice, VerifyConfig, WorkloadSpec
from master.config.units import format_duration_s, format_fraction

__all__ = ["SECTIONS", "Key", "Section", "editable_workload_keys", "section"]


@dataclass(frozen=True)
class Key:
    """One row of the reference: ``names`` (several when they share one meaning, as the LUN
    attribute keys do), the value ``form``, the ``default`` as a user writes it (``required``,
    or ``-`` for none) and the ``meaning``. ``editable``: a workload key that ``for:`` and
    ``edit_rollup`` may change."""

    names: tuple[str, ...]
    form: str
    default: str
    meaning: str
    editable: bool = False


@dataclass(frozen=True)
class Section:
    """One mapping of the test file: ``path`` as error messages write it, with ``[]`` for any
    list index (``steps[].dfc``; ``""`` is the top level)."""

    path: str
    title: str
    intro: str
    keys: tuple[Key, ...]

    def names(self) -> frozenset[str]:
        return frozenset(name for key in self.keys for name in key.names)


def _seconds(seconds: float) -> str:
    return format_duration_s(seconds)


def _k(name: str, form: str, default: str, meaning: str, *, editable: bool = False) -> Key:
    return Key((name,), form, default, meaning, editable)


_PHASE_MAX = "at most a year"
#: a workload and a host with every default, to read the defaults from
_SPEC = WorkloadSpec(name="defaults", luns=LunChoice(), iosequencer="")
_HOST = HostConfig(name="defaults", address="defaults", transport="local")
_VERIFY = VerifyConfig()
_VERIFY_BLOCK = f"{verify_rules.VERIFY_BLOCK_BYTES // 1024} KiB"
_EXTENT = "fraction or bytes"

TOP = Section(
    "",
    "The top level",
    "A test file is one YAML mapping with these keys.",
    (
        _k("test", "name: letters, digits, `._-`", "required",
           "The test's name; the run folder is `<output_root>/<test>/<YYYYmmdd-HHMMSS>/`."),
        _k("description", "text", "empty", "Free text, printed with the plan (`--dry-run`)."),
        _k("output_root", "directory", f"`{loader.DEFAULT_OUTPUT_ROOT}`",
           "Where run folders go; a relative path is taken from the current directory. "
           "`ivypy run --output-root DIR` overrides it."),
        _k("subinterval_seconds",
           f"duration, {_seconds(loader.MIN_SUBINTERVAL_S)} to "
           f"{_seconds(loader.MAX_SUBINTERVAL_S)}",
           _seconds(loader.DEFAULT_SUBINTERVAL_S),
           "The reporting period: every rollup writes a row per subinterval, and measure and "
           "DFC decide once per subinterval. Step durations are rounded up to whole "
           "subintervals."),
        _k("deadline_fraction", "fraction, 0 < f < 1",
           format_fraction(loader.DEFAULT_DEADLINE_FRACTION),
           "How long after a subinterval ends the master waits for every host's results, as "
           "a fraction of a subinterval; a host later than that fails the step (exit 3)."),
        _k("skew_limit_seconds",
           f"duration, {loader.SKEW_LIMIT_RANGE_S[0] * 1e6:g}us to "
           f"{_seconds(loader.SKEW_LIMIT_RANGE_S[1])}",
           _seconds(loader.DEFAULT_SKEW_LIMIT_S),
           "A host whose clock offset is known less well than this, or a step in which a "
           "host's boundary skew may exceed it, is a warning in events.csv."),
        _k("iops_tolerance_pct", f"percent, 0 to {MAX_IOPS_TOLERANCE_PCT:g} (5 or 5%)",
           f"{loader.DEFAULT_IOPS_TOLERANCE_PCT:g}",
           "A step is invalid when a paced workload's IOPS over the measurement fall short of "
           "its setting in force by more than this (`iops: max` is not checked); 100 turns "
           "the check off. A step may set its own."),
        _k("hosts", "list of hosts", "required", "The test hosts; see `hosts[]`."),
        _k("luns", "list of LUN selectors", "required",
           "Which LUNs the test may use, per host; see `luns[]`."),
        _k("rollups", "list of rollup types", "all, host, lun, workload",
           "Rollup types beyond the built-in ones, and validation of any; see `rollups[]`."),
        _k("gather", "list of sources", "none",
           "External metrics (a command's output, a Prometheus endpoint) gathered on the "
           "controller every subinterval; see `gather[]`."),
        _k("steps", "list of steps", "required", "What the test runs, in order; see `steps[]`."),
        _k("thresholds", "list of expressions or mappings", "none",
           "Limits the results must hold, judged on each step's exact summaries: "
           "`METRIC OP LIMIT` (`compare`'s grammar, an absolute limit in the metric's unit: "
           "`service_time_p99_ms < 2`, `IOPS > 50000`) on every step's `all` instance; see "
           "`thresholds[]` to narrow one. Each result is in summary.csv (`thresholds`), "
           "summary.json, the end table and the report; one that failed, or had no value "
           "to judge, makes the run exit 1."),
        _k("verify", "`true`, `false` or a mapping", "false",
           "Data verification (docs/verify.md): every sector a write puts down carries a "
           "stamp, and every read of a written block is checked against the run's map of "
           "what was written, damage named by class. `true` takes the defaults of "
           "`verify`'s keys. With it on, every workload's blocksize must be a multiple of "
           f"{_VERIFY_BLOCK} (the map's block), so must a `range_start` given in bytes, and no "
           "`write_data` may be `dedupable`; see `verify`."),
        _k("connect_back", "mapping", "none",
           "Where the master listens for the slaves of the hosts that say `connect_back: "
           "true`; see `connect_back`."),
        _k("metrics", "mapping", "none",
           "Live metrics for Prometheus while the run goes (docs/metrics.md): the master "
           "serves `/metrics` at `listen`; see `metrics`. `ivypy run --metrics ADDR:PORT` "
           "gives the same."),
    ),
)

HOSTS = Section(
    "hosts[]",
    "A host",
    "An entry is a host name (`localhost`, `h1`, `cb[08-11]`) or a mapping with these keys. "
    "A name may hold numeric ranges: `cb[08-11]` is cb08 cb09 cb10 cb11 (zero-padded to the "
    "first number's width), `n[1,4,7-9]` a list, `r[1-2]n[1-2]` their product.",
    (
        _k("name", "host name, ranges allowed", "required",
           "The host's name in rollups, selectors and files; `all` is reserved."),
        _k("address", "address, ranges allowed", "the name",
           "Where SSH connects; ranges must expand to as many addresses as the name has hosts, "
           "and are paired with them in order."),
        _k("user", "text", "-", "SSH user; unset, the SSH client's own default applies."),
        _k("port", "integer, 1 to 65535", "-", "SSH port; unset, the SSH client's default."),
        _k("python", "command", f"`{_HOST.python}`",
           "The Python interpreter that runs the slave on the host (3.10 or later, with numpy "
           "and psutil)."),
        _k("ssh_config", "path", "-", "An OpenSSH client config file the SSH transport reads."),
        _k("identity_file", "path", "-", "The private key to log in with."),
        _k("known_hosts", "path", "-", "The known_hosts file host keys are checked against."),
        _k("exec", "command: a list of words, or a string split as a shell would", "-",
           "A command prefix that gives a pipe to the host: `kubectl exec -i -n NS POD --`, "
           "`ip netns exec NS`, `docker exec -i NAME`, `srun`. The master runs it with the "
           "slave's start appended (no shell), sends the slave over its stdin and speaks the "
           "protocol over its stdin and stdout; the host needs only `python` with numpy and "
           "psutil. `{name}` in a word is the host's name (`{name: pod[1-3], exec: kubectl "
           "exec -i {name} --}`). Not with address, user, port or the SSH keys."),
        _k("connect_back", "bool", "false",
           "The host's slave dials the master (`ivypy slave --connect`, started by a "
           "DaemonSet, a Job, `srun`...): the run waits for it at the test's `connect_back` "
           "(docs/transports.md). Not with address, user, port, exec or the SSH keys."),
        _k("transport", "`local`, `ssh`, `exec` or `connect_back`", "see meaning",
           "`local` runs the slave as a child process of the master, `ssh` over SSH, `exec` "
           "through `exec`, `connect_back` waits for it to dial in. Default: `connect_back` "
           "with `connect_back: true`, `exec` with `exec`, else `local` for the name "
           "`localhost` without address, user or port, else `ssh`."),
        _k("worker_cpus", "`auto`, `unpinned` or a CPU list like `0-3,8`",
           f"`{_HOST.worker_cpus}`",
           "`auto`: one worker process per CPU the slave may use, pinned to it; `unpinned`: as "
           "many, left to the scheduler; a list: one pinned worker per listed CPU (a CPU the "
           "slave may not use stops the run, exit 3)."),
        _k("watchdog_seconds",
           f"duration, {_seconds(host_rules.WATCHDOG_SECONDS_RANGE[0])} to "
           f"{_seconds(host_rules.WATCHDOG_SECONDS_RANGE[1])}",
           _seconds(host_rules.DEFAULT_WATCHDOG_S),
           "A slave that hears nothing from the master for this long (or three of the longest "
           "subinterval, when longer) stops its I/O and exits. Time the slave spends answering "
           "a request (a discovery that lays a file out) does not count."),
    ),
)

LUNS = Section(
    "luns[]",
    "A LUN selector",
    "Each entry picks LUNs on some hosts by exactly one of `path`, `file` or LUN attributes. "
    "A selector that matches nothing on a host it names is an error at run time.",
    (
        _k("hosts", "`all`, a host name or a list of them (ranges allowed)", "`all`",
           "The hosts this entry selects LUNs on."),
        _k("path", "absolute glob over block devices", "-",
           "Block devices by path, e.g. `/dev/loop*` or `/dev/sdb`."),
        _k("file", "absolute path", "-",
           "A file LUN. `${output_root}` stands for the resolved output root; `${host}` gives "
           "every host its own file (one selector per host)."),
        _k("size", f"bytes, a positive multiple of 512, at most {show_bytes(MAX_LUN_BYTES)}",
           "the whole file",
           "With `file` only: the LUN is the file's first `size` bytes (as fio's `size=`); a "
           "larger file is never truncated. Required with `create: true`."),
        _k("create", "bool", "false",
           "With `file` only: create the file when it is missing, or extend it to `size` when it "
           "is smaller and empty or ivypy's own (its mark, below); a smaller file someone else "
           "made is refused, never grown. A file ivypy makes (or sizes from empty) carries its "
           "mark, the extended attribute "
           "`user.ivypy.lun`: later runs write it without `allow_write` while it is that file "
           "(same inode) at that size. Where the file system keeps no user extended attributes "
           "the run warns, and a later run refuses the file as it would anyone's."),
        _k("layout", " or ".join(f"`{name}`" for name in loader.LAYOUTS),
           "`random` with `create`, else `none`",
           "With `create: true`: how a file the run creates is filled before its first step. "
           "`random` and `zero` write it whole (no read lands on a hole the file system "
           "answers without I/O); `none` leaves it sparse, with a warning."),
        _k("allow_write", "bool", "false",
           "Without it, a write to a LUN in use (mounted, partitioned, with a signature, open "
           "elsewhere) or to an existing non-empty file that is not ivypy's own (neither made by "
           "this run nor carrying ivypy's mark from an earlier one: see `create`) is refused "
           "(exit 2). With it the write goes ahead and the reasons are a warning."),
        _k("engine", " or ".join(f"`{name}`" for name in LUN_ENGINES), "`auto`",
           "The I/O engine of the LUN's workloads: `auto` is libaio with O_DIRECT where that "
           "works, the thread pool (through the page cache) for a file on a file system "
           "without O_DIRECT. `io_uring` is O_DIRECT through io_uring with registered files "
           "and buffers, under the same loop as libaio; where io_uring cannot be had (a kernel "
           "before 5.19, `kernel.io_uring_disabled`, a seccomp filter) the LUN is refused "
           "before any I/O, naming the host, the LUN and the reason. The engine in use is "
           "reported per LUN (luns.csv, events.csv, the `engine` rollup key)."),
        _k("allow_engine_fallback", "bool", "false",
           "With `engine: auto` only: a LUN that O_DIRECT serves but that cannot have libaio "
           "(the kernel's `fs.aio-max-nr` reached) runs on the thread pool with a warning "
           "instead of being refused; so does one on a host without the compiled loop (no C "
           "compiler there and none shipped that loads, or `IVYPY_SLAVE_CC=none`), where "
           "libaio and io_uring cannot run."),
        _k("shared", "bool", "false",
           "Whether another ivypy run may use the entry's LUNs at the same time. A LUN "
           "another run is using (from this controller or another, reading or writing) is "
           "refused before any I/O, naming the host and the LUN, unless both tests say "
           "`shared: true`; luns.csv says which LUNs were shared."),
        Key(LUN_ATTRIBUTE_KEYS, "glob, integer or bool", "-",
            "Select LUNs by what discovery reports (strings are shell globs, `ACME*`; all "
            "given must match). `rotational` matches true/false or 1/0. An attribute in "
            "bytes (`size_bytes` ...) matches its digits: `1073741824` or `10*`, not `1GiB` "
            "(refused, saying the number)."),
    ),
)

ROLLUPS = Section(
    "rollups[]",
    "A rollup type",
    "An entry is a rollup type (`host`, `vendor+model`: attribute names joined by `+`) or a "
    "mapping with these keys. `all`, `host`, `lun` and `workload` always exist; listing one "
    "only adds validation. An attribute is a LUN attribute (see [LUN attributes and "
    "rollups](#lun-attributes)), `host`, `lun`, `engine`, or a workload's `workload`, "
    "`iosequencer`, `blocksize_bytes` or `iodepth`; any other name is an error.",
    (
        _k("type", "rollup type", "required", "The `+`-joined attribute names."),
        _k("quantity", f"integer, 1 to {format_number(MAX_ROLLUP_QUANTITY)}", "-",
           "The number of instances the run must find, or the step is invalid."),
        _k("max_droop", "fraction, 0 < f < 1", "-",
           "The most an instance's IOPS may fall below the instances' mean, or the step is "
           "invalid."),
    ),
)

STEPS = Section(
    "steps[]",
    "A step",
    "Steps run in order. Workloads and durations carry over into later steps until a step "
    "changes them. A step measures for `measure_seconds`, or until steady with `measure:`.",
    (
        _k("name", "letters, digits and `._=%+:,-`", "required",
           "The step's name (its folder is `stepNNNN-<name>`); `for` and `iops_curve` add "
           "suffixes. Names are unique in a test."),
        _k("workloads", "list of workload entries", "none",
           "Create, edit or delete workloads; see `steps[].workloads[]`."),
        _k("warmup_seconds", f"duration, {_PHASE_MAX}", "the previous step's; first 0s",
           "Subintervals run before the measurement, not in its summary."),
        _k("measure_seconds", f"duration, {_PHASE_MAX}, at least one subinterval",
           f"the previous step's; first {_seconds(step_rules.DEFAULT_MEASURE_S)}",
           "The measurement's length. Not allowed with `measure`."),
        _k("cooldown_seconds", f"duration, {_PHASE_MAX}", "the previous step's; first 0s",
           "Subintervals run after the measurement, not in its summary."),
        _k("measure", "mapping (`{}` for the defaults)", "-",
           "Measure until the focus metric is steady; see `steps[].measure`."),
        _k("dfc", "mapping", "-",
           "Hold a focus metric at a target by moving IOPS; see `steps[].dfc`."),
        _k("iops_curve", "list of fractions, 0 < f <= 1", "-",
           "Expands into `<name>-iops=max` (every workload at `iops: max`) and one step per "
           "fraction, `<name>-iops=<f>`, each setting the total IOPS of every instance of the "
           "step's `measure` focus rollup (`all` without `measure`) to that fraction of what "
           "it measured at max. Not with `for` or `dfc`."),
        _k("for", "mapping of workload key to a list of values", "-",
           "A sweep: one step per combination (the first key varies slowest), named "
           "`<name>-key=value-...`; see `steps[].for`."),
        _k("edit_rollup", "list", "-",
           "Change the workloads of rollup instances at the step's start; see "
           "`steps[].edit_rollup[]`."),
        _k("iops_tolerance_pct", "percent, as at the top level", "the test's",
           "This step's own IOPS tolerance; it does not carry over to later steps."),
    ),
)

_WRITE_DATA = "`random`, `zeros`, `compressible:R`, `dedupable:R` or a one-key mapping"

WORKLOADS = Section(
    "steps[].workloads[]",
    "A workload entry",
    "An entry naming a new workload creates it (`iosequencer` needed, other keys default); one "
    "naming an existing workload changes only the keys given; `delete: true` removes it. A "
    "workload runs on every LUN its `luns` choose; its id is `host:lun:name`.",
    (
        _k("name", "letters, digits, `._-`", "required",
           "The workload's name; once per step (again only after a `delete`)."),
        _k("luns", "`all`, a list of LUN paths (globs) or a mapping of attribute matches", "`all`",
           "Which of the selected LUNs the workload runs on; see `steps[].workloads[].luns`. "
           "Only when the workload is created."),
        _k("iosequencer", " or ".join(f"`{name}`" for name in IOSEQUENCERS),
           "required to create",
           "How offsets and start times are chosen: `random_steady` (random offsets, evenly "
           "spaced), `random_independent` (random offsets, Poisson arrivals), `sequential`.",
           editable=True),
        _k("blocksize", f"bytes, a multiple of 512, at most {show_bytes(MAX_BLOCKSIZE_BYTES)}",
           show_bytes(_SPEC.blocksize_bytes),
           f"The I/O size; with `verify` on, a multiple of {_VERIFY_BLOCK}.", editable=True),
        _k("iodepth", f"integer, 1 to {format_number(MAX_IODEPTH)}",
           str(_SPEC.iodepth), "The most I/Os in flight.", editable=True),
        _k("iops", f"`max` or a rate, {format_number(MIN_IOPS)} to {format_number(MAX_IOPS)}",
           f"`{_SPEC.iops}`",
           "The rate to pace at; `max` submits as fast as the queue depth allows.",
           editable=True),
        _k("read_fraction", "fraction, 0 to 1",
           format_fraction(_SPEC.read_fraction),
           "The share of reads; the rest are writes.", editable=True),
        _k("range_start", _EXTENT, str(_SPEC.range_start),
           "Where the workload's part of the LUN starts: a fraction of the LUN (`0.5`, `50%`) "
           f"or bytes with a unit (`1GiB`; with `verify` on, a multiple of {_VERIFY_BLOCK}).",
           editable=True),
        _k("range_end", _EXTENT, str(_SPEC.range_end), "Where it ends (after `range_start`).",
           editable=True),
        _k("seq_start", _EXTENT, "`range_start`",
           "`sequential` only: where the first I/O goes, inside the range.", editable=True),
        _k("hot_zone_size", _EXTENT + ", at least one block", "-",
           "Random sequencers only, with `hot_zone_share`: the size of a hot zone at the "
           "range's start (a fraction is of the workload's range).", editable=True),
        _k("hot_zone_share", "fraction, 0 to 1", "-",
           "The share of I/Os that go to the hot zone.", editable=True),
        _k("skew_weight",
           f"number, {MIN_SKEW_WEIGHT:g} to {format_number(MAX_SKEW_WEIGHT)}",
           f"{_SPEC.skew_weight:g}",
           "A total IOPS given to a rollup instance (`edit_rollup` `total_iops`, DFC, "
           "`iops_curve`) is split evenly over its LUNs, then among each LUN's workloads in "
           "proportion to this weight.", editable=True),
        _k("write_data", _WRITE_DATA, f"`{_SPEC.write_data}`",
           "What written blocks hold; `R` is a compression or dedup ratio, 1 to "
           f"{format_number(MAX_WRITE_DATA_RATIO)}. See `steps[].workloads[].write_data`. "
           "Not `dedupable` with `verify` on (docs/verify.md says what the stamps do to the "
           "others).",
           editable=True),
        _k("busy_poll", "bool", str(_SPEC.busy_poll).lower(),
           "Look for completions in the ring instead of sleeping (lower latency, a busy CPU).",
           editable=True),
        _k("delete", "bool", "false", "`true` removes the workload; no other key but `name`."),
        _k("seed", "integer, 0 to 2**64-1", "-",
           "The random stream's seed, for a repeatable I/O sequence. Only when the workload "
           "is created."),
    ),
)

WORKLOAD_LUNS = Section(
    "steps[].workloads[].luns",
    "A workload's LUNs as attribute matches",
    "Given as a mapping, every key must match (globs for strings).",
    (
        _k("host", "glob over host names", "-", "The host the LUN is on."),
        _k("lun", "glob over LUN paths", "-", "The LUN's path (`/dev/sdb`, a file's path)."),
        Key(LUN_ATTRIBUTE_KEYS, "glob, integer or bool", "-",
            "Any attribute LUN discovery reports, as in `luns[]`."),
    ),
)

WRITE_DATA = Section(
    "steps[].workloads[].write_data",
    "`write_data` as a mapping",
    "The mapping form of `compressible:R` / `dedupable:R`; give exactly one key.",
    (
        _k("compressible", f"ratio, 1 to {format_number(MAX_WRITE_DATA_RATIO)}", "-",
           "Blocks that compress by this ratio."),
        _k("dedupable", f"ratio, 1 to {format_number(MAX_WRITE_DATA_RATIO)}", "-",
           "Blocks that deduplicate by this ratio."),
    ),
)

_ACCURACY_ONLY = "With `criterion: accuracy` only."
_FIO_ONLY = "With `criterion: fio` only."

MEASURE = Section(
    "steps[].measure",
    "Measure until steady",
    "The step runs its warmup, then until every focus-rollup instance's focus metric is steady "
    "(the window found is the measurement), or times out with `valid=false` and the best "
    "window. See docs/measure.md.",
    (
        _k("focus_rollup", "rollup type", "`all`", "Every instance of it must be steady."),
        _k("focus_metric", "metric name (see Metrics)", "`IOPS`",
           "The metric watched; a device-side one (`device_IOPS`, `device_util_pct`, ...) "
           "of a LUN-based focus rollup; `gather.<source>.<element_type>.<metric>` names a "
           "joined gathered metric."),
        _k("criterion", "`accuracy` or `fio`", "`accuracy`",
           "`accuracy`: ivy's, the Student-t confidence interval of the mean within "
           "±`accuracy`; `fio`: fio's steady-state criteria over a window."),
        _k("accuracy", "fraction, 0 < f < 1", "5%",
           f"The interval's half-width relative to the mean. {_ACCURACY_ONLY}"),
        _k("confidence", "fraction, 0 < f < 1", "95%", f"The confidence. {_ACCURACY_ONLY}"),
        _k("min_measure_seconds", "duration, at least 2 subintervals",
           _seconds(step_rules.DEFAULT_MIN_MEASURE_S),
           f"The shortest measurement. {_ACCURACY_ONLY}"),
        _k("autocorrelation",
           f"`estimate` or a factor, 1 to {format_number(MAX_AUTOCORRELATION)}", "`estimate`",
           "`estimate` corrects the interval for autocorrelation from the data; a factor "
           f"multiplies its half-width (ivy uses 2). {_ACCURACY_ONLY}"),
        _k("criteria", "list of `{type, limit}` or `\"type:limit\"`", "required with fio",
           f"Every criterion must hold; see `steps[].measure.criteria[]`. {_FIO_ONLY}"),
        _k("window_seconds", "duration, at least 2 subintervals", "required with fio",
           f"The window the criteria are checked over. {_FIO_ONLY}"),
        _k("ramp_seconds", "duration", "0s",
           "Subintervals after the warmup that no window may include."),
        _k("timeout_seconds", "duration, at least the ramp plus the shortest window",
           _seconds(step_rules.DEFAULT_MEASURE_TIMEOUT_S),
           "Not steady by then: the step ends with its best window, `valid=false`."),
    ),
)

CRITERIA = Section(
    "steps[].measure.criteria[]",
    "A fio-style criterion",
    "A mapping with these keys, or the string `\"type:limit\"` (`\"iops_slope:2%\"`).",
    (
        _k("type", " or ".join(f"`{name}`" for name in FIO_CRITERIA), "required",
           "`iops`, `bw` (MB/s) and `deviation` (the focus metric) limit the largest "
           "deviation of a subinterval from the window mean; `iops_slope`, `bw_slope` and "
           "`slope` limit the least-squares slope over the window."),
        _k("limit", f"a percentage up to {MAX_LIMIT_PERCENT:g}%, or a number", "required",
           "A percentage of the window mean, or a number in the watched metric's unit (per "
           "second for a slope)."),
    ),
)

DFC = Section(
    "steps[].dfc",
    "Dynamic feedback control",
    "Every subinterval (or window), each focus-rollup instance's total IOPS is moved so that "
    "its focus metric approaches the target. See docs/measure.md.",
    (
        _k("focus_rollup", "rollup type", "`all`", "One controller per instance of it."),
        _k("focus_metric", "metric name (see Metrics)", "required",
           "The metric held, e.g. `service_time_p99_ms`, a device-side one such as "
           "`device_util_pct` of a LUN-based focus rollup, or a joined gathered metric "
           "`gather.<source>.<element_type>.<metric>` (for these two, no `window_seconds`)."),
        _k("target", "number > 0 in the metric's unit (ms for times)", "required",
           "The value to hold."),
        _k("low_iops", f"rate, {format_number(MIN_IOPS)} to {format_number(MAX_TOTAL_IOPS)}",
           "required", "The lowest total IOPS an instance is set to."),
        _k("high_iops", f"rate, {format_number(MIN_IOPS)} to {format_number(MAX_TOTAL_IOPS)}",
           "required", "The highest; above `low_iops`."),
        _k("gains", "mapping `{kp, ki, kd}`", "adaptive",
           "Fixed PID gains; without them the controller adapts its own. See "
           "`steps[].dfc.gains`."),
        _k("window_seconds", "duration, at least one subinterval", "every subinterval",
           "Act once per window, on the metric of the window's merged histograms (a tail "
           "percentile then rests on more I/Os)."),
        _k("tolerance", "fraction or percentage, between 0 and 1 exclusive", "10%",
           "How near the target a reading counts as settled; the focus metric over the "
           "measurement window must be within it of the target, or the step is invalid."),
    ),
)

GAINS = Section(
    "steps[].dfc.gains",
    "Fixed DFC gains",
    "PID gains on `ln(IOPS)` against `ln(target / measured)`, fixed for the step. Given "
    "`gains`, a gain left out takes the default shown; not all three may be 0.",
    (
        _k("kp", f"number, 0 to {format_number(MAX_DFC_GAIN)}", "0", "Proportional gain."),
        _k("ki", f"number, 0 to {format_number(MAX_DFC_GAIN)}", "0.5", "Integral gain."),
        _k("kd", f"number, 0 to {format_number(MAX_DFC_GAIN)}", "0", "Derivative gain."),
    ),
)


def editable_workload_keys() -> tuple[str, ...]:
    """The workload keys ``for:`` and ``edit_rollup`` may change, in the table's order."""
    return tuple(name for key in WORKLOADS.keys if key.editable for name in key.names)


EDIT_ROLLUP = Section(
    "steps[].edit_rollup[]",
    "Edit a rollup instance",
    "At the step's start, change every workload of one rollup instance. An instance appears "
    "once in a step's `edit_rollup`.",
    (
        _k("instance", "`all` or `<rollup type>=<value>`", "required",
           "`host=h1`, `lun=h1:/dev/sdb`, `workload=h1:/dev/sdb:rr`, `vendor+model=ACME+X1` "
           "(one `+`-joined value per attribute). A host, lun or workload instance names a "
           "host of the test, checked as the file is read; other instances once the LUNs are "
           "discovered, before any I/O."),
        _k("total_iops",
           f"`max` or a rate, {format_number(MIN_IOPS)} to {format_number(MAX_TOTAL_IOPS)}",
           "-", "Split evenly over the instance's LUNs, then by `skew_weight` among each LUN's "
           "workloads; not with `iops`."),
        Key(editable_workload_keys(), "as in `steps[].workloads[]`", "-",
            "The value every workload of the instance takes."),
    ),
)

FOR = Section(
    "steps[].for",
    "A sweep",
    "Each key is a workload key, each value a list of scalars (no duplicates). The values are "
    "applied to the workloads the step's own entries name, or to every workload in force. A "
    "key may not also be set by the step's `workloads:` entries.",
    (
        Key(editable_workload_keys(), "list of values, each as in `steps[].workloads[]`", "-",
            "The values to sweep."),
    ),
)

GATHER = Section(
    "gather[]",
    "A gather source",
    "Run on the controller at every subinterval, started just in time (by its own recent "
    "duration) so that its sample belongs to the subinterval that just ended. Exactly one of "
    "`command` or `prometheus`. A source that fails, is late, prints garbage or hangs never "
    "holds up I/O: it is stopped at its timeout and its cells of that subinterval stay empty, "
    "with an event saying why. Output: `gather/<source>/<element_type>.csv` per step; "
    "interlock.csv has each gather's timing. See docs/gather.md.",
    (
        _k("name", "name: letters, digits, `_-`", "required",
           "The source's name, in file names and in `gather.<source>.<type>.<metric>`."),
        _k("command", "list of strings (program and arguments)", "-",
           "Prints `element_type,element_instance,metric,value` lines, or JSON lines with those "
           "four keys."),
        _k("prometheus", "`http://` URL", "-",
           "A Prometheus/OpenMetrics text endpoint to scrape."),
        _k("timeout", f"duration, {_seconds(gather_rules.MIN_GATHER_TIMEOUT_S)} to one "
           "subinterval", "half a subinterval",
           "A gather still running then is killed (its process group) and recorded missing."),
        _k("counters", "list of metric names", "none",
           "A command's metrics that are counters: written as rates per second from their "
           "deltas over the true time between samples."),
        _k("metrics", "list of metric names or `/regex/`", "required with `prometheus`",
           "The endpoint's metrics to take; counters (`# TYPE counter`, `*_total`, and a "
           "histogram's or summary's `_count`, `_sum` and `_bucket`) become rates per second."),
        _k("element_type", "name", "required with `prometheus`",
           "The element type of the endpoint's series."),
        _k("instance_label", "label name", "required with `prometheus`",
           "The label whose value is the element instance (series that share it are added)."),
        _k("config_command", "list of strings", "-",
           "Run once at the start: attribute 4-tuples, written to "
           "`gather/<source>/config/<element_type>.csv` and used by `join`."),
        _k("join", "mapping", "-", "Map elements to LUNs; see `gather[].join`."),
        _k("optional", "true or false", "false",
           "Whether the run may go on when the source's first sample (taken once the hosts "
           "are up, before any I/O) fails: without it, that refuses the run (exit 2)."),
    ),
)

GATHER_JOIN = Section(
    "gather[].join",
    "Join a source's elements to LUNs",
    "Each rollup instance gets the metrics of the elements under its LUNs; elements under no "
    "LUN of the step are reported as non-participating.",
    (
        _k("element_type", "name", "required", "The element type joined."),
        _k("by", f"attribute name, or `{gather_rules.ELEMENT_INSTANCE}`", "required",
           "The element's attribute (from `config_command`) that names its LUN."),
        _k("lun_attribute", "LUN attribute, `lun` or `host`", "required",
           "The LUN attribute it equals (a loop device's `name`, an array LUN's `serial`)."),
        _k("aggregate", " | ".join(f"`{a}`" for a in gather_rules.AGGREGATES), "`sum`",
           "How a rollup instance combines its elements' values."),
    ),
)

THRESHOLDS = Section(
    "thresholds[]",
    "A threshold narrowed",
    "A list item may be the expression alone (judged on every step's `all` instance) or this "
    "mapping. The metric is a summary.csv metric (IOPS, MB_per_s, the latency columns, the "
    "device columns, `cpu_busy_pct`, a joined `gather.<source>.<element_type>.<metric>`).",
    (
        _k("expr", "`METRIC OP LIMIT` (`<`, `<=`, `>`, `>=`)", "required",
           "What must hold, e.g. `service_time_p99_ms < 2`."),
        _k("step", "step name", "every step", "Judge it on this step alone."),
        _k("rollup", "rollup type of the test", "`all`", "The rollup it is judged on."),
        _k("instance", "rollup instance name", "each instance",
           "The one instance (a host, a LUN ...) it is judged on; one the step lacks is a "
           "threshold that did not hold."),
    ),
)

VERIFY = Section(
    "verify",
    "Data verification",
    "`verify: true` turns it on with these defaults; this mapping changes them (`{}` is "
    "`true`). What is checked, how, and the run's `verify/` folder: docs/verify.md.",
    (
        _k("on_error", " or ".join(f"`{name}`" for name in verify_rules.ON_ERROR),
           f"`{_VERIFY.on_error}`",
           "`stop`: the step ends with the subinterval that found the first damaged block; "
           "`continue`: the run goes on, counting every damaged block."),
        _k("findings_kept", f"integer, 0 to {format_number(MAX_FINDINGS_KEPT)}",
           str(_VERIFY.findings_kept),
           "How many damaged blocks the run keeps whole (their bytes as read and the stamp "
           "found) in its `verify/` folder; the counts take every one."),
    ),
)

METRICS = Section(
    "metrics",
    "Live metrics for Prometheus",
    "What the master serves while the run goes, and to whom: docs/metrics.md lists every "
    "series.",
    (
        _k("listen", "`ADDR:PORT` (`[v6]:PORT`)", "required",
           "Where `/metrics` is served (port 0: any free one, which the console and "
           "events.csv name)."),
        _k("token_file", "path", "-",
           "A file whose first line is a bearer token a scrape must send "
           "(`Authorization: Bearer ...`), else it is answered 401. A relative path is from "
           "the working directory."),
        _k("rollups", "list of rollup types", "every type",
           "The rollup types whose instances are served (`[all, host]`); each one of the "
           "test's. A scrape holds about 180 lines per instance: at thousands of workloads "
           "leave `workload` and `lun` out. `ivypy run --metrics-rollups all,host` gives "
           "the same."),
    ),
)

CONNECT_BACK = Section(
    "connect_back",
    "Hosts that dial the master",
    "For hosts a scheduler starts (`ivypy slave --connect HOST:PORT --token-file FILE --name "
    "NAME`): the master listens here before any host is reached, and each side proves the "
    "token to the other over TLS before the protocol starts (docs/transports.md).",
    (
        _k("listen", "`ADDR:PORT` (`[v6]:PORT`)", "required",
           "Where the master listens (a port the slaves are told: not 0)."),
        _k("token_file", "path", "required",
           "A file whose first line is the run's token, which the slaves' files hold too. A "
           "relative path is from the working directory."),
        _k("timeout_seconds", "duration, 1 s to 1 h", "120 s",
           "How long the run waits for each host to dial in; one that does not stops the run "
           "(exit 3), named."),
    ),
)

SECTIONS: tuple[Section, ...] = (
    TOP, HOSTS, LUNS, ROLLUPS, GATHER, GATHER_JOIN, STEPS, WORKLOADS, WORKLOAD_LUNS,
    WRITE_DATA, MEASURE, CRITERIA, DFC, GAINS, EDIT_ROLLUP, FOR, THRESHOLDS, VERIFY, METRICS,
    CONNECT_BACK,
)


def section(path: str) -> Section:
    """The section of a key path with ``[]`` for list indexes; ``KeyError`` when none."""
    for candidate in SECTIONS:
        if candidate.path == path:
            return candidate
    raise KeyError(path)
