"""The engine loop's I/O slots: submitting workloads' next I/Os on their slots (several
workloads' in one submission per engine, paced ones when due) and recycling completed slots
(resubmitted, freed for a paced workload's next I/O, or returned to the pool).

Owns ``Slots``: the slot table and its rows, each slot's owner, the free pool, the counts of
I/Os in flight (and of retired ones: their workload let go of their slots), whether a run is
on, and each workload's ``slots`` and ``free`` (its slots waiting for a scheduled I/O). It
reads the workloads' table (``wl``, kept by ``Workloads``), takes their next I/Os through
``LoopWorkload.next_ios`` and stamps submissions with the loop's clock. It must not record,
bin or decide which loop runs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine import tuning
from slave.engine.base import IoEngine, SlotTable, registering
from slave.engine.clock import REAL_CLOCK, Clock
from slave.engine.layout import INF, IO, ROW, SCATTER
from slave.engine.loop_state import LoopWorkload, took
from slave.engine.verify_state import VerifyState

#: a workload and the slots of its I/Os in one submission
Group = tuple[LoopWorkload, npt.NDArray[np.intp]]


class Slots:
    """``capacity`` I/O slots that the workloads of a loop (``wl``) take and give back."""

    def __init__(self, capacity: int, name: str, wl: list[LoopWorkload | None],
                 clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock  # the loop's: each submission's time
        self.name = name
        self.table = SlotTable(capacity)
        self.rows = self.table.rows
        self._rows_flat = self.rows.reshape(-1)
        # each slot's buffer row in its workload: a strided view, index it, never ``.take``
        # (which copies a strided source whole: docs/engine.md)
        self.buffer_row = self.rows[:, ROW["buf_row"]]
        # flat indices of each slot's words that a precomputed I/O is scattered into
        self._scatter_idx = (
            np.arange(capacity, dtype=np.intp)[:, None] * SlotTable.ROW_WORDS + SCATTER
        )
        self.owner = [-1] * capacity  # each slot's workload, which resubmits it, or -1
        self.free: list[int] = list(range(capacity - 1, -1, -1))
        self.in_flight = 0
        self.retired_in_flight = 0  # in flight on slots no workload holds any more
        self.running = False  # inside a run: I/Os may be in flight
        self._wl = wl
        self.verify: VerifyState | None = None  # the loop's, once a workload verifies

    def set_owner(self, slots: npt.NDArray[np.intp], owner: int) -> None:
        """Which workload resubmits ``slots`` (-1: none)."""
        for s in slots.tolist():
            self.owner[s] = owner

    def categories_in_flight(self, w: LoopWorkload) -> set[int]:
        """The categories of the I/Os in flight to be recorded as ``w``'s (also on its retired
        slots). Only ``w``'s slots are looked at where none retired is in flight: a boundary
        may edit thousands of workloads."""
        owner = ROW["owner"]
        if self.retired_in_flight:
            mine = np.flatnonzero(self.rows[:, owner] == w.index)
            idle = set(self.free) | set(w.free)
        else:
            mine = w.slots[self.rows[w.slots, owner] == w.index]
            idle = set(w.free)
        return {int(self.rows[s, ROW["cat"]]) for s in mine.tolist() if s not in idle}

    def holds(self, w: LoopWorkload) -> bool:
        """Whether ``w``'s slots are its own (not let go of while it is being changed)."""
        return self.owner[int(w.slots[0])] == w.index

    def in_use(self, engine: IoEngine) -> int:
        """Slots that may have I/O in flight on ``engine``: its workloads' and the retired."""
        return self.retired_in_flight + sum(
            int(w.slots.size) for w in self._wl
            if w is not None and w.spec.engine is engine and self.holds(w))

    def alloc(self, n: int, workload_id: str) -> npt.NDArray[np.intp]:
        if n > len(self.free):
            raise IoEngineError(
                f"{self.name}: workload {workload_id} needs {n} I/O slots, only "
                f"{len(self.free)} of {self.table.capacity} are free"
            )
        return np.array([self.free.pop() for _ in range(n)], dtype=np.intp)

    def setup(self, w: LoopWorkload) -> None:
        """Make ``w``'s slots its own: their buffers, sizes and rows in its buffers."""
        p = w.params
        slots = w.slots
        rows = self.rows
        rows[slots, ROW["buf"]] = w.buffers.addr[: slots.size].astype(np.int64)
        reg = registering(w.spec.engine)
        if reg is not None:  # io_uring registers the file and the slots' buffers
            reg.prepare_slots(slots, w.spec.fd, w.buffers)
        rows[slots, ROW["nbytes"]] = p.blocksize_bytes
        rows[slots, ROW["buf_row"]] = np.arange(slots.size)
        rows[slots, ROW["owner"]] = w.index
        rows[slots, ROW["size_bytes"]] = p.blocksize_bytes
        self.set_owner(slots, w.index)

    def retire(self, w: LoopWorkload) -> None:
        """Stop resubmitting ``w``'s slots: idle ones go back to the pool now, in-flight ones
        when they complete."""
        self.set_owner(w.slots, -1)
        # not running: nothing is in flight; running: only a paced workload's free slots idle
        idle = w.slots.tolist() if not self.running else list(w.free) if w.paced else []
        self.free.extend(idle)
        self.retired_in_flight += int(w.slots.size) - len(idle)
        w.free = []

    def let_go(self, live: list[LoopWorkload]) -> None:
        """Every I/O in flight counts as retired: each completion returns its slot to the pool,
        not resubmitted, until ``take_back``."""
        for w in live:
            self.set_owner(w.slots, -1)
        self.retired_in_flight = self.in_flight

    def take_back(self, live: list[LoopWorkload]) -> None:
        """``live``'s slots their own again, and out of the pool."""
        owned: set[int] = set()
        for w in live:
            self.set_owner(w.slots, w.index)
            owned.update(w.slots.tolist())
        self.free = [s for s in self.free if s not in owned]

    def reset(self, live: list[LoopWorkload]) -> None:
        """After a drain (nothing in flight): ``live`` hold their slots, none of them free; the
        rest are in the pool."""
        owned: set[int] = set()
        for w in live:
            self.set_owner(w.slots, w.index)
            owned.update(w.slots.tolist())
            w.free = []
        self.free = [s for s in range(self.table.capacity - 1, -1, -1) if s not in owned]
        self.retired_in_flight = 0
        self.in_flight = max(self.in_flight, 0)

    def issue(self, groups: list[Group]) -> None:
        """Submit each workload's next I/Os on its slots: rows (and write data) written, then one
        submission per engine (docs/engine.md), all stamped with one submit time. A max-iops
        I/O is scheduled when submitted, but those an edit kept (``overdue``) keep theirs."""
        by_engine: dict[IoEngine, list[npt.NDArray[np.intp]]] = {}
        starts_now: list[npt.NDArray[np.intp]] = []
        ios: list[npt.NDArray[np.int64]] = []
        verified: list[tuple[npt.NDArray[np.intp], int]] = []
        for w, slots in groups:
            k = int(slots.size)
            ios.append(w.next_ios(slots, self.buffer_row))
            if self.verify is not None and w.spec.verify is not None:
                # their serials: the ring's, as next_ios left it (refilled or not)
                verified.append((slots, w.ring_serial + w.cur - k))
            if not w.paced:
                kept = min(k, w.overdue)
                w.overdue -= kept
                if kept < k:
                    starts_now.append(slots[kept:])
            by_engine.setdefault(w.spec.engine, []).append(slots)
        every = groups[0][1] if len(groups) == 1 else np.concatenate([g[1] for g in groups])
        self._rows_flat.put(self._scatter_idx.take(every, axis=0),
                            ios[0] if len(ios) == 1 else np.concatenate(ios))
        rows = self.rows
        if self.verify is not None:
            for slots, first_serial in verified:  # stamped and in flight before they go
                self.verify.submitted(rows, slots, first_serial)
        t_sub = self.clock.now_ns()
        if starts_now:
            rows[np.concatenate(starts_now), ROW["sched_ns"]] = t_sub
        for eng, parts in by_engine.items():
            slots = parts[0] if len(parts) == 1 else np.concatenate(parts)
            rows[slots, ROW["submit_ns"]] = t_sub
            try:
                eng.submit(slots)
            except IoEngineError as exc:
                self.in_flight += took(exc)
                raise
            self.in_flight += int(slots.size)

    def submit_due(self, timed: list[LoopWorkload], now: int,
                   held: list[Group] | None = None) -> int:
        """Submit the ``timed`` workloads' I/Os that are due and have a free slot, at most
        ``tuning.PACED_PER_CALL_PYTHON`` scheduled ones, in one submission after ``held``
        (``recycle``'s): workload by workload, earliest first, as the compiled loop's heap
        takes them (docs/engine.md). I/Os an edit kept (``overdue``) count as scheduled; the
        last of them takes its workload's other free slots along; the workload leaves ``timed``.
        Returns the earliest time of a waiting I/O that has a slot, or ``INF``."""
        next_due = INF
        due: list[tuple[int, int, int]] = []  # the first one's time, the workload's index, k
        for i, w in enumerate(timed):
            nfree = len(w.free)
            if not nfree:
                continue
            c = w.cur
            if c + nfree > w.ring_len:
                w.refill(nfree)
                c = 0
            if not w.paced:  # kept I/Os, all due (before the edit), then its own: at once
                due.append((int(w.ring[c, IO["sched_ns"]]) if w.overdue else 0, i,
                            min(nfree, w.overdue) if w.overdue else nfree))
                continue
            first = int(w.ring[c, IO["sched_ns"]])
            if first > now:  # the common case, without a search
                next_due = min(next_due, first)
                continue
            # the ring is in time order
            k = 1 if nfree == 1 else int(
                w.ring[c : c + nfree, IO["sched_ns"]].searchsorted(now, "right"))
            due.append((first, i, k))
        groups = held if held is not None else []
        spent = False
        if due:
            next_due, spent = self._take_due(timed, due, next_due, groups)
        if groups:
            self.issue(groups)
        if spent:  # a max-iops workload sent the last I/O an edit kept: it leaves ``timed``
            timed[:] = [w for w in timed if w.paced or w.overdue]
        return next_due

    def _take_due(self, timed: list[LoopWorkload], due: list[tuple[int, int, int]],
                  next_due: int, groups: list[Group]) -> tuple[int, bool]:
        """``submit_due``'s choice of ``due`` onto ``groups``; returns the earliest time of an
        I/O due left for a later call, and whether a workload sent the last I/O an edit kept."""
        due.sort()  # (time, index): a tie goes in the workloads' order
        left = tuning.PACED_PER_CALL_PYTHON
        spent = False
        for first, i, k in due:
            if not left and first:  # due now: the next call's
                next_due = min(next_due, first)
                continue
            w = timed[i]
            take = min(k, left) if first else k
            if first:
                left -= take
            if not w.paced and take == w.overdue:  # the last kept: the rest go with it
                take = len(w.free)
                spent = True
            if take < len(w.free):
                next_due = min(next_due, int(w.ring[w.cur + take, IO["sched_ns"]]))
            groups.append((w, np.array([w.free.pop() for _ in range(take)], dtype=np.intp)))
        return next_due, spent

    def recycle(self, slots: npt.NDArray[np.intp], held: list[Group] | None = None) -> bool:
        """Completed ``slots``: resubmitted in the workloads' order, in one submission (max
        iops; onto ``held`` where given, for ``submit_due`` to send); freed for ``submit_due``
        (paced, or with I/Os an edit kept); or returned to the pool (retired). The compiled
        loop's order (docs/engine.md). True when the last retired I/O in flight completed."""
        # grouped by owner with plain ints, cheaper than numpy here (docs/engine.md)
        owner_of = self.owner
        by: dict[int, list[int]] = {}
        for s in slots.tolist():
            o = owner_of[s]
            g = by.get(o)
            if g is None:
                by[o] = [s]
            else:
                g.append(s)
        retired = by.pop(-1, None)
        last_retired = False
        if retired is not None:
            self.free.extend(retired)
            self.retired_in_flight -= len(retired)
            last_retired = self.retired_in_flight == 0
        wl = self._wl
        resubmit: list[Group] = []
        owners = by if len(by) == 1 else sorted(by)
        for o in owners:
            g = by[o]
            w = wl[o]
            assert w is not None
            if w.paced or w.overdue:
                w.free.extend(g)
            else:
                resubmit.append((w, np.array(g, dtype=np.intp)))
        if held is not None:
            held.extend(resubmit)
        elif resubmit:
            self.issue(resubmit)
        return last_retired

