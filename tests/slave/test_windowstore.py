"""WindowStore: what a slave keeps of a step for its measurement window, kept one by one (in
memory or spilled to a file) or folded as it comes; every window it gives equals adding the
subintervals up directly, and every window it cannot give exactly is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from protocol.batch import StatsBatch
from protocol.grouping import add_batches
from protocol.stats import WorkloadStats
from slave.windowstore import WindowError, WindowStore

IDS = ["h:/dev/a:w", "h:/dev/b:w"]


def _batch(k: int) -> StatsBatch:
    rng = np.random.default_rng(k)
    stats = []
    for j in range(len(IDS)):
        s = WorkloadStats()
        n = 50 + 10 * k + j
        svc = rng.lognormal(np.log(2e5), 0.6, n).astype(np.int64)
        s.record(j, svc, svc + 1000, 4096)
        stats.append(s)
    return StatsBatch.from_stats(stats)


def _same(a: StatsBatch, b: StatsBatch) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("counters", "lat", "rows", "buckets", "counts"))


BATCHES = [_batch(k) for k in range(8)]


@pytest.mark.parametrize(("fold", "memory_bytes", "keep_from", "keep_to", "first", "last"), [
    (False, 1 << 30, 2, -1, 2, 7),
    (False, 1 << 30, 2, -1, 3, 5),  # any window inside what was kept
    (False, 0, 2, -1, 4, 6),  # every subinterval spilled
    (False, 3000, 0, 6, 0, 6),  # some in memory, the rest spilled
    (True, 1 << 30, 2, 6, 2, 6),
    (True, 1 << 30, 2, 6, 2, 5),  # one short: a Stop that crossed a result
    (True, 1 << 30, 2, 6, 2, 4),  # two short
    (True, 1 << 30, 1, -1, 1, 7),
])
def test_window_equals_adding_the_subintervals(fold: bool, memory_bytes: int, keep_from: int,
                                               keep_to: int, first: int, last: int) -> None:
    store = WindowStore(3, keep_from, keep_to, fold, memory_bytes)
    for k, b in enumerate(BATCHES):
        store.add(k, IDS, b)
    ids, got = store.window(first, last)
    assert ids == IDS
    assert _same(got, add_batches(BATCHES[first:last + 1]))
    got.validate()
    store.close()


@pytest.mark.parametrize(("fold", "keep_from", "keep_to", "first", "last", "text"), [
    (False, 2, -1, 1, 4, "before 2 of step 3 were not kept"),
    (False, 2, 5, 2, 6, "subintervals [6] of step 3 were not kept"),
    (False, 2, -1, 5, 4, "is empty"),
    (True, 2, 7, 3, 5, "added its subintervals up from 2 on"),
    (True, 2, 7, 2, 3, "up to 5 of step 3 are already added up"),
    (True, 2, 5, 2, 6, "subintervals [6] of step 3 were not kept"),
])
def test_windows_that_cannot_be_given_exactly_are_refused(
        fold: bool, keep_from: int, keep_to: int, first: int, last: int, text: str) -> None:
    store = WindowStore(3, keep_from, keep_to, fold)
    for k, b in enumerate(BATCHES):
        store.add(k, IDS, b)
    with pytest.raises(WindowError, match=text.replace("[", r"\[").replace("]", r"\]")):
        store.window(first, last)


def test_nothing_kept_and_changed_workloads_are_refused() -> None:
    store = WindowStore(0, 5, -1, False)
    store.add(1, IDS, BATCHES[1])
    with pytest.raises(WindowError, match="no subinterval of step 0 from 5 on was kept"):
        store.window(5, 6)
    store.add(5, IDS, BATCHES[5])
    with pytest.raises(WindowError, match="workloads changed within step 0 at subinterval 6"):
        store.add(6, IDS[::-1], BATCHES[6])


def test_spill_file_is_gone_after_close() -> None:
    store = WindowStore(0, 0, -1, False, memory_bytes=0)
    for k, b in enumerate(BATCHES[:3]):
        store.add(k, IDS, b)
    spill = store._spill
    assert spill is not None and not spill.closed
    store.close()
    assert spill.closed and store._spill is None
