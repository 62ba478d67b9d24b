"""The engine loop issuing I/O: precompute a workload's next I/Os (its ring), put them and
their write data into slots, and submit them, one workload at a time or staged together into
one submission per engine, paced I/Os when their time has come.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine import tuning
from slave.engine.aio_abi import (
    IOCB_CMD_PREAD,
    IOCB_CMD_PWRITE,
    W_OFFSET,
    W_OPCODE_FD,
    opcode_fd_word,
)
from slave.engine.base import IoEngine, SlotTable
from slave.engine.layout import (
    C_CAT,
    C_ROW,
    C_SCHED,
    C_SUBMIT,
    INF,
    R_CAT,
    R_OFF,
    R_OPFD,
    R_SCHED,
    R_SUBMIT,
)
from slave.engine.loop_state import LoopWorkload, set_ring, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop

_T = TypeVar("_T")


def _refill(self: EngineLoop, w: LoopWorkload, need: int) -> None:
    """Precompute the workload's next I/Os (keeping the unused rest)."""
    n = max(self._ahead(w), need, 4 * w.params.iodepth)
    ch = w.seq.chunk(n)
    fd = w.spec.fd
    c = w.cur
    left = w.ring_len - c
    # the unused rest, then the new I/Os, written in place (no concatenation)
    both = np.empty((left + n, 5), dtype=np.int64)
    both[:left] = w.ring[c:]
    ring = both[left:]
    read = opcode_fd_word(IOCB_CMD_PREAD, fd)
    if w.pattern is None:  # reads only
        ring[:, R_OPFD] = read
    else:
        ring[:, R_OPFD] = np.where(ch.is_write, opcode_fd_word(IOCB_CMD_PWRITE, fd), read)
    ring[:, R_OFF] = ch.offset_bytes
    ring[:, R_CAT] = ch.category
    ring[:, R_SUBMIT] = 0
    ring[:, R_SCHED] = ch.sched_ns
    set_ring(
        w,
        both,
        np.concatenate([w.ring_write[c:], ch.is_write]) if left else ch.is_write,
        w.ring_serial + c,  # the unused rest's serials, then the new I/Os' next ones
    )


def _ahead(self: EngineLoop, w: LoopWorkload) -> int:
    """How many I/Os ``w`` precomputes at a refill."""
    iops = w.params.iops
    if iops is None:
        share = tuning.RING_BUDGET // max(self._n_max_iops, 1)
        per_depth = tuning.RING_PER_DEPTH * w.params.iodepth
        return max(tuning.RING_MIN, min(tuning.RING_MAX, share, per_depth))
    # paced: about a quarter second ahead, at least PACED_RING_MIN, at most its share of
    # RING_BUDGET among the paced workloads and RING_MAX; times the workload's own factor
    # in [0.5, 1.5) (``ring_spread``), so that workloads of one rate started together do
    # not all run out, and stall the loop with their refills, at the same moment
    share = tuning.RING_BUDGET // max(len(self._paced), 1)
    quarter_s = min(tuning.RING_MAX, share, int(iops / 4))
    return int(max(tuning.PACED_RING_MIN, quarter_s) * w.ring_spread)


def _issue(self: EngineLoop, w: LoopWorkload, slots: npt.NDArray[np.intp]) -> None:
    """Submit ``w``'s next ``len(slots)`` I/Os on ``slots``."""
    k = int(slots.size)
    if k == 1:
        self._issue1(w, int(slots[0]))
        return
    ring = self._next_ios(w, slots)
    if self._staging:
        # the submit time (and a max-iops I/O's scheduled time) is written at submission
        if w.paced:
            kept = k
        else:
            kept = min(k, w.overdue)
            w.overdue -= kept
        self._rows_flat.put(self._scatter_idx.take(slots, axis=0), ring)
        self._stage(w.spec.engine, slots, slots[kept:] if kept < k else None)
        return
    t_sub = time.monotonic_ns()
    if w.paced:
        ring[:, R_SUBMIT] = t_sub
    elif w.overdue:
        kept = min(k, w.overdue)
        w.overdue -= kept
        ring[:, R_SUBMIT] = t_sub
        ring[kept:, R_SCHED] = t_sub
    else:
        ring[:, R_SUBMIT:] = t_sub
    self._rows_flat.put(self._scatter_idx.take(slots, axis=0), ring)
    try:
        w.spec.engine.submit(slots)
    except IoEngineError as exc:
        self._in_flight += took(exc)
        raise
    self._in_flight += k


def _next_ios(self: EngineLoop, w: LoopWorkload,
              slots: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """``w``'s next ``len(slots)`` precomputed I/Os (refilling its ring when short), their
    write data put into the buffers of ``slots``."""
    k = int(slots.size)
    c = self._advance(w, slots, 0, k)
    return w.ring[c : c + k]


def _advance(self: EngineLoop, w: LoopWorkload, slots: npt.NDArray[np.intp], lo: int,
             k: int) -> int:
    """Take ``w``'s next ``k`` precomputed I/Os (refilling its ring when short), their
    write data put into the buffers of ``slots[lo : lo + k]``; returns the ring index of
    the first."""
    c = w.cur
    if c + k > w.ring_len:
        self._refill(w, k)
        c = 0
    w.cur = c + k
    if w.pattern is not None:
        self._put_write_data(w, slots if k == slots.size else slots[lo : lo + k], c, c + k)
    return c


def _put_write_data(self: EngineLoop, w: LoopWorkload, slots: npt.NDArray[np.intp], lo: int,
                    hi: int) -> None:
    """The data of the writes among ring I/Os ``lo:hi`` into the buffers of ``slots``."""
    if hi - lo <= tuning.WRITE_ONE_MAX:
        tw = self._rows_words
        is_write = w.ring_write
        for j, s in enumerate(slots.tolist()):
            if is_write[lo + j]:
                write_for(w, tw[SlotTable.ROW_WORDS * s + C_ROW], lo + j)
        return
    if w.write_only:
        write_data(w, self._slot_rows[slots], lo, hi)
    else:
        before = w.ring_writes_before
        if before[hi] != before[lo]:
            wmask = w.ring_write[lo:hi]
            write_data(w, self._slot_rows[slots[wmask]], lo, hi, wmask)


def write_for(w: LoopWorkload, row: int, i: int) -> None:
    """The data of ring I/O ``i`` (a write) into buffer ``row``."""
    assert w.pattern is not None
    w.pattern.fill_one(w.buffers.array, row, w.ring_words[5 * i + R_OFF], w.ring_serial + i)


def write_data(
    w: LoopWorkload,
    rows: npt.NDArray[np.intp],
    lo: int,
    hi: int,
    writes: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Put the data of ring I/Os ``lo:hi`` (those in ``writes``, else all) into the buffer
    ``rows``."""
    assert w.pattern is not None
    offsets = w.ring[lo:hi, R_OFF]
    serials = np.arange(w.ring_serial + lo, w.ring_serial + hi, dtype=np.int64)
    if writes is not None:
        offsets, serials = offsets[writes], serials[writes]
    w.pattern.fill(w.buffers.array, rows, offsets, serials)


def _issue1(self: EngineLoop, w: LoopWorkload, slot: int) -> None:
    """``_issue`` for one slot, with scalar operations only (no numpy on reads)."""
    c = w.cur
    if c >= w.ring_len:
        self._refill(w, 1)
        c = 0
    w.cur = c + 1
    rw = w.ring_words
    b = 5 * c
    tw = self._rows_words
    r = SlotTable.ROW_WORDS * slot
    off = rw[b + R_OFF]
    if w.pattern is not None and w.ring_write[c]:
        write_for(w, tw[r + C_ROW], c)
    tw[r + W_OPCODE_FD] = rw[b]
    tw[r + W_OFFSET] = off
    tw[r + C_CAT] = rw[b + R_CAT]
    starts_now = not w.paced and not w.overdue  # max iops: scheduled when submitted
    if not starts_now:
        if not w.paced:
            w.overdue -= 1
        tw[r + C_SCHED] = rw[b + R_SCHED]
    if self._staging:
        if starts_now:
            self._staged_now_one.append(slot)
        self._stage_for(w.spec.engine)
        self._staged_one.append(slot)
        return
    t_sub = time.monotonic_ns()
    tw[r + C_SUBMIT] = t_sub
    if starts_now:
        tw[r + C_SCHED] = t_sub
    try:
        w.spec.engine.submit_one(slot)
    except IoEngineError as exc:
        self._in_flight += took(exc)
        raise
    self._in_flight += 1


def _stage(self: EngineLoop, eng: IoEngine, slots: npt.NDArray[np.intp],
           sched_now: npt.NDArray[np.intp] | None) -> None:
    """Hold ``slots`` (their rows written but for the submit time) for the next
    ``_submit_staged``; ``sched_now``: those of them that start when submitted."""
    self._stage_for(eng)
    self._staged.append(slots)
    if sched_now is not None:
        self._staged_now.append(sched_now)


def _stage_for(self: EngineLoop, eng: IoEngine) -> None:
    """Make ``eng`` the engine of the staged slots (submitting those of another)."""
    if self._staged_engine is not eng:
        self._submit_staged()
        self._staged_engine = eng


def _in_one_submission(self: EngineLoop, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, with the I/Os it issues staged and then submitted in one call."""
    self._staging = True
    try:
        out = fn(*args)
    finally:
        self._staging = False
    self._submit_staged()
    return out


def _submit_staged(self: EngineLoop) -> None:
    """Submit the staged slots in one call, stamped with one submit time."""
    eng = self._staged_engine
    if eng is None:
        return
    self._staged_engine = None
    parts, self._staged = self._staged, []
    if self._staged_one:
        parts.append(np.array(self._staged_one, dtype=np.intp))
        self._staged_one = []
    now_parts, self._staged_now = self._staged_now, []
    if self._staged_now_one:
        now_parts.append(np.array(self._staged_now_one, dtype=np.intp))
        self._staged_now_one = []
    slots = parts[0] if len(parts) == 1 else np.concatenate(parts)
    rows = self._rows
    t_sub = time.monotonic_ns()
    rows[slots, C_SUBMIT] = t_sub
    if now_parts:
        rows[now_parts[0] if len(now_parts) == 1 else np.concatenate(now_parts),
             C_SCHED] = t_sub
    try:
        eng.submit(slots)
    except IoEngineError as exc:
        self._in_flight += took(exc)
        raise
    self._in_flight += int(slots.size)


def _submit_due(self: EngineLoop, now: int) -> int:
    """Submit every paced I/O whose time has come and that has a free slot; returns the
    earliest scheduled time of a waiting I/O that has a slot (or a far future)."""
    if len(self._paced) > 1:  # one submission for all the workloads
        return self._in_one_submission(self._stage_due, now)
    return self._stage_due(now)


def _stage_due(self: EngineLoop, now: int) -> int:
    """``_submit_due``'s work, each workload's due I/Os issued (or staged)."""
    next_due = INF
    for w in self._paced:
        if not w.free:
            continue
        nfree = len(w.free)
        c = w.cur
        if c + nfree > w.ring_len:
            self._refill(w, nfree)
            c = 0
        first = w.ring_words[5 * c + R_SCHED]
        if first > now:
            if first < next_due:
                next_due = first
            continue
        k = 1
        if nfree > 1:
            k = int(w.ring[c : c + nfree, R_SCHED].searchsorted(now, "right"))
        if k == 1:
            self._issue1(w, w.free.pop())
        else:
            self._issue(w, np.array([w.free.pop() for _ in range(k)], dtype=np.intp))
        if w.free:
            nxt = w.cur
            next_due = (min(next_due, w.ring_words[5 * nxt + R_SCHED]) if nxt < w.ring_len
                        else now)
    return next_due
