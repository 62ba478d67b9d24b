"""The engine loop's workloads joining, changing and leaving: add, edit (in place where only
a paced rate changes, also inside the compiled loop), delete, and several at once with one
look over all of them at the end (``changes``). A change never loses I/Os the old settings had
due: they go out first, with their scheduled times.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from protocol.errors import IoEngineError
from slave.datapattern import WritePattern
from slave.engine import paced_kernel as pk
from slave.engine.base import AlignedBuffers
from slave.engine.layout import R_CAT, R_OFF, R_SCHED
from slave.engine.loop_state import LoopWorkload, WorkloadSpec, set_ring
from slave.params import WorkloadParams
from slave.sequencer import Sequencer, stream_fraction

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop

log = logging.getLogger(__name__)


def add_workload(self: EngineLoop, spec: WorkloadSpec, at_ns: int | None) -> None:
    """Join ``spec``; with ``at_ns`` (loop running) its schedule starts then and a max-iops
    workload fills its queue at once."""
    p = spec.params
    if spec.workload_id in self._index_of:
        raise IoEngineError(f"{self.name}: workload {spec.workload_id} exists already")
    self._hand_back()
    w = LoopWorkload(
        index=len(self._wl),
        spec=spec,
        seq=Sequencer(
            p,
            lun_size_bytes=spec.lun_size_bytes,
            logical_block_bytes=spec.logical_block_bytes,
            stream=spec.workload_id,
        ),
        pattern=make_pattern(p),
        slots=self._alloc_slots(p.iodepth, spec.workload_id, spec.engine),
        buffers=AlignedBuffers(p.iodepth, p.blocksize_bytes),
        paced=p.iops is not None,
        ring_spread=0.5 + stream_fraction(spec.workload_id, b"ivypy-ring"),
    )
    self._wl.append(w)
    self._index_of[spec.workload_id] = w.index
    self._setup_slots(w)
    self._refresh()
    if at_ns is not None:
        self._start_workload(w, at_ns)


def make_pattern(p: WorkloadParams) -> WritePattern | None:
    if not p.writes:
        return None
    return WritePattern(p.write_data, p.write_data_ratio, p.blocksize_bytes, p.seed)


def edit_workload(self: EngineLoop, workload_id: str, params: WorkloadParams,
                  at_ns: int | None) -> None:
    """New parameters for a workload (at a boundary when running). Its schedule restarts at
    ``at_ns``. Paced I/Os the old schedule had due before ``at_ns`` and not yet issued (the
    LUN or the loop was behind) are still issued, first, with their scheduled times (also
    when the edit makes the workload run at max iops), so the backlog stays in response
    time (no coordinated omission); they are dropped, with a warning, only where they no
    longer fit (the blocksize changed, or they are writes and the workload no longer
    writes). The workload's I/Os go on at its first I/O not issued (a sequential one's
    position, every one's draws)."""
    w = self._find(workload_id)
    self._hand_back()
    old = w.params
    if (at_ns is not None and w.paced and params.iops is not None
            and params.same_but_rate(old)):
        self._retime(w, params, at_ns)
        return
    rest = w.ring[w.cur :]
    due = 0
    if at_ns is not None and w.paced:
        due = int(rest[:, R_SCHED].searchsorted(at_ns, "left"))  # the ring is in time order
    elif at_ns is not None:
        due = w.overdue  # kept by an earlier edit and still not issued
    overdue = rest[:due].copy()
    overdue_write = w.ring_write[w.cur : w.cur + due].copy()
    resume = int(rest[due, R_OFF]) if due < rest.shape[0] else None
    w.spec.params = params
    # the I/Os generated after the kept ones are dropped: the new settings' I/Os take their
    # draws (the stream goes on at the first I/O not issued, whenever the edit came)
    w.seq = w.seq.edited(params, at_ns=at_ns or 0, resume_offset_bytes=resume,
                         unissued=int(rest.shape[0]) - due)
    w.pattern = make_pattern(params)
    same_slots = params.iodepth == old.iodepth and params.blocksize_bytes == old.blocksize_bytes
    was_paced = w.paced
    w.paced = params.iops is not None
    if due and (params.blocksize_bytes != old.blocksize_bytes or w.pattern is None):
        if params.blocksize_bytes != old.blocksize_bytes:
            why, keep = "the blocksize changed", np.zeros(due, dtype=np.bool_)
        else:  # no write pattern any more: the writes among them have no data
            why, keep = "the workload no longer writes", ~overdue_write
        dropped = due - int(keep.sum())
        if dropped:
            log.warning(
                "workload %s: %d I/Os due before its edit were not issued yet (the LUN was "
                "behind) and are dropped: %s", workload_id, dropped, why,
            )
            overdue, overdue_write = overdue[keep], overdue_write[keep]
    set_ring(w, overdue, overdue_write)
    w.overdue = 0 if w.paced else int(overdue.shape[0])
    if same_slots:
        self._setup_slots(w)
        mixed_categories(w)
        self._refresh()
        if at_ns is not None and was_paced and not w.paced and w.free:
            free = np.array(w.free, dtype=np.intp)
            w.free = []
            self._issue(w, free)
        return
    self._retire(w)
    w.old_buffers.append(w.buffers)  # in-flight I/Os may still use them
    w.buffers = AlignedBuffers(params.iodepth, params.blocksize_bytes)
    w.slots = self._alloc_slots(params.iodepth, workload_id, w.spec.engine)
    self._setup_slots(w)
    mixed_categories(w)
    self._refresh()
    if at_ns is not None:
        self._start_workload(w, at_ns)


def edit_workloads(self: EngineLoop, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int | None
                   ) -> None:
    """``edit_workload`` for each, in order, with one look over all workloads at the end
    (``changes``); in place where every edit only sets a new rate of a paced workload
    that the compiled loop holds (``_retime_loaded``)."""
    if at_ns is not None and self._retime_loaded(edits, at_ns):
        return
    with self.changes():
        for workload_id, params in edits:
            self.edit_workload(workload_id, params, at_ns)


def _retime_loaded(self: EngineLoop, edits: Sequence[tuple[str, WorkloadParams]],
                   at_ns: int) -> bool:
    """DFC's edit (a new rate for every workload at every boundary) while the compiled
    paced loop holds the workloads: ``_retime``'s result without giving the set back.
    The kernel rewrites the rings' times and the generators' schedules
    (``paced_kernel.retime``); each sequencer takes its new rate and schedule when the
    set is given back (``CompiledPaced.take_back``). Given back and loaded again at
    every boundary, 1,024 workloads held a worker's I/O some 30 ms each time. False
    (nothing done) where any edit is not such an edit."""
    pw = self._paced_words
    cp = None if pw is None else pw[0].compiled
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


def _retime(self: EngineLoop, w: LoopWorkload, params: WorkloadParams, at_ns: int) -> None:
    """``edit_workload`` of a running paced workload whose new parameters differ only in
    its rate (DFC's edit, for every workload at every boundary): the I/Os it precomputed
    keep their offsets, data and place in the ring; those due before ``at_ns`` keep their
    scheduled times (the backlog), the rest take the new schedule's. Remaking the ring
    instead cost a refill of ~70 us per workload soon after each such boundary."""
    rest = w.ring[w.cur :]
    due = int(rest[:, R_SCHED].searchsorted(at_ns, "left"))  # the ring is in time order
    w.spec.params = params
    w.seq.retime(params, at_ns)  # on after everything precomputed
    if due < rest.shape[0]:
        rest[due:, R_SCHED] = w.seq.schedule(rest.shape[0] - due)
    self._refresh()  # the paced loop's heap holds the old times


def mixed_categories(w: LoopWorkload) -> None:
    """I/Os kept from the old settings may be of another category than the new settings'
    only one: then every I/O is recorded by its own category."""
    if w.fixed_cat >= 0 and w.ring_len and bool((w.ring[:, R_CAT] != w.fixed_cat).any()):
        w.fixed_cat = -1


def remove_workload(self: EngineLoop, workload_id: str) -> None:
    """Drop a workload: its in-flight I/Os finish uncounted; its slots return to the pool."""
    w = self._find(workload_id)
    self._hand_back()
    self._retire(w)
    self._wl[w.index] = None
    del self._index_of[workload_id]
    self._refresh()
    if w.spec.on_release is not None:
        # its in-flight I/Os may still use the fd (the thread-pool engine by number)
        self._pending_release.append(w.spec.on_release)
        if self._retired_in_flight == 0:
            self._refresh()


def _find(self: EngineLoop, workload_id: str) -> LoopWorkload:
    i = self._index_of.get(workload_id)
    w = None if i is None else self._wl[i]
    if w is None:
        raise IoEngineError(f"{self.name}: no workload {workload_id}")
    return w


def _retire(self: EngineLoop, w: LoopWorkload) -> None:
    """Stop resubmitting ``w``'s slots: idle ones go back to the pool now, in-flight ones
    when they complete."""
    self._set_active(w.slots, -1)
    # not running: nothing is in flight; running: only a paced workload's free slots idle
    running = self.subinterval_index >= 0
    idle = w.slots.tolist() if not running else list(w.free) if w.paced else []
    self._free_slots.extend(idle)
    self._retired_in_flight += int(w.slots.size) - len(idle)
    w.free = []


@contextlib.contextmanager
def changes(self: EngineLoop) -> Iterator[None]:
    """Several adds, edits and deletes with one look over all workloads at the end, not
    one per change: a controller that edits every workload at a boundary (DFC) otherwise
    made the boundary quadratic (512 edits took 175 ms, 2,048 took 2.1 s, while I/Os
    waited)."""
    self._deferring += 1
    try:
        yield
    finally:
        self._deferring -= 1
        if not self._deferring and self._refresh_due:
            self._refresh()


def _start_workload(self: EngineLoop, w: LoopWorkload, at_ns: int) -> None:
    w.seq.start(at_ns)
    if w.paced:
        w.free = w.slots.tolist()[::-1]
    else:
        self._issue(w, w.slots)
