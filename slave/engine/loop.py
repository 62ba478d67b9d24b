"""The engine loop: one thread of control that drives many workloads through shared engines.

Owns the run: the engines by kind, the wait for the start, the general loop (``_loop``: any
mix of workloads and engines, a fixed number of numpy operations per batch, its turns handed
to the compiled loop where that can serve the workloads), each reaped batch recorded and its
slots recycled (resubmitted before the bookkeeping), the boundary where the stats buffers
switch, the drain, and the growth of an engine's context (``_make_room``). A workload owns
exactly ``iodepth`` slots, so never has more I/Os in flight. One timestamp is taken per
submission and one per reaped batch.

Its state has four owners, which ``EngineLoop`` makes and joins: ``Workloads`` (the workloads
and their edits), ``Slots`` (slot table, free pool, in-flight counts, submitting), ``Records``
(pending records, binning, errors) and ``NativeLoop`` (the compiled loop).

It must not talk to processes, pipes or the network: everything outside the loop goes through
the ``LoopControl`` it is given (the worker process implements it; tests implement it in-process).

Time is the given clock's, shared with the parts: the monotonic clock, or a fake engine's
virtual one. Service time = submit -> completion; response time = scheduled start ->
completion (for ``iops=max`` the scheduled start is the submit time). Paced I/Os keep their
schedule when the device cannot keep up, so the backlog shows in response time (no
coordinated omission).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from slave.engine import compiled_loop as pk
from slave.engine import tuning
from slave.engine.base import IoEngine, SlotTable, check_caps, sized
from slave.engine.clock import REAL_CLOCK, Clock, Waiter, timed_wait_ns
from slave.engine.layout import IOCB_CMD_PWRITE, ROW
from slave.engine.loop_native import NativeLoop
from slave.engine.loop_records import Records
from slave.engine.loop_slots import Group, Slots
from slave.engine.loop_state import LoopWorkload, WorkloadSpec
from slave.engine.loop_workloads import Workloads
from slave.engine.verify_state import VerifyState

__all__ = ["EngineLoop", "LoopControl", "WorkloadSpec"]

log = logging.getLogger(__name__)
class LoopControl(Protocol):
    """What the engine loop asks of its owner."""

    def poll(self, loop: EngineLoop) -> None:
        """Called every few ms while running: stage commands, or call ``loop.request_stop()``."""

    def poll_fd(self) -> int | None:
        """A descriptor readable (or closed) whenever ``poll`` has something to do, or None.
        With one, the compiled loop watches it itself and returns for ``poll`` only then: the
        I/Os due wait during each return to Python (docs/engine.md)."""

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

    def __init__(self, capacity: int = 8192, name: str = "loop", clock: Clock = REAL_CLOCK
                 ) -> None:
        self.name = name
        self.clock = clock  # every timestamp and wait of the loop and its parts
        # build (or find in the host's cache) and load the compiled loops now: a build when
        # the loop first picks one, inside a run, held up that run's I/O (docs/engine.md)
        pk.available()
        wl: list[LoopWorkload | None] = []  # kept by ``workloads``; the others read it
        self.slots = Slots(capacity, name, wl, clock)
        self.table = self.slots.table
        self.records = Records(capacity, wl)
        self.native = NativeLoop(name, self.slots, self.records, wl, self._complete,
                                 self._complete_due)
        self.workloads = Workloads(name, wl, self.slots, self.native, lambda: self._engine_list,
                                   self._make_room, self._join_verify)
        # data verification, made when the first verified workload joins (``_join_verify``)
        self.verify: VerifyState | None = None
        self._engines: dict[str, IoEngine] = {}
        self._engine_makers: dict[str, Callable[[SlotTable], IoEngine]] = {}
        self._engine_list: list[IoEngine] = []
        self._stop = False
        self._waiter = Waiter(clock)  # the max-iops waits for completions
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
            check_caps(eng)  # what it declares it can do, it has the calls for
            self._engines[kind] = eng
            self._engine_list = list(self._engines.values())
            self.workloads.refresh()
        return eng

    @property
    def in_flight(self) -> int:
        return self.slots.in_flight

    @property
    def running_buffer(self) -> int:
        return self.records.buf

    def workload_ids(self) -> list[str]:
        return self.workloads.ids()

    def add_workload(self, spec: WorkloadSpec, at_ns: int | None) -> None:
        """Join ``spec``; with ``at_ns`` (loop running) its schedule starts then and a max-iops
        workload fills its queue at once."""
        self.workloads.add(spec, at_ns)

    def edit_workload(self, workload_id: str, params: WorkloadParams, at_ns: int | None
                      ) -> None:
        """New parameters for a workload, its schedule restarted at ``at_ns``
        (``Workloads.edit``: the I/Os the old schedule had due go out first)."""
        self.workloads.edit(workload_id, params, at_ns)

    def edit_workloads(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int | None
                       ) -> None:
        """``edit_workload`` for each, with one look over all workloads at the end."""
        self.workloads.edit_many(edits, at_ns)

    def remove_workload(self, workload_id: str) -> None:
        """Drop a workload: its in-flight I/Os finish uncounted; its slots return to the pool."""
        self.workloads.remove(workload_id)

    @contextlib.contextmanager
    def changes(self) -> Iterator[None]:
        """Several adds, edits and deletes with one look over all workloads at the end."""
        with self.workloads.changes():
            yield

    def _join_verify(self, w: LoopWorkload) -> None:
        """A verified workload (``spec.verify``) joins its LUN's map with its parameters'
        room for blocks in flight (at each setup: an edit may change them)."""
        v = w.spec.verify
        if v is None:
            return
        if self.verify is None:
            self.verify = self.slots.verify = self.native.verify = VerifyState()
        self.verify.add(w.index, v, w.params.blocksize_bytes, w.params.iodepth,
                        w.spec.workload_id)

    def confirmed_serials(self) -> dict[int, int]:
        """Each live verified workload's confirmed serial, by its writer number: every write
        of it with a serial up to this one has completed (and so is in the journal its
        loop's verification gives back next). From the writes it has in flight now (a slot
        neither free nor idle; the compiled set's free stacks where it is loaded), else the
        serial of its next I/O less one. A slot whose completion is held past the boundary
        counts as in flight: the figure errs low, never high."""
        out: dict[int, int] = {}
        native, rows = self.native, self.slots.rows
        loaded = ({w.index: i for i, w in enumerate(native.ws)}
                  if native.ws and native.loaded else {})
        pool = set(self.slots.free)
        for w in self.workloads.live():
            v = w.spec.verify
            if v is None:
                continue
            i = loaded.get(w.index)
            if i is None:
                free = pool.union(w.free)
                nxt = w.ring_serial + w.cur
            else:
                off = int(native.free_off[i])
                free = pool.union(native.free_buf[off : off + int(native.free_n[i])].tolist())
                nxt = int(native.data["ring_serial"][i]) + int(native.cur[i])
            flying = [s for s in w.slots.tolist() if s not in free]
            writes = [int(rows[s, ROW["serial"]]) for s in flying
                      if int(rows[s, ROW["opcode_fd"]]) & 0xFFFF == IOCB_CMD_PWRITE]
            out[v.writer] = (min(writes) if writes else nxt) - 1
        return out

    def flush(self) -> None:
        """Bin the pending completion records into the running stats buffers."""
        self.records.flush()

    def take_errors(self) -> dict[str, dict[str, int]]:
        """I/O errors per workload since the last call, by errno name."""
        return self.records.take_errors()

    def _complete(self, engine: IoEngine, n: int, t: int,
                  held: list[Group] | None = None) -> None:
        """Record ``n`` completions ``engine`` reaped at ``t`` and recycle their slots (the
        resubmissions onto ``held`` where given, for the caller to send: ``Slots.recycle``)."""
        self.slots.in_flight -= n
        slots = engine.done_slot[:n]  # a view: used up before the engine reaps again
        if self.verify is not None:  # checked and settled before the slots are reused
            self.verify.completed(self.slots.rows, slots, engine.done_res[:n], t)
        self.records.add(self.slots.rows, slots, engine.done_res[:n], t)
        if self.slots.recycle(slots, held):  # the last retired I/O completed
            self.workloads.refresh()
        if self.records.full:
            self.records.flush()

    def _complete_due(self, engine: IoEngine, n: int, t: int) -> None:
        """``_complete``; where workloads wait for times (``Workloads.timed``), the I/Os due at
        ``t`` go out after the completions' next ones in the same submission: the compiled
        loop's order, which a differential run compares call for call. Once stopped (the
        drain) nothing more is due."""
        if self.workloads.timed and not self._stop:
            held: list[Group] = []
            self._complete(engine, n, t, held)
            self.slots.submit_due(self.workloads.timed, t, held)
        else:
            self._complete(engine, n, t)

    def _make_room(self, engine: IoEngine, n: int) -> None:
        """Grow a sized engine's context (libaio) where it could not hold ``n`` more slots in
        flight beside those already in use. Inside a run the I/Os in flight are reaped first
        (``_quiesce``), as a context is replaced whole; the old one is closed after the run.
        Raises ``IoEngineError`` (the kernel's reason and the fix) with nothing changed."""
        eng = sized(engine)
        if eng is None:
            return
        need = n + self.slots.in_use(engine)
        if eng.room >= need:
            return
        running = self.subinterval_index >= 0
        live = self._quiesce() if running and self.slots.in_flight else None
        try:
            eng.grow(need, keep_old=running)
        finally:  # the compiled set, which holds the old context's ring, is made anew there
            if live is not None:
                self._resume(live)

    def _quiesce(self) -> list[LoopWorkload]:
        """Reap (and record) every I/O in flight; ``_resume`` then lets each active workload
        (returned) go on where it was. A workload being edited has had its slots retired
        already: they return to the pool. Called with the compiled state given back."""
        live = [w for w in self.workloads.live() if self.slots.holds(w)]
        # every I/O in flight now counts as retired: its completion is recorded and its slot
        # returns to the pool; the last one releases what waited for the retired ones
        self.slots.let_go(live)
        with self.workloads.changes(look=False):
            # reaped past the boundary (``_reaped_late``): in the engine's events
            held, self._reaped = self._reaped, None
            if held is not None:
                self._complete(*held)
            self._reap_all(self.clock.now_ns() + 1_000_000_000)
        self.slots.take_back(live)
        return live

    def _resume(self, live: list[LoopWorkload]) -> None:
        """After ``_quiesce``: a max-iops workload's slots are issued again at once; a paced
        workload's wait for its schedule, which is kept (what was due stays due)."""
        for w in live:
            if w.paced:
                w.free = w.slots.tolist()[::-1]
            else:
                self.slots.issue([(w, w.slots)])
        self.workloads.refresh()  # waits for the end of ``changes()`` when inside it

    def _reap_all(self, deadline_ns: int, timeout_ns: int = 1_000_000_000) -> None:
        """Reap until nothing is in flight (each completion recorded and recycled as its slot's
        owner says). Raises ``IoEngineError`` when I/Os are still in flight at ``deadline_ns``
        (``timeout_ns`` after the loop stopped submitting): the LUN does not answer."""
        while self.slots.in_flight > 0:
            left = deadline_ns - self.clock.now_ns()
            if left <= 0:
                ids = ", ".join(self.workload_ids()) or "none left"
                raise IoEngineError(
                    f"{self.name}: {self.slots.in_flight} I/Os still in flight "
                    f"{timeout_ns / 1e9:g} s after the loop stopped submitting (workloads: "
                    f"{ids}); the LUN does not answer")
            for eng in self._engine_list:
                n = eng.reap(1, min(left, 20_000_000))
                if n:
                    self._complete(eng, n, self.clock.now_ns())

    def request_stop(self, *, record: bool = True) -> None:
        """Stop after the current step; with ``record=False`` the I/Os drained from then on
        are not recorded (their buffer may no longer be ours)."""
        self._stop = True
        if not record:
            self.records.discard = True

    def run(self, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
        """Run from ``start_ns`` until ``request_stop`` (or an error raised by ``control``).
        Subinterval k covers ``[start + k*sub, start + (k+1)*sub)`` and records into stats
        buffer ``k % 2``. On return nothing is in flight (unless the drain timed out)."""
        self._stop = False
        self.records.discard = False
        self.records.buf = 0
        next_poll = 0
        clock = self.clock
        while True:  # wait for the start, still answering the control
            now = clock.now_ns()
            if now >= start_ns or self._stop:
                break
            if now >= next_poll:
                control.poll(self)
                next_poll = now + tuning.POLL_CONTROL_NS
            left = start_ns - now
            if left > 200_000:
                clock.sleep_until(now + min(left - 100_000, tuning.POLL_CONTROL_NS))
            else:
                clock.looked(start_ns)
        if self._stop:
            return
        self.subinterval_index = 0
        self.slots.running = True
        try:
            for w in self.workloads.live():
                self.workloads.start(w, start_ns)
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
            self.slots.running = False

    def _loop(self, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
        """The general loop, one turn at a time; a turn the compiled loop can serve is its."""
        boundary = start_ns + subinterval_ns
        clock = self.clock
        mono = clock.now_ns
        next_poll = mono() + tuning.POLL_CONTROL_NS
        last_done = mono()  # when the last completion was reaped (busy polling spins after it)
        slots, workloads = self.slots, self.workloads
        while not self._stop:
            now = mono()
            if now >= boundary:
                # completions there by now are past the boundary (``_reaped_late``): looked
                # for first, as the compiled loop looks in the ring before at the time (they
                # count in the next subinterval either way; a stop at the boundary drains
                # their slots' next I/Os too)
                engines = self._engine_list
                if not self.native.ws and len(engines) == 1:
                    n = engines[0].poll()
                    if n:
                        boundary = self._reaped_late(control, engines[0], n, now, boundary,
                                                     subinterval_ns)
                        continue
                self._boundary(control, boundary)
                boundary += subinterval_ns
                continue
            if now >= next_poll:
                control.poll(self)
                next_poll = now + tuning.POLL_CONTROL_NS
                continue
            wake = boundary if boundary < next_poll else next_poll
            if self.native.ws:
                boundary = self.native.turns(
                    control, boundary, subinterval_ns, wake, workloads.busy_poll,
                    lambda eng, n, t, b: self._boundary_holding(control, eng, n, t, b))
                continue
            # the completions there first, then the I/Os due by their times: the compiled
            # loop's order (``_complete_due``)
            engines = self._engine_list
            if len(engines) == 1:
                eng = engines[0]
                # look in the ring first when completions are likely there (no syscall); a
                # short wait for a fuller batch did not pay (docs/engine.md)
                n = eng.poll() if (workloads.timed or workloads.busy_poll
                                   or slots.in_flight > 2) else 0
                if not n:
                    if workloads.timed:
                        due = slots.submit_due(workloads.timed, now)
                        if due < wake:
                            wake = due
                    if workloads.busy_poll:
                        clock.idle(wake)  # the device's kernel worker may share our core
                        if now - last_done < tuning.BUSY_SPIN_NS:
                            continue
                        left = wake - mono()
                        if left < tuning.SLEEP_MIN_NS:  # too near to sleep: keep looking
                            continue
                        n = eng.reap(1, timed_wait_ns(left))
                    elif slots.in_flight and not workloads.timed:
                        # max-iops only: look a while before blocking (docs/engine.md)
                        n = self._waiter.wait(eng.poll, eng.reap, wake)
                    else:
                        left = wake - mono()
                        if left < tuning.SLEEP_MIN_NS:  # too near to sleep: look again
                            clock.looked(wake)
                            continue
                        n = eng.reap(1, timed_wait_ns(left))
                if n:
                    t = mono()
                    last_done = t
                    if t >= boundary:
                        boundary = self._reaped_late(control, eng, n, t, boundary,
                                                     subinterval_ns)
                    else:
                        self._complete_due(eng, n, t)
                continue
            if not engines:
                clock.sleep_until(wake)
                continue
            got = 0
            for eng in engines:
                n = eng.poll()
                if n:
                    got += n
                    last_done = mono()
                    self._complete(eng, n, last_done)
            if workloads.timed:
                due = slots.submit_due(workloads.timed, mono() if got else now)
                if due < wake:
                    wake = due
            if not got:
                if workloads.busy_poll:  # as with one engine: spin a while, then block
                    clock.idle(wake)
                    if now - last_done < tuning.BUSY_SPIN_NS:
                        continue
                left = wake - mono()
                if left >= tuning.SLEEP_MIN_NS:  # else too near to sleep: look again
                    eng = engines[0]
                    n = eng.reap(1, min(left, 200_000))
                    if n:
                        self._complete(eng, n, mono())

    def _reaped_late(self, control: LoopControl, eng: IoEngine, n: int, t: int, boundary: int,
                     subinterval_ns: int) -> int:
        """``n`` completions reaped at ``t``, past ``boundary``: close the subinterval first
        (they count in the next one; ``_boundary_holding``), then record them unless the
        boundary's changes did. Returns the next boundary."""
        if self._boundary_holding(control, eng, n, t, boundary):
            self._complete_due(eng, n, t)
        return boundary + subinterval_ns

    def _boundary_holding(self, control: LoopControl, eng: IoEngine, n: int, t: int,
                          boundary: int) -> bool:
        """Close the subinterval with ``n`` completions reaped at ``t`` past ``boundary`` held
        (``_reaped``; a change that reaps, ``_quiesce``, records them first). Returns whether
        they are still held, for the caller (this loop's or the compiled one's) to record."""
        self._reaped = (eng, n, t)
        self._boundary(control, boundary)
        held, self._reaped = self._reaped, None
        return held is not None

    def _boundary(self, control: LoopControl, boundary_ns: int) -> None:
        finished = self.subinterval_index
        self.records.flush()
        errors = self.records.take_errors()
        control.boundary(self, finished, boundary_ns)  # raises when the master is late
        self.records.buf ^= 1
        self.subinterval_index = finished + 1
        switch_done = self.clock.now_ns() - boundary_ns
        control.handed_over(
            self, finished, switch_done, self.clock.now_ns() - boundary_ns, errors
        )

    def _drain(self, timeout_ns: int = 1_000_000_000) -> None:
        """Reap every in-flight I/O (recording it), then reset slots for the next run."""
        self.native.unload(restart=False)
        self.native.ws = []
        deadline = self.clock.now_ns() + timeout_ns
        live = self.workloads.live()
        for w in live:  # completions must not resubmit
            self.slots.set_owner(w.slots, -1)
        self._reap_all(deadline, timeout_ns)
        for eng in self._engine_list:
            grown = sized(eng)
            if grown is not None:
                grown.release_old()  # contexts a run's growth replaced, with nothing in flight
        self.records.flush()
        self.slots.reset(live)
        self.workloads.reset_rings()
        self.workloads.refresh()

    def close(self) -> None:
        for eng in self._engine_list:
            eng.close()
        self._engines.clear()
        self._engine_list = []
        self.native.ws = []
