"""Tests for scripts/bench_engine_impl's runs taken again while the host took the CPUs
(``tries_of``, ``least_stolen``) and the steal's share of the CPUs' wanted time
(``busy_and_steal``): table-driven, on scripted CPU ticks and /proc/stat lines."""

from __future__ import annotations

import itertools

import pytest

from scripts.bench_engine_impl import Result, busy_and_steal, idle_share, least_stolen, tries_of


def _result(n: int) -> Result:
    return Result(iops=float(n), mean_us=0.0, p50_us=0.0, p99_us=0.0, usr_us_per_io=0.0,
                  blk_mean_us=0.0, cpu_us_per_io=0.0)


# (steal of each run the case would make, in %; --steal-max %; --retries;
#  the runs made; the run kept, from 1)
CASES = [
    ("quiet: one run", [0.2, 0.0], 5.0, 1, 1, 1),
    ("at the limit: one run", [5.0, 0.0], 5.0, 1, 1, 1),
    ("stolen, then quiet: the quiet one", [24.0, 1.0], 5.0, 1, 2, 2),
    ("stolen twice: the less stolen", [12.0, 30.0, 0.0], 5.0, 1, 2, 1),
    ("equals: the first", [10.0, 10.0], 5.0, 1, 2, 1),
    ("two retries, stolen until the last", [12.0, 30.0, 7.0], 5.0, 2, 3, 3),
    ("two retries, quiet at the second", [12.0, 2.0, 0.0], 5.0, 2, 2, 2),
    ("no retries", [40.0, 0.0], 5.0, 0, 1, 1),
    ("no limit", [40.0, 0.0], 100.0, 1, 1, 1),
]


@pytest.mark.parametrize(("steals", "steal_max", "retries", "runs", "kept"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_stolen_run_is_taken_again_and_the_least_stolen_kept(
        steals: list[float], steal_max: float, retries: int, runs: int, kept: int) -> None:
    # 1,000 ticks of the time the CPUs wanted to run per run, of which the host took steal %
    # (the ticks move only while a run measures, as /proc/stat's counters between two reads)
    counter = itertools.count(1)
    clock = {"busy": 0, "steal": 0}

    def ticks() -> tuple[int, int]:
        return clock["busy"], clock["steal"]

    def measure() -> Result:
        n = next(counter)
        clock["busy"] += 1000
        clock["steal"] += round(10 * steals[n - 1])
        return _result(n)

    tries = tries_of(measure, steal_max / 100, retries, ticks)
    assert [int(r.iops) for r, _ in tries] == list(range(1, runs + 1))
    assert [st for _, st in tries] == pytest.approx([s / 100 for s in steals[:runs]])
    res, steal = least_stolen(tries)
    assert int(res.iops) == kept and steal == pytest.approx(steals[kept - 1] / 100)


# (/proc/stat's first line; the ticks the CPUs wanted to run; the steal)
STAT_LINES = [
    ("idle", "cpu  0 0 0 1000 0 0 0 0 0 0", 0, 0),
    ("busy, no steal", "cpu  600 10 300 1000 50 20 20 0 0 0", 950, 0),
    # the steal counts as wanted time; guest time (the last two) is inside user already
    ("stolen", "cpu  600 0 300 1000 50 0 0 100 40 0", 1000, 100),
    ("a kernel without the guest fields", "cpu  100 0 100 500 0 0 0 50", 250, 50),
]


@pytest.mark.parametrize(("line", "busy", "steal"), [c[1:] for c in STAT_LINES],
                         ids=[c[0] for c in STAT_LINES])
def test_steal_is_a_share_of_the_time_the_cpus_wanted_to_run(line: str, busy: int,
                                                             steal: int) -> None:
    assert busy_and_steal(line) == (busy, steal)


# (/proc/stat's first line before and after; the share of all the CPUs' time idle between, %)
IDLE_LINES = [
    ("all idle", "cpu  0 0 0 1000 0 0 0 0 0 0", "cpu  0 0 0 1200 0 0 0 0 0 0", 100.0),
    ("all busy", "cpu  100 0 100 1000 0 0 0 0", "cpu  250 0 150 1000 0 0 0 0", 0.0),
    # iowait is idle: no task wanted the CPU; steal and irq are not
    ("a fifth idle", "cpu  0 0 0 0 0 0 0 0 0 0", "cpu  300 0 300 100 100 0 50 150 9 0", 20.0),
    ("no tick between", "cpu  5 0 5 5 0 0 0 0", "cpu  5 0 5 5 0 0 0 0", 0.0),
]


@pytest.mark.parametrize(("before", "after", "idle"), [c[1:] for c in IDLE_LINES],
                         ids=[c[0] for c in IDLE_LINES])
def test_idle_is_a_share_of_all_the_cpus_time(before: str, after: str, idle: float) -> None:
    assert idle_share(before, after) == pytest.approx(idle)
