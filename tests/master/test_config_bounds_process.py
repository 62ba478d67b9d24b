"""``ivypy run`` on bad test files: an alias bomb and huge numbers are refused with one line on
stderr and exit 2, with no run folder (issue 40, "bounded input"); the alias bomb as a real
process (``python -m master``) too, in under 2 s of wall time and 100 MB of peak RSS.

The RSS is the child's own (``os.wait4``), measured from a small wrapper process: Linux
counts into a child's peak RSS the image it was forked from (``exec`` folds the old memory's
high-water mark in), so forked from this test process, with numpy loaded, any child "peaks" at
over 100 MB. Interpreter start and imports are most of the time: a refusal must not import the
run loop (numpy, asyncssh and the kernels: ~48 MB on their own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from master.cli import run as cli_run
from master.run import outcome
from tests.master.memhosts import run_cli

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "master" / "bad_configs"
MAX_WALL_S = 2.0
MAX_RSS_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Finished:
    status: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss_bytes: int


# Runs argv[3:] with stdout and stderr to the files argv[1] and argv[2]; prints its exit
# status, wall time and peak RSS (KiB, from wait4: this child's alone) as JSON.
WRAPPER = """\
import json, os, subprocess, sys, time
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    started = time.monotonic()
    proc = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.monotonic() - started
proc.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps([proc.returncode, wall_s, usage.ru_maxrss]))
"""


def _ivypy_run(path: Path, out_root: Path, tmp_path: Path) -> Finished:
    out_file, err_file = tmp_path / "stdout", tmp_path / "stderr"
    command = [sys.executable, "-m", "master", "run", str(path), "--output-root", str(out_root)]
    wrapper = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(out_file), str(err_file), *command],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert wrapper.returncode == 0, wrapper.stderr
    status, wall_s, max_rss_kib = json.loads(wrapper.stdout)
    return Finished(status, out_file.read_text(), err_file.read_text(), wall_s,
                    max_rss_kib * 1024)


REFUSED = [
    ("yaml_alias_bomb.yaml", "values after expanding aliases"),
    ("yaml_alias_bomb_merge_keys.yaml", "alias expansions"),
    ("iops_1e308.yaml", "steps[0].workloads[0].iops: must be at most 100,000,000 (got 1e308)"),
    ("lun_size_huge.yaml", "luns[0].size: must be at most 1024PiB (got 99999999PiB)"),
]


@pytest.mark.parametrize(("fixture", "expect"), REFUSED)
def test_refused_in_one_line_with_no_run_folder(
        fixture: str, expect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out_root = tmp_path / "out"
    status = run_cli(["run", str(BAD / fixture), "--output-root", str(out_root)], monkeypatch)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"ivypy: {BAD / fixture}:"), err
    assert expect in lines[0]
    assert out == ""
    assert not out_root.exists()


# the costliest refusal (the alias bomb: the parser's own bound) as a process: what is timed
# and weighed is the process's start, imports and refusal
@pytest.mark.parametrize(("fixture", "expect"), REFUSED[:1])
def test_refused_fast_and_small_as_a_process(fixture: str, expect: str, tmp_path: Path) -> None:
    out_root = tmp_path / "out"
    done = _ivypy_run(BAD / fixture, out_root, tmp_path)
    lines = done.stderr.splitlines()
    assert done.status == 2, done
    assert len(lines) == 1 and lines[0].startswith(f"ivypy: {BAD / fixture}:"), done.stderr
    assert expect in lines[0]
    assert done.stdout == ""
    assert not out_root.exists()
    assert done.wall_s < MAX_WALL_S, f"{done.wall_s:.2f} s"
    assert done.max_rss_bytes < MAX_RSS_BYTES, f"{done.max_rss_bytes / 2**20:.1f} MiB"


def test_a_refused_test_file_does_not_load_the_run_loop() -> None:
    code = ("import sys\nfrom master.cli import main as cli\n"
            f"status = cli.main(['run', {str(BAD / 'yaml_alias_bomb.yaml')!r}])\n"
            "print(status, 'master.run.lifecycle' in sys.modules, 'numpy' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.stdout.split() == ["2", "False", "False"], proc.stdout + proc.stderr


def test_the_config_exit_status_is_the_run_loops() -> None:
    assert cli_run.EXIT_CONFIG == outcome.EXIT_CONFIG
