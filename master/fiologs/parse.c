/* fio histogram log text, written the way fio writes it, read into rows and sparse cells.
 *
 * The compiled fast path of master/fiologs/parse.py (its ``_parse_canonical`` is the numpy
 * reference): a chunk of whole lines, each ``time, direction, block_size, c0, ..., c{n-1}``
 * with ``"%llu, "`` separators, is read in one pass. Anything else (blank lines, CR/LF, other
 * spacing, a sign, a leading zero before other digits, more than 18 digits, a line of another
 * field count, a missing final newline) is declined as a whole (-1): the Python line-by-line
 * reader reads such a chunk and names its malformed lines. So this file never reports an
 * error and never interprets a value (directions and stamps are checked by the caller).
 *
 * Almost every cell is "0, ": runs of eight of them (24 bytes) are skipped with three 8-byte
 * comparisons. Exported names are prefixed ivf_; everything else is static. It holds no state
 * and is called through ctypes, without the GIL, so two threads may each read a chunk.
 */

#include <stdint.h>
#include <string.h>

#define IVF_HEADER_FIELDS 3
#define IVF_MAX_DIGITS 18 /* at most 999...9 (18 nines) < 2**63: fio never logs more */

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* One number at *pp (a digit run of 1..18 digits, no leading 0 unless it is "0") into *out;
 * 0 when there is none or it is longer. Does not look at what follows a single "0": the
 * separator check after it refuses a digit there. */
static inline int read_number(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return 0;
    unsigned d = (unsigned)*p - '0';
    if (d > 9)
        return 0;
    p++;
    int64_t v = (int64_t)d;
    if (d != 0) {
        const uint8_t *limit = p + (IVF_MAX_DIGITS - 1);
        while (p < end && (d = (unsigned)*p - '0') <= 9) {
            if (p == limit)
                return 0; /* a 19th digit */
            v = v * 10 + (int64_t)d;
            p++;
        }
    }
    *pp = p;
    *out = v;
    return 1;
}

/* ", " at *pp (then moved past it). */
static inline int read_comma(const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    if (end - p < 2 || p[0] != ',' || p[1] != ' ')
        return 0;
    *pp = p + 2;
    return 1;
}

/* Read ``text[0:n]`` (whole lines of ``n_fields`` fields each, as fio writes them). Per row:
 * ``times[r]``, ``dirs[r]`` (at most ``row_cap`` rows); per non-zero cell, in text order:
 * ``ent_row``, ``ent_col`` (0 for the first histogram column), ``ent_count`` (at most
 * ``ent_cap``; their number in ``*n_entries``). Returns the number of rows; -1 when the
 * text is not in that shape, -2 when it needs more room than it was given (nothing it wrote
 * then means anything). */
int64_t ivf_parse_canonical(const uint8_t *text, int64_t n, int64_t n_fields, int64_t *times,
                            int64_t *dirs, int64_t row_cap, int64_t *ent_row, int64_t *ent_col,
                            int64_t *ent_count, int64_t ent_cap, int64_t *n_entries)
{
    /* "0, 0, 0, 0, 0, 0, 0, 0, " as three little- or big-endian words, whichever this is */
    static const char zeros[] = "0, 0, 0, 0, 0, 0, 0, 0, ";
    const uint64_t z0 = load8((const uint8_t *)zeros);
    const uint64_t z1 = load8((const uint8_t *)zeros + 8);
    const uint64_t z2 = load8((const uint8_t *)zeros + 16);
    const uint8_t *p = text;
    const uint8_t *end = text + n;
    int64_t rows = 0;
    int64_t ents = 0;
    int64_t last_cell = n_fields - 1; /* the field followed by the newline */

    *n_entries = 0;
    if (n <= 0 || n_fields <= IVF_HEADER_FIELDS || text[n - 1] != '\n')
        return -1;
    while (p < end) {
        int64_t t, dir, bs, v;
        if (rows >= row_cap)
            return -2;
        if (!read_number(&p, end, &t) || !read_comma(&p, end) ||
            !read_number(&p, end, &dir) || !read_comma(&p, end) ||
            !read_number(&p, end, &bs) || !read_comma(&p, end))
            return -1;
        times[rows] = t;
        dirs[rows] = dir;
        for (int64_t f = IVF_HEADER_FIELDS; f < last_cell; f++) {
            /* p < end here: the text ends with a newline, and ", " came before */
            if (*p == '0') { /* a zero cell: no entry */
                /* eight zero cells, each followed by ", " (so field f + 8 exists) */
                if (f + 8 <= last_cell && end - p >= 24 && load8(p) == z0 &&
                    load8(p + 8) == z1 && load8(p + 16) == z2) {
                    p += 24;
                    f += 7;
                    continue;
                }
                if (end - p < 3 || p[1] != ',' || p[2] != ' ')
                    return -1;
                p += 3;
                continue;
            }
            if (!read_number(&p, end, &v) || !read_comma(&p, end))
                return -1; /* else v > 0: the number starts with 1-9 */
            if (ents >= ent_cap)
                return -2;
            ent_row[ents] = rows;
            ent_col[ents] = f - IVF_HEADER_FIELDS;
            ent_count[ents] = v;
            ents++;
        }
        if (!read_number(&p, end, &v) || p >= end || *p != '\n')
            return -1;
        p++;
        if (v != 0) {
            if (ents >= ent_cap)
                return -2;
            ent_row[ents] = rows;
            ent_col[ents] = last_cell - IVF_HEADER_FIELDS;
            ent_count[ents] = v;
            ents++;
        }
        rows++;
    }
    *n_entries = ents;
    return rows;
}
