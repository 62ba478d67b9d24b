"""Worker processes: each runs one engine loop serving many workloads, with double-buffered
per-workload statistics in shared memory.

Owns ``WorkerPool`` (the slave main loop's only door to I/O): the workers' start and end, the
shared memory of their statistics and buffer states, the slave's side of the buffer-state
handshake and of the worker <-> main messages. The worker process's own side is
``slave.worker_process``. It must not speak the master's protocol, read the network or do
anything on the hot path but hand work to the workers.

API for the slave main loop (all calls from one thread, the one that created the pool)::

    pool = WorkerPool(n_workers=None)            # one worker per usable core; create it early,
                                                 # before any thread is started (workers fork)
    info = pool.create_workload(workload_id, lun_path, engine_choice, params)
                                                 # -> WorkloadInfo(engine=..., warning=...)
    pool.edit_workload(workload_id, params)      # staged; effective at the next boundary
    pool.delete_workload(workload_id)            # staged; effective at the next boundary
    pool.go(start_ns, subinterval_ns)            # host time.monotonic_ns(); subinterval 0 and 1
                                                 # are ready to run
    loop:
        res = pool.collect(k, deadline_ns)       # k = 0, 1, 2 ...: waits until every worker has
                                                 # handed subinterval k over, returns copies:
                                                 # res.batch (StatsBatch, wire-ready, row i is
                                                 # res.workload_ids[i]), res.stats (dense, on
                                                 # demand), res.io_errors {id: {errno: n}},
                                                 # res.interlock (per worker, ns after boundary)
        pool.keep_going()                        # the master said continue: the buffer just
                                                 # collected is ready to run subinterval k + 2
    pool.stop()                                  # ends all I/O promptly (in-flight I/O drained);
                                                 # raises StopError with what went wrong on the
                                                 # way (I/Os still in flight past the drain
                                                 # limit, a worker stuck or dead), so that it
                                                 # is the ending step's
    pool.close()                                 # ends the workers

Buffer states per worker (shared int64 words, one pair per buffer): ``FREE`` -> (``go`` /
``keep_going``) ``READY_TO_RUN`` -> (boundary) ``RUNNING`` -> (boundary) ``READY_TO_SEND`` ->
(``collect``) ``SENDING`` -> ``FREE``. At a boundary a worker switches to the other buffer without
waiting; if that buffer is not ``READY_TO_RUN`` for the next subinterval the master is late: the
worker hands over the finished subinterval, stops its I/O and reports, and the next ``collect``
raises ``WorkerLateError`` (a ``MasterLateError``) naming the worker and its workloads. A worker
that has not handed a subinterval over by ``deadline_ns`` makes ``collect`` raise
``ResultsLateError``. Nothing ever waits silently.

Workers die with the slave: ``PR_SET_PDEATHSIG`` (SIGKILL) plus a parent-pid check while idle.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mmap
import multiprocessing
import multiprocessing.connection as mpc
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol import credit
from protocol.batch import StatsBatch
from protocol.cpulist import usable_cpus
from protocol.errors import IoEngineError, MasterLateError
from protocol.messages import MAX_WORKLOADS_PER_HOST
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from protocol.verify import MAP_BLOCK_BYTES
from slave.engine import compiled_loop
from slave.engine.verify_state import LoadedMap
from slave.worker_process import CTRL_WORDS, FREE, READY_TO_RUN, SENDING, worker_main

log = logging.getLogger(__name__)

#: workloads a worker's error names; the rest are counted (a worker of 1,024 workloads named
#: every one, some 10 KB in one line)
NAMED_WORKLOADS: Final = 8
#: How long ``stop`` waits for every worker to say it stopped: beyond a worker's own drain
#: limit (1 s: ``EngineLoop._drain``), so that a device that does not answer is reported by
#: the worker that knows which I/Os it holds, and a worker that says nothing is one stuck.
STOP_TIMEOUT_S = 2.0


def _named(items: Sequence[str]) -> str:
    """The first ``NAMED_WORKLOADS`` of ``items``, and how many more."""
    names = ", ".join(items[:NAMED_WORKLOADS])
    if len(items) > NAMED_WORKLOADS:
        names += f" and {len(items) - NAMED_WORKLOADS:,} more"
    return names


class WorkerError(IoEngineError):
    """A worker process failed or refused a command. ``worker`` is its index; ``workloads``
    the workloads concerned (all of the worker's, unless the error knows better) and ``luns``
    their LUNs (the message names the first ``NAMED_WORKLOADS`` of each)."""

    def __init__(self, message: str, *, worker: int, workloads: tuple[str, ...] = (),
                 luns: tuple[str, ...] = ()) -> None:
        self.worker = worker
        self.workloads = workloads
        self.luns = luns
        self.reason = message  # without the worker and its workloads
        named = ([f"workloads {_named(workloads)}"] if workloads else []) + (
            [f"LUNs {_named(luns)}"] if luns else [])
        names = f" ({'; '.join(named)})" if named else ""
        super().__init__(f"worker {worker}{names}: {message}")


class StopError(WorkerError):
    """What went wrong as the workers stopped at the end of a step (I/Os still in flight past
    the drain limit, a worker that did not stop in time, one that failed or died): one
    ``WorkerError`` per worker and problem in ``errors``; the message has them all, and
    ``worker``, ``workloads`` and ``luns`` are the first's."""

    def __init__(self, errors: Sequence[WorkerError]) -> None:
        self.errors = tuple(errors)
        first = self.errors[0]
        super().__init__(first.reason, worker=first.worker, workloads=first.workloads,
                         luns=first.luns)
        self.args = ("; ".join(str(e) for e in self.errors),)


class WorkerLateError(WorkerError, MasterLateError):
    """At a boundary a worker's next subinterval's buffer was not ready to run: the master is
    late (``protocol.errors.MasterLateError``, naming the worker and its workloads)."""


class ResultsLateError(WorkerError):
    """A worker did not hand a subinterval over by the deadline."""


@dataclass(frozen=True)
class WorkloadInfo:
    workload_id: str
    lun_path: str
    worker: int
    engine: str  # libaio | threadpool | fake
    warning: str | None
    cpu: int | None = None  # the CPU the worker is pinned to


@dataclass(frozen=True)
class WorkerInterlock:
    """Interlock latencies of one worker at one boundary, in ns after the boundary."""

    worker: int
    switch_done_ns: int
    handed_over_ns: int


@dataclass
class SubintervalResults:
    """One subinterval of every workload: ``batch`` (sparse, wire-ready) holds workload
    ``workload_ids[i]`` at index ``i``; ``stats`` gives dense per-workload copies on demand."""

    index: int
    workload_ids: list[str]
    batch: StatsBatch
    io_errors: dict[str, dict[str, int]]
    interlock: list[WorkerInterlock]
    # the workers' data verification of the subinterval (``SubintervalResult.verify``), or
    # None where no workload verifies
    verify: dict[str, Any] | None = None

    @functools.cached_property
    def stats(self) -> dict[str, WorkloadStats]:
        """Dense copies, built once on first use (prefer ``batch``: it is already sparse)."""
        return {wid: self.batch.workload(i) for i, wid in enumerate(self.workload_ids)}


@dataclass
class _WorkerHandle:
    index: int
    process: Any
    cmd: Connection
    reply: Connection
    ctrl: npt.NDArray[np.int64]
    # subinterval -> switch and hand-over times, I/O errors, data verification's report
    ready: dict[int, tuple[int, int, dict[str, dict[str, int]], dict[str, Any] | None]] = field(
        default_factory=dict)
    # (kind, text, I/Os left in flight by workload): kind "late", "crash" (its run ended with
    # an exception), "command" (a command refused) or "died" (its pipe closed: said once)
    errors: list[tuple[str, str, dict[str, int]]] = field(default_factory=list)
    acks: list[tuple[Any, ...]] = field(default_factory=list)
    stopped: bool = False
    # data verification's report of the run's end (after its last hand-over), until taken
    final_verify: dict[str, Any] | None = None
    luns: set[str] = field(default_factory=set)
    eof: bool = False  # its pipe closed (the process is gone)
    stuck: bool = False  # did not stop in time, and has not said since that its run ended
    death_told: bool = False  # its death was raised once (``stop`` need not say it again)


@dataclass
class _Entry:
    info: WorkloadInfo
    slot: int
    params: WorkloadParams
    deleting: bool = False


class WorkerPool:
    """``n_workers`` worker processes (default: one per usable core). See the module docstring.

    ``cpus``: one entry per worker, the CPU it is pinned to or ``None`` (left to the scheduler);
    it fixes the number of workers (``protocol.cpulist.worker_cpus`` makes it from the host's
    ``worker_cpus`` setting). Default: worker ``i`` pinned to the ``i``-th usable CPU (round
    robin when there are more workers than CPUs). Which is faster depends on the host
    (docs/engine.md, "Pinning the workers": pinned won on one 2-core VM; on another, unpinned
    won one set of rounds and lost the next, by a third at QD1, while pinned held steady).
    """

    def __init__(
        self,
        n_workers: int | None = None,
        *,
        max_workloads: int = MAX_WORKLOADS_PER_HOST,
        cpus: list[int | None] | None = None,
    ) -> None:
        if cpus is None:
            usable = usable_cpus()
            cpus = [usable[i % len(usable)] for i in range(n_workers or len(usable))]
        elif n_workers is not None and n_workers != len(cpus):
            raise ValueError(f"{n_workers} workers but {len(cpus)} CPU entries")
        if not cpus:
            raise ValueError("a worker pool needs at least one worker")
        self.n_workers = len(cpus)
        #: the CPU each worker is pinned to (``None``: not pinned, or pinning failed)
        self.worker_cpus: list[int | None] = list(cpus)
        self.max_workloads = max_workloads
        n = WorkloadStats.SIZE
        stats_bytes = max_workloads * 2 * n * 8
        ctrl_bytes = self.n_workers * CTRL_WORDS * 8
        # one anonymous shared mapping, inherited by the workers; untouched pages cost nothing
        self._mem = mmap.mmap(-1, stats_bytes + ctrl_bytes)
        self._stats_region = np.frombuffer(self._mem, dtype=np.int64, count=stats_bytes // 8)
        self._ctrl = np.frombuffer(
            self._mem, dtype=np.int64, count=ctrl_bytes // 8, offset=stats_bytes
        ).reshape(self.n_workers, CTRL_WORDS)
        self._free_slots = list(range(max_workloads - 1, -1, -1))
        self._entries: dict[str, _Entry] = {}
        # LUNs with a verified workload: each stays on its worker, whose loop keeps its map
        self._verified_luns: set[str] = set()
        #: each verified LUN's number: the worker that holds its map and the map's blocks
        self._verified_numbers: dict[int, tuple[_WorkerHandle, int]] = {}
        self._workers: list[_WorkerHandle] = []
        self._last_collected = -1
        self._audit_next = 0  # the block collect checks in full next (an index into ids)
        self._running = False
        # the compiled paced loop, built (or found in the host's cache) and loaded here, once,
        # so that every worker inherits it ready
        if not compiled_loop.available():
            log.warning("no compiled loop here, so no libaio or io_uring (their LUNs are "
                        "refused unless allow_engine_fallback runs them on the thread pool) "
                        "and paced I/O runs in the Python loop, less precisely at high "
                        "rates: %s", compiled_loop.why_not())
        # fork: the workers inherit the shared mapping and need no import of their own
        ctx = multiprocessing.get_context("fork")
        for i in range(self.n_workers):
            cmd_r, cmd_w = ctx.Pipe(duplex=False)
            rep_r, rep_w = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=worker_main,
                args=(i, cmd_r, rep_w, self._ctrl[i], self._stats_region),
                name=f"ivypy-worker-{i}",
                daemon=True,
            )
            proc.start()
            cmd_r.close()
            rep_w.close()
            cpu = cpus[i]
            if cpu is not None and proc.pid is not None:
                try:
                    os.sched_setaffinity(proc.pid, {cpu})
                except OSError as exc:
                    log.warning("worker %d: cannot pin it to CPU %d (%s); it runs unpinned",
                                i, cpu, exc)
                    self.worker_cpus[i] = None
            self._workers.append(_WorkerHandle(i, proc, cmd_w, rep_r, self._ctrl[i]))

    # ------------------------------------------------------------------ messages
    def _pump(self, timeout_s: float, workers: Sequence[_WorkerHandle] | None = None) -> None:
        """Read every reply that is available (waiting up to ``timeout_s`` for the first of
        ``workers``, default all)."""
        conns = {w.reply: w for w in (self._workers if workers is None else workers)}
        for ready in mpc.wait(list(conns), timeout_s):
            w = conns[ready]  # type: ignore[index]
            try:
                while w.reply.poll():
                    self._dispatch(w, w.reply.recv())
            except (EOFError, OSError):
                if not w.eof:
                    w.eof = True
                    w.errors.append(("died", self._death(w), {}))

    @staticmethod
    def _dispatch(w: _WorkerHandle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready[msg[1]] = (msg[2], msg[3], msg[4], msg[5])
        elif kind == "error":
            w.errors.append((msg[1], msg[2], msg[3] if len(msg) > 3 else {}))
            if msg[1] in ("crash", "late"):  # sent as its run ended
                w.stuck = False
        elif kind == "stopped":
            w.stopped = True
            if len(msg) > 1 and msg[1] is not None:
                w.final_verify = msg[1]
            w.stuck = False
        else:
            w.acks.append(msg)

    def _workloads_of(self, worker: int) -> tuple[str, ...]:
        return tuple(sorted(wid for wid, e in self._entries.items() if e.info.worker == worker))

    def _luns_of(self, workloads: Sequence[str]) -> tuple[str, ...]:
        """The LUNs of ``workloads``, each once, in their order."""
        luns = (self._entries[wid].info.lun_path for wid in workloads if wid in self._entries)
        return tuple(dict.fromkeys(luns))

    @staticmethod
    def _death(w: _WorkerHandle) -> str:
        return f"worker process died (exit code {w.process.exitcode})"

    def _error(self, w: _WorkerHandle, kind: str, text: str,
               in_flight: dict[str, int] | None = None) -> WorkerError:
        """``w``'s error ``text``, naming its workloads and their LUNs; with ``in_flight`` (the
        I/Os a run left in flight, by workload) only those workloads, each with its count."""
        cls = WorkerLateError if kind == "late" else WorkerError
        if kind == "died":
            w.death_told = True
        held = tuple(sorted(wid for wid in in_flight or {} if wid))
        if not held:
            workloads = self._workloads_of(w.index)
            return cls(text, worker=w.index, workloads=workloads,
                       luns=self._luns_of(workloads))
        assert in_flight is not None
        counts = [f"{wid} {in_flight[wid]:,} (LUN {self._entries[wid].info.lun_path})"
                  if wid in self._entries else f"{wid} {in_flight[wid]:,}" for wid in held]
        if in_flight.get(""):
            counts.append(f"{in_flight['']:,} of workloads deleted in the step")
        return cls(f"{text}; in flight, by workload: {_named(counts)}",
                   worker=w.index, workloads=held, luns=self._luns_of(held))

    def _raise_errors(self) -> None:
        for w in self._workers:
            if w.errors:
                raise self._error(w, *w.errors.pop(0))
            if not w.process.is_alive():
                raise self._error(w, "died", self._death(w))

    def _send(self, w: _WorkerHandle, msg: tuple[Any, ...]) -> None:
        try:
            w.cmd.send(msg)
        except (OSError, BrokenPipeError) as exc:
            workloads = self._workloads_of(w.index)
            raise WorkerError(f"cannot send {msg[0]}: {exc}", worker=w.index,
                              workloads=workloads, luns=self._luns_of(workloads)) from exc

    # ------------------------------------------------------------------ workloads
    @property
    def workloads(self) -> dict[str, WorkloadInfo]:
        return {wid: e.info for wid, e in self._entries.items() if not e.deleting}

    def _pick_worker(self, lun_path: str) -> _WorkerHandle:
        for w in self._workers:
            if lun_path in w.luns:
                return w
        counts = {w.index: 0 for w in self._workers}
        for e in self._entries.values():
            counts[e.info.worker] += 1
        return min(self._workers, key=lambda w: (len(w.luns), counts[w.index], w.index))

    def create_workload(
        self,
        workload_id: str,
        lun_path: str,
        engine_choice: str,
        params: WorkloadParams,
        *,
        logical_block_bytes: int | None = None,
        lun_size_bytes: int | None = None,
        fallback: bool = False,
        timeout_s: float = 10.0,
        verify: dict[str, int] | None = None,
        verify_map: LoadedMap | None = None,
    ) -> WorkloadInfo:
        """Create a workload on ``lun_path`` (``engine_choice``: auto | libaio | threadpool |
        fake[...]; ``fallback``: with auto, the thread pool where libaio cannot be had);
        effective at the next boundary when running. Returns the engine in use and its
        warning (e.g. the thread-pool fallback). Raises ``WorkerError`` when refused."""
        self._raise_errors()
        if workload_id in self._entries:
            raise WorkerError(f"workload {workload_id} exists already", worker=-1)
        if not self._free_slots:
            raise WorkerError(f"more than {self.max_workloads} workloads on this host",
                              worker=-1)
        w = self._pick_worker(lun_path)
        slot = self._free_slots.pop()
        self._stats(slot, 0).reset()
        self._stats(slot, 1).reset()
        self._send(
            w,
            ("create", workload_id, slot, lun_path, engine_choice, params,
             logical_block_bytes, lun_size_bytes, fallback, verify,
             # a LUN's map from the master goes to the worker that has none of it yet
             None if lun_path in self._verified_luns else verify_map),
        )
        deadline = time.monotonic() + timeout_s
        while True:
            for msg in w.acks:
                if msg[1] == workload_id:
                    w.acks.remove(msg)
                    if msg[0] == "failed":
                        self._free_slots.append(slot)
                        raise WorkerError(msg[2], worker=w.index, workloads=(workload_id,),
                                          luns=(lun_path,))
                    info = WorkloadInfo(workload_id, lun_path, w.index, msg[2], msg[3],
                                        self.worker_cpus[w.index])
                    self._entries[workload_id] = _Entry(info, slot, params)
                    w.luns.add(lun_path)
                    if verify is not None:  # its map is that worker's, for the session
                        self._verified_luns.add(lun_path)
                        self._verified_numbers.setdefault(
                            verify["lun"], (w, verify["size_bytes"] // MAP_BLOCK_BYTES))
                    if info.warning:
                        log.warning("%s", info.warning)
                    return info
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"no answer to create {workload_id}", worker=w.index,
                                  workloads=(workload_id,), luns=(lun_path,))
            self._pump(min(left, 0.5))
            self._raise_errors()

    def load_map_part(self, lun: int, first_block: int, data: bytes) -> bool:
        """Part of a verified LUN's map replaced by the master's in the worker that holds it
        (between steps); False where no worker holds LUN ``lun``'s map (the next create takes
        it). ``ValueError`` for a part past the map's end."""
        held = self._verified_numbers.get(lun)
        if held is None:
            return False
        w, blocks = held
        if first_block + len(data) > blocks:
            raise ValueError(f"LoadMap: LUN {lun}: blocks {first_block}-"
                             f"{first_block + len(data)} past its {blocks}")
        self._send(w, ("load_map", lun, first_block, bytes(data)))
        return True

    def edit_workload(self, workload_id: str, params: WorkloadParams) -> None:
        """New parameters, effective at the next boundary (refusals surface at the next call)."""
        e = self._entry(workload_id)
        e.params = params
        self._send(self._workers[e.info.worker], ("edit", workload_id, params))

    def edit_workloads(self, edits: Sequence[tuple[str, WorkloadParams]]) -> None:
        """``edit_workload`` for many, one message per worker (a message per edit cost the
        slave ~15 % of its time under DFC of 1,024 workloads). An unknown workload raises
        ``WorkerError`` before anything is sent."""
        entries = [self._entry(wid) for wid, _ in edits]
        by_worker: dict[int, list[tuple[str, WorkloadParams]]] = {}
        rates_only: dict[int, bool] = {}
        for e, (wid, params) in zip(entries, edits, strict=True):
            w = e.info.worker
            rate = params.iops is not None and params.same_but_rate(e.params)
            rates_only[w] = rates_only.get(w, True) and rate
            e.params = params
            by_worker.setdefault(w, []).append((wid, params))
        for index, items in by_worker.items():
            # DFC's edits (new rates alone) as (id, iops): a quarter of the bytes, and the
            # worker makes no parameters from a pickle (1.2 ms for 1,024, warm, while its
            # I/O waited)
            msg = (("rates", [(wid, p.iops) for wid, p in items]) if rates_only[index]
                   else ("edits", items))
            self._send(self._workers[index], msg)

    def delete_workload(self, workload_id: str) -> None:
        """Delete at the next boundary; its last subinterval is still collected."""
        e = self._entry(workload_id)
        self._send(self._workers[e.info.worker], ("delete", workload_id))
        if self._running:
            e.deleting = True
        else:
            self._forget(workload_id)

    def _entry(self, workload_id: str) -> _Entry:
        e = self._entries.get(workload_id)
        if e is None or e.deleting:
            raise WorkerError(f"no workload {workload_id}", worker=-1)
        return e

    def _forget(self, workload_id: str) -> None:
        e = self._entries.pop(workload_id)
        self._free_slots.append(e.slot)
        lun = e.info.lun_path
        if lun not in self._verified_luns and not any(
                x.info.lun_path == lun for x in self._entries.values()):
            self._workers[e.info.worker].luns.discard(lun)

    def _stats(self, slot: int, buffer: int) -> WorkloadStats:
        n = WorkloadStats.SIZE
        at = (2 * slot + buffer) * n
        return WorkloadStats(self._stats_region[at : at + n])

    # ------------------------------------------------------------------ running
    def go(self, start_ns: int, subinterval_ns: int) -> None:
        """Start all workers at ``start_ns`` (``time.monotonic_ns`` of this host). Raises a
        worker's pending error, or ``WorkerError`` naming a worker that has still not stopped
        since the last step (``stop`` said it was stuck)."""
        self._pump(0)  # what a worker said after the last stop (a "master late" is moot)
        for w in self._workers:
            w.errors = [e for e in w.errors if e[0] != "late"]
        self._raise_errors()
        if self._running:
            raise WorkerError("go while running", worker=-1)
        for w in self._workers:
            if w.stuck:
                raise self._error(w, "stuck", "has still not stopped since the end of the "
                                  "last step: no step can start")
        for e in self._entries.values():
            self._stats(e.slot, 0).reset()
            self._stats(e.slot, 1).reset()
        for w in self._workers:
            w.ready.clear()
            w.stopped = False
            w.ctrl[:] = (READY_TO_RUN, 0, READY_TO_RUN, 1, 0, 0, 0, 0)
        self._last_collected = -1
        self._running = True
        for w in self._workers:
            self._send(w, ("go", start_ns, subinterval_ns))

    def collect(self, subinterval_index: int, deadline_ns: int) -> SubintervalResults:
        """Wait (until ``deadline_ns``, host monotonic) for every worker to hand subinterval
        ``subinterval_index`` over; return copies of every workload's statistics."""
        k = subinterval_index
        pending = [w for w in self._workers if k not in w.ready]
        while pending:
            self._raise_errors()
            left = deadline_ns - time.monotonic_ns()
            if left <= 0:
                names = ", ".join(str(w.index) for w in pending)
                late = self._workloads_of(pending[0].index)
                raise ResultsLateError(
                    f"subinterval {k} not handed over by the deadline (workers {names})",
                    worker=pending[0].index, workloads=late, luns=self._luns_of(late))
            self._pump(left / 1e9)
            pending = [w for w in self._workers if k not in w.ready]
        b = credit.buffer_of(k)
        for w in self._workers:
            w.ctrl[2 * b] = SENDING
        ids = list(self._entries)
        slots = np.array([self._entries[wid].slot for wid in ids], dtype=np.intp)
        blocks = self._stats_region.reshape(self.max_workloads, 2, WorkloadStats.SIZE)
        # each subinterval one block is checked in full, in turn (StatsBatch.drain)
        audit = self._audit_next % len(ids) if ids else None
        self._audit_next += 1
        try:
            batch = StatsBatch.drain(blocks[:, b], slots, audit)
        except ValueError as exc:
            assert audit is not None
            raise WorkerError(f"workload {ids[audit]}'s statistics of subinterval {k}: {exc} "
                              "(counts a recording path left there; an ivypy bug)",
                              worker=self._entries[ids[audit]].info.worker,
                              workloads=(ids[audit],),
                              luns=self._luns_of([ids[audit]])) from exc
        io_errors: dict[str, dict[str, int]] = {}
        interlock = []
        verified: list[dict[str, Any]] = []
        for w in self._workers:
            switch_ns, handed_ns, errs, report = w.ready.pop(k)
            interlock.append(WorkerInterlock(w.index, switch_ns, handed_ns))
            io_errors.update(errs)
            if report is not None:
                verified.append(report)
            w.ctrl[2 * b] = FREE
        for wid in [wid for wid, e in self._entries.items() if e.deleting]:
            self._forget(wid)
        self._last_collected = k
        return SubintervalResults(k, ids, batch, io_errors, interlock,
                                  merge_verify_reports(verified))

    def keep_going(self) -> None:
        """The master said continue: the buffer freed by the last ``collect`` is ready to run
        the subinterval after next. Raises a worker's pending error, if any."""
        k = credit.freed_for(self._last_collected)
        b = 2 * credit.buffer_of(k)
        for w in self._workers:
            w.ctrl[b + 1] = k
            w.ctrl[b] = READY_TO_RUN
        self._pump(0)
        self._raise_errors()

    @staticmethod
    def _run_ended(w: _WorkerHandle) -> bool:
        """``w`` said its run ended (stopped, or with an error sent as it ended: a "command"
        refusal does not count), or is gone."""
        return (w.stopped or not w.process.is_alive()
                or any(kind in ("crash", "late", "died") for kind, _, _ in w.errors))

    def take_final_verify(self) -> dict[str, Any] | None:
        """What data verification found after the last subinterval collected, to the end of
        the step's drain (the workers' reports as they stopped), once."""
        reports = [w.final_verify for w in self._workers if w.final_verify is not None]
        for w in self._workers:
            w.final_verify = None
        return merge_verify_reports(reports)

    def stop(self, timeout_s: float | None = None) -> None:
        """End all I/O: every worker stops submitting, reaps what is in flight, and idles.

        Raises ``StopError`` (after the pool is ready for the next ``go`` all the same) with
        what went wrong on the way, so that it belongs to the step that ends: I/Os still in
        flight past a worker's drain limit (naming the workloads and LUNs that hold them, and
        how many), a worker that did not stop within ``timeout_s`` (default
        ``STOP_TIMEOUT_S``), any other error a worker sent (a "master late" excepted: the end
        of a step makes it moot) and a death not raised before."""
        if not self._running:
            return
        self._running = False
        timeout_s = STOP_TIMEOUT_S if timeout_s is None else timeout_s
        for w in self._workers:
            with contextlib.suppress(WorkerError):
                self._send(w, ("stop",))
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [w for w in self._workers if not self._run_ended(w)]
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                break
            self._pump(left, waiting)  # not the others: a dead one's pipe is always ready
        self._pump(0)  # what came meanwhile (a death's closed pipe)
        problems: list[WorkerError] = []
        for w in self._workers:
            w.stuck = not self._run_ended(w)
            w.ctrl[:] = 0
            w.ready.clear()
            errors, w.errors = w.errors, []
            for kind, text, in_flight in errors:
                if kind == "late" or (kind == "died" and w.death_told):
                    continue
                problems.append(self._error(w, kind, text, in_flight))
            if w.stuck:
                problems.append(self._error(
                    w, "stuck", f"did not stop within {timeout_s:g} s of the end of the step "
                    "(blocked in the kernel, e.g. submitting to a LUN whose queue is full, "
                    "or stopped): its I/O may still be running"))
            elif not w.process.is_alive() and not w.death_told:
                problems.append(self._error(w, "died", self._death(w)))
        for wid in [wid for wid, e in self._entries.items() if e.deleting]:
            self._forget(wid)
        if problems:
            raise StopError(problems)

    def close(self, timeout_s: float = 2.0) -> None:
        """End the worker processes (I/O first, if running: what went wrong stopping it is
        logged, there being nobody else to tell)."""
        try:
            self.stop()
        except WorkerError as exc:
            log.error("closing the workers: %s", exc)
        for w in self._workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                w.cmd.send(("exit",))
        deadline = time.monotonic() + timeout_s
        for w in self._workers:
            w.process.join(max(deadline - time.monotonic(), 0.01))
            if w.process.is_alive():
                w.process.kill()
                w.process.join(1)
            w.cmd.close()
            w.reply.close()
        self._workers.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [int(w.process.pid) for w in self._workers]


if __name__ == "__main__":  # pragma: no cover - the workers are forked, not run as a script
    sys.exit("slave.worker is a library")


def merge_verify_reports(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The workers' verification reports of one subinterval as one (``SubintervalResult.verify``):
    their journals end to end (each worker's LUNs are its own), counts and findings together."""
    if not reports:
        return None
    if len(reports) == 1:
        return reports[0]
    journal = {key: b"".join(r["journal"][key] for r in reports)
               for key in ("luns", "blocks", "map_bytes")}
    counts: dict[str, list[int]] = {}
    confirmed: dict[str, int] = {}
    for r in reports:
        counts.update(r["counts"])
        confirmed.update(r.get("confirmed", {}))
    return {"journal": journal, "counts": counts, "found": sum(r["found"] for r in reports),
            "findings": [f for r in reports for f in r["findings"]], "confirmed": confirmed}
