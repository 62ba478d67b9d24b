"""The quickstart, end to end through the real CLI: a local slave, a file LUN, real I/O."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml

from master.analysis.rollup import PERCENTILES, pct_label
from master.hosts.transport import slave_logger_name
from tests.master.runhelp import warmup_backlog

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("step0000-randread_qd32", "step0001-mix70_30", "step0002-seqread_128k")
SUBINTERVAL_S = float(yaml.safe_load((ROOT / "configs/quickstart.yaml").read_text())[
    "subinterval_seconds"])
REQUIRED_SUMMARY = [
    "step_number", "step_name", "rollup_type", "rollup_instance", "IOPS", "MB_per_s",
    "service_time_mean_ms", "service_time_p50_ms", "service_time_p99_ms", "service_time_max_ms",
    "response_time_p99_ms", "valid",
] + [f"{p}_{c}" for p in ("read", "write") for c in (
    "IOPS", "MB_per_s", "service_time_mean_ms", "service_time_p50_ms", "service_time_p99_ms",
    "service_time_max_ms", "response_time_p99_ms")]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def run_folder(quickstart_run: Path) -> Path:
    """The quickstart's run (shared with test_run_summaryjson, which reads its summary.json)."""
    return quickstart_run


def test_folder_layout(run_folder: Path) -> None:
    for name in ("test.yaml", "resolved.json", "run.log", "hosts.csv", "luns.csv", "events.csv",
                 "summary.csv"):
        assert (run_folder / name).is_file(), name
    (lun,) = [r for r in _rows(run_folder / "luns.csv") if r["kind"] == "file"]
    assert lun["lun"].endswith("quickstart-lun0") and lun["used_by"]
    assert lun["size_bytes"] == lun["file_size_bytes"] == str(256 << 20)
    for step in STEPS:
        d = run_folder / step
        for sub in ("all/all.csv", "all/summary.csv", "host/localhost.csv", "host/summary.csv",
                    "lun/summary.csv", "workload/summary.csv", "cpu.csv", "interlock.csv",
                    "histograms/all/all.csv"):
            assert (d / sub).is_file(), f"{step}/{sub}"
    hosts = _rows(run_folder / "hosts.csv")
    assert hosts[0]["host"] == "localhost" and int(hosts[0]["clock_samples"]) >= 8
    # which loop ran the I/O (the test machines have a C compiler: scripts/test installs gcc),
    # also under its name before protocol 9, for older readers
    assert hosts[0]["io_loop"] == "compiled (shipped from the controller)"
    assert hosts[0]["paced_loop"] == hosts[0]["io_loop"]
    # run.log: the master's log with the slave's stderr relayed under the host's logger (seen
    # here, so that the check that neither side logged an error or a traceback is not vacuous)
    lines = (run_folder / "run.log").read_text().splitlines()
    relayed = [line for line in lines if f" INFO {slave_logger_name('localhost')}: " in line]
    assert any(f"file LUN {lun['lun']}: laid out, {256 << 20} bytes of random data" in line
               for line in relayed), lines
    errors = [line for line in lines
              if re.search(r" (ERROR|CRITICAL) ", line) or "Traceback (most recent" in line]
    assert errors == []


def test_rows_per_subinterval_and_phases(run_folder: Path) -> None:
    for step in STEPS:
        rows = _rows(run_folder / step / "all/all.csv")
        assert [int(r["subinterval"]) for r in rows] == list(range(10))
        assert [r["phase"] for r in rows] == ["warmup"] * 2 + ["measurement"] * 8


def test_iops_nonzero_and_percentiles_monotonic(run_folder: Path) -> None:
    for step in STEPS:
        for r in _rows(run_folder / step / "all/all.csv"):
            assert float(r["IOPS"]) > 0
            for kind in ("service_time", "response_time"):
                chain = [float(r[f"{kind}_min_ms"])]
                chain += [float(r[f"{kind}_{pct_label(p)}_ms"]) for p in PERCENTILES]
                chain.append(float(r[f"{kind}_max_ms"]))
                assert chain == sorted(chain), (step, kind, chain)
                assert float(r[f"{kind}_min_ms"]) <= float(r[f"{kind}_mean_ms"])
                assert float(r[f"{kind}_mean_ms"]) <= float(r[f"{kind}_max_ms"])


def test_summary(run_folder: Path) -> None:
    rows = _rows(run_folder / "summary.csv")
    assert set(REQUIRED_SUMMARY) <= set(rows[0])
    assert len(rows) == 3 * 4  # steps x (all, host, lun, workload: one instance each here)
    by = {(r["step_name"], r["rollup_type"]): r for r in rows}
    mix = by[("mix70_30", "all")]
    # above its rate only by the I/Os its warmup left undone, which the window catches up
    behind = warmup_backlog(_rows(run_folder / STEPS[1] / "all/all.csv"), 2000, SUBINTERVAL_S)
    iops, seconds = float(mix["IOPS"]), float(mix["measurement_seconds"])
    assert 2000 * 0.98 <= iops <= 2000 * 1.02 + behind / seconds, (iops, behind)
    assert float(mix["read_IOPS"]) / float(mix["IOPS"]) == pytest.approx(0.7, abs=0.03)
    seq = by[("seqread_128k", "all")]
    assert float(seq["avg_blocksize_KiB"]) == pytest.approx(128)
    assert float(seq["sequential_IOPS"]) == pytest.approx(float(seq["IOPS"]))
    assert all(r["valid"] == "true" for r in rows)
    assert by[("randread_qd32", "all")]["first_subinterval"] == "2"


def test_histogram_file_matches_summary_count(run_folder: Path) -> None:
    hist = _rows(run_folder / STEPS[0] / "histograms/all/all.csv")
    total = sum(int(r["service_time_all_count"]) for r in hist)
    summary = {r["rollup_type"]: r for r in _rows(run_folder / STEPS[0] / "all/summary.csv")}
    iops = float(summary["all"]["IOPS"])
    # IOPS below a million is written to six significant digits
    assert total == pytest.approx(iops * 8, rel=5e-6)
    assert all(int(r["bucket_lower_ns"]) < int(r["bucket_upper_ns"]) for r in hist)


def test_start_leads(run_folder: Path) -> None:
    """Each step (one workload) starts 250 ms after its Go, or four times the longest
    confirmation of a Go before it (a Ping behind the Go answered), were that longer."""
    leads = [int(m[1]) for r in _rows(run_folder / "events.csv") if r["kind"] == "step"
             for m in [re.search(r"; starts (\d+) ms after its Go$", r["message"])] if m]
    log = (run_folder / "run.log").read_text()
    confirmed = [float(x) for x in re.findall(r"its Go confirmed by every host ([\d.]+) ms", log)]
    assert len(leads) == len(confirmed) == len(STEPS), (leads, confirmed)
    assert leads[0] == 250
    for k in (1, 2):
        want = max(250, 4 * max(confirmed[:k]))
        assert leads[k] == pytest.approx(want, abs=1), (leads, confirmed)
