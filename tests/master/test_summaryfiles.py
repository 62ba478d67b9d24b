"""A step's summary files from its rows' columns (``SummaryRows``) against the same rows
written cell by cell from their dicts: the same bytes in every rollup type's summary.csv
and the run's, whatever the step's extra cells, gathered columns and headers."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.results.csvfiles import LineTexts
from master.results.output import RunOutput
from master.results.schema import MEASURE_SUMMARY_COLUMNS, summary_columns
from master.results.summaryfiles import SummaryBlock, SummaryRows, with_column, write_summaries
from master.run.recorder import StepRecorder
from tests.master.test_recorder import (
    ROLLUPS,
    _record_subinterval,
    _Slaves,
    _workloads,
    settings_of,
)

GATHERED = ("gather.arr.LDEV.busy_pct",)


def _rows(tmp: Path, extra: dict[str, Any] | None, gathered: tuple[str, ...] = (),
          extra_invalid: str = "") -> tuple[RunOutput, StepRecorder, SummaryRows]:
    """A step of two hosts and three subintervals recorded, then summarised."""
    wl = _workloads()
    out = RunOutput(tmp)
    rec = StepRecorder(out, 2, "write, then read", ROLLUPS, 1.0, wl, settings_of(wl),
                       gathered=gathered)
    sim = _Slaves(rec)
    rng = np.random.default_rng(9)
    for k in range(3):
        joined = {"host": {g: np.array([1.5 * k, np.nan]) for g in gathered}}
        _record_subinterval(rec, sim, k, "measurement", rng, joined)
    _, rows, _ = rec.summarise([0, 1, 2], sim.window(0, 2), extra=extra,
                               extra_invalid=extra_invalid)
    assert isinstance(rows, SummaryRows)
    return out, rec, rows


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("summary.csv"))}


MEASURE = {"measure_criterion": "IOPS within 5%, 90% confidence",
           "measure_values": "1.2, 3.4", "measure_attained": True}


#: thresholds cells of some rows (a quoted one, one not ASCII), the others' empty
CELLS = {0: "passed: IOPS > 1 (5)", 3: 'FAILED: measure_criterion == "a, b" (x)',
         16: "UNTOLD: service_time_p99_ms < 2 µs (no value)"}


@pytest.mark.parametrize(("extra", "gathered", "invalid", "run_extra", "cells"), [
    (None, (), "", False, None),
    (MEASURE, (), "", False, None),
    ({"measure_criterion": 'a "quoted", criterion', "measure_attained": False}, (),
     "stopped at subinterval 2", False, None),
    (None, GATHERED, "", False, None),
    (MEASURE, GATHERED, "", True, None),  # the run's summary.csv lacks the gathered column
    (MEASURE, (), "", False, CELLS),  # thresholds judged
    (MEASURE, GATHERED, "", True, CELLS),
])
def test_summary_files_from_columns_are_the_files_from_dicts(
        tmp_path: Path, extra: dict[str, Any] | None, gathered: tuple[str, ...], invalid: str,
        run_extra: bool, cells: dict[int, str] | None) -> None:
    header = [*summary_columns(gathered), *MEASURE_SUMMARY_COLUMNS,
              *(["thresholds"] if cells else [])]
    run_header = [c for c in header if c not in gathered] if run_extra else header
    written = {}
    for how in ("columns", "dicts"):
        out, rec, given = _rows(tmp_path / how, extra, gathered, invalid)
        rows = given if how == "columns" else list(given)
        if cells:
            rows = with_column(rows, "thresholds", cells)
        if how == "columns":  # still in columns, and every file written from them
            assert isinstance(rows, SummaryRows)
            assert all(b.lines(h, rows.repeats) is not None
                       for b in rows.blocks for h in (header, run_header))
        with out.subinterval():
            write_summaries(out, rec.dir, rows, header, run_header)
        out.close()
        written[how] = _files(tmp_path / how)
    assert written["columns"] == written["dicts"]
    assert set(written["columns"]) == {"summary.csv", *(
        f"step0002-write_then_read/{t.type}/summary.csv" for t in ROLLUPS)}
    lines = written["columns"]["summary.csv"].decode().splitlines()
    assert len(lines) == 1 + 8 + 4 + 2 + 2 + 1  # header, workloads, LUNs, hosts, v+m, all
    if cells:
        got = {i: r["thresholds"] for i, r in enumerate(csv.DictReader(lines))
               if r["thresholds"]}
        assert got == CELLS


def test_a_header_the_columns_do_not_fit_is_written_from_the_dicts(tmp_path: Path) -> None:
    """A header in another order, or without the columns' last: the dict path, the same
    bytes as a plain list's."""
    out, rec, rows = _rows(tmp_path / "a", None)
    block = rows.blocks[0]
    header = [*summary_columns(), *MEASURE_SUMMARY_COLUMNS]
    assert block.lines(header) is not None
    assert block.lines([*header, "thresholds"]) is not None  # a tail column left empty
    swapped = [header[1], header[0], *header[2:]]
    assert block.lines(swapped) is None
    assert block.lines(header[:-4]) is None  # valid, invalid_reason not in it
    # some of the columns, the last kept: the run's summary.csv without a later step's
    # gathered column (test_summary_files_from_columns_are_the_files_from_dicts)
    assert block.lines([c for c in header if c != "IOPS"]) is not None
    last = block.columns[-1]
    assert block.lines([c for c in header if c != last]) is None
    with out.subinterval():
        write_summaries(out, rec.dir, rows, swapped, swapped)
    out.close()
    out2, rec2, rows2 = _rows(tmp_path / "b", None)
    with out2.subinterval():
        write_summaries(out2, rec2.dir, list(rows2), swapped, swapped)
    out2.close()
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_row_cell_the_header_lacks_is_refused_on_both_paths(tmp_path: Path) -> None:
    out, rec, rows = _rows(tmp_path, MEASURE)
    header = summary_columns()  # no measure columns
    for given in (rows, list(rows)):
        with pytest.raises(ValueError, match="not in the header"), out.subinterval():
            write_summaries(out, rec.dir, given, header, header)
    out.close()


def test_a_row_the_compiled_formatter_leaves_is_written_as_fmt_writes_it(
        tmp_path: Path) -> None:
    """Values the kernel may leave to Python (huge, tiny, negative zero, halfway cases) in a
    block of its own: its lines are those of the dicts path."""
    values = np.array([[1e300, -0.0, 5e-324, 0.5, 999_999.5, 123_456_789.5, np.nan, 7.0],
                       [2.675, 1.0000005, 1e15, -1e15, 0.1 + 0.2, 1 / 3, 1e-7, 8.0]])
    columns = tuple(f"c{j}" for j in range(values.shape[1]))
    names = ("x", 'y,"z"')
    block = SummaryBlock(0, "s", "workload", names, LineTexts(['x', '"y,""z"""']), columns,
                         values, np.array([False, True]), {"valid": True, "invalid_reason": ""})
    header = ["step_number", "step_name", "rollup_type", "rollup_instance", *columns,
              "valid", "invalid_reason"]
    rows = [{"step_number": 0, "step_name": "s", "rollup_type": "workload",
             "rollup_instance": n, **dict(zip(columns, v.tolist(), strict=True)),
             "valid": True, "invalid_reason": ""} for n, v in zip(names, values, strict=True)]
    rows[1]["c7"] = "max"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    out = RunOutput(tmp_path / "a")
    with out.subinterval():
        write_summaries(out, "step", SummaryRows([block]), header, header)
    out.close()
    out = RunOutput(tmp_path / "b")
    with out.subinterval():
        write_summaries(out, "step", rows, header, header)
    out.close()
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_summary_rows_read_as_mappings_of_the_cells_a_dict_row_had(tmp_path: Path) -> None:
    out, _, rows = _rows(tmp_path, MEASURE)
    out.close()
    assert len(rows) == 17 and len(list(rows)) == 17 and len(rows[2:5]) == 3
    first, last = rows[0], rows[-1]
    assert list(first) == [*summary_columns(), *MEASURE_SUMMARY_COLUMNS]
    assert (first["step_number"], first["step_name"], first["rollup_type"],
            first["rollup_instance"]) == (2, "write, then read", "all", "all")
    assert last["rollup_type"] == "vendor+model"
    assert repr(rows[-1]) == repr(rows[16]) == f"SummaryRow({dict(last)!r})"
    for key in ("first_subinterval", "last_subinterval", "workloads"):
        assert type(first[key]) is int
    assert (first["first_subinterval"], first["last_subinterval"], first["workloads"]) == (
        0, 2, 8)
    assert type(first["IOPS"]) is float and first["IOPS"] > 0
    assert type(first["measurement_seconds"]) is float and first["measurement_seconds"] == 3.0
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    assert by[("workload", "h1:/dev/sd0:b")]["iops_setting"] == "max"  # iops None: max
    assert by[("workload", "h1:/dev/sd0:a")]["iops_setting"] == 100.0
    assert first["valid"] is True and first["measure_criterion"] == MEASURE["measure_criterion"]
    assert first.get("thresholds") is None and "thresholds" not in first
    with pytest.raises(KeyError):
        first["thresholds"]
    with pytest.raises(IndexError):
        rows[17]
