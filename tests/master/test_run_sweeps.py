"""Sweeps through a whole run, on in-memory hosts (``master.hosts.memory``: a real slave
session, a synthetic device that completes each setting, 5,000 IOPS at max): a ``for:`` sweep,
an ``iops_curve:``, ``edit_rollup`` and a ``measure:`` step, each giving one summary row per
step (per rollup instance), each setting reaching the workloads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from master.hosts.memory import Plant
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows

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
MAX_IOPS = Plant().max_iops  # what the synthetic device does at iops: max


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweeps")
    result = execute(memory_run(memory_config(tmp, TEST), MemoryHosts()), timeout_s=120)
    assert result.exit_code == 0, result.message
    return Path(result.folder)


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
    """The curve's maximum is what the device did at max; each point runs at its fraction
    of it, every subinterval (the synthetic device completes each setting)."""
    top = float(summary[("curve-iops=max", "host")]["IOPS"])
    assert top == pytest.approx(MAX_IOPS)
    for step, frac in (("step0005-curve-iops=25*", 25), ("step0006-curve-iops=75*", 75)):
        (d,) = folder.glob(step)
        for r in rows(d / "host/localhost.csv"):
            assert float(r["iops_setting"]) == pytest.approx(top * frac / 100, rel=1e-5), r
            assert float(r["IOPS"]) == pytest.approx(top * frac / 100, abs=2.0), r
        row = summary[(f"curve-iops={frac}%", "host")]
        assert float(row["IOPS"]) == pytest.approx(top * frac / 100, abs=2.0), row


def test_edit_rollup_and_measure(summary: dict[tuple[str, str], dict[str, str]]) -> None:
    edited = summary[("edited", "all")]
    assert float(edited["IOPS"]) == pytest.approx(1500, abs=2.0), edited
    assert float(edited["iops_setting"]) == pytest.approx(1500)
    assert float(edited["avg_blocksize_KiB"]) == pytest.approx(4)
    steady = summary[("steady", "all")]
    assert steady["measure_criterion"].startswith("accuracy")
    assert steady["valid"] == "true", steady["invalid_reason"]
    assert float(steady["IOPS"]) == pytest.approx(2000, abs=2.0)
    # steady from its first subinterval: measured for min_measure_seconds exactly
    assert float(steady["measurement_seconds"]) == 2
    # the criterion value in its limit's unit (percent, as "2% at 95%"), named by instance
    name, value = steady["measure_values"].split("=")
    assert name == "all" and float(value) == 0


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


def test_the_state_keeps_only_what_the_curve_reads(folder: Path) -> None:
    """state.json's step results: the curve's max step's instances of its rollup type, which a
    resumed run's curve reads, and no other step's or type's."""
    from master.results.runstate import read_state

    assert read_state(folder).step_results == {
        "curve-iops=max": {"all": {"all": pytest.approx(MAX_IOPS)}}}
