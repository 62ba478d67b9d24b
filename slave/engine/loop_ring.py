"""The lone max-iops read workload's loop on a ring of iocbs (``_loop_ring``, its turns in C
where they can run: ``_loop_ring_compiled``): entering the ring from the slot path, answering
each reaped batch by submitting the ring's next iocbs by address, recording completions as the
events' words, and leaving the ring, drained, before any change. No numpy call per batch: on
a tmpfs loop device at QD32 the ring took user CPU per I/O from 1.39 to 0.97 us (median of 4
rounds, against fio's 0.79) before its turns went to C.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING, cast

import numpy as np

from protocol.errors import IoEngineError
from slave.engine import paced_kernel as pk
from slave.engine import tuning
from slave.engine.aio_abi import IOCB_CMD_PREAD, W_OFFSET, opcode_fd_word
from slave.engine.base import IocbEngine, IoEngine, SlotTable
from slave.engine.compiled_paced import CompiledWords, compiled_words
from slave.engine.iocb_ring import EV_WORDS, TAG, IocbRing
from slave.engine.layout import C_CAT, C_DONE, C_NBYTES, C_OWNER, C_RES, R_CAT, R_OFF, R_OPFD
from slave.engine.loop_state import LoopWorkload, set_ring, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop, LoopControl


def _enter_ring(self: EngineLoop, w: LoopWorkload) -> IocbRing:
    """``w`` (alone, max iops, reads of one category, on an engine that takes iocbs of
    ours) goes on in ``_loop_ring``: its I/Os precomputed as whole iocbs, the unused rest
    of its ring first. Its slots' I/Os in flight are adopted: each completes there and is
    recorded from its slot row, and a ring I/O replaces it."""
    if self._ring is not None:
        self.flush()  # the records of a ring left earlier (then dropped)
    p = w.params
    rest = w.ring[w.cur : w.ring_len, R_OFF]
    size = max(self._ahead(w), int(rest.size) + 4 * p.iodepth)
    ring = IocbRing(size, p.iodepth, w.spec.fd, p.blocksize_bytes, w.buffers.addr,
                    self._flush_at)
    ring.append(rest)
    ring.append(w.seq.chunk(size - ring.end).offset_bytes)
    set_ring(w, w.ring[:0], w.ring_write[:0])
    ring.adopted = self._in_flight  # w is the only workload: these are its slots'
    if len(self._ring_counts) <= p.iodepth:
        self._ring_counts = [ctypes.c_long(i) for i in range(p.iodepth + 1)]
    self._ring = ring
    self._ring_w = w
    self._ring_cat = w.fixed_cat
    return ring


def _loop_ring(self: EngineLoop, control: LoopControl, ring: IocbRing, boundary: int,
               subinterval_ns: int, wake: int) -> int:
    """``_loop_single`` on a ring of iocbs: a reaped batch of ``n`` is answered by
    submitting the ring's next ``n`` iocbs (their addresses are already an array) and
    recorded as the events' words plus two marks, with no numpy call per batch, until
    ``wake`` or a completion reaped after the boundary. Returns the next boundary. Its
    turns run in C where they can (``_loop_ring_compiled``): once the slots it adopted
    have completed, on an engine whose completion ring compiled code can read."""
    w = self._ring_w
    assert w is not None
    eng = cast(IocbEngine, w.spec.engine)
    if not ring.adopted and tuning.COMPILED_RING:
        words = self._ring_c_args(eng)
        if words is not None:
            return self._loop_ring_compiled(control, ring, words, boundary,
                                            subinterval_ns, wake)
    mono = time.monotonic_ns
    poll = eng.poll
    reap = eng.reap
    await_completions = self._waiter.wait
    fast, c_sys, c_ctx = eng.submit_fast_args()
    counts = self._ring_counts
    void_p = ctypes.c_void_p
    ev = eng.done_words
    rec = ring.rec_words
    done_marks = ring.done_words
    sub_marks = ring.sub_words
    ptrs = ring.ptrs_addr
    records = ring.records
    while True:
        n = poll()
        if not n:
            n = await_completions(poll, reap, wake)
            if not n:
                return boundary
        t = mono()
        # resubmit before the bookkeeping (in-flight count unchanged)
        c = ring.cur
        if c + n > ring.end:
            self._refill_ring(ring, w)
            c = 0
        t_sub = mono()
        got = fast(c_sys, c_ctx, counts[n], void_p(ptrs + 8 * c))
        if got != n:
            self._ring_submit_rest(ring, eng, n, got, t_sub)
        c += n
        ring.cur = c
        k = ring.n_sub
        sub_marks[2 * k] = ring.seq0 + c
        sub_marks[2 * k + 1] = t_sub
        ring.n_sub = k + 1
        if t >= boundary:
            return self._ring_late(control, ring, n, t, boundary, subinterval_ns)
        if ring.adopted:
            self._ring_take(ring, ev, n, t)
        else:
            p = ring.n_rec
            q = p + n
            rec[EV_WORDS * p : EV_WORDS * q] = ev[: EV_WORDS * n]
            k = ring.n_done
            done_marks[2 * k] = q
            done_marks[2 * k + 1] = t
            ring.n_done = k + 1
            ring.n_rec = q
        if ring.n_rec >= records:
            self.flush()
        if t >= wake:
            return boundary


def _refill_ring(self: EngineLoop, ring: IocbRing, w: LoopWorkload) -> None:
    """Fill ``ring`` up with ``w``'s next I/Os, its records flushed first (the ring saves
    the offsets of its I/Os in flight there, before their iocbs are rewritten)."""
    self.flush()
    ring.refill(w.seq.chunk(ring.size - ring.end + ring.cur).offset_bytes)


def _ring_submit_rest(self: EngineLoop, ring: IocbRing, eng: IocbEngine, n: int, got: int,
                      t_sub: int) -> None:
    """The ring's resubmission of a reaped batch of ``n`` (its next iocbs, from ``cur``,
    submitted at ``t_sub``) took ``got`` (-1: failed): learn why, or submit the rest. When
    that raises, those the kernel took are the ring's submissions (so that the stop
    records them as the ring's, not as I/Os it never had in flight: an AssertionError
    then replaced the real error), and the rest leave the in-flight count (the ring keeps
    it unchanged across a batch), so that the stop does not wait for I/Os that were never
    submitted (a second of waiting, and a "does not answer" error in place of this
    one)."""
    try:
        eng.submit_iocbs(ring.ptrs_addr + 8 * ring.cur, n, got)
    except IoEngineError as exc:
        taken = max(took(exc), got, 0)
        if taken:
            ring.cur += taken
            k = ring.n_sub
            ring.sub_words[2 * k] = ring.seq0 + ring.cur
            ring.sub_words[2 * k + 1] = t_sub
            ring.n_sub = k + 1
        self._in_flight -= n - taken
        raise


def _ring_c_args(self: EngineLoop, eng: IoEngine) -> CompiledWords | None:
    """The compiled ring loop's function, argument and state words for ``eng`` (made once
    per engine), or None where it cannot run: no kernel here, or an engine whose
    completion ring compiled code cannot read."""
    rw = self._ring_c_words
    if rw is not None and rw[0] is eng:
        return rw[1]
    made = compiled_words(eng, pk.ring_function(), pk.RA, pk.RS_WORDS)
    if made is None:
        return None
    h, words = made
    args = words[1]
    args[pk.RA["RING_HEADER"]] = h.ring_header.ctypes.data
    args[pk.RA["RING_EVENTS"]] = h.ring_events.ctypes.data
    args[pk.RA["SPIN_NS"]] = tuning.AWAIT_SPIN_NS
    args[pk.RA["SPIN_GATE_NS"]] = tuning.AWAIT_SPIN_GATE_NS
    args[pk.RA["SLEEP_MIN_NS"]] = tuning.SLEEP_MIN_NS
    self._ring_c_words = (eng, words)
    return words


def _loop_ring_compiled(self: EngineLoop, control: LoopControl, ring: IocbRing,
                        words: CompiledWords, boundary: int, subinterval_ns: int,
                        wake: int) -> int:
    """``_loop_ring`` with its turns in C (``pk.ring_function``), for a ring that adopted
    no slots: Python only for what the C returns for (a refill, a flush, a submission it
    could not make whole, a batch reaped past the boundary) and at ``wake``. Returns the
    next boundary."""
    fn, args, st = words
    w = self._ring_w
    assert w is not None
    eng = cast(IocbEngine, w.spec.engine)
    waiter = self._waiter
    addr = args.ctypes.data
    args[pk.RA["PTRS"]] = ring.ptrs_addr
    args[pk.RA["REC"]] = ring.rec_addr
    args[pk.RA["DONE"]] = ring.done_addr
    args[pk.RA["SUB"]] = ring.sub_addr
    args[pk.RA["RECORDS"]] = ring.records
    args[pk.RA["BOUNDARY"]] = boundary
    args[pk.RA["WAKE"]] = wake
    st[pk.RS_STAGE] = 0
    while True:
        args[pk.RA["SEQ0"]] = ring.seq0
        st[pk.RS_CUR] = ring.cur
        st[pk.RS_END] = ring.end
        st[pk.RS_N_REC] = ring.n_rec
        st[pk.RS_N_DONE] = ring.n_done
        st[pk.RS_N_SUB] = ring.n_sub
        st[pk.RS_MEAN] = waiter.mean_ns
        code = int(fn(addr))
        ring.cur = int(st[pk.RS_CUR])
        ring.n_rec = int(st[pk.RS_N_REC])
        ring.n_done = int(st[pk.RS_N_DONE])
        ring.n_sub = int(st[pk.RS_N_SUB])
        waiter.mean_ns = int(st[pk.RS_MEAN])
        if code == pk.RR_WAKE:
            return boundary
        if code == pk.RR_LATE:
            return self._ring_late(control, ring, int(st[pk.RS_N]), int(st[pk.RS_T]),
                                   boundary, subinterval_ns)
        if code == pk.RR_REFILL:
            self._refill_ring(ring, w)
        elif code == pk.RR_SUBMIT:
            self._ring_submit_rest(ring, eng, int(st[pk.RS_N]), int(st[pk.RS_SUB_DONE]),
                                   int(st[pk.RS_T_SUB]))
            st[pk.RS_STAGE] = 2
        else:  # RR_FLUSH
            self.flush()


def _ring_take(self: EngineLoop, ring: IocbRing, ev: memoryview, n: int, t: int,
               slot_rows: dict[int, list[int]] | None = None) -> None:
    """Record ``n`` completions (events as words in ``ev``) reaped at ``t``: the ring's
    as they are, an adopted slot's from its row (``slot_rows[i]`` for event ``i`` when
    given: a copy taken before the slots were reused) into the loop's records."""
    p = ring.n_rec
    rec = ring.rec_words
    if ring.adopted:
        pw = self._pend_words
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        g = self._p
        for i in range(n):
            e = EV_WORDS * i
            d = ev[e]
            if d >= TAG:
                rec[EV_WORDS * p : EV_WORDS * p + EV_WORDS] = ev[e : e + EV_WORDS]
                p += 1
                continue
            b = rw * g
            if slot_rows is None:
                pw[b : b + rw] = tw[rw * d : rw * d + rw]
            else:
                for j, word in enumerate(slot_rows[i]):
                    pw[b + j] = word
            pw[b + C_RES] = ev[e + 2]
            pw[b + C_DONE] = t
            g += 1
            ring.adopted -= 1
        self._p = g
    else:
        rec[EV_WORDS * p : EV_WORDS * (p + n)] = ev[: EV_WORDS * n]
        p += n
    k = ring.n_done
    ring.done_words[2 * k] = p
    ring.done_words[2 * k + 1] = t
    ring.n_done = k + 1
    ring.n_rec = p


def _ring_late(self: EngineLoop, control: LoopControl, ring: IocbRing, n: int, t: int,
               boundary: int, subinterval_ns: int) -> int:
    """``_loop_ring`` reaped ``n`` completions at ``t``, past ``boundary`` (their
    replacements submitted): close the subinterval first (they count in the next one; a
    change there may take the workload off the ring, draining it), then record them.
    Returns the next boundary."""
    w = self._ring_w
    assert w is not None
    ev = self._ring_late_words
    ev[: EV_WORDS * n] = cast(IocbEngine, w.spec.engine).done_words[: EV_WORDS * n]
    slot_rows = None
    if ring.adopted:  # an adopted slot may be reused in the boundary: copy its row now
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        slot_rows = {}
        for i in range(n):
            d = ev[EV_WORDS * i]
            if d < TAG:
                slot_rows[i] = tw[rw * d : rw * d + rw].tolist()
    self._boundary(control, boundary)
    self._ring_take(ring, ev, n, t, slot_rows)
    if ring.n_rec >= ring.records:
        self.flush()
    return boundary + subinterval_ns


def _leave_ring(self: EngineLoop, *, restart: bool, timeout_ns: int = 1_000_000_000) -> None:
    """Take the ring's workload back to the slot path (before a change, or at the end of
    a run): reap every I/O in flight, recording it (binned at the next flush, so in the
    subinterval running then); its precomputed I/Os not submitted go back to its ring in
    order, and with ``restart`` its slots are issued, as the slot path expects of a
    max-iops workload. An I/O that does not complete within ``timeout_ns`` is an error
    (its completion could not be told from a slot's later)."""
    ring = self._ring
    w = self._ring_w
    if ring is None or not ring.active or w is None:
        return
    eng = cast(IocbEngine, w.spec.engine)
    deadline = time.monotonic_ns() + timeout_ns
    while self._in_flight > 0:
        left = deadline - time.monotonic_ns()
        if left <= 0:
            raise IoEngineError(
                f"{self.name}: workload {w.spec.workload_id}: {self._in_flight} I/Os "
                f"still in flight {timeout_ns / 1e9:g} s after its loop stopped "
                "submitting; the LUN does not answer"
            )
        n = eng.reap(1, min(left, 20_000_000))
        if n:
            self._in_flight -= n
            self._ring_take(ring, eng.done_words, n, time.monotonic_ns())
    ring.active = False
    offsets = ring.unsubmitted()
    rows = np.zeros((offsets.size, 5), dtype=np.int64)
    rows[:, R_OPFD] = opcode_fd_word(IOCB_CMD_PREAD, w.spec.fd)
    rows[:, R_OFF] = offsets
    rows[:, R_CAT] = self._ring_cat
    set_ring(w, rows, np.zeros(offsets.size, dtype=np.bool_))
    if restart:
        self._issue(w, w.slots)


def _flush_ring(self: EngineLoop, ring: IocbRing) -> None:
    """Bin the ring's completion records (a ring left and binned is dropped)."""
    service, res, offsets, _done = ring.collect()
    w = self._ring_w
    if not ring.active:
        self._ring = None
        self._ring_w = None
    if service.size == 0 or w is None or self._wl[w.index] is not w or self._discard:
        return  # none, or the workload was deleted (its last I/Os are not counted)
    cat = self._ring_cat
    nbytes = ring.nbytes
    ok = res == nbytes
    if not bool(ok.all()):
        bad = np.zeros((int(ok.size - ok.sum()), SlotTable.ROW_WORDS), dtype=np.int64)
        bad[:, C_OWNER] = w.index
        bad[:, C_CAT] = cat
        bad[:, C_NBYTES] = nbytes
        bad[:, C_RES] = res[~ok]
        bad[:, W_OFFSET] = offsets[~ok]
        self._count_errors(bad)
        service = service[ok]
    w.spec.stats[self._buf].record_category(cat, service, None, nbytes * int(service.size))
