"""The engine loop's waits (``slave.engine.clock``'s ``Waiter`` and ``timed_wait_ns``): how
long a paced wait blocks, and how the max-iops loops' wait looks for completions before it
blocks, and stops looking behind a slow device."""

from __future__ import annotations

import pytest

from slave.engine import clock as engine_clock
from slave.engine import tuning
from slave.engine.tuning import LONG_WAIT_NS, SLEEP_MIN_NS, WAKE_EARLY_NS


@pytest.mark.parametrize(
    ("left", "wait"),
    [
        (SLEEP_MIN_NS, SLEEP_MIN_NS),  # short waits: all of it (the CPU polls, wakes on time)
        (LONG_WAIT_NS, LONG_WAIT_NS),
        (LONG_WAIT_NS + 1, LONG_WAIT_NS + 1 - WAKE_EARLY_NS),  # long: wake early
        (1_000_000, 1_000_000 - WAKE_EARLY_NS),
        (2_000_000_000, 2_000_000_000 - WAKE_EARLY_NS),
    ],
)
def test_a_long_timed_wait_ends_early(left: int, wait: int) -> None:
    assert engine_clock.timed_wait_ns(left) == wait


def test_what_an_early_wake_up_leaves_is_still_a_real_wait() -> None:
    assert SLEEP_MIN_NS <= WAKE_EARLY_NS <= LONG_WAIT_NS - SLEEP_MIN_NS


class _TestClock:
    """A clock of the test's own for ``engine_clock.Waiter`` (1 us per reading, moved on by the
    test's fake reaps; a yield does nothing), so a stalled or busy machine cannot end a spin
    early or make a wait long."""

    virtual = False

    def __init__(self) -> None:
        self.t = [10**12]

    def now_ns(self) -> int:
        self.t[0] += 1_000
        return self.t[0]

    def sleep_until(self, t_ns: int) -> None:
        self.t[0] = max(self.t[0], t_ns)

    def idle(self, until_ns: int) -> None:
        return None

    def looked(self, until_ns: int) -> None:
        return None


def _waiter_clock() -> tuple[engine_clock.Waiter, list[int]]:
    """A ``Waiter`` on a ``_TestClock``, and the clock's time (a list the test moves)."""
    clock = _TestClock()
    return engine_clock.Waiter(clock), clock.t


@pytest.mark.parametrize(
    ("mean_ns", "polls", "reaped", "wake_in_ns", "want", "reaps", "spun"),
    [
        # recent waits short: a completion within the spin is found by looking, no reap
        (0, [0, 0, 0, 0, 5], 0, 1_000_000_000, 5, 0, True),
        # none by looking: block after the spin, for what is left until wake
        (0, [], 3, 1_000_000_000, 3, 1, True),
        # none at all: the blocking reap returns empty until wake has passed
        (0, [], 0, 2 * tuning.AWAIT_SPIN_NS, 0, None, True),
        # wake nearer than the spin: look until it passes, never block
        (0, [], 7, tuning.AWAIT_SPIN_NS // 2, 0, 0, True),
        # wake already passed: nothing
        (0, [], 7, -1, 0, 0, True),
        # recent waits longer than the look but under its gate (a loaded host, whose blocked
        # waits read the wake-up too): still looks first
        (tuning.AWAIT_SPIN_NS, [0, 0, 5], 3, 1_000_000_000, 5, 0, True),
        # recent waits long (a slow device): block at once, no looking
        (tuning.AWAIT_SPIN_GATE_NS, [0, 0, 5], 3, 1_000_000_000, 3, 1, False),
        (10 * tuning.AWAIT_SPIN_GATE_NS, [], 3, 1_000_000_000, 3, 1, False),
    ],
)
def test_a_max_iops_wait_looks_for_a_while_before_it_blocks(
    mean_ns: int, polls: list[int], reaped: int, wake_in_ns: int, want: int,
    reaps: int | None, spun: bool,
) -> None:
    waiter, clock = _waiter_clock()  # a blocking reap that finds nothing moves it on
    script = list(polls)
    reap_calls: list[tuple[int, int, int]] = []  # (min_nr, timeout, ns since the wait began)

    def poll() -> int:
        return script.pop(0) if script else 0

    def reap(min_nr: int, timeout_ns: int) -> int:
        reap_calls.append((min_nr, timeout_ns, clock[0] - t0))
        if not reaped:
            clock[0] += timeout_ns
        return reaped

    waiter.mean_ns = mean_ns
    t0 = clock[0]
    wake = t0 + wake_in_ns
    assert waiter.wait(poll, reap, wake) == want
    if reaps is not None:
        assert len(reap_calls) == reaps
    for min_nr, timeout_ns, since in reap_calls:
        assert min_nr == 1
        if spun:  # only after looking for the spin's length
            assert since >= tuning.AWAIT_SPIN_NS
            assert 0 < timeout_ns <= wake_in_ns - tuning.AWAIT_SPIN_NS
        else:  # at once: the polls were never looked at
            assert script == polls
    if want == 0 and wake_in_ns > 0:
        assert clock[0] >= wake
    if spun and want and not reaps:  # found by looking, well within the spin
        assert clock[0] - t0 < tuning.AWAIT_SPIN_NS


def test_a_max_iops_wait_stops_looking_behind_a_slow_device_and_starts_again() -> None:
    waiter, clock = _waiter_clock()
    looks = [0]
    ready = [0]  # what a look finds

    def poll() -> int:
        looks[0] += 1
        return ready[0]

    def slow_reap(min_nr: int, timeout_ns: int) -> int:
        clock[0] += 2 * tuning.AWAIT_SPIN_GATE_NS  # a completion long after the spin
        return 1

    far = clock[0] + 10**12
    for _ in range(16):
        waiter.wait(poll, slow_reap, far)
    assert waiter.mean_ns >= tuning.AWAIT_SPIN_GATE_NS
    looks[0] = 0
    waiter.wait(poll, slow_reap, far)
    assert looks[0] == 0  # blocked at once

    def fast_reap(min_nr: int, timeout_ns: int) -> int:
        return 1  # the device is fast again: the blocking wait returns at once

    ready[0] = 1  # ... and a look finds a completion
    for _ in range(64):
        waiter.wait(poll, fast_reap, far)
    assert waiter.mean_ns < tuning.AWAIT_SPIN_NS // 4
    ready[0] = 0
    looks[0] = 0
    waiter.wait(poll, slow_reap, far)
    assert looks[0] > 0  # looks first again
