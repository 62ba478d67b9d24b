"""The run folder: the only writer of result files.

Owns the folder layout (see DESIGN.md "Output folder"), CSV headers and row formatting. Rows are
appended and flushed as they come (instance rows: written unflushed, then ``RunOutput.flush``
once per subinterval), so a crash keeps everything up to the last subinterval. Runs with more
instance files than the open-file budget (the soft ``RLIMIT_NOFILE``, raised to the hard limit,
less ``RESERVED_FDS``) keep the first files open and append to the rest with one
open/write/close per flush. A run never overwrites an earlier one: the folder is created
exclusively (a suffix is added when two runs start in the same second). Must not compute
metrics (``master.analysis.rollup`` does) or talk to hosts.

Layout::

    <output_root>/<test>/<YYYYmmdd-HHMMSS>/
      test.yaml resolved.json run.log hosts.csv luns.csv events.csv summary.csv
      stepNNNN-<name>/
        <rollup type>/<instance>.csv           one row per subinterval
        <rollup type>/summary.csv              one row per instance, measurement period
        histograms/<rollup type>/<instance>.csv
        measure.csv dfc.csv cpu.csv interlock.csv
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import io
import json
import logging
import math
import os
import re
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from master.results.wholefile import replace_whole
from protocol.errors import OutputError

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def safe_name(text: str) -> str:
    """A file name for an instance or step: unsafe characters become ``_``."""
    cleaned = _UNSAFE.sub("_", text).strip("_.") or "_"
    return cleaned[:200]


#: From here on ``%.6g`` would switch to an exponent (999999.5 rounds to ``1e+06``).
_EXPONENT_FROM = 999_999.5


@contextlib.contextmanager
def _writing(path: Path | str) -> Iterator[None]:
    """Turn a failed write (disk full, quota, read-only, I/O error) into an ``OutputError``
    naming the file."""
    try:
        yield
    except OSError as exc:
        raise OutputError(str(path), exc) from exc


def fmt(value: Any) -> str:
    """One CSV cell: empty for None/NaN, compact floats, plain text otherwise.

    Floats get six significant digits (``%.6g``), except that magnitudes from 999,999.5 up to
    1e15 are written as whole numbers (``1234567``, not ``1.23457e+06``): a cluster's IOPS
    keeps every digit, so instance rows add up to their rollup's row as read back."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ""
        a = abs(value)
        if a < _EXPONENT_FROM:
            return f"{value:.6g}"
        return f"{value:.0f}" if a < 1e15 else f"{value:.6e}"
    return str(value)


#: A result file is created, never opened over an existing one, and appended to.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC


@functools.lru_cache(maxsize=64)
def _header_bytes(header: tuple[str, ...]) -> bytes:
    """A header line as ``csv.writer`` writes it (made once per distinct header)."""
    buf = io.StringIO()
    csv.writer(buf).writerow(header)
    return buf.getvalue().encode("utf-8")


@functools.lru_cache(maxsize=64)
def _header_set(header: tuple[str, ...]) -> frozenset[str]:
    return frozenset(header)


@functools.lru_cache(maxsize=64)
def _header_tuple(header: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple object per distinct header."""
    return header


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """All of ``data`` to ``fd`` (``write`` again after a short one)."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        if done <= 0:
            raise OSError(errno.EIO, "write() wrote nothing")
        view = view[done:]


class Ledger:
    """How many bytes each appender's file holds, so that what a subinterval wrote can be taken
    back whole (``RunOutput.subinterval``).

    Every appender has a slot here; its size grows by each line written. ``mark`` notes the
    sizes at the start of a subinterval; ``undo`` cuts every file that grew since (or whose
    write failed part-way) back to its size at the mark, and a file made since back to its
    header. So after a failure (disk full) every file ends on a whole row, and the rollup
    files all end at the same subinterval.
    """

    def __init__(self) -> None:
        self.sizes = np.zeros(64, dtype=np.int64)
        self.appenders: list[CsvAppender] = []
        self._mark: npt.NDArray[np.int64] | None = None
        self._failed: set[int] = set()  # slots whose write failed part-way since the mark

    def add(self, appender: CsvAppender, size: int) -> int:
        slot = len(self.appenders)
        if slot == self.sizes.size:
            self.sizes = np.concatenate([self.sizes, np.zeros(slot, dtype=np.int64)])
        self.sizes[slot] = size
        self.appenders.append(appender)
        return slot

    def grow(self, slots: npt.NDArray[np.int64] | int, nbytes: npt.NDArray[np.int64] | int
             ) -> None:
        self.sizes[slots] += nbytes

    def failed(self, slot: int) -> None:
        self._failed.add(slot)

    def mark(self) -> None:
        self._mark = self.sizes[:len(self.appenders)].copy()
        self._failed.clear()

    def undo(self) -> None:
        """Cut back to the mark (nothing when there is none). A file that cannot be cut is
        left as it is: the error that called for the undo is the run's."""
        mark = self._mark
        if mark is None:
            return
        n = len(self.appenders)
        grown = set(np.flatnonzero(self.sizes[:mark.size] != mark).tolist()) | self._failed
        grown |= set(range(mark.size, n))
        for slot in sorted(grown):
            a = self.appenders[slot]
            if a.journal:
                continue
            size = int(mark[slot]) if slot < mark.size else a.header_size
            with contextlib.suppress(OSError):
                a.cut(size)
            self.sizes[slot] = size
        self._failed.clear()


class CsvAppender:
    """A CSV file with a fixed header; every row is handed to the OS as it is written, whole
    or not at all: a write that fails part-way (disk full) is cut back to where it began.

    ``append_now`` appends an already formatted line with one ``write`` call, for writers that
    put rows into many files per subinterval. An appender made with ``keep_open=False`` holds
    no file descriptor: each row is appended with one open/write/close. ``RunOutput`` makes
    those beyond its open-file budget (runs with tens of thousands of instance files).
    """

    #: Counts the appenders' file closes (``AppenderGroup`` reads its descriptors again after
    #: one: a closed file's number may belong to another file by then).
    closes = 0

    def __init__(self, path: Path | str, header: Sequence[str], keep_open: bool = True, *,
                 at: tuple[int, str] | None = None, ledger: Ledger | None = None,
                 adopt: bool = False) -> None:
        """Create ``path`` (never an existing file) with its header line. ``at``: a
        descriptor of ``path``'s directory, which exists, and the file's name in it (a
        directory of many files: no ``mkdir`` and no path walk per file). ``ledger``: where
        its size is kept (``RunOutput``'s; a private one by default). ``adopt``: an existing
        file with this header is appended to (a resumed run's), a cut last row cut off."""
        self._path = os.fspath(path)  # a Path object on demand (tens of thousands of files)
        self._path_obj = path if isinstance(path, Path) else None
        #: shared by the appenders of one header (a run holds tens of thousands)
        self.header = key = _header_tuple(tuple(header))
        self._header_set = _header_set(key)
        head = _header_bytes(key)
        self.header_size = len(head)
        self._fd_held = -1
        #: kept whole when a subinterval is undone (``RunOutput.JOURNALS``)
        self.journal = False
        size = self.header_size
        with _writing(path):
            if at is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(at[1] if at is not None else path, _CREATE_FLAGS, 0o666,
                             dir_fd=at[0] if at is not None else None)
            except FileExistsError:
                if not adopt:
                    raise
                fd = self._adopted(at, head)
                size = os.fstat(fd).st_size
            else:
                try:
                    _write_all(fd, head)
                except BaseException:
                    os.close(fd)
                    with contextlib.suppress(OSError):  # not even a whole header: no file
                        os.unlink(at[1], dir_fd=at[0]) if at is not None else os.unlink(path)
                    raise
            if keep_open:
                self._fd_held = fd
            else:
                os.close(fd)
                CsvAppender.closes += 1
        self.ledger = ledger if ledger is not None else Ledger()
        self.slot = self.ledger.add(self, size)

    def _adopted(self, at: tuple[int, str] | None, head: bytes) -> int:
        """An existing file of the run, opened for appending: its header must be ``head``;
        bytes after its last whole row (a row cut by a crash) are cut off."""
        fd = os.open(at[1] if at is not None else self._path,
                     os.O_RDWR | os.O_APPEND | os.O_CLOEXEC,
                     dir_fd=at[0] if at is not None else None)
        try:
            if os.pread(fd, len(head), 0) != head:
                raise OSError(errno.EEXIST, "exists with another header")
            size = os.fstat(fd).st_size
            tail = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
            if not tail.endswith(b"\n"):
                os.ftruncate(fd, size - len(tail) + tail.rfind(b"\n") + 1)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @property
    def path(self) -> Path:
        if self._path_obj is None:
            self._path_obj = Path(self._path)
        return self._path_obj

    @property
    def is_open(self) -> bool:
        return self._fd_held >= 0

    @property
    def size(self) -> int:
        """The bytes the file holds: its header and every whole row written."""
        return int(self.ledger.sizes[self.slot])

    def _cells(self, row: Mapping[str, Any]) -> list[str]:
        """The row's cells in header order, formatted; a column not in the header is an
        error."""
        unknown = set(row) - self._header_set
        if unknown:
            raise ValueError(f"{self.path.name}: columns {sorted(unknown)} not in the header")
        return [fmt(row.get(col)) for col in self.header]

    def write(self, row: Mapping[str, Any]) -> None:
        buf = io.StringIO()
        csv.writer(buf).writerow(self._cells(row))
        self.append_now(buf.getvalue())

    def write_many(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """``write`` of each row, handed to the OS with one write (many hosts' rows of one
        subinterval)."""
        buf = io.StringIO()
        writer = csv.writer(buf)
        for row in rows:
            writer.writerow(self._cells(row))
        if buf.tell():
            self.append_now(buf.getvalue())

    def append_now(self, line: str) -> None:
        """Append formatted lines and hand them to the OS at once: one ``write`` call on an
        open file, one open/write/close otherwise; on a failure the file is cut back to its
        size before (``OutputError`` naming the file)."""
        self._append(memoryview(line.encode("utf-8")))

    def _append(self, data: memoryview, done: int = 0) -> None:
        """Write ``data[done:]`` (``done`` bytes of it already in the file: a compiled writer
        stopped there); the ledger grows by all of ``data``."""
        with _writing(self._path):
            try:
                fd = self._fd_held if self._fd_held >= 0 else os.open(
                    self._path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                try:
                    _write_all(fd, data[done:])
                finally:
                    if self._fd_held < 0:
                        os.close(fd)
            except OSError:
                self.ledger.failed(self.slot)
                with contextlib.suppress(OSError):
                    self.cut(self.size)
                raise
        self.ledger.grow(self.slot, len(data))

    def cut(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (a failed write's part, an undone subinterval)."""
        if self._fd_held >= 0:
            os.ftruncate(self._fd_held, size)
        else:
            os.truncate(self._path, size)

    def _fd(self) -> int:
        """The open file's descriptor, -1 when none is held (``kernels.BY_PATH``)."""
        return self._fd_held

    def removed(self) -> bool:
        """Whether the file was removed (or replaced) under the run: its directory entry no
        longer leads to what this appender writes."""
        try:
            if self._fd_held >= 0:
                return os.fstat(self._fd_held).st_nlink == 0
            return not os.path.isfile(self._path)
        except OSError:
            return True

    @staticmethod
    def append_many(appenders: Sequence[CsvAppender], lines: Sequence[str]) -> None:
        """``append_now(line)`` on each appender with its line (``append_block``)."""
        if len(appenders) != len(lines):
            raise ValueError(f"{len(appenders)} files but {len(lines)} lines")
        data, ends = joined_utf8(lines)
        CsvAppender.append_block(appenders, np.frombuffer(data, dtype=np.uint8), ends)

    @staticmethod
    def append_block(appenders: Sequence[CsvAppender] | AppenderGroup,
                     data: npt.NDArray[np.uint8],
                     ends: npt.NDArray[np.int64], own: Mapping[int, str] | None = None
                     ) -> None:
        """Line ``i`` (``data[ends[i-1]:ends[i]]``, UTF-8, or ``own[i]`` where given) appended
        to ``appenders[i]`` as ``append_now`` does it: the loop of a writer of many instance
        files per subinterval. The lines are written by compiled code
        (``master.analysis.kernels.write_lines``): one ``write`` call per open file, and ``open``,
        ``write``, ``close`` by path for a file kept closed (beyond the open-file budget). A
        failed ``open`` or ``write`` is repeated here and raises an ``OutputError`` naming its
        file, which is cut back to where its line began (the lines before it stand, for
        ``Ledger.undo`` to take back with the subinterval)."""
        n = len(appenders)
        if len(ends) != n:
            raise ValueError(f"{n} files but {len(ends)} lines")
        if n == 0:
            return
        from master.analysis import kernels  # numba: loaded by the first run that writes rows

        own = own or {}
        group = appenders if isinstance(appenders, AppenderGroup) else AppenderGroup(appenders)
        fds = group.fds().copy()
        for i in own:
            fds[i] = kernels.SKIP
        paths = path_at = None
        if (fds == kernels.BY_PATH).any():
            paths, path_at = group.paths()
        lengths = np.diff(ends, prepend=0)
        first, at = 0, None
        while True:
            i, stop, kind = kernels.write_lines(fds, data, ends, first, at, paths, path_at)
            upto = n if i < 0 else i
            written = fds[first:upto] != kernels.SKIP
            group.grow(first, upto, np.where(written, lengths[first:upto], 0))
            if i < 0:
                break
            appender = group[i]
            start = int(ends[i - 1]) if i else 0
            if kind == kernels.FAILED_CLOSE:
                appender.ledger.failed(appender.slot)
                raise OutputError(str(appender.path), OSError(
                    errno.EIO, "close() after appending a line failed"))
            appender._append(data.data[start:int(ends[i])], stop - start)
            first, at = i + 1, None
        for i in np.flatnonzero(fds == kernels.SKIP).tolist():
            line = own.get(i)
            if line is None:
                line = data[int(ends[i - 1]) if i else 0:int(ends[i])].tobytes().decode("utf-8")
            group[i].append_now(line)

    def close(self) -> None:
        """Close the file (rows are in the OS already)."""
        if self._fd_held >= 0:
            fd, self._fd_held = self._fd_held, -1
            CsvAppender.closes += 1
            with _writing(self._path):
                os.close(fd)


class AppenderGroup(Sequence[CsvAppender]):
    """Appenders written together every subinterval (one rollup type's instance files), with
    their file descriptors read once, and again only after some appender closed its file."""

    def __init__(self, appenders: Iterable[CsvAppender]) -> None:
        self.appenders = list(appenders)
        self._fds = np.zeros(0, dtype=np.int32)
        self._closes = -1
        self._paths: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]] | None = None
        ledgers = {id(a.ledger): a.ledger for a in self.appenders}
        self._ledger = next(iter(ledgers.values())) if len(ledgers) == 1 else None
        self._slots = np.fromiter((a.slot for a in self.appenders), dtype=np.int64,
                                  count=len(self.appenders))

    def grow(self, first: int, stop: int, nbytes: npt.NDArray[np.int64]) -> None:
        """Appenders ``first`` .. ``stop - 1`` wrote ``nbytes`` each."""
        if stop <= first:
            return
        if self._ledger is not None:
            self._ledger.grow(self._slots[first:stop], nbytes)
            return
        for a, nb in zip(self.appenders[first:stop], nbytes.tolist(), strict=True):
            a.ledger.grow(a.slot, nb)

    def __len__(self) -> int:
        return len(self.appenders)

    @overload
    def __getitem__(self, i: int) -> CsvAppender: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[CsvAppender]: ...

    def __getitem__(self, i: int | slice) -> CsvAppender | Sequence[CsvAppender]:
        return self.appenders[i]

    def paths(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """Every appender's path, NUL-terminated, in one buffer, and where each starts in it
        (for ``master.analysis.kernels.write_lines``; made once: a path never changes)."""
        if self._paths is None:
            encoded = [os.fsencode(a._path) + b"\0" for a in self.appenders]
            starts = np.zeros(len(encoded), dtype=np.int64)
            if encoded:
                np.cumsum([len(e) for e in encoded[:-1]], out=starts[1:])
            self._paths = (np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8), starts)
        return self._paths

    def fds(self) -> npt.NDArray[np.int32]:
        """Each appender's open descriptor, -1 where it holds none (read-only view)."""
        if self._closes != CsvAppender.closes:
            self._fds = np.fromiter((a._fd() for a in self.appenders), dtype=np.int32,
                                    count=len(self.appenders))
            self._fds.flags.writeable = False
            self._closes = CsvAppender.closes
        return self._fds


def csv_text(value: str) -> str:
    """One text cell as ``csv.writer`` writes it (quoted only when it must be)."""
    if any(c in value for c in ',"\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value




def format_float_rows(values: npt.NDArray[np.float64]) -> list[str]:
    """Each row of a 2-D float array as comma-joined ``fmt`` cells (no line ending): the same
    text as ``fmt``, written by the compiled ``master.analysis.kernels.format_rows``; the rows it
    cannot decide (a ``%.6g`` rounding too close to call in binary, magnitudes of 1e15 or more or
    below 1e-30) are formatted with ``fmt`` itself."""
    n_rows, n_cols = values.shape
    if n_rows == 0:
        return []
    if n_cols == 0:
        return [""] * n_rows
    from master.analysis import kernels  # numba: loaded by the first run that writes rows

    text, ends, fallback = kernels.format_rows(values)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1]
    out = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    for i in np.flatnonzero(fallback).tolist():
        out[i] = ",".join(fmt(float(v)) for v in values[i])
    return out


def joined_utf8(texts: Sequence[str]) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The texts' UTF-8 bytes one after another, and where each ends in them."""
    encoded = [t.encode("utf-8") for t in texts]
    return b"".join(encoded), np.cumsum([len(b) for b in encoded], dtype=np.int64)


class LineTexts:
    """The fixed texts that begin each line (``csv_text`` of the instance names, a histogram
    bucket's edges), as one UTF-8 buffer and where each ends: what ``format_lines`` takes."""

    def __init__(self, texts: Sequence[str]) -> None:
        data, ends = joined_utf8(texts)
        self.data: bytes = data
        self.ends: npt.NDArray[np.int64] = ends

    @classmethod
    def of_bytes(cls, data: bytes, ends: npt.NDArray[np.int64]) -> LineTexts:
        out = cls.__new__(cls)
        out.data, out.ends = data, ends
        return out

    def __len__(self) -> int:
        return int(self.ends.size)

    def text(self, i: int) -> str:
        return self.data[int(self.ends[i - 1]) if i else 0:int(self.ends[i])].decode("utf-8")

    def take(self, which: npt.NDArray[np.intp]) -> LineTexts:
        """The texts ``which[0], which[1], ...`` (repeats allowed), gathered in one compiled
        pass."""
        from master.analysis import kernels  # numba: loaded by the first run that writes rows

        return LineTexts.of_bytes(*kernels.gather_texts(self.data, self.ends, which))


def format_lines(values: npt.NDArray[np.float64], head: str, texts: LineTexts,
                 word_last: npt.NDArray[np.bool_], word: str,
                 repeats: Sequence[tuple[int, int, int]] = (),
                 cell: Callable[[float], str] = fmt,
                 ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], dict[int, str]]:
    """Line ``i``: ``head``, ``texts.text(i)``, then row ``i`` of ``values`` as ``fmt`` cells
    (the last one ``word`` where ``word_last[i]``), each after a comma, and CRLF, as
    ``csv.writer`` ends a row. Returns the UTF-8 bytes of all lines and where each ends
    (written by the compiled ``master.analysis.kernels.format_lines``; valid until its next call)
    and the lines it could not decide, as text made with ``cell`` (``fmt``, or a function that
    writes the same text wherever the kernel decides; ``CsvAppender.append_block`` takes all
    three). ``repeats``: blocks of columns whose text is copied from an earlier block's where
    the numbers are the same (``master.analysis.kernels.format_lines``)."""
    from master.analysis import kernels  # numba: loaded by the first run that writes rows

    n = values.shape[0]
    if len(texts) != n or word_last.shape != (n,):
        raise ValueError(f"{n} rows but {len(texts)} texts and {word_last.shape} words")
    data, ends, fallback = kernels.format_lines(
        values, head.encode("utf-8"), texts.data, texts.ends, word_last, word.encode("utf-8"),
        True, b"\r\n", repeats)
    own = {}
    for i in np.flatnonzero(fallback).tolist():
        cells = [cell(float(v)) for v in values[i]]
        if word_last[i] and cells:
            cells[-1] = word
        own[i] = "".join([head, texts.text(i), ",", ",".join(cells), "\r\n"])
    return data, ends, own


def histogram_count_text(value: float) -> str:
    """A histogram file's count cell: whole numbers as integers (every digit), others as
    ``fmt``."""
    return fmt(value) if value % 1 else str(int(value))


#: File descriptors kept free for everything else (sockets, pipes, logs, libraries).
RESERVED_FDS = 256


def open_file_budget() -> int:
    """How many result files may stay open: raises the soft ``RLIMIT_NOFILE`` to the hard
    limit (best effort) and leaves ``RESERVED_FDS`` for the rest of the process."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            want = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                soft = want
            except (ValueError, OSError):
                log.debug("could not raise the open-file limit from %d to %d", soft, want)
    except (ValueError, OSError):
        return 1024 - RESERVED_FDS
    return int(soft) - RESERVED_FDS


def create_run_folder(output_root: Path, test: str, now: float | None = None) -> Path:
    """Create ``<root>/<test>/<YYYYmmdd-HHMMSS>`` exclusively; never reuse an existing one."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    parent = output_root / safe_name(test)
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        path = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free run folder under {parent} for {stamp}")


class _RunLogHandler(logging.Handler):
    """run.log, each record written whole or not at all: a write that fails part-way (disk
    full) is cut back, so the log never ends in a cut line. A record it cannot write is
    reported once on stderr, not with a traceback per record as ``logging`` does; the run loop
    learns of the full disk from the CSV files, whose writes raise ``OutputError``."""

    failed = False

    def __init__(self, path: Path | str, mode: str = "a", encoding: str = "utf-8") -> None:
        super().__init__()
        self.baseFilename = os.fspath(path)
        self._encoding = encoding
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_CREAT
        if mode == "x":
            flags |= os.O_EXCL
        self._fd = os.open(self.baseFilename, flags, 0o666)
        self._size = os.fstat(self._fd).st_size

    def _report(self, exc: BaseException | None) -> None:
        if not self.failed:
            self.failed = True
            sys.stderr.write(f"ivypy: cannot write {self.baseFilename}: {exc}; "
                             "later log lines are lost\n")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode(self._encoding, "replace")
        except Exception:  # a bad format string: logging's own report
            self.handleError(record)
            return
        if self._fd < 0:
            return
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            self._report(exc)
            return
        self._size += len(data)

    def handleError(self, record: logging.LogRecord) -> None:
        self._report(sys.exc_info()[1])

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def close(self) -> None:
        """Close the file; nothing is held back to write at close, so nothing raises here:
        the run's own error and exit status stand."""
        try:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                with contextlib.suppress(OSError):
                    os.close(fd)
        finally:
            super().close()


class RunOutput:
    """Every file of one run folder.

    ``subinterval()`` holds one subinterval's rows: written whole, or (disk full, an I/O
    error) cut back so that every file ends where the subinterval before ended. It first checks
    that the folder and its files are still there (``check_present``): a folder removed under a
    run would take every later row with it, unseen."""

    #: Files kept out of a subinterval's undo: what happened stays told.
    JOURNALS = frozenset({"events.csv"})
    #: Files checked for removal per subinterval, in turn (a run may hold tens of thousands).
    CHECKED_PER_SUBINTERVAL = 64

    def __init__(self, folder: Path, max_open_files: int | None = None) -> None:
        self.folder = folder
        self._files: dict[str, CsvAppender] = {}  # by path relative to the folder
        self._n_open = 0
        self.max_open_files = (max(8, open_file_budget()) if max_open_files is None
                               else max(1, max_open_files))
        self._log_handler: logging.Handler | None = None
        self.ledger = Ledger()
        self._next_checked = 0
        #: a resumed run: its existing files are appended to (``CsvAppender``'s ``adopt``)
        self.resuming = False
        self._folder_fd = -1  # held from the first check on: its link count tells removal

    # -------------------------------------------------------------- whole subintervals
    @contextlib.contextmanager
    def subinterval(self) -> Iterator[None]:
        """The rows written inside stand whole, or not at all: on any error every file
        written since it began is cut back (``Ledger.undo``), then the error is raised."""
        self.check_present()
        self.ledger.mark()
        try:
            yield
        except BaseException:
            self.ledger.undo()
            raise

    def check_present(self) -> None:
        """``OutputError`` when the run folder, or one of its files (a few per call, in
        turn), was removed under the run."""
        try:
            if self._folder_fd < 0:
                self._folder_fd = os.open(self.folder,
                                          os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            gone = os.fstat(self._folder_fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            raise OutputError(str(self.folder), OSError(
                errno.ENOENT, "the run folder was removed during the run; rows from here "
                "on would be lost"))
        appenders = self.ledger.appenders
        n = len(appenders)
        for _ in range(min(n, self.CHECKED_PER_SUBINTERVAL)):
            a = appenders[self._next_checked % n]
            self._next_checked = (self._next_checked + 1) % n
            if a.removed():
                raise OutputError(str(a.path), OSError(
                    errno.ENOENT, "removed during the run; rows from here on would be lost"))

    # -------------------------------------------------------------- whole-run files
    def write_text(self, name: str, text: str) -> Path:
        path = self.folder / name
        with _writing(path), open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def start_run_log(self, level: int = logging.INFO) -> logging.Handler:
        """Attach ``run.log`` to the root logger (every host's relayed stderr lands there);
        a resumed run appends to it."""
        with _writing(self.folder / "run.log"):
            handler = _RunLogHandler(self.folder / "run.log", mode="a" if self.resuming
                                     else "x", encoding="utf-8")
        handler.setFormatter(
            logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                              "%Y-%m-%d %H:%M:%S")
        )
        handler.setLevel(level)
        root = logging.getLogger()
        root.addHandler(handler)
        if root.level > level or root.level == logging.NOTSET:
            root.setLevel(level)
        self._log_handler = handler
        return handler

    def replace_table(self, name: str, header: Sequence[str],
                      rows: Sequence[Mapping[str, Any]]) -> Path:
        """A small whole-run table written whole: to a temporary file beside it, then renamed
        over the last one, so a reader sees the old table or the new, never a part."""
        path = self.folder / name
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(list(header))
        wanted = list(header)
        for row in rows:
            unknown = set(row) - set(wanted)
            if unknown:
                raise ValueError(f"{name}: columns {sorted(unknown)} not in the header")
            writer.writerow([fmt(row.get(col)) for col in wanted])
        with _writing(path):
            replace_whole(path, buf.getvalue().encode("utf-8"))
        return path

    def table(self, relative: str, header: Sequence[str]) -> CsvAppender:
        """The appender for ``relative`` (created with ``header`` on first use)."""
        f = self._files.get(relative)
        if f is None:
            parent, _, name = relative.rpartition("/")
            return self.tables(parent, [name], header)[0]
        if f.header != tuple(header):
            raise ValueError(f"{relative}: header changed within a run")
        return f

    def tables(self, relative_dir: str, names: Sequence[str], header: Sequence[str]
               ) -> list[CsvAppender]:
        """The appenders for the files ``names`` in ``relative_dir`` (``""``: the run
        folder), those not made yet created together with ``header``: the directory made
        once and each file created relative to it (a rollup type's instance files, tens of
        thousands at a time)."""
        prefix = f"{relative_dir}/" if relative_dir else ""
        want = tuple(header)
        out: list[CsvAppender] = []
        dir_fd = -1
        directory = self.folder / relative_dir if relative_dir else self.folder
        base = os.fspath(directory)
        try:
            for name in names:
                relative = prefix + name
                f = self._files.get(relative)
                if f is None:
                    if not name or "/" in name:
                        raise ValueError(f"{relative}: not a file name in {relative_dir!r}")
                    if dir_fd < 0:
                        with _writing(directory):
                            directory.mkdir(parents=True, exist_ok=True)
                            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY
                                             | os.O_CLOEXEC)
                    keep_open = self._n_open < self.max_open_files
                    f = CsvAppender(f"{base}/{name}", header, keep_open, at=(dir_fd, name),
                                    ledger=self.ledger, adopt=self.resuming)
                    f.journal = relative in self.JOURNALS
                    self._n_open += keep_open
                    self._files[relative] = f
                elif f.header != want:
                    raise ValueError(f"{relative}: header changed within a run")
                out.append(f)
        finally:
            if dir_fd >= 0:
                os.close(dir_fd)
        return out

    def close(self) -> None:
        """Close every file (all of them, even after one fails to flush its last rows) and
        detach run.log; the first failure is raised at the end."""
        first: OutputError | None = None
        for f in self._files.values():
            try:
                f.close()
            except OutputError as exc:
                first = first or exc
        self._files.clear()
        self._n_open = 0
        if self._folder_fd >= 0:
            os.close(self._folder_fd)
            self._folder_fd = -1
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None
        if first is not None:
            raise first

    # -------------------------------------------------------------- helpers
    @staticmethod
    def step_dir(step_number: int, step_name: str) -> str:
        return f"step{step_number:04d}-{safe_name(step_name)}"

    def histogram_csvs(self, relatives: Sequence[str], edges: LineTexts, names: Sequence[str],
                       inst: npt.NDArray[np.intp], bucket: npt.NDArray[np.intp],
                       counts: npt.NDArray[np.float64]) -> None:
        """Histogram files, one per instance: file ``relatives[i]`` holds a header
        (``bucket_lower_ns``, ``bucket_upper_ns``, ``names``), then its rows: row r (where
        ``inst[r] == i``; ``inst`` ascending) is bucket ``bucket[r]``'s edges
        (``edges.text(bucket[r])``: ``lower,upper`` in ns) and ``counts[r]``, whole numbers as
        integers (``histogram_count_text``). Every row of every file is formatted in one
        compiled pass (``format_lines``); each file is created (never overwritten) and written
        at once."""
        n = len(relatives)
        n_rows = inst.size
        if (bucket.shape != (n_rows,) or counts.shape != (n_rows, len(names))
                or (n_rows and not (int(inst[0]) >= 0 and int(inst[-1]) < n
                                    and bool((np.diff(inst) >= 0).all())))):
            raise ValueError(f"{n_rows} rows of counts {counts.shape} for {n} files and "
                             f"{len(names)} columns (instances ascending, below {n})")
        header = ",".join(csv_text(c) for c in ("bucket_lower_ns", "bucket_upper_ns", *names))
        head = (header + "\r\n").encode("utf-8")
        data, ends, own = format_lines(counts, "", edges.take(bucket),
                                       np.zeros(n_rows, dtype=np.bool_), "",
                                       cell=histogram_count_text)
        last = np.cumsum(np.bincount(inst, minlength=n)) - 1  # each file's last row, or less
        own_files = set(inst[list(own)].tolist())
        made: set[Path] = set()
        row = 0
        for i, rel in enumerate(relatives):
            stop = int(last[i]) + 1
            start_byte = int(ends[row - 1]) if row else 0
            end_byte = int(ends[stop - 1]) if stop else 0
            if i not in own_files:
                body = data.data[start_byte:end_byte]
            else:  # lines the kernel left to Python (rare): put together line by line
                parts = []
                for r in range(row, stop):
                    line = own.get(r)
                    parts.append(line.encode("utf-8") if line is not None else
                                 data[int(ends[r - 1]) if r else 0:int(ends[r])].tobytes())
                body = memoryview(b"".join(parts))
            row = stop
            path = self.folder / rel
            with _writing(path):
                if path.parent not in made:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    made.add(path.parent)
                with open(path, "xb") as fh:
                    try:
                        fh.write(head)
                        fh.write(body)
                        fh.flush()
                    except OSError:  # a part of a histogram is no histogram
                        with contextlib.suppress(OSError):
                            path.unlink()
                        raise
