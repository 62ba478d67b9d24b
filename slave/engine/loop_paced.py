"""The compiled loop's Python side: paced and max-iops workloads on one engine, each turn in C
(``paced_kernel.run``) recording what completed and submitting every I/O whose time has
come in one call (``_loop_paced_compiled``), Python only for what the C returns for; and the
compiled set's making (``_compile_paced``) and giving back (``_unload_paced``). Where the set
cannot run compiled, the general loop (``loop_general``) serves its workloads.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from protocol.errors import IoEngineError
from protocol.stats import common_root
from slave.engine import paced_kernel as pk
from slave.engine import tuning
from slave.engine.base import IoEngine
from slave.engine.compiled_paced import CompiledPaced
from slave.engine.loop_state import LoopWorkload, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop, LoopControl


class PacedSet:
    """The compiled loop's workloads (``ws``: paced ones, max-iops ones, or both) and, where
    the set can run compiled, its compiled state (``compiled``)."""

    def __init__(self, ws: list[LoopWorkload]) -> None:
        self.ws = ws
        self.compiled: CompiledPaced | None = None  # set by EngineLoop._compile_paced


def _compile_paced(self: EngineLoop, paced: PacedSet, eng: IoEngine) -> CompiledPaced | None:
    """The paced set's compiled state, when it can run compiled: the kernel was built
    here, the engine's completion ring can be read (libaio, io_uring) and every workload's
    stats lie in one array (a worker's region)."""
    if not tuning.COMPILED_PACED:
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


def _loop_paced_compiled(self: EngineLoop, control: LoopControl, cp: CompiledPaced, eng: IoEngine,
                         boundary: int, subinterval_ns: int, wake: int) -> int:
    """The set's turns in compiled code (``paced_kernel.run``) until ``wake`` (the next
    boundary or control poll); it comes back here for what only Python does: a completion
    reaped past the boundary, a workload's refill, a flush, an I/O error to count, a
    submission the kernel took only in part."""
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
