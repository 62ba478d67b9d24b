"""The host's steal as a real-time test's excuse (``tests.slave.steal``, used by
tests/slave/conftest.py): a failed check is a skip only where the host took more than
``LIMIT`` of the CPUs over the test, in a second run as in the first; otherwise it fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slave.steal import LIMIT, HostSteal, excuse, steal_s

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("share", "skips"), [(0.0, False), (LIMIT, False), (LIMIT * 1.5, True),
                                              (0.37, True)])
def test_a_failed_check_is_excused_only_where_the_host_took_the_cpus(share: float,
                                                                     skips: bool) -> None:
    why = excuse(share, "AssertionError: (1, 1050)\nassert 250 <= 26")
    if skips:
        assert why is not None and f"{share:.1%} of the CPUs" in why
        assert why.endswith("a check failed: AssertionError: (1, 1050)")
    else:
        assert why is None


def test_the_share_is_the_steal_over_the_stretch_per_cpu() -> None:
    cpus = os.cpu_count() or 1
    clock = iter([100.0, 102.0])  # a stretch of 2 s
    stolen = iter([50.0, 50.0 + 0.25 * 2.0 * cpus])
    with HostSteal(lambda: next(clock), lambda: next(stolen)) as steal:
        pass
    assert steal.share == pytest.approx(0.25)


def test_the_machines_steal_is_read() -> None:
    assert steal_s() >= 0.0


def test_a_test_on_virtual_time_is_never_excused() -> None:
    assert excuse(0.37, "AssertionError: logs differ", virtual=True) is None
    assert excuse(0.37, "AssertionError: logs differ") is not None


# A suite run through tests/slave/conftest.py's hooks, the host's steal a stand-in each test
# sets: ``steal(share)`` makes the running test's share ``share`` (its clock a stretch of 1 s).
_CONFTEST = '''
import os, time
import pytest
from tests.slave import steal as host
from tests.slave.conftest import (pytest_runtest_call, pytest_runtest_makereport,
                                  pytest_runtest_protocol, pytest_terminal_summary)

STOLEN = [0.0]
host.steal_s = lambda: STOLEN[0]
RUNS = {}


def steal(share):
    STOLEN[0] += share * (os.cpu_count() or 1) * (time.monotonic() - START[0])


START = [0.0]


@pytest.fixture(autouse=True)
def _count(request):
    START[0] = time.monotonic()
    RUNS[request.node.name] = RUNS.get(request.node.name, 0) + 1
    yield RUNS
    with open(os.environ["RUNS_LOG"], "a") as f:
        f.write(f"{request.node.name} {RUNS[request.node.name]}\\n")
'''

_TESTS = '''
import time
import pytest
from conftest import RUNS, steal

alone = pytest.mark.alone


@alone
def test_excused_then_passes():
    time.sleep(0.05)
    if RUNS["test_excused_then_passes"] == 1:
        steal(0.3)
        assert 250 <= 26, "rate off"


@alone
def test_excused_twice():
    time.sleep(0.05)
    steal(0.2)
    assert False, "backlog not cleared"


@alone
def test_excused_then_fails_quiet():
    time.sleep(0.05)
    if RUNS["test_excused_then_fails_quiet"] == 1:
        steal(0.3)
    assert False, "CV 1.5"


@alone
def test_fails_quiet():
    assert False, "quiet"


def test_not_real_time():
    time.sleep(0.05)
    steal(0.3)
    assert False, "not alone"


@alone
def test_passes():
    pass
'''


def test_a_check_failed_under_steal_runs_again_and_that_run_is_its_result(tmp_path: Path
                                                                          ) -> None:
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_inner.py").write_text(_TESTS)
    log = tmp_path / "runs.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNS_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rsf",
         "-o", "markers=alone", "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    runs = dict(line.split() for line in log.read_text().splitlines())  # the last count of each
    assert runs == {"test_excused_then_passes": "2", "test_excused_twice": "2",
                    "test_excused_then_fails_quiet": "2", "test_fails_quiet": "1",
                    "test_not_real_time": "1", "test_passes": "1"}, runs
    assert "2 passed" in out and "1 skipped" in out and "3 failed" in out, out
    skip = next(line for line in out.splitlines() if line.startswith("SKIPPED"))
    assert "test_inner.py" in skip and "run twice (the first time the host took" in skip, skip
    assert "backlog not cleared" in skip, skip
    assert "FAILED test_inner.py::test_excused_then_fails_quiet" in out, out
    summary = out[out.index("run twice: a check failed while the host took the CPUs"):
                  out.index("short test summary info")]
    for name, share, result in (("excused_then_passes", 0.3, "passed"),
                                ("excused_twice", 0.2, "skipped"),
                                ("excused_then_fails_quiet", 0.3, "failed")):
        found = re.search(rf"test_inner.py::test_{name}: ([0-9.]+)% the first time; then (\w+)",
                          summary)
        assert found is not None, (name, summary)
        assert float(found[1]) / 100 == pytest.approx(share, abs=0.05), (name, found[0])
        assert found[2] == result, (name, found[0])
    assert "test_fails_quiet" not in summary and "test_not_real_time" not in summary, summary
