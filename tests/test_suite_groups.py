"""The suite's worker groups (tests/conftest.py): files that share an expensive run or the
machine's test bed run on one xdist worker, every other file on its own; which files of
tests/slave run beside the others; the longest groups first."""

from __future__ import annotations

import pytest

from tests.conftest import LONG_FIRST, ROOT, SHARED, SHARES_THE_MACHINE, file_group


@pytest.mark.parametrize(("files", "together"), [
    # the quickstart run and the fault runs of tests/master/sharedruns.py
    (["tests/master/test_run_quickstart.py", "tests/master/test_run_summaryjson.py",
      "tests/master/test_run_killed.py"], True),
    # the test bed: the fixture's users and the test of scripts/testbed itself
    (["tests/master/test_run_multihost.py", "tests/master/test_transport.py",
      "tests/scripts/test_testbed.py"], True),
    # files that share nothing
    (["tests/test_readme.py", "tests/master/test_run_dfc.py", "tests/master/test_run_failures.py",
      "tests/slave/test_engine.py"], False),
])
def test_files_that_share_a_run_or_the_test_bed_are_one_group(files: list[str],
                                                               together: bool) -> None:
    groups = {file_group(f) for f in files}
    assert len(groups) == (1 if together else len(files)), groups
    if not together:
        assert groups == set(files)


def test_every_shared_fixture_is_one_some_test_file_names() -> None:
    """A fixture renamed without this list would split its files across workers again."""
    assert {file_group(f"tests/{name}") for name in ("master/test_run_quickstart.py",
                                                     "master/test_run_multihost.py")} \
        <= set(SHARED)


def test_every_file_said_to_share_the_machine_is_a_test_file_of_tests_slave() -> None:
    """A file renamed without this list is ``alone`` again (safe, but slower): the list names
    files that exist."""
    have = {p.name for p in (ROOT / "tests" / "slave").glob("test_*.py")}
    assert have >= SHARES_THE_MACHINE, sorted(SHARES_THE_MACHINE - have)


def test_the_longest_groups_are_files_that_exist_and_run_first(
        request: pytest.FixtureRequest) -> None:
    """A file renamed without ``LONG_FIRST`` would start where xdist puts it (safe, but the
    suite may end on it alone); each listed file's group is listed once."""
    have = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/**/test_*.py")}
    assert set(LONG_FIRST) <= have, sorted(set(LONG_FIRST) - have)
    groups = [file_group(f) for f in LONG_FIRST]
    assert len(set(groups)) == len(groups), groups
    collected = [item.path.relative_to(ROOT).as_posix() for item in request.session.items]
    if LONG_FIRST[0] in collected:  # the whole suite, or at least the first group, collected
        assert file_group(collected[0]) == groups[0], collected[:3]


def test_a_test_of_tests_slave_is_alone_unless_its_file_or_its_mark_says_it_runs_beside(
        request: pytest.FixtureRequest) -> None:
    engine_tests = ROOT / "tests" / "slave"
    for item in request.session.items:
        if item.path.is_relative_to(engine_tests):
            beside = (item.path.name in SHARES_THE_MACHINE
                      or item.get_closest_marker("beside") is not None)
            assert (item.get_closest_marker("alone") is None) == beside, item.nodeid

