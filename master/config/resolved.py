"""The resolved plan of a test, as ``ivypy run TEST.yaml --dry-run`` prints it, and as JSON.

Owns the human-readable rendering of a validated ``TestConfig``: hosts, LUN selectors, rollups,
and per step the durations (asked for and rounded to subintervals), measure / DFC / sweep
settings, the workload changes and every workload in force. ``resolved_dict`` gives the same
content as plain JSON-able values (for ``resolved.json`` in the run folder). Pure: this module
must not read files, contact hosts or print.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from master.config.gather import describe as describe_gather
from master.config.schema import (
    AccuracyCriterion,
    DfcConfig,
    HostConfig,
    MeasureConfig,
    PhaseDuration,
    RollupEdit,
    StepConfig,
    TestConfig,
    WorkloadChange,
    WorkloadEdit,
    WorkloadSpec,
)
from master.config.units import format_bytes, format_duration_s, format_fraction
from master.config.verify import describe as describe_verify

__all__ = ["format_plan", "resolved_dict"]

_DEFAULT_SPEC_VALUES = {
    "range_start": "0%",
    "range_end": "100%",
    "skew_weight": "1",
    "write_data": "random",
    "busy_poll": "False",
}


def _phase(name: str, duration: PhaseDuration, subinterval_s: float) -> str:
    asked = format_duration_s(duration.requested_s)
    if duration.subintervals == 0:
        return f"{name} 0"
    rounded = format_duration_s(duration.rounded_s)
    text = f"{name} {asked} = {duration.subintervals} × {format_duration_s(subinterval_s)}"
    if abs(duration.rounded_s - duration.requested_s) > 1e-9:
        text += f" (rounded up to {rounded})"
    return text


def _host(host: HostConfig) -> str:
    if host.transport == "local":
        text = "local"
    else:
        target = host.address if host.user is None else f"{host.user}@{host.address}"
        if host.port is not None:
            target += f":{host.port}"
        text = f"ssh {target}"
    extras = [
        f"{key}={value}"
        for key, value in (
            ("python", host.python if host.python != "python3" else None),
            ("ssh_config", host.ssh_config),
            ("identity_file", host.identity_file),
            ("known_hosts", host.known_hosts),
        )
        if value is not None
    ]
    return " ".join([text, *extras])


def _settings(values: dict[str, object]) -> list[str]:
    """YAML-style ``key=value`` words for workload settings (``None`` values are left out)."""
    words = []
    for key, value in values.items():
        if value is None:
            continue
        if key == "blocksize_bytes":
            assert isinstance(value, int)
            words.append(f"blocksize={format_bytes(value)}")
        elif key in ("read_fraction", "hot_zone_share"):
            assert isinstance(value, float)
            words.append(f"{key}={format_fraction(value)}")
        elif isinstance(value, float):
            words.append(f"{key}={value:g}")
        else:
            words.append(f"{key}={value}")
    return words


def _workload(spec: WorkloadSpec, iops_text: str | None = None) -> str:
    values: dict[str, object] = {
        field.name: getattr(spec, field.name)
        for field in dataclasses.fields(spec)
        if field.name not in ("name", "luns", "iosequencer")
    }
    if iops_text is not None:
        values["iops"] = iops_text
    words = [
        word
        for word in _settings(values)
        if _DEFAULT_SPEC_VALUES.get(word.partition("=")[0]) != word.partition("=")[2]
    ]
    return f"{spec.name}  luns={spec.luns}  {spec.iosequencer}  " + " ".join(words)


def _change(change: WorkloadChange) -> str:
    mark = {"create": "+", "edit": "~", "delete": "-"}[change.action]
    text = f"{mark} {change.name}"
    if change.action == "edit":
        text += f" ({', '.join(change.keys)})"
    if change.source != "workloads":
        text += f" [by {change.source}]"
    return text


def _instances(rollup: str) -> str:
    return "the whole test (rollup all)" if rollup == "all" else f"every {rollup} instance"


def _measure(measure: MeasureConfig) -> str:
    head = f"measure until {measure.focus_metric} of {_instances(measure.focus_rollup)}"
    criterion = measure.criterion
    if isinstance(criterion, AccuracyCriterion):
        body = (
            f"is within ±{format_fraction(criterion.accuracy)} at "
            f"{format_fraction(criterion.confidence)} confidence "
            f"(at least {format_duration_s(criterion.min_measure.rounded_s)}"
        )
        if criterion.ramp.subintervals:
            body += f" after {format_duration_s(criterion.ramp.rounded_s)} ramp"
        if criterion.autocorrelation != "estimate":
            body += f"; autocorrelation factor {criterion.autocorrelation:g}"
        body += ")"
    else:
        checks = ", ".join(f"{c.type}({c.metric}) < {c.limit}" for c in criterion.criteria)
        body = (
            f"meets fio criteria {checks} over a {format_duration_s(criterion.window.rounded_s)} "
            f"window after {format_duration_s(criterion.ramp.rounded_s)} ramp"
        )
    return f"{head} {body}; timeout {format_duration_s(measure.timeout.rounded_s)}"


def _dfc(dfc: DfcConfig) -> str:
    gains = ", ".join(
        f"{name}={value:g}"
        for name, value in (("kp", dfc.gains.kp), ("ki", dfc.gains.ki), ("kd", dfc.gains.kd))
        if value is not None
    )
    return (
        f"dfc holds {dfc.focus_metric} of {_instances(dfc.focus_rollup)} at {dfc.target:g} "
        f"(±{format_fraction(dfc.tolerance)}) with IOPS in [{dfc.low_iops:g}, {dfc.high_iops:g}]"
        + (f"; gains {gains}" if gains else "")
        + ("" if dfc.window is None else
           f"; acts once per {format_duration_s(dfc.window.rounded_s)} window "
           f"({dfc.window.subintervals} subintervals at one IOPS, histograms merged)")
    )


def _edit(edit: RollupEdit) -> str:
    values = {
        field.name: getattr(edit.settings, field.name) for field in dataclasses.fields(WorkloadEdit)
    }
    words = _settings(values)
    if edit.total_iops is not None:
        total = edit.total_iops if edit.total_iops == "max" else f"{edit.total_iops:g}"
        words.insert(0, f"total_iops={total}")
    return f"edit_rollup {edit.instance}: " + " ".join(words)


def _step(step: StepConfig, subinterval_s: float, tolerance_pct: float) -> list[str]:
    origin = f"steps[{step.source_index}], line {step.line}"
    lines = [f"step {step.index:04d} {step.name}  ({origin})"]
    phases = [_phase("warmup", step.warmup, subinterval_s)]
    if step.measure_time is not None:
        phases.append(_phase("measure", step.measure_time, subinterval_s))
    phases.append(_phase("cooldown", step.cooldown, subinterval_s))
    lines.append("  " + "; ".join(phases))
    if step.measure is not None:
        lines.append("  " + _measure(step.measure))
    if step.dfc is not None:
        lines.append("  " + _dfc(step.dfc))
    if step.iops_tolerance_pct != tolerance_pct:
        lines.append(f"  iops_tolerance_pct {step.iops_tolerance_pct:g}% (the test's: "
                     f"{tolerance_pct:g}%)")
    if step.for_values:
        lines.append("  for " + " ".join(f"{key}={text}" for key, text in step.for_values))
    if step.iops_curve is not None:
        point = step.iops_curve
        if point.fraction is None:
            lines.append("  iops_curve: the max-IOPS point (every workload at iops=max)")
        else:
            lines.append(
                f"  iops_curve: {_instances(point.rollup)} at {format_fraction(point.fraction)} "
                f"of its IOPS in step {point.max_step}"
            )
    lines.extend("  " + _edit(edit) for edit in step.edit_rollup)
    if step.changes:
        lines.append("  changes: " + ", ".join(_change(change) for change in step.changes))
    lines.append(f"  workloads in force ({len(step.workloads)}):")
    curve_point = step.iops_curve is not None and step.iops_curve.fraction is not None
    iops_text = "(set by iops_curve)" if curve_point else None
    lines.extend("    " + _workload(spec, iops_text) for spec in step.workloads)
    return lines


def _time_bounds(cfg: TestConfig) -> tuple[float, float]:
    """(fixed seconds, extra seconds at most for measure-until-steady steps)."""
    fixed, extra = 0.0, 0.0
    for step in cfg.steps:
        fixed += step.warmup.rounded_s + step.cooldown.rounded_s
        if step.measure_time is not None:
            fixed += step.measure_time.rounded_s
        elif step.measure is not None:
            extra += step.measure.timeout.rounded_s
    return fixed, extra


def format_plan(cfg: TestConfig) -> str:
    """The resolved plan, one screen per step, ending with a newline."""
    si = cfg.subinterval_seconds
    run_dir = Path(cfg.output_root) / cfg.test / "<YYYYmmdd-HHMMSS>"
    lines = [f"test {cfg.test}  (from {cfg.source_file})"]
    if cfg.description:
        lines.append(f"  {cfg.description}")
    lines += [
        f"output       {run_dir}/",
        f"subinterval  {format_duration_s(si)}; results awaited up to "
        f"{format_fraction(cfg.deadline_fraction)} of a subinterval "
        f"({format_duration_s(si * cfg.deadline_fraction)}) after each boundary",
        f"validity     a step is invalid when a paced workload's IOPS falls more than "
        f"{cfg.iops_tolerance_pct:g}% short of its setting (iops_tolerance_pct)",
    ]
    if cfg.verify is not None:
        lines.append(f"verify       {describe_verify(cfg.verify)}")
    lines += ["", f"hosts ({len(cfg.hosts)})"]
    width = max(len(host.name) for host in cfg.hosts)
    lines.extend(f"  {host.name:<{width}}  {_host(host)}" for host in cfg.hosts)
    count = len(cfg.luns)
    lines += ["", f"luns ({count} selector{'' if count == 1 else 's'})"]
    for lun in cfg.luns:
        all_hosts = len(lun.hosts) == len(cfg.hosts)
        hosts = "all" if all_hosts else ",".join(lun.hosts)
        lines.append(f"  hosts={hosts}  {lun.describe()}  (line {lun.line})")
    lines += ["", "rollups: " + ", ".join(rollup.type for rollup in cfg.rollups)]
    for rollup in cfg.rollups:
        checks = []
        if rollup.quantity is not None:
            checks.append(f"quantity {rollup.quantity}")
        if rollup.max_droop is not None:
            checks.append(f"max_droop {format_fraction(rollup.max_droop)}")
        if checks:
            lines.append(f"  {rollup.type}: " + ", ".join(checks))
    if cfg.gather:
        lines += ["", f"gather ({len(cfg.gather)}, on the controller)"]
        lines.extend(f"  {describe_gather(source)}  (line {source.line})"
                     for source in cfg.gather)
    lines += ["", f"steps ({len(cfg.steps)})"]
    for step in cfg.steps:
        lines.extend(_step(step, si, cfg.iops_tolerance_pct))
    if cfg.thresholds:
        lines += ["", f"thresholds ({len(cfg.thresholds)}: the run exits 1 when one does not "
                  "hold)"]
        lines.extend(f"  {t.text}  (line {t.line})" for t in cfg.thresholds)
    fixed, extra = _time_bounds(cfg)
    total = f"total: {format_duration_s(fixed)} of fixed-length phases"
    if extra:
        total += f", plus up to {format_duration_s(extra)} measuring until steady"
    lines += ["", total]
    return "\n".join(lines) + "\n"


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _jsonable(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if field.name != "source_text"
        }
    if isinstance(value, (tuple, list)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def resolved_dict(cfg: TestConfig) -> dict[str, object]:
    """The validated test as JSON-able values (``source_text`` left out; it is test.yaml)."""
    result = _jsonable(cfg)
    assert isinstance(result, dict)
    return result
