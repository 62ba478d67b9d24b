"""The run folder's state (``master.results.runstate``): state.json written whole and read back
checked, a live master told from a dead one, the refusals of a resume, and a cut-off step set
aside."""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from master.results.runstate import (
    STATE_FILE,
    CreatedFile,
    RunState,
    RunStateError,
    check_resumable,
    check_summary,
    describe,
    master_alive,
    new_state,
    read_state,
    set_aside_incomplete_steps,
    write_state,
)

TEXT = "test: t\n"


def _state(**kw: object) -> RunState:
    return replace(new_state("t", 3, TEXT, "1.0"), **kw)  # type: ignore[arg-type]


def test_state_json_round_trips_and_is_replaced_whole(tmp_path: Path) -> None:
    state = _state(last_complete_step=1, last_complete_step_name="b",
                   step_results={"a": {"all": {"all": 1234.5678901}}},
                   created_files=[CreatedFile("h1", "/x/lun", "1:2")])
    write_state(tmp_path, state)
    back = read_state(tmp_path)
    assert back == state
    assert back.step_results["a"]["all"]["all"] == 1234.5678901  # full precision
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]  # no temporary left


@pytest.mark.parametrize("text, words", [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    ('{"schema": 99}', "state schema 99"),
    (None, "missing ['cwd']"),
    ("bad-state", "state 'limbo' is not one of"),
    ("bad-pid", "pid must be an integer"),
    ("unknown", "unknown ['colour']"),
])
def test_a_garbled_state_is_refused_naming_the_file(tmp_path: Path, text: str | None,
                                                    words: str) -> None:
    good = json.loads(_state().to_json())
    if text is None:
        del good["cwd"]
        text = json.dumps(good)
    elif text == "bad-state":
        text = json.dumps({**good, "state": "limbo"})
    elif text == "bad-pid":
        text = json.dumps({**good, "pid": "12"})
    elif text == "unknown":
        text = json.dumps({**good, "colour": "red"})
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(RunStateError, match=f"{STATE_FILE}: .*{words[:20]}".replace("[", r"\[")):
        read_state(tmp_path)


def test_a_folder_without_state_is_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunStateError, match="not a run folder of this ivypy"):
        read_state(tmp_path)


def _fake_master() -> subprocess.Popen[bytes]:
    """A process whose command line is an ivypy master's (``ivypy run ...``)."""
    fake = subprocess.Popen(["ivypy", "-c", "sleep 30; :", "run"], executable="/bin/sh")
    deadline = time.monotonic() + 5
    while b"ivypy" not in Path(f"/proc/{fake.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return fake


def test_a_master_is_alive_while_an_ivypy_process_holds_its_pid() -> None:
    fake = _fake_master()
    try:
        assert master_alive(_state(pid=fake.pid))
        assert not master_alive(_state(pid=fake.pid, state="failed"))  # it says it ended
        assert master_alive(_state(pid=fake.pid + 10**7, controller="elsewhere"))  # can't tell
    finally:
        fake.kill()
        fake.wait()
    assert not master_alive(_state(pid=fake.pid))  # gone
    assert not master_alive(_state(pid=os.getpid()))  # a pid reused by another program
    py_m = subprocess.Popen(["python3", "-c", "import time; time.sleep(30)", "-m", "master"])
    try:  # ``python -m master run ...``: the words -m master, not the word master alone
        time.sleep(0.2)
        assert master_alive(_state(pid=py_m.pid))
    finally:
        py_m.kill()
        py_m.wait()


@pytest.mark.parametrize("change, words", [
    ({"state": "complete"}, "the run is complete"),
    ({"last_complete_step": 2}, "every step is complete"),
    ({"test_sha256": "0" * 64}, "test.yaml: the test file changed since the run started"),
    ({"ivypy_version": "0.9"}, "written by ivypy 0.9, this is 1.0"),
])
def test_resume_refusals(tmp_path: Path, change: dict[str, object], words: str) -> None:
    state = _state(pid=2**22 + 7, **change)
    with pytest.raises(RunStateError, match=words):
        check_resumable(state, tmp_path, TEXT, "1.0")


def test_a_run_whose_master_lives_is_not_resumed(tmp_path: Path) -> None:
    fake = _fake_master()
    try:
        with pytest.raises(RunStateError, match=f"still running \\(master pid {fake.pid}"):
            check_resumable(_state(pid=fake.pid), tmp_path, TEXT, "1.0")
    finally:
        fake.kill()
        fake.wait()


@pytest.mark.parametrize("state, last, first", [
    ("running", -1, 0), ("running", 0, 1), ("failed", 1, 2), ("interrupted", 0, 1),
])
def test_resume_starts_at_the_first_incomplete_step(tmp_path: Path, state: str, last: int,
                                                    first: int) -> None:
    s = _state(state=state, last_complete_step=last, pid=2**22 + 7)
    assert check_resumable(s, tmp_path, TEXT, "1.0") == first
    text = describe(s, tmp_path)
    assert f"continue it with: ivypy run --resume {tmp_path}" in text
    assert ("dead (its master is gone)" in text) == (state == "running")


def test_a_cut_off_step_is_set_aside_and_its_summary_rows_dropped(tmp_path: Path) -> None:
    for name in ("step0000-a", "step0001-b", "step0002-c", "step0001-b.incomplete"):
        (tmp_path / name).mkdir()
    (tmp_path / "step0001-b" / "x.csv").write_text("kept\n")
    rows = [["step_number", "step_name", "rollup_instance"], ["0", "a", "all"],
            ["0", "a", 'has "quotes", and commas'], ["1", "b", "all"], ["2", "c", "all"]]
    with open(tmp_path / "summary.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    moved = set_aside_incomplete_steps(tmp_path, ["step0001-b", "step0002-c"], 1)
    assert moved == ["step0001-b.incomplete-2", "step0002-c.incomplete"]
    assert (tmp_path / "step0001-b.incomplete-2" / "x.csv").read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "step0000-a", "step0001-b.incomplete", "step0001-b.incomplete-2",
        "step0002-c.incomplete"]
    with open(tmp_path / "summary.csv", newline="") as fh:
        assert list(csv.reader(fh)) == rows[:3]


def test_describe_a_finished_run(tmp_path: Path) -> None:
    s = _state(state="complete", exit_code=1, last_complete_step=2, last_complete_step_name="c",
               reason="invalid steps: c", resumes=[time.strftime("%Y")])
    text = describe(s, tmp_path)
    assert "state: complete: invalid steps: c" in text
    assert "last complete step: step 2 (c) of 3 steps" in text and "resumed 1 time" in text
    assert "exit status: 1" in text and "--resume" not in text
    assert socket.gethostname()  # the controller is this host's name


def _summary(tmp_path: Path, text: str) -> None:
    (tmp_path / "summary.csv").write_text(text)
    for name in ("step0000-a", "step0001-b"):
        (tmp_path / name).mkdir(exist_ok=True)


@pytest.mark.parametrize(("last", "said"), [
    ("1,", True),  # fewer cells
    ("\x00\x00\x00", True),  # zeros of a block never written
    ("1,b,al", False),  # whole to the eye: step 1's, dropped as such
    ('1,b,"all', False),  # a quote left open, read to the end
])
def test_a_last_summary_row_the_crash_cut_off_is_dropped(
        tmp_path: Path, last: str, said: bool) -> None:
    _summary(tmp_path, f"step_number,step_name,rollup_instance\n0,a,all\n{last}")
    check_summary(tmp_path, 1)
    moved = set_aside_incomplete_steps(tmp_path, ["step0001-b"], 1)
    assert moved == ["step0001-b.incomplete"] + (
        ["summary.csv's last row, cut off at the crash (line 3)"] if said else [])
    assert (tmp_path / "summary.csv").read_text().splitlines() == [
        "step_number,step_name,rollup_instance", "0,a,all"]


@pytest.mark.parametrize(("text", "error"), [
    ("step_number,step_name\n0,a\nx,b\n1,b\n",
     "summary.csv: line 3: not a whole row (2 cells of 2, step_number 'x')"),
    ("step_number,step_name\n0\n1,b\n",
     "summary.csv: line 2: not a whole row (1 cells of 2, step_number '0')"),
    ("step,name\n0,a\n", "summary.csv: line 1 is not its header (no step_number column)"),
])
def test_a_summary_garbled_before_its_last_row_stops_the_resume_changing_nothing(
        tmp_path: Path, text: str, error: str) -> None:
    _summary(tmp_path, text)
    with pytest.raises(RunStateError, match=re.escape(error)):
        check_summary(tmp_path, 1)
    with pytest.raises(RunStateError, match=re.escape(error)):
        set_aside_incomplete_steps(tmp_path, ["step0001-b"], 1)
    assert (tmp_path / "summary.csv").read_text() == text
    assert (tmp_path / "step0001-b").is_dir()
