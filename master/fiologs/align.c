/* Adding fio histogram log cells into per-quantum sums: the compiled inner loop of
 * master/fiologs/align.py's ``QuantumAccumulator._add_one_or_two`` (its numpy form, with
 * ``np.add.at``, is the reference), for rows that reach one or two quanta (nearly all).
 *
 * The additions are numpy's, in numpy's order, so the sums are the same to the bit: every
 * cell's first part into its row's first quantum, in cell order; then every second part into
 * the quantum after, in cell order. A first part is ``(double)count * w_first[row]``; a second
 * one is what the first left (``(double)count - first``) where every row reaches two quanta
 * (``mode`` 1), else ``(double)count * w_second[row]`` for the rows that do (``two[row]``,
 * ``mode`` 2); with ``mode`` 0 every row reaches one quantum and its cells add their counts.
 * Built with -ffp-contract=off, so no multiply and add fuse. Indices are the caller's to
 * check (``row_base[row] + col`` and that plus ``n_columns`` within the sums). Exported names
 * are prefixed ivf_; it holds no state and runs without the GIL.
 */

#include <stdint.h>

void ivf_add_one_or_two(double *sums, const int64_t *row, const int64_t *col,
                        const int64_t *count, int64_t n_cells, const int64_t *row_base,
                        const double *w_first, const double *w_second, const uint8_t *two,
                        int64_t n_columns, int64_t mode)
{
    if (mode == 0) {
        for (int64_t i = 0; i < n_cells; i++)
            sums[row_base[row[i]] + col[i]] += (double)count[i];
        return;
    }
    for (int64_t i = 0; i < n_cells; i++)
        sums[row_base[row[i]] + col[i]] += (double)count[i] * w_first[row[i]];
    if (mode == 1) {
        for (int64_t i = 0; i < n_cells; i++) {
            double c = (double)count[i];
            sums[row_base[row[i]] + col[i] + n_columns] += c - c * w_first[row[i]];
        }
        return;
    }
    for (int64_t i = 0; i < n_cells; i++) {
        int64_t r = row[i];
        if (two[r])
            sums[row_base[r] + col[i] + n_columns] += (double)count[i] * w_second[r];
    }
}
