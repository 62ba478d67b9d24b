/* The CSV writers' kernels in C: numbers as master.results.csvfiles.fmt writes them, rows of
 * them as lines, texts gathered, and lines appended to many files with one write each.
 *
 * master.results.csvkernels calls them through ctypes (and owns their meaning: each function
 * here is the C of a Python reference function there, ``_<name>_py``, compared with it by the
 * tests); master.analysis.native builds and loads them, in one object with kernels.c. So every
 * exported name starts with ivc_ and every helper is static. No state, no allocation kept
 * between calls; the GIL is released around each call (ctypes).
 *
 * The arithmetic is the reference's, operation for operation: binary64, no contraction into
 * fused multiply-adds (the build's -ffp-contract=off; Dekker's exact product relies on it). */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- CSV numbers */

/* 10**k, k = 0..22 (exact in binary64): csvkernels._POW_POS */
static const double pow_pos[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* 10**k for k = -P10_BIAS..P10_BIAS, as Python's 10.0 ** k (rounded where inexact), to the
 * bit: csvkernels._P10 (a test compares them) */
#define P10_BIAS 40
static const double p10[2 * P10_BIAS + 1] = {
    0x1.16c262777579cp-133, 0x1.5c72fb1552d83p-130, 0x1.b38fb9daa78e4p-127,
    0x1.1039d428a8b8fp-123, 0x1.54484932d2e72p-120, 0x1.a95a5b7f87a0fp-117,
    0x1.09d8792fb4c49p-113, 0x1.4c4e977ba1f5cp-110, 0x1.9f623d5a8a733p-107,
    0x1.039d665896880p-103, 0x1.4484bfeebc2a0p-100, 0x1.95a5efea6b347p-97,
    0x1.fb0f6be506019p-94, 0x1.3ce9a36f23c10p-90, 0x1.8c240c4aecb14p-87,
    0x1.ef2d0f5da7dd9p-84, 0x1.357c299a88ea7p-80, 0x1.82db34012b251p-77,
    0x1.e392010175ee6p-74, 0x1.2e3b40a0e9b4fp-70, 0x1.79ca10c924223p-67,
    0x1.d83c94fb6d2acp-64, 0x1.2725dd1d243acp-60, 0x1.70ef54646d497p-57,
    0x1.cd2b297d889bcp-54, 0x1.203af9ee75616p-50, 0x1.6849b86a12b9bp-47,
    0x1.c25c268497682p-44, 0x1.19799812dea11p-40, 0x1.5fd7fe1796495p-37,
    0x1.b7cdfd9d7bdbbp-34, 0x1.12e0be826d695p-30, 0x1.5798ee2308c3ap-27,
    0x1.ad7f29abcaf48p-24, 0x1.0c6f7a0b5ed8dp-20, 0x1.4f8b588e368f1p-17,
    0x1.a36e2eb1c432dp-14, 0x1.0624dd2f1a9fcp-10, 0x1.47ae147ae147bp-7,
    0x1.999999999999ap-4, 0x1.0000000000000p+0, 0x1.4000000000000p+3,
    0x1.9000000000000p+6, 0x1.f400000000000p+9, 0x1.3880000000000p+13,
    0x1.86a0000000000p+16, 0x1.e848000000000p+19, 0x1.312d000000000p+23,
    0x1.7d78400000000p+26, 0x1.dcd6500000000p+29, 0x1.2a05f20000000p+33,
    0x1.74876e8000000p+36, 0x1.d1a94a2000000p+39, 0x1.2309ce5400000p+43,
    0x1.6bcc41e900000p+46, 0x1.c6bf526340000p+49, 0x1.1c37937e08000p+53,
    0x1.6345785d8a000p+56, 0x1.bc16d674ec800p+59, 0x1.158e460913d00p+63,
    0x1.5af1d78b58c40p+66, 0x1.b1ae4d6e2ef50p+69, 0x1.0f0cf064dd592p+73,
    0x1.52d02c7e14af7p+76, 0x1.a784379d99db4p+79, 0x1.08b2a2c280291p+83,
    0x1.4adf4b7320335p+86, 0x1.9d971e4fe8402p+89, 0x1.027e72f1f1281p+93,
    0x1.431e0fae6d721p+96, 0x1.93e5939a08ceap+99, 0x1.f8def8808b024p+102,
    0x1.3b8b5b5056e17p+106, 0x1.8a6e32246c99cp+109, 0x1.ed09bead87c03p+112,
    0x1.3426172c74d82p+116, 0x1.812f9cf7920e3p+119, 0x1.e17b84357691bp+122,
    0x1.2ced32a16a1b1p+126, 0x1.78287f49c4a1dp+129, 0x1.d6329f1c35ca5p+132,
};

/* csvkernels._two_prod_py: a * b as the rounded product *p and its exact error *err
 * (Dekker; no FMA) */
static inline void two_prod(double a, double b, double *p, double *err)
{
    double c, ah, al, bh, bl;
    *p = a * b;
    c = 134217729.0 * a;
    ah = c - (c - a);
    al = a - ah;
    c = 134217729.0 * b;
    bh = c - (c - b);
    bl = b - bh;
    *err = ((ah * bh - *p) + ah * bl + al * bh) + al * bl;
}

/* csvkernels._put_uint_py: the decimal digits of v at buf + at; returns the new end */
static inline int64_t put_uint(uint8_t *buf, int64_t at, uint64_t v)
{
    int64_t n = 1;
    for (uint64_t t = v / 10; t > 0; t /= 10)
        n++;
    for (int64_t k = n - 1; k >= 0; k--) {
        buf[at + k] = (uint8_t)('0' + v % 10);
        v /= 10;
    }
    return at + n;
}

/* csvkernels._put_cell_py: the finite x as fmt writes it at buf + at; returns the new end, or
 * -1 for a cell it leaves to Python (a %.6g rounding too close to call in binary, magnitudes
 * of 1e15 or more or below 1e-30). May store up to 16 bytes past at (CELL_MAX).
 *
 * floor() of the reference is a conversion to int64 here: every value floored is positive
 * and below 2**53, where truncation is floor, exactly (and a libm call less per cell). */
static inline int64_t put_cell(uint8_t *buf, int64_t at, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int neg = (bits >> 63) != 0; /* x < 0, or -0.0 */
    double a = neg ? -x : x;
    if (a >= 1e15 || (a < 1e-30 && a != 0.0))
        return -1;
    if (neg)
        buf[at++] = '-';
    if (a == 0.0) {
        buf[at] = '0';
        return at + 1;
    }
    if (a < 999999.5) { /* a whole number below 1e6: its digits, as %.6g writes them (the
                         * general path below gives the same; this one is the counts' of a
                         * histogram file, a hundred million cells a step at scale) */
        int64_t w = (int64_t)a;
        if ((double)w == a)
            return put_uint(buf, at, (uint64_t)w);
    }
    if (a >= 999999.5) { /* whole number, ties to even (exact: a < 2**53) */
        int64_t w = (int64_t)a;
        double frac = a - (double)w;
        if (frac > 0.5 || (frac == 0.5 && (w & 1) == 1))
            w += 1;
        return put_uint(buf, at, (uint64_t)w);
    }
    /* decimal exponent: floor(e2 * log10(2)) from the binary exponent, then one comparison
     * (e2 >= -100 here: the shift of a negative product is floor, as numpy's) */
    int64_t e2 = (int64_t)((bits >> 52) & 0x7FF) - 1023;
    int64_t e = e2 * 78913;
    e = e >= 0 ? e >> 18 : -((-e + (1 << 18) - 1) >> 18);
    if (a >= p10[e + 1 + P10_BIAS])
        e += 1;
    int ok = 0;
    int64_t r = 0; /* the six significant digits */
    for (int tries = 0; tries < 4; tries++) {
        int64_t k = 5 - e;
        double mant;
        if (k >= 0)
            mant = k <= 22 ? a * pow_pos[k] : a * 1e22 * pow_pos[k - 22];
        else if (-k <= 22)
            mant = a / pow_pos[-k];
        else
            mant = a / 1e22 / pow_pos[-k - 22];
        /* from 999,999.5 to 1e6 the six digits round to 1000000 (the next exponent) or not:
         * the rounding below decides, exactly where it must (mant rounded up to 999999.5
         * from below, as 99.99995 * 1e4 is, is 999999 and "99.9999") */
        if (mant >= 1000000.0) {
            e += 1;
            continue;
        }
        if (mant < 99999.5) {
            e -= 1;
            continue;
        }
        int64_t ifl = (int64_t)mant;
        double fl = (double)ifl;
        double frac = mant - fl;
        int up = frac > 0.5;
        if (fabs(frac - 0.5) < 1e-6) {
            /* too close to call from the rounded product: compare the exact value with the
             * midpoint (fl + 0.5) * 10**(e - 5) by error-free products */
            double half = fl + 0.5, hi, lo, side;
            if (0 <= k && k <= 22) {
                two_prod(a, pow_pos[k], &hi, &lo);
                side = (hi - half) + lo;
            } else if (-22 <= k && k < 0) {
                two_prod(half, pow_pos[-k], &hi, &lo);
                side = (a - hi) - lo;
            } else {
                break;
            }
            up = side > 0 || (side == 0 && (ifl & 1) != 0); /* ties to even */
        }
        r = ifl + (up ? 1 : 0);
        if (r >= 1000000) {
            r = 100000;
            e += 1;
        }
        ok = 1;
        break;
    }
    if (!ok)
        return -1;
    /* the digits, each from r directly (r / 10**j as (r * ceil(2**40 / 10**j)) >> 40, exact
     * for r < 2**20): no chain of divisions, each waiting for the one before */
    int64_t q1 = (r * 109951162778LL) >> 40;
    int64_t q2 = (r * 10995116278LL) >> 40;
    int64_t q3 = (r * 1099511628LL) >> 40;
    int64_t q4 = (r * 109951163LL) >> 40;
    int64_t q5 = (r * 10995117LL) >> 40;
    int64_t d1 = q4 - q5 * 10, d2 = q3 - q4 * 10, d3 = q2 - q3 * 10;
    int64_t d4 = q1 - q2 * 10, d5 = r - q1 * 10;
    uint8_t digits[8] = {(uint8_t)('0' + q5), (uint8_t)('0' + d1), (uint8_t)('0' + d2),
                         (uint8_t)('0' + d3), (uint8_t)('0' + d4), (uint8_t)('0' + d5), 0, 0};
    int last = 0; /* the last significant digit (no trailing zeros are written) */
    if (d1 != 0)
        last = 1;
    if (d2 != 0)
        last = 2;
    if (d3 != 0)
        last = 3;
    if (d4 != 0)
        last = 4;
    if (d5 != 0)
        last = 5;
    if (0 <= e && e < 6) { /* digits[0..e] '.' digits[e+1..last]: seven stores, the length */
        for (int j = 0; j < 7; j++)
            buf[at + j] = j <= e ? digits[j] : (j == e + 1 ? '.' : digits[j - 1]);
        return at + (last > e ? last + 2 : e + 1);
    }
    if (-4 <= e && e < 0) { /* "0.", -e-1 zeros, digits[0..last] */
        memcpy(buf + at, "0.000", 5);
        at += 1 - e;
        memcpy(buf + at, digits, 6);
        return at + last + 1;
    }
    buf[at++] = digits[0];
    if (last > 0) {
        buf[at++] = '.';
        for (int d = 1; d <= last; d++)
            buf[at++] = digits[d];
    }
    buf[at] = 'e';
    buf[at + 1] = e < 0 ? '-' : '+';
    at += 2;
    int64_t ex = e < 0 ? -e : e;
    if (ex < 10)
        buf[at++] = '0';
    return put_uint(buf, at, (uint64_t)ex);
}

/* csvkernels._format_lines_py: row i of the n x m values (C order) as one line in buf,
 * ending at ends[i]: head, the row's text (texts[text_ends[i-1]..text_ends[i]]), the cells
 * joined by commas (one before the first cell too when comma_first), tail. NaN and infinities
 * are empty cells; where word_last[i], the last cell is word. A cell put_cell leaves to Python
 * is empty and sets fallback[i]. repeats: n_repeats rows of (start, source start, length),
 * checked by the caller: blocks of columns whose text is copied from their source block's
 * where the row's values are the same, bit for bit. text_ends NULL: no row has a text;
 * word_last NULL: none has the word (repeats may be NULL when n_repeats is 0).
 *
 * buf must hold what the caller sizes for (csvkernels.format_lines). Returns 0; -1 when
 * text_ends does not rise from 0 to at most texts_n (nothing is read past texts), -2 when
 * out of memory. */
int64_t ivc_format_lines(const double *values, int64_t n, int64_t m, const uint8_t *head,
                         int64_t head_n, const uint8_t *texts, int64_t texts_n,
                         const int64_t *text_ends, const uint8_t *word_last,
                         const uint8_t *word, int64_t word_n, int64_t comma_first,
                         const uint8_t *tail, int64_t tail_n, const int64_t *repeats,
                         int64_t n_repeats, uint8_t *buf, int64_t *ends, uint8_t *fallback)
{
    int64_t *scratch = malloc(sizeof(int64_t) * 3 * (size_t)(m > 0 ? m : 1));
    if (scratch == NULL)
        return -2;
    int64_t *rep_of = scratch, *cell_at = scratch + m, *cell_end = scratch + 2 * m;
    for (int64_t c = 0; c < m; c++) {
        rep_of[c] = -1;
        cell_at[c] = cell_end[c] = 0;
    }
    for (int64_t r = 0; r < n_repeats; r++)
        rep_of[repeats[3 * r]] = r;
    int64_t at = 0, t0 = 0;
    for (int64_t i = 0; i < n; i++) {
        const double *row = values + i * m;
        memcpy(buf + at, head, (size_t)head_n);
        at += head_n;
        int64_t t1 = text_ends ? text_ends[i] : 0;
        if (t1 < t0 || t1 > texts_n) {
            free(scratch);
            return -1;
        }
        memcpy(buf + at, texts + t0, (size_t)(t1 - t0));
        at += t1 - t0;
        t0 = t1;
        int64_t col = 0;
        while (col < m) {
            if (col || comma_first)
                buf[at++] = ',';
            int64_t r = rep_of[col];
            if (r >= 0) {
                int64_t src = repeats[3 * r + 1], length = repeats[3 * r + 2];
                int same = memcmp(row + src, row + col, sizeof(double) * (size_t)length) == 0;
                if (same) {
                    int64_t a0 = cell_at[src], a1 = cell_end[src + length - 1];
                    memcpy(buf + at, buf + a0, (size_t)(a1 - a0)); /* earlier: no overlap */
                    for (int64_t j = 0; j < length; j++) {
                        cell_at[col + j] = cell_at[src + j] + at - a0;
                        cell_end[col + j] = cell_end[src + j] + at - a0;
                    }
                    at += a1 - a0;
                    col += length;
                    continue;
                }
            }
            cell_at[col] = at;
            if (col == m - 1 && word_last && word_last[i]) {
                memcpy(buf + at, word, (size_t)word_n);
                at += word_n;
            } else {
                double x = row[col];
                if (isfinite(x)) {
                    int64_t end = put_cell(buf, at, x);
                    if (end < 0)
                        fallback[i] = 1;
                    else
                        at = end;
                }
            }
            cell_end[col] = at;
            col++;
        }
        memcpy(buf + at, tail, (size_t)tail_n);
        at += tail_n;
        ends[i] = at;
    }
    free(scratch);
    return 0;
}

/* csvkernels._gather_texts_py: texts which[0], which[1], ... of data (text i is
 * data[ends[i-1]..ends[i]]) one after another into out, each ending at out_ends[j]. The
 * caller checks which (each below n_ends) and sizes out. Returns 0; -1, with nothing
 * written, when the n_ends ends do not rise from 0 to at most data_n. */
int64_t ivc_gather_texts(const uint8_t *data, int64_t data_n, const int64_t *ends,
                         int64_t n_ends, const int64_t *which, int64_t n_which, uint8_t *out,
                         int64_t *out_ends)
{
    for (int64_t i = 0, before = 0; i < n_ends; before = ends[i++])
        if (ends[i] < before || ends[i] > data_n)
            return -1;
    int64_t at = 0;
    for (int64_t j = 0; j < n_which; j++) {
        int64_t i = which[j];
        int64_t a = i ? ends[i - 1] : 0;
        if (ends[i] > a) {
            memcpy(out + at, data + a, (size_t)(ends[i] - a));
            at += ends[i] - a;
        }
        out_ends[j] = at;
    }
    return 0;
}

/* ------------------------------------------------------------------------- appending lines */

/* csvkernels.BY_PATH, SKIP, FAILED_WRITE, FAILED_CLOSE */
#define BY_PATH (-1)
#define SKIP (-2)
#define FAILED_WRITE 0
#define FAILED_CLOSE 1

/* csvkernels._write_lines_py: append line i (data[ends[i-1]..ends[i]]) to its file, for i
 * from first to n - 1; line first from offset at of data. The file is open as fds[i], or,
 * where fds[i] is BY_PATH, opened for appending by its path (paths + path_at[i],
 * NUL-terminated; never created; a relative path from the directory open as dirfd, which
 * may be AT_FDCWD), written and closed. A line whose fd is SKIP is left alone.
 * A short write goes on with the rest. Returns -1 when all are written, else the line that
 * failed, with the offset it stopped at in out[0] and in out[1] FAILED_WRITE (open or write
 * failed: the caller repeats them to raise their error; errno is not read here) or
 * FAILED_CLOSE. With nothing written: -3 when some fd is BY_PATH but paths is NULL; -2 when
 * first or at is negative, or an end from line first - 1 on or at is outside data's data_n
 * bytes. */
int64_t ivc_write_lines(const int32_t *fds, int64_t n, const uint8_t *data, int64_t data_n,
                        const int64_t *ends, int64_t first, int64_t at, const char *paths,
                        const int64_t *path_at, int64_t dirfd, int64_t *out)
{
    /* the checks without a branch per line (a negative end is a large unsigned one) */
    if (paths == NULL) {
        int by_path = 0;
        for (int64_t i = 0; i < n; i++)
            by_path |= fds[i] == BY_PATH;
        if (by_path)
            return -3;
    }
    if (first < 0 || at < 0 || at > data_n)
        return -2;
    int outside = 0;
    for (int64_t i = first > 0 ? first - 1 : 0; i < n; i++)
        outside |= (uint64_t)ends[i] > (uint64_t)data_n;
    if (outside)
        return -2;
    for (int64_t i = first; i < n; i++) {
        int64_t end = ends[i];
        if (i > first)
            at = ends[i - 1];
        int fd = fds[i];
        if (fd == SKIP)
            continue;
        int by_path = fd == BY_PATH;
        if (by_path) {
            fd = openat((int)dirfd, paths + path_at[i], O_WRONLY | O_APPEND | O_CLOEXEC);
            if (fd < 0) {
                out[0] = at;
                out[1] = FAILED_WRITE;
                return i;
            }
        }
        while (at < end) {
            ssize_t k = write(fd, data + at, (size_t)(end - at));
            if (k <= 0) {
                if (by_path)
                    close(fd);
                out[0] = at;
                out[1] = FAILED_WRITE;
                return i;
            }
            at += k;
        }
        if (by_path && close(fd) != 0) {
            out[0] = at;
            out[1] = FAILED_CLOSE;
            return i;
        }
    }
    out[0] = 0;
    out[1] = FAILED_WRITE;
    return -1;
}

/* ------------------------------------------------------------------------- new files */

/* write all n bytes of p to fd (a short write is continued); 0, or -1 with errno set */
static int put_all(int fd, const uint8_t *p, int64_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, p, (size_t)n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= w;
    }
    return 0;
}

/* csvkernels._create_files_py: file i (paths from path_at[i], NUL-ended) made new (never one
 * that exists) holding head, then data[starts[i]..ends[i]), for each i whose starts[i] is not
 * negative, in order; returns -1 once all are written, else the i that failed, its errno in
 * *err (a file made in part is removed: a part of a histogram is no histogram) */
int64_t ivc_create_files(const char *paths, const int64_t *path_at, int64_t n,
                         const uint8_t *head, int64_t head_len, const uint8_t *data,
                         const int64_t *starts, const int64_t *ends, int64_t *err)
{
    for (int64_t i = 0; i < n; i++) {
        if (starts[i] < 0)
            continue;
        const char *path = paths + path_at[i];
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            *err = errno;
            return i;
        }
        int bad = put_all(fd, head, head_len) != 0
                  || put_all(fd, data + starts[i], ends[i] - starts[i]) != 0;
        int e = bad ? errno : 0;
        if (close(fd) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        if (bad) {
            unlink(path);
            *err = e;
            return i;
        }
    }
    return -1;
}

/* csvkernels._create_headed_py: file i (names + name_at[i], NUL-ended, in the directory
 * dir_fd) made new (never one that exists) for appending, holding head; its descriptor kept
 * in fds[i] for i < keep, closed otherwise (fds[i] = -1). Returns -1 once all are made, else
 * the i that failed, its errno in *err: that file is removed if it was made (no file without
 * its whole header), fds[i] = -1, and the files before it stand, as fds says */
int64_t ivc_create_headed(int64_t dir_fd, const char *names, const int64_t *name_at, int64_t n,
                          const uint8_t *head, int64_t head_len, int64_t keep, int32_t *fds,
                          int64_t *err)
{
    for (int64_t i = 0; i < n; i++) {
        const char *name = names + name_at[i];
        fds[i] = -1;
        const int fd = openat((int)dir_fd, name,
                              O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
        if (fd < 0) {
            *err = errno;
            return i;
        }
        if (put_all(fd, head, head_len) != 0) {
            *err = errno;
            close(fd);
            unlinkat((int)dir_fd, name, 0);
            return i;
        }
        if (i < keep) {
            fds[i] = fd;
        } else if (close(fd) != 0) {
            *err = errno;
            unlinkat((int)dir_fd, name, 0);
            return i;
        }
    }
    return -1;
}
