"""The settings in force: the ``WorkloadParams`` each workload runs with, by subinterval.

Owns, for every workload the slaves hold, the parameters in force in the subinterval being
recorded and the changes the slaves have taken but that hold only from a later subinterval
(each with the subinterval it takes effect and who made it: the step's plan, DFC, or an
operator's live edit), and the one rule that splits a total IOPS over workloads
(``split_total``). The run writes to it only what a slave acknowledged; the recorder, DFC,
``ivypy status``, the live view and the summaries read it. Pure: no hosts, no clocks, no files.

Must not: decide what to change (``master.run.lifecycle`` and ``master.analysis.stepcontrol`` do),
validate a user's edit beyond what ``WorkloadParams`` checks, or know rollups.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from protocol.params import WorkloadParams

#: who made a change: the step's plan (create, edit at a step's start), DFC's move, or an
#: operator's ``ivypy edit``
Source = Literal["step", "dfc", "live"]


def split_total(total: float | None,
                members: Sequence[tuple[tuple[str, str], WorkloadParams]]) -> list[WorkloadParams]:
    """``members`` (each its LUN ``(host, path)`` and parameters) given a total IOPS: split
    evenly over their LUNs, then within a LUN in proportion to each workload's
    ``skew_weight`` (ivy's rule); ``None`` (``max``) runs every one at max. The one place a
    total is split: ``edit_rollup``'s and an edit's ``total_iops``, the IOPS curve's points
    and DFC's moves all come here. A total of 0 or less is a ``ValueError``."""
    if total is None:
        return [p if p.iops is None else p.replace(iops=None) for _, p in members]
    if not total > 0:
        raise ValueError(f"a total IOPS must be > 0, not {total!r}")
    if not members:
        return []
    weight_of_lun: dict[tuple[str, str], float] = {}
    for lun, p in members:
        weight_of_lun[lun] = weight_of_lun.get(lun, 0.0) + p.skew_weight
    per_lun = float(total) / len(weight_of_lun)
    return [p.with_rate(per_lun * p.skew_weight / weight_of_lun[lun]) for lun, p in members]


@dataclass(frozen=True)
class _Change:
    effective: int  # the first subinterval it holds in
    params: WorkloadParams
    source: Source


class Settings:
    """The settings in force; see the module docstring.

    A subinterval's settings are those in force once ``advance(k)`` has run: every change
    acknowledged for a subinterval up to ``k``. A change acknowledged for ``-1`` (between
    steps, when a slave takes an edit for the next step's start) holds at once. Of two changes
    of one workload for the same subinterval the later acknowledged holds, as on the slave,
    which applies them in the order it read them."""

    def __init__(self) -> None:
        self._now: dict[str, WorkloadParams] = {}
        self._pending: dict[str, list[_Change]] = {}
        self._version = 0
        self._iops_cache: tuple[int, tuple[str, ...], npt.NDArray[np.float64]] | None = None

    # ------------------------------------------------------------------ reading
    def __contains__(self, workload_id: object) -> bool:
        return workload_id in self._now

    def __getitem__(self, workload_id: str) -> WorkloadParams:
        """The parameters in force for ``workload_id``."""
        return self._now[workload_id]

    def __len__(self) -> int:
        return len(self._now)

    def ids(self) -> list[str]:
        return list(self._now)

    def latest(self, workload_id: str) -> WorkloadParams:
        """What the slave holds for ``workload_id``: the parameters in force with every
        change taken since applied (the base of the next edit)."""
        changes = self._pending.get(workload_id)
        return changes[-1].params if changes else self._now[workload_id]

    def pending(self, source: Source | None = None) -> dict[str, int]:
        """The workloads with a change (of ``source``, or any) not yet in force, each with the
        first subinterval such a change holds in."""
        out: dict[str, int] = {}
        for wid, changes in self._pending.items():
            firsts = [c.effective for c in changes if source is None or c.source == source]
            if firsts:
                out[wid] = min(firsts)
        return out

    def total_iops(self, workload_ids: Iterable[str]) -> float | None:
        """The IOPS in force over ``workload_ids`` together; None when one runs at max."""
        total = 0.0
        for wid in workload_ids:
            iops = self._now[wid].iops
            if iops is None:
                return None
            total += iops
        return total

    def iops_array(self, workload_ids: Sequence[str]) -> npt.NDArray[np.float64]:
        """Each workload's IOPS in force (NaN for max), in the order given. While nothing
        changed, the same (read-only) array is returned again: a step without edits keeps one
        array however many subintervals are kept for its summary."""
        key = tuple(workload_ids)
        cached = self._iops_cache
        if cached is not None and cached[0] == self._version and cached[1] == key:
            return cached[2]
        now = self._now
        arr = np.array([np.nan if now[w].iops is None else now[w].iops for w in key],
                       dtype=np.float64)
        arr.setflags(write=False)
        self._iops_cache = (self._version, key, arr)
        return arr

    # ------------------------------------------------------------------ writing
    def placed(self, workload_id: str, params: WorkloadParams) -> None:
        """``workload_id`` was created with ``params``: in force at once (a workload is
        created between steps)."""
        self._now[workload_id] = params
        self._pending.pop(workload_id, None)
        self._version += 1

    def dropped(self, workload_id: str) -> None:
        """``workload_id`` was deleted."""
        self._now.pop(workload_id, None)
        self._pending.pop(workload_id, None)
        self._version += 1

    def taken(self, workload_id: str, params: WorkloadParams, effective: int,
              source: Source) -> None:
        """A slave took ``params`` for ``workload_id`` from subinterval ``effective`` on
        (``-1``: at once, between steps)."""
        if workload_id not in self._now:
            raise KeyError(f"no workload {workload_id} is placed")
        if effective < 0:
            self._now[workload_id] = params
            self._pending.pop(workload_id, None)
            self._version += 1
            return
        self._pending.setdefault(workload_id, []).append(_Change(effective, params, source))

    def advance(self, k: int) -> dict[str, Source]:
        """Subinterval ``k`` is recorded next: every change taken for it or before takes force.
        Returns the workloads whose parameters changed, each with the source of the change in
        force now."""
        changed: dict[str, Source] = {}
        for wid in list(self._pending):
            changes = self._pending[wid]
            due = [c for c in changes if c.effective <= k]
            if not due:
                continue
            rest = [c for c in changes if c.effective > k]
            if rest:
                self._pending[wid] = rest
            else:
                del self._pending[wid]
            last = due[-1]
            if last.params != self._now[wid]:
                self._now[wid] = last.params
                changed[wid] = last.source
        if changed:
            self._version += 1
        return changed

    def settle(self) -> dict[str, Source]:
        """Between steps: every change a slave took holds (also one announced for a
        subinterval its step never ran: an edit in the step's last subinterval, DFC's move
        after its final one; the slave keeps it into the next step)."""
        return self.advance(max((c.effective for cs in self._pending.values() for c in cs),
                                default=-1))
