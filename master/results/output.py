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
import io
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from master.results.csvfiles import (
    CsvAppender,
    Ledger,
    LineTexts,
    csv_text,
    fmt,
    format_lines,
    header_bytes,
    histogram_count_text,
    open_file_budget,
    safe_name,
    write_all,
    writing_to,
)
from master.results.wholefile import replace_whole
from protocol.errors import OutputError

log = logging.getLogger(__name__)

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
            write_all(self._fd, data)
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


class NewFiles:
    """A directory's new result files (``RunOutput.new_files``): ``create`` makes them in one
    compiled call (``create_headed``: each created, never over a file that exists, with its
    header; the first ``keep`` held open), on any thread, the GIL released; then
    ``RunOutput.take_made``. ``failed``: None before ``create``, then the index of the file
    that could not be made (its error ``err``), or -1."""

    def __init__(self, prefix: str, base: str, names: list[str], header: tuple[str, ...],
                 head: bytes, dir_fd: int, keep: int) -> None:
        self.prefix, self.base, self.names, self.header = prefix, base, names, header
        self._head, self._dir_fd, self.keep = head, dir_fd, keep
        self.fds: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.failed: int | None = None
        self.err = 0

    def create(self) -> None:
        from master.results import csvkernels as kernels  # C: loaded by the first that writes

        try:
            self.fds, self.failed, self.err = kernels.create_headed(
                self._dir_fd, self.names, self._head, self.keep)
        finally:
            self.close()

    def close(self) -> None:
        """Let go of the directory (``create`` does, however it ends)."""
        if self._dir_fd >= 0:
            fd, self._dir_fd = self._dir_fd, -1
            os.close(fd)


class RunOutput:
    """Every file of one run folder.

    ``subinterval()`` holds one subinterval's rows: written whole, or (disk full, an I/O
    error) cut back so that every file ends where the subinterval before ended. It first checks
    that the folder and its files are still there (``check_present``): a folder removed under a
    run would take every later row with it, unseen."""

    #: Files kept out of a subinterval's undo: what happened stays told.
    JOURNALS = frozenset({"events.csv"})
    #: ``tables`` makes this many new files or more in one compiled call (``create_headed``)
    MADE_TOGETHER = 16
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
        #: the folders let go of (``release_folder``), each with its trailing slash
        self._released: list[str] = []
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
        with writing_to(path), open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def start_run_log(self, level: int = logging.INFO) -> logging.Handler:
        """Attach ``run.log`` to the root logger (every host's relayed stderr lands there);
        a resumed run appends to it."""
        with writing_to(self.folder / "run.log"):
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
        with writing_to(path):
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
        if self._released:
            self._check_not_released(prefix)
        want = tuple(header)
        out: list[CsvAppender] = []
        dir_fd = -1
        directory = self.folder / relative_dir if relative_dir else self.folder
        base = os.fspath(directory)
        if not self.resuming and len(names) >= self.MADE_TOGETHER:
            self._make_together(relative_dir, names, header)
        try:
            for name in names:
                relative = prefix + name
                f = self._files.get(relative)
                if f is None:
                    if not name or "/" in name:
                        raise ValueError(f"{relative}: not a file name in {relative_dir!r}")
                    if dir_fd < 0:
                        with writing_to(directory):
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

    def _make_together(self, relative_dir: str, names: Sequence[str], header: Sequence[str]
                       ) -> None:
        """``tables``' new files of ``names`` (plain names, not yet made by this run, each
        once) made in one compiled call (``new_files``); the rest of the names are left to
        ``tables``' own loop, which finds these made."""
        prefix = f"{relative_dir}/" if relative_dir else ""
        new: list[str] = []
        seen: set[str] = set()
        for name in names:
            if (name and "/" not in name and "\0" not in name and name not in seen
                    and prefix + name not in self._files):
                seen.add(name)
                new.append(name)
        if new:
            made = self.new_files(relative_dir, new, header)
            made.create()
            self.take_made(made)

    def new_files(self, relative_dir: str, names: Sequence[str], header: Sequence[str]
                  ) -> NewFiles:
        """Files ``names`` of ``relative_dir`` to be made with ``header``: plain names, each
        once, of files that do not exist (each is created exclusively: one that does is an
        error). ``NewFiles.create`` makes them, on any thread; ``take_made`` then gives
        their appenders. Their share of the open-file budget is set aside here, so that
        slices made at once on several threads hold the files ``tables`` would hold."""
        prefix = f"{relative_dir}/" if relative_dir else ""
        if self._released:
            self._check_not_released(prefix)
        directory = self.folder / relative_dir if relative_dir else self.folder
        with writing_to(directory):
            directory.mkdir(parents=True, exist_ok=True)
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        keep = min(len(names), max(0, self.max_open_files - self._n_open))
        self._n_open += keep
        return NewFiles(prefix, os.fspath(directory), list(names), tuple(header),
                        header_bytes(header), dir_fd, keep)

    def drop_new(self, new: NewFiles) -> None:
        """Forget ``new``, whose ``create`` raised before making any file (or never ran): its
        share of the open-file budget given back, its directory let go of."""
        new.close()
        self._n_open -= new.keep

    def take_made(self, new: NewFiles) -> list[CsvAppender]:
        """The appenders of ``new``'s files (``create`` done), in its names' order. A file
        that could not be made is an ``OutputError`` naming it, the files before it kept as
        made (taken in here all the same, so that they are closed with the run)."""
        if new.failed is None:
            raise RuntimeError(f"{new.base}: its files were not made")
        made = new.names if new.failed < 0 else new.names[:new.failed]
        appenders = CsvAppender.made_many(new.base, made, new.header,
                                          new.fds[:len(made)].tolist(), self.ledger)
        for name, a in zip(made, appenders, strict=True):
            a.journal = new.prefix + name in self.JOURNALS
            self._files[new.prefix + name] = a
        self._n_open -= new.keep - min(new.keep, len(made))  # what a failure left unheld
        if new.failed >= 0:
            raise OutputError(f"{new.base}/{new.names[new.failed]}",
                              OSError(new.err, os.strerror(new.err)))
        return appenders

    def release_folder(self, relative_dir: str) -> None:
        """Let go of the files under ``relative_dir`` (a finished step's folder: its instance
        files, cpu.csv and the rest get no row again): each closed, its descriptor given back
        to the open-file budget for the steps after it, and its appender forgotten (by this
        output and by the ledger). Held to the run's end, a step's files took the budget from
        the steps after it (at 10,000 workloads, 12,604 files a step against a budget of
        19,744: from the third step on every file was opened, appended to and closed each
        subinterval) and their appenders about 500 bytes of memory each, a step at a time.
        A file under the folder asked for again is a ``ValueError``. Every file is closed;
        the first close that fails is raised then (``OutputError`` naming its file)."""
        prefix = f"{relative_dir}/"
        gone = [relative for relative in self._files if relative.startswith(prefix)]
        appenders = [self._files.pop(relative) for relative in gone]
        self._released.append(prefix)
        first: OutputError | None = None
        for a in appenders:
            if a.is_open:
                self._n_open -= 1
                try:
                    a.close()
                except OutputError as exc:
                    first = first or exc
        self.ledger.forget(appenders)
        if first is not None:
            raise first

    def _check_not_released(self, relative: str) -> None:
        if any(relative.startswith(p) for p in self._released):
            raise ValueError(f"{relative}: its step's files were let go when it ended "
                             "(RunOutput.release_folder)")

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
        at once, all of them in one compiled call (``create_files``)."""
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
        from master.results import csvkernels as kernels

        stops = np.cumsum(np.bincount(inst, minlength=n))  # each file's rows end here
        firsts = np.concatenate([[0], stops[:-1]]).astype(np.int64)
        at = np.concatenate([[0], ends]).astype(np.int64)  # where row r starts: at[r]
        starts, stop_bytes = at[firsts], at[stops]
        own_files = set(inst[list(own)].tolist())
        starts[list(own_files)] = -1  # lines the kernel left to Python (rare): written below
        paths = [f"{self.folder}/{rel}" for rel in relatives]
        for parent in {os.path.dirname(p) for p in paths}:
            with writing_to(parent):
                os.makedirs(parent, exist_ok=True)
        failed, err = kernels.create_files(paths, head, data, starts, stop_bytes)
        if failed >= 0:  # made in part: removed by the kernel
            raise OutputError(paths[failed], OSError(err, os.strerror(err)))
        for i in sorted(own_files):
            parts = []
            for r in range(int(firsts[i]), int(stops[i])):
                line = own.get(r)
                parts.append(line.encode("utf-8") if line is not None else
                             data[int(ends[r - 1]) if r else 0:int(ends[r])].tobytes())
            path = self.folder / relatives[i]
            with writing_to(path), open(path, "xb") as fh:
                try:
                    fh.write(head)
                    fh.write(b"".join(parts))
                    fh.flush()
                except OSError:  # a part of a histogram is no histogram
                    with contextlib.suppress(OSError):
                        path.unlink()
                    raise
