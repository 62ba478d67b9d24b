"""Table-driven tests of master.analysis.measure: fio's criteria, ivy's accuracy criterion with the
autocorrelation correction, Student-t, and the incremental MeasureTracker."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt
import pytest

from master.analysis.measure import (
    AccuracyCriterion,
    FioCriterion,
    FioLimit,
    MeasureGroup,
    MeasureTracker,
    accuracy_scores,
    evaluate_series,
    fio_criterion,
    parse_fio_limit,
    student_t_cdf,
    student_t_quantile,
    variance_inflation,
)
from protocol.errors import ConfigError

# --------------------------------------------------------------------------------------------
# limits
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bytes_suffixes", "expected"),
    [
        ("2%", False, FioLimit(2.0, True)),
        ("0.1%", False, FioLimit(0.1, True)),
        (" 5 % ", False, FioLimit(5.0, True)),
        ("4096", False, FioLimit(4096.0, False)),
        ("0.5", False, FioLimit(0.5, False)),
        ("4k", True, FioLimit(4096.0, False)),
        ("4m", True, FioLimit(4194304.0, False)),
        ("1G", True, FioLimit(float(1 << 30), False)),
        (3, False, FioLimit(3.0, False)),
        (0.25, False, FioLimit(0.25, False)),
    ],
)
def test_parse_fio_limit(text: str | float, bytes_suffixes: bool, expected: FioLimit) -> None:
    assert parse_fio_limit(text, bytes_suffixes=bytes_suffixes) == expected


@pytest.mark.parametrize(
    ("text", "bytes_suffixes"),
    [("abc", False), ("-1", False), ("4k", False), ("2k%", True), ("", False), ("1e", False),
     (-2.0, False), (math.inf, False), (True, False)],
)
def test_parse_fio_limit_rejects(text: str | float, bytes_suffixes: bool) -> None:
    with pytest.raises(ConfigError):
        parse_fio_limit(text, bytes_suffixes=bytes_suffixes)


# --------------------------------------------------------------------------------------------
# fio_criterion: hand-computed windows, passing and failing, at the strict boundary
# --------------------------------------------------------------------------------------------

FIO_CASES = [
    # id, values, criterion, limit, attained, criterion value, slope, max_deviation
    ("iops-within", [100, 101, 99, 100], "iops", "2", True, 1.0, 0.0, 1.0),
    ("iops-at-limit-fails", [100, 101, 99, 100], "iops", "1", False, 1.0, 0.0, 1.0),
    ("iops-pct-at-limit-fails", [100, 102, 98, 100], "iops", "2%", False, 2.0, 0.0, 2.0),
    ("iops-pct-within", [100, 102, 98, 100], "iops", "2.1%", True, 2.0, 0.0, 2.0),
    ("iops-one-outlier", [100, 100, 100, 100, 100, 150], "iops", "20%", False,
     100 * (150 - 650 / 6) / (650 / 6), 0.0, 150 - 650 / 6),
    ("bw-abs", [4096, 8192, 4096, 8192], "bw", "4k", True, 2048.0, 0.0, 2048.0),
    ("bw-abs-fails", [4096, 8192, 4096, 8192], "bw", "2k", False, 2048.0, 0.0, 2048.0),
    ("slope-up-at-limit-fails", [100, 101, 102, 103], "iops_slope", "1", False, 1.0, 1.0, 0.0),
    ("slope-up-within", [100, 101, 102, 103], "iops_slope", "1.01", True, 1.0, 1.0, 0.0),
    ("slope-down-abs", [103, 102, 101, 100], "bw_slope", "1.5", True, -1.0, -1.0, 0.0),
    ("slope-flat", [7, 7, 7, 7, 7], "iops_slope", "0.001", True, 0.0, 0.0, 0.0),
    ("slope-zero-limit-never", [7, 7, 7, 7, 7], "iops_slope", "0", False, 0.0, 0.0, 0.0),
    # fio divides the integer sum by n with integer division for the percent slope: 42 // 4 = 10
    ("slope-pct-integer-mean", [10, 10, 11, 11], "iops_slope", "4%", False, 4.0, 0.4, 0.0),
    ("slope-pct-float-mean", [10.0, 10.0, 11.0, 11.0], "iops_slope", "4%", True,
     100 * 0.4 / 10.5, 0.4, 0.0),
    ("deviation-latency-ms", [1.9, 2.1, 2.0, 2.0], "deviation", "6%", True, 5.0, 0.0, 0.1),
    ("deviation-latency-fails", [1.9, 2.3, 2.0, 2.0], "deviation", "6%", False,
     100 * 0.25 / 2.05, 0.0, 0.25),
    ("slope-latency-p99", [2.0, 2.2, 2.4, 2.6], "slope", "0.1", False, 0.2, 0.2, 0.0),
    # a percentage of |mean|: a negative mean used to give a negative value, always attained
    ("deviation-pct-negative-mean", [-1.0, -3.0, -1.0, -3.0], "deviation", "10%", False,
     50.0, 0.0, 1.0),
]


@pytest.mark.parametrize(
    ("values", "criterion", "limit", "attained", "value", "slope", "max_dev"),
    [c[1:] for c in FIO_CASES],
    ids=[c[0] for c in FIO_CASES],
)
def test_fio_criterion_table(values: list[float], criterion: str, limit: str, attained: bool,
                             value: float, slope: float, max_dev: float) -> None:
    result = fio_criterion(np.array(values), criterion, limit)
    assert result.attained is attained
    assert result.criterion == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert result.slope == pytest.approx(slope, rel=1e-12, abs=1e-12)
    assert result.max_deviation == pytest.approx(max_dev, rel=1e-12, abs=1e-12)


def test_fio_slope_matches_numpy_polyfit() -> None:
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 30, 120):
        y = rng.integers(1000, 100000, size=n)
        ours = fio_criterion(y, "iops_slope", "1").slope
        assert ours == pytest.approx(np.polyfit(np.arange(n), y, 1)[0], rel=1e-9, abs=1e-9)


def test_fio_slope_is_per_second_with_longer_samples() -> None:
    y = np.array([100.0, 110.0, 120.0, 130.0])
    assert fio_criterion(y, "slope", "100", sample_seconds=1.0).slope == pytest.approx(10.0)
    assert fio_criterion(y, "slope", "100", sample_seconds=5.0).slope == pytest.approx(2.0)


def test_fio_non_finite_window_is_not_attained() -> None:
    result = fio_criterion(np.array([1.0, np.nan, 1.0]), "deviation", "50%")
    assert not result.attained
    assert math.isnan(result.criterion)


@pytest.mark.parametrize(
    ("values", "criterion", "limit", "error"),
    [([1, 2, 3], "lat", "1", ConfigError), ([1], "iops", "1", ValueError),
     ([[1, 2], [3, 4]], "iops", "1", ValueError), ([1, 2], "iops", "x%", ConfigError)],
)
def test_fio_criterion_rejects(values: list[int], criterion: str, limit: str,
                               error: type[Exception]) -> None:
    with pytest.raises(error):
        fio_criterion(np.array(values), criterion, limit)


# --------------------------------------------------------------------------------------------
# Student-t and the variance inflation factor
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.975, 1, 12.706204736), (0.975, 2, 4.302652730), (0.975, 5, 2.570581836),
     (0.975, 10, 2.228138852), (0.975, 30, 2.042272456), (0.975, 1000, 1.962339081),
     (0.95, 4, 2.131846786), (0.95, 100, 1.660234326), (0.995, 5, 4.032142984),
     (0.9, 20, 1.325340707), (0.999, 3, 10.21453185), (0.025, 10, -2.228138852),
     (0.5, 7, 0.0)],
)
def test_student_t_quantile_table(p: float, df: float, expected: float) -> None:
    assert student_t_quantile(p, df) == pytest.approx(expected, rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("df", [1.0, 2.5, 9.0, 60.0])
def test_student_t_cdf_inverts_quantile(df: float) -> None:
    for p in (0.6, 0.9, 0.975, 0.999):
        assert student_t_cdf(student_t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize(("n", "rho", "expected"),
                         [(10, 0.0, 1.0), (2, 0.5, 1.5), (3, 0.5, 1 + 2 * (2 / 3 * 0.5 + 0.25 / 3)),
                          (50, -0.4, 1.0), (10_000, 0.5, 3.0 - 2 * 0.5 / (10_000 * 0.25))])
def test_variance_inflation_table(n: int, rho: float, expected: float) -> None:
    assert float(variance_inflation(n, rho)) == pytest.approx(expected, rel=1e-12)


def test_variance_inflation_matches_direct_sum() -> None:
    for n in (2, 5, 17, 60):
        for rho in (0.1, 0.5, 0.9):
            direct = 1 + 2 * sum((1 - k / n) * rho**k for k in range(1, n))
            assert float(variance_inflation(n, rho)) == pytest.approx(direct, rel=1e-12)


# --------------------------------------------------------------------------------------------
# accuracy: the vectorised window scan against a naive per-window computation
# --------------------------------------------------------------------------------------------


def naive_relative_half_width(x: npt.NDArray[np.float64], confidence: float,
                              autocorrelation: str | float) -> float:
    n = x.size
    mean = float(np.mean(x))
    var = float(np.var(x, ddof=1))
    if autocorrelation == "estimate":
        d = x - mean
        ss = float(np.sum(d * d))
        r1 = float(np.sum(d[:-1] * d[1:]) / ss) if ss > 0 else 0.0
        rho = min(max(r1 + (1 + 4 * r1) / n, 0.0), 0.95)
        vif = 1 + 2 * sum((1 - k / n) * rho**k for k in range(1, n))
        df = max(1.0, math.floor(n / vif) - 1.0)
        factor = math.sqrt(vif)
    else:
        df, factor = n - 1.0, float(autocorrelation)
    half = student_t_quantile(0.5 + confidence / 2, df) * factor * math.sqrt(var / n)
    return half / abs(mean)


@pytest.mark.parametrize("autocorrelation", ["estimate", 1.0, 2.0])
def test_accuracy_scores_match_naive(autocorrelation: str | float) -> None:
    rng = np.random.default_rng(11)
    t_len, n_inst = 40, 3
    base = np.array([1000.0, 5e5, 2.0])
    noise = rng.normal(0, 1, size=(t_len, n_inst)).cumsum(axis=0) * 0.2 + rng.normal(
        0, 1, size=(t_len, n_inst))
    series = base * (1 + 0.02 * noise)
    crit = AccuracyCriterion(min_window_s=5, autocorrelation=autocorrelation)  # type: ignore[arg-type]
    end, first = t_len - 1, 3
    scores = accuracy_scores(series, end, first, crit, subinterval_s=1.0)
    assert scores.lengths.tolist() == list(range(5, end - first + 2))
    for k, n in enumerate(scores.lengths):
        for i in range(n_inst):
            window = series[end - n + 1:end + 1, i]
            expected = naive_relative_half_width(window, 0.95, autocorrelation)
            assert scores.values[k, i] == pytest.approx(expected, rel=1e-9)
            assert scores.passed[k, i] == (expected <= 0.05)


def test_ivy_constant_factor_by_hand() -> None:
    x = np.array([98.0, 102.0, 99.0, 101.0, 100.0])
    mean, s = 100.0, math.sqrt(10 / 4)
    expected = 2.0 * 2.776445105 * s / math.sqrt(5) / mean
    crit = AccuracyCriterion(min_window_s=5, autocorrelation=2.0)
    scores = accuracy_scores(x, 4, 0, crit, 1.0)
    assert scores.values[0, 0] == pytest.approx(expected, rel=1e-8)


def test_autocorrelation_correction_restores_coverage() -> None:
    """AR(1) noise, rho = 0.6, windows of 30: the naive interval (independent samples) covers
    the true mean far less often than its nominal 95 %; the estimated correction restores it."""
    rng = np.random.default_rng(2024)
    reps, n, rho, mu = 2000, 30, 0.6, 1000.0
    e = rng.normal(0, 1, size=(n + 50, reps))
    x = np.zeros_like(e)
    for t in range(1, n + 50):
        x[t] = rho * x[t - 1] + e[t]
    series = mu + 10.0 * x[50:]
    coverage = {}
    modes: tuple[Literal["estimate"] | float, ...] = ("estimate", 1.0)
    for mode in modes:
        crit = AccuracyCriterion(min_window_s=n, max_window_s=n, autocorrelation=mode)
        scores = accuracy_scores(series, n - 1, 0, crit, 1.0)
        means = series.mean(axis=0)
        half = scores.values[0] * np.abs(means)
        coverage[mode] = float(np.mean(np.abs(means - mu) <= half))
    assert coverage[1.0] < 0.80
    assert coverage["estimate"] > 0.88
    print(f"coverage of a nominal 95% interval, AR(1) rho=0.6, n=30: naive "
          f"{coverage[1.0]:.3f}, estimated correction {coverage['estimate']:.3f}")


# --------------------------------------------------------------------------------------------
# accuracy criterion through the tracker: cases that pass and cases that must not
# --------------------------------------------------------------------------------------------

Gen = Callable[[np.random.Generator], npt.NDArray[np.float64]]


def iid(cv: float, n: int = 120, level: float = 10000.0, cols: int = 1) -> Gen:
    return lambda rng: level * (1 + cv * rng.normal(0, 1, size=(n, cols)))


def ar1(rho: float, cv: float, n: int = 120, level: float = 10000.0) -> Gen:
    def gen(rng: np.random.Generator) -> npt.NDArray[np.float64]:
        e = rng.normal(0, 1, size=n + 100)
        x = np.zeros(n + 100)
        for t in range(1, n + 100):
            x[t] = rho * x[t - 1] + e[t]
        x = x[100:] / x[100:].std()
        out: npt.NDArray[np.float64] = (level * (1 + cv * x))[:, None]
        return out
    return gen


def ramp_then_flat(n_ramp: int, n: int = 120) -> Gen:
    def gen(rng: np.random.Generator) -> npt.NDArray[np.float64]:
        level = np.minimum(np.arange(n), n_ramp) / n_ramp * 9000 + 1000
        return (level * (1 + 0.01 * rng.normal(0, 1, size=n)))[:, None]
    return gen


def square_wave(rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Blocks of 10 subintervals alternately 10 % above and below the level: strongly
    autocorrelated (lag-1 about 0.8), so subintervals are far from independent samples."""
    blocks = np.where((np.arange(120) // 10) % 2 == 0, 1.0, -1.0)
    return (10000 * (1 + 0.1 * blocks + 0.005 * rng.normal(0, 1, size=120)))[:, None]


def mixed_instances(rng: np.random.Generator) -> npt.NDArray[np.float64]:
    steady = 10000 * (1 + 0.01 * rng.normal(0, 1, size=120))
    noisy = 10000 * (1 + 0.5 * rng.normal(0, 1, size=120))
    return np.column_stack([steady, noisy])


def with_gap(rng: np.random.Generator) -> npt.NDArray[np.float64]:
    x = 2.0 * (1 + 0.01 * rng.normal(0, 1, size=(60, 1)))
    x[3, 0] = np.nan  # a subinterval with no I/O: no latency percentile
    return x


ACCURACY_CASES: list[tuple[str, Gen, AccuracyCriterion, bool, int | None]] = [
    # id, generator, criterion, valid, subinterval index at which it must be attained
    ("iid-1pct-passes-at-min-window", iid(0.01), AccuracyCriterion(min_window_s=10), True, 9),
    ("iid-40pct-never", iid(0.40), AccuracyCriterion(min_window_s=10), False, None),
    ("iid-20pct-loose-accuracy", iid(0.20), AccuracyCriterion(accuracy=0.25, min_window_s=10),
     True, None),
    ("ar1-0.5-passes-later-than-iid", ar1(0.5, 0.05), AccuracyCriterion(min_window_s=10), True,
     None),
    ("square-wave-estimated-correction-never", square_wave, AccuracyCriterion(min_window_s=20),
     False, None),
    ("square-wave-naive-passes-at-once", square_wave,
     AccuracyCriterion(min_window_s=20, autocorrelation=1.0), True, 19),
    ("square-wave-ivy-factor-2-passes-later", square_wave,
     AccuracyCriterion(min_window_s=20, autocorrelation=2.0), True, None),
    ("ramp-not-until-flat", ramp_then_flat(60), AccuracyCriterion(accuracy=0.01, min_window_s=10),
     True, None),
    ("every-instance-must-pass", mixed_instances, AccuracyCriterion(min_window_s=10), False, None),
    ("latency-with-missing-subinterval", with_gap, AccuracyCriterion(min_window_s=5), True, None),
    ("ramp-skips-start", iid(0.01), AccuracyCriterion(min_window_s=10, ramp_s=30), True, 39),
    ("ivy-constant-factor", iid(0.05), AccuracyCriterion(min_window_s=10, autocorrelation=2.0),
     True, None),
]


@pytest.mark.parametrize(("gen", "criterion", "valid", "attained_at"),
                         [c[1:] for c in ACCURACY_CASES], ids=[c[0] for c in ACCURACY_CASES])
def test_accuracy_criterion_table(gen: Gen, criterion: AccuracyCriterion, valid: bool,
                                  attained_at: int | None) -> None:
    series = gen(np.random.default_rng(5))
    result, rows = evaluate_series(series, criterion, subinterval_s=1.0, timeout_s=120)
    assert result.valid is valid, result
    if valid:
        assert result.window is not None
        assert rows[-1].attained and rows[-1].window == result.window
        assert all(result.passed)
        assert all(v <= criterion.accuracy for v in result.values)
        start, stop = result.window
        assert stop == len(rows)
        assert stop - start >= criterion.min_window_s
        assert start >= criterion.ramp_s
        assert not np.any(np.isnan(series[start:stop]))  # with_gap: the window starts after 3
        if attained_at is not None:
            assert len(rows) - 1 == attained_at
    else:
        assert result.reason == "timeout"
        assert result.window is not None  # the best window is reported
        assert not all(result.passed)
        assert len(rows) == 120


def test_ramp_window_starts_after_ramp() -> None:
    result, _ = evaluate_series(ramp_then_flat(60)(np.random.default_rng(5)),
                                AccuracyCriterion(accuracy=0.01, min_window_s=10), 1.0,
                                timeout_s=120)
    assert result.valid and result.window is not None
    assert result.window[0] >= 55  # no window reaching into the ramp passes at 1 %


def test_accuracy_chooses_longest_window_where_all_pass() -> None:
    rng = np.random.default_rng(3)
    series = np.concatenate([10000 * (1 + 0.3 * rng.normal(0, 1, size=(20, 2))),
                             10000 * (1 + 0.01 * rng.normal(0, 1, size=(40, 2)))])
    crit = AccuracyCriterion(min_window_s=8)
    tracker = MeasureTracker(crit, ["a", "b"], 1.0)
    for k, row in enumerate(series):
        out = tracker.feed(row)
        scores = accuracy_scores(series[:k + 1], k, 0, crit, 1.0)
        all_pass = scores.passed.all(axis=1)
        if out.attained:
            assert out.window is not None
            assert out.window[1] - out.window[0] == scores.lengths[np.flatnonzero(all_pass)[-1]]
            break
        assert not all_pass.any()
    assert tracker.done and tracker.result().valid


# --------------------------------------------------------------------------------------------
# fio criteria through the tracker
# --------------------------------------------------------------------------------------------


def sliding_first_attained(x: npt.NDArray[np.int64], name: str, limit: str, n: int,
                           first: int) -> int | None:
    for end in range(first + n - 1, x.size):
        if fio_criterion(x[end - n + 1:end + 1], name, limit).attained:
            return end
    return None


FIO_TRACK_CASES = [
    # id, integer series, criterion, window_s, ramp_s
    ("iops-settles", [500, 900, 1000, 1010, 990, 1000, 1005, 1000, 998, 1001], "iops", "2%", 4, 0),
    ("iops-never", [500, 900, 1000, 1100, 900, 1000, 1100, 900, 1000, 1100], "iops", "2%", 4, 0),
    ("slope-settles", [100, 200, 300, 350, 360, 362, 361, 362, 360, 361], "iops_slope", "1%", 4, 0),
    ("slope-ramp-hides-start", [0, 0, 0, 1000, 1001, 999, 1000, 1000, 1000, 1000], "iops_slope",
     "0.1%", 5, 3),
    ("bw-abs", [40960, 81920, 81000, 81920, 82000, 81920, 81900, 81920, 81910, 81920], "bw",
     "1k", 3, 0),
]


@pytest.mark.parametrize(("values", "name", "limit", "window_s", "ramp_s"),
                         [c[1:] for c in FIO_TRACK_CASES], ids=[c[0] for c in FIO_TRACK_CASES])
def test_fio_tracker_matches_sliding_window(values: list[int], name: str, limit: str,
                                            window_s: float, ramp_s: float) -> None:
    x = np.array(values, dtype=np.int64)
    crit = FioCriterion.parse(name, limit, window_s, ramp_s)
    result, rows = evaluate_series(x, crit, 1.0, timeout_s=len(values))
    expected_end = sliding_first_attained(x, name, limit, int(window_s), int(ramp_s))
    if expected_end is None:
        assert not result.valid and result.reason == "timeout"
        assert len(rows) == len(values)
    else:
        assert result.valid
        assert result.window == (expected_end - int(window_s) + 1, expected_end + 1)
        assert len(rows) == expected_end + 1
    for row in rows:
        if row.window is None:
            assert row.subinterval < ramp_s + window_s - 1
            continue
        start, stop = row.window
        assert start >= ramp_s
        ref = fio_criterion(x[start:stop], name, limit)
        assert row.values[0] == ref.criterion and row.passed[0] == ref.attained


def test_fio_tracker_latency_percentile_slope_two_instances() -> None:
    """Latency p99 per instance; window of 10 s at 2-s subintervals = 5 samples; slope per s."""
    p99 = np.array([[3.0, 2.0], [2.6, 2.01], [2.3, 2.0], [2.1, 1.99], [2.05, 2.0], [2.0, 2.0],
                    [2.0, 2.01], [2.01, 2.0], [2.0, 2.0], [2.0, 1.99]])
    crit = FioCriterion.parse("slope", "0.2%", window_s=10, ramp_s=0)
    result, _ = evaluate_series(p99, crit, 2.0, ["h1", "h2"], timeout_s=100)
    assert result.valid and result.window is not None
    start, stop = result.window
    assert stop - start == 5
    for i in range(2):
        ref = fio_criterion(p99[start:stop, i], "slope", "0.2%", sample_seconds=2.0)
        assert result.values[i] == pytest.approx(ref.criterion)
    # the first instance's decay must have left the window
    assert start >= 3
    assert result.window_seconds() == (start * 2.0, stop * 2.0)


def test_timeout_before_any_window() -> None:
    crit = FioCriterion.parse("iops", "1%", window_s=30)
    result, rows = evaluate_series(np.full(10, 100, dtype=np.int64), crit, 1.0, timeout_s=10)
    assert not result.valid and result.window is None
    assert result.reason == "timeout before a full window"
    assert all(r.window is None for r in rows)


def test_timeout_reports_best_window() -> None:
    rng = np.random.default_rng(9)
    noisy = 1000 * (1 + 0.2 * rng.normal(0, 1, size=60))
    noisy[20:30] = 1000 + np.arange(10) % 2  # the calmest stretch, still not within 0.01 %
    crit = FioCriterion.parse("deviation", "0.01%", window_s=10)
    result, _ = evaluate_series(noisy, crit, 1.0, timeout_s=60)
    assert not result.valid and result.reason == "timeout"
    assert result.window == (20, 30)
    assert result.values[0] == pytest.approx(100 * 0.5 / 1000.5)


def test_tracker_misuse() -> None:
    tracker = MeasureTracker(FioCriterion.parse("iops", "50%", 2), ["a"], 1.0)
    with pytest.raises(ValueError):
        tracker.feed([1.0, 2.0])
    tracker.feed([100])
    assert not tracker.result().valid and tracker.result().reason == "not finished"
    tracker.feed([100])
    assert tracker.done and tracker.result().valid
    with pytest.raises(RuntimeError):
        tracker.feed([100])
    with pytest.raises(ValueError):
        MeasureTracker(FioCriterion.parse("iops", "50%", 2), [], 1.0)


@pytest.mark.parametrize(
    "make",
    [lambda: AccuracyCriterion(accuracy=0), lambda: AccuracyCriterion(confidence=1.0),
     lambda: AccuracyCriterion(min_window_s=0), lambda: AccuracyCriterion(autocorrelation=0.5),
     lambda: AccuracyCriterion(min_window_s=30, max_window_s=10),
     lambda: FioCriterion.parse("iops", "1%", window_s=0),
     lambda: FioCriterion.parse("lat", "1%", window_s=10)],
)
def test_criterion_validation(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()


# --------------------------------------------------------------------------------------------
# several fio criteria on one window
# --------------------------------------------------------------------------------------------


def test_group_attains_when_all_criteria_hold_on_the_same_window() -> None:
    iops = np.array([500, 900, 1000, 1010, 990, 1000, 1005, 1000, 998, 1001, 1000, 1000],
                    dtype=np.int64)
    mbps = np.array([10.0, 20.0, 30.0, 31.0, 32.0, 33.0, 33.1, 33.0, 33.05, 33.0, 33.0, 33.0])
    crits = [("iops", FioCriterion.parse("iops", "2%", 4)),
             ("bw_slope", FioCriterion.parse("slope", "0.5%", 4))]
    group = MeasureGroup(crits, ["all"], 1.0, timeout_s=12)
    expected = next(end for end in range(3, 12)
                    if fio_criterion(iops[end - 3:end + 1], "iops", "2%").attained
                    and fio_criterion(mbps[end - 3:end + 1], "slope", "0.5%").attained)
    for k in range(12):
        rows = group.feed({"iops": iops[k:k + 1], "bw_slope": mbps[k:k + 1]})
        if group.done:
            break
    assert k == expected
    assert rows["iops"].attained and rows["bw_slope"].attained
    results = group.result()
    assert {r.window for r in results.values()} == {(expected - 3, expected + 1)}
    assert all(r.valid for r in results.values())
    # the IOPS criterion alone is attained earlier: the group waited for the slope
    assert sliding_first_attained(iops, "iops", "2%", 4, 0) == 5 < expected


def test_group_timeout_reports_best_common_window() -> None:
    rng = np.random.default_rng(4)
    a = 1000 * (1 + 0.1 * rng.normal(0, 1, size=20))
    b = 1000 * (1 + 0.1 * rng.normal(0, 1, size=20))
    a[8:12] = 1000.0
    b[8:12] = [1000.0, 1001.0, 1000.0, 1001.0]
    crits = [("a", FioCriterion.parse("deviation", "0.01%", 4)),
             ("b", FioCriterion.parse("deviation", "0.01%", 4))]
    group = MeasureGroup(crits, ["x"], 1.0, timeout_s=20)
    for k in range(20):
        group.feed({"a": a[k:k + 1], "b": b[k:k + 1]})
    assert group.done
    results = group.result()
    assert {r.window for r in results.values()} == {(8, 12)}
    assert not any(r.valid for r in results.values())
    assert results["a"].values[0] == 0.0 and results["a"].passed == (True,)
    assert results["b"].reason == "timeout" and results["b"].passed == (False,)


@pytest.mark.parametrize(
    "crits",
    [[], [("a", FioCriterion.parse("iops", "1%", 4)), ("b", FioCriterion.parse("bw", "1%", 5))],
     [("a", FioCriterion.parse("iops", "1%", 4)),
      ("b", FioCriterion.parse("bw", "1%", 4, ramp_s=2))],
     [("a", AccuracyCriterion())],
     [("a", FioCriterion.parse("iops", "1%", 4)), ("a", FioCriterion.parse("bw", "1%", 4))]],
)
def test_group_validation(crits: list[tuple[str, FioCriterion]]) -> None:
    with pytest.raises(ConfigError):
        MeasureGroup(crits, ["x"], 1.0)


def test_group_needs_every_row() -> None:
    group = MeasureGroup([("a", FioCriterion.parse("iops", "1%", 4))], ["x"], 1.0)
    with pytest.raises(ValueError):
        group.feed({"b": [1]})
