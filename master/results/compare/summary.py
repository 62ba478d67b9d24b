"""A run's ``summary.csv`` read for comparison: a row per step x rollup instance, its metrics
as numbers (None for an empty cell), whether the step was valid and why not.

Owns the reading of that one file and the naming of its columns that are not metrics. Takes a
run folder (or the ``summary.csv`` in it, or a copy of it under any name); anything wrong with
it (missing, unreadable, no header, a garbled row, a row that repeats a step and instance, a
validity that is not ``true``/``false``) is a ``CompareError`` naming the file and line. The
``iops_setting`` of a step whose workloads run at ``max`` is ``max``: no number, so an empty
value. Only the columns a comparison names are kept, and a cell is read as a number when it is
asked for: a run of 1,000 hosts x 100 workloads has 126,000 rows of 140 cells. Must not match
runs or compute changes.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from master.results.runfolder import picker
from protocol.errors import CompareError

SUMMARY_FILE = "summary.csv"
#: The columns that identify a row; every run-level summary.csv has them.
KEY_COLUMNS = ("step_number", "step_name", "rollup_type", "rollup_instance")
#: Columns that are neither key nor metric: where the measurement lies, validity, and the
#: measure criterion's text (``master.run.lifecycle.RUN_SUMMARY_COLUMNS``).
NOT_METRICS = frozenset({*KEY_COLUMNS, "first_subinterval", "last_subinterval", "valid",
                         "invalid_reason", "measure_criterion", "measure_values",
                         "measure_attained"})
_VALIDITY = {"true": True, "false": False, "": None}
#: Words a run writes in a numeric column where it has no number: read as an empty value.
_NO_NUMBER = {"iops_setting": "max"}


@dataclass(frozen=True)
class SummaryRow:
    """One step x instance of a run. ``values``: every numeric metric cell (None when
    empty), each read when asked; ``line``: where it is in the file."""

    step_number: int
    step_name: str
    rollup_type: str
    rollup_instance: str
    valid: bool | None
    invalid_reason: str
    values: MetricValues
    line: int


@dataclass(frozen=True)
class RunSummary:
    """A run's summary: its rows in file order; ``columns``: the columns that may be metrics
    (not ``NOT_METRICS``), of which those ``read`` were kept; ``metrics``: those read that
    are numeric; ``text_columns``: those read with a cell that is not a number (its first
    line). A column's cells are read as numbers when it is first asked about
    (``text_line``): a run of 100,000 workloads has 17 million cells."""

    path: Path
    rows: tuple[SummaryRow, ...]
    columns: tuple[str, ...]
    read: tuple[str, ...]
    _text_lines: dict[str, int | None] = field(default_factory=dict, compare=False,
                                               repr=False)

    def text_line(self, column: str) -> int | None:
        """The first line whose cell of ``column`` (one of ``read``) is not a number, None
        when every cell is one."""
        if column not in self._text_lines:
            if column not in self.read:
                raise KeyError(f"column {column!r} was not read")
            j = self.read.index(column)
            cells = [r.values.cells[j] for r in self.rows]
            bad = None
            for cell in dict.fromkeys(cells):  # each text once, in the order of the rows
                try:
                    _value(column, cell)
                except ValueError:
                    bad = cell
                    break
            self._text_lines[column] = (None if bad is None
                                        else self.rows[cells.index(bad)].line)
        return self._text_lines[column]

    def is_metric(self, column: str) -> bool:
        return column in self.read and self.text_line(column) is None

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(c for c in self.read if self.text_line(c) is None)

    @property
    def text_columns(self) -> dict[str, int]:
        return {c: line for c in self.read if (line := self.text_line(c)) is not None}


class MetricValues(Mapping[str, "float | None"]):
    """A row's cells of the columns read, each read as a number when asked (``_value``); a
    cell that is not one is not among them."""

    __slots__ = ("_at", "cells")

    def __init__(self, at: Mapping[str, int], cells: tuple[str, ...]) -> None:
        self._at, self.cells = at, cells

    def __getitem__(self, column: str) -> float | None:
        try:
            return _value(column, self.cells[self._at[column]])
        except ValueError:
            raise KeyError(column) from None

    def __iter__(self) -> Iterator[str]:
        return (c for c in self._at if c in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, column: object) -> bool:
        try:
            self[column]  # type: ignore[index]
        except KeyError:
            return False
        return True


def summary_path(run: Path) -> Path:
    """The ``summary.csv`` of a run folder (or ``run`` itself when it is that file, or any
    other file: a summary kept under its own name)."""
    if run.is_file() or (run.name == SUMMARY_FILE and not run.is_dir()):
        return run
    return run / SUMMARY_FILE


def _value(column: str, text: str) -> float | None:
    """A metric cell as a number: None when empty (or NaN, or the word a run writes there for
    no number, ``_NO_NUMBER``); ValueError when it is not a finite number."""
    if column in _NO_NUMBER and text == _NO_NUMBER[column]:
        return None
    if not text.strip():
        return None
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"not finite: {text!r}")
    return None if math.isnan(value) else value


def parse_summary(path: Path, text: str, read: Collection[str] | None = None) -> RunSummary:
    """The content ``text`` of the summary file at ``path``, parsed (pure); of the columns
    that may be metrics only those in ``read`` are kept (every one when None: a comparison
    reads a few of 140)."""
    rows_of = _records(path, text)
    header = next(rows_of, (0, []))[1]
    if not header:
        raise CompareError("empty file: no header row", what=str(path))
    missing = [c for c in (*KEY_COLUMNS, "valid") if c not in header]
    if missing:
        raise CompareError(f"not a run summary: no column {', '.join(missing)}", what=str(path))
    at = {c: header.index(c) for c in (*KEY_COLUMNS, "valid", "invalid_reason") if c in header}
    step_at, name_at, type_at, inst_at, valid_at = (
        at[c] for c in ("step_number", "step_name", "rollup_type", "rollup_instance", "valid"))
    reason_at = at.get("invalid_reason")
    columns = tuple(c for c in header if c not in NOT_METRICS)
    kept = tuple(c for c in columns if read is None or c in read)
    kept_at = {c: i for i, c in enumerate(kept)}
    pick = picker([header.index(c) for c in kept])
    width = len(header)
    rows: list[SummaryRow] = []
    seen: dict[tuple[str, str, str], int] = {}
    for line, cells in rows_of:
        where = f"{path}:{line}"
        if len(cells) != width:
            raise CompareError("row does not have the header's number of cells", what=where)
        key = (cells[name_at], cells[type_at], cells[inst_at])
        if key in seen:
            raise CompareError(f"step {key[0]!r} {key[1]} {key[2]!r} again (first at line "
                               f"{seen[key]})", what=where)
        seen[key] = line
        if cells[valid_at] not in _VALIDITY:
            raise CompareError(f"valid is {cells[valid_at]!r}, not true or false", what=where)
        try:
            step_number = int(cells[step_at])
        except ValueError:
            raise CompareError(f"step_number {cells[step_at]!r} is not a whole number",
                               what=where) from None
        rows.append(SummaryRow(step_number, key[0], key[1], key[2], _VALIDITY[cells[valid_at]],
                               cells[reason_at] if reason_at is not None else "",
                               MetricValues(kept_at, pick(cells)), line))
    return RunSummary(path, tuple(rows), columns, kept)


def _records(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """The header, then each row not blank, with the line it ends on. A file without quotes
    is split at its commas; otherwise the csv module reads it, and a row it cannot read (a
    quote left open, so a cell beyond csv's limit) is a ``CompareError`` naming the line it
    starts on (a garbled header row, line 1)."""
    if '"' not in text:
        # line ends only (\n, \r\n, \r), as csv reads them: str.splitlines would also split
        # at a form feed or U+2028 that a cell may hold
        for line, row in enumerate(io.StringIO(text, newline="").readlines(), start=1):
            row = row.rstrip("\r\n")
            if row:
                yield line, row.split(",")
        return
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CompareError(f"a garbled {'header row' if start == 1 else 'row'}: {exc}",
                               what=f"{path}:{start}") from None
        if cells:
            yield reader.line_num, cells
        start = reader.line_num + 1


def read_summary(run: Path, read: Collection[str] | None = None) -> RunSummary:
    """The summary of the run folder ``run``: its ``summary.csv`` read and parsed, of the
    columns that may be metrics those in ``read`` (every one when None)."""
    path = summary_path(run)
    if not path.parent.is_dir():
        raise CompareError("no such run folder", what=str(path.parent))
    try:
        text = path.read_text(encoding="utf-8-sig")  # a copy saved by a spreadsheet: a BOM
    except FileNotFoundError:
        raise CompareError("no summary.csv: not a run folder, or its run wrote no step yet",
                           what=str(path.parent)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"cannot read: {exc}", what=str(path)) from exc
    return parse_summary(path, text, read)
