"""Why a step is invalid, in words with figures: the reasons summary.csv carries.

Owns the verdict rules that are not a criterion's own arithmetic, each a pure function that
returns a one-line reason ('' or None when there is none):

- ``iops_shortfalls`` / ``shortfall_reason``: paced workloads whose IOPS over the measurement
  fell short of the mean setting in force by more than ``iops_tolerance_pct``, beyond what
  counting allows (the I/Os in flight at the window's two edges, and for Poisson arrivals three
  standard deviations of the count);
- ``ended_early``: what ended a step before its end (``ivypy stop``, an interrupt, a host's
  failure), at which subinterval, in which phase;
- ``dfc_cause``: why a DFC controller did not hold its target: pinned at ``high_iops`` or
  ``low_iops`` for most of its moves, its readings swinging across the target beyond the
  tolerance (too noisy to settle), or simply not settled, with the last reading against the
  target and the tolerance;
- ``measure_cause``: a ``measure`` criterion not attained: each failing instance's value
  against the limit;
- ``rollup_validity``: a rollup type's own checks over a measurement (``quantity``,
  ``max_droop``).

It must not do I/O, know about hosts, files or CSV columns, or decide when a step ends
(``master.analysis.stepcontrol``) or what a criterion's value is (``master.analysis.measure``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from master.analysis import rollup as ru
from master.config import RollupSpec

#: Shortfalls named in a reason; the rest are counted.
NAMED_SHORTFALLS = 3
#: Standard deviations of a Poisson count forgiven (``random_independent`` arrivals).
POISSON_SIGMAS = 3.0
#: A controller is pinned when more than this share of its moves were clamped at one bound.
PINNED_SHARE = 0.5
#: Readings a noise verdict looks back over.
NOISE_READINGS = 6


# ------------------------------------------------------------------ IOPS against the setting
@dataclass(frozen=True)
class Shortfall:
    """An instance whose achieved IOPS fell short of its setting."""

    instance: str
    achieved_iops: float
    set_iops: float

    @property
    def short_pct(self) -> float:
        return 100.0 * (1.0 - self.achieved_iops / self.set_iops)


def iops_shortfalls(names: Sequence[str], achieved_iops: npt.ArrayLike, set_iops: npt.ArrayLike,
                    iodepth: npt.ArrayLike, poisson: npt.ArrayLike, measurement_s: float,
                    tolerance_pct: float) -> list[Shortfall]:
    """The instances short of their IOPS setting, worst first. Per instance: the IOPS
    achieved over the measurement, the mean setting in force (NaN: ``iops: max`` in some
    subinterval, not checked), its queue depth and whether its arrivals are Poisson. Short:
    ``expected - counted > tolerance * expected + iodepth (+ 3 sqrt(expected) if Poisson)``
    with ``expected = setting × measurement_s`` I/Os."""
    got = np.asarray(achieved_iops, dtype=np.float64)
    want = np.asarray(set_iops, dtype=np.float64)
    depth = np.asarray(iodepth, dtype=np.float64)
    is_poisson = np.asarray(poisson, dtype=bool)
    with np.errstate(invalid="ignore"):
        paced = np.isfinite(want) & (want > 0) & np.isfinite(got)
    expected = np.where(paced, want, 0.0) * measurement_s
    missing = expected - np.where(paced, got, 0.0) * measurement_s
    allowance = (tolerance_pct / 100.0 * expected + depth
                 + np.where(is_poisson, POISSON_SIGMAS * np.sqrt(expected), 0.0))
    short = np.flatnonzero(paced & (missing > allowance))
    found = [Shortfall(names[i], float(got[i]), float(want[i])) for i in short.tolist()]
    return sorted(found, key=lambda s: -s.short_pct)


def shortfall_reason(shortfalls: Sequence[Shortfall], tolerance_pct: float, rollup: str) -> str:
    """``IOPS short of the setting in force by more than 5% (iops_tolerance_pct): workload
    h:l:w 7,600 of 10,000 IOPS (24.0% short); 2 more workloads short``, or ''."""
    if not shortfalls:
        return ""
    named = "; ".join(f"{rollup} {s.instance} {_iops(s.achieved_iops)} of "
                      f"{_iops(s.set_iops)} IOPS ({s.short_pct:.1f}% short)"
                      for s in shortfalls[:NAMED_SHORTFALLS])
    more = len(shortfalls) - NAMED_SHORTFALLS
    rest = f"; {more:,} more {rollup}s short" if more > 0 else ""
    return (f"IOPS short of the setting in force by more than {tolerance_pct:g}% "
            f"(iops_tolerance_pct): {named}{rest}")


def _iops(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# ------------------------------------------------------------------ a step ended early
#: What can end a step before its planned end, as a reason words it.
ENDINGS = {"stop": "stopped by ivypy stop", "interrupt": "interrupted",
           "host": "failed"}


def ended_early(cause: str, subinterval: int, phase: str, detail: str = "", *,
                after: bool = False) -> str:
    """``stopped by ivypy stop after subinterval 2 (warmup)``; a failure names the
    subinterval it happened in: ``failed in subinterval 3 (warmup): <detail>`` (``after``:
    once that subinterval was recorded, ``failed after subinterval 3 ...``). Before the first
    subinterval: ``... before subinterval 0``."""
    what = ENDINGS[cause]
    if subinterval < 0:
        where = "before subinterval 0"
    elif cause == "host" and not after:
        where = f"in subinterval {subinterval} ({phase})"
    else:
        where = f"after subinterval {subinterval} ({phase})"
    return f"{what} {where}" + (f": {detail}" if detail else "")


# ------------------------------------------------------------------ DFC
@dataclass(frozen=True)
class DfcReading:
    """One controller move of one instance, as far as a verdict needs it."""

    subinterval: int
    measured: float
    new_iops: float
    saturated: bool
    held: bool


def pinned_bound(moves: Sequence[DfcReading], low_iops: float, high_iops: float
                 ) -> tuple[str, float, int] | None:
    """(``high_iops`` or ``low_iops``, its value, moves clamped there) when more than half of
    ``moves`` were clamped at that bound; else None."""
    for name, bound in (("high_iops", high_iops), ("low_iops", low_iops)):
        n = sum(1 for m in moves if m.saturated and m.new_iops == bound)
        if moves and n > PINNED_SHARE * len(moves):
            return name, bound, n
    return None


def dfc_cause(moves: Sequence[DfcReading], metric: str, target: float, low_iops: float,
              high_iops: float, tolerance: float, settle_count: int) -> str:
    """Why the controller of one instance did not hold ``target`` over ``moves`` (in order):
    pinned at a bound, too noisy, or not settled, with its figures."""
    if not moves:
        return "no controller move was made"
    span = f"subintervals {moves[0].subinterval}-{moves[-1].subinterval}"
    read = [m for m in moves if not m.held and math.isfinite(m.measured)]
    if not any(math.isfinite(m.measured) for m in moves):
        return (f"no {metric} reading in {span} (a subinterval without I/O has none), so it "
                f"held its IOPS")
    last = read[-1].measured if read else math.nan
    pinned = pinned_bound(moves, low_iops, high_iops)
    if pinned is not None:
        name, bound, n = pinned
        fix = "raise high_iops" if name == "high_iops" else "lower low_iops"
        return (f"pinned at {name} {_iops(bound)} for {n} of {len(moves)} moves ({span}); "
                f"{metric} last {last:.4g} vs target {target:g}: {fix}")
    recent = [m.measured for m in read[-NOISE_READINGS:]]
    band = tolerance * target
    above = any(v > target + band for v in recent)
    below = any(v < target - band for v in recent)
    if above and below:
        return (f"{metric} too noisy to settle: its last {len(recent)} readings ranged "
                f"{min(recent):.4g}-{max(recent):.4g} across the target {target:g} "
                f"(tolerance ±{tolerance:.0%}; {span}): try window_seconds")
    in_band = 0
    for m in reversed(moves):
        if m.held or not abs(m.measured - target) <= band:
            break
        in_band += 1
    off = 100.0 * (last / target - 1.0) if math.isfinite(last) else math.nan
    never = not any(abs(m.measured - target) <= band for m in read)
    hint = (": gains too small (settled=false throughout; fixed gains, or a longer step)"
            if never and not (above and below) else "")
    return (f"not settled by subinterval {moves[-1].subinterval}: {metric} last {last:.4g} "
            f"vs target {target:g} ({off:+.1f}%, tolerance ±{tolerance:.0%}), "
            f"{in_band} of {settle_count} readings in a row within it{hint}")


# ------------------------------------------------------------------ measure
def measure_cause(criterion: str, limit: str, instances: Sequence[str],
                  values: Sequence[float], passed: Sequence[bool], why: str,
                  timeout_s: float | None, *, window: bool = True) -> str:
    """``accuracy not attained by the timeout (60s): all 7.31% vs limit 5% at 95%`` (each
    instance that did not pass; all when none is marked). ``window``: whether a full window
    was evaluated at all (a step that ended before one has no value to show). A value that is
    NaN (a subinterval of the window had none) or infinite (a window mean of 0) is said so."""
    unit = "%" if "%" in limit else ""
    failing = [(n, v) for n, v, p in zip(instances, values, passed, strict=False) if not p]
    shown = "; ".join(f"{n} {_value(v)}{unit if math.isfinite(v) else ''}" for n, v in
                      (failing or list(zip(instances, values, strict=False))))
    if why.startswith("timeout"):
        when = " by the timeout" + (f" ({timeout_s:g}s)" if timeout_s is not None else "")
    else:
        when = f" ({why})" if why else ""
    if why == "timeout before a full window" or not window:
        return f"{criterion} not attained{when}: no full window fitted (limit {limit})"
    return f"{criterion} not attained{when}: {shown} vs limit {limit}"


def _value(value: float) -> str:
    if math.isnan(value):
        return "none (a subinterval of the window had no value)"
    if math.isinf(value):
        return "undefined (window mean 0)"
    return f"{value:.4g}"


def rollup_validity(spec: RollupSpec, res: ru.RollupResult) -> tuple[bool, str]:
    """A rollup type's validation over a measurement: ``quantity`` and ``max_droop``."""
    reasons: list[str] = []
    count = res.grouping.n
    if spec.quantity is not None and count != spec.quantity:
        reasons.append(f"{spec.type}: {count} instances, expected {spec.quantity}")
    if spec.max_droop is not None and count > 1:
        iops = res.columns["IOPS"]
        mean = float(np.mean(iops))
        if mean > 0:
            droop = 1.0 - iops / mean
            worst = int(np.argmax(droop))
            if droop[worst] > spec.max_droop:
                reasons.append(f"{spec.type}: instance {res.grouping.names[worst]} IOPS "
                               f"{iops[worst]:.0f} is {100 * droop[worst]:.1f}% below the "
                               f"mean {mean:.0f} (max_droop {100 * spec.max_droop:g}%)")
    return not reasons, "; ".join(reasons)
