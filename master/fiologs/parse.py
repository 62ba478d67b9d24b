"""Reading fio histogram logs (``*_clat_hist.N.log``, plain or gzip) fast and in bounded memory.

Owns opening a log (gzip detected by its magic bytes, not its name), cutting it into chunks of
whole lines, turning each chunk into a ``HistBlock`` (time stamps, directions, line numbers and
the non-zero histogram cells as sparse triplets), and reporting malformed lines by file and line.
It must not interpret time (that is ``align``) nor repair client/server logs (``repair``).

A line is ``time_ms, direction, block_size, c0, c1, ..., c{n-1}``: non-negative decimal integers,
direction 0 (read), 1 (write) or 2 (trim), time stamps not decreasing within a direction.

Speed: fio writes every line as ``"%llu, "``-separated integers and almost every cell is ``0``.
The fast path reads a whole chunk of such lines at once (4 MB; 1 MB for numpy): in C
(``parse.c``, one pass, through ``cfuncs``; without the GIL) where the master's compiled object
is available, else with numpy (``_parse_canonical``, the C's reference in the tests). The numpy
form works on the whole chunk (small enough for its work arrays to stay in the CPU cache): it
finds the numbers that start with 1-9 (the non-zero cells and header fields) with a few byte
comparisons, converts only those, drops the second and later digits of every number, and
checks that what is left is exactly the text of all-zero lines. A number's row and column then
follow from its offset in that squeezed text. Both decline the same chunks: one that is not
canonical (blank lines, CR/LF, other spacing, bad tokens, leading zeros, values of more than 18
digits) goes through the general path, line by line, which reads what the fast path declines
and names the offending line.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from master.fiologs import cfuncs
from protocol.errors import LogFormatError

HEADER_FIELDS: Final = 3  # time_ms, direction, block size
N_DIRECTIONS: Final = 3  # 0 read, 1 write, 2 trim
DIRECTION_NAMES: Final = ("read", "write", "trim")
#: Text handed over at a time: 4 MB to the C reader (per chunk there is some Python, about a
#: tenth of the C's time at 1 MB); the numpy reader takes at most 1 MB, where its work arrays
#: stay in the CPU cache
DEFAULT_CHUNK_BYTES: Final = 4 << 20
NUMPY_CHUNK_BYTES: Final = 1 << 20
_MAX_DIGITS: Final = 18  # larger values do not fit int64 safely; fio never logs them
_GZIP_MAGIC: Final = b"\x1f\x8b"
_MAX_WARNINGS: Final = 20
#: What reading a log may raise: I/O errors, a truncated gzip stream (EOFError), a damaged one
#: (``zlib.error``, which is not an OSError).
_READ_ERRORS: Final = (OSError, EOFError, zlib.error)

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
        except _READ_ERRORS as exc:
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
        if cfuncs.function("ivf_parse_canonical") is None:
            chunk_bytes = min(chunk_bytes, NUMPY_CHUNK_BYTES)
        self.chunk_bytes = max(int(chunk_bytes), 1 << 12)
        self.skipped_lines = 0
        self.text_bytes = 0  # bytes of (uncompressed) text handed over so far
        self._scratch = scratch if scratch is not None else Scratch()
        self.warnings: list[str] = []
        self._last_time = np.full(N_DIRECTIONS, np.iinfo(np.int64).min, dtype=np.int64)

    # ----------------------------------------------------------------- public
    def blocks(self) -> Iterator[HistBlock]:
        line_base = 0
        for chunk in self._chunks():
            block = parse_canonical(chunk, self.n_fields, line_base, self._scratch)
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
                    except _READ_ERRORS as exc:
                        raise LogFormatError(f"cannot read: {exc}", file=self.path) from exc
                    if not got:
                        eof = True
                        break
                    end += got
                cut = buf.rfind(b"\n", 0, end) + 1
                if cut == 0:
                    held = end
                    continue
                self.text_bytes += cut
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
            self.warnings.append(f"{self.path}:{line_no}: skipped: {message}")

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
    """Reusable boolean work arrays for the numpy fast path (and what the C's path learns).

    Fresh multi-megabyte temporaries cost more in page faults than the comparisons that fill
    them, so the fast path writes into these (``out=``). Share one between the readers of a
    process; it is not thread-safe.
    """

    def __init__(self) -> None:
        self._bufs: list[npt.NDArray[np.bool_]] = []
        #: non-zero cells per byte of text in the last chunk the C read (sizes the next one's)
        self.cells_per_byte = 0.0
        self.count = np.zeros(1, dtype=np.int64)  # the C's count of cells

    def get(self, n: int) -> tuple[npt.NDArray[np.bool_], ...]:
        if not self._bufs or self._bufs[0].size < n:
            self._bufs = [np.empty(max(n, 1 << 16), dtype=bool) for _ in range(4)]
        return tuple(buf[:n] for buf in self._bufs)


_NL: Final = 10
_SPACE: Final = 32
_COMMA: Final = 44
_ZERO: Final = 48  # b"0"
_NINE: Final = 57


def _count(mask: npt.NDArray[np.bool_]) -> int:
    return int(np.count_nonzero(mask))


def _parse_canonical(
    chunk: bytes | memoryview, n_fields: int, line_base: int, scratch: Scratch
) -> HistBlock | None:
    """Parse a chunk written exactly as fio writes (``"%llu, "`` separators, one row a line,
    no blank lines); None when the chunk is not in that shape (the caller falls back).

    Whole-chunk byte comparisons check the shape: only digits, ``", "`` and newlines, every
    number a digit run without a leading 0 (``0`` itself aside). Then only the numbers that
    start with 1-9 are converted (few: almost every cell is ``0``). If every number had one
    digit, a line of ``n_fields`` fields would be ``3 * n_fields - 1`` bytes long; with the
    digits after the first taken away (the "squeezed" text), every line must be exactly that
    long, and a number's row and column follow from its squeezed offset.
    """
    b = np.frombuffer(chunk, dtype=np.uint8)
    n = b.size
    line_len = 3 * n_fields - 1  # a squeezed line, newline included
    if n < line_len or b[-1] != _NL or b[0] < _ZERO or int(b.max()) > _NINE:
        return None
    non_digit, mark, comma, space = scratch.get(n)
    np.less(b, _ZERO, out=non_digit)
    np.equal(b, _COMMA, out=comma)
    np.equal(b, _SPACE, out=space)
    newlines = _newlines(chunk, b)
    n_rows = newlines.size
    n_comma = _count(comma)
    # the non-digits number two per comma plus the newlines, and every comma is followed by a
    # space: so they are exactly the commas, their spaces and the newlines ...
    if _count(non_digit) != 2 * n_comma + n_rows:
        return None
    np.logical_and(comma[:-1], space[1:], out=mark[:-1])
    if _count(mark[:-1]) != n_comma:
        return None
    # ... and no other two non-digits are neighbours: every gap between two digit runs is
    # ", " or a newline (and lines start and end with a digit)
    np.logical_and(non_digit[:-1], non_digit[1:], out=mark[:-1])
    if _count(mark[:-1]) != n_comma:
        return None
    # so there are n_comma + n_rows numbers, and the digits after the first of each (which
    # squeezed lines lack) are all the digits but one per number
    dropped = n - 3 * n_comma - 2 * n_rows
    # starts of numbers with a leading 1-9: such a digit after a non-digit (or first)
    np.greater(b, _ZERO, out=mark)
    np.logical_and(mark[1:], non_digit[:-1], out=mark[1:])
    starts = np.flatnonzero(mark)
    runs = _digit_runs(b, starts)
    if runs is None:
        return None
    values, extra = runs
    dropped_through = np.cumsum(extra)
    if int(dropped_through[-1] if dropped_through.size else 0) != dropped:
        return None  # a number with a leading 0 and more digits ("05", "00")
    # every squeezed line holds n_fields fields: its newline lands at the end of a line
    dropped_to = np.concatenate(([0], dropped_through))
    row_end = np.searchsorted(starts, newlines)  # numbers before each newline
    squeezed_nl = newlines - dropped_to[row_end]
    if not np.array_equal(squeezed_nl, np.arange(line_len - 1, n_rows * line_len, line_len)):
        return None
    row_first = np.concatenate(([0], row_end[:-1]))
    row = np.repeat(np.arange(n_rows, dtype=np.int64), row_end - row_first)
    # byte offset of each number within its squeezed line: 3 x its field index
    offset = starts - dropped_to[:-1]
    offset -= row * line_len
    times, dirs = _header_fields(offset, values, row_first, row_end)
    cell = np.flatnonzero(offset >= 3 * HEADER_FIELDS)
    col = offset[cell]
    col //= 3
    col -= HEADER_FIELDS
    return HistBlock(
        times,
        dirs,
        np.arange(line_base + 1, line_base + 1 + n_rows, dtype=np.int64),
        row[cell],
        col,
        values[cell],
        n_fields - HEADER_FIELDS,
    )


def parse_canonical(
    chunk: bytes | memoryview, n_fields: int, line_base: int, scratch: Scratch
) -> HistBlock | None:
    """A chunk written exactly as fio writes, read in C (``parse.c``; ``_parse_canonical``
    where the object is unavailable): the same block, or None (not in that shape) for the
    same chunks as ``_parse_canonical``. The C runs without the GIL."""
    fn = cfuncs.function("ivf_parse_canonical")
    if fn is None:
        return _parse_canonical(chunk, n_fields, line_base, scratch)
    b = np.frombuffer(chunk, dtype=np.uint8)
    n = b.size
    if n == 0 or n_fields <= HEADER_FIELDS:
        return _parse_canonical(chunk, n_fields, line_base, scratch)
    # a line is at least 3 x n_fields - 1 bytes, a non-zero cell at least 2 ("7\n"); the
    # cells' room is what the last chunk's density needs and a quarter more (enough, nearly
    # always), so their arrays are the block's own, without copies
    row_cap = n // (3 * n_fields - 1) + 1
    most = min(row_cap * (n_fields - HEADER_FIELDS), n // 2 + 1)
    cap = min(most, int(n * scratch.cells_per_byte * 1.25) + 1024)
    times = np.empty(row_cap, dtype=np.int64)
    dirs = np.empty(row_cap, dtype=np.int64)
    count = scratch.count
    while True:
        cells = [np.empty(cap, dtype=np.int64) for _ in range(3)]
        n_rows = int(fn(b.ctypes.data, n, n_fields, times.ctypes.data, dirs.ctypes.data,
                        row_cap, cells[0].ctypes.data, cells[1].ctypes.data,
                        cells[2].ctypes.data, cap, count.ctypes.data))
        if n_rows != -2 or cap == most:
            break
        cap = most
    if n_rows < 0:
        return None
    k = int(count[0])
    scratch.cells_per_byte = k / n
    return HistBlock(
        times[:n_rows],
        dirs[:n_rows],
        np.arange(line_base + 1, line_base + 1 + n_rows, dtype=np.int64),
        cells[0][:k],
        cells[1][:k],
        cells[2][:k],
        n_fields - HEADER_FIELDS,
    )


def _newlines(chunk: bytes | memoryview, b: npt.NDArray[np.uint8]) -> IntArray:
    """Offsets of the newlines in ``chunk`` (whose bytes ``b`` views). A line of a fio log is
    thousands of bytes long, so a ``find`` (memchr) per line is faster than ``np.flatnonzero``
    over a mask of the whole chunk (50 against 300 us a MB), where the text can be searched:
    bytes, or a view from the start of a bytes or bytearray (as ``LogReader`` hands over)."""
    text = chunk.obj if isinstance(chunk, memoryview) else chunk
    if not isinstance(text, (bytes, bytearray)) or (
        text is not chunk
        and np.frombuffer(text, dtype=np.uint8, count=1).__array_interface__["data"][0]
        != b.__array_interface__["data"][0]
    ):
        return np.flatnonzero(b == _NL)
    end = b.size
    found: list[int] = []
    at = text.find(b"\n", 0, end)
    while at >= 0:
        found.append(at)
        at = text.find(b"\n", at + 1, end)
    return np.array(found, dtype=np.int64)


def _header_fields(
    offset: IntArray, values: IntArray, row_first: IntArray, row_end: IntArray
) -> tuple[IntArray, IntArray]:
    """Time stamp and direction of every row. A row's non-zero header fields are its first
    numbers (at squeezed offsets 0, 3 and 6); a field that is 0 has none."""
    out = []
    for field in (0, 1):
        got = np.zeros(row_first.size, dtype=np.int64)
        for k in range(field + 1):  # the field is the row's number k, after k non-zero fields
            idx = row_first + k
            has = idx < row_end
            idx = idx[has]
            hit = offset[idx] == 3 * field
            got[np.flatnonzero(has)[hit]] = values[idx[hit]]
        out.append(got)
    return out[0], out[1]


def _digit_runs(b: npt.NDArray[np.uint8], starts: IntArray) -> tuple[IntArray, IntArray] | None:
    """The value and the number of digits after the first (``extra``) of the digit run at each
    of ``starts``; None when a run is longer than ``_MAX_DIGITS`` (the general path reports
    it). ``b`` must end with a non-digit, so no run reaches past it, and hold no byte above
    ``9``. Most numbers in a fio log have one or two digits: those are read at once, the few
    longer ones digit by digit."""
    last = b.size - 1
    first = b[starts].astype(np.int64)
    first -= _ZERO
    second = b[starts + 1]
    third = b[np.minimum(starts + 2, last)]
    has_second = second >= _ZERO
    values = np.where(has_second, first * 10 + second.astype(np.int64) - _ZERO, first)
    extra = has_second.astype(np.int64)
    alive = np.flatnonzero(has_second & (third >= _ZERO))  # runs still going
    at = starts[alive] + 2
    digit = third[alive]
    k = 2
    while alive.size:
        if k >= _MAX_DIGITS:
            return None
        values[alive] = values[alive] * 10 + (digit - _ZERO)
        extra[alive] = k
        at += 1
        digit = b[at]
        more = digit >= _ZERO
        alive, at, digit = alive[more], at[more], digit[more]
        k += 1
    return values, extra


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
    "parse_canonical",
    "read_all",
]
