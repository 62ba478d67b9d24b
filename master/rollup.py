"""Rollups: add workloads' statistics up by instance and turn them into metrics.

Owns the arithmetic from ``StatsBatch`` samples to per-instance metric columns (IOPS, MB/s,
average block size, service and response time mean / percentiles / max, errors) for the
overall, read, write, random and sequential views. Pure numpy on whole arrays: one reduction
per rollup type, never a Python loop per workload. No I/O, no clocks.

A ``Sample`` is counters, latency side statistics and histogram coordinates for W workloads;
samples concatenate (hosts of one subinterval) and add up (subintervals of a window) without
loss, because histograms are added, never percentiles averaged. A ``Grouping`` maps each
workload to an instance of one rollup type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.stats import BYTES, ERRORS, I64_MAX, MAX, MIN, OPS, ROWS_PER_WORKLOAD, SUM, StatsBatch

#: Views: column prefix → categories (0 random_read, 1 random_write, 2 seq_read, 3 seq_write).
VIEWS: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("", (0, 1, 2, 3)),
    ("read_", (0, 2)),
    ("write_", (1, 3)),
    ("random_", (0, 1)),
    ("sequential_", (2, 3)),
)
N_VIEWS: Final = len(VIEWS)
PERCENTILES: Final[tuple[float, ...]] = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
KIND_NAMES: Final = ("service_time", "response_time")
#: Each category lands in three views: overall, read or write, random or sequential.
_VIEWS_OF_CATEGORY: Final = np.array([[0, 1, 3], [0, 2, 3], [0, 1, 4], [0, 2, 4]], dtype=np.intp)
_MEMBERSHIP: Final = np.zeros((N_VIEWS, 4), dtype=np.int64)
for _v, (_, _cats) in enumerate(VIEWS):
    _MEMBERSHIP[_v, list(_cats)] = 1
#: Dense histogram cells built at once; larger rollups are processed in chunks of instances.
DENSE_CELLS: Final = 1 << 22
_LO: Final = LOWER_NS.astype(np.float64)
_HI: Final = (UPPER_NS - 1).astype(np.float64)


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


@dataclass(frozen=True, eq=False)
class Sample:
    """Statistics of W workloads over some period (see ``StatsBatch`` for the layout).
    Histogram coordinates need not be unique or sorted; ``coords_sorted`` says they are
    strictly increasing by (row, bucket), as in a ``StatsBatch`` (``from_batch``, ``concat``
    of such samples), which lets large rollups skip work."""

    counters: npt.NDArray[np.int64]  # (W, 4, 3)
    lat: npt.NDArray[np.int64]  # (W, 4, 2, 3)
    rows: npt.NDArray[np.int64]
    buckets: npt.NDArray[np.int64]
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
    def from_batches(cls, batches: Sequence[StatsBatch]) -> Sample:
        """``concat`` of ``from_batch`` of each batch, built in one pass over the
        coordinates (the hosts of one subinterval)."""
        nnz = [b.rows.size for b in batches]
        total = int(sum(nnz))
        rows = np.empty(total, dtype=np.int64)
        buckets = np.empty(total, dtype=np.int64)
        counts = np.empty(total, dtype=np.int64)
        at, first_row = 0, 0
        for b, n in zip(batches, nnz, strict=True):
            np.add(b.rows, first_row, out=rows[at:at + n], casting="unsafe")
            buckets[at:at + n] = b.buckets
            counts[at:at + n] = b.counts
            at += n
            first_row += b.n_workloads * ROWS_PER_WORKLOAD
        return cls(
            counters=np.concatenate([np.asarray(b.counters, dtype=np.int64) for b in batches])
            if batches else np.zeros((0, 4, 3), dtype=np.int64),
            lat=np.concatenate([np.asarray(b.lat, dtype=np.int64) for b in batches])
            if batches else np.zeros((0, 4, 2, 3), dtype=np.int64),
            rows=rows, buckets=buckets, counts=counts, coords_sorted=True,
        )

    @classmethod
    def from_batch(cls, batch: StatsBatch) -> Sample:
        return cls(
            counters=np.asarray(batch.counters, dtype=np.int64),
            lat=np.asarray(batch.lat, dtype=np.int64),
            rows=batch.rows.astype(np.int64),
            buckets=batch.buckets.astype(np.int64),
            counts=np.asarray(batch.counts, dtype=np.int64),
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

        The histograms are added into one dense window per histogram row (lowest to highest
        bucket any part has), so the result holds each (row, bucket) once, sorted, however
        many periods it covers: memory grows with the spread of the latencies, not with the
        number of periods."""
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
class Grouping:
    """Instances of one rollup type: ``of_workload[w]`` is workload w's instance index."""

    rollup_type: str
    names: tuple[str, ...]
    of_workload: npt.NDArray[np.intp]

    @classmethod
    def from_keys(cls, rollup_type: str, keys: Sequence[str]) -> Grouping:
        """Instances named by each workload's key, in order of first appearance."""
        names: dict[str, int] = {}
        of = np.fromiter(
            (names.setdefault(k, len(names)) for k in keys), dtype=np.intp, count=len(keys)
        )
        return cls(rollup_type, tuple(names), of)

    @property
    def n(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class RollupResult:
    """Metric columns (each a float array over instances; NaN where undefined) and the
    per-instance, per-view, per-kind histograms' exact side statistics."""

    grouping: Grouping
    duration_s: float
    columns: dict[str, npt.NDArray[np.float64]]
    ops: npt.NDArray[np.int64]  # (G, N_VIEWS)

    def row(self, i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in self.columns.items()}


def compute(sample: Sample, grouping: Grouping, duration_s: float) -> RollupResult:
    """Metrics of every instance of ``grouping`` over a period of ``duration_s`` seconds."""
    if grouping.of_workload.shape != (sample.n_workloads,):
        raise ValueError(
            f"grouping {grouping.rollup_type} covers {grouping.of_workload.size} workloads, "
            f"sample has {sample.n_workloads}"
        )
    g_count = grouping.n
    g = grouping.of_workload
    # counters and latency side statistics per instance and category
    cnt = np.zeros((g_count, 4, 3), dtype=np.int64)
    np.add.at(cnt, g, sample.counters)
    lsum = np.zeros((g_count, 4, 2), dtype=np.int64)
    np.add.at(lsum, g, sample.lat[..., SUM])
    lmin = np.full((g_count, 4, 2), I64_MAX, dtype=np.int64)
    np.minimum.at(lmin, g, sample.lat[..., MIN])
    lmax = np.full((g_count, 4, 2), -1, dtype=np.int64)
    np.maximum.at(lmax, g, sample.lat[..., MAX])
    # per view
    ops_v = cnt[:, :, OPS] @ _MEMBERSHIP.T  # (G, V)
    bytes_v = cnt[:, :, BYTES] @ _MEMBERSHIP.T
    err_v = cnt[:, :, ERRORS] @ _MEMBERSHIP.T
    sum_v = np.einsum("gck,vc->gvk", lsum, _MEMBERSHIP)  # (G, V, 2)
    big = np.where(_MEMBERSHIP[None, :, :, None] > 0, lmin[:, None, :, :], I64_MAX)
    min_v = big.min(axis=2).astype(np.float64)  # (G, V, 2)
    small = np.where(_MEMBERSHIP[None, :, :, None] > 0, lmax[:, None, :, :], -1)
    max_v = small.max(axis=2).astype(np.float64)
    pct = _view_percentiles(sample, g, g_count, min_v, max_v)  # (G, V, 2, P)

    cols: dict[str, npt.NDArray[np.float64]] = {}
    dur = float(duration_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        for v, (prefix, _) in enumerate(VIEWS):
            ops = ops_v[:, v].astype(np.float64)
            has = ops > 0
            cols[f"{prefix}IOPS"] = ops / dur
            cols[f"{prefix}MB_per_s"] = bytes_v[:, v] / dur / 1e6
            cols[f"{prefix}avg_blocksize_KiB"] = np.where(has, bytes_v[:, v] / ops / 1024, np.nan)
            for k, kind in enumerate(KIND_NAMES):
                cols[f"{prefix}{kind}_mean_ms"] = np.where(has, sum_v[:, v, k] / ops / 1e6, np.nan)
                cols[f"{prefix}{kind}_min_ms"] = np.where(has, min_v[:, v, k] / 1e6, np.nan)
                for j, p in enumerate(PERCENTILES):
                    cols[f"{prefix}{kind}_{pct_label(p)}_ms"] = pct[:, v, k, j] / 1e6
                cols[f"{prefix}{kind}_max_ms"] = np.where(has, max_v[:, v, k] / 1e6, np.nan)
            cols[f"{prefix}errors"] = err_v[:, v].astype(np.float64)
    return RollupResult(grouping=grouping, duration_s=dur, columns=cols, ops=ops_v)


def _segment_percentiles(
    cum: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    counts: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    shift: npt.NDArray[np.int64] | None,
    cell_bucket: npt.NDArray[np.int64] | None,
    mins: npt.NDArray[np.float64],
    maxs: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles of Q histograms stored as segments ``[start, end)`` of one cell array.

    A cell is one bucket of one histogram with ``counts[c]`` I/Os (possibly 0); buckets rise
    within a segment. A cell's bucket is ``cell_bucket[c]`` (sparse coordinates) or
    ``c - shift`` (dense windows; ``shift = start - lowest bucket``). ``cum`` is the running
    sum of ``counts`` over the whole array (int64, or float64: exact below 2**53), so one
    binary search finds every rank of every histogram at once. Same rule as
    ``protocol.histogram.percentiles_from_counts`` (the first bucket whose cumulative count
    reaches the rank, interpolated inside it and narrowed to ``[min, max]``). Returns
    (Q, len(PERCENTILES)); NaN for empty histograms.
    """
    out = np.full((start.size, len(PERCENTILES)), np.nan)
    if start.size == 0:
        return out
    before_seg = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0)
    total = np.where(end > start, cum[np.maximum(end - 1, 0)], 0) - before_seg
    live = np.flatnonzero(total > 0)
    if live.size == 0:
        return out
    base = before_seg[live][:, None]
    ps = np.asarray(PERCENTILES, dtype=np.float64)[None, :]
    rank = ps / 100.0 * total[live][:, None].astype(np.float64)  # (L, P)
    # cumulative counts are integers: cum >= rank exactly when cum >= ceil(rank)
    idx = np.searchsorted(cum, base + np.ceil(rank).astype(cum.dtype), side="left")
    in_b = counts[idx].astype(np.float64)
    before = (cum[idx] - base).astype(np.float64) - in_b
    if cell_bucket is not None:
        b = cell_bucket[idx]
    else:
        b = idx - (start if shift is None else shift)[live][:, None]
    frac = np.clip(np.where(in_b > 0, (rank - before) / np.maximum(in_b, 1.0), 0.0), 0.0, 1.0)
    lo_clamp, hi_clamp = mins[live][:, None], maxs[live][:, None]
    lo = np.maximum(_LO[b], lo_clamp)
    hi = np.where(b == OVERFLOW_INDEX, hi_clamp, np.minimum(_HI[b], hi_clamp))
    out[live] = np.clip(lo + frac * (hi - lo), lo_clamp, hi_clamp)
    return out


def _seg_of_row(sample: Sample, g: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """For every histogram row of the sample (workload * 8 + category * 2 + kind), the
    matching row of the rollup (instance * 8 + category * 2 + kind)."""
    r = np.arange(sample.n_workloads * ROWS_PER_WORKLOAD, dtype=np.int64)
    w = r // ROWS_PER_WORKLOAD
    out: npt.NDArray[np.int64] = g[w].astype(np.int64) * ROWS_PER_WORKLOAD + (
        r - w * ROWS_PER_WORKLOAD)
    return out


def _view_percentiles(
    sample: Sample,
    g: npt.NDArray[np.intp],
    g_count: int,
    min_v: npt.NDArray[np.float64],
    max_v: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles per (instance, view, kind): (G, N_VIEWS, 2, len(PERCENTILES)).

    Small rollups (``G * 8 * N_BUCKETS <= DENSE_CELLS``) add the coordinates into dense
    per-category histograms in one bincount, and the views are sums of those. Large rollups
    (``workload``, ``lun``) stay sparse: see ``_sparse_view_percentiles``.
    """
    out = np.full((g_count, N_VIEWS, 2, len(PERCENTILES)), np.nan)
    if sample.rows.size == 0 or g_count == 0:
        return out
    if g_count * ROWS_PER_WORKLOAD * N_BUCKETS > DENSE_CELLS:
        return _sparse_view_percentiles(sample, g, g_count, min_v, max_v)
    key_of_row = _seg_of_row(sample, g) * N_BUCKETS
    key = key_of_row[sample.rows]
    key += sample.buckets
    per_cat = np.bincount(key, weights=sample.counts_f64,
                          minlength=g_count * ROWS_PER_WORKLOAD * N_BUCKETS)
    del key
    views = np.einsum("vc,gckb->gvkb", _MEMBERSHIP.astype(np.float64),
                      per_cat.reshape(g_count, 4, 2, N_BUCKETS)).reshape(-1)
    start = np.arange(g_count * N_VIEWS * 2, dtype=np.int64) * N_BUCKETS
    res = _segment_percentiles(np.cumsum(views), views, start, start + N_BUCKETS, None, None,
                               min_v.reshape(-1), max_v.reshape(-1))
    return res.reshape(g_count, N_VIEWS, 2, len(PERCENTILES))


def _windows(lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Dense windows side by side, one per histogram, spanning buckets ``lo..hi`` (empty when
    hi < lo): (start, end, shift) with cell = bucket + shift."""
    width = np.maximum(hi - lo + 1, 0)
    end = np.cumsum(width)
    start = end - width
    return start, end, start - lo


def _sparse_view_percentiles(
    sample: Sample,
    g: npt.NDArray[np.intp],
    g_count: int,
    min_v: npt.NDArray[np.float64],
    max_v: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles of a large rollup without dense (G, N_BUCKETS) arrays.

    Per (instance, category, kind) histogram: when each instance is one workload in order
    (the ``workload`` rollup) and the coordinates are sorted, these are the coordinates as
    they are; otherwise the coordinates are added into a dense window (lowest to highest
    non-empty bucket) per histogram. A view with one non-empty category is that category's
    histogram. A view merging two or more non-empty categories is added up into a window of
    its own, once per distinct set of categories (``all`` and ``random`` are the same
    histogram for a workload that only does random I/O). Every step is a pass over whole
    arrays; lookups go through per-row tables (W * 8 entries), not per coordinate.
    """
    p = len(PERCENTILES)
    out = np.full((g_count * N_VIEWS * 2, p), np.nan)
    mins, maxs = min_v.reshape(-1), max_v.reshape(-1)
    n_seg = g_count * ROWS_PER_WORKLOAD
    rows, buckets, weights = sample.rows, sample.buckets, sample.counts_f64
    row_lo, row_hi = sample.row_extents
    identity = (sample.coords_sorted and g.size == g_count
                and bool(np.array_equal(g, np.arange(g_count))))
    # one histogram per (instance, category, kind)
    cell_bucket: npt.NDArray[np.int64] | None
    seg_shift: npt.NDArray[np.int64] | None
    if identity:
        bounds = sample.row_bounds
        assert bounds is not None
        seg_start, seg_end = bounds[:-1], bounds[1:]
        seg_lo, seg_hi = row_lo, row_hi
        cells: npt.NDArray[np.float64] | npt.NDArray[np.int64] = sample.counts
        cum = np.cumsum(sample.counts)
        cell_bucket, seg_shift = buckets, None
        seg_of_row = np.arange(n_seg, dtype=np.int64)
    else:
        seg_of_row = _seg_of_row(sample, g)
        seg_lo = np.full(n_seg, N_BUCKETS, dtype=np.int64)
        seg_hi = np.full(n_seg, -1, dtype=np.int64)
        np.minimum.at(seg_lo, seg_of_row, row_lo)
        np.maximum.at(seg_hi, seg_of_row, row_hi)
        seg_start, seg_end, seg_shift = _windows(seg_lo, seg_hi)
        pos = seg_shift[seg_of_row][rows]
        pos += buckets
        cells = np.bincount(pos, weights=weights, minlength=int(seg_end[-1]))
        del pos
        cum = np.cumsum(cells)
        cell_bucket = None
    nonempty = (seg_hi >= 0).reshape(g_count, 4, 2)
    bits = (nonempty * np.array([1, 2, 4, 8])[None, :, None]).sum(axis=1)  # (G, kind)
    view_bits = np.array([sum(1 << c for c in cats) for _, cats in VIEWS])
    masks = bits[:, None, :] & view_bits[None, :, None]  # (G, V, kind): non-empty members
    popcount = sum((masks >> c) & 1 for c in range(4))
    # views with exactly one non-empty category: that category's histogram
    single = np.flatnonzero(popcount.reshape(-1) == 1)
    if single.size:
        m = masks.reshape(-1)[single]
        cat = (m == 2) * 1 + (m == 4) * 2 + (m == 8) * 3
        s = (single // (N_VIEWS * 2)) * ROWS_PER_WORKLOAD + cat * 2 + single % 2
        out[single] = _segment_percentiles(
            cum, cells, seg_start[s], seg_end[s], None if seg_shift is None else seg_shift[s],
            cell_bucket, mins[single], maxs[single])
    # views merging several categories: one window per distinct (instance, kind, member set)
    multi = popcount >= 2
    first = multi.copy()
    for v in range(1, N_VIEWS):
        for u in range(v):
            first[:, v, :] &= ~(multi[:, u, :] & (masks[:, u, :] == masks[:, v, :]))
    jobs = np.flatnonzero(first.reshape(-1))
    if jobs.size == 0:
        return out.reshape(g_count, N_VIEWS, 2, p)
    job_id = np.full(g_count * N_VIEWS * 2, -1, dtype=np.int64)
    job_id[jobs] = np.arange(jobs.size)
    j_lo = np.full(jobs.size, N_BUCKETS, dtype=np.int64)
    j_hi = np.full(jobs.size, -1, dtype=np.int64)
    seg_ids = np.arange(n_seg, dtype=np.int64)
    seg_inst, seg_cat, seg_kind = seg_ids // 8, (seg_ids // 2) % 4, seg_ids % 2
    job_of_seg = []  # per view with jobs: each rollup row's job (or -1)
    for v, (_, cats) in enumerate(VIEWS):
        if not first[:, v, :].any():
            continue
        js = np.where(np.isin(seg_cat, cats), job_id[(seg_inst * N_VIEWS + v) * 2 + seg_kind], -1)
        ok = js >= 0
        np.minimum.at(j_lo, js[ok], seg_lo[ok])
        np.maximum.at(j_hi, js[ok], seg_hi[ok])
        job_of_seg.append(js)
    j_start, j_end, j_shift = _windows(j_lo, j_hi)
    pos_parts, weight_parts = [], []
    for js in job_of_seg:
        row_in = (js >= 0)[seg_of_row]
        row_shift = j_shift[np.maximum(js, 0)][seg_of_row]
        if bool(np.all(row_in[row_hi >= 0])):
            pos_v = row_shift[rows]
            pos_v += buckets
            pos_parts.append(pos_v)
            weight_parts.append(weights)
        else:
            keep = row_in[rows]
            pos_parts.append(row_shift[rows[keep]] + buckets[keep])
            weight_parts.append(weights[keep])
    pos = pos_parts[0] if len(pos_parts) == 1 else np.concatenate(pos_parts)
    wts = weight_parts[0] if len(weight_parts) == 1 else np.concatenate(weight_parts)
    j_cells = np.bincount(pos, weights=wts, minlength=int(j_end[-1]))
    out[jobs] = _segment_percentiles(np.cumsum(j_cells), j_cells, j_start, j_end, j_shift,
                                     None, mins[jobs], maxs[jobs])
    # a view whose member set equals an earlier view's reads that view's result
    hist_id = np.arange(g_count * N_VIEWS * 2).reshape(g_count, N_VIEWS, 2)
    for v in range(1, N_VIEWS):
        for u in range(v):
            dup = multi[:, v, :] & first[:, u, :] & (masks[:, u, :] == masks[:, v, :])
            if dup.any():
                out[hist_id[:, v, :][dup]] = out[hist_id[:, u, :][dup]]
    return out.reshape(g_count, N_VIEWS, 2, p)


def dense_histograms(sample: Sample, grouping: Grouping, first: int = 0,
                     count: int | None = None) -> npt.NDArray[np.float64]:
    """Bucket counts per instance for the overall, read and write views and both kinds:
    shape (n, 3, 2, N_BUCKETS) for the instances ``first .. first + n - 1`` (all by default;
    large rollups are written in slices of instances)."""
    n = grouping.n - first if count is None else max(0, min(count, grouping.n - first))
    out = np.zeros((n, 3, 2, N_BUCKETS))
    if sample.rows.size == 0 or n == 0:
        return out
    rows = sample.rows
    inst = grouping.of_workload[rows // ROWS_PER_WORKLOAD]
    buckets, counts = sample.buckets, sample.counts_f64
    if first > 0 or n < grouping.n:
        keep = (inst >= first) & (inst < first + n)
        rows, inst, buckets, counts = rows[keep], inst[keep] - first, buckets[keep], counts[keep]
    r = rows % ROWS_PER_WORKLOAD
    cat, kind = r // 2, r % 2
    views = np.stack([np.zeros_like(cat), np.where(cat % 2 == 0, 1, 2)], axis=1)  # all, rd/wr
    key = ((inst[:, None] * 3 + views) * 2 + kind[:, None]) * N_BUCKETS + buckets[:, None]
    flat = np.asarray(
        np.bincount(key.ravel(), weights=np.repeat(counts, 2), minlength=out.size),
        dtype=np.float64,
    )
    return flat.reshape(out.shape)
