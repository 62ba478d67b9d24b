"""The one latency bucket ladder every ivypy histogram uses.

Owns the mapping from a latency in nanoseconds to a bucket index, the bucket edges and the
ladder's id. It must stay pure (numpy only) and vectorised: no Python loop per value.

The ladder is fio's log-linear ladder (``stat.h``: ``FIO_IO_U_PLAT_BITS = 6``) extended with
more groups:

* values 0..127 ns get one bucket each (index = value);
* above that, every power-of-two group ``[2**m, 2**(m+1))`` (m >= 7) is split into 64 equal
  buckets of width ``2**(m-6)``; the group's first index is ``(m - 5) * 64``.

fio stops after 29 groups of 64 (1856 buckets, index 1855 also holding everything above
``2**34`` ns ~ 17.2 s). ivypy continues the same rule up to ``m = 41``, so the regular buckets
cover ``[0, 2**42)`` ns ~ 73.3 minutes, and adds one overflow bucket (index ``OVERFLOW_INDEX``)
for anything larger; its upper edge is the histogram's exact maximum, kept separately.
Index ``i < 1856`` therefore means exactly fio's bucket ``i`` (fio's bucket 1855 is open-ended,
ours is not).

The fast path: for ``v >= 64`` the index equals the top 17 bits of the IEEE-754 double of ``v``
(11 exponent bits and the 6 highest mantissa bits) minus a constant, because converting an
integer below ``2**53`` to a double is exact and truncating its mantissa is what fio's
``val >> error_bits`` does.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

PLAT_BITS: Final = 6
PLAT_VAL: Final = 1 << PLAT_BITS  # 64 buckets per group
FIO_GROUP_NR: Final = 29
FIO_BUCKETS: Final = FIO_GROUP_NR * PLAT_VAL  # 1856: fio 3.x's FIO_IO_U_PLAT_NR
TOP_MSB: Final = 41  # last regular group is [2**41, 2**42)
REGULAR_BUCKETS: Final = (TOP_MSB - 4) * PLAT_VAL  # 2368 buckets below 2**42 ns
OVERFLOW_INDEX: Final = REGULAR_BUCKETS  # 2368
N_BUCKETS: Final = REGULAR_BUCKETS + 1  # 2369
OVERFLOW_LOWER_NS: Final = 1 << (TOP_MSB + 1)  # 2**42 ns ~ 73.3 min

#: Identifies this ladder on the wire and in files; a histogram with another id is refused.
LADDER_ID: Final = 1
LADDER_NAME: Final = "fio-log-linear-b6-m41-ns"

# exponent bias 1023, and (m - 5) * 64 + top6 == (bits >> 46) - (1023 + 5) * 64
_DOUBLE_SHIFT: Final = 52 - PLAT_BITS
_DOUBLE_OFFSET: Final = (1023 + 5) * PLAT_VAL


def bucket_index(values_ns: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """Bucket index of every value (nanoseconds, non-negative integers), vectorised.

    Values at or above ``OVERFLOW_LOWER_NS`` map to ``OVERFLOW_INDEX``. Negative values are the
    caller's to refuse (``LatencyHistogram.record`` does); here they map to garbage-free but
    meaningless indices below 64.
    """
    v = np.asarray(values_ns, dtype=np.int64)
    high = v.astype(np.float64).view(np.int64)
    high >>= _DOUBLE_SHIFT
    high -= _DOUBLE_OFFSET
    np.minimum(high, OVERFLOW_INDEX, out=high)
    idx = np.where(v < PLAT_VAL, v, high)
    return idx.astype(np.intp, copy=False)


def bucket_index_known(
    values_ns: npt.NDArray[np.int64], low_ns: int, high_ns: int
) -> npt.NDArray[np.intp]:
    """``bucket_index`` of int64 values whose least and greatest the caller has at hand (a
    recorder takes them for the histogram's min and max anyway). Values all in
    [``PLAT_VAL``, ``OVERFLOW_LOWER_NS``), every real I/O's latency, need neither the small
    values' nor the overflow's case: three array operations instead of six (an engine loop
    bins 8,192 at a time, and each operation it adds lengthens that stall)."""
    if low_ns < PLAT_VAL or high_ns >= OVERFLOW_LOWER_NS:
        return bucket_index(values_ns)
    idx = values_ns.astype(np.float64).view(np.int64)
    idx >>= _DOUBLE_SHIFT
    idx -= _DOUBLE_OFFSET
    return idx


def bucket_index_scalar(value_ns: int) -> int:
    """Bucket index of one value, by fio's integer arithmetic (``plat_val_to_idx``)."""
    if value_ns < 0:
        raise ValueError(f"latency must be >= 0 ns, got {value_ns}")
    if value_ns >= OVERFLOW_LOWER_NS:
        return OVERFLOW_INDEX
    msb = value_ns.bit_length() - 1 if value_ns else 0
    if msb <= PLAT_BITS:
        return value_ns
    error_bits = msb - PLAT_BITS
    base = (error_bits + 1) << PLAT_BITS
    return base + ((PLAT_VAL - 1) & (value_ns >> error_bits))


def _edges() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    idx = np.arange(REGULAR_BUCKETS, dtype=np.int64)
    group = idx >> PLAT_BITS
    k = idx & (PLAT_VAL - 1)
    error_bits = np.maximum(group - 1, 0)
    width = np.left_shift(np.int64(1), error_bits)
    base = np.where(group >= 2, np.left_shift(np.int64(1), error_bits + PLAT_BITS), 0)
    lower = np.where(idx < 2 * PLAT_VAL, idx, base + k * width)
    upper = lower + np.where(idx < 2 * PLAT_VAL, 1, width)
    lower = np.append(lower, OVERFLOW_LOWER_NS)
    upper = np.append(upper, np.iinfo(np.int64).max)
    lower.setflags(write=False)
    upper.setflags(write=False)
    return lower, upper


#: Inclusive lower edge of every bucket in ns. ``LOWER_NS[OVERFLOW_INDEX] == 2**42``.
#: Exclusive upper edge of every bucket in ns; the overflow bucket's is int64 max (the real
#: bound is the histogram's max).
LOWER_NS, UPPER_NS = _edges()


def fio_bucket_value_ns(index: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """fio's representative value of a bucket (``plat_idx_to_val``: the bucket's midpoint,
    and the index itself below 128)."""
    i = np.asarray(index, dtype=np.int64)
    lower = LOWER_NS[i].astype(np.float64)
    width = (UPPER_NS[np.minimum(i, OVERFLOW_INDEX - 1)] - LOWER_NS[
        np.minimum(i, OVERFLOW_INDEX - 1)]).astype(np.float64)
    return np.where(i < 2 * PLAT_VAL, lower, lower + 0.5 * width)
