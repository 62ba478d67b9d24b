"""Table tests of master.analysis.verdicts: each reason's rule and its wording, with figures."""

from __future__ import annotations

import math

import pytest

from master.analysis.verdicts import (
    DfcReading,
    Shortfall,
    dfc_cause,
    ended_early,
    iops_shortfalls,
    measure_cause,
    pinned_bound,
    shortfall_reason,
)

NAN = math.nan

# (case, achieved IOPS, set IOPS, iodepth, poisson, seconds, tolerance %, short?)
SHORTFALL_CASES = [
    ("met exactly", 1000.0, 1000.0, 1, False, 10.0, 5.0, False),
    ("4% short, inside 5%", 960.0, 1000.0, 1, False, 10.0, 5.0, False),
    ("24% short", 760.0, 1000.0, 1, False, 10.0, 5.0, True),
    ("6% short at 5%", 940.0, 1000.0, 1, False, 10.0, 5.0, True),
    ("6% short at 10%", 940.0, 1000.0, 1, False, 10.0, 10.0, False),
    ("over the setting", 1100.0, 1000.0, 1, False, 10.0, 5.0, False),
    ("iops max (NaN) not checked", 5.0, NAN, 1, False, 10.0, 5.0, False),
    ("no I/O at all", 0.0, 1000.0, 1, False, 10.0, 5.0, True),
    # 10 IOPS for 1 s: 10 I/Os; 8 counted is 20% short, but 2 missing are within the 0.5
    # allowed by 5% plus the queue's 4 in flight at the window's edges
    ("edge I/Os of a short window", 8.0, 10.0, 4, False, 1.0, 5.0, False),
    ("edge allowance used up", 5.0, 10.0, 4, False, 1.0, 5.0, True),
    # Poisson: 100 expected, 3 sigma = 30 I/Os forgiven on top of 5 + 1
    ("Poisson within 3 sigma", 70.0, 100.0, 1, True, 1.0, 5.0, False),
    ("Poisson beyond 3 sigma", 60.0, 100.0, 1, True, 1.0, 5.0, True),
    ("same shortfall, steady arrivals", 70.0, 100.0, 1, False, 1.0, 5.0, True),
    ("tolerance 100% never fails", 0.0, 1000.0, 1, False, 10.0, 100.0, False),
    ("tolerance 0: beyond the edges", 998.0, 1000.0, 1, False, 10.0, 0.0, True),
    ("tolerance 0: within the edges", 999.95, 1000.0, 1, False, 10.0, 0.0, False),
]


@pytest.mark.parametrize(("case", "got", "want", "depth", "poisson", "dur", "tol", "short"),
                         SHORTFALL_CASES, ids=[c[0] for c in SHORTFALL_CASES])
def test_iops_shortfall_rule(case: str, got: float, want: float, depth: int, poisson: bool,
                             dur: float, tol: float, short: bool) -> None:
    found = iops_shortfalls(["w"], [got], [want], [depth], [poisson], dur, tol)
    assert bool(found) == short, case
    if short:
        assert found[0] == Shortfall("w", got, want)


def test_shortfalls_worst_first_and_reason_names_three() -> None:
    names = ["a", "b", "c", "d", "e"]
    got = [900.0, 500.0, 1000.0, 700.0, 800.0]
    found = iops_shortfalls(names, got, [1000.0] * 5, [1] * 5, [False] * 5, 10.0, 5.0)
    assert [s.instance for s in found] == ["b", "d", "e", "a"]
    assert found[0].short_pct == pytest.approx(50.0)
    assert shortfall_reason(found, 5.0, "workload") == (
        "IOPS short of the setting in force by more than 5% (iops_tolerance_pct): "
        "workload b 500 of 1,000 IOPS (50.0% short); workload d 700 of 1,000 IOPS "
        "(30.0% short); workload e 800 of 1,000 IOPS (20.0% short); 1 more workloads short")
    assert shortfall_reason([], 5.0, "workload") == ""
    many = [Shortfall(f"w{i}", 10.0, 100.0) for i in range(1234)]
    assert shortfall_reason(many, 5.0, "workload").endswith("; 1,231 more workloads short")
    assert shortfall_reason([Shortfall("h:/f:w", 7.5, 10.0)], 2.5, "workload") == (
        "IOPS short of the setting in force by more than 2.5% (iops_tolerance_pct): "
        "workload h:/f:w 7.5 of 10 IOPS (25.0% short)")


@pytest.mark.parametrize(("cause", "k", "phase", "detail", "text"), [
    ("stop", 2, "warmup", "", "stopped by ivypy stop after subinterval 2 (warmup)"),
    ("interrupt", 7, "measurement", "", "interrupted after subinterval 7 (measurement)"),
    ("interrupt", -1, "warmup", "", "interrupted before subinterval 0"),
    ("host", 3, "warmup", "host h1: connection lost",
     "failed in subinterval 3 (warmup): host h1: connection lost"),
])
def test_ended_early(cause: str, k: int, phase: str, detail: str, text: str) -> None:
    assert ended_early(cause, k, phase, detail) == text


def test_a_failure_after_the_last_subinterval() -> None:
    """A host that does not confirm the end of the step failed once its last subinterval
    was recorded."""
    assert ended_early("host", 9, "cooldown", "host h2: did not confirm the end of the step",
                       after=True) == ("failed after subinterval 9 (cooldown): host h2: did "
                                       "not confirm the end of the step")


def _moves(values: list[tuple[float, float, bool]], first: int = 0) -> list[DfcReading]:
    """(measured, new_iops, saturated) per subinterval from ``first``."""
    return [DfcReading(first + i, m, n, s, False) for i, (m, n, s) in enumerate(values)]


DFC_CASES = [
    ("pinned high",
     _moves([(0.1, 200, False), (0.1, 400, False)] + [(0.2, 1000, True)] * 6),
     "pinned at high_iops 1,000 for 6 of 8 moves (subintervals 0-7); p99_ms last 0.2 vs "
     "target 1: raise high_iops"),
    ("pinned low",
     _moves([(5.0, 10, True)] * 3 + [(4.0, 20, False)], first=4),
     "pinned at low_iops 10 for 3 of 4 moves (subintervals 4-7); p99_ms last 4 vs target 1: "
     "lower low_iops"),
    ("half pinned is not pinned: not settled",
     _moves([(0.5, 1000, True)] * 2 + [(0.7, 900, False), (0.8, 950, False)]),
     "not settled by subinterval 3: p99_ms last 0.8 vs target 1 (-20.0%, tolerance ±10%), "
     "0 of 3 readings in a row within it: gains too small (settled=false throughout; fixed "
     "gains, or a longer step)"),
    ("noisy",
     _moves([(1.5, 300, False), (0.6, 400, False), (1.4, 300, False), (0.95, 320, False)]),
     "p99_ms too noisy to settle: its last 4 readings ranged 0.6-1.5 across the target 1 "
     "(tolerance ±10%; subintervals 0-3): try window_seconds"),
    ("approaching, two in band",
     _moves([(0.5, 300, False), (0.97, 320, False), (1.05, 310, False)]),
     "not settled by subinterval 2: p99_ms last 1.05 vs target 1 (+5.0%, tolerance ±10%), "
     "2 of 3 readings in a row within it"),
    ("no move", [], "no controller move was made"),
    ("no reading: no I/O, every move held",
     [DfcReading(k, NAN, 200.0, False, True) for k in range(3, 7)],
     "no p99_ms reading in subintervals 3-6 (a subinterval without I/O has none), so it held "
     "its IOPS"),
]


@pytest.mark.parametrize(("case", "moves", "text"), DFC_CASES, ids=[c[0] for c in DFC_CASES])
def test_dfc_cause(case: str, moves: list[DfcReading], text: str) -> None:
    assert dfc_cause(moves, "p99_ms", 1.0, 10.0, 1000.0, 0.10, 3) == text


def test_pinned_bound_needs_more_than_half_at_one_bound() -> None:
    high = _moves([(0.1, 1000, True)] * 3 + [(0.1, 500, False)] * 2)
    assert pinned_bound(high, 10.0, 1000.0) == ("high_iops", 1000.0, 3)
    split = _moves([(0.1, 1000, True)] * 2 + [(9.0, 10, True)] * 2)
    assert pinned_bound(split, 10.0, 1000.0) is None
    limited = _moves([(0.1, 800, True)] * 3)  # clamped by the step limit, not at a bound
    assert pinned_bound(limited, 10.0, 1000.0) is None
    assert pinned_bound([], 10.0, 1000.0) is None


@pytest.mark.parametrize(("args", "text"), [
    (("accuracy", "5% at 95%", ["all"], [7.3125], [False], "timeout", 60.0),
     "accuracy not attained by the timeout (60s): all 7.312% vs limit 5% at 95%"),
    (("iops", "2%", ["h1", "h2"], [1.0, 3.5], [True, False], "timeout", 30.0),
     "iops not attained by the timeout (30s): h2 3.5% vs limit 2%"),
    (("slope", "0.5", ["all"], [0.75], [False], "timeout", 30.0),
     "slope not attained by the timeout (30s): all 0.75 vs limit 0.5"),
    (("accuracy", "5% at 95%", ["all"], [NAN], [False], "timeout before a full window", 10.0),
     "accuracy not attained by the timeout (10s): no full window fitted (limit 5% at 95%)"),
    (("accuracy", "5% at 95%", ["all"], [12.0], [False], "not finished", None),
     "accuracy not attained (not finished): all 12% vs limit 5% at 95%"),
    (("accuracy", "5% at 95%", ["h1", "h2"], [NAN, 3.0], [False, True], "timeout", 60.0),
     "accuracy not attained by the timeout (60s): h1 none (a subinterval of the window had no "
     "value) vs limit 5% at 95%"),
    (("iops", "2%", ["all"], [math.inf], [False], "timeout", 30.0),
     "iops not attained by the timeout (30s): all undefined (window mean 0) vs limit 2%"),
])
def test_measure_cause(args: tuple[object, ...], text: str) -> None:
    assert measure_cause(*args) == text  # type: ignore[arg-type]


def test_measure_cause_without_a_why_and_none_marked() -> None:
    """No ``why``: no parenthesis; no instance marked failing: every instance is shown."""
    assert measure_cause("bw", "1%", ["a", "b"], [0.5, 0.25], [True, True], "", None) == (
        "bw not attained: a 0.5%; b 0.25% vs limit 1%")


def test_measure_cause_of_a_step_that_ended_before_a_full_window() -> None:
    """Stopped before the first full window: no value to show, and it says so."""
    assert measure_cause("accuracy", "5% at 95%", ["all"], [NAN], [False], "not finished",
                         None, window=False) == (
        "accuracy not attained (not finished): no full window fitted (limit 5% at 95%)")
