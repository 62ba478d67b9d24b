"""Sweeps end to end: a ``for:`` sweep, an ``iops_curve:``, ``edit_rollup`` and a ``measure:``
step, each giving one summary row per step (per rollup instance)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.master.runhelp import ROOT, poisson_rel, rows, warmup_backlog, write_config

TEST = """\
test: sweeps
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun-sweeps", size: 128MiB, create: true,
     allow_write: true}
steps:
  - name: grid
    workloads:
      - {name: rr, iosequencer: random_independent, read_fraction: 100%}
    for:
      blocksize: [4KiB, 64KiB]
      iodepth: [1, 8]
    warmup_seconds: 0
    measure_seconds: 0.5
  - name: curve
    workloads:
      - {name: rr, blocksize: 8KiB, iodepth: 16, read_fraction: 70%}
    iops_curve: [25%, 75%]
    # the curve's values are what this test holds, not the device's pace (the check is off):
    # beside the parallel suite's other runs on the same disk, one CI run kept 75% of a
    # maximum measured moments before only to 11.5% short of it, and one here, while the
    # hypervisor took the CPUs, to 71% short (14,239 IOPS of 48,848, responses near 1 s)
    iops_tolerance_pct: 100
    warmup_seconds: 0.5
    measure_seconds: 1.5
  - name: edited
    edit_rollup:
      - {instance: "host=localhost", total_iops: 1500, blocksize: 4KiB,
         iosequencer: random_steady}
  - name: steady
    workloads:
      - {name: rr, iops: 2000, iosequencer: random_steady}
    measure:
      focus_metric: IOPS
      accuracy: 2%
      min_measure_seconds: 2
      timeout_seconds: 20
"""
SUBINTERVAL_S = float(yaml.safe_load(TEST)["subinterval_seconds"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweeps")
    cfg = write_config(tmp, TEST)
    proc = subprocess.run(
        [sys.executable, "-m", "master", "run", str(cfg), "--output-root", str(tmp), "--plain"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out,) = (tmp / "sweeps").iterdir()
    return out


@pytest.fixture(scope="module")
def summary(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["step_name"], r["rollup_type"]): r for r in rows(folder / "summary.csv")}


def test_one_summary_row_per_step(summary: dict[tuple[str, str], dict[str, str]]) -> None:
    steps = sorted({name for name, _ in summary})
    assert steps == sorted([
        "grid-blocksize=4KiB-iodepth=1", "grid-blocksize=4KiB-iodepth=8",
        "grid-blocksize=64KiB-iodepth=1", "grid-blocksize=64KiB-iodepth=8",
        "curve-iops=max", "curve-iops=25%", "curve-iops=75%", "edited", "steady"])
    for step in steps:
        assert (step, "all") in summary and (step, "host") in summary


def test_for_values_reach_the_workloads(summary: dict[tuple[str, str], dict[str, str]]) -> None:
    for bs in (4, 64):
        for qd in (1, 8):
            row = summary[(f"grid-blocksize={bs}KiB-iodepth={qd}", "all")]
            assert float(row["avg_blocksize_KiB"]) == pytest.approx(bs)
            assert float(row["IOPS"]) > 0
    shallow = float(summary[("grid-blocksize=4KiB-iodepth=1", "all")]["service_time_mean_ms"])
    assert shallow > 0


def test_iops_curve_runs_at_fractions_of_the_max(
        summary: dict[tuple[str, str], dict[str, str]], folder: Path) -> None:
    # the curve's workload is random_independent (carried from the grid): Poisson arrivals
    top = float(summary[("curve-iops=max", "host")]["IOPS"])
    for step, frac in (("step0005-curve-iops_25_", 25), ("step0006-curve-iops_75_", 75)):
        (d,) = folder.glob(step.replace("_25_", "=25*").replace("_75_", "=75*"))
        settings = [float(r["iops_setting"]) for r in rows(d / "host/localhost.csv")]
        for value in settings:
            assert value == pytest.approx(top * frac / 100, rel=1e-5), (frac, settings, top)
        # the device may not keep up near its maximum on a busy machine, and a schedule that
        # fell behind catches up later, so one window may run above the setting (one run: +2.5 %
        # over a 1.5 s window, 5 sigma). What holds is that the I/Os done from the step's start
        # never pass the I/Os scheduled by then.
        expected = top * frac / 100
        done = 0.0
        for k, r in enumerate(rows(d / "host/localhost.csv")):
            done += float(r["IOPS"]) * SUBINTERVAL_S
            scheduled = expected * SUBINTERVAL_S * (k + 1)
            rel = poisson_rel(expected, SUBINTERVAL_S * (k + 1))
            assert done <= scheduled * (1 + rel), (frac, k, done, scheduled)
    row = summary[("curve-iops=25%", "host")]
    low, seconds = float(row["IOPS"]), float(row["measurement_seconds"])
    expected = top * 0.25
    rel = poisson_rel(expected, seconds) + 0.02  # plus 2 % for the device
    assert low >= expected * (1 - rel), (low, expected, rel)
    # above the setting only by the backlog the warmup left: one CI run's warmup did half its
    # schedule just after the maximum's step, and the window caught up (7,217 IOPS at 6,185)
    (d,) = folder.glob("step0005-curve-iops=25*")
    behind = warmup_backlog(rows(d / "host/localhost.csv"), expected, SUBINTERVAL_S)
    ceiling = expected * (1 + rel) + behind / seconds
    assert low <= ceiling, (low, expected, behind, ceiling)


def test_edit_rollup_and_measure(summary: dict[tuple[str, str], dict[str, str]],
                                 folder: Path) -> None:
    # random_steady (evenly spaced) so that the rate itself is checked to a few percent: with
    # random_independent the count in 1.5 s at 1500 IOPS is Poisson (sigma 2.1 %), and a 3 %
    # tolerance failed about one run in six. Above it only by the warmup's backlog: in one
    # suite run here, while the host took a third of the CPUs, the warmup did 1,308 IOPS and
    # the window's first subinterval 1,690 (1,563 over the window)
    edited = summary[("edited", "all")]
    (d,) = folder.glob("step0007-edited")
    behind = warmup_backlog(rows(d / "all/all.csv"), 1500, SUBINTERVAL_S)
    iops, seconds = float(edited["IOPS"]), float(edited["measurement_seconds"])
    assert 1500 * 0.97 <= iops <= 1500 * 1.03 + behind / seconds, (iops, behind)
    assert float(edited["avg_blocksize_KiB"]) == pytest.approx(4)
    steady = summary[("steady", "all")]
    assert steady["measure_criterion"].startswith("accuracy")
    assert steady["valid"] == "true", steady["invalid_reason"]
    assert float(steady["IOPS"]) == pytest.approx(2000, rel=0.02)
    assert float(steady["measurement_seconds"]) >= 2
    # the criterion value in its limit's unit (percent, as "2% at 95%"), named by instance
    name, value = steady["measure_values"].split("=")
    assert name == "all" and 0 <= float(value) <= 2  # random_steady: often exactly 0


def test_measure_csv_values_are_in_the_limits_unit(folder: Path) -> None:
    measured = rows(next(folder.glob("step*-steady")) / "measure.csv")
    assert measured and all(r["limit"] == "2% at 95%" for r in measured)
    last = measured[-1]
    assert last["passed"] == "true" and 0 <= float(last["value"]) <= 2  # percent
    steady = {r["rollup_type"]: r for r in rows(folder / "summary.csv")
              if r["step_name"] == "steady"}["all"]
    assert steady["measure_values"] == f"all={float(last['value']):.6g}"


@pytest.mark.parametrize("criterion, value, reported", [
    ("accuracy", 0.0948, 9.48), ("iops", 9.57, 9.57), ("iops_slope", 120.0, 120.0)])
def test_criterion_values_are_reported_in_the_limits_unit(criterion: str, value: float,
                                                          reported: float) -> None:
    from master.analysis.stepcontrol import _reported

    assert _reported(criterion, value) == pytest.approx(reported)


def test_edit_rollup_events_read_as_settings(folder: Path) -> None:
    events = (folder / "events.csv").read_text()
    assert "edit_rollup host=localhost: iosequencer=random_steady blocksize_bytes=4096 " \
        "total_iops=1500" in events, events
