"""Reading fio histogram logs (``*_clat_hist.N.log``, plain or gzip) fast and in bounded memory.

Owns opening a log (gzip detected by its magic bytes, not its name), cutting it into chunks of
whole lines, turning each chunk into a ``HistBlock`` (time stamps, directions, line numbers and
the non-zero histogram cells as sparse triplets), and reporting malformed lines by file and line.
It must not interpret time (that is ``align``) nor repair client/server logs (``repair``).

A line is ``time_ms, direction, block_size, c0, c1, ..., c{n-1}``: non-negative decimal integers,
direction 0 (read), 1 (write) or 2 (trim), time stamps not decreasing within a direction.

Speed: fio writes every line as ``"%llu, "``-separated integers and almost every cell is ``0``.
The fast path checks that canonical shape with a handful of whole-chunk byte comparisons, then
reads only the digit runs that start with 1-9 (the non-zero cells and header fields): a cell's
column follows from its byte offset in the line, because every zero cell takes exactly three
bytes (``"0, "``). A chunk that is not canonical (blank lines, CR/LF, other spacing, bad
tokens) goes through the general path, line by line, which names the offending line.
"""

from __future__ import annotations

import gzip
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.errors import LogFormatError

logger = logging.getLogger(__name__)

HEADER_FIELDS: Final = 3  # time_ms, direction, block size
N_DIRECTIONS: Final = 3  # 0 read, 1 write, 2 trim
DIRECTION_NAMES: Final = ("read", "write", "trim")
DEFAULT_CHUNK_BYTES: Final = 8 << 20
_MAX_DIGITS: Final = 18  # larger values do not fit int64 safely; fio never logs them
_GZIP_MAGIC: Final = b"\x1f\x8b"
_MAX_WARNINGS: Final = 20

IntArray = npt.NDArray[np.int64]


@dataclass
class HistBlock:
    """Consecutive rows of one log. Histogram cells are sparse: only non-zero ones are kept."""

    times_ms: IntArray  # per row
    dirs: IntArray  # per row: 0 read, 1 write, 2 trim
    line_no: IntArray  # per row, 1-based line number in the file
    entry_row: IntArray  # per non-zero cell: row index within this block
    entry_col: IntArray  # per non-zero cell: histogram column
    entry_count: IntArray  # per non-zero cell: the count (> 0)
    n_columns: int

    @property
    def n_rows(self) -> int:
        return int(self.times_ms.size)

    def dense(self, rows: IntArray | None = None) -> IntArray:
        """The rows (all, or those indexed by ``rows``, in that order) as a dense
        (rows x columns) int64 matrix."""
        if rows is None:
            out = np.zeros((self.n_rows, self.n_columns), dtype=np.int64)
            out[self.entry_row, self.entry_col] = self.entry_count
            return out
        where = np.full(self.n_rows, -1, dtype=np.int64)
        where[rows] = np.arange(rows.size)
        target = where[self.entry_row]
        keep = target >= 0
        out = np.zeros((rows.size, self.n_columns), dtype=np.int64)
        out[target[keep], self.entry_col[keep]] = self.entry_count[keep]
        return out

    def take(self, keep: npt.NDArray[np.bool_]) -> HistBlock:
        """Only the rows where ``keep`` is true, in order."""
        new_index = np.cumsum(keep) - 1
        cell_keep = keep[self.entry_row]
        return HistBlock(
            self.times_ms[keep],
            self.dirs[keep],
            self.line_no[keep],
            new_index[self.entry_row[cell_keep]],
            self.entry_col[cell_keep],
            self.entry_count[cell_keep],
            self.n_columns,
        )

    @classmethod
    def from_dense(
        cls,
        times_ms: IntArray,
        dirs: IntArray,
        line_no: IntArray,
        counts: IntArray,
    ) -> HistBlock:
        rows, cols = np.nonzero(counts)
        return cls(
            times_ms,
            dirs,
            line_no,
            rows.astype(np.int64),
            cols.astype(np.int64),
            counts[rows, cols].astype(np.int64),
            int(counts.shape[1]),
        )


def open_log(path: str | Path) -> io.BufferedIOBase:
    """Open a log for binary reading, transparently gunzipping a gzip file."""
    p = Path(path)
    try:
        raw = p.open("rb")
    except OSError as exc:
        raise LogFormatError(f"cannot open: {exc.strerror or exc}", file=str(path)) from exc
    with raw:
        magic = raw.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.GzipFile(p, "rb")
    return p.open("rb")


def count_fields(line: bytes) -> int:
    """Number of comma-separated fields in one log line."""
    return line.count(b",") + 1


def first_line(path: str | Path) -> tuple[int, bytes] | None:
    """The first non-blank line of a log and its 1-based number, or None for an empty log."""
    with open_log(path) as f:
        try:
            for number, raw in enumerate(f, start=1):
                if raw.strip():
                    return number, raw
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise LogFormatError(f"cannot read: {exc}", file=str(path)) from exc
    return None


class LogReader:
    """Streams one log as ``HistBlock`` s of at most about ``chunk_bytes`` of text each.

    ``n_columns`` is the expected number of histogram columns; a line with another count is
    malformed. Malformed lines raise ``LogFormatError`` naming file and line, or, with
    ``skip_bad_lines``, are dropped with a warning (kept in ``warnings``, counted in
    ``skipped_lines``).
    """

    def __init__(
        self,
        path: str | Path,
        n_columns: int,
        *,
        skip_bad_lines: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        scratch: Scratch | None = None,
    ) -> None:
        self.path = str(path)
        self.n_columns = n_columns
        self.n_fields = n_columns + HEADER_FIELDS
        self.skip_bad_lines = skip_bad_lines
        self.chunk_bytes = max(int(chunk_bytes), 1 << 12)
        self.skipped_lines = 0
        self._scratch = scratch if scratch is not None else Scratch()
        self.warnings: list[str] = []
        self._last_time = np.full(N_DIRECTIONS, np.iinfo(np.int64).min, dtype=np.int64)

    # ----------------------------------------------------------------- public
    def blocks(self) -> Iterator[HistBlock]:
        line_base = 0
        for chunk in self._chunks():
            block = _parse_canonical(chunk, self.n_fields, line_base, self._scratch)
            if block is None:
                text = bytes(chunk)
                block = self._parse_general(text, line_base)
                line_base += text.count(b"\n")
            else:
                line_base += block.n_rows
            block = self._check_rows(block)
            if block.n_rows:
                yield block

    # ----------------------------------------------------------------- internals
    def _chunks(self) -> Iterator[memoryview]:
        """Whole lines, about ``chunk_bytes`` at a time, as views into a reused buffer (a view
        is only valid until the next one is produced)."""
        buf = bytearray(self.chunk_bytes)
        held = 0  # bytes of an unfinished line kept at the front of buf
        eof = False
        with open_log(self.path) as f:
            while not eof:
                if held == len(buf):  # a line longer than the buffer: move to a bigger one
                    bigger = bytearray(2 * len(buf))
                    bigger[:held] = buf
                    buf = bigger
                end = held
                view = memoryview(buf)
                while end < len(buf):
                    try:
                        got = f.readinto(view[end:])
                    except (OSError, EOFError, gzip.BadGzipFile) as exc:
                        raise LogFormatError(f"cannot read: {exc}", file=self.path) from exc
                    if not got:
                        eof = True
                        break
                    end += got
                cut = buf.rfind(b"\n", 0, end) + 1
                if cut == 0:
                    held = end
                    continue
                yield view[:cut]
                held = end - cut
                buf[:held] = buf[cut:end]
        if buf[:held].strip():
            yield memoryview(bytes(buf[:held]) + b"\n")

    def _bad(self, line_no: int, message: str) -> None:
        if not self.skip_bad_lines:
            raise LogFormatError(message, file=self.path, line=line_no)
        self.skipped_lines += 1
        if len(self.warnings) < _MAX_WARNINGS:
            text = f"{self.path}:{line_no}: skipped: {message}"
            self.warnings.append(text)
            logger.warning("%s", text)

    def _parse_general(self, chunk: bytes, line_base: int) -> HistBlock:
        """Line by line; names every malformed line."""
        times: list[int] = []
        dirs: list[int] = []
        numbers: list[int] = []
        rows: list[list[int]] = []
        for offset, raw in enumerate(chunk.split(b"\n")[:-1]):
            line_no = line_base + offset + 1
            line = raw.strip()
            if not line:
                continue
            fields = line.split(b",")
            if len(fields) != self.n_fields:
                self._bad(
                    line_no,
                    f"expected {self.n_fields} fields ({self.n_columns} histogram columns), "
                    f"found {len(fields)}",
                )
                continue
            try:
                values = [int(x) for x in fields]
            except ValueError:
                bad = next(x for x in fields if not _is_int(x))
                self._bad(line_no, f"not an integer: {bad.strip().decode(errors='replace')!r}")
                continue
            if min(values) < 0:
                self._bad(line_no, "negative value")
                continue
            if max(values) >= 1 << 63:
                self._bad(line_no, "value too large")
                continue
            times.append(values[0])
            dirs.append(values[1])
            numbers.append(line_no)
            rows.append(values[HEADER_FIELDS:])
        counts = (
            np.array(rows, dtype=np.int64)
            if rows
            else np.zeros((0, self.n_columns), dtype=np.int64)
        )
        return HistBlock.from_dense(
            np.array(times, dtype=np.int64),
            np.array(dirs, dtype=np.int64),
            np.array(numbers, dtype=np.int64),
            counts,
        )

    def _check_rows(self, block: HistBlock) -> HistBlock:
        """Directions must be 0..2 and time stamps must not decrease within a direction."""
        keep = np.ones(block.n_rows, dtype=bool)
        bad_dir = (block.dirs < 0) | (block.dirs >= N_DIRECTIONS)
        for i in np.flatnonzero(bad_dir):
            self._bad(int(block.line_no[i]), f"direction {int(block.dirs[i])} is not 0, 1 or 2")
            keep[i] = False
        for d in range(N_DIRECTIONS):
            sel = np.flatnonzero((block.dirs == d) & keep)
            if sel.size == 0:
                continue
            t = block.times_ms[sel]
            running = np.maximum.accumulate(np.concatenate(([self._last_time[d]], t)))
            decreasing = t < running[:-1]
            for i in sel[decreasing]:
                self._bad(
                    int(block.line_no[i]),
                    f"time stamp {int(block.times_ms[i])} ms is earlier than the previous "
                    f"{DIRECTION_NAMES[d]} row's",
                )
                keep[i] = False
            self._last_time[d] = running[-1]
        if bool(keep.all()):
            return block
        return block.take(keep)


def _is_int(token: bytes) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


class Scratch:
    """Reusable boolean work arrays for the fast path.

    Fresh multi-megabyte temporaries cost more in page faults than the comparisons that fill
    them, so the fast path writes into these (``out=``). Share one between the readers of a
    run; it is not thread-safe.
    """

    def __init__(self) -> None:
        self._bufs: list[npt.NDArray[np.bool_]] = []

    def get(self, n: int) -> tuple[npt.NDArray[np.bool_], ...]:
        if not self._bufs or self._bufs[0].size < n:
            self._bufs = [np.empty(max(n, 1 << 16), dtype=bool) for _ in range(4)]
        return tuple(buf[:n] for buf in self._bufs)


def _parse_canonical(
    chunk: bytes | memoryview, n_fields: int, line_base: int, scratch: Scratch
) -> HistBlock | None:
    """Parse a chunk written exactly as fio writes (``"%llu, "`` separators, one row a line,
    no blank lines); None when the chunk is not in that shape (the caller falls back)."""
    b = np.frombuffer(chunk, dtype=np.uint8)
    n = b.size
    if n < 2 or b[-1] != 10 or int(b.max()) > 57:  # nothing above '9'
        return None
    dig, mark, other, tmp = scratch.get(n)
    np.greater_equal(b, 48, out=dig)
    np.equal(b, 44, out=mark)
    n_comma = int(np.count_nonzero(mark))
    np.equal(b, 32, out=other)
    n_space = int(np.count_nonzero(other))
    np.equal(b, 10, out=tmp)
    nl_pos = np.flatnonzero(tmp)
    n_rows = nl_pos.size
    if n_comma != n_space or n_comma != n_rows * (n_fields - 1):
        return None
    if int(np.count_nonzero(dig)) + n_comma + n_space + n_rows != n:
        return None  # some other byte (CR, tab, '-', '.', ...)
    # every comma is followed by a space (so, counts being equal, every space follows a comma)
    np.logical_and(mark[:-1], other[1:], out=tmp[:-1])
    if int(np.count_nonzero(tmp[:-1])) != n_comma:
        return None
    # every comma follows a digit (no empty field), and so does every newline; lines start
    # with a digit
    np.logical_and(mark[1:], dig[:-1], out=tmp[1:])
    if mark[0] or int(np.count_nonzero(tmp[1:])) != n_comma:
        return None
    line_start = np.empty_like(nl_pos)
    line_start[0] = 0
    line_start[1:] = nl_pos[:-1] + 1
    if nl_pos[0] == 0 or not bool(dig[nl_pos - 1].all()) or not bool(dig[line_start].all()):
        return None
    # runs: `other` = non-digit; a run starting with '0' must be the single digit 0
    np.less(b, 48, out=other)
    np.equal(b, 48, out=tmp)
    np.logical_and(tmp[1:], other[:-1], out=tmp[1:])
    np.logical_and(tmp[:-1], dig[1:], out=tmp[:-1])
    if bool(tmp[:-1].any()):
        return None
    # runs starting with 1-9 are the non-zero values
    np.greater(b, 48, out=mark)
    np.logical_and(mark[1:], other[:-1], out=mark[1:])
    pos = np.flatnonzero(mark)
    values = np.zeros(pos.size, dtype=np.int64)
    length = np.zeros(pos.size, dtype=np.int64)
    alive = np.ones(pos.size, dtype=bool)
    for k in range(_MAX_DIGITS + 1):
        at = pos + k  # a run always ends before its line's newline, so `at` stays in range
        alive &= dig[np.minimum(at, n - 1)]
        if not alive.any():
            break
        if k == _MAX_DIGITS:
            return None  # a value of 19+ digits: let the general path report it
        values[alive] = values[alive] * 10 + (b[at[alive]].astype(np.int64) - 48)
        length += alive
    line_of = np.searchsorted(nl_pos, pos)
    extra = length - 1
    extra_line = np.bincount(line_of, weights=extra, minlength=n_rows).astype(np.int64)
    # every zero cell is exactly "0, ": a line's length follows from its multi-digit values
    if not np.array_equal(nl_pos - line_start, 3 * n_fields - 2 + extra_line):
        return None
    # extra bytes of the multi-digit values before each value, within its line
    extra_before_line = np.cumsum(extra_line) - extra_line
    extra_before = np.cumsum(extra) - extra - extra_before_line[line_of]
    offset = pos - line_start[line_of] - extra_before
    if bool(np.any(offset % 3)):
        return None
    col = offset // 3
    times = np.zeros(n_rows, dtype=np.int64)
    dirs = np.zeros(n_rows, dtype=np.int64)
    is_time = col == 0
    times[line_of[is_time]] = values[is_time]
    is_dir = col == 1
    dirs[line_of[is_dir]] = values[is_dir]
    cell = col >= HEADER_FIELDS
    return HistBlock(
        times,
        dirs,
        np.arange(line_base + 1, line_base + 1 + n_rows, dtype=np.int64),
        line_of[cell].astype(np.int64),
        col[cell] - HEADER_FIELDS,
        values[cell],
        n_fields - HEADER_FIELDS,
    )


def read_all(path: str | Path, n_columns: int) -> HistBlock:
    """The whole log as one block (for tests and small logs)."""
    parts = list(LogReader(path, n_columns).blocks())
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return HistBlock(empty, empty, empty, empty, empty, empty, n_columns)
    offsets = np.cumsum([0] + [p.n_rows for p in parts[:-1]])
    return HistBlock(
        np.concatenate([p.times_ms for p in parts]),
        np.concatenate([p.dirs for p in parts]),
        np.concatenate([p.line_no for p in parts]),
        np.concatenate([p.entry_row + o for p, o in zip(parts, offsets, strict=True)]),
        np.concatenate([p.entry_col for p in parts]),
        np.concatenate([p.entry_count for p in parts]),
        n_columns,
    )


__all__ = [
    "DIRECTION_NAMES",
    "HEADER_FIELDS",
    "N_DIRECTIONS",
    "HistBlock",
    "LogReader",
    "Scratch",
    "count_fields",
    "first_line",
    "open_log",
    "read_all",
]
