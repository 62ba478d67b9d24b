"""The worker process: one engine loop serving many workloads, driven by commands from the
slave's ``WorkerPool`` (``slave.worker``) over a pipe, with its statistics in shared memory.

Owns the worker's side of the pool: the commands (create, edit, rates, delete, go, stop, exit),
the changes staged for the next boundary, the LUNs' descriptors shared by its workloads, the
buffer-state handshake at each boundary (a next buffer not ``READY_TO_RUN`` means the master is
late: the worker stops its I/O and reports it), the report of a run that failed (with the I/Os
it left in flight, by workload: a drain past its limit) and the process's own set-up (it dies
with the slave, keeps none of the slave's descriptors, and sets its timer slack). It must not
speak the master's protocol: everything goes through the pool.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol import credit
from protocol.errors import IoEngineError, IvyError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from protocol.verify import MAP_BLOCK_BYTES
from slave.engine import EngineDecision, choose_engine, fallback_warning, files, refusal
from slave.engine.base import SlotTable, registering
from slave.engine.fake import FakeEngine, constant_ns, exponential_ns
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine, UringEngine
from slave.engine.threadpool import ThreadPoolEngine
from slave.engine.verify_state import LoadedMap, VerifiedLun, WorkloadVerify, verify_report
from slave.sequencer import check_fits

log = logging.getLogger(__name__)

# a worker's buffer states (``slave.worker``'s docstring draws their order), in shared words
FREE, READY_TO_RUN, RUNNING, READY_TO_SEND, SENDING = 0, 1, 2, 3, 4
STATE_NAMES: Final = ("free", "ready to run", "running", "ready to send", "sending")
CTRL_WORDS: Final = 8  # per worker: (state, subinterval) for buffer 0, then buffer 1
_PR_SET_PDEATHSIG: Final = 1
_PR_SET_TIMERSLACK: Final = 29
#: A worker's timer slack (``PR_SET_TIMERSLACK``): how late the kernel may end its timed waits.
#: The engine loop waits in ``io_getevents`` with a timeout until a paced workload's next I/O is
#: due, and the default slack of 50 us made it wake up to 50 us late: on the 2-core VM a 5 us
#: sleep took 62 us (p50) with the default and 9 us with 1 ns. At 5,000 paced IOPS the
#: response-time p50 (scheduled -> completion) fell from 91 to 48 us with 1 ns (5 interleaved
#: runs). A load generator wants its timers exact; the power saving slack buys is not ours to take.
WORKER_TIMER_SLACK_NS: Final = 1


def _make_fake(spec: str) -> Any:
    """``fake[:exp|const[:value_ns[:error_every[:short_every]]]]``."""
    parts = spec.split(":")[1:]
    dist = parts[0] if parts else "exp"
    value = int(parts[1]) if len(parts) > 1 else 100_000
    error_every = int(parts[2]) if len(parts) > 2 else 0
    short_every = int(parts[3]) if len(parts) > 3 else 0
    latency = constant_ns(value) if dist == "const" else exponential_ns(value)

    def make(table: SlotTable) -> FakeEngine:
        return FakeEngine(table, latency, error_every=error_every, short_every=short_every)

    return make


class _WorkerControl:
    """The worker side: commands from the pipe, staged changes, the buffer handshake."""

    def __init__(
        self,
        index: int,
        cmd: Connection,
        reply: Connection,
        ctrl: npt.NDArray[np.int64],
        stats_region: npt.NDArray[np.int64],
    ) -> None:
        self.index = index
        self.cmd = cmd
        self.reply = reply
        self.ctrl = ctrl
        self.stats_region = stats_region
        self.loop = EngineLoop(name=f"worker {index}")
        self.loop.register_engine_kind("libaio", LibaioEngine)
        self.loop.register_engine_kind("threadpool", ThreadPoolEngine)
        self.loop.register_engine_kind("io_uring", UringEngine)
        self.staged: list[tuple[str, Any]] = []
        self.fds: dict[tuple[str, str, bool], list[int]] = {}  # key -> [fd, refcount]
        self.specs: dict[str, WorkloadSpec] = {}
        # each workload's parameters as last sent (staged, or applied): a "rates" message
        # gives only the new rate of these
        self.latest: dict[str, WorkloadParams] = {}
        self.running = False
        self.go_args: tuple[int, int] | None = None
        self.exit = False
        self.in_run = False
        self.late: str | None = None
        self.parent = os.getppid()

    # ------------------------------------------------------------------ commands
    def handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "create":
            self._create(*msg[1:])
        elif kind == "edit":
            self._edit(msg[1], msg[2])
        elif kind == "edits":
            for wid, params in msg[1]:
                self._edit(wid, params)
        elif kind == "rates":
            self._rates(msg[1])
        elif kind == "delete":
            self._stage("delete", msg[1])
        elif kind == "go":
            self.go_args = (msg[1], msg[2])
        elif kind == "stop":
            self.loop.request_stop()
            self.go_args = None
            if not self.in_run:
                self.reply.send(("stopped",))
        elif kind == "exit":
            self.exit = True
            self.loop.request_stop()
        elif kind == "load_map":
            v = self.loop.verify
            try:
                if v is None:
                    raise KeyError(msg[1])
                v.load_part(msg[1], msg[2], msg[3])
            except (KeyError, ValueError) as exc:
                self.reply.send(("error", "command", f"load_map of LUN {msg[1]}: {exc}"))
        else:
            self.reply.send(("error", "command", f"unknown command {kind!r}"))

    def _stage(self, what: str, arg: Any) -> None:
        if self.loop.subinterval_index >= 0:
            self.staged.append((what, arg))
        else:
            self._apply(what, arg, None)

    def _apply_staged(self, at_ns: int | None) -> None:
        """The staged changes, in order, with one look over all workloads at the end; each
        run of edits in one call (``EngineLoop.edit_workloads``: DFC's edit of every
        workload's rate is done in place)."""
        staged, self.staged = self.staged, []
        with self.loop.changes():
            edits: list[tuple[str, WorkloadParams]] = []
            for what, arg in staged:
                if what == "edit":
                    edits.append(arg)
                    continue
                self._apply_edits(edits, at_ns)
                self._apply(what, arg, at_ns)
            self._apply_edits(edits, at_ns)

    def _apply_edits(self, edits: list[tuple[str, WorkloadParams]], at_ns: int | None) -> None:
        if not edits:
            return
        self.loop.edit_workloads(edits, at_ns)  # it sets each spec's params (ours, shared)
        edits.clear()

    def _apply(self, what: str, arg: Any, at_ns: int | None) -> None:
        if what == "add":
            self.loop.add_workload(arg, at_ns)
        elif what == "edit":
            wid, params = arg
            self.loop.edit_workload(wid, params, at_ns)  # sets the spec's params
        elif what == "delete":
            self.loop.remove_workload(arg)
            self.specs.pop(arg, None)
            self.latest.pop(arg, None)

    def _open(self, path: str, kind: str, writable: bool, flags: int) -> int:
        key = (path, kind, writable)
        entry = self.fds.get(key)
        if entry is None:
            entry = [files.open_lun(path, writable=writable, extra_flags=flags), 0]
            self.fds[key] = entry
        entry[1] += 1
        return entry[0]

    def _release(self, key: tuple[str, str, bool]) -> None:
        entry = self.fds.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                reg = registering(self.loop.engine(key[1]))
                if reg is not None:  # io_uring's registration holds the file open
                    reg.forget_file(entry[0])
                with contextlib.suppress(OSError):
                    os.close(entry[0])
                del self.fds[key]

    def _create(
        self,
        wid: str,
        slot: int,
        path: str,
        engine_choice: str,
        params: WorkloadParams,
        lbs: int | None,
        size: int | None,
        fallback: bool = False,
        verify: dict[str, int] | None = None,
        verify_map: LoadedMap | None = None,
    ) -> None:
        """Create a workload on its engine and answer ``created`` with the engine it runs on
        (and a warning, if any) or ``failed`` with the reason. A LUN chosen for libaio whose
        context cannot be had or grown (``fs.aio-max-nr``) is refused, or, with
        ``fallback``, runs on the thread pool: never silently elsewhere; one asked for
        io_uring whose ring cannot be had is refused."""
        try:
            geometry = files.probe(path) if lbs is None or size is None else None
            lbs = lbs if lbs is not None else geometry.logical_block_bytes  # type: ignore[union-attr]
            size = size if size is not None else geometry.size_bytes  # type: ignore[union-attr]
            check_fits(params, lun_size_bytes=size, logical_block_bytes=lbs)
            decision = choose_engine(engine_choice, path, lbs, fallback=fallback)
            target = None if verify is None else WorkloadVerify(
                VerifiedLun(verify["lun"], verify["first_bytes"], verify["size_bytes"],
                            verify["run_key"], verify["attempt"]), verify["writer"],
                *(() if verify_map is None else (verify_map.map, verify_map.crashes)))
            try:
                self._add(wid, slot, path, decision.kind, engine_choice, params, lbs, size,
                          target)
            except IoEngineError as exc:
                if decision.kind == "io_uring":  # its ring, or a registration, refused
                    raise IoEngineError(
                        f"LUN {path}: the io_uring engine is unavailable: {exc}") from exc
                if decision.kind != "libaio":
                    raise
                if not (fallback and engine_choice == "auto"):
                    raise IoEngineError(refusal(path, str(exc))) from exc
                decision = EngineDecision("threadpool", fallback_warning(path, str(exc)))
                self._add(wid, slot, path, decision.kind, engine_choice, params, lbs, size,
                          target)
        except (IoEngineError, ValueError, OSError) as exc:
            self.reply.send(("failed", wid, str(exc)))
            return
        self.reply.send(("created", wid, decision.kind, decision.warning))

    def _add(self, wid: str, slot: int, path: str, kind: str, engine_choice: str,
             params: WorkloadParams, lbs: int, size: int,
             verify: WorkloadVerify | None = None) -> None:
        """Open the LUN for ``kind`` and add the workload to the loop (at the next boundary
        when running); on failure nothing of it is left (no descriptor, no spec)."""
        if kind == "fake":
            kind = engine_choice  # one fake engine per distinct script
            self.loop.register_engine_kind(kind, _make_fake(engine_choice))
        engine = self.loop.engine(kind)
        key = (path, kind, params.writes)
        fd = self._open(path, kind, params.writes, engine.open_flags)
        n = WorkloadStats.SIZE
        region = self.stats_region
        stats = (
            WorkloadStats(region[(2 * slot) * n : (2 * slot + 1) * n]),
            WorkloadStats(region[(2 * slot + 1) * n : (2 * slot + 2) * n]),
        )
        spec = WorkloadSpec(
            wid, params, engine, fd, size, lbs, stats, on_release=lambda: self._release(key),
            verify=verify,
        )
        self.specs[wid] = spec
        self.latest[wid] = params
        try:
            self._stage("add", spec)
        except BaseException:
            self.specs.pop(wid, None)
            self.latest.pop(wid, None)
            self._release(key)
            raise

    def _rates(self, rates: list[tuple[str, float]]) -> None:
        """Edits of the rate alone of each workload's latest parameters (checked when they
        came: a new rate fits wherever they did), staged as ``_edit`` stages them."""
        latest, stage = self.latest, self._stage
        for wid, iops in rates:
            base = latest.get(wid)
            if base is None:
                self.reply.send(("error", "command", f"edit of unknown workload {wid}"))
                continue
            params = latest[wid] = base.with_rate(iops)
            stage("edit", (wid, params))

    def _edit(self, wid: str, params: WorkloadParams) -> None:
        spec = self.specs.get(wid)
        if spec is None:
            self.reply.send(("error", "command", f"edit of unknown workload {wid}"))
            return
        try:
            if not params.same_but_rate(spec.params):  # a new rate alone fits as before
                check_fits(params, lun_size_bytes=spec.lun_size_bytes,
                           logical_block_bytes=spec.logical_block_bytes)
            if params.writes and not spec.params.writes:
                raise ValueError("an edit cannot turn a read-only workload into one that writes")
            if spec.verify is not None and params.blocksize_bytes % MAP_BLOCK_BYTES:
                raise ValueError(f"a verified workload's blocksize must be a multiple of "
                                 f"{MAP_BLOCK_BYTES} bytes, not {params.blocksize_bytes}")
        except ValueError as exc:
            self.reply.send(("error", "command", f"edit of {wid} refused: {exc}"))
            return
        self.latest[wid] = params
        self._stage("edit", (wid, params))

    # ------------------------------------------------------------------ LoopControl
    def poll(self, loop: EngineLoop) -> None:
        while self.cmd.poll():
            self.handle(self.cmd.recv())

    def poll_fd(self) -> int:
        return self.cmd.fileno()  # readable exactly when ``cmd.poll()`` is true (or closed)

    def boundary(self, loop: EngineLoop, finished_index: int, boundary_ns: int) -> None:
        self.poll(loop)  # everything sent before the boundary counts for it
        nxt = finished_index + 1
        b = 2 * credit.buffer_of(nxt)
        state, sub = int(self.ctrl[b]), int(self.ctrl[b + 1])
        if state != READY_TO_RUN or sub != nxt:
            self.late = (
                f"at the end of subinterval {finished_index} the buffer for subinterval {nxt} "
                f"was not ready to run (it was {STATE_NAMES[state]} for subinterval {sub}): "
                "the master is late"
            )
            loop.request_stop(record=False)
            return
        self.ctrl[b] = RUNNING
        self._apply_staged(boundary_ns)

    def handed_over(
        self,
        loop: EngineLoop,
        finished_index: int,
        switch_done_ns: int,
        handed_over_ns: int,
        io_errors: dict[str, dict[str, int]],
    ) -> None:
        self.ctrl[2 * credit.buffer_of(finished_index)] = READY_TO_SEND
        report = None if loop.verify is None else verify_report(
            loop.verify.take(), loop.verify.ids, loop.confirmed_serials())
        self.reply.send(("ready", finished_index, switch_done_ns, handed_over_ns, io_errors,
                         report))

    def in_flight(self) -> dict[str, int]:
        """After a run that ended with I/Os still in flight (a drain past its limit): how
        many each workload has, by the loop's slots (neither in its free pool nor idle in a
        paced workload's own); those of workloads deleted meanwhile under ``""``. Empty when
        nothing is in flight. Reads the loop's state and changes nothing of it."""
        total = self.loop.in_flight
        if total <= 0:
            return {}
        out: dict[str, int] = {}
        try:
            free = set(self.loop.slots.free)
            for w in self.loop.workloads.live():
                idle = free.union(w.free)
                n = sum(1 for s in w.slots.tolist() if s not in idle)
                if n:
                    out[w.spec.workload_id] = n
        except Exception:  # a diagnosis must not hide the error it comes with
            log.exception("worker %d: cannot tell which workloads' I/Os are in flight",
                          self.index)
            return {"": total}
        rest = total - sum(out.values())
        if rest > 0:
            out[""] = rest
        return out

    # ------------------------------------------------------------------ main
    def serve(self) -> None:
        while not self.exit:
            if self.go_args is None:
                if not self.cmd.poll(0.2):
                    if os.getppid() != self.parent:
                        return  # the slave is gone
                    continue
                self.handle(self.cmd.recv())
                continue
            start_ns, sub_ns = self.go_args
            self.go_args = None
            self.late = None
            self.in_run = True
            try:
                self.loop.run(self, start_ns, sub_ns)
            except Exception as exc:  # report, never die silently
                log.error("worker %d: %s", self.index, traceback.format_exc())
                # with the I/Os it left in flight (a drain past its limit), by workload
                text = str(exc) if isinstance(exc, IvyError) else f"{type(exc).__name__}: {exc}"
                text = "; ".join([text, *getattr(exc, "__notes__", ())])  # the drain's, if any
                self.reply.send(("error", "crash", text, self.in_flight()))
                continue
            finally:
                self.in_run = False
            self._apply_staged(None)
            if self.late is not None:
                self.reply.send(("error", "late", self.late))
            else:  # with what verification found after the last hand-over (the drain)
                v = self.loop.verify
                self.reply.send(("stopped", None if v is None else verify_report(
                    v.take(), v.ids, self.loop.confirmed_serials())))
        self.loop.close()


def _close_inherited_fds(keep: set[int]) -> None:
    """Drop what the fork copied: the slave's protocol stdin/stdout and the other workers'
    pipe ends, so that only the slave holds them (a lingering worker never keeps the master's
    pipe open). stdin becomes /dev/null; stderr (the log) stays."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def worker_main(
    index: int,
    cmd: Connection,
    reply: Connection,
    ctrl: npt.NDArray[np.int64],
    stats_region: npt.NDArray[np.int64],
) -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if libc.prctl(_PR_SET_TIMERSLACK, WORKER_TIMER_SLACK_NS, 0, 0, 0) != 0:
            log.warning("worker %d: cannot set its timer slack to %d ns (%s); paced I/O may be "
                        "submitted up to the default slack late", index, WORKER_TIMER_SLACK_NS,
                        os.strerror(ctypes.get_errno()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the slave decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    _close_inherited_fds(keep={2, cmd.fileno(), reply.fileno()})
    control = _WorkerControl(index, cmd, reply, ctrl, stats_region)
    if os.getppid() != control.parent:  # died before prctl took effect
        return
    with contextlib.suppress(EOFError, OSError):  # the slave closed the pipes: exit
        control.serve()
