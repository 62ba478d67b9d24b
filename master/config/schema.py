"""The validated test: frozen dataclasses, everything downstream of ``master.config`` reads these.

Owns the shape and documented meaning of a resolved test file. Values here are already checked,
converted to base units (bytes, seconds, fractions 0..1) and expanded (host ranges, ``for:``
sweeps, ``iops_curve:`` points, workloads in force per step). Small pure helpers that interpret a
value (``LunExtent.to_bytes``, ``AttributeMatch.matches``) live next to it. This module must not
parse YAML or touch hosts.

The YAML keys (the interface) and the field each one becomes are listed in the docstrings below;
for users, ``docs/config.md`` lists them from ``master.config.keys``.
Every number has a finite range (the bounds and their reasons: ``master.config.limits``); a value
outside it, infinite or NaN is an error naming its key path.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from master.config.gather import GatherSource
from master.config.thresholds import Threshold
from master.config.units import format_bytes, format_fraction

__all__ = [
    "AccuracyCriterion",
    "AttributeMatch",
    "DfcConfig",
    "DfcGains",
    "FioCriteria",
    "FioCriterion",
    "HostConfig",
    "IopsCurvePoint",
    "Limit",
    "LunChoice",
    "LunExtent",
    "LunSelector",
    "MeasureConfig",
    "PhaseDuration",
    "RollupEdit",
    "RollupSpec",
    "StepConfig",
    "TestConfig",
    "VerifyConfig",
    "WorkloadChange",
    "WorkloadEdit",
    "WorkloadSpec",
    "WriteData",
]

Iops = float | Literal["max"]


# --------------------------------------------------------------------------------------------
# hosts and LUNs


@dataclass(frozen=True)
class HostConfig:
    """One test host. YAML: a string (``localhost``, ``h1``, ``cb[08-11]``) or a mapping.

    Mapping keys: ``name`` (required; may hold ranges like ``h[1-3]``), ``address`` (default: the
    name; may hold ranges expanding to the same count, zipped with the names), ``user``, ``port``
    (1..65535), ``python`` (interpreter on the host, default ``python3``), ``ssh_config``,
    ``identity_file``, ``known_hosts`` (paths the SSH transport reads, kept verbatim), ``exec``
    (a command prefix that gives a pipe to the host: the slave's start is appended to it, as
    argv words, ``{name}`` in a word the host's name), ``transport`` (``local`` | ``ssh`` |
    ``exec``; default ``exec`` with ``exec``, else ``local`` for the name ``localhost`` without
    address, user or port, else ``ssh``), ``worker_cpus`` (``auto``: one worker process per CPU
    the slave may use, pinned to it, the default; ``unpinned``: as many, left to the scheduler;
    a CPU list like ``0-3,8``: one pinned worker per listed CPU; see ``protocol.cpulist``),
    ``watchdog_seconds``
    (a duration, 1 s to 1 h, default 30 s: a slave that hears nothing from the master for this
    long, or three subintervals when longer, stops its I/O and exits).
    """

    name: str
    address: str
    transport: Literal["local", "ssh", "exec", "connect_back"]
    user: str | None = None
    port: int | None = None
    python: str = "python3"
    ssh_config: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    exec: tuple[str, ...] = ()
    worker_cpus: str = "auto"
    watchdog_seconds: float = 30.0
    line: int = 0


@dataclass(frozen=True)
class AttributeMatch:
    """Match one attribute: strings are shell globs (``ACME*``), ints and bools compare equal.

    A bool pattern also matches the integers 0/1 and the strings ``"0"``/``"1"``/``"true"``/
    ``"false"`` (discovery may report ``rotational`` either way).
    """

    key: str
    pattern: str | int | bool

    def matches(self, value: object) -> bool:
        if isinstance(self.pattern, bool):
            if isinstance(value, str):
                return value.strip().lower() in (("1", "true") if self.pattern else ("0", "false"))
            return isinstance(value, (int, bool)) and bool(value) == self.pattern
        if isinstance(self.pattern, int):
            if isinstance(value, str):
                return value.strip() == str(self.pattern)
            return isinstance(value, int) and not isinstance(value, bool) and value == self.pattern
        return value is not None and fnmatch.fnmatchcase(str(value), self.pattern)

    def __str__(self) -> str:
        return f"{self.key}={self.pattern}"


@dataclass(frozen=True)
class LunSelector:
    """One entry of ``luns:``: which LUNs on which hosts the test may use.

    YAML keys: ``hosts`` (``all`` | a host name | a list of host names; default ``all``), then
    exactly one of ``path`` (a glob over block-device paths, e.g. ``/dev/loop*``), ``file`` (a
    file LUN, with ``size`` and ``create``) or attribute keys (``vendor``, ``model``, ``serial``,
    ``kind``, ``size_bytes``, ``rotational``, ``logical_block_bytes``); and ``allow_write``
    (bool, default false: a write to a LUN in use, or to an existing non-empty file the run did
    not create, is refused by preflight unless this is true).

    ``engine``: ``auto`` (the default: libaio with O_DIRECT where it works on the LUN; the
    thread pool, through the page cache, for a file on a file system without O_DIRECT),
    ``libaio`` or ``threadpool``. A LUN that O_DIRECT serves but that cannot have libaio (for
    example the kernel's ``fs.aio-max-nr`` reached) is refused before any I/O, naming host, LUN,
    reason and fix, unless ``allow_engine_fallback: true`` (with ``auto`` only) lets it run on
    the thread pool, with a warning.

    ``shared`` (bool, default false): a LUN another ivypy run is using (this controller's or
    another's, reading or writing) is refused before any I/O unless both runs' entries say
    ``shared: true``; the two then run on it together, and luns.csv says so.

    ``file`` must be absolute or start with ``${output_root}``, which is replaced by the resolved
    output root (absolute, on the controller: meaningful for ``localhost``). ``${host}`` in a file
    path gives every host its own file: the entry becomes one selector per host. ``size`` is bytes
    with units, a positive multiple of 512 and at most 1024PiB (1 EiB), required with
    ``create: true``. The LUN is the first
    ``size`` bytes of the file (as fio's ``size=``): a larger existing file is never truncated,
    and I/O stays in that part; without ``size`` the LUN is the whole file. ``layout``: how a
    file the run creates is filled before its first step: ``random`` (the default), ``zero``
    (every byte written: no read lands on a hole the file system answers without I/O), or
    ``none`` (left sparse, with a warning).
    """

    hosts: tuple[str, ...]
    kind: Literal["path", "file", "attributes"]
    path: str | None = None
    file: str | None = None
    size_bytes: int | None = None
    create: bool = False
    layout: str = "none"
    attributes: tuple[AttributeMatch, ...] = ()
    allow_write: bool = False
    engine: str = "auto"
    allow_engine_fallback: bool = False
    #: another ivypy run may use its LUNs at the same time (both tests must say so)
    shared: bool = False
    line: int = 0

    def describe(self) -> str:
        if self.kind == "path":
            what = f"path {self.path}"
        elif self.kind == "file":
            what = f"file {self.file}"
            if self.size_bytes is not None:
                what += f" size {format_bytes(self.size_bytes)}"
            if self.create:
                what += " create"
        else:
            what = "attributes " + " ".join(str(match) for match in self.attributes)
        return (what + (" allow_write" if self.allow_write else "")
                + (" shared" if self.shared else "")
                + (f" engine {self.engine}" if self.engine != "auto" else "")
                + (" allow_engine_fallback" if self.allow_engine_fallback else ""))


@dataclass(frozen=True)
class LunChoice:
    """Which of the test's LUNs a workload runs on. YAML ``luns:`` of a workload.

    ``all`` (every LUN the ``luns:`` selectors yield, the default), a mapping of attribute
    matches (keys ``host``, ``lun`` (the LUN path), or any LUN attribute key; values are globs;
    all must match), or a list of LUN paths (globs allowed; a single path may stand alone).
    """

    every: bool = True
    attributes: tuple[AttributeMatch, ...] = ()
    paths: tuple[str, ...] = ()

    def matches(self, attributes: Mapping[str, object]) -> bool:
        """Does a discovered LUN (attributes incl. ``host`` and ``lun``) belong to the choice?"""
        if self.every:
            return True
        if self.paths:
            lun = attributes.get("lun")
            return isinstance(lun, str) and any(
                fnmatch.fnmatchcase(lun, pattern) for pattern in self.paths
            )
        return all(match.matches(attributes.get(match.key)) for match in self.attributes)

    def __str__(self) -> str:
        if self.every:
            return "all"
        if self.paths:
            return "[" + ", ".join(self.paths) + "]"
        return "{" + ", ".join(str(match) for match in self.attributes) + "}"


# --------------------------------------------------------------------------------------------
# workloads


@dataclass(frozen=True)
class LunExtent:
    """A place or length on a LUN: a fraction (YAML ``0.5``, ``50%``) or bytes with a unit
    (YAML ``1GiB``, ``0B``). Plain numbers are always fractions, so they must be 0..1. A
    fraction is of the LUN's size for ``range_start``, ``range_end`` and ``seq_start``, and of
    the workload's range for ``hot_zone_size`` (``master.run.workloads.resolve_params`` makes them
    bytes, aligned to the LUN's sectors, once the LUN is known)."""

    value: float
    unit: Literal["fraction", "bytes"]

    def __str__(self) -> str:
        if self.unit == "bytes":
            return format_bytes(int(self.value))
        return format_fraction(self.value)


@dataclass(frozen=True)
class WriteData:
    """What written blocks contain. YAML ``write_data``: ``random`` (default), ``zeros``,
    ``"compressible:2.5"``, ``"dedupable:3"``, or a one-key mapping ``{compressible: 2.5}`` /
    ``{dedupable: 3}``. ``ratio`` (1..1000) is the compression or dedup ratio; 1 for random and
    zeros."""

    kind: Literal["random", "zeros", "compressible", "dedupable"] = "random"
    ratio: float = 1.0

    def __str__(self) -> str:
        if self.kind in ("random", "zeros"):
            return self.kind
        return f"{self.kind}:{self.ratio:g}"


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload as it is in force during a step (all settings resolved).

    YAML keys of a step's ``workloads:`` entry → field: ``name``; ``luns`` → ``luns``
    (``LunChoice``, default all); ``iosequencer`` (required when the workload is created:
    ``random_steady`` | ``random_independent`` | ``sequential``); ``blocksize`` →
    ``blocksize_bytes`` (bytes with units, a positive multiple of 512 up to 64MiB, default 4KiB);
    ``iodepth`` (1..4096, default 1); ``iops`` (0.001..10**8 or ``max``, default max);
    ``read_fraction``
    (0..1, default 1); ``range_start`` / ``range_end`` (``LunExtent``; default 0 and 1; start <
    end when both are the same kind, otherwise checked against the LUN size at run time);
    ``seq_start`` (``LunExtent``: a place on the LUN in range_start..range_end, sequential
    only; default: range_start); ``hot_zone_size`` (``LunExtent`` of at least one block; a
    fraction is of the workload's range) and ``hot_zone_share`` (0..1, the share of I/Os
    going to the hot zone),
    random sequencers only, both or neither; ``skew_weight`` (1e-6..1e6, default 1: this
    workload's share when a rollup's ``total_iops`` is divided); ``write_data`` (``WriteData``);
    ``busy_poll`` (bool, default false); ``seed`` (int, optional; cannot be edited);
    ``delete: true`` removes the workload (it must exist). An extent in bytes is at most
    1024PiB. A name appears once in a step's ``workloads:`` list (again only after a ``delete``).
    """

    name: str
    luns: LunChoice
    iosequencer: str
    blocksize_bytes: int = 4096
    iodepth: int = 1
    iops: Iops = "max"
    read_fraction: float = 1.0
    range_start: LunExtent = LunExtent(0.0, "fraction")
    range_end: LunExtent = LunExtent(1.0, "fraction")
    seq_start: LunExtent | None = None
    hot_zone_size: LunExtent | None = None
    hot_zone_share: float | None = None
    skew_weight: float = 1.0
    write_data: WriteData = WriteData()
    busy_poll: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class WorkloadEdit:
    """Settings to change on existing workloads (``edit_rollup`` parameters, ``for:`` values).
    ``None`` means unchanged. Fields mean what they mean in ``WorkloadSpec``."""

    iosequencer: str | None = None
    blocksize_bytes: int | None = None
    iodepth: int | None = None
    iops: Iops | None = None
    read_fraction: float | None = None
    range_start: LunExtent | None = None
    range_end: LunExtent | None = None
    seq_start: LunExtent | None = None
    hot_zone_size: LunExtent | None = None
    hot_zone_share: float | None = None
    skew_weight: float | None = None
    write_data: WriteData | None = None
    busy_poll: bool | None = None


@dataclass(frozen=True)
class WorkloadChange:
    """What a step did to one workload, in order: ``create``, ``edit`` (``keys`` are the YAML keys
    given) or ``delete``. ``source`` says where it came from: ``workloads``, ``for`` or
    ``iops_curve``."""

    action: Literal["create", "edit", "delete"]
    name: str
    keys: tuple[str, ...] = ()
    source: Literal["workloads", "for", "iops_curve"] = "workloads"


# --------------------------------------------------------------------------------------------
# rollups, measure, DFC


@dataclass(frozen=True)
class RollupSpec:
    """A rollup type. YAML ``rollups:`` entries are a string (``host``, ``vendor+model``) or a
    mapping ``{type: host, quantity: 3, max_droop: 10%}``.

    ``attributes`` are the ``+``-joined keys, each one of ``catalog.ROLLUP_ATTRIBUTES`` (LUN
    attributes, ``host``, ``lun``, ``engine`` and the workload's ``workload``,
    ``iosequencer``, ``blocksize_bytes``, ``iodepth``). ``quantity``: the number of instances
    the run must find (1..1,000,000; validation fails otherwise). ``max_droop``: the largest allowed
    fraction by which an instance's IOPS may fall below the instances' mean. ``all``, ``host``,
    ``lun`` and ``workload`` always exist; listing them only adds validation.
    """

    type: str
    attributes: tuple[str, ...]
    quantity: int | None = None
    max_droop: float | None = None
    builtin: bool = False


@dataclass(frozen=True)
class PhaseDuration:
    """A length of time as asked for and as run: rounded up to whole subintervals."""

    requested_s: float
    subintervals: int
    rounded_s: float


@dataclass(frozen=True)
class Limit:
    """A steady-state limit: ``"2%"`` (``percent``, of the window mean, at most 100 %) or a plain
    number in the watched metric's unit (per second for slopes), at most the metric's largest
    value (10**10 IOPS, 10**9 MB/s, 3,600,000 ms)."""

    value: float
    percent: bool

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g}"


@dataclass(frozen=True)
class AccuracyCriterion:
    """ivy's criterion: steady when the Student-t confidence interval of the focus metric's mean
    over the measurement subintervals is within ±``accuracy`` of the mean at ``confidence``.

    YAML (in ``measure:``, with ``criterion: accuracy``, the default): ``accuracy`` (fraction,
    default 5%), ``confidence`` (fraction, default 95%), ``min_measure_seconds`` (default 60 s;
    at least 2 subintervals), ``ramp_seconds`` (default 0: subintervals ignored before a window
    may start), ``autocorrelation`` (``estimate`` (default: corrected from the data) or a fixed
    factor 1..100 multiplying the half-width; ivy uses 2). Maps onto ``master.analysis.measure``'s
    ``AccuracyCriterion``.
    """

    accuracy: float
    confidence: float
    min_measure: PhaseDuration
    ramp: PhaseDuration = PhaseDuration(0.0, 0, 0.0)
    autocorrelation: Literal["estimate"] | float = "estimate"


@dataclass(frozen=True)
class FioCriterion:
    """One fio-style check. ``type``: iops | iops_slope | bw | bw_slope | deviation | slope;
    ``metric`` is what it watches (IOPS, MB_per_s, or the focus metric for deviation/slope)."""

    type: str
    metric: str
    check: Literal["deviation", "slope"]
    limit: Limit


@dataclass(frozen=True)
class FioCriteria:
    """fio's steady state: every criterion holds over the last ``window`` after ``ramp``.

    YAML (in ``measure:``, with ``criterion: fio``): ``criteria`` (a list of ``{type, limit}``
    mappings or ``"type:limit"`` strings), ``window_seconds`` (required, at least 2
    subintervals), ``ramp_seconds`` (default 0: subintervals ignored before the window may start).
    Each entry maps onto one ``master.analysis.measure.FioCriterion`` with the shared window and
    ramp.
    """

    criteria: tuple[FioCriterion, ...]
    window: PhaseDuration
    ramp: PhaseDuration


@dataclass(frozen=True)
class MeasureConfig:
    """A step's ``measure:`` block: measure until steady instead of for a fixed time.

    YAML keys: ``focus_rollup`` (a rollup type, default ``all``; every instance must be steady),
    ``focus_metric`` (one of ``catalog.FOCUS_METRICS``, default ``IOPS``), ``criterion``
    (``accuracy`` (default) | ``fio``) plus that criterion's keys, ``timeout_seconds`` (default 10
    minutes; never steady by then is a result, not an error). A step with ``measure:`` has no
    ``measure_seconds``.
    """

    focus_rollup: str
    focus_metric: str
    criterion: AccuracyCriterion | FioCriteria
    timeout: PhaseDuration


@dataclass(frozen=True)
class DfcGains:
    """PID gains; ``None`` leaves the controller's default."""

    kp: float | None = None
    ki: float | None = None
    kd: float | None = None


@dataclass(frozen=True)
class DfcConfig:
    """A step's ``dfc:`` block: hold ``focus_metric`` of each ``focus_rollup`` instance at
    ``target`` by editing that instance's total IOPS every subinterval, within
    [``low_iops``, ``high_iops``] (each 0.001..10**10). ``target`` is in the metric's unit (ms for
    times), at most its largest value (as for a ``Limit``). Optional ``gains: {kp, ki, kd}``
    (each 0..100, not all 0; ki is 0.5 unless given). Optional ``window_seconds``: the
    controller acts once per window of that many seconds (whole subintervals, all at one
    IOPS), on the metric of the window's merged histograms, so a tail percentile rests on more
    I/Os than one subinterval has; ``window`` is None for every subinterval. ``tolerance``
    (a fraction, 0..1 exclusive; 10 % unless given): how near the target a reading is settled,
    and the focus metric over the measurement window must be for the step to be valid."""

    focus_rollup: str
    focus_metric: str
    target: float
    low_iops: float
    high_iops: float
    gains: DfcGains = DfcGains()
    window: PhaseDuration | None = None
    tolerance: float = 0.10


@dataclass(frozen=True)
class RollupEdit:
    """An ``edit_rollup`` entry: change the workloads of one rollup instance at step start.

    YAML: ``{instance: all | "host=h1" | "vendor+model=ACME+X1", <workload keys>, total_iops}``.
    ``total_iops`` (0.001..10**10 or ``max``) is divided over the instance's workloads by
    ``skew_weight``; it excludes ``iops``. An instance appears once in a step's ``edit_rollup``.
    """

    rollup: str
    value: tuple[str, ...]
    settings: WorkloadEdit
    total_iops: Iops | None = None

    @property
    def instance(self) -> str:
        if self.rollup == "all":
            return "all"
        return f"{self.rollup}={'+'.join(self.value)}"


@dataclass(frozen=True)
class IopsCurvePoint:
    """One point of an ``iops_curve:`` sweep. ``fraction is None`` is the max-IOPS step that runs
    first (every workload in force at ``iops: max``); other points set each ``rollup`` instance's
    total IOPS to ``fraction`` × the IOPS that instance measured in ``max_step``."""

    max_step: str
    fraction: float | None
    rollup: str


# --------------------------------------------------------------------------------------------
# data verification


@dataclass(frozen=True)
class VerifyConfig:
    """Data verification is on (docs/verify.md): every sector a write puts down is stamped and
    every read of a written block is checked against the run's map, one byte per 4 KiB block.

    YAML ``verify:``: ``true`` (every default), or a mapping of these keys (``{}`` is ``true``);
    ``false``, the default, is no ``VerifyConfig`` at all. ``on_error``: ``stop`` (the step
    ends with the subinterval that found the first damaged block) or ``continue`` (the run
    goes on, counting them). ``findings_kept`` (0..4096): how many damaged blocks' bytes the
    run keeps in its ``verify/`` folder. ``master.config.verify`` parses it and refuses what a
    verified test cannot hold.
    """

    on_error: Literal["stop", "continue"] = "stop"
    findings_kept: int = 64


@dataclass(frozen=True)
class ConnectBackConfig:
    """Connect-back (docs/transports.md): the master listens on ``host``:``port`` for the
    slaves of the hosts that say ``connect_back: true``, each of which must prove the token
    in ``token_file`` (and is proven the master's), waiting ``timeout_s`` for each. YAML
    ``connect_back: {listen: ADDR:PORT, token_file: FILE, timeout_seconds: N}``;
    ``master.config.metrics`` parses it beside ``metrics:``."""

    host: str
    port: int
    token_file: str
    timeout_s: float = 120.0


@dataclass(frozen=True)
class MetricsConfig:
    """Live metrics for Prometheus (docs/metrics.md): the master serves ``/metrics`` on
    ``host``:``port`` (0: any free port) while the run goes; with ``token_file``, a scrape
    must send the bearer token that file holds. YAML ``metrics: {listen: ADDR:PORT,
    token_file: FILE}``; ``ivypy run --metrics ADDR:PORT``. ``master.config.metrics`` parses
    it. ``rollups``: the rollup types served (None: every one; ``metrics: rollups:``,
    ``--metrics-rollups``)."""

    host: str
    port: int
    token_file: str | None = None
    rollups: tuple[str, ...] | None = None


# --------------------------------------------------------------------------------------------
# steps and the whole test


@dataclass(frozen=True)
class StepConfig:
    """One step as it will run (``for:`` and ``iops_curve:`` already expanded into steps).

    YAML keys: ``name`` (required), ``workloads`` (entries create, edit or delete workloads; a
    workload persists into later steps until deleted), ``warmup_seconds``, ``measure_seconds``,
    ``cooldown_seconds`` (like workloads, durations carry over from the previous step; the first
    step's defaults are 0, 60 s and 0), ``measure`` (then the step has no ``measure_seconds``),
    ``dfc``, ``iops_curve`` (list of fractions), ``for`` (mapping of workload key → list of
    values), ``edit_rollup`` (list), ``iops_tolerance_pct`` (this step's own, else the test's: see
    ``TestConfig``; it does not carry over to later steps). Durations are rounded up to whole
    subintervals; ``warmup`` and ``measure_time`` keep both values. ``measure_time`` is
    ``None`` for a ``measure:`` step.

    ``workloads`` is every workload in force during the step, in creation order; ``changes`` is
    what this step did to get there. ``source_index`` is the index in the YAML ``steps:`` list
    and ``for_values`` the (key, YAML text) pairs of a ``for:`` combination.
    """

    index: int
    name: str
    source_index: int
    workloads: tuple[WorkloadSpec, ...]
    changes: tuple[WorkloadChange, ...]
    warmup: PhaseDuration
    measure_time: PhaseDuration | None
    cooldown: PhaseDuration
    measure: MeasureConfig | None = None
    dfc: DfcConfig | None = None
    edit_rollup: tuple[RollupEdit, ...] = ()
    iops_curve: IopsCurvePoint | None = None
    for_values: tuple[tuple[str, str], ...] = ()
    iops_tolerance_pct: float = 5.0
    line: int = 0


@dataclass(frozen=True)
class TestConfig:
    """A whole validated test file.

    YAML top-level keys: ``test`` (required; letters, digits, ``._-``), ``description``,
    ``output_root`` (default ``./ivypy-output``; a relative path is resolved against the current
    directory, as ivy users expect; ``--output-root`` overrides), ``subinterval_seconds``
    (10ms to 1h, default 5), ``deadline_fraction`` (0 < f < 1, default 0.75: how long after a
    boundary the master waits for results, as a fraction of a subinterval),
    ``skew_limit_seconds`` (1us to 10s, default 1ms: a host whose clock offset is known less
    well than this, or a subinterval boundary whose skew may exceed it, is warned about),
    ``iops_tolerance_pct`` (0 to 100, in percent, default 5: a step is invalid when a paced
    workload's IOPS over the measurement falls short of the mean setting in force, after edits
    and DFC, by more than this, beyond what counting allows; ``iops: max`` workloads are not
    checked; a step's own ``iops_tolerance_pct`` overrides it),
    ``hosts``
    (required), ``luns`` (required), ``rollups``, ``gather`` (external metric sources,
    ``master.config.gather``), ``steps`` (required), ``thresholds`` (limits the results must
    hold, ``master.config.thresholds``), ``verify`` (data verification, ``VerifyConfig``;
    ``None`` when off, the default), ``metrics`` (live metrics for Prometheus,
    ``MetricsConfig``; ``None``: none served). The run folder is
    ``<output_root>/<test>/<YYYYmmdd-HHMMSS>/``.
    """

    __test__ = False  # not a pytest test class

    source_file: str
    source_text: str
    test: str
    description: str
    output_root: Path
    subinterval_seconds: float
    deadline_fraction: float
    hosts: tuple[HostConfig, ...]
    luns: tuple[LunSelector, ...]
    rollups: tuple[RollupSpec, ...]
    steps: tuple[StepConfig, ...]
    skew_limit_seconds: float = 0.001
    gather: tuple[GatherSource, ...] = ()
    iops_tolerance_pct: float = 5.0
    thresholds: tuple[Threshold, ...] = ()
    verify: VerifyConfig | None = None
    metrics: MetricsConfig | None = None
    connect_back: ConnectBackConfig | None = None

    def host(self, name: str) -> HostConfig:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def rollup(self, rollup_type: str) -> RollupSpec:
        for rollup in self.rollups:
            if rollup.type == rollup_type:
                return rollup
        raise KeyError(rollup_type)
