"""Host-local rollup arithmetic on ``StatsBatch``: workloads added up into groups, periods
added up into a window, and each workload's (or group's) percentiles per view.

The views and the percentiles every rollup reports are ``protocol.views``' (``VIEWS``,
``PERCENTILES``). The percentiles follow the master's rule exactly
(``master.analysis.kernelref.view_percentiles_py``, ``protocol.histogram.percentiles_from_counts``):
the same exact decimal ranks, the same bucket, the same float operations in the same order, so a
slave's table is bit-identical to what the master would compute from the same batch.

Pure numpy (>= 1.24) on whole arrays: no Python loop per workload or per coordinate (only per
chunk, per batch of a window, per category), no numba, no ``master`` import, no I/O or clocks.
Large batches are processed in chunks of workloads or groups, so no temporary array grows past
a few tens of MiB whatever the number of workloads.

Sums are laid out in dense *windows*: one run of cells per histogram row (or view), from its
lowest to its highest non-empty bucket, side by side; ``cell = bucket + shift[row]``. Reading
the non-zero cells back in order yields coordinates sorted by (row, bucket) with no sort.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.batch import StatsBatch, view_extremes
from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.histogram import PCT_SCALE, percentile_numerators
from protocol.stats import MAX, MIN, OPS, ROWS_PER_WORKLOAD, SUM
from protocol.views import (
    MEMBERSHIP,
    N_CATEGORIES,
    N_KINDS,
    N_VIEWS,
    PERCENTILES,
    VIEWS_OF_CATEGORY,
)

logger = logging.getLogger(__name__)

_PCT_NUM: Final = percentile_numerators(PERCENTILES)
_RANK_SCALE: Final = 100 * PCT_SCALE
_LO_F: Final = LOWER_NS.astype(np.float64)
_HI_F: Final = (UPPER_NS - 1).astype(np.float64)
_CAT_BITS: Final = np.left_shift(np.int64(1), np.arange(N_CATEGORIES, dtype=np.int64))

#: Chunk budgets: dense cells per chunk (int64: 16 MiB) and coordinates per piece, whose
#: index, cell and count temporaries are each 8 MiB at most.
_CELL_BUDGET: Final = 1 << 21
_COORD_BUDGET: Final = 1 << 20
#: Sum of counts one cumulative sum may reach (int64 holds twice that).
_CUM_BUDGET: Final = float(1 << 62)
#: float64 sums of integer weights are exact below this.
_EXACT_F64: Final = 1 << 53

_I64 = npt.NDArray[np.int64]
_F64 = npt.NDArray[np.float64]


# ----------------------------------------------------------------------------- helpers
def _chunks(cost: npt.ArrayLike, budget: float) -> list[tuple[int, int]]:
    """Consecutive runs ``[start, end)`` of items whose costs add up to at most ``budget``
    (an item costing more than that makes a run on its own). One step per run."""
    cum = np.cumsum(np.asarray(cost, dtype=np.float64))
    out: list[tuple[int, int]] = []
    start, n = 0, cum.size
    while start < n:
        base = float(cum[start - 1]) if start else 0.0
        end = max(int(np.searchsorted(cum, base + budget, side="right")), start + 1)
        out.append((start, end))
        start = end
    return out


def _row_extents(batch: StatsBatch) -> tuple[_I64, _I64, _I64]:
    """Where each histogram row starts among the (sorted) coordinates (W * 8 + 1 bounds), and
    each row's lowest and highest bucket (N_BUCKETS and -1 for an empty row)."""
    n_rows = batch.n_workloads * ROWS_PER_WORKLOAD
    # needles of the coordinates' own dtype: no converted copy of the coordinates
    needles = np.arange(n_rows + 1, dtype=batch.rows.dtype)
    bounds = np.searchsorted(batch.rows, needles, side="left").astype(np.int64)
    lo = np.full(n_rows, N_BUCKETS, dtype=np.int64)
    hi = np.full(n_rows, -1, dtype=np.int64)
    live = np.flatnonzero(bounds[1:] > bounds[:-1])
    lo[live] = batch.buckets[bounds[live]]
    hi[live] = batch.buckets[bounds[live + 1] - 1]
    return bounds, lo, hi


def _ranges(starts: _I64, ends: _I64) -> _I64:
    """The indices ``starts[i] .. ends[i] - 1`` of every range, concatenated."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(lengths) - lengths
    out: _I64 = np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)
    return out


def _windows(lo: _I64, hi: _I64) -> tuple[_I64, _I64, _I64]:
    """Windows side by side spanning buckets ``lo..hi`` (empty when hi < lo): each window's
    first cell, its end and the shift with ``cell = bucket + shift``."""
    width = np.maximum(hi - lo + 1, 0)
    end = np.cumsum(width)
    start = end - width
    return start, end, start - lo


def _bincount_exact(cell: _I64, counts: _I64, n_cells: int) -> _I64:
    """``counts`` added up per ``cell`` in int64, exactly: float64 bincount weights are exact
    below 2**53, and larger counts are added as two 32-bit halves."""
    if counts.size == 0:
        return np.zeros(n_cells, dtype=np.int64)
    if int(counts.max()) * counts.size < _EXACT_F64:
        out: _I64 = np.bincount(cell, weights=counts, minlength=n_cells).astype(np.int64)
        return out
    low = np.bincount(cell, weights=counts & 0xFFFFFFFF, minlength=n_cells).astype(np.int64)
    high = np.bincount(cell, weights=counts >> 32, minlength=n_cells).astype(np.int64)
    out = (high << 32) + low
    return out


_Coords = tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint16], _I64]


def _coords_of_cells(cells: _I64, start: _I64, end: _I64, shift: _I64, first_row: int
                     ) -> _Coords:
    """The non-zero cells of side-by-side windows as (row, bucket, count) in the wire's
    dtypes, sorted."""
    nonzero = cells != 0
    nz = np.flatnonzero(nonzero)
    seen = np.zeros(cells.size + 1, dtype=np.int64)
    np.cumsum(nonzero, out=seen[1:])
    local = np.repeat(np.arange(start.size), seen[end] - seen[start])
    rows = (local + first_row).astype(np.uint32)
    buckets = (nz - shift[local]).astype(np.uint16)
    return rows, buckets, cells[nz]


def _assemble(counters: _I64, lat: _I64, parts: list[_Coords]) -> StatsBatch:
    if not parts:
        return StatsBatch(counters=counters, lat=lat, rows=np.zeros(0, dtype=np.uint32),
                          buckets=np.zeros(0, dtype=np.uint16),
                          counts=np.zeros(0, dtype=np.int64))
    if len(parts) == 1:
        rows, buckets, counts = parts[0]
    else:
        rows, buckets, counts = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return StatsBatch(counters=counters, lat=lat, rows=rows, buckets=buckets, counts=counts)


# ----------------------------------------------------------------------------- grouping
def group_batch(batch: StatsBatch, of_workload: npt.ArrayLike, n_groups: int) -> StatsBatch:
    """Group g holds the sum of the workloads w with ``of_workload[w] == g``: counters and
    latency sums added, minima min'd, maxima max'd, histograms added; a group with no
    workload is empty. ``batch`` must be valid (``StatsBatch.validate``); so is the result.
    The identity mapping returns ``batch`` itself."""
    w_count = batch.n_workloads
    g = np.asarray(of_workload)
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0, got {n_groups}")
    if g.shape != (w_count,):
        raise ValueError(f"of_workload has shape {g.shape}, the batch has {w_count} workloads")
    if w_count and g.dtype.kind not in "iu":
        raise ValueError(f"of_workload must hold integers, got {g.dtype}")
    if w_count and (int(g.min()) < 0 or int(g.max()) >= n_groups):
        raise ValueError(f"of_workload holds group indices outside 0..{n_groups - 1}")
    g = g.astype(np.intp, copy=False)
    if n_groups == w_count and bool(np.array_equal(g, np.arange(w_count))):
        return batch
    empty = StatsBatch.empty(n_groups)
    counters, lat = empty.counters, empty.lat
    if w_count == 0:
        return empty
    monotone = bool(np.all(g[1:] >= g[:-1]))
    order = np.arange(w_count) if monotone else np.argsort(g, kind="stable")
    sizes = np.bincount(g, minlength=n_groups)
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    present = np.flatnonzero(sizes)
    starts = ptr[present]
    src_counters = batch.counters if monotone else batch.counters[order]
    src_lat = batch.lat if monotone else batch.lat[order]
    counters[present] = np.add.reduceat(src_counters, starts, axis=0)
    lat[present, :, :, SUM] = np.add.reduceat(src_lat[..., SUM], starts, axis=0)
    lat[present, :, :, MIN] = np.minimum.reduceat(src_lat[..., MIN], starts, axis=0)
    lat[present, :, :, MAX] = np.maximum.reduceat(src_lat[..., MAX], starts, axis=0)

    # histogram rows of each group: windows over the extents of its workloads' rows
    bounds, lo_r, hi_r = _row_extents(batch)
    glo = np.full((n_groups, ROWS_PER_WORKLOAD), N_BUCKETS, dtype=np.int64)
    ghi = np.full((n_groups, ROWS_PER_WORKLOAD), -1, dtype=np.int64)
    glo[present] = np.minimum.reduceat(lo_r.reshape(w_count, -1)[order], starts, axis=0)
    ghi[present] = np.maximum.reduceat(hi_r.reshape(w_count, -1)[order], starts, axis=0)
    wb = bounds[::ROWS_PER_WORKLOAD]  # each workload's first coordinate (W + 1)
    nnz_w = np.diff(wb)
    width = np.maximum(ghi - glo + 1, 0).sum(axis=1)
    kind_rows = np.arange(ROWS_PER_WORKLOAD)
    parts: list[_Coords] = []
    for g0, g1 in _chunks(width, _CELL_BUDGET):
        start, end, shift = _windows(glo[g0:g1].reshape(-1), ghi[g0:g1].reshape(-1))
        n_cells = int(end[-1])
        if n_cells == 0:
            continue
        cells = np.zeros(n_cells, dtype=np.int64)
        ws = order[ptr[g0]:ptr[g1]]
        for a, b in _chunks(nnz_w[ws], _COORD_BUDGET):
            src = (ws[a:b] * ROWS_PER_WORKLOAD)[:, None] + kind_rows  # source rows
            lengths = np.diff(bounds[src], append=bounds[src[:, -1:] + 1], axis=1)
            if monotone:  # consecutive workloads: one run of coordinates
                idx: slice | _I64 = slice(int(bounds[src[0, 0]]), int(bounds[src[-1, -1] + 1]))
            else:
                idx = _ranges(bounds[src].reshape(-1), bounds[src + 1].reshape(-1))
            dst = ((g[ws[a:b]] - g0) * ROWS_PER_WORKLOAD)[:, None] + kind_rows
            cell = np.repeat(shift[dst.reshape(-1)], lengths.reshape(-1)) + batch.buckets[idx]
            cells += _bincount_exact(cell, np.asarray(batch.counts[idx], dtype=np.int64),
                                     n_cells)
        parts.append(_coords_of_cells(cells, start, end, shift, g0 * ROWS_PER_WORKLOAD))
    return _assemble(counters, lat, parts)


def add_batches(batches: Sequence[StatsBatch]) -> StatsBatch:
    """The same W workloads over consecutive periods added up (a measurement window): counters
    and latency sums added, minima min'd, maxima max'd, histograms added. Each batch must be
    valid; so is the result. One batch is returned as it is."""
    if not batches:
        raise ValueError("no batches to add")
    w_count = batches[0].n_workloads
    if any(b.n_workloads != w_count for b in batches):
        raise ValueError("batches to add must have the same workloads: "
                         f"{sorted({b.n_workloads for b in batches})}")
    if len(batches) == 1:
        return batches[0]
    counters = np.sum([np.asarray(b.counters, dtype=np.int64) for b in batches], axis=0)
    lat = np.array(batches[0].lat, dtype=np.int64)
    for b in batches[1:]:
        lat[..., SUM] += b.lat[..., SUM]
        np.minimum(lat[..., MIN], b.lat[..., MIN], out=lat[..., MIN])
        np.maximum(lat[..., MAX], b.lat[..., MAX], out=lat[..., MAX])
    extents = [_row_extents(b) for b in batches]
    lo = np.min([e[1] for e in extents], axis=0)
    hi = np.max([e[2] for e in extents], axis=0)
    nnz_w = np.max([np.diff(e[0][::ROWS_PER_WORKLOAD]) for e in extents], axis=0)
    width_w = np.maximum(hi - lo + 1, 0).reshape(w_count, ROWS_PER_WORKLOAD).sum(axis=1)
    parts: list[_Coords] = []
    for w0, w1 in _chunks(width_w + 3 * nnz_w, _CELL_BUDGET):
        r0, r1 = w0 * ROWS_PER_WORKLOAD, w1 * ROWS_PER_WORKLOAD
        start, end, shift = _windows(lo[r0:r1], hi[r0:r1])
        n_cells = int(end[-1])
        if n_cells == 0:
            continue
        cells = np.zeros(n_cells, dtype=np.int64)
        for b, (bounds, _, _) in zip(batches, extents, strict=True):
            s, e = int(bounds[r0]), int(bounds[r1])
            # one batch holds each (row, bucket) once: the cells indexed are distinct
            cells[np.repeat(shift, np.diff(bounds[r0:r1 + 1])) + b.buckets[s:e]] += b.counts[s:e]
        parts.append(_coords_of_cells(cells, start, end, shift, r0))
    return _assemble(counters, lat, parts)


# ----------------------------------------------------------------------------- percentiles
def view_percentiles(batch: StatsBatch) -> _F64:
    """Percentiles in ns of every workload's views: (W, N_VIEWS, 2, len(PERCENTILES)) over
    workload, view, kind (service, response) and ``PERCENTILES``; NaN where a view has no I/O.

    ``batch`` must be valid (``StatsBatch.validate``). Bit-identical to the master's rollup
    of one workload per instance (``master.analysis.kernelref.view_percentiles_py``): the histogram
    of a view adds its categories' rows; percentile p's rank among its ``total`` I/Os is exact
    (``protocol.histogram.percentile_ranks``); its bucket is the first whose cumulative count
    reaches the rank's ceiling; the value is interpolated inside the bucket's values narrowed
    to the view's exact minimum and maximum.

    A view is computed once per distinct set of non-empty categories (overall = random when
    a workload does only random I/O). A view of one non-empty category is searched in the
    batch's own coordinates; a view adding several is added up in a window of cells first.
    """
    w_count = batch.n_workloads
    out = np.full((w_count, N_VIEWS, N_KINDS, len(PERCENTILES)), np.nan)
    if w_count == 0 or batch.rows.size == 0:
        return out
    ops = np.asarray(batch.counters[:, :, OPS], dtype=np.int64)
    has = ops > 0  # (W, 4): a category's rows hold one count per I/O (validate)
    masks = (has * _CAT_BITS) @ MEMBERSHIP.T  # (W, V): the view's non-empty categories
    # a view whose non-empty categories are an earlier view's is that view (computed once)
    first = np.argmax(masks[:, :, None] == masks[:, None, :], axis=2)
    is_item = (masks != 0) & (first == np.arange(N_VIEWS))
    single = is_item & ((masks & (masks - 1)) == 0)  # (W, V): one non-empty category
    multi = is_item & ~single
    totals = ops @ MEMBERSHIP.T  # (W, V): I/Os of each view
    v_min, v_max = view_extremes(batch.lat[..., MIN], batch.lat[..., MAX])
    bounds, lo_r, hi_r = _row_extents(batch)
    nonempty = (MEMBERSHIP[None, :, :] > 0) & has[:, None, :]  # (W, V, 4)
    lo = np.where(nonempty[..., None], lo_r.reshape(w_count, 1, N_CATEGORIES, N_KINDS),
                  N_BUCKETS).min(axis=2)  # (W, V, 2): the window of a multi-category view
    hi = np.where(nonempty[..., None], hi_r.reshape(w_count, 1, N_CATEGORIES, N_KINDS),
                  -1).max(axis=2)
    hi = np.where(multi[..., None], hi, lo - 1)  # no cells for the other views
    width = np.maximum(hi - lo + 1, 0)
    nnz_w = np.diff(bounds[::ROWS_PER_WORKLOAD])
    flat = out.reshape(w_count * N_VIEWS * N_KINDS, len(PERCENTILES))
    for w0, w1 in _chunks(width.sum(axis=(1, 2)) + 3 * nnz_w, _CELL_BUDGET):
        r0, r1 = w0 * ROWS_PER_WORKLOAD, w1 * ROWS_PER_WORKLOAD
        # views of one category: runs of the batch's coordinates, in row order
        w_s, v_s = np.nonzero(single[w0:w1])
        w_s += w0
        cat = np.log2(masks[w_s, v_s]).astype(np.int64)
        row = ((w_s * N_CATEGORIES + cat) * N_KINDS)[:, None] + np.arange(N_KINDS)
        slot = ((w_s * N_VIEWS + v_s) * N_KINDS)[:, None] + np.arange(N_KINDS)
        by_row = np.argsort(row, axis=None)
        row, slot = row.reshape(-1)[by_row], slot.reshape(-1)[by_row]
        s, e = int(bounds[r0]), int(bounds[r1])
        counts = np.asarray(batch.counts[s:e], dtype=np.int64)
        pos, c_at, before = _search_runs(counts, bounds[row] - s, bounds[row + 1] - s,
                                         _targets(totals.reshape(-1)[slot // N_KINDS]))
        flat[slot] = _interpolate(batch.buckets[s:e][pos].astype(np.int64), c_at, before,
                                  v_min.reshape(-1)[slot], v_max.reshape(-1)[slot])
        # views of several categories: added up in windows of cells
        start, end, shift = _windows(lo[w0:w1].reshape(-1), hi[w0:w1].reshape(-1))
        if not end.size or int(end[-1]) == 0:
            continue
        cells = _fill_windows(batch, bounds, w0, w1, has[w0:w1], multi[w0:w1], shift,
                              int(end[-1]))
        slot = np.flatnonzero(end > start)
        pos, c_at, before = _search_runs(cells, start[slot], end[slot],
                                         _targets(totals[w0:w1].reshape(-1)[slot // N_KINDS]))
        slot_g = slot + w0 * N_VIEWS * N_KINDS
        flat[slot_g] = _interpolate(pos - shift[slot][:, None], c_at, before,
                                    v_min.reshape(-1)[slot_g], v_max.reshape(-1)[slot_g])
    # views sharing their non-empty categories with an earlier view: that view's values
    # (NaN stays NaN: the first view without I/O is never computed)
    out[:] = out[np.arange(w_count)[:, None], first]
    return out


def _fill_windows(batch: StatsBatch, bounds: _I64, w0: int, w1: int,
                  has: npt.NDArray[np.bool_], multi: npt.NDArray[np.bool_], shift: _I64,
                  n_cells: int) -> _I64:
    """The windows of the multi-category views of workloads ``w0 .. w1 - 1`` (slots
    (w - w0, v, kind), ``cell = bucket + shift[slot]``) with their categories' rows added in:
    one pass per category, in which every (view, bucket) is distinct, so each cell is
    written once per pass."""
    cells = np.zeros(n_cells, dtype=np.int64)
    for c in range(N_CATEGORIES):
        views = VIEWS_OF_CATEGORY[c]
        # (workload, view) pairs taking category c; both kinds of each
        w_p, j_p = np.nonzero(multi[:, views] & has[:, c, None])
        if w_p.size == 0:
            continue
        kind = np.arange(N_KINDS)
        row = (((w_p + w0) * N_CATEGORIES + c) * N_KINDS)[:, None] + kind
        slot = ((w_p * N_VIEWS + views[j_p]) * N_KINDS)[:, None] + kind
        first, last = bounds[row.reshape(-1)], bounds[row.reshape(-1) + 1]
        idx = _ranges(first, last)
        cells[np.repeat(shift[slot.reshape(-1)], last - first) + batch.buckets[idx]] += (
            batch.counts[idx])
    return cells


def _targets(totals: _I64) -> tuple[_F64, _I64]:
    """Each percentile's exact rank among ``totals`` I/Os and the whole count the bucket
    holding it must reach ((n, P) each), as ``protocol.histogram.percentile_ranks`` and the
    master's kernel compute them (int64, and the same float operations)."""
    q = totals // _RANK_SCALE
    r = totals - q * _RANK_SCALE
    whole = q[:, None] * _PCT_NUM
    part = r[:, None] * _PCT_NUM
    ranks: _F64 = whole + part / _RANK_SCALE
    targets: _I64 = whole + (part + _RANK_SCALE - 1) // _RANK_SCALE
    return ranks, targets


def _search_runs(counts: _I64, starts: _I64, ends: _I64, rank_targets: tuple[_F64, _I64]
                 ) -> tuple[_I64, _I64, _F64]:
    """For each run ``counts[starts[i]:ends[i]]`` (runs disjoint and in ascending order) and
    each target: the first position whose cumulative count within the run reaches the
    target, the count there, and the rank's offset from the count before it ((n, P) each).

    One cumulative sum covers as many runs as it can while it stays below 2**62 (all of them
    unless the counts are astronomical), so it never overflows and stays ascending."""
    ranks, targets = rank_targets
    n = starts.size
    if n == 0:
        empty = np.zeros((0, targets.shape[1]), dtype=np.int64)
        return empty, empty, empty.astype(np.float64)
    a0, a1 = int(starts[0]), int(ends[-1])
    if float(counts[a0:a1].sum(dtype=np.float64)) < _CUM_BUDGET:
        runs = [(0, n)]
    else:  # cost of a run: its counts and those of the gap before it
        prefix = np.concatenate(([0.0], np.cumsum(counts, dtype=np.float64)))
        cost = np.diff(prefix[ends], prepend=prefix[a0])
        runs = _chunks(cost, _CUM_BUDGET)
    pos = np.empty(targets.shape, dtype=np.int64)
    before = np.empty(targets.shape, dtype=np.int64)
    for i0, i1 in runs:
        c0, c1 = int(starts[i0]), int(ends[i1 - 1])
        cum = np.cumsum(counts[c0:c1])
        s, e = starts[i0:i1] - c0, ends[i0:i1] - c0
        cum_before = np.where(s > 0, cum[np.maximum(s - 1, 0)], 0)[:, None]
        p = np.searchsorted(cum, cum_before + targets[i0:i1], side="left")
        p = np.clip(p, s[:, None], e[:, None] - 1)
        pos[i0:i1] = p + c0
        before[i0:i1] = cum[p] - cum_before
    c_at = counts[pos]
    before -= c_at
    return pos, c_at, ranks - before


def _interpolate(bucket: _I64, count: _I64, rank_offset: _F64, v_min: _I64,
                 v_max: _I64) -> _F64:
    """The master's ``_emit``: the fraction of the bucket below the rank, the bucket's values
    narrowed to the view's [min, max] (up to the max in the overflow bucket), interpolated
    and clipped to [min, max]. ``rank_offset`` is rank minus the count before the bucket."""
    frac = np.clip(rank_offset / count, 0.0, 1.0)
    mn = v_min.astype(np.float64)[:, None]
    mx = v_max.astype(np.float64)[:, None]
    low = np.maximum(_LO_F[bucket], mn)
    high = np.where(bucket == OVERFLOW_INDEX, mx, np.minimum(_HI_F[bucket], mx))
    out: _F64 = np.clip(low + frac * (high - low), mn, mx)
    return out
