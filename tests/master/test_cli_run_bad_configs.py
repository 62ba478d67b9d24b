"""Every bad config fixture through ``ivypy run``: one line on stderr naming file, line and key
path, exit 2, no run folder, and no host contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.cli import main as cli
from master.cli import run as cli_run

FIXTURES = sorted((Path(__file__).parent / "bad_configs").glob("*.yaml"))


@pytest.fixture(autouse=True)
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the run started: hosts would have been contacted")

    monkeypatch.setattr(cli_run, "run_test", refuse)


def test_there_are_enough_fixtures() -> None:
    assert len(FIXTURES) >= 15


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_bad_config_exit_2_one_line(path: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    out_root = tmp_path / "out"
    status = cli.main(["run", str(path), "--output-root", str(out_root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1, err
    assert str(path.name) in err[0] and expect in err[0], (err[0], expect)
    assert not out_root.exists()


def test_a_run_in_process_leaves_the_root_loggers_handlers_and_level_as_it_found_them(
        tmp_path: Path) -> None:
    """``ivypy run`` called in-process (tests, a wrapper) removes its console handler: left on
    a stream the caller closes, it turned every later log line into a logging error."""
    import logging

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    assert cli.main(["run", str(FIXTURES[0]), "--output-root", str(tmp_path)]) == 2
    assert (list(root.handlers), root.level) == before
