"""What the live view is told: its rows, built from numbers the run already has.

Owns the shapes the view shows (``LiveRow`` per rollup instance and subinterval, ``DfcLine``
per DFC move, ``FinalRow`` per step and instance of the end-of-run table) and their building:
picking columns out of a rollup's result, the slave's CPU seconds as a share of its host, the
summary rows of the rollups the table shows, and a rollup of many instances summarised by each
column's highest, mean and lowest (``spread_rows``). Pure: no I/O, no terminal, no rollup
arithmetic (``master.analysis.rollup`` computes every latency and rate; this module selects,
labels, and takes those three of what it computed).

Two CPU figures, on one scale (percent of all of the host's cores over the subinterval):
``host_cpu_pct`` is the host's busy time (every process, ivypy's included; ``busy_pct`` in
cpu.csv); ``ivypy_cpu_pct`` is the slave's own user and system seconds with its workers'
(``slave_user_s`` + ``slave_system_s`` in cpu.csv) over subinterval × cores. An instance on
several hosts shows the mean over its hosts, as ``cpu_busy_pct`` in the rollup rows does.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from master.config.rolluptypes import rollup_type_problem
from protocol.errors import ConfigError

if TYPE_CHECKING:  # numpy is imported where used: ``--live-rollup``'s check loads none
    import numpy.typing as npt

#: the rollup type whose rows the view shows beside the total row, by count of hosts
DEFAULT_LIVE_ROLLUP_ONE_HOST = "lun"
DEFAULT_LIVE_ROLLUP_HOSTS = "host"
#: instances of the live rollup made into rows each subinterval: more than a terminal shows
#: (the view says how many more there are); building 10,000 rows cost 84 ms a subinterval
LIVE_ROWS_MAX = 64
#: the rollup columns a ``LiveRow`` shows, in its fields' order
LIVE_METRICS = ("IOPS", "MB_per_s", "service_time_p50_ms", "service_time_p99_ms",
                "response_time_p50_ms", "response_time_p99_ms")


@dataclass(frozen=True)
class LiveRow:
    """One rollup instance in one subinterval (NaN where there was nothing to measure)."""

    instance: str
    iops: float
    mb_per_s: float
    service_p50_ms: float
    service_p99_ms: float
    response_p50_ms: float
    response_p99_ms: float
    host_cpu_pct: float
    ivypy_cpu_pct: float


@dataclass(frozen=True)
class DfcLine:
    """One DFC controller's move after a subinterval: its focus instance, the metric it
    holds, the target, what the metric measured, the IOPS it ran at and the IOPS it set."""

    instance: str
    metric: str
    target: float
    measured: float
    iops_in_force: float
    iops_set: float


@dataclass(frozen=True)
class FinalRow:
    """One step's measurement of one rollup instance in the end-of-run table."""

    step: str
    rollup_type: str
    instance: str
    iops: float
    mb_per_s: float
    service_p50_ms: float
    service_p99_ms: float
    response_p50_ms: float
    response_p99_ms: float
    valid: bool | None  # None: the step has no summary row
    reason: str


def default_live_rollup(n_hosts: int) -> str:
    """``host`` when the run has several hosts, else ``lun``."""
    return DEFAULT_LIVE_ROLLUP_HOSTS if n_hosts > 1 else DEFAULT_LIVE_ROLLUP_ONE_HOST


def check_live_rollup(rollup_type: str, test_types: Sequence[str], file: str | None) -> None:
    """``ConfigError`` when ``--live-rollup`` names none of the test's rollup types."""
    problem = rollup_type_problem(rollup_type, test_types)
    if problem is not None:
        raise ConfigError(f"--live-rollup: {problem}", file=file)


def _float(v: Any) -> float:
    """A number of a row (CSV cells may be None, '' or a number); NaN when there is none."""
    if v is None or v == "":
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def ivypy_cpu_pct(cpu: Mapping[str, Any], subinterval_s: float) -> float:
    """The slave's CPU (user + system seconds, workers included) as a percent of all of its
    host's cores over ``subinterval_s``, from a result's ``cpu`` dict; NaN when the dict
    does not say (no core count or no seconds)."""
    cores = len(cpu.get("per_core_busy_pct") or ())
    used_s = _float(cpu.get("slave_user_s")) + _float(cpu.get("slave_system_s"))
    if cores == 0 or not subinterval_s > 0 or math.isnan(used_s):
        return math.nan
    return 100.0 * used_s / (subinterval_s * cores)


def live_rows(names: Sequence[str], columns: Mapping[str, Any], host_cpu_pct: Sequence[float],
              ivypy_cpu: Sequence[float], limit: int = LIVE_ROWS_MAX) -> list[LiveRow]:
    """A ``LiveRow`` for each of the first ``limit`` instances ``names[i]``, from a rollup
    result's ``columns`` (metric name → value per instance: a sequence or a numpy array)
    and each instance's two CPU figures."""
    n = min(limit, len(names))
    iops, mb, s50, s99, r50, r99 = ([float(v) for v in columns[c][:n]] for c in LIVE_METRICS)
    return [LiveRow(names[i], iops[i], mb[i], s50[i], s99[i], r50[i], r99[i],
                    float(host_cpu_pct[i]), float(ivypy_cpu[i])) for i in range(n)]


#: a live rollup of more instances than this is summarised too (``spread_rows``): more than
#: the plain console shows
SPREAD_FROM = 8
#: the rows summarising a live rollup of many instances, and how each is worked out (numpy's)
SPREAD_ROWS = (("highest", "nanmax"), ("mean", "nanmean"), ("lowest", "nanmin"))


def spread_rows(columns: Mapping[str, Any], host_cpu_pct: npt.ArrayLike,
                ivypy_cpu: npt.ArrayLike) -> list[LiveRow]:
    """Of every instance of a rollup result (``columns``: metric → value per instance, with
    each instance's two CPU figures): each column's highest, mean and lowest, a ``LiveRow``
    each (named so; NaN where no instance has a value). Each column is its own: the highest
    IOPS and the highest p99 may be two instances'."""
    import numpy as np  # here: a refused test file loads no numpy (test_config_bounds_process)

    values = [np.asarray(columns[c], dtype=np.float64) for c in LIVE_METRICS]
    values += [np.asarray(host_cpu_pct, dtype=np.float64),
               np.asarray(ivypy_cpu, dtype=np.float64)]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column without values: NaN
        for name, how in SPREAD_ROWS:
            cells = [float(getattr(np, how)(v)) if v.size else math.nan for v in values]
            out.append(LiveRow(name, *cells))
    return out


def dfc_lines(dfc_rows: Sequence[Mapping[str, Any]]) -> list[DfcLine]:
    """A ``DfcLine`` per row of dfc.csv written after one subinterval."""
    return [DfcLine(str(r.get("instance", "")), str(r.get("metric", "")), _float(r.get("target")),
                    _float(r.get("measured")), _float(r.get("iops_in_force")),
                    _float(r.get("new_iops")))
            for r in dfc_rows]


def measure_lines(measure_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A ``measure:`` step's progress toward its criterion after one subinterval (the rows of
    measure.csv it wrote), a line per criterion: how many focus instances are within the limit
    over the latest window, and the farthest one's value (its bar otherwise counted only
    toward the timeout)."""
    out = []
    for criterion in dict.fromkeys(str(r.get("criterion", "")) for r in measure_rows):
        mine = [r for r in measure_rows if r.get("criterion") == criterion]
        first = mine[0]
        unit = "%" if criterion == "accuracy" else ""
        head = (f"measure {criterion} of {first.get('metric', '')} (limit "
                f"{first.get('limit', '')}): ")
        if all(r.get("window_first") is None for r in mine):
            out.append(head + "no full window yet")
            continue
        within = sum(bool(r.get("passed")) for r in mine)
        text = f"{within} of {len(mine)} within"
        off = [r for r in mine if not r.get("passed") and math.isfinite(_float(r.get("value")))]
        if off:
            worst = max(off, key=lambda r: abs(_float(r.get("value"))))
            text += (f"; {worst.get('instance', '')} at {_float(worst.get('value')):.4g}{unit}")
        if any(r.get("attained") for r in mine):
            text += "; steady"
        out.append(head + text)
    return out


def short_names(names: Sequence[str]) -> list[str]:
    """Instance names as the console shows them: a LUN's path by its last part (the device or
    file name: ``h1:/dev/sdb`` → ``h1:sdb``, ``h1:/data/t/lun0:rr`` → ``h1:lun0:rr``) where
    that is unique among ``names``; else, and for other names, as they are (the CSV files
    keep them whole)."""
    def short(name: str) -> str:
        host, colon, rest = name.partition(":")
        if not colon or not rest.startswith("/"):
            return name
        path, sep, tail = rest.rpartition(":")  # a workload's name follows its LUN's path
        if not sep or "/" in tail:
            path, sep, tail = rest, "", ""
        return f"{host}:{path.rsplit('/', 1)[-1]}{sep}{tail}"

    shorts = [short(n) for n in names]
    taken = {s: shorts.count(s) for s in shorts}
    return [s if taken[s] == 1 else n for s, n in zip(shorts, names, strict=True)]


def instance_rows(rollup_type: str, instances: int, rows: Sequence[LiveRow]) -> list[LiveRow]:
    """The rows of ``rollup_type`` the console shows under the total, their names short
    (``short_names``): none for ``all``, and none where the rollup has one instance (it is
    the total, to the digit: shown twice it only doubled every line)."""
    if rollup_type == "all" or max(instances, len(rows)) <= 1:
        return []
    return [dataclasses.replace(r, instance=n)
            for r, n in zip(rows, short_names([r.instance for r in rows]), strict=True)]


def final_rows(step: str, summary_rows: Sequence[Mapping[str, Any]],
               rollup_types: Sequence[str], limit: int, *, valid: bool | None = None,
               reasons: Sequence[str] = ()) -> tuple[list[FinalRow], int]:
    """The end-of-run table's rows of one step: its summary rows of ``rollup_types`` (in that
    order; a type's rows in theirs), at most ``limit`` of each type past the first; and how
    many were left out. The ``all`` row carries the step's verdict: invalid when any of its
    summary rows is (of any rollup type, shown or not), with every row's reasons, each once.
    A step without summary rows (no measurement window) gets one row saying so, with the
    step's ``valid`` and ``reasons`` as the run had them (used only then)."""
    if not summary_rows:
        nan = math.nan
        why = "; ".join(dict.fromkeys(("no measurement subintervals", *reasons)))
        return [FinalRow(step, "all", "-", nan, nan, nan, nan, nan, nan, valid, why)], 0
    out: list[FinalRow] = []
    left_out = 0
    for t in dict.fromkeys(rollup_types):
        mine = [r for r in summary_rows if r.get("rollup_type") == t]
        if t != "all" and len(mine) <= 1:  # one instance: the total's row already
            continue
        keep = mine if t == "all" else mine[:limit]
        left_out += len(mine) - len(keep)
        names = short_names([str(r.get("rollup_instance", "")) for r in keep])
        for r, name in zip(keep, names, strict=True):
            valid, reason = ((step_verdict(summary_rows)) if t == "all" else
                             (_valid(r.get("valid")), str(r.get("invalid_reason") or "")))
            out.append(FinalRow(
                step, t, name if t != "all" else str(r.get("rollup_instance", "")),
                _float(r.get("IOPS")),
                _float(r.get("MB_per_s")), _float(r.get("service_time_p50_ms")),
                _float(r.get("service_time_p99_ms")), _float(r.get("response_time_p50_ms")),
                _float(r.get("response_time_p99_ms")), valid, reason))
    return out, left_out


def step_verdict(summary_rows: Sequence[Mapping[str, Any]]) -> tuple[bool | None, str]:
    """A step's verdict from its summary rows: False when any row is invalid, True when all
    are valid, else None; and the reasons of all rows, each ``; ``-separated part once."""
    marks = [_valid(r.get("valid")) for r in summary_rows]
    valid = False if False in marks else True if marks and None not in marks else None
    parts: dict[str, None] = {}
    for r in summary_rows:
        for part in str(r.get("invalid_reason") or "").split("; "):
            if part.strip():
                parts.setdefault(part.strip(), None)
    return valid, "; ".join(parts)


def _valid(v: Any) -> bool | None:
    """A summary row's ``valid`` cell (a bool, or its CSV text)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None
