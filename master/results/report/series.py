"""Series for the report's charts: laid on a step's subinterval axis, downsampled to a budget,
rounded for the page. Pure functions on numpy arrays.

Owns the downsampling rule: one bucket size for the whole page (each point then stands for the
same number of subintervals everywhere), a rate or percentile bucket as its mean, a maximum as
its largest value (a latency spike stays visible), an empty bucket as a gap. Must not read
files (``master.results.runfolder``) or know the page's layout (``master.results.report.page``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
#: How a bucket of subintervals becomes one point.
Reduce = Literal["mean", "max", "min"]
#: Significant digits a number keeps in the page (a chart needs no more).
DIGITS = 4
#: Significant digits of a time axis: a point's second stays exact also hours into a step
#: (4 digits would put 10,001 s to 10,004 s all at 10,000 s).
AXIS_DIGITS = 10


def bucket_size(total_points: int, budget_points: int) -> int:
    """Subintervals per point so that ``total_points`` fit in ``budget_points`` (1: none
    dropped)."""
    if budget_points <= 0:
        raise ValueError(f"budget_points must be positive, not {budget_points}")
    return max(1, math.ceil(total_points / budget_points))


def on_axis(subintervals: FloatArray, values: FloatArray, n: int) -> FloatArray:
    """``values`` placed at their subinterval index on an axis of ``n`` subintervals; NaN
    where a subinterval has no value (or an index is out of range)."""
    out = np.full(n, np.nan)
    ok = np.isfinite(subintervals) & (subintervals >= 0) & (subintervals < n)
    out[subintervals[ok].astype(np.intp)] = values[ok]
    return out


def downsample(values: FloatArray, bucket: int, how: Reduce) -> FloatArray:
    """Every ``bucket`` consecutive values as one: their mean, largest or smallest, ignoring
    NaN; NaN when a bucket holds none. The last bucket may be shorter."""
    if bucket <= 1 or values.size == 0:
        return values.astype(np.float64, copy=True)
    n_out = -(-values.size // bucket)
    padded = np.full(n_out * bucket, np.nan)
    padded[:values.size] = values
    blocks = padded.reshape(n_out, bucket)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN bucket is a gap
        reduced = (np.nanmax(blocks, axis=1) if how == "max" else
                   np.nanmin(blocks, axis=1) if how == "min" else np.nanmean(blocks, axis=1))
    return np.asarray(reduced, dtype=np.float64)


def axis_seconds(n: int, bucket: int, subinterval_s: float) -> FloatArray:
    """The x of each point: the end of its bucket's last subinterval, in seconds from the
    step's start (subinterval k ends at ``(k + 1) * subinterval_s``)."""
    ends = np.arange(bucket, n + bucket, bucket, dtype=np.float64)
    return np.minimum(ends, n)[: -(-n // bucket) if n else 0] * subinterval_s


def rounded(values: FloatArray | Sequence[float], digits: int = DIGITS
            ) -> list[float | None]:
    """Numbers for the page's JSON: ``digits`` significant digits, None for NaN and
    infinity. A number so near the largest float that rounding would make it infinite (which
    JSON cannot hold) is kept as it is."""
    return [_round(v, digits) if math.isfinite(v) else None
            for v in np.asarray(values, dtype=np.float64).tolist()]


def _round(value: float, digits: int) -> float:
    near = float(f"{value:.{digits}g}")
    return near if math.isfinite(near) else value
