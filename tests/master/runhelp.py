"""Helpers for tests that run ``ivypy run`` as a real subprocess and watch its output folder."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from tests.slave.test_engine_odirect import kernel_takes_o_direct

ROOT = Path(__file__).resolve().parents[2]


def takes_o_direct(directory: Path) -> bool:
    """Whether this kernel lets a file in ``directory`` be opened and read with O_DIRECT."""
    probe = directory / "probe.img"
    with open(probe, "wb") as fh:
        fh.truncate(1 << 20)
    try:
        return kernel_takes_o_direct(str(probe))
    finally:
        probe.unlink()


@contextlib.contextmanager
def memory_lun_dir(fallback: Path) -> Iterator[Path]:
    """A directory for a run's file LUN in /dev/shm, removed afterwards, where an O_DIRECT read
    works there (tmpfs takes it since Linux 6.6); else ``fallback``. For a test whose checks a
    stall of the host's virtual disk can move: beside the suite, one held a killed run's step
    30 % short of its IOPS (an I/O of 170 ms)."""
    shm = Path(tempfile.mkdtemp(prefix="ivypy-test-lun-", dir="/dev/shm"))
    try:
        yield shm if takes_o_direct(shm) else fallback
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def write_config(tmp: Path, text: str, name: str = "test.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def ivypy_here(*args: str) -> tuple[threading.Thread, dict[str, int]]:
    """``ivypy ARGS`` in this process, in a thread (its hosts real: local slave processes, SSH
    or exec hosts): where the master's own process is not what is tested, it is not started
    (the suite keeps its ``ivypy run`` processes few). The status lands in the box once it
    ends."""
    from master.cli.main import main

    box: dict[str, int] = {}

    def run() -> None:
        box["status"] = main(list(args))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def ended(thread: threading.Thread, box: dict[str, int], timeout_s: float = 240) -> int:
    """The status of ``ivypy_here``'s command, once it has ended (failing past ``timeout_s``)."""
    thread.join(timeout_s)
    assert not thread.is_alive(), f"the command did not end within {timeout_s:g} s"
    return box["status"]


def start_run(config: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "master", "run", str(config), "--output-root", str(out),
         "--plain", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out, env=env,
    )


def run_folder(out: Path, test: str, timeout_s: float = 30) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        d = out / test
        if d.is_dir():
            runs = sorted(d.iterdir())
            if runs:
                return runs[-1]
        time.sleep(0.05)
    raise TimeoutError(f"no run folder under {out / test}")


def poisson_rel(iops: float, seconds: float) -> float:
    """Five sigma of a Poisson count at ``iops`` over ``seconds``, relative to its mean: how
    far a random_independent workload's measured IOPS may honestly stray from its setting."""
    return 5 / math.sqrt(iops * seconds)


def warmup_backlog(subintervals: list[dict[str, str]], iops: float,
                   subinterval_s: float) -> float:
    """The I/Os a step paced at ``iops`` left undone in its warmup (its rows of a rollup CSV,
    ``phase`` and ``IOPS``): a schedule that fell behind catches up (no coordinated omission),
    so the step's measured window may do them on top of its rate."""
    return max(sum((iops - float(r["IOPS"])) * subinterval_s
                   for r in subintervals if r["phase"] == "warmup"), 0.0)


def rows(path: Path) -> list[dict[str, str]]:
    """The CSV file's rows as they are now: read whole first, then parsed, so that a file the
    run is writing meanwhile gives the rows of one moment (read as it grew, its header could be
    read empty and a row after it: a TypeError inside csv, fc26's)."""
    try:
        with open(path, newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        return []
    return list(csv.DictReader(io.StringIO(text, newline="")))


def wait_rows(path: Path, n: int, timeout_s: float = 60) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = rows(path)
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not reach {n} rows")


def slave_pids(folder: Path) -> list[int]:
    return [int(r["slave_pid"]) for r in rows(folder / "hosts.csv")]


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def lives(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs: not a zombie, not gone (it may go between any two looks
    at /proc, which psutil raises as NoSuchProcess)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def all_gone(procs: list[psutil.Process], timeout_s: float) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return not [p for p in alive if lives(p)]


def kill_the_slave(proc: subprocess.Popen[str], folder: Path) -> None:
    """An ``act`` for ``run_until``: SIGKILL the run's one slave."""
    (pid,) = slave_pids(folder)
    psutil.Process(pid).kill()


def interrupt(proc: subprocess.Popen[str], folder: Path) -> None:
    """An ``act`` for ``run_until``: Ctrl-C to the master."""
    proc.send_signal(signal.SIGINT)


def run_until(config: Path, out: Path, test: str, rows_file: str, n_rows: int,
              act: Callable[[subprocess.Popen[str], Path], None]
              ) -> tuple[subprocess.Popen[str], Path, str]:
    """Start ``ivypy run``, wait for ``n_rows`` rows of ``rows_file`` (relative to its run
    folder), ``act`` on it, and wait for the master to end: the process, its run folder and
    its stderr."""
    proc = start_run(config, out)
    try:
        folder = run_folder(out, test)
        wait_rows(folder / rows_file, n_rows)
        act(proc, folder)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc, folder, err
