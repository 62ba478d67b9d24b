"""Real runs that several test files read: each ``ivypy run`` here runs once per session, on
first use, and every test that asks for it gets the same run folder (a real run costs seconds
of start-up and steps; the suite has dozens).

Owns: the session fixtures (re-exported by tests/master/conftest.py) and the configs they run:
the quickstart to its end, and three runs ended by a fault (Ctrl-C, the slave killed, the
master killed) with what the fault's tests time or watch at the fault itself.
Must not: be written to by a test. A test that would change a run folder (a resume, a file it
adds) runs its own run, or works on a copy.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.master.runhelp import (
    ROOT,
    all_gone,
    interrupt,
    kill_the_slave,
    process_tree,
    run_folder,
    slave_pids,
    start_run,
    wait_rows,
    write_config,
)

QUICKSTART = ROOT / "configs" / "quickstart.yaml"

#: Three steps: a fault in the first leaves a step cut short and two never run.
FAULT_TEST = """\
test: {name}
subinterval_seconds: {sub}
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun-{name}", size: 16MiB, create: true}}
steps:
  - name: reads
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 500,
         read_fraction: 100%}}
    warmup_seconds: {sub}
    measure_seconds: {measure_s}
  - name: writes
    workloads:
      - {{name: rr, delete: true}}
      - {{name: mx, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 300,
         read_fraction: 70%}}
    measure_seconds: 1
  - name: after
    measure_seconds: 1
"""
#: The rows of the step the fault cuts short.
FAULT_ROWS = "step0000-reads/all/all.csv"
#: How long the slave's processes may outlive the master's end.
SLAVE_GONE_S = 2.0


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/quickstart.yaml as it ships, run through the CLI to its end (exit 0); its run
    folder."""
    out = tmp_path_factory.mktemp("quickstart")
    proc = subprocess.run(
        [sys.executable, "-m", "master", "run", str(QUICKSTART), "--output-root", str(out),
         "--plain"],
        capture_output=True, text=True, timeout=180, cwd=out,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (out / "quickstart").iterdir()
    return folder


@dataclass(frozen=True)
class FaultRun:
    """A run of FAULT_TEST ended by a fault once its first step had ``rows_before`` rows."""

    folder: Path
    returncode: int | None
    #: the master's stderr (empty when the master was SIGKILLed: nobody read it)
    stderr: str
    rows_before: int
    #: seconds from the fault to the master's exit
    took_s: float
    #: the slave and its workers, taken just before the fault
    slave_tree: list[psutil.Process]
    #: whether all of them were gone within SLAVE_GONE_S of the master's exit
    slave_gone: bool


def _fault_run(out: Path, name: str, sub_s: float, rows_before: int,
               fault: Callable[[subprocess.Popen[str], Path], None],
               read_output: bool = True, measure_s: float = 30) -> FaultRun:
    """Start FAULT_TEST, wait for ``rows_before`` rows of its first step, take the slave's
    process tree, make the fault and wait for the master (reading its output unless
    ``read_output`` is false: a SIGKILLed master's pipes may stay open in its slave)."""
    cfg = write_config(out, FAULT_TEST.format(name=name, sub=sub_s, measure_s=measure_s))
    proc = start_run(cfg, out)
    err = ""
    try:
        folder = run_folder(out, name)
        wait_rows(folder / FAULT_ROWS, rows_before)
        (pid,) = slave_pids(folder)
        tree = process_tree(pid)
        fault(proc, folder)
        t_fault = time.monotonic()
        if read_output:
            _, err = proc.communicate(timeout=30)
        else:
            proc.wait(30)
        took_s = time.monotonic() - t_fault
    finally:
        proc.kill()
    gone = all_gone(tree, SLAVE_GONE_S)
    return FaultRun(folder, proc.returncode, err, rows_before, took_s, tree, gone)


def _sigkill_the_master(proc: subprocess.Popen[str], folder: Path) -> None:
    proc.kill()


@pytest.fixture(scope="session")
def interrupted_run(tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    """Ctrl-C (SIGINT to the master) in the first step's measurement, at its third row of
    nine (4 s measured: 3 s left for the Ctrl-C to land in the step, and short enough that a
    resume of a copy runs the whole test soon)."""
    return _fault_run(tmp_path_factory.mktemp("interrupted"), "intr", 0.5, 3, interrupt,
                      measure_s=4)


@pytest.fixture(scope="session")
def slave_killed_run(tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    """The slave SIGKILLed in the first step's measurement, at its third row, with 1 s
    subintervals (the time to report it is bounded in subintervals)."""
    return _fault_run(tmp_path_factory.mktemp("slavekilled"), "lost", 1.0, 3, kill_the_slave)


@pytest.fixture(scope="session")
def master_killed_run(tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    """The master SIGKILLed in the first step's measurement, at its second row: nothing ran
    its end (no summary.json)."""
    return _fault_run(tmp_path_factory.mktemp("masterkilled"), "died", 0.5, 2,
                      _sigkill_the_master, read_output=False)
