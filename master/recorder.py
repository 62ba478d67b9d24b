"""One step's numbers: subinterval results in, rows out, and the measurement summary.

Owns the path from decoded ``SubintervalResult``s to every per-subinterval file of a step
(instance rows, cpu.csv, interlock.csv) and to the step's summaries and histogram files. It keeps
each subinterval's combined ``Sample`` so that the measurement window can be chosen after the
fact (by fixed phases, or by ``measure``). It does not talk to hosts or decide when a step ends
(``master.run``); it does not compute metrics itself (``master.rollup``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from master import rollup as ru
from master.config import RollupSpec
from master.live import LiveRow
from master.lunselect import WorkloadInstance, rollup_key
from master.output import RunOutput, safe_name
from protocol.buckets import LOWER_NS, UPPER_NS
from protocol.errors import HostError, ProtocolError
from protocol.messages import SubintervalResult
from protocol.stats import OPS, StatsBatch

INSTANCE_COLUMNS = ["step_number", "step_name", "subinterval", "phase", "elapsed_s",
                    "rollup_type", "rollup_instance", *ru.METRIC_COLUMNS, "cpu_busy_pct",
                    "workloads", "iops_setting"]
SUMMARY_COLUMNS = ["step_number", "step_name", "rollup_type", "rollup_instance",
                   "first_subinterval", "last_subinterval", "measurement_seconds",
                   *ru.METRIC_COLUMNS, "valid", "invalid_reason"]
CPU_COLUMNS = ["subinterval", "phase", "host", "busy_pct", "per_core_busy_pct", "slave_user_s",
               "slave_system_s", "slave_cpu_us_per_io"]
INTERLOCK_COLUMNS = ["subinterval", "host", "worker", "switch_delay_us", "handover_delay_us",
                     "boundary_skew_us", "result_sent_after_boundary_us",
                     "result_received_after_boundary_us"]
HISTOGRAM_COLUMNS = [f"{kind}_{view}_count" for view in ("all", "read", "write")
                     for kind in ("service_time", "response_time")]


@dataclass(frozen=True)
class HostResult:
    """A host's result of one subinterval, with what is needed to place it in master time."""

    host: str
    result: SubintervalResult
    to_master_ns: Callable[[int], int]
    received_ns: int


@dataclass
class Recorded:
    """What one subinterval gave: every rollup's result (for measure and DFC) and live rows."""

    subinterval: int
    phase: str
    results: dict[str, ru.RollupResult]
    live: list[LiveRow]
    io_errors: list[tuple[str, str]] = field(default_factory=list)


class StepRecorder:
    """Rows of one step; see the module docstring."""

    def __init__(
        self,
        output: RunOutput,
        number: int,
        name: str,
        rollups: Sequence[RollupSpec],
        subinterval_s: float,
        workloads: Mapping[str, WorkloadInstance],
        show_type: str = "all",
    ) -> None:
        self.output = output
        self.number = number
        self.name = name
        self.rollups = list(rollups)
        self.subinterval_s = subinterval_s
        self.workloads = workloads
        self.show_type = show_type
        self.dir = output.step_dir(number, name)
        self.samples: dict[int, ru.Sample] = {}
        self.phases: dict[int, str] = {}
        self.ids: list[str] = []
        self.groupings: dict[str, ru.Grouping] = {}
        self._instance_tables: dict[tuple[str, str], Any] = {}

    # ------------------------------------------------------------------ groupings
    def _groupings_for(self, ids: list[str]) -> dict[str, ru.Grouping]:
        if ids != self.ids:
            unknown = [i for i in ids if i not in self.workloads]
            if unknown:
                raise ProtocolError(f"results for unknown workloads {unknown[:3]}")
            if self.ids and self.samples:
                raise ProtocolError("the set or order of workloads changed within the step")
            insts = [self.workloads[i] for i in ids]
            self.groupings = {
                spec.type: ru.Grouping.from_keys(spec.type, [rollup_key(spec, i) for i in insts])
                for spec in self.rollups
            }
            self.ids = ids
        return self.groupings

    # ------------------------------------------------------------------ one subinterval
    def record(self, k: int, phase: str, hosts: Sequence[HostResult], planned_end_ns: int
               ) -> Recorded:
        """Decode, roll up and write subinterval ``k`` (``planned_end_ns``: its end boundary
        on the master's clock)."""
        parts: list[ru.Sample] = []
        ids: list[str] = []
        ops_by_host: dict[str, int] = {}
        for h in hosts:
            try:
                batch = StatsBatch.from_wire(h.result.stats)
            except ProtocolError as exc:
                raise HostError(f"bad statistics: {exc}", host=h.host) from exc
            if batch.n_workloads != len(h.result.workload_ids):
                raise HostError("statistics and workload ids differ in count", host=h.host)
            parts.append(ru.Sample.from_batch(batch))
            ids += h.result.workload_ids
            ops_by_host[h.host] = int(batch.counters[:, :, OPS].sum())
        sample = ru.Sample.concat(parts)
        groupings = self._groupings_for(ids)
        self.samples[k] = sample
        self.phases[k] = phase
        cpu_by_host = {h.host: float(h.result.cpu.get("busy_pct", float("nan"))) for h in hosts}
        elapsed_s = (k + 1) * self.subinterval_s
        out = Recorded(k, phase, {}, [])
        for spec in self.rollups:
            g = groupings[spec.type]
            res = ru.compute(sample, g, self.subinterval_s)
            out.results[spec.type] = res
            settings = self._settings(g)
            cpu = self._instance_cpu(g, cpu_by_host)
            for i, inst in enumerate(g.names):
                row = {"step_number": self.number, "step_name": self.name, "subinterval": k,
                       "phase": phase, "elapsed_s": elapsed_s, "rollup_type": spec.type,
                       "rollup_instance": inst, **res.row(i), "cpu_busy_pct": cpu[i],
                       **settings[i]}
                self._instance_table(spec.type, inst).write(row)
                if spec.type == self.show_type:
                    out.live.append(LiveRow(inst, row["IOPS"], row["MB_per_s"],
                                            row["service_time_p50_ms"],
                                            row["service_time_p99_ms"], cpu[i]))
        for h in hosts:
            self._host_rows(k, phase, h, ops_by_host[h.host], planned_end_ns)
            out.io_errors += [(h.host, text) for text in h.result.io_errors]
        return out

    def _instance_table(self, rollup_type: str, instance: str) -> Any:
        key = (rollup_type, instance)
        t = self._instance_tables.get(key)
        if t is None:
            t = self.output.table(f"{self.dir}/{safe_name(rollup_type)}/{safe_name(instance)}.csv",
                                  INSTANCE_COLUMNS)
            self._instance_tables[key] = t
        return t

    def _host_rows(self, k: int, phase: str, h: HostResult, ops: int, planned: int) -> None:
        r = h.result
        user_s = float(r.cpu.get("slave_user_s", 0.0))
        sys_s = float(r.cpu.get("slave_system_s", 0.0))
        self.output.table(f"{self.dir}/cpu.csv", CPU_COLUMNS).write({
            "subinterval": k, "phase": phase, "host": h.host, "busy_pct": r.cpu.get("busy_pct"),
            "per_core_busy_pct": " ".join(f"{c:g}" for c in r.cpu.get("per_core_busy_pct", [])),
            "slave_user_s": user_s, "slave_system_s": sys_s,
            "slave_cpu_us_per_io": (user_s + sys_s) * 1e6 / ops if ops else None,
        })
        table = self.output.table(f"{self.dir}/interlock.csv", INTERLOCK_COLUMNS)
        for w, il in enumerate(r.interlock):
            switch = il.get("switch_ns")
            table.write({
                "subinterval": k, "host": h.host, "worker": il.get("worker", w),
                "switch_delay_us": _us(il.get("switch_delay_ns")),
                "handover_delay_us": _us(il.get("handover_delay_ns")),
                "boundary_skew_us": _us(h.to_master_ns(switch) - planned)
                if isinstance(switch, int) and switch else None,
                "result_sent_after_boundary_us": _us(h.to_master_ns(r.send_ns) - planned),
                "result_received_after_boundary_us": _us(h.received_ns - planned),
            })

    def _settings(self, g: ru.Grouping) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"workloads": 0, "iops_setting": 0.0} for _ in g.names]
        for wid, gi in zip(self.ids, g.of_workload, strict=True):
            row = out[int(gi)]
            row["workloads"] += 1
            iops = self.workloads[wid].params.get("iops")
            if iops is None or row["iops_setting"] == "max":
                row["iops_setting"] = "max"
            else:
                row["iops_setting"] += float(iops)
        return out

    def _instance_cpu(self, g: ru.Grouping, cpu_by_host: dict[str, float]) -> list[float]:
        hosts: list[set[str]] = [set() for _ in g.names]
        for wid, gi in zip(self.ids, g.of_workload, strict=True):
            hosts[int(gi)].add(self.workloads[wid].host)
        return [float(np.mean([cpu_by_host[h] for h in hs])) if hs else float("nan")
                for hs in hosts]

    # ------------------------------------------------------------------ the summary
    def window_of_phase(self, phase: str = "measurement") -> list[int]:
        return sorted(k for k, p in self.phases.items() if p == phase)

    def summarise(self, window: Sequence[int], *, extra_invalid: str = "",
                  extra: Mapping[str, Any] | None = None,
                  ) -> tuple[bool, list[dict[str, Any]], list[str]]:
        """Summary rows over the subintervals ``window`` (and the histogram files). Returns
        (valid, rows, validation messages)."""
        if not window:
            return (not extra_invalid), [], [extra_invalid] if extra_invalid else []
        total = ru.Sample.add([self.samples[k] for k in window])
        dur = len(window) * self.subinterval_s
        valid_all = not extra_invalid
        rows: list[dict[str, Any]] = []
        messages = [extra_invalid] if extra_invalid else []
        for spec in self.rollups:
            g = self.groupings[spec.type]
            res = ru.compute(total, g, dur)
            valid, why = validate(spec, res)
            if not valid:
                messages.append(why)
            valid_all &= valid
            reason = "; ".join(x for x in (extra_invalid, why) if x)
            for i, inst in enumerate(g.names):
                row = {"step_number": self.number, "step_name": self.name,
                       "rollup_type": spec.type, "rollup_instance": inst,
                       "first_subinterval": window[0], "last_subinterval": window[-1],
                       "measurement_seconds": dur, **res.row(i),
                       "valid": valid and not extra_invalid, "invalid_reason": reason,
                       **(extra or {})}
                rows.append(row)
            self._write_histograms(spec, g, total)
        return valid_all, rows, messages

    def _write_histograms(self, spec: RollupSpec, g: ru.Grouping, total: ru.Sample) -> None:
        dense = ru.dense_histograms(total, g)  # (G, 3 views, 2 kinds, N_BUCKETS)
        lower = LOWER_NS.tolist()
        upper = [int(x) for x in UPPER_NS]
        for i, inst in enumerate(g.names):
            cols = {HISTOGRAM_COLUMNS[v * 2 + kk]: dense[i, v, kk]
                    for v in range(3) for kk in range(2)}
            self.output.histogram_csv(
                f"{self.dir}/histograms/{safe_name(spec.type)}/{safe_name(inst)}.csv",
                lower, upper, cols)


def _us(ns: Any) -> float | None:
    return None if ns is None else round(float(ns) / 1e3, 3)


def validate(spec: RollupSpec, res: ru.RollupResult) -> tuple[bool, str]:
    """A rollup type's validation over a measurement: ``quantity`` and ``max_droop``."""
    reasons: list[str] = []
    count = res.grouping.n
    if spec.quantity is not None and count != spec.quantity:
        reasons.append(f"{spec.type}: {count} instances, expected {spec.quantity}")
    if spec.max_droop is not None and count > 1:
        iops = res.columns["IOPS"]
        mean = float(np.mean(iops))
        if mean > 0:
            droop = 1.0 - iops / mean
            worst = int(np.argmax(droop))
            if droop[worst] > spec.max_droop:
                reasons.append(f"{spec.type}: instance {res.grouping.names[worst]} IOPS "
                               f"{iops[worst]:.0f} is {100 * droop[worst]:.1f}% below the "
                               f"mean {mean:.0f} (max_droop {100 * spec.max_droop:g}%)")
    return not reasons, "; ".join(reasons)
