"""``ivypy status | edit | stop`` through ``python -m master`` against a control server that
runs in a background thread with its own event loop, for a simulated run whose subintervals tick
every 0.1 s and whose edits take effect at the next boundary (as the run loop's must).

The active-run registry lives under ``tmp_path`` (``IVYPY_STATE_DIR``, inherited by the
subprocesses).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from master.cli import main as cli
from master.cli.operator import EXIT_NO_RUN, EXIT_OK, EXIT_REFUSED, format_status, split_edit_words
from master.live.control_socket import SOCKET_NAME, ControlServer
from master.live.editparse import EditChanges, EditRefused

REPO_ROOT = Path(__file__).resolve().parents[2]
TICK_S = 0.1


@dataclass
class Row:
    subinterval: int
    workload: str
    iops_setting: float | None
    read_fraction: float


@dataclass
class SimulatedRun:
    """Three workloads on two hosts; a subinterval every ``TICK_S``; edits queued for the next
    boundary; one row per workload per subinterval with the settings in force."""

    step_name: str = "ramp"
    subinterval: int = 0
    settings: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "h1:/dev/sdb:rr": {"iops": 1000.0, "read_fraction": 1.0},
        "h1:/dev/sdc:rr": {"iops": 1000.0, "read_fraction": 1.0},
        "h2:/dev/sdb:rr": {"iops": 1000.0, "read_fraction": 1.0},
    })
    pending: list[tuple[int, list[str], dict[str, Any]]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    stop_after: int | None = None
    run_stopped: bool = False
    #: workloads a DFC steers (their edits are answered with ``dfc_steered``)
    dfc_steers: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(self) -> None:
        with self.lock:
            self.subinterval += 1
            due = [p for p in self.pending if p[0] == self.subinterval]
            self.pending = [p for p in self.pending if p[0] != self.subinterval]
            for _, members, params in due:
                for wid in members:
                    self.settings[wid].update(params)
            for wid, s in self.settings.items():
                self.rows.append(Row(self.subinterval, wid, s["iops"], s["read_fraction"]))

    def rows_from(self, first: int, last: int) -> list[Row]:
        with self.lock:
            return [r for r in self.rows if first <= r.subinterval <= last]

    async def status(self) -> dict[str, Any]:
        with self.lock:
            per_host: dict[str, float] = {}
            for wid, s in self.settings.items():
                per_host[wid.split(":")[0]] = per_host.get(wid.split(":")[0], 0.0) + s["iops"]
            return {
                "test": "sim", "run_dir": "somewhere", "step": 1, "step_name": self.step_name,
                "subinterval": self.subinterval, "phase": "measure", "subintervals_total": 600,
                "time_left_s": 90.0, "dfc": "off",
                "rollups": {"host": [{"instance": h, "IOPS": v, "service_time_p99_ms": None,
                                      "iops_setting": v} for h, v in sorted(per_host.items())]},
            }

    async def edit(self, rollup_type: str, instance: str, changes: EditChanges) -> dict[str, Any]:
        if rollup_type not in ("all", "host"):
            raise EditRefused(f"no rollup type {rollup_type!r} in this run (all, host)")
        with self.lock:
            members = [w for w in self.settings
                       if rollup_type == "all" or w.split(":")[0] == instance]
            if not members:
                raise EditRefused(f"{rollup_type}={instance} has no workloads in step 1")
            effective = self.subinterval + 1
            self.pending.append((effective, members, dict(changes.params)))
        return {"effective_subinterval": effective, "step": 1, "step_name": self.step_name,
                "workloads": members, "dfc_steered": sorted(self.dfc_steers & set(members))}

    async def stop_step(self) -> dict[str, Any]:
        with self.lock:
            self.stop_after = self.subinterval
            return {"step": 1, "step_name": self.step_name, "last_subinterval": self.subinterval}

    async def stop_run(self) -> dict[str, Any]:
        reply = await self.stop_step()
        self.run_stopped = True
        return reply


class BackgroundRun:
    """``SimulatedRun`` + ``ControlServer`` on an event loop in a daemon thread."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.sim = SimulatedRun()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        async with ControlServer(self.run_dir, self.sim):
            self._ready.set()
            while not self._done.is_set():
                try:
                    await asyncio.wait_for(self._done.wait(), TICK_S)
                except asyncio.TimeoutError:
                    self.sim.tick()

    def __enter__(self) -> BackgroundRun:
        self._thread.start()
        assert self._ready.wait(10), "server did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(10)
        assert not self._thread.is_alive()

    def wait_for_subinterval(self, k: int, timeout_s: float = 10.0) -> None:
        done = threading.Event()
        for _ in range(int(timeout_s / 0.02)):
            with self.sim.lock:
                if self.sim.subinterval >= k:
                    done.set()
                    break
            done.wait(0.02)
        assert done.is_set(), f"subinterval {k} never came"


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("IVYPY_STATE_DIR", str(path))
    return path


@pytest.fixture
def run(tmp_path: Path) -> Iterator[BackgroundRun]:
    run_dir = tmp_path / "results" / "sim" / "20240101-000000"
    run_dir.mkdir(parents=True)
    with BackgroundRun(run_dir) as background:
        yield background
    assert not (run_dir / SOCKET_NAME).exists()


def ivypy(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m master ARGS`` from ``cwd``, the repository root unless given
    (IVYPY_STATE_DIR inherited)."""
    return subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


# ---------------------------------------------------------------- subprocess


def test_edit_holds_from_the_announced_subinterval(run: BackgroundRun) -> None:
    run.wait_for_subinterval(2)
    done = ivypy("edit", str(run.run_dir), "host=h1", "iops=5000", "read_fraction=70%")
    assert done.returncode == EXIT_OK, done.stderr
    match = re.fullmatch(r"applied to 2 workloads of host=h1 from subinterval (\d+) "
                         r"of step 1 \(ramp\)\n", done.stdout)
    assert match, done.stdout
    k = int(match.group(1))
    run.wait_for_subinterval(k + 2)
    rows = run.sim.rows_from(1, k + 2)
    for row in rows:
        on_h1 = row.workload.startswith("h1:")
        edited = on_h1 and row.subinterval >= k
        assert row.iops_setting == (5000.0 if edited else 1000.0), row
        assert row.read_fraction == (0.7 if edited else 1.0), row
    assert {r.subinterval for r in rows} >= {k - 1, k, k + 1}


def test_status_without_run_dir_uses_the_run_started_from_here(run: BackgroundRun) -> None:
    # the run's server was started from this process's directory, the repository root
    done = ivypy("status")
    assert done.returncode == EXIT_OK, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "test sim  (somewhere)"
    assert re.fullmatch(r"step 1 \(ramp\), measure, subinterval \d+ of 600, about 1m30s left",
                        lines[1]), lines[1]
    assert "host:" in lines
    table = lines[lines.index("host:") + 1:lines.index("host:") + 4]
    assert table[0].split() == ["instance", "IOPS", "p99", "ms", "IOPS", "setting"]
    assert table[1].split() == ["h1", "2000", "-", "2000"]
    assert table[2].split() == ["h2", "1000", "-", "1000"]
    assert "dfc: off" in lines


def test_an_edit_of_workloads_dfc_steers_warns_that_dfc_keeps_moving_them(
        run: BackgroundRun) -> None:
    run.sim.dfc_steers = {"h1:/dev/sdb:rr"}
    done = ivypy("edit", str(run.run_dir), "host=h1", "iops=500")
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.startswith("applied to 2 workloads of host=h1 from subinterval ")
    assert done.stderr == (
        "ivypy: warning: DFC steers the IOPS of h1:/dev/sdb:rr in this step: it starts from "
        "the total you set and keeps moving it (ivypy edit all dfc.target=... changes what "
        "it aims at)\n")
    quiet = ivypy("edit", str(run.run_dir), "host=h2", "iops=500")
    assert quiet.returncode == EXIT_OK and quiet.stderr == ""


def test_edit_refusals_exit_2_and_change_nothing(run: BackgroundRun) -> None:
    unknown = ivypy("edit", "host=h9", "iops=5000")  # no RUN_DIR: the active run
    assert unknown.returncode == EXIT_REFUSED
    assert unknown.stderr == "ivypy: edit refused: host=h9 has no workloads in step 1\n"
    invalid = ivypy("edit", str(run.run_dir), "all", "iops=5000", "read_fraction=1.5")
    assert invalid.returncode == EXIT_REFUSED
    assert invalid.stderr == ("ivypy: edit refused: read_fraction=1.5: must be between 0 and "
                              "1\n")
    assert unknown.stdout == invalid.stdout == ""
    with run.sim.lock:
        assert run.sim.pending == []
        assert all(s == {"iops": 1000.0, "read_fraction": 1.0}
                   for s in run.sim.settings.values())


def test_stop(run: BackgroundRun) -> None:
    done = ivypy("stop", str(run.run_dir.parent))  # the test folder: its live run
    assert done.returncode == EXIT_OK, done.stderr
    # the run it reached is named: a test folder may hold several
    match = re.fullmatch(r"step 1 \(ramp\) will end after subinterval (\d+) \(run (.+)\)\n",
                         done.stdout)
    assert match and Path(match.group(2)) == run.run_dir, done.stdout
    assert run.sim.stop_after == int(match.group(1))


def test_stop_run_ends_the_run_after_its_step(run: BackgroundRun) -> None:
    done = ivypy("stop", "--run", str(run.run_dir))
    assert done.returncode == EXIT_OK, done.stderr
    assert re.fullmatch(r"step 1 \(ramp\) will end after subinterval \d+, then the run\n",
                        done.stdout), done.stdout
    assert run.sim.run_stopped and run.sim.stop_after is not None


def test_two_runs_of_other_folders_and_a_bare_stop_from_a_third_refuses_listing_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs active at once, started from two folders: ``ivypy stop`` from a third refuses
    (exit 2) and lists both, and neither stops; from the first's folder it stops that one."""
    lab = {name: tmp_path / name for name in ("one", "two", "third")}
    for d in lab.values():
        d.mkdir()
    runs = {}
    with contextlib.ExitStack() as stack:
        for name in ("one", "two"):
            run_dir = lab[name] / "out" / "t" / "20240101-000000"
            run_dir.mkdir(parents=True)
            monkeypatch.chdir(lab[name])  # where the run is started from
            runs[name] = stack.enter_context(BackgroundRun(run_dir))
        done = ivypy("stop", cwd=lab["third"])
        assert done.returncode == EXIT_REFUSED, done.stdout + done.stderr
        lines = done.stderr.splitlines()
        assert lines[0] == (f"ivypy: 2 active ivypy runs, and none of them started from "
                            f"{lab['third']} or writing under it: name the run folder")
        for name in ("one", "two"):
            (line,) = [ln for ln in lines[1:] if ln.startswith(f"  {runs[name].run_dir}  ")]
            assert line.endswith(f" from {lab[name]})"), line
        assert done.stdout == ""
        assert runs["one"].sim.stop_after is None and runs["two"].sim.stop_after is None

        status = ivypy("status", cwd=lab["third"])
        assert status.returncode == EXIT_REFUSED and "name the run folder" in status.stderr

        mine = ivypy("stop", cwd=lab["one"])
        assert mine.returncode == EXIT_OK, mine.stderr
        assert f"(run {runs['one'].run_dir})" in mine.stdout
        assert runs["one"].sim.stop_after is not None and runs["two"].sim.stop_after is None


def test_no_active_run(tmp_path: Path) -> None:
    done = ivypy("status")
    assert done.returncode == EXIT_NO_RUN
    assert done.stderr == "ivypy: no active ivypy run found (name the run folder)\n"


# ---------------------------------------------------------------- in process


@pytest.mark.parametrize("argv", [
    ["edit", "host=h1"],
    ["edit", "host=h1", "iops"],
    ["edit", "h1", "iops=5"],
    ["edit", "all", "iops=5", "total_iops=9"],
    ["edit", "all", "blocksize=4k"],
])
def test_bad_edits_are_refused_before_connecting(argv: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == EXIT_REFUSED  # no run exists: refused without trying to reach one
    err = capsys.readouterr().err
    assert err.startswith("ivypy: edit refused: ") and "no active" not in err


def test_run_dir_without_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["status", str(tmp_path)], ["stop", str(tmp_path)],
                 ["edit", str(tmp_path), "all", "iops=5"]):
        assert cli.main(argv) == EXIT_NO_RUN
        err = capsys.readouterr().err
        assert err == f"ivypy: no running test at {tmp_path} (no control.sock)\n"


def test_split_edit_words(tmp_path: Path) -> None:
    assert split_edit_words([str(tmp_path), "all", "iops=5"]) == (str(tmp_path), "all", ["iops=5"])
    assert split_edit_words(["host=h1", "iops=5", "iodepth=2"]) == (
        None, "host=h1", ["iops=5", "iodepth=2"])
    with pytest.raises(EditRefused, match="give the instance"):
        split_edit_words([str(tmp_path)])
    with pytest.raises(EditRefused, match="give one or more key=value settings to apply to all"):
        split_edit_words([str(tmp_path), "all"])


def test_format_status_shows_unknown_keys_generically() -> None:
    text = format_status({"ok": True, "step": 3, "subinterval": 7, "phase": "warmup",
                          "rollups": {"all": [{"instance": "all", "IOPS": 12345.6,
                                               "service_time_p99_ms": 1.23456, "iops_setting": None,
                                               "MB_per_s": 48.2}],
                                      "lun": []},
                          "measure": {"attained": False}})
    assert text.splitlines() == [
        "step 3, warmup, subinterval 7",
        "",
        "all:",
        "  instance   IOPS  p99 ms  IOPS setting  MB_per_s",
        "  all       12346   1.235             -      48.2",
        "",
        "lun:",
        "  (no instances)",
        "",
        "measure: {'attained': False}",
    ]


def test_edit_all_in_a_step_folder_is_the_instance(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # a step folder holds an ``all`` folder (and host, lun, workload): ``ivypy edit all
    # iops=5000`` typed there took ``all`` for the run folder and ``iops=5000`` for the instance
    step_folder = tmp_path / "step0001-ramp"
    (step_folder / "all").mkdir(parents=True)
    monkeypatch.chdir(step_folder)
    assert split_edit_words(["all", "iops=5000"]) == (None, "all", ["iops=5000"])
    assert split_edit_words(["all", "iops=5", "read_fraction=70%"]) == (
        None, "all", ["iops=5", "read_fraction=70%"])
    assert split_edit_words(["./all", "host=h1", "iops=5"]) == ("./all", "host=h1", ["iops=5"])


def test_edit_names_a_run_folder_that_is_not_there(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # a mistyped run folder was taken for the instance: "bad instance '.../20240101-00000'"
    missing = tmp_path / "results" / "t" / "20240101-00000"
    assert split_edit_words([str(missing), "host=h1", "iops=5"]) == (
        str(missing), "host=h1", ["iops=5"])
    assert cli.main(["edit", str(missing), "host=h1", "iops=5"]) == EXIT_NO_RUN
    assert capsys.readouterr().err == f"ivypy: no running test at {missing} (not a directory)\n"
    # a mistyped instance stays a bad instance
    assert cli.main(["edit", "hosth1", "iops=5", "iodepth=2"]) == EXIT_REFUSED
    assert "bad instance 'hosth1'" in capsys.readouterr().err


def test_status_of_a_test_folder_whose_run_was_killed(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # its control.sock left behind: status said "connection refused" and not what the run's
    # state.json records (as it does given the run folder itself)
    from master.results.runstate import new_state, write_state

    run_folder = tmp_path / "t" / "20240101-000000"
    run_folder.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    state = new_state("t", 3, "test: t\n", "1.0")
    state.pid = gone.pid
    write_state(run_folder, state)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(run_folder / SOCKET_NAME))
    assert cli.main(["status", str(run_folder.parent)]) == EXIT_NO_RUN
    out = capsys.readouterr().out
    assert out.startswith(f"test t  ({run_folder})\nstate: dead (its master is gone)\n")
    assert f"continue it with: ivypy run --resume {run_folder}" in out
