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
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from protocol.stats import N_CATEGORIES, WorkloadStats, record_groups
from slave.engine import tuning
from slave.engine.aio_abi import W_OFFSET
from slave.engine.base import IoEngine
from slave.engine.layout import C_CAT, C_DONE, C_NBYTES, C_OWNER, C_RES, C_SCHED, C_SUBMIT
from slave.engine.loop_state import LoopWorkload

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop

log = logging.getLogger(__name__)


def _complete(self: EngineLoop, engine: IoEngine, n: int, t: int) -> None:
    """Record ``n`` reaped completions (reaped at ``t``) and recycle their slots."""
    self._in_flight -= n
    slots = engine.done_slot[:n]  # a view: used up before the engine reaps again
    p = self._p
    q = p + n
    pend = self._pend
    # "clip": the slots are ours (each event returns the slot we submitted); numpy's
    # default "raise" copies ``out`` first, to leave it unchanged on an error
    self._rows.take(slots, axis=0, out=pend[p:q], mode="clip")
    self._recycle(slots)  # resubmit before the bookkeeping
    pend[p:q, C_RES] = engine.done_res[:n]
    pend[p:q, C_DONE] = t
    self._p = q
    if q >= self._flush_at:
        self.flush()


def _recycle(self: EngineLoop, slots: npt.NDArray[np.intp]) -> None:
    """Completed slots of several workloads: resubmit (max iops, all in one submission),
    free (paced) or return to the pool (retired)."""
    # group by owner with plain ints: at the batch sizes of a busy loop (tens) this costs
    # a third of sorting with numpy, whose every call is paid again after each system call
    owner_of = self._owner
    by: dict[int, list[int]] = {}
    for s in slots.tolist():
        o = owner_of[s]
        g = by.get(o)
        if g is None:
            by[o] = [s]
        else:
            g.append(s)
    retired = by.pop(-1, None)
    if retired is not None:
        self._free_slots.extend(retired)
        self._retired_in_flight -= len(retired)
        if self._retired_in_flight == 0:
            self._refresh()
    wl = self._wl
    resubmit: list[tuple[LoopWorkload, npt.NDArray[np.intp]]] = []
    for o, g in by.items():
        w = wl[o]
        assert w is not None
        if w.paced:  # the slots wait for their next scheduled I/O
            w.free.extend(g)
        else:
            resubmit.append((w, np.array(g, dtype=np.intp)))
    if resubmit:
        self._issue_groups(resubmit)


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
