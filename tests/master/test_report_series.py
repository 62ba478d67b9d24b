"""The report's pure parts: downsampling to a budget, the axis, rounding, cell parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from master.results.report import series as sr
from master.results.report.content import _high_median_low
from master.results.runfolder import leading_number, to_float

NAN = math.nan


@pytest.mark.parametrize("total, budget, bucket", [
    (0, 100, 1), (100, 100, 1), (101, 100, 2), (1_020_000, 250_000, 5), (999, 1, 999),
])
def test_bucket_size(total: int, budget: int, bucket: int) -> None:
    assert sr.bucket_size(total, budget) == bucket


def test_bucket_size_refuses_no_budget() -> None:
    with pytest.raises(ValueError, match="budget_points"):
        sr.bucket_size(10, 0)


@pytest.mark.parametrize("values, bucket, how, want", [
    ([1, 2, 3, 4], 1, "mean", [1, 2, 3, 4]),
    ([1, 2, 3, 4], 2, "mean", [1.5, 3.5]),
    ([1, 5, 3, 4], 2, "max", [5, 4]),
    ([1, 2, 3, 4, 10], 2, "mean", [1.5, 3.5, 10]),          # a short last bucket
    ([1, NAN, NAN, NAN, 7], 2, "mean", [1, NAN, 7]),        # NaN ignored; all-NaN: a gap
    ([NAN, 9, 2, NAN], 2, "max", [9, 2]),
    ([4, 1, NAN, 3, NAN, NAN], 2, "min", [1, 3, NAN]),
    ([], 3, "max", []),
])
def test_downsample(values: list[float], bucket: int, how: sr.Reduce, want: list[float]
                    ) -> None:
    got = sr.downsample(np.array(values, dtype=np.float64), bucket, how)
    np.testing.assert_array_equal(got, np.array(want, dtype=np.float64))


def test_downsample_keeps_a_spike_in_the_max_and_not_in_the_mean() -> None:
    values = np.ones(1000)
    values[537] = 500.0
    assert sr.downsample(values, 10, "max").max() == 500.0
    assert sr.downsample(values, 10, "mean").max() == pytest.approx(50.9)


@pytest.mark.parametrize("k, values, n, want", [
    ([0, 1, 2], [5, 6, 7], 3, [5, 6, 7]),
    ([2, 0], [7, 5], 4, [5, NAN, 7, NAN]),                  # a missing subinterval is a gap
    ([0, 9, NAN], [1, 2, 3], 2, [1, NAN]),                  # out of range or unknown: dropped
])
def test_on_axis(k: list[float], values: list[float], n: int, want: list[float]) -> None:
    got = sr.on_axis(np.array(k, dtype=np.float64), np.array(values, dtype=np.float64), n)
    np.testing.assert_array_equal(got, np.array(want))


@pytest.mark.parametrize("n, bucket, s, want", [
    (4, 1, 1.0, [1, 2, 3, 4]),                              # subinterval k ends at (k+1)*s
    (5, 2, 0.5, [1, 2, 2.5]),                               # a bucket's last end; short last
    (0, 3, 1.0, []),
])
def test_axis_seconds(n: int, bucket: int, s: float, want: list[float]) -> None:
    np.testing.assert_array_equal(sr.axis_seconds(n, bucket, s), np.array(want))
    assert sr.axis_seconds(n, bucket, s).size == sr.downsample(np.zeros(n), bucket, "mean").size


@pytest.mark.parametrize("values, want", [
    ([1.23456789, 123456.7, 0.000123456, NAN, 0.0], [1.235, 123500.0, 0.0001235, None, 0.0]),
])
def test_rounded(values: list[float], want: list[float | None]) -> None:
    assert sr.rounded(values) == want


def test_rounded_keeps_a_number_near_the_largest_float_finite() -> None:
    # 1.79769e308 to 4 digits is 1.798e308: beyond the largest float, an infinity that the
    # page's JSON cannot hold (the report failed with a ValueError)
    big = 1.79769e308
    assert sr.rounded([big, -big, math.inf]) == [big, -big, None]


def test_a_time_axis_keeps_its_digits() -> None:
    x = sr.axis_seconds(20_005, 1, 0.5)
    assert sr.rounded(x, sr.AXIS_DIGITS) == x.tolist()  # 10,000.5 s is not 10,000 s
    assert sr.rounded([10_000.5, 12_345.0]) == [10_000.0, 12_340.0]  # values: 4 digits


@pytest.mark.parametrize("cell, want", [
    ("1.5", 1.5), ("", NAN), ("10%", 10.0), ("abc", NAN), ("inf", NAN), (" 2 ", 2.0),
])
def test_to_float(cell: str, want: float) -> None:
    got = to_float(cell)
    assert (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize("cell, want", [
    ("10% at 95%", 10.0), ("2%", 2.0), ("0.5", 0.5), ("-3e2 ms", -300.0), ("none", NAN),
])
def test_leading_number(cell: str, want: float) -> None:
    got = leading_number(cell)
    assert (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize(("ks", "values", "n", "high", "mid", "low"), [
    # three hosts, two subintervals, rows in any order
    ([0, 1, 0, 1, 0, 1], [10, 50, 30, 40, 20, 60], 2, [30, 60], [20, 50], [10, 40]),
    # an even count: the median is the mean of the middle two
    ([0, 0, 0, 0], [4, 1, 3, 2], 1, [4], [2.5], [1]),
    # a subinterval without rows, a NaN value and one off the axis left out
    ([0, 2, 2, 5, NAN], [7, NAN, 9, 1, 3], 3, [7, NAN, 9], [7, NAN, 9], [7, NAN, 9]),
    ([], [], 2, [NAN, NAN], [NAN, NAN], [NAN, NAN]),
])
def test_high_median_low_over_hosts(ks: list[float], values: list[float], n: int, high: list[float],
                           mid: list[float], low: list[float]) -> None:
    got = _high_median_low(np.array(ks, dtype=np.float64), np.array(values, dtype=np.float64), n)
    for g, want in zip(got, (high, mid, low), strict=True):
        np.testing.assert_array_equal(g, np.array(want, dtype=np.float64))


def test_high_median_low_is_the_grids_max_median_and_min() -> None:
    rng = np.random.default_rng(3)
    grid = rng.uniform(0, 100, (50, 40))  # hosts x subintervals
    grid[rng.random(grid.shape) < 0.1] = NAN
    ks, values = np.nonzero(np.ones_like(grid))[1].astype(np.float64), grid.ravel()
    order = rng.permutation(values.size)
    high, mid, low = _high_median_low(ks[order], values[order], 40)
    np.testing.assert_array_equal(high, np.nanmax(grid, axis=0))
    np.testing.assert_allclose(mid, np.nanmedian(grid, axis=0), rtol=1e-15)
    np.testing.assert_array_equal(low, np.nanmin(grid, axis=0))
