"""StepRecorder with synthetic host results (rows, cpu.csv, interlock.csv, summaries), the
sparse rollup paths it relies on for large rollups, and the fast CSV row formatting.

The host results are what slaves send: each host's per-workload statistics added up by the
recorder's rollup plan with the slave's own code (``slave.session.rollup_parts``) and kept for
the window in the slave's ``WindowStore``. Where it matters the tests compare the rows with the
rollups computed on the master from every workload's histograms (the protocol-1 way)."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from master.analysis import rollup
from master.analysis.rollup import PERCENTILES, VIEWS, Grouping, Sample, compute, pct_label
from master.config.schema import LunChoice, RollupSpec, WorkloadSpec
from master.results.csvfiles import (
    CsvAppender,
    csv_text,
    fmt,
    format_float_rows,
    instance_file_names,
    safe_name,
)
from master.results.output import RunOutput
from master.results.schema import CPU_COLUMNS, INSTANCE_COLUMNS, instance_columns, summary_columns
from master.run import recorder as recorder_module
from master.run.hostrows import HostResult
from master.run.recorder import Recorded, StepRecorder
from master.run.settings import Settings
from master.run.workloads import Lun, SelectedLun, WorkloadInstance
from protocol.batch import StatsBatch
from protocol.errors import HostError, OutputError
from protocol.histogram import LatencyHistogram
from protocol.messages import SubintervalResult
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.session import group_maps, parse_plan, rollup_parts
from slave.windowstore import WindowStore
from tests.master.filelimit import file_size_limit

Values = dict[int, tuple[np.ndarray, np.ndarray]]
# a subinterval's joined gathered columns: rollup type -> column -> a value per instance
Gathered = Mapping[str, Mapping[str, npt.NDArray[np.float64]]]
# categories each workload does: random read+write, sequential only, all four, read only
MIXES = ((0, 1), (2, 3), (0, 1, 2, 3), (0,))


def _stats(rng: np.random.Generator, cats: tuple[int, ...], scale: float) -> tuple[
        WorkloadStats, Values]:
    s = WorkloadStats()
    vals: Values = {c: (np.zeros(0, np.int64), np.zeros(0, np.int64)) for c in range(4)}
    for c in cats:
        n = int(rng.integers(50, 400))
        svc = rng.lognormal(np.log(scale * (1 + c)), 0.7, n).astype(np.int64)
        rsp = svc + rng.integers(0, 80_000, n)
        s.record(c, svc, rsp, 4096 * (1 + c))
        vals[c] = (svc, rsp)
    return s, vals


def _ref(members: list[Values], cats: tuple[int, ...], kind: int) -> LatencyHistogram:
    return LatencyHistogram.sum(LatencyHistogram.from_values(m[c][kind])
                                for m in members for c in cats)


def _check(res: rollup.RollupResult, i: int, members: list[Values], dur: float) -> None:
    for prefix, cats in VIEWS:
        ops = sum(m[c][0].size for m in members for c in cats)
        assert res.columns[f"{prefix}IOPS"][i] == pytest.approx(ops / dur)
        for k, kind in enumerate(("service_time", "response_time")):
            ref = _ref(members, cats, k)
            col = res.columns
            for p in PERCENTILES:
                got = col[f"{prefix}{kind}_{pct_label(p)}_ms"][i]
                if ref.count == 0:
                    assert np.isnan(got)
                else:
                    want = ref.percentile(p)
                    assert want is not None
                    assert got == pytest.approx(want / 1e6, rel=1e-9), (
                        prefix, kind, p)


def test_workload_and_lun_rollups_match_merged_histograms() -> None:
    """The identity (workload) grouping, a grouping of several workloads per instance, and a
    sample whose coordinates are not sorted (a window of two subintervals); workloads mix
    categories so that views have 0, 1, 2 and 4 members."""
    rng = np.random.default_rng(11)
    data = [_stats(rng, MIXES[w % 4], 50_000 + 20_000 * w) for w in range(10)]
    sample = Sample.from_batch(StatsBatch.from_stats([s for s, _ in data]))
    ident = Grouping.from_keys("workload", [f"w{w}" for w in range(10)])
    res = compute(sample, ident, 1.0)
    for w in range(10):
        _check(res, w, [data[w][1]], 1.0)
    keys = [f"l{w % 3}" for w in range(10)]
    by_lun = Grouping.from_keys("lun", keys)
    res = compute(sample, by_lun, 1.0)
    for i, name in enumerate(by_lun.names):
        _check(res, i, [d for d, k in zip((d for _, d in data), keys, strict=True)
                        if k == name], 1.0)
    # two periods added: coordinates concatenated, neither sorted nor unique
    data2 = [_stats(rng, MIXES[w % 4], 70_000) for w in range(10)]
    s2 = Sample.from_batch(StatsBatch.from_stats([s for s, _ in data2]))
    both = Sample.add([sample, s2])
    merged = [{c: (np.concatenate([a[c][0], b[c][0]]), np.concatenate([a[c][1], b[c][1]]))
               for c in range(4)} for (_, a), (_, b) in zip(data, data2, strict=True)]
    for g in (ident, by_lun):
        res = compute(both, g, 2.0)
        for i, name in enumerate(g.names):
            members = [m for m, wk in zip(merged, g.of_workload, strict=True) if wk == i]
            assert name
            _check(res, i, members, 2.0)


def test_a_sample_from_the_wire_owns_writable_coordinates() -> None:
    """The wire's arrays are read-only views; the compiled kernels are compiled (and cached)
    for writable ones, and a read-only one would compile them again in the middle of a step
    (seconds: the slave then stops with 'master late')."""
    rng = np.random.default_rng(3)
    wire = StatsBatch.from_stats([_stats(rng, MIXES[0], 80_000)[0]]).to_wire()
    batch = StatsBatch.from_wire(wire)
    assert not batch.counts.flags.writeable
    sample = Sample.from_batch(batch)
    for name in ("rows", "buckets", "counts"):
        assert getattr(sample, name).flags.writeable, name


# ---------------------------------------------------------------------- StepRecorder
def _workloads() -> dict[str, WorkloadInstance]:
    out: dict[str, WorkloadInstance] = {}
    for h in ("h1", "h2"):
        for li, (vendor, model) in enumerate((("ACME", "F9"), ("ACME", "F7"))):
            lun = Lun(h, f"/dev/sd{li}", 1 << 30, 512, {"vendor": vendor, "model": model},
                      (), {})
            sl = SelectedLun(lun, True, (0,))
            for name, iops in (("a", 100.0), ("b", None)):
                spec = WorkloadSpec(name=name, luns=LunChoice(), iosequencer="random_steady")
                wid = f"{h}:{lun.path}:{name}"
                out[wid] = WorkloadInstance(wid, name, h, sl, spec, WorkloadParams(iops=iops),
                                            {"vendor": vendor, "model": model})
    return out


def settings_of(wl: dict[str, WorkloadInstance]) -> Settings:
    """The settings in force of ``wl``: each workload's planned parameters."""
    settings = Settings()
    for wid, inst in wl.items():
        settings.placed(wid, inst.params)
    return settings


ROLLUPS = [RollupSpec("all", (), builtin=True), RollupSpec("host", (), builtin=True),
           RollupSpec("lun", (), builtin=True), RollupSpec("workload", (), builtin=True),
           RollupSpec("vendor+model", ("vendor", "model"))]


class _Slaves:
    """The slaves' side for a recorder: results added up by its plan, windows kept."""

    def __init__(self, rec: StepRecorder, keep_from: int = 0, keep_to: int = -1,
                 fold: bool = False, memory_bytes: int = 1 << 30) -> None:
        self.rec = rec
        self.keep = (keep_from, keep_to, fold, memory_bytes)
        self.stores: dict[str, WindowStore] = {}
        self.batches: dict[int, dict[str, StatsBatch]] = {}  # every subinterval, per host

    def result(self, host: str, ids: list[str], k: int, batch: StatsBatch, busy: float
               ) -> HostResult:
        plan = parse_plan(self.rec.plan_for(host), set(ids))
        parts = rollup_parts(plan, group_maps(plan, ids), batch)
        store = self.stores.setdefault(host, WindowStore(0, *self.keep))
        store.add(k, ids, batch)
        self.batches.setdefault(k, {})[host] = batch
        msg = SubintervalResult(
            step=0, subinterval=k, start_ns=k * 10**9, end_ns=(k + 1) * 10**9,
            workload_ids=ids, rollups=parts,
            cpu={"busy_pct": busy, "per_core_busy_pct": [busy, busy + 1.5],
                 "slave_user_s": 0.2, "slave_system_s": 0.1},
            interlock=[{"worker": 0, "switch_ns": (k + 1) * 10**9 + 5_000,
                        "switch_delay_ns": 5_000, "handover_delay_ns": 9_000}],
            send_ns=(k + 1) * 10**9 + 20_000)
        return HostResult(host, msg, lambda ns: ns + 1_000, (k + 1) * 10**9 + 50_000,
                          offset_uncertainty_ns=2_500)

    def window(self, first: int, last: int) -> rollup.WindowSample:
        parts = []
        for h, store in self.stores.items():
            ids, batch = store.window(first, last)
            parts.append((h, ids, dict(batch.to_wire())))
        return self.rec.window_sample(parts)

    def workload_sample(self, k: int) -> Sample:
        """Subinterval ``k``'s per-workload statistics in the plan's order (as protocol 1
        sent them)."""
        return Sample.concat([Sample.from_batch(self.batches[k][h]) for h in self.rec._hosts])


def _host_result(sim: _Slaves, host: str, ids: list[str], k: int, rng: np.random.Generator,
                 busy: float) -> tuple[HostResult, list[Values]]:
    data = [_stats(rng, MIXES[j % 4], 60_000 + 10_000 * j) for j in range(len(ids))]
    return sim.result(host, ids, k, StatsBatch.from_stats([s for s, _ in data]), busy), [
        v for _, v in data]


def _record_subinterval(rec: StepRecorder, sim: _Slaves, k: int, phase: str,
                        rng: np.random.Generator, gathered: Gathered | None = None) -> Recorded:
    """Subinterval ``k`` recorded in ``phase``: the results of hosts h1 and h2 (each with its
    workloads of ``rec``, statistics drawn from ``rng``, 20% CPU busy), ending at k + 1 s, with
    the joined ``gathered`` columns."""
    ids = {h: [w for w in rec.workloads if w.startswith(h + ":")] for h in ("h1", "h2")}
    return rec.record(k, phase, [_host_result(sim, h, ids[h], k, rng, 20.0)[0] for h in ids],
                      (k + 1) * 10**9, gathered)


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_recorder_rows_cpu_interlock_and_summary(tmp_path: Path) -> None:
    wl = _workloads()
    out = RunOutput(tmp_path, max_open_files=3)  # fewer than the files: appenders reopen
    rec = StepRecorder(out, 2, "mix", ROLLUPS, 1.0, wl, settings_of(wl), "host")
    sim = _Slaves(rec, keep_from=1)
    rng = np.random.default_rng(5)
    ids = {h: [w for w in wl if w.startswith(h + ":")] for h in ("h1", "h2")}
    # the plan: per-host instances come as percentile tables, spread ones as histograms
    plan = {e["type"]: e for e in rec.plan_for("h2")}
    assert {t: e["histograms"] for t, e in plan.items()} == {
        "all": True, "host": False, "lun": False, "workload": False, "vendor+model": True}
    assert plan["lun"]["groups"] == [["h2:/dev/sd0:a", "h2:/dev/sd0:b"],
                                     ["h2:/dev/sd1:a", "h2:/dev/sd1:b"]]
    per_k: list[dict[str, Values]] = []
    for k in range(3):
        r1, d1 = _host_result(sim, "h1", ids["h1"], k, rng, 40.0)
        r2, d2 = _host_result(sim, "h2", ids["h2"], k, rng, 60.0)
        got = rec.record(k, "warmup" if k == 0 else "measurement", [r1, r2], (k + 1) * 10**9)
        per_k.append(dict(zip(ids["h1"] + ids["h2"], d1 + d2, strict=True)))
        assert [row.instance for row in got.live] == ["h1", "h2"]
        assert got.live_instances == 2
        # the live rows: host busy % and the slave's 0.3 s of CPU over 1 s on 2 cores
        assert [r.host_cpu_pct for r in got.live] == [40.0, 60.0]
        assert [r.ivypy_cpu_pct for r in got.live] == pytest.approx([15.0, 15.0])
        total = got.live_total
        assert total is not None and total.instance == "all"
        assert (total.host_cpu_pct, total.ivypy_cpu_pct) == (50.0, pytest.approx(15.0))
        all_cols = got.results["all"].columns
        assert (total.iops, total.service_p99_ms, total.response_p50_ms) == (
            float(all_cols["IOPS"][0]), float(all_cols["service_time_p99_ms"][0]),
            float(all_cols["response_time_p50_ms"][0]))
        assert [r.response_p99_ms for r in got.live] == [
            float(v) for v in got.results["host"].columns["response_time_p99_ms"]]
        assert got.skew_bound_ns == {"h1": 8_500, "h2": 8_500}
        for spec in ROLLUPS:
            res = got.results[spec.type]
            # every metric is what the master computes from every workload's histograms
            whole = compute(sim.workload_sample(k), rec.groupings[spec.type], 1.0)
            assert res.grouping.names == whole.grouping.names
            for col in rollup.METRIC_COLUMNS:
                assert np.array_equal(res.columns[col], whole.columns[col], equal_nan=True), col
            for i in range(res.grouping.n):
                members = [wid for wid, gi in zip(rec.ids, rec.groupings[spec.type].of_workload,
                                                  strict=True) if gi == i]
                _check(res, i, [per_k[k][m] for m in members], 1.0)
    out.close()
    step = tmp_path / "step0002-mix"
    # instance rows: every rollup, every instance, one row per subinterval, as fmt writes them
    res = compute(sim.workload_sample(2), rec.groupings["host"], 1.0)
    rows = _read(step / "host" / "h2.csv")
    assert rows[0] == INSTANCE_COLUMNS and len(rows) == 4
    row = dict(zip(rows[0], rows[3], strict=True))
    assert row["subinterval"] == "2" and row["phase"] == "measurement"
    assert row["elapsed_s"] == "3" and row["rollup_type"] == "host"
    for col in rollup.METRIC_COLUMNS:
        assert row[col] == fmt(float(res.columns[col][1])), col
    assert row["cpu_busy_pct"] == "60" and row["workloads"] == "4"
    assert row["iops_setting"] == "max"
    a_rows = _read(step / "workload" / "h1_dev_sd0_a.csv")
    assert len(a_rows) == 4 and dict(zip(a_rows[0], a_rows[1], strict=True))[
        "iops_setting"] == "100"
    vm = _read(step / "vendor+model" / "ACME+F9.csv")
    assert dict(zip(vm[0], vm[1], strict=True))["cpu_busy_pct"] == "50"  # mean of both hosts
    for name in ("all/all.csv", "lun/h2_dev_sd1.csv"):
        assert len(_read(step / name)) == 4, name
    # cpu.csv and interlock.csv: one row per host per subinterval
    cpu = _read(step / "cpu.csv")
    assert cpu[0] == CPU_COLUMNS and len(cpu) == 7
    c = dict(zip(cpu[0], cpu[2], strict=True))
    assert c["host"] == "h2" and c["busy_pct"] == "60" and c["per_core_busy_pct"] == "60 61.5"
    il = _read(step / "interlock.csv")
    i0 = dict(zip(il[0], il[1], strict=True))
    assert i0["boundary_skew_us"] == "6" and i0["result_received_after_boundary_us"] == "50"
    assert i0["result_sent_after_boundary_us"] == "21"
    # the switch in the slave's own clock, and the most the true skew can be: the measured
    # skew's size plus the offset's uncertainty
    assert i0["switch_slave_ns"] == str(10**9 + 5_000)
    assert i0["offset_uncertainty_us"] == "2.5" and i0["boundary_skew_bound_us"] == "8.5"
    # summary over the measurement window adds the histograms of both subintervals
    window = rec.window_of_phase()
    assert window == [1, 2]
    valid, srows, _ = rec.summarise(window, sim.window(1, 2))
    assert valid
    lun_rows = [r for r in srows if r["rollup_type"] == "lun"]
    assert [r["rollup_instance"] for r in lun_rows] == ["h1:/dev/sd0", "h1:/dev/sd1",
                                                         "h2:/dev/sd0", "h2:/dev/sd1"]
    members = [wid for wid in rec.ids if wid.startswith("h2:/dev/sd1:")]
    vals = [per_k[k][m] for k in window for m in members]
    ref = _ref(vals, (0, 1, 2, 3), 0)
    p99 = ref.percentile(99)
    assert p99 is not None
    assert lun_rows[3]["service_time_p99_ms"] == pytest.approx(p99 / 1e6, rel=1e-9)
    assert lun_rows[3]["IOPS"] == pytest.approx(ref.count / 2.0)
    assert (step / "histograms" / "workload" / "h2_dev_sd1_b.csv").is_file()


def test_changed_workload_set_within_a_step_is_refused(tmp_path: Path) -> None:
    """A host reports the plan's workloads in any order (the plan's own is the fast case);
    fewer of them, or one repeated in place of another, is its failure."""
    wl = _workloads()
    out = RunOutput(tmp_path)
    h1 = {w: i for w, i in wl.items() if w.startswith("h1:")}
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, h1, settings_of(h1))
    rng = np.random.default_rng(1)
    ids = list(h1)
    res = _host_result(_Slaves(rec), "h1", ids, 0, rng, 1.0)[0]
    rec.record(0, "measurement", [res], 10**9)
    turned = dataclasses.replace(res, result=dataclasses.replace(
        res.result, workload_ids=ids[::-1]))
    rec.record(1, "measurement", [turned], 2 * 10**9)
    # a slave reporting fewer workloads than the plan gave it
    two = {w: h1[w] for w in ids[:2]}
    other = StepRecorder(RunOutput(tmp_path / "o"), 0, "s", ROLLUPS, 1.0, two, settings_of(two))
    short = _host_result(_Slaves(other), "h1", ids[:2], 2, rng, 1.0)[0]
    twice = dataclasses.replace(res, result=dataclasses.replace(
        res.result, workload_ids=[ids[0], *ids[:-1]]))
    for bad in (short, twice):
        with pytest.raises(HostError, match=r"reported workloads .* other than the step's") as err:
            rec.record(2, "measurement", [bad], 3 * 10**9)
        assert err.value.host == "h1"
    out.close()


def _two_hosts(tmp_path: Path) -> tuple[RunOutput, StepRecorder, HostResult, HostResult]:
    """A step on hosts h1 and h2, and one subinterval's result of each."""
    wl = _workloads()
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl))
    sim = _Slaves(rec)
    rng = np.random.default_rng(1)
    h1, _ = _host_result(sim, "h1", [w for w in wl if w.startswith("h1:")], 0, rng, 1.0)
    h2, _ = _host_result(sim, "h2", [w for w in wl if w.startswith("h2:")], 0, rng, 1.0)
    return out, rec, h1, h2


def _with_entry(res: HostResult, at: int, wire: dict[str, Any]) -> HostResult:
    """``res`` with its ``at``-th rollup entry replaced."""
    rollups = list(res.result.rollups)
    rollups[at] = wire
    return dataclasses.replace(res, result=dataclasses.replace(res.result, rollups=rollups))


def _assert_no_rows(folder: Path) -> None:
    """Every CSV file under ``folder`` holds its header line only (the instance files are
    made with the step's recorder, before its first subinterval)."""
    files = list(folder.rglob("*.csv"))
    assert files
    assert [f for f in files if len(f.read_text().splitlines()) != 1] == []


@pytest.mark.parametrize(("rollup_type", "field", "message"), [
    ("all", "counts", "counts must be > 0"),
    ("vendor+model", "counters", "differ from the ops counters"),
    ("workload", "pct", "outside the view's minimum and maximum"),
    ("lun", "pct-nan", "missing, or present for a view without I/O"),
    ("host", "counters", "negative counters"),
])
def test_inconsistent_statistics_fail_the_host_by_name(tmp_path: Path, rollup_type: str,
                                                       field: str, message: str) -> None:
    """A slave's groups that do not add up (histograms against counters, a percentile table
    against the counters and the exact minimum and maximum) are that host's failure (exit 3 in
    a run), found before anything is rolled up or written."""
    out, rec, good, bad = _two_hosts(tmp_path)
    at = [spec.type for spec in ROLLUPS].index(rollup_type)
    wire = dict(bad.result.rollups[at])
    if field.startswith("pct"):
        raw = np.frombuffer(wire["pct"], dtype="<f8").copy()
        if field == "pct":
            raw[0] = 1e15  # group 0's overall service time p50: beyond its maximum
        else:
            raw[:] = np.nan
        wire["pct"] = raw.tobytes()
    else:
        raw = np.frombuffer(wire[field], dtype="<i8").copy()
        if field == "counts":
            raw[3] = 0
        elif rollup_type == "host":
            raw[0] = -1
        else:
            raw[0] += 1  # group 0's random-read ops
        wire[field] = raw.tobytes()
    bad = _with_entry(bad, at, wire)
    with pytest.raises(HostError, match=f"bad statistics of rollup {re.escape(rollup_type)}: "
                                        f".*{message}") as err:
        rec.record(0, "measurement", [good, bad], 10**9)
    assert err.value.host == "h2"
    out.close()
    _assert_no_rows(tmp_path)  # nothing of that subinterval was written


@pytest.mark.parametrize(("rollup_type", "fault", "message"), [
    ("lun", "short-counters", "bad statistics of rollup lun: stats batch field counters has"),
    ("workload", "short-pct", "bad statistics of rollup workload: group percentile table has"),
    ("all", "pct-with-histograms", "bad statistics of rollup all: .*carry both"),
    ("workload", "lun-entry", "sent 2 groups of rollup workload, expected 4"),
])
def test_malformed_entries_fail_the_host_by_name(tmp_path: Path, rollup_type: str, fault: str,
                                                 message: str) -> None:
    """An entry whose shapes break the protocol or the plan (checked for all hosts at once)
    is the failure of the host that sent it."""
    out, rec, good, bad = _two_hosts(tmp_path)
    types = [spec.type for spec in ROLLUPS]
    at = types.index(rollup_type)
    wire = dict(bad.result.rollups[at])
    if fault == "short-counters":
        wire["counters"] = wire["counters"][:-8]
    elif fault == "short-pct":
        wire["pct"] = wire["pct"][:-8]
    elif fault == "pct-with-histograms":
        wire["pct"] = b"\0" * 8
    else:
        wire = dict(bad.result.rollups[types.index("lun")])
    bad = _with_entry(bad, at, wire)
    assert sum(w.startswith("h2:") for w in rec.workloads) == 4
    with pytest.raises(HostError, match=message) as err:
        rec.record(0, "measurement", [good, bad], 10**9)
    assert err.value.host == "h2"
    out.close()
    _assert_no_rows(tmp_path)


# ---------------------------------------------------------------------- formatting, files
def test_format_float_rows_is_fmt() -> None:
    rng = np.random.default_rng(3)
    n = 300
    vals = np.concatenate([
        rng.lognormal(0, 12, (n, 20)) * rng.choice([-1.0, 1.0], (n, 20)),
        10.0 ** rng.integers(-20, 20, (n, 4)),
        (rng.integers(1, 999_999, (n, 4)) + 0.5) * 10.0 ** rng.integers(-8, 8, (n, 4)),
        np.nextafter(10.0 ** rng.integers(-6, 16, (n, 4)), 0),
        rng.integers(0, 10**7, (n, 4)).astype(float),
    ], axis=1)
    vals[rng.random(vals.shape) < 0.2] = np.nan
    vals[0, :10] = [0.0, -0.0, np.inf, -np.inf, 1e15, 999999.5, 99999.95, 5e-324, 1e-5, 1e308]
    vals[2, :] = np.nan
    got = format_float_rows(vals)
    assert got == [",".join(fmt(float(v)) for v in row) for row in vals]
    assert format_float_rows(np.zeros((0, 3))) == []
    assert format_float_rows(np.zeros((2, 0))) == ["", ""]


def test_compiled_row_formatter_decides_ordinary_values_itself() -> None:
    """Metric-like values (1e-17 <= |x| < 1e15, decimal near-ties included): the compiled
    formatter writes every row itself (no fallback to Python), and the text is ``fmt``'s
    (``%.6g``, whole numbers from 999,999.5 up)."""
    from master.results import csvkernels

    rng = np.random.default_rng(8)
    vals = np.concatenate([
        rng.lognormal(0, 3, (500, 30)),
        -rng.lognormal(0, 3, (500, 5)),
        rng.integers(0, 10**6, (500, 5)) / 1000.0,  # ms with microsecond resolution
        10.0 ** rng.integers(-29, 15, (500, 5)),
        np.nextafter(10.0 ** rng.integers(-6, 14, (500, 5)), np.inf),
        rng.integers(1, 10**9, (500, 5)) / 1e6,  # ns to ms: 7 digits, half of them ties
        (rng.integers(1, 999_999, (500, 5)) + 0.5) * 10.0 ** rng.integers(-8, 8, (500, 5)),
        rng.integers(999_999, 10**15, (500, 3)) + rng.choice([0.0, 0.25, 0.5, 0.75], (500, 3)),
    ], axis=1)
    vals[rng.random(vals.shape) < 0.1] = np.nan
    text, ends, fallback = csvkernels.format_rows(vals)
    assert not fallback.any()
    starts = np.concatenate([[0], ends[:-1]])
    assert [text[a:b] for a, b in zip(starts, ends, strict=True)] == [
        ",".join(fmt(float(v)) for v in row) for row in vals]
    counts = np.array([[0.0, 7.0, 123456789.0, -3.0, 999999.5, 1000000.5, 1000001.5]])
    text, _, fallback = csvkernels.format_rows(counts)
    assert (text, bool(fallback.any())) == ("0,7,123456789,-3,1000000,1000000,1000002", False)


@pytest.mark.parametrize("text", ["plain", "a,b", 'say "hi"', "line\nbreak", "h1:/dev/sd0", ""])
def test_csv_text_quotes_like_csv_writer(text: str) -> None:
    buf = io.StringIO()
    csv.writer(buf).writerow(["x", text])
    assert buf.getvalue() == f"x,{csv_text(text)}\r\n"


def test_appenders_beyond_the_open_file_budget_hold_no_descriptor(tmp_path: Path) -> None:
    out = RunOutput(tmp_path, max_open_files=2)
    tables = [out.table(f"t{i}.csv", ["a", "b"]) for i in range(5)]
    assert [t.is_open for t in tables] == [True, True, False, False, False]
    for rnd in range(3):
        if rnd == 2:  # the many-files loop of the recorder: the same, one call
            CsvAppender.append_many(tables, [f"{rnd},{i}\r\n" for i in range(5)])
        else:
            for i, t in enumerate(tables):
                t.append_now(f"{rnd},{i}\r\n")
        if rnd == 1:  # appended rows are in the files already
            assert (tmp_path / "t4.csv").read_text().count("\n") == 3
    tables[0].write({"a": 9, "b": None})
    tables[4].write({"a": 8, "b": 1.5})
    with pytest.raises(ValueError, match="not in the header"):
        tables[3].write({"c": 1})
    out.close()
    for i in range(5):
        rows = _read(tmp_path / f"t{i}.csv")
        expect = [["a", "b"]] + [[str(r), str(i)] for r in range(3)]
        extra = {0: [["9", ""]], 4: [["8", "1.5"]]}.get(i, [])
        assert rows == expect + extra


def test_summary_is_the_same_whether_the_slaves_fold_keep_or_spill(tmp_path: Path) -> None:
    """A fixed-length step's slaves add the measurement subintervals up as they come; a
    ``measure:`` step's keep each, in a file once past their memory bound. Each way the summary
    is the one computed on the master from every kept subinterval (the protocol-1 way), and
    nothing before ``keep_from`` or after ``keep_to`` is kept."""
    wl = _workloads()
    ids = {h: [w for w in wl if w.startswith(h + ":")] for h in ("h1", "h2")}
    summaries = []
    reference = None
    for how in ("kept", "folded", "spilled"):
        out = RunOutput(tmp_path / how)
        rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl), "host",
                           fold_measurement=how == "folded")
        sim = _Slaves(rec, keep_from=1, keep_to=3, fold=how == "folded",
                      memory_bytes=0 if how == "spilled" else 1 << 30)
        rng = np.random.default_rng(11)
        phases = ["warmup", "measurement", "measurement", "measurement", "cooldown"]
        for k, phase in enumerate(phases):
            r1, _ = _host_result(sim, "h1", ids["h1"], k, rng, 10.0)
            r2, _ = _host_result(sim, "h2", ids["h2"], k, rng, 10.0)
            rec.record(k, phase, [r1, r2], (k + 1) * 10**9)
        if reference is None:
            reference = Sample.add([sim.workload_sample(k) for k in (1, 2, 3)])
        total = sim.window(1, 3)
        for a in ("counters", "lat"):
            assert np.array_equal(getattr(total, a), getattr(reference, a)), (how, a)
        for g in rec.groupings.values():  # the same coordinates: the same histograms
            for got, want in zip(rollup.histogram_rows(total, g, 4),
                                 rollup.histogram_rows(reference, g, 4), strict=True):
                assert np.array_equal(got.counts, want.counts), (how, g.rollup_type)
                assert np.array_equal(got.bucket, want.bucket), (how, g.rollup_type)
        for store in sim.stores.values():
            with pytest.raises(ValueError, match="not kept"):
                store.window(0, 3)
            with pytest.raises(ValueError, match="not kept"):
                store.window(1, 4)
        valid, srows, _ = rec.summarise([1, 2, 3], total)
        assert valid
        summaries.append(srows)
        for store in sim.stores.values():
            store.close()
        rec.close()
        out.close()
    kept = summaries[0]
    for other in summaries[1:]:
        assert len(kept) == len(other)
        for a, b in zip(kept, other, strict=True):
            for col in ("IOPS", "service_time_p99_ms", "response_time_p99_9_ms",
                        "write_MB_per_s"):
                assert b[col] == a[col] or (np.isnan(a[col]) and np.isnan(b[col])), col


@pytest.mark.parametrize("fold", [False, True])
def test_summary_rows_carry_cpu_workloads_and_mean_iops_setting(tmp_path: Path,
                                                                fold: bool) -> None:
    """A summary row has the instance rows' cpu_busy_pct, workloads and iops_setting, over
    its window: the mean of the rows' values (an edit or DFC move within the window gives
    the mean setting; any workload at max gives ``max``)."""
    wl = _workloads()
    out = RunOutput(tmp_path)
    settings = settings_of(wl)
    rec = StepRecorder(out, 1, "s", ROLLUPS, 1.0, wl, settings, fold_measurement=fold)
    sim = _Slaves(rec, keep_from=1, fold=fold)
    rng = np.random.default_rng(4)
    ids = {h: [w for w in wl if w.startswith(h + ":")] for h in ("h1", "h2")}
    a0 = "h1:/dev/sd0:a"
    for k, (setting, busy1) in enumerate([(50.0, 10.0), (100.0, 30.0), (300.0, 50.0)]):
        settings.taken(a0, settings[a0].with_rate(setting), k, "live")
        settings.advance(k)
        rec.record(k, "warmup" if k == 0 else "measurement",
                   [_host_result(sim, "h1", ids["h1"], k, rng, busy1)[0],
                    _host_result(sim, "h2", ids["h2"], k, rng, 70.0)[0]], (k + 1) * 10**9)
    valid, rows, _ = rec.summarise(rec.window_of_phase(), sim.window(1, 2))
    out.close()
    assert valid
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    assert by[("workload", a0)]["iops_setting"] == pytest.approx(200.0)  # (100 + 300) / 2
    assert by[("workload", a0)]["cpu_busy_pct"] == pytest.approx(40.0)  # (30 + 50) / 2
    assert by[("workload", a0)]["workloads"] == 1
    assert by[("workload", "h1:/dev/sd0:b")]["iops_setting"] == "max"
    assert by[("host", "h2")]["cpu_busy_pct"] == pytest.approx(70.0)
    assert by[("vendor+model", "ACME+F9")]["cpu_busy_pct"] == pytest.approx(55.0)
    assert by[("all", "all")]["workloads"] == 8
    assert by[("all", "all")]["iops_setting"] == "max"
    # the same columns as the instance rows of the window, as written
    inst = [dict(zip(r[0], x, strict=True)) for r in [_read(
        tmp_path / "step0001-s" / "workload" / "h1_dev_sd0_a.csv")] for x in r[1:]]
    assert [x["iops_setting"] for x in inst] == ["50", "100", "300"]
    assert np.mean([float(x["cpu_busy_pct"]) for x in inst[1:]]) == pytest.approx(
        by[("workload", a0)]["cpu_busy_pct"])


def test_summary_and_histogram_files_agree_with_the_window_rows(tmp_path: Path) -> None:
    """What a lab engineer cross-checks in a step folder: a summary row is the mean of its
    instance's rows over the window (IOPS, MB/s), its max the largest row max; the histogram
    file's counts add up to IOPS x window seconds per view, on the protocol's bucket edges."""
    from protocol.buckets import LOWER_NS, UPPER_NS

    out = RunOutput(tmp_path)
    rec, sim = _four_subintervals(out, 3, ["warmup"] + ["measurement"] * 3, 9)
    window = rec.window_of_phase()
    _, rows, _ = rec.summarise(window, sim.window(window[0], window[-1]))
    out.close()
    step = tmp_path / "step0003-x"
    edges = {(int(a), int(b)) for a, b in zip(LOWER_NS, UPPER_NS, strict=True)}
    for s in rows:
        kind, inst = s["rollup_type"], s["rollup_instance"]
        fname = f"{safe_name(inst)}.csv"
        table = _read(step / safe_name(kind) / fname)
        inst_rows = [dict(zip(table[0], r, strict=True)) for r in table[1:]]
        win = [r for r in inst_rows if int(r["subinterval"]) in window]
        assert {r["phase"] for r in win} == {"measurement"} and len(win) == 3
        for col in ("IOPS", "MB_per_s", "read_IOPS", "write_IOPS"):
            assert s[col] == pytest.approx(np.mean([float(r[col]) for r in win]), rel=1e-5)
        assert s["service_time_max_ms"] == pytest.approx(
            max(float(r["service_time_max_ms"]) for r in win), rel=1e-5)
        hist = _read(step / "histograms" / safe_name(kind) / fname)
        cols = hist[0]
        body = [dict(zip(cols, r, strict=True)) for r in hist[1:]]
        assert {(int(r["bucket_lower_ns"]), int(r["bucket_upper_ns"])) for r in body} <= edges
        seconds = s["measurement_seconds"]
        assert seconds == 1.5
        for view, prefix in (("all", ""), ("read", "read_"), ("write", "write_")):
            for lat in ("service_time", "response_time"):
                total = sum(int(r[f"{lat}_{view}_count"]) for r in body)
                assert total == round(s[f"{prefix}IOPS"] * seconds), (inst, view, lat)


@pytest.mark.parametrize(("instances", "files"), [
    (["h1", "h2"], ["h1.csv", "h2.csv"]),
    (["summary", "a b", "a_b", "a/b", "a_b-2"], ["summary-2.csv", "a_b.csv", "a_b-2.csv",
                                                  "a_b-3.csv", "a_b-2-2.csv"]),
    (["", "_", "."], ["_.csv", "_-2.csv", "_-3.csv"]),
])
def test_instance_file_names_are_unique_and_leave_summary_free(instances: list[str],
                                                               files: list[str]) -> None:
    assert instance_file_names(instances) == files


def test_instances_with_the_same_safe_name_keep_their_own_files(tmp_path: Path) -> None:
    """Two vendor+model instances whose safe names are the same, and a host named "summary"
    (the host rollup's summary.csv): every instance gets a file of its own rows, histogram
    file included."""
    wl: dict[str, WorkloadInstance] = {}
    for h, vendor in (("summary", "AC ME"), ("h2", "AC_ME")):
        lun = Lun(h, "/dev/sd0", 1 << 30, 512, {"vendor": vendor, "model": "F9"}, (), {})
        spec = WorkloadSpec(name="a", luns=LunChoice(), iosequencer="random_steady")
        wid = f"{h}:/dev/sd0:a"
        wl[wid] = WorkloadInstance(wid, "a", h, SelectedLun(lun, True, (0,)), spec,
                                   WorkloadParams(), {"vendor": vendor, "model": "F9"})
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl))
    sim = _Slaves(rec)
    rng = np.random.default_rng(3)
    for k in range(2):
        rec.record(k, "measurement", [_host_result(sim, h, [f"{h}:/dev/sd0:a"], k, rng, 5.0)[0]
                                      for h in ("summary", "h2")], (k + 1) * 10**9)
    rec.summarise([0, 1], sim.window(0, 1))
    out.close()
    step = tmp_path / "step0000-s"
    for kind, files in (("host", {"summary-2.csv": "summary", "h2.csv": "h2"}),
                        ("vendor+model", {"AC_ME+F9.csv": "AC ME+F9",
                                          "AC_ME+F9-2.csv": "AC_ME+F9"})):
        for name, inst in files.items():
            rows = _read(step / kind / name)
            assert len(rows) == 3
            assert {dict(zip(rows[0], r, strict=True))["rollup_instance"] for r in rows[1:]} == {
                inst}
            assert (step / "histograms" / kind / name).is_file()
    assert not (step / "host" / "summary.csv").exists()


def test_summary_names_the_workloads_short_of_their_iops_setting(tmp_path: Path) -> None:
    """``iops_tolerance_pct``: a workload set to 1,000,000 IOPS that did a few hundred makes
    every row invalid, the reason naming it with its own row's IOPS; the workloads at 100
    IOPS (they did more) and at max are not named; at 100% nothing is short."""
    wl = _workloads()
    a0 = "h1:/dev/sd0:a"
    wl[a0] = dataclasses.replace(wl[a0], params=WorkloadParams(iops=1e6, iodepth=4,
                                                               iosequencer="random_steady"))
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl))
    sim = _Slaves(rec)
    rng = np.random.default_rng(5)
    for k in range(3):
        _record_subinterval(rec, sim, k, "measurement", rng)
    total = sim.window(0, 2)
    valid, rows, messages = rec.summarise([0, 1, 2], total, iops_tolerance_pct=5.0)
    out.close()
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    got = by[("workload", a0)]["IOPS"]
    reason = (f"IOPS short of the setting in force by more than 5% (iops_tolerance_pct): "
              f"workload {a0} {got:,.0f} of 1,000,000 IOPS ({100 * (1 - got / 1e6):.1f}% short)")
    assert not valid and messages[0] == reason
    for r in rows:
        assert r["valid"] is False and r["invalid_reason"] == reason, r
    iops = np.array([wl[w].params.iops or np.nan for w in rec.ids], dtype=float)
    assert rec.iops_shortfall(total, iops, 3.0, 100.0) == ""
    iops[rec.ids.index(a0)] = got
    assert rec.iops_shortfall(total, iops, 3.0, 5.0) == ""


def test_unmeasured_rows_keep_names_workloads_and_settings(tmp_path: Path) -> None:
    """A step that measured nothing: a row per instance of every rollup type, the metric
    cells and the window empty, the workloads and IOPS settings in force, invalid with the
    reason (test_run_verdicts reads them back from the CSV files)."""
    wl = _workloads()
    rec = StepRecorder(RunOutput(tmp_path), 4, "w", ROLLUPS, 1.0, wl, settings_of(wl))
    reason = "stopped by ivypy stop after subinterval 1 (warmup); no measurement subinterval"
    rows = rec.unmeasured_rows(reason, {"measure_criterion": "accuracy"})
    assert [(r["rollup_type"], r["rollup_instance"]) for r in rows] == [
        (t, inst) for t, g in rec.groupings.items() for inst in g.names]
    assert len(rows) == 1 + 2 + 4 + 8 + 2
    for r in rows:
        assert r["valid"] is False and r["invalid_reason"] == reason
        assert all(r[c] is None for c in rollup.METRIC_COLUMNS)
        assert r["first_subinterval"] is None and r["cpu_busy_pct"] is None
        assert r["measurement_seconds"] == 0.0 and r["measure_criterion"] == "accuracy"
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    assert by[("workload", "h1:/dev/sd0:a")]["iops_setting"] == 100.0
    assert by[("workload", "h1:/dev/sd0:b")]["iops_setting"] == "max"
    assert by[("lun", "h2:/dev/sd1")]["workloads"] == 2
    assert by[("all", "all")]["iops_setting"] == "max"
    # summarise with no window gives the same rows
    assert rec.summarise([], extra_invalid=reason,
                         extra={"measure_criterion": "accuracy"}) == (False, rows, [reason])


def test_gathered_columns_in_rows_results_and_summary_means(tmp_path: Path) -> None:
    """A step's joined gathered columns: in every instance row after the device columns (a
    type not given empty), in the results measure and DFC read, and in the summary as the
    mean of the window's subintervals that have a value (empty where none has)."""
    wl = _workloads()
    out = RunOutput(tmp_path)
    g1, g2 = "gather.arr.LDEV.busy_pct", "gather.arr.LDEV.reads"
    rec = StepRecorder(out, 1, "s", ROLLUPS, 1.0, wl, settings_of(wl), gathered=[g1, g2])
    sim = _Slaves(rec, keep_from=1)
    rng = np.random.default_rng(6)
    ids = {h: [w for w in wl if w.startswith(h + ":")] for h in ("h1", "h2")}
    nan = float("nan")
    given = [{"host": {g1: np.array([10.0, 20.0]), g2: np.array([nan, nan])}},
             {"host": {g1: np.array([30.0, nan]), g2: np.array([nan, nan])}},
             {"host": {g1: np.array([50.0, 60.0])}, "all": {g2: np.array([7.0])}}]
    for k, joined in enumerate(given):
        got = rec.record(k, "warmup" if k == 0 else "measurement",
                         [_host_result(sim, "h1", ids["h1"], k, rng, 10.0)[0],
                          _host_result(sim, "h2", ids["h2"], k, rng, 10.0)[0]],
                         (k + 1) * 10**9, joined)
        assert got.results["host"].columns[g1].tolist()[0] == joined["host"][g1][0]
        assert np.isnan(got.results["lun"].columns[g1]).all()
    valid, rows, _ = rec.summarise(rec.window_of_phase(), sim.window(1, 2))
    out.close()
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    assert by[("host", "h1")][g1] == pytest.approx(40.0)  # (30 + 50) / 2
    assert by[("host", "h2")][g1] == pytest.approx(60.0)  # only k=2 has one
    assert by[("all", "all")][g2] == pytest.approx(7.0) and np.isnan(by[("all", "all")][g1])
    assert valid and set(rows[0]) == set(summary_columns([g1, g2]))
    header, *lines = _read(tmp_path / "step0001-s/host/h1.csv")
    assert header == instance_columns([g1, g2])
    at = header.index("device_queue_depth")
    assert header[at + 1:at + 3] == [g1, g2] and header[at + 3] == "cpu_busy_pct"
    assert [line[at + 1] for line in lines] == ["10", "30", "50"]
    assert [line[at + 2] for line in lines] == ["", "", ""]
    assert [line[-1] for line in lines] == ["max"] * 3  # iops_setting is still the last


def test_the_live_metrics_get_each_subinterval_and_each_summarys_validity(
        tmp_path: Path) -> None:
    # with metrics, every type's groups send histograms (the plan says so) and each recorded
    # subinterval reaches them, host by host adding up to the total; a step that measured
    # nothing (stopped, or a failure) is told invalid
    from master.live.metrics import RunMetrics

    wl = _workloads()
    h1 = {w: i for w, i in wl.items() if w.startswith("h1:")}
    out = RunOutput(tmp_path)
    metrics = RunMetrics("t")
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, h1, settings_of(h1),
                       histogram_types=frozenset(r.type for r in ROLLUPS), metrics=metrics)
    assert all(p["histograms"] for p in rec.plan_for("h1"))
    rng = np.random.default_rng(3)
    res = _host_result(_Slaves(rec), "h1", list(h1), 0, rng, 1.0)[0]
    rec.record(0, "measurement", [res], 10**9)
    total = metrics.series[(0, "s", "all")]
    ios = int(total.counters[..., 0].sum())
    assert ios > 0 and ios == int(metrics.series[(0, "s", "host")].counters[..., 0].sum())
    assert int(total.hist.sum()) == 2 * ios  # a service and a response time each
    assert metrics.step == (0, "s") and metrics.subinterval == 0
    rec.unmeasured_rows("stopped before its measurement")
    assert metrics.valid == {(0, "s"): False}
    out.close()


def _four_subintervals(out: RunOutput, number: int, phases: list[str], seed: int,
                       threads: int | None = None) -> tuple[StepRecorder, _Slaves]:
    """Step ``number`` ("x") of ``_workloads`` on hosts h1 and h2, its subintervals recorded
    in ``phases`` (``_record_subinterval``, statistics drawn with ``seed``), its files written
    on ``threads`` threads; the recorder and its simulated slaves."""
    wl = _workloads()
    rec = StepRecorder(out, number, "x", ROLLUPS, 0.5, wl, settings_of(wl), threads=threads)
    sim = _Slaves(rec)
    rng = np.random.default_rng(seed)
    for k, phase in enumerate(phases):
        _record_subinterval(rec, sim, k, phase, rng)
    return rec, sim


def _step_files(tmp: Path, threads: int) -> dict[str, bytes]:
    """Every file of a step (relative path → bytes) of four subintervals on two hosts, its
    summary's histogram files too, written on ``threads`` threads."""
    out = RunOutput(tmp)
    rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 11, threads)
    rec.summarise([0, 1, 2, 3], sim.window(0, 3))
    out.close()
    top = tmp / "step0000-x"
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*.csv"))}


def test_step_files_are_the_same_on_one_thread_and_several(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's files, its instance rows and histogram files written a slice of 2 instances
    at a time, on one thread and on three (each slice a job of one writer thread, the recorder
    going on meanwhile): byte for byte the same files, an instance file and a histogram file
    per instance of every rollup type."""
    monkeypatch.setattr(recorder_module, "HISTOGRAM_SLICE", 2)
    monkeypatch.setattr(recorder_module, "ROW_SLICE", 2)
    one = _step_files(tmp_path / "one", 1)
    three = _step_files(tmp_path / "three", 3)
    instances = 8 + 4 + 2 + 2 + 1  # workloads, LUNs, hosts, vendor+model, all
    assert sum(name.startswith("histograms/") for name in one) == instances
    rows = [name for name in one if name.count("/") == 1 and not name.endswith("summary.csv")]
    assert len(rows) == instances
    assert all(one[name].count(b"\r\n") == 1 + 4 for name in rows)  # header, 4 subintervals
    assert three == one


def test_a_writer_threads_failed_row_is_raised_once_every_job_has_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file-size limit that the second subinterval's rows pass, with the rows written on
    three writer threads a slice of 2 instances at a time: ``record`` raises the error naming
    an instance file, after every job has ended, so that the subinterval's undo leaves each
    file as the first subinterval left it (and the third subinterval follows it)."""
    monkeypatch.setattr(recorder_module, "ROW_SLICE", 2)
    wl = _workloads()
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "x", ROLLUPS, 0.5, wl, settings_of(wl), threads=3)
    sim = _Slaves(rec)
    rng = np.random.default_rng(5)

    def record(k: int) -> None:
        with out.subinterval():
            _record_subinterval(rec, sim, k, "measurement", rng)

    record(0)
    top = tmp_path / "step0000-x"
    first = {p: p.read_bytes() for p in sorted(top.rglob("*.csv"))}
    smallest = min(len(data) for p, data in first.items() if p.parent.name == "workload")
    with (file_size_limit(smallest + 10),
          pytest.raises(OutputError, match=r"step0000-x/\w+/.+\.csv")):
        record(1)
    assert {p: p.read_bytes() for p in sorted(top.rglob("*.csv"))} == first
    record(2)
    out.close()
    for p, data in first.items():
        if p.parent.name == "workload":
            rows = _read(p)
            assert p.read_bytes().startswith(data) and [r[2] for r in rows[1:]] == ["0", "2"]
