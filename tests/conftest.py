"""How ``scripts/test`` shares the suite out: the tests not marked ``alone`` on pytest-xdist
workers (``--dist loadfile``, two per CPU), since they mostly wait (on runs of in-memory hosts,
which keep real time, and on the few ``ivypy run`` subprocesses left); then those marked
``alone``, one at a time with nothing beside them: the tests of tests/slave that time the
engine, measure its CPU or bound how long something takes (all but ``SHARES_THE_MACHINE``),
and any other that changes what the whole machine shares (``fs.aio-max-nr``).

Owns ``pytest_collection_modifyitems`` (the ``alone`` mark on tests/slave, and the files of
``LONG_FIRST`` first) and ``pytest_xdist_make_scheduler``: ``loadfile`` (a file's tests on one
worker, so that its module fixtures are made once), with the files that name a fixture of
``SHARED`` on one worker together, in the collection's order. Must not change what a test
does.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest

#: fixtures wider than a file that are expensive (a run made once a session,
#: tests/master/sharedruns.py) or the machine's one (the test bed's namespaces, which
#: tests/scripts/test_testbed.py brings up and down itself): the files whose text names one
#: run on the same worker (a file that only mentions one joins too, which costs nothing)
SHARED = ("quickstart_run", "interrupted_run", "slave_killed_run", "master_killed_run",
          "testbed")
ROOT = Path(__file__).resolve().parents[1]


#: the files of tests/slave whose tests neither time anything nor measure CPU nor bound how
#: long a step takes (pure logic, virtual time, compiling, discovery with generous waits): they
#: run beside the others. A new file of tests/slave is ``alone`` until it is named here, or
#: until its tests are marked ``beside``: judged on what they did (bytes, the I/Os the kernel
#: saw, order, counts with their slack), their real-time runs made long enough by count, not
#: by time, whatever the load (``Control(until=...)``: a loop held off the CPU does the same
#: I/Os later; the differential and write-data tests on real devices once ran 200 ms each and
#: one, beside the others, had not entered the compiled loop by then)
SHARES_THE_MACHINE = frozenset({
    "test_compiled_group.py",
    "test_datapattern.py", "test_devstats.py", "test_engine_await_choose.py", "test_engine_caps.py",
    "test_engine_differential_fake.py", "test_engine_layout.py",
    "test_engine_paced_draws.py", "test_engine_permission.py", "test_engine_verify.py",
    "test_engine_verify_device.py", "test_worker_verify.py",
    "test_lun_info.py", "test_lun_mark.py", "test_lunlock.py", "test_luns.py",
    "test_luns_growth.py",
    "test_main_untimed.py",
    "test_luns_layout.py", "test_compiled_loop_shipping.py", "test_preflight.py",
    "test_readback.py",
    "test_sequencer.py", "test_session.py", "test_session_fuzz.py", "test_session_refusals.py",
    "test_session_stopping.py", "test_rates.py", "test_signatures.py", "test_steal.py",
    "test_windowstore.py",
    "test_worker_backend.py", "test_worker_stop_errors.py",
})


#: the longest worker groups of the part run beside each other, longest first (seconds of
#: test time in a run of the part on the 2-core VM, 2026-11-30): their files run first, so
#: that none starts late and runs on alone at the end. xdist's own order (the groups of most
#: tests first) started the one-test 50 s install test last of 126 files.
LONG_FIRST = (
    "tests/master/test_run_quickstart.py",  # the shared runs' group: 60
    "tests/master/test_run_verify.py",  # 58 (data verification's runs on a loop device)
    "tests/master/test_run_multihost.py",  # the test bed's group: 41
    "tests/test_install.py",  # 22-45 (a wheel, and pipx as nobody, from a read-only checkout)
    "tests/slave/test_engine_write_data.py",  # 34
    "tests/master/test_report_chromium.py",  # 26
    "tests/slave/test_engine_differential_fake.py",  # 25
    "tests/slave/test_engine_differential.py",  # 14
    "tests/slave/test_engine_verify_device.py",  # 14
    "tests/slave/test_compiled_group.py",  # 13
    "tests/master/test_fiologs_cparse.py",  # 13
    "tests/master/test_run_failures.py",  # 12
    "tests/slave/test_worker.py",  # 11
    "tests/master/test_live_metrics.py",  # 11
)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of tests/slave are ``alone`` but for the files of ``SHARES_THE_MACHINE`` and
    the tests marked ``beside``; a test marked ``pair`` must be ``alone`` (a usage error
    otherwise); the files of the groups of ``LONG_FIRST`` first, in its order (each file's
    tests in theirs)."""
    engine_tests = ROOT / "tests" / "slave"
    for item in items:
        if (item.path.is_relative_to(engine_tests)
                and item.path.name not in SHARES_THE_MACHINE
                and item.get_closest_marker("beside") is None):
            item.add_marker(pytest.mark.alone)
        if item.get_closest_marker("pair") is not None and item.get_closest_marker(
                "alone") is None:  # it would run in the first part and in the pairs
            raise pytest.UsageError(f"{item.nodeid}: marked pair but not alone")
    rank = {file_group(path): i for i, path in reversed(list(enumerate(LONG_FIRST)))}
    items.sort(key=lambda item: rank.get(
        file_group(item.path.relative_to(ROOT).as_posix()), len(LONG_FIRST)))


@functools.cache
def file_group(path: str, shared: tuple[str, ...] = SHARED) -> str:
    """The worker group of test file ``path`` (relative to the checkout): the first fixture of
    ``shared`` its text names (fixtures named together in any file are one group), or itself."""
    names = set(re.findall(r"\b(?:" + "|".join(shared) + r")\b",
                           (ROOT / path).read_text(errors="replace")))
    if not names:
        return path
    joined = _joined(shared)
    return min(joined[name] for name in names)


@functools.cache
def _joined(shared: tuple[str, ...]) -> dict[str, str]:
    """Each fixture of ``shared`` and the one that stands for every fixture some test file
    names together with it (a union over the files of tests/)."""
    parent = {name: name for name in shared}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    pattern = re.compile(r"\b(?:" + "|".join(shared) + r")\b")
    for test in sorted(ROOT.glob("tests/**/test_*.py")):
        names = sorted(set(pattern.findall(test.read_text(errors="replace"))))
        for other in names[1:]:
            parent[root(other)] = root(names[0])
    return {name: root(name) for name in shared}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the files of one ``file_group`` on one worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Grouped(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return file_group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False  # the collection's order: LONG_FIRST's first
    return _Grouped(config, log)
