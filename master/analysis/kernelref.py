"""The plain-Python references of the master's C kernels (``master.analysis.kernels``,
``kernels.c``): each ``<name>_py`` is what ``ivk_<name>`` computes, operation for operation,
in the order the C does it, so that the tests can hold the C to it bit for bit
(tests/master/test_kernels_reference.py). Slow (a Python loop per coordinate): the run never
calls them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from protocol.buckets import N_BUCKETS
from protocol.stats import ROWS_PER_WORKLOAD


def emit_py(b: int, c: int, cum: int, j: int, ranks: Any, targets: Any, mn: float, mx: float,
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


def view_percentiles_py(
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
                                j = emit_py(b, c, cum, j, ranks, targets, mn, mx, lo_e,
                                             hi_e, overflow, dst)
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
                            j = emit_py(b, c, cum, j, ranks, targets, mn, mx, lo_e,
                                         hi_e, overflow, dst)
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
                                j = emit_py(b, c, cum, j, ranks, targets, mn, mx, lo_e,
                                             hi_e, overflow, dst)
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
                            j = emit_py(b, c, cum, j, ranks, targets, mn, mx, lo_e,
                                         hi_e, overflow, dst)
                            if j == p:
                                break
                            nt = targets[j]
                        cum += c
        if not single:
            for r in range(ROWS_PER_WORKLOAD):
                if hi[r] >= lo[r]:
                    scratch[r, lo[r]:hi[r] + 1] = 0


def instance_metrics_py(counters: Any, lat: Any, order: Any, inst_ptr: Any, member: Any,
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


def merge_sorted_py(ra: Any, ba: Any, ca: Any, rb: Any, bb: Any, cb: Any, ro: Any, bo: Any,
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


def histogram_rows_py(of_workload: Any, members: Any, row_bounds: Any, buckets: Any,
                      counts: Any, first: int, n: int) -> tuple[Any, Any, Any, bool]:
    """The non-empty buckets of instances ``first .. first + n - 1``, whose workloads are
    ``members`` (workload w's instance ``of_workload[w]``, its row r's coordinates
    ``row_bounds[w * ROWS_PER_WORKLOAD + r]:row_bounds[w * ROWS_PER_WORKLOAD + r + 1]``): each
    (instance, bucket) once, in instance then bucket order, with its counts in the overall,
    read and write views, service then response time each (column ``view * 2 + kind``), and
    whether every bucket read was in range (when not, nothing is added up: the rows are
    empty)."""
    index = np.zeros(n * N_BUCKETS, dtype=np.int64)  # a bucket's row + 1, 0 while unseen
    for m in range(members.size):
        w = members[m]
        base = (of_workload[w] - first) * N_BUCKETS
        for x in range(row_bounds[w * ROWS_PER_WORKLOAD],
                       row_bounds[(w + 1) * ROWS_PER_WORKLOAD]):
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
        for r in range(ROWS_PER_WORKLOAD):
            kind = r % 2
            for x in range(row_bounds[w * ROWS_PER_WORKLOAD + r],
                           row_bounds[w * ROWS_PER_WORKLOAD + r + 1]):
                row = index[base + buckets[x]] - 1
                summed[row, kind] += counts[x]
                summed[row, 2 + 2 * (r // 2 % 2) + kind] += counts[x]
    return out_inst, out_bucket, summed, True


def scan_coords_py(rows: Any, buckets: Any, counts: Any, row_tot: Any) -> tuple[int, bool, int]:
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


def scan_group_pct_py(counters: Any, lat: Any, pct: Any, member: Any
                       ) -> tuple[bool, bool, bool, bool]:
    """One pass over a percentile-table entry (``GroupStats`` without histograms): what
    ``GroupStats.check`` looks for, as (negative counter, inconsistent latency side
    statistics, a percentile missing or present against its view's I/O, a percentile
    outside its view's minimum and maximum). The same comparisons as there: a view had I/O
    when one of its categories did; its extremes are its categories' (all of them, as
    ``protocol.batch.view_extremes``), compared as float64."""
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
