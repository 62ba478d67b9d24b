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
import collections
import contextlib
import csv
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from master.analysis.rollup import Sample
from master.analysis.stepcontrol import Decision, StepControl
from master.analysis.verdicts import ended_early
from master.config import HostConfig, RollupSpec, StepConfig, TestConfig
from master.config.catalog import DEVICE_METRICS
from master.config.resolved import resolved_dict
from master.gather.gathering import Gathering
from master.hosts.session import HostSession, LunRefusedError, SlaveEvent, window_timeout_s
from master.live.control_socket import ControlServer, ControlUnavailable
from master.live.editparse import EditChanges, EditRefused, unknown_instance
from master.live.rows import default_live_rollup, dfc_lines
from master.live.view import LiveView
from master.results.output import RunOutput, create_run_folder, safe_name
from master.results.report.build import report_after_run
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
from master.results.summaryjson import write_summary_json
from master.run.recorder import SUMMARY_COLUMNS, HostResult, Recorded, StepRecorder
from master.run.settings import Settings, Source, split_total
from master.run.workloads import (
    Lun,
    SelectedLun,
    WorkloadInstance,
    apply_rollup_edits,
    assign_total,
    blocksize_misfit,
    check_rollup_keys,
    device_globs,
    expand_step,
    file_requests,
    rollup_key,
    select_luns,
)
from protocol import credit
from protocol.errors import (
    ConfigError,
    HostError,
    IvyError,
    OutputError,
    PreflightError,
    ProtocolError,
)
from protocol.messages import (
    MAX_WORKLOADS_PER_HOST,
    Ack,
    Error,
    SubintervalResult,
)
from protocol.params import WorkloadParams, changed_fields
from protocol.version import __version__

log = logging.getLogger(__name__)

EXIT_OK, EXIT_INVALID, EXIT_CONFIG, EXIT_HOST, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_OUTPUT = 4  # the run folder could not be written (disk full, read-only ...)
#: How long before its start a step's Go is sent while nothing says the hosts read one sooner:
#: a step of more workloads than ``SMALL_GO_WORKLOADS`` and than any step whose Go was
#: confirmed (a Go's rollup plan, which a slave reads before it passes the start on to its
#: workers, grows with the workloads). ``start_lead_ns`` gives every step's lead.
START_LEAD_NS = 1_000_000_000
#: The least lead of a step whose Go the hosts are known to read in time.
MIN_START_LEAD_NS = 250_000_000
#: A Go of this many workloads is read in time even before any Go was confirmed: on a loaded
#: 2-core test machine a Go of 400 workloads was confirmed 21 ms after it was sent, one of a
#: single workload in 3-8 ms.
SMALL_GO_WORKLOADS = 500
#: A step's lead is at least this many times the run's longest Go confirmation.
CONFIRM_MARGIN = 4
STOP_WAIT_S = 5.0
#: Once interrupted (Ctrl-C, SIGTERM), the longest the run waits for anything of the hosts'
#: (a result, the end of the step, a start-up stage): the run exits within 3 s of the signal.
INTERRUPT_WAIT_S = 1.0
#: A warm-up of the rollup kernels longer than this is a compile, which the console names.
KERNELS_NOTICE_S = 3.0

Connector = Callable[[HostConfig], Awaitable[Any]]
T = TypeVar("T")


@dataclass(frozen=True)
class GoConfirmed:
    """What the run's steps so far say of its hosts reading a Go: the most workloads a step
    whose Go every host confirmed had, and the longest time from sending a step's Go to the
    last host's ``Pong`` to a ``Ping`` sent behind it."""

    workloads: int
    longest_ns: int


def start_lead_ns(rtt_ns: int, workloads: int, confirmed: GoConfirmed | None,
                  gather_lead_ns: int = 0) -> int:
    """How long after sending its Go a step of ``workloads`` starts: every slave must have read
    the Go and passed the start on to its workers by then (a late worker's first I/O would
    be late, and a paced one's catch up at once). ``MIN_START_LEAD_NS`` for a small Go or one
    of no more workloads than a confirmed one, ``START_LEAD_NS`` for another; at least
    ``CONFIRM_MARGIN`` times the run's longest confirmation, 20 round trips to the farthest
    host (``rtt_ns``), and what a ``gather:`` source needs before the start for its
    counters' base (``gather_lead_ns``)."""
    known = confirmed is not None and workloads <= confirmed.workloads
    lead = MIN_START_LEAD_NS if known or workloads <= SMALL_GO_WORKLOADS else START_LEAD_NS
    longest = confirmed.longest_ns if confirmed is not None else 0
    return max(lead, CONFIRM_MARGIN * longest, 20 * rtt_ns, gather_lead_ns)


async def default_connect(host: HostConfig) -> Any:
    """Start the slave on ``host`` with the transport its config names."""
    from master.hosts.transport import SshHostSpec, open_local, open_ssh

    slave_args = ("--worker-cpus", host.worker_cpus,
                  "--watchdog-min-seconds", f"{host.watchdog_seconds:g}")
    if host.transport == "local":
        python = sys.executable if host.python == "python3" else host.python
        return await open_local(host.name, python=python, slave_args=slave_args)
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


def _placement(info: dict[str, Any] | None) -> str:
    """`` (engine libaio, worker 0 on CPU 1)`` from a create's ``Ack.info``, or ``""``."""
    if not info:
        return ""
    parts = [f"engine {info['engine']}"] if info.get("engine") else []
    if info.get("worker") is not None:
        cpu = info.get("cpu")
        parts.append(f"worker {info['worker']}"
                     + (f" on CPU {cpu}" if cpu is not None else " (not pinned)"))
    return f" ({', '.join(parts)})" if parts else ""


@dataclass
class RunResult:
    exit_code: int
    folder: Path | None
    message: str = ""
    invalid_steps: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _writing_state(folder: Path) -> Iterator[None]:
    """An OSError of the run folder's own files (state.json, a step set aside) as the
    ``OutputError`` of the run's exit status 4."""
    try:
        yield
    except OSError as exc:
        raise OutputError(exc.filename or str(folder / STATE_FILE), exc) from exc


class _Abandoned(Exception):
    """The subinterval awaited is given up: the run was interrupted."""


class Interrupted(IvyError):
    """SIGINT or SIGTERM came during a stage that would not end by itself soon (connecting,
    the handshake, discovery, creating workloads): it was abandoned."""


class StepFailed(IvyError):
    """A step cannot go on (a host failed or was late); carries the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_HOST) -> None:
        self.exit_code = exit_code
        super().__init__(message)


@dataclass
class _StepState:
    number: int
    config: StepConfig
    recorder: StepRecorder
    control: StepControl
    start_ns: int = 0
    last_recorded: int = -1
    last_record: Recorded | None = None
    forced_last: int | None = None
    #: hosts whose boundary skew bound exceeded the limit in this step (warned once each)
    skew_warned: set[str] = field(default_factory=set)
    #: the workloads of each DFC focus instance (a step with ``dfc:``)
    dfc_members: dict[str, list[str]] = field(default_factory=dict)
    #: held while DFC's moves or an operator's edit are sent and taken into the settings:
    #: an edit acknowledged first holds its instances' moves back; one sent after a move wins
    edits: asyncio.Lock = field(default_factory=asyncio.Lock)


class Run:
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
        self.sessions: dict[str, HostSession] = {}
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
        self.interrupted = asyncio.Event()
        self.step_state: _StepState | None = None
        #: the Go confirmations so far (``start_lead_ns``); None until one is complete, and
        #: again after a step that ended before its confirmation came
        self.go_confirmed: GoConfirmed | None = None
        self.step_results: dict[str, dict[str, dict[str, float]]] = {}
        self.t0_ns = clock()
        self.sub_ns = round(cfg.subinterval_seconds * 1e9)
        self.skew_limit_ns = round(cfg.skew_limit_seconds * 1e9)
        #: the test's ``gather:`` sources (``master.gather``), made after LUN discovery
        self.gathering: Gathering | None = None
        #: the run's summary.csv header: fixed by the first step that writes it (its gathered
        #: columns), or the existing file's (a resumed run)
        self.run_summary_header: list[str] | None = None

    def _rollup_specs(self) -> list[RollupSpec]:
        specs = {r.type: r for r in self.cfg.rollups}
        out = [specs.get(t) or RollupSpec(type=t, attributes=(t,), builtin=True)
               for t in ("all", "host", "lun", "workload")]
        out += [r for r in self.cfg.rollups if r.type not in ("all", "host", "lun", "workload")]
        return out

    # ------------------------------------------------------------------ events
    def event(self, level: str, message: str, *, host: str = "", kind: str = "",
              step: int | None = None, subinterval: int | None = None) -> None:
        log.log(logging.getLevelName(level), "%s%s", f"[host={host}] " if host else "", message)
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
            except OSError as exc:  # before any host is contacted
                where = f" ({exc.filename})" if exc.filename else ""
                return RunResult(EXIT_CONFIG, None, str(ConfigError(
                    f"cannot create the run folder under {self.cfg.output_root}: "
                    f"{exc.strerror or exc}{where}", key_path="output_root",
                    file=self.cfg.source_file)))
        else:
            folder = resume.folder
        self.output = RunOutput(folder)
        self.output.resuming = resume is not None
        try:
            self._open_folder(folder)
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
            await self._or_interrupted(self._start_hosts(), "starting hosts")
            await self._or_interrupted(self._discover(), "discovering LUNs")
            if self.cfg.gather:
                self.gathering = Gathering(self.cfg.gather, self.output, self.event, self.clock)
                await self._or_interrupted(self.gathering.configure(), "gather config_command")
            first = resume.first_step if resume is not None else 0
            for number, step in enumerate(self.cfg.steps):
                if self.interrupted.is_set():
                    break
                if number < first:
                    continue
                valid = await self._run_step(number, step)
                if not valid:
                    result.invalid_steps.append(step.name)
                if not self.interrupted.is_set():
                    self._step_complete(number, step)
            if self.interrupted.is_set():
                result.exit_code, result.message = EXIT_INTERRUPTED, "interrupted"
            elif result.invalid_steps:
                result.exit_code = EXIT_INVALID
                result.message = f"invalid steps: {', '.join(result.invalid_steps)}"
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
            self._final_state(result, crash)
            # every slave's I/O ends before anything else is done (summary.json and the
            # report take a while on a large run)
            await server.close()
            await self._close_all(INTERRUPT_WAIT_S / 2 if self.interrupted.is_set() else 2.0)
            if self.gathering is not None:
                await self.gathering.close()
            self._summary_json()
            report_after_run(self.output.folder)  # logs a failure, never raises
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

    async def _warm_up_kernels(self) -> None:
        """Load (or, first after an install, compile) the rollup kernels while the hosts
        start, so the first subinterval is not late. Where that takes more than
        ``KERNELS_NOTICE_S`` (a compile: over ten seconds on a small VM, against under one to
        load), the console says what the run waits for."""
        from master.analysis import kernels
        from master.run.heap import keep_freed_memory

        keep_freed_memory()
        job = asyncio.ensure_future(asyncio.to_thread(kernels.warm_up))
        try:
            done, _ = await asyncio.wait({job}, timeout=KERNELS_NOTICE_S)
            if not done:
                self.view.message("ivypy: loading the master's rollup kernels (compiled once "
                                  "after an install, then cached) ...")
            took = await job
        finally:
            job.cancel()  # the run stopped meanwhile: the thread ends on its own
        if took > 1.0:
            log.info("rollup kernels compiled in %.1f s (cached for later runs)", took)

    def _interrupt(self) -> None:
        if not self.interrupted.is_set():
            self.view.message("ivypy: interrupted: stopping all hosts (output is kept)")
            self.interrupted.set()

    async def _start_hosts(self) -> None:
        """Start every host's slave at once. Once every host is connected (its slave starting)
        the rollup kernels load (``_warm_up_kernels``: most of a second, the GIL held, which
        would hold up starting the slaves); the handshakes go on meanwhile, and every host's
        clock pings wait for it (it would lengthen their round trips)."""
        left = len(self.cfg.hosts)
        all_connected, warmed = asyncio.Event(), asyncio.Event()

        async def warm_up() -> None:
            await all_connected.wait()
            try:
                await self._warm_up_kernels()
            finally:  # a failure is the run's, not the hosts'
                warmed.set()

        warm = asyncio.ensure_future(warm_up())

        async def start(host: HostConfig) -> HostSession:
            nonlocal left
            try:
                conn = await self.connect(host)
            finally:
                left -= 1
                if not left:
                    all_connected.set()
            hs = HostSession(conn, host.name, clock=self.clock, on_event=self._on_slave_event)
            self.sessions[host.name] = hs
            await hs.start(uncertainty_limit_ns=self.skew_limit_ns, before_pings=warmed)
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
        self.sessions = {h.name: self.sessions[h.name] for h in self.cfg.hosts}  # config order
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
                "clock_samples": len(hs.clock_samples), "paced_loop": hello.paced_loop,
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
            if not hello.paced_loop.startswith("compiled"):
                self.event("WARNING", "no compiled loop here, so no libaio or io_uring: their "
                           "LUNs are refused unless allow_engine_fallback runs them on the "
                           "thread pool, in the Python loop, its latencies less precise at "
                           f"high rates ({hello.paced_loop.removeprefix('python: ')})",
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
        self._warn_file_luns()
        used: dict[tuple[str, str], list[str]] = {}
        for step in self.cfg.steps:
            instances = expand_step(step, self.selected, self.cfg.source_file)
            # an edit_rollup that fits no workload of its step, or a rollup instance that
            # would stand for two, fails now, before any I/O, rather than when its step comes
            self._rollup_edits(step, instances)
            check_rollup_keys(self.rollups, instances, file=self.cfg.source_file)
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
                rows.append({"host": host, "lun": lun.path, "selected": sel is not None,
                             "allow_write": bool(sel and sel.allow_write),
                             "used_by": " ".join(self._luns_used.get((host, lun.path), [])),
                             "in_use": "; ".join(lun.in_use),
                             **{k: attrs.get(k, "") for k in attr_keys}})
        self.output.replace_table("luns.csv", ["host", "lun", "selected", "allow_write",
                                               "used_by", "in_use", *attr_keys], rows)

    # ------------------------------------------------------------------ workloads
    async def _apply_workloads(self, number: int, instances: list[WorkloadInstance]) -> None:
        """Create, edit and delete workloads so that the slaves run ``instances``: each is
        compared with what its slave holds (``Settings.latest``, once every edit the slaves
        took holds: ``Settings.settle``)."""
        self.settings.settle()
        want = {i.id: i for i in instances}
        jobs: list[tuple[str, Awaitable[Any], WorkloadInstance | None, str]] = []
        for wid, old in list(self.placed.items()):
            if wid not in want:
                jobs.append(("delete", self.sessions[old.host].delete(wid), None, wid))
        for wid, inst in want.items():
            hs = self.sessions[inst.host]
            if wid not in self.placed:
                jobs.append(("create", self._create(hs, inst), inst, wid))
                continue
            held = self.settings.latest(wid)
            if held != inst.params:
                if inst.params.writes and not held.writes:
                    # a workload that starts writing goes through the write preflight again
                    jobs.append(("delete", hs.delete(wid), None, wid))
                    jobs.append(("create", self._create(hs, inst), inst, wid))
                    continue
                jobs.append(("edit", hs.edit(wid, changed_fields(held, inst.params)), inst, wid))
            else:
                self.placed[wid] = inst
        replies = [await j[1] for j in jobs]  # in order: a delete before its re-create
        refused: list[Error] = []
        for (action, _, done, wid), reply in zip(jobs, replies, strict=True):
            if isinstance(reply, Error):
                refused.append(reply)
                continue
            if action == "delete":
                self.placed.pop(wid, None)
                self.settings.dropped(wid)
            else:
                assert done is not None
                self.placed[wid] = done
                if action == "edit":
                    self.settings.taken(wid, done.params, reply.effective_subinterval, "step")
                else:
                    self.settings.placed(wid, done.params)
                    self.event("INFO", f"workload {wid} created{_placement(reply.info)}",
                               host=done.host, kind="workload", step=number)
                    self._created(number, done, reply.info)
        if self._luns_csv_stale:
            self._write_luns_csv()
            self._luns_csv_stale = False
        if refused:
            pre = [r for r in refused if r.kind == "preflight"]
            text = "; ".join(r.message for r in (pre or refused))
            raise PreflightError(text) if pre else ConfigError(text)

    @staticmethod
    def _create(hs: HostSession, inst: WorkloadInstance) -> Awaitable[Ack | Error]:
        sl = inst.lun
        return hs.create(inst.id, sl.lun.path, inst.params, sl.allow_write, sl.engine,
                         sl.allow_engine_fallback)

    def _created(self, number: int, inst: WorkloadInstance, info: dict[str, Any]) -> None:
        """What a create answered: the workload's ``engine`` attribute (a rollup key) is the
        engine it runs on, and luns.csv follows when that is not the one it listed; the
        engine's warning (the thread pool) and a write preflight overridden go to the console
        and events.csv."""
        engine = str(info.get("engine") or "")
        if engine:
            inst.attributes["engine"] = engine
            key = (inst.host, inst.lun.lun.path)
            running = self.engines_in_use.setdefault(key, set())
            if engine not in running:
                running.add(engine)
                self._luns_csv_stale = (self._luns_csv_stale or running
                                        != {inst.lun.lun.attributes.get("engine")})
        if info.get("warning"):
            self.event("WARNING", str(info["warning"]), host=inst.host, kind="engine",
                       step=number)
        if info.get("preflight_warning"):
            self.event("WARNING", str(info["preflight_warning"]), host=inst.host,
                       kind="preflight", step=number)

    def _check_per_host(self, step: StepConfig, instances: list[WorkloadInstance]) -> None:
        """Refuse, before any workload is created, a step that gives a host more workloads
        than a slave runs."""
        per_host = collections.Counter(i.host for i in instances)
        over = {h: n for h, n in per_host.items() if n > MAX_WORKLOADS_PER_HOST}
        if over:
            hosts = ", ".join(f"{h} {n:,}" for h, n in sorted(over.items()))
            raise ConfigError(
                f"step {step.name} gives hosts more workloads than a slave runs "
                f"({MAX_WORKLOADS_PER_HOST:,}): {hosts}; spread them over more hosts",
                key_path=f"steps[{step.source_index}].workloads", file=self.cfg.source_file,
                line=step.line or None)

    def _rollup_edits(self, step: StepConfig, instances: list[WorkloadInstance]) -> list[str]:
        return apply_rollup_edits(step.edit_rollup, instances, self.rollups,
                                  key_path=f"steps[{step.source_index}].edit_rollup",
                                  file=self.cfg.source_file, line=step.line or None,
                                  step_name=step.name)

    # ------------------------------------------------------------------ one step
    async def _run_step(self, number: int, step: StepConfig) -> bool:
        assert self.output is not None
        instances = expand_step(step, self.selected, self.cfg.source_file)
        for inst in instances:  # a workload carried over runs on the engine it was created on
            prev = self.placed.get(inst.id)
            if prev is not None and "engine" in prev.attributes:
                inst.attributes["engine"] = prev.attributes["engine"]
        self._check_per_host(step, instances)
        for text in self._rollup_edits(step, instances):
            self.event("INFO", f"edit_rollup {text}", kind="edit", step=number)
        self._apply_iops_curve(number, step, instances)
        focus = self._focus_instances(step, instances)
        control = StepControl(step, self.cfg.subinterval_seconds, focus)
        if step.dfc is not None:
            self._dfc_start(step, control, instances)
        await self._or_interrupted(self._apply_workloads(number, instances),
                                   f"creating the workloads of step {number} {step.name}")
        created = self._focus_instances(step, instances)
        if created != focus:
            # a create ran a workload on another engine than its LUN listed (the thread pool,
            # as allow_engine_fallback allows): its ``engine`` attribute, a rollup key, is the
            # one it runs on, so the focus instances are those its rows will have
            control = StepControl(step, self.cfg.subinterval_seconds, created)
        n_max = control.max_subintervals
        if n_max <= 0:
            self.event("WARNING", f"step {step.name} has no subintervals", step=number)
            return True
        show = self.view.live_rollup or default_live_rollup(len(self.sessions))
        # a DFC window adds its focus rollup's histograms up over subintervals
        dfc = control.dfc
        windowed = dfc is not None and dfc.window is not None and dfc.window.subintervals > 1
        gathered: list[str] = []
        if self.gathering is not None:  # its first sample fixes the step's gathered columns
            gathered = await self._or_interrupted(self.gathering.probe(
                [b.focus_metric for b in (step.measure, step.dfc) if b is not None]),
                f"the first gather of step {number} {step.name}")
        recorder = StepRecorder(self.output, number, step.name, self.rollups,
                                self.cfg.subinterval_seconds, self.placed, self.settings,
                                show,
                                hosts=list(self.sessions),
                                histogram_types=frozenset(
                                    {dfc.focus_rollup} if dfc is not None and windowed else ()),
                                fold_measurement=control.fixed is not None, gathered=gathered)
        st = _StepState(number, step, recorder, control)
        if step.dfc is not None:
            st.dfc_members = {key: [m.id for m in members] for key, members in
                              self._by_instance(step.dfc.focus_rollup, instances).items()}
        self.step_state = st
        self.view.step_started(number, step.name, n_max, self.cfg.subinterval_seconds)
        max_rtt = max(hs.rtt_ns for hs in self.sessions.values())
        lead_ns = start_lead_ns(max_rtt, len(instances), self.go_confirmed,
                                self.gathering.start_lead_ns(self.sub_ns)
                                if self.gathering is not None else 0)
        st.start_ns = self.clock() + lead_ns
        if self.gathering is not None:
            self.gathering.start_step(number, recorder, st.start_ns, self.sub_ns, n_max)
        how = (f"{control.fixed} measurement" if control.fixed is not None
               else f"measure until steady (at most {control.timeout} measurement)")
        self.event("INFO", f"step {number} {step.name}: {control.warm} warmup, {how}, "
                   f"{control.cool} cooldown subintervals; starts {lead_ns / 1e6:.0f} ms "
                   "after its Go", kind="step", step=number)
        # the slaves keep the measurement window's statistics: a fixed-length step adds
        # warmup .. warmup + measurement - 1 up as it goes; a measure step keeps each
        # subinterval from the end of its warmup on
        fixed = control.fixed
        keep_to = control.warm + fixed - 1 if fixed is not None else -1
        go_sent_ns = self.clock()
        go_s = self._left_s(self._deadline_ns(st, 0))  # taken by the first result's deadline
        confirm: asyncio.Future[None] | None = None
        last_recorded = -1
        stop_sent = credit.stop_at_go(n_max)
        try:
            try:
                await self._to_hosts([(hs, hs.go(
                    number, st.start_ns, self.sub_ns, recorder.plan_for(hs.host),
                    keep_from=control.warm, keep_to=keep_to, fold=fixed is not None,
                    timeout_s=go_s)) for hs in self.sessions.values()],
                    f"read the Go of step {number}")
                confirm = asyncio.ensure_future(self._confirm_go(st, go_sent_ns, len(instances)))
                if stop_sent:
                    await self._stop_all(0, self._deadline_ns(st, 0))
                k = 0
                while True:
                    results = await self._gather(st, k)
                    if results is None:  # interrupted: the step ends without k
                        if not stop_sent:
                            await self._stop_all(k - 1)
                        break
                    self.settings.advance(k)  # the edits in force from k on
                    phase = control.phase_of(k)
                    with self.output.subinterval():  # every file's rows of k, or none
                        joined = (self.gathering.record(k, phase)
                                  if self.gathering is not None else None)
                        rec = self._record(st, k, phase, results, joined)
                        _device_focus(control, rec)
                        dec = control.after(k, rec.results, self._dfc_totals(st),
                                            rec.samples.get(control.dfc.focus_rollup)
                                            if control.dfc is not None else None)
                        self._write_control_rows(st, dec)
                    self.view.subinterval(k, phase, recorder.show_type, rec.live_total,
                                          rec.live, dfc_lines(dec.dfc_rows), rec.live_instances)
                    last_recorded = k
                    if dec.new_totals:
                        await self._dfc_apply(st, dec)
                    st.last_recorded, st.last_record = k, rec
                    if self.interrupted.is_set():
                        if not stop_sent:
                            await self._stop_all(k)
                        break
                    if st.forced_last is not None:
                        stop_sent = True
                        if k >= st.forced_last:
                            break
                        k += 1
                        continue
                    last = dec.last
                    if not stop_sent:  # the credit rule's answer (``protocol.credit``)
                        kind, sub = credit.answer(k, last, n_max)
                        if kind == "stop" and sub == k:  # the step ends now
                            await self._stop_all(k)
                            break
                        # taken by the next result's deadline
                        send_by_s = self._left_s(self._deadline_ns(st, k + 1))
                        if kind == "stop":
                            await self._stop_all(sub, self._deadline_ns(st, k + 1))
                            stop_sent = True
                        else:
                            await self._to_hosts(
                                [(hs, hs.grant(sub, send_by_s)) for hs in self.sessions.values()],
                                f"read the Continue for subinterval {sub}")
                    elif last is not None and last <= k:
                        break
                    if stop_sent and credit.step_over(k, last, n_max):
                        break
                    k += 1
            except (HostError, ProtocolError) as exc:
                await self._abort_step()
                failed = last_recorded + 1
                self._summarise_failed(st, ended_early("host", failed, control.phase_of(failed),
                                                       _failure_text(exc)))
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            finally:
                self.step_state = None
            try:
                await self._wait_stopped()
            except HostError as exc:
                self._summarise_failed(st, ended_early(
                    "host", last_recorded, control.phase_of(max(last_recorded, 0)),
                    _failure_text(exc), after=True))
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            window, reason, extra = control.verdict(last_recorded)
            ended = ("interrupt" if self.interrupted.is_set()
                     else "stop" if st.forced_last is not None else "")
            # the step ran short of what it was to measure; a stop in the measurement of a
            # fixed-length step leaves a shorter window, which stays valid (the operator's call)
            if ended == "interrupt" or (ended == "stop" and (reason or not window)):
                reason = "; ".join(x for x in (ended_early(
                    ended, last_recorded, control.phase_of(max(last_recorded, 0))), reason) if x)
            try:
                total = await self._window(st, window)
            except (HostError, ProtocolError) as exc:
                self._summarise_failed(st, f"failed fetching the measurement window: "
                                       f"{_failure_text(exc)}")
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            except _Abandoned:  # interrupted, and the window does not come in time
                if ended != "interrupt":
                    reason = "; ".join(x for x in (ended_early(
                        "interrupt", last_recorded, control.phase_of(max(last_recorded, 0))),
                        reason) if x)
                self._summarise_failed(st, f"{reason}; the measurement window did not come "
                                       f"within {INTERRUPT_WAIT_S:g} s of the interrupt")
                return False
            valid, text = self._summarise(st, window, total, extra_invalid=reason, extra=extra)
            for host, message in recorder.devices.disagreements():  # one per device and step
                self.event("WARNING", message, host=host, kind="device", step=number)
            self.view.step_finished(text)
            return valid
        finally:
            if confirm is None or not confirm.done():  # unconfirmed: later steps take the
                if confirm is not None:                # longest lead again
                    confirm.cancel()
                self.go_confirmed = None
            recorder.close()  # its spilled measurement subintervals
            if self.gathering is not None:
                self.gathering.end_step()

    async def _confirm_go(self, st: _StepState, sent_ns: int, workloads: int) -> None:
        """A ``Ping`` to every host behind the step's Go (sent at ``sent_ns``): its ``Pong``
        says the slave handled the Go, and passed the start on to its workers. Learns how long
        that took (``go_confirmed``: the lead of later steps) and warns of a host that may
        have started late. A host lost meanwhile is the step's to report."""
        async def one(hs: HostSession) -> int | None:
            try:
                await hs.ping()
            except IvyError:
                return None
            return self.clock()

        hosts = list(self.sessions.values())
        got = await asyncio.gather(*(one(hs) for hs in hosts))
        for hs, at in zip(hosts, got, strict=True):
            if at is not None and at > st.start_ns:
                self.event("WARNING", f"the Go of step {st.number} {st.config.name} was "
                           f"confirmed only {(at - st.start_ns) / 1e6:.0f} ms after the "
                           f"step's start ({(at - sent_ns) / 1e6:.0f} ms after it was sent): "
                           "this host may have started late; later steps start further ahead",
                           host=hs.host, kind="step", step=st.number)
        done = [at for at in got if at is not None]
        if len(done) < len(got):
            return
        longest = max(done) - sent_ns
        log.info("step %d: its Go confirmed by every host %.1f ms after it was sent",
                 st.number, longest / 1e6)
        prev = self.go_confirmed or GoConfirmed(0, 0)
        self.go_confirmed = GoConfirmed(max(workloads, prev.workloads),
                                        max(longest, prev.longest_ns))

    # ------------------------------------------------------------------ measure, DFC, curves
    def _focus_instances(self, step: StepConfig,
                         instances: Sequence[WorkloadInstance]) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for spec in self.rollups:
            names: dict[str, None] = {}
            for inst in instances:
                names.setdefault(rollup_key(spec, inst), None)
            out[spec.type] = tuple(names)
        for block, key in ((step.measure, "measure"), (step.dfc, "dfc")):
            if block is not None and block.focus_rollup not in out:
                raise ConfigError(f"{key}.focus_rollup {block.focus_rollup} is not one of the "
                                  f"test's rollups ({', '.join(out)})",
                                  key_path=f"steps[{step.source_index}].{key}.focus_rollup",
                                  file=self.cfg.source_file, line=step.line or None)
            if block is not None and block.focus_metric in DEVICE_METRICS:
                split = _split_lun(next(r for r in self.rollups if r.type == block.focus_rollup),
                                   instances)
                if split is not None:
                    raise ConfigError(
                        f"{block.focus_metric} needs a LUN-based focus rollup, but "
                        f"{block.focus_rollup} splits the workloads of LUN {split} between "
                        "instances (a device's I/O cannot be told apart by workload)",
                        key_path=f"steps[{step.source_index}].{key}.focus_rollup",
                        file=self.cfg.source_file, line=step.line or None)
        return out

    def _by_instance(self, rollup_type: str, instances: Iterable[WorkloadInstance]
                     ) -> dict[str, list[WorkloadInstance]]:
        """The workloads of each instance of ``rollup_type``, in one pass (a pass per
        instance cost DFC on a workload rollup of 512 workloads ~50 ms per subinterval)."""
        spec = next(r for r in self.rollups if r.type == rollup_type)
        out: dict[str, list[WorkloadInstance]] = {}
        for inst in instances:
            out.setdefault(rollup_key(spec, inst), []).append(inst)
        return out

    def _apply_iops_curve(self, number: int, step: StepConfig,
                          instances: Sequence[WorkloadInstance]) -> None:
        point = step.iops_curve
        if point is None:
            return
        if point.fraction is None:
            assign_total(instances, None)
            return
        measured = self.step_results.get(point.max_step, {}).get(point.rollup)
        if not measured:
            raise StepFailed(f"iops_curve step {step.name}: the max-IOPS step "
                             f"{point.max_step} has no result", EXIT_INVALID)
        for key, members in self._by_instance(point.rollup, instances).items():
            iops = measured.get(key)
            if iops is None or not iops > 0:
                raise StepFailed(f"iops_curve step {step.name}: {point.rollup}={key} measured "
                                 f"no IOPS in {point.max_step}", EXIT_INVALID)
            total = point.fraction * iops
            assign_total(members, total)
            self.event("INFO", f"iops_curve: {point.rollup}={key} total IOPS {total:.0f} "
                       f"({point.fraction:.0%} of {iops:.0f})", kind="edit", step=number)

    def _dfc_start(self, step: StepConfig, control: StepControl,
                   instances: Sequence[WorkloadInstance]) -> None:
        """Each focus instance's workloads set to the DFC's starting total."""
        assert step.dfc is not None
        for members in self._by_instance(step.dfc.focus_rollup, instances).values():
            iops = [m.params.iops for m in members]
            current = None if None in iops else float(sum(v for v in iops if v is not None))
            assign_total(members, control.initial_total(current))

    def _dfc_totals(self, st: _StepState) -> dict[str, float]:
        """Each DFC focus instance's total IOPS in force (``master.run.settings``); an instance
        with a workload at max (none can be while DFC runs: ``RunControl.edit``) is left out."""
        out: dict[str, float] = {}
        for key, wids in st.dfc_members.items():
            total = self.settings.total_iops(wids)
            if total is not None:
                out[key] = total
        return out

    async def _dfc_apply(self, st: _StepState, dec: Decision) -> None:
        """DFC's new totals, each split over its instance's workloads from what their slaves
        hold (an operator's edit included), sent to be taken by the next result's deadline."""
        async with st.edits:
            held = st.control.operator_held()  # an operator's edit acknowledged meanwhile
            changes: list[tuple[WorkloadInstance, WorkloadParams]] = []
            for key, total in dec.new_totals.items():
                if key in held:
                    continue
                members = [self.placed[w] for w in st.dfc_members.get(key, ())]
                split = split_total(total, [(m.lun_key, self.settings.latest(m.id))
                                            for m in members])
                changes += zip(members, split, strict=True)
            if changes:
                await self._send_edits(st, changes, source="dfc",
                                       send_by_ns=self._deadline_ns(st, dec.k + 1))

    async def _send_edits(self, st: _StepState, changes: Sequence[tuple[WorkloadInstance,
                          WorkloadParams]], source: Source, send_by_ns: int | None = None
                          ) -> int:
        """Send new parameters (what differs from what the slave holds), one request per host
        (all of a host's edits hold, or none), each taken by ``send_by_ns`` when given; they
        take effect (``master.run.settings``, and so the rows) from the subinterval the slaves
        announce. Returns that subinterval (the latest over hosts). A refusal raises
        ``HostError`` naming the host and workload, after the other hosts' edits are noted."""
        by_host: dict[str, list[tuple[WorkloadInstance, WorkloadParams]]] = {}
        for inst, params in changes:
            by_host.setdefault(inst.host, []).append((inst, params))
        send_s = None if send_by_ns is None else self._left_s(send_by_ns)
        latest = self.settings.latest
        replies = await self._to_hosts([(self.sessions[host], self.sessions[host].edit_many(
            [(inst.id, changed_fields(latest(inst.id), params)) for inst, params in edits],
            send_timeout_s=send_s))
            for host, edits in by_host.items()], "answer its edit")
        effective = -1
        refused: tuple[str, Error] | None = None  # the first host that refused
        held: list[str] = []
        for (host, edits), reply in zip(by_host.items(), replies, strict=True):
            if isinstance(reply, Error):
                refused = refused or (host, reply)
                continue
            effective = max(effective, reply.effective_subinterval)
            # the other hosts' edits hold even when one host refused its own
            held.append(host)
            for inst, params in edits:
                self.settings.taken(inst.id, params, reply.effective_subinterval, source)
        if refused is not None:
            host, err = refused
            also = (f"; the edits on {', '.join(held)} were made and hold from subinterval "
                    f"{effective}" if held else "")
            reason = err.message.removeprefix(f"host {host}: ")  # HostError names it
            raise HostError(f"{source} edit of {err.workload_id} refused: {reason}{also}",
                            host=host)
        return effective

    def _write_control_rows(self, st: _StepState, dec: Decision) -> None:
        assert self.output is not None
        if dec.measure_rows:
            t = self.output.table(f"{st.recorder.dir}/measure.csv", MEASURE_COLUMNS)
            for row in dec.measure_rows:
                t.write(row)
        if dec.dfc_rows:
            t = self.output.table(f"{st.recorder.dir}/dfc.csv", DFC_COLUMNS)
            for row in dec.dfc_rows:
                t.write(row)

    def _record(self, st: _StepState, k: int, phase: str, results: Sequence[SubintervalResult],
                joined: dict[str, dict[str, npt.NDArray[np.float64]]] | None = None
                ) -> Recorded:
        now = self.clock()
        hosts = [HostResult(hs.host, r, hs.to_master_ns, now, hs.offset_uncertainty_ns)
                 for r, hs in zip(results, self.sessions.values(), strict=True)]
        if self.output_failed is not None:
            raise self.output_failed
        rec = st.recorder.record(k, phase, hosts, st.start_ns + (k + 1) * self.sub_ns, joined)
        for host, bound in rec.skew_bound_ns.items():
            if bound > self.skew_limit_ns and host not in st.skew_warned:
                st.skew_warned.add(host)
                hs = self.sessions[host]
                self.event("WARNING", f"boundary skew may be up to {bound / 1e6:.3f} ms "
                           f"(measured skew plus the clock offset's uncertainty of "
                           f"±{hs.offset_uncertainty_ns / 1e6:.3f} ms), more than "
                           f"skew_limit_seconds ({self.skew_limit_ns / 1e6:g} ms); "
                           "interlock.csv has every boundary (warned once a step)",
                           host=host, kind="clock", step=st.number, subinterval=k)
        for host, text in rec.io_errors:
            self.event("WARNING", f"I/O error: {text}", host=host, kind="io", step=st.number,
                       subinterval=k)
        return rec

    async def _window(self, st: _StepState, window: Sequence[int]) -> Sample | None:
        """The measurement window's statistics of every workload, from the slaves (each adds
        up the subintervals it kept, within ``window_timeout_s``); None for an empty window.
        Once the run is interrupted (before the request or while it waits) the hosts get
        ``INTERRUPT_WAIT_S`` more: one that has not answered then is marked failed (it is not
        waited for again) and ``_Abandoned`` is raised."""
        if not window:
            return None
        first, last = window[0], window[-1]
        if list(window) != list(range(first, last + 1)):
            raise ProtocolError(f"measurement window {list(window)[:5]}... is not contiguous")
        timeout_s = window_timeout_s(len(window), self.cfg.subinterval_seconds,
                                     folded=st.control.fixed is not None)
        sessions = list(self.sessions.values())
        try:
            replies = await self._to_hosts(
                [(hs, hs.window(st.number, first, last, timeout_s)) for hs in sessions],
                f"send the measurement window of step {st.number}")
        except HostError:
            if self.interrupted.is_set():  # the hosts still busy are marked failed
                raise _Abandoned from None
            raise
        return st.recorder.window_sample([(hs.host, r.workload_ids, r.stats) for hs, r
                                          in zip(sessions, replies, strict=True)])

    def _summarise_failed(self, st: _StepState, reason: str) -> None:
        """The summary rows of a step a failure ended: invalid with ``reason``, no metrics
        (the run still ends with the failure's exit code). A failure to write them is left
        to the run's end (the failure itself is what the run reports)."""
        try:
            self._write_summary(st, st.recorder.unmeasured_rows(reason), [reason],
                                valid=False)
        except OutputError as exc:
            if self.output_failed is None:
                self.output_failed = exc

    def _summarise(self, st: _StepState, window: Sequence[int], total: Sample | None, *,
                   extra_invalid: str = "", extra: dict[str, Any] | None = None
                   ) -> tuple[bool, str]:
        valid, rows, messages = st.recorder.summarise(
            window, total, extra_invalid=extra_invalid, extra=extra,
            iops_tolerance_pct=st.config.iops_tolerance_pct)
        self._write_summary(st, rows, messages, valid=valid)
        alls = [r for r in rows if r["rollup_type"] == "all"]
        if not alls or alls[0]["IOPS"] is None:
            return valid, (f"step {st.number} {st.config.name}: no measurement"
                           + (f" ({messages[0]})" if messages else ""))
        a = alls[0]
        dur = a["measurement_seconds"]
        text = (f"step {st.number} {st.config.name}: {a['IOPS']:,.0f} IOPS, "
                f"{a['MB_per_s']:.1f} MB/s, service time mean {a['service_time_mean_ms']:.3f} ms "
                f"p99 {a['service_time_p99_ms']:.3f} ms over {dur:g} s"
                + ("" if valid else " (INVALID)"))
        return valid, text

    def _write_summary(self, st: _StepState, rows: Sequence[dict[str, Any]],
                       messages: Sequence[str], *, valid: bool) -> None:
        """A step's summary rows into its per-rollup summary.csv files and the run's; each
        reason why it is invalid to events.csv; each measured instance's IOPS to the run's
        step results (``iops_curve`` points, state.json); the step's line of the end-of-run
        table to the view."""
        assert self.output is not None
        for m in messages:
            self.event("WARNING", f"step {st.config.name} invalid: {m}", kind="validation",
                       step=st.number)
        results = self.step_results.setdefault(st.config.name, {})
        header = [*st.recorder.summary_columns, *MEASURE_SUMMARY_COLUMNS]
        run_header = self._run_summary_header(header)
        left_out = [c for c in header if c not in set(run_header)]
        if left_out:
            self.event("WARNING", f"step {st.config.name}: gathered columns "
                       f"{', '.join(left_out)} are not in the run's summary.csv (the run's "
                       "first step fixed its columns); the step's summary.csv files have them",
                       kind="gather", step=st.number)
        with self.output.subinterval():  # a step's summary rows whole, or none
            for row in rows:
                self.output.table(
                    f"{st.recorder.dir}/{safe_name(row['rollup_type'])}/summary.csv",
                    header).write(row)
                self.output.table("summary.csv", run_header).write(
                    {c: v for c, v in row.items() if c not in left_out})
        for row in rows:
            if row["IOPS"] is not None:
                results.setdefault(row["rollup_type"], {})[row["rollup_instance"]] = float(
                    row["IOPS"])
        self.view.step_summary(f"{st.number} {st.config.name}", st.recorder.show_type, rows,
                               valid=valid, reasons=messages)

    def _run_summary_header(self, step_header: list[str]) -> list[str]:
        """The run's summary.csv columns: a resumed run's existing file's, else those of the
        first step that writes it (the gathered columns of a later step that are not among
        them stay in its own summary.csv files)."""
        if self.run_summary_header is None:
            assert self.output is not None
            existing = self.output.folder / "summary.csv"
            header = step_header
            if self.output.resuming and existing.exists():
                with open(existing, newline="", encoding="utf-8") as fh:
                    header = next(csv.reader(fh), step_header)
            self.run_summary_header = header
        return self.run_summary_header

    def _deadline_ns(self, st: _StepState, k: int) -> int:
        """When every host's result of subinterval ``k`` must be in."""
        return st.start_ns + (k + 1) * self.sub_ns + round(
            self.cfg.deadline_fraction * self.sub_ns)

    def _left_s(self, deadline_ns: int) -> float:
        return max(0.0, (deadline_ns - self.clock()) / 1e9)

    async def _stop_all(self, after: int, deadline_ns: int | None = None) -> None:
        """``Stop`` after subinterval ``after`` to every host whose step runs, taken by
        ``deadline_ns`` (by default within ``STOP_WAIT_S``, as its ``Stopped`` is then)."""
        timeout_s = STOP_WAIT_S if deadline_ns is None else self._left_s(deadline_ns)
        await self._to_hosts([(hs, hs.stop(after, timeout_s)) for hs in self.sessions.values()],
                             f"read the Stop after subinterval {after}")

    async def _to_hosts(self, calls: Sequence[tuple[HostSession, Awaitable[T]]], what: str
                        ) -> list[T]:
        """Every host's call at once, each bounded by its session (what it sends by the
        deadline given, an answer by its request's timeout); the first ``HostError`` is
        raised and the other calls are cancelled. Once the run is interrupted (before or while
        they wait) the hosts get ``INTERRUPT_WAIT_S`` more: every one still busy then is marked
        failed (it did not ``what``), which ends its calls, and the first one's error raised."""
        tasks = [asyncio.ensure_future(aw) for _, aw in calls]
        every: asyncio.Future[list[T]] = asyncio.gather(*tasks)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.interrupted.wait())
        try:
            await asyncio.wait([every, stop], return_when=asyncio.FIRST_COMPLETED)
            if not every.done():  # interrupted
                await asyncio.wait([every], timeout=INTERRUPT_WAIT_S)
            if not every.done():
                stuck = [hs.mark_failed(f"did not {what} within {INTERRUPT_WAIT_S:g} s of the "
                                        "interrupt")
                         for (hs, _), t in zip(calls, tasks, strict=True) if not t.done()]
                raise stuck[0]
            return every.result()
        finally:
            stop.cancel()
            for t in tasks:
                t.cancel()
            # what the calls cut short end with is not wanted (nor logged as never retrieved)
            every.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _gather(self, st: _StepState, k: int) -> list[SubintervalResult] | None:
        """Every host's result of subinterval ``k``. A host late at the deadline is marked
        failed there and then (``HostError``; it is not waited for again). None when the run
        was interrupted and the results would come later than ``INTERRUPT_WAIT_S`` from now:
        the step ends without ``k``."""
        deadline = self._deadline_ns(st, k)

        async def one(hs: HostSession) -> SubintervalResult:
            get: asyncio.Future[SubintervalResult] = asyncio.ensure_future(hs.results.get())
            fail: asyncio.Future[Any] = asyncio.ensure_future(hs.failed.wait())
            stop: asyncio.Future[Any] = asyncio.ensure_future(self.interrupted.wait())
            try:
                while True:
                    timeout = max(0.0, (deadline - self.clock()) / 1e9)
                    done, _ = await asyncio.wait([get, fail, stop], timeout=timeout,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if get in done:
                        r = get.result()
                        if r.step != st.number or r.subinterval != k:
                            raise HostError(f"sent result of step {r.step} subinterval "
                                            f"{r.subinterval}, expected step {st.number} "
                                            f"subinterval {k}", host=hs.host)
                        return r
                    if fail in done:
                        assert hs.failure is not None
                        raise hs.failure
                    if stop in done:
                        if timeout > INTERRUPT_WAIT_S:
                            raise _Abandoned
                        # interrupted near the deadline: this result still counts
                        stop = asyncio.ensure_future(asyncio.sleep(3600))
                        continue
                    late_ms = self.cfg.deadline_fraction * self.sub_ns / 1e6
                    raise hs.mark_failed(f"result of subinterval {k} not received within the "
                                         f"deadline ({late_ms:.0f} ms after its end)")
            finally:
                for f in (get, fail, stop):
                    f.cancel()

        tasks = [asyncio.ensure_future(one(hs)) for hs in self.sessions.values()]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in tasks:
                if t in done and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            return [t.result() for t in tasks]
        except _Abandoned:
            return None
        finally:
            for t in tasks:
                t.cancel()

    async def _abort_step(self) -> None:
        async def stop(hs: HostSession) -> None:
            with contextlib.suppress(IvyError, OSError):  # a host failing now is not waited for
                await hs.stop(-1, STOP_WAIT_S)

        with contextlib.suppress(IvyError):
            await self._to_hosts([(hs, stop(hs)) for hs in self.sessions.values()
                                  if hs.failure is None], "read the Stop that ends the step")
        await self._wait_stopped(healthy_only=True)

    async def _wait_stopped(self, healthy_only: bool = False) -> None:
        """Every healthy host's ``Stopped``; one that does not confirm within ``STOP_WAIT_S``
        (``INTERRUPT_WAIT_S`` once interrupted, when it is marked failed and not waited for
        again) fails the step, unless ``healthy_only``."""
        interrupted = self.interrupted.is_set()

        async def one(hs: HostSession) -> None:
            if hs.failure is not None:
                return
            wait_s = INTERRUPT_WAIT_S if interrupted else STOP_WAIT_S
            if await hs.wait_stopped(wait_s) is None:
                if interrupted:
                    hs.mark_failed(f"did not confirm the end of the step within {wait_s:.0f} s "
                                   "of the interrupt")
                elif not healthy_only:
                    raise HostError("did not confirm the end of the step", host=hs.host)

        await asyncio.gather(*(one(hs) for hs in self.sessions.values()))

    async def _close_all(self, grace_s: float = 2.0) -> None:
        await asyncio.gather(*(hs.close(grace_s) for hs in self.sessions.values()),
                             return_exceptions=True)

    async def _or_interrupted(self, aw: Awaitable[Any], stage: str) -> Any:
        """``aw``'s result, or ``Interrupted`` as soon as SIGINT/SIGTERM comes (``aw`` is
        cancelled): connecting to a host that never answers waits for no timeout."""
        task = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(self.interrupted.wait())
        try:
            await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            raise Interrupted(f"interrupted while {stage}")
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


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


def _failure_text(exc: IvyError) -> str:
    """A failure as a summary row's reason quotes it: its first line (a ``HostError`` names
    its host; a slave's stderr tail stays in events.csv and run.log)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class RunControl:
    """The run's side of the control socket: ``ivypy status``, ``ivypy edit``, ``ivypy stop``."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def _step(self) -> _StepState:
        st = self.run.step_state
        if st is None:
            raise EditRefused("no step is running right now; try again when a step has started")
        return st

    async def status(self) -> dict[str, Any]:
        run = self.run
        out: dict[str, Any] = {"test": run.cfg.test,
                               "run_dir": str(run.output.folder) if run.output else "",
                               "subinterval_s": run.cfg.subinterval_seconds}
        st = run.step_state
        if st is None:
            out["phase"] = "between steps"
            return out
        k = st.last_recorded
        total = st.control.max_subintervals
        out.update(step=st.number, step_name=st.config.name, subinterval=k,
                   phase=st.control.phase_of(max(k, 0)), subintervals_total=total,
                   time_left_s=max(0, total - k - 1) * run.cfg.subinterval_seconds)
        rec = st.last_record
        if rec is not None:
            rollups: dict[str, list[dict[str, Any]]] = {}
            specs = {r.type: r for r in run.rollups}
            for rtype, res in rec.results.items():
                if res.grouping.n > 50:
                    continue
                setting: dict[str, float | str] = {}
                for inst in run.placed.values():
                    key = rollup_key(specs[rtype], inst)
                    iops = run.settings[inst.id].iops
                    old = setting.get(key, 0.0)
                    setting[key] = "max" if iops is None or old == "max" else float(old) + iops
                rollups[rtype] = [
                    {"instance": name, "IOPS": float(res.columns["IOPS"][i]),
                     "service_time_p99_ms": float(res.columns["service_time_p99_ms"][i]),
                     "iops_setting": setting.get(name, "")}
                    for i, name in enumerate(res.grouping.names)]
            out["rollups"] = rollups
        return out

    async def edit(self, rollup_type: str, instance: str, changes: EditChanges) -> dict[str, Any]:
        run = self.run
        st = self._step()
        spec = next((r for r in run.rollups if r.type == rollup_type), None) or RollupSpec(
            type=rollup_type, attributes=tuple(rollup_type.split("+")))
        members = [i for i in run.placed.values() if rollup_key(spec, i) == instance]
        if not members:
            known = sorted({rollup_key(spec, i) for i in run.placed.values()})
            raise unknown_instance(rollup_type, instance, st.config.name, known)
        held = [run.settings.latest(m.id) for m in members]
        try:
            wanted = [p.replace(**changes.params) for p in held]
        except ValueError as exc:
            raise EditRefused(f"the edit cannot apply: {exc}") from None
        if changes.total_iops is not None:
            total = None if changes.total_iops == "max" else float(changes.total_iops)
            wanted = split_total(total, [(m.lun_key, p)
                                         for m, p in zip(members, wanted, strict=True)])
        for m, p in zip(members, wanted, strict=True):
            misfit = blocksize_misfit(m, p)
            if misfit:
                raise EditRefused(misfit)
        edits = [(m, p) for m, p, old in zip(members, wanted, held, strict=True) if p != old]
        if not edits:
            raise EditRefused("the edit changes nothing: the workloads already run like that")
        steered = _steered(st, {m.id for m, _ in edits})
        if steered and any(p.iops is None for _, p in edits):
            raise EditRefused(
                f"DFC steers the IOPS of {', '.join(sorted(steered))} in step "
                f"{st.config.name}: give a number of IOPS, not max (its next move starts from "
                "the total you set)")
        async with st.edits:
            try:
                effective = await run._send_edits(st, edits, source="live")
            except HostError as exc:
                run.event("WARNING", f"live edit {rollup_type}={instance} {changes.describe()} "
                          f"refused: {exc}", kind="edit", step=st.number)
                raise EditRefused(str(exc)) from exc
            for key in steered:  # DFC starts from the edit once it holds
                total = sum(p.iops or 0.0
                            for p in map(run.settings.latest, st.dfc_members[key]))
                st.control.operator_edit(key, effective, total)
        run.event("INFO", f"live edit {rollup_type}={instance} {changes.describe()}: "
                  f"{len(edits)} workloads from subinterval {effective}"
                  + (f"; DFC starts from it for {', '.join(sorted(steered))}"
                     if steered else ""), kind="edit", step=st.number, subinterval=effective)
        return {"effective_subinterval": effective, "step": st.number,
                "step_name": st.config.name, "workloads": [m.id for m, _ in edits]}

    async def stop_step(self) -> dict[str, Any]:
        run = self.run
        st = self._step()
        if st.forced_last is None:
            st.forced_last = st.last_recorded + 1
            await run._stop_all(st.forced_last, run._deadline_ns(st, st.forced_last))
            run.event("INFO", f"stop requested: step {st.config.name} ends after subinterval "
                      f"{st.forced_last}", kind="stop", step=st.number)
        return {"step": st.number, "step_name": st.config.name,
                "last_subinterval": st.forced_last}


def _steered(st: _StepState, workload_ids: set[str]) -> set[str]:
    """The DFC focus instances of the running step with a workload among ``workload_ids``."""
    return {key for key, wids in st.dfc_members.items() if workload_ids.intersection(wids)}


def _split_lun(spec: RollupSpec, instances: Sequence[WorkloadInstance]) -> str | None:
    """The first LUN (``host:path``) whose workloads lie in more than one instance of
    ``spec`` (None: the rollup is LUN-based and has device columns,
    ``master.analysis.devstats``)."""
    seen: dict[tuple[str, str], str] = {}
    for inst in instances:
        lun = (inst.host, str(inst.lun.lun.path))
        key = rollup_key(spec, inst)
        if seen.setdefault(lun, key) != key:
            return f"{lun[0]}:{lun[1]}"
    return None


def _device_focus(control: StepControl, rec: Recorded) -> None:
    """A device focus metric's value per focus-rollup instance into ``rec.results``, where
    measure and DFC read it (NaN where the instance has no device value: not steady, hold)."""
    for block in (control.step.measure, control.step.dfc):
        if block is not None and block.focus_metric in DEVICE_METRICS:
            j = DEVICE_METRICS.index(block.focus_metric)
            rec.results[block.focus_rollup].columns[block.focus_metric] = (
                rec.devices[block.focus_rollup][:, j])


#: the columns a summary row has after the recorder's (``StepRecorder.summary_columns``)
MEASURE_SUMMARY_COLUMNS = ["measure_criterion", "measure_values", "measure_attained"]
#: a summary row's columns in a run without ``gather:`` sources
RUN_SUMMARY_COLUMNS = [*SUMMARY_COLUMNS, *MEASURE_SUMMARY_COLUMNS]
MEASURE_COLUMNS = ["subinterval", "instance", "criterion", "metric", "limit", "window_first",
                   "window_last", "value", "passed", "attained"]
DFC_COLUMNS = ["subinterval", "phase", "instance", "metric", "measured", "target", "error",
               "rel_error", "p", "i", "d", "iops_in_force", "new_iops", "saturated", "limited",
               "held", "outlier", "elasticity", "settled"]
EVENT_COLUMNS = ["time", "elapsed_s", "level", "host", "kind", "step", "subinterval", "message"]
HOST_COLUMNS = ["host", "address", "transport", "hostname", "kernel", "python_version",
                "numpy_version", "ivypy_version", "cores", "slave_pid", "clock_offset_ns",
                "rtt_us", "offset_uncertainty_us", "clock_samples", "paced_loop"]


def run_test(cfg: TestConfig, view: LiveView | None = None,
             connect: Connector = default_connect, resume: Resume | None = None) -> RunResult:
    """Run a validated test to its end (blocking); ``resume``: continue that run."""
    return asyncio.run(Run(cfg, view=view, connect=connect, resume=resume).execute())
