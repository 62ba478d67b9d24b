"""One step's numbers: subinterval results in, rows out, and the measurement summary.

Owns the step's rollup plan (which of each host's workloads the slave adds up into one group,
per rollup type, and whether it sends the groups' histograms or their percentile tables: see
``Go.rollups`` in ``protocol/SPEC.md``; each type's made by ``master.run.rollupplan``), and the
path from decoded ``SubintervalResult``s to
every per-subinterval file of a step (instance rows, cpu.csv, interlock.csv), and from the
measurement window's per-workload statistics (``WindowResult``, kept and added up by the
slaves) to the step's summaries and histogram files. It does not talk to hosts or decide when a
step ends (``master.run.lifecycle``); it does not compute metrics itself
(``master.analysis.rollup``).

An instance that lives on one host (every instance of ``workload``, ``lun`` and ``host``, and of
any rollup when there is one host) is one group of that host: the slave reads its percentiles
from its exact histograms and sends the table. An instance spread over hosts is one group per
host: the slave sends the group's merged histograms, and the master adds them up. Either way
every percentile comes from an exact merged histogram.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from master.analysis import kernels, spans
from master.analysis import rollup as ru
from master.analysis.devstats import DeviceKey, DeviceRollups
from master.analysis.verdicts import iops_shortfalls, rollup_validity, shortfall_reason
from master.config import RollupSpec
from master.live.metrics import RunMetrics
from master.live.rows import (
    LIVE_ROWS_MAX,
    SPREAD_FROM,
    LiveRow,
    ivypy_cpu_pct,
    live_rows,
    spread_rows,
)
from master.results import writers
from master.results.csvfiles import (
    AppenderGroup,
    LineTexts,
    csv_text,
    fmt,
    instance_file_names,
    safe_name,
)
from master.results.output import RunOutput
from master.results.schema import (
    CPU_COLUMNS,
    DEVICE_COLUMNS,
    DEVICE_FILE_COLUMNS,
    HISTOGRAM_COLUMNS,
    INTERLOCK_COLUMNS,
    instance_columns,
    summary_columns,
)
from master.results.summaryfiles import LEADING_COLUMNS, SummaryBlock, SummaryRows
from master.run.heap import without_cycle_collection
from master.run.hostrows import HostResult, device_deltas, host_rows
from master.run.rollupplan import type_plan
from master.run.settings import Settings
from master.run.stepfiles import StepFiles, write_rows
from master.run.workloads import WorkloadInstance
from protocol.batch import GroupStats, StatsBatch
from protocol.buckets import LOWER_NS, UPPER_NS
from protocol.errors import HostError, ProtocolError
from protocol.stats import OPS

#: Instances whose histogram files are made at once (memory bound: a slice's bucket index).
HISTOGRAM_SLICE = 1024
#: Instances whose subinterval rows one writer thread formats and writes at once, where the
#: step has more than one writer thread and at least this many instances (fewer: the rows are
#: written on the recorder's own thread, a job's hand-over would cost more than it saves).
ROW_SLICE = 4096
#: A summary row's repeated blocks of view columns (``ru.VIEW_BLOCKS`` after its first three
#: numbers: first and last subinterval, measurement seconds).
SUMMARY_REPEATS = tuple((start + 3, source + 3, length) for start, source, length
                        in ru.VIEW_BLOCKS)
#: A summary row's cells that are counts (ints where the row is read as a mapping).
INT_SUMMARY_COLUMNS = frozenset({"first_subinterval", "last_subinterval", "workloads"})


@dataclass
class Recorded:
    """What one subinterval gave: every rollup's result (for measure and DFC) and live rows
    (``live_total``: the ``all`` rollup's row; ``live``: the first rows of ``show_type``)."""

    subinterval: int
    phase: str
    results: dict[str, ru.RollupResult]
    live: list[LiveRow]
    live_total: LiveRow | None = None
    #: instances of ``show_type`` (``live`` has the first ``liverows.LIVE_ROWS_MAX``)
    live_instances: int = 0
    #: over ``SPREAD_FROM`` instances of ``show_type``: their highest, mean and lowest
    live_spread: list[LiveRow] = field(default_factory=list)
    io_errors: list[tuple[str, str]] = field(default_factory=list)
    #: the host groups' statistics of each rollup type whose histograms came (a DFC window
    #: adds them up, with the grouping of ``results``)
    samples: dict[str, ru.Sample] = field(default_factory=dict)
    #: each host's largest ``boundary_skew_bound_us`` of the subinterval, in ns
    skew_bound_ns: dict[str, int] = field(default_factory=dict)
    #: each rollup type's ``DEVICE_COLUMNS`` (instances × columns; NaN where empty)
    devices: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)


class StepRecorder:
    """Rows of one step; see the module docstring."""

    @without_cycle_collection  # a million small objects at 100,000 workloads, no cycles
    def __init__(
        self,
        output: RunOutput,
        number: int,
        name: str,
        rollups: Sequence[RollupSpec],
        subinterval_s: float,
        workloads: Mapping[str, WorkloadInstance],
        settings: Settings,
        show_type: str = "all",
        *,
        hosts: Sequence[str] | None = None,
        histogram_types: frozenset[str] = frozenset(),
        fold_measurement: bool = False,
        gathered: Sequence[str] = (),
        summed: frozenset[str] = frozenset(),
        metrics: RunMetrics | None = None,
        threads: int | None = None,
        files_budget_s: float | None = None,
    ) -> None:
        """``hosts``: the order the results of a subinterval come in (default: the order of
        the workloads' hosts). ``histogram_types``: rollup types whose groups' histograms are
        needed on the master every subinterval (a DFC window adds them up) even where their
        instances live on one host. ``fold_measurement``: the window will be exactly the
        subintervals recorded with phase ``measurement`` (a fixed-length step), so their
        settings are summed as they come (the slaves add the statistics up: ``Go.fold``).
        ``gathered``: the step's joined gathered columns (``master.gather``), given to
        ``record`` each subinterval; their summary is the mean over the window's values, but
        for those in ``summed`` (counts, as data verification's), their sum. ``metrics``: the
        run's live metrics (``master.live.metrics``), fed each subinterval's groups and each
        summary's validity (it needs every type's histograms: ``histogram_types``).
        ``threads``: how many threads write the step's files (``master.results.writers``;
        default: the CPUs the process may run on, at most 8); the files are the same
        whatever their number. ``files_budget_s``: the instance files made in half that time
        are left for after the step's Go (``self.files``, ``after_go_steps``; None: none)."""
        self.metrics = metrics
        if metrics is not None:
            metrics.start_step(number, name)
        self.threads = writers.writer_threads() if threads is None else max(1, threads)
        self.gathered = tuple(gathered)
        self._summed = np.array([name in summed for name in self.gathered], dtype=bool)
        self.instance_columns = instance_columns(self.gathered)
        self.summary_columns = summary_columns(self.gathered)
        #: each measurement subinterval's gathered columns per rollup type (instances × columns)
        self._win_gathered: dict[int, dict[str, npt.NDArray[np.float64]]] = {}
        self.fold_measurement = fold_measurement
        #: the subintervals folded (``[first, last]`` runs: a day-long step keeps one)
        self._folded_runs: spans.Runs = []
        # settings and CPU of the measurement subintervals, for the summary's columns: each
        # subinterval's per-host busy % and per-workload IOPS setting (NaN = max), or (when
        # folding) their running sums with the count of hosts' readings
        self._win_cpu: dict[int, npt.NDArray[np.float64]] = {}
        self._win_iops: dict[int, npt.NDArray[np.float64]] = {}
        self._fold_cpu: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]] | None = None
        self._fold_iops: npt.NDArray[np.float64] | None = None
        self.output = output
        self.number = number
        self.name = name
        self.rollups = list(rollups)
        self.subinterval_s = subinterval_s
        self.workloads = workloads
        self.settings = settings
        self.show_type = show_type
        self.dir = output.step_dir(number, name)
        #: the subintervals recorded in each phase, as ``[first, last]`` runs
        self._phase_runs: dict[str, spans.Runs] = {}
        self._file_names: dict[str, list[str]] = {}
        self._build_plan(list(hosts) if hosts is not None else [], histogram_types)
        #: the device columns (``master.analysis.devstats``): over the devices under each instance's
        #: LUNs
        self.devices = DeviceRollups(
            [(workloads[w].host, workloads[w].lun.lun.path) for w in self.ids], self.groupings,
            subinterval_s, fold=fold_measurement)
        # every instance file made now, before the step's Go, but those ``files_budget_s``
        # leaves for after it (``StepFiles.make``)
        self.files = StepFiles(output, {t: f"{self.dir}/{safe_name(t)}" for t in self.groupings},
                               {t: g.n for t, g in self.groupings.items()}, self.file_names,
                               self.instance_columns, name=self.dir, threads=self.threads)
        self.files.make(files_budget_s)
        #: each instance's name as CSV text, the rows' rollup_instance cell (``_texts``)
        self._inst_text: dict[str, LineTexts] = {}
        #: each rollup type's instances in the slices the writer threads take (made with its
        #: first rows; none: the rows are written on this thread), with their files and texts
        self._row_slices: dict[str, list[tuple[int, int, AppenderGroup, LineTexts]]] = {}
        self._sliced = (self.threads > 1
                        and sum(g.n for g in self.groupings.values()) >= ROW_SLICE)
        #: each rollup type's (instance, host) pairs and hosts per instance
        #: (``_instance_cpu_array``)
        self._cpu_pairs: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                         npt.NDArray[np.int64]]] = {}

    # ------------------------------------------------------------------ the rollup plan
    def _build_plan(self, hosts: list[str], histogram_types: frozenset[str]) -> None:
        of_host: dict[str, list[str]] = {}
        for wid, inst in self.workloads.items():
            of_host.setdefault(inst.host, []).append(wid)
        self._hosts = hosts + [h for h in of_host if h not in hosts]
        #: workload ids in plan order (host by host), and each one's host index
        self.ids = [w for h in self._hosts for w in of_host.get(h, [])]
        self._pos = {w: j for j, w in enumerate(self.ids)}
        self._host_of = np.fromiter(
            (j for j, h in enumerate(self._hosts) for _ in of_host.get(h, [])),
            dtype=np.intp, count=len(self.ids))
        self._host_workloads = {h: set(of_host.get(h, [])) for h in self._hosts}
        self._ids_of_host = {h: of_host.get(h, []) for h in self._hosts}
        insts = [self.workloads[w] for w in self.ids]
        #: each rollup type's plan (``master.run.rollupplan``)
        self.plans = {spec.type: type_plan(spec, self._hosts, of_host, insts,
                                           spec.type in histogram_types)
                      for spec in self.rollups}
        #: the instances of each rollup type over the workloads in plan order (summaries)
        self.groupings = {t: ru.Grouping(t, p.names, p.inst_of_workload)
                          for t, p in self.plans.items()}

    def plan_for(self, host: str) -> list[dict[str, Any]]:
        """``Go.rollups`` for ``host``: per rollup type its groups of the host's workloads."""
        return [{"type": t, "groups": p.groups.get(host, []), "histograms": p.histograms}
                for t, p in self.plans.items()]

    def _check_host(self, h: HostResult) -> None:
        """A host's result checked against the plan: its workloads and its count of rollup
        entries (the entries themselves are decoded for all hosts at once: ``_joined``)."""
        r = h.result
        expected = self._host_workloads.get(h.host)
        if expected is None:
            raise HostError("sent a result but has no place in the step's plan", host=h.host)
        if r.workload_ids != self._ids_of_host[h.host] and (  # the plan's order: no set
                set(r.workload_ids) != expected or len(r.workload_ids) != len(expected)):
            raise HostError(f"reported workloads {sorted(set(r.workload_ids) ^ expected)[:3]} "
                            "other than the step's", host=h.host)
        if len(r.rollups) != len(self.plans):
            raise HostError(f"sent {len(r.rollups)} rollup entries, expected "
                            f"{len(self.plans)}", host=h.host)

    def _joined(self, index: int, results: Sequence[HostResult]) -> GroupStats:
        """Every host's entry of the ``index``-th rollup type side by side, checked: shapes
        against the plan, then contents in one pass (histograms by the compiled scan). A
        fault names the host whose entry is wrong."""
        t, p = self.rollups[index].type, self.plans[self.rollups[index].type]
        entries = [h.result.rollups[index] for h in results]
        try:
            both, sizes = GroupStats.join_wire(entries, histograms=p.histograms)
        except ProtocolError:  # the entry at fault, decoded alone, says the same
            for h, entry in zip(self._hosts, entries, strict=True):
                try:
                    GroupStats.from_wire(entry, histograms=p.histograms, validate=False)
                except ProtocolError as mine:
                    raise HostError(f"bad statistics of rollup {t}: {mine}", host=h) from mine
            raise  # pragma: no cover - join_wire refuses only what from_wire refuses
        for h, n in zip(self._hosts, sizes, strict=True):
            want = len(p.groups.get(h, []))
            if n != want:
                raise HostError(f"sent {n} groups of rollup {t}, expected {want}", host=h)
        try:
            kernels.check_group_stats(both)
        except ProtocolError as exc:
            for h, entry in zip(self._hosts, entries, strict=True):
                try:
                    kernels.check_group_stats(GroupStats.from_wire(
                        entry, histograms=p.histograms, validate=False))
                except ProtocolError as mine:
                    raise HostError(f"bad statistics of rollup {t}: {mine}", host=h) from mine
            raise ProtocolError(f"bad statistics of rollup {t} (no single host's part "
                                f"is at fault): {exc}") from exc
        return both

    # ------------------------------------------------------------------ one subinterval
    def record(self, k: int, phase: str, hosts: Sequence[HostResult], planned_end_ns: int,
               gathered: Mapping[str, Mapping[str, npt.NDArray[np.float64]]] | None = None
               ) -> Recorded:
        """Decode, roll up and write subinterval ``k`` (``planned_end_ns``: its end boundary
        on the master's clock; ``gathered``: per rollup type, each gathered column's value per
        instance, a missing one empty). The gathered columns join the results' columns. The
        instance rows are written on the writer threads while the next rollup type is worked
        out here; every file of the subinterval is written when this returns or raises."""
        jobs: list[Future[None]] = []
        try:
            out = self._record(k, phase, hosts, planned_end_ns, gathered, jobs)
        except BaseException:
            writers.drain(jobs)
            raise
        writers.finish(jobs)
        return out

    def _record(self, k: int, phase: str, hosts: Sequence[HostResult], planned_end_ns: int,
                gathered: Mapping[str, Mapping[str, npt.NDArray[np.float64]]] | None,
                jobs: list[Future[None]]) -> Recorded:
        """``record``'s work; the writer threads' jobs it started go into ``jobs``."""
        by_host = {h.host: h for h in hosts}
        missing = [h for h in self._hosts if h not in by_host]
        if missing:
            raise ProtocolError(f"no result from hosts {missing[:3]} of the step's plan")
        ordered = [by_host[h] for h in self._hosts]
        for h in ordered:
            self._check_host(h)
        # every rollup type checked before anything of the subinterval is written
        checked = [self._joined(i, ordered) for i in range(len(self.rollups))]
        by_device = [(h.host, device_deltas(h)) for h in ordered]
        ops_by_host = self._ops_by_host(checked[0]) if checked else {}
        spans.add(self._phase_runs.setdefault(phase, []), k)
        if phase == "measurement" and self.fold_measurement:
            spans.add(self._folded_runs, k)
        cpu_by_host = {h.host: float(h.result.cpu.get("busy_pct", float("nan"))) for h in hosts}
        ivypy_by_host = {h.host: ivypy_cpu_pct(h.result.cpu, self.subinterval_s) for h in hosts}
        elapsed_s = (k + 1) * self.subinterval_s
        out = Recorded(k, phase, {}, [])
        iops = self._iops_per_workload()
        host_cpu = np.array([cpu_by_host.get(h, float("nan")) for h in self._hosts], dtype=float)
        host_ivypy = np.array([ivypy_by_host.get(h, float("nan")) for h in self._hosts],
                              dtype=float)
        if phase == "measurement":
            self._keep_settings(k, host_cpu, iops)
        out.devices = self.devices.record(k, by_device, measured=phase == "measurement")
        extra = self._gathered_arrays(gathered or {}) if self.gathered else {}
        if phase == "measurement" and self.gathered:
            self._win_gathered[k] = extra
        for i, spec in enumerate(self.rollups):
            p = self.plans[spec.type]
            both = checked[i]
            sample = ru.Sample.from_batch(both.batch)
            res = ru.compute(sample, p.grouping, self.subinterval_s, group_percentiles=both.pct)
            out.results[spec.type] = res
            if self.gathered:
                res.columns.update(zip(self.gathered, extra[spec.type].T, strict=True))
            if p.histograms:
                out.samples[spec.type] = sample
            cpu = self._instance_cpu_array(spec.type, host_cpu)
            g = self.groupings[spec.type]
            settings = _instance_settings(g, iops)
            if self.metrics is not None and self.metrics.serves(spec.type):
                _, setting, is_max = settings
                self.metrics.add(self.number, self.name, spec.type, p.names,
                                 p.grouping.of_workload, both.batch,
                                 {"iops_setting": np.where(is_max, np.nan, setting),
                                  "cpu_busy_pct": cpu})
            jobs += self._write_instance_rows(
                k, phase, elapsed_s, spec.type, g, res, cpu, settings,
                np.hstack([out.devices[spec.type], extra[spec.type]])
                if self.gathered else out.devices[spec.type])
            if spec.type in ("all", self.show_type):
                ivypy = self._instance_cpu_array(spec.type, host_ivypy)
                rows = live_rows(g.names, res.columns, cpu[:LIVE_ROWS_MAX].tolist(),
                                 ivypy[:LIVE_ROWS_MAX].tolist())
                if spec.type == "all" and rows:
                    out.live_total = rows[0]
                if spec.type == self.show_type:
                    out.live, out.live_instances = rows, g.n
                    if g.n > SPREAD_FROM:
                        out.live_spread = spread_rows(res.columns, cpu, ivypy)
        if self.metrics is not None:
            self.metrics.set_step(self.number, self.name, k)
        cpu_rows: list[dict[str, Any]] = []
        interlock_rows: list[dict[str, Any]] = []
        for h in hosts:
            bound = host_rows(k, phase, h, ops_by_host[h.host], planned_end_ns, cpu_rows,
                              interlock_rows)
            if bound is not None:
                out.skew_bound_ns[h.host] = bound
            out.io_errors += [(h.host, text) for text in h.result.io_errors]
        self.output.table(f"{self.dir}/cpu.csv", CPU_COLUMNS).write_many(cpu_rows)
        self.output.table(f"{self.dir}/interlock.csv", INTERLOCK_COLUMNS).write_many(
            interlock_rows)
        late: dict[DeviceKey, tuple[float, float]] = {
            (host, d.device): (d.start_late_ns / 1e3, d.end_late_ns / 1e3)
            for host, deltas in by_device for d in deltas}
        device_rows = self.devices.file_rows(k, phase, late)
        if device_rows:
            self.output.table(f"{self.dir}/devices.csv", DEVICE_FILE_COLUMNS).write_many(
                device_rows)
        return out

    def _gathered_arrays(self, gathered: Mapping[str, Mapping[str, npt.NDArray[np.float64]]]
                         ) -> dict[str, npt.NDArray[np.float64]]:
        """Each rollup type's gathered columns as one array (instances × columns, NaN where
        not given)."""
        out = {}
        for t, g in self.groupings.items():
            a = np.full((g.n, len(self.gathered)), np.nan)
            given = gathered.get(t, {})
            for j, name in enumerate(self.gathered):
                column = given.get(name)
                if column is not None:
                    a[:, j] = column
            out[t] = a
        return out

    def _ops_by_host(self, first: GroupStats) -> dict[str, int]:
        """Each host's I/Os of the subinterval, from its groups of one rollup type (every
        type's groups cover all of a host's workloads)."""
        group_ops = first.batch.counters[:, :, OPS].sum(axis=1)
        upto = np.concatenate([[0], np.cumsum(group_ops)])
        groups = self.plans[self.rollups[0].type].groups
        ends = np.cumsum([len(groups.get(h, [])) for h in self._hosts]).tolist()
        return {h: int(upto[e] - upto[b])
                for h, b, e in zip(self._hosts, [0, *ends[:-1]], ends, strict=True)}

    def _keep_settings(self, k: int, host_cpu: npt.NDArray[np.float64],
                       iops: npt.NDArray[np.float64]) -> None:
        """Keep subinterval ``k``'s host CPU and IOPS settings for the summary (summed when
        folding; otherwise the settings' own array, the same one while they do not change:
        ``Settings.iops_array``)."""
        if self.fold_measurement:
            seen = ~np.isnan(host_cpu)
            if self._fold_cpu is None or self._fold_iops is None:
                self._fold_cpu = (np.where(seen, host_cpu, 0.0), seen.astype(np.int64))
                self._fold_iops = iops.copy()
            else:
                total, count = self._fold_cpu
                total += np.where(seen, host_cpu, 0.0)
                count += seen
                self._fold_iops += iops
            return
        self._win_cpu[k] = host_cpu
        self._win_iops[k] = iops  # one array while the settings do not change

    def _window_settings(self, window: Sequence[int]
                         ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Mean busy % per host and mean IOPS setting per workload (NaN: max in some
        subinterval) over ``window``."""
        if self.fold_measurement and spans.of(window) == self._folded_runs and (
                self._fold_cpu is not None and self._fold_iops is not None):
            total, count = self._fold_cpu
            with np.errstate(invalid="ignore", divide="ignore"):
                cpu = np.where(count > 0, total / np.maximum(count, 1), np.nan)
            return cpu, self._fold_iops / len(window)
        missing = [k for k in window if k not in self._win_iops]
        if missing:
            raise ValueError(f"settings of subintervals {missing[:5]} were not kept")
        stacked = np.array([self._win_cpu[k] for k in window], dtype=np.float64)
        seen = ~np.isnan(stacked)
        with np.errstate(invalid="ignore", divide="ignore"):
            cpu = np.where(seen.any(axis=0), np.where(seen, stacked, 0.0).sum(axis=0)
                           / np.maximum(seen.sum(axis=0), 1), np.nan)
        iops = np.zeros(len(self.ids))
        for k in window:
            iops += self._win_iops[k]
        return cpu, iops / len(window)

    def _write_instance_rows(self, k: int, phase: str, elapsed_s: float, rollup_type: str,
                             g: ru.Grouping, res: ru.RollupResult, cpu: npt.NDArray[np.float64],
                             settings: _Settings,
                             device: npt.NDArray[np.float64]) -> list[Future[None]]:
        """One row per instance into ``<rollup type>/<instance>.csv`` (``instance_columns``),
        each formatted as ``CsvAppender.write`` would and handed to the OS with one write.
        ``settings``: ``_instance_settings``; ``device``: the device and gathered columns
        (instances × columns). Where the step has writer threads, each slice of the instances
        is a job of theirs: returns the jobs."""
        head = ",".join([str(self.number), csv_text(self.name), str(k), csv_text(phase),
                         fmt(elapsed_s), csv_text(rollup_type)]) + ","
        n_metrics = len(ru.METRIC_COLUMNS)
        values = np.empty((g.n, n_metrics + device.shape[1] + 3))
        values[:, :n_metrics] = res.values
        values[:, n_metrics:n_metrics + device.shape[1]] = device
        n_metrics += device.shape[1]
        count, setting, is_max = settings
        values[:, n_metrics] = cpu
        values[:, n_metrics + 1] = count  # workloads
        values[:, n_metrics + 2] = setting  # iops_setting
        slices = self._slices(rollup_type)
        if slices is None:
            write_rows(values, head, self._texts(rollup_type), is_max,
                       self.files.tables(rollup_type))
            return []
        workers = writers.pool(self.threads)
        return [workers.submit(write_rows, values[a:b], head, texts, is_max[a:b], tables)
                for a, b, tables, texts in slices]

    def _slices(self, rollup_type: str) -> list[tuple[int, int, AppenderGroup, LineTexts]] | None:
        """``rollup_type``'s instances in the slices the writer threads take, with their files
        and texts (made once; None: its rows are written on this thread)."""
        slices = self._row_slices.get(rollup_type)
        if slices is None and self._sliced:
            slices = self._row_slices[rollup_type] = self.files.slices(
                rollup_type, self._texts(rollup_type), ROW_SLICE)
        return slices

    def after_go_steps(self) -> Generator[None, None, None]:
        """What the step's first rows need and its Go need not wait for, a pause (``yield``)
        after each part: the instance files left (``StepFiles.rest_steps``), then each rollup
        type's instance texts and the slices its rows are written in."""
        yield from self.files.rest_steps()
        for t in self.groupings:
            self._texts(t)
            self._slices(t)
            yield

    def file_names(self, rollup_type: str) -> list[str]:
        """The file name of each instance of ``rollup_type`` (in ``groupings`` order), in
        ``<rollup type>/`` and ``histograms/<rollup type>/``: its ``safe_name``, and where
        two instances' safe names are the same (``a b``, ``a_b``) or the name is the rollup
        type's ``summary.csv``, a ``-2``, ``-3`` ... suffix (each row names its instance)."""
        names = self._file_names.get(rollup_type)
        if names is None:
            names = instance_file_names(self.groupings[rollup_type].names)
            self._file_names[rollup_type] = names
        return names

    def _texts(self, rollup_type: str) -> LineTexts:
        texts = self._inst_text.get(rollup_type)
        if texts is None:
            texts = self._inst_text[rollup_type] = LineTexts(
                [csv_text(inst) for inst in self.groupings[rollup_type].names])
        return texts

    def _iops_per_workload(self) -> npt.NDArray[np.float64]:
        """Each workload's IOPS setting in force (NaN for ``max``), in plan order."""
        return self.settings.iops_array(self.ids)

    def _instance_cpu_array(self, rollup_type: str,
                            host_cpu: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Mean busy % over the distinct hosts of each instance of ``rollup_type`` (the pairs of
        instances and hosts found once a step, from its workloads)."""
        g = self.groupings[rollup_type]
        pairs = self._cpu_pairs.get(rollup_type)
        if pairs is None:
            n_hosts = max(len(self._hosts), 1)
            both = np.unique(g.of_workload.astype(np.int64) * n_hosts + self._host_of)
            inst = both // n_hosts
            pairs = (inst, both % n_hosts, np.bincount(inst, minlength=g.n))
            self._cpu_pairs[rollup_type] = pairs
        inst, host, count = pairs
        total = np.bincount(inst, weights=host_cpu[host], minlength=g.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    # ------------------------------------------------------------------ the summary
    def release_files(self) -> None:
        """The step's files closed (its rows are all written): their descriptors go back to
        the run's open-file budget for the next step (``RunOutput.release_folder``)."""
        self.output.release_folder(self.dir)

    def close(self) -> None:
        """Drop the kept settings; summaries are written by now."""
        self._win_cpu.clear()
        self._win_iops.clear()
        self._win_gathered.clear()
        self._fold_cpu = self._fold_iops = self._last_iops = None

    def window_of_phase(self, phase: str = "measurement") -> list[int]:
        return sorted(k for a, b in self._phase_runs.get(phase, []) for k in range(a, b + 1))

    def window_sample(self, parts: Sequence[tuple[str, list[str], dict[str, Any]]]
                      ) -> ru.WindowSample:
        """The measurement window's statistics from every host's ``WindowResult`` (host,
        workload ids, ``StatsBatch`` wire dict), in the plan's workload order."""
        return ru.finished(self.window_sample_steps(parts))

    def window_sample_steps(self, parts: Sequence[tuple[str, list[str], dict[str, Any]]]
                            ) -> Generator[None, None, ru.WindowSample]:
        """``window_sample`` with pauses (``yield``, every ``ru.PAUSE_EVERY`` hosts): a step's
        end at scale takes seconds, and the run's event loop keeps its hosts' conversations
        alive at each pause (``master.run.pauses``)."""
        by_host = {h: (ids, stats) for h, ids, stats in parts}
        batches = []
        for i, h in enumerate(self._hosts):
            if i % ru.PAUSE_EVERY == ru.PAUSE_EVERY - 1:
                yield
            if h not in by_host:
                raise HostError("sent no measurement window", host=h)
            ids, stats = by_host[h]
            expected = self._host_workloads[h]
            if set(ids) != expected or len(ids) != len(expected):
                raise HostError("its measurement window covers workloads other than the "
                                "step's", host=h)
            try:
                batch = StatsBatch.from_wire(stats, validate=False)
                kernels.validate_batch(batch)
            except ProtocolError as exc:
                raise HostError(f"bad measurement window: {exc}", host=h) from exc
            if batch.n_workloads != len(ids):
                raise HostError("measurement window statistics and workload ids differ in "
                                "count", host=h)
            order = [self._pos[w] for w in ids]
            if order != sorted(order):  # the plan lists the host's workloads in its order
                batch = batch.reordered(np.argsort(np.asarray(order)))
            batches.append(batch)
        return (yield from ru.WindowSample.from_batches_steps(batches))

    def summarise(self, window: Sequence[int], total: ru.AnySample | None = None, *,
                  extra_invalid: str = "", extra: Mapping[str, Any] | None = None,
                  iops_tolerance_pct: float | None = None,
                  ) -> tuple[bool, Sequence[Mapping[str, Any]], list[str]]:
        """``_summarised``, its validity told to the live metrics."""
        return ru.finished(self.summarise_steps(window, total, extra_invalid=extra_invalid,
                                                extra=extra,
                                                iops_tolerance_pct=iops_tolerance_pct))

    def summarise_steps(self, window: Sequence[int], total: ru.AnySample | None = None, *,
                        extra_invalid: str = "", extra: Mapping[str, Any] | None = None,
                        iops_tolerance_pct: float | None = None,
                        ) -> Generator[None, None, tuple[bool, Sequence[Mapping[str, Any]],
                                                         list[str]]]:
        """``summarise`` with pauses (``yield``: after each rollup type's rows and each
        slice of its histogram files), as ``window_sample_steps``."""
        valid, rows, messages = yield from self._summarised(
            window, total, extra_invalid=extra_invalid, extra=extra,
            iops_tolerance_pct=iops_tolerance_pct)
        if self.metrics is not None:
            self.metrics.set_valid(self.number, self.name, valid)
        return valid, rows, messages

    def _summarised(self, window: Sequence[int], total: ru.AnySample | None = None, *,
                    extra_invalid: str = "", extra: Mapping[str, Any] | None = None,
                    iops_tolerance_pct: float | None = None,
                    ) -> Generator[None, None, tuple[bool, Sequence[Mapping[str, Any]],
                                                     list[str]]]:
        """Summary rows over the subintervals ``window`` (and the histogram files), from the
        window's statistics ``total`` (``window_sample``; needed unless the window is empty).
        ``iops_tolerance_pct``: check each paced workload's IOPS against its mean setting
        (``master.analysis.verdicts``; None: no check). An empty window gives a row per instance all
        the same, its metric cells empty, invalid with ``extra_invalid`` as the reason.
        Returns (valid, rows, validation messages)."""
        if not window:
            reason = extra_invalid or "no measurement subinterval"
            return False, self.unmeasured_rows(reason, extra), [reason]
        if total is None or total.n_workloads != len(self.ids):
            raise ValueError("a summary needs the window's statistics of every workload")
        dur = len(window) * self.subinterval_s
        host_cpu, iops = self._window_settings(window)
        if iops_tolerance_pct is not None:
            short = self.iops_shortfall(total, iops, dur, iops_tolerance_pct)
            extra_invalid = "; ".join(x for x in (extra_invalid, short) if x)
        valid_all = not extra_invalid
        device = self.devices.window(window)
        gathered = self._window_gathered(window)
        blocks: list[SummaryBlock] = []
        messages = [extra_invalid] if extra_invalid else []
        columns = tuple(self.summary_columns[len(LEADING_COLUMNS):-2])  # first_subinterval ..
        histograms = _HistogramJobs(self.threads)
        with histograms:
            for spec in self.rollups:
                g = self.groupings[spec.type]
                res = ru.compute(total, g, dur)
                valid, why = rollup_validity(spec, res)
                if not valid:
                    messages.append(why)
                valid_all &= valid
                reason = "; ".join(x for x in (extra_invalid, why) if x)
                cpu = self._instance_cpu_array(spec.type, host_cpu)
                count, setting, is_max = _instance_settings(g, iops)
                values = np.hstack([np.tile([window[0], window[-1], dur], (g.n, 1)), res.values,
                                    device[spec.type], gathered[spec.type],
                                    np.column_stack([cpu, count, setting])])
                tail = {"valid": valid and not extra_invalid, "invalid_reason": reason,
                        **(extra or {})}
                blocks.append(SummaryBlock(self.number, self.name, spec.type, g.names,
                                           self._texts(spec.type), columns, values, is_max,
                                           tail, INT_SUMMARY_COLUMNS))
                yield
                yield from self._write_histograms(spec, g, total, histograms)
        return valid_all, SummaryRows(blocks, SUMMARY_REPEATS), messages

    def _window_gathered(self, window: Sequence[int]) -> dict[str, npt.NDArray[np.float64]]:
        """Each rollup type's gathered columns over ``window``: per instance and column, the
        mean of the subintervals that have a value, or their sum (``summed``; NaN where none
        has)."""
        out = {}
        for t, g in self.groupings.items():
            stacked = [self._win_gathered[k][t] for k in window if k in self._win_gathered]
            if not stacked or not self.gathered:
                out[t] = np.full((g.n, len(self.gathered)), np.nan)
                continue
            a = np.stack(stacked)
            seen = ~np.isnan(a)
            total = np.where(seen, a, 0.0).sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[t] = np.where(seen.any(axis=0), np.where(
                    self._summed, total, total / np.maximum(seen.sum(axis=0), 1)), np.nan)
        return out

    def iops_shortfall(self, total: ru.AnySample, iops: npt.NDArray[np.float64], dur_s: float,
                       tolerance_pct: float) -> str:
        """The reason naming the paced workloads whose IOPS over the window (``total``, of
        ``dur_s``) fell short of their mean setting ``iops`` (per workload in plan order, NaN
        for max) by more than ``tolerance_pct``; '' when none did."""
        achieved = total.counters[:, :, OPS].sum(axis=1) / dur_s
        params = [self.settings[w] for w in self.ids]
        depth = [float(p.iodepth) for p in params]
        poisson = [p.iosequencer == "random_independent" for p in params]
        found = iops_shortfalls(self.ids, achieved, iops, depth, poisson, dur_s, tolerance_pct)
        return shortfall_reason(found, tolerance_pct, "workload")

    def unmeasured_rows(self, reason: str, extra: Mapping[str, Any] | None = None
                        ) -> list[dict[str, Any]]:
        """A summary row per instance of a step that measured nothing (stopped or failed
        before its measurement): names, workloads and the settings in force, the metric
        cells empty, invalid with ``reason``."""
        if self.metrics is not None:
            self.metrics.set_valid(self.number, self.name, False)
        iops = self._iops_per_workload()
        blank = dict.fromkeys([*ru.METRIC_COLUMNS, *DEVICE_COLUMNS, *self.gathered])
        rows: list[dict[str, Any]] = []
        for spec in self.rollups:
            g = self.groupings[spec.type]
            count = np.bincount(g.of_workload, minlength=g.n).tolist()
            is_max = np.bincount(g.of_workload, weights=np.isnan(iops), minlength=g.n) > 0
            setting = np.bincount(g.of_workload, weights=np.nan_to_num(iops), minlength=g.n)
            rows += [{"step_number": self.number, "step_name": self.name,
                      "rollup_type": spec.type, "rollup_instance": inst,
                      "first_subinterval": None, "last_subinterval": None,
                      "measurement_seconds": 0.0, **blank, "cpu_busy_pct": None,
                      "workloads": count[i],
                      "iops_setting": "max" if is_max[i] else float(setting[i]),
                      "valid": False, "invalid_reason": reason, **(extra or {})}
                     for i, inst in enumerate(g.names)]
        return rows

    def _write_histograms(self, spec: RollupSpec, g: ru.Grouping, total: ru.AnySample,
                          jobs: _HistogramJobs) -> Generator[None, None, None]:
        """Each instance's histogram file, a slice of ``HISTOGRAM_SLICE`` instances at a time,
        each slice's rows made and its files written by one job of ``jobs``; the files are the
        same whatever the threads (each is one slice's). Pauses after each slice."""
        folder = f"{self.dir}/histograms/{safe_name(spec.type)}"
        files = self.file_names(spec.type)

        def write(part: ru.HistogramSlice) -> None:
            rows = part.rows()
            self.output.histogram_csvs(
                [f"{folder}/{name}" for name in files[part.first:part.first + part.n]],
                _bucket_edges(), HISTOGRAM_COLUMNS, rows.inst, rows.bucket, rows.counts)

        for part in ru.histogram_slices(total, g, HISTOGRAM_SLICE):
            jobs.run(write, part)
            yield


class _HistogramJobs:
    """A step's histogram files, a job per slice: run at once on one thread; on the writer
    threads with more (the kernels and the writes release the GIL), at most two jobs a
    thread ahead, so that the next rollup type's summary is worked out while the last type's
    files are written. Leaving the ``with`` waits for every job and raises the first one's
    error in order (``writers.finish``), before an error of the caller's (the jobs' files
    came before it); leaving it as the generator is closed at a pause, or interrupted, drops
    the jobs not started and waits for the others (``writers.drain``)."""

    def __init__(self, threads: int) -> None:
        self._pool = writers.pool(threads) if threads > 1 else None
        self._ahead = 2 * threads
        self._pending: deque[Future[None]] = deque()

    def run(self, job: Callable[[ru.HistogramSlice], None], part: ru.HistogramSlice) -> None:
        if self._pool is None:
            job(part)
            return
        if len(self._pending) >= self._ahead:
            self._pending.popleft().result()  # its error first, and memory bounded
        self._pending.append(self._pool.submit(job, part))

    def __enter__(self) -> _HistogramJobs:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        pending, self._pending = self._pending, deque()
        if kind is None or issubclass(kind, Exception):
            writers.finish(pending)  # a job's error first: its files came before the caller's
        else:
            writers.drain(pending)  # closed at a pause, or interrupted: the caller's stands


#: per instance: its workloads, the sum of their IOPS settings, whether any runs at ``max``
_Settings = tuple[npt.NDArray[np.intp], npt.NDArray[np.float64], npt.NDArray[np.bool_]]


def _instance_settings(g: ru.Grouping, iops: npt.NDArray[np.float64]) -> _Settings:
    """``_Settings`` of ``g``'s instances from each workload's setting (``iops``, NaN for
    ``max``): an instance's rows and summary show the sum, or ``max`` where any is."""
    return (np.bincount(g.of_workload, minlength=g.n),
            np.bincount(g.of_workload, weights=np.nan_to_num(iops), minlength=g.n
                        ).astype(np.float64, copy=False),
            np.bincount(g.of_workload, weights=np.isnan(iops), minlength=g.n) > 0)


@functools.cache
def _bucket_edges() -> LineTexts:
    """Every bucket's ``lower,upper`` text (ns) for histogram files."""
    return LineTexts([f"{lo},{hi}" for lo, hi in zip(LOWER_NS.tolist(), UPPER_NS.tolist(),
                                                     strict=True)])
