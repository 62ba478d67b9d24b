"""master.fiologs.repair: the client/server shape test decides on a bounded head of each file."""

from __future__ import annotations

import numpy as np

from master.fiologs.parse import HistBlock
from master.fiologs.repair import DETECT_ROWS, HOLD_ROWS, ShapeDetector


def block(dirs: list[int], growing: bool) -> HistBlock:
    n = len(dirs)
    counts = np.zeros((n, 4), dtype=np.int64)
    for k in range(n):
        counts[k, 1] = 10 * (k // 2 + 1) if growing else 10
    return HistBlock.from_dense(np.arange(1, n + 1) * 1000, np.array(dirs),
                                np.arange(1, n + 1), counts)


def test_one_direction_is_judged_without_waiting_for_the_others() -> None:
    detector = ShapeDetector()
    detector.feed(block([1] * (HOLD_ROWS - 1), growing=True))
    assert not detector.full  # reads and trims might still come
    detector.feed(block([1], growing=True))
    assert detector.full  # a bounded head: the reader stops holding blocks back
    assert detector.verdict()


def test_all_directions_end_the_wait_early_and_flat_rows_are_not_client_shaped() -> None:
    detector = ShapeDetector()
    detector.feed(block([0, 1, 2] * DETECT_ROWS, growing=False))
    assert detector.full
    assert not detector.verdict()


def test_a_direction_still_short_of_rows_keeps_the_wait_going() -> None:
    detector = ShapeDetector()
    detector.feed(block([0] * HOLD_ROWS + [1] * (DETECT_ROWS - 1), growing=True))
    assert not detector.full
    detector.feed(block([1], growing=True))
    assert detector.full
