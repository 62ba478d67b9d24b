"""``ivypy run --resume``: a 3-step run whose master is SIGKILLed once step 0 is complete is
seen dead by ``ivypy status`` and continued in its own folder: summary.csv ends with each step
once, the resumed steps run the workloads and durations they would have had (against the same
test run whole), the file LUN the run created takes the resumed step's writes, and events.csv
tells the resume. The killed run is the real CLI as a subprocess (the process boundary, a
killed master and its slave, is what is tested); its resume, the whole run it is compared with
and the refusals (bad arguments, a changed test file, a complete run) are on in-memory hosts,
the CLI in this process. The LUN is a file in memory (``memory_lun_dir``): step 0's verdict is
compared with the whole run's, which the host's virtual disk could move."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run, run_cli
from tests.master.runhelp import (
    ROOT,
    all_gone,
    memory_lun_dir,
    process_tree,
    rows,
    run_folder,
    start_run,
    write_config,
)

TEST = """\
test: resume
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {hosts: localhost, file: "{lun_dir}/lun-resume", size: 32MiB, create: true}
steps:
  - name: first
    workloads:
      - {name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 400,
         read_fraction: 100%}
    warmup_seconds: 0.5
    measure_seconds: 1
  - name: second
    workloads:
      - {name: mx, iosequencer: random_steady, blocksize: 8KiB, iodepth: 2, iops: 300,
         read_fraction: 70%}
  - name: third
    workloads:
      - {name: mx, delete: true}
    measure_seconds: 1
"""


def _ivypy(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _wait_state(folder: Path, key: str, value: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if json.loads((folder / "state.json").read_text()).get(key) == value:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"state.json never had {key} = {value!r}")


def _by_step(folder: Path, rollup: str) -> dict[tuple[str, str], dict[str, str]]:
    out = {}
    for r in rows(folder / "summary.csv"):
        if r["rollup_type"] == rollup:
            key = (r["step_number"], r["rollup_instance"].rsplit(":", 1)[-1])
            assert key not in out, f"{key} twice in summary.csv"
            out[key] = r
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The same test run whole, on in-memory hosts (``master.hosts.memory``): its steps'
    workloads, settings, durations and verdicts are what the resumed run is compared with."""
    tmp = tmp_path_factory.mktemp("whole")
    with memory_lun_dir(tmp) as lun_dir:
        result = execute(memory_run(memory_config(tmp, TEST.replace("{lun_dir}", str(lun_dir))),
                                    MemoryHosts()), timeout_s=120)
        assert result.exit_code == 0, result.message
        yield Path(result.folder)


@pytest.fixture
def lun_dir(tmp_path: Path) -> Iterator[Path]:
    with memory_lun_dir(tmp_path) as d:
        yield d


def test_a_killed_run_is_resumed_from_its_first_incomplete_step(
        tmp_path: Path, lun_dir: Path, reference: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, TEST.replace("{lun_dir}", str(lun_dir)))
    proc = start_run(cfg, tmp_path)
    try:
        folder = run_folder(tmp_path, "resume")
        _wait_state(folder, "last_complete_step", 0)
        tree = process_tree(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert all_gone(tree, 3.0), "the slave outlived its master"  # the LUN is closed
    assert (folder / "control.sock").exists()  # the killed master could not remove it
    status = _ivypy("status", str(folder))
    assert status.returncode == 3, status.stderr
    assert not (folder / "control.sock").exists()  # status removed it: nothing serves it
    assert "state: dead (its master is gone)" in status.stdout
    assert "last complete step: step 0 (first) of 3 steps" in status.stdout
    assert f"continue it with: ivypy run --resume {folder}" in status.stdout

    # the resume: the CLI in this process on in-memory hosts (what it decides is the master's;
    # the slave session's preflight, real there, lets the run's own file take its writes)
    assert run_cli(["run", "--resume", str(folder), "--plain"], monkeypatch) == 0, \
        capsys.readouterr().err[-3000:]
    state = json.loads((folder / "state.json").read_text())
    assert state["state"] == "complete" and state["last_complete_step"] == 2
    assert len(state["resumes"]) == 1
    # each step once in summary.csv, in order
    steps = [r["step_number"] for r in rows(folder / "summary.csv") if r["rollup_type"] == "all"]
    assert steps == ["0", "1", "2"]
    # the resumed steps ran the workloads and durations the whole run had
    got, want = _by_step(folder, "workload"), _by_step(reference, "workload")
    assert sorted(got) == sorted(want) == [("0", "rr"), ("1", "mx"), ("1", "rr"), ("2", "rr")]
    for key in got:
        for col in ("iops_setting", "workloads", "measurement_seconds", "first_subinterval",
                    "last_subinterval", "valid"):
            assert got[key][col] == want[key][col], (key, col)
        mean_bytes = float(got[key]["MB_per_s"]) * 1e6 / float(got[key]["IOPS"])
        assert mean_bytes == pytest.approx(8192 if key[1] == "mx" else 4096, rel=1e-4)
    mx = got[("1", "mx")]
    assert float(mx["write_IOPS"]) > 0  # the run's own file took the resumed step's writes
    events = rows(folder / "events.csv")
    (told,) = [e for e in events if e["kind"] == "resume"]
    assert "resumed at step 1 second of 3" in told["message"]
    assert "the run was dead" in told["message"]
    # what the killed master left of step 1 is kept aside, not mixed in
    incomplete = folder / "step0001-second.incomplete"
    assert incomplete.is_dir() == ("step0001-second.incomplete" in told["message"])
    assert len(rows(folder / "step0001-second/all/all.csv")) == len(
        rows(reference / "step0001-second/all/all.csv"))
    # a complete run is not resumed again (the CLI in this process: a refusal before any host)
    before = (folder / "summary.csv").read_bytes()
    assert run_cli(["run", "--resume", str(folder)], monkeypatch) == 2
    again = capsys.readouterr().err
    assert "cannot resume" in again and "the run is complete" in again, again
    assert (folder / "summary.csv").read_bytes() == before


@pytest.mark.parametrize("args, words", [
    (["run"], "give a test file, or --resume RUN_DIR"),
    (["run", "t.yaml", "--resume", "x"], "give a test file, or --resume RUN_DIR (not both)"),
    (["run", "--resume", "{tmp}", "--output-root", "o"], "--output-root does not go with"),
    (["run", "--resume", "{tmp}"], "not a run folder of this ivypy (no state.json)"),
])
def test_bad_resume_arguments_are_one_line_exit_2(
        tmp_path: Path, args: list[str], words: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    hosts = MemoryHosts()
    status = run_cli([a.replace("{tmp}", str(tmp_path)) for a in args], monkeypatch, hosts)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and words in err, err
    assert list(tmp_path.iterdir()) == [] and not hosts.hosts


def test_a_resume_of_a_changed_test_file_is_refused(
        tmp_path: Path, reference: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A copy of a run folder whose test.yaml was edited (and state set back to step 0)."""
    folder = tmp_path / "resume" / "copy"
    folder.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(reference), str(folder)], check=True)
    state = json.loads((folder / "state.json").read_text())
    state.update(state="failed", last_complete_step=0)
    (folder / "state.json").write_text(json.dumps(state))
    before = (folder / "summary.csv").read_bytes()
    test = (folder / "test.yaml").read_text()
    (folder / "test.yaml").write_text(test.replace("iops: 300", "iops: 301"))
    hosts = MemoryHosts()
    assert run_cli(["run", "--resume", str(folder)], monkeypatch, hosts) == 2
    assert "the test file changed since the run started" in capsys.readouterr().err
    assert not hosts.hosts
    assert (folder / "summary.csv").read_bytes() == before  # nothing touched
