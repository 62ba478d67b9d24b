"""``ivypy run``: one test from start to end.

Owns the order of things: create the run folder, start every host's slave (concurrently),
measure clocks, discover and select LUNs, then per step create/edit/delete workloads (preflight
happens there, before any I/O of the step), start all hosts on one common boundary, gather each
subinterval's results within the deadline, roll up, write rows, grant the next subinterval, and
finally summarise the measurement period (``master.analysis.stepcontrol`` gives the verdict,
``master.analysis.verdicts`` words why a step ended early). Failures stop every slave and keep every
row written so far; the failed step still gets its summary rows, invalid, saying what ended it.
However the run ends, the slaves' I/O stops before summary.json and the report are built; an
exception the run does not handle leaves state.json ``failed`` (resumable) and goes on to the
caller.
It does not compute metrics (``master.analysis.rollup``), format files (``master.results.output``)
or speak bytes (``master.hosts.session``).

Exit codes: 0 success, 1 a step invalid, 2 config or preflight error, 3 host failure,
130 interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from master.analysis.thresholds import Judged, worst_first
from master.config import HostConfig, RollupSpec, StepConfig, TestConfig
from master.config.metrics import read_token
from master.config.resolved import resolved_dict
from master.config.steps import curve_references
from master.gather.gathering import Gathering
from master.hosts.connectback import ConnectBackListener
from master.hosts.connection import Connection, Connector
from master.hosts.session import HostSession, LunRefusedError, SlaveEvent
from master.live.control_socket import ControlServer, ControlUnavailable
from master.live.metrics import MetricsServer, MetricsUnavailable, RunMetrics
from master.live.view import CONSOLE, LiveView
from master.results.output import RunOutput, create_run_folder
from master.results.report.build import report_after_run
from master.results.runfolder import thresholds_judged
from master.results.runstate import (
    STATE_FILE,
    CreatedFile,
    Resume,
    RunState,
    new_state,
    now_text,
    set_aside_incomplete_steps,
    step_results_from,
    write_state,
)
from master.results.schema import (
    EVENT_COLUMNS,
    HOST_COLUMNS,
)
from master.results.summaryjson import write_summary_json
from master.run.fleet import (
    INTERRUPT_WAIT_S,
    Fleet,
    Interrupted,
)
from master.run.notices import OnceARun
from master.run.operator import RunControl
from master.run.outcome import (
    EXIT_CONFIG,
    EXIT_DAMAGED,
    EXIT_HOST,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_OUTPUT,
    RunResult,
    StepFailed,
)
from master.run.settings import Settings
from master.run.startlead import GoConfirmed
from master.run.steps import StepLoop, StepState
from master.run.verifying import RunVerification, shared_overlap
from master.run.workloads import (
    Lun,
    SelectedLun,
    WorkloadInstance,
    check_rollup_keys,
    device_globs,
    expand_step,
    file_requests,
    select_luns,
    shared_identities,
)
from protocol import verify as pv
from protocol.cpulist import usable_cpus
from protocol.errors import (
    ConfigError,
    HostError,
    IvyError,
    OutputError,
    PreflightError,
    ProtocolError,
)
from protocol.verify import MAP_BLOCK_BYTES
from protocol.version import __version__

log = logging.getLogger(__name__)

#: How many hosts are being connected to at once (SSH handshakes, the host's python checked,
#: the zipapp sent, the slave started): the rest wait for a free place. All of it costs the
#: controller CPU: on 2 cores, 64 hosts at once left 9 of them unanswered 30 s into checking
#: their python; 8 per core started all 64.
CONNECT_PARALLEL = min(64, 8 * len(usable_cpus()))
#: How many hosts measure their clock offset at once: pings of every host at once lengthen each
#: other's round trips on the master's loop (and then each host pings up to its most).
CLOCK_PARALLEL = 16

T = TypeVar("T")


async def default_connect(host: HostConfig) -> Connection:
    """Start the slave on ``host`` with the transport its config names."""
    from master.hosts.execpipe import open_exec
    from master.hosts.transport import SshHostSpec, open_local, open_ssh

    slave_args = ("--worker-cpus", host.worker_cpus,
                  "--watchdog-min-seconds", f"{host.watchdog_seconds:g}")
    if host.transport == "local":
        python = sys.executable if host.python == "python3" else host.python
        return await open_local(host.name, python=python, slave_args=slave_args)
    if host.transport == "exec":
        return await open_exec(host.name, host.exec, host.python, slave_args=slave_args)
    return await open_ssh(
        SshHostSpec(
            name=host.name,
            address=host.address,
            user=host.user,
            port=host.port,
            python=host.python,
            identity_file=host.identity_file,
            known_hosts=host.known_hosts,
            ssh_config=host.ssh_config,
            slave_args=slave_args,
        )
    )


@contextlib.contextmanager
def _writing_state(folder: Path) -> Iterator[None]:
    """An OSError of the run folder's own files (state.json, a step set aside) as the
    ``OutputError`` of the run's exit status 4."""
    try:
        yield
    except OSError as exc:
        raise OutputError(exc.filename or str(folder / STATE_FILE), exc) from exc


class Run(StepLoop):
    """One run of one test; see the module docstring."""

    def __init__(
        self,
        cfg: TestConfig,
        *,
        view: LiveView | None = None,
        connect: Connector = default_connect,
        clock: Callable[[], int] = time.monotonic_ns,
        resume: Resume | None = None,
    ) -> None:
        self.cfg = cfg
        self.resume = resume
        #: the folder's state.json (``master.results.runstate``), written at every step's end
        self.state: RunState | None = None
        self.view = view or LiveView()
        self.connect = connect
        self.clock = clock
        #: the hosts' sessions and the run's interrupt, spoken to together
        self.fleet = Fleet(clock)
        self.output: RunOutput | None = None
        self.output_failed: OutputError | None = None  # a write that failed outside the run loop
        self.discovered: dict[str, list[Lun]] = {}
        self.selected: dict[str, list[SelectedLun]] = {}
        # the engines each LUN's workloads run on, as their creates answered (host, path)
        self.engines_in_use: dict[tuple[str, str], set[str]] = {}
        self._luns_used: dict[tuple[str, str], list[str]] = {}  # workload names per LUN
        self._luns_csv_stale = False
        #: every workload the slaves hold, by id: where it runs (host, LUN, attributes);
        #: what it runs with is ``settings``'
        self.placed: dict[str, WorkloadInstance] = {}
        #: the settings in force (``master.run.settings``): the one owner of what each runs with
        self.settings = Settings()
        self.rollups: list[RollupSpec] = self._rollup_specs()
        self.step_state: StepState | None = None
        #: the Go confirmations so far (``start_lead_ns``); None until one is complete, and
        #: again after a step that ended before its confirmation came
        self.go_confirmed: GoConfirmed | None = None
        self.step_results: dict[str, dict[str, dict[str, float]]] = {}
        self.curve_types = curve_references(cfg.steps)
        #: every threshold result of the run so far (a resumed run's earlier steps' first)
        self.thresholds_judged: list[Judged] = []
        self.t0_ns = clock()
        self.sub_ns = round(cfg.subinterval_seconds * 1e9)
        self.skew_limit_ns = round(cfg.skew_limit_seconds * 1e9)
        #: the test's ``gather:`` sources (``master.gather``), made after LUN discovery
        self.gathering: Gathering | None = None
        self.verification: RunVerification | None = None
        self.shared_in_run: set[str] = set()
        #: the live metrics for Prometheus (``metrics:``, ``--metrics``) and their server
        self.metrics = (RunMetrics(cfg.test, rollups=None if cfg.metrics.rollups is None
                                   else frozenset(cfg.metrics.rollups))
                        if cfg.metrics is not None else None)
        if self.metrics is not None:
            self.metrics.warn = lambda m, n: self.event("WARNING", m, kind="metrics", step=n)
        self.metrics_server: MetricsServer | None = None
        #: where the hosts that dial the master (``connect_back``) are listened for
        self.listener: ConnectBackListener | None = None
        #: the run's summary.csv header: fixed by the first step that writes it (its gathered
        #: columns), or the existing file's (a resumed run)
        self.run_summary_header: list[str] | None = None
        #: ``ivypy stop --run``: the run ends once the step running (if any) has ended
        self.stop_run_requested = False
        #: the warnings given once, at the run's end, with their worst figure
        self.notices = OnceARun(len(cfg.hosts), self.skew_limit_ns)
        self.step_whole = False

    def _rollup_specs(self) -> list[RollupSpec]:
        specs = {r.type: r for r in self.cfg.rollups}
        out = [specs.get(t) or RollupSpec(type=t, attributes=(t,), builtin=True)
               for t in ("all", "host", "lun", "workload")]
        out += [r for r in self.cfg.rollups if r.type not in ("all", "host", "lun", "workload")]
        return out

    # ------------------------------------------------------------------ events
    def event(self, level: str, message: str, *, host: str = "", kind: str = "",
              step: int | None = None, subinterval: int | None = None,
              console: bool = True) -> None:
        # the run's end (``kind`` run) is the CLI's own last line: not the console's too
        log.log(logging.getLevelName(level), "%s%s", f"[host={host}] " if host else "", message,
                extra={CONSOLE: console and kind != "run"})
        if self.output is not None:
            try:
                self.output.table("events.csv", EVENT_COLUMNS).write({
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "elapsed_s": round((self.clock() - self.t0_ns) / 1e9, 3),
                    "level": level, "host": host, "kind": kind, "step": step,
                    "subinterval": subinterval, "message": message,
                })
            except OutputError as exc:
                # events also come from host readers and callbacks: the run loop raises the
                # first failure at its next subinterval (``_record``)
                if self.output_failed is None:
                    self.output_failed = exc

    def _on_slave_event(self, ev: SlaveEvent) -> None:
        kind = str(ev.context.get("kind", "slave"))
        self.event(ev.level, ev.message, host=ev.host, kind=kind)
        if kind == "layout":  # minutes may go by: the console is told how it goes
            self.view.message(f"ivypy: [{ev.host}] {ev.message}")

    # ------------------------------------------------------------------ the run
    async def execute(self) -> RunResult:
        resume = self.resume
        if resume is None:
            try:
                folder = create_run_folder(self.cfg.output_root, self.cfg.test)
            except OSError as exc:  # before any host is contacted; a folder that cannot be
                # written is exit 4, as one that fails later is (the README's codes)
                where = f" ({exc.filename})" if exc.filename else ""
                return RunResult(EXIT_OUTPUT, None, str(ConfigError(
                    f"cannot create the run folder under {self.cfg.output_root}: "
                    f"{exc.strerror or exc}{where}", key_path="output_root",
                    file=self.cfg.source_file)))
        else:
            folder = resume.folder
        self.output = RunOutput(folder)
        self.output.resuming = resume is not None
        try:
            self._open_folder(folder)
            if self.cfg.verify is not None and resume is not None:
                self.verification = RunVerification.resumed(self.cfg.verify, folder, self.event)
            elif self.cfg.verify is not None:
                self.verification = RunVerification(self.cfg.verify, folder, self.event)
        except OutputError as exc:
            self.output.close()
            return RunResult(EXIT_OUTPUT, folder, str(exc))
        self.view.message(f"ivypy: run folder {folder}")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._interrupt)
        result = RunResult(EXIT_OK, folder)
        crash: BaseException | None = None  # what ended the run that it does not handle
        server = ControlServer(folder, RunControl(self))
        try:
            try:
                await server.start()
            except ControlUnavailable as exc:
                self.event("WARNING", f"{exc}: ivypy status, edit and stop cannot reach this "
                           "run", kind="control")
            await self._serve_metrics()
            await self._listen_for_hosts()
            await self.fleet.or_interrupted(self._start_hosts(), "starting hosts")
            await self.fleet.or_interrupted(self._discover(), "discovering LUNs")
            if self.cfg.gather:
                self.gathering = Gathering(self.cfg.gather, self.output, self.event, self.clock)
                await self.fleet.or_interrupted(self.gathering.configure(), "gather config_command")
                await self.fleet.or_interrupted(self.gathering.preflight(),
                                                "gathering the first samples")
            first = resume.first_step if resume is not None else 0
            stopped_before: int | None = None  # the step ``ivypy stop --run`` did not start
            for number, step in enumerate(self.cfg.steps):
                if self.interrupted.is_set():
                    break
                if number < first:
                    continue
                if self.stop_run_requested:
                    stopped_before = number
                    break
                self.step_whole = False
                valid = await self._run_step(number, step)
                if not valid:
                    result.invalid_steps.append(step.name)
                if not self.interrupted.is_set() or self.step_whole:
                    self._step_complete(number, step)
            if self.interrupted.is_set():
                result.exit_code, result.message = EXIT_INTERRUPTED, "interrupted"
            elif stopped_before is not None:
                result.exit_code = EXIT_INTERRUPTED
                result.message = (
                    f"stopped by ivypy stop --run before step {stopped_before} "
                    f"{self.cfg.steps[stopped_before].name}; continue it with: ivypy run "
                    f"--resume {folder}")
            elif result.invalid_steps:
                result.exit_code = EXIT_INVALID
                result.message = f"invalid steps: {', '.join(result.invalid_steps)}"
            self._judge_thresholds(result)
            self._judge_verification(result)
        except (ConfigError, PreflightError) as exc:
            result.exit_code, result.message = EXIT_CONFIG, str(exc)
        except Interrupted as exc:
            result.exit_code, result.message = EXIT_INTERRUPTED, str(exc)
        except StepFailed as exc:
            if self.interrupted.is_set():  # a host lost while the run stopped for the signal
                result.exit_code, result.message = EXIT_INTERRUPTED, f"interrupted; {exc}"
            else:
                result.exit_code, result.message = exc.exit_code, str(exc)
        except HostError as exc:
            result.exit_code, result.message = EXIT_HOST, str(exc)
        except ProtocolError as exc:
            result.exit_code, result.message = EXIT_HOST, str(exc)
        except OutputError as exc:
            result.exit_code = EXIT_OUTPUT
            result.message = f"{exc}; all hosts stopped, the rows written so far are kept"
        except BaseException as exc:
            # a bug (or the run's task cancelled): the run is failed, not complete, and can be
            # resumed; the exception goes on to the caller (the CLI prints it)
            crash = exc
            raise
        finally:
            for notice in self.notices.warnings():
                with contextlib.suppress(OutputError):
                    self.event("WARNING", notice.message, host=notice.host, kind=notice.kind,
                               step=notice.step, subinterval=notice.subinterval)
            if crash is not None:
                if isinstance(crash, Exception) and not isinstance(crash, IvyError):
                    # a bug: its traceback to run.log
                    log.info("the run ended on an exception", exc_info=crash)
                with contextlib.suppress(OutputError):
                    self.event("ERROR", f"the run failed: {_crash_text(crash)}", kind="run")
            elif result.message:
                # the folder may be what failed (disk full): the message still reaches stderr
                with contextlib.suppress(OutputError):
                    self.event("ERROR" if result.exit_code else "INFO", result.message,
                               kind="run")
            if crash is None and result.exit_code in (EXIT_HOST, EXIT_INTERRUPTED):
                self._judge_verification(result)  # damage found before the run stopped
            if self.verification is not None:
                with contextlib.suppress(OutputError):
                    self.verification.close()
            self._final_state(result, crash)
            # every slave's I/O ends before anything else is done (summary.json and the
            # report take a while on a large run)
            await server.close()
            if self.metrics_server is not None:
                await self.metrics_server.close()
            if self.listener is not None:
                await self.listener.close()
            await self.fleet.close_all(INTERRUPT_WAIT_S / 2 if self.interrupted.is_set() else 2.0)
            if self.gathering is not None:
                await self.gathering.close()
            self._summary_json()
            report_after_run(self.output.folder)  # logs a failure, never raises
            # a Ctrl-C while the hosts closed or the files above were written (synchronously:
            # its handler waits for the loop) still ends the run as interrupted, the files
            # whole
            for _ in range(3):
                await asyncio.sleep(0)
            if (self.interrupted.is_set() and crash is None
                    and result.exit_code in (EXIT_OK, EXIT_INVALID)):
                result.exit_code = EXIT_INTERRUPTED
                result.message = "; ".join(x for x in (
                    "interrupted at the run's end: every step ran, and summary.json and "
                    "report.html are whole", result.message) if x)
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
            self.view.run_finished()  # the table over every step summarised
            self.view.close()
            try:
                self.output.close()
            except OutputError as exc:  # the last buffered rows
                if result.exit_code == EXIT_OK:
                    result.exit_code, result.message = EXIT_OUTPUT, str(exc)
        return result

    # ------------------------------------------------------------------ the folder's state
    def _open_folder(self, folder: Path) -> None:
        """run.log, test.yaml, resolved.json and state.json of a new run; for a resumed one,
        its cut-off step set aside, state.json marked running again and the resume told."""
        assert self.output is not None
        resume = self.resume
        with _writing_state(folder):
            self.output.start_run_log()
            if resume is None:
                self.output.write_text("test.yaml", self.cfg.source_text)
                self.output.write_json("resolved.json", resolved_dict(self.cfg))
                self.state = new_state(self.cfg.test, len(self.cfg.steps), self.cfg.source_text,
                                       __version__)
                write_state(folder, self.state)
                return
            moved = set_aside_incomplete_steps(
                folder, [RunOutput.step_dir(n, st.name) for n, st in enumerate(self.cfg.steps)
                         if n >= resume.first_step], resume.first_step)
            state = self.state = resume.state
            was = state.state if state.state != "running" else "dead (its master gone)"
            state.resumes.append(now_text())
            state.state, state.reason, state.exit_code = "running", "", None
            state.pid, state.controller = os.getpid(), socket.gethostname()
            self.step_results = step_results_from(state.step_results)
            self.thresholds_judged = thresholds_judged(folder)
            write_state(folder, state)
        step = self.cfg.steps[resume.first_step]
        self.event("INFO", f"resumed at step {resume.first_step} {step.name} of "
                   f"{len(self.cfg.steps)} (the run was {was}; last complete step: "
                   f"{state.last_complete_step}"
                   + (f"; set aside: {', '.join(moved)}" if moved else "") + ")",
                   kind="resume", step=resume.first_step)

    def _warn_file_luns(self) -> None:
        """A file LUN whose numbers would not be the device's is a warning naming host and
        file: left sparse by ``layout: none``, an existing file with holes (reads there cost
        no I/O), or a file on tmpfs or ramfs (memory)."""
        for host, luns in self.selected.items():
            for sl in luns:
                info = sl.lun.info
                if info.get("kind") != "file":
                    continue
                where = f"file LUN {sl.lun.path}"
                # ivypy's own file with holes: left sparse when a run made it (this one, or
                # an earlier one whose file carries ivypy's mark), and not written whole since
                if info.get("created") and info.get("has_holes") and all(
                        self.cfg.luns[i].layout == "none" for i in sl.selectors):
                    self.event("WARNING", f"{where} was created sparse (layout: none): reads "
                               "of its unwritten ranges return zeros without any I/O, so its "
                               "read numbers are not the device's", host=host, kind="lun")
                elif info.get("has_holes"):
                    self.event("WARNING", f"{where} has unwritten ranges (holes, found by "
                               "SEEK_HOLE): reads there return zeros without any I/O, so its "
                               "read numbers are not the device's; write it whole first (or "
                               "let ivypy create it: layout: random)", host=host, kind="lun")
                fs_type = str(info.get("fs_type") or "")
                if fs_type in ("tmpfs", "ramfs"):
                    self.event("WARNING", f"{where} is on {fs_type}: memory, not a storage "
                               "device", host=host, kind="lun")

    def _step_complete(self, number: int, step: StepConfig) -> None:
        """State.json: step ``number`` is complete (its summary is written)."""
        assert self.state is not None and self.output is not None
        self.state.last_complete_step, self.state.last_complete_step_name = number, step.name
        self.state.step_results = self.step_results
        with _writing_state(self.output.folder):
            write_state(self.output.folder, self.state)

    def _judge_verification(self, result: RunResult) -> None:
        """Damaged blocks found make the run exit 5 (before a step's invalid verdict, a host
        lost, an interrupt: what the data came to is the run's first news), its numbers in
        the message."""
        v = self.verification
        if v is None or not v.found:
            return
        s = v.summary()
        classes = ", ".join(f"{s[name]} {name}" for name in pv.CLASSES if s[name])
        text = (f"data verification found {v.found} damaged block(s) ({classes}) of "
                f"{s['blocks_checked']} checked: see events.csv (kind verify) and "
                f"{self.output.folder if self.output else ''}/verify/damaged/")
        result.message = "; ".join(x for x in (text, result.message) if x)
        result.exit_code = EXIT_DAMAGED

    def _judge_thresholds(self, result: RunResult) -> None:
        """The run's thresholds that did not hold (failed, or untold: no value to judge) make
        a run that would have exited 0 exit 1 (``EXIT_INVALID``), each named in the message;
        every result goes to the end table."""
        if not self.cfg.thresholds:
            return
        judged = self.thresholds_judged
        bad = [j for j in judged if not j.holds]
        self.view.thresholds([j.line for j in worst_first(judged)],
                             len(judged) - len(bad))
        if not bad or result.exit_code not in (EXIT_OK, EXIT_INVALID):
            return
        said = "; ".join(j.line for j in bad[:5]) + (
            f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        text = f"{len(bad)} of {len(judged)} thresholds did not hold: {said}"
        result.exit_code = EXIT_INVALID
        result.message = "; ".join(x for x in (result.message, text) if x)

    def _final_state(self, result: RunResult, crash: BaseException | None = None) -> None:
        """State.json at the end: complete, failed or interrupted, with the reason. A run
        that ``crash`` ended is failed, the exception its reason, with no exit status of its
        own (the caller gets the exception)."""
        if self.state is None or self.output is None:
            return
        code = result.exit_code
        if crash is not None:
            self.state.state, self.state.exit_code = "failed", None
            self.state.reason = _crash_text(crash)
        else:
            self.state.state = ("interrupted" if code == EXIT_INTERRUPTED
                                else "complete" if code in (EXIT_OK, EXIT_INVALID) else "failed")
            self.state.exit_code, self.state.reason = code, result.message
        try:
            write_state(self.output.folder, self.state)
        except OSError as exc:  # the folder itself may be what failed
            log.warning("cannot write %s: %s", self.output.folder / STATE_FILE, exc)

    def _summary_json(self) -> None:
        """summary.json from the folder as the run leaves it; a failure to write it is a
        warning (run.log, events.csv), never the run's error."""
        if self.output is None:
            return
        try:
            write_summary_json(self.output.folder)
        except Exception as exc:  # the run's own outcome stands whatever happens here
            if not isinstance(exc, OutputError):  # a bug: its traceback to run.log only
                log.info("summary.json not written", exc_info=exc)
            with contextlib.suppress(OutputError):
                self.event("WARNING", f"summary.json not written: {exc}", kind="output")

    async def _serve_metrics(self) -> None:
        """``/metrics`` served where the test says, before any host is reached: an address
        that cannot be listened on, or a token file that cannot be read, is a config error."""
        m = self.cfg.metrics
        if m is None or self.metrics is None:
            return
        try:
            token = read_token(m.token_file) if m.token_file else None
        except ValueError as exc:
            raise ConfigError(str(exc), key_path="metrics.token_file",
                              file=self.cfg.source_file) from None
        self.metrics_server = MetricsServer(self.metrics, m.host, m.port, token)
        try:
            await self.metrics_server.start()
        except MetricsUnavailable as exc:
            raise ConfigError(str(exc), key_path="metrics.listen",
                              file=self.cfg.source_file) from None
        where = f"http://{m.host or '0.0.0.0'}:{self.metrics_server.port}/metrics"
        self.event("INFO", f"metrics: serving {where}"
                   + (" (bearer token required)" if token else ""), kind="metrics")
        self.view.message(f"ivypy: metrics at {where}")

    async def _listen_for_hosts(self) -> None:
        """The listener for the hosts that dial the master (``connect_back``), before any
        host is reached; a token file that cannot be read, or an address that cannot be
        listened on, is a config error."""
        cb = self.cfg.connect_back
        names = [h.name for h in self.cfg.hosts if h.transport == "connect_back"]
        if cb is None or not names:
            return
        try:
            token = read_token(cb.token_file, "connect_back")
        except ValueError as exc:
            raise ConfigError(str(exc),
                              key_path="connect_back.token_file",
                              file=self.cfg.source_file) from None
        self.listener = ConnectBackListener(
            cb.host, cb.port, token, names,
            lambda message: self.event("WARNING", message, kind="connect_back"))
        try:
            await self.listener.start()
        except OSError as exc:
            raise ConfigError(f"connect_back: cannot listen on {cb.host}:{cb.port}: "
                              f"{exc.strerror or exc}", key_path="connect_back.listen",
                              file=self.cfg.source_file) from None
        self.event("INFO", f"connect_back: listening on {cb.host or '0.0.0.0'}:"
                   f"{self.listener.port} for {', '.join(names)} (waiting up to "
                   f"{cb.timeout_s:g} s for each)", kind="connect_back")

    def _interrupt(self) -> None:
        if not self.interrupted.is_set():
            self.view.message("ivypy: interrupted: stopping all hosts (output is kept)")
            self.fleet.interrupt()

    async def _start_hosts(self) -> None:
        """Start every host's slave, ``CONNECT_PARALLEL`` connecting at a time. Once every
        host is connected (its slave starting) the rollup kernels load
        (``warmup.warm_up_kernels``); the handshakes go on meanwhile, and the clock pings wait
        for it (it would lengthen their round trips), then go ``CLOCK_PARALLEL`` hosts at a
        time."""
        from master.run import warmup

        left = len(self.cfg.hosts)
        all_connected, warmed = asyncio.Event(), asyncio.Event()
        connecting = asyncio.Semaphore(CONNECT_PARALLEL)
        pinging = asyncio.Semaphore(CLOCK_PARALLEL)

        async def warm_up() -> None:
            await all_connected.wait()
            try:
                await warmup.warm_up_kernels(self.view)
            finally:  # a failure is the run's, not the hosts'
                warmed.set()

        warm = asyncio.ensure_future(warm_up())

        async def start(host: HostConfig) -> HostSession:
            nonlocal left
            conn: Connection
            try:
                if host.transport == "connect_back":
                    assert self.listener is not None and self.cfg.connect_back is not None
                    conn = await self.listener.wait_for(host.name,
                                                        self.cfg.connect_back.timeout_s)
                else:
                    async with connecting:
                        conn = await self.connect(host)
            finally:
                left -= 1
                if not left:
                    all_connected.set()
            hs = HostSession(conn, host.name, clock=self.clock, on_event=self._on_slave_event,
                             watchdog_s=host.watchdog_seconds)
            self.sessions[host.name] = hs
            await hs.start(uncertainty_limit_ns=self.skew_limit_ns, before_pings=warmed,
                           ping_slots=pinging)
            return hs

        try:
            results = await asyncio.gather(*(start(h) for h in self.cfg.hosts),
                                           return_exceptions=True)
            await warm
        finally:
            warm.cancel()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for e in errors:
                if not isinstance(e, IvyError):
                    log.error("starting a host failed", exc_info=e)
            raise StepFailed("; ".join(str(e) for e in errors), EXIT_HOST)
        self.fleet.sessions = {h.name: self.sessions[h.name]  # in the test's order
                               for h in self.cfg.hosts}
        assert self.output is not None
        for name, hs in self.sessions.items():
            hello = hs.hello
            assert hello is not None
            host = self.cfg.host(name)
            self.output.table("hosts.csv", HOST_COLUMNS).write({
                "host": name, "address": host.address, "transport": host.transport,
                "hostname": hello.hostname, "kernel": hello.kernel,
                "python_version": hello.python_version, "numpy_version": hello.numpy_version,
                "ivypy_version": hello.ivypy_version, "cores": hello.cores,
                "slave_pid": hello.pid, "clock_offset_ns": hs.offset_ns,
                "rtt_us": round(hs.rtt_ns / 1e3, 3),
                "offset_uncertainty_us": round(hs.offset_uncertainty_ns / 1e3, 3),
                "clock_samples": len(hs.clock_samples), "io_loop": hello.io_loop,
                # the same under its name before protocol 9, for older readers (one release)
                "paced_loop": hello.io_loop,
            })
            self.event("INFO", f"slave up: {hello.hostname} python {hello.python_version}, "
                       f"{hello.cores} cores, clock offset {hs.offset_ns} ns, "
                       f"RTT {hs.rtt_ns / 1e3:.1f} us", host=name, kind="host")
            if hs.offset_uncertainty_ns > self.skew_limit_ns:
                self.event("WARNING", "clock offset known only to within "
                           f"±{hs.offset_uncertainty_ns / 1e6:.3f} ms (half the best round trip "
                           f"of {len(hs.clock_samples)} pings), more than skew_limit_seconds "
                           f"({self.skew_limit_ns / 1e6:g} ms): this host's boundary times in "
                           "interlock.csv may be off by that much", host=name, kind="clock")
            if not hello.io_loop.startswith("compiled"):
                self.event("WARNING", "no compiled loop here, so no libaio or io_uring: their "
                           "LUNs are refused unless allow_engine_fallback runs them on the "
                           "thread pool, in the Python loop, its latencies less precise at "
                           f"high rates ({hello.io_loop.removeprefix('python: ')})",
                           host=name, kind="host")

    async def _discover(self) -> None:
        state = self.state
        made = {(c.host, os.path.normpath(c.path)): c.file_id
                for c in state.created_files} if state else {}

        async def one(name: str, hs: HostSession) -> None:
            requests = file_requests(self.cfg, name)
            for req in requests:  # a resumed run's own files are still its own
                file_id = made.get((name, os.path.normpath(str(req["path"]))))
                if file_id:
                    req["created_as"] = file_id
            try:
                raw = await hs.discover(requests, device_globs(self.cfg, name))
            except LunRefusedError as exc:
                raise self._file_lun_error(exc) from None
            self.discovered[name] = [Lun.from_wire(name, e) for e in raw]

        await asyncio.gather(*(one(n, hs) for n, hs in self.sessions.items()))
        if state is not None and self.output is not None:
            for host, luns in self.discovered.items():
                for lun in luns:
                    file_id = str(lun.info.get("file_id") or "")
                    if lun.info.get("created") and file_id and (
                            host, os.path.normpath(lun.path)) not in made:
                        state.created_files.append(CreatedFile(host, lun.path, file_id))
            with _writing_state(self.output.folder):
                write_state(self.output.folder, state)
        self.selected = select_luns(self.cfg, self.discovered)
        self.shared_in_run = shared_identities(self.selected)
        self._warn_file_luns()
        used: dict[tuple[str, str], list[str]] = {}
        for step in self.cfg.steps:
            instances = expand_step(step, self.selected, self.cfg.source_file,
                                    MAP_BLOCK_BYTES if self.cfg.verify is not None else 512)
            # an edit_rollup that fits no workload of its step, or a rollup instance that
            # would stand for two, fails now, before any I/O, rather than when its step comes
            self._rollup_edits(step, instances)
            check_rollup_keys(self.rollups, instances, file=self.cfg.source_file)
            clash = None if self.cfg.verify is None else shared_overlap(instances)
            if clash:  # two hosts on one verified LUN's blocks at once: before any I/O
                raise ConfigError(f"step {step.name}: {clash}",
                                  key_path=f"steps[{step.source_index}].workloads",
                                  file=self.cfg.source_file, line=step.line or None)
            for inst in instances:
                used.setdefault((inst.host, inst.lun.lun.path), [])
                if inst.name not in used[(inst.host, inst.lun.lun.path)]:
                    used[(inst.host, inst.lun.lun.path)].append(inst.name)
        self._luns_used = used
        self._write_luns_csv()

    def _file_lun_error(self, exc: LunRefusedError) -> ConfigError:
        """A host's refusal of a file LUN, as the error of the ``luns:`` entry naming it."""
        for i, sel in enumerate(self.cfg.luns):
            if sel.kind == "file" and sel.file == exc.lun:
                return ConfigError(str(exc), key_path=f"luns[{i}].file",
                                   file=self.cfg.source_file, line=sel.line or None)
        return ConfigError(str(exc), key_path="luns", file=self.cfg.source_file)

    def _write_luns_csv(self) -> None:
        """luns.csv: every discovered LUN, whether the test uses it, and its attributes; for a
        LUN in use, ``engine`` is the engine its workloads run on (as their creates answered,
        ``a/b`` when they differ), else the one it is to run on. Written whole, in place of
        the last one, when that changes."""
        assert self.output is not None
        attr_keys = sorted({k for luns in self.discovered.values() for lun in luns
                            for k in lun.attributes} - {"lun"})
        rows: list[dict[str, Any]] = []
        for host, luns in self.discovered.items():
            chosen = {s.lun.path: s for s in self.selected.get(host, [])}
            for lun in luns:
                sel = chosen.get(lun.path)
                attrs = dict((sel.lun if sel is not None else lun).attributes)
                running = self.engines_in_use.get((host, lun.path))
                if running:
                    attrs["engine"] = "/".join(sorted(running))
                ident = str(lun.info.get("identity") or "")
                rows.append({"host": host, "lun": lun.path, "selected": sel is not None,
                             "allow_write": bool(sel and sel.allow_write),
                             "shared": bool(sel and (sel.shared or ident in self.shared_in_run)),
                             "used_by": " ".join(self._luns_used.get((host, lun.path), [])),
                             "in_use": "; ".join(lun.in_use),
                             **{k: attrs.get(k, "") for k in attr_keys}})
        self.output.replace_table("luns.csv", ["host", "lun", "selected", "allow_write",
                                               "shared", "used_by", "in_use", *attr_keys], rows)

def _crash_text(exc: BaseException) -> str:
    """An exception the run does not handle, as state.json's reason: an ``IvyError`` as it
    reads; another exception is a bug, named by its type (its traceback is in run.log); a
    ``BaseException`` (the run's task cancelled) is named."""
    text = (str(exc).splitlines() or [""])[0]
    if isinstance(exc, IvyError):
        return text or type(exc).__name__
    if not isinstance(exc, Exception):
        return f"the run was ended by {type(exc).__name__}"
    return (f"internal error: {type(exc).__name__}" + (f": {text}" if text else "")
            + " (a bug; its traceback is in run.log)")


def run_test(cfg: TestConfig, view: LiveView | None = None,
             connect: Connector = default_connect, resume: Resume | None = None) -> RunResult:
    """Run a validated test to its end (blocking); ``resume``: continue that run."""
    return asyncio.run(Run(cfg, view=view, connect=connect, resume=resume).execute())
