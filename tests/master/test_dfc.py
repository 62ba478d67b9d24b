"""master.analysis.dfc: the controller's arithmetic by hand, and closed-loop runs against simulated
plants (linear, a knee-shaped p99 curve, an M/M/1-like p99 curve) with measurement noise and
with or without a one-subinterval actuation delay.

Figures measured when these tests were written (5 seeds each, 5 % lognormal noise on the
measured p99, start at 1000 IOPS, target p99 = 2 ms): subintervals to settle (3 in a row within
+-10 %) were linear 9-12 / 10-14 (no delay / one-subinterval delay), knee 10-13 / 13-17, M/M/1
9-14 / 17-28 (run with -s to print them); after settling the true p99 stayed within +-10 % of
the target in >= 99 % of subintervals. The bounds asserted below leave a little room above
those figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from master.analysis.dfc import DfcBank, PidController, PidGains
from protocol.errors import ConfigError

Plant = Callable[[float], float]


def linear_p99_ms(iops: float) -> float:
    return 0.5 + 2e-5 * iops  # target 2 ms at 75 000 IOPS


def knee_p99_ms(iops: float) -> float:
    return 0.3 + 1.7 * (iops / 70000) ** 8  # flat, then a wall: 2 ms at 70 000 IOPS


def mm1_p99_ms(iops: float) -> float:
    """p99 response time of an M/M/1 queue with 0.1 ms service time: ln(100) * S / (1 - rho);
    past saturation the queue grows without bound (modelled as 460 ms)."""
    rho = iops / 100000
    return math.log(100) * 0.1 / (1 - rho) if rho < 0.999 else 460.0


EXACT_IOPS: dict[Plant, float] = {linear_p99_ms: 75000.0, knee_p99_ms: 70000.0,
              mm1_p99_ms: 100000 * (1 - math.log(100) * 0.1 / 2)}


@dataclass
class Run:
    settle: int | None
    iops: list[float]
    true_metric: list[float]
    measured: list[float]


def simulate(plant: Plant, ctrl: PidController, n: int = 150, delay: int = 0,
             noise: float = 0.05, seed: int = 0, start_iops: float = 1000.0,
             plant_after: tuple[int, Plant] | None = None, spike_every: int = 0) -> Run:
    """Closed loop: each subinterval runs at ``u``; the controller sees the noisy metric and
    ``u``; its command takes effect ``delay`` subintervals later. With ``spike_every`` every
    such subinterval reads 4x too high (a stall), whatever the IOPS."""
    rng = np.random.default_rng(seed)
    u = start_iops
    pending: list[float] = []
    run = Run(None, [], [], [])
    for k in range(n):
        if plant_after is not None and k >= plant_after[0]:
            plant = plant_after[1]
        y_true = plant(u)
        y = y_true * math.exp(noise * rng.normal()) if noise else y_true
        if spike_every and k % spike_every == spike_every - 1:
            y *= 4
        move = ctrl.step(y, u)
        run.iops.append(u)
        run.true_metric.append(y_true)
        run.measured.append(y)
        if run.settle is None and ctrl.settled():
            run.settle = k
        pending.append(move.new_iops)
        if len(pending) > delay:
            u = pending.pop(0)
    return run


CLOSED_LOOP = [
    # id (with the settle bound), plant, delay, max subintervals to settle
    ("linear-delay0-settles-within-15", linear_p99_ms, 0, 15),
    ("linear-delay1-settles-within-18", linear_p99_ms, 1, 18),
    ("knee-delay0-settles-within-20", knee_p99_ms, 0, 20),
    ("knee-delay1-settles-within-20", knee_p99_ms, 1, 20),
    ("mm1-delay0-settles-within-18", mm1_p99_ms, 0, 18),
    ("mm1-delay1-settles-within-32", mm1_p99_ms, 1, 32),
]


@pytest.mark.parametrize(("plant", "delay", "bound"), [c[1:] for c in CLOSED_LOOP],
                         ids=[c[0] for c in CLOSED_LOOP])
def test_closed_loop_p99_target(plant: Plant, delay: int, bound: int) -> None:
    target = 2.0
    settles = []
    for seed in range(5):
        ctrl = PidController(target, low_iops=100, high_iops=1e6)
        run = simulate(plant, ctrl, delay=delay, seed=seed)
        assert run.settle is not None, f"seed {seed}: never settled"
        settles.append(run.settle)
        after = np.array(run.true_metric[run.settle + 1:]) / target - 1
        measured = np.array(run.measured[run.settle + 1:]) / target - 1
        assert np.mean(np.abs(after) <= 0.10) >= 0.97, f"seed {seed}"
        assert np.max(np.abs(after)) <= 0.20, f"seed {seed}"
        assert np.mean(np.abs(measured) <= 0.10) >= 0.85, f"seed {seed}"
        iops_after = np.array(run.iops[run.settle + 1:])
        assert abs(np.median(iops_after) / EXACT_IOPS[plant] - 1) < 0.03
    assert max(settles) <= bound, settles
    print(f"{plant.__name__} delay={delay}: subintervals to settle {settles}")


@pytest.mark.parametrize("plant", [linear_p99_ms, knee_p99_ms, mm1_p99_ms])
def test_noise_free_converges_to_exact_iops(plant: Plant) -> None:
    ctrl = PidController(2.0, low_iops=100, high_iops=1e6)
    run = simulate(plant, ctrl, n=60, noise=0.0)
    assert run.iops[-1] == pytest.approx(EXACT_IOPS[plant], rel=1e-3)
    assert run.true_metric[-1] == pytest.approx(2.0, rel=1e-3)


def test_anti_windup_leaves_the_bound_at_once() -> None:
    """For 60 subintervals the target is unreachable (p99 flat at 0.5 ms): the controller sits
    at high_iops. Then the system gets slower (2 ms is now reached at 50 000 IOPS): the first
    move must already go down, and it settles quickly, with nothing wound up to unwind."""
    ctrl = PidController(2.0, low_iops=100, high_iops=200000)

    def slow(iops: float) -> float:
        return 0.5 + 3e-5 * iops

    run = simulate(lambda iops: 0.5, ctrl, n=120, noise=0.02, plant_after=(60, slow))
    assert all(u == 200000 for u in run.iops[10:61])
    assert run.iops[61] < 200000
    assert run.iops[62] < run.iops[61]
    in_band = [abs(m / 2 - 1) <= 0.1 for m in run.true_metric]
    first = next(k for k in range(61, 120) if all(in_band[k:k + 3]))
    assert first - 60 <= 10
    assert abs(run.iops[-1] / 50000 - 1) < 0.05


def test_saturates_at_low_bound_when_target_is_below_reach() -> None:
    ctrl = PidController(0.1, low_iops=1000, high_iops=1e6)
    u = 20000.0
    for _ in range(20):
        move = ctrl.step(linear_p99_ms(u), u)
        u = move.new_iops
    assert u == 1000 and move.saturated and not ctrl.settled()


def test_hold_on_missing_measurement() -> None:
    ctrl = PidController(2.0, low_iops=10, high_iops=1e6)
    first = ctrl.step(1.0, 1000)
    held = ctrl.step(math.nan, first.new_iops)
    assert held.held and held.new_iops == first.new_iops and math.isnan(held.error)
    assert ctrl.step(1.0, 0).held


def test_pid_terms_by_hand() -> None:
    gains = PidGains(kp=0.5, ki=0.25, kd=0.1)
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6, gains=gains, max_step_ratio=10)
    m1 = ctrl.step(1.0, 100)
    e1 = math.log(2.0)
    assert (m1.p, m1.d, m1.comp) == (0.0, 0.0, 0.0)
    assert m1.i == pytest.approx(0.25 * e1)
    assert m1.new_iops == pytest.approx(100 * math.exp(0.25 * e1))
    assert m1.error == 1.0 and m1.gains == gains
    m2 = ctrl.step(1.6, m1.new_iops)
    e2 = math.log(2.0 / 1.6)
    assert m2.p == pytest.approx(0.5 * (e2 - e1))
    assert m2.i == pytest.approx(0.25 * e2)
    assert m2.d == pytest.approx(0.1 * (e2 - 2 * e1 + e1))
    assert m2.new_iops == pytest.approx(m1.new_iops * math.exp(m2.p + m2.i + m2.d))
    m3 = ctrl.step(2.2, m2.new_iops)
    e3 = math.log(2.0 / 2.2)
    assert m3.d == pytest.approx(0.1 * (e3 - 2 * e2 + e1))


def test_delay_compensation_by_hand() -> None:
    """The measured subinterval ran at 1000 IOPS but the last command was 2000: the move starts
    from 2000 and the compensation removes what that command already did. The measurement says
    the target is at 4000 (elasticity 1), so with ki = 0.5 the command goes half way in log
    terms from 2000 towards 4000, i.e. 2828, instead of doubling again to 4000."""
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6, gains=PidGains(ki=0.5),
                         initial_elasticity=1.0)
    m1 = ctrl.step(0.5, 1000)  # asks for 1000 * exp(0.5 ln 4) = 2000
    assert m1.new_iops == pytest.approx(2000)
    m2 = ctrl.step(0.5, 1000)  # same measurement, the command has not taken effect yet
    assert m2.comp == pytest.approx(0.5 * math.log(1000 / 2000))
    assert m2.new_iops == pytest.approx(2000 * math.exp(m2.comp + m2.i))
    assert m2.new_iops == pytest.approx(math.sqrt(2000 * 4000))


def test_step_limit() -> None:
    ctrl = PidController(100.0, low_iops=1, high_iops=1e9, max_step_ratio=2.0)
    move = ctrl.step(0.01, 1000)
    assert move.limited and move.new_iops == pytest.approx(2000)
    move = ctrl.step(1e6, 2000)
    assert move.limited and move.new_iops == pytest.approx(1000)


def test_fixed_gains_settle_and_are_not_adapted() -> None:
    ctrl = PidController(2.0, low_iops=100, high_iops=1e6, gains=PidGains(kp=0.0, ki=0.3))
    run = simulate(mm1_p99_ms, ctrl, n=200, noise=0.03)
    assert run.settle is not None and run.settle <= 60
    assert ctrl.gains() == PidGains(kp=0.0, ki=0.3)


def test_decreasing_metric() -> None:
    """A metric that falls as IOPS rise (direction=-1): mean time between I/Os, 1e6/IOPS us."""
    ctrl = PidController(50.0, low_iops=10, high_iops=1e6, direction=-1)
    run = simulate(lambda iops: 1e6 / iops, ctrl, n=60, noise=0.02)
    assert run.settle is not None and run.settle <= 15
    assert run.iops[-1] == pytest.approx(20000, rel=0.05)


@pytest.mark.parametrize(("direction", "expected"), [(1, 2000.0), (-1, 500.0)])
def test_zero_reading_moves_a_full_step(direction: int, expected: float) -> None:
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6, direction=direction)
    assert ctrl.step(0.0, 1000).new_iops == pytest.approx(expected)


def test_aggressiveness_shrinks_when_oscillating() -> None:
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6)
    for measured in (1.0, 3.0, 1.0, 3.0):
        ctrl.step(measured, 1000)
    assert ctrl.aggressiveness < 0.5


@pytest.mark.parametrize(
    ("measured", "tolerance", "count", "settled_after"),
    [([2.0, 2.1, 1.9], 0.1, 3, [False, False, True]),
     ([2.0, 2.5, 2.0, 2.0, 2.0], 0.1, 3, [False, False, False, False, True]),
     ([2.0, 2.19, 1.81], 0.1, 2, [False, True, True]),
     ([2.0, 2.3, 2.0], 0.2, 1, [True, True, True]),
     ([3.0, 3.0, 3.0], 0.1, 1, [False, False, False])],
)
def test_settled_table(measured: list[float], tolerance: float, count: int,
                       settled_after: list[bool]) -> None:
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6, tolerance=tolerance, settle_count=count)
    got = []
    for y in measured:
        ctrl.step(y, 1000)
        got.append(ctrl.settled())
    assert got == settled_after


def test_bank_cluster_and_per_host() -> None:
    bank = DfcBank(["host=a", "host=b"], "service_time_p99_ms", target=2.0, low_iops=100,
                   high_iops=1e6)
    plants = {"host=a": mm1_p99_ms, "host=b": knee_p99_ms}
    iops = {"host=a": 1000.0, "host=b": 1000.0}
    rng = np.random.default_rng(1)
    settled_at = None
    for k in range(80):
        measured = {h: plants[h](iops[h]) * math.exp(0.05 * rng.normal()) for h in iops}
        rows = bank.step(k, measured, iops)
        assert [(r.subinterval, r.instance, r.metric) for r in rows] == [
            (k, "host=a", "service_time_p99_ms"), (k, "host=b", "service_time_p99_ms")]
        iops = {r.instance: r.move.new_iops for r in rows}
        if settled_at is None and bank.settled():
            settled_at = k
    assert settled_at is not None and settled_at <= 25
    assert iops["host=a"] == pytest.approx(EXACT_IOPS[mm1_p99_ms], rel=0.05)
    assert iops["host=b"] == pytest.approx(EXACT_IOPS[knee_p99_ms], rel=0.05)


@pytest.mark.parametrize(
    "make",
    [lambda: PidController(0, 1, 10),
     lambda: PidController(2, 10, 1), lambda: PidController(2, 0, 10),
     lambda: PidController(2, 1, 10, direction=0), lambda: PidController(2, 1, 10, tolerance=0),
     lambda: PidController(2, 1, 10, aggressiveness=2), lambda: PidGains(0, 0, 0),
     lambda: PidGains(ki=-1), lambda: DfcBank([], "IOPS", 1, 1, 2)],
)
def test_validation(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()



def test_one_spike_after_settling_is_held_and_a_confirmed_one_followed() -> None:
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6)
    run = simulate(linear_p99_ms, ctrl, n=40, noise=0.0)
    assert ctrl.settled()
    u = run.iops[-1]
    spike = ctrl.step(8.0, u)
    assert spike.held and spike.outlier and spike.new_iops == pytest.approx(u)
    assert spike.error == pytest.approx(-6.0) and spike.rel_error == pytest.approx(math.log(0.25))
    assert not ctrl.settled()
    back = ctrl.step(2.0, u)  # the next reading is normal again: the IOPS stay
    assert not back.held and back.new_iops == pytest.approx(u, rel=1e-6)
    assert ctrl.step(8.0, u).outlier  # another lone spike later: held too
    # the same again in the next subinterval: a real change, acted on at once
    again = ctrl.step(8.0, u)
    assert not again.held and not again.outlier and again.new_iops < u
    # ... and so is every further one while it lasts
    assert not ctrl.step(8.0, again.new_iops).held
    # a reading inside outlier_factor * tolerance (here 30 %) is never held
    ctrl2 = PidController(2.0, low_iops=1, high_iops=1e6)
    simulate(linear_p99_ms, ctrl2, n=40, noise=0.0)
    assert not ctrl2.step(2.5, u).held
    # None turns the rule off
    ctrl3 = PidController(2.0, low_iops=1, high_iops=1e6, outlier_factor=None)
    simulate(linear_p99_ms, ctrl3, n=40, noise=0.0)
    assert not ctrl3.step(8.0, u).held


def test_spikes_do_not_throw_a_settled_controller_off() -> None:
    """Every 12th subinterval reads 4x too high (a stall on a real system). Holding a lone
    spike keeps the true p99 in the band; acting on it costs several subintervals each time
    (measured when written: 99-100 % in the band with the hold, 66-72 % without, 5
    seeds)."""
    shares = {}
    for factor in (3.0, None):
        inside = []
        for seed in range(5):
            ctrl = PidController(2.0, low_iops=100, high_iops=1e6, outlier_factor=factor)
            run = simulate(mm1_p99_ms, ctrl, n=200, delay=1, seed=seed, spike_every=12)
            assert run.settle is not None
            after = np.array(run.true_metric[run.settle + 1:]) / 2.0 - 1
            inside.append(float(np.mean(np.abs(after) <= 0.10)))
        shares[factor] = min(inside)
    assert shares[3.0] >= 0.95, shares
    assert shares[3.0] > shares[None], shares


def test_outlier_factor_must_exceed_one() -> None:
    with pytest.raises(ConfigError, match="outlier_factor"):
        PidController(2, 1, 10, outlier_factor=1.0)


def test_a_far_reading_steepens_the_plant_estimate_only_until_the_next_one_disagrees() -> None:
    """Before settling (the spike hold does not apply yet) a spike's secant would steepen the
    estimate; the next secant, which leaves the spike out, decides whether that stands."""
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6)  # far = more than 30 % off 2.0
    ctrl.step(1.0, 10000)
    assert ctrl.step(1.1, 11000).elasticity == pytest.approx(1.0)  # secant 1.0: as before
    spike = ctrl.step(8.0, 12100)  # secant ln(8/1.1)/ln(1.1) = 20.8: steeper, bounded x3
    assert not spike.held and spike.elasticity == pytest.approx(3.0)
    # the next secant without the spike, to (11000, 1.1): ln(1.2/1.1)/ln(1.1) = 0.913, not
    # steeper than 1.0: back to 1.0, and the 0.913 blended in with weight 0.3
    after = ctrl.step(1.2, 12100)
    assert after.elasticity == pytest.approx(0.913 ** 0.3, rel=1e-3)
    # the spike is out of the estimate: the next secant reaches past it to (12100, 1.2)
    nxt = ctrl.step(1.3, 13310)  # ln(1.3/1.2)/ln(1.1) = 0.84, blended in again
    assert nxt.elasticity == pytest.approx(after.elasticity ** 0.7 * 0.84 ** 0.3, rel=1e-2)

    # a real knee: the far reading is followed by one that agrees, and the steeper estimate
    # stays (and steepens on)
    knee = PidController(2.0, low_iops=1, high_iops=1e6)
    knee.step(1.0, 10000)
    knee.step(1.1, 11000)
    assert knee.step(3.0, 12100).elasticity == pytest.approx(3.0)
    # without the 3.0 point: ln(4/1.1)/ln(1.21) = 6.8 > 1.0, confirmed; then the secant to the
    # 3.0 point, ln(4/3)/ln(1.1) = 3.02, is steeper again
    assert knee.step(4.0, 13310).elasticity == pytest.approx(3.02, rel=1e-2)

    # near the target a steeper secant is adopted for good at once (no second look)
    near = PidController(2.0, low_iops=1, high_iops=1e6)
    near.step(1.0, 10000)
    near.step(1.1, 11000)
    assert near.step(2.2, 12100).elasticity == pytest.approx(3.0)  # secant 7.3, bounded x3
    # a flat reading next does not undo it: it is only blended in
    assert near.step(2.21, 13310).elasticity > 2.0


def test_spikes_before_the_first_settle_do_not_stall_the_controller() -> None:
    """Every 10th subinterval from the start reads 4x too high. Each spike before the first
    settle used to steepen the plant estimate for good (two secants: to the spike and from
    it), after which the controller crawled, never to reach the band. Count the runs whose
    true p99 is within +-10 % in at least 90 % of their second half, over 16 seeds for each
    plant, with and without a one-subinterval delay. Measured when written: 95 of 96 (a
    spike every 8th: 90); with lone spikes counted as oscillation by the gain adaptation:
    91 (85); and with every steepening adopted for good as well: 77 (51)."""
    per_cell = {}
    for plant in (linear_p99_ms, knee_p99_ms, mm1_p99_ms):
        for delay in (0, 1):
            ok = 0
            for seed in range(16):
                ctrl = PidController(2.0, low_iops=100, high_iops=1e6)
                run = simulate(plant, ctrl, n=240, delay=delay, seed=seed, spike_every=10)
                inside = np.abs(np.array(run.true_metric[120:]) / 2.0 - 1) <= 0.10
                ok += bool(np.mean(inside) >= 0.9)
            per_cell[f"{plant.__name__} delay {delay}"] = ok
    assert sum(per_cell.values()) >= 92, per_cell
    assert min(per_cell.values()) >= 14, per_cell


@pytest.mark.parametrize(("readings", "aggressiveness"), [
    ([1.5, 8.0, 1.5], 0.5),  # +, a lone far spike -, +: not an oscillation, the gain stays
    ([1.5, 2.5, 1.5], 0.35),  # +, -, + all near: an oscillation, x0.7
    ([1.0, 8.0, 1.0], 0.35),  # +, -, + all far: an oscillation too (no lone spike), x0.7
    ([1.5, 8.0, 8.0, 1.5], 0.5),  # two far readings in a row are real: no sign change to cut on
])
def test_a_lone_spike_does_not_count_as_oscillation(readings: list[float],
                                                    aggressiveness: float) -> None:
    """Target 2.0: readings below it err +, above it -; "far" is more than 30 % off. The IOPS
    stay put so the plant estimate does not move, and only the sign rule acts."""
    ctrl = PidController(2.0, low_iops=1, high_iops=1e6)
    for y in readings:
        ctrl.step(y, 5000)
    assert ctrl.aggressiveness == pytest.approx(aggressiveness)
