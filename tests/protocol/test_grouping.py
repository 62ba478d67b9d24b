"""Groups, windows and view percentiles of ``StatsBatch``es (``protocol.grouping``) against
dense references (``WorkloadStats.merge_into``) and, bit for bit, against the master's rollup
(``master.analysis.rollup.compute``), which the slave's tables must reproduce exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from master.analysis import rollup
from master.analysis.rollup import Grouping, Sample, compute, pct_label
from protocol import grouping
from protocol.batch import StatsBatch, view_min_max
from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.grouping import add_batches, group_batch, view_percentiles
from protocol.stats import I64_MAX, MAX, MIN, OPS, WorkloadStats
from protocol.views import MEMBERSHIP, N_VIEWS, PERCENTILES, VIEWS, VIEWS_OF_CATEGORY

KIND_COLUMNS = ("service_time", "response_time")


# ----------------------------------------------------------------------------- data
def _recorded(seed: int, n: int, *, sizes: Sequence[int] | None = None) -> StatsBatch:
    """n workloads recording lognormal latencies in a random mix of categories (one to four;
    a workload of size 0 records nothing)."""
    rng = np.random.default_rng(seed)
    stats = []
    for w in range(n):
        s = WorkloadStats()
        k = int(rng.integers(1, 4000)) if sizes is None else sizes[w % len(sizes)]
        if k:
            cats = rng.choice(4, size=int(rng.integers(1, 5)), replace=False)
            cat = rng.choice(cats, k)
            svc = rng.lognormal(9 + 4 * rng.random(), 0.3 + rng.random(), k).astype(np.int64)
            s.record(cat, svc, svc + rng.integers(0, 200_000, k), 4096)
        s.record_errors(int(rng.integers(0, 4)), int(rng.integers(0, 2)))
        stats.append(s)
    batch = StatsBatch.from_stats(stats) if stats else StatsBatch.empty()
    batch.validate()
    return batch


def _synthetic(seed: int, n: int, *, scale: int = 1, span: int = 40,
               overflow: bool = False, validate: bool = True) -> StatsBatch:
    """n workloads written bucket by bucket: each non-empty category row a run of up to
    ``span`` buckets (often one) with counts times ``scale`` (beyond 2**32 when asked), the
    response row the service row moved up; ``overflow`` puts some rows in the overflow bucket.
    """
    rng = np.random.default_rng(seed)
    flat = np.zeros((n, WorkloadStats.SIZE), dtype=np.int64)
    for w in range(n):
        s = WorkloadStats(flat[w])
        s.reset()
        for c in range(4):
            if rng.random() < 0.4:
                continue
            width = 1 if rng.random() < 0.3 else int(rng.integers(1, span + 1))
            top = OVERFLOW_INDEX if overflow and rng.random() < 0.5 else N_BUCKETS - 100
            first = int(rng.integers(0, top - width + 1))
            counts = rng.integers(0, 50, width) * scale
            counts[[0, -1]] = np.maximum(counts[[0, -1]], scale)
            for kind, shift in ((0, 0), (1, int(rng.integers(0, top - first - width + 1)))):
                lo, hi = first + shift, first + shift + width - 1
                s.hist[c, kind, lo:hi + 1] = counts
                low_ns, high_ns = int(LOWER_NS[lo]), int(UPPER_NS[hi]) - 1
                if hi == OVERFLOW_INDEX:
                    high_ns = low_ns + int(rng.integers(0, 1 << 40))
                if lo < OVERFLOW_INDEX:
                    low_ns += int(rng.integers(0, UPPER_NS[lo] - low_ns))
                s.lat[c, kind, MIN] = low_ns
                s.lat[c, kind, MAX] = max(high_ns - int(rng.integers(0, 3)), low_ns)
                s.lat[c, kind, 0] = int(counts.sum()) * low_ns % (1 << 62)  # not checked
            s.counters[c] = [int(counts.sum()), int(counts.sum()) % (1 << 50), 0]
    batch = StatsBatch.from_flat(flat)
    if validate:
        batch.validate()
    return batch


def _dense_groups(batch: StatsBatch, of: npt.NDArray[np.intp], n_groups: int) -> StatsBatch:
    groups = [WorkloadStats() for _ in range(n_groups)]
    for w in range(batch.n_workloads):
        groups[int(of[w])].merge_into(batch.workload(w))
    return StatsBatch.from_stats(groups) if groups else StatsBatch.empty()


def _assert_same(a: StatsBatch, b: StatsBatch) -> None:
    assert a.n_workloads == b.n_workloads
    for name in ("counters", "lat", "rows", "buckets", "counts"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y), name


def _master_pct(batch: StatsBatch, keys: Sequence[str] | None = None) -> npt.NDArray[np.float64]:
    """The master's percentile columns, in ms, as (G, N_VIEWS, 2, P)."""
    keys = [str(i) for i in range(batch.n_workloads)] if keys is None else keys
    res = compute(Sample.from_batch(batch), Grouping.from_keys("workload", keys), 1.0)
    out = np.empty((res.grouping.n, N_VIEWS, 2, len(PERCENTILES)))
    for v, (prefix, _) in enumerate(VIEWS):
        for k, kind in enumerate(KIND_COLUMNS):
            for j, p in enumerate(PERCENTILES):
                out[:, v, k, j] = res.columns[f"{prefix}{kind}_{pct_label(p)}_ms"]
    return out


def _assert_bit_identical(batch: StatsBatch) -> None:
    mine = view_percentiles(batch)
    assert mine.shape == (batch.n_workloads, N_VIEWS, 2, len(PERCENTILES))
    assert np.array_equal(mine / 1e6, _master_pct(batch), equal_nan=True)


# ----------------------------------------------------------------------------- views
def test_views_are_the_masters() -> None:
    assert rollup.VIEWS == VIEWS and rollup.PERCENTILES == PERCENTILES
    assert rollup.N_VIEWS == N_VIEWS == len(VIEWS)
    assert np.array_equal(rollup._MEMBERSHIP, MEMBERSHIP)
    for v, (_, cats) in enumerate(VIEWS):
        assert np.flatnonzero(MEMBERSHIP[v]).tolist() == list(cats)
    for c in range(4):
        assert VIEWS_OF_CATEGORY[c].tolist() == [v for v, (_, cs) in enumerate(VIEWS) if c in cs]
    assert not MEMBERSHIP.flags.writeable


# ----------------------------------------------------------------------------- group_batch
@pytest.mark.parametrize(
    ("n", "of", "n_groups"),
    [
        (9, [0, 0, 0, 1, 1, 1, 2, 2, 2], 3),  # consecutive runs
        (9, [2, 0, 1, 2, 0, 1, 2, 0, 1], 3),  # interleaved
        (9, [0] * 9, 1),  # one group
        (9, [8, 7, 6, 5, 4, 3, 2, 1, 0], 9),  # a permutation
        (9, [0, 0, 4, 4, 4, 1, 1, 6, 6], 8),  # empty groups between and after
        (9, [0, 1, 2, 3, 4, 5, 6, 7, 8], 11),  # identity plus two empty groups
        (1, [3], 5),
        (0, [], 3),  # nothing to group: empty groups
        (0, [], 0),
    ],
)
def test_group_batch_matches_dense_merge(n: int, of: list[int], n_groups: int) -> None:
    batch = _recorded(seed=n + n_groups, n=n, sizes=[0, 1, 2, 3, 500, 3000])
    mapping = np.array(of, dtype=np.intp)
    got = group_batch(batch, mapping, n_groups)
    got.validate()
    _assert_same(got, _dense_groups(batch, mapping, n_groups))
    assert got.n_workloads == n_groups
    empty = np.setdiff1d(np.arange(n_groups), mapping)
    assert np.all(got.lat[empty][..., MIN] == I64_MAX) and np.all(got.lat[empty][..., MAX] == -1)


def test_group_batch_identity_is_the_batch() -> None:
    batch = _recorded(seed=1, n=5)
    assert group_batch(batch, np.arange(5), 5) is batch


@pytest.mark.parametrize(("seed", "scale", "overflow"),
                         [(1, 1, False), (2, 1, True), (3, 3 << 33, False), (4, 1 << 40, True)])
def test_group_batch_edge_rows(seed: int, scale: int, overflow: bool) -> None:
    """Single-bucket rows, the overflow bucket, counts beyond 2**32 (exact past float64)."""
    batch = _synthetic(seed, 40, scale=scale, overflow=overflow)
    rng = np.random.default_rng(seed)
    for n_groups in (1, 3, 17):
        mapping = rng.integers(0, n_groups, batch.n_workloads).astype(np.intp)
        got = group_batch(batch, mapping, n_groups)
        got.validate()
        _assert_same(got, _dense_groups(batch, mapping, n_groups))


def test_group_batch_sums_past_float64() -> None:
    """Counts of 54 significant bits: added as exact integers (``StatsBatch.validate`` adds
    row totals in float64, so it cannot check such a batch)."""
    batch = _synthetic(5, 4, scale=(1 << 53) + 1, span=2, validate=False)
    got = group_batch(batch, np.zeros(4, dtype=np.intp), 1)
    _assert_same(got, _dense_groups(batch, np.zeros(4, dtype=np.intp), 1))
    assert int(got.counts.max()) > 1 << 53


@pytest.mark.parametrize(
    ("of", "n_groups", "message"),
    [
        ([0, 1], 2, "shape"),
        ([0, 1, 2], 2, "outside"),
        ([0, -1, 1], 2, "outside"),
        ([0.0, 1.0, 1.0], 2, "integers"),
        ([0, 0, 0], -1, ">= 0"),
    ],
)
def test_group_batch_refuses_bad_mappings(of: list[float], n_groups: int, message: str) -> None:
    batch = _recorded(seed=2, n=3)
    with pytest.raises(ValueError, match=message):
        group_batch(batch, np.array(of), n_groups)


def test_chunked_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny budgets force many chunks, pieces and cumulative-sum runs: same results."""
    batch = _recorded(seed=8, n=30, sizes=[0, 1, 7, 900, 4000])
    rng = np.random.default_rng(8)
    mapping = rng.integers(0, 6, 30).astype(np.intp)
    sorted_mapping = np.sort(mapping)
    other = _recorded(seed=9, n=30, sizes=[0, 1, 7, 900, 4000])
    expect = [group_batch(batch, m, 6) for m in (mapping, sorted_mapping)]
    expect_window = add_batches([batch, other, batch])
    expect_pct = view_percentiles(batch)
    monkeypatch.setattr(grouping, "_CELL_BUDGET", 700)
    monkeypatch.setattr(grouping, "_COORD_BUDGET", 50)
    monkeypatch.setattr(grouping, "_CUM_BUDGET", 3000.0)
    for m, e in zip((mapping, sorted_mapping), expect, strict=True):
        _assert_same(group_batch(batch, m, 6), e)
    _assert_same(add_batches([batch, other, batch]), expect_window)
    assert np.array_equal(view_percentiles(batch), expect_pct, equal_nan=True)
    _assert_bit_identical(batch)


# ----------------------------------------------------------------------------- add_batches
@pytest.mark.parametrize("n_batches", [2, 3, 7])
def test_add_batches_matches_dense_merge(n_batches: int) -> None:
    parts = [_recorded(seed=20 + i, n=6, sizes=[0, 1, 3, 800]) for i in range(n_batches)]
    parts[0] = _synthetic(19, 6, scale=3 << 33, overflow=True)  # huge counts, overflow bucket
    got = add_batches(parts)
    got.validate()
    merged = [parts[0].workload(w) for w in range(6)]
    for p in parts[1:]:
        for w in range(6):
            merged[w].merge_into(p.workload(w))
    _assert_same(got, StatsBatch.from_stats(merged))


def test_add_batches_edges() -> None:
    one = _recorded(seed=3, n=4)
    assert add_batches([one]) is one
    _assert_same(add_batches([StatsBatch.empty(3), StatsBatch.empty(3)]), StatsBatch.empty(3))
    _assert_same(add_batches([StatsBatch.empty(), StatsBatch.empty()]), StatsBatch.empty())
    with pytest.raises(ValueError, match="no batches"):
        add_batches([])
    with pytest.raises(ValueError, match="same workloads"):
        add_batches([one, _recorded(seed=3, n=5)])


# ----------------------------------------------------------------------------- percentiles
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_view_percentiles_bit_identical_to_master(seed: int) -> None:
    _assert_bit_identical(_recorded(seed=seed, n=25, sizes=None))


@pytest.mark.parametrize(
    "sizes",
    [
        [1, 2, 3],  # ranks among one to three I/Os
        [12_000],  # p99.9 of 12,000 is exactly the 11,988th: the decimal rank matters
        [100, 1000, 10_000],
        [0, 5],  # empty workloads beside small ones
    ],
)
def test_view_percentiles_exact_ranks(sizes: list[int]) -> None:
    _assert_bit_identical(_recorded(seed=len(sizes), n=12, sizes=sizes))


def test_view_percentiles_single_category_constant() -> None:
    """One I/O of 12,345 ns in one category: every percentile of every view holding it is
    exactly 12,345 ns; the other views are NaN."""
    s = WorkloadStats()
    s.record(2, [12_345], [20_000], 4096)
    pct = view_percentiles(StatsBatch.from_stats([s]))
    has = [2 in cats for _, cats in VIEWS]
    assert np.all(pct[0, has, 0] == 12_345) and np.all(pct[0, has, 1] == 20_000)
    assert np.all(np.isnan(pct[0, [not h for h in has]]))


@pytest.mark.parametrize(
    ("seed", "scale", "span", "overflow"),
    [
        (11, 1, 40, False),
        (12, 1, 40, True),
        (13, 3 << 33, 40, True),
        (14, 1 << 40, 40, False),
        # views of up to 2**62.6 I/Os: one running sum over several would overflow int64
        (15, 1 << 54, 2, False),
    ],
)
def test_view_percentiles_edge_rows(seed: int, scale: int, span: int, overflow: bool) -> None:
    _assert_bit_identical(_synthetic(seed, 30, scale=scale, span=span, overflow=overflow))


def test_view_percentiles_of_groups_are_the_masters_instances() -> None:
    """Percentiles of a group = the master's percentiles of the instance it stands for."""
    batch = _recorded(seed=30, n=24, sizes=[0, 1, 2, 50, 3000])
    rng = np.random.default_rng(30)
    for n_groups in (1, 5, 24):
        mapping = rng.integers(0, n_groups, 24).astype(np.intp)
        keys = [f"g{g}" for g in mapping]
        order = [int(name[1:]) for name in dict.fromkeys(keys)]  # the master's instance order
        grouped = view_percentiles(group_batch(batch, mapping, n_groups))
        assert np.array_equal(grouped[order] / 1e6, _master_pct(batch, keys), equal_nan=True)


def test_view_min_max_marks_views_with_io() -> None:
    batch = _recorded(seed=40, n=10, sizes=[0, 1, 300])
    low, high, has = view_min_max(batch)
    pct = view_percentiles(batch)
    assert np.array_equal(~has, np.isnan(pct).all(axis=3))
    assert np.array_equal(has[..., 0], (batch.counters[:, :, OPS] @ MEMBERSHIP.T) > 0)
    inside = (pct >= low[..., None]) & (pct <= high[..., None])
    assert np.all(inside | np.isnan(pct))
    res = compute(Sample.from_batch(batch),
                  Grouping.from_keys("workload", [str(i) for i in range(10)]), 1.0)
    for v, (prefix, _) in enumerate(VIEWS):
        for k, kind in enumerate(KIND_COLUMNS):
            got = np.where(has[:, v, k], low[:, v, k] / 1e6, np.nan)
            assert np.array_equal(got, res.columns[f"{prefix}{kind}_min_ms"], equal_nan=True)
            got = np.where(has[:, v, k], high[:, v, k] / 1e6, np.nan)
            assert np.array_equal(got, res.columns[f"{prefix}{kind}_max_ms"], equal_nan=True)


def test_view_percentiles_empty_batches() -> None:
    assert view_percentiles(StatsBatch.empty()).shape == (0, N_VIEWS, 2, len(PERCENTILES))
    assert np.all(np.isnan(view_percentiles(StatsBatch.empty(3))))
