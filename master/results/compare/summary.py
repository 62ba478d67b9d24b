"""A run's ``summary.csv`` read for comparison: a row per step x rollup instance, its metrics
as numbers (None for an empty cell), whether the step was valid and why not.

Owns the reading of that one file and the naming of its columns that are not metrics. Takes a
run folder (or the ``summary.csv`` in it, or a copy of it under any name); anything wrong with
it (missing, unreadable, no header, a garbled row, a row that repeats a step and instance, a
validity that is not ``true``/``false``) is a ``CompareError`` naming the file and line. The
``iops_setting`` of a step whose workloads run at ``max`` is ``max``: no number, so an empty
value. Must not match runs or compute changes.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

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
    """One step x rollup instance of a run. ``values``: every numeric metric cell (None when
    empty); ``line``: where it is in the file."""

    step_number: int
    step_name: str
    rollup_type: str
    rollup_instance: str
    valid: bool | None
    invalid_reason: str
    values: Mapping[str, float | None]
    line: int


@dataclass(frozen=True)
class RunSummary:
    """A run's summary: its rows in file order; ``metrics``: its numeric metric columns;
    ``text_columns``: other columns with a cell that is not a number (first such line)."""

    path: Path
    rows: tuple[SummaryRow, ...]
    metrics: tuple[str, ...]
    text_columns: Mapping[str, int]


def summary_path(run: Path) -> Path:
    """The ``summary.csv`` of a run folder (or ``run`` itself when it is that file, or any
    other file: a summary kept under its own name)."""
    if run.is_file() or (run.name == SUMMARY_FILE and not run.is_dir()):
        return run
    return run / SUMMARY_FILE


def _number(text: str) -> float | None:
    """A cell as a number, None when empty (or NaN); ValueError when it is not a finite one."""
    if not text.strip():
        return None
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"not finite: {text!r}")
    return None if math.isnan(value) else value


def parse_summary(path: Path, text: str) -> RunSummary:
    """The content ``text`` of the summary file at ``path``, parsed (pure)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames
    except csv.Error as exc:
        raise CompareError(f"a garbled header row: {exc}", what=f"{path}:1") from None
    if not header:
        raise CompareError("empty file: no header row", what=str(path))
    missing = [c for c in (*KEY_COLUMNS, "valid") if c not in header]
    if missing:
        raise CompareError(f"not a run summary: no column {', '.join(missing)}", what=str(path))
    candidates = [c for c in header if c not in NOT_METRICS]
    text_columns: dict[str, int] = {}
    rows: list[SummaryRow] = []
    seen: dict[tuple[str, str, str], int] = {}
    for raw in _records(path, reader):
        line = reader.line_num
        where = f"{path}:{line}"
        if None in raw or any(v is None for v in raw.values()):
            raise CompareError("row does not have the header's number of cells", what=where)
        key = (raw["step_name"], raw["rollup_type"], raw["rollup_instance"])
        if key in seen:
            raise CompareError(f"step {key[0]!r} {key[1]} {key[2]!r} again (first at line "
                               f"{seen[key]})", what=where)
        seen[key] = line
        if raw["valid"] not in _VALIDITY:
            raise CompareError(f"valid is {raw['valid']!r}, not true or false", what=where)
        try:
            step_number = int(raw["step_number"])
        except ValueError:
            raise CompareError(f"step_number {raw['step_number']!r} is not a whole number",
                               what=where) from None
        values: dict[str, float | None] = {}
        for column in candidates:
            if column in _NO_NUMBER and raw[column] == _NO_NUMBER[column]:
                values[column] = None
                continue
            try:
                values[column] = _number(raw[column])
            except ValueError:
                text_columns.setdefault(column, line)
        rows.append(SummaryRow(step_number, raw["step_name"], raw["rollup_type"],
                               raw["rollup_instance"], _VALIDITY[raw["valid"]],
                               raw.get("invalid_reason") or "", values, line))
    metrics = tuple(c for c in candidates if c not in text_columns)
    return RunSummary(path, tuple(rows), metrics, text_columns)


def _records(path: Path, reader: csv.DictReader[str]) -> Iterator[dict[str, str]]:
    """``reader``'s rows; a row csv cannot read (a quote left open, so a cell beyond csv's
    limit) is a ``CompareError`` naming the line it starts on."""
    start = reader.line_num + 1
    while True:
        try:
            raw = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CompareError(f"a garbled row: {exc}", what=f"{path}:{start}") from None
        yield raw
        start = reader.line_num + 1


def read_summary(run: Path) -> RunSummary:
    """The summary of the run folder ``run``: its ``summary.csv`` read and parsed."""
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
    return parse_summary(path, text)
