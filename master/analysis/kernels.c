/* The master's rollup kernels in C: percentiles, instance metrics, adding samples, histogram
 * files and the checks of what the slaves sent.
 *
 * master.analysis.kernels calls them through ctypes (and owns their signatures: every array a
 * pointer to a C-contiguous array of the exact type named here, with its sizes beside it);
 * master.analysis.native builds and loads them. No state, no I/O, no Python API: ctypes
 * releases the GIL for each call.
 *
 * Each ivk_ function repeats its Python reference in kernels.py (the function of the same name
 * with _py, tested against it bit for bit) operation for operation, in the same order and
 * types, so that the results are the same to the bit. Where Python's semantics differ from C's,
 * helpers below keep Python's: max/min as Python's builtins pick (the second argument only
 * when strictly beyond the first: a NaN first stays), floor division, and int64
 * arithmetic that wraps (numpy's int64; C's signed overflow is undefined). Built with
 * -ffp-contract=off (master.analysis.native): a * b + c stays two roundings, as in numpy.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* protocol.stats: histogram rows per workload, category * 2 + kind */
#define N_CAT 4
#define N_KIND 2
#define ROWS (N_CAT * N_KIND)
/* protocol.stats: counters (ops, bytes, errors) per category; latency (sum, min, max) */
#define N_COUNTERS 3
#define N_LAT 3
/* the kernels' one-number key of (row, bucket): buckets < 2**16 */
#define KEY_SHIFT 65536
/* prefetching: int64s in a cache line, and at most this many coordinates ahead */
#define LINE_INT64S 8
#define PREFETCH_COORDS 2048

/* A sample's histogram coordinates, by workload, wherever each workload's lie (the hosts' own
 * arrays of a measurement window, or one array: master.analysis.kernels.Coords): workload w's
 * are the coordinates bounds[w * ROWS] .. bounds[w * ROWS + ROWS] - 1, row r's from
 * bounds[w * ROWS + r], and coordinate x of them is bucket wb[w][x - bounds[w * ROWS]] (the
 * wire's uint16) with count wc[w][x - bounds[w * ROWS]]. */
typedef const uint16_t *const *bucket_ptrs;
typedef const int64_t *const *count_ptrs;

/* The layout these kernels are written for (master.analysis.kernels checks it on load). */
int64_t ivk_rows_per_workload(void)
{
    return ROWS;
}

/* ------------------------------------------------------------------ Python's arithmetic */
static inline int64_t wadd(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

static inline int64_t wsub(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

static inline int64_t wmul(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

/* a // b (b > 0 here: a constant scale) */
static inline int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Python's max(a, b) and min(a, b) */
static inline double fmax_py(double a, double b)
{
    return b > a ? b : a;
}

static inline double fmin_py(double a, double b)
{
    return b < a ? b : a;
}

static inline int64_t imax_py(int64_t a, int64_t b)
{
    return b > a ? b : a;
}

static inline int64_t imin_py(int64_t a, int64_t b)
{
    return b < a ? b : a;
}

/* ------------------------------------------------------------------ percentiles */

/* kernelref.emit_py: bucket b holds c I/Os after cum before it; fills every percentile whose rank it
 * reaches and returns the next percentile to find. */
static int64_t emit(int64_t b, int64_t c, int64_t cum, int64_t j, int64_t p,
                    const double *ranks, const int64_t *targets, double mn, double mx,
                    const double *lo_e, const double *hi_e, int64_t overflow, double *out)
{
    while (j < p && wadd(cum, c) >= targets[j]) {
        double frac = 0.0;
        if (c > 0) {
            frac = (ranks[j] - (double)cum) / (double)c;
            frac = fmin_py(fmax_py(frac, 0.0), 1.0);
        }
        double lo = fmax_py(lo_e[b], mn);
        double hi = b == overflow ? mx : fmin_py(hi_e[b], mx);
        double v = lo + frac * (hi - lo);
        out[j] = fmin_py(fmax_py(v, mn), mx);
        j += 1;
    }
    return j;
}

/* kernelref.view_percentiles_py: percentiles per (instance, view, kind) into out (G, V, 2, P), left
 * alone (the caller's NaN) where empty. The coordinates: row_bounds, wb, wc (bucket_ptrs above).
 * view_cats: (V, 4) 0/1; mins, maxs: (G, V, 2).
 * Returns 0, or -1 when scratch memory could not be had (out then partly written). */
int64_t ivk_view_percentiles(
    const int64_t *row_bounds, bucket_ptrs wb, count_ptrs wc, const int64_t *row_tot,
    const int64_t *order, const int64_t *inst_ptr, int64_t n_inst,
    const uint8_t *view_cats, int64_t n_views, const int64_t *pct_num, int64_t p,
    int64_t scale, const double *lo_e, const double *hi_e, int64_t n_buckets,
    int64_t overflow, const double *mins, const double *maxs, double *out)
{
    int64_t lo[ROWS], hi[ROWS], tot[ROWS];
    int64_t heads[N_CAT], ends[N_CAT], members[N_CAT];
    int64_t *scratch = NULL;  /* (ROWS, n_buckets), zero between instances; made when needed */
    /* ranks (p doubles), targets (p), masks (n_views): one block */
    void *block = malloc((size_t)(2 * p + n_views + 1) * sizeof(int64_t));
    if (block == NULL)
        return -1;
    double *ranks = block;
    int64_t *targets = (int64_t *)block + p;
    int64_t *masks = targets + p;
    for (int64_t i = 0; i < n_inst; i++) {
        int64_t first = inst_ptr[i], last = inst_ptr[i + 1];
        int single = last - first == 1;
        /* per category row: extent and total */
        if (single) {
            int64_t w = order[first];
            for (int r = 0; r < ROWS; r++)
                tot[r] = row_tot[w * ROWS + r];
        } else {
            if (scratch == NULL) {
                scratch = calloc((size_t)(ROWS * n_buckets), sizeof(int64_t));
                if (scratch == NULL) {
                    free(block);
                    return -1;
                }
            }
            for (int r = 0; r < ROWS; r++) {
                lo[r] = n_buckets;
                hi[r] = -1;
                tot[r] = 0;
            }
            for (int64_t q = first; q < last; q++) {
                int64_t w = order[q];
                if (q + 1 < last) {
                    /* the next workload's coordinates asked for while this one's are added:
                     * an instance's workloads lie apart in memory (every third workload's
                     * instances measured 1.5x slower without) */
                    int64_t w2 = order[q + 1];
                    int64_t n2 = row_bounds[w2 * ROWS + ROWS] - row_bounds[w2 * ROWS];
                    if (n2 > PREFETCH_COORDS)
                        n2 = PREFETCH_COORDS;
                    for (int64_t x = 0; x < n2; x += LINE_INT64S)
                        __builtin_prefetch(wc[w2] + x);
                    for (int64_t x = 0; x < n2; x += 4 * LINE_INT64S)
                        __builtin_prefetch(wb[w2] + x);
                }
                int64_t o = row_bounds[w * ROWS];
                const uint16_t *buckets = wb[w];
                const int64_t *counts = wc[w];
                for (int r = 0; r < ROWS; r++) {
                    int64_t s = row_bounds[w * ROWS + r] - o;
                    int64_t e = row_bounds[w * ROWS + r + 1] - o;
                    if (e <= s)
                        continue;
                    int64_t *row = scratch + r * n_buckets;
                    for (int64_t x = s; x < e; x++)
                        row[buckets[x]] = wadd(row[buckets[x]], counts[x]);
                    tot[r] = wadd(tot[r], row_tot[w * ROWS + r]);
                    if (buckets[s] < lo[r])
                        lo[r] = buckets[s];
                    if (buckets[e - 1] > hi[r])
                        hi[r] = buckets[e - 1];
                }
            }
        }
        for (int kind = 0; kind < N_KIND; kind++) {
            for (int64_t v = 0; v < n_views; v++) {
                int64_t m = 0;
                for (int c = 0; c < N_CAT; c++)
                    if (view_cats[v * N_CAT + c] && tot[c * 2 + kind] > 0)
                        m |= 1 << c;
                masks[v] = m;
            }
            for (int64_t v = 0; v < n_views; v++) {
                int64_t m = masks[v];
                if (m == 0)
                    continue;
                double *dst = out + ((i * n_views + v) * N_KIND + kind) * p;
                int done = 0;
                for (int64_t u = 0; u < v; u++) {
                    if (masks[u] == m) {
                        memcpy(dst, out + ((i * n_views + u) * N_KIND + kind) * p,
                               (size_t)p * sizeof(double));
                        done = 1;
                        break;
                    }
                }
                if (done)
                    continue;
                int n_mem = 0;
                int64_t total = 0;
                for (int c = 0; c < N_CAT; c++) {
                    if ((m >> c) & 1) {
                        members[n_mem] = c * 2 + kind;
                        total = wadd(total, tot[c * 2 + kind]);
                        n_mem += 1;
                    }
                }
                if (p == 0)  /* nothing to find (the reference would read targets[0]) */
                    continue;
                /* exact decimal ranks, as protocol.histogram.percentile_ranks */
                int64_t q = floordiv(total, scale);
                int64_t r = wsub(total, wmul(q, scale));
                for (int64_t j = 0; j < p; j++) {
                    int64_t part = wmul(r, pct_num[j]);
                    ranks[j] = (double)wmul(q, pct_num[j]) + (double)part / (double)scale;
                    targets[j] = wadd(wmul(q, pct_num[j]),
                                      floordiv(wsub(wadd(part, scale), 1), scale));
                }
                int64_t at = (i * n_views + v) * N_KIND + kind;
                double mn = mins[at], mx = maxs[at];
                /* Four walks, as the reference: one sparse row, sparse rows merged, one
                 * dense row, dense rows added; each sums counts until every rank is reached */
                int64_t cum = 0;
                int64_t j = 0;
                int64_t nt = targets[0];
                if (single) {
                    int64_t w = order[first];
                    int64_t o = row_bounds[w * ROWS];
                    const uint16_t *buckets = wb[w];
                    const int64_t *counts = wc[w];
                    if (n_mem == 1) {
                        int64_t s = row_bounds[w * ROWS + members[0]] - o;
                        int64_t e = row_bounds[w * ROWS + members[0] + 1] - o;
                        int64_t x = s;
                        while (x < e) {
                            int64_t b = buckets[x];
                            int64_t c = counts[x];
                            x += 1;
                            while (x < e && buckets[x] == b) {  /* a bucket repeated */
                                c = wadd(c, counts[x]);
                                x += 1;
                            }
                            if (wadd(cum, c) >= nt) {
                                j = emit(b, c, cum, j, p, ranks, targets, mn, mx, lo_e, hi_e,
                                         overflow, dst);
                                if (j == p)
                                    break;
                                nt = targets[j];
                            }
                            cum = wadd(cum, c);
                        }
                        continue;
                    }
                    for (int a = 0; a < n_mem; a++) {
                        heads[a] = row_bounds[w * ROWS + members[a]] - o;
                        ends[a] = row_bounds[w * ROWS + members[a] + 1] - o;
                    }
                    for (;;) {
                        int64_t b = n_buckets;
                        for (int a = 0; a < n_mem; a++)
                            if (heads[a] < ends[a] && buckets[heads[a]] < b)
                                b = buckets[heads[a]];
                        if (b == n_buckets)
                            break;
                        int64_t c = 0;
                        for (int a = 0; a < n_mem; a++) {
                            while (heads[a] < ends[a] && buckets[heads[a]] == b) {
                                c = wadd(c, counts[heads[a]]);
                                heads[a] += 1;
                            }
                        }
                        if (wadd(cum, c) >= nt) {
                            j = emit(b, c, cum, j, p, ranks, targets, mn, mx, lo_e, hi_e,
                                     overflow, dst);
                            if (j == p)
                                break;
                            nt = targets[j];
                        }
                        cum = wadd(cum, c);
                    }
                } else {
                    int64_t wlo = n_buckets, whi = -1;
                    for (int a = 0; a < n_mem; a++) {
                        wlo = imin_py(wlo, lo[members[a]]);
                        whi = imax_py(whi, hi[members[a]]);
                    }
                    if (n_mem == 1) {
                        const int64_t *row = scratch + members[0] * n_buckets;
                        for (int64_t b = wlo; b < whi + 1; b++) {
                            int64_t c = row[b];
                            if (wadd(cum, c) >= nt && c > 0) {
                                j = emit(b, c, cum, j, p, ranks, targets, mn, mx, lo_e, hi_e,
                                         overflow, dst);
                                if (j == p)
                                    break;
                                nt = targets[j];
                            }
                            cum = wadd(cum, c);
                        }
                        continue;
                    }
                    for (int64_t b = wlo; b < whi + 1; b++) {
                        int64_t c = 0;
                        for (int a = 0; a < n_mem; a++)
                            c = wadd(c, scratch[members[a] * n_buckets + b]);
                        if (wadd(cum, c) >= nt && c > 0) {
                            j = emit(b, c, cum, j, p, ranks, targets, mn, mx, lo_e, hi_e,
                                     overflow, dst);
                            if (j == p)
                                break;
                            nt = targets[j];
                        }
                        cum = wadd(cum, c);
                    }
                }
            }
        }
        if (!single) {
            for (int r = 0; r < ROWS; r++)
                if (hi[r] >= lo[r])
                    memset(scratch + r * n_buckets + lo[r], 0,
                           (size_t)(hi[r] - lo[r] + 1) * sizeof(int64_t));
        }
    }
    free(scratch);
    free(block);
    return 0;
}

/* ------------------------------------------------------------------ instance metrics */

/* kernelref.instance_metrics_py: every metric of every instance. counters (W, 4, 3), lat (W, 4, 2, 3),
 * member (V, 4) 0/1, pct (pct_rows, pct_views, pct_kinds, n_pct) read when it has rows;
 * writes values (G, V, per_view), ops_v (G, V), min_v and max_v (G, V, 2). */
void ivk_instance_metrics(const int64_t *counters, const int64_t *lat, const int64_t *order,
                          const int64_t *inst_ptr, int64_t n_inst, const uint8_t *member,
                          int64_t n_views, double dur, const double *pct, int64_t pct_rows,
                          int64_t pct_views, int64_t pct_kinds, int64_t n_pct, double *values,
                          int64_t per_view, int64_t *ops_v, double *min_v, double *max_v)
{
    int64_t per_kind = 3 + n_pct;
    int64_t cat[N_CAT][N_COUNTERS], lsum[N_CAT][N_KIND], lmin[N_CAT][N_KIND],
        lmax[N_CAT][N_KIND];
    for (int64_t g = 0; g < n_inst; g++) {
        int64_t lo = inst_ptr[g], hi = inst_ptr[g + 1];
        if (lo == hi) {  /* no workloads (a caller's mistake, never a crash): no I/O */
            for (int c = 0; c < N_CAT; c++) {
                for (int q = 0; q < N_COUNTERS; q++)
                    cat[c][q] = 0;
                for (int k = 0; k < N_KIND; k++) {
                    lsum[c][k] = 0;
                    lmin[c][k] = INT64_MAX;
                    lmax[c][k] = -1;
                }
            }
        } else {
            int64_t w = order[lo];
            for (int c = 0; c < N_CAT; c++) {
                for (int q = 0; q < N_COUNTERS; q++)
                    cat[c][q] = counters[(w * N_CAT + c) * N_COUNTERS + q];
                for (int k = 0; k < N_KIND; k++) {
                    const int64_t *l = lat + ((w * N_CAT + c) * N_KIND + k) * N_LAT;
                    lsum[c][k] = l[0];
                    lmin[c][k] = l[1];
                    lmax[c][k] = l[2];
                }
            }
        }
        for (int64_t jw = lo + 1; jw < hi; jw++) {
            int64_t w = order[jw];
            for (int c = 0; c < N_CAT; c++) {
                for (int q = 0; q < N_COUNTERS; q++)
                    cat[c][q] = wadd(cat[c][q], counters[(w * N_CAT + c) * N_COUNTERS + q]);
                for (int k = 0; k < N_KIND; k++) {
                    const int64_t *l = lat + ((w * N_CAT + c) * N_KIND + k) * N_LAT;
                    lsum[c][k] = wadd(lsum[c][k], l[0]);
                    lmin[c][k] = imin_py(lmin[c][k], l[1]);
                    lmax[c][k] = imax_py(lmax[c][k], l[2]);
                }
            }
        }
        for (int64_t v = 0; v < n_views; v++) {
            int64_t ops = 0, nbytes = 0, errors = 0, s0 = 0, s1 = 0;
            int first = 1;
            int64_t mn0 = 0, mn1 = 0, mx0 = 0, mx1 = 0;
            for (int c = 0; c < N_CAT; c++) {
                if (!member[v * N_CAT + c])
                    continue;
                ops = wadd(ops, cat[c][0]);
                nbytes = wadd(nbytes, cat[c][1]);
                errors = wadd(errors, cat[c][2]);
                s0 = wadd(s0, lsum[c][0]);
                s1 = wadd(s1, lsum[c][1]);
                if (first) {
                    mn0 = lmin[c][0];
                    mn1 = lmin[c][1];
                    mx0 = lmax[c][0];
                    mx1 = lmax[c][1];
                    first = 0;
                } else {
                    mn0 = imin_py(mn0, lmin[c][0]);
                    mn1 = imin_py(mn1, lmin[c][1]);
                    mx0 = imax_py(mx0, lmax[c][0]);
                    mx1 = imax_py(mx1, lmax[c][1]);
                }
            }
            int64_t gv = g * n_views + v;
            ops_v[gv] = ops;
            double fops = (double)ops;
            int has = fops > 0;
            double *mnv = min_v + gv * N_KIND, *mxv = max_v + gv * N_KIND;
            mnv[0] = (double)mn0;
            mnv[1] = (double)mn1;
            mxv[0] = (double)mx0;
            mxv[1] = (double)mx1;
            double *out = values + gv * per_view;
            out[0] = fops / dur;
            out[1] = (double)nbytes / dur / 1e6;
            out[2] = has ? (double)nbytes / fops / 1024 : NAN;
            for (int k = 0; k < N_KIND; k++) {
                int64_t at = 3 + k * per_kind;
                out[at] = has ? (double)(k == 0 ? s0 : s1) / fops / 1e6 : NAN;
                out[at + 1] = has ? mnv[k] / 1e6 : NAN;
                if (pct_rows) {
                    for (int64_t p = 0; p < n_pct; p++)
                        out[at + 2 + p] = hi > lo
                            ? pct[((order[lo] * pct_views + v) * pct_kinds + k) * n_pct + p] / 1e6
                            : NAN;
                }
                out[at + per_kind - 1] = has ? mxv[k] / 1e6 : NAN;
            }
            out[per_view - 1] = (double)errors;
        }
    }
}

/* ------------------------------------------------------------------ adding samples */

/* kernelref.merge_sorted_py: two coordinate lists sorted strictly by (row, bucket) merged into
 * ro, bo, co (room for na + nb), the counts of a (row, bucket) both have added; returns the
 * merged length. */
int64_t ivk_merge_sorted(const int64_t *ra, const int64_t *ba, const int64_t *ca, int64_t na,
                         const int64_t *rb, const int64_t *bb, const int64_t *cb, int64_t nb,
                         int64_t *ro, int64_t *bo, int64_t *co)
{
    int64_t i = 0, j = 0, n = 0;
    int64_t ka = na ? wadd(wmul(ra[0], KEY_SHIFT), ba[0]) : 0;
    int64_t kb = nb ? wadd(wmul(rb[0], KEY_SHIFT), bb[0]) : 0;
    while (i < na && j < nb) {
        if (ka < kb) {
            ro[n] = ra[i];
            bo[n] = ba[i];
            co[n] = ca[i];
            i += 1;
            if (i < na)
                ka = wadd(wmul(ra[i], KEY_SHIFT), ba[i]);
        } else if (kb < ka) {
            ro[n] = rb[j];
            bo[n] = bb[j];
            co[n] = cb[j];
            j += 1;
            if (j < nb)
                kb = wadd(wmul(rb[j], KEY_SHIFT), bb[j]);
        } else {
            ro[n] = ra[i];
            bo[n] = ba[i];
            co[n] = wadd(ca[i], cb[j]);
            i += 1;
            j += 1;
            if (i < na)
                ka = wadd(wmul(ra[i], KEY_SHIFT), ba[i]);
            if (j < nb)
                kb = wadd(wmul(rb[j], KEY_SHIFT), bb[j]);
        }
        n += 1;
    }
    for (; i < na; i++, n++) {
        ro[n] = ra[i];
        bo[n] = ba[i];
        co[n] = ca[i];
    }
    for (; j < nb; j++, n++) {
        ro[n] = rb[j];
        bo[n] = bb[j];
        co[n] = cb[j];
    }
    return n;
}

/* ------------------------------------------------------------------ histogram files */

/* a bucket's cells in ivk_histogram_rows: the six sums (view * 2 + kind), whether seen, one
 * unused: a cache line */
#define CELL 8
#define CELL_SEEN 6

/* kernelref.histogram_rows_py, one instance at a time: its buckets added up in a dense row of
 * n_buckets cells, reused (the reference marks n * n_buckets), giving the same rows, in the
 * same order, with the same sums (int64 sums wrap alike in any order). The coordinates:
 * row_bounds, wb, wc (bucket_ptrs above; a coordinate's row is the row whose bounds hold it).
 * Fills, in one pass, room for cap rows (kernels._histogram_rows_cap bounds them): out_inst
 * (instance - first), out_bucket, and summed (rows, 6), the members' counts added up, column
 * view * 2 + kind, views overall, read (even category), write. The members' instances lie in
 * first .. first + n - 1 (the caller's check). Returns the number of rows; -1 at a bucket
 * outside 0..n_buckets - 1, -2 when out of memory, -3 when the rows are more than cap.
 */
int64_t ivk_histogram_rows(const int64_t *of_workload, const int64_t *members,
                           int64_t n_members, const int64_t *row_bounds, bucket_ptrs wb,
                           count_ptrs wc, int64_t first, int64_t n, int64_t n_buckets,
                           int64_t cap, int64_t *out_inst, int64_t *out_bucket,
                           int64_t *summed)
{
    /* start (n + 1), grouped (n_members), cell (n_buckets * CELL): one block */
    int64_t *start = calloc((size_t)(n + 1 + n_members + n_buckets * CELL), sizeof(int64_t));
    if (start == NULL)
        return -2;
    int64_t *grouped = start + n + 1;  /* instance i's members: start[i] .. start[i + 1] - 1 */
    int64_t *cell = grouped + n_members;
    /* the members grouped by instance, each group in the members' order (a counting sort) */
    for (int64_t m = 0; m < n_members; m++)
        start[of_workload[members[m]] - first + 1] += 1;
    for (int64_t i = 0; i < n; i++)
        start[i + 1] += start[i];
    for (int64_t m = 0; m < n_members; m++)
        grouped[start[of_workload[members[m]] - first]++] = members[m];
    for (int64_t i = n; i > 0; i--)
        start[i] = start[i - 1];
    start[0] = 0;
    int64_t n_rows = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t lo = n_buckets, hi = -1;
        for (int64_t g = start[i]; g < start[i + 1]; g++) {
            int64_t w = grouped[g];
            int64_t o = row_bounds[w * ROWS];
            const uint16_t *buckets = wb[w];
            const int64_t *counts = wc[w];
            for (int64_t r = 0; r < ROWS; r++) {
                int64_t kind = r % 2;
                int64_t view = 1 + r / 2 % 2;  /* read (an even category) or write */
                int64_t e = row_bounds[w * ROWS + r + 1] - o;
                for (int64_t x = row_bounds[w * ROWS + r] - o; x < e; x++) {
                    int64_t b = buckets[x];
                    if (b >= n_buckets) {
                        free(start);
                        return -1;
                    }
                    int64_t *at = cell + b * CELL;
                    at[CELL_SEEN] = 1;
                    lo = b < lo ? b : lo;
                    hi = b > hi ? b : hi;
                    at[kind] = wadd(at[kind], counts[x]);
                    at[view * 2 + kind] = wadd(at[view * 2 + kind], counts[x]);
                }
            }
        }
        for (int64_t b = lo; b <= hi; b++) {
            int64_t *at = cell + b * CELL;
            if (!at[CELL_SEEN])
                continue;
            if (n_rows == cap) {
                free(start);
                return -3;
            }
            out_inst[n_rows] = i;
            out_bucket[n_rows] = b;
            memcpy(summed + n_rows * 6, at, 6 * sizeof(int64_t));
            n_rows += 1;
            memset(at, 0, CELL * sizeof(int64_t));
        }
    }
    free(start);
    return n_rows;
}

/* ------------------------------------------------------------------ validation */

/* kernelref.scan_coords_py: one pass over a batch's coordinates: found[0] the largest bucket (0 at
 * least), found[1] whether (row, bucket) rises strictly, found[2] the smallest count (1 when
 * there are none); adds each count into row_tot[row] for rows below n_rows (a negative row as
 * a negative index, from the end). One function per type of the coordinates: the wire's
 * (uint32 rows, uint16 buckets), and int64 for any other. */
#define IVK_SCAN_COORDS(NAME, ROW_T, BUCKET_T)                                              \
    void NAME(const ROW_T *rows, const BUCKET_T *buckets, const int64_t *counts, int64_t n,  \
              int64_t *row_tot, int64_t n_rows, int64_t *found)                              \
    {                                                                                        \
        int64_t bmax = 0;                                                                    \
        int64_t cmin = n ? counts[0] : 1;                                                    \
        int64_t ascending = 1;                                                               \
        int64_t prev = -1;                                                                   \
        for (int64_t x = 0; x < n; x++) {                                                    \
            int64_t r = (int64_t)rows[x];                                                    \
            int64_t b = (int64_t)buckets[x];                                                 \
            int64_t c = counts[x];                                                           \
            if (b > bmax)                                                                    \
                bmax = b;                                                                    \
            if (c < cmin)                                                                    \
                cmin = c;                                                                    \
            int64_t key = wadd(wmul(r, KEY_SHIFT), b);                                       \
            if (key <= prev)                                                                 \
                ascending = 0;                                                               \
            prev = key;                                                                      \
            if (r < n_rows) {                                                                \
                if (r >= 0)                                                                  \
                    row_tot[r] = wadd(row_tot[r], c);                                        \
                else if (r >= -n_rows)                                                       \
                    row_tot[r + n_rows] = wadd(row_tot[r + n_rows], c);                      \
            }                                                                                \
        }                                                                                    \
        found[0] = bmax;                                                                     \
        found[1] = ascending;                                                                \
        found[2] = cmin;                                                                     \
    }

IVK_SCAN_COORDS(ivk_scan_coords_wire, uint32_t, uint16_t)
IVK_SCAN_COORDS(ivk_scan_coords_i64, int64_t, int64_t)

/* two lanes (GCC's vector extensions, also clang's; plain code where there is no SIMD) */
typedef double v2f64 __attribute__((vector_size(16)));
typedef int64_t v2i64 __attribute__((vector_size(16)));

/* What ivk_scan_group_pct found, as bits. */
#define FOUND_NEGATIVE 1
#define FOUND_INCONSISTENT 2
#define FOUND_MISSING 4
#define FOUND_OUTSIDE 8

/* kernelref.scan_group_pct_py: one pass over a percentile-table entry: counters (n_w, 4, 3), lat
 * (n_w, 4, 2, 3), pct (n_w, pct_views, pct_kinds, n_pct), member (n_views, 4) 0/1. Returns
 * the FOUND_ bits, or -1 when out of memory. The findings are or-ed together, so the
 * reference's branches are taken all at once here, as counts: missing when a percentile is
 * NaN where its view had I/O, or a number where it had none; outside when its view had I/O
 * and it lies below or above the view's extremes, the minimum and maximum over the view's
 * categories in any order (integers), 0 for a view of none (as there). */
int64_t ivk_scan_group_pct(const int64_t *counters, const int64_t *lat, int64_t n_w,
                           const double *pct, int64_t pct_views, int64_t pct_kinds,
                           int64_t n_pct, const uint8_t *member, int64_t n_views)
{
    unsigned *cats = malloc((size_t)(n_views + 1) * sizeof(unsigned));  /* a bit per category */
    if (cats == NULL)
        return -1;
    for (int64_t v = 0; v < n_views; v++) {
        cats[v] = 0;
        for (int c = 0; c < N_CAT; c++)
            cats[v] |= (unsigned)(member[v * N_CAT + c] != 0) << c;
    }
    int negative = 0, inconsistent = 0;
    /* two percentiles at a time (a comparison's lane is -1 where true), the odd one alone:
     * NaNs of views with I/O, numbers of views without, numbers beyond the extremes */
    v2i64 nan2 = {0, 0}, number2 = {0, 0}, beyond2 = {0, 0};
    int64_t nans = 0, numbers = 0, beyond = 0;
    int64_t pairs = n_pct / 2 * 2;
    for (int64_t w = 0; w < n_w; w++) {
        const int64_t *cw = counters + w * N_CAT * N_COUNTERS;
        const int64_t *lw = lat + w * N_CAT * N_KIND * N_LAT;
        unsigned had = 0;  /* the categories with I/O */
        for (int c = 0; c < N_CAT; c++) {
            const int64_t *cc = cw + c * N_COUNTERS;
            negative |= (cc[0] < 0) | (cc[1] < 0) | (cc[2] < 0);
            had |= (unsigned)(cc[0] > 0) << c;
            for (int k = 0; k < N_KIND; k++) {
                const int64_t *l = lw + (c * N_KIND + k) * N_LAT;
                inconsistent |= (cc[0] > 0) & ((l[1] < 0) | (l[2] < l[1]));
            }
        }
        for (int64_t v = 0; v < n_views; v++) {
            unsigned m = cats[v];
            for (int k = 0; k < N_KIND; k++) {
                const double *row = pct + ((w * pct_views + v) * pct_kinds + k) * n_pct;
                if ((m & had) == 0) {  /* no I/O: NaNs only */
                    for (int64_t p = 0; p < pairs; p += 2) {
                        v2f64 x;
                        memcpy(&x, row + p, sizeof x);
                        number2 -= x == x;
                    }
                    if (pairs < n_pct)
                        numbers += !isnan(row[pairs]);
                    continue;
                }
                int64_t lo = INT64_MAX, hi = INT64_MIN;
                for (int c = 0; c < N_CAT; c++) {
                    if ((m >> c) & 1) {
                        const int64_t *l = lw + (c * N_KIND + k) * N_LAT;
                        lo = l[1] < lo ? l[1] : lo;
                        hi = l[2] > hi ? l[2] : hi;
                    }
                }
                double flo = (double)lo, fhi = (double)hi;
                v2f64 lo2 = {flo, flo}, hi2 = {fhi, fhi};
                for (int64_t p = 0; p < pairs; p += 2) {
                    v2f64 x;
                    memcpy(&x, row + p, sizeof x);
                    nan2 -= x != x;
                    beyond2 -= x < lo2;
                    beyond2 -= x > hi2;
                }
                if (pairs < n_pct) {
                    double x = row[pairs];
                    nans += isnan(x);
                    beyond += (x < flo) | (x > fhi);
                }
            }
        }
    }
    free(cats);
    int missing = nan2[0] + nan2[1] + nans + number2[0] + number2[1] + numbers > 0;
    int outside = beyond2[0] + beyond2[1] + beyond > 0;
    return (negative ? FOUND_NEGATIVE : 0) | (inconsistent ? FOUND_INCONSISTENT : 0)
        | (missing ? FOUND_MISSING : 0) | (outside ? FOUND_OUTSIDE : 0);
}
