"""Steady-state measurement criteria: when is a focus metric steady enough to measure?

Owns the arithmetic of ``measure:`` and nothing else:

- ivy's ``accuracy`` criterion: the Student-t confidence-interval half-width of the mean of the
  focus metric over a window of subintervals, relative to the mean, corrected for the
  autocorrelation between subintervals (estimated from the data, or ivy's constant factor);
- fio's steady-state criteria (``iops``, ``iops_slope``, ``bw``, ``bw_slope``), with fio's exact
  arithmetic (:func:`fio_criterion`) and the same two statistics (maximum deviation from the
  window mean, least-squares slope) applied to any focus metric, latency percentiles included;
- :class:`MeasureTracker`, fed one row (one value per focus-rollup instance) per subinterval,
  which says when every instance passes on the same window, and at a timeout gives an invalid
  result carrying the best window seen; :class:`MeasureGroup` combines several fio criteria
  (each on its own metric) that must all hold on the same window.

It must not do I/O, read clocks, log per sample, or know about rollups, CSV files or hosts:
callers hand it arrays and write what it returns. "Not steady" is a returned result, never an
exception. docs/measure.md explains the arithmetic.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, cast

import numpy as np
import numpy.typing as npt

from master.config.catalog import FIO_CRITERIA as CRITERIA_TABLE
from protocol.errors import ConfigError

logger = logging.getLogger(__name__)

FioName = Literal["iops", "iops_slope", "bw", "bw_slope"]
Statistic = Literal["deviation", "slope"]

#: fio's four criteria: the rollup metric ivypy applies each one to, and the statistic (the
#: entries of the config's criterion table that name their own metric).
#: fio's bandwidth is bytes/s; ivypy's bandwidth metric is ``MB_per_s``, so an absolute ``bw``
#: limit is in the focus metric's unit (percent limits are unit-free and match fio exactly).
FIO_CRITERIA: dict[str, tuple[str, Statistic]] = {
    name: (metric, cast(Statistic, stat))
    for name, (metric, stat) in CRITERIA_TABLE.items()
    if metric is not None
}

_LIMIT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*(%?)\s*$")
_SUFFIX_BYTES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}

FloatArray = npt.NDArray[np.float64]


# ---------------------------------------------------------------------------------------------
# fio's arithmetic
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FioLimit:
    """A steady-state limit: an absolute value in the metric's unit, or a percent of the mean."""

    value: float
    percent: bool

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g}"


def parse_fio_limit(limit: str | float, *, bytes_suffixes: bool = False) -> FioLimit:
    """Parse a limit like fio's ``steadystate=`` threshold: ``"2%"``, ``"4096"``, ``0.5``.

    With ``bytes_suffixes`` (fio's ``bw`` criteria) ``k``/``m``/``g``/``t``/``p`` multiply by
    powers of 1024 as fio's default ``kb_base`` does (``"4k"`` is 4096). Raises ConfigError.
    """
    if isinstance(limit, bool):
        raise ConfigError(f"steady-state limit must be a number or a percentage, not {limit!r}")
    if isinstance(limit, int | float):
        if not math.isfinite(limit) or limit < 0:
            raise ConfigError(f"steady-state limit must be finite and >= 0, not {limit!r}")
        return FioLimit(float(limit), False)
    match = _LIMIT_RE.match(limit)
    if match is None:
        raise ConfigError(f"steady-state limit {limit!r}: expected a number or a percentage")
    number, suffix, pct = match.groups()
    if pct:
        if suffix:
            raise ConfigError(f"steady-state limit {limit!r}: a percentage takes no suffix")
        return FioLimit(float(number), True)
    if suffix and not bytes_suffixes:
        raise ConfigError(f"steady-state limit {limit!r}: size suffixes apply to bw limits only")
    return FioLimit(float(number) * _SUFFIX_BYTES[suffix.lower()], False)


@dataclass(frozen=True)
class FioCriterionResult:
    """What fio reports in its JSON ``steadystate`` section for one window.

    ``criterion`` is in percent of the window mean when the limit is a percentage. ``slope`` is
    0 for deviation criteria and ``max_deviation`` is 0 for slope criteria, as in fio's output.
    """

    attained: bool
    criterion: float
    slope: float
    max_deviation: float
    mean: float


def _statistic_of(criterion: str) -> Statistic:
    if criterion in CRITERIA_TABLE:
        return cast(Statistic, CRITERIA_TABLE[criterion][1])
    raise ConfigError(
        f"unknown steady-state criterion {criterion!r}: expected one of "
        f"{', '.join(CRITERIA_TABLE)}"
    )


def fio_criterion(
    values: npt.ArrayLike,
    criterion: str,
    limit: str | float | FioLimit,
    *,
    sample_seconds: float = 1.0,
) -> FioCriterionResult:
    """fio's steady-state test on one window of samples, with fio's arithmetic.

    ``criterion`` is ``iops``/``bw`` (every sample within ``limit`` of the window mean) or
    ``iops_slope``/``bw_slope`` (least-squares slope below ``limit`` in magnitude); the names
    ``deviation`` and ``slope`` apply the same statistics to any metric. ``limit`` is like fio's
    threshold (``"2%"``, ``"4096"``, ``"4k"`` for bw). ``values`` is the whole window, oldest
    first, one sample per ``sample_seconds`` (fio: one per second; the slope is per second).

    Integer samples (fio's are ``uint64``) reproduce fio bit for bit, including the truncating
    integer division fio uses for the mean in the percent slope criterion; float samples use
    the same formulas with a float mean. A window containing NaN/inf is not attained and its
    criterion is NaN.
    """
    statistic = _statistic_of(criterion)
    if not isinstance(limit, FioLimit):
        limit = parse_fio_limit(limit, bytes_suffixes=criterion.startswith("bw"))
    if sample_seconds <= 0:
        raise ValueError("sample_seconds must be > 0")
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError("a steady-state window needs a 1-D array of at least 2 samples")
    n = int(arr.size)
    integer = np.issubdtype(arr.dtype, np.integer)
    if not integer and not np.all(np.isfinite(arr)):
        nan = float("nan")
        return FioCriterionResult(False, nan, nan if statistic == "slope" else 0.0,
                                  nan if statistic == "deviation" else 0.0, nan)
    if integer:
        ys = [int(v) for v in arr.tolist()]
        sum_y: float = float(sum(ys))
        sum_y_int = sum(ys)
        sum_xy = float(sum(i * y for i, y in enumerate(ys)))
        # fio: 100.0 * slope / (ss->sum_y / ss->dur) with both operands uint64.
        pct_mean = float(sum_y_int // n)
        mean = float(sum_y_int) / n
        diffs = [float(y) - mean for y in ys]
    else:
        yf = arr.astype(np.float64)
        sum_y = float(np.sum(yf))
        sum_xy = float(np.dot(np.arange(n, dtype=np.float64), yf))
        mean = sum_y / n
        pct_mean = mean
        diffs = (yf - mean).tolist()

    if statistic == "slope":
        sum_x = n * (n - 1) // 2
        sum_x_sq = (n - 1) * n * (2 * n - 1) // 6
        # Same operation order as fio's steadystate_slope() so the doubles are identical.
        slope = (sum_xy - float(sum_x) * sum_y / n) / (
            float(sum_x_sq) - float(sum_x) * float(sum_x) / n
        )
        slope /= sample_seconds
        if limit.percent:
            value = 100.0 * slope / pct_mean if pct_mean != 0 else math.copysign(math.inf, slope)
        else:
            value = slope
        attained = abs(value) < limit.value
        return FioCriterionResult(attained, value, slope, 0.0, mean)

    deviation = 0.0
    for diff in diffs:
        deviation = max(deviation, abs(diff))
    value = deviation
    if limit.percent:  # of |mean|: a metric with a negative mean is not steady by its sign
        value = 100.0 * deviation / abs(mean) if mean != 0 else math.inf
    return FioCriterionResult(value < limit.value, value, 0.0, deviation, mean)


# ---------------------------------------------------------------------------------------------
# Student-t and the autocorrelation correction
# ---------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the regularised incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be > 0")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (``student_t_quantile(0.975, 10)`` = 2.228...)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return math.inf
    # Newton on the CDF, safeguarded by the bracket [lo, hi] (bisection when Newton leaves it)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    t = 0.5 * (lo + hi)
    for _ in range(100):
        f = student_t_cdf(t, df) - p
        if f < 0:
            lo = t
        else:
            hi = t
        pdf = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        nxt = t - f / pdf if pdf > 0 else 0.5 * (lo + hi)
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - t) <= 1e-14 * max(1.0, abs(t)) or hi - lo <= 1e-14 * max(1.0, hi):
            return nxt
        t = nxt
    return t


#: Largest lag-1 autocorrelation the correction will use; beyond it a window is a trend, not
#: noise, and the variance inflation factor explodes.
RHO_MAX = 0.95


def variance_inflation(n: npt.ArrayLike, rho: npt.ArrayLike) -> FloatArray:
    """Var(mean of n AR(1) samples) / (sigma^2 / n) = 1 + 2 sum_{k<n} (1 - k/n) rho^k.

    Closed form; ``rho`` is clipped to [0, RHO_MAX] (negative autocorrelation would narrow the
    interval below the independent-samples one, which we never claim).
    """
    n_arr = np.asarray(n, dtype=np.float64)
    r = np.clip(np.asarray(rho, dtype=np.float64), 0.0, RHO_MAX)
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = r / (1.0 - r) - r * (1.0 - np.power(r, n_arr)) / (n_arr * (1.0 - r) ** 2)
    result: FloatArray = 1.0 + 2.0 * np.where(r > 0.0, geo, 0.0)
    return result


# ---------------------------------------------------------------------------------------------
# Criteria
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccuracyCriterion:
    """ivy's criterion: CI half-width of the window mean <= ``accuracy`` x |mean|.

    ``accuracy`` and ``confidence`` are fractions (0.05, 0.95). ``min_window_s`` is ivy's
    ``min_measure_seconds``; ``max_window_s`` (optional) caps how far back windows reach.
    ``autocorrelation`` is ``"estimate"`` (from the data, see docs/measure.md) or a fixed
    factor multiplying the half-width (ivy uses 2.0). ``ramp_s`` skips the start of the series.
    """

    accuracy: float = 0.05
    confidence: float = 0.95
    min_window_s: float = 60.0
    max_window_s: float | None = None
    autocorrelation: Literal["estimate"] | float = "estimate"
    ramp_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.accuracy > 0.0:
            raise ConfigError("accuracy must be > 0")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError("confidence must be between 0 and 1 (e.g. 0.95)")
        if self.min_window_s <= 0:
            raise ConfigError("min_measure_seconds must be > 0")
        if self.max_window_s is not None and self.max_window_s < self.min_window_s:
            raise ConfigError("max window must be >= min_measure_seconds")
        if self.autocorrelation != "estimate" and not (
            isinstance(self.autocorrelation, int | float) and self.autocorrelation >= 1.0
        ):
            raise ConfigError("autocorrelation must be 'estimate' or a factor >= 1")
        if self.ramp_s < 0:
            raise ConfigError("ramp_seconds must be >= 0")

    @property
    def name(self) -> str:
        return "accuracy"

    @property
    def limit_text(self) -> str:
        return f"{self.accuracy * 100:g}% at {self.confidence * 100:g}%"


@dataclass(frozen=True)
class FioCriterion:
    """fio's criterion on a fixed window of ``window_s`` after ``ramp_s``.

    ``name`` is one of fio's (``iops``, ``iops_slope``, ``bw``, ``bw_slope``) or ``deviation`` /
    ``slope`` for any focus metric (latency percentiles included). ``limit`` as fio's threshold.
    """

    name: str
    limit: FioLimit
    window_s: float
    ramp_s: float = 0.0

    @classmethod
    def parse(cls, name: str, limit: str | float, window_s: float,
              ramp_s: float = 0.0) -> FioCriterion:
        _statistic_of(name)
        if window_s <= 0:
            raise ConfigError("window_seconds must be > 0")
        if ramp_s < 0:
            raise ConfigError("ramp_seconds must be >= 0")
        return cls(name, parse_fio_limit(limit, bytes_suffixes=name.startswith("bw")),
                   float(window_s), float(ramp_s))

    @property
    def statistic(self) -> Statistic:
        return _statistic_of(self.name)

    @property
    def limit_text(self) -> str:
        return str(self.limit)


Criterion = AccuracyCriterion | FioCriterion


def subintervals_for(seconds: float, subinterval_s: float) -> int:
    """How many whole subintervals cover ``seconds`` (at least 1); tolerant of float error."""
    return max(1, math.ceil(seconds / subinterval_s - 1e-9))


# ---------------------------------------------------------------------------------------------
# Window evaluation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowScores:
    """Criterion values for candidate windows ending at one subinterval.

    ``lengths`` (L,) window lengths in subintervals; ``values`` (L, I) criterion value per
    window and instance; ``passed`` (L, I); ``score`` (L, I) value / limit (<= 1 or < 1 passes),
    used to rank windows when none passes.
    """

    lengths: npt.NDArray[np.int64]
    values: FloatArray
    passed: npt.NDArray[np.bool_]
    score: FloatArray


def accuracy_scores(series: npt.ArrayLike, end: int, first: int,
                    criterion: AccuracyCriterion, subinterval_s: float) -> WindowScores:
    """Relative CI half-widths of every window ``[end-n+1, end]`` with ``n >= min window``
    and start ``>= first``, for every instance (columns of ``series``, rows = subintervals).
    Vectorised over windows and instances with prefix sums.
    """
    x = np.asarray(series, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n_inst = x.shape[1]
    n_min = max(2, subintervals_for(criterion.min_window_s, subinterval_s))
    n_max = end - first + 1
    if criterion.max_window_s is not None:
        n_max = min(n_max, subintervals_for(criterion.max_window_s, subinterval_s))
    if n_max < n_min:
        empty_i = np.zeros(0, dtype=np.int64)
        empty_f = np.zeros((0, n_inst))
        return WindowScores(empty_i, empty_f, np.zeros((0, n_inst), dtype=bool), empty_f)
    seg = x[first:end + 1]
    bad = ~np.isfinite(seg)
    ref = np.where(bad, 0.0, seg)[-1]
    c = np.where(bad, 0.0, seg - ref)
    zero = np.zeros((1, n_inst))
    s1 = np.concatenate([zero, np.cumsum(c, axis=0)])
    s2 = np.concatenate([zero, np.cumsum(c * c, axis=0)])
    q = np.concatenate([zero, np.cumsum(c[:-1] * c[1:], axis=0)])
    nb = np.concatenate([zero, np.cumsum(bad, axis=0)])
    m_len = seg.shape[0]
    lengths = np.arange(n_min, n_max + 1, dtype=np.int64)
    starts = m_len - lengths  # index into seg of each window's first sample
    nf = lengths.astype(np.float64)[:, None]
    total = s1[m_len] - s1[starts]
    mean_c = total / nf
    ss = np.maximum(s2[m_len] - s2[starts] - nf * mean_c * mean_c, 0.0)
    var = ss / (nf - 1.0)
    mean = mean_c + ref
    if criterion.autocorrelation == "estimate":
        lag = (q[m_len - 1] - q[starts]) - mean_c * (
            (total - c[m_len - 1]) + (total - c[starts])) + (nf - 1.0) * mean_c * mean_c
        with np.errstate(divide="ignore", invalid="ignore"):
            r1 = np.where(ss > 0.0, lag / ss, 0.0)
        # Kendall's first-order bias correction of the lag-1 estimator: E[r1] ~ rho - (1+4rho)/n.
        rho = r1 + (1.0 + 4.0 * r1) / nf
        vif = variance_inflation(np.broadcast_to(nf, rho.shape), rho)
        n_eff = nf / vif
        df = np.maximum(1.0, np.floor(n_eff) - 1.0)
        factor = np.sqrt(vif)
    else:
        df = np.broadcast_to(nf - 1.0, mean.shape)
        factor = np.full(mean.shape, float(criterion.autocorrelation))
    p = 0.5 * (1.0 + criterion.confidence)
    uniq, inverse = np.unique(df, return_inverse=True)
    t = np.array([student_t_quantile(p, float(d)) for d in uniq])[inverse].reshape(df.shape)
    half = t * factor * np.sqrt(var / nf)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mean != 0.0, half / np.abs(mean), np.inf)
    rel = np.where(half == 0.0, np.where(mean != 0.0, 0.0, np.inf), rel)
    any_bad = (nb[m_len] - nb[starts]) > 0
    rel = np.where(any_bad, np.nan, rel)
    passed = np.where(any_bad, False, rel <= criterion.accuracy)
    score = np.where(any_bad, np.inf, rel / criterion.accuracy)
    return WindowScores(lengths, rel, passed, score)


def fio_scores(series: npt.ArrayLike, end: int, first: int,
               criterion: FioCriterion, subinterval_s: float) -> WindowScores:
    """fio's criterion on the one window of ``window_s`` ending at ``end`` (if it fits)."""
    x = np.asarray(series)
    if x.ndim == 1:
        x = x[:, None]
    n_inst = x.shape[1]
    n = max(2, subintervals_for(criterion.window_s, subinterval_s))
    if end - first + 1 < n:
        empty_f = np.zeros((0, n_inst))
        return WindowScores(np.zeros(0, dtype=np.int64), empty_f,
                            np.zeros((0, n_inst), dtype=bool), empty_f)
    values = np.empty((1, n_inst))
    passed = np.empty((1, n_inst), dtype=bool)
    score = np.empty((1, n_inst))
    for i in range(n_inst):
        res = fio_criterion(x[end - n + 1:end + 1, i], criterion.statistic, criterion.limit,
                            sample_seconds=subinterval_s)
        values[0, i] = res.criterion
        passed[0, i] = res.attained
        if math.isnan(res.criterion):
            score[0, i] = math.inf
        elif criterion.limit.value > 0:
            score[0, i] = abs(res.criterion) / criterion.limit.value
        else:
            score[0, i] = math.inf if res.criterion != 0 else 1.0
    return WindowScores(np.array([n], dtype=np.int64), values, passed, score)


# ---------------------------------------------------------------------------------------------
# Results and the incremental tracker
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureRow:
    """One subinterval's verdict, for measure.csv.

    ``window`` is ``(start, stop)`` subinterval indices (stop exclusive) of the window the
    values refer to, or None while there are not yet enough subintervals. ``values`` and
    ``passed`` have one entry per instance; ``attained`` is True when all instances passed.
    """

    subinterval: int
    window: tuple[int, int] | None
    values: tuple[float, ...]
    passed: tuple[bool, ...]
    attained: bool
    score: float = math.inf  # worst instance's value / limit on this window (< or <= 1 passes)


@dataclass(frozen=True)
class MeasureResult:
    """The verdict of a measurement.

    ``valid`` is True when the criterion was attained; otherwise ``window`` is the best window
    seen (smallest worst-instance value/limit) or None if no window ever fitted, and ``reason``
    says why. ``window`` is ``(start, stop)`` subinterval indices, stop exclusive; multiply by
    the subinterval length for seconds (:meth:`window_seconds`).
    """

    valid: bool
    criterion: str
    limit: str
    window: tuple[int, int] | None
    values: tuple[float, ...]
    passed: tuple[bool, ...]
    instances: tuple[str, ...]
    subinterval_s: float
    reason: str = ""

    def window_seconds(self) -> tuple[float, float] | None:
        if self.window is None:
            return None
        return (self.window[0] * self.subinterval_s, self.window[1] * self.subinterval_s)


class MeasureTracker:
    """Feed one row per subinterval (the focus metric of each focus-rollup instance, in a fixed
    instance order); each :meth:`feed` returns the subinterval's :class:`MeasureRow`. Stops
    (``done``) when every instance passes on the same window, or when ``timeout_s`` of
    subintervals have been fed without that (then :meth:`result` is invalid, with the best
    window). Row 0 is the first subinterval of the measurement phase; ramp counts from it.

    For the accuracy criterion every window ending at the newest subinterval, at least
    ``min_window_s`` long, is tried, and the longest on which all instances pass is chosen.
    """

    def __init__(self, criterion: Criterion, instances: Sequence[str], subinterval_s: float,
                 timeout_s: float | None = None, *, stop_when_attained: bool = True) -> None:
        if subinterval_s <= 0:
            raise ValueError("subinterval_s must be > 0")
        if not instances:
            raise ValueError("a measurement needs at least one focus-rollup instance")
        self.criterion = criterion
        self.instances = tuple(instances)
        self.subinterval_s = float(subinterval_s)
        self.timeout_s = timeout_s
        self.stop_when_attained = stop_when_attained
        self._rows: list[FloatArray] = []
        self._integer = True
        self._first = (subintervals_for(criterion.ramp_s, subinterval_s)
                       if criterion.ramp_s > 0 else 0)
        self._done = False
        self._result: MeasureResult | None = None
        self._best: tuple[float, int, tuple[int, int], FloatArray, npt.NDArray[np.bool_]] | None
        self._best = None

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, row: npt.ArrayLike) -> MeasureRow:
        if self._done:
            raise RuntimeError("the measurement is finished; start a new MeasureTracker")
        arr = np.asarray(row)
        if arr.shape != (len(self.instances),):
            raise ValueError(
                f"expected one value per instance ({len(self.instances)}), got shape {arr.shape}")
        self._integer = self._integer and np.issubdtype(arr.dtype, np.integer)
        self._rows.append(arr.astype(np.float64))
        end = len(self._rows) - 1
        series: npt.NDArray[np.float64] | npt.NDArray[np.int64] = np.vstack(self._rows)
        if self._integer:
            series = series.astype(np.int64)
        if isinstance(self.criterion, AccuracyCriterion):
            scores = accuracy_scores(series, end, self._first, self.criterion, self.subinterval_s)
        else:
            scores = fio_scores(series, end, self._first, self.criterion, self.subinterval_s)
        out = self._choose(scores, end)
        if out.attained and self.stop_when_attained:
            assert out.window is not None
            self._finish(True, out.window, np.array(out.values), np.array(out.passed), "")
        elif self.timeout_s is not None and (end + 1) * self.subinterval_s >= self.timeout_s - 1e-9:
            if self._best is None:
                self._finish(False, None, np.full(len(self.instances), np.nan),
                             np.zeros(len(self.instances), dtype=bool),
                             "timeout before a full window")
            else:
                _, _, window, values, passed = self._best
                self._finish(False, window, values, passed, "timeout")
        return out

    def _choose(self, scores: WindowScores, end: int) -> MeasureRow:
        n_inst = len(self.instances)
        if scores.lengths.size == 0:
            return MeasureRow(end, None, (math.nan,) * n_inst, (False,) * n_inst, False)
        all_pass = np.all(scores.passed, axis=1)
        if np.any(all_pass):
            k = int(np.flatnonzero(all_pass)[-1])  # the longest window on which all pass
        else:
            worst = np.max(scores.score, axis=1)
            k = int(np.argmin(worst))
        n = int(scores.lengths[k])
        window = (end - n + 1, end + 1)
        values, passed = scores.values[k], scores.passed[k]
        worst_k = float(np.max(scores.score[k]))
        if self._best is None or worst_k < self._best[0]:
            self._best = (worst_k, end, window, values.copy(), passed.copy())
        return MeasureRow(end, window, tuple(float(v) for v in values),
                          tuple(bool(p) for p in passed), bool(all_pass[k]), worst_k)

    def _finish(self, valid: bool, window: tuple[int, int] | None, values: FloatArray,
                passed: npt.NDArray[np.bool_], reason: str) -> None:
        self._done = True
        self._result = MeasureResult(
            valid=valid, criterion=self.criterion.name, limit=self.criterion.limit_text,
            window=window, values=tuple(float(v) for v in values),
            passed=tuple(bool(p) for p in passed), instances=self.instances,
            subinterval_s=self.subinterval_s, reason=reason)
        logger.debug("measure finished: %s", self._result)

    def result(self) -> MeasureResult:
        """The verdict so far: final once ``done``; before that, invalid with the best window
        (``reason='not finished'``), which is what a step that ends early reports."""
        if self._result is not None:
            return self._result
        n_inst = len(self.instances)
        if self._best is None:
            return MeasureResult(False, self.criterion.name, self.criterion.limit_text, None,
                                 (math.nan,) * n_inst, (False,) * n_inst, self.instances,
                                 self.subinterval_s, "not finished")
        _, _, window, values, passed = self._best
        return MeasureResult(False, self.criterion.name, self.criterion.limit_text, window,
                             tuple(float(v) for v in values), tuple(bool(p) for p in passed),
                             self.instances, self.subinterval_s, "not finished")


class MeasureGroup:
    """Several fio criteria that must all hold on the same window, each on its own metric
    (fio's "every criterion holds over the last window"; e.g. ``iops:2%`` and ``bw_slope:1%``).
    All criteria share ``window_s`` and ``ramp_s`` so their windows coincide. :meth:`feed`
    takes one row per criterion key (the values of that criterion's metric per instance).
    """

    def __init__(self, criteria: Sequence[tuple[str, FioCriterion]], instances: Sequence[str],
                 subinterval_s: float, timeout_s: float | None = None) -> None:
        if not criteria:
            raise ConfigError("a measurement needs at least one criterion")
        keys = [key for key, _ in criteria]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"duplicate criterion keys: {keys}")
        first = criteria[0][1]
        for _, crit in criteria:
            if not isinstance(crit, FioCriterion):
                raise ConfigError("only fio criteria can be combined (they share one window)")
            if (crit.window_s, crit.ramp_s) != (first.window_s, first.ramp_s):
                raise ConfigError("combined fio criteria need the same window and ramp")
        self.trackers = {key: MeasureTracker(crit, instances, subinterval_s,
                                             stop_when_attained=False)
                         for key, crit in criteria}
        self.subinterval_s = float(subinterval_s)
        self.timeout_s = timeout_s
        self._count = 0
        self._done = False
        self._valid = False
        self._window: tuple[int, int] | None = None
        self._best: tuple[float, tuple[int, int], dict[str, MeasureRow]] | None = None
        self._final_rows: dict[str, MeasureRow] | None = None

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, rows: Mapping[str, npt.ArrayLike]) -> dict[str, MeasureRow]:
        if self._done:
            raise RuntimeError("the measurement is finished; start a new MeasureGroup")
        if set(rows) != set(self.trackers):
            raise ValueError(f"expected rows for {sorted(self.trackers)}, got {sorted(rows)}")
        out = {key: tracker.feed(rows[key]) for key, tracker in self.trackers.items()}
        self._count += 1
        window = next(iter(out.values())).window
        if window is not None:
            worst = max(r.score for r in out.values())
            if self._best is None or worst < self._best[0]:
                self._best = (worst, window, out)
        if window is not None and all(r.attained for r in out.values()):
            self._done, self._valid, self._window, self._final_rows = True, True, window, out
        elif self.timeout_s is not None and (
                self._count * self.subinterval_s >= self.timeout_s - 1e-9):
            self._done = True
            if self._best is not None:
                _, self._window, self._final_rows = self._best
        return out

    def result(self) -> dict[str, MeasureResult]:
        """One result per criterion key, all with the same ``valid`` and ``window``."""
        if self._done and self._valid:
            reason = ""
        elif self._done:
            reason = "timeout" if self._final_rows is not None else "timeout before a full window"
        else:
            reason = "not finished"
        rows = self._final_rows
        if rows is None and self._best is not None:
            rows = self._best[2]
        window = self._window if self._done else (self._best[1] if self._best else None)
        results = {}
        for key, tracker in self.trackers.items():
            n_inst = len(tracker.instances)
            row = rows.get(key) if rows is not None else None
            values = row.values if row is not None else (math.nan,) * n_inst
            passed = row.passed if row is not None else (False,) * n_inst
            results[key] = MeasureResult(self._valid, tracker.criterion.name,
                                         tracker.criterion.limit_text, window, values, passed,
                                         tracker.instances, self.subinterval_s, reason)
        return results


def evaluate_series(series: npt.ArrayLike, criterion: Criterion, subinterval_s: float,
                    instances: Sequence[str] | None = None,
                    timeout_s: float | None = None) -> tuple[MeasureResult, list[MeasureRow]]:
    """Replay a whole (subintervals x instances) series through a :class:`MeasureTracker`;
    returns the result and the per-subinterval rows (what measure.csv would hold)."""
    arr = np.asarray(series)
    if arr.ndim == 1:
        arr = arr[:, None]
    names = tuple(instances) if instances is not None else tuple(
        str(i) for i in range(arr.shape[1]))
    tracker = MeasureTracker(criterion, names, subinterval_s, timeout_s)
    rows: list[MeasureRow] = []
    for row in arr:
        rows.append(tracker.feed(row))
        if tracker.done:
            break
    return tracker.result(), rows
