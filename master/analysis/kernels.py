"""Compiled inner loops of the master's per-subinterval path (numba).

At 10,000 workloads a subinterval carries about nine million histogram coordinates; whole-array
numpy passes cost tens of milliseconds each, and the rollups need many of them. These loops
touch each coordinate once per rollup type instead. They hold no state and do no I/O; the
callers in ``master.analysis.rollup`` and ``master.results.output`` own the data layout and the
meaning, and the tests compare every kernel with a plain numpy or Python reference.

Compiled code is cached beside this file (``__pycache__``), so only the first process after
an install pays the compile time (over ten seconds of CPU on a small VM: ``warm_up``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.grouping import MEMBERSHIP, N_VIEWS
from protocol.histogram import PCT_SCALE, percentile_numerators
from protocol.stats import ROWS_PER_WORKLOAD, GroupStats, StatsBatch

try:  # pragma: no cover - exercised by every test run
    import numba as _numba

    def _jit(fn: Any) -> Any:
        return _numba.njit(cache=True, nogil=True)(fn)

    def _jit_inline(fn: Any) -> Any:
        """A helper inlined into its callers by numba itself: a call that passes arrays
        otherwise pays their reference counting (atomic operations), per call."""
        return _numba.njit(cache=True, nogil=True, inline="always")(fn)
except ImportError as exc:  # pragma: no cover
    raise ImportError(f"the master needs numba for its rollup kernels: {exc}") from exc

_LO = LOWER_NS.astype(np.float64)
#: (N_VIEWS, 4): whether each view adds each category up.
_VIEW_CATS = MEMBERSHIP > 0
_HI = (UPPER_NS - 1).astype(np.float64)


# ----------------------------------------------------------------------------- percentiles
def _emit_py(b: int, c: int, cum: int, j: int, ranks: Any, targets: Any, mn: float, mx: float,
             lo_e: Any, hi_e: Any, overflow: int, out: Any) -> int:
    """Bucket ``b`` holds ``c`` I/Os after ``cum`` before it: fill every percentile whose
    rank it reaches (same rule as ``protocol.histogram.percentiles_from_counts``); returns
    the next percentile to find."""
    p = ranks.size
    while j < p and cum + c >= targets[j]:
        frac = 0.0
        if c > 0:
            frac = (ranks[j] - cum) / c
            frac = min(max(frac, 0.0), 1.0)
        lo = max(lo_e[b], mn)
        hi = mx if b == overflow else min(hi_e[b], mx)
        v = lo + frac * (hi - lo)
        out[j] = min(max(v, mn), mx)
        j += 1
    return j


_emit = _jit(_emit_py)


def _view_percentiles_py(
    row_bounds: Any, buckets: Any, counts: Any, row_tot: Any, order: Any, inst_ptr: Any,
    view_cats: Any,
    pct_num: Any, scale: int, lo_e: Any, hi_e: Any, overflow: int, mins: Any, maxs: Any,
    out: Any,
) -> None:
    """Percentiles per (instance, view, kind) into ``out`` (G, V, 2, P), left NaN where empty.

    ``row_bounds``: where each histogram row (workload * 8 + category * 2 + kind) starts in
    ``buckets`` / ``counts`` (coordinates sorted by row, buckets rising within a row; a bucket
    may repeat); ``row_tot``: each row's total count. Instance i's workloads are
    ``order[inst_ptr[i]:inst_ptr[i + 1]]``.
    ``view_cats`` (V, 4): which categories each view adds up. ``pct_num``: the percentiles
    as exact numerators over ``scale`` (``protocol.histogram.percentile_numerators``, scale
    ``100 * PCT_SCALE``). ``mins`` / ``maxs`` (G, V, 2):
    the exact smallest and largest latency of each view.

    A one-workload instance is read straight from its sparse rows (a view of several
    categories walks them merged by bucket); a larger one is added into a dense scratch
    histogram per category first. A view whose non-empty categories are those of an earlier
    view copies that view's result.
    """
    n_inst = inst_ptr.size - 1
    n_views = view_cats.shape[0]
    p = pct_num.size
    scratch = np.zeros((ROWS_PER_WORKLOAD, lo_e.size), dtype=np.int64)
    lo = np.empty(ROWS_PER_WORKLOAD, dtype=np.int64)
    hi = np.empty(ROWS_PER_WORKLOAD, dtype=np.int64)
    tot = np.empty(ROWS_PER_WORKLOAD, dtype=np.int64)
    heads = np.empty(4, dtype=np.int64)
    ends = np.empty(4, dtype=np.int64)
    members = np.empty(4, dtype=np.int64)
    ranks = np.empty(p, dtype=np.float64)
    targets = np.empty(p, dtype=np.int64)
    masks = np.empty(n_views, dtype=np.int64)
    n_buckets = lo_e.size
    for i in range(n_inst):
        first, last = inst_ptr[i], inst_ptr[i + 1]
        single = last - first == 1
        # per category row: extent and total
        if single:
            w = order[first]
            for r in range(ROWS_PER_WORKLOAD):
                tot[r] = row_tot[w * ROWS_PER_WORKLOAD + r]
        else:
            for r in range(ROWS_PER_WORKLOAD):
                lo[r] = lo_e.size
                hi[r] = -1
                tot[r] = 0
            for q in range(first, last):
                w = order[q]
                for r in range(ROWS_PER_WORKLOAD):
                    s = row_bounds[w * ROWS_PER_WORKLOAD + r]
                    e = row_bounds[w * ROWS_PER_WORKLOAD + r + 1]
                    if e <= s:
                        continue
                    row = scratch[r]
                    for x in range(s, e):
                        row[buckets[x]] += counts[x]
                    tot[r] += row_tot[w * ROWS_PER_WORKLOAD + r]
                    if buckets[s] < lo[r]:
                        lo[r] = buckets[s]
                    if buckets[e - 1] > hi[r]:
                        hi[r] = buckets[e - 1]
        for kind in range(2):
            for v in range(n_views):
                m = 0
                for c in range(4):
                    if view_cats[v, c] and tot[c * 2 + kind] > 0:
                        m |= 1 << c
                masks[v] = m
            for v in range(n_views):
                m = masks[v]
                if m == 0:
                    continue
                dst = out[i, v, kind]
                done = False
                for u in range(v):
                    if masks[u] == m:
                        # element by element: numba compiles an array-to-array slice
                        # assignment with its broadcasting error's text, which cost the
                        # first process after an install 3-6 s more
                        for x in range(p):
                            dst[x] = out[i, u, kind, x]
                        done = True
                        break
                if done:
                    continue
                n_mem = 0
                total = 0
                for c in range(4):
                    if (m >> c) & 1:
                        members[n_mem] = c * 2 + kind
                        total += tot[c * 2 + kind]
                        n_mem += 1
                # exact decimal ranks, as protocol.histogram.percentile_ranks
                q = total // scale
                r = total - q * scale
                for j in range(p):
                    part = r * pct_num[j]
                    ranks[j] = q * pct_num[j] + part / scale
                    targets[j] = q * pct_num[j] + (part + scale - 1) // scale
                mn, mx = mins[i, v, kind], maxs[i, v, kind]
                # Four walks over the view's buckets, each summing counts until every rank is
                # reached: one sparse row, sparse rows merged, one dense row, dense rows added.
                # The one-row walks are kept apart on purpose: a single general walk measured
                # ~1.5x slower on the workload and lun rollups (bench_master's 10,000 case).
                # The rank check stays inline; calling _emit only when a rank is reached is
                # what keeps the walks tight (calling it per bucket measured ~3x slower).
                cum = 0
                j = 0
                nt = targets[0]
                if single:
                    w = order[first]
                    if n_mem == 1:
                        s = row_bounds[w * ROWS_PER_WORKLOAD + members[0]]
                        e = row_bounds[w * ROWS_PER_WORKLOAD + members[0] + 1]
                        x = s
                        while x < e:
                            b = buckets[x]
                            c = counts[x]
                            x += 1
                            while x < e and buckets[x] == b:  # a bucket repeated (unsorted input)
                                c += counts[x]
                                x += 1
                            if cum + c >= nt:
                                j = _emit(b, c, cum, j, ranks, targets, mn, mx, lo_e, hi_e,
                                          overflow, dst)
                                if j == p:
                                    break
                                nt = targets[j]
                            cum += c
                        continue
                    for a in range(n_mem):
                        heads[a] = row_bounds[w * ROWS_PER_WORKLOAD + members[a]]
                        ends[a] = row_bounds[w * ROWS_PER_WORKLOAD + members[a] + 1]
                    while True:
                        b = n_buckets
                        for a in range(n_mem):
                            if heads[a] < ends[a] and buckets[heads[a]] < b:
                                b = buckets[heads[a]]
                        if b == n_buckets:
                            break
                        c = 0
                        for a in range(n_mem):
                            while heads[a] < ends[a] and buckets[heads[a]] == b:
                                c += counts[heads[a]]
                                heads[a] += 1
                        if cum + c >= nt:
                            j = _emit(b, c, cum, j, ranks, targets, mn, mx, lo_e, hi_e,
                                      overflow, dst)
                            if j == p:
                                break
                            nt = targets[j]
                        cum += c
                else:
                    wlo, whi = n_buckets, -1
                    for a in range(n_mem):
                        wlo = min(wlo, lo[members[a]])
                        whi = max(whi, hi[members[a]])
                    if n_mem == 1:
                        row = scratch[members[0]]
                        for b in range(wlo, whi + 1):
                            c = row[b]
                            if cum + c >= nt and c > 0:
                                j = _emit(b, c, cum, j, ranks, targets, mn, mx, lo_e, hi_e,
                                          overflow, dst)
                                if j == p:
                                    break
                                nt = targets[j]
                            cum += c
                        continue
                    for b in range(wlo, whi + 1):
                        c = 0
                        for a in range(n_mem):
                            c += scratch[members[a], b]
                        if cum + c >= nt and c > 0:
                            j = _emit(b, c, cum, j, ranks, targets, mn, mx, lo_e, hi_e,
                                      overflow, dst)
                            if j == p:
                                break
                            nt = targets[j]
                        cum += c
        if not single:
            for r in range(ROWS_PER_WORKLOAD):
                if hi[r] >= lo[r]:
                    scratch[r, lo[r]:hi[r] + 1] = 0


_view_percentiles = _jit(_view_percentiles_py)


def view_percentiles(
    row_bounds: npt.NDArray[np.int64],
    buckets: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    row_tot: npt.NDArray[np.int64],
    order: npt.NDArray[np.intp],
    inst_ptr: npt.NDArray[np.int64],
    view_cats: npt.NDArray[np.bool_],
    percentiles: npt.NDArray[np.float64],
    mins: npt.NDArray[np.float64],
    maxs: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles (G, V, 2, P) of every instance's views; see ``_view_percentiles_py``."""
    out = np.full((inst_ptr.size - 1, view_cats.shape[0], 2, percentiles.size), np.nan)
    _view_percentiles(
        np.ascontiguousarray(row_bounds, dtype=np.int64),
        np.ascontiguousarray(buckets, dtype=np.int64),
        np.ascontiguousarray(counts, dtype=np.int64),
        np.ascontiguousarray(row_tot, dtype=np.int64),
        np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(inst_ptr),
        np.ascontiguousarray(view_cats, dtype=np.bool_),
        percentile_numerators(percentiles), 100 * PCT_SCALE, _LO, _HI, OVERFLOW_INDEX,
        np.ascontiguousarray(mins, dtype=np.float64), np.ascontiguousarray(maxs, dtype=np.float64),
        out)
    return out


# ----------------------------------------------------------------------------- instance metrics
def _instance_metrics_py(counters: Any, lat: Any, order: Any, inst_ptr: Any, member: Any,
                         dur: float, pct: Any, values: Any, ops_v: Any, min_v: Any,
                         max_v: Any) -> None:
    """Every metric of every instance (see ``master.analysis.rollup.compute``, whose numpy
    arithmetic this repeats operation for operation, so the values are the same to the bit).

    Instance ``g``'s workloads are ``order[inst_ptr[g]:inst_ptr[g + 1]]``. Per
    category their counters and latency sums are added, their minima and maxima taken; per
    view (``member``: (V, 4) bool) the categories likewise. Writes ``values`` (G, V, per
    view: IOPS, MB/s, average KiB, per kind mean, min, percentiles, max, then errors),
    ``ops_v`` (G, V) and the views' extremes ``min_v``, ``max_v`` (G, V, 2, float). The
    percentile columns are read from ``pct`` (W, V, 2, P: the percentile table of the one
    workload of each instance, in ns) when it has rows; otherwise they are left alone."""
    n_inst = inst_ptr.size - 1
    n_views = member.shape[0]
    n_pct = pct.shape[3]
    per_kind = 3 + n_pct
    cat = np.zeros((4, 3), dtype=np.int64)
    lsum = np.zeros((4, 2), dtype=np.int64)
    lmin = np.zeros((4, 2), dtype=np.int64)
    lmax = np.zeros((4, 2), dtype=np.int64)
    nan = np.nan
    for g in range(n_inst):
        lo, hi = inst_ptr[g], inst_ptr[g + 1]
        if lo == hi:  # no workloads (a caller's mistake, never a crash): an instance without I/O
            cat[:] = 0
            lsum[:] = 0
            lmin[:] = np.iinfo(np.int64).max
            lmax[:] = -1
        else:
            w = order[lo]
            for c in range(4):
                for q in range(3):
                    cat[c, q] = counters[w, c, q]
                for k in range(2):
                    lsum[c, k] = lat[w, c, k, 0]
                    lmin[c, k] = lat[w, c, k, 1]
                    lmax[c, k] = lat[w, c, k, 2]
        for j in range(lo + 1, hi):
            w = order[j]
            for c in range(4):
                for q in range(3):
                    cat[c, q] += counters[w, c, q]
                for k in range(2):
                    lsum[c, k] += lat[w, c, k, 0]
                    lmin[c, k] = min(lmin[c, k], lat[w, c, k, 1])
                    lmax[c, k] = max(lmax[c, k], lat[w, c, k, 2])
        for v in range(n_views):
            ops = np.int64(0)
            nbytes = np.int64(0)
            errors = np.int64(0)
            s0 = np.int64(0)
            s1 = np.int64(0)
            first = True
            mn0 = mn1 = mx0 = mx1 = np.int64(0)
            for c in range(4):
                if not member[v, c]:
                    continue
                ops += cat[c, 0]
                nbytes += cat[c, 1]
                errors += cat[c, 2]
                s0 += lsum[c, 0]
                s1 += lsum[c, 1]
                if first:
                    mn0, mn1, mx0, mx1 = lmin[c, 0], lmin[c, 1], lmax[c, 0], lmax[c, 1]
                    first = False
                else:
                    mn0 = min(mn0, lmin[c, 0])
                    mn1 = min(mn1, lmin[c, 1])
                    mx0 = max(mx0, lmax[c, 0])
                    mx1 = max(mx1, lmax[c, 1])
            ops_v[g, v] = ops
            fops = np.float64(ops)
            has = fops > 0
            min_v[g, v, 0] = np.float64(mn0)
            min_v[g, v, 1] = np.float64(mn1)
            max_v[g, v, 0] = np.float64(mx0)
            max_v[g, v, 1] = np.float64(mx1)
            out = values[g, v]
            out[0] = fops / dur
            out[1] = np.float64(nbytes) / dur / 1e6
            out[2] = np.float64(nbytes) / fops / 1024 if has else nan
            for k in range(2):
                at = 3 + k * per_kind
                out[at] = np.float64(s0 if k == 0 else s1) / fops / 1e6 if has else nan
                out[at + 1] = min_v[g, v, k] / 1e6 if has else nan
                if pct.shape[0]:
                    for p in range(n_pct):
                        out[at + 2 + p] = pct[order[lo], v, k, p] / 1e6 if hi > lo else nan
                out[at + per_kind - 1] = max_v[g, v, k] / 1e6 if has else nan
            out[values.shape[2] - 1] = np.float64(errors)


_instance_metrics = _jit(_instance_metrics_py)


def _c_array(a: npt.ArrayLike, dtype: type) -> Any:
    """``a`` as a C-contiguous, writable array of ``dtype`` (copied only when it is not: a
    read-only array, as the wire's are, would need the kernels compiled again)."""
    out: Any = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.writeable else out.copy()


def instance_metrics(counters: npt.NDArray[np.int64], lat: npt.NDArray[np.int64],
                     order: npt.NDArray[np.intp], inst_ptr: npt.NDArray[np.int64],
                     member: npt.NDArray[np.bool_], duration_s: float,
                     pct: npt.NDArray[np.float64] | None, per_view: int,
                     ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64],
                                npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(values (G, V, ``per_view``), ops (G, V), views' minima and maxima (G, V, 2)); see
    ``_instance_metrics_py``. Without ``pct`` the percentile columns are uninitialised: the
    caller fills them."""
    g_count, n_views = inst_ptr.size - 1, member.shape[0]
    n_pct = (per_view - 4) // 2 - 3
    values = np.empty((g_count, n_views, per_view))
    ops_v = np.empty((g_count, n_views), dtype=np.int64)
    min_v = np.empty((g_count, n_views, 2))
    max_v = np.empty((g_count, n_views, 2))
    table = (np.zeros((0, n_views, 2, n_pct)) if pct is None
             else _c_array(pct, np.float64))
    if table.shape[1:] != (n_views, 2, n_pct):
        raise ValueError(f"percentile table of shape {table.shape}, expected (W, {n_views}, 2, "
                         f"{n_pct})")
    _instance_metrics(_c_array(counters, np.int64), _c_array(lat, np.int64),
                      np.ascontiguousarray(order, dtype=np.int64),
                      np.ascontiguousarray(inst_ptr, dtype=np.int64),
                      np.ascontiguousarray(member, dtype=np.bool_), float(duration_s), table,
                      values, ops_v, min_v, max_v)
    return values, ops_v, min_v, max_v


def warm_up() -> float:
    """Compile (first process after an install) or load from the cache every kernel, on tiny
    inputs of the real types; returns the seconds it took. ``master.run.lifecycle`` calls it while
    the hosts start, so that the first subinterval does not pay for it (a compile takes seconds,
    longer than a short subinterval)."""
    t0 = time.perf_counter()
    # two workloads: instance 0 has both (dense path), instance 1 has one (sparse walk)
    bounds = np.array([0, 1, 2] + [2] * 6 + [2, 3] + [3] * 7, dtype=np.int64)
    buckets = np.array([10, 12, 11], dtype=np.int64)
    counts = np.ones(3, dtype=np.int64)
    row_tot = np.zeros(16, dtype=np.int64)
    row_tot[[0, 1, 8]] = 1
    cats = np.array([[True] * 4, [True, False, True, False]])
    mins = np.zeros((2, 2, 2))
    for order, ptr in (([0, 1], [0, 2]), ([0, 1], [0, 1, 2])):
        view_percentiles(bounds, buckets, counts, row_tot, np.array(order), np.array(ptr),
                         cats, np.array([50.0, 99.0]), mins[: len(ptr) - 1],
                         mins[: len(ptr) - 1] + 1e6)
    for pct in (None, np.zeros((2, 2, 2, 2))):
        instance_metrics(np.ones((2, 4, 3), dtype=np.int64), np.ones((2, 4, 2, 3), dtype=np.int64),
                         np.arange(2), np.arange(3), cats, 1.0, pct, 14)
    one = np.ones(1, dtype=np.int64)
    merge_sorted((one, one, one), (one, one + 1, one))
    histogram_rows(one - 1, one - 1, np.array([0, 1]), one, one, one, 0, 1)
    gather_texts(b"ab", np.array([1, 2]), np.array([1, 0]))
    validate_batch(StatsBatch(  # the wire's types: rows uint32, buckets uint16, counts int64
        counters=np.array([[[1, 4096, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]], dtype=np.int64),
        lat=np.array([[[[5, 5, 5]] * 2] * 4], dtype=np.int64),
        rows=np.array([0, 1], dtype=np.uint32), buckets=np.array([5, 5], dtype=np.uint16),
        counts=np.ones(2, dtype=np.int64)))
    check_group_stats(GroupStats(StatsBatch.empty(1), np.full((1, N_VIEWS, 2, 6), np.nan)))
    format_lines(np.array([[1.5, np.nan, 1234567.0, 0.0, 1e-5, 1e-20]]), b"h,", b"t",
                 np.array([1]), np.array([True]), b"max", True, b"\r\n")
    write_lines(np.array([SKIP], dtype=np.int32), np.array([49], dtype=np.uint8),
                np.array([1], dtype=np.int64))
    return time.perf_counter() - t0


assert _LO.size == N_BUCKETS


# ----------------------------------------------------------------------------- adding samples
def _merge_sorted_py(ra: Any, ba: Any, ca: Any, rb: Any, bb: Any, cb: Any, ro: Any, bo: Any,
                     co: Any) -> int:
    """Merge two coordinate lists sorted strictly by (row, bucket) into ``ro, bo, co``,
    adding the counts of a (row, bucket) both have; returns the merged length."""
    na, nb = ra.size, rb.size
    i = j = n = 0
    shift = 1 << 16  # buckets < 2**16: (row, bucket) as one sortable key
    ka = ra[0] * shift + ba[0] if na else 0
    kb = rb[0] * shift + bb[0] if nb else 0
    while i < na and j < nb:
        if ka < kb:
            ro[n] = ra[i]
            bo[n] = ba[i]
            co[n] = ca[i]
            i += 1
            if i < na:
                ka = ra[i] * shift + ba[i]
        elif kb < ka:
            ro[n] = rb[j]
            bo[n] = bb[j]
            co[n] = cb[j]
            j += 1
            if j < nb:
                kb = rb[j] * shift + bb[j]
        else:
            ro[n] = ra[i]
            bo[n] = ba[i]
            co[n] = ca[i] + cb[j]
            i += 1
            j += 1
            if i < na:
                ka = ra[i] * shift + ba[i]
            if j < nb:
                kb = rb[j] * shift + bb[j]
        n += 1
    while i < na:
        ro[n] = ra[i]
        bo[n] = ba[i]
        co[n] = ca[i]
        i += 1
        n += 1
    while j < nb:
        ro[n] = rb[j]
        bo[n] = bb[j]
        co[n] = cb[j]
        j += 1
        n += 1
    return n


_merge_sorted = _jit(_merge_sorted_py)


def merge_sorted(a: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
                 b: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(rows, buckets, counts) of two histogram-coordinate lists added up; each list sorted
    strictly by (row, bucket), and so is the result."""
    na, nb = a[0].size, b[0].size
    ro = np.empty(na + nb, dtype=np.int64)
    bo = np.empty(na + nb, dtype=np.int64)
    co = np.empty(na + nb, dtype=np.int64)
    n = _merge_sorted(*(np.ascontiguousarray(x, dtype=np.int64) for x in (*a, *b)), ro, bo, co)
    return ro[:n], bo[:n], co[:n]


# ----------------------------------------------------------------------------- histogram files
def _histogram_rows_py(of_workload: Any, members: Any, wl_bounds: Any, rows: Any, buckets: Any,
                       counts: Any, first: int, n: int) -> tuple[Any, Any, Any, bool]:
    """The non-empty buckets of instances ``first .. first + n - 1``, whose workloads are
    ``members`` (workload w's instance ``of_workload[w]``, its coordinates
    ``wl_bounds[w]:wl_bounds[w + 1]``): each (instance, bucket) once, in instance then bucket
    order, with its counts in the overall, read and write views, service then response time
    each (column ``view * 2 + kind``), and whether every bucket read was in range (when not,
    nothing is added up: the rows are empty)."""
    index = np.zeros(n * N_BUCKETS, dtype=np.int64)  # a bucket's row + 1, 0 while unseen
    for m in range(members.size):
        w = members[m]
        base = (of_workload[w] - first) * N_BUCKETS
        for x in range(wl_bounds[w], wl_bounds[w + 1]):
            b = buckets[x]
            if b < 0 or b >= N_BUCKETS:
                empty = np.zeros(0, dtype=np.intp)
                return empty, empty, np.zeros((0, 6), dtype=np.int64), False
            index[base + b] = 1
    n_rows = 0
    for k in range(index.size):
        if index[k]:
            index[k] = n_rows + 1
            n_rows += 1
    out_inst = np.empty(n_rows, dtype=np.intp)
    out_bucket = np.empty(n_rows, dtype=np.intp)
    for k in range(index.size):
        if index[k]:
            out_inst[index[k] - 1] = k // N_BUCKETS
            out_bucket[index[k] - 1] = k % N_BUCKETS
    summed = np.zeros((n_rows, 6), dtype=np.int64)
    for m in range(members.size):
        w = members[m]
        base = (of_workload[w] - first) * N_BUCKETS
        for x in range(wl_bounds[w], wl_bounds[w + 1]):
            row = index[base + buckets[x]] - 1
            r = rows[x] % ROWS_PER_WORKLOAD
            kind = r % 2
            summed[row, kind] += counts[x]
            summed[row, 2 + 2 * (r // 2 % 2) + kind] += counts[x]
    return out_inst, out_bucket, summed, True


_histogram_rows = _jit(_histogram_rows_py)


def histogram_rows(of_workload: npt.NDArray[np.intp], members: npt.NDArray[np.intp],
                   wl_bounds: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                   buckets: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], first: int,
                   n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp],
                                    npt.NDArray[np.int64]]:
    """See ``_histogram_rows_py``: (instance - first, bucket, counts (rows, 6)) per non-empty
    bucket. The members' instances must lie in ``first .. first + n - 1`` and the buckets in
    range (checked: the kernel indexes by them; the buckets by the kernel itself, as it reads
    the members' coordinates, so a slice costs its own coordinates only); ``wl_bounds`` must
    be the coordinates' bounds by workload (rows sorted; the caller's)."""
    inst = of_workload[members]
    if inst.size and (int(inst.min()) < first or int(inst.max()) >= first + n):
        raise ValueError(f"workloads of instances outside {first}..{first + n - 1}")
    if wl_bounds.size != of_workload.size + 1 or int(wl_bounds[-1]) > rows.size:
        raise ValueError(f"{wl_bounds.size} workload bounds for {of_workload.size} workloads "
                         f"and {rows.size} coordinates")
    out_inst, out_bucket, summed, in_range = _histogram_rows(
        *(np.ascontiguousarray(a, dtype=np.int64)
          for a in (of_workload, members, wl_bounds, rows, buckets, counts)), first, n)
    if not in_range:
        raise ValueError(f"buckets outside 0..{N_BUCKETS - 1}")
    return out_inst, out_bucket, summed


# ----------------------------------------------------------------------------- validation
def _scan_coords_py(rows: Any, buckets: Any, counts: Any, row_tot: Any) -> tuple[int, bool, int]:
    """One pass over a batch's coordinates: the largest bucket, whether (row, bucket) rises
    strictly, the smallest count; adds each count into ``row_tot[row]`` (rows the caller has
    checked in range: the last is the largest when sorted, and an unsorted batch is refused
    before the totals are read)."""
    n = rows.size
    bmax = 0
    cmin = counts[0] if n else 1
    ascending = True
    n_rows = row_tot.size
    prev = -1
    for x in range(n):
        r = rows[x]
        b = buckets[x]
        c = counts[x]
        if b > bmax:
            bmax = b
        if c < cmin:
            cmin = c
        key = r * 65536 + b  # buckets < 2**16
        if key <= prev:
            ascending = False
        prev = key
        if r < n_rows:
            row_tot[r] += c
    return bmax, ascending, cmin


_scan_coords = _jit(_scan_coords_py)


def validate_batch(batch: StatsBatch) -> None:
    """``StatsBatch.validate`` with its scan of the coordinates compiled (eight numpy passes
    there, one here); the checks themselves are ``StatsBatch.check_scan``, shared."""
    row_tot = np.zeros(batch.n_workloads * ROWS_PER_WORKLOAD, dtype=np.int64)
    bmax, ascending, cmin = 0, True, 1
    if batch.rows.size:
        # aligned (a copy only when the wire left an array unaligned), so that the kernel
        # compiled by warm_up is the one used
        coords = (np.require(a, requirements="A") for a in (batch.rows, batch.buckets,
                                                             batch.counts))
        bmax, ascending, cmin = _scan_coords(*coords, row_tot)
    batch.check_scan(int(bmax), bool(ascending), int(cmin), row_tot)


def _scan_group_pct_py(counters: Any, lat: Any, pct: Any, member: Any
                       ) -> tuple[bool, bool, bool, bool]:
    """One pass over a percentile-table entry (``GroupStats`` without histograms): what
    ``GroupStats.check`` looks for, as (negative counter, inconsistent latency side
    statistics, a percentile missing or present against its view's I/O, a percentile
    outside its view's minimum and maximum). The same comparisons as there: a view had I/O
    when one of its categories did; its extremes are its categories' (all of them, as
    ``protocol.grouping.view_extremes``), compared as float64."""
    n_views = member.shape[0]
    n_pct = pct.shape[3]
    negative = inconsistent = missing = outside = False
    for w in range(counters.shape[0]):
        for c in range(4):
            for q in range(3):
                if counters[w, c, q] < 0:
                    negative = True
            if counters[w, c, 0] > 0:
                for k in range(2):
                    if lat[w, c, k, 1] < 0 or lat[w, c, k, 2] < lat[w, c, k, 1]:
                        inconsistent = True
        for v in range(n_views):
            has = False
            for c in range(4):
                if member[v, c] and counters[w, c, 0] > 0:
                    has = True
            for k in range(2):
                first = True
                lo = hi = np.int64(0)
                for c in range(4):
                    if member[v, c]:
                        if first:
                            lo, hi = lat[w, c, k, 1], lat[w, c, k, 2]
                            first = False
                        else:
                            lo = min(lo, lat[w, c, k, 1])
                            hi = max(hi, lat[w, c, k, 2])
                flo, fhi = np.float64(lo), np.float64(hi)
                for p in range(n_pct):
                    x = pct[w, v, k, p]
                    if np.isnan(x):
                        if has:
                            missing = True
                    elif not has:
                        missing = True
                    elif x < flo or x > fhi:
                        outside = True
    return negative, inconsistent, missing, outside


_scan_group_pct = _jit(_scan_group_pct_py)


def check_group_stats(gs: GroupStats) -> None:
    """``GroupStats.check`` with its scans compiled: the coordinates of an entry with
    histograms (``validate_batch``), or the side statistics and percentile table of one
    without (one pass here, a dozen numpy passes there); the verdicts are
    ``GroupStats.raise_findings``, shared."""
    if gs.pct is None:
        validate_batch(gs.batch)
        return
    b = gs.batch
    gs.raise_findings(*_scan_group_pct(_c_array(b.counters, np.int64), _c_array(b.lat, np.int64),
                                       _c_array(gs.pct, np.float64), _VIEW_CATS))


# ----------------------------------------------------------------------------- CSV numbers
#: Longest text of one cell (``master.results.output.fmt``): sign and 15 digits of a whole number
#: below 1e15; ``%.6g``'s forms are shorter ("-1.23457e-308" is 13). The kernels may write a few
#: bytes past a cell's end (fixed-length stores the next cell overwrites), never past this.
_CELL_MAX = 16
#: Powers of ten 10**k, k = 0..22 (exact in binary64).
_POW_POS = np.array([10.0 ** k for k in range(23)])
#: 10**k for k = -_P10_BIAS.._P10_BIAS (rounded where inexact), enough for the magnitudes
#: ``_put_cell_py`` decides (1e-30 to 1e15): the decimal exponent's first guess is checked
#: against it; the mantissa check corrects a guess it got wrong.
_P10_BIAS = 40
_P10 = np.array([10.0 ** k for k in range(-_P10_BIAS, _P10_BIAS + 1)])
#: ``master.results.output.fmt`` writes whole numbers from here on (``%.6g`` would take an
#: exponent).
_WHOLE_FROM = 999_999.5


def _two_prod_py(a: float, b: float) -> tuple[float, float]:
    """``a * b`` as the rounded product and its exact error (Dekker; no FMA needed)."""
    p = a * b
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


_two_prod = _jit(_two_prod_py)


def _put_uint_py(buf: Any, at: int, v: Any) -> int:
    """Decimal digits of ``v`` (uint64) at ``buf[at:]``; returns the new end."""
    n = 1
    t = v // np.uint64(10)
    while t > 0:
        t //= np.uint64(10)
        n += 1
    for k in range(n - 1, -1, -1):
        buf[at + k] = np.uint8(48 + v % np.uint64(10))
        v //= np.uint64(10)
    return at + n


_put_uint = _jit_inline(_put_uint_py)


def _put_cell_py(buf: Any, at: int, x: float, bits: int, pow_pos: Any, p10: Any,
                 digits: Any) -> int:
    """The finite ``x`` as ``master.results.output.fmt`` writes it, at ``buf[at:]``; returns the new
    end, or -1 for a cell it cannot decide (a ``%.6g`` rounding too close to call in binary,
    magnitudes of 1e15 or more or below 1e-30), which the caller formats in Python.

    Below 999,999.5 that is ``%.6g``: rounding is decided on the exact binary value, ties to
    even, as C's ``printf`` does. From there to 1e15, the whole number (``%.0f``, ties to
    even). ``bits``: ``x``'s IEEE 754 bits (its binary exponent gives the decimal one's first
    guess). The digits are written with fixed-length stores and selects rather than loops of
    data-dependent length: a mispredicted branch costs more than the few bytes written past
    the cell's end, which the next cell overwrites."""
    neg = x < 0 or (x == 0 and np.signbit(x))
    a = -x if neg else x
    if a >= 1e15 or (a < 1e-30 and a != 0.0):
        return -1
    if neg:
        buf[at] = 45
        at += 1
    if a == 0.0:
        buf[at] = 48
        return at + 1
    if a >= 999999.5:  # whole number, ties to even (exact: a < 2**53)
        fl = np.floor(a)
        w = np.int64(fl)
        frac = a - fl
        if frac > 0.5 or (frac == 0.5 and (w & 1) == 1):
            w += 1
        at = _put_uint(buf, at, np.uint64(w))
        return at
    # decimal exponent: floor(e2 * log10(2)) from the binary exponent, then one comparison
    e2 = ((bits >> 52) & 0x7FF) - 1023
    e = (e2 * 78913) >> 18
    if a >= p10[e + 1 + _P10_BIAS]:
        e += 1
    ok = False
    r = np.int64(0)  # the six significant digits (int64: float-to-int conversions are cheaper)
    for _ in range(4):
        k = 5 - e
        if k >= 0:
            mant = a * pow_pos[k] if k <= 22 else a * 1e22 * pow_pos[k - 22]
        elif -k <= 22:
            mant = a / pow_pos[-k]
        else:
            mant = a / 1e22 / pow_pos[-k - 22]
        if mant >= 999999.5:
            e += 1
            continue
        if mant < 99999.5:
            e -= 1
            continue
        fl = np.floor(mant)
        frac = mant - fl
        up = frac > 0.5
        if abs(frac - 0.5) < 1e-6:
            # too close to call from the rounded product: compare the exact value with the
            # midpoint (fl + 0.5) * 10**(e - 5) by error-free products
            half = fl + 0.5
            if 0 <= k <= 22:
                hi, lo = _two_prod(a, pow_pos[k])
                side = (hi - half) + lo
            elif -22 <= k < 0:
                hi, lo = _two_prod(half, pow_pos[-k])
                side = (a - hi) - lo
            else:
                break
            up = side > 0 or (side == 0 and np.floor(fl / 2) * 2 != fl)  # ties to even
        r = np.int64(fl) + (1 if up else 0)
        if r >= 1000000:
            r = np.int64(100000)
            e += 1
        ok = True
        break
    if not ok:
        return -1
    # the digits, each from r directly (r // 10**j as (r * ceil(2**40 / 10**j)) >> 40, exact
    # for r < 2**20): no chain of divisions, each waiting for the one before
    q1 = (r * 109951162778) >> 40
    q2 = (r * 10995116278) >> 40
    q3 = (r * 1099511628) >> 40
    q4 = (r * 109951163) >> 40
    q5 = (r * 10995117) >> 40
    d1 = q4 - q5 * 10
    d2 = q3 - q4 * 10
    d3 = q2 - q3 * 10
    d4 = q1 - q2 * 10
    d5 = r - q1 * 10
    digits[0] = 48 + q5
    digits[1] = 48 + d1
    digits[2] = 48 + d2
    digits[3] = 48 + d3
    digits[4] = 48 + d4
    digits[5] = 48 + d5
    last = 0  # the last significant digit (no trailing zeros are written)
    if d1 != 0:
        last = 1
    if d2 != 0:
        last = 2
    if d3 != 0:
        last = 3
    if d4 != 0:
        last = 4
    if d5 != 0:
        last = 5
    if 0 <= e < 6:  # digits[0..e] '.' digits[e+1..last]: seven stores, then the length
        for j in range(7):
            buf[at + j] = digits[j] if j <= e else (46 if j == e + 1 else digits[j - 1])
        return at + (last + 2 if last > e else e + 1)
    if -4 <= e < 0:  # "0.", -e-1 zeros, digits[0..last]
        for j in range(5):
            buf[at + j] = 46 if j == 1 else 48
        at += 1 - e
        for j in range(6):
            buf[at + j] = digits[j]
        return at + last + 1
    buf[at] = digits[0]
    at += 1
    if last > 0:
        buf[at] = 46
        at += 1
        for d in range(1, last + 1):
            buf[at] = digits[d]
            at += 1
    buf[at] = 101
    buf[at + 1] = 45 if e < 0 else 43
    at += 2
    ex = -e if e < 0 else e
    if ex < 10:
        buf[at] = 48
        at += 1
    at = _put_uint(buf, at, np.uint64(ex))
    return at


_put_cell = _jit_inline(_put_cell_py)


def _format_lines_py(values: Any, bits: Any, pow_pos: Any, p10: Any, head: Any, texts: Any,
                     text_ends: Any, word_last: Any, word: Any, comma_first: bool, tail: Any,
                     repeats: Any, buf: Any, ends: Any, fallback: Any) -> None:
    """Row ``i`` of ``values`` as one line in ``buf`` (ending at ``ends[i]``): ``head``, the
    row's own text (``texts[text_ends[i-1]:text_ends[i]]``), the cells as ``_put_cell_py``
    writes them joined by commas (one before the first cell too when ``comma_first``), then
    ``tail``. NaN and infinities are empty cells; where ``word_last[i]``, the last cell is
    ``word`` instead of its number. A cell ``_put_cell_py`` cannot decide is left empty and
    sets ``fallback[i]``: the caller writes that row itself.

    ``repeats``: (R, 3) blocks of columns (start, source start, length; the source block
    before the block, neither holding the last column) whose text is copied from the source
    block's where a row's values are the same in both, bit for bit (the same numbers make the
    same text): a workload that does only random I/O has the same metrics in its overall and
    random views."""
    n, m = values.shape
    digits = np.empty(6, dtype=np.uint8)
    rep_of = np.full(m, -1, dtype=np.int64)
    for r in range(repeats.shape[0]):
        rep_of[repeats[r, 0]] = r
    cell_at = np.zeros(m, dtype=np.int64)  # where each cell's text starts and ends in the row
    cell_end = np.zeros(m, dtype=np.int64)
    at = 0
    t0 = 0
    for i in range(n):
        for j in range(head.size):
            buf[at + j] = head[j]
        at += head.size
        t1 = text_ends[i]
        for j in range(t0, t1):
            buf[at] = texts[j]
            at += 1
        t0 = t1
        col = 0
        while col < m:
            if col or comma_first:
                buf[at] = 44
                at += 1
            r = rep_of[col]
            if r >= 0:
                src, length = repeats[r, 1], repeats[r, 2]
                same = True
                for j in range(length):
                    if bits[i, src + j] != bits[i, col + j]:
                        same = False
                        break
                if same:
                    a0, a1 = cell_at[src], cell_end[src + length - 1]
                    for j in range(a1 - a0):  # earlier in the line: no overlap
                        buf[at + j] = buf[a0 + j]
                    for j in range(length):
                        cell_at[col + j] = cell_at[src + j] + at - a0
                        cell_end[col + j] = cell_end[src + j] + at - a0
                    at += a1 - a0
                    col += length
                    continue
            cell_at[col] = at
            if col == m - 1 and word_last[i]:
                for j in range(word.size):
                    buf[at + j] = word[j]
                at += word.size
            else:
                x = values[i, col]
                if np.isfinite(x):
                    end = _put_cell(buf, at, x, bits[i, col], pow_pos, p10, digits)
                    if end < 0:
                        fallback[i] = True
                    else:
                        at = end
            cell_end[col] = at
            col += 1
        for j in range(tail.size):
            buf[at + j] = tail[j]
        at += tail.size
        ends[i] = at


_format_lines = _jit(_format_lines_py)


_scratch: dict[str, npt.NDArray[np.uint8]] = {}


def _bytes(data: bytes) -> npt.NDArray[np.uint8]:
    """``data`` as a read-only uint8 array, empty or not: one type, so one compiled
    signature of ``format_lines`` serves every caller."""
    return np.frombuffer(data, dtype=np.uint8)


def format_lines(values: npt.NDArray[np.float64], head: bytes = b"", texts: bytes = b"",
                 text_ends: npt.NDArray[np.int64] | None = None,
                 word_last: npt.NDArray[np.bool_] | None = None, word: bytes = b"",
                 comma_first: bool = False, tail: bytes = b"",
                 repeats: Sequence[tuple[int, int, int]] = ()
                 ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Rows of ``values`` as lines of ``fmt`` cells (see ``_format_lines_py``): the bytes
    (ASCII), where each line ends in them, and which rows the caller must write itself. The
    bytes are a view of a buffer kept between calls (no page faults per call): valid until
    the next call. ``repeats``: blocks of columns (start, source start, length) that take
    their source block's text where their values are the same."""
    n, m = values.shape
    blocks = np.array(repeats, dtype=np.int64).reshape(-1, 3)
    taken = np.zeros(m, dtype=np.bool_)
    for start, src, length in blocks.tolist():
        if not (length > 0 and src >= 0 and src + length <= start and start + length < m
                and not taken[start:start + length].any()):
            raise ValueError(f"repeated block {start, src, length} must follow its source, "
                             f"not overlap another, and leave the last of {m} columns")
        taken[start:start + length] = True
    if text_ends is None:
        text_ends = np.zeros(n, dtype=np.int64)
    if word_last is None:
        word_last = np.zeros(n, dtype=np.bool_)
    need = (n * (len(head) + len(tail) + m * (_CELL_MAX + 1) + max(len(word) - _CELL_MAX, 0))
            + len(texts) + 2 * _CELL_MAX)
    buf = _scratch.get("rows")
    if buf is None or buf.size < need:
        buf = _scratch["rows"] = np.empty(need, dtype=np.uint8)
    ends = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=np.bool_)
    values = np.ascontiguousarray(values, dtype=np.float64)
    _format_lines(values, values.view(np.int64), _POW_POS, _P10, _bytes(head), _bytes(texts),
                  np.ascontiguousarray(text_ends, dtype=np.int64),
                  np.ascontiguousarray(word_last, dtype=np.bool_), _bytes(word), comma_first,
                  _bytes(tail), blocks, buf, ends, fallback)
    return buf[:int(ends[-1]) if n else 0], ends, fallback


def _gather_texts_py(data: Any, ends: Any, which: Any, out: Any, out_ends: Any) -> None:
    """Texts ``which[0], which[1], ...`` of ``data`` (text i is ``data[ends[i-1]:ends[i]]``)
    one after another into ``out``, each ending at ``out_ends[j]``."""
    at = 0
    for j in range(which.size):
        i = which[j]
        a = ends[i - 1] if i else 0
        for k in range(a, ends[i]):
            out[at] = data[k]
            at += 1
        out_ends[j] = at


_gather_texts = _jit(_gather_texts_py)


def gather_texts(data: bytes, ends: npt.NDArray[np.int64], which: npt.NDArray[np.intp]
                 ) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The texts ``which[0], which[1], ...`` (repeats allowed) of ``data`` (text i ends at
    ``ends[i]``), one after another, and where each ends."""
    if which.size and (int(which.min()) < 0 or int(which.max()) >= ends.size):
        raise ValueError(f"texts {int(which.min())}..{int(which.max())} of {ends.size}")
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    which = np.ascontiguousarray(which, dtype=np.int64)
    lengths = np.diff(ends, prepend=0)
    out = np.empty(int(lengths[which].sum()), dtype=np.uint8)
    out_ends = np.empty(which.size, dtype=np.int64)
    _gather_texts(_bytes(data), ends, which, out, out_ends)
    return out.tobytes(), out_ends


# ----------------------------------------------------------------------------- appending lines
# libc's functions by name, which the JIT's linker finds in the process (a ctypes function
# would bake its address into the code, which then could not be cached)
_c_write: Any = _numba.types.ExternalFunction(
    "write", _numba.types.intp(_numba.types.int32, _numba.types.voidptr, _numba.types.uintp))
# open(path, flags): no O_CREAT, so the variadic mode argument is never read
_c_open: Any = _numba.types.ExternalFunction(
    "open", _numba.types.int32(_numba.types.voidptr, _numba.types.int32))
_c_close: Any = _numba.types.ExternalFunction("close", _numba.types.int32(_numba.types.int32))

#: ``write_lines``' fd for a line it appends by its file's path (open, write, close).
BY_PATH = -1
#: ``write_lines``' fd for a line it leaves alone (the caller writes it).
SKIP = -2
#: ``write_lines``' failure kinds: ``open`` or ``write`` failed (the caller repeats the rest of
#: the line to raise its error), or ``close`` failed after the whole line was written.
FAILED_WRITE, FAILED_CLOSE = 0, 1
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC


def _write_lines_py(fds: Any, data: Any, ends: Any, first: int, at: int, paths: Any,
                    path_at: Any) -> tuple[int, int, int]:
    """Append line ``i`` (``data[ends[i-1]:ends[i]]``) to its file, for ``i`` from ``first``
    on; line ``first`` from offset ``at`` of ``data`` (its start, or where an earlier call
    stopped). The file is open as ``fds[i]``, or, where ``fds[i]`` is ``BY_PATH``, opened for
    appending by its path (``paths[path_at[i]:]``, NUL-terminated), written and closed. A line
    whose fd is ``SKIP`` is left alone. A short write goes on with the rest. Returns
    ``(-1, 0, 0)`` when all are written, else the line that failed, the offset it stopped at
    and ``FAILED_WRITE`` (``open`` or ``write`` failed: the caller repeats them to raise their
    error; libc's errno is not read here) or ``FAILED_CLOSE``."""
    base = data.ctypes.data
    pbase = paths.ctypes.data
    for i in range(first, fds.size):
        end = ends[i]
        if i > first:
            at = ends[i - 1]
        fd = fds[i]
        if fd == SKIP:
            continue
        by_path = fd == BY_PATH
        if by_path:
            fd = _c_open(pbase + path_at[i], _APPEND_FLAGS)
            if fd < 0:
                return i, at, FAILED_WRITE
        while at < end:
            n = _c_write(fd, base + at, end - at)
            if n <= 0:
                if by_path:
                    _c_close(fd)
                return i, at, FAILED_WRITE
            at += n
        if by_path and _c_close(fd) != 0:
            return i, at, FAILED_CLOSE
    return -1, 0, FAILED_WRITE


_write_lines = _jit(_write_lines_py)

_NO_PATHS = np.frombuffer(b"\0", dtype=np.uint8)  # read-only, as AppenderGroup.paths's


def write_lines(fds: npt.NDArray[np.int32], data: npt.NDArray[np.uint8],
                ends: npt.NDArray[np.int64], first: int = 0, at: int | None = None,
                paths: npt.NDArray[np.uint8] | None = None,
                path_at: npt.NDArray[np.int64] | None = None) -> tuple[int, int, int]:
    """``_write_lines_py``: one ``write`` call per line, from compiled code (12,604 instance
    files per subinterval cost about 18 ms of system calls on tmpfs, and as much again in
    Python's per-call work), and for the files kept closed one ``open`` and one ``close``
    more (about 5 us of system calls per file on tmpfs, and as much again in Python).
    ``at``: where in ``data`` to start (default: line ``first``'s start). ``paths`` and
    ``path_at`` are needed when some fd is ``BY_PATH``."""
    if data.size == 0 or fds.size <= first:
        return -1, 0, FAILED_WRITE
    fds = np.ascontiguousarray(fds, dtype=np.int32)
    if fds.size and int(fds.min()) < SKIP:
        raise ValueError(f"fd {int(fds.min())}: neither a descriptor, BY_PATH nor SKIP")
    if paths is None or path_at is None:
        if (fds == BY_PATH).any():
            raise ValueError("lines to append by path, but no paths")
        paths, path_at = _NO_PATHS, np.zeros(fds.size, dtype=np.int64)
    elif (path_at.shape != fds.shape or paths[-1:].tobytes() != b"\0"
          or (path_at.size and not 0 <= int(path_at.min()) <= int(path_at.max()) < paths.size)):
        raise ValueError(f"{path_at.size} path offsets for {fds.size} lines, not all in the "
                         f"{paths.size} bytes of paths, or paths not NUL-terminated")
    if at is None:
        at = int(ends[first - 1]) if first else 0
    i, stop, kind = _write_lines(fds, data, np.ascontiguousarray(ends, dtype=np.int64), first,
                                 at, paths, np.ascontiguousarray(path_at, dtype=np.int64))
    return int(i), int(stop), int(kind)


def format_rows(values: npt.NDArray[np.float64]
                ) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Rows of ``values`` as comma-joined ``fmt`` cells: the text (ASCII, so offsets in it are
    byte offsets), where each row ends in it, and which rows the caller must format itself."""
    data, ends, fallback = format_lines(values)
    return data.tobytes().decode("ascii"), ends, fallback
