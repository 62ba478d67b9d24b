"""The paced loop: paced workloads (and, where it runs compiled, max-iops ones beside them)
on one engine, each turn recording what completed and submitting every I/O whose time has come
in one call (``_loop_paced``; ``_loop_paced_compiled`` in C), a heap of the workloads' next
scheduled times (``PacedSet``), and the compiled set's making and giving back.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import time
from heapq import heappop, heappush
from os import sched_yield
from typing import TYPE_CHECKING

import numpy as np

from protocol.errors import IoEngineError
from protocol.stats import common_root
from slave.engine import paced_kernel as pk
from slave.engine import tuning
from slave.engine.aio_abi import W_OFFSET, W_OPCODE_FD
from slave.engine.base import IoEngine, SlotTable
from slave.engine.compiled_paced import CompiledPaced
from slave.engine.layout import C_CAT, C_ROW, C_SCHED, C_SUBMIT, INF, R_CAT, R_OFF, R_SCHED
from slave.engine.loop_issue import write_for
from slave.engine.loop_state import LoopWorkload, took
from slave.engine.waits import timed_wait_ns

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop, LoopControl


class PacedSet:
    """The paced loop's workloads (``ws``) and, for those with a free slot, a heap of their
    next scheduled times (``(time, position in ws)``; ``armed``: which are in it). Where the
    set runs compiled (``compiled``), it may hold max-iops workloads too: their I/Os have no
    time (0) but those an edit kept from a paced schedule, so they are always due."""

    def __init__(self, loop: EngineLoop, ws: list[LoopWorkload]) -> None:
        self.ws = ws
        self.pos = {w.index: i for i, w in enumerate(ws)}
        self.heap: list[tuple[int, int]] = []
        self.armed = [False] * len(ws)
        self._refill = loop._refill
        self.compiled: CompiledPaced | None = None  # set by EngineLoop._compile_paced

    def arm(self, i: int) -> None:
        """Put workload ``i`` (which has a free slot) in the heap at its next I/O's time."""
        w = self.ws[i]
        if w.cur >= w.ring_len:
            self._refill(w, len(w.free))
        heappush(self.heap, (w.ring_words[5 * w.cur + R_SCHED], i))
        self.armed[i] = True


def _compile_paced(self: EngineLoop, paced: PacedSet, eng: IoEngine) -> CompiledPaced | None:
    """The paced set's compiled state, when it can run compiled: the kernel was built
    here, the engine's completion ring can be read (libaio), the data of every workload's
    writes is planned (``WritePattern.planned``: random or compressible, blocks up to
    16 KiB; other data is made in Python, per batch) and every workload's stats lie in one
    array (a worker's region)."""
    if not tuning.COMPILED_PACED or any(w.pattern is not None and not w.pattern.planned
                                 for w in paced.ws):
        return None
    handles = getattr(eng, "kernel_handles", None)
    if handles is None:
        return None
    root = common_root([st for w in self._wl if w is not None for st in w.spec.stats])
    if root is None:
        return None
    h = handles()
    if h is None or not pk.available():
        return None
    return CompiledPaced(self, paced, eng, h, root)


def _unload_paced(self: EngineLoop, *, restart: bool = True) -> None:
    """Give the compiled paced loop's state back to the workloads, before anything else
    looks at their free slots and cursors: a change of workloads, a drain, a new paced
    set. Completions it reaped past a boundary and left for its next run are recorded
    here instead (the general way, as ``_reaped_late`` does). A max-iops workload's
    slots that it freed and had not submitted again go out now (``restart``, while
    running): elsewhere a max-iops workload has every slot in flight."""
    pw = self._paced_words
    cp = None if pw is None else pw[0].compiled
    if cp is None or not cp.loaded:  # given back already, with what it reaped late
        return
    cp.unload()
    n = int(cp.args.n)
    if n:
        cp.args.n = 0
        self._complete(cp.eng, n, int(cp.args.t_ns))
    for w in cp.ws:
        if w.free and not w.paced:
            free = np.array(w.free, dtype=np.intp)
            w.free = []
            if restart and self.subinterval_index >= 0:
                self._issue(w, free)


def _loop_paced(
    self: EngineLoop,
    control: LoopControl,
    paced: PacedSet,
    eng: IoEngine,
    ev: memoryview,
    boundary: int,
    subinterval_ns: int,
    wake: int,
) -> int:
    """The loop for paced workloads only (``paced.ws``), all on an engine that exposes its
    completions as words: plain ints and memoryviews, no numpy per turn (but for the data
    of writes), until ``wake`` (the next boundary or control poll) or a completion reaped
    after the boundary. Each turn records what completed and frees its slots, then
    submits the I/Os of every workload whose time has come (those that have a free slot)
    in one call, then sleeps until the next completion or the next scheduled time, unless
    that is nearer than ``SLEEP_MIN_NS``. A heap holds each workload's next scheduled time
    while it has a free slot, so a turn touches only the workloads that have something to
    do. The general path spent ~25 us of Python per turn on one workload, so at 110,000
    IOPS about 6 due I/Os waited for each ``io_submit`` and the measured service time
    carried the wait; on four workloads of 10,000 IOPS it spent 17-20 us of user CPU per
    I/O. A walk over every workload each turn put the service-time p50 at 115 us for 128
    workloads of 312 IOPS and 369 us for 512; with the heap, 45-67 and 50-137 us. When
    nothing is due and nothing completed, it bins what completed (``_bin_idle``) instead of
    leaving it to a flush, whose stall of 1-4 ms put the p99 of 512 workloads at 8-13 ms.
    Returns the next boundary. Where the set can run compiled, it does
    (``_loop_paced_compiled``); only then does it hold max-iops workloads (this loop's
    Python per I/O would cost them more than the general loop's numpy per batch)."""
    if paced.compiled is not None:
        return self._loop_paced_compiled(control, paced.compiled, eng, boundary,
                                         subinterval_ns, wake)
    assert all(w.paced for w in paced.ws), "max-iops workloads in the Python paced loop"
    mono = time.monotonic_ns
    poll = eng.poll
    ready = eng.ready
    reap = eng.reap
    submit_list = eng.submit_list
    record = self._record_words
    tw = self._rows_words
    rw = SlotTable.ROW_WORDS
    al = self._active_list
    ws = paced.ws
    pos = paced.pos
    heap = paced.heap
    armed = paced.armed
    arm = paced.arm
    for i, w in enumerate(ws):  # slots freed outside this loop (a late reap, a start)
        if w.free and not armed[i]:
            arm(i)
    lone = ws[0].free if len(ws) == 1 else None  # one workload: no owner lookup
    busy = self._busy_poll
    n = 0
    while True:
        if not n:
            n = poll()
        if n:
            t = mono()
            if t >= boundary:
                return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
            record(ev, n, t)
            if lone is not None:
                lone.extend(ev[0 : 4 * n : 4].tolist())
                if not armed[0]:
                    arm(0)
            else:
                for s in ev[0 : 4 * n : 4].tolist():
                    i = pos[al[s]]
                    ws[i].free.append(s)
                    if not armed[i]:
                        arm(i)
            self._in_flight -= n
            n = 0
            now = t
        else:
            now = mono()
        if now >= wake:
            return boundary
        out: list[int] = []
        while heap and heap[0][0] <= now:
            i = heappop(heap)[1]
            armed[i] = False
            w = ws[i]
            free = w.free
            cur = w.cur
            ring = w.ring_words
            lim = min(len(free), w.ring_len - cur)
            k = 0
            b = 5 * cur + R_SCHED
            while k < lim and ring[b] <= now:
                k += 1
                b += 5
            assert k, "an armed workload has a free slot and an I/O due"
            slots = free[-k:]
            del free[-k:]
            b = 5 * cur
            for j, s in enumerate(slots):
                r = rw * s
                if w.pattern is not None and w.ring_write[cur + j]:
                    write_for(w, tw[r + C_ROW], cur + j)
                tw[r + W_OPCODE_FD] = ring[b]
                tw[r + W_OFFSET] = ring[b + R_OFF]
                tw[r + C_CAT] = ring[b + R_CAT]
                tw[r + C_SCHED] = ring[b + R_SCHED]
                b += 5
            w.cur = cur + k
            out += slots
            if free:
                arm(i)  # its next I/O (due now too when the ring ran out: popped again)
        if out:
            t_sub = mono()
            try:
                submit_list(out)
            except IoEngineError as exc:
                self._in_flight += took(exc)
                raise
            for s in out:
                tw[rw * s + C_SUBMIT] = t_sub
            self._in_flight += len(out)
            continue  # look for completions at once
        due = heap[0][0] if heap else INF
        until = wake if wake < due else due
        if self._binned < self._p:  # nothing to do but bin: bin until something is
            self._bin_idle(until, ready)
            continue
        left = until - now
        if busy:  # look again at once while I/O is in flight or the next is near
            if not self._in_flight and left >= tuning.LONG_WAIT_NS:
                n = reap(1, left - tuning.WAKE_EARLY_NS)
            else:
                sched_yield()  # letting the device's kernel worker run if it shares the core
        elif left >= tuning.SLEEP_MIN_NS:  # else too near to sleep: look again
            n = reap(1, timed_wait_ns(left))


def _loop_paced_compiled(self: EngineLoop, control: LoopControl, cp: CompiledPaced, eng: IoEngine,
                         boundary: int, subinterval_ns: int, wake: int) -> int:
    """``_loop_paced`` in compiled code (``paced_kernel.run``), which comes back here for
    what only Python does: a completion reaped past the boundary, a workload's refill,
    a flush, an I/O error to count, a submission the kernel took only in part."""
    if not cp.loaded:
        cp.load()
    args = cp.args
    args.stat_off = cp.stat_addr[self._buf]
    args.boundary_ns = boundary
    args.wake_ns = wake
    args.discard = int(self._discard)
    fd = control.poll_fd()
    args.control_fd = -1 if fd is None else fd
    args.poll_ns = tuning.POLL_CONTROL_NS
    args.busy_poll = int(self._busy_poll)
    while True:
        args.p = self._p
        args.binned = self._binned
        args.in_flight = self._in_flight
        code = pk.run(args)
        self._p = int(args.p)
        self._binned = int(args.binned)
        self._in_flight = int(args.in_flight)
        if code == pk.R_WAKE:
            return boundary
        if code == pk.R_LATE:
            # the completions stay in the engine's events and ``st``: the next run records
            # them in the next subinterval (or ``_unload_paced``, if the boundary's changes
            # unload the set), as ``_reaped_late`` does
            self._boundary(control, boundary)
            return boundary + subinterval_ns
        if code == pk.R_REFILL:
            args.refill = 0
            for i in np.flatnonzero(cp.armed == 2).tolist():
                w = cp.ws[i]
                cp.take_back(i)
                w.cur = int(cp.cur[i])
                self._refill(w, int(cp.free_n[i]))
                cp.set_ring(i, w)
                cp.armed[i] = 0
        elif code in (pk.R_FLUSH, pk.R_ERROR):
            self.flush()
        elif code == pk.R_SUBMIT:
            m = int(args.sub_n)
            try:
                cp.finish_submit(int(args.sub_done), m)
            except IoEngineError as exc:  # the kernel counted all m in flight
                self._in_flight -= m - took(exc)
                raise
        elif code == pk.R_STRAY:
            raise IoEngineError(
                f"{self.name}: a completion came for I/O slot {int(args.n)}, which no "
                "paced workload of this loop owns; the loop stops")
        else:  # pragma: no cover - the kernel returns only the codes above
            raise AssertionError(f"paced kernel returned {code}")
