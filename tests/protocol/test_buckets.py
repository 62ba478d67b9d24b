"""The bucket ladder against fio's own index definition and its extension beyond one hour."""

from __future__ import annotations

import numpy as np
import pytest

from protocol import buckets
from protocol.buckets import (
    FIO_BUCKETS,
    LOWER_NS,
    N_BUCKETS,
    OVERFLOW_INDEX,
    OVERFLOW_LOWER_NS,
    UPPER_NS,
    bucket_index,
)

# fio stat.h: FIO_IO_U_PLAT_BITS 6, FIO_IO_U_PLAT_VAL 64, FIO_IO_U_PLAT_GROUP_NR 29.
FIO_PLAT_BITS = 6
FIO_PLAT_VAL = 1 << FIO_PLAT_BITS
FIO_PLAT_NR = 29 * FIO_PLAT_VAL


def fio_plat_val_to_idx(val: int, plat_nr: int = FIO_PLAT_NR) -> int:
    """fio's stat.c plat_val_to_idx(), transcribed: the MSB picks the group, the next six bits
    the bucket; values whose MSB is <= 6 are their own index; the last bucket takes the rest."""
    msb = 0 if val == 0 else val.bit_length() - 1
    if msb <= FIO_PLAT_BITS:
        return val
    error_bits = msb - FIO_PLAT_BITS
    base = (error_bits + 1) << FIO_PLAT_BITS
    offset = (FIO_PLAT_VAL - 1) & (val >> error_bits)
    return min(base + offset, plat_nr - 1)


def fio_plat_idx_to_val(idx: int) -> float:
    """fio's stat.c plat_idx_to_val(): the bucket's midpoint (its index below 128)."""
    if idx < (FIO_PLAT_VAL << 1):
        return idx
    error_bits = (idx >> FIO_PLAT_BITS) - 1
    base = 1 << (error_bits + FIO_PLAT_BITS)
    k = idx % FIO_PLAT_VAL
    return base + (k + 0.5) * (1 << error_bits)


def _values_across(lo_exp: int, hi_exp: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    exps = rng.uniform(lo_exp, hi_exp, n)
    v = np.floor(2.0**exps).astype(np.int64)
    edges = np.array([0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 2**34 - 1, 2**34], dtype=np.int64)
    return np.concatenate([v, edges])


def test_ladder_shape() -> None:
    assert FIO_BUCKETS == 1856
    assert N_BUCKETS == OVERFLOW_INDEX + 1
    assert OVERFLOW_LOWER_NS >= 3600 * 10**9, "regular buckets must reach at least one hour"
    assert np.all(LOWER_NS[1:] == UPPER_NS[:-1]), "buckets must tile the axis"
    assert LOWER_NS[0] == 0


def test_bucket_index_equals_fio_over_fio_range() -> None:
    values = _values_across(0, 34, 100_000, seed=1)  # fio's range: 0 .. 2**34 ns (~17 s)
    ours = bucket_index(values)
    theirs = np.array([fio_plat_val_to_idx(int(v)) for v in values])
    below_last = theirs < FIO_PLAT_NR - 1
    # Inside fio's range every index is fio's index exactly.
    assert np.array_equal(ours[below_last], theirs[below_last])
    # fio's last bucket (1855) also swallows everything above 2**34; ours keeps going.
    assert np.all(ours[~below_last] >= FIO_PLAT_NR - 1)


def test_fio_midpoint_lies_in_our_bucket() -> None:
    for idx in range(FIO_PLAT_NR - 1):
        mid = fio_plat_idx_to_val(idx)
        assert LOWER_NS[idx] <= mid < UPPER_NS[idx]
        assert buckets.fio_bucket_value_ns(idx) == pytest.approx(mid)


def test_extension_continues_fio_rule_beyond_one_hour() -> None:
    values = _values_across(34, 42, 100_000, seed=2)  # 17 s .. 73 min
    ours = bucket_index(values)
    # The same rule with more groups, i.e. fio's function with a larger array.
    theirs = np.array([fio_plat_val_to_idx(int(v), plat_nr=10**9) for v in values])
    assert np.array_equal(ours, theirs)
    one_hour = 3600 * 10**9
    i = int(bucket_index([one_hour])[0])
    assert i < OVERFLOW_INDEX and LOWER_NS[i] <= one_hour < UPPER_NS[i]
    width = UPPER_NS[i] - LOWER_NS[i]
    assert width / one_hour < 1 / 64, "one hour is still resolved to < 1/64 relative width"


@pytest.mark.parametrize(
    "value, expected",
    [
        (OVERFLOW_LOWER_NS - 1, OVERFLOW_INDEX - 1),
        (OVERFLOW_LOWER_NS, OVERFLOW_INDEX),
        (10 * 3600 * 10**9, OVERFLOW_INDEX),
        (2**62, OVERFLOW_INDEX),
        (np.iinfo(np.int64).max, OVERFLOW_INDEX),
    ],
)
def test_beyond_the_ladder_goes_to_overflow(value: int, expected: int) -> None:
    assert int(bucket_index([value])[0]) == expected
    assert buckets.bucket_index_scalar(value) == expected


def test_vectorised_equals_scalar_and_edges_hold_values() -> None:
    values = _values_across(0, 45, 20_000, seed=3)
    idx = bucket_index(values)
    assert np.array_equal(idx, [buckets.bucket_index_scalar(int(v)) for v in values])
    assert np.all(LOWER_NS[idx] <= values)
    assert np.all(values < UPPER_NS[idx])


@pytest.mark.parametrize("low_bits, high_bits", [(6, 42), (0, 20), (7, 45), (20, 30), (0, 63)])
def test_bucket_index_known_equals_bucket_index(low_bits: int, high_bits: int) -> None:
    """Given the values' least and greatest, the short form (values within [64 ns, 2**42 ns))
    and the fallback (small or overflowing values) both agree with ``bucket_index``."""
    values = np.concatenate([_values_across(low_bits, high_bits, 5000, seed=low_bits),
                             [1 << low_bits, (1 << high_bits) - 1]]).astype(np.int64)
    values = values[(values >= 0)]
    got = buckets.bucket_index_known(values, int(values.min()), int(values.max()))
    assert np.array_equal(got, bucket_index(values))


def test_bucket_index_accepts_python_ints_and_empty() -> None:
    assert bucket_index([]).shape == (0,)
    assert bucket_index(5).tolist() == 5
