"""Compiled inner loops of the master's per-subinterval path (numba).

At 10,000 workloads a subinterval carries about nine million histogram coordinates; whole-array
numpy passes cost tens of milliseconds each, and the rollups need many of them. These loops
touch each coordinate once per rollup type instead. They hold no state and do no I/O; the
callers in ``master.rollup`` and ``master.output`` own the data layout and the meaning, and
the tests compare every kernel with a plain numpy or Python reference.

Compiled code is cached beside this file (``__pycache__``), so only the first process after
an install pays the compile time (a few seconds).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.histogram import PCT_SCALE, percentile_numerators
from protocol.stats import ROWS_PER_WORKLOAD, StatsBatch

try:  # pragma: no cover - exercised by every test run
    import numba as _numba

    def _jit(fn: Any) -> Any:
        return _numba.njit(cache=True, nogil=True)(fn)
except ImportError as exc:  # pragma: no cover
    raise ImportError(f"the master needs numba for its rollup kernels: {exc}") from exc

_LO = LOWER_NS.astype(np.float64)
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
                        dst[:] = out[i, u, kind]
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


def warm_up() -> float:
    """Compile (first process after an install) or load from the cache every kernel, on tiny
    inputs of the real types; returns the seconds it took. ``master.run`` calls it while the
    hosts start, so that the first subinterval does not pay for it (a compile takes seconds,
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
    one = np.ones(1, dtype=np.int64)
    merge_sorted((one, one, one), (one, one + 1, one))
    validate_batch(StatsBatch(  # the wire's types: rows uint32, buckets uint16, counts int64
        counters=np.array([[[1, 4096, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]], dtype=np.int64),
        lat=np.array([[[[5, 5, 5]] * 2] * 4], dtype=np.int64),
        rows=np.array([0, 1], dtype=np.uint32), buckets=np.array([5, 5], dtype=np.uint16),
        counts=np.ones(2, dtype=np.int64)))
    format_rows(np.array([[1.5, np.nan, 1234567.0, 0.0]]),
                np.array([False, False, True, False]))
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


# ----------------------------------------------------------------------------- CSV numbers
#: Longest text of one ``%.6g`` cell: sign, 6 digits, point, "e-308".
_CELL_MAX = 16
#: Powers of ten 10**k, k = 0..22 (exact in binary64).
_POW_POS = np.array([10.0 ** k for k in range(23)])


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


_put_uint = _jit(_put_uint_py)


def _format_rows_py(values: Any, exps: Any, int_cols: Any, pow_pos: Any, buf: Any, ends: Any,
                    fallback: Any) -> None:
    """Each row of ``values`` with its cells as ``%.6g`` writes them, joined by commas, into
    ``buf`` (row i ends at ``ends[i]``). That is ``master.output.fmt`` below 999,999.5; ``fmt``
    writes larger magnitudes as whole numbers, so ``output.format_float_rows`` formats rows
    holding such values with ``fmt`` instead. NaN and infinities are empty cells; ``int_cols`` marks
    columns of whole numbers written as integers. ``exps``: the binary exponents of the
    values (``np.frexp``). Rounding is decided on the exact binary value, ties to even, as C's
    ``printf`` does. A cell it cannot decide (a near-tie below 1e-17, magnitudes of 1e15 or
    more or below 1e-30) sets ``fallback[i]``: the caller formats that row in Python."""
    n, m = values.shape
    digits = np.empty(6, dtype=np.uint8)
    ten = np.uint64(10)
    at = 0
    for i in range(n):
        for col in range(m):
            if col:
                buf[at] = 44
                at += 1
            x = values[i, col]
            if not np.isfinite(x):
                continue
            neg = x < 0 or (x == 0 and np.signbit(x))
            a = -x if neg else x
            if int_cols[col]:
                if neg:
                    buf[at] = 45
                    at += 1
                at = _put_uint(buf, at, np.uint64(a))
                continue
            if a >= 1e15 or (a < 1e-30 and a != 0.0):
                fallback[i] = True
                continue
            if neg:
                buf[at] = 45
                at += 1
            if a == 0.0:
                buf[at] = 48
                at += 1
                continue
            # decimal exponent estimated from the binary one (off by at most one; the
            # mantissa check below corrects it)
            e = np.int64(np.floor((exps[i, col] - 1) * 0.30102999566398120))
            ok = False
            r = np.uint64(0)
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
                    # too close to call from the rounded product: compare the exact value
                    # with the midpoint (fl + 0.5) * 10**(e - 5) by error-free products
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
                r = np.uint64(fl) + np.uint64(1 if up else 0)
                if r >= np.uint64(1000000):
                    r //= ten
                    e += 1
                ok = True
                break
            if not ok:
                fallback[i] = True
                continue
            last = -1  # last significant digit to write
            for d in range(5, -1, -1):
                q = r // ten
                digits[d] = np.uint8(r - q * ten)
                r = q
                if last < 0 and digits[d] != 0:
                    last = d
            if -4 <= e < 6:
                if e >= 0:
                    for d in range(e + 1):
                        buf[at] = 48 + digits[d]
                        at += 1
                    if last > e:
                        buf[at] = 46
                        at += 1
                        for d in range(e + 1, last + 1):
                            buf[at] = 48 + digits[d]
                            at += 1
                else:
                    buf[at] = 48
                    buf[at + 1] = 46
                    at += 2
                    for _ in range(-e - 1):
                        buf[at] = 48
                        at += 1
                    for d in range(last + 1):
                        buf[at] = 48 + digits[d]
                        at += 1
            else:
                buf[at] = 48 + digits[0]
                at += 1
                if last > 0:
                    buf[at] = 46
                    at += 1
                    for d in range(1, last + 1):
                        buf[at] = 48 + digits[d]
                        at += 1
                buf[at] = 101
                buf[at + 1] = 45 if e < 0 else 43
                at += 2
                ex = -e if e < 0 else e
                if ex < 10:
                    buf[at] = 48
                    at += 1
                at = _put_uint(buf, at, np.uint64(ex))
        ends[i] = at


_format_rows = _jit(_format_rows_py)


_scratch: dict[str, npt.NDArray[np.uint8]] = {}


def format_rows(values: npt.NDArray[np.float64],
                int_cols: npt.NDArray[np.bool_] | None = None
                ) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Rows of ``values`` as comma-joined cells (see ``_format_rows_py``): the text (ASCII,
    so offsets in it are byte offsets), where each row ends in it, and which rows the caller
    must format itself. The output buffer is kept between calls (no page faults per call)."""
    n, m = values.shape
    if int_cols is None:
        int_cols = np.zeros(m, dtype=np.bool_)
    need = n * m * (_CELL_MAX + 1) + 1
    buf = _scratch.get("rows")
    if buf is None or buf.size < need:
        buf = _scratch["rows"] = np.empty(need, dtype=np.uint8)
    ends = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=np.bool_)
    values = np.ascontiguousarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        exps = np.frexp(values)[1]
    _format_rows(values, exps, np.ascontiguousarray(int_cols, dtype=np.bool_), _POW_POS, buf,
                 ends, fallback)
    return buf[:int(ends[-1]) if n else 0].tobytes().decode("ascii"), ends, fallback
