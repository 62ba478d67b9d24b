"""The ``steps:`` list → ``StepConfig``s: durations, ``measure``, ``dfc``, ``edit_rollup``, and the
expansion of ``for:`` sweeps and ``iops_curve:`` points into one step each.

Owns step-level rules: a step measures for ``measure_seconds`` or runs a ``measure:`` block (not
both); warmup, measure and cooldown seconds carry over from the previous step unless given (first
step: 0, 60 s, 0) and round up to whole subintervals; ``for: {k: [..], ...}`` expands into the
cartesian product in key order (first key varies slowest), named ``<name>-k=v-k2=v2`` with values
as written in the YAML, and applies the values as edits to the workloads the step's entries name
(or to every workload in force when the step has no entries); ``iops_curve: [f, ...]`` expands
into ``<name>-iops=max`` followed by ``<name>-iops=<f as a percentage>``. A step's ``workloads:``
entries are applied once, in the first expanded step. This module must not run anything: the
behaviour of measure, DFC and curves belongs to the run loop.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from master.config.catalog import DEVICE_METRICS, FIO_CRITERIA, FOCUS_METRICS, LATENCY_STATS
from master.config.gather import GATHER_PREFIX, GatherSource, focus_metric_problem
from master.config.limits import (
    MAX_AUTOCORRELATION,
    MAX_DFC_GAIN,
    MAX_IOPS_TOLERANCE_PCT,
    MAX_LIMIT_PERCENT,
    MAX_TOTAL_IOPS,
    MIN_IOPS,
    bounded,
    format_number,
    metric_max,
    percent_within,
)
from master.config.rolluptypes import rollup_type_problem
from master.config.schema import (
    AccuracyCriterion,
    DfcConfig,
    DfcGains,
    FioCriteria,
    FioCriterion,
    IopsCurvePoint,
    Limit,
    MeasureConfig,
    PhaseDuration,
    RollupEdit,
    StepConfig,
    WorkloadChange,
)
from master.config.units import format_duration_s, format_fraction, parse_duration_s, parse_fraction
from master.config.workloads import (
    EDITABLE_KEYS,
    WorkloadContext,
    WorkloadTable,
    parse_iops,
    parse_setting,
    parse_settings,
    settings_to_edit,
)
from master.config.yamlnodes import Collected, Cursor, YNode
from protocol.errors import ConfigError

__all__ = ["STEP_KEYS", "StepContext", "curve_references", "parse_steps", "phase"]

STEP_KEYS: tuple[str, ...] = (
    "name",
    "workloads",
    "warmup_seconds",
    "measure_seconds",
    "cooldown_seconds",
    "measure",
    "dfc",
    "iops_curve",
    "for",
    "edit_rollup",
    "iops_tolerance_pct",
)
MEASURE_KEYS: tuple[str, ...] = (
    "focus_rollup",
    "focus_metric",
    "criterion",
    "accuracy",
    "confidence",
    "min_measure_seconds",
    "criteria",
    "window_seconds",
    "ramp_seconds",
    "autocorrelation",
    "timeout_seconds",
)
_ACCURACY_ONLY = ("accuracy", "confidence", "min_measure_seconds", "autocorrelation")
_FIO_ONLY = ("criteria", "window_seconds")
DFC_KEYS: tuple[str, ...] = (
    "focus_rollup",
    "focus_metric",
    "target",
    "low_iops",
    "high_iops",
    "gains",
    "window_seconds",
    "tolerance",
)
EDIT_ROLLUP_KEYS: tuple[str, ...] = ("instance", "total_iops", *EDITABLE_KEYS)

DEFAULT_MEASURE_S = 60.0
DEFAULT_MEASURE_TIMEOUT_S = 600.0
DEFAULT_MIN_MEASURE_S = 60.0
_MAX_STEPS_PER_ENTRY = 10_000
# the longest warmup, measurement or cooldown: a soak test runs for days or weeks; beyond a year
# a value is a typo (and 1e308 s overflowed the count of subintervals)
MAX_PHASE_S = 366 * 86400.0

_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=%+:,-]*$")


@dataclass(frozen=True)
class StepContext:
    subinterval_s: float
    rollup_types: tuple[str, ...]
    workloads: WorkloadContext
    #: the test's ``gather:`` sources (a focus metric may name a joined metric of one)
    gather: tuple[GatherSource, ...] = ()
    #: the test's ``iops_tolerance_pct``, a step's own value overrides it for that step
    iops_tolerance_pct: float = 5.0


# ---------------------------------------------------------------- small readers


def curve_references(steps: Sequence[StepConfig]) -> dict[str, set[str]]:
    """The rollup types, by step name, whose measured IOPS an ``iops_curve`` point reads: its
    max-IOPS step's, of its rollup (the run keeps those alone, ``master.run.steps``)."""
    out: dict[str, set[str]] = {}
    for s in steps:
        if s.iops_curve is not None and s.iops_curve.fraction is not None:
            out.setdefault(s.iops_curve.max_step, set()).add(s.iops_curve.rollup)
    return out


def phase(cursor: Cursor | None, subinterval_s: float, default_s: float = 0.0) -> PhaseDuration:
    """A duration rounded up to whole subintervals (the plan shows both)."""
    if cursor is None:
        requested = default_s
    else:
        try:
            requested = parse_duration_s(cursor.value if cursor.is_scalar else None)
        except ValueError as exc:
            raise cursor.error(str(exc)) from exc
        if requested > MAX_PHASE_S:
            raise cursor.error(f"must be at most a year (got {cursor.node.text})")
    count = math.ceil(requested / subinterval_s - 1e-9) if requested > 0 else 0
    return PhaseDuration(requested, count, count * subinterval_s)


def _positive_phase(
    cursor: Cursor | None,
    subinterval_s: float,
    default_s: float,
    minimum: int,
    parent: Cursor,
    key: str,
) -> PhaseDuration:
    result = phase(cursor, subinterval_s, default_s)
    if result.subintervals < minimum:
        where = cursor or parent
        unit = "subinterval" if minimum == 1 else "subintervals"
        raise where.error(
            f"must cover at least {minimum} {unit} of {format_duration_s(subinterval_s)} "
            f"(got {format_duration_s(result.requested_s)})",
            path=f"{parent.path}.{key}",
        )
    return result


def _open_fraction(cursor: Cursor) -> float:
    """A fraction strictly between 0 and 1."""
    try:
        value = parse_fraction(cursor.value if cursor.is_scalar else None)
    except ValueError as exc:
        raise cursor.error("must be a fraction or a percentage") from exc
    if not 0.0 < value < 1.0:
        raise cursor.error(f"must be between 0 and 1, exclusive (got {cursor.node.text})")
    return value


def _positive_number(cursor: Cursor) -> float:
    value = cursor.number()
    if value <= 0:
        raise cursor.error(f"must be greater than 0 (got {cursor.node.text})")
    return value


def _metric_hint() -> str:
    stats = ", ".join(LATENCY_STATS)
    return (
        "known: IOPS, MB_per_s, service_time_<stat>_ms, response_time_<stat>_ms, each also with "
        f"read_, write_, random_ or sequential_ in front; <stat> is one of {stats}"
    )


def _focus_metric(cursor: Cursor | None, parent: Cursor, default: str | None,
                  gather: tuple[GatherSource, ...] = ()) -> str:
    if cursor is None:
        if default is None:
            raise parent.error("missing key 'focus_metric'")
        return default
    name = cursor.string()
    if name.startswith(GATHER_PREFIX):
        problem = focus_metric_problem(name, gather)
        if problem is not None:
            raise cursor.error(problem)
        return name
    if name in DEVICE_METRICS:  # a LUN-based focus rollup's: checked when the step starts
        return name
    if name not in FOCUS_METRICS:
        close = difflib.get_close_matches(name, sorted(FOCUS_METRICS | set(DEVICE_METRICS)),
                                          n=1)
        hint = f"did you mean {close[0]!r}?" if close else _metric_hint()
        raise cursor.error(f"unknown metric {name!r} ({hint})")
    return name


def _rollup_type(cursor: Cursor | None, rollup_types: tuple[str, ...]) -> str:
    if cursor is None:
        return "all"
    name = cursor.string()
    problem = rollup_type_problem(name, rollup_types)
    if problem is not None:
        raise cursor.error(problem)
    return name


# ---------------------------------------------------------------- measure, dfc, edit_rollup


def _in_metric_range(cursor: Cursor, value: float, metric: str, per: str = "") -> float:
    """``value`` in ``metric``'s unit (``per="/s"``: its change per second), at most the
    metric's largest value."""
    high, unit = metric_max(metric)
    return bounded(
        cursor, value, high=high, show=lambda bound: f"{format_number(bound)} {unit}{per}"
    )


def _limit(cursor: Cursor, metric: str, check: str) -> Limit:
    """A steady-state limit: a percentage up to ``MAX_LIMIT_PERCENT``, or a number in the
    watched ``metric``'s unit (per second for a slope) up to that metric's largest value."""
    value = cursor.value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = parse_fraction(value) * 100
        except ValueError as exc:
            raise cursor.error(f"bad limit {value!r}: use a percentage or a number") from exc
        percent = True
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number, percent = float(value), False
    else:
        raise cursor.error("must be a percentage like 2% or a number")
    if not number > 0:
        raise cursor.error(f"must be greater than 0 (got {cursor.shown()})")
    if percent:
        bounded(cursor, number, high=MAX_LIMIT_PERCENT, show=lambda bound: f"{bound:g}%")
    else:
        _in_metric_range(cursor, number, metric, "/s" if check == "slope" else "")
    return Limit(number, percent)


def _fio_criterion(cursor: Cursor, focus_metric: str) -> FioCriterion:
    if cursor.is_map:
        cursor.check_keys(("type", "limit"))
        type_cursor, limit_cursor = cursor.require("type"), cursor.require("limit")
        kind = type_cursor.string()
    elif cursor.is_scalar and isinstance(cursor.value, str) and ":" in cursor.value:
        type_cursor = cursor
        kind, _, limit_text = cursor.value.partition(":")
        kind = kind.strip()
        limit_node = YNode(
            "scalar", cursor.line, value=_number_or_text(limit_text), text=limit_text.strip()
        )
        limit_cursor = Cursor(limit_node, cursor.path, cursor.file)
    else:
        raise cursor.error("must be a mapping {type, limit} or a string like 'iops_slope:2%'")
    if kind not in FIO_CRITERIA:
        raise type_cursor.error(f"unknown criterion {kind!r} (one of {', '.join(FIO_CRITERIA)})")
    metric, check = FIO_CRITERIA[kind]
    watched = metric or focus_metric
    return FioCriterion(
        kind,
        watched,
        "slope" if check == "slope" else "deviation",
        _limit(limit_cursor, watched, check),
    )


def _number_or_text(text: str) -> object:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _autocorrelation(cursor: Cursor | None) -> Literal["estimate"] | float:
    if cursor is None or cursor.value == "estimate":
        return "estimate"
    value = cursor.value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
        return bounded(cursor, float(value), high=MAX_AUTOCORRELATION)
    raise cursor.error(f"must be 'estimate' or a factor >= 1 (got {cursor.shown()})")


def _measure(cursor: Cursor, context: StepContext) -> MeasureConfig:
    cursor.expect_map("a mapping (use {} for the defaults)")
    cursor.check_keys(MEASURE_KEYS)
    si = context.subinterval_s
    focus_rollup = _rollup_type(cursor.get("focus_rollup"), context.rollup_types)
    focus_metric = _focus_metric(cursor.get("focus_metric"), cursor, "IOPS", context.gather)
    criterion_cursor = cursor.get("criterion")
    kind = "accuracy"
    if criterion_cursor is not None:
        kind = criterion_cursor.string()
        if kind not in ("accuracy", "fio"):
            raise criterion_cursor.error(f"must be 'accuracy' or 'fio' (got {kind!r})")
    wrong = _FIO_ONLY if kind == "accuracy" else _ACCURACY_ONLY
    for key in wrong:
        child = cursor.get(key)
        if child is not None:
            other = "fio" if kind == "accuracy" else "accuracy"
            raise child.error(f"only with criterion: {other} (this measure uses {kind})")
    criterion: AccuracyCriterion | FioCriteria
    ramp = phase(cursor.get("ramp_seconds"), si)
    if kind == "accuracy":
        accuracy_cursor, confidence_cursor = cursor.get("accuracy"), cursor.get("confidence")
        min_measure = _positive_phase(
            cursor.get("min_measure_seconds"), si, DEFAULT_MIN_MEASURE_S, 2, cursor,
            "min_measure_seconds",
        )  # fmt: skip
        criterion = AccuracyCriterion(
            accuracy=0.05 if accuracy_cursor is None else _open_fraction(accuracy_cursor),
            confidence=0.95 if confidence_cursor is None else _open_fraction(confidence_cursor),
            min_measure=min_measure,
            ramp=ramp,
            autocorrelation=_autocorrelation(cursor.get("autocorrelation")),
        )
        needed_what = "ramp_seconds + min_measure_seconds"
        needed = min_measure.subintervals + ramp.subintervals
        needed_s = min_measure.rounded_s + ramp.rounded_s
    else:
        criteria_cursor = cursor.require("criteria", " (needed with criterion: fio)")
        criteria_cursor.expect_seq("a list of criteria")
        if len(criteria_cursor) == 0:
            raise criteria_cursor.error("must list at least one criterion")
        criteria = tuple(_fio_criterion(item, focus_metric) for item in criteria_cursor)
        window = _positive_phase(
            cursor.require("window_seconds", " (needed with criterion: fio)"),
            si,
            0.0,
            2,
            cursor,
            "window_seconds",
        )
        criterion = FioCriteria(criteria, window, ramp)
        needed_what = "ramp_seconds + window_seconds"
        needed = window.subintervals + ramp.subintervals
        needed_s = window.rounded_s + ramp.rounded_s
    timeout_cursor = cursor.get("timeout_seconds")
    timeout = _positive_phase(
        timeout_cursor, si, DEFAULT_MEASURE_TIMEOUT_S, 1, cursor, "timeout_seconds"
    )
    if timeout.subintervals < needed:
        raise (timeout_cursor or cursor).error(
            f"timeout_seconds ({format_duration_s(timeout.rounded_s)}) is shorter than "
            f"{needed_what} ({format_duration_s(needed_s)})",
            path=f"{cursor.path}.timeout_seconds",
        )
    return MeasureConfig(focus_rollup, focus_metric, criterion, timeout)


def _dfc(cursor: Cursor, context: StepContext) -> DfcConfig:
    cursor.expect_map("a mapping")
    cursor.check_keys(DFC_KEYS)
    focus_rollup = _rollup_type(cursor.get("focus_rollup"), context.rollup_types)
    focus_metric = _focus_metric(cursor.get("focus_metric"), cursor, None, context.gather)
    target_cursor = cursor.require("target")
    target = _in_metric_range(target_cursor, _positive_number(target_cursor), focus_metric)
    low_cursor, high_cursor = cursor.require("low_iops"), cursor.require("high_iops")
    low = bounded(low_cursor, _positive_number(low_cursor), low=MIN_IOPS, high=MAX_TOTAL_IOPS)
    high = bounded(high_cursor, _positive_number(high_cursor), low=MIN_IOPS, high=MAX_TOTAL_IOPS)
    if low >= high:
        raise low_cursor.error(f"must be less than high_iops ({low:g} >= {high:g})")
    gains = DfcGains()
    gains_cursor = cursor.get("gains")
    if gains_cursor is not None:
        gains_cursor.expect_map("a mapping {kp, ki, kd}")
        gains_cursor.check_keys(("kp", "ki", "kd"))
        if not gains_cursor.mapping_keys():  # else it would be the adaptive controller
            raise gains_cursor.error("gives no gain: give kp, ki or kd (a gain left out takes "
                                     "its default), or leave gains out for the adaptive "
                                     "controller")
        values: dict[str, float] = {}
        for key in gains_cursor.mapping_keys():
            child = gains_cursor.require(key)
            values[key] = child.number()
            if values[key] < 0:
                raise child.error(f"must not be negative (got {child.node.text})")
            bounded(child, values[key], high=MAX_DFC_GAIN)
        gains = DfcGains(**values)
        # the controller takes ki = 0.5 where only kp or kd is given (master.analysis.stepcontrol)
        if values and values.get("kp", 0.0) == values.get("ki", 0.5) == values.get("kd", 0.0) == 0:
            raise gains_cursor.error("kp, ki and kd cannot all be 0 (the controller would never "
                                     "move; ki is 0.5 unless given)")
    window_cursor = cursor.get("window_seconds")
    window = None
    if window_cursor is not None:
        window = _positive_phase(window_cursor, context.subinterval_s, 0.0, 1, cursor,
                                 "window_seconds")
        if focus_metric.startswith(GATHER_PREFIX) and window.subintervals > 1:
            raise window_cursor.error("a gathered focus metric has no histograms to merge over "
                                      "a window: leave window_seconds out")
        if focus_metric in DEVICE_METRICS and window.subintervals > 1:
            raise window_cursor.error(f"a device focus metric ({focus_metric}) has no "
                                      "histograms to merge over a window: leave window_seconds "
                                      "out")
    tolerance_cursor = cursor.get("tolerance")
    tolerance = 0.10 if tolerance_cursor is None else _open_fraction(tolerance_cursor)
    return DfcConfig(focus_rollup, focus_metric, target, low, high, gains, window, tolerance)


def _known_host(cursor: Cursor, text: str, rollup: str, value_text: str,
                hosts: Sequence[str]) -> None:
    """An ``edit_rollup`` instance of the host, lun or workload rollup names a host of the test
    (a lun instance is ``<host>:<path>``, a workload's ``<host>:<path>:<name>``): refused here,
    before any host is contacted or file LUN laid out, not once the LUNs are discovered."""
    if rollup not in ("host", "lun", "workload") or not hosts:
        return
    if rollup != "host" and ":" not in value_text:
        form = "<host>:<path>" if rollup == "lun" else "<host>:<path>:<workload>"
        like = f"{hosts[0]}:/dev/sdb" + ("" if rollup == "lun" else ":rr")
        raise cursor.error(f"bad instance {text!r}: a {rollup} instance is {form}, like {like}")
    host = value_text if rollup == "host" else value_text.split(":", 1)[0]
    if host not in hosts:
        shown = ", ".join(hosts[:10]) + (f" and {len(hosts) - 10:,} more" if len(hosts) > 10
                                          else "")
        raise cursor.error(f"bad instance {text!r}: the test has no host {host!r} (hosts: "
                           f"{shown})")


def _edit_rollup(cursor: Cursor, context: StepContext) -> tuple[RollupEdit, ...]:
    cursor.expect_seq("a list of {instance, ...} mappings")
    edits = []
    first_line: dict[tuple[str, tuple[str, ...]], int] = {}
    for entry in cursor:
        entry.expect_map("a mapping with 'instance'")
        entry.check_keys(EDIT_ROLLUP_KEYS)
        instance_cursor = entry.require("instance")
        text = instance_cursor.string().strip()
        value: tuple[str, ...]
        if text == "all":
            rollup, value = "all", ()
        else:
            rollup, equals, value_text = text.partition("=")
            if not equals or not rollup or not value_text:
                raise instance_cursor.error(
                    f"bad instance {text!r}: use all or <rollup type>=<value> like host=h1"
                )
            problem = rollup_type_problem(rollup, context.rollup_types)
            if problem is not None:
                raise instance_cursor.error(problem)
            _known_host(instance_cursor, text, rollup, value_text, context.workloads.host_names)
            value = tuple(value_text.split("+"))
            wanted = len(rollup.split("+"))
            if len(value) != wanted or not all(value):
                raise instance_cursor.error(
                    f"bad instance {text!r}: {rollup} needs {wanted} '+'-joined values"
                )
        if (rollup, value) in first_line:  # a second entry would merge into the first's edits
            raise instance_cursor.error(
                f"duplicate instance {text!r} in this step's edit_rollup "
                f"(first at line {first_line[rollup, value]})"
            )
        first_line[rollup, value] = instance_cursor.line
        settings = parse_settings(entry, EDITABLE_KEYS)
        total_cursor = entry.get("total_iops")
        total = None if total_cursor is None else parse_iops(total_cursor, MAX_TOTAL_IOPS)
        if total_cursor is not None and "iops" in settings:
            raise total_cursor.error("total_iops and iops exclude each other")
        if not settings and total_cursor is None:
            raise entry.error("changes nothing: give total_iops or workload keys")
        edits.append(RollupEdit(rollup, value, settings_to_edit(settings), total))
    return tuple(edits)


# ---------------------------------------------------------------- expansion


@dataclass
class _Timing:
    """Step durations carry over into later steps until a step changes them."""

    warmup_s: float = 0.0
    measure_s: float = DEFAULT_MEASURE_S
    cooldown_s: float = 0.0


@dataclass(frozen=True)
class _Variant:
    suffix: str
    for_values: tuple[tuple[str, str], ...]
    edits: dict[str, tuple[object, Cursor]]
    curve: IopsCurvePoint | None


def _for_variants(cursor: Cursor, name: str) -> list[_Variant]:
    cursor.expect_map("a mapping of workload key to a list of values")
    if not cursor.mapping_keys():
        raise cursor.error("must name at least one workload key")
    axes: list[list[tuple[str, str, object, Cursor]]] = []
    for key in cursor.mapping_keys():
        child = cursor.require(key)
        if key not in EDITABLE_KEYS:
            raise child.error(f"cannot sweep {key!r} (sweepable keys: {', '.join(EDITABLE_KEYS)})")
        child.expect_seq("a list of values")
        if len(child) == 0:
            raise child.error("must list at least one value")
        axis = []
        seen: dict[object, str] = {}
        for item in child:
            if not item.is_scalar:
                raise item.error("sweep values must be scalars")
            # as written, without blanks: a step name holds none (``4 KiB`` names ``4KiB``)
            text = "".join(item.node.text.split())
            value = parse_setting(key, item)
            if value in seen:
                same = "" if seen[value] == text else f", the same as {seen[value]!r}"
                raise item.error(f"duplicate value {text!r}{same}")
            seen[value] = text
            axis.append((key, text, value, item))
        axes.append(axis)
    if math.prod(len(axis) for axis in axes) > _MAX_STEPS_PER_ENTRY:
        raise cursor.error(f"expands to more than {_MAX_STEPS_PER_ENTRY} steps")
    variants = []
    for combination in itertools.product(*axes):
        values = tuple((key, text) for key, text, _, _ in combination)
        suffix = "".join(f"-{key}={text}" for key, text in values)
        edits = {key: (value, item) for key, _, value, item in combination}
        variants.append(_Variant(suffix, values, edits, None))
    return variants


def _curve_variants(cursor: Cursor, name: str, rollup: str) -> list[_Variant]:
    cursor.expect_seq("a list of fractions of the max IOPS, like [10%, 50%, 90%]")
    if len(cursor) == 0:
        raise cursor.error("must list at least one fraction")
    max_name = f"{name}-iops=max"
    variants = [_Variant("-iops=max", (), {}, IopsCurvePoint(max_name, None, rollup))]
    seen: set[float] = set()
    for item in cursor:
        try:
            fraction = parse_fraction(item.value if item.is_scalar else None)
        except ValueError as exc:
            raise item.error("must be a fraction or a percentage") from exc
        if not 0.0 < fraction <= 1.0:
            raise item.error(f"must be greater than 0 and at most 1 (got {item.node.text})")
        if fraction in seen:
            raise item.error(f"duplicate fraction {item.node.text}")
        seen.add(fraction)
        point = IopsCurvePoint(max_name, fraction, rollup)
        variants.append(_Variant(f"-iops={format_fraction(fraction)}", (), {}, point))
    return variants


def _apply_entries(
    step: Cursor, table: WorkloadTable, sweeping: bool
) -> tuple[list[WorkloadChange], list[str]]:
    changes: list[WorkloadChange] = []
    targets: list[str] = []
    entries = step.get("workloads")
    if entries is None:
        return changes, targets
    entries.expect_seq("a list of workload entries")
    named_at: dict[str, int] = {}  # workloads this step's entries created or edited: their line
    errors = Collected()  # each entry's errors, all at once (an entry refused is left out)
    for entry in entries:
        name_cursor = entry.get("name") if entry.is_map else None
        if name_cursor is not None and name_cursor.is_scalar and name_cursor.value in named_at:
            # a second entry would edit what the first just set up: two workloads meant as
            # two merged into one. Only a delete ends a workload's use in the step (delete and
            # create again is how luns or seed change).
            errors.add(name_cursor.error(
                f"duplicate workload {name_cursor.value!r} in this step "
                f"(first at line {named_at[str(name_cursor.value)]})"
            ))
            continue
        try:
            change = table.apply_entry(entry, allow_empty_edit=sweeping)
        except ConfigError as exc:
            errors.add(exc)
            continue
        if change.action == "delete":
            named_at.pop(change.name, None)
        elif name_cursor is not None:
            named_at[change.name] = name_cursor.line
        changes.append(change)
        if change.action == "delete":
            targets = [name for name in targets if name != change.name]
        elif change.name not in targets:
            targets.append(change.name)
    errors.raise_any()
    return changes, targets


def _check_for_conflicts(step: Cursor) -> None:
    sweep, entries = step.get("for"), step.get("workloads")
    if sweep is None or entries is None or not sweep.is_map or not entries.is_seq:
        return
    for key in sweep.mapping_keys():
        for index, entry in enumerate(entries):
            if entry.is_map and entry.has(key):
                raise sweep.require(key).error(
                    f"also set by workloads[{index}] of this step; set it in one place"
                )


def _parse_step(
    step: Cursor,
    source_index: int,
    first_index: int,
    table: WorkloadTable,
    timing: _Timing,
    context: StepContext,
) -> list[StepConfig]:
    step.expect_map("a mapping with 'name'")
    step.check_keys(STEP_KEYS)
    name_cursor = step.require("name")
    name = name_cursor.string()
    si = context.subinterval_s
    warmup = phase(step.get("warmup_seconds"), si, timing.warmup_s)
    cooldown = phase(step.get("cooldown_seconds"), si, timing.cooldown_s)
    timing.warmup_s, timing.cooldown_s = warmup.requested_s, cooldown.requested_s
    measure_cursor, seconds_cursor = step.get("measure"), step.get("measure_seconds")
    measure = None if measure_cursor is None else _measure(measure_cursor, context)
    if measure is not None and seconds_cursor is not None:
        raise seconds_cursor.error("not allowed with measure: (the measure block decides how long)")
    measure_time = None
    if measure is None:
        measure_time = _positive_phase(
            seconds_cursor, si, timing.measure_s, 1, step, "measure_seconds"
        )
        timing.measure_s = measure_time.requested_s
    dfc_cursor = step.get("dfc")
    dfc = None if dfc_cursor is None else _dfc(dfc_cursor, context)
    edit_cursor = step.get("edit_rollup")
    edit_rollup = () if edit_cursor is None else _edit_rollup(edit_cursor, context)
    tolerance_pct = percent_within(step.get("iops_tolerance_pct"), context.iops_tolerance_pct,
                                   MAX_IOPS_TOLERANCE_PCT)

    sweep_cursor, curve_cursor = step.get("for"), step.get("iops_curve")
    if sweep_cursor is not None and curve_cursor is not None:
        raise curve_cursor.error("iops_curve and for cannot be combined in one step")
    if curve_cursor is not None and dfc_cursor is not None:
        raise curve_cursor.error("iops_curve and dfc cannot be combined in one step")
    if sweep_cursor is not None:
        variants = _for_variants(sweep_cursor, name)
        _check_for_conflicts(step)
    elif curve_cursor is not None:
        variants = _curve_variants(curve_cursor, name, measure.focus_rollup if measure else "all")
    else:
        variants = [_Variant("", (), {}, None)]

    steps: list[StepConfig] = []
    targets: list[str] = []
    for number, variant in enumerate(variants):
        changes: list[WorkloadChange] = []
        if number == 0:
            changes, targets = _apply_entries(step, table, sweep_cursor is not None)
            if not targets:
                targets = table.names()
        if variant.edits:
            if not targets:
                raise step.error(
                    "for: there is no workload to apply the values to", path=f"{step.path}.for"
                )
            for target in targets:
                table.edit(target, variant.edits, sweep_cursor or step)
                changes.append(WorkloadChange("edit", target, tuple(variant.edits), "for"))
        if variant.curve is not None and variant.curve.fraction is None:
            for target in table.names():
                table.edit(target, {"iops": ("max", curve_cursor or step)}, curve_cursor or step)
                changes.append(WorkloadChange("edit", target, ("iops",), "iops_curve"))
        if not table.names():
            raise step.error("no workload is in force in this step")
        steps.append(
            StepConfig(
                index=first_index + number,
                name=name + variant.suffix,
                source_index=source_index,
                workloads=table.snapshot(),
                changes=tuple(changes),
                warmup=warmup,
                measure_time=measure_time,
                cooldown=cooldown,
                measure=measure,
                dfc=dfc,
                edit_rollup=edit_rollup,
                iops_curve=variant.curve,
                for_values=variant.for_values,
                iops_tolerance_pct=tolerance_pct,
                line=step.line,
            )
        )
    return steps


def parse_steps(cursor: Cursor, context: StepContext) -> tuple[StepConfig, ...]:
    """``steps:`` → every step as it will run, with the workloads in force in each."""
    cursor.expect_seq("a list of steps")
    if len(cursor) == 0:
        raise cursor.error("must list at least one step")
    table = WorkloadTable(context.workloads)
    timing = _Timing()
    steps: list[StepConfig] = []
    first_line: dict[str, int] = {}
    for source_index, step in enumerate(cursor):
        for expanded in _parse_step(step, source_index, len(steps), table, timing, context):
            name_cursor = step.require("name")
            if not _STEP_NAME.match(expanded.name):
                raise name_cursor.error(
                    f"bad step name {expanded.name!r}: use letters, digits and . _ = % + : , -"
                )
            if expanded.name in first_line:
                first = first_line[expanded.name]
                raise name_cursor.error(
                    f"duplicate step name {expanded.name!r} (first at line {first})"
                )
            first_line[expanded.name] = step.line
            steps.append(expanded)
    return tuple(steps)
