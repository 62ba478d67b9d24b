"""A step's summary rows: kept in columns, read as mappings, written in bulk.

Owns ``SummaryRows`` (a step's summary rows in columns, ``SummaryBlock``, one per rollup type,
read by those who take rows, the end-of-run table, thresholds, the run's results, as a
sequence of mappings, ``SummaryRow``, each made when it is read: 126,000 rows of 140 cells as
dicts would cost seconds of a step's end) and ``write_summaries``, which puts rows into each
rollup type's summary.csv and the run's summary.csv: from the columns in one compiled pass per
rollup type where the rows are a ``SummaryRows`` whose columns are the file's (or some of
them: the run's summary.csv), a thresholds cell per row included (``with_column``), else cell
by cell from the mappings (``fmt``, as ``CsvAppender.write`` does). Both give the same bytes. It
does not work out a row's numbers (``master.run.recorder``) nor say which columns a file has
(``master.results.schema``).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, overload

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
    row of the block but where ``row_tail`` gives a row its own (a thresholds cell). Read as a
    mapping, a cell of ``int_columns`` is an int, the others of ``columns`` floats (NaN where
    empty)."""

    step_number: int
    step_name: str
    rollup_type: str
    names: tuple[str, ...]
    texts: LineTexts  # ``csv_text`` of each name
    columns: tuple[str, ...]
    values: npt.NDArray[np.float64]  # (len(names), len(columns))
    is_max: npt.NDArray[np.bool_]
    tail: Mapping[str, Any]
    int_columns: frozenset[str] = frozenset()
    #: row → its own cells of some of ``tail``'s columns
    row_tail: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    @cached_property
    def keys(self) -> tuple[str, ...]:
        """A row's keys, in order."""
        return (*LEADING_COLUMNS, *self.columns, *self.tail)

    @cached_property
    def _at(self) -> dict[str, int]:
        return {c: j for j, c in enumerate(self.columns)}

    def cell(self, i: int, key: str) -> Any:
        """Row ``i``'s cell of ``key`` (``KeyError`` where the row has none)."""
        j = self._at.get(key)
        if j is not None:
            if j == len(self.columns) - 1 and self.is_max[i]:
                return "max"
            value = self.values[i, j]
            return int(value) if key in self.int_columns else float(value)
        if key in self.tail:
            own = self.row_tail.get(i)
            return own[key] if own is not None and key in own else self.tail[key]
        leading = (self.step_number, self.step_name, self.rollup_type)
        if key == "rollup_instance":
            return self.names[i]
        if key in LEADING_COLUMNS:
            return leading[LEADING_COLUMNS.index(key)]
        raise KeyError(key)

    def with_cells(self, column: str, cells: Mapping[int, Any], default: Any = "") -> SummaryBlock:
        """This block with tail column ``column``: ``default`` in every row but those of
        ``cells`` (row → its cell)."""
        row_tail = {i: dict(c) for i, c in self.row_tail.items()}
        for i, value in cells.items():
            row_tail.setdefault(i, {})[column] = value
        return replace(self, tail={**self.tail, column: default}, row_tail=row_tail)

    def lines(self, header: Sequence[str],
              repeats: Sequence[tuple[int, int, int]] = ()) -> bytes | None:
        """Every row as ``CsvAppender.write`` writes it under ``header`` (UTF-8); None where the
        header is not ``LEADING_COLUMNS``, some of ``columns`` in their order (the last one
        among them: the run's summary.csv may lack a later step's gathered columns), then
        columns that take every cell of ``tail`` (a ``tail`` cell the header lacks is the
        dict path's error to raise). ``repeats``: ``format_lines``' repeated blocks, in
        ``columns``' numbering."""
        leading = len(LEADING_COLUMNS)
        if tuple(header[:leading]) != LEADING_COLUMNS:
            return None
        keep: list[int] = []
        for c in header[leading:]:
            j = self._at.get(c)
            if j is None or (keep and j <= keep[-1]):
                break
            keep.append(j)
        rest = header[leading + len(keep):]
        if (not keep or keep[-1] != len(self.columns) - 1
                or any(c in self._at for c in rest) or not set(self.tail) <= set(rest)):
            return None
        values = self.values
        if len(keep) < len(self.columns):
            values = values[:, keep]
            repeats = _kept_repeats(repeats, keep)
        head = ",".join([fmt(self.step_number), csv_text(self.step_name),
                         csv_text(self.rollup_type)]) + ","
        tail = self._tail_text(rest, self.tail)
        data, ends, own = format_lines(values, head, self.texts, self.is_max, "max",
                                       repeats, tail=tail)
        for i, cells in self.row_tail.items():  # a row's own tail in place of the block's
            line = own[i] if i in own else data[ends[i - 1] if i else 0:ends[i]].tobytes(
                ).decode("utf-8")
            own[i] = line[:len(line) - len(tail) - 2] + self._tail_text(
                rest, {**self.tail, **cells}) + "\r\n"
        if not own:
            return data.tobytes()
        raw = data.tobytes()
        starts = [0, *ends[:-1].tolist()]
        return b"".join(own[i].encode("utf-8") if i in own else raw[a:b]
                        for i, (a, b) in enumerate(zip(starts, ends.tolist(), strict=True)))

    @staticmethod
    def _tail_text(rest: Sequence[str], cells: Mapping[str, Any]) -> str:
        return "".join("," + csv_text(fmt(cells.get(c))) for c in rest)


def _kept_repeats(repeats: Sequence[tuple[int, int, int]], keep: Sequence[int]
                  ) -> list[tuple[int, int, int]]:
    """``repeats`` renumbered for the columns ``keep`` (ascending); a block any of whose
    columns or source columns is not kept is left out (the text is the same without it)."""
    at = {j: n for n, j in enumerate(keep)}
    out = []
    for start, src, length in repeats:
        if all(start + x in at and src + x in at for x in range(length)):
            first, source = at[start], at[src]
            if at[start + length - 1] - first == length - 1 == at[src + length - 1] - source:
                out.append((first, source, length))
    return out


class SummaryRow(Mapping[str, Any]):
    """Row ``i`` of a ``SummaryBlock``, its cells read from the block's columns."""

    __slots__ = ("_block", "_i")

    def __init__(self, block: SummaryBlock, i: int) -> None:
        self._block, self._i = block, i

    def __getitem__(self, key: str) -> Any:
        return self._block.cell(self._i, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._block.keys)

    def __len__(self) -> int:
        return len(self._block.keys)

    def __repr__(self) -> str:
        return f"SummaryRow({dict(self)!r})"


class SummaryRows(Sequence[Mapping[str, Any]]):
    """A step's summary rows, type by type (``blocks``, one per rollup type, in that order),
    each type's instances in order; ``repeats``: ``format_lines``' repeated blocks of their
    columns."""

    def __init__(self, blocks: Sequence[SummaryBlock],
                 repeats: Sequence[tuple[int, int, int]] = ()) -> None:
        self.blocks = tuple(blocks)
        self.repeats = tuple(repeats)
        self._starts = [0]
        for block in self.blocks:
            self._starts.append(self._starts[-1] + len(block.names))

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, i: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Mapping[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        at = operator.index(i)
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(f"summary row {i} of {len(self)}")
        b = bisect.bisect_right(self._starts, at) - 1
        return SummaryRow(self.blocks[b], at - self._starts[b])

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for block in self.blocks:
            for i in range(len(block.names)):
                yield SummaryRow(block, i)

    def with_cells(self, column: str, cells: Mapping[int, Any], default: Any = ""
                   ) -> SummaryRows:
        """These rows with a last column ``column``: ``cells`` (row number → its cell),
        ``default`` in the others; still in columns."""
        blocks = []
        for b, block in enumerate(self.blocks):
            lo, hi = self._starts[b], self._starts[b + 1]
            blocks.append(block.with_cells(
                column, {i - lo: v for i, v in cells.items() if lo <= i < hi}, default))
        return SummaryRows(blocks, self.repeats)


def with_column(rows: Sequence[Mapping[str, Any]], column: str, cells: Mapping[int, Any],
                default: Any = "") -> Sequence[Mapping[str, Any]]:
    """``rows`` each with a last cell of ``column``: ``cells[i]`` for row ``i``, else
    ``default``. ``SummaryRows`` stay in columns (``SummaryRows.with_cells``); other rows
    become dicts."""
    if isinstance(rows, SummaryRows):
        return rows.with_cells(column, cells, default)
    return [{**row, column: cells.get(i, default)} for i, row in enumerate(rows)]


def write_summaries(output: RunOutput, step_dir: str, rows: Sequence[Mapping[str, Any]],
                    header: Sequence[str], run_header: Sequence[str]) -> None:
    """Each row into ``<step_dir>/<rollup type>/summary.csv`` (``header``) and into the run's
    summary.csv (``run_header``: a row's cells of columns it lacks are left out)."""
    if not rows:
        return
    texts = _block_texts(rows, header)
    if texts is None:
        by_type: dict[str, list[Mapping[str, Any]]] = {}
        for row in rows:
            by_type.setdefault(str(row["rollup_type"]), []).append(row)
        for rollup_type, mine in by_type.items():
            output.table(f"{step_dir}/{safe_name(rollup_type)}/summary.csv",
                         header).write_many(mine)
    else:
        for rollup_type, text in texts:
            own = output.table(f"{step_dir}/{safe_name(rollup_type)}/summary.csv", header)
            if text:
                own.append_bytes(text)
    run = output.table("summary.csv", run_header)
    run_texts = texts if list(run_header) == list(header) else _block_texts(rows, run_header)
    if run_texts is not None:
        run.append_bytes(b"".join(text for _, text in run_texts))
    else:
        kept = set(run_header)
        run.write_many([{c: v for c, v in row.items() if c in kept} for row in rows])


def _block_texts(rows: Sequence[Mapping[str, Any]], header: Sequence[str]
                 ) -> list[tuple[str, bytes]] | None:
    """Each rollup type's lines under ``header`` from the rows' columns; None where the rows
    are not ``SummaryRows`` or some block's columns are not the header's."""
    if not isinstance(rows, SummaryRows):
        return None
    texts = []
    for block in rows.blocks:
        text = block.lines(header, rows.repeats)
        if text is None:
            return None
        texts.append((block.rollup_type, text))
    return texts
