"""The engine loop's records: reaped completions kept as rows (the slot's row, with the result
and the reap time), binned in bulk into the running subinterval's ``WorkloadStats``; I/O errors
and short transfers counted by errno per workload, the first few logged.

Owns ``Records``: the pending rows and how many are binned (the compiled loop appends and bins
in place through its struct: ``loop_native``), which stats buffer runs, whether records are
discarded, and the errors per workload. It reads ``wl`` for stats and ids, and must not touch
slots, rings or engines.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import os

import numpy as np
import numpy.typing as npt

from protocol.stats import WorkloadStats, record_groups
from protocol.views import N_CATEGORIES
from slave.engine import tuning
from slave.engine.base import SlotTable
from slave.engine.layout import ROW
from slave.engine.loop_state import LoopWorkload

log = logging.getLogger(__name__)


class Records:
    """Completion records of the workloads of a loop (``wl``), up to ``capacity`` more than
    ``tuning.FLUSH_AT`` pending."""

    def __init__(self, capacity: int, wl: list[LoopWorkload | None]) -> None:
        self.flush_at = tuning.FLUSH_AT  # taken once: it sizes the buffer
        self.pend = np.zeros((self.flush_at + capacity, SlotTable.ROW_WORDS), dtype=np.int64)
        self.p = 0  # rows pending
        self.binned = 0  # of them, binned one at a time already (in C)
        self.buf = 0  # which of the two stats buffers is running
        self.discard = False  # bin nothing (the buffer may no longer be ours)
        self._wl = wl
        self._errors: dict[int, dict[str, int]] = {}  # by workload index, since take_errors
        self._logged: dict[int, int] = {}  # errors logged, by workload index

    def add(self, rows: npt.NDArray[np.int64], slots: npt.NDArray[np.int64],
            res: npt.NDArray[np.int64], t: int) -> None:
        """Record the completions of ``slots`` (their ``rows``), with results ``res``, reaped at
        ``t``."""
        p = self.p
        q = p + int(slots.size)
        pend = self.pend
        # "clip": the slots are ours (each event returns the slot we submitted); numpy's
        # default "raise" copies ``out`` first, to leave it unchanged on an error
        rows.take(slots, axis=0, out=pend[p:q], mode="clip")
        pend[p:q, ROW["res"]] = res
        pend[p:q, ROW["done_ns"]] = t
        self.p = q

    @property
    def full(self) -> bool:
        return self.p >= self.flush_at

    def flush(self) -> None:
        """Bin the pending records into the running stats buffers."""
        p = self.p
        b = self.binned
        self.p = self.binned = 0
        if p == b:
            return
        rows = self.pend[b:p]
        done = rows[:, ROW["done_ns"]]
        ok = rows[:, ROW["res"]] == rows[:, ROW["size_bytes"]]
        if not bool(ok.all()):
            self._count_errors(rows[~ok])
            rows = rows[ok]
            done = done[ok]
            if rows.shape[0] == 0:
                return
        owner = rows[:, ROW["owner"]]
        lo = int(owner.min())
        if lo == int(owner.max()):
            self._record(lo, rows, done)
            return
        if self.discard:
            return
        # several workloads: one vectorised pass, grouped by workload and category
        key = owner * N_CATEGORIES + rows[:, ROW["cat"]]
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        targets: list[WorkloadStats | None] = []
        cats: list[int] = []
        for k in key[starts].tolist():
            o, c = divmod(k, N_CATEGORIES)
            w = self._of(o)
            targets.append(None if w is None else w.spec.stats[self.buf])
            cats.append(c)
        done = done[order]  # the columns needed, not whole rows
        record_groups(targets, cats, starts, done - rows[:, ROW["submit_ns"]][order],
                      done - rows[:, ROW["sched_ns"]][order], rows[:, ROW["size_bytes"]][order])

    def _of(self, owner: int) -> LoopWorkload | None:
        return self._wl[owner] if owner < len(self._wl) else None

    def _record(self, owner: int, rows: npt.NDArray[np.int64],
                done: npt.NDArray[np.int64]) -> None:
        """Bin ``rows``, completed at ``done``, all of them I/Os of workload ``owner``."""
        w = self._of(owner)
        if w is None or self.discard:
            return  # the workload was deleted (its last I/Os are not counted), or stop
        submit = rows[:, ROW["submit_ns"]]
        sched = rows[:, ROW["sched_ns"]]
        service = done - submit
        # at max iops the response times are the service times: binned once
        response = None if np.array_equal(sched, submit) else done - sched
        stats = w.spec.stats[self.buf]
        if w.fixed_cat >= 0:
            stats.record_category(w.fixed_cat, service, response,
                                  int(rows[:, ROW["size_bytes"]].sum()))
        else:
            stats.record(rows[:, ROW["cat"]], service, service if response is None else response,
                         rows[:, ROW["size_bytes"]])

    def _count_errors(self, bad: npt.NDArray[np.int64]) -> None:
        for row in bad.tolist():
            owner, cat = row[ROW["owner"]], row[ROW["cat"]]
            nbytes, res = row[ROW["size_bytes"]], row[ROW["res"]]
            w = self._of(owner)
            if w is None or self.discard:
                continue
            name = errno_name(res)
            errors = self._errors.setdefault(owner, {})
            errors[name] = errors.get(name, 0) + 1
            w.spec.stats[self.buf].record_errors(cat, 1)
            logged = self._logged.get(owner, 0)
            if logged < tuning.LOGGED_ERRORS_PER_WORKLOAD:
                self._logged[owner] = logged + 1
                what = (
                    f"short transfer of {res} of {nbytes} bytes"
                    if res >= 0
                    else f"{name} ({os.strerror(-res)})"
                )
                log.warning(
                    "workload %s: I/O error at offset %d: %s",
                    w.spec.workload_id,
                    row[ROW["offset"]],
                    what,
                )

    def take_errors(self) -> dict[str, dict[str, int]]:
        """I/O errors per workload since the last call, by errno name (``short`` for short
        transfers); a workload deleted since has none."""
        errors, self._errors = self._errors, {}
        out: dict[str, dict[str, int]] = {}
        for owner, counts in errors.items():
            w = self._of(owner)
            if w is not None:
                out[w.spec.workload_id] = counts
        return out


def errno_name(res: int) -> str:
    if res >= 0:
        return "short"
    return errno_mod.errorcode.get(-res, f"errno{-res}")
