"""CSV files as the run folder writes them: cells, rows, and files appended to in bulk.

Owns the text of a cell (``fmt``: ``%.6g``, whole numbers in full), of a row and of a header,
the appenders that keep a file's rows whole (``CsvAppender``, ``AppenderGroup``: one ``write``
per open file per flush, files past the open-file budget appended by path), the ledger of what
each file holds, and safe file names (an instance's: ``instance_file_names``).
``master.results.output`` (the folder) and the writers use them. Must not know what the
columns mean (``master.results.schema``).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import io
import logging
import math
import os
import re
import resource
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, overload

import numpy as np
import numpy.typing as npt

from protocol.errors import OutputError

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def safe_name(text: str) -> str:
    """A file name for an instance or step: unsafe characters become ``_``."""
    cleaned = _UNSAFE.sub("_", text).strip("_.") or "_"
    return cleaned[:200]


#: File names an instance's file must not take in its rollup type's folder.
RESERVED_FILE_NAMES = frozenset({"summary.csv"})


def instance_file_names(instances: Sequence[str]) -> list[str]:
    """``<safe_name>.csv`` per instance, made unique: a name already taken (two instances
    with the same safe name, or a reserved one) gets the first free ``-2``, ``-3`` ...
    suffix, in order."""
    taken = set(RESERVED_FILE_NAMES)
    out = []
    for inst in instances:
        base = safe_name(inst)
        name = f"{base}.csv"
        n = 1
        while name in taken:
            n += 1
            name = f"{base}-{n}.csv"
        taken.add(name)
        out.append(name)
    return out


#: From here on ``%.6g`` would switch to an exponent (999999.5 rounds to ``1e+06``).
_EXPONENT_FROM = 999_999.5


@contextlib.contextmanager
def writing_to(path: Path | str) -> Iterator[None]:
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


def header_bytes(header: Sequence[str]) -> bytes:
    """A header line as every result file begins with it (``csv.writer``'s)."""
    return _header_bytes(tuple(header))


@functools.lru_cache(maxsize=64)
def _header_set(header: tuple[str, ...]) -> frozenset[str]:
    return frozenset(header)


@functools.lru_cache(maxsize=64)
def _header_tuple(header: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple object per distinct header."""
    return header


def write_all(fd: int, data: bytes | memoryview) -> None:
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

    The writer threads grow it while the recorder's thread adds files (a step's cpu.csv in its
    first subinterval), which may put the sizes in a larger array: each change is made under
    one lock, so that no growth lands in an array already replaced.
    """

    def __init__(self) -> None:
        self.sizes = np.zeros(64, dtype=np.int64)
        self.appenders: list[CsvAppender] = []
        self._mark: npt.NDArray[np.int64] | None = None
        self._failed: set[int] = set()  # slots whose write failed part-way since the mark
        self._lock = threading.Lock()
        #: how many times the slots were numbered anew (``forget``): a slot kept elsewhere
        #: (``AppenderGroup``) is read again when this changed
        self.renumbered = 0

    def add(self, appender: CsvAppender, size: int) -> int:
        with self._lock:
            slot = len(self.appenders)
            if slot == self.sizes.size:
                self.sizes = np.concatenate([self.sizes, np.zeros(slot, dtype=np.int64)])
            self.sizes[slot] = size
            self.appenders.append(appender)
            return slot

    def add_many(self, appenders: Sequence[CsvAppender], size: int) -> int:
        """``add`` of each appender, each file holding ``size`` bytes; the first's slot (the
        others' follow it)."""
        with self._lock:
            first = len(self.appenders)
            stop = first + len(appenders)
            if stop > self.sizes.size:
                grown = np.zeros(max(stop, 2 * self.sizes.size), dtype=np.int64)
                grown[:first] = self.sizes[:first]
                self.sizes = grown
            self.sizes[first:stop] = size
            self.appenders.extend(appenders)
            return first

    def grow(self, slots: npt.NDArray[np.int64] | int, nbytes: npt.NDArray[np.int64] | int
             ) -> None:
        with self._lock:
            self.sizes[slots] += nbytes

    def forget(self, appenders: Sequence[CsvAppender]) -> None:
        """Drop ``appenders`` (a finished step's, no row to come: between subintervals) and
        number the rest's slots again; each dropped one is handed ``RETIRED``, so that a
        row written to it after all is an error, not a size counted in another's slot."""
        appenders = [a for a in appenders if a.ledger is self]  # each of ours, once
        if not appenders:
            return
        with self._lock:
            keep = np.ones(len(self.appenders), dtype=bool)
            keep[[a.slot for a in appenders]] = False
            kept = [a for a, k in zip(self.appenders, keep.tolist(), strict=True) if k]
            sizes = np.zeros(max(64, 2 * len(kept)), dtype=np.int64)
            sizes[:len(kept)] = self.sizes[:keep.size][keep]
            for slot, a in enumerate(kept):
                a.slot = slot
            for a in appenders:
                a.ledger, a.slot = RETIRED, -1
            self.sizes, self.appenders = sizes, kept
            self._mark = None
            self._failed.clear()
            self.renumbered += 1

    def failed(self, slot: int) -> None:
        with self._lock:
            self._failed.add(slot)

    def mark(self) -> None:
        with self._lock:
            self._mark = self.sizes[:len(self.appenders)].copy()
            self._failed.clear()

    def undo(self) -> None:
        """Cut back to the mark (nothing when there is none). A file that cannot be cut is
        left as it is: the error that called for the undo is the run's."""
        with self._lock:
            self._undo()

    def _undo(self) -> None:
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


class _Retired(Ledger):
    """The ledger of appenders a ``Ledger`` forgot: writing to one is a bug of the caller's
    (its step was over)."""

    @staticmethod
    def refuse() -> NoReturn:
        raise ValueError("a row for a file whose step has ended and was let go")

    def grow(self, slots: npt.NDArray[np.int64] | int, nbytes: npt.NDArray[np.int64] | int
             ) -> None:
        self.refuse()

    def failed(self, slot: int) -> None:
        self.refuse()


RETIRED = _Retired()


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
        with writing_to(path):
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
                    write_all(fd, head)
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

    @classmethod
    def made_many(cls, directory: str, names: Sequence[str], header: Sequence[str],
                  fds: Sequence[int], ledger: Ledger) -> list[CsvAppender]:
        """The appenders of files already made with ``header`` (and nothing else) in
        ``directory``: ``names[i]``, open as ``fds[i]`` (-1: closed), each added to
        ``ledger`` (``RunOutput.tables``: tens of thousands at a step's start)."""
        key = _header_tuple(tuple(header))
        header_set = _header_set(key)
        size = len(_header_bytes(key))
        made = []
        for name, fd in zip(names, fds, strict=True):
            a = cls.__new__(cls)
            a._path = f"{directory}/{name}"
            a._path_obj = None
            a.header = key
            a._header_set = header_set
            a.header_size = size
            a._fd_held = fd
            a.journal = False
            a.ledger = ledger
            made.append(a)
        first = ledger.add_many(made, size)
        for slot, a in enumerate(made, first):
            a.slot = slot
        return made

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

    def append_bytes(self, data: bytes) -> None:
        """``append_now`` of lines already UTF-8."""
        self._append(memoryview(data))

    def _append(self, data: memoryview, done: int = 0) -> None:
        """Write ``data[done:]`` (``done`` bytes of it already in the file: a compiled writer
        stopped there); the ledger grows by all of ``data``."""
        if self.ledger is RETIRED:
            RETIRED.refuse()  # before any byte is written
        with writing_to(self._path):
            try:
                fd = self._fd_held if self._fd_held >= 0 else os.open(
                    self._path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                try:
                    write_all(fd, data[done:])
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
        (``master.results.csvkernels.write_lines``): one ``write`` call per open file, and ``open``,
        ``write``, ``close`` by path for a file kept closed (beyond the open-file budget). A
        failed ``open`` or ``write`` is repeated here and raises an ``OutputError`` naming its
        file, which is cut back to where its line began (the lines before it stand, for
        ``Ledger.undo`` to take back with the subinterval)."""
        n = len(appenders)
        if len(ends) != n:
            raise ValueError(f"{n} files but {len(ends)} lines")
        if n == 0:
            return
        from master.results import csvkernels as kernels  # C: loaded by the first that writes

        own = own or {}
        group = appenders if isinstance(appenders, AppenderGroup) else AppenderGroup(appenders)
        group.check()  # its slots current; refused where its step has ended
        fds = group.fds().copy()
        for i in own:
            fds[i] = kernels.SKIP
        paths = path_at = None
        dirfd = kernels.AT_FDCWD
        if (fds == kernels.BY_PATH).any():
            directory, paths, path_at = group.paths()
            if directory is not None:
                try:
                    dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    dirfd = -1  # each open fails (EBADF): repeated below by its own path
        lengths = np.diff(ends, prepend=0)
        first, at = 0, None
        try:
            while True:
                i, stop, kind = kernels.write_lines(fds, data, ends, first, at, paths, path_at,
                                                    dirfd)
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
        finally:
            if dirfd >= 0:
                os.close(dirfd)
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
            with writing_to(self._path):
                os.close(fd)


class AppenderGroup(Sequence[CsvAppender]):
    """Appenders written together every subinterval (one rollup type's instance files), with
    their file descriptors read once, and again only after some appender closed its file."""

    def __init__(self, appenders: Iterable[CsvAppender]) -> None:
        self.appenders = list(appenders)
        self._fds = np.zeros(0, dtype=np.int32)
        self._closes = -1
        self._paths: tuple[str | None, npt.NDArray[np.uint8], npt.NDArray[np.int64]] | None = (
            None)
        self._ledger: Ledger | None = None
        self._slots = np.zeros(0, dtype=np.int64)
        self._numbered = -1
        self.check()

    def check(self) -> None:
        """The ledger the appenders share (else None) and their slots in it, read again once
        it has numbered its slots anew (``Ledger.forget``); a ``ValueError`` when it forgot
        some of them (their step has ended), before anything is written."""
        if self._ledger is not None and self._ledger.renumbered == self._numbered:
            return
        ledgers = {id(a.ledger): a.ledger for a in self.appenders}
        if id(RETIRED) in ledgers:
            RETIRED.refuse()
        self._ledger = next(iter(ledgers.values())) if len(ledgers) == 1 else None
        self._numbered = -1 if self._ledger is None else self._ledger.renumbered
        self._slots = np.fromiter((a.slot for a in self.appenders), dtype=np.int64,
                                  count=len(self.appenders))

    def grow(self, first: int, stop: int, nbytes: npt.NDArray[np.int64]) -> None:
        """Appenders ``first`` .. ``stop - 1`` wrote ``nbytes`` each."""
        if stop <= first:
            return
        self.check()
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

    def paths(self) -> tuple[str | None, npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The appenders' directory where they share one (else None), every appender's
        path (from that directory where there is one), NUL-terminated, in one buffer, and
        where each starts in it (for ``master.results.csvkernels.write_lines``; made once: a
        path never changes)."""
        if self._paths is None:
            parents = {os.path.dirname(a._path) for a in self.appenders}
            directory = parents.pop() if len(parents) == 1 else None
            encoded = [os.fsencode(os.path.basename(a._path) if directory is not None
                                   else a._path) + b"\0" for a in self.appenders]
            starts = np.zeros(len(encoded), dtype=np.int64)
            if encoded:
                np.cumsum([len(e) for e in encoded[:-1]], out=starts[1:])
            self._paths = (directory or None,
                           np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8), starts)
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
    text as ``fmt``, written by the compiled ``master.results.csvkernels.format_rows``; the rows it
    cannot decide (a ``%.6g`` rounding too close to call in binary, magnitudes of 1e15 or more or
    below 1e-30) are formatted with ``fmt`` itself."""
    n_rows, n_cols = values.shape
    if n_rows == 0:
        return []
    if n_cols == 0:
        return [""] * n_rows
    from master.results import csvkernels as kernels  # C: loaded by the first that writes

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

    def part(self, first: int, stop: int) -> LineTexts:
        """Texts ``first`` .. ``stop - 1``."""
        if not 0 <= first <= stop <= len(self):
            raise ValueError(f"texts {first}..{stop - 1} of {len(self)}")
        at = int(self.ends[first - 1]) if first else 0
        return LineTexts.of_bytes(self.data[at:int(self.ends[stop - 1]) if stop > first else at],
                                  self.ends[first:stop] - at)

    def take(self, which: npt.NDArray[np.intp]) -> LineTexts:
        """The texts ``which[0], which[1], ...`` (repeats allowed), gathered in one compiled
        pass."""
        from master.results import csvkernels as kernels  # C: loaded by the first that writes

        return LineTexts.of_bytes(*kernels.gather_texts(self.data, self.ends, which))


def format_lines(values: npt.NDArray[np.float64], head: str, texts: LineTexts,
                 word_last: npt.NDArray[np.bool_], word: str,
                 repeats: Sequence[tuple[int, int, int]] = (),
                 cell: Callable[[float], str] = fmt, tail: str = "",
                 ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], dict[int, str]]:
    """Line ``i``: ``head``, ``texts.text(i)``, then row ``i`` of ``values`` as ``fmt`` cells
    (the last one ``word`` where ``word_last[i]``), each after a comma, ``tail``, and CRLF, as
    ``csv.writer`` ends a row. Returns the UTF-8 bytes of all lines and where each ends
    (written by the compiled ``master.results.csvkernels.format_lines``; valid until its next call)
    and the lines it could not decide, as text made with ``cell`` (``fmt``, or a function that
    writes the same text wherever the kernel decides; ``CsvAppender.append_block`` takes all
    three). ``repeats``: blocks of columns whose text is copied from an earlier block's where
    the numbers are the same (``master.results.csvkernels.format_lines``)."""
    from master.results import csvkernels as kernels  # C: loaded by the first that writes

    n = values.shape[0]
    if len(texts) != n or word_last.shape != (n,):
        raise ValueError(f"{n} rows but {len(texts)} texts and {word_last.shape} words")
    data, ends, fallback = kernels.format_lines(
        values, head.encode("utf-8"), texts.data, texts.ends, word_last, word.encode("utf-8"),
        True, tail.encode("utf-8") + b"\r\n", repeats)
    own = {}
    for i in np.flatnonzero(fallback).tolist():
        cells = [cell(float(v)) for v in values[i]]
        if word_last[i] and cells:
            cells[-1] = word
        own[i] = "".join([head, texts.text(i), ",", ",".join(cells), tail, "\r\n"])
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
