"""Each matched step x instance's metrics side by side: base, new, the change in the metric's
unit and in percent, and which ``--fail-if`` conditions hold there. Pure.

Missing values and a base of 0 are handled explicitly and said in ``note``: an empty cell (no
I/O, so no percentile) gives no change; a base of 0 gives an absolute change but no percentage
(both 0: a change of 0 %). A condition that needs a missing value is neither held nor passed:
it is listed as untold. Must not read files or format output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from master.config.expr import FailIf, evaluate, relative_change_pct
from master.results.compare.match import Matching, Pair


@dataclass(frozen=True)
class MetricChange:
    """One metric of one step x instance. ``change`` is ``new - base`` in the metric's unit;
    ``change_pct`` is that in % of the base, None where it has no finite value."""

    metric: str
    base: float | None
    new: float | None
    change: float | None
    change_pct: float | None
    note: str


@dataclass(frozen=True)
class ComparedRow:
    """A step x instance: its metrics' changes, the conditions that hold there (``failed``)
    and those that could not be told for a missing value (``untold``)."""

    pair: Pair
    changes: tuple[MetricChange, ...]
    failed: tuple[FailIf, ...]
    untold: tuple[FailIf, ...]

    def change_of(self, metric: str) -> MetricChange:
        return next(c for c in self.changes if c.metric == metric)


@dataclass(frozen=True)
class Comparison:
    """The whole comparison: ``metrics`` as shown (those asked for, then any a condition
    names), the conditions, and a row per matched step x instance."""

    matching: Matching
    metrics: tuple[str, ...]
    conditions: tuple[FailIf, ...]
    rows: tuple[ComparedRow, ...]

    @property
    def failures(self) -> list[tuple[ComparedRow, FailIf]]:
        """Every (row, condition) that holds, in row order."""
        return [(row, cond) for row in self.rows for cond in row.failed]

    @property
    def untold(self) -> list[tuple[ComparedRow, FailIf]]:
        return [(row, cond) for row in self.rows for cond in row.untold]


def metric_change(metric: str, base: float | None, new: float | None) -> MetricChange:
    """``metric`` going from ``base`` to ``new``."""
    if base is None or new is None:
        note = ("no values" if base is None and new is None
                else "no base value" if base is None else "no new value")
        return MetricChange(metric, base, new, None, None, note)
    if base == 0 and new != 0:
        return MetricChange(metric, base, new, new - base, None, "base is 0")
    return MetricChange(metric, base, new, new - base, relative_change_pct(base, new), "")


def shown_metrics(metrics: Sequence[str], conditions: Sequence[FailIf]) -> tuple[str, ...]:
    """The metrics asked for, then each metric a condition names that is not among them."""
    return tuple(dict.fromkeys([*metrics, *(c.metric for c in conditions)]))


def compare(matching: Matching, metrics: Sequence[str],
            conditions: Sequence[FailIf]) -> Comparison:
    """Every matched pair's changes and conditions (the metrics are checked already:
    ``match.check_metrics``)."""
    shown = shown_metrics(metrics, conditions)
    rows: list[ComparedRow] = []
    for pair in matching.pairs:
        changes = tuple(metric_change(m, pair.base.values[m], pair.new.values[m])
                        for m in shown)
        told = [(cond, evaluate(cond, pair.base.values[cond.metric],
                                pair.new.values[cond.metric])) for cond in conditions]
        rows.append(ComparedRow(pair, changes,
                                failed=tuple(c for c, held in told if held),
                                untold=tuple(c for c, held in told if held is None)))
    return Comparison(matching, shown, tuple(conditions), tuple(rows))
