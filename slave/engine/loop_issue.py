"""The engine loop issuing I/O: precompute a workload's next I/Os (its ring), put them and
their write data into slots, and submit them, several workloads' I/Os in one submission per
engine, paced I/Os when their time has come.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine import tuning
from slave.engine.aio_abi import IOCB_CMD_PREAD, IOCB_CMD_PWRITE, opcode_fd_word
from slave.engine.base import IoEngine
from slave.engine.layout import C_SCHED, C_SUBMIT, INF, R_CAT, R_OFF, R_OPFD, R_SCHED, R_SUBMIT
from slave.engine.loop_state import LoopWorkload, set_ring, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop


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
    plan = None
    if w.ring_stamps is not None and w.pattern is not None:
        rows, stamps = w.pattern.plan(ch.offset_bytes)
        plan = (
            np.concatenate([w.ring_pool_rows[c:], rows]),
            np.concatenate([w.ring_stamps[c:], stamps]),
        )
    set_ring(
        w,
        both,
        np.concatenate([w.ring_write[c:], ch.is_write]) if left else ch.is_write,
        plan,
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
    self._issue_groups([(w, slots)])


def _issue_groups(self: EngineLoop,
                  groups: list[tuple[LoopWorkload, npt.NDArray[np.intp]]]) -> None:
    """Submit each workload's next I/Os on its slots: their rows written (and their write
    data put), then one submission per engine (one call per workload per batch had cost 8
    workloads of depth 4 a third of their IOPS), every row stamped with one submit time. A
    max-iops I/O is scheduled when it is submitted, but for those an edit kept from a paced
    schedule (``overdue``), which keep their times."""
    by_engine: dict[IoEngine, list[npt.NDArray[np.intp]]] = {}
    starts_now: list[npt.NDArray[np.intp]] = []
    ios: list[npt.NDArray[np.int64]] = []
    for w, slots in groups:
        k = int(slots.size)
        ios.append(self._next_ios(w, slots))
        if not w.paced:
            kept = min(k, w.overdue)
            w.overdue -= kept
            if kept < k:
                starts_now.append(slots[kept:])
        by_engine.setdefault(w.spec.engine, []).append(slots)
    every = groups[0][1] if len(groups) == 1 else np.concatenate([g[1] for g in groups])
    # one scatter of the I/Os into their rows
    self._rows_flat.put(self._scatter_idx.take(every, axis=0),
                        ios[0] if len(ios) == 1 else np.concatenate(ios))
    rows = self._rows
    t_sub = time.monotonic_ns()
    if starts_now:
        rows[np.concatenate(starts_now), C_SCHED] = t_sub
    for eng, parts in by_engine.items():
        slots = parts[0] if len(parts) == 1 else np.concatenate(parts)
        rows[slots, C_SUBMIT] = t_sub
        try:
            eng.submit(slots)
        except IoEngineError as exc:
            self._in_flight += took(exc)
            raise
        self._in_flight += int(slots.size)


def _next_ios(self: EngineLoop, w: LoopWorkload,
              slots: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """``w``'s next ``len(slots)`` precomputed I/Os (refilling its ring when short), their
    write data put into the buffers of ``slots``."""
    k = int(slots.size)
    c = w.cur
    if c + k > w.ring_len:
        self._refill(w, k)
        c = 0
    w.cur = c + k
    if w.pattern is not None:
        writes = w.ring_write[c : c + k]
        if writes.any():
            write_data(w, self._slot_rows[slots[writes]], c, c + k, writes)
    return w.ring[c : c + k]


def write_data(
    w: LoopWorkload,
    rows: npt.NDArray[np.intp],
    lo: int,
    hi: int,
    writes: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Put the data of ring I/Os ``lo:hi`` (those in ``writes``, else all) into the buffer
    ``rows``: planned data where the pattern plans, else filled now."""
    assert w.pattern is not None
    if w.ring_stamps is not None:
        pool_rows, stamps = w.ring_pool_rows[lo:hi], w.ring_stamps[lo:hi]
        if writes is not None:
            pool_rows, stamps = pool_rows[writes], stamps[writes]
        w.pattern.apply(w.buffers.array, rows, pool_rows, stamps)
        return
    offsets = w.ring[lo:hi, R_OFF]
    w.pattern.fill(w.buffers.array, rows, offsets if writes is None else offsets[writes])


def _submit_due(self: EngineLoop, now: int) -> int:
    """Submit every paced I/O whose time has come and that has a free slot (all in one
    submission); returns the earliest scheduled time of a waiting I/O that has a slot (or a
    far future)."""
    next_due = INF
    due: list[tuple[LoopWorkload, npt.NDArray[np.intp]]] = []
    for w in self._paced:
        nfree = len(w.free)
        if not nfree:
            continue
        c = w.cur
        if c + nfree > w.ring_len:
            self._refill(w, nfree)
            c = 0
        # the ring is in time order
        k = int(w.ring[c : c + nfree, R_SCHED].searchsorted(now, "right"))
        if k:
            due.append((w, np.array([w.free.pop() for _ in range(k)], dtype=np.intp)))
        if k < nfree:
            next_due = min(next_due, int(w.ring[c + k, R_SCHED]))
    if due:
        self._issue_groups(due)
    return next_due
