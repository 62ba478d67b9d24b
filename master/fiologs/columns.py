"""Column layouts of fio histogram logs: which latency range (in ns) each logged column covers.

Owns the mapping from a log's column count to its fio version and ``log_hist_coarseness``, and the
nanosecond value range of every column. It must stay pure (numpy only): no file access.

* fio 3.x logs 1856 buckets (29 groups of 64) in **nanoseconds**; column ``i`` at coarseness 0 is
  exactly bucket ``i`` of ``protocol.buckets`` (the ivypy ladder is fio's, extended).
* fio 2.x logs 1216 buckets (19 groups of 64) in **microseconds** with the same log-linear rule
  applied to integer microsecond values. Bucket ``i`` holds the microsecond values
  ``[LOWER_NS[i], UPPER_NS[i] - 1]`` (the ladder's formula read in µs), i.e. the true latencies
  ``[1000 * LOWER_NS[i], 1000 * UPPER_NS[i] - 1]`` ns. Percentiles are read on these exact ns
  ranges; nothing is re-binned, so no error is added by the unit change.
* ``log_hist_coarseness = c`` makes fio add ``2**c`` adjacent buckets per column
  (``N >> c`` columns): column ``j`` covers fine buckets ``[j * 2**c, (j + 1) * 2**c - 1]``.
* fio's last bucket is open-ended (everything above ~17 s lands there). The column holding it is
  marked ``open_last``; its value range is collapsed to its lower edge, so a percentile or max that
  falls there is reported as "at least" that edge (the caller warns about it).

Every column has an inclusive value range ``[lower_ns, upper_ns]`` (integers the column can hold),
the same convention as ``protocol.histogram`` uses for its buckets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.buckets import FIO_BUCKETS, LOWER_NS, PLAT_VAL, UPPER_NS

FIO2_BUCKETS: Final = 19 * PLAT_VAL  # 1216, fio 2.x FIO_IO_U_PLAT_NR
MAX_COARSENESS: Final = 6  # fio refuses log_hist_coarseness > 6
NS_PER_US: Final = 1000


@dataclass(frozen=True)
class ColumnLayout:
    """How the histogram columns of one family of fio logs map onto latencies."""

    fio_version: int
    coarseness: int
    lower_ns: npt.NDArray[np.float64] = field(repr=False, compare=False)
    upper_ns: npt.NDArray[np.float64] = field(repr=False, compare=False)

    @property
    def n_columns(self) -> int:
        return int(self.lower_ns.size)

    @property
    def fine_buckets(self) -> int:
        return FIO_BUCKETS if self.fio_version == 3 else FIO2_BUCKETS

    @property
    def open_lower_ns(self) -> float:
        """Lower edge (ns) of the open-ended last column: fio lumps everything above it there."""
        return float(self.lower_ns[-1])

    def describe(self) -> str:
        unit = "ns" if self.fio_version == 3 else "us"
        return (
            f"fio {self.fio_version}.x log ({self.fine_buckets} buckets in {unit}), "
            f"log_hist_coarseness={self.coarseness}, {self.n_columns} columns"
        )


def make_layout(fio_version: int, coarseness: int) -> ColumnLayout:
    """The layout of a fio ``fio_version`` log written with ``log_hist_coarseness=coarseness``."""
    if fio_version not in (2, 3):
        raise ValueError(f"fio version must be 2 or 3, got {fio_version}")
    if not 0 <= coarseness <= MAX_COARSENESS:
        raise ValueError(f"coarseness must be within 0..{MAX_COARSENESS}, got {coarseness}")
    fine = FIO_BUCKETS if fio_version == 3 else FIO2_BUCKETS
    scale = 1 if fio_version == 3 else NS_PER_US
    stride = 1 << coarseness
    first = np.arange(0, fine, stride)
    last = first + stride - 1
    lower = LOWER_NS[first].astype(np.float64) * scale
    upper = UPPER_NS[last].astype(np.float64) * scale - 1.0
    upper[-1] = lower[-1]  # fio's last bucket is open-ended: report its lower edge
    lower.setflags(write=False)
    upper.setflags(write=False)
    return ColumnLayout(fio_version, coarseness, lower, upper)


def layout_for_columns(n_columns: int, fio_version: int | None = None) -> ColumnLayout | None:
    """The layout whose column count is ``n_columns`` (None when no fio log has that many).

    The fio 3 family (1856 >> c) and the fio 2 family (1216 >> c) never share a count, so the
    version is implied; when ``fio_version`` is given, only that family is considered.
    """
    versions = (3, 2) if fio_version is None else (fio_version,)
    for version in versions:
        fine = FIO_BUCKETS if version == 3 else FIO2_BUCKETS
        for c in range(MAX_COARSENESS + 1):
            if fine >> c == n_columns:
                return make_layout(version, c)
    return None
