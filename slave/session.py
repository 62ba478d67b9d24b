"""The slave's side of the conversation: one handler per message, the subinterval bookkeeping,
and the rules for 'master late'.

Owns what the slave *says* and *when*: answers to requests, the subinterval results, stopping
on a missing ``Continue``. It does not read or write file descriptors (``slave.main`` pumps the
bytes) and does not do a run's I/O on LUNs (the ``Backend`` does: worker processes in
production, a fake in tests); between steps it lays out file LUNs (``slave.luns``) and reads a
LUN back for ``ivypy verify`` (``slave.readback``), with no workload on the host. Time comes
from an injected clock (``time.monotonic_ns`` in production).

Dispatch is a table ``{message type: handler}``; a message the table does not know at this
point was already refused by ``protocol.state``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from protocol import credit, verify
from protocol.batch import StatsBatch
from protocol.credit import SlaveCredit
from protocol.errors import (
    IoEngineError,
    IvyError,
    MasterLateError,
    PreflightError,
    ProtocolError,
    VersionMismatchError,
)
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    Go,
    Hello,
    HelloReply,
    LoadMap,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    Stopped,
    SubintervalResult,
    VerifyFound,
    VerifyLun,
    WindowRequest,
    WindowResult,
)
from protocol.params import WorkloadParams, from_wire
from protocol.state import Conversation, Role, State
from protocol.stats import BYTES, OPS, WorkloadStats
from protocol.version import PROTOCOL_VERSION, __version__
from slave import devstats, readback
from slave import luns as lunmod
from slave.cpu import CpuSampler, CpuSnapshot
from slave.engine import compiled_group, compiled_loop
from slave.engine.verify_state import Crash, LoadedMap
from slave.lunlock import LunLocks
from slave.preflight import in_use_reasons, own_file_note, require_ok
from slave.windowstore import WindowError, WindowStore

#: The slave's watchdog allows this many of the longest subinterval without a word from the
#: master (two subintervals and the deadline between them, rounded up).
WATCHDOG_SUBINTERVALS = 3

log = logging.getLogger(__name__)

class Stopping(Exception):
    """The slave is stopping (a signal came, or the master is gone) while a long handler ran
    (a file LUN's layout): the handler gives up and ``on_bytes`` answers nothing more. Not an
    ``IvyError``: no handler turns it into a refusal."""


@dataclass
class Collected:
    """One finished subinterval from the backend."""

    workload_ids: list[str]
    stats: list[WorkloadStats] | StatsBatch  # dense per workload, or already the sparse batch
    switch_ns: list[int]  # per worker: buffer switch done, ns after the boundary
    interlock: list[dict[str, Any]]
    io_errors: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    verify: dict[str, Any] | None = None  # ``SubintervalResult.verify``


class Backend(Protocol):
    """What the session needs from the I/O side (``slave.worker`` implements it)."""

    def create(
        self, workload_id: str, lun: lunmod.LunInfo, params: WorkloadParams,
        engine: str = "auto", fallback: bool = False, verify: dict[str, int] | None = None,
        verify_map: LoadedMap | None = None,
    ) -> dict[str, Any]:
        """Stage a new workload for the next boundary (or the next ``go``) on ``engine`` (the
        LUN's choice in the test; ``fallback``: the thread pool where libaio cannot be had);
        return facts such as ``{"engine": "libaio"}``, the engine it runs on. ``verify``: a
        verified workload's ``protocol.verify`` target (a backend that cannot verify data
        raises ``ValueError`` saying so), ``verify_map`` its LUN's map as ``LoadMap`` gave it
        (for the LUN's first verified workload on the host)."""

    def final_verify(self) -> dict[str, Any] | None:
        """After ``halt``: what data verification found after the last subinterval collected
        (``Stopped.verify``), or None where nothing verifies."""

    def load_map_part(self, lun: int, first_block: int, data: bytes) -> bool:
        """Part of LUN ``lun``'s map (``LoadMap``) replacing the map a worker holds of it
        (between steps); False where none holds it. ``ValueError``: past its end."""
        ...

    def engine_for(self, lun: lunmod.LunInfo) -> str:
        """The engine workloads on ``lun`` would run on (what ``create`` reports as
        ``engine``), or ``unavailable`` where the slave's engine choice cannot serve it."""

    def edit(self, workload_id: str, params: WorkloadParams) -> None: ...

    def edit_many(self, edits: Sequence[tuple[str, WorkloadParams]]) -> None:
        """``edit`` for each; all of them, or (raising) none."""

    def delete(self, workload_id: str) -> None: ...

    def go(self, start_ns: int, subinterval_ns: int, granted: int) -> None:
        """Start all loops; subintervals ``0..granted`` may run."""

    def grant(self, subinterval: int) -> None:
        """Subintervals up to ``subinterval`` may run."""

    def stop_after(self, subinterval: int) -> None:
        """End I/O at the end of ``subinterval``."""

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        """Wait (until ``deadline_ns``) for every loop's finished buffer of ``subinterval``.
        Raises ``MasterLateError`` when a loop found its next buffer not ready."""

    def release(self, subinterval: int) -> None:
        """The buffers of ``subinterval`` were sent: they are ready to run again."""

    def halt(self) -> None:
        """Stop all I/O now and wait until nothing is in flight. Raises ``IvyError`` when it
        did not end cleanly (I/Os still in flight past the drain limit, a loop that did not
        stop, one that failed), after stopping what it could; an error with ``errors`` (a
        sequence of ``IvyError``) stands for each of them. An error may name what it concerns
        as ``workloads`` and ``luns`` (tuples of ids and paths)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class PlanEntry:
    """One rollup type of ``Go.rollups``: the groups' workload ids, and whether the master
    wants their histograms (else their percentile tables)."""

    rollup_type: str
    groups: tuple[tuple[str, ...], ...]
    histograms: bool


def parse_plan(raw: list[dict[str, Any]], workloads: set[str]) -> list[PlanEntry]:
    """``Go.rollups`` checked against the host's workloads: every workload in exactly one
    group of every entry. Raises ``ValueError`` naming what is wrong."""
    plan = []
    for i, entry in enumerate(raw):
        try:
            rtype, groups, hist = entry["type"], entry["groups"], entry["histograms"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"rollup plan entry {i} lacks {exc}") from exc
        if (not isinstance(rtype, str) or not isinstance(hist, bool)
                or not isinstance(groups, list)
                or not all(isinstance(g, list) and g and all(isinstance(w, str) for w in g)
                           for g in groups)):
            raise ValueError(f"rollup plan entry {i} is malformed")
        members = [w for g in groups for w in g]
        if len(members) != len(set(members)) or set(members) != workloads:
            raise ValueError(
                f"rollup plan entry {i} ({rtype}) does not put each of the host's "
                f"{len(workloads)} workloads in exactly one group")
        plan.append(PlanEntry(rtype, tuple(tuple(g) for g in groups), hist))
    return plan


@dataclass
class _Step:
    number: int
    start_ns: int
    subinterval_ns: int
    #: what the master granted (``protocol.credit``)
    credit: SlaveCredit = field(default_factory=SlaveCredit)
    next_result: int = 0
    cpu_before: CpuSnapshot | None = None
    plan: list[PlanEntry] = field(default_factory=list)
    # per plan entry, each workload's group, for the order the backend reports them in
    group_of: tuple[tuple[str, ...], list[np.ndarray]] | None = None
    # the devices' counters at the last boundary sampled (the step's start, then each end)
    dev_before: devstats.Sample | None = None
    dev_told: set[str] = field(default_factory=set)  # devices said to have no delta

    def end_of(self, k: int) -> int:
        return self.start_ns + (k + 1) * self.subinterval_ns


class SlaveSession:
    """Feed it bytes and clock ticks; it writes frames through ``send_bytes``."""

    def __init__(
        self,
        backend: Backend,
        send_bytes: Callable[[bytes], None],
        clock: Callable[[], int],
        *,
        cpu: CpuSampler | None = None,
        collect_grace_ns: int = 2_000_000_000,
        describe: Callable[..., lunmod.LunInfo] = lunmod.lun_for_path,
        startup_error: str | None = None,
        devices: devstats.DeviceSampler | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self.backend = backend
        #: asked between the pieces of a long handler's work (each piece of a file LUN's
        #: layout, each file LUN of a discovery): True (a signal came, the master is gone:
        #: ``slave.main`` looks without blocking) abandons the handler (``Stopping``)
        self.stopping = stopping
        #: samples the kernel's counters of the devices under the LUNs at every boundary
        #: (``slave.main`` always gives one; without it results carry no device counters)
        self.devices = devices
        #: a setting of the slave's command line that this host cannot honour: the answer to
        #: ``Hello`` is then a fatal ``config`` error saying so
        self.startup_error = startup_error
        self.describe = describe  # a LUN as it is now (tests give their own)
        self.send_bytes = send_bytes
        self.clock = clock
        self.cpu = cpu or CpuSampler()
        self.collect_grace_ns = collect_grace_ns
        self.conv = Conversation(Role.SLAVE)
        self.host = ""
        self.luns: dict[str, lunmod.LunInfo] = {}
        #: the session's lock on each LUN it runs a workload on (``slave.lunlock``)
        self.locks = LunLocks()
        self.params: dict[str, WorkloadParams] = {}
        self.lun_of: dict[str, lunmod.LunInfo] = {}
        #: LUN number -> its map as ``LoadMap`` gave it, until its first verified create, and
        #: the crash it must account for (the attempt that crashed, confirmed serials)
        self.loaded_maps: dict[int, npt.NDArray[np.uint8]] = {}
        self.crash_facts: dict[int, list[Crash]] = {}
        # LUNs described afresh (with the O_EXCL probe) for a writing workload since the last
        # Go or discovery: one look per LUN for a whole batch of creates
        self._write_checked: dict[str, lunmod.LunInfo] = {}
        # file LUNs this run created (its data are ours to overwrite: ``LunInfo.created``)
        self._created_files: set[str] = set()
        self.step: _Step | None = None
        self.window_store: WindowStore | None = None  # the last step's, until the next Go
        self.closed = False
        #: why the conversation ended with a fatal ``Error`` from this side (``kind: message``)
        self.failure: str | None = None
        self.longest_subinterval_ns = 0  # of the steps so far (``watchdog_s``)
        self._handlers: dict[type[Message], Callable[[Any], None]] = {
            Hello: self._on_hello,
            Ping: self._on_ping,
            DiscoverLuns: self._on_discover,
            CreateWorkload: self._on_create,
            EditWorkload: self._on_edit,
            EditWorkloads: self._on_edits,
            LoadMap: self._on_load_map,
            VerifyLun: self._on_verify_lun,
            DeleteWorkload: self._on_delete,
            Go: self._on_go,
            Continue: self._on_continue,
            Stop: self._on_stop,
            WindowRequest: self._on_window,
            Bye: self._on_bye,
        }

    # ------------------------------------------------------------------ plumbing
    def send(self, msg: Message) -> None:
        self.send_bytes(self.conv.send(msg))

    def event(self, level: str, message: str, **context: Any) -> None:
        """An event for the master's events.csv (also logged here)."""
        log.log(logging.getLevelName(level), "%s", message)
        if self.conv.state not in (State.START, State.HELLO, State.CLOSED):
            self.send(Log(level=level, message=message, time_ns=self.clock(), context=context))

    def on_bytes(self, data: bytes) -> None:
        """Answer every message ``data`` completes, one at a time: each is checked against
        the legal order in the state the ones before it and their answers left (a ``Hello``
        and a ``Bye`` in one read are answered ``HelloReply``, ``Bye``)."""
        try:
            messages = self.conv.decode_data(data)
        except ProtocolError as exc:
            self._fatal_protocol(exc)
            return
        for msg in messages:
            if self.closed:
                return
            try:
                self.conv.receive(msg)
            except ProtocolError as exc:
                self._fatal_protocol(exc)
                return
            try:
                self._handlers.get(type(msg), self._ignore)(msg)
            except Stopping as exc:
                log.warning("%s left unanswered: %s", type(msg).__name__, exc)
                return

    def _check_stopping(self, what: str) -> None:
        """Raise ``Stopping`` saying ``what`` was given up, when the slave is to stop
        (``stopping`` says so)."""
        if self.stopping is not None and self.stopping():
            raise Stopping(f"{what}: the slave is stopping (a signal, or the master is gone)")

    def _fatal_protocol(self, exc: ProtocolError) -> None:
        self._fatal("version" if isinstance(exc, VersionMismatchError) else "protocol", str(exc))

    def _ignore(self, msg: Message) -> None:
        log.debug("ignoring %s", type(msg).__name__)

    def on_eof(self) -> None:
        """stdin reached EOF: the master is gone, stop everything. EOF inside a frame is a
        protocol error (SPEC, Framing): a fatal ``Error`` says so, should the master still
        read."""
        log.info("stdin closed: stopping all I/O")
        partial = self.conv.buffered_bytes
        if partial and not self.closed:
            self._fatal("protocol", f"the master's stream ended inside a frame ({partial} bytes "
                        "of it received)")
        self.shut_down()

    def shut_down(self) -> None:
        """Stop all I/O and end the conversation without a word (the master is gone, or a
        signal came; what went wrong stopping the I/O is logged)."""
        self._halt_for_good()
        self._drop_window_store()
        self.closed = True

    def _halt_for_good(self) -> list[IvyError]:
        """``_halt`` at the session's end: the I/O over, its LUNs let go to another run."""
        problems = self._halt()
        self.locks.release()
        return problems

    def _halt(self) -> list[IvyError]:
        """Stop all I/O (``Backend.halt``); returns what went wrong on the way, one error per
        problem (logged here; the caller tells the master), none when it ended cleanly."""
        try:
            self.backend.halt()
        except IvyError as exc:
            problems: list[IvyError] = list(getattr(exc, "errors", ()) or [exc])
            for problem in problems:
                log.error("stopping all I/O: %s", problem)
            return problems
        return []

    def _context(self, exc: BaseException | None) -> tuple[str, str]:
        """The first workload and LUN that ``exc`` (or an exception it was raised from)
        names: ``(workload_id, lun)``, each ``""`` when unknown."""
        while exc is not None:
            workloads = tuple(getattr(exc, "workloads", ()) or ())
            luns = tuple(getattr(exc, "luns", ()) or ())
            if workloads or luns:
                wid = str(workloads[0]) if workloads else ""
                lun = str(luns[0]) if luns else (
                    self.lun_of[wid].path if wid in self.lun_of else "")
                return wid, lun
            exc = exc.__cause__
        return "", ""

    def _host_error(self, kind: str, message: str, exc: BaseException | None = None) -> Error:
        """An ``Error`` that answers no request: its message names this host (as
        ``_refuse``'s do), its ``workload_id`` and ``lun`` the first that ``exc`` names."""
        named = f"host {self.host}: "
        if not message.startswith(named):
            message = named + message
        wid, lun = self._context(exc)
        return Error(kind=kind, message=message, workload_id=wid, lun=lun)

    def _send_halt_problems(self, step: _Step | None, problems: list[IvyError]) -> None:
        """Tell the master what went wrong stopping the I/O (``_halt``), an ``Error`` each,
        before the ``Stopped`` (or ``Bye``) that follows: they are the ending step's."""
        where = f"at the end of step {step.number}" if step is not None else "stopping all I/O"
        for problem in problems:
            self.send(self._host_error("io", f"{where}: {problem}", problem))

    def _drop_window_store(self) -> None:
        if self.window_store is not None:
            self.window_store.close()
            self.window_store = None

    def _fatal(self, kind: str, message: str) -> None:
        """End the conversation with a fatal ``Error`` (best effort: the master may be gone);
        the process then exits non-zero (``failure``)."""
        log.error("%s", message)
        problems = self._halt_for_good()
        if problems:  # nothing lost: the fatal Error is the last word
            message += f" (and stopping all I/O: {'; '.join(str(p) for p in problems)})"
        self.failure = f"{kind}: {message}"
        if self.conv.state is not State.CLOSED:
            with contextlib.suppress(ProtocolError, OSError):
                self.send(Error(kind=kind, message=message, fatal=True))
        self.closed = True

    def watchdog_s(self, min_s: float) -> float:
        """How long the slave may hear nothing from its master before it takes the master for
        gone (``slave.main``'s watchdog): ``WATCHDOG_SUBINTERVALS`` of the longest subinterval
        a step has had (a result each, a grant each, and the deadline between), and never
        less than ``min_s``. A live master is never silent that long: it sends a ``Ping``
        whenever it has said nothing for a quarter of ``min_s``
        (``master.hosts.session.keepalive_s``)."""
        return max(min_s, WATCHDOG_SUBINTERVALS * self.longest_subinterval_ns / 1e9)

    def grant_overdue(self) -> bool:
        """Whether ``on_tick`` would end the step now for want of the master's grant: the
        subinterval to collect has ended and the one after it was not granted."""
        step = self.step
        return (step is not None and self.clock() >= step.end_of(step.next_result)
                and not step.credit.may_follow(step.next_result))

    def next_wakeup_ns(self) -> int | None:
        """When ``on_tick`` next has work: the end of the next subinterval to collect."""
        if self.step is None:
            return None
        if self.devices is not None and self.step.dev_before is None:
            return self.step.start_ns  # the devices' first sample, at the step's start
        return self.step.end_of(self.step.next_result)

    # ------------------------------------------------------------------ handlers
    def _on_hello(self, msg: Hello) -> None:
        self.host = msg.host
        if self.startup_error is not None:
            self._fatal("config", self.startup_error)
            return
        self.send(
            HelloReply(
                protocol_version=PROTOCOL_VERSION,
                ivypy_version=__version__,
                hostname=platform.node(),
                kernel=platform.release(),
                python_version=platform.python_version(),
                numpy_version=np.__version__,
                cores=os.cpu_count() or 1,
                pid=os.getpid(),
                slave_time_ns=self.clock(),
                io_loop=(f"compiled ({compiled_loop.origin()})" if compiled_loop.available()
                            else f"python: {compiled_loop.why_not()}"),
            )
        )

    def _on_ping(self, msg: Ping) -> None:
        self.send(Pong(seq=msg.seq, master_send_ns=msg.master_send_ns, slave_ns=self.clock()))

    def _layout_progress(self, path: str) -> Callable[[int, int], None]:
        """Tell the master how a file's layout goes: at most once a second, and at its end.
        Abandons the layout (``Stopping``: ``lunmod.lay_out`` then leaves no file at
        ``path``) when the slave is to stop."""
        started = self.clock()
        told = [started]

        def progress(done: int, total: int) -> None:
            self._check_stopping(f"layout of file LUN {path} abandoned after {done:,} of "
                                 f"{total:,} bytes, nothing left at its path")
            now = self.clock()
            if done < total and now - told[0] < 1_000_000_000:
                return
            told[0] = now
            rate = done / max(now - started, 1) * 1e3
            self.event("INFO", f"layout of file LUN {path}: {100 * done / total:.0f} % "
                       f"({done / 2**30:.2f} of {total / 2**30:.2f} GiB, {rate:.0f} MB/s)",
                       kind="layout", lun=path)

        return progress

    def _lun_warning(self, path: str) -> Callable[[str], None]:
        """A warning about file LUN ``path`` for the master's console and events.csv."""
        return lambda message: self.event("WARNING", message, kind="lun", lun=path)

    def _on_discover(self, msg: DiscoverLuns) -> None:
        ignore = {os.getpid(), *self._child_pids()}
        found: list[lunmod.LunInfo] = []
        try:
            found = lunmod.discover_block_devices(ignore_pids=ignore, paths=msg.devices)
        except OSError as exc:
            self.event("WARNING", f"block device discovery failed: {exc}")
        for req in msg.files:
            self._check_stopping(f"discovery abandoned before file LUN {req.get('path')}")
            try:
                # a file with data before this look and ivypy's by its mark: the run says why
                # it writes it without allow_write, once
                try:
                    had_data = os.stat(str(req["path"])).st_size > 0
                except OSError:
                    had_data = False
                found.append(
                    lunmod.file_lun(
                        str(req["path"]),
                        req.get("size_bytes"),
                        bool(req.get("create", False)),
                        ignore_pids=ignore,
                        created_as=str(req.get("created_as") or ""),
                        layout=str(req.get("layout") or "none"),
                        progress=self._layout_progress(str(req["path"])),
                        warn=self._lun_warning(str(req["path"])),
                    )
                )
                note = own_file_note(found[-1])
                if had_data and note and found[-1].path not in self._created_files:
                    self.event("INFO", note, kind="lun", lun=found[-1].path)
            except (IvyError, OSError, KeyError, TypeError, ValueError) as exc:
                # a refusal of lunmod's names the file already; the master adds the host
                self.send(
                    Error(
                        kind="config",
                        message=str(exc) if isinstance(exc, PreflightError)
                        else f"file LUN {req.get('path')}: {exc}",
                        seq=msg.seq,
                        lun=str(req.get("path", "")),
                    )
                )
                return
        self._created_files.update(lun.path for lun in found if lun.created)
        boot = lunmod.boot_id()
        found = [replace(lun, identity=lunmod.identity_of(lun, boot))
                 for lun in map(self._ours, found)]
        self.luns = {lun.path: lun for lun in found}
        self._write_checked.clear()
        self.send(
            LunList(
                seq=msg.seq,
                luns=[
                    {"info": lun.to_dict(),
                     # a device that did not answer its probe is not read again (the
                     # engine's O_DIRECT check would wait on it): no engine for it
                     "attributes": {**lun.attributes(), "engine": "unavailable"
                                    if lun.unanswered else self.backend.engine_for(lun)},
                     "in_use": list(in_use_reasons(lun))}
                    for lun in found
                ],
            )
        )

    def _ours(self, lun: lunmod.LunInfo) -> lunmod.LunInfo:
        """``lun``, marked ``created`` when it is a file this run made (described again, it is
        an existing file like any other)."""
        if lun.path in self._created_files and not lun.created:
            return replace(lun, created=True)
        return lun

    @staticmethod
    def _child_pids() -> list[int]:
        import psutil

        return [p.pid for p in psutil.Process().children(recursive=True)]

    def _effective(self) -> int:
        return credit.effective(None if self.step is None else self.step.next_result)

    def _refuse(self, seq: int, kind: str, message: str, workload_id: str, lun: str = "") -> None:
        """Answer request ``seq`` with an ``Error`` naming the workload (and LUN); its message
        names this host (``host h1: ...``, as the preflight's own refusals do)."""
        named = f"host {self.host}: "
        if not message.startswith(named):
            message = named + message
        self.send(Error(kind=kind, message=message, seq=seq, workload_id=workload_id, lun=lun))

    def _on_create(self, msg: CreateWorkload) -> None:
        wid = msg.workload_id
        if wid in self.params:
            self._refuse(msg.seq, "config", f"workload {wid} exists already", wid, msg.lun_path)
            return
        try:
            params = from_wire(msg.params)
            lun = self.luns.get(msg.lun_path)
            if lun is None or (params.writes and not msg.allow_write):
                # a write is checked against the LUN as it is now, not as discovery saw it
                # (maybe hours ago, and without the exclusive-open probe)
                # a file LUN keeps the size discovery gave it (maybe less than the file)
                size = lun.size_bytes if lun is not None and lun.kind == lunmod.KIND_FILE else None
                # a LUN gone or shrunk since discovery is refused saying so
                lun = self._write_checked.get(msg.lun_path) or self._ours(self.describe(
                    msg.lun_path, size, ignore_pids={os.getpid(), *self._child_pids()},
                    host=self.host, discovered_as=lun.kind if lun is not None else ""))
                if params.writes:
                    self._write_checked[msg.lun_path] = lun
            self.luns[lun.path] = lun
            verdict = require_ok(lun, params.writes, msg.allow_write, self.host)
            _check_fits(params, lun)
            verify = _verify_target(msg.verify, params, lun, self.host)
            loaded = None if verify is None else self._loaded_map(verify)
            crashes = (None if verify is None or loaded is None
                       else self.crash_facts.get(verify["lun"]))
            self.locks.take(lun.path, msg.shared, self.host)  # another run's LUN is refused
            given = None if loaded is None else LoadedMap(loaded, crashes or ())
            info = self.backend.create(wid, lun, params, engine=msg.engine,
                                       fallback=msg.allow_engine_fallback, verify=verify,
                                       verify_map=given)
            if verify is not None:
                self.loaded_maps.pop(verify["lun"], None)  # the worker's map holds it now
        except PreflightError as exc:
            self._refuse(msg.seq, "preflight", str(exc), wid, msg.lun_path)
            return
        except IoEngineError as exc:  # no engine for this LUN: a fact of the host, like preflight
            reason = getattr(exc, "reason", str(exc))  # a worker's, without its worker's name
            self._refuse(msg.seq, "preflight", f"workload {wid}: {reason}", wid, msg.lun_path)
            return
        except (IvyError, OSError, ValueError, TypeError) as exc:
            self._refuse(msg.seq, "config", f"workload {wid}: {exc}", wid, msg.lun_path)
            return
        if verdict.overridden:
            info = {**info, "preflight_warning": verdict.message()}
        self.params[wid] = params
        self.lun_of[wid] = lun
        self.send(Ack(seq=msg.seq, effective_subinterval=self._effective(), info=info))

    def _edited(self, wid: str, raw: dict[str, Any]) -> WorkloadParams:
        """The parameters ``wid`` would run with after edit ``raw``; ``ValueError`` if refused."""
        base = self.params.get(wid)
        if base is None:
            raise ValueError(f"no workload {wid} on this host")
        if len(raw) == 1 and raw.get("iops") is not None:  # DFC's edit, of every workload
            return base.with_rate(float(raw["iops"]))  # a rate fits wherever base did
        params = from_wire(raw, base)
        if params.writes and not base.writes:
            raise ValueError(
                "an edit cannot turn a read-only workload into one that writes (that needs "
                "the write preflight): delete the workload and create it again"
            )
        _check_fits(params, self.lun_of[wid])
        return params

    def _on_edit(self, msg: EditWorkload) -> None:
        wid = msg.workload_id
        try:
            params = self._edited(wid, msg.params)
            self.backend.edit(wid, params)
        except (IvyError, ValueError, TypeError) as exc:
            self._refuse(msg.seq, "config", f"edit of {wid}: {exc}", wid)
            return
        self.params[wid] = params
        self.send(Ack(seq=msg.seq, effective_subinterval=self._effective()))

    def _on_load_map(self, msg: LoadMap) -> None:
        """Part of a LUN's map, kept for the LUN's first verified create (``LoadMap``), or,
        where a worker holds the LUN's map already, put into it."""
        part = np.frombuffer(msg.data, dtype=np.uint8)
        if not 0 <= msg.lun < 1 << 16 or msg.first_block < 0:
            self._refuse(msg.seq, "config", f"LoadMap: LUN {msg.lun}, first block "
                         f"{msg.first_block}: out of range", "")
            return
        try:
            crashes = crashes_from_wire(msg.crashes)
            # a LUN whose map a worker holds already: the master's replaces it there (the
            # worker keeps the crashes it was given)
            replaced = self.backend.load_map_part(msg.lun, msg.first_block, msg.data)
        except ValueError as exc:
            self._refuse(msg.seq, "config", f"LoadMap: LUN {msg.lun}: {exc}", "")
            return
        if replaced:
            self.send(Ack(seq=msg.seq, effective_subinterval=-1, info={"replaced": True}))
            return
        held = self.loaded_maps.get(msg.lun, np.zeros(0, dtype=np.uint8))
        end = msg.first_block + part.size
        if end > held.size:
            grown = np.zeros(end, dtype=np.uint8)
            grown[: held.size] = held
            held = grown
        held[msg.first_block : end] = part
        self.loaded_maps[msg.lun] = held
        self.crash_facts[msg.lun] = crashes
        self.send(Ack(seq=msg.seq, effective_subinterval=-1, info={"blocks": int(held.size)}))

    def _loaded_map(self, target: dict[str, int]) -> npt.NDArray[np.uint8] | None:
        """The parts ``LoadMap`` gave of the target's LUN, as its map (``ValueError`` for a part
        past its size), or None."""
        held = self.loaded_maps.get(target["lun"])
        if held is None:
            return None
        blocks = target["size_bytes"] // verify.MAP_BLOCK_BYTES
        if held.size > blocks:
            raise ValueError(f"LoadMap: LUN {target['lun']}'s map has {held.size} blocks, "
                             f"past its {blocks}")
        out = np.zeros(blocks, dtype=np.uint8)
        out[: held.size] = held
        return out

    def _on_verify_lun(self, msg: VerifyLun) -> None:
        """Read back every block of a LUN its map (``LoadMap``) holds, checked
        (``slave.readback``), saying how it goes (``VerifyFound``) and then ``Ack`` with its
        totals; alone on the host (no workload: a run's writes would race it)."""
        path = msg.lun_path
        if self.params:
            self._refuse(msg.seq, "config", f"a read-back of {path} runs with no workload on "
                         f"the host, and it has {len(self.params)}", "", lun=path)
            return
        try:
            target = verify.check_target(dict(msg.target))
            held = self._loaded_map(target)
        except ValueError as exc:
            self._refuse(msg.seq, "config", f"read-back of {path}: {exc}", "", lun=path)
            return
        if held is None:
            self._refuse(msg.seq, "config", f"read-back of {path}: no map of LUN "
                         f"{target['lun']} was given (LoadMap)", "", lun=path)
            return
        crashes = self.crash_facts.get(target["lun"], [])
        try:  # another run writing it would be read as damage: one that holds it is refused
            self.locks.take(path, True, self.host)
        except PreflightError:
            self._refuse(msg.seq, "preflight", f"read-back of {path}: another ivypy run holds "
                         "the LUN for itself (its writes would read as damage): verify once "
                         "that run has ended", "", lun=path)
            return

        def say(found: readback.Found) -> None:
            self.send(VerifyFound(msg.seq, found.blocks_done, found.blocks_total,
                                  found.bytes_read, found.extents.tobytes(), found.kept))

        def check(done: int, total: int) -> None:
            self._check_stopping(f"read-back of {path} abandoned after {done:,} of {total:,} "
                                 "blocks")

        try:
            done = readback.read_back(path, target, held, crashes=crashes,
                                      kept_max=max(0, msg.kept_max),
                                      say=say, check=check, clock=self.clock)
        except readback.ReadBackError as exc:
            self._refuse(msg.seq, exc.kind, str(exc), "", lun=path)
            return
        except RuntimeError as exc:  # no compiled loop: nothing here can check
            self._refuse(msg.seq, "preflight", f"host {self.host}: LUN {path}: a read-back "
                         f"needs the compiled loop: {exc}", "", lun=path)
            return
        self.loaded_maps.pop(target["lun"], None)
        self.crash_facts.pop(target["lun"], None)
        self.send(Ack(seq=msg.seq, effective_subinterval=-1, info=done.info()))

    def _on_edits(self, msg: EditWorkloads) -> None:
        """Every edit is checked before any is made: one refused refuses the request."""
        staged: dict[str, WorkloadParams] = {}
        for entry in msg.edits:  # each a list (the codec checks that much)
            wid = entry[0] if entry else "?"
            try:
                if len(entry) != 2 or not isinstance(wid, str) or not isinstance(entry[1], dict):
                    raise ValueError(f"an edit is [workload_id, params], not {entry!r:.80}")
                if wid in staged:
                    raise ValueError("named twice in one request")
                staged[wid] = self._edited(wid, entry[1])
            except (IvyError, ValueError, TypeError) as exc:
                self._refuse(msg.seq, "config", f"edit of {wid}: {exc} (no edit of the "
                             f"{len(msg.edits)} in this request was made)", str(wid))
                return
        try:
            self.backend.edit_many(list(staged.items()))
        except IvyError as exc:  # checked above: the backend lost a workload
            self._refuse(msg.seq, "internal", f"edits: {exc} (none of this request was made)",
                         "")
            return
        self.params.update(staged)
        self.send(Ack(seq=msg.seq, effective_subinterval=self._effective(),
                      info={"edited": len(staged)}))

    def _on_delete(self, msg: DeleteWorkload) -> None:
        wid = msg.workload_id
        if wid not in self.params:
            self._refuse(msg.seq, "config", f"no workload {wid} on this host", wid)
            return
        self.backend.delete(wid)
        del self.params[wid]
        self.lun_of.pop(wid, None)
        self.send(Ack(seq=msg.seq, effective_subinterval=self._effective()))

    def _on_go(self, msg: Go) -> None:
        self._write_checked.clear()
        self._drop_window_store()
        if msg.subinterval_ns <= 0:
            self._fatal("protocol", f"Go with subinterval_ns {msg.subinterval_ns}")
            return
        try:
            plan = parse_plan(msg.rollups, set(self.params))
        except ValueError as exc:
            self._fatal("protocol", f"Go of step {msg.step}: {exc}")
            return
        self.longest_subinterval_ns = max(self.longest_subinterval_ns, msg.subinterval_ns)
        self.window_store = WindowStore(msg.step, msg.keep_from, msg.keep_to, msg.fold)
        self.step = _Step(
            msg.step, msg.start_ns, msg.subinterval_ns, cpu_before=self.cpu.snapshot(),
            plan=plan,
        )
        self._resolve_devices()  # before the start boundary: a sample then only reads
        try:
            self.backend.go(msg.start_ns, msg.subinterval_ns, granted=credit.GO_GRANTS)
        except IvyError as exc:
            self._end_step_with_error("io", f"could not start step {msg.step}: {exc}", exc)

    def _on_continue(self, msg: Continue) -> None:
        if self.step is None:
            return  # crossed a Stopped we sent
        if self.step.credit.grant(msg.subinterval):
            try:
                self.backend.grant(msg.subinterval)
            except IvyError as exc:
                self._end_step_with_error("io", f"subinterval {msg.subinterval}: {exc}", exc)

    def _on_stop(self, msg: Stop) -> None:
        if self.step is None:
            return
        last = self.step.credit.stop(msg.after_subinterval, self.step.next_result)
        self.backend.stop_after(last)
        if last < self.step.next_result:
            self._finish_step()

    def _on_window(self, msg: WindowRequest) -> None:
        store = self.window_store
        try:
            if store is None or store.step != msg.step:
                raise WindowError(f"step {msg.step}'s subintervals are not kept (a slave keeps "
                                  "those of its last step, until the next Go)")
            ids, batch = store.window(msg.first, msg.last)
        except WindowError as exc:
            self.send(Error(kind="config", message=str(exc), seq=msg.seq))
            return
        self.send(WindowResult(seq=msg.seq, step=msg.step, first=msg.first, last=msg.last,
                               workload_ids=ids, stats=dict(batch.to_wire())))

    def _on_bye(self, msg: Bye) -> None:
        problems = self._halt_for_good()
        self._drop_window_store()
        step, self.step = self.step, None
        self._send_halt_problems(step, problems)
        self.send(Bye(reason="master said bye"))
        self.closed = True

    # ------------------------------------------------------------------ the clock
    def on_tick(self, most: int | None = None) -> None:
        """Collect and send every subinterval that has ended (``most`` of them at most);
        enforce Continue."""
        step = self.step
        if (step is not None and self.devices is not None and step.dev_before is None
                and self.clock() >= step.start_ns):
            step.dev_before = self._sample_devices(step.start_ns)
        while (
            step is not None and self.step is step and self.clock() >= step.end_of(step.next_result)
        ):
            k = step.next_result
            if not step.credit.may_follow(k):
                self._end_step_with_error(
                    "late",
                    f"master late: no Continue for subinterval {k + 1} of step {step.number} "
                    f"before it started; all I/O stopped",
                )
                return
            # the devices' counters first: as near the boundary as the loop woke, and before
            # waiting for the workers' buffers
            dev_after = self._sample_devices(step.end_of(k))
            try:
                got = self.backend.collect(k, step.end_of(k) + self.collect_grace_ns)
            except MasterLateError as exc:
                self._end_step_with_error("late", str(exc), exc)
                return
            except IvyError as exc:
                self._end_step_with_error("io", f"subinterval {k}: {exc}", exc)
                return
            try:
                self._send_result(step, k, got, dev_after)
            except ValueError as exc:  # the plan or the kept window no longer fit the workloads
                self._end_step_with_error("internal", f"subinterval {k}: {exc}")
                return
            step.next_result = k + 1
            try:
                self.backend.release(k)
            except IvyError as exc:
                self._end_step_with_error("io", f"after subinterval {k}: {exc}", exc)
                return
            if step.credit.ends_with(k):
                self._finish_step()
                return
            if most is not None:
                most -= 1
                if most <= 0:
                    return

    def _send_result(self, step: _Step, k: int, got: Collected,
                     dev_after: devstats.Sample | None = None) -> None:
        snap = self.cpu.snapshot()
        cpu = self.cpu.difference(step.cpu_before, snap) if step.cpu_before else {}
        step.cpu_before = snap
        for text in got.events:
            self.event("WARNING", text)
        batch = got.stats if isinstance(got.stats, StatsBatch) else StatsBatch.from_stats(got.stats)
        ids = list(got.workload_ids)
        rollups = self._rollup_parts(step, ids, batch)
        if self.window_store is not None:
            self.window_store.add(k, ids, batch)
        devices = self._device_deltas(step, ids, batch, dev_after)
        interlock = [
            {**il, "switch_ns": step.end_of(k) + s}
            for il, s in zip(got.interlock, got.switch_ns, strict=False)
        ]
        self.send(
            SubintervalResult(
                step=step.number,
                subinterval=k,
                start_ns=step.end_of(k - 1),
                end_ns=step.end_of(k),
                workload_ids=ids,
                rollups=rollups,
                cpu=cpu,
                interlock=interlock,
                send_ns=self.clock(),
                io_errors=got.io_errors[:20],
                devices=devices,
                verify=got.verify,
            )
        )

    # ------------------------------------------------------------------ device counters
    def _workload_luns(self) -> list[lunmod.LunInfo]:
        return list({lun.path: lun for lun in self.lun_of.values()}.values())

    def _resolve_devices(self) -> None:
        """Find the device under each LUN with workloads not seen before; say once per LUN
        where there is none."""
        if self.devices is None:
            return
        for path, why in self.devices.resolve(self._workload_luns()):
            self.event("WARNING", f"LUN {path} has no device counters: {why}; its device "
                       "columns stay empty", kind="device", lun=path)

    def _sample_devices(self, boundary_ns: int) -> devstats.Sample | None:
        if self.devices is None:
            return None
        self._resolve_devices()  # a workload created during the step (found at once else)
        luns = self.devices.devices(lun.path for lun in self._workload_luns())
        return self.devices.take(luns, boundary_ns, self.clock)

    def _device_deltas(self, step: _Step, ids: list[str], batch: StatsBatch,
                       dev_after: devstats.Sample | None) -> list[dict[str, Any]]:
        """Subinterval's ``DeviceDelta``s (wire dicts) from the samples at its boundaries,
        with ivypy's own I/Os on each device's LUNs; a device without one is said once per
        step."""
        before, step.dev_before = step.dev_before, dev_after or step.dev_before
        if self.devices is None or before is None or dev_after is None:
            return []
        ops_by_lun: dict[str, tuple[int, int]] = {}
        per_workload = batch.counters[:, :, OPS].sum(axis=1).tolist()
        bytes_per_workload = batch.counters[:, :, BYTES].sum(axis=1).tolist()
        for wid, ops, nbytes in zip(ids, per_workload, bytes_per_workload, strict=True):
            lun = self.lun_of.get(wid)
            if lun is not None:
                o, b = ops_by_lun.get(lun.path, (0, 0))
                ops_by_lun[lun.path] = (o + int(ops), b + int(nbytes))
        luns_of = self.devices.devices(lun.path for lun in self._workload_luns())
        found, why = devstats.deltas(before, dev_after, luns_of, ops_by_lun, self.devices.name)
        for devno, reason in why.items():
            if devno not in step.dev_told:
                step.dev_told.add(devno)
                self.event("WARNING", f"device {self.devices.name(devno)} ({devno}) under "
                           f"LUNs {', '.join(luns_of[devno])}: {reason}; no device counters "
                           f"from subinterval {step.next_result}", kind="device",
                           lun=luns_of[devno][0])
        return [d.to_wire() for d in found]

    def _rollup_parts(self, step: _Step, ids: list[str], batch: StatsBatch
                      ) -> list[dict[str, Any]]:
        key = tuple(ids)
        if step.group_of is None or step.group_of[0] != key:
            step.group_of = (key, group_maps(step.plan, ids))
        return rollup_parts(step.plan, step.group_of[1], batch)

    def _finish_step(self) -> None:
        """The step's end: all I/O stopped, then ``Stopped``, after an ``Error`` for each
        thing that went wrong stopping it (I/Os still in flight, a worker stuck or dead)."""
        step = self.step
        if step is None:
            return
        problems = self._halt()
        self.step = None
        self._send_halt_problems(step, problems)
        self.send(Stopped(step=step.number, last_subinterval=step.next_result - 1,
                          verify=self.backend.final_verify()))

    def _end_step_with_error(self, kind: str, message: str,
                             exc: BaseException | None = None) -> None:
        """End the step on an error (``exc``, when one, names its workload and LUN): all I/O
        stopped, its ``Error``, one for each thing that went wrong stopping the I/O, then
        ``Stopped``."""
        log.error("%s", message)
        problems = self._halt()
        step = self.step
        self.step = None
        self.send(self._host_error(kind, message, exc))
        self._send_halt_problems(step, problems)
        if step is not None:
            self.send(Stopped(step=step.number, last_subinterval=step.next_result - 1,
                              verify=self.backend.final_verify()))


def group_maps(plan: list[PlanEntry], ids: list[str]) -> list[np.ndarray]:
    """Per plan entry, the group of each workload of ``ids`` (the backend's order)."""
    maps = []
    for entry in plan:
        index = {w: g for g, members in enumerate(entry.groups) for w in members}
        unknown = [w for w in ids if w not in index]
        if unknown:
            raise ValueError(f"workloads {unknown[:3]} are in no group of rollup "
                             f"{entry.rollup_type}")
        maps.append(np.fromiter((index[w] for w in ids), dtype=np.intp, count=len(ids)))
    return maps


def rollup_parts(plan: list[PlanEntry], maps: list[np.ndarray],
                 batch: StatsBatch) -> list[dict[str, Any]]:
    """A subinterval added up by the rollup plan (``SubintervalResult.rollups``): per entry,
    the groups' statistics with their merged histograms or their percentile tables; by the
    compiled object where it is loaded, else by numpy, alike bit for bit
    (``compiled_group.rollup``)."""
    entries = [compiled_group.Entry(of, len(entry.groups), entry.histograms)
               for entry, of in zip(plan, maps, strict=True)]
    return [stats.to_wire() for stats in compiled_group.rollup(batch, entries)]


def crashes_from_wire(rows: list[list[int]]) -> list[Crash]:
    """``LoadMap.crashes`` as ``Crash`` facts; ``ValueError`` for a row without its attempt
    or with one out of range."""
    out: list[Crash] = []
    for row in rows:
        if not row or not 0 <= row[0] < 256 or any(s < -1 for s in row[1:]):
            raise ValueError(f"crash {row!r:.60}: not [attempt 0-255, serials >= -1 ...]")
        out.append((row[0], row[1:]))
    return out


def _verify_target(target: dict[str, int] | None, params: WorkloadParams,
                   lun: lunmod.LunInfo, host: str) -> dict[str, int] | None:
    """A verified workload's target, checked (``protocol.verify.check_target``), or None; its
    blocksize and offsets whole map blocks; the compiled loop here (its checks run there and
    only there). Raises ``ValueError`` (config) or ``PreflightError`` (the host's loop)."""
    if target is None:
        return None
    verify.check_target(target)
    if params.blocksize_bytes % verify.MAP_BLOCK_BYTES:
        raise ValueError(f"a verified workload's blocksize must be a multiple of "
                         f"{verify.MAP_BLOCK_BYTES} bytes, not {params.blocksize_bytes}")
    if params.range_start_bytes % verify.MAP_BLOCK_BYTES:  # its I/Os lie on a grid from it
        raise ValueError(f"a verified workload's range must start on a "
                         f"{verify.MAP_BLOCK_BYTES}-byte boundary, not at "
                         f"{params.range_start_bytes}")
    if target["first_bytes"] + target["size_bytes"] > lun.size_bytes:
        raise ValueError(f"verify: the map's range {target['first_bytes']} + "
                         f"{target['size_bytes']} passes the LUN's {lun.size_bytes} bytes")
    if not compiled_loop.available():
        raise PreflightError(f"host {host}: LUN {lun.path}: data verification needs the "
                             f"compiled loop, which this host cannot run: "
                             f"{compiled_loop.why_not()}", host=host, lun=lun.path)
    return target


def _check_fits(params: WorkloadParams, lun: lunmod.LunInfo) -> None:
    """Refuse parameters the I/O sequencer cannot run on this LUN (``ValueError``)."""
    from slave.sequencer import check_fits

    check_fits(params, lun_size_bytes=lun.size_bytes, logical_block_bytes=lun.logical_block_bytes)


def stderr_logging(level: int = logging.INFO) -> None:
    """Logs go to stderr (the master relays them); stdout is the wire."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
