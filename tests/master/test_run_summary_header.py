"""The run's summary.csv keeps one header while steps' gathered columns differ
(``Run._write_summary`` on a real ``RunOutput``, the rest of the run faked): the first step
fixes it, a later step's other gathered columns stay in its own summary.csv with an event, a
step without them leaves the run's cells empty, and a resumed run keeps its file's header."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from master.results.output import RunOutput
from master.results.schema import MEASURE_SUMMARY_COLUMNS, summary_columns
from master.run.lifecycle import Run

M1, M2 = "gather.arr.LDEV.busy_pct", "gather.arr.LDEV.reads"


def _fake_run(folder: Path, resuming: bool = False) -> SimpleNamespace:
    out = RunOutput(folder)
    out.resuming = resuming
    events: list[str] = []
    fake = SimpleNamespace(
        output=out, step_results={}, run_summary_header=None, events=events,
        cfg=SimpleNamespace(thresholds=()), curve_types={},
        event=lambda level, message, **kw: events.append(message),
        view=SimpleNamespace(step_summary=lambda *a, **k: None))
    fake._run_summary_header = lambda header: Run._run_summary_header(
        fake, header)  # type: ignore[arg-type]
    return fake


def _step(number: int, name: str, gathered: list[str]) -> SimpleNamespace:
    return SimpleNamespace(
        number=number, config=SimpleNamespace(name=name),
        recorder=SimpleNamespace(dir=f"step{number:04d}-{name}", show_type="all",
                                 summary_columns=summary_columns(gathered)))


def _row(number: int, name: str) -> dict[str, Any]:
    return {"step_number": number, "step_name": name, "rollup_type": "all",
            "rollup_instance": "all", "IOPS": 100.0, "valid": True, "invalid_reason": ""}


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_first_step_fixes_the_runs_gathered_columns(tmp_path: Path) -> None:
    fake = _fake_run(tmp_path)
    write = Run._write_summary
    write(fake, _step(0, "a", [M1]), [{**_row(0, "a"), M1: 30.0}],  # type: ignore[arg-type]
          [], valid=True)
    write(fake, _step(1, "b", [M1, M2]),  # type: ignore[arg-type]
          [{**_row(1, "b"), M1: 40.0, M2: 5.0}], [], valid=True)
    write(fake, _step(2, "c", []), [_row(2, "c")], [], valid=True)  # type: ignore[arg-type]
    fake.output.close()
    run = _read(tmp_path / "summary.csv")
    assert list(run[0]) == [*summary_columns([M1]), *MEASURE_SUMMARY_COLUMNS]
    assert [(r["step_name"], r[M1]) for r in run] == [("a", "30"), ("b", "40"), ("c", "")]
    (own,) = _read(tmp_path / "step0001-b/all/summary.csv")
    assert (own[M1], own[M2]) == ("40", "5")
    assert M1 not in _read(tmp_path / "step0002-c/all/summary.csv")[0]
    assert fake.events == [f"step b: gathered columns {M2} are not in the run's summary.csv "
                           "(the run's first step fixed its columns); the step's summary.csv "
                           "files have them"]


def test_a_resumed_run_keeps_its_files_header(tmp_path: Path) -> None:
    first = _fake_run(tmp_path)
    Run._write_summary(first, _step(0, "a", [M1, M2]),  # type: ignore[arg-type]
                       [{**_row(0, "a"), M1: 30.0, M2: 1.0}], [], valid=True)
    first.output.close()
    again = _fake_run(tmp_path, resuming=True)
    Run._write_summary(again, _step(1, "b", [M2]),  # type: ignore[arg-type]
                       [{**_row(1, "b"), M2: 2.0}], [], valid=True)
    again.output.close()
    run = _read(tmp_path / "summary.csv")
    assert [(r["step_name"], r[M1], r[M2]) for r in run] == [("a", "30", "1"), ("b", "", "2")]
    assert again.events == []
