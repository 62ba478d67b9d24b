"""``fio-pctiles`` end to end: logs in, per-quantum cluster-wide percentiles out.

Owns the order of work (check layouts, pick the quantum, stream every file through parse ->
optional client/server repair -> windows -> spreading into one accumulator, then percentiles
per quantum and direction group) and the warnings a user must see. It must not parse command
lines (``master.fio_pctiles_cli``) and writes nothing but the CSV it is handed a stream for.

Memory: one file is read at a time in chunks of about ``chunk_bytes`` of text; what stays is the
accumulator, ``slots x quanta x columns`` float64 (1 slot for ``merged`` only, 3 when a single
direction is asked for), e.g. 53 MB for 3,600 one-second quanta of uncoarsened fio 3 logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

import numpy as np
import numpy.typing as npt

from master.fiologs.align import (
    QuantumAccumulator,
    RowWindows,
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
from protocol.errors import ConfigError, LogFormatError

logger = logging.getLogger(__name__)

DIRECTION_GROUPS: Final = ("read", "write", "trim", "merged")
TIME_BASES: Final = ("auto", "relative", "absolute")
_STATS_BLOCK: Final = 1024
_HEAD_BYTES: Final = 1 << 20


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

    def validate(self) -> None:
        if not self.percentiles:
            raise ConfigError("at least one percentile is needed", key_path="percentiles")
        for p in self.percentiles:
            if not 0 <= p <= 100:
                raise ConfigError(f"{p} is not within 0..100", key_path="percentiles")
        if self.unit not in UNIT_NS:
            raise ConfigError(f"unit must be one of {', '.join(UNIT_NS)}", key_path="unit")
        if not self.directions or len(set(self.directions)) != len(self.directions):
            raise ConfigError("name each direction group once", key_path="directions")
        for d in self.directions:
            if d not in DIRECTION_GROUPS:
                raise ConfigError(
                    f"{d!r} is not one of {', '.join(DIRECTION_GROUPS)}", key_path="directions"
                )
        if self.time_quantum_s is not None and not self.time_quantum_s > 0:
            raise ConfigError("must be > 0 seconds", key_path="time_quantum")
        if self.log_hist_msec is not None and not self.log_hist_msec > 0:
            raise ConfigError("must be > 0 ms", key_path="log_hist_msec")
        if self.fio_version not in (None, 2, 3):
            raise ConfigError("must be 2 or 3", key_path="fio_version")
        if self.time_base not in TIME_BASES:
            raise ConfigError(f"must be one of {', '.join(TIME_BASES)}", key_path="time_base")


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
        self.open_count = 0.0

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
        quantum_ms = (
            opts.time_quantum_s * 1000.0 if opts.time_quantum_s is not None else interval_ms
        )
        separate = opts.directions != ("merged",)
        acc = QuantumAccumulator(3 if separate else 1, layout.n_columns)
        for info in infos:
            self._add_file(info, layout, interval_ms, quantum_ms, separate, acc)
        if self.open_count > 0:
            edge_ms = layout.open_lower_ns / 1e6
            self.warn(
                f"{format_samples(self.open_count)} samples are in fio's last histogram bucket, "
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

    # ----------------------------------------------------------------- per file
    def _add_file(
        self,
        info: _FileInfo,
        layout: ColumnLayout,
        interval_ms: float,
        quantum_ms: float,
        separate: bool,
        acc: QuantumAccumulator,
    ) -> None:
        opts = self.options
        reader = LogReader(info.path, layout.n_columns, skip_bad_lines=opts.skip_bad_lines,
                           chunk_bytes=opts.chunk_bytes, scratch=self.scratch)
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
            self.warn(
                f"{info.path}: looks like a log written by fio in client/server mode (each row "
                "holds its window plus the row logged two before it): rerun with "
                "--repair-client-logs"
            )
        elif opts.repair_client_logs and not shaped:
            self.warn(f"{info.path}: not in the client/server shape; read as it is")
        file_interval = None
        if pending:
            file_interval = detect_interval_ms(pending[0].times_ms, pending[0].dirs)
        windows = RowWindows(absolute=info.absolute,
                             interval_ms=file_interval if file_interval else interval_ms)

        def stream() -> Iterator[HistBlock]:
            yield from pending
            yield from blocks

        last_col = layout.n_columns - 1
        for block in stream():
            if repairer is not None:
                block = repairer.repair(block)
            start, end = windows.windows(block)
            spread = spread_rows(start, end, quantum_ms)
            slots = block.dirs if separate else np.zeros(block.n_rows, dtype=np.int64)
            acc.add(block, slots, spread)
            self.open_count += float(block.entry_count[block.entry_col == last_col].sum())
        pending.clear()
        self.warnings.extend(reader.warnings)
        if reader.skipped_lines > len(reader.warnings):
            self.warn(f"{info.path}: {reader.skipped_lines} malformed lines skipped in all")

    # ----------------------------------------------------------------- statistics
    def _group_counts(
        self, acc: QuantumAccumulator, group: str, q0: int, q1: int, separate: bool
    ) -> npt.NDArray[np.float64]:
        if not separate:
            return acc.counts(0, q0, q1)
        if group == "merged":
            return acc.counts(0, q0, q1) + acc.counts(1, q0, q1) + acc.counts(2, q0, q1)
        return acc.counts(DIRECTION_NAMES.index(group), q0, q1)

    def _group_stats(
        self,
        acc: QuantumAccumulator,
        group: str,
        quanta: npt.NDArray[np.int64],
        separate: bool,
        layout: ColumnLayout,
    ) -> Stats:
        parts: list[Stats] = []
        for i in range(0, quanta.size, _STATS_BLOCK):
            q0 = int(quanta[i])
            q1 = int(quanta[min(i + _STATS_BLOCK, quanta.size) - 1]) + 1
            counts = self._group_counts(acc, group, q0, q1, separate)
            parts.append(
                percentile_matrix(
                    counts, self.options.percentiles, layout.lower_ns, layout.upper_ns
                )
            )
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


def compute_pctiles(paths: Sequence[str | Path], options: PctileOptions) -> PctileResult:
    """Read every log and compute per-quantum cluster-wide statistics."""
    run = _Run(paths, options)
    return run.compute()
