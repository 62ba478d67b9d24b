"""Percentiles of many histograms at once, and the CSV rows ``ivypy fio-pctiles`` prints.

Owns the vectorised percentile over a (histograms x columns) count matrix and the formatting
of values in a unit. It must stay pure: no files, no logging.

The rule is ``protocol.histogram.percentiles_from_counts`` applied row by row: the rank of
percentile p is ``p / 100 * count`` (an exact decimal); the column holding it is the first whose
cumulative count reaches the rank; the value is interpolated linearly over that column's values
``[lower, upper]`` narrowed to ``[min, max]``. fio logs carry no exact min/max, so min is the
lower edge of the first non-empty column and max the upper edge (the largest value it holds) of
the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.histogram import PCT_SCALE, percentile_numerators

FloatArray = npt.NDArray[np.float64]

UNIT_NS: Final = {"ns": 1.0, "us": 1e3, "ms": 1e6}
_DECIMALS: Final = {"ns": 1, "us": 3, "ms": 6}
_BLOCK_ROWS: Final = 1024


@dataclass(frozen=True)
class Stats:
    """Per histogram (row): samples, min, percentiles (rows x ps) and max, in ns.
    Rows without samples hold NaN."""

    samples: FloatArray
    min_ns: FloatArray
    pct_ns: FloatArray
    max_ns: FloatArray


def percentile_matrix(
    counts: FloatArray,
    ps: Sequence[float] | FloatArray,
    lower_ns: FloatArray,
    upper_ns: FloatArray,
) -> Stats:
    """Statistics of every row of ``counts`` (rows x columns, non-negative), whose column ``j``
    holds the values ``[lower_ns[j], upper_ns[j]]``."""
    p = np.asarray(ps, dtype=np.float64)
    if p.size and (np.isnan(p).any() or p.min() < 0 or p.max() > 100):
        raise ValueError(f"percentiles must be within [0, 100], got {list(ps)!r}")
    n_rows = counts.shape[0]
    samples = np.zeros(n_rows)
    mins = np.full(n_rows, np.nan)
    maxs = np.full(n_rows, np.nan)
    pct = np.full((n_rows, p.size), np.nan)
    for r0 in range(0, n_rows, _BLOCK_ROWS):
        r1 = min(r0 + _BLOCK_ROWS, n_rows)
        _block_stats(counts[r0:r1], p, lower_ns, upper_ns, samples[r0:r1], mins[r0:r1],
                     maxs[r0:r1], pct[r0:r1])
    return Stats(samples, mins, pct, maxs)


def _block_stats(
    counts: FloatArray,
    p: FloatArray,
    lower_ns: FloatArray,
    upper_ns: FloatArray,
    samples: FloatArray,
    mins: FloatArray,
    maxs: FloatArray,
    pct: FloatArray,
) -> None:
    cum = np.cumsum(counts, axis=1)
    total = cum[:, -1] if counts.shape[1] else np.zeros(counts.shape[0])
    samples[:] = total
    rows = np.flatnonzero(total > 0)
    if rows.size == 0:
        return
    if rows.size == counts.shape[0]:  # every row has samples (the usual case): no copies
        c, cm, tot = counts, cum, total
    else:
        c, cm, tot = counts[rows], cum[rows], total[rows]
    nonzero = c > 0
    first = np.argmax(nonzero, axis=1)
    last = c.shape[1] - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    lo_v = lower_ns[first]
    hi_v = upper_ns[last]
    mins[rows] = lo_v
    maxs[rows] = hi_v
    idx = np.arange(rows.size)
    scale = 100 * PCT_SCALE
    for k, num in enumerate(percentile_numerators(p).tolist()):
        rank = tot * num / scale  # exact for whole counts below 9e7 (p99.9 of 12,000 is 11988)
        b = np.minimum(np.count_nonzero(cm < rank[:, None], axis=1), c.shape[1] - 1)
        in_b = c[idx, b]
        before = cm[idx, b] - in_b
        frac = np.where(in_b > 0, (rank - before) / np.where(in_b > 0, in_b, 1.0), 0.0)
        frac = np.clip(frac, 0.0, 1.0)
        lo = np.maximum(lower_ns[b], lo_v)
        hi = np.minimum(upper_ns[b], hi_v)
        pct[rows, k] = np.clip(lo + frac * (hi - lo), lo_v, hi_v)


def percentile_label(p: float) -> str:
    """``50`` -> ``p50``, ``99.9`` -> ``p99.9``."""
    text = f"{p:.6f}".rstrip("0").rstrip(".")
    return f"p{text}"


def format_number(value: float, decimals: int) -> str:
    """Fixed-point with trailing zeros removed; NaN is the empty cell."""
    if value != value:  # NaN (a numpy call per cell cost a third of the CSV's time)
        return ""
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_value(value_ns: float, unit: str) -> str:
    return format_number(value_ns / UNIT_NS[unit], _DECIMALS[unit])


def format_samples(samples: float) -> str:
    """Samples may be fractional after proportional spreading: three decimals at most."""
    return format_number(samples, 3)
