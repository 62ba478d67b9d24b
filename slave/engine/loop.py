"""The engine loop: one thread of control that drives many workloads through shared engines.

Owns the hot path: reap a batch of completions, resubmit the completed slots (before any
bookkeeping) with the next precomputed I/Os of their workloads, submit paced I/Os when their
scheduled time comes, buffer raw completion records and bin them into the running subinterval's
``WorkloadStats`` in bulk, and switch subinterval buffers at each boundary. One timestamp is
taken per submit batch and one per reap batch. A workload never has more than ``iodepth`` I/Os
in flight: it owns exactly ``iodepth`` slots.

This module holds ``EngineLoop``'s state, its set-up, the choice of loop for the workloads it
has (``_refresh``, ``_pick_word_loops``), the run, the boundary and the drain. Its other
methods are written in modules of their own, one part of the hot path each, and bound in its
class body (``self`` is the loop there too):

- ``loop_edits``: workloads joining, changing (in place where only a paced rate changes) and
  leaving, several at once with one look at the end (``changes``);
- ``loop_issue``: precomputing a workload's I/Os and submitting them, several workloads' in one
  call;
- ``loop_records``: recording completions, recycling their slots, binning, I/O errors;
- ``loop_general``: the general path (``_loop``): any mix of workloads and engines, a fixed
  number of numpy operations per batch; a batch of several workloads' I/Os grouped with plain
  ints and resubmitted in one call (one call per workload per batch had cost 8 workloads of
  depth 4 a third of their IOPS: 140,000 -> 190,000-210,000 on a tmpfs loop device);
- ``loop_paced``: the compiled loop's Python side: any mix of paced and max-iops workloads
  on one engine, its turns in C (``_loop_paced_compiled``, ``paced_kernel``), where it can
  run; the general path serves the rest;
- ``compiled_paced``, ``loop_args``, ``waits``, ``loop_state``, ``layout`` and ``tuning``: the
  compiled loop's state in Python and its structs' mirrors, the waits, a workload's state, the
  row layout and the measured knobs.

It must not talk to processes, pipes or the network: everything outside the loop goes through
the ``LoopControl`` it is given (the worker process implements it; tests implement it in-process).

Time: ``time.monotonic_ns``. Service time = submit -> completion; response time = scheduled start
-> completion (for ``iops=max`` the scheduled start is the submit time). Paced I/Os keep their
schedule when the device cannot keep up, so the backlog shows in response time (no coordinated
omission). Busy polling spins on the completion ring for a while after each completion, then
blocks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine import (
    loop_edits,
    loop_general,
    loop_issue,
    loop_paced,
    loop_records,
    tuning,
)
from slave.engine import paced_kernel as pk
from slave.engine.aio_abi import W_BUF, W_NBYTES
from slave.engine.base import IoEngine, SlotTable
from slave.engine.layout import C_NBYTES, C_OWNER, C_ROW, SCATTER
from slave.engine.loop_paced import PacedSet
from slave.engine.loop_state import LoopWorkload, WorkloadSpec, set_ring
from slave.engine.waits import Waiter

__all__ = ["EngineLoop", "LoopControl", "WorkloadSpec"]

log = logging.getLogger(__name__)


class LoopControl(Protocol):
    """What the engine loop asks of its owner."""

    def poll(self, loop: EngineLoop) -> None:
        """Called every few ms while running: stage commands, or call ``loop.request_stop()``."""

    def poll_fd(self) -> int | None:
        """A descriptor that is readable (or closed) whenever ``poll`` has something to do, or
        None. With one, the compiled paced loop looks at it every ``POLL_CONTROL_NS`` itself
        and comes back for ``poll`` only when it is: each way back to Python cost 8-64 us,
        during which the I/Os due waited (at 35,000 IOPS, 2 % of them)."""

    def boundary(self, loop: EngineLoop, finished_index: int, boundary_ns: int) -> None:
        """At the end of subinterval ``finished_index`` (its records are already binned):
        check that the next buffer is ready to run (raise if not) and apply staged changes."""

    def handed_over(
        self,
        loop: EngineLoop,
        finished_index: int,
        switch_done_ns: int,
        handed_over_ns: int,
        io_errors: dict[str, dict[str, int]],
    ) -> None:
        """Subinterval ``finished_index`` is complete in its buffer; latencies are relative to
        the boundary."""


class EngineLoop:
    """Serves many workloads through one slot table and one engine per engine kind."""

    def __init__(self, capacity: int = 8192, name: str = "loop") -> None:
        self.name = name
        # the compiled loops built (or found in the host's cache) and loaded now: the loop
        # looks for them when it picks a loop for its workloads, and a build then, inside a
        # run (a few seconds of the compiler where the cache is empty), held up that run's
        # I/O (seen in a test: 40 I/Os in 300 ms of QD8 at 50 us). A worker pool loads them
        # before it forks; a loop made elsewhere (tests) did not.
        pk.available()
        self.table = SlotTable(capacity)
        self._rows = self.table.rows
        self._rows_flat = self._rows.reshape(-1)
        # each slot's buffer row in its workload: a strided view, so index it (``[slots]``),
        # never ``.take``: numpy's take first copies a strided source whole (8,192 rows of
        # 128 bytes read for a handful of words: 6.8 us against 0.2 us per batch of writes)
        self._slot_rows = self._rows[:, C_ROW]
        # flat indices of each slot's words that a precomputed I/O is scattered into
        self._scatter_idx = (
            np.arange(capacity, dtype=np.intp)[:, None] * SlotTable.ROW_WORDS + SCATTER
        )
        self._owner = [-1] * capacity  # each slot's workload, which resubmits it, or -1
        self._free_slots: list[int] = list(range(capacity - 1, -1, -1))
        # records buffered before binning: taken once, as the buffers below are sized by it
        self._flush_at = tuning.FLUSH_AT
        self._pend = np.zeros((self._flush_at + capacity, SlotTable.ROW_WORDS), dtype=np.int64)
        self._p = 0
        self._binned = 0  # records of _pend[:_p] already binned one at a time (in C)
        self._wl: list[LoopWorkload | None] = []
        self._index_of: dict[str, int] = {}  # live workloads by id
        self._deferring = 0  # inside changes(): _refresh waits for the end
        self._refresh_due = False
        self._engines: dict[str, IoEngine] = {}
        self._engine_makers: dict[str, Callable[[SlotTable], IoEngine]] = {}
        self._engine_list: list[IoEngine] = []
        self._in_flight = 0
        self._retired_in_flight = 0
        self._pending_release: list[Callable[[], None]] = []
        self._buf = 0  # which of the two stats buffers is running
        self._stop = False
        self._discard = False
        self._busy_poll = False
        self._waiter = Waiter()  # the max-iops loops' wait for completions
        # the paced loop's set, engine and events (``_pick_word_loops``)
        self._paced_words: tuple[PacedSet, IoEngine, memoryview] | None = None
        self._paced: list[LoopWorkload] = []
        self._n_max_iops = 0  # live workloads at max iops (they share RING_BUDGET)
        self.subinterval_index = -1
        # completions reaped past a boundary, recorded after it (``_reaped_late``)
        self._reaped: tuple[IoEngine, int, int] | None = None

    def register_engine_kind(self, kind: str, maker: Callable[[SlotTable], IoEngine]) -> None:
        self._engine_makers[kind] = maker

    def engine(self, kind: str) -> IoEngine:
        """The loop's engine of ``kind``, created on first use."""
        eng = self._engines.get(kind)
        if eng is None:
            maker = self._engine_makers.get(kind)
            if maker is None:
                raise IoEngineError(f"{self.name}: no engine of kind {kind!r}")
            eng = maker(self.table)
            self._engines[kind] = eng
            self._engine_list = list(self._engines.values())
            self._pick_word_loops()
        return eng

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def running_buffer(self) -> int:
        return self._buf

    def workload_ids(self) -> list[str]:
        return [w.spec.workload_id for w in self._wl if w is not None]

    def _set_active(self, slots: npt.NDArray[np.intp], owner: int) -> None:
        """Which workload resubmits ``slots`` (-1: none)."""
        for s in slots.tolist():
            self._owner[s] = owner

    def _alloc_slots(self, n: int, workload_id: str, engine: IoEngine) -> npt.NDArray[np.intp]:
        if n > len(self._free_slots):
            raise IoEngineError(
                f"{self.name}: workload {workload_id} needs {n} I/O slots, only "
                f"{len(self._free_slots)} of {self.table.capacity} are free"
            )
        self._make_room(engine, n)
        got = [self._free_slots.pop() for _ in range(n)]
        return np.array(got, dtype=np.intp)

    def _make_room(self, engine: IoEngine, n: int) -> None:
        """Grow ``engine``'s context (a sized engine's: libaio) where it could not hold the
        I/Os of ``n`` more slots in flight beside those of its active workloads and the
        retired I/Os still in flight. Inside a run the I/Os in flight are reaped first
        (``_quiesce``), as a context is replaced whole; the old one is closed after the run.
        Raises ``IoEngineError`` (the kernel's reason and the fix) with nothing changed."""
        grow = getattr(engine, "grow", None)
        if grow is None:
            return
        al = self._owner
        need = n + self._retired_in_flight + sum(
            int(w.slots.size) for w in self._wl
            if w is not None and w.spec.engine is engine and al[int(w.slots[0])] == w.index)
        if getattr(engine, "room", need) >= need:
            return
        running = self.subinterval_index >= 0
        live = self._quiesce() if running and self._in_flight else None
        try:
            grow(need, keep_old=running)
        finally:  # the compiled set, which holds the old context's ring, is made anew there
            if live is not None:
                self._resume(live)

    def _quiesce(self) -> list[LoopWorkload]:
        """Reap (and record) every I/O in flight; ``_resume`` then lets each active workload
        (returned) go on where it was. A workload being edited has had its slots retired
        already: they return to the pool. Called with the specialised loops handed back
        (``_hand_back``), at a boundary."""
        al = self._owner
        live = [w for w in self._wl if w is not None and al[int(w.slots[0])] == w.index]
        for w in live:  # their completions are recorded, not resubmitted
            self._set_active(w.slots, -1)
        # every I/O in flight now counts as retired: each completion returns its slot to the
        # pool, and the last one releases what waited for the retired ones
        self._retired_in_flight = self._in_flight
        self._deferring += 1
        try:
            self._complete_reaped()  # reaped past the boundary: in the engine's events
            self._reap_all(time.monotonic_ns() + 1_000_000_000)
        finally:
            self._deferring -= 1
        owned: set[int] = set()
        for w in live:
            self._set_active(w.slots, w.index)
            owned.update(w.slots.tolist())
        self._free_slots = [s for s in self._free_slots if s not in owned]
        return live

    def _resume(self, live: list[LoopWorkload]) -> None:
        """After ``_quiesce``: a max-iops workload's slots are issued again at once, a paced
        workload's wait for its schedule, which is kept (what was due and not issued stays
        due)."""
        for w in live:
            if w.paced:
                w.free = w.slots.tolist()[::-1]
            else:
                self._issue(w, w.slots)
        self._refresh()  # waits for the end of ``changes()`` when inside it

    def _reap_all(self, deadline_ns: int, timeout_ns: int = 1_000_000_000) -> None:
        """Reap until nothing is in flight (each completion recorded and recycled as its slot's
        owner says). Raises ``IoEngineError`` when I/Os are still in flight at ``deadline_ns``
        (``timeout_ns`` after the loop stopped submitting): the LUN does not answer."""
        while self._in_flight > 0:
            left = deadline_ns - time.monotonic_ns()
            if left <= 0:
                ids = ", ".join(self.workload_ids()) or "none left"
                raise IoEngineError(
                    f"{self.name}: {self._in_flight} I/Os still in flight {timeout_ns / 1e9:g} s "
                    f"after the loop stopped submitting (workloads: {ids}); the LUN does not "
                    "answer")
            for eng in self._engine_list:
                n = eng.reap(1, min(left, 20_000_000))
                if n:
                    self._complete(eng, n, time.monotonic_ns())

    def _setup_slots(self, w: LoopWorkload) -> None:
        p = w.params
        slots = w.slots
        rows = self._rows
        rows[slots, W_BUF] = w.buffers.addr[: slots.size].astype(np.int64)
        prepare = getattr(w.spec.engine, "prepare_slots", None)
        if prepare is not None:  # io_uring registers the file and the slots' buffers
            prepare(slots, w.spec.fd, w.buffers)
        rows[slots, W_NBYTES] = p.blocksize_bytes
        rows[slots, C_ROW] = np.arange(slots.size)
        rows[slots, C_OWNER] = w.index
        rows[slots, C_NBYTES] = p.blocksize_bytes
        self._set_active(slots, w.index)
        w.fixed_cat = -1
        if p.read_fraction in (0.0, 1.0):
            w.fixed_cat = 2 * (p.iosequencer == "sequential") + (p.read_fraction == 0.0)

    def _refresh(self) -> None:
        if self._deferring:
            self._refresh_due = True
            return
        self._refresh_due = False
        live = [w for w in self._wl if w is not None]
        self._paced = [w for w in live if w.paced]
        self._n_max_iops = len(live) - len(self._paced)
        self._busy_poll = any(w.params.busy_poll for w in live)
        self._pick_word_loops()
        if self._retired_in_flight == 0 and self._pending_release:
            release, self._pending_release = self._pending_release, []
            for fn in release:
                fn()

    def _pick_word_loops(self) -> None:
        """Whether the compiled loop serves: all workloads on one engine that lays out its
        completions as words, none retired with I/O in flight, and the set can run compiled
        (``_compile_paced``): any mix of paced and max-iops workloads (a lone max-iops one of
        depth 1-2 waits there as its own loop did: ``lone``; with ``busy_poll``, it looks in
        the completion ring instead of sleeping while I/O is in flight). Where it does not,
        the general loop (``_loop``) serves, whose Python spends 1.1 us of user CPU per I/O
        on 8 max-iops workloads of QD4, 1.6-1.9 where they write: the compiled loop, which
        submits a max-iops workload's free slots as soon as it frees them, does the same work
        in C."""
        self._unload_paced()
        self._paced_words = None
        engines = self._engine_list
        live = [w for w in self._wl if w is not None]
        if live and len(engines) == 1 and self._retired_in_flight == 0:
            eng = engines[0]
            words = getattr(eng, "done_words", None)
            if words is not None and all(w.spec.engine is eng for w in live):
                ps = PacedSet(live)
                ps.compiled = self._compile_paced(ps, eng)
                if ps.compiled is not None:
                    self._paced_words = (ps, eng, words)

    def _hand_back(self, *, restart: bool = True) -> None:
        """Leave the specialised loops' own state before a change of workloads or a drain:
        the compiled paced set's slots and cursors (``_unload_paced``)."""
        self._unload_paced(restart=restart)

    def request_stop(self, *, record: bool = True) -> None:
        """Stop after the current step; with ``record=False`` the I/Os drained from then on
        are not recorded (their buffer may no longer be ours)."""
        self._stop = True
        if not record:
            self._discard = True

    def run(self, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
        """Run from ``start_ns`` until ``request_stop`` (or an error raised by ``control``).
        Subinterval k covers ``[start + k*sub, start + (k+1)*sub)`` and records into stats
        buffer ``k % 2``. On return nothing is in flight (unless the drain timed out)."""
        self._stop = False
        self._discard = False
        self._buf = 0
        next_poll = 0
        while True:  # wait for the start, still answering the control
            now = time.monotonic_ns()
            if now >= start_ns or self._stop:
                break
            if now >= next_poll:
                control.poll(self)
                next_poll = now + tuning.POLL_CONTROL_NS
            left = start_ns - now
            if left > 200_000:
                time.sleep(min(left - 100_000, tuning.POLL_CONTROL_NS) / 1e9)
        if self._stop:
            return
        self.subinterval_index = 0
        try:
            for w in self._wl:
                if w is not None:
                    self._start_workload(w, start_ns)
            self._loop(control, start_ns, subinterval_ns)
        except BaseException as exc:
            try:
                self._drain()
            except IoEngineError as also:  # the first error is the one to report
                exc.add_note(f"and while stopping: {also}")
            raise
        else:
            self._drain()
        finally:
            self.subinterval_index = -1

    def _reaped_late(self, control: LoopControl, eng: IoEngine, n: int, t: int, boundary: int,
                     subinterval_ns: int) -> int:
        """A loop reaped ``n`` completions at ``t``, past ``boundary``: close the subinterval
        first (the I/Os count in the next one), then record them the general way. They wait
        in the engine's events meanwhile (``_reaped``): a boundary's change that reaps itself
        (``_quiesce``) records them first. Returns the next boundary."""
        self._reaped = (eng, n, t)
        self._boundary(control, boundary)
        self._complete_reaped()
        return boundary + subinterval_ns

    def _complete_reaped(self) -> None:
        """Record the completions ``_reaped_late`` holds, if they are still held."""
        held, self._reaped = self._reaped, None
        if held is not None:
            self._complete(*held)

    def _boundary(self, control: LoopControl, boundary_ns: int) -> None:
        finished = self.subinterval_index
        self.flush()
        errors = self.take_errors()
        control.boundary(self, finished, boundary_ns)  # raises when the master is late
        self._buf ^= 1
        self.subinterval_index = finished + 1
        switch_done = time.monotonic_ns() - boundary_ns
        control.handed_over(
            self, finished, switch_done, time.monotonic_ns() - boundary_ns, errors
        )

    def _drain(self, timeout_ns: int = 1_000_000_000) -> None:
        """Reap every in-flight I/O (recording it), then reset slots for the next run."""
        self._hand_back(restart=False)
        deadline = time.monotonic_ns() + timeout_ns
        for w in self._wl:  # completions must not resubmit
            if w is not None:
                self._set_active(w.slots, -1)
        self._paced_words = None
        self._reap_all(deadline, timeout_ns)
        for eng in self._engine_list:
            release_old = getattr(eng, "release_old", None)
            if release_old is not None:
                release_old()  # contexts a run's growth replaced, with nothing in flight
        self.flush()
        owned: set[int] = set()
        for w in self._wl:
            if w is not None:
                self._set_active(w.slots, w.index)
                owned.update(w.slots.tolist())
                w.free = []
                set_ring(w, w.ring[:0], w.ring_write[:0])
                w.overdue = 0
        self._free_slots = [s for s in range(self.table.capacity - 1, -1, -1) if s not in owned]
        self._retired_in_flight = 0
        self._in_flight = max(self._in_flight, 0)
        self._refresh()

    def close(self) -> None:
        for eng in self._engine_list:
            eng.close()
        self._engines.clear()
        self._engine_list = []
        self._paced_words = None

    # workloads joining, changing and leaving (``slave.engine.loop_edits``)
    add_workload = loop_edits.add_workload
    edit_workload = loop_edits.edit_workload
    edit_workloads = loop_edits.edit_workloads
    _retime_loaded = loop_edits._retime_loaded
    _retime = loop_edits._retime
    remove_workload = loop_edits.remove_workload
    _find = loop_edits._find
    _retire = loop_edits._retire
    changes = loop_edits.changes
    _start_workload = loop_edits._start_workload

    # issuing I/O (``slave.engine.loop_issue``)
    _refill = loop_issue._refill
    _ahead = loop_issue._ahead
    _issue = loop_issue._issue
    _issue_groups = loop_issue._issue_groups
    _next_ios = loop_issue._next_ios
    _submit_due = loop_issue._submit_due

    # completions and statistics (``slave.engine.loop_records``)
    _complete = loop_records._complete
    _recycle = loop_records._recycle
    flush = loop_records.flush
    _record = loop_records._record
    _count_errors = loop_records._count_errors
    take_errors = loop_records.take_errors

    # the general path (``slave.engine.loop_general``)
    _loop = loop_general._loop


    # the paced loop (``slave.engine.loop_paced``)
    _compile_paced = loop_paced._compile_paced
    _unload_paced = loop_paced._unload_paced
    _loop_paced_compiled = loop_paced._loop_paced_compiled
