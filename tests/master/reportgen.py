"""Generated run folders for the report's tests: every file a run writes, with the project's
own column lists (``master.run.recorder``, ``master.run.lifecycle``), any number of instances and
subintervals, filled with plausible numbers fast enough for 100 instances x 1,000
subintervals. Steps can be left out or cut short, as a failed run leaves them."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from master.analysis.devstats import DEVICE_COLUMNS
from master.analysis.rollup import METRIC_COLUMNS
from master.results.csvfiles import fmt, safe_name
from master.results.output import RunOutput
from master.results.runstate import new_state, write_state
from master.results.schema import (
    CPU_COLUMNS,
    DFC_COLUMNS,
    EVENT_COLUMNS,
    HISTOGRAM_COLUMNS,
    HOST_COLUMNS,
    MEASURE_COLUMNS,
    RUN_SUMMARY_COLUMNS,
    instance_columns,
)
from protocol.buckets import LOWER_NS, UPPER_NS


@dataclass(frozen=True)
class GenSpec:
    test: str = "generated"
    instances: int = 3  # LUN instances (one host)
    subintervals: int = 20
    warmup: int = 2
    steps: tuple[str, ...] = ("one", "two")
    #: steps planned but given no folder (a run that failed before them)
    not_run: tuple[str, ...] = ()
    #: the last step's rows end here and it has no summary row (a run cut short)
    cut_last_at: int | None = None
    dfc: bool = True
    #: DFC's rows every this many subintervals (a DFC step with ``window_seconds``)
    dfc_every: int = 1
    events: int = 5
    event_text: str = "workload created"
    #: the device_* columns filled (else left empty, as where no device was found)
    device: bool = False
    #: gathered columns (``gather.<source>.<element_type>.<metric>``) after the device's
    gathered: tuple[str, ...] = ()
    #: hosts in each step's cpu.csv (``localhost``, else ``h00``, ``h01`` ...)
    cpu_hosts: int = 1


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _instance_file(path: Path, number: int, name: str, inst: str, n: int, spec: GenSpec,
                   rng: np.random.Generator) -> None:
    """An instance's rows: every metric column filled (a row's text reused for the columns
    the report does not read), IOPS, MB/s and the plotted latencies drawn per row, and the
    device's and gathered columns as ``spec`` says."""
    warmup = spec.warmup
    columns = instance_columns(spec.gathered)
    filled = [*METRIC_COLUMNS, *(DEVICE_COLUMNS if spec.device else ()), *spec.gathered]
    base = {c: fmt(float(v)) for c, v in zip(filled, rng.uniform(0.05, 5.0, len(filled)),
                                               strict=True)}
    cells = [base.get(c, "") for c in columns]
    at = {c: i for i, c in enumerate(columns)}
    iops = rng.normal(20_000, 800, n)
    lat = np.sort(rng.gamma(2.0, 0.1, (n, 4)), axis=1)
    lines = [",".join(columns)]
    for k in range(n):
        row = list(cells)
        row[at["step_number"]], row[at["step_name"]] = str(number), name
        row[at["subinterval"]] = str(k)
        row[at["phase"]] = "warmup" if k < warmup else "measurement"
        row[at["elapsed_s"]] = str(k + 1)
        row[at["rollup_type"]], row[at["rollup_instance"]] = path.parent.name, inst
        row[at["IOPS"]] = f"{iops[k]:.6g}"
        row[at["MB_per_s"]] = f"{iops[k] * 4096 / 1e6:.6g}"
        for kind in ("service_time", "response_time"):
            for j, pct in enumerate(("p50", "p99", "p99_9", "max")):
                row[at[f"{kind}_{pct}_ms"]] = f"{lat[k, j]:.6g}"
        lines.append(",".join(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _step(folder: Path, number: int, name: str, spec: GenSpec, n: int,
          rng: np.random.Generator) -> None:
    d = folder / RunOutput.step_dir(number, name)
    _instance_file(d / "all" / "all.csv", number, name, "all", n, spec, rng)
    for i in range(spec.instances):
        inst = f"localhost:/dev/lun{i:03d}"
        _instance_file(d / "lun" / f"{safe_name(inst)}.csv", number, name, inst, n, spec, rng)
    hosts = ["localhost"] if spec.cpu_hosts == 1 else [f"h{h:02d}" for h in range(spec.cpu_hosts)]
    _write(d / "cpu.csv", CPU_COLUMNS, [
        [str(k), "warmup" if k < spec.warmup else "measurement", host,
         f"{rng.uniform(20, 90):.4g}", "50 50", "0.1", "0.1", "3"]
        for k in range(n) for host in hosts])
    if spec.dfc:
        _write(d / "dfc.csv", DFC_COLUMNS, [
            [str(k), "measurement", "localhost", "service_time_p99_ms",
             f"{rng.uniform(1, 3):.4g}", "2", "0", "0", "0", "0", "0", "1000", "1100",
             "false", "false", "false", "false", "1", "false"]
            for k in range(spec.dfc_every - 1, n, spec.dfc_every)])
        _write(d / "measure.csv", MEASURE_COLUMNS, [
            [str(k), "all", "iops", "IOPS", "10%", "0", str(k), f"{rng.uniform(1, 20):.4g}",
             "false", "false"] for k in range(spec.warmup, n)])
    lo, up = LOWER_NS[1000:1400], UPPER_NS[1000:1400]
    counts = rng.integers(0, 50, (lo.size, len(HISTOGRAM_COLUMNS)))
    _write(d / "histograms" / "all" / "all.csv",
           ["bucket_lower_ns", "bucket_upper_ns", *HISTOGRAM_COLUMNS],
           [[str(a), str(b), *map(str, c)] for a, b, c in zip(lo, up, counts, strict=True)])


def generate(folder: Path, spec: GenSpec = GenSpec()) -> Path:
    """A run folder at ``folder`` as ``spec`` says."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    planned = [*spec.steps, *spec.not_run]
    (folder / "test.yaml").write_text(f"test: {spec.test}\n")
    (folder / "resolved.json").write_text(json.dumps({
        "test": spec.test, "subinterval_seconds": 1, "description": "generated",
        "steps": [{"name": s} for s in planned]}))
    state = new_state(spec.test, len(planned), f"test: {spec.test}\n", "0.1.0")
    state.state = "complete" if not spec.not_run and spec.cut_last_at is None else "failed"
    state.exit_code = 0 if state.state == "complete" else 3
    write_state(folder, state)
    _write(folder / "hosts.csv", HOST_COLUMNS, [[
        "localhost", "localhost", "local", "vm", "6.1", "3.11", "2.0", "0.1.0", "2", "1",
        "0", "100", "50", "9", "compiled", "compiled"]])
    _write(folder / "luns.csv", ["host", "lun", "selected", "kind", "size_bytes"], [
        ["localhost", f"/dev/lun{i:03d}", "true", "block", "1048576"]
        for i in range(spec.instances)])
    _write(folder / "events.csv", EVENT_COLUMNS, [
        ["2026-01-01T00:00:00", str(i), "INFO", "localhost", "workload", "0", "",
         spec.event_text] for i in range(spec.events)])
    summary: list[list[str]] = []
    for number, name in enumerate(spec.steps):
        last = number == len(spec.steps) - 1
        n = spec.cut_last_at if last and spec.cut_last_at is not None else spec.subintervals
        _step(folder, number, name, spec, n, rng)
        if last and spec.cut_last_at is not None:
            continue
        row = dict.fromkeys(RUN_SUMMARY_COLUMNS, "")
        row.update(step_number=str(number), step_name=name, rollup_type="all",
                   rollup_instance="all", first_subinterval=str(spec.warmup),
                   last_subinterval=str(n - 1), IOPS=str(20000 + 5000 * number),
                   service_time_p99_ms=f"{1.2 + 0.4 * number:g}",
                   response_time_p99_ms=f"{1.5 + 0.5 * number:g}", valid="true")
        summary.append([row[c] for c in RUN_SUMMARY_COLUMNS])
    _write(folder / "summary.csv", RUN_SUMMARY_COLUMNS, summary)
    return folder
