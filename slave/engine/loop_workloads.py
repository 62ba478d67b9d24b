"""The engine loop's workloads: joining, changing (in place where only a paced rate changes)
and leaving, and the look over all of them after a change (``refresh``, deferred inside
``changes``): the mix of paced and max-iops workloads, each one's refill size, and which loop
serves them. A change never loses I/Os the old settings had due: they go out first, with their
scheduled times.

Owns ``Workloads``: the workloads' table (``wl``: a workload's index is its place there, for
good; the slots, the records and the native loop read it), the ids, the paced ones, and what
waits for the retired I/Os to be released. It changes slots only through ``Slots`` and the
compiled state only through ``NativeLoop``, and must not reap, record or submit but through
them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from slave.datapattern import WritePattern
from slave.engine import tuning
from slave.engine.base import AlignedBuffers, IoEngine
from slave.engine.layout import IO
from slave.engine.loop_native import NativeLoop
from slave.engine.loop_slots import Slots
from slave.engine.loop_state import LoopWorkload, WorkloadSpec, ring_ahead, set_ring
from slave.sequencer import Sequencer, stream_fraction

log = logging.getLogger(__name__)


class Workloads:
    """The workloads of a loop. ``engines``: the loop's engines now; ``make_room``: grows an
    engine for ``n`` more slots in flight (``EngineLoop._make_room``) before they are taken."""

    def __init__(self, name: str, wl: list[LoopWorkload | None], slots: Slots,
                 native: NativeLoop, engines: Callable[[], list[IoEngine]],
                 make_room: Callable[[IoEngine, int], None],
                 join_verify: Callable[[LoopWorkload], None] = lambda w: None) -> None:
        self.name = name
        self._join_verify = join_verify  # a verified workload's LUN and room, at each setup
        self.wl = wl
        self.paced: list[LoopWorkload] = []
        # what waits for a time: the paced ones and those with I/Os an edit kept (``overdue``)
        self.timed: list[LoopWorkload] = []
        self.busy_poll = False
        self._n_max = 0  # live workloads at max iops (they share RING_BUDGET)
        self._index_of: dict[str, int] = {}  # live workloads by id
        self._slots = slots
        self._native = native
        self._engines = engines
        self._make_room = make_room
        self._pending_release: list[Callable[[], None]] = []
        self._deferring = 0  # inside changes(): refresh waits for the end
        self._refresh_due = False

    def live(self) -> list[LoopWorkload]:
        return [w for w in self.wl if w is not None]

    def ids(self) -> list[str]:
        return [w.spec.workload_id for w in self.wl if w is not None]

    def find(self, workload_id: str) -> LoopWorkload:
        i = self._index_of.get(workload_id)
        w = None if i is None else self.wl[i]
        if w is None:
            raise IoEngineError(f"{self.name}: no workload {workload_id}")
        return w

    def _alloc(self, n: int, workload_id: str, engine: IoEngine) -> npt.NDArray[np.intp]:
        if n <= len(self._slots.free):  # else alloc says why
            self._make_room(engine, n)
        return self._slots.alloc(n, workload_id)

    def _setup(self, w: LoopWorkload) -> None:
        self._join_verify(w)
        self._slots.setup(w)
        w.fixed_cat = fixed_category(w.params)

    def add(self, spec: WorkloadSpec, at_ns: int | None) -> None:
        """Join ``spec``; with ``at_ns`` (loop running) its schedule starts then and a max-iops
        workload fills its queue at once."""
        p = spec.params
        if spec.workload_id in self._index_of:
            raise IoEngineError(f"{self.name}: workload {spec.workload_id} exists already")
        self._native.unload()
        w = LoopWorkload(
            index=len(self.wl),
            spec=spec,
            seq=Sequencer(
                p,
                lun_size_bytes=spec.lun_size_bytes,
                logical_block_bytes=spec.logical_block_bytes,
                stream=spec.workload_id,
            ),
            pattern=make_pattern(p),
            slots=self._alloc(p.iodepth, spec.workload_id, spec.engine),
            buffers=AlignedBuffers(p.iodepth, p.blocksize_bytes),
            paced=p.iops is not None,
            ring_spread=0.5 + stream_fraction(spec.workload_id, b"ivypy-ring"),
        )
        w.ahead = ring_ahead(w, self._n_max, len(self.paced))  # till the next look
        self.wl.append(w)
        self._index_of[spec.workload_id] = w.index
        self._setup(w)
        self.refresh()
        if at_ns is not None:
            self.start(w, at_ns)

    def edit(self, workload_id: str, params: WorkloadParams, at_ns: int | None) -> None:
        """New parameters for a workload (at a boundary when running); its schedule restarts at
        ``at_ns``. Paced I/Os the old schedule had due and not yet issued go out first with
        their scheduled times, also when it becomes max iops (no coordinated omission); they
        are dropped, with a warning, only where they no longer fit (a new blocksize, or writes
        when it no longer writes). Its I/Os go on at its first one not issued (a sequential
        one's position, every one's draws)."""
        w = self.find(workload_id)
        self._native.unload()
        old = w.params
        if (at_ns is not None and w.paced and params.iops is not None
                and params.same_but_rate(old)):
            self._retime(w, params, at_ns)
            return
        # the categories in flight, where the new settings have only one
        flying = (self._slots.categories_in_flight(w)
                  if self._slots.running and fixed_category(params) >= 0 else set())
        rest = w.ring[w.cur :]
        due = 0
        if at_ns is not None and w.paced:
            due = self._backlog(w, at_ns)
            rest = w.ring[w.cur :]
        elif at_ns is not None:
            due = w.overdue  # kept by an earlier edit and still not issued
        overdue = rest[:due].copy()
        overdue_write = w.ring_write[w.cur : w.cur + due].copy()
        resume = int(rest[due, IO["offset"]]) if due < rest.shape[0] else None
        w.spec.params = params
        # the I/Os precomputed after the kept ones are dropped; the new settings' take their draws
        w.seq = w.seq.edited(params, at_ns=at_ns or 0, resume_offset_bytes=resume,
                             unissued=int(rest.shape[0]) - due)
        w.pattern = make_pattern(params)
        same_slots = (params.iodepth == old.iodepth
                      and params.blocksize_bytes == old.blocksize_bytes)
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
                    "workload %s: %d I/Os due before its edit were not issued yet (the LUN "
                    "was behind) and are dropped: %s", workload_id, dropped, why,
                )
                overdue, overdue_write = overdue[keep], overdue_write[keep]
        set_ring(w, overdue, overdue_write)
        w.overdue = 0 if w.paced else int(overdue.shape[0])
        if same_slots:
            self._setup(w)
            mixed_categories(w, flying)
            self.refresh()
            if at_ns is not None and was_paced and not w.paced and w.free:
                free = np.array(w.free, dtype=np.intp)
                w.free = []
                self._slots.issue([(w, free)])
            return
        self._slots.retire(w)
        w.old_buffers.append(w.buffers)  # in-flight I/Os may still use them
        w.buffers = AlignedBuffers(params.iodepth, params.blocksize_bytes)
        w.slots = self._alloc(params.iodepth, workload_id, w.spec.engine)
        self._setup(w)
        mixed_categories(w, flying)
        self.refresh()
        if at_ns is not None:
            self.start(w, at_ns)

    def edit_many(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int | None
                  ) -> None:
        """``edit`` for each, in order, with one look at the end; in the compiled loop's arrays
        where every edit only sets a new rate (``NativeLoop.retime_loaded``)."""
        if at_ns is not None:
            cap = self._backlog_cap()
            cut = self._native.retime_loaded(edits, at_ns, cap)
            if cut is not None:
                for w in cut:
                    self._cut(w, cap)
                return
        with self.changes():
            for workload_id, params in edits:
                self.edit(workload_id, params, at_ns)

    def _retime(self, w: LoopWorkload, params: WorkloadParams, at_ns: int) -> None:
        """``edit`` of a running paced workload whose new parameters differ only in its rate
        (DFC's): its precomputed I/Os keep their place in the ring; those due before ``at_ns``
        keep their times, the rest take the new schedule's (docs/engine.md)."""
        due = self._backlog(w, at_ns)
        rest = w.ring[w.cur :]
        w.spec.params = params
        # the arrivals not due take the new schedule's, drawn again from where theirs were
        w.seq.rewind_schedule(rest.shape[0] - due)
        w.seq.retime(params, at_ns)  # on after everything precomputed
        if due < rest.shape[0]:
            rest[due:, IO["sched_ns"]] = w.seq.schedule(rest.shape[0] - due)
        self.refresh()  # the compiled loop's heap holds the old times

    def _backlog_cap(self) -> int:
        """The most I/Os of its backlog an edited paced workload keeps: its share of
        ``tuning.BACKLOG_BUDGET`` among the paced workloads at the last look (the same for a
        batch of edits), ``BACKLOG_MIN`` at least."""
        return max(tuning.BACKLOG_MIN, tuning.BACKLOG_BUDGET // max(1, len(self.paced)))

    def _backlog(self, w: LoopWorkload, at_ns: int) -> int:
        """The backlog an edit of paced ``w`` at ``at_ns`` keeps: how many I/Os at the head of
        its ring (from ``cur``) were due before then and not issued, precomputed into the ring
        where it did not reach that far. At most ``_backlog_cap``: of a longer backlog (told by
        one I/O past it) the first are kept, the rest dropped with a warning (``_cut``). The same
        whichever loop precomputed the ring, and in place (``NativeLoop.retime_loaded``)."""
        sched = IO["sched_ns"]
        cap = self._backlog_cap()
        while w.ring_len == w.cur or w.ring[w.ring_len - 1, sched] < at_ns:
            held = w.ring_len - w.cur
            if held > cap:  # more due than it keeps, whatever the rest of the ring holds
                return self._cut(w, cap)
            # doubling, so a long backlog takes few refills (docs/engine.md), up to ``cap + 1``
            w.refill(min(held, cap + 1 - held))
        # the ring is in time order
        due = int(w.ring[w.cur :, sched].searchsorted(at_ns, "left"))
        return due if due <= cap else self._cut(w, cap)

    def _cut(self, w: LoopWorkload, cap: int) -> int:
        """Say that an edit keeps only the first ``cap`` I/Os of ``w``'s backlog; ``cap``."""
        log.warning(
            "workload %s: more than %d I/Os its schedule had due before its edit were not "
            "issued yet (the LUN was far behind; a worker keeps %d for each of its %d paced "
            "workloads): the first %d keep their scheduled times, the rest of the old "
            "schedule is dropped", w.spec.workload_id, cap, cap, max(1, len(self.paced)), cap)
        return cap

    def remove(self, workload_id: str) -> None:
        """Drop a workload: its in-flight I/Os finish uncounted; its slots return to the pool."""
        w = self.find(workload_id)
        self._native.unload()
        self._slots.retire(w)
        self.wl[w.index] = None
        del self._index_of[workload_id]
        if w.spec.on_release is not None:
            # its in-flight I/Os may still use the fd (the thread-pool engine by number)
            self._pending_release.append(w.spec.on_release)
        self.refresh()

    def start(self, w: LoopWorkload, at_ns: int) -> None:
        """``w``'s schedule starts at ``at_ns``: a max-iops workload fills its queue now."""
        w.seq.start(at_ns)
        if w.paced:
            w.free = w.slots.tolist()[::-1]
        else:
            self._slots.issue([(w, w.slots)])

    def reset_rings(self) -> None:
        """After a drain: no precomputed I/O is kept for the next run."""
        for w in self.live():
            set_ring(w, w.ring[:0], w.ring_write[:0])
            w.overdue = 0

    @contextlib.contextmanager
    def changes(self, *, look: bool = True) -> Iterator[None]:
        """Several adds, edits and deletes with one look at the end, not one per change
        (docs/engine.md). ``look=False``: none at the end either; it waits for a ``refresh``."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if look and not self._deferring and self._refresh_due:
                self.refresh()

    def refresh(self) -> None:
        """The look after a change: the mix, refill sizes, the loop (``NativeLoop.pick``) and,
        once no retired I/O is in flight, the release of what waited for them."""
        if self._deferring:
            self._refresh_due = True
            return
        self._refresh_due = False
        live = self.live()
        self.paced = [w for w in live if w.paced]
        self.timed = [w for w in live if w.paced or w.overdue]
        self._n_max = len(live) - len(self.paced)
        for w in live:
            w.ahead = ring_ahead(w, self._n_max, len(self.paced))
        self.busy_poll = any(w.params.busy_poll for w in live)
        self._native.pick(live, self._engines())
        if self._slots.retired_in_flight == 0 and self._pending_release:
            release, self._pending_release = self._pending_release, []
            for fn in release:
                fn()


def make_pattern(p: WorkloadParams) -> WritePattern | None:
    if not p.writes:
        return None
    return WritePattern(p.write_data, p.write_data_ratio, p.blocksize_bytes, p.seed)


def fixed_category(p: WorkloadParams) -> int:
    """The category of every I/O of ``p`` (reads only or writes only), or -1 when it varies."""
    if p.read_fraction not in (0.0, 1.0):
        return -1
    return 2 * (p.iosequencer == "sequential") + (p.read_fraction == 0.0)


def mixed_categories(w: LoopWorkload, flying: set[int]) -> None:
    """Where I/Os kept in the ring or in flight at the edit (``flying``: their categories) are
    of another category than the new settings' only one, every I/O is recorded by its own."""
    if w.fixed_cat < 0:
        return
    kept = w.ring[: w.ring_len, IO["cat"]]
    if flying - {w.fixed_cat} or bool((kept != w.fixed_cat).any()):
        w.fixed_cat = -1
