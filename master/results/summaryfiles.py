"""A step's summary rows: dicts for those who read them, columns for the files.

Owns ``SummaryRows`` (a step's summary rows as the dicts its readers take, the end-of-run
table, thresholds, the run's results, with the same rows in columns: ``SummaryBlock``, one per
rollup type) and ``write_summaries``, which puts them into each rollup type's summary.csv and
the run's summary.csv: from the columns in one compiled pass per rollup type where the rows are
a ``SummaryRows`` whose columns are the file's, else cell by cell from the dicts (``fmt``, as
``CsvAppender.write`` does). Both give the same bytes. It does not work out a row's numbers
(``master.run.recorder``) nor say which columns a file has (``master.results.schema``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from master.results.csvfiles import LineTexts, csv_text, fmt, format_lines, safe_name
from master.results.output import RunOutput

#: the columns before a summary row's numbers: named by the block, not by its values
LEADING_COLUMNS = ("step_number", "step_name", "rollup_type", "rollup_instance")


@dataclass(frozen=True)
class SummaryBlock:
    """One rollup type's summary rows in columns. A row is ``LEADING_COLUMNS`` (the step's
    number and name, the type, ``names[i]``), then ``columns`` (``values[i]``: NaN an empty
    cell; the last one ``max`` where ``is_max[i]``), then ``tail``'s cells, the same in every
    row of the block."""

    step_number: int
    step_name: str
    rollup_type: str
    names: tuple[str, ...]
    texts: LineTexts  # ``csv_text`` of each name
    columns: tuple[str, ...]
    values: npt.NDArray[np.float64]  # (len(names), len(columns))
    is_max: npt.NDArray[np.bool_]
    tail: Mapping[str, Any]

    def lines(self, header: Sequence[str],
              repeats: Sequence[tuple[int, int, int]] = ()) -> str | None:
        """Every row as ``CsvAppender.write`` writes it under ``header``; None where the
        header is not ``LEADING_COLUMNS``, ``columns``, then columns that take every cell of
        ``tail`` (a ``tail`` cell the header lacks is the dict path's error to raise).
        ``repeats``: ``format_lines``' repeated blocks, in ``columns``' numbering."""
        m = len(self.columns)
        leading = len(LEADING_COLUMNS)
        rest = header[leading + m:]
        if (tuple(header[:leading]) != LEADING_COLUMNS
                or tuple(header[leading:leading + m]) != self.columns
                or not set(self.tail) <= set(rest)):
            return None
        head = ",".join([fmt(self.step_number), csv_text(self.step_name),
                         csv_text(self.rollup_type)]) + ","
        tail = "".join("," + csv_text(fmt(self.tail.get(c))) for c in rest)
        data, ends, own = format_lines(self.values, head, self.texts, self.is_max, "max",
                                       repeats, tail=tail)
        if not own:
            return data.tobytes().decode("utf-8")
        raw = data.tobytes()
        starts = [0, *ends[:-1].tolist()]
        return "".join(own[i] if i in own else raw[a:b].decode("utf-8")
                       for i, (a, b) in enumerate(zip(starts, ends.tolist(), strict=True)))


class SummaryRows(list[dict[str, Any]]):
    """A step's summary rows (type by type, each type's instances in order), with the same
    rows in columns (``blocks``, one per rollup type, in that order)."""

    def __init__(self, rows: Iterable[dict[str, Any]], blocks: Sequence[SummaryBlock],
                 repeats: Sequence[tuple[int, int, int]] = ()) -> None:
        super().__init__(rows)
        self.blocks = tuple(blocks)
        self.repeats = tuple(repeats)


def write_summaries(output: RunOutput, step_dir: str, rows: Sequence[Mapping[str, Any]],
                    header: Sequence[str], run_header: Sequence[str]) -> None:
    """Each row into ``<step_dir>/<rollup type>/summary.csv`` (``header``) and into the run's
    summary.csv (``run_header``: a row's cells of columns it lacks are left out)."""
    if not rows:
        return
    run = output.table("summary.csv", run_header)
    blocks, repeats = (rows.blocks, rows.repeats) if isinstance(rows, SummaryRows) else ((), ())
    if blocks and sum(len(b.names) for b in blocks) == len(rows):
        texts = [b.lines(header, repeats) for b in blocks]
        if all(t is not None for t in texts):
            for block, text in zip(blocks, texts, strict=True):
                assert text is not None
                own = output.table(f"{step_dir}/{safe_name(block.rollup_type)}/summary.csv",
                                   header)
                if text:
                    own.append_now(text)
            if list(run_header) == list(header):
                whole = "".join(t for t in texts if t)
                if whole:
                    run.append_now(whole)
                return
            _write_dicts(run, rows, run_header)
            return
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_type.setdefault(str(row["rollup_type"]), []).append(row)
    for rollup_type, mine in by_type.items():
        output.table(f"{step_dir}/{safe_name(rollup_type)}/summary.csv", header).write_many(
            mine)
    _write_dicts(run, rows, run_header)


def _write_dicts(table: Any, rows: Sequence[Mapping[str, Any]], header: Sequence[str]) -> None:
    """The rows' cells of ``header``'s columns into ``table``."""
    kept = set(header)
    table.write_many([{c: v for c, v in row.items() if c in kept} for row in rows])
