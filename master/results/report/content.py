"""What the report's charts show: from a read run folder to chart specifications (plain data
for the page's JSON).

Owns the choice of the rollup to plot (``default_rollup``), which columns each chart takes
(IOPS, MB/s, service and response time p50/p99/p99.9/max per instance, the device's IOPS
and MB/s beside ivypy's and its service time, utilisation and queue depth where the run
recorded ``device_*`` columns, a chart per gathered ``gather.*`` column; the latency CDF from
the step's ``all`` histogram; DFC's measured metric, target and IOPS in force; measure's
criteria against their limits; CPU busy per host), the instance charts of every other
rollup type (the page's selector), the IOPS curve across the steps, the measurement window
each time chart marks, and the page-wide point budget. Must not read files itself beyond
``master.results.runfolder``'s readers, or write HTML (``master.results.report.page``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from master.results.report import series as sr
from master.results.runfolder import (
    RunFolder,
    StepFolder,
    Table,
    leading_number,
    read_header,
    read_table,
    to_float,
)

#: The numbers all charts of a page may hold together; beyond it every series is downsampled
#: by one bucket size (3 MB for 100 instances x 1,000 subintervals holds with room to spare).
BUDGET_POINTS = 250_000
#: The instances of one rollup type a step's charts show at most (reading beyond them would
#: cost time at the end of every run for lines no one can tell apart).
MAX_INSTANCES = 100
#: Over ``MAX_INSTANCES``, the instances whose highest, mean and lowest the charts show at most:
#: 1,000 hosts' files are read, a run's 100,000 workloads' are not (at the end of every run,
#: for each rollup type and step: 2,000 files of 15 rows took 0.65 s, of 60 rows 1.34 s)
SPREAD_INSTANCES = 1_000
#: hosts drawn a line each in a step's CPU chart; more are drawn as three lines: each
#: subinterval's busiest, median and least busy host
CPU_HOSTS_DRAWN = 16
PERCENTILES = (("p50", "p50"), ("p99", "p99"), ("p99_9", "p99.9"), ("max", "max"))
KINDS = (("service_time", "Service time"), ("response_time", "Response time"))
INSTANCE_READ = ("subinterval", "phase", "elapsed_s", "rollup_instance", "IOPS", "MB_per_s",
                 *(f"{k}_{p}_ms" for k, _ in KINDS for p, _ in PERCENTILES))
#: The device columns the charts show (``master.analysis.devstats``): the device's IOPS and MB/s
#: beside ivypy's, and a chart of its service time (left axis) with utilisation and queue depth
DEVICE_READ = ("device_IOPS", "device_MB_per_s", "device_service_time_ms", "device_util_pct",
               "device_queue_depth")
#: A gathered column's prefix (``gather.<source>.<element_type>.<metric>``): a chart each
GATHER_PREFIX = "gather."
#: Gathered columns a step charts at most (the first by the instance file's column order)
MAX_GATHERED = 12


def default_rollup(run: RunFolder) -> str:
    """``host`` when the run had several hosts, else ``lun``; ``all`` when the steps have
    neither. Hosts are told by name: a resumed run's hosts.csv has a row per host and
    session."""
    n_hosts = len(set(run.hosts.column("host"))) if run.hosts is not None else 0
    want = "host" if n_hosts > 1 else "lun"
    return want if any(want in s.instances for s in run.steps) else "all"


def subinterval_seconds(run: RunFolder) -> float:
    """The run's subinterval length (resolved.json), 1 s when it cannot be told."""
    value = (run.resolved or {}).get("subinterval_seconds")
    return float(value) if isinstance(value, int | float) and value > 0 else 1.0


@dataclass
class _Raw:
    """One chart at full resolution, before the page-wide downsampling."""

    title: str
    y_label: str
    n: int  # subintervals on its axis
    bucket: int  # subintervals per point
    series: list[dict[str, Any]] = field(default_factory=list)  # "values": downsampled
    y2_label: str = ""
    window: tuple[int, int] | None = None  # first and last measurement subinterval
    #: a latency chart of several instances: the page offers to show one percentile at a time
    #: (a series' ``dash`` is its index in ``PERCENTILES``)
    percentiles: bool = False
    #: one of the step's own charts (DFC, measure, CPU), not of a rollup's instances
    side: bool = False
    #: values only at some subintervals (DFC's decisions with ``window_seconds``): the page
    #: marks each and joins them
    sparse: bool = False

    def add(self, label: str, values: sr.FloatArray, how: sr.Reduce = "mean", *,
            group: int = 0, dash: int = 0, axis: str = "y") -> None:
        self.series.append({"label": label, "values": sr.downsample(values, self.bucket, how),
                            "group": group, "dash": dash, "axis": axis})


def _by(table: Table, key: str) -> dict[str, list[int]]:
    """Row numbers of ``table`` per value of column ``key``, in first-seen order."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, value in enumerate(table.column(key)):
        out[value].append(i)
    return out


def _window(table: Table) -> tuple[int, int] | None:
    ks = [int(k) for k, p in zip(table.floats("subinterval"), table.column("phase"), strict=True)
          if p == "measurement" and math.isfinite(k)]
    return (min(ks), max(ks)) if ks else None


@dataclass(frozen=True)
class _Columns:
    """What a step's instance files hold beyond ``INSTANCE_READ`` (from the first one's
    header): the device columns, and the gathered columns charted."""

    device: bool
    gathered: tuple[str, ...]

    @property
    def series_per_instance(self) -> int:
        """Series an instance adds to the step's charts: IOPS, MB/s and 4 + 4 latencies; the
        device's IOPS, MB/s, service time, utilisation and queue depth; one per gathered."""
        return 10 + (5 if self.device else 0) + len(self.gathered)

    @property
    def charts(self) -> int:
        return 4 + (1 if self.device else 0) + len(self.gathered)


def _columns(step: StepFolder, rollup: str) -> _Columns:
    first = step.instances.get(rollup, [])[:1]
    header = read_header(step.instance_path(rollup, first[0])) if first else ()
    return _Columns("device_IOPS" in header,
                    tuple(c for c in header if c.startswith(GATHER_PREFIX))[:MAX_GATHERED])


def _has_values(values: sr.FloatArray) -> bool:
    return bool(np.isfinite(values).any())


#: what a series of an instance file is: (chart, what of it, values on the axis, how a
#: bucket of them becomes a point, dash, y axis); the charts are ``_CHARTS`` and the
#: gathered columns
_Series = tuple[str, str, sr.FloatArray, sr.Reduce, int, str]
_CHARTS = ("iops", "mbs", *(kind for kind, _ in KINDS), "device")
_SPREAD: tuple[tuple[str, sr.Reduce], ...] = (("highest", "max"), ("mean", "mean"),
                                             ("lowest", "min"))


def _series_of(t: Table, n: int, columns: _Columns) -> Iterator[_Series]:
    """The series of one instance file ``t`` on an axis of ``n`` subintervals."""
    k = t.floats("subinterval")
    yield "iops", "", sr.on_axis(k, t.floats("IOPS"), n), "mean", 0, "y"
    yield "mbs", "", sr.on_axis(k, t.floats("MB_per_s"), n), "mean", 0, "y"
    for kind, _ in KINDS:
        for dash, (pct, pct_label) in enumerate(PERCENTILES):
            yield (kind, pct_label, sr.on_axis(k, t.floats(f"{kind}_{pct}_ms"), n),
                   "max" if pct == "max" else "mean", dash, "y")
    dev_iops = t.floats("device_IOPS") if columns.device else None
    if dev_iops is not None and _has_values(dev_iops):
        # the device's own counts beside ivypy's, dashed
        yield "iops", "device", sr.on_axis(k, dev_iops, n), "mean", 1, "y"
        yield "mbs", "device", sr.on_axis(k, t.floats("device_MB_per_s"), n), "mean", 1, "y"
        yield ("device", "service time", sr.on_axis(k, t.floats("device_service_time_ms"), n),
               "mean", 0, "y")
        yield ("device", "% busy", sr.on_axis(k, t.floats("device_util_pct"), n), "mean", 1,
               "y2")
        yield ("device", "queue depth", sr.on_axis(k, t.floats("device_queue_depth"), n),
               "mean", 2, "y2")
    for column in columns.gathered:
        values = t.floats(column)
        if _has_values(values):
            yield column, "", sr.on_axis(k, values, n), "mean", 0, "y"


class _Spread:
    """Of many instances' values on one axis: each subinterval's highest, mean and lowest
    (NaN where none has a value), added up one instance at a time."""

    def __init__(self, n: int) -> None:
        self.high, self.low = np.full(n, np.nan), np.full(n, np.nan)
        self.total, self.count = np.zeros(n), np.zeros(n, dtype=np.int64)

    def add(self, values: sr.FloatArray) -> None:
        np.fmax(self.high, values, out=self.high)  # NaN only where both are
        np.fmin(self.low, values, out=self.low)
        seen = np.isfinite(values)
        self.total[seen] += values[seen]
        self.count += seen

    def lines(self) -> tuple[sr.FloatArray, sr.FloatArray, sr.FloatArray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(self.count > 0, self.total / np.maximum(self.count, 1), np.nan)
        return self.high, mean, self.low


def _instance_series(n_instances: int, columns: _Columns) -> int:
    """Series the instance charts of ``n_instances`` instances hold: a set per instance, or
    over ``MAX_INSTANCES`` three sets (the highest, mean and lowest)."""
    return columns.series_per_instance * (n_instances if n_instances <= MAX_INSTANCES
                                          else len(_SPREAD))


def _instance_charts(step: StepFolder, rollup: str, n: int, bucket: int,
                     window: tuple[int, int] | None, columns: _Columns
                     ) -> tuple[list[_Raw], str]:
    """IOPS, MB/s, service and response time of each instance of ``rollup`` in ``step`` on
    an axis of ``n`` subintervals, with the device's and the gathered columns where the step
    has them; over ``MAX_INSTANCES`` instances, their highest, mean and lowest each
    subinterval (of the first ``SPREAD_INSTANCES`` by file name), and a note saying so.
    One instance file is read at a time and kept only downsampled (or added to the spread)."""
    names = step.instances.get(rollup, [])
    spread = len(names) > MAX_INSTANCES
    note = ""
    if spread:
        note = (f"{len(names):,} {rollup} instances: each chart shows their highest, mean and "
                "lowest each subinterval" + (
                    f" (of the first {SPREAD_INSTANCES:,} by name)"
                    if len(names) > SPREAD_INSTANCES else "")
                + "; ivypy report --rollup TYPE plots another rollup type.")
        names = names[:SPREAD_INSTANCES]
    if not names or n == 0:
        return [], note
    alone = len(names) == 1  # one instance: a colour per percentile
    charts = {"iops": _Raw("IOPS", "IOPS", n, bucket, window=window),
              "mbs": _Raw("MB/s", "MB/s", n, bucket, window=window),
              **{kind: _Raw(title, "ms", n, bucket, window=window, percentiles=not alone)
                 for kind, title in KINDS},
              "device": _Raw("Device service time, utilisation and queue depth", "ms", n,
                             bucket, y2_label="% busy, queue depth", window=window),
              **{c: _Raw(f"Gathered: {c.removeprefix(GATHER_PREFIX)}", "value", n, bucket,
                         window=window) for c in columns.gathered}}
    read = (*INSTANCE_READ, *(DEVICE_READ if columns.device else ()), *columns.gathered)
    spreads: dict[tuple[str, str], tuple[_Spread, int, str]] = {}
    for g, name in enumerate(names):
        t = read_table(step.instance_path(rollup, name), read)
        if t is None or not t.rows:
            continue
        label = t.column("rollup_instance")[0] or name
        for chart, what, values, how, dash, axis in _series_of(t, n, columns):
            if spread:
                if (chart, what) not in spreads:
                    spreads[chart, what] = (_Spread(n), dash, axis)
                spreads[chart, what][0].add(values)
            elif alone and chart in dict(KINDS):
                charts[chart].add(what, values, how, group=dash, dash=dash)
            else:
                charts[chart].add(f"{label} {what}" if what else label, values, how, group=g,
                                  dash=dash, axis=axis)
    for (chart, what), (acc, dash, axis) in spreads.items():
        for g, (line, (stat, how)) in enumerate(zip(acc.lines(), _SPREAD, strict=True)):
            charts[chart].add(f"{what} {stat}" if what else stat, line, how, group=g,
                              dash=dash, axis=axis)
    made = [charts[c] for c in (*_CHARTS, *columns.gathered) if charts[c].series]
    where = (f"{rollup} {made[0].series[0]['label']}" if alone and made and not spread
             else f"{rollup}: the highest, mean and lowest of {len(names):,} instances"
             if spread else f"{rollup} instances")
    for c in made:
        c.title = f"{c.title} ({where})"
    return made, note


def _dfc_chart(table: Table, n: int, bucket: int) -> _Raw | None:
    if not table.rows:
        return None
    metric = table.column("metric")[0]
    chart = _Raw(f"DFC: {metric} against its target, and the IOPS set", metric, n, bucket,
                 y2_label="IOPS in force", window=_window(table))
    # each column read once: per instance, its rows of them (1,000 instances' DFC)
    ks, measured, target, iops = (table.floats(c) for c in (
        "subinterval", "measured", "target", "iops_in_force"))
    for g, (inst, rows) in enumerate(_by(table, "instance").items()):
        k = ks[rows]
        chart.add(f"{inst} measured", sr.on_axis(k, measured[rows], n), group=g)
        chart.add(f"{inst} target", sr.on_axis(k, target[rows], n), group=g, dash=1)
        chart.add(f"{inst} IOPS", sr.on_axis(k, iops[rows], n), group=g, dash=2, axis="y2")
    # with window_seconds DFC decides (and writes a row) every few subintervals only
    chart.sparse = any(_gaps(v["values"]) for v in chart.series)
    return chart


def _gaps(values: sr.FloatArray) -> bool:
    """Whether ``values`` has a gap (NaN) between two of its values."""
    at = np.flatnonzero(np.isfinite(values))
    return bool(at.size > 1 and (np.diff(at) > 1).any())


def _criteria(table: Table) -> dict[str, list[int]]:
    """measure.csv's rows per criterion of an instance, in first-seen order."""
    keys = [f"{i} {c} ({m})" for i, c, m in zip(table.column("instance"),
                                                 table.column("criterion"),
                                                 table.column("metric"), strict=True)]
    groups: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(keys):
        groups[key].append(row)
    return groups


def _measure_chart(table: Table, n: int, bucket: int) -> _Raw | None:
    if not table.rows:
        return None
    chart = _Raw("Measure: each criterion's value against its limit", "value", n, bucket)
    limits = table.column("limit")
    ks, values = table.floats("subinterval"), table.floats("value")
    for g, (key, rows) in enumerate(_criteria(table).items()):
        k = ks[rows]
        chart.add(key, sr.on_axis(k, values[rows], n), group=g)
        limit = leading_number(limits[rows[0]])
        if math.isfinite(limit):
            chart.add(f"{key} limit", sr.on_axis(k, np.full(len(rows), limit), n), group=g,
                      dash=1)
    return chart


def _cpu_chart(table: Table, n: int, bucket: int) -> _Raw | None:
    """A line per host; over ``CPU_HOSTS_DRAWN`` hosts, each subinterval's busiest, median
    and least busy host (the busiest of all named, with when)."""
    if not table.rows:
        return None
    # each column read once (at 1,000 hosts, reading both per host took 2.7 s of a report)
    ks, busy = table.floats("subinterval"), table.floats("busy_pct")
    by_host = _by(table, "host")
    if len(by_host) <= CPU_HOSTS_DRAWN:
        chart = _Raw("CPU busy per host", "% busy", n, bucket, window=_window(table))
        for g, (host, rows) in enumerate(by_host.items()):
            chart.add(host, sr.on_axis(ks[rows], busy[rows], n), group=g)
        return chart
    high, mid, low = _high_median_low(ks, busy, n)
    chart = _Raw(f"CPU busy over {len(by_host):,} hosts", "% busy", n, bucket,
                 window=_window(table))
    known = np.flatnonzero(np.isfinite(busy) & np.isfinite(ks))
    top = ""
    if known.size:
        at = int(known[np.argmax(busy[known])])
        top = (f" (of all: {table.column('host')[at]}, {busy[at]:.3g} % in subinterval "
               f"{int(ks[at])})")
    chart.add(f"busiest host{top}", high, "max", group=0)
    chart.add("median host", mid, group=1, dash=1)
    chart.add("least busy host", low, "min", group=2, dash=2)
    return chart


def _cpu_series(n_hosts: int) -> int:
    """The lines of a step's CPU chart of ``n_hosts`` hosts."""
    return n_hosts if n_hosts <= CPU_HOSTS_DRAWN else 3


def _high_median_low(ks: sr.FloatArray, values: sr.FloatArray, n: int
                     ) -> tuple[sr.FloatArray, sr.FloatArray, sr.FloatArray]:
    """Of the rows of each subinterval ``0 .. n - 1`` (``ks``): the largest, median and
    smallest of ``values``, NaN where a subinterval has none; from one sort of the rows (no
    hosts x subintervals grid: a day of 1 s subintervals at 1,000 hosts)."""
    ok = np.isfinite(ks) & np.isfinite(values) & (ks >= 0) & (ks < n)
    k, v = ks[ok].astype(np.intp), values[ok]
    order = np.lexsort((v, k))
    k, v = k[order], v[order]
    count = np.bincount(k, minlength=n)
    first = np.cumsum(count) - count
    has = count > 0
    high, mid, low = (np.full(n, np.nan) for _ in range(3))
    low[has] = v[first[has]]
    high[has] = v[first[has] + count[has] - 1]
    mid[has] = (v[first[has] + (count[has] - 1) // 2] + v[first[has] + count[has] // 2]) / 2
    return high, mid, low


def _axis_length(*tables: Table | None) -> int:
    n = 0
    for t in tables:
        if t is not None and t.rows:
            k = t.floats("subinterval")
            if np.isfinite(k).any():
                n = max(n, int(np.nanmax(k)) + 1)
    return n


_SideChart = Callable[[Table, int, int], "_Raw | None"]
#: Time charts a step shows at most besides its instance charts: DFC, measure, CPU.
_SIDE_CHARTS = 3


@dataclass
class _StepPlan:
    """A step's files read before any chart is made: the axis, the tables of its side charts
    and how many series its charts will hold (for the page-wide bucket size)."""

    step: StepFolder
    rollup: str
    n: int
    window: tuple[int, int] | None
    side: list[tuple[Table | None, _SideChart]]
    n_series: int
    columns: _Columns


def _plan(step: StepFolder, rollup: str) -> _StepPlan:
    axis = read_table(step.instance_path("all", "all"), ("subinterval", "phase"))
    if axis is None or not axis.rows:  # no all.csv: the first instance file gives the axis
        first = step.instances.get(rollup, [])[:1]
        axis = read_table(step.instance_path(rollup, first[0]), ("subinterval", "phase")
                          ) if first else None
    dfc = read_table(step.path / "dfc.csv")
    measure = read_table(step.path / "measure.csv")
    cpu = read_table(step.path / "cpu.csv")
    columns = _columns(step, rollup)
    n_series = (_instance_series(len(step.instances.get(rollup, [])), columns)
                + (3 * len(_by(dfc, "instance")) if dfc else 0)
                + (2 * len(_criteria(measure)) if measure else 0)
                + (_cpu_series(len(_by(cpu, "host"))) if cpu else 0))
    return _StepPlan(step, rollup, _axis_length(axis, dfc, measure, cpu),
                     _window(axis) if axis is not None else None,
                     [(dfc, _dfc_chart), (measure, _measure_chart), (cpu, _cpu_chart)],
                     n_series, columns)


def _step_charts(plan: _StepPlan, bucket: int) -> tuple[list[_Raw], str]:
    charts, note = _instance_charts(plan.step, plan.rollup, plan.n, bucket, plan.window,
                                    plan.columns)
    for table, make in plan.side:
        chart = make(table, plan.n, bucket) if table is not None else None
        if chart is not None:
            chart.window = chart.window or plan.window
            chart.side = True
            charts.append(chart)
    return charts, note


def cdf_chart(step: StepFolder) -> dict[str, Any] | None:
    """The step's latency CDF over its measurement window, from ``histograms/all/all.csv``:
    x the bucket's upper edge in ms (log scale), y the fraction of I/Os at or below it."""
    t = read_table(step.histogram_path("all", "all"))
    if t is None or not t.rows or not t.has("bucket_upper_ns"):
        return None
    x_ms = t.floats("bucket_upper_ns") / 1e6
    out: list[dict[str, Any]] = []
    for g, (kind, title) in enumerate(KINDS):
        for dash, view in enumerate(("all", "read", "write")):
            counts = np.nan_to_num(t.floats(f"{kind}_{view}_count"))
            total = counts.sum()
            if total > 0 and (view == "all" or total < np.nan_to_num(
                    t.floats(f"{kind}_all_count")).sum()):
                out.append({"label": f"{title} ({view})", "values":
                            sr.rounded(np.cumsum(counts) / total), "group": g, "dash": dash,
                            "axis": "y"})
    if not out:
        return None
    return {"title": "Latency CDF over the measurement window (all I/Os)", "x": sr.rounded(x_ms),
            "x_label": "ms (log scale)", "log_x": True, "y_label": "fraction ≤ x",
            "y2_label": "", "window": None, "percentiles": [], "series": out,
            "rollup": None, "sparse": False}


@dataclass
class StepCharts:
    step: StepFolder
    charts: list[dict[str, Any]]  # the page's rollup's instance charts (``rollup`` set), then
    # the step's own (the CDF, DFC, measure, CPU: ``rollup`` None)
    note: str = ""  # what the charts leave out
    #: the instance charts of each other rollup type the step has, for the page's selector
    other: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class Charts:
    """Every step's charts, ready for the page's JSON, and how they were downsampled;
    ``rollups``: every rollup type the steps have (the page offers each)."""

    rollup: str
    bucket: int
    steps: list[StepCharts]
    total_points: int
    rollups: list[str] = field(default_factory=list)
    #: the IOPS curve across the steps (``iops_curve``), None without one
    overview: dict[str, Any] | None = None


def summary_windows(run: RunFolder) -> dict[int, tuple[int, int]]:
    """Each summarised step's measurement window (first and last subinterval) from the run's
    summary.csv; a step cut short has none there (its charts mark its measurement phase)."""
    out: dict[int, tuple[int, int]] = {}
    if run.summary is None:
        return out
    for r in run.summary.dicts({"rollup_type": "all"}):
        first, last, number = (to_float(r.get(c, "")) for c in (
            "first_subinterval", "last_subinterval", "step_number"))
        if all(map(math.isfinite, (first, last, number))):
            out[int(number)] = (int(first), int(last))
    return out


def iops_curve(run: RunFolder) -> dict[str, Any] | None:
    """The IOPS curve across the run's steps (ivy's): each summarised step's ``all`` IOPS
    against its service and response time p99, by IOPS (the page joins the points and names
    each step); None without a step that has both."""
    if run.summary is None:
        return None
    points = sorted(
        (to_float(r.get("IOPS", "")), r.get("step_name", ""),
         to_float(r.get("service_time_p99_ms", "")), to_float(r.get("response_time_p99_ms", "")))
        for r in run.summary.dicts({"rollup_type": "all"}))
    points = [p for p in points if math.isfinite(p[0])]
    if not any(math.isfinite(p[2]) or math.isfinite(p[3]) for p in points):
        return None
    svc = [p[2] if math.isfinite(p[2]) else None for p in points]
    resp = [p[3] if math.isfinite(p[3]) else None for p in points]
    return {"title": "IOPS curve: each step's p99 against its IOPS (all I/Os)",
            "x": [p[0] for p in points], "names": [p[1] for p in points],
            "x_label": "IOPS", "log_x": False, "y_label": "p99 ms", "y2_label": "",
            "window": None, "percentiles": [], "rollup": None, "sparse": True, "curve": True,
            "series": [{"label": "service time p99", "values": svc, "group": 0, "dash": 0,
                        "axis": "y"},
                       {"label": "response time p99", "values": resp, "group": 1, "dash": 0,
                        "axis": "y"}]}


def _chart_dict(c: _Raw, rollup: str | None, win: tuple[int, int] | None, s: float,
                bucket: int) -> dict[str, Any]:
    window = None if win is None else [win[0] * s, (win[1] + 1) * s]
    return {
        "title": c.title, "x": sr.rounded(sr.axis_seconds(c.n, bucket, s), sr.AXIS_DIGITS),
        "x_label": "seconds into the step", "log_x": False, "y_label": c.y_label,
        "y2_label": c.y2_label, "window": window, "rollup": rollup, "sparse": c.sparse,
        "percentiles": [label for _, label in PERCENTILES] if c.percentiles else [],
        "series": [{"label": v["label"], "group": v["group"], "dash": v["dash"],
                    "axis": v["axis"], "values": sr.rounded(v["values"])}
                   for v in c.series]}


def _instance_points(plan: _StepPlan, rollup: str, columns: _Columns) -> int:
    """The numbers a step's instance charts of ``rollup`` hold (each chart's x too)."""
    return plan.n * (_instance_series(len(plan.step.instances.get(rollup, [])), columns)
                     + columns.charts)


def build_charts(run: RunFolder, rollup: str, budget_points: int = BUDGET_POINTS) -> Charts:
    """Every step's charts for ``rollup`` (a step without it shows ``all``), and the instance
    charts of every other rollup type a step has (the page switches between them), all
    downsampled by one bucket size so that they hold at most about ``budget_points`` numbers.
    The bucket size is known before any instance file is read, so a long run is held only
    downsampled."""
    plans = [_plan(step, rollup if rollup in step.instances else "all") for step in run.steps]
    rollups = sorted({t for step in run.steps for t in step.instances},
                     key=lambda t: (t != "all", t))
    # each other rollup type's instance columns (the step's axis, window and own charts are
    # its plan's)
    others = [{t: _columns(p.step, t) for t in p.step.instances if t != p.rollup}
              for p in plans]
    # a chart's x is one more series
    total = sum(p.n * (p.n_series + p.columns.charts + _SIDE_CHARTS) for p in plans) + sum(
        _instance_points(p, t, c) for p, of_step in zip(plans, others, strict=True)
        for t, c in of_step.items())
    bucket = sr.bucket_size(total, budget_points)
    windows = summary_windows(run)
    s = subinterval_seconds(run)
    steps: list[StepCharts] = []
    for plan, of_step in zip(plans, others, strict=True):
        step = plan.step
        charts, note = _step_charts(plan, bucket)
        n_instance = len(charts) - sum(1 for c in charts if c.side)
        out = [_chart_dict(c, None if c.side else plan.rollup,
                           windows.get(step.number, c.window), s, bucket) for c in charts]
        cdf = cdf_chart(step)
        if cdf is not None:
            out.insert(min(4, n_instance), cdf)
        other = {}
        for t, columns in of_step.items():
            made, _ = _instance_charts(step, t, plan.n, bucket, plan.window, columns)
            other[t] = [_chart_dict(c, t, windows.get(step.number, c.window), s, bucket)
                        for c in made]
        steps.append(StepCharts(step, out, note, other))
    return Charts(rollup, bucket, steps, total, rollups, iops_curve(run))
