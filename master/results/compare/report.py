"""A ``Comparison`` written out: an aligned text table for people, csv and json for
machines (metric names carry their units; percentages end in ``_pct``). Pure: each writer
returns a string.

Owns the formats and the one-line wording of a failing condition (``failure_line``), which
the command also prints on stderr. Must not decide anything: what holds is
``master.results.compare.changes``'s.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from master.config.expr import FailIf
from master.results.compare.changes import ComparedRow, Comparison, MetricChange
from master.results.csvfiles import fmt

FORMATS = ("text", "csv", "json")


def _num(value: float | None, signed: bool = False) -> str:
    """A number for people: six significant digits, thousands commas, whole numbers from
    1,000,000 up (no exponent); ``-`` for a missing one."""
    if value is None:
        return "-"
    sign = "+" if signed else ""
    if abs(value) >= 999_999.5:
        return f"{value:{sign},.0f}"
    return f"{value:{sign},.6g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _valid(value: bool | None) -> str:
    return "?" if value is None else "yes" if value else "NO"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _where(row: ComparedRow) -> str:
    p = row.pair
    return f"step {p.step_name}, {p.rollup_type} {p.rollup_instance}"


def _moved(change: MetricChange) -> str:
    text = f"{_num(change.base)} -> {_num(change.new)}"
    if change.change_pct is not None:
        text += f" ({_pct(change.change_pct)})"
    return text + (f" ({change.note})" if change.note else "")


def failure_line(row: ComparedRow, cond: FailIf) -> str:
    """``FAIL IOPS < -10%: step r, all all: 400 -> 200 (-50.0 %)``."""
    return f"FAIL {cond.text}: {_where(row)}: {_moved(row.change_of(cond.metric))}"


def untold_line(row: ComparedRow, cond: FailIf) -> str:
    change = row.change_of(cond.metric)
    return f"cannot tell {cond.text}: {_where(row)}: {change.note}"


def _table(lines: Sequence[Sequence[str]], right: frozenset[int]) -> list[str]:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for line in lines:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def write_text(cmp: Comparison, base_run: Path, new_run: Path) -> str:
    """The comparison as an aligned table, then invalid steps, what only one run has, and
    each condition that holds or cannot be told."""
    kind = cmp.matching.rollup_type
    lines: list[list[str]] = [["step", "instance", "valid b/n", "metric", "base", "new", "change",
                               "change %", ""]]
    for row in cmp.rows:
        p = row.pair
        first = [p.step_name, p.rollup_instance,
                 f"{_valid(p.base.valid)}/{_valid(p.new.valid)}"]
        for change in row.changes:
            marks = [f"FAIL {c.text}" for c in row.failed if c.metric == change.metric]
            marks += [f"cannot tell {c.text}" for c in row.untold if c.metric == change.metric]
            lines.append([*first, change.metric, _num(change.base), _num(change.new),
                          _num(change.change, signed=True), _pct(change.change_pct),
                          "; ".join([*([change.note] if change.note else []), *marks])])
            first = ["", "", ""]
    out = [f"base:   {base_run}", f"new:    {new_run}", f"rollup: {kind}", "",
           *_table(lines, right=frozenset({4, 5, 6, 7})), ""]
    for row in cmp.rows:
        for role, side in (("base", row.pair.base), ("new", row.pair.new)):
            if side.valid is False:
                reason = " ".join(side.invalid_reason.splitlines()) or "no reason given"
                out.append(f"invalid in the {role} run: {_where(row)}: {reason}")
    for role, only in (("base", cmp.matching.only_in_base), ("new", cmp.matching.only_in_new)):
        out += [f"only in the {role} run: {text}" for text in only]
    out += [failure_line(row, cond) for row, cond in cmp.failures]
    out += [untold_line(row, cond) for row, cond in cmp.untold]
    if cmp.conditions and not cmp.failures:
        out.append(f"ok: no --fail-if condition holds ({_count(len(cmp.conditions), 'condition')}"
                   f" over {_count(len(cmp.rows), kind + ' instance')})")
    return "\n".join(out).rstrip("\n") + "\n"


def csv_columns(metrics: Sequence[str]) -> list[str]:
    """The csv header: the step x instance, validity, four columns per metric, conditions."""
    per_metric = [f"{m}_{part}" for m in metrics for part in ("base", "new", "change",
                                                               "change_pct")]
    return ["step_name", "base_step_number", "new_step_number", "rollup_type",
            "rollup_instance", "base_valid", "new_valid", "base_invalid_reason",
            "new_invalid_reason", *per_metric, "failed", "cannot_tell"]


def write_csv(cmp: Comparison) -> str:
    """A row per matched step x instance."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_columns(cmp.metrics))
    for row in cmp.rows:
        p = row.pair
        cells: list[Any] = [p.step_name, p.base.step_number, p.new.step_number, p.rollup_type,
                            p.rollup_instance, p.base.valid, p.new.valid,
                            p.base.invalid_reason, p.new.invalid_reason]
        for c in row.changes:
            cells += [c.base, c.new, c.change, c.change_pct]
        cells += ["; ".join(f.text for f in row.failed), "; ".join(f.text for f in row.untold)]
        writer.writerow([fmt(cell) for cell in cells])
    return buffer.getvalue()


def _row_json(row: ComparedRow) -> dict[str, Any]:
    p = row.pair
    return {
        "step_name": p.step_name, "base_step_number": p.base.step_number,
        "new_step_number": p.new.step_number, "rollup_type": p.rollup_type,
        "rollup_instance": p.rollup_instance, "base_valid": p.base.valid,
        "new_valid": p.new.valid, "base_invalid_reason": p.base.invalid_reason,
        "new_invalid_reason": p.new.invalid_reason,
        "metrics": {c.metric: {"base": c.base, "new": c.new, "change": c.change,
                               "change_pct": c.change_pct, "note": c.note}
                    for c in row.changes},
        "failed": [f.text for f in row.failed], "cannot_tell": [f.text for f in row.untold],
    }


def write_json(cmp: Comparison, base_run: Path, new_run: Path) -> str:
    """The whole comparison as one JSON object (no NaN or infinity in it)."""
    doc = {
        "base_run": str(base_run), "new_run": str(new_run),
        "rollup_type": cmp.matching.rollup_type, "metrics": list(cmp.metrics),
        "conditions": [c.text for c in cmp.conditions],
        "rows": [_row_json(row) for row in cmp.rows],
        "only_in_base": list(cmp.matching.only_in_base),
        "only_in_new": list(cmp.matching.only_in_new),
        "failures": [{"condition": cond.text, "metric": cond.metric,
                      "step_name": row.pair.step_name, "rollup_type": row.pair.rollup_type,
                      "rollup_instance": row.pair.rollup_instance,
                      "base": row.change_of(cond.metric).base,
                      "new": row.change_of(cond.metric).new,
                      "change_pct": row.change_of(cond.metric).change_pct}
                     for row, cond in cmp.failures],
        "failed": bool(cmp.failures),
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
