"""How the compiled loop's max-iops waits choose between looking first and blocking at once
(``ivy_loop.c``: ``await_choose``, ``await_resume``), driven turn by turn through the
functions the object exports for the tests: the trial's order, the choice by completions
per ns, looking's handicap, the margin to change, the holds, and the time spent in Python
between runs."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import pytest

from slave.engine import compiled_loop as pk
from slave.engine.layout import LoopArgs
from tests.slave.test_engine_compiled_loop import kernel_function, needs_cc

LOOK, BLOCK = 0, 1
TRIAL_NS, HOLD_NS, HOLD_MAX_NS = 10_000, 100_000, 400_000
INT64_MAX = (1 << 63) - 1


def _args(trials: int = 4, look_pct: int = 0) -> LoopArgs:
    a = LoopArgs()
    a.await_trial_ns, a.await_trials = TRIAL_NS, trials
    a.await_hold_ns, a.await_hold_max_ns, a.await_switch_pct = HOLD_NS, HOLD_MAX_NS, 2
    a.await_look_pct = look_pct
    return a


@functools.cache
def _choose_fn() -> Any:
    assert pk.available(), pk.why_not()
    fn = pk._lib.ivy_await_choose
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int64], ctypes.c_int64
    return fn


def _choose(a: LoopArgs, now: int) -> int:
    return int(_choose_fn()(a.address, now))


def _trial(a: LoopArgs, now: int, turns: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """One trial from ``now``: each turn lasts its ns and completes its I/Os, and the loop
    asks for the way at every turn's start and at the trial's end (a turn longer than
    ``TRIAL_NS``: no wait came nearer its end). The ways of the turns, then the way kept (the
    trial's end is ``a.await_from``)."""
    ways = []
    for took, did in turns:
        ways.append(_choose(a, now))
        # within a turn: no change, no count
        assert _choose(a, now + min(took, TRIAL_NS) - 1) == ways[-1]
        a.done += did
        now += took
    return ways, _choose(a, now)


@needs_cc
def test_a_trial_takes_turns_look_block_block_look() -> None:
    a = _args(trials=8)
    ways, _ = _trial(a, 5_000, [(TRIAL_NS, 100)] * 8)
    assert ways == [LOOK, BLOCK, BLOCK, LOOK, LOOK, BLOCK, BLOCK, LOOK]
    assert a.await_until == 5_000 + 8 * TRIAL_NS + HOLD_NS  # the hold after it


# each trial's four turns (look, block, block, look) as (ns, completions); the way kept and
# the hold after each trial
_FASTER = [(TRIAL_NS, 100), (TRIAL_NS, 110), (TRIAL_NS, 110), (TRIAL_NS, 100)]
_SLOWER = [(TRIAL_NS, 110), (TRIAL_NS, 100), (TRIAL_NS, 100), (TRIAL_NS, 110)]


@needs_cc
@pytest.mark.parametrize(("trials", "kept", "holds"), [
    pytest.param([_FASTER], [BLOCK], [HOLD_NS], id="blocking completes more"),
    pytest.param([_SLOWER], [LOOK], [HOLD_NS], id="looking completes 10 % more"),
    pytest.param([[(TRIAL_NS, 101), (TRIAL_NS, 100), (TRIAL_NS, 100), (TRIAL_NS, 101)]],
                 [BLOCK], [HOLD_NS], id="looking 1 % more: blocking, as at first"),
    pytest.param([[(TRIAL_NS, 100)] * 4], [BLOCK], [HOLD_NS], id="a tie blocks"),
    # per ns, not per turn: looking's turns ran twice as long and completed 200 each
    pytest.param([[(2 * TRIAL_NS, 200), (TRIAL_NS, 110), (TRIAL_NS, 110), (2 * TRIAL_NS, 200)]],
                 [BLOCK], [HOLD_NS], id="per ns, not per turn"),
    pytest.param([_FASTER] * 4, [BLOCK] * 4, [HOLD_NS, 2 * HOLD_NS, 4 * HOLD_NS, HOLD_MAX_NS],
                 id="the same choice holds twice as long, up to the most"),
    pytest.param([_FASTER, _FASTER, _SLOWER], [BLOCK, BLOCK, LOOK],
                 [HOLD_NS, 2 * HOLD_NS, HOLD_NS], id="a change holds as at first"),
    pytest.param([_SLOWER, [(TRIAL_NS, 100), (TRIAL_NS, 101), (TRIAL_NS, 101), (TRIAL_NS, 100)]],
                 [LOOK, LOOK], [HOLD_NS, 2 * HOLD_NS],
                 id="looking kept: blocking 1 % more does not change it"),
    pytest.param([_SLOWER, _FASTER], [LOOK, BLOCK], [HOLD_NS, HOLD_NS],
                 id="looking kept: blocking 10 % more changes it"),
])
def test_the_way_that_completed_more_per_ns_is_kept(trials: list[list[tuple[int, int]]],
                                                    kept: list[int], holds: list[int]) -> None:
    a = _args()
    now = 1_000
    for turns, want, hold in zip(trials, kept, holds, strict=True):
        ways, way = _trial(a, now, turns)
        assert ways == [LOOK, BLOCK, BLOCK, LOOK]
        assert (way, a.await_held) == (want, hold)
        end = a.await_from
        assert a.await_until == end + hold
        assert _choose(a, end + hold - 1) == want  # held to its end
        now = end + hold  # the next trial starts at the hold's end


def _looking(pct: int) -> list[tuple[int, int]]:
    """A trial's turns (look, block, block, look) where looking completed ``pct`` % more."""
    return [(TRIAL_NS, 100 + pct), (TRIAL_NS, 100), (TRIAL_NS, 100), (TRIAL_NS, 100 + pct)]


@needs_cc
@pytest.mark.parametrize(("look_pct", "trials", "kept"), [
    # from blocking, looking must complete (1 + 5 %) x (1 + 2 %), 7.1 %, more
    pytest.param(5, [_looking(6)], [BLOCK], id="looking 6 % more: blocking"),
    pytest.param(0, [_looking(6)], [LOOK], id="without the bias, looking 6 % more: looking"),
    pytest.param(5, [_looking(8)], [LOOK], id="looking 8 % more: looking"),
    # once looking, it is kept while it completes more than 1.05 / 1.02, 2.9 %, more
    pytest.param(5, [_looking(8), _looking(4)], [LOOK, LOOK],
                 id="looking kept while 4 % more"),
    pytest.param(5, [_looking(8), _looking(2)], [LOOK, BLOCK],
                 id="looking 2 % more: blocking again"),
])
def test_looking_counts_await_look_pct_less(look_pct: int, trials: list[list[tuple[int, int]]],
                                            kept: list[int]) -> None:
    a = _args(look_pct=look_pct)
    now = 1_000
    for turns, want in zip(trials, kept, strict=True):
        _, way = _trial(a, now, turns)
        assert way == want
        now = a.await_until


@needs_cc
def test_a_trial_counts_only_its_own_turns() -> None:
    # a trial after a hold starts from nothing: the first trial's 1,000 looking completions
    # do not weigh in the second
    a = _args()
    _, way = _trial(a, 0, [(TRIAL_NS, 1000), (TRIAL_NS, 100), (TRIAL_NS, 100), (TRIAL_NS, 100)])
    assert way == LOOK
    _, way = _trial(a, a.await_until, _FASTER)
    assert (way, a.look_done, a.block_done) == (BLOCK, 200, 220)


@needs_cc
def test_without_trials_the_waits_look_first_always() -> None:
    a = _args(trials=0)
    assert [_choose(a, t) for t in (0, 10**9, 10**15)] == [LOOK] * 3
    assert a.await_until == INT64_MAX


@needs_cc
@pytest.mark.parametrize(("returned", "until", "now", "want_from", "want_until"), [
    pytest.param(5_000, 8_000, 9_000, 1_000 + 4_000, 8_000 + 4_000,
                 id="4 us in Python: the turn ends 4 us later"),
    pytest.param(0, 8_000, 9_000, 1_000, 8_000, id="the first run: nothing to move"),
    pytest.param(5_000, 0, 9_000, 1_000, 0, id="no way chosen yet"),
    pytest.param(5_000, INT64_MAX, 9_000, 1_000, INT64_MAX, id="no trials"),
])
def test_the_time_between_runs_counts_in_no_turn(returned: int, until: int, now: int,
                                                  want_from: int, want_until: int) -> None:
    a = _args()
    a.returned_ns, a.await_from, a.await_until = returned, 1_000, until
    kernel_function("ivy_await_resume", ctypes.c_int64)(a.address, now)
    assert (a.await_from, a.await_until) == (want_from, want_until)
