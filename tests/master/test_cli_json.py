"""The JSON forms of the command line for scripts and CI: ``ivypy status --json`` (a live run's
status through its control socket, served here for a stand-in; a folder no master serves, from
its state.json) and the last line of ``ivypy run --json`` (a run on in-memory hosts, a test
file refused). Each must parse as JSON with the layout docs/run.md gives."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from master.cli.main import main
from master.live.control_socket import ControlServer
from master.results.runstate import new_state, write_state
from tests.master.memhosts import run_cli
from tests.master.runhelp import write_config
from tests.master.test_control import FakeHandler

TEST = """\
test: js
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun", size: 16MiB, create: true}
steps:
  - name: first
    workloads:
      - {name: a, iosequencer: random_steady, iodepth: 4, iops: 400}
    warmup_seconds: 0
    measure_seconds: 0.6
  - name: second
    workloads:
      - {name: a, iops: 200}
    warmup_seconds: 0
    measure_seconds: 0.6
"""


def _last_json(out: str) -> dict[str, Any]:
    line = out.strip().splitlines()[-1]
    doc = json.loads(line)
    assert isinstance(doc, dict)
    return doc


def test_the_run_ends_with_a_json_line_of_its_outcome_and_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, TEST)
    status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain", "--json"],
                     monkeypatch)
    doc = _last_json(capsys.readouterr().out)
    (folder,) = (tmp_path / "js").iterdir()
    assert status == 0
    assert {k: doc[k] for k in ("ivypy_run", "exit_code", "outcome", "run_dir",
                                "invalid_steps")} == {
        "ivypy_run": 1, "exit_code": 0, "outcome": "ok", "run_dir": str(folder),
        "invalid_steps": []}
    assert [(s["step"], s["name"], s["valid"]) for s in doc["steps"]] == [
        (0, "first", True), (1, "second", True)]
    first = doc["steps"][0]
    assert first["IOPS"] == pytest.approx(400, rel=0.05) and first["errors"] == 0
    assert set(first) == {"step", "name", "valid", "invalid_reason", "measurement_seconds",
                          "IOPS", "MB_per_s", "service_time_p50_ms", "service_time_p99_ms",
                          "response_time_p50_ms", "response_time_p99_ms", "errors"}


def test_a_refused_test_file_still_ends_with_its_json_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, TEST.replace("iops: 400", "iops: lots"))
    assert main(["run", str(cfg), "--plain", "--json"]) == 2
    out, err = capsys.readouterr()
    doc = _last_json(out)
    assert (doc["outcome"], doc["exit_code"], doc["run_dir"], doc["steps"]) == (
        "config", 2, None, [])
    assert "iops" in doc["message"] and "iops" in err


def test_status_json_of_a_live_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    async def scenario() -> int:
        async with ControlServer(run_dir, FakeHandler()):
            return await asyncio.to_thread(main, ["status", "--json", str(run_dir)])

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == 0
    doc = _last_json(capsys.readouterr().out)
    assert doc == {"ivypy_status": 1, "live": True, "test": "t", "step": 1, "subinterval": 3,
                   "phase": "measure",
                   # a p99 of no I/O (NaN) is null: the line is JSON
                   "rollups": {"host": [{"instance": "h1", "IOPS": 100.0,
                                         "service_time_p99_ms": None}]}}


def test_status_json_of_a_folder_no_master_serves(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    st = new_state("js", 3, "text", "0.1.0")
    st.state, st.reason, st.last_complete_step, st.last_complete_step_name = (
        "interrupted", "interrupted", 0, "first")
    write_state(tmp_path, st)
    assert main(["status", "--json", str(tmp_path)]) == 3
    doc = _last_json(capsys.readouterr().out)
    assert {k: doc[k] for k in ("ivypy_status", "live", "state", "last_complete_step",
                                "steps_total", "resume_command")} == {
        "ivypy_status": 1, "live": False, "state": "interrupted", "last_complete_step": 0,
        "steps_total": 3, "resume_command": f"ivypy run --resume {tmp_path}"}
