"""The engine loop's native side: whether the compiled loop serves the workloads as they are
(``NativeLoop.pick``), its turns in C (``paced_kernel.run``, ``NativeLoop.turns``) recording
what completed and submitting every I/O whose time has come in one call, Python only for what
the C returns for; the compiled state given back to the workloads before anything else looks
at them (``unload``); and DFC's edit of rates made in the compiled state in place
(``retime_loaded``). Where the set cannot run compiled, the general loop
(``EngineLoop._loop``) serves its workloads.

Owns ``NativeLoop``: the compiled state (``compiled``: ``CompiledPaced``, which holds the
workloads' free slots and cursors while ``loaded``). It syncs the records' counts (``p``,
``binned``) and the slots' in-flight count with the compiled struct around each turn, and
must not add, edit or remove workloads, nor reap outside the compiled turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from protocol.errors import IoEngineError
from protocol.stats import common_root
from slave.engine import paced_kernel as pk
from slave.engine import tuning
from slave.engine.base import IoEngine
from slave.engine.compiled_paced import CompiledPaced
from slave.engine.loop_records import Records
from slave.engine.loop_slots import Slots
from slave.engine.loop_state import LoopWorkload, took
from slave.params import WorkloadParams
from slave.sequencer import Sequencer

if TYPE_CHECKING:
    from slave.engine.loop import LoopControl


class NativeLoop:
    """The compiled loop of the workloads of a loop (``wl``), where it can serve them."""

    def __init__(self, name: str, slots: Slots, records: Records,
                 wl: list[LoopWorkload | None],
                 complete: Callable[[IoEngine, int, int], None]) -> None:
        self.name = name
        self.compiled: CompiledPaced | None = None
        self._slots = slots
        self._records = records
        self._wl = wl
        self._complete = complete  # records and recycles completions the compiled set left

    def pick(self, live: list[LoopWorkload], engines: list[IoEngine]) -> None:
        """Whether the compiled loop serves ``live``: all of them on one engine, none retired
        with I/O in flight, and the set can run compiled (``_compile``): any mix of paced and
        max-iops workloads (a lone max-iops one of depth 1-2 waits there as its own loop did:
        ``lone``; with ``busy_poll``, it looks in the completion ring instead of sleeping
        while I/O is in flight). Where it does not, the general loop serves, whose Python
        spends 1.1 us of user CPU per I/O on 8 max-iops workloads of QD4, 1.6-1.9 where they
        write: the compiled loop, which submits a max-iops workload's free slots as soon as
        it frees them, does the same work in C."""
        self.unload()
        self.compiled = None
        if live and len(engines) == 1 and self._slots.retired_in_flight == 0:
            eng = engines[0]
            if all(w.spec.engine is eng for w in live):
                self.compiled = self._compile(live, eng)

    def _compile(self, ws: list[LoopWorkload], eng: IoEngine) -> CompiledPaced | None:
        """The set's compiled state, when it can run compiled: the kernel was built
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
        return CompiledPaced(ws, eng, h, root, self._slots, self._records, self._wl)

    def unload(self, *, restart: bool = True) -> None:
        """Give the compiled state back to the workloads, before anything else looks at their
        free slots and cursors: a change of workloads, a drain, a new set. Completions it
        reaped past a boundary and left for its next run are recorded here instead (the
        general way, as ``EngineLoop._reaped_late`` does). A max-iops workload's slots that
        it freed and had not submitted again go out now (``restart``, while running):
        elsewhere a max-iops workload has every slot in flight."""
        cp = self.compiled
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
                if restart and self._slots.running:
                    self._slots.issue([(w, free)])

    def turns(self, control: LoopControl, boundary: int, subinterval_ns: int, wake: int,
              busy_poll: bool, at_boundary: Callable[[int], None],
              late: Callable[[IoEngine, int, int, int], bool]) -> int:
        """The set's turns in compiled code (``paced_kernel.run``) until ``wake`` (the next
        boundary or control poll); it comes back here for what only Python does: completions
        reaped past the boundary (``late`` closes the subinterval first, holding them, as
        ``EngineLoop._reaped_late`` does; ``at_boundary`` closes one without), a workload's
        refill, a flush, an I/O error to count, a submission the kernel took only in part.
        Returns the next boundary."""
        cp = self.compiled
        assert cp is not None  # only a set that runs compiled is picked
        if not cp.loaded:
            cp.load()
        args = cp.args
        records, slots = self._records, self._slots
        args.stat_off = cp.stat_addr[records.buf]
        args.boundary_ns = boundary
        args.wake_ns = wake
        args.discard = int(records.discard)
        fd = control.poll_fd()
        args.control_fd = -1 if fd is None else fd
        args.poll_ns = tuning.POLL_CONTROL_NS
        args.busy_poll = int(busy_poll)
        while True:
            args.p = records.p
            args.binned = records.binned
            args.in_flight = slots.in_flight
            code = pk.run(args)
            records.p = int(args.p)
            records.binned = int(args.binned)
            slots.in_flight = int(args.in_flight)
            if code == pk.R_WAKE:
                return boundary
            if code == pk.R_LATE:
                # the completions stay in the engine's events, held by the loop while the
                # boundary closes (``late``): they count in the next subinterval and are
                # recycled as the workloads are after the boundary's changes, as in
                # ``EngineLoop._reaped_late`` (an edit to a rate does not resubmit a slot a
                # max-iops workload freed at the boundary). Still held after it, the next run
                # records them while the set stays loaded, else they are recorded here
                n, t = int(args.n), int(args.t_ns)
                args.n = 0
                if late(cp.eng, n, t, boundary):
                    if cp.loaded:
                        args.n = n
                        args.t_ns = t
                    else:
                        self._complete(cp.eng, n, t)
                return boundary + subinterval_ns
            if code == pk.R_REFILL:
                args.refill = 0
                for i in np.flatnonzero(cp.armed == 2).tolist():
                    w = cp.ws[i]
                    cp.take_back(i)
                    w.cur = int(cp.cur[i])
                    w.refill(int(cp.free_n[i]))
                    cp.set_ring(i, w)
                    cp.armed[i] = 0
            elif code in (pk.R_FLUSH, pk.R_ERROR):
                records.flush()
            elif code == pk.R_SUBMIT:
                m = int(args.sub_n)
                try:
                    cp.finish_submit(int(args.sub_done), m)
                except IoEngineError as exc:  # the kernel counted all m in flight
                    slots.in_flight -= m - took(exc)
                    raise
            elif code == pk.R_STRAY:
                raise IoEngineError(
                    f"{self.name}: a completion came for I/O slot {int(args.n)}, which no "
                    "paced workload of this loop owns; the loop stops")
            else:  # pragma: no cover - the kernel returns only the codes above
                raise AssertionError(f"paced kernel returned {code}")

    def retime_loaded(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int) -> bool:
        """DFC's edit (a new rate for every workload at every boundary) while the compiled
        set is loaded: ``Workloads._retime``'s result without giving the set back. The kernel
        rewrites the rings' times and the generators' schedules (``paced_kernel.retime``);
        each sequencer takes its new rate and schedule when the set is given back
        (``CompiledPaced.take_back``). Given back and loaded again at every boundary, 1,024
        workloads held a worker's I/O some 30 ms each time. False (nothing done) where any
        edit is not such an edit."""
        cp = self.compiled
        if cp is None or not cp.loaded:
            return False
        pos_of = cp.pos_of
        on = cp.gen["on"].tolist()
        ws = cp.ws
        chosen: dict[int, WorkloadParams] = {}
        for workload_id, params in edits:
            k = pos_of.get(workload_id)
            if (k is None or not on[k] or not ws[k].paced or params.iops is None
                    or not params.same_but_rate(ws[k].spec.params)):
                return False
            chosen[k] = params  # the last edit of a workload counts
        ks = np.fromiter(chosen, dtype=np.int64, count=len(chosen))
        iops = np.fromiter((p.iops for p in chosen.values()), dtype=np.float64,
                           count=len(chosen))
        for k, params in chosen.items():
            ws[k].spec.params = params
        periods, bases = Sequencer.schedule_starts(cp.phase_fraction[ks], iops, at_ns)
        pk.retime(cp.args, cp.gen, at_ns, ks, periods, bases)
        # the kernel's heap holds the old times: its next run arms every workload anew
        cp.armed[cp.armed == 1] = 0
        cp.args.heap_n = 0
        return True
