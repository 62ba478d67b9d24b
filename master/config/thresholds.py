"""The test's ``thresholds:``: limits a run's results must hold, judged on its exact summaries.

As k6's ``thresholds``, but on the cluster-wide summaries of each step (exact merged
percentiles). The list's items are expressions in ``ivypy compare``'s grammar
(``master.config.expr``): ``METRIC OP LIMIT`` with an absolute limit in the metric's unit,
judged on every step's ``all`` instance (``"service_time_p99_ms < 2"``, ``"IOPS > 50000"``), or
mappings ``{expr: "...", step: NAME, rollup: TYPE, instance: NAME}`` that narrow it (``step``:
that step alone, or every step a ``for:`` sweep or an ``iops_curve`` made of the step of that
name; ``rollup`` default ``all``; ``instance`` default the rollup's every instance).

Owns the shape (``Threshold``) and the validation: the expression (a relative limit such as
``-10%`` needs a base run: that is ``compare``'s), the metric (a summary.csv metric of this
test: ``METRIC_NAMES``, the device columns, a joined gathered metric), the step and the rollup
type (among the test's); every error names its key path. The run judges them
(``master.analysis.thresholds``). Must not read files or know the results' formats.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from master.config.catalog import DEVICE_METRICS, FOCUS_METRICS, VERIFY_METRICS
from master.config.expr import FailIf, parse_fail_if
from master.config.gather import GATHER_PREFIX, GatherSource, focus_metric_problem
from master.config.rolluptypes import rollup_type_problem
from master.config.yamlnodes import Collected, Cursor
from protocol.errors import CompareError

__all__ = ["METRIC_NAMES", "THRESHOLD_KEYS", "Threshold", "parse_thresholds"]

THRESHOLD_KEYS: tuple[str, ...] = ("expr", "step", "rollup", "instance")
_EXAMPLE = "write METRIC OP LIMIT, e.g. 'IOPS > 50000' or 'service_time_p99_ms < 2'"
#: a limit written with a sign: a change, in compare's grammar
_SIGNED = re.compile(r"[<>]=?\s*([+-])\s*[\d.]")
#: the summary.csv metrics a threshold may name (beside the joined gathered ones)
METRIC_NAMES: frozenset[str] = (FOCUS_METRICS | frozenset(DEVICE_METRICS)
                                | frozenset(VERIFY_METRICS) | {"cpu_busy_pct"})


@dataclass(frozen=True)
class Threshold:
    """``cond`` (absolute) must hold on the summary of ``rollup``'s ``instance`` (``""``:
    each of its instances) of step ``step`` as written (``None``: every step), that is of the
    steps ``steps`` (the names of the steps it made). ``line``: where the test file says it,
    for messages."""

    cond: FailIf
    step: str | None = None
    steps: tuple[str, ...] = ()
    rollup: str = "all"
    instance: str = ""
    line: int = 0

    @property
    def text(self) -> str:
        """How a result names it: the expression, and where it is judged when narrowed
        (``service_time_p99_ms < 2 [step s1, host h2]``)."""
        where = [f"step {self.step}"] if self.step is not None else []
        if self.rollup != "all" or self.instance:
            where.append(f"{self.rollup} {self.instance}" if self.instance
                         else f"every {self.rollup}")
        return self.cond.text + (f" [{', '.join(where)}]" if where else "")


def parse_thresholds(cursor: Cursor | None, steps: Mapping[str, tuple[str, ...]],
                     rollup_types: Sequence[str], gather: tuple[GatherSource, ...]
                     ) -> tuple[Threshold, ...]:
    """The top-level ``thresholds:`` list (empty when absent), against the test's step names
    (each name a threshold may say → the names of the steps it means: a step's own, and a
    sweep's or curve's YAML name for every step it made), rollup types and gather sources."""
    if cursor is None:
        return ()
    cursor.expect_seq("a list of expressions such as 'service_time_p99_ms < 2'")
    out, errors = [], Collected()  # every item's error at once
    for item in cursor:
        with errors.each():
            out.append(_threshold(item, steps, rollup_types, gather))
    errors.raise_any()
    return tuple(out)


def _threshold(item: Cursor, steps: Mapping[str, tuple[str, ...]], rollup_types: Sequence[str],
               gather: tuple[GatherSource, ...]) -> Threshold:
    if item.is_map:
        item.check_keys(THRESHOLD_KEYS)
        expr_cursor = item.require("expr", ": the expression, e.g. 'IOPS > 50000'")
    elif item.is_scalar:
        expr_cursor = item
    else:
        raise item.error("must be an expression such as 'IOPS > 50000', or a mapping with "
                         "expr and step, rollup or instance")
    cond = _condition(expr_cursor, gather)
    step: str | None = None
    rollup, instance = "all", ""
    if item.is_map:
        step_cursor = item.get("step")
        if step_cursor is not None:
            step = step_cursor.string()
            if step not in steps:
                raise step_cursor.error(f"no step named {step!r}" + _likely(step, list(steps))
                                        + f" (steps: {', '.join(steps)})")
        rollup_cursor = item.get("rollup")
        if rollup_cursor is not None:
            rollup = rollup_cursor.string()
            problem = rollup_type_problem(rollup, rollup_types)
            if problem is not None:
                raise rollup_cursor.error(problem)
        instance_cursor = item.get("instance")
        if instance_cursor is not None:
            instance = (str(instance_cursor.value) if instance_cursor.is_scalar
                        and not isinstance(instance_cursor.value, (bool, type(None)))
                        else instance_cursor.string())
            if not instance:
                raise instance_cursor.error("must name an instance (leave it out for each)")
            if rollup == "all" and instance != "all":
                raise instance_cursor.error(
                    f"rollup all has the one instance 'all', not {instance!r}: say the rollup "
                    "the instance belongs to (rollup: host, lun, workload ...)")
    return Threshold(cond=cond, step=step, steps=() if step is None else steps[step],
                     rollup=rollup, instance=instance, line=item.line)


def _condition(cursor: Cursor, gather: tuple[GatherSource, ...]) -> FailIf:
    if not cursor.is_scalar or not isinstance(cursor.value, str):
        raise cursor.error("must be an expression such as 'service_time_p99_ms < 2' (quoted "
                           "where YAML would read it otherwise)")
    text = cursor.value
    if text.rstrip().endswith("%"):
        metric = re.split(r"[<>=!]", text, maxsplit=1)[0].strip()
        if metric.endswith("_pct"):
            raise cursor.error(f"{text!r}: {metric} is in percent already: write "
                               f"'{text.rstrip()[:-1].rstrip()}'")
        raise cursor.error(f"{text!r}: a threshold is an absolute limit in the metric's unit "
                           "('IOPS > 50000', 'service_time_p99_ms < 2'); a change in % needs "
                           "a base run: ivypy compare BASE NEW --fail-if")
    signed = _SIGNED.search(text)
    if signed is not None:
        raise cursor.error(f"{text!r}: a threshold is an absolute limit, and a metric is never "
                           f"negative: write '{text[:signed.start(1)]}{text[signed.end(1):]}'")
    try:
        cond = parse_fail_if(text, example=_EXAMPLE)
    except CompareError as exc:
        raise cursor.error(str(exc).removeprefix("--fail-if: ")) from None
    problem = _metric_problem(cond.metric, gather)
    if problem is not None:
        raise cursor.error(f"{cursor.value!r}: {problem}")
    return cond


def _metric_problem(metric: str, gather: tuple[GatherSource, ...]) -> str | None:
    if metric.startswith(GATHER_PREFIX):
        return focus_metric_problem(metric, gather)
    if metric in METRIC_NAMES:
        return None
    by_fold = {m.lower(): m for m in METRIC_NAMES}
    if metric.lower() in by_fold:
        return f"no metric {metric!r}: did you mean {by_fold[metric.lower()]!r}?"
    if metric.lower() in ("p99", "p50", "p90", "p95", "latency", "lat"):
        stat = "mean" if metric.lower().startswith("lat") else metric.lower()
        return (f"no metric {metric!r}: say which time, e.g. 'service_time_{stat}_ms' or "
                f"'response_time_{stat}_ms' (in ms)")
    return f"no metric {metric!r} in summary.csv" + _likely(metric, sorted(METRIC_NAMES))


def _likely(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""

