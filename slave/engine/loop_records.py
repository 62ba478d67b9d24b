"""The engine loop's completions and statistics: record reaped completions as rows, recycle
their slots (resubmit, free, or return to the pool) before the bookkeeping, and bin the
records into the running subinterval's ``WorkloadStats`` in bulk (or one at a time while a
paced loop would otherwise sleep); I/O errors and short transfers counted by errno, the first
few logged.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os
import time
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.stats import N_CATEGORIES, WorkloadStats, record_groups
from slave.engine import tuning
from slave.engine.aio_abi import W_OFFSET
from slave.engine.base import IoEngine, SlotTable
from slave.engine.layout import C_CAT, C_DONE, C_NBYTES, C_OWNER, C_RES, C_SCHED, C_SUBMIT, R_SUBMIT
from slave.engine.loop_state import LoopWorkload, took

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop

log = logging.getLogger(__name__)


def _complete(self: EngineLoop, engine: IoEngine, n: int, t: int) -> None:
    """Record ``n`` reaped completions (reaped at ``t``) and recycle their slots."""
    self._in_flight -= n
    if n <= tuning.SCALAR_MAX:
        self._complete_scalar(engine, n, t)
        return
    slots = engine.done_slot[:n]  # a view: used up before the engine reaps again
    p = self._p
    q = p + n
    pend = self._pend
    # "clip": the slots are ours (each event returns the slot we submitted); numpy's
    # default "raise" copies ``out`` first, to leave it unchanged on an error
    self._rows.take(slots, axis=0, out=pend[p:q], mode="clip")
    single = self._single
    if single is not None:
        self._issue(single, slots)  # resubmit before the bookkeeping
    else:
        self._recycle(slots)
    pend[p:q, C_RES] = engine.done_res[:n]
    pend[p:q, C_DONE] = t
    self._p = q
    if q >= self._flush_at:
        self.flush()


def _complete_scalar(self: EngineLoop, engine: IoEngine, n: int, t: int) -> None:
    if n > 1:  # one submission for the batch
        self._in_one_submission(self._complete_words, engine, n, t)
    else:
        self._complete_words(engine, n, t)
    if self._p >= self._flush_at:
        self.flush()


def _complete_words(self: EngineLoop, engine: IoEngine, n: int, t: int) -> None:
    """``_complete`` for a few completions, with plain ints."""
    pw = self._pend_words
    tw = self._rows_words
    rw = SlotTable.ROW_WORDS
    p = self._p
    for s, res in zip(engine.done_slot[:n].tolist(), engine.done_res[:n].tolist(), strict=True):
        b = rw * p
        pw[b : b + rw] = tw[rw * s : rw * s + rw]
        pw[b + C_RES] = res
        pw[b + C_DONE] = t
        p += 1
        owner = self._active_list[s]
        if owner < 0:
            self._free_slots.append(s)
            self._retired_in_flight -= 1
            if self._retired_in_flight == 0:
                self._refresh()
        else:
            w = self._wl[owner]
            assert w is not None
            if w.paced:
                w.free.append(s)
            else:
                self._issue1(w, s)
    self._p = p


def _recycle(self: EngineLoop, slots: npt.NDArray[np.intp]) -> None:
    """Completed slots of several workloads: resubmit (max iops), free (paced) or return
    to the pool (retired)."""
    if self._sole >= 0:
        self._recycle_one(self._sole, slots)
        return
    # group by owner with plain ints: at the batch sizes of a busy loop (tens) this costs
    # a third of sorting with numpy, whose every call is paid again after each system call
    al = self._active_list
    by: dict[int, list[int]] = {}
    for s in slots.tolist():
        o = al[s]
        g = by.get(o)
        if g is None:
            by[o] = [s]
        else:
            g.append(s)
    if len(by) == 1:
        self._recycle_one(next(iter(by)), slots)
        return
    wl = self._wl
    for o in list(by):  # paced: the slots wait for their next scheduled I/O
        w = wl[o] if o >= 0 else None
        if w is not None and w.paced:
            w.free.extend(by.pop(o))
    if not by:
        return
    if -1 not in by and self._resubmit_max(by):
        return
    self._in_one_submission(self._recycle_groups, by)  # one submission for them all


def _recycle_groups(self: EngineLoop, by: dict[int, list[int]]) -> None:
    for o, g in by.items():
        self._recycle_one(o, np.array(g, dtype=np.intp))


def _resubmit_max(self: EngineLoop, by: dict[int, list[int]]) -> bool:
    """Resubmit completed slots (``by`` owner) with their workloads' next I/Os, when every
    owner runs at max iops without a backlog: one ring copy per workload, then one stamp,
    one scatter and one submission for the batch. Returns False (nothing done)
    otherwise."""
    wl = self._wl
    groups: list[tuple[LoopWorkload, list[int]]] = []
    order: list[int] = []
    for o, g in by.items():
        w = wl[o]
        assert w is not None and not w.paced  # _recycle freed the paced ones' slots
        if w.overdue:
            return False
        groups.append((w, g))
        order += g
    slots = np.array(order, dtype=np.intp)
    out = self._gather[: len(order)]
    gw = self._gather_words
    a = 0
    for w, g in groups:
        # each workload's next I/Os copied as words: a numpy view and assignment per
        # workload (``_next_ios``) cost ~2 us, and a batch holds I/Os of up to all of them
        k = len(g)
        b = a + k
        c = self._advance(w, slots, a, k)
        gw[5 * a : 5 * b] = w.ring_words[5 * c : 5 * (c + k)]
        a = b
    out[:, R_SUBMIT:] = time.monotonic_ns()
    self._rows_flat.put(self._scatter_idx.take(slots, axis=0), out)
    try:  # the engine that reaped them serves them all
        groups[0][0].spec.engine.submit(slots)
    except IoEngineError as exc:
        self._in_flight += took(exc)
        raise
    self._in_flight += a
    return True


def _recycle_one(self: EngineLoop, owner: int, slots: npt.NDArray[np.intp]) -> None:
    if owner < 0:
        self._free_slots.extend(slots.tolist())
        self._retired_in_flight -= int(slots.size)
        if self._retired_in_flight == 0:
            self._refresh()
        return
    w = self._wl[owner]
    assert w is not None
    if w.paced:
        w.free.extend(slots.tolist())
    else:
        self._issue(w, slots)


def flush(self: EngineLoop) -> None:
    """Bin the buffered completion records into the running stats buffers."""
    p = self._p
    b = self._binned
    self._p = self._binned = 0
    if p == b:
        return
    rows = self._pend[b:p]
    done = rows[:, C_DONE]
    ok = rows[:, C_RES] == rows[:, C_NBYTES]
    if not bool(ok.all()):
        self._count_errors(rows[~ok])
        rows = rows[ok]
        done = done[ok]
        if rows.shape[0] == 0:
            return
    owner = rows[:, C_OWNER]
    lo = int(owner.min())
    if lo == int(owner.max()):
        self._record(lo, rows, done)
        return
    if self._discard:
        return
    # several workloads: one vectorised pass, grouped by workload and category
    key = owner * N_CATEGORIES + rows[:, C_CAT]
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    wl = self._wl
    targets: list[WorkloadStats | None] = []
    cats: list[int] = []
    for k in key[starts].tolist():
        o, c = divmod(k, N_CATEGORIES)
        w = wl[o] if o < len(wl) else None
        targets.append(None if w is None else w.spec.stats[self._buf])
        cats.append(c)
    done = done[order]  # the columns needed, not whole 128-byte rows
    record_groups(targets, cats, starts, done - rows[:, C_SUBMIT][order],
                  done - rows[:, C_SCHED][order], rows[:, C_NBYTES][order])


def _record(self: EngineLoop, owner: int, rows: npt.NDArray[np.int64],
            done: npt.NDArray[np.int64]) -> None:
    """Bin ``rows``, completed at ``done``, all of them I/Os of workload ``owner``."""
    w = self._wl[owner] if owner < len(self._wl) else None
    if w is None or self._discard:
        return  # the workload was deleted (its last I/Os are not counted), or stop
    submit = rows[:, C_SUBMIT]
    sched = rows[:, C_SCHED]
    service = done - submit
    # at max iops every I/O is scheduled when it is submitted: the response times are the
    # service times, binned once
    response = None if np.array_equal(sched, submit) else done - sched
    stats = w.spec.stats[self._buf]
    if w.fixed_cat >= 0:
        stats.record_category(w.fixed_cat, service, response, int(rows[:, C_NBYTES].sum()))
    else:
        stats.record(rows[:, C_CAT], service, service if response is None else response,
                     rows[:, C_NBYTES])


def _count_errors(self: EngineLoop, bad: npt.NDArray[np.int64]) -> None:
    for row in bad.tolist():
        owner, cat, nbytes, res = row[C_OWNER], row[C_CAT], row[C_NBYTES], row[C_RES]
        w = self._wl[owner] if owner < len(self._wl) else None
        if w is None or self._discard:
            continue
        name = errno_name(res)
        w.errors[name] = w.errors.get(name, 0) + 1
        w.spec.stats[self._buf].record_errors(cat, 1)
        if w.errors_logged < tuning.LOGGED_ERRORS_PER_WORKLOAD:
            w.errors_logged += 1
            what = (
                f"short transfer of {res} of {nbytes} bytes"
                if res >= 0
                else f"{name} ({os.strerror(-res)})"
            )
            log.warning(
                "workload %s: I/O error at offset %d: %s",
                w.spec.workload_id,
                row[W_OFFSET],
                what,
            )


def take_errors(self: EngineLoop) -> dict[str, dict[str, int]]:
    """I/O errors per workload since the last call, by errno name (``short`` for short
    transfers)."""
    out: dict[str, dict[str, int]] = {}
    for w in self._wl:
        if w is not None and w.errors:
            out[w.spec.workload_id] = w.errors
            w.errors = {}
    return out


def errno_name(res: int) -> str:
    if res >= 0:
        return "short"
    return errno_mod.errorcode.get(-res, f"errno{-res}")
