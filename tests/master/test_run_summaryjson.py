"""summary.json of real runs (the CLI as a subprocess, a local slave, a file LUN): a quickstart
run, a run that fails when a later step's write is refused, one whose slave is killed mid-step
(a host failure), a run interrupted by SIGINT and then resumed, and one whose master is
SIGKILLed, whose summary.json ``ivypy summary-json`` writes. Each summary.json validates
against docs/summary.schema.json and says what happened: how the run ended, which steps
completed, which was cut short, which never ran, and per step per rollup instance the numbers
of summary.csv. The quickstart and the runs ended by a fault are shared with other test files
(tests/master/sharedruns.py); what writes into a run folder works on a copy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run, run_cli
from tests.master.runhelp import (
    ROOT,
    rows,
)
from tests.master.sharedruns import FaultRun

SCHEMA = json.loads((ROOT / "docs/summary.schema.json").read_text())

pytestmark = pytest.mark.slow


def _summary(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "summary.json").read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc)]
    assert errors == []
    assert doc["problems"] == [] and doc["run_folder"] == str(folder)
    assert not list(folder.glob(".summary.json*"))
    return doc


def _matches_summary_csv(doc: dict[str, Any], folder: Path) -> None:
    """Every summary.csv row is in the document, its numbers equal to the cells'."""
    table = rows(folder / "summary.csv")
    assert table
    for r in table:
        inst = doc["steps"][int(r["step_number"])]["rollups"][r["rollup_type"]][
            r["rollup_instance"]]
        for col in ("IOPS", "MB_per_s", "service_time_p99_ms", "response_time_p99_ms",
                    "measurement_seconds"):
            assert inst[col] == (float(r[col]) if r[col] else None), col
        assert inst["valid"] is (r["valid"] == "true")
    n = sum(len(i) for s in doc["steps"] for i in s["rollups"].values())
    assert n == len(table)


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_a_quickstart_run(quickstart_run: Path) -> None:
    # the quickstart as it ships (configs/quickstart.yaml: its three steps, rollups and LUN),
    # the run test_run_quickstart checks the CSV files of
    folder = quickstart_run
    doc = _summary(folder)
    assert doc["test"] == "quickstart" and doc["description"].startswith("random reads")
    assert doc["outcome"] == {"state": "complete", "exit_code": 0, "reason": None,
                              "last_complete_step": 2}
    assert doc["started_utc"] <= doc["ended_utc"]
    assert [(s["name"], s["status"], s["valid"], s["invalid_reasons"]) for s in doc["steps"]
            ] == [(n, "complete", True, []) for n in ("randread_qd32", "mix70_30",
                                                      "seqread_128k")]
    for s in doc["steps"]:
        assert set(s["rollups"]) == {"all", "host", "lun", "workload"}
        assert s["rollups"]["all"]["all"]["IOPS"] > 0
        assert s["folder"] == f"step{s['number']:04d}-{s['name']}"
    _matches_summary_csv(doc, folder)
    mix = doc["steps"][1]["rollups"]["all"]["all"]
    assert mix["iops_setting"] == 2000 and mix["write_IOPS"] > 0
    (host,) = doc["hosts"]
    assert host["host"] == "localhost" and isinstance(host["cores"], int)
    assert host["io_loop"].startswith(("compiled", "python"))
    (lun,) = [x for x in doc["luns"] if x["selected"]]
    assert lun["lun"].endswith("quickstart-lun0") and lun["used_by"] == ["rr", "mix", "seq"]
    assert lun["size_bytes"] == 256 << 20 and lun["engine"] == "libaio"


TWO_STEPS = """\
test: {name}
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "{lun}"{create}}}
steps:
  - name: reads
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 500,
         read_fraction: 100%}}
    warmup_seconds: 0.5
    measure_seconds: {seconds}
  - name: writes
    workloads:
      - {{name: rr, delete: true}}
      - {{name: mx, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 300,
         read_fraction: 70%}}
    measure_seconds: 1
  - name: after
    measure_seconds: 1
"""


def test_a_run_failed_by_a_refused_write_tells_the_steps_that_never_ran(
        tmp_path: Path) -> None:
    lun = tmp_path / "someones-data"
    lun.write_bytes(b"\x5a" * (16 << 20))  # an existing file this run did not create
    # on in-memory hosts (``master.hosts.memory``): the slave session's write preflight is
    # real, its I/O synthetic; what is tested is what the run's folder says of the refusal
    result = execute(memory_run(memory_config(tmp_path, TWO_STEPS.format(
        name="refused", lun=lun, create="", seconds=1)), MemoryHosts()))
    assert result.exit_code == 2, result.message
    doc = _summary(Path(result.folder))
    out = doc["outcome"]
    assert (out["state"], out["exit_code"], out["last_complete_step"]) == ("failed", 2, 0)
    assert str(lun) in out["reason"] and "did not create" in out["reason"]
    assert doc["ended_utc"] is not None and doc["events"]["error"] >= 1
    reads, writes, after = doc["steps"]
    assert (reads["status"], reads["valid"]) == ("complete", True)
    assert reads["rollups"]["all"]["all"]["IOPS"] > 0
    for s in (writes, after):  # refused before any of its I/O, and never reached
        assert (s["status"], s["valid"], s["folder"], s["rollups"]) == (
            "not_run", None, None, {})


def test_a_run_failed_by_a_host_lost_mid_step(slave_killed_run: FaultRun) -> None:
    folder = slave_killed_run.folder
    assert slave_killed_run.returncode == 3, slave_killed_run.stderr
    doc = _summary(folder)
    out = doc["outcome"]
    assert (out["state"], out["exit_code"], out["last_complete_step"]) == ("failed", 3, -1)
    assert "localhost" in out["reason"] and "step 0 reads failed" in out["reason"]
    reads, writes, after = doc["steps"]
    # cut off: its folder holds the rows, and its summary rows say it failed, unmeasured
    assert (reads["status"], reads["valid"], reads["folder"]) == (
        "incomplete", False, "step0000-reads")
    assert any("failed in subinterval" in r for r in reads["invalid_reasons"]), reads
    (total,) = reads["rollups"]["all"].values()
    assert total["valid"] is False and total["IOPS"] is None
    assert reads["events"]["error"] == 0 and doc["events"]["error"] >= 1
    for s in (writes, after):
        assert (s["status"], s["folder"]) == ("not_run", None)


def test_a_run_interrupted_by_sigint_and_then_resumed(
        interrupted_run: FaultRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = interrupted_run.folder
    assert interrupted_run.returncode == 130, interrupted_run.stderr
    doc = _summary(folder)
    assert (doc["outcome"]["state"], doc["outcome"]["exit_code"]) == ("interrupted", 130)
    assert doc["outcome"]["last_complete_step"] == -1 and doc["resumed_utc"] == []
    reads, writes, after = doc["steps"]
    # the step cut short keeps its summary, invalid, saying why
    assert (reads["status"], reads["valid"]) == ("incomplete", False)
    assert any(r.startswith("interrupted after subinterval") for r in reads["invalid_reasons"])
    assert reads["rollups"]["all"]["all"]["valid"] is False
    _matches_summary_csv(doc, folder)
    for s in (writes, after):
        assert (s["status"], s["folder"]) == ("not_run", None)

    # resumed in a copy of the run folder, as deep under an output root as the run's: the run
    # is shared; the resume is the CLI in this process on in-memory hosts (the summary is the
    # master's)
    folder = tmp_path / folder.parent.name / folder.name
    shutil.copytree(interrupted_run.folder, folder, symlinks=True,
                    ignore=shutil.ignore_patterns("control.sock"))
    status = run_cli(["run", "--resume", str(folder), "--plain"], monkeypatch)
    assert status == 0, capsys.readouterr().err
    doc = _summary(folder)
    assert doc["outcome"] == {"state": "complete", "exit_code": 0, "reason": None,
                              "last_complete_step": 2}
    assert len(doc["resumed_utc"]) == 1 and doc["started_utc"] <= doc["resumed_utc"][0]
    assert [(s["status"], s["valid"]) for s in doc["steps"]] == [("complete", True)] * 3
    # the cut-off step's folder is set aside; its rows left summary.csv
    assert doc["steps"][0]["folder"] == "step0000-reads"
    assert (folder / "step0000-reads.incomplete").is_dir()
    _matches_summary_csv(doc, folder)
    assert len(doc["hosts"]) == 2  # a row per host per session


def test_a_run_whose_master_died_gets_its_summary_from_ivypy_summary_json(
        master_killed_run: FaultRun, tmp_path: Path) -> None:
    # on a copy of the run folder: ivypy summary-json writes into it, and the run is shared
    folder = tmp_path / "died"
    shutil.copytree(master_killed_run.folder, folder, symlinks=True,
                    ignore=shutil.ignore_patterns("control.sock"))
    assert not (folder / "summary.json").exists()  # nothing ran its end
    done = _run("summary-json", str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{folder / 'summary.json'}: dead, 3 steps\n"
    doc = _summary(folder)
    assert doc["outcome"] == {"state": "dead", "exit_code": None, "reason": None,
                              "last_complete_step": -1}
    assert doc["ended_utc"] is None and doc["started_utc"] is not None
    assert [(s["status"], s["valid"]) for s in doc["steps"]] == [
        ("incomplete", None), ("not_run", None), ("not_run", None)]
