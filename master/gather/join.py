"""Elements of a gather source → rollup instances (pure), as ivy filters subsystem data by the
attributes of the LUNs under each rollup instance.

Owns the join rule: an element is under a LUN when its join attribute (``join.by``, or its own
instance name for ``element_instance``) equals the LUN's ``join.lun_attribute``; a rollup
instance's elements are the distinct elements under the LUNs of its workloads; its value of a
metric is ``sum``, ``mean`` or ``max`` over those of its elements that have one (None when none
has). Elements under no LUN of the step are non-participating. This module must not read
files, run commands or know about rollup rows' formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from master.config.gather import ELEMENT_INSTANCE, GatherJoin

__all__ = ["JoinPlan", "aggregate", "join_key", "plan_join"]


def join_key(join: GatherJoin, instance: str,
             attributes: Mapping[str, Mapping[str, str]]) -> str | None:
    """The value an element joins on (None: it has no such attribute)."""
    if join.by == ELEMENT_INSTANCE:
        return instance
    return attributes.get(instance, {}).get(join.by)


@dataclass(frozen=True)
class JoinPlan:
    """For one rollup type: the elements of each instance (in the grouping's order)."""

    names: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]


def plan_join(join: GatherJoin, elements: Sequence[str],
              attributes: Mapping[str, Mapping[str, str]],
              groupings: Mapping[str, tuple[tuple[str, ...], Sequence[int]]],
              lun_values: Sequence[str | None]) -> tuple[dict[str, JoinPlan], list[str]]:
    """Each rollup type's ``JoinPlan``, and the non-participating elements (sorted).

    ``groupings``: rollup type → (instance names, instance index of each workload);
    ``lun_values``: each workload's LUN value of ``join.lun_attribute`` (same order)."""
    by_value: dict[str, list[str]] = {}
    for element in elements:
        key = join_key(join, element, attributes)
        if key is not None:
            by_value.setdefault(key, []).append(element)
    used: set[str] = set()
    plans: dict[str, JoinPlan] = {}
    for rollup_type, (names, of_workload) in groupings.items():
        members: list[dict[str, None]] = [{} for _ in names]
        for w, inst in enumerate(of_workload):
            value = lun_values[w]
            for element in by_value.get(value, ()) if value is not None else ():
                members[inst][element] = None
                used.add(element)
        plans[rollup_type] = JoinPlan(tuple(names), tuple(tuple(m) for m in members))
    return plans, sorted(e for e in elements if e not in used)


def aggregate(values: Sequence[float | None], how: str) -> float | None:
    """``sum``, ``mean`` or ``max`` of the values there are; None when there are none."""
    have = [v for v in values if v is not None]
    if not have:
        return None
    if how == "sum":
        return float(sum(have))
    if how == "mean":
        return float(sum(have) / len(have))
    if how == "max":
        return float(max(have))
    raise ValueError(f"unknown aggregate {how!r}")
