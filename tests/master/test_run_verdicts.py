"""Verdicts that carry their reasons, through whole runs on in-memory hosts
(``master.hosts.memory``: a real slave session, a synthetic device of 50,000 IOPS whose Poisson
workloads draw their counts). A step short of its IOPS setting, a step stopped by ``ivypy
stop``, by Ctrl-C or by a host's failure during its warmup, and a measurement not attained by
its timeout each show why, with figures, in every one of their rows of the step's and the run's
summary.csv, in summary.json and in report.html. (A DFC step pinned at high_iops:
test_run_dfc.)"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from master.analysis.rollup import METRIC_COLUMNS
from master.hosts.memory import Plant
from master.results.schema import SUMMARY_COLUMNS
from master.run.lifecycle import Run
from master.run.operator import RunControl
from protocol.messages import Message, SubintervalResult
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows

#: the device: 50,000 IOPS in all; a Poisson workload's count is drawn (seeded)
DEVICE = Plant(capacity_iops=50_000.0, poisson=True)

ROLLUP_TYPES = {"all", "host", "lun", "workload"}

SHORT = """\
test: short
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun-short", size: 16MiB, create: true,
     allow_write: true}
steps:
  - name: met
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 200}
    warmup_seconds: 0.5
    measure_seconds: 1
  - name: missed
    workloads:
      - {name: w, iodepth: 1, iops: 20000000}
    warmup_seconds: 0
    measure_seconds: 0.5
  - name: forgiven
    iops_tolerance_pct: 100
  - name: max
    workloads:
      - {name: w, iops: max}
  - name: unsteady
    workloads:
      - {name: w, iops: 100, iosequencer: random_independent}
    measure: {focus_metric: IOPS, accuracy: 0.1%, min_measure_seconds: 2,
              timeout_seconds: 2.5}
"""


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("short")
    result = execute(memory_run(memory_config(tmp, SHORT), MemoryHosts(plant=DEVICE)),
                     timeout_s=120)
    assert result.exit_code == 1, result.message
    assert result.message == "invalid steps: missed, unsteady"
    return Path(result.folder)


def _summary(folder: Path, step: str) -> list[dict[str, str]]:
    return [r for r in rows(folder / "summary.csv") if r["step_name"] == step]


def _reasons_shown_everywhere(folder: Path, step: str) -> None:
    """The step's reasons, as summary.csv has them, in summary.json (the step's reasons and
    every instance's) and in report.html's summary table."""
    got = _summary(folder, step)
    reasons = {r["invalid_reason"] for r in got}
    assert reasons and "" not in reasons
    doc = json.loads((folder / "summary.json").read_text())
    (st,) = [s for s in doc["steps"] if s["name"] == step]
    parts = {part for reason in reasons for part in reason.split("; ")}  # the JSON's list
    assert st["valid"] is False and parts <= set(st["invalid_reasons"]), st["invalid_reasons"]
    for rtype, instances in st["rollups"].items():
        for name, row in instances.items():
            assert row["valid"] is False and row["invalid_reason"] in reasons, (rtype, name)
    page = (folder / "report.html").read_text()
    for reason in reasons:
        assert html.escape(reason) in page, reason


def test_a_step_short_of_its_iops_is_invalid_naming_the_workload(short: Path) -> None:
    """20,000,000 IOPS on a device of 50,000 is out of reach: every row of the step is
    invalid, the reason naming the workload with its achieved and set IOPS and the shortfall,
    the figures those of its own workload row."""
    got = _summary(short, "missed")
    assert {r["rollup_type"] for r in got} == ROLLUP_TYPES
    (wl,) = [r for r in got if r["rollup_type"] == "workload"]
    achieved, setting = float(wl["IOPS"]), float(wl["iops_setting"])
    assert setting == 20_000_000 and achieved < 0.95 * setting
    for r in got:
        assert r["valid"] == "false"
        m = re.search(r"IOPS short of the setting in force by more than 5% \(iops_tolerance_pct\)"
                      r": workload (\S+) ([\d,]+) of 20,000,000 IOPS \(([\d.]+)% short\)",
                      r["invalid_reason"])
        assert m, r["invalid_reason"]
        assert m.group(1) == wl["rollup_instance"]
        assert float(m.group(2).replace(",", "")) == pytest.approx(achieved, abs=0.5)
        assert float(m.group(3)) == pytest.approx(100 * (1 - achieved / setting), abs=0.05)
    # the step's own summary.csv files hold the same rows
    for rtype in ROLLUP_TYPES:
        (own,) = rows(short / f"step0001-missed/{rtype}/summary.csv")
        (run,) = [r for r in got if r["rollup_type"] == rtype]
        assert own["invalid_reason"] == run["invalid_reason"] and own["valid"] == "false"
    events = (short / "events.csv").read_text()
    assert "step missed invalid: IOPS short of the setting" in events
    _reasons_shown_everywhere(short, "missed")


def test_met_max_and_a_step_tolerance_of_100_are_valid(short: Path) -> None:
    """200 IOPS met; the same unreachable rate with the step's iops_tolerance_pct: 100 (every
    shortfall allowed); iops: max is not checked."""
    for step in ("met", "forgiven", "max"):
        got = _summary(short, step)
        assert {r["rollup_type"] for r in got} == ROLLUP_TYPES
        for r in got:
            assert r["valid"] == "true" and r["invalid_reason"] == "", r
    (fw,) = [r for r in _summary(short, "forgiven") if r["rollup_type"] == "workload"]
    assert float(fw["IOPS"]) < 0.95 * float(fw["iops_setting"])  # short, and forgiven
    (mx,) = [r for r in _summary(short, "max") if r["rollup_type"] == "workload"]
    assert mx["iops_setting"] == "max"


def test_a_measurement_not_attained_gives_its_value_against_the_limit(short: Path) -> None:
    """An accuracy of 0.1% of a Poisson stream of 100 IOPS is out of reach in 2.5 s (50 I/Os
    a subinterval, ±7: a window of 4 or 5 subintervals passes only if their counts are all
    equal, about 1 in 10,000): the reason gives the criterion's value for the instance against
    its limit; the value is the one measure_values holds."""
    got = _summary(short, "unsteady")
    for r in got:
        assert r["valid"] == "false"
        m = re.search(r"measure: accuracy not attained by the timeout \(2\.5s\): all "
                      r"([\d.]+)% vs limit 0\.1% at 95% \(best window reported\)",
                      r["invalid_reason"])
        assert m, r["invalid_reason"]
        value = float(r["measure_values"].removeprefix("all="))
        assert float(m.group(1)) == pytest.approx(value, rel=1e-3)
        assert value > 0.1
    _reasons_shown_everywhere(short, "unsteady")


WARM = """\
test: {name}
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun-{name}", size: 16MiB, create: true,
     allow_write: true}}
steps:
  - name: long-warmup
    workloads:
      - {{name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 500}}
    warmup_seconds: 60
    measure_seconds: 5
  - name: after
    warmup_seconds: 0
    measure_seconds: 0.5
"""


def _check_unmeasured(folder: Path, step_dir: str, pattern: str) -> list[dict[str, str]]:
    """Every row of the step (run's and step's summary.csv): invalid, the reason matching
    ``pattern`` with the subinterval of its last row, the metric cells empty, the setting
    in force kept."""
    last = int(rows(folder / f"{step_dir}/all/all.csv")[-1]["subinterval"])
    got = _summary(folder, "long-warmup")
    assert {r["rollup_type"] for r in got} == ROLLUP_TYPES
    for r in got:
        assert list(r) == [*SUMMARY_COLUMNS, "measure_criterion", "measure_values",
                           "measure_attained"]
        assert r["valid"] == "false"
        m = re.fullmatch(pattern, r["invalid_reason"])
        assert m, r["invalid_reason"]
        assert int(m.group(1)) in (last, last + 1), (r["invalid_reason"], last)
        assert all(r[c] == "" for c in METRIC_COLUMNS), r
        assert r["first_subinterval"] == r["last_subinterval"] == ""
        assert r["measurement_seconds"] == "0" and r["workloads"] == "1"
        assert float(r["iops_setting"]) == 500
    for rtype in ROLLUP_TYPES:
        (own,) = rows(folder / f"{step_dir}/{rtype}/summary.csv")
        assert own["valid"] == "false" and own["invalid_reason"] == got[0]["invalid_reason"]
    return got


def _warm_run(tmp_path: Path, name: str, act: Callable[[Run, MemoryHosts], Any]) -> Any:
    """The WARM test run until the warmup's second row is recorded, then ``act`` (on the run
    and its hosts); its result."""
    box: dict[str, Any] = {}

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult) and m.step == 0 and m.subinterval == 1:
            async def when_recorded() -> None:
                run: Run = box["run"]
                while run.step_state is None or run.step_state.last_recorded < 1:
                    await asyncio.sleep(0.005)
                box["acted"] = await act(run, hosts)
            box["task"] = asyncio.ensure_future(when_recorded())
        return True

    hosts = MemoryHosts(watch, plant=DEVICE)
    run = box["run"] = memory_run(memory_config(tmp_path, WARM.format(name=name)), hosts)
    result = execute(run, timeout_s=60)
    assert box["task"].done() and box["task"].exception() is None
    return result


def test_ivypy_stop_in_warmup_keeps_the_steps_rows_invalid(tmp_path: Path) -> None:
    async def stop(run: Run, hosts: MemoryHosts) -> Any:
        return await RunControl(run).stop_step()

    result = _warm_run(tmp_path, "stopw", stop)
    assert result.exit_code == 1, result.message
    assert result.message == "invalid steps: long-warmup"
    folder = Path(result.folder)
    _check_unmeasured(folder, "step0000-long-warmup",
                      r"stopped by ivypy stop after subinterval (\d+) \(warmup\); "
                      r"no measurement subinterval")
    _reasons_shown_everywhere(folder, "long-warmup")
    # the run went on: the next step measured, valid
    after = _summary(folder, "after")
    assert after and all(r["valid"] == "true" for r in after)


def test_ctrl_c_in_warmup_keeps_the_steps_rows_invalid_exit_130(tmp_path: Path) -> None:
    async def interrupt(run: Run, hosts: MemoryHosts) -> None:
        run._interrupt()  # what SIGINT's handler calls

    result = _warm_run(tmp_path, "intw", interrupt)
    assert result.exit_code == 130, result.message
    folder = Path(result.folder)
    _check_unmeasured(folder, "step0000-long-warmup",
                      r"interrupted after subinterval (\d+) \(warmup\); "
                      r"no measurement subinterval")
    assert not _summary(folder, "after")


def test_a_host_failure_in_warmup_keeps_the_steps_rows_invalid_exit_3(tmp_path: Path) -> None:
    async def kill(run: Run, hosts: MemoryHosts) -> None:
        hosts["localhost"].die()

    result = _warm_run(tmp_path, "failw", kill)
    assert result.exit_code == 3, result.message
    assert "localhost" in result.message
    folder = Path(result.folder)
    _check_unmeasured(folder, "step0000-long-warmup",
                      r"failed in subinterval (\d+) \(warmup\): host localhost: .+")
    assert not _summary(folder, "after")
