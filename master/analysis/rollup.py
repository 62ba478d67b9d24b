"""Rollups: add workloads' statistics up by instance and turn them into metrics.

Owns the arithmetic from ``StatsBatch`` samples to per-instance metric columns (IOPS, MB/s,
average block size, service and response time mean / percentiles / max, errors) for the
overall, read, write, random and sequential views. Whole arrays at a time, by numpy and by
the compiled loops of ``master.analysis.kernels``: one pass per rollup type, never a Python loop per
workload. No I/O, no clocks.

A ``Sample`` is counters, latency side statistics and histogram coordinates for W workloads;
samples concatenate (hosts of one subinterval) and add up (subintervals of a window) without
loss, because histograms are added, never percentiles averaged. A ``WindowSample`` is a
measurement window's statistics as the hosts sent them, its coordinates read in each host's own
arrays. A ``Grouping`` maps each workload to an instance of one rollup type.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from master.analysis import kernels
from protocol.batch import StatsBatch
from protocol.buckets import N_BUCKETS
from protocol.stats import MAX, MIN, OPS, ROWS_PER_WORKLOAD, SUM
from protocol.views import MEMBERSHIP as _MEMBERSHIP
from protocol.views import N_VIEWS as N_VIEWS
from protocol.views import PERCENTILES as PERCENTILES
from protocol.views import VIEWS as VIEWS

# VIEWS (column prefix → categories), N_VIEWS, PERCENTILES and the views' membership matrix
# are shared with the slave, which computes percentile tables itself: protocol.grouping.
KIND_NAMES: Final = ("service_time", "response_time")


def pct_label(p: float) -> str:
    """Column label of a percentile: 99 → ``p99``, 99.9 → ``p99_9`` (as in
    ``master.config.catalog``)."""
    return "p" + f"{p:g}".replace(".", "_")


def metric_columns() -> list[str]:
    """Every metric column, in output order."""
    cols: list[str] = []
    for prefix, _ in VIEWS:
        cols += [f"{prefix}IOPS", f"{prefix}MB_per_s", f"{prefix}avg_blocksize_KiB"]
        for kind in KIND_NAMES:
            cols.append(f"{prefix}{kind}_mean_ms")
            cols.append(f"{prefix}{kind}_min_ms")
            cols += [f"{prefix}{kind}_{pct_label(p)}_ms" for p in PERCENTILES]
            cols.append(f"{prefix}{kind}_max_ms")
        cols.append(f"{prefix}errors")
    return cols


METRIC_COLUMNS: Final = tuple(metric_columns())
#: Columns per kind (mean, min, the percentiles, max) and per view (IOPS, MB/s, blocksize,
#: both kinds, errors), as ``metric_columns`` lays them out.
_PER_KIND: Final = 3 + len(PERCENTILES)
_PER_VIEW: Final = 4 + len(KIND_NAMES) * _PER_KIND
assert len(METRIC_COLUMNS) == N_VIEWS * _PER_VIEW
#: Each view's block of metric columns after the overall view's, with the overall block:
#: (start, source start, length). A workload that does only random I/O has the same numbers
#: in its random view as overall (only reads: in its read view), so writers of rows copy the
#: overall block's text where the numbers are the same (``master.results.csvkernels.format_lines``).
VIEW_BLOCKS: Final = tuple((v * _PER_VIEW, 0, _PER_VIEW) for v in range(1, N_VIEWS))


_T = TypeVar("_T")

#: Batches ``WindowSample.from_batches_steps`` reads between its pauses.
PAUSE_EVERY: Final = 64


def finished(steps: Generator[None, None, _T]) -> _T:
    """What a generator of steps returns (``yield`` marks a pause; ``master.run.pauses``
    lets the run's event loop run at each), run straight through."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


@dataclass(frozen=True, eq=False)
class Sample:
    """Statistics of W workloads over some period (see ``StatsBatch`` for the layout).
    Histogram coordinates need not be unique or sorted; ``coords_sorted`` says they are
    strictly increasing by (row, bucket), as in a ``StatsBatch`` (``from_batch``, ``concat``
    of such samples), which lets large rollups skip work."""

    counters: npt.NDArray[np.int64]  # (W, 4, 3)
    lat: npt.NDArray[np.int64]  # (W, 4, 2, 3)
    rows: npt.NDArray[np.int64]
    buckets: npt.NDArray[np.integer[Any]]  # the wire's uint16 (``from_batch``), or int64
    counts: npt.NDArray[np.int64]
    coords_sorted: bool = False

    @property
    def n_workloads(self) -> int:
        return int(self.counters.shape[0])

    @cached_property
    def counts_f64(self) -> npt.NDArray[np.float64]:
        """``counts`` as float64 (exact below 2**53), the weights of every bincount."""
        return self.counts.astype(np.float64)

    @cached_property
    def row_bounds(self) -> npt.NDArray[np.int64] | None:
        """Where each histogram row's coordinates start (W * 8 + 1 bounds) when the
        coordinates are grouped by row in order; None otherwise."""
        rows = self.rows
        if not self.coords_sorted and rows.size > 1 and not bool(np.all(rows[1:] >= rows[:-1])):
            return None
        n = self.n_workloads * ROWS_PER_WORKLOAD
        out: npt.NDArray[np.int64] = np.searchsorted(rows, np.arange(n + 1), side="left")
        return out

    @cached_property
    def coords(self) -> kernels.Coords:
        """The coordinates as the kernels read them, grouped by row (a copy sorted by row
        first when they are not)."""
        bounds = self.row_bounds
        if bounds is None:
            by_row = np.lexsort((self.buckets, self.rows))
            rows = self.rows[by_row]
            bounds = np.searchsorted(rows, np.arange(self.n_workloads * ROWS_PER_WORKLOAD + 1))
            return kernels.Coords.flat(bounds, self.buckets[by_row], self.counts[by_row])
        return kernels.Coords.flat(bounds, self.buckets, self.counts)

    @cached_property
    def row_extents(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Lowest and highest non-empty bucket of each histogram row (N_BUCKETS and -1 for
        empty rows)."""
        n = self.n_workloads * ROWS_PER_WORKLOAD
        lo = np.full(n, N_BUCKETS, dtype=np.int64)
        hi = np.full(n, -1, dtype=np.int64)
        bounds = self.row_bounds
        if self.rows.size == 0:
            return lo, hi
        if bounds is None:
            np.minimum.at(lo, self.rows, self.buckets)
            np.maximum.at(hi, self.rows, self.buckets)
            return lo, hi
        live = np.flatnonzero(bounds[1:] > bounds[:-1])
        starts = bounds[live]
        lo[live] = np.minimum.reduceat(self.buckets, starts)
        hi[live] = np.maximum.reduceat(self.buckets, starts)
        return lo, hi

    @classmethod
    def from_batch(cls, batch: StatsBatch) -> Sample:
        return cls(
            counters=np.asarray(batch.counters, dtype=np.int64),
            lat=np.asarray(batch.lat, dtype=np.int64),
            rows=batch.rows.astype(np.int64),
            buckets=batch.buckets.astype(np.uint16),  # as the kernels read them
            counts=batch.counts.astype(np.int64),  # a copy, as rows and buckets are
            coords_sorted=True,
        )

    @classmethod
    def concat(cls, parts: Sequence[Sample]) -> Sample:
        """Workloads of several samples side by side (e.g. all hosts of a subinterval)."""
        offsets = np.cumsum([0] + [p.n_workloads for p in parts])
        return cls(
            counters=np.concatenate([p.counters for p in parts]),
            lat=np.concatenate([p.lat for p in parts]),
            rows=np.concatenate(
                [p.rows + int(o) * ROWS_PER_WORKLOAD for p, o in zip(parts, offsets, strict=False)]
            ),
            buckets=np.concatenate([p.buckets for p in parts]),
            counts=np.concatenate([p.counts for p in parts]),
            coords_sorted=all(p.coords_sorted for p in parts),
        )

    @classmethod
    def add(cls, parts: Sequence[Sample]) -> Sample:
        """The same W workloads over consecutive periods added up (a measurement window).

        The result holds each (row, bucket) once, sorted, however many periods it covers:
        memory grows with the spread of the latencies, not with the number of periods. Sorted
        parts are merged (``master.analysis.kernels.merge_sorted``); others are added into one dense
        window per histogram row (lowest to highest bucket any part has)."""
        if not parts:
            raise ValueError("nothing to add")
        w = parts[0].n_workloads
        if any(p.n_workloads != w for p in parts):
            raise ValueError("samples to add must have the same workloads")
        lat = parts[0].lat.copy()
        for p in parts[1:]:
            lat[..., SUM] += p.lat[..., SUM]
            np.minimum(lat[..., MIN], p.lat[..., MIN], out=lat[..., MIN])
            np.maximum(lat[..., MAX], p.lat[..., MAX], out=lat[..., MAX])
        counters = np.sum([p.counters for p in parts], axis=0)
        if len(parts) == 1:
            p = parts[0]
            return cls(counters=counters, lat=lat, rows=p.rows, buckets=p.buckets,
                       counts=p.counts, coords_sorted=p.coords_sorted)
        if all(p.coords_sorted for p in parts):
            # sorted lists (subintervals as received, earlier sums): merged pairwise, a
            # balanced tree of linear merges
            coords = [(p.rows, p.buckets.astype(np.int64, copy=False), p.counts) for p in parts]
            while len(coords) > 1:
                nxt = [kernels.merge_sorted(coords[i], coords[i + 1])
                       for i in range(0, len(coords) - 1, 2)]
                coords = nxt + coords[len(coords) - len(coords) % 2:]
            rows, buckets, counts = coords[0]
            return cls(counters=counters, lat=lat, rows=rows, buckets=buckets, counts=counts,
                       coords_sorted=True)
        lo = np.min([p.row_extents[0] for p in parts], axis=0)
        hi = np.max([p.row_extents[1] for p in parts], axis=0)
        _, end, shift = _windows(lo, hi)
        n_cells = int(end[-1]) if end.size else 0
        cells = np.zeros(n_cells)
        for p in parts:
            if p.rows.size:
                cells += np.bincount(shift[p.rows] + p.buckets, weights=p.counts_f64,
                                     minlength=n_cells)
        nz = np.flatnonzero(cells)
        rows = np.searchsorted(end, nz, side="right").astype(np.int64)
        return cls(counters=counters, lat=lat, rows=rows, buckets=nz - shift[rows],
                   counts=cells[nz].astype(np.int64), coords_sorted=True)


@dataclass(frozen=True, eq=False)
class WindowSample:
    """A measurement window's statistics of W workloads as the hosts sent them (a
    ``StatsBatch`` each, their workloads side by side): counters and latency side statistics
    in one array each, the histogram coordinates read where each host's lie
    (``kernels.Coords.of_batches``). At 100,000 workloads a window has about 90 million
    coordinates, which a ``Sample`` would copy into 2 GB of fresh memory at the step's end."""

    counters: npt.NDArray[np.int64]  # (W, 4, 3)
    lat: npt.NDArray[np.int64]  # (W, 4, 2, 3)
    coords: kernels.Coords

    @property
    def n_workloads(self) -> int:
        return int(self.counters.shape[0])

    @classmethod
    def from_batches(cls, batches: Sequence[StatsBatch]) -> WindowSample:
        """The window of ``batches``, each valid (``kernels.validate_batch``)."""
        return finished(cls.from_batches_steps(batches))

    @classmethod
    def from_batches_steps(cls, batches: Sequence[StatsBatch]
                           ) -> Generator[None, None, WindowSample]:
        """``from_batches``, pausing (a ``yield``) after every ``PAUSE_EVERY`` batches: its
        caller's event loop may run meanwhile (``finished`` runs it straight through)."""
        parts = []
        for at in range(0, len(batches), PAUSE_EVERY):
            parts.append(kernels.Coords.of_batches(batches[at:at + PAUSE_EVERY]))
            yield
        empty = StatsBatch.empty()
        return cls(
            counters=np.concatenate([empty.counters, *(b.counters for b in batches)]
                                    ).astype(np.int64, copy=False),
            lat=np.concatenate([empty.lat, *(b.lat for b in batches)]).astype(np.int64,
                                                                             copy=False),
            coords=kernels.Coords.joined(parts))


#: The statistics the rollups read: one array's, or a measurement window's as the hosts sent
#: them.
AnySample: TypeAlias = Sample | WindowSample


@dataclass(frozen=True, eq=False)
class Grouping:
    """Instances of one rollup type: ``of_workload[w]`` is workload w's instance index."""

    rollup_type: str
    names: tuple[str, ...]
    of_workload: npt.NDArray[np.intp]

    @classmethod
    def from_keys(cls, rollup_type: str, keys: Sequence[str]) -> Grouping:
        """Instances named by each workload's key, in order of first appearance."""
        names: dict[str, int] = {}
        of = np.array([names.setdefault(k, len(names)) for k in keys], dtype=np.intp)
        return cls(rollup_type, tuple(names), of)

    @property
    def n(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class RollupResult:
    """Metric columns (each a float array over instances; NaN where undefined) and the
    per-instance, per-view, per-kind histograms' exact side statistics. ``values``: every
    metric of every instance, (G, len(METRIC_COLUMNS)) in that order; the columns are views
    of it."""

    grouping: Grouping
    duration_s: float
    columns: dict[str, npt.NDArray[np.float64]]
    ops: npt.NDArray[np.int64]  # (G, N_VIEWS)
    values: npt.NDArray[np.float64]

    def row(self, i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in self.columns.items()}


def compute(sample: AnySample, grouping: Grouping, duration_s: float,
            group_percentiles: npt.NDArray[np.float64] | None = None) -> RollupResult:
    """Metrics of every instance of ``grouping`` over a period of ``duration_s`` seconds.

    ``group_percentiles``: the sample's percentiles already read where its histograms are (a
    slave's percentile table, ``protocol.grouping.view_percentiles``), (W, N_VIEWS, 2,
    len(PERCENTILES)) in ns; then every instance must be exactly one of the sample's
    "workloads" (a host's group), and the sample need carry no histograms."""
    if grouping.of_workload.shape != (sample.n_workloads,):
        raise ValueError(
            f"grouping {grouping.rollup_type} covers {grouping.of_workload.size} workloads, "
            f"sample has {sample.n_workloads}"
        )
    if group_percentiles is not None:
        want = (sample.n_workloads, N_VIEWS, 2, len(PERCENTILES))
        if group_percentiles.shape != want:
            raise ValueError(f"percentile table of shape {group_percentiles.shape}, expected "
                             f"{want}")
        if not np.array_equal(np.bincount(grouping.of_workload, minlength=grouping.n),
                              np.ones(grouping.n, dtype=np.int64)):
            raise ValueError(f"rollup {grouping.rollup_type}: a percentile table needs one "
                             "group per instance")
    g_count = grouping.n
    g = grouping.of_workload
    # workloads ordered by instance, each instance a run of them (every instance has at least
    # one workload); the compiled kernel adds each instance's counters and latency side
    # statistics up and writes every metric of every view (the percentiles too, when given)
    order = np.argsort(g, kind="stable")
    inst_ptr = np.zeros(g_count + 1, dtype=np.int64)
    np.cumsum(np.bincount(g, minlength=g_count), out=inst_ptr[1:])
    dur = float(duration_s)
    values, ops_v, min_v, max_v = kernels.instance_metrics(
        sample.counters, sample.lat, order, inst_ptr, _MEMBERSHIP > 0, dur, group_percentiles,
        _PER_VIEW)
    if group_percentiles is None:
        pct = _view_percentiles(sample, order, inst_ptr, min_v, max_v)  # (G, V, 2, P)
        for k in range(len(KIND_NAMES)):
            at = 3 + k * _PER_KIND
            np.divide(pct[:, :, k, :], 1e6, out=values[:, :, at + 2:at + 2 + len(PERCENTILES)])
    table = values.reshape(g_count, len(METRIC_COLUMNS))
    cols = {name: table[:, j] for j, name in enumerate(METRIC_COLUMNS)}
    return RollupResult(grouping=grouping, duration_s=dur, columns=cols, ops=ops_v,
                        values=table)


def _view_percentiles(
    sample: AnySample,
    order: npt.NDArray[np.intp],
    inst_ptr: npt.NDArray[np.int64],
    min_v: npt.NDArray[np.float64],
    max_v: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles per (instance, view, kind): (G, N_VIEWS, 2, len(PERCENTILES)), computed by
    ``master.analysis.kernels.view_percentiles`` in one pass over the coordinates (sorted first when
    the sample's are not). Instance i's workloads are ``order[inst_ptr[i]:inst_ptr[i + 1]]``."""
    g_count = inst_ptr.size - 1
    coords = sample.coords
    if int(coords.bounds[-1]) == 0 or g_count == 0:
        return np.full((g_count, N_VIEWS, 2, len(PERCENTILES)), np.nan)
    # a histogram row holds one count per I/O of its category (``StatsBatch.validate``)
    row_tot = np.repeat(sample.counters[:, :, OPS], 2, axis=1).reshape(-1)
    return kernels.view_percentiles(coords, row_tot, order, inst_ptr,
                                    _MEMBERSHIP > 0, np.asarray(PERCENTILES, dtype=np.float64),
                                    min_v, max_v)


def _windows(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Dense windows side by side, one per histogram, spanning buckets ``lo..hi`` (empty when
    hi < lo): (start, end, shift) with cell = bucket + shift."""
    width = np.maximum(hi - lo + 1, 0)
    end = np.cumsum(width)
    start = end - width
    return start, end, start - lo


@dataclass(frozen=True)
class HistogramRows:
    """The non-empty buckets of instances ``first .. first + n - 1``: row r is bucket
    ``bucket[r]`` of instance ``first + inst[r]``, rows in instance order, then bucket order.
    ``counts[r]`` holds the bucket's counts in the overall, read and write views, service then
    response time each (``HISTOGRAM_VIEWS`` x ``HISTOGRAM_KINDS``)."""

    first: int
    n: int
    inst: npt.NDArray[np.intp]
    bucket: npt.NDArray[np.intp]
    counts: npt.NDArray[np.float64]  # (rows, 6)


HISTOGRAM_VIEWS: Final = ("all", "read", "write")
HISTOGRAM_KINDS: Final = ("service_time", "response_time")


@dataclass(frozen=True, eq=False)
class HistogramSlice:
    """Instances ``first .. first + n - 1`` of a grouping and the workloads in them
    (``members``, of ``of_workload``'s numbering): ``rows()`` makes their merged histograms,
    reading only those workloads' coordinates. Any thread may call it: the kernel only reads,
    and releases the GIL."""

    coords: kernels.Coords
    of_workload: npt.NDArray[np.intp]
    members: npt.NDArray[np.intp]
    first: int
    n: int

    def rows(self) -> HistogramRows:
        inst, bucket, summed = kernels.histogram_rows(
            self.of_workload, self.members, self.coords, self.first, self.n)
        return HistogramRows(self.first, self.n, inst, bucket, summed.astype(np.float64))


def histogram_slices(sample: AnySample, grouping: Grouping, size: int
                     ) -> Iterator[HistogramSlice]:
    """``grouping``'s instances in slices of ``size`` (memory bound), each with its workloads,
    for ``HistogramSlice.rows``."""
    if size < 1:
        raise ValueError(f"slice size {size} must be at least 1")
    coords = sample.coords
    of_workload = grouping.of_workload
    by_inst = np.argsort(of_workload, kind="stable")
    firsts = np.arange(0, grouping.n, size)
    cuts = np.searchsorted(of_workload[by_inst], np.append(firsts, grouping.n)).tolist()
    for k, first in enumerate(firsts.tolist()):
        yield HistogramSlice(coords, of_workload, by_inst[cuts[k]:cuts[k + 1]], first,
                             min(size, grouping.n - first))


def histogram_rows(sample: AnySample, grouping: Grouping, size: int
                   ) -> Iterator[HistogramRows]:
    """Every instance's merged histograms, in slices of ``size`` instances (memory bound).
    Each slice reads only its own workloads' coordinates (``kernels.histogram_rows``)."""
    for part in histogram_slices(sample, grouping, size):
        yield part.rows()
