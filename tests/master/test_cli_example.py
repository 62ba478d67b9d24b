"""``ivypy example``: the shipped example tests listed, one written where asked (never over a
file already there unless --force), each one a test that loads; an unknown name refused with
the likely one."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.cli import main as cli
from master.cli.example import examples
from master.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_are_the_repositorys_configs() -> None:
    shipped = examples()
    assert sorted(shipped) == ["dfc", "gather", "quickstart", "sweep"]
    for name, file in (("quickstart", "quickstart"), ("dfc", "measure_dfc"), ("sweep", "sweep"),
                       ("gather", "gather")):
        assert (ROOT / "configs" / f"{file}.yaml").read_text() == shipped[name]


def test_listed_with_what_each_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["example"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["dfc", "gather", "quickstart", "sweep"]
    assert lines[2].split(None, 1)[1] == ("random reads at max IOPS, a 70/30 mix at fixed IOPS, "
                                          "sequential 128 KiB reads")


@pytest.mark.parametrize("name", ["quickstart", "dfc", "sweep", "gather"])
def test_written_where_asked_and_it_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], name: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["example", name]) == 0
    written = tmp_path / f"{name}.yaml"
    assert capsys.readouterr().out == (f"wrote {name}.yaml: ivypy run {name}.yaml --dry-run "
                                       "shows its plan\n")
    assert written.read_text() == examples()[name]
    assert load_config(str(written)).steps
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.yaml"]  # nothing else


def test_an_existing_file_is_left_alone_unless_forced(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("my own test\n")
    assert cli.main(["example", "sweep", "-o", str(mine)]) == 2
    assert capsys.readouterr().err == (f"ivypy: example: {mine} exists: left as it is (--force "
                                       "replaces it)\n")
    assert mine.read_text() == "my own test\n"
    assert cli.main(["example", "sweep", "-o", str(mine), "--force"]) == 0
    assert mine.read_text() == examples()["sweep"]


def test_printed_with_a_dash_and_unknown_names_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["example", "dfc", "-o", "-"]) == 0
    assert capsys.readouterr().out == examples()["dfc"]
    assert cli.main(["example", "quikstart"]) == 2
    assert capsys.readouterr().err == ("ivypy: example: no example 'quikstart' (did you mean "
                                       "quickstart?); there are dfc, gather, quickstart, sweep\n")


def test_an_unwritable_place_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["example", "dfc", "-o", str(tmp_path / "no" / "such" / "x.yaml")]) == 4
    assert "cannot write" in capsys.readouterr().err
