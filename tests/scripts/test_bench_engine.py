"""Tests for scripts/bench_engine_impl's runs taken again while the host took the CPUs
(``tries_of``, ``least_stolen``): table-driven, on scripted CPU ticks."""

from __future__ import annotations

import itertools

import pytest

from scripts.bench_engine_impl import Result, least_stolen, tries_of


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
    # 1,000 ticks of the machine's CPU time per run, of which the host took steal % (the
    # ticks move only while a run measures, as /proc/stat's counters between two reads)
    counter = itertools.count(1)
    clock = {"total": 0, "steal": 0}

    def ticks() -> tuple[int, int]:
        return clock["total"], clock["steal"]

    def measure() -> Result:
        n = next(counter)
        clock["total"] += 1000
        clock["steal"] += round(10 * steals[n - 1])
        return _result(n)

    tries = tries_of(measure, steal_max / 100, retries, ticks)
    assert [int(r.iops) for r, _ in tries] == list(range(1, runs + 1))
    assert [st for _, st in tries] == pytest.approx([s / 100 for s in steals[:runs]])
    res, steal = least_stolen(tries)
    assert int(res.iops) == kept and steal == pytest.approx(steals[kept - 1] / 100)
