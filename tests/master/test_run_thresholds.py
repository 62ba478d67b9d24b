"""A test's ``thresholds:`` through whole runs (the CLI in this process, hosts in memory): each
result in summary.csv's ``thresholds`` cells, events.csv, summary.json, the end table and the
report; one that fails or cannot be told makes the run exit 1, naming it; all held, exit 0;
a resumed run counts its earlier steps' results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from master.results.runfolder import thresholds_judged
from tests.master.memhosts import run_cli
from tests.master.runhelp import rows, write_config

TEST = """\
test: thr
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun-t", size: 16MiB, create: true}
steps:
  - name: fast
    workloads:
      - {name: a, iosequencer: random_steady, iodepth: 4, iops: 400}
    warmup_seconds: 0
    measure_seconds: 0.6
  - name: slow
    edit_rollup:
      - {instance: all, total_iops: 100}
    warmup_seconds: 0
    measure_seconds: 0.6
thresholds:
THRESHOLDS
"""
HOLDING = """\
  - "IOPS > 50"
  - "service_time_p99_ms < 1000"
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thresholds: str) -> tuple[int, Path]:
    cfg = write_config(tmp_path, TEST.replace("THRESHOLDS\n", thresholds))
    status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"], monkeypatch)
    (folder,) = (tmp_path / "thr").iterdir()
    return status, folder


def test_thresholds_not_held_exit_1_and_are_said_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, folder = _run(tmp_path, monkeypatch, HOLDING + """\
  - {expr: "IOPS > 300", step: slow}
  - {expr: "read_IOPS > 1", rollup: host, instance: nohost}
""")
    out, err = capsys.readouterr()
    assert status == 1, out[-2000:] + err[-2000:]
    # the run's last line names what did not hold
    untold = ("read_IOPS > 1 [host nohost] (no instance 'nohost' in rollup host (instances: "
              "localhost))")
    summary = {r["step_name"]: r for r in rows(folder / "summary.csv")
               if r["rollup_type"] == "all"}
    slow_iops = f"{float(summary['slow']['IOPS']):.6g}"
    assert (f"ivypy: 3 of 7 thresholds did not hold: UNTOLD step fast all all: {untold}; "
            f"FAILED step slow all all: IOPS > 300 [step slow] ({slow_iops}); UNTOLD step slow "
            f"all all: {untold}\n") in err

    assert all(r["valid"] == "true" for r in summary.values())  # the steps themselves valid
    fast, slow = summary["fast"], summary["slow"]
    assert fast["thresholds"] == (
        f"passed: IOPS > 50 ({float(fast['IOPS']):.6g}); passed: service_time_p99_ms < 1000 "
        f"({float(fast['service_time_p99_ms']):.6g}); UNTOLD: read_IOPS > 1 [host nohost] "
        "(no instance 'nohost' in rollup host (instances: localhost))")
    assert slow["thresholds"].split("; ")[2:] == [
        f"FAILED: IOPS > 300 [step slow] ({float(slow['IOPS']):.6g})", f"UNTOLD: {untold}"]
    # the rows of other rollups have the column, empty
    assert {r["thresholds"] for r in rows(folder / "summary.csv")
            if r["rollup_type"] != "all"} == {""}

    # the end table: how many held, then every result, those that did not hold first
    lines = out.splitlines()
    at = lines.index("thresholds: 4 of 7 held")
    assert [x.split(":")[0] for x in lines[at + 1 : at + 8]] == [
        "  UNTOLD step fast all all", "  FAILED step slow all all", "  UNTOLD step slow all all",
        "  passed step fast all all", "  passed step fast all all", "  passed step slow all all",
        "  passed step slow all all"]

    events = [e for e in rows(folder / "events.csv") if e["kind"] == "threshold"]
    assert [(e["level"], e["step"]) for e in events] == [
        ("INFO", "0"), ("INFO", "0"), ("WARNING", "0"), ("INFO", "1"), ("INFO", "1"),
        ("WARNING", "1"), ("WARNING", "1")]

    doc = json.loads((folder / "summary.json").read_text())
    assert doc["thresholds"] == {"judged": 7, "passed": 4, "failed": 1, "untold": 2}
    assert doc["steps"][1]["thresholds"][2] == {
        "expr": "IOPS > 300 [step slow]", "rollup_type": "all", "rollup_instance": "all",
        "outcome": "failed", "detail": f"{float(slow['IOPS']):.6g}"}
    state = json.loads((folder / "state.json").read_text())
    assert state["state"] == "complete" and state["exit_code"] == 1

    page = (folder / "report.html").read_text()
    assert '<h2>Thresholds</h2><p class="bad">4 of 7 held</p>' in page
    assert '<td>IOPS &gt; 300 [step slow]</td><td class="bad">FAILED</td>' in page
    assert [j.outcome for j in thresholds_judged(folder)] == [
        "passed", "passed", "UNTOLD", "passed", "passed", "FAILED", "UNTOLD"]


def test_thresholds_all_held_exit_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    status, folder = _run(tmp_path, monkeypatch, HOLDING + """\
  - {expr: "IOPS < 150", step: slow, rollup: workload}
""")
    out, err = capsys.readouterr()
    assert status == 0, out[-2000:] + err[-2000:]
    assert "thresholds: 5 of 5 held" in out
    page = (folder / "report.html").read_text()
    assert '<h2>Thresholds</h2><p class="ok">5 of 5 held</p>' in page
    (wl,) = [r for r in rows(folder / "summary.csv")
             if r["step_name"] == "slow" and r["rollup_type"] == "workload"]
    assert wl["thresholds"].startswith("passed: IOPS < 150 [step slow, every workload] (")


def test_many_results_the_console_lists_the_first_twenty_those_not_held_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Thresholds on every workload: the console lists 20 results, those that did not hold
    first, and says how many more there are (at the end; during the run, the first 20 of
    each step's that did not hold); summary.csv and events.csv have every one."""
    n = 25
    text = TEST.replace("THRESHOLDS\n", """\
  - {expr: "IOPS > 1", rollup: workload}
  - {expr: "IOPS > 100000", rollup: workload, step: fast}
""").replace("      - {name: a, iosequencer: random_steady, iodepth: 4, iops: 400}\n", "".join(
        f"      - {{name: w{i:02d}, iosequencer: random_steady, iops: 20}}\n"
        for i in range(n)))
    cfg = write_config(tmp_path, text)
    status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"], monkeypatch)
    out, err = capsys.readouterr()
    assert status == 1, out[-2000:] + err[-2000:]
    (folder,) = (tmp_path / "thr").iterdir()
    judged = 3 * n  # fast: both thresholds, slow: the first
    lines = out.splitlines()
    at = lines.index(f"thresholds: {2 * n} of {judged} held")
    assert [x.split(" step ")[0] for x in lines[at + 1:at + 21]] == ["  FAILED"] * 20
    assert lines[at + 21] == (f"  (and {judged - 20} more: each in its summary row's "
                              "thresholds cell and in events.csv)")
    said = [x for x in err.splitlines() if " threshold FAILED step fast " in x]
    assert len(said) == 20
    events = [e for e in rows(folder / "events.csv") if e["kind"] == "threshold"]
    assert len(events) == judged
    assert sum(e["level"] == "WARNING" for e in events) == n
    cells = [r["thresholds"] for r in rows(folder / "summary.csv")
             if r["rollup_type"] == "workload"]
    assert len(cells) == 2 * n and all(cells)


def test_a_resumed_run_counts_the_results_of_its_earlier_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # step fast breaks its threshold; the run is then resumed from step slow (as after a
    # crash there): step fast's result, in summary.csv, still makes it exit 1
    status, folder = _run(tmp_path, monkeypatch, HOLDING + """\
  - {expr: "IOPS > 1000", step: fast}
""")
    assert status == 1
    state = json.loads((folder / "state.json").read_text())
    state.update(state="failed", last_complete_step=0)
    (folder / "state.json").write_text(json.dumps(state))
    capsys.readouterr()
    assert run_cli(["run", "--resume", str(folder), "--plain"], monkeypatch) == 1
    out, err = capsys.readouterr()
    assert "ivypy: 1 of 5 thresholds did not hold: FAILED step fast all all: IOPS > 1000" in err
    assert "thresholds: 4 of 5 held" in out
    assert [(j.step, j.outcome) for j in thresholds_judged(folder)] == [
        ("fast", "passed"), ("fast", "passed"), ("fast", "FAILED"), ("slow", "passed"),
        ("slow", "passed")]
