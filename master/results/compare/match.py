"""Matching two runs' summaries: steps by name, rollup instances by name within one rollup
type, and the metrics asked for checked against both. Pure.

What is in only one run is listed, not an error; when nothing at all is in both (a run with
no row, a rollup type one run lacks), or a metric or rollup type is missing, it is a
``CompareError`` naming what (``ivypy compare`` exits 2).
Must not read files or compute changes.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from master.results.compare.summary import RunSummary, SummaryRow
from protocol.errors import CompareError


@dataclass(frozen=True)
class Pair:
    """One step x rollup instance in both runs."""

    step_name: str
    rollup_type: str
    rollup_instance: str
    base: SummaryRow
    new: SummaryRow


@dataclass(frozen=True)
class Matching:
    """The pairs, in the base run's order, and what only one run has (``step NAME`` for a
    step the other run lacks; ``step NAME: TYPE INSTANCE`` for an instance of a shared step)."""

    rollup_type: str
    pairs: tuple[Pair, ...]
    only_in_base: tuple[str, ...]
    only_in_new: tuple[str, ...]


def _names(items: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(items)) or "none"


def _only_in(one: Sequence[SummaryRow], other: RunSummary, other_keys: set[tuple[str, str]],
             ) -> tuple[str, ...]:
    """What of ``one`` (rows of the rollup type) ``other`` lacks, a step as a whole when
    ``other`` has none of it."""
    other_steps = {r.step_name for r in other.rows}
    told: list[str] = []
    for row in one:
        if row.step_name not in other_steps:
            text = f"step {row.step_name}"
        elif (row.step_name, row.rollup_instance) not in other_keys:
            text = f"step {row.step_name}: {row.rollup_type} {row.rollup_instance}"
        else:
            continue
        if text not in told:
            told.append(text)
    return tuple(told)


def _steps(run: RunSummary, rows: Sequence[SummaryRow], rollup_type: str) -> str:
    """The steps of ``rows`` (``run``'s of ``rollup_type``), or why there are none."""
    if rows:
        return f"steps {_names(r.step_name for r in rows)}"
    return (f"no rollup type {rollup_type!r}, only {_names(r.rollup_type for r in run.rows)} "
            f"({run.path})")


def match_runs(base: RunSummary, new: RunSummary, rollup_type: str) -> Matching:
    """The rows of ``rollup_type`` in both runs, matched by step name and instance name; a
    ``CompareError`` when a run has no row at all, or no row is in both."""
    for role, run in (("base", base), ("new", new)):
        if not run.rows:
            raise CompareError(f"the {role} run has no step in its summary: its run wrote "
                               "none (a header only)", what=str(run.path))
    base_rows = [r for r in base.rows if r.rollup_type == rollup_type]
    new_rows = [r for r in new.rows if r.rollup_type == rollup_type]
    if not base_rows and not new_rows:
        types = _names(r.rollup_type for r in (*base.rows, *new.rows))
        raise CompareError(f"neither run has rollup type {rollup_type!r} (they have: {types})",
                           what="--rollup")
    new_by_key = {(r.step_name, r.rollup_instance): r for r in new_rows}
    base_keys = {(r.step_name, r.rollup_instance) for r in base_rows}
    pairs = tuple(Pair(r.step_name, rollup_type, r.rollup_instance, r,
                       new_by_key[(r.step_name, r.rollup_instance)])
                  for r in base_rows if (r.step_name, r.rollup_instance) in new_by_key)
    if not pairs:
        raise CompareError(
            f"no step and {rollup_type} instance is in both runs (base: "
            f"{_steps(base, base_rows, rollup_type)}; new: {_steps(new, new_rows, rollup_type)})")
    return Matching(rollup_type, pairs, _only_in(base_rows, new, set(new_by_key)),
                    _only_in(new_rows, base, base_keys))


def check_metrics(base: RunSummary, new: RunSummary, metrics: Sequence[str]) -> None:
    """A ``CompareError`` naming the first metric in ``metrics`` that a run lacks or holds
    as text, and which run."""
    for metric in metrics:
        for role, run in (("base", base), ("new", new)):
            if run.is_metric(metric):
                continue
            if metric in run.columns:
                raise CompareError(f"metric {metric!r} is not a number in the {role} run "
                                   f"({run.path}:{run.text_line(metric)})")
            close = likely_metrics(metric, [*dict.fromkeys([*base.columns, *new.columns])])
            hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "")
            raise CompareError(f"the {role} run has no metric {metric!r} ({run.path}){hint}")


def likely_metrics(typed: str, known: Sequence[str]) -> list[str]:
    """The metrics ``typed`` likely means: the one spelt so but for case (``iops``: IOPS),
    those it is a part of (``p99``: service_time_p99_ms, response_time_p99_ms), else the
    closest spelling."""
    lower = typed.lower()
    same = [m for m in known if m.lower() == lower]
    if same:
        return same[:1]
    parts = [m for m in known if _has_words(m.lower().split("_"), lower.split("_"))]
    if parts:
        return parts[:3]
    return difflib.get_close_matches(typed, list(known), n=1)


def _has_words(words: Sequence[str], part: Sequence[str]) -> bool:
    """``part`` a run of ``words`` not followed by a number's word (p99 is not p99_9's)."""
    n = len(part)
    return any(list(words[i:i + n]) == list(part)
               and (i + n == len(words) or not words[i + n].isdigit())
               for i in range(len(words) - n + 1))
