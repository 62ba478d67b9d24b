"""The test's ``thresholds:`` judged on a step's summary rows, and the cells that say so.

A threshold (``master.config.thresholds``) is judged on the summary row of each instance it
names: it ``passed`` or ``FAILED`` on the row's value, or is ``UNTOLD`` where there is no value
to judge (no I/O, so no percentile; a step that failed; an instance the step did not have). An
untold threshold does not hold: the run exits 1 for it as for a failed one.

Owns the text of a result in summary.csv's ``thresholds`` column (``cell``; one row's results
joined by ``"; "``) and its reading back (``parse_cell``), so that the end table,
summary.json, the report and the exit code of a resumed run read one record. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from master.config.expr import OPERATORS
from master.config.thresholds import Threshold

__all__ = ["COLUMN", "Judged", "Outcome", "cell", "judge", "parse_cell", "row_cells", "worst_first"]

#: the summary.csv column of a row's results (present when the test has thresholds)
COLUMN = "thresholds"
Outcome = Literal["passed", "FAILED", "UNTOLD"]
_ONE = re.compile(r"(passed|FAILED|UNTOLD): (.*?) \((.*)\)")
_SPLIT = re.compile(r"; (?=(?:passed|FAILED|UNTOLD): )")


@dataclass(frozen=True)
class Judged:
    """One threshold on one summary row: its outcome, and the value it was judged on (or why
    none)."""

    text: str  # the threshold as its result names it (``Threshold.text``)
    step: str
    rollup: str
    instance: str
    outcome: Outcome
    detail: str  # the value as judged (``2.31``), or why untold

    @property
    def holds(self) -> bool:
        return self.outcome == "passed"

    @property
    def line(self) -> str:
        """The result for a console or a log: ``FAILED step s1 all: service_time_p99_ms < 2
        (2.31)``."""
        return f"{self.outcome} step {self.step} {self.rollup} {self.instance}: {self.text} " \
               f"({self.detail})"


def judge(thresholds: Sequence[Threshold], step: str, rows: Sequence[Mapping[str, Any]]
          ) -> dict[int, list[Judged]]:
    """Each threshold that applies to ``step`` judged on ``rows`` (the step's summary rows,
    with ``rollup_type``, ``rollup_instance`` and the metrics): the results by the index of
    the row they belong to (a threshold whose instance the step lacks: its ``all`` row, or its
    first)."""
    out: dict[int, list[Judged]] = {}
    home = next((i for i, r in enumerate(rows) if r.get("rollup_type") == "all"), 0)
    for t in thresholds:
        if t.step is not None and step not in t.steps:
            continue
        mine = [i for i, r in enumerate(rows) if r.get("rollup_type") == t.rollup
                and (not t.instance or str(r.get("rollup_instance")) == t.instance)]
        if not mine:
            have = sorted(str(r.get("rollup_instance")) for r in rows
                          if r.get("rollup_type") == t.rollup)
            why = (f"no instance {t.instance!r} in rollup {t.rollup} (instances: "
                   f"{', '.join(have) or 'none'})" if t.instance
                   else f"no summary of rollup {t.rollup}")
            at = rows[home] if rows else {}  # said on that row: its rollup and instance
            out.setdefault(home, []).append(Judged(
                t.text, step, str(at.get("rollup_type", "all")),
                str(at.get("rollup_instance", "all")), "UNTOLD", why))
            continue
        for i in mine:
            row = rows[i]
            value = _number(row.get(t.cond.metric))
            instance = str(row.get("rollup_instance"))
            if value is None:
                reason = row.get("invalid_reason") if row.get("valid") is False else ""
                why = f"no value of {t.cond.metric}" + (f": {reason}" if reason else "")
                judged = Judged(t.text, step, t.rollup, instance, "UNTOLD", why)
            else:
                held = OPERATORS[t.cond.op](value, t.cond.limit)
                judged = Judged(t.text, step, t.rollup, instance,
                                "passed" if held else "FAILED", f"{value:.6g}")
            out.setdefault(i, []).append(judged)
    return out


def row_cells(thresholds: Sequence[Threshold], step: str, rows: Sequence[Mapping[str, Any]]
              ) -> tuple[dict[int, str], list[Judged]]:
    """Each judged row's ``thresholds`` cell (``COLUMN``) by its index in ``rows`` (the
    others' is empty), and every result in row order (``judge``)."""
    judged = judge(thresholds, step, rows)
    return ({i: cell(results) for i, results in judged.items()},
            [j for i in sorted(judged) for j in judged[i]])


def worst_first(judged: Sequence[Judged]) -> list[Judged]:
    """``judged`` with the results that did not hold (FAILED, UNTOLD) first, each part in its
    order."""
    return sorted(judged, key=lambda j: j.holds)


def _number(value: Any) -> float | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def cell(results: Sequence[Judged]) -> str:
    """A row's results as its ``thresholds`` cell: ``FAILED: service_time_p99_ms < 2 (2.31);
    passed: IOPS > 50000 (61204)``."""
    return "; ".join(f"{j.outcome}: {j.text} ({j.detail})" for j in results)


def parse_cell(text: str, step: str, rollup: str, instance: str) -> list[Judged]:
    """A ``thresholds`` cell read back (``cell``'s text) as the results of the row of
    ``step``, ``rollup`` and ``instance``; a part it cannot read is an ``UNTOLD`` result
    saying so."""
    out = []
    for part in _SPLIT.split(text.strip()) if text.strip() else []:
        m = _ONE.fullmatch(part)
        if m is None:
            out.append(Judged(part, step, rollup, instance, "UNTOLD", "unreadable result"))
        else:
            outcome: Outcome = m.group(1)  # type: ignore[assignment]
            out.append(Judged(m.group(2), step, rollup, instance, outcome, m.group(3)))
    return out
