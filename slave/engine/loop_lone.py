"""The Python loops of one max-iops workload alone on its engine, where the compiled loop
(``paced_kernel``, which serves it where it can) cannot run: queue depth 1-2 with plain ints
(``_loop_scalar``), and deeper reads with a fixed handful of numpy operations per reaped batch
(``_loop_single``).

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import time
from os import sched_yield
from typing import TYPE_CHECKING

from protocol.errors import IoEngineError
from slave.engine import tuning
from slave.engine.aio_abi import W_OFFSET, W_OPCODE_FD
from slave.engine.base import IoEngine, SlotTable
from slave.engine.layout import C_CAT, C_DONE, C_RES, C_SCHED, C_SUBMIT, R_CAT, R_OFF, R_SUBMIT
from slave.engine.loop_state import LoopWorkload, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop, LoopControl


def _loop_scalar(
    self: EngineLoop,
    control: LoopControl,
    w: LoopWorkload,
    eng: IoEngine,
    ev: memoryview,
    boundary: int,
    subinterval_ns: int,
    wake: int,
) -> int:
    """The loop for one max-iops workload of iodepth <= ``SCALAR_MAX`` on an engine that
    exposes its completions as words (libaio): plain ints and memoryviews only, until
    ``wake`` (the next boundary or control poll) or a completion reaped after the boundary
    (handled here, before it is recorded). Returns the next boundary."""
    mono = time.monotonic_ns
    busy = self._busy_poll
    poll = eng.poll
    reap = eng.reap
    submit_one = eng.submit_one
    # writes fill their buffer first; I/Os kept from a paced schedule keep their time
    issue1 = None if w.pattern is None and not w.overdue else self._issue1
    pw = self._pend_words
    tw = self._rows_words
    rw = SlotTable.ROW_WORDS
    # the ring of precomputed I/Os, held in locals while this runs (``w.cur`` kept up)
    cur = w.cur
    ring_len = w.ring_len
    ring = w.ring_words
    spin_ns = tuning.BUSY_SPIN_NS
    now = mono()
    spin_until = now + spin_ns
    while now < wake:
        if busy:
            n = poll()
            if not n:
                sched_yield()  # let the device's kernel worker run if it shares our core
                now = mono()
                if now < spin_until or now >= wake:
                    continue
                n = reap(1, min(boundary - now, tuning.BLOCK_WAIT_NS))  # spun long enough: block
                if not n:
                    now = mono()
                    continue
        else:
            # a far timeout (a near one costs a timer reprogramming per I/O); a control
            # poll waits for the next completion, up to BLOCK_WAIT_NS; a boundary never
            n = reap(1, min(boundary - now, tuning.BLOCK_WAIT_NS))
            if not n:
                now = mono()
                continue
        t = mono()
        if t >= boundary:
            return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
        p = self._p
        for i in range(n):
            s = ev[4 * i]
            b = rw * p
            r = rw * s
            pw[b : b + rw] = tw[r : r + rw]
            pw[b + C_RES] = ev[4 * i + 2]
            pw[b + C_DONE] = t
            p += 1
            # resubmit before the next record (in-flight count unchanged)
            if issue1 is not None:
                self._in_flight -= 1
                issue1(w, s)
                cur = w.cur
                ring_len = w.ring_len
                ring = w.ring_words
                continue
            if cur >= ring_len:
                self._refill(w, 1)
                cur = 0
                ring_len = w.ring_len
                ring = w.ring_words
            k = 5 * cur
            cur += 1
            w.cur = cur
            tw[r + W_OPCODE_FD] = ring[k]
            tw[r + W_OFFSET] = ring[k + R_OFF]
            tw[r + C_CAT] = ring[k + R_CAT]
            t_sub = mono()
            tw[r + C_SUBMIT] = t_sub
            tw[r + C_SCHED] = t_sub
            try:
                submit_one(s)
            except IoEngineError as exc:  # it was counted in flight
                self._in_flight -= 1 - took(exc)
                raise
        self._p = p
        if p >= self._flush_at:
            self.flush()
        now = t
        spin_until = now + spin_ns
    return boundary


def _loop_single(
    self: EngineLoop,
    control: LoopControl,
    w: LoopWorkload,
    eng: IoEngine,
    boundary: int,
    subinterval_ns: int,
    wake: int,
) -> int:
    """The loop for one max-iops workload that only reads, of queue depth above
    ``SCALAR_MAX``, alone on its engine: ``_complete`` and ``_issue`` inlined with their
    lookups held in locals (a fixed handful of numpy operations per reaped batch), until
    ``wake`` (the next boundary or control poll) or a completion reaped after the boundary
    (handled here, before it is recorded). Returns the next boundary."""
    mono = time.monotonic_ns
    poll = eng.poll
    reap = eng.reap
    await_completions = self._waiter.wait
    submit = eng.submit
    done_slot = eng.done_slot
    done_res = eng.done_res
    take_rows = self._rows.take
    pend = self._pend
    put_rows = self._rows_flat.put
    take_scatter = self._scatter_idx.take
    marks = self._marks_words
    nm = self._n_marks
    # rows recorded the general way since, or the notes are another workload's
    if nm and (marks[2 * nm - 2] != self._p or self._mark_owner != w.index):
        self._stamp_done()
    self._mark_owner = w.index
    while True:
        n = poll()
        if not n:
            n = await_completions(poll, reap, wake)
            if not n:
                return boundary
        t = mono()
        if t >= boundary:
            return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
        slots = done_slot[:n]  # a view: used up before the engine reaps again
        p = self._p
        q = p + n
        # "clip": the slots are ours (each event returns the slot we submitted); numpy's
        # default "raise" copies ``out`` first, to leave it unchanged on an error
        take_rows(slots, axis=0, out=pend[p:q], mode="clip")
        # resubmit before the bookkeeping (in-flight count unchanged)
        c = w.cur
        if c + n > w.ring_len:
            self._refill(w, n)
            c = 0
        w.cur = c + n
        ring = w.ring[c : c + n]
        ring[:, R_SUBMIT:] = mono()
        put_rows(take_scatter(slots, axis=0), ring)
        try:
            submit(slots)
        except IoEngineError as exc:  # they were counted in flight
            self._in_flight -= n - took(exc)
            raise
        pend[p:q, C_RES] = done_res[:n]
        # the batch's completion time, noted: the flush reads the notes as one array
        nm = self._n_marks
        if not nm:
            self._mark_from = p
        marks[2 * nm] = q
        marks[2 * nm + 1] = t
        self._n_marks = nm + 1
        self._p = q
        if q >= self._flush_at:
            self.flush()
        if t >= wake:
            return boundary
