"""The compiled kernels against plain numpy (rollup percentiles and CSV text are compared with
their references in test_rollup.py and test_recorder.py)."""

from __future__ import annotations

import numpy as np
import pytest

from master import kernels
from master.heap import keep_freed_memory


def _coords(rng: np.random.Generator, n: int, rows: int) -> tuple[np.ndarray, ...]:
    key = np.unique(rng.integers(0, rows * 2369, n))
    return key // 2369, key % 2369, rng.integers(1, 1000, key.size)


@pytest.mark.parametrize(("na", "nb"), [(0, 0), (0, 5), (7, 0), (1, 1), (500, 300),
                                        (20_000, 20_000)])
def test_merge_sorted_adds_like_a_dense_sum(na: int, nb: int) -> None:
    rng = np.random.default_rng(na * 7 + nb)
    a, b = _coords(rng, na, 40), _coords(rng, nb, 40)
    rows, buckets, counts = kernels.merge_sorted(a, b)
    dense = np.zeros(40 * 2369, dtype=np.int64)
    for r, bk, c in (a, b):
        np.add.at(dense, r * 2369 + bk, c)
    nz = np.flatnonzero(dense)
    assert np.array_equal(rows * 2369 + buckets, nz)  # sorted, each (row, bucket) once
    assert np.array_equal(counts, dense[nz])


def test_warm_up_runs_every_kernel() -> None:
    assert kernels.warm_up() >= 0.0


def test_heap_thresholds_are_set_on_glibc() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # once per process, then a no-op
