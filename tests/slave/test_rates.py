"""``tests.slave.rates.assert_kept``: counts a late loop moved over a boundary pass; a rate
off, I/Os lost or added, do not."""

from __future__ import annotations

import pytest

from tests.slave.rates import assert_kept


@pytest.mark.parametrize(("gots", "wants", "iops", "poisson", "kept"), [
    ([2000, 2000], [2000, 2000], 10_000, False, True),
    # 300 I/Os (30 ms at 10,000 IOPS) moved over the first boundary: kept
    ([1700, 2300], [2000, 2000], 10_000, False, True),
    # 400 moved (40 ms): beyond a late loop
    ([1600, 2400], [2000, 2000], 10_000, False, False),
    # a subinterval that leads at the window's start (the one before it was late): kept
    ([2300, 1700, 2000], [2000, 2000, 2000], 10_000, False, True),
    # 10 % short all along: the trail grows past what lateness explains
    ([1800, 1800, 1800], [2000, 2000, 2000], 10_000, False, False),
    # 3 % over throughout, at a low rate: lateness never adds I/Os
    ([206, 206, 206, 206], [200, 200, 200, 200], 1000, False, True),
    ([230, 230, 230, 230], [200, 200, 200, 200], 1000, False, False),
    # rates changed at boundaries: the allowance is the highest rate's so far
    ([700, 1700], [800, 1600], [4000, 8000], False, True),
    ([400, 1600], [800, 1600], [4000, 8000], False, False),
    # Poisson arrivals spread by five standard deviations of the count so far
    ([500, 300], [400, 400], 2000, False, False),
    ([500, 300], [400, 400], 2000, True, True),
])
def test_counts_kept(gots: list[int], wants: list[float], iops: float | list[float],
                     poisson: bool, kept: bool) -> None:
    if kept:
        assert_kept(gots, wants, iops, poisson=poisson)
    else:
        with pytest.raises(AssertionError, match="counts not kept: 0: "):
            assert_kept(gots, wants, iops, poisson=poisson)


def test_counts_and_rates_of_different_lengths_are_a_mistake_of_the_test() -> None:
    with pytest.raises(AssertionError):
        assert_kept([1, 2], [1.0], 10)
    with pytest.raises(AssertionError):
        assert_kept([1, 2], [1.0, 2.0], [10.0])
