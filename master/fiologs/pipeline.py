"""``fio-pctiles`` end to end: logs in, per-quantum cluster-wide percentiles out.

Owns the order of work (check layouts, pick the quantum, stream every file through parse ->
optional client/server repair -> windows -> spreading into one accumulator, then percentiles
per quantum and direction group) and the warnings a user must see. It must not parse command
lines (``master.cli.fio_pctiles``) and writes nothing but the CSV it is handed a stream for.

Files are handed out one at a time, in order, to ``jobs`` processes (one per CPU by default,
for large inputs; this one reads too); each adds its files into its own accumulator, and the
sums are added here. Warnings are reported in
file order and a malformed line stops the run at the first file, in order, that has one, as
with a single process.

Memory: each process reads one file at a time in chunks of about ``chunk_bytes`` of text; what
stays is its accumulator, ``slots x quanta x columns`` float64 (1 slot for ``merged`` only, 3
when a single direction is asked for), e.g. 53 MB for 3,600 one-second quanta of uncoarsened
fio 3 logs.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TextIO

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # imported where used: a single reading process needs neither (25 ms)
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing.context import BaseContext

from master.fiologs.align import (
    ExportedSums,
    QuantumAccumulator,
    RowWindows,
    TooManyQuanta,
    detect_interval_ms,
    looks_absolute,
    spread_rows,
)
from master.fiologs.columns import ColumnLayout, layout_for_columns
from master.fiologs.parse import (
    DEFAULT_CHUNK_BYTES,
    DIRECTION_NAMES,
    HEADER_FIELDS,
    HistBlock,
    LogReader,
    Scratch,
    count_fields,
    first_line,
)
from master.fiologs.pctiles import (
    UNIT_NS,
    Stats,
    format_samples,
    format_value,
    percentile_label,
    percentile_matrix,
)
from master.fiologs.repair import ClientLogRepairer, ShapeDetector
from protocol.cpulist import usable_cpus
from protocol.errors import ConfigError, LogFormatError

logger = logging.getLogger(__name__)

DIRECTION_GROUPS: Final = ("read", "write", "trim", "merged")
TIME_BASES: Final = ("auto", "relative", "absolute")
_STATS_BLOCK: Final = 1024
_HEAD_BYTES: Final = 1 << 20
#: With ``jobs`` unset, use one reading process per CPU, at most this many (each holds an
#: accumulator of its own), and only for inputs of at least ``PARALLEL_MIN_BYTES``.
MAX_AUTO_JOBS: Final = 4
PARALLEL_MIN_BYTES: Final = 64 << 20


@dataclass(frozen=True)
class PctileOptions:
    """What ``ivypy fio-pctiles`` was asked for (validated by ``validate``)."""

    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
    unit: str = "us"
    directions: tuple[str, ...] = ("merged",)
    time_quantum_s: float | None = None
    log_hist_msec: float | None = None
    fio_version: int | None = None
    time_base: str = "auto"
    summary: bool = False
    repair_client_logs: bool = False
    skip_bad_lines: bool = False
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    jobs: int | None = None  # reading processes; None: one per CPU (at most MAX_AUTO_JOBS)

    def validate(self) -> None:
        if not self.percentiles:
            raise ConfigError("at least one percentile is needed", key_path="percentiles")
        for p in self.percentiles:
            if not 0 <= p <= 100:
                raise ConfigError(f"{p} is not within 0..100", key_path="percentiles")
        if len(set(self.percentiles)) != len(self.percentiles):  # two columns of one name
            twice = sorted({p for p in self.percentiles if self.percentiles.count(p) > 1})
            raise ConfigError(f"{', '.join(f'{p:g}' for p in twice)} given twice: name each "
                              "percentile once", key_path="percentiles")
        if self.unit not in UNIT_NS:
            raise ConfigError(f"unit must be one of {', '.join(UNIT_NS)}", key_path="unit")
        if not self.directions or len(set(self.directions)) != len(self.directions):
            raise ConfigError("name each direction group once", key_path="directions")
        for d in self.directions:
            if d not in DIRECTION_GROUPS:
                raise ConfigError(
                    f"{d!r} is not one of {', '.join(DIRECTION_GROUPS)}", key_path="directions"
                )
        q = self.time_quantum_s
        if q is not None and not (math.isfinite(q) and q >= 1e-9):
            raise ConfigError(f"{q:g}: must be a finite number of seconds, at least 1e-9 (1 ns)",
                              key_path="time_quantum")
        m = self.log_hist_msec
        if m is not None and not (math.isfinite(m) and m > 0):
            raise ConfigError(f"{m:g}: must be a finite number of ms > 0",
                              key_path="log_hist_msec")
        if self.fio_version not in (None, 2, 3):
            raise ConfigError("must be 2 or 3", key_path="fio_version")
        if self.time_base not in TIME_BASES:
            raise ConfigError(f"must be one of {', '.join(TIME_BASES)}", key_path="time_base")
        if self.jobs is not None and self.jobs < 1:
            raise ConfigError("must be at least 1", key_path="jobs")


@dataclass
class PctileResult:
    """Per-quantum statistics for each direction group, ready to print."""

    options: PctileOptions
    layout: ColumnLayout
    quantum_ms: float
    absolute: bool
    quanta: npt.NDArray[np.int64]
    groups: dict[str, Stats]
    summary: dict[str, Stats] | None
    files: int
    warnings: list[str] = field(default_factory=list)

    def header(self) -> list[str]:
        u = self.options.unit
        cols = ["start_ms", "end_ms"]
        for group in self.options.directions:
            prefix = "" if group == "merged" else f"{group}_"
            cols.append(f"{prefix}samples")
            cols.append(f"{prefix}min_{u}")
            cols.extend(f"{prefix}{percentile_label(p)}_{u}" for p in self.options.percentiles)
            cols.append(f"{prefix}max_{u}")
        return cols

    def rows(self) -> Iterator[list[str]]:
        for i, q in enumerate(self.quanta):
            yield self._row(float(q) * self.quantum_ms, float(q + 1) * self.quantum_ms,
                            self.groups, i)
        if self.summary is not None and self.quanta.size:
            yield self._row(float(self.quanta[0]) * self.quantum_ms,
                            float(self.quanta[-1] + 1) * self.quantum_ms, self.summary, 0)

    def _row(self, start_ms: float, end_ms: float, groups: dict[str, Stats], i: int) -> list[str]:
        u = self.options.unit
        row = [_format_ms(start_ms), _format_ms(end_ms)]
        for group in self.options.directions:
            s = groups[group]
            row.append(format_samples(float(s.samples[i])))
            row.append(format_value(float(s.min_ns[i]), u))
            row.extend(format_value(float(v), u) for v in s.pct_ns[i])
            row.append(format_value(float(s.max_ns[i]), u))
        return row

    def write_csv(self, out: TextIO) -> None:
        out.write(",".join(self.header()) + "\n")
        for row in self.rows():
            out.write(",".join(row) + "\n")


def _format_ms(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


@dataclass
class _FileInfo:
    path: str
    first_line_no: int
    n_columns: int
    absolute: bool


def _inspect(path: str, options: PctileOptions) -> _FileInfo | None:
    head = first_line(path)
    if head is None:
        return None
    line_no, line = head
    n_columns = count_fields(line) - HEADER_FIELDS
    try:
        first_stamp = int(line.split(b",", 1)[0])
    except ValueError as exc:
        raise LogFormatError("the first field is not a time stamp", file=path,
                             line=line_no) from exc
    if options.time_base == "auto":
        absolute = looks_absolute(first_stamp)
    else:
        absolute = options.time_base == "absolute"
    return _FileInfo(path, line_no, n_columns, absolute)


def _check_layouts(infos: list[_FileInfo], options: PctileOptions) -> ColumnLayout:
    first = infos[0]
    for info in infos[1:]:
        if info.n_columns != first.n_columns:
            raise LogFormatError(
                f"{info.n_columns} histogram columns, but {first.path} has {first.n_columns}: "
                "logs of different layouts (fio version or log_hist_coarseness) cannot be added",
                file=info.path,
                line=info.first_line_no,
            )
        if info.absolute != first.absolute:
            raise LogFormatError(
                "time stamps are "
                + ("Unix-epoch" if info.absolute else "job-relative")
                + f" but {first.path}'s are not; use logs of one kind or --time-base",
                file=info.path,
                line=info.first_line_no,
            )
    layout = layout_for_columns(first.n_columns, options.fio_version)
    if layout is None:
        wanted = {None: "fio 3 (1856 >> c) or fio 2 (1216 >> c)", 3: "fio 3 (1856 >> c)",
                  2: "fio 2 (1216 >> c)"}[options.fio_version]
        raise LogFormatError(
            f"{first.n_columns} histogram columns is not a {wanted} histogram log layout",
            file=first.path,
            line=first.first_line_no,
        )
    return layout


def _detect_interval(infos: list[_FileInfo], options: PctileOptions, scratch: Scratch) -> float:
    if options.log_hist_msec is not None:
        return float(options.log_hist_msec)
    for info in infos:
        reader = LogReader(info.path, info.n_columns, skip_bad_lines=options.skip_bad_lines,
                           chunk_bytes=_HEAD_BYTES, scratch=scratch)
        for block in reader.blocks():
            interval = detect_interval_ms(block.times_ms, block.dirs)
            if interval is not None:
                return interval
            break
    raise LogFormatError(
        "cannot detect the logging interval (no log has two rows of one direction): "
        "give --time-quantum or --log-hist-msec",
        file=infos[0].path,
    )


#: A warning about one file (logged by the process that reports it, in file order).
_Note = str
#: The malformed line that stopped reading: file index, message, file, line.
_FileError = tuple[int, str, str, int | None]


class _FileQueue(Protocol):
    """Hands the files out one at a time, in file order; after a file with a malformed line it
    hands out none that come later."""

    def claim(self) -> int | None:
        """The next file's index, or None when there is none left."""

    def stop_at(self, index: int) -> None:
        """Hand out no file from ``index`` on."""


class _LocalFileQueue:
    """A ``_FileQueue`` for a single reading process."""

    def __init__(self, n_files: int) -> None:
        self._next = 0
        self._stop = n_files

    def claim(self) -> int | None:
        if self._next >= self._stop:
            return None
        self._next += 1
        return self._next - 1

    def stop_at(self, index: int) -> None:
        self._stop = min(self._stop, index)


class _SharedFileQueue:
    """A ``_FileQueue`` for several reading processes (counters in shared memory), so that a
    process slowed down by other work on the machine just reads fewer files."""

    def __init__(self, n_files: int, context: BaseContext) -> None:
        self._next = context.Value("q", 0)
        self._stop = context.Value("q", n_files)

    def claim(self) -> int | None:
        with self._next.get_lock():
            index = int(self._next.value)
            if index >= int(self._stop.value):
                return None
            self._next.value = index + 1
        return index

    def stop_at(self, index: int) -> None:
        with self._stop.get_lock():
            self._stop.value = min(int(self._stop.value), index)


_child_queue: _FileQueue | None = None  # a reading process's queue, set as it starts


def _init_child(queue: _FileQueue) -> None:
    global _child_queue
    _child_queue = queue


@dataclass(frozen=True)
class _ReadTask:
    """What a reading process needs: every file (it claims which to read) and the settings."""

    files: list[_FileInfo]
    layout: ColumnLayout
    interval_ms: float
    quantum_ms: float
    separate: bool
    options: PctileOptions
    max_bytes: int  # the most each reading process's sums may take



@dataclass
class _ReadOutcome:
    """What one reading process found: sums over its files, each file's warnings, and the
    first malformed line that stopped it (message, file, line), if any."""

    sums: ExportedSums
    warnings: dict[int, list[_Note]]
    error: _FileError | None


def _error_parts(exc: LogFormatError) -> tuple[str, str, int | None]:
    """(message, file, line) of a LogFormatError, to raise it again in another process."""
    text = str(exc)
    prefix = f"{exc.file}:{exc.line}: " if exc.line else f"{exc.file}: "
    return text.removeprefix(prefix), exc.file, exc.line


def _read_files(
    task: _ReadTask, queue: _FileQueue, acc: QuantumAccumulator
) -> tuple[dict[int, list[_Note]], _FileError | None]:
    """Add the files claimed from ``queue`` to ``acc`` (in file order); stop at the first
    malformed line. Every file before the one that stops the run is read by some process."""
    scratch = Scratch()
    warnings: dict[int, list[_Note]] = {}
    while (index := queue.claim()) is not None:
        notes = warnings.setdefault(index, [])
        try:
            _add_file(task.files[index], task, acc, scratch, notes)
        except LogFormatError as exc:
            queue.stop_at(index)
            return warnings, (index, *_error_parts(exc))
    return warnings, None


def _read_in_child(task: _ReadTask) -> _ReadOutcome:
    """Entry point of a reading process of the pool."""
    if _child_queue is None:
        raise RuntimeError("reading process started without its file queue")
    return _read_outcome(task, _child_queue)


def _read_outcome(task: _ReadTask, queue: _FileQueue) -> _ReadOutcome:
    """A reading process's files, claimed from ``queue``, into sums of its own."""
    acc = QuantumAccumulator(3 if task.separate else 1, task.layout.n_columns, task.max_bytes)
    with _roomy_heap():
        warnings, error = _read_files(task, queue, acc)
    return _ReadOutcome(acc.export(), warnings, error)


def _add_file(
    info: _FileInfo,
    task: _ReadTask,
    acc: QuantumAccumulator,
    scratch: Scratch,
    notes: list[_Note],
) -> None:
    """Stream one file into ``acc``; its warnings go to ``notes`` (in the order a user should
    read them)."""
    opts = task.options
    layout = task.layout
    reader = LogReader(info.path, layout.n_columns, skip_bad_lines=opts.skip_bad_lines,
                       chunk_bytes=opts.chunk_bytes, scratch=scratch)
    detector = ShapeDetector()
    pending: list[HistBlock] = []
    blocks = reader.blocks()
    for block in blocks:  # hold blocks back until the shape test has seen enough rows
        detector.feed(block)
        pending.append(block)
        if detector.full:
            break
    shaped = detector.verdict()
    repairer = ClientLogRepairer(info.path) if shaped and opts.repair_client_logs else None
    if shaped and not opts.repair_client_logs:
        notes.append(
            f"{info.path}: looks like a log written by fio in client/server mode (each row "
            "holds its window plus the row logged two before it): rerun with "
            "--repair-client-logs"
        )
    elif opts.repair_client_logs and not shaped:
        notes.append(f"{info.path}: not in the client/server shape; read as it is")
    file_interval = None
    if pending:
        file_interval = detect_interval_ms(pending[0].times_ms, pending[0].dirs)
    windows = RowWindows(absolute=info.absolute,
                         interval_ms=file_interval if file_interval else task.interval_ms)
    if pending:
        _reserve(acc, info, pending, reader.text_bytes, task)

    def stream() -> Iterator[HistBlock]:
        yield from pending
        yield from blocks

    for block in stream():
        if repairer is not None:
            block = repairer.repair(block)
        start, end = windows.windows(block)
        q = task.quantum_ms
        q_lo = math.floor(float(start.min()) / q)
        acc.check_room(q_lo, max(q_lo, math.ceil(float(end.max()) / q) - 1))
        spread = spread_rows(start, end, q)
        slots = block.dirs if task.separate else np.zeros(block.n_rows, dtype=np.int64)
        acc.add(block, slots, spread)
    pending.clear()
    notes.extend(reader.warnings)
    if reader.skipped_lines > len(reader.warnings):
        notes.append(f"{info.path}: {reader.skipped_lines} malformed lines skipped in all")


def _file_bytes(info: _FileInfo) -> int:
    try:
        return Path(info.path).stat().st_size
    except OSError:
        return 0  # reading it will say why


def _reserve(acc: QuantumAccumulator, info: _FileInfo, head: list[HistBlock], head_bytes: int,
             task: _ReadTask) -> None:
    """Size ``acc`` for the whole file from its first rows, assuming rows of the same length
    and cadence (for a gzip file it underestimates, and ``acc`` grows as it must)."""
    first_ms = float(head[0].times_ms[0])
    last_ms = float(head[-1].times_ms[-1])
    if head_bytes <= 0 or last_ms <= first_ms:
        return
    span_ms = (last_ms - first_ms) * max(_file_bytes(info) / head_bytes, 1.0) * 1.02
    q = task.quantum_ms
    lead_ms = 0.0 if info.absolute else first_ms  # relative logs' first rows start at 0
    acc.reserve(math.floor((first_ms - lead_ms - task.interval_ms) / q),
                math.ceil((first_ms + span_ms) / q))


def _auto_jobs(infos: list[_FileInfo]) -> int:
    if len(infos) < 2 or sum(map(_file_bytes, infos)) < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(len(usable_cpus()), MAX_AUTO_JOBS, len(infos)))


_M_TOP_PAD: Final = -2  # glibc mallopt parameter
_GLIBC_TOP_PAD_BYTES: Final = 128 << 10  # its default
_ROOMY_TOP_PAD_BYTES: Final = 64 << 20


@contextlib.contextmanager
def _roomy_heap() -> Iterator[None]:
    """Let glibc keep up to 64 MB of freed heap while logs are read, instead of handing it
    back to the kernel after every chunk and faulting it in again for the next one's work
    arrays (that cost about a fifth of the CPU time). Restored afterwards; nothing happens
    where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        yield
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_TOP_PAD, _ROOMY_TOP_PAD_BYTES)
    try:
        yield
    finally:
        mallopt(_M_TOP_PAD, _GLIBC_TOP_PAD_BYTES)


def _can_fork() -> bool:
    """Whether reading processes may be forked from this one: where there is fork and this
    process runs no other thread (forking one that does can copy a lock some thread holds,
    logging's say, and hang the child)."""
    return hasattr(os, "fork") and hasattr(os, "memfd_create") and threading.active_count() == 1


def _start_method() -> str:
    """fork starts a reader in milliseconds with everything already imported, but forking a
    process that runs other threads can copy a lock some thread holds (logging's, say) and
    hang the child: then, and where there is no fork, start fresh interpreters."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _sums_bytes(jobs: int) -> int:
    """The most each of ``jobs`` reading processes' sums may take: together half of the
    memory available now (the percentiles then need about as much again)."""
    return _available_bytes() // 2 // max(jobs, 1)


def _available_bytes() -> int:
    """The memory available now: Linux's ``MemAvailable``, which is what psutil reports,
    read without importing psutil (10 ms of a small run's start); psutil elsewhere."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def _quanta_error(exc: TooManyQuanta, quantum_ms: float, slots: int, columns: int,
                  jobs: int) -> ConfigError:
    """What the user is told when the logs span more quanta than the sums may hold."""
    gib = float(exc.need * slots * columns * 8) / (1 << 30)
    limit_gib = float(exc.limit * slots * columns * 8) / (1 << 30)
    shared = f", shared by {jobs} reading processes" if jobs > 1 else ""
    shortest_s = quantum_ms * exc.need / exc.limit / 1000.0
    return ConfigError(
        f"the logs span {exc.need * quantum_ms / 1000.0:,.0f} s, {exc.need:,} quanta of "
        f"{quantum_ms / 1000.0:g} s, whose sums would take {gib:,.1f} GiB, over the "
        f"{limit_gib:,.1f} GiB kept for them (half of this host's available memory{shared}); "
        f"give --time-quantum of at least {_round_up_nicely(shortest_s):g} s, or logs whose "
        "stamps are less far apart", key_path="time_quantum")


def _round_up_nicely(x: float) -> float:
    """``x`` rounded up to 1, 2 or 5 times a power of ten."""
    p = 10.0 ** math.floor(math.log10(x))
    return next(m * p for m in (1.0, 2.0, 5.0, 10.0) if m * p >= x * (1 - 1e-12))


def _process_pool(workers: int, context: BaseContext, queue: _FileQueue) -> ProcessPoolExecutor:
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=workers, mp_context=context,
                               initializer=_init_child, initargs=(queue,))


_Read = tuple[dict[int, list[_Note]], _FileError | None]


def _read_forked(task: _ReadTask, jobs: int, acc: QuantumAccumulator
                 ) -> tuple[_Read, list[_ReadOutcome]]:
    """This process's files into ``acc``, and the outcomes of ``jobs - 1`` children forked
    from it that read the others (``master.fiologs.forked``)."""
    from master.fiologs import forked

    queue = forked.ClaimQueue(len(task.files))
    try:
        readers = forked.fork_readers(jobs - 1, lambda: _read_outcome(task, queue))
        try:
            own = _read_files(task, queue, acc)  # this process reads too
        except BaseException:
            readers.stop()
            raise
        return own, readers.results()
    finally:
        queue.close()


def _read_pooled(task: _ReadTask, jobs: int, acc: QuantumAccumulator
                 ) -> tuple[_Read, list[_ReadOutcome]]:
    """``_read_forked`` by a pool of ``jobs - 1`` fresh interpreters (this process runs
    other threads, or cannot fork)."""
    import multiprocessing

    context = multiprocessing.get_context(_start_method())
    queue = _SharedFileQueue(len(task.files), context)
    with _process_pool(jobs - 1, context, queue) as pool:
        futures = [pool.submit(_read_in_child, task) for _ in range(jobs - 1)]
        own = _read_files(task, queue, acc)  # this process reads too
        return own, [future.result() for future in futures]


class _Run:
    """One fio-pctiles computation; see the module docstring."""

    def __init__(self, paths: Sequence[str | Path], options: PctileOptions) -> None:
        options.validate()
        if not paths:
            raise ConfigError("no log files given", key_path="LOG")
        self.options = options
        self.paths = [str(p) for p in paths]
        self.warnings: list[str] = []
        self.scratch = Scratch()

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        logger.warning("%s", text)

    def compute(self) -> PctileResult:
        opts = self.options
        infos: list[_FileInfo] = []
        for path in self.paths:
            info = _inspect(path, opts)
            if info is None:
                self.warn(f"{path}: no histogram rows; skipped")
            else:
                infos.append(info)
        if not infos:
            raise LogFormatError("no histogram rows in any log", file=self.paths[0])
        layout = _check_layouts(infos, opts)
        interval_ms = _detect_interval(infos, opts, self.scratch)
        quantum_ms = (  # whole ns: 4.02 s is 4020 ms, not 4019.9999999999995
            round(opts.time_quantum_s * 1000.0, 6) if opts.time_quantum_s is not None
            else interval_ms
        )
        separate = opts.directions != ("merged",)
        jobs = min(opts.jobs if opts.jobs is not None else _auto_jobs(infos), len(infos))
        task = _ReadTask(infos, layout, interval_ms, quantum_ms, separate, opts,
                         _sums_bytes(jobs))
        acc = QuantumAccumulator(3 if separate else 1, layout.n_columns, task.max_bytes)
        try:
            self._read(task, jobs, acc)
        except TooManyQuanta as exc:
            raise _quanta_error(exc, quantum_ms, 3 if separate else 1, layout.n_columns,
                                jobs) from None
        open_count = acc.column_total(layout.n_columns - 1)
        if open_count > 0:
            edge_ms = layout.open_lower_ns / 1e6
            self.warn(
                f"{format_samples(open_count)} samples are in fio's last histogram bucket, "
                f"which holds every latency >= {edge_ms:.3f} ms; percentiles and max that fall "
                f"there are reported as {edge_ms:.3f} ms (a lower bound)"
            )
        quanta = acc.quanta()
        groups = {
            g: self._group_stats(acc, g, quanta, separate, layout) for g in opts.directions
        }
        summary = None
        if opts.summary:
            summary = {
                g: self._summary_stats(acc, g, quanta, separate, layout) for g in opts.directions
            }
        return PctileResult(opts, layout, quantum_ms, infos[0].absolute, quanta, groups,
                            summary, len(infos), self.warnings)

    # ----------------------------------------------------------------- reading
    def _read(self, task: _ReadTask, jobs: int, acc: QuantumAccumulator) -> None:
        """Every file into ``acc``: in this process, or by ``jobs`` processes (this one among
        them) that claim files in order and whose sums are added here. Warnings and the error
        reported are the same either way: files are reported in order, and a malformed line
        stops the run at the first file (in order) that has one."""
        infos = task.files
        others: list[_ReadOutcome] = []
        with _roomy_heap():
            if jobs == 1:
                own = _read_files(task, _LocalFileQueue(len(infos)), acc)
            elif _can_fork():
                own, others = _read_forked(task, jobs, acc)
            else:
                own, others = _read_pooled(task, jobs, acc)
        warnings, error = own
        errors = [error] if error else []
        for outcome in others:  # each other process's sums, added here
            acc.merge(outcome.sums)
            warnings.update(outcome.warnings)
            errors.extend([outcome.error] if outcome.error else [])
        stop = min(errors)[0] if errors else len(infos)
        for index in sorted(warnings):
            if index > stop:
                break
            for text in warnings[index]:
                self.warn(text)
        if errors:
            _, message, file, line = min(errors)
            raise LogFormatError(message, file=file, line=line)

    # ----------------------------------------------------------------- statistics
    def _group_counts(
        self, acc: QuantumAccumulator, group: str, q0: int, q1: int, separate: bool,
        cols: slice | npt.NDArray[np.int64] = slice(None),
    ) -> npt.NDArray[np.float64]:
        if not separate:
            return acc.counts(0, q0, q1)[:, cols]
        if group == "merged":
            return (acc.counts(0, q0, q1)[:, cols] + acc.counts(1, q0, q1)[:, cols]
                    + acc.counts(2, q0, q1)[:, cols])
        return acc.counts(DIRECTION_NAMES.index(group), q0, q1)[:, cols]

    def _group_stats(
        self,
        acc: QuantumAccumulator,
        group: str,
        quanta: npt.NDArray[np.int64],
        separate: bool,
        layout: ColumnLayout,
    ) -> Stats:
        parts: list[Stats] = []
        cols = _stats_columns(acc)
        lower_ns, upper_ns = layout.lower_ns[cols], layout.upper_ns[cols]
        for i in range(0, quanta.size, _STATS_BLOCK):
            q0 = int(quanta[i])
            q1 = int(quanta[min(i + _STATS_BLOCK, quanta.size) - 1]) + 1
            counts = self._group_counts(acc, group, q0, q1, separate, cols)
            parts.append(percentile_matrix(counts, self.options.percentiles, lower_ns, upper_ns))
        if not parts:
            p = len(self.options.percentiles)
            empty = np.zeros(0)
            return Stats(empty, empty, np.zeros((0, p)), empty)
        return Stats(
            np.concatenate([s.samples for s in parts]),
            np.concatenate([s.min_ns for s in parts]),
            np.concatenate([s.pct_ns for s in parts]),
            np.concatenate([s.max_ns for s in parts]),
        )

    def _summary_stats(
        self,
        acc: QuantumAccumulator,
        group: str,
        quanta: npt.NDArray[np.int64],
        separate: bool,
        layout: ColumnLayout,
    ) -> Stats:
        total = np.zeros((1, acc.n_columns))
        for i in range(0, quanta.size, _STATS_BLOCK):
            q0 = int(quanta[i])
            q1 = int(quanta[min(i + _STATS_BLOCK, quanta.size) - 1]) + 1
            total[0] += self._group_counts(acc, group, q0, q1, separate).sum(axis=0)
        return percentile_matrix(total, self.options.percentiles, layout.lower_ns, layout.upper_ns)


def _stats_columns(acc: QuantumAccumulator) -> slice | npt.NDArray[np.int64]:
    """The columns the per-quantum statistics read: every one anything was added to, and the
    last one. The others hold 0.0 in every quantum: leaving them out changes no cumulative
    sum (0.0 added is exact), no first or last non-empty column, and no percentile (a rank
    within the counts lands on the same column; a rank a rounding beyond them all lands, as
    over every column, on the last). A typical latency spread fills a few hundred of 1856
    columns, so this spares most of the statistics' work."""
    span = acc.column_span()
    if span is None:
        return slice(None)
    first, last = span
    if last == acc.n_columns - 1:
        return slice(first, None)
    return np.append(np.arange(first, last + 1, dtype=np.int64), acc.n_columns - 1)


def compute_pctiles(paths: Sequence[str | Path], options: PctileOptions) -> PctileResult:
    """Read every log and compute per-quantum cluster-wide statistics."""
    run = _Run(paths, options)
    return run.compute()
