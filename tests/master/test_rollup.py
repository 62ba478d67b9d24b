"""Rollups against a straightforward reference built from LatencyHistogram merges."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from master.analysis import rollup
from master.analysis.rollup import (
    METRIC_COLUMNS,
    PERCENTILES,
    VIEWS,
    Grouping,
    Sample,
    compute,
    pct_label,
)
from protocol.batch import StatsBatch
from protocol.histogram import LatencyHistogram
from protocol.stats import WorkloadStats
from protocol.views import category_index


def _workloads(
    n: int, seed: int
) -> list[tuple[WorkloadStats, dict[int, tuple[np.ndarray, np.ndarray]]]]:
    rng = np.random.default_rng(seed)
    out = []
    for w in range(n):
        s = WorkloadStats()
        k = int(rng.integers(200, 2000))
        cat = rng.integers(0, 4, k) if w % 3 else np.zeros(k, dtype=np.int64)
        svc = rng.lognormal(11 + 0.2 * w, 0.8, k).astype(np.int64)
        rsp = svc + rng.integers(0, 50_000, k)
        s.record(cat, svc, rsp, 4096 * (1 + w % 4))
        s.record_errors(int(w % 4), w % 2)
        out.append((s, {c: (svc[cat == c], rsp[cat == c]) for c in range(4)}))
    return out


def _reference(
    members: list[dict[int, tuple[np.ndarray, np.ndarray]]], cats: tuple[int, ...], kind: int
) -> LatencyHistogram:
    return LatencyHistogram.sum(
        LatencyHistogram.from_values(m[c][kind]) for m in members for c in cats
    )


def _shuffled_with_repeats(sample: Sample, seed: int) -> Sample:
    """The same statistics with every coordinate split in two and the order shuffled: not
    sorted, buckets repeated within a row."""
    rng = np.random.default_rng(seed)
    half = sample.counts // 2
    rows = np.concatenate([sample.rows, sample.rows])
    buckets = np.concatenate([sample.buckets, sample.buckets])
    counts = np.concatenate([half, sample.counts - half])
    keep = counts > 0
    order = rng.permutation(int(keep.sum()))
    return Sample(sample.counters, sample.lat, rows[keep][order], buckets[keep][order],
                  counts[keep][order])


@pytest.mark.parametrize(
    ("keys", "layout"),
    [
        ([f"h{w % 3}" for w in range(9)], "sorted"),  # several workloads per instance
        ([f"w{w}" for w in range(9)], "sorted"),  # one workload per instance (sparse walk)
        (["all"] * 9, "sorted"),
        ([f"h{w % 3}" for w in range(9)], "shuffled"),
        ([f"w{w}" for w in range(9)], "shuffled"),
        ([f"x{(w * 5) % 4}" for w in range(9)], "sorted"),  # instances out of workload order
    ],
)
def test_rollup_matches_merged_histograms(keys: list[str], layout: str) -> None:
    data = _workloads(9, seed=4)
    sample = Sample.from_batch(StatsBatch.from_stats([s for s, _ in data]))
    if layout == "shuffled":
        sample = _shuffled_with_repeats(sample, seed=5)
    grouping = Grouping.from_keys("host", keys)
    res = compute(sample, grouping, duration_s=2.0)
    assert grouping.names == tuple(dict.fromkeys(keys))
    for i, name in enumerate(grouping.names):
        members = [d for (_, d), k in zip(data, keys, strict=True) if k == name]
        stats = [s for (s, _), k in zip(data, keys, strict=True) if k == name]
        for prefix, cats in VIEWS:
            ops = sum(s.counters[c, 0] for s in stats for c in cats)
            assert res.columns[f"{prefix}IOPS"][i] == pytest.approx(ops / 2.0)
            nbytes = sum(s.counters[c, 1] for s in stats for c in cats)
            assert res.columns[f"{prefix}MB_per_s"][i] == pytest.approx(nbytes / 2.0 / 1e6)
            assert res.columns[f"{prefix}errors"][i] == sum(
                s.counters[c, 2] for s in stats for c in cats
            )
            for k, kind in enumerate(("service_time", "response_time")):
                ref = _reference(members, cats, k)
                col = res.columns
                if ref.count == 0:
                    assert np.isnan(col[f"{prefix}{kind}_p50_ms"][i])
                    assert np.isnan(col[f"{prefix}{kind}_mean_ms"][i])
                    continue
                assert col[f"{prefix}{kind}_mean_ms"][i] == pytest.approx(ref.mean_ns / 1e6)
                assert col[f"{prefix}{kind}_max_ms"][i] == pytest.approx(ref.max_ns / 1e6)
                assert col[f"{prefix}{kind}_min_ms"][i] == pytest.approx(ref.min_ns / 1e6)
                for p in PERCENTILES:
                    got = col[f"{prefix}{kind}_{pct_label(p)}_ms"][i]
                    assert got == pytest.approx(ref.percentile(p) / 1e6, rel=1e-9), (
                        prefix,
                        kind,
                        p,
                    )


def test_concat_and_add_are_lossless() -> None:
    a = [s for s, _ in _workloads(4, seed=1)]
    b = [s for s, _ in _workloads(4, seed=2)]
    sa = Sample.from_batch(StatsBatch.from_stats(a))
    sb = Sample.from_batch(StatsBatch.from_stats(b))
    both = Sample.concat([sa, sb])
    g_all = Grouping.from_keys("all", ["all"] * 8)
    whole = compute(Sample.from_batch(StatsBatch.from_stats(a + b)), g_all, 1.0)
    assert (
        compute(both, g_all, 1.0).columns["service_time_p99_ms"][0]
        == whole.columns["service_time_p99_ms"][0]
    )
    # the same workloads over two periods
    added = Sample.add([sa, sb])
    merged = [x.copy() for x in a]
    for x, y in zip(merged, b, strict=True):
        x.merge_into(y)
    ref = compute(
        Sample.from_batch(StatsBatch.from_stats(merged)),
        Grouping.from_keys("all", ["all"] * 4),
        2.0,
    )
    got = compute(added, Grouping.from_keys("all", ["all"] * 4), 2.0)
    for col in (
        "IOPS",
        "read_service_time_p99_9_ms",
        "write_response_time_max_ms",
        "sequential_MB_per_s",
    ):
        assert got.columns[col][0] == pytest.approx(ref.columns[col][0], nan_ok=True)


def test_empty_instance_gives_nan_and_zero_iops() -> None:
    sample = Sample.from_batch(StatsBatch.from_stats([WorkloadStats()]))
    res = compute(sample, Grouping.from_keys("all", ["all"]), 1.0)
    assert res.columns["IOPS"][0] == 0
    assert np.isnan(res.columns["service_time_p99_ms"][0])


def test_grouping_size_mismatch_is_refused() -> None:
    sample = Sample.from_batch(StatsBatch.from_stats([WorkloadStats()]))
    with pytest.raises(ValueError, match="covers 2 workloads"):
        compute(sample, Grouping.from_keys("all", ["a", "b"]), 1.0)


def test_columns_carry_units_and_cover_views() -> None:
    from master.config import FOCUS_METRICS

    cols = rollup.METRIC_COLUMNS
    assert set(cols) >= FOCUS_METRICS, sorted(FOCUS_METRICS - set(cols))
    for required in (
        "IOPS",
        "MB_per_s",
        "service_time_mean_ms",
        "service_time_p50_ms",
        "service_time_p99_ms",
        "service_time_max_ms",
        "response_time_p99_ms",
        "read_IOPS",
        "write_service_time_p99_ms",
        "read_response_time_p99_ms",
    ):
        assert required in cols


@pytest.mark.parametrize("p, n", [(99.9, 12000), (99.9, 3000), (99.99, 20000), (99.0, 100),
                                  (90.0, 10), (50.0, 2), (95.0, 20)])
@pytest.mark.parametrize("layout", ["one row", "read and write merged", "two workloads"])
def test_a_whole_rank_stays_in_the_bucket_that_reaches_it(p: float, n: int, layout: str) -> None:
    # the first p % of the I/Os take 100 ns, the rest 1 ms: the p-th percentile is 100 ns,
    # whichever walk the kernel takes (one sparse row, sparse rows merged, dense scratch)
    low = round(p * n / 100)
    fast, slow = np.full(low, 100), np.full(n - low, 1_000_000)
    stats = [WorkloadStats(), WorkloadStats()]
    if layout == "one row":
        stats[0].record(0, np.r_[fast, slow], np.r_[fast, slow], 4096)
        view = ""
    elif layout == "read and write merged":
        stats[0].record(0, fast, fast, 4096)
        stats[0].record(1, slow, slow, 4096)
        view = ""
    else:
        stats[0].record(0, fast, fast, 4096)
        stats[1].record(0, slow, slow, 4096)
        view = "read_"
    batch = StatsBatch.from_stats(stats if layout == "two workloads" else stats[:1])
    sample = Sample.from_batch(batch)
    res = compute(sample, Grouping.from_keys("all", ["all"] * sample.n_workloads), 1.0)
    for kind in ("service_time", "response_time"):
        assert res.columns[f"{view}{kind}_{pct_label(p)}_ms"][0] == 100 / 1e6, (kind, layout)


def test_every_column_is_its_named_metric() -> None:
    """``compute`` fills one array by position; each named column holds its own metric:
    random reads of 1, 2, 3 us (4 KiB), one sequential write of 10 us (64 KiB) and 2 write
    errors over 2 s, worked out by hand per view."""
    s = WorkloadStats()
    s.record(category_index(False, False), [1000, 2000, 3000], [1500, 2500, 3500], 4096)
    s.record(category_index(True, True), [10000], [12000], 65536)
    s.record_errors(category_index(True, True), 2)
    res = compute(Sample.from_batch(StatsBatch.from_stats([s])), Grouping.from_keys(
        "all", ["all"]), 2.0)
    col = {k: float(v[0]) for k, v in res.columns.items()}
    # view: (ops, bytes, service times in ns, response times in ns, errors)
    views = {"": (4, 3 * 4096 + 65536, [1000, 2000, 3000, 10000], [1500, 2500, 3500, 12000], 2),
             "read_": (3, 3 * 4096, [1000, 2000, 3000], [1500, 2500, 3500], 0),
             "write_": (1, 65536, [10000], [12000], 2),
             "random_": (3, 3 * 4096, [1000, 2000, 3000], [1500, 2500, 3500], 0),
             "sequential_": (1, 65536, [10000], [12000], 2)}
    for prefix, (ops, nbytes, svc, rsp, errors) in views.items():
        assert col[f"{prefix}IOPS"] == ops / 2.0
        assert col[f"{prefix}MB_per_s"] == pytest.approx(nbytes / 2.0 / 1e6)
        assert col[f"{prefix}avg_blocksize_KiB"] == pytest.approx(nbytes / ops / 1024)
        assert col[f"{prefix}errors"] == errors
        for kind, lat in (("service_time", svc), ("response_time", rsp)):
            assert col[f"{prefix}{kind}_mean_ms"] == pytest.approx(np.mean(lat) / 1e6)
            assert col[f"{prefix}{kind}_min_ms"] == min(lat) / 1e6
            assert col[f"{prefix}{kind}_max_ms"] == max(lat) / 1e6
            pcts = [col[f"{prefix}{kind}_{pct_label(p)}_ms"] for p in PERCENTILES]
            assert min(lat) / 1e6 <= pcts[0] <= pcts[-1] <= max(lat) / 1e6
    assert list(res.columns) == list(METRIC_COLUMNS)
    assert np.array_equal(res.values, np.array([[col[c] for c in METRIC_COLUMNS]]),
                          equal_nan=True)


@pytest.mark.parametrize("size", [1, 2, 1024])
@pytest.mark.parametrize(
    ("keys", "layout"),
    [
        ([f"h{w % 3}" for w in range(9)], "sorted"),
        ([f"w{w}" for w in range(9)], "sorted"),
        (["all"] * 9, "shuffled"),
        ([f"x{(w * 5) % 4}" for w in range(9)], "sorted"),  # instances out of workload order
        ([f"x{(w * 5) % 4}" for w in range(9)], "shuffled"),
    ],
)
def test_histogram_rows_are_the_merged_histograms(keys: list[str], layout: str,
                                                  size: int) -> None:
    """Every instance's histogram-file rows are its members' merged histograms, bucket by
    bucket, for each view and kind; slices cover every instance once, in order."""
    data = _workloads(9, seed=6)
    sample = Sample.from_batch(StatsBatch.from_stats([s for s, _ in data]))
    if layout == "shuffled":
        sample = _shuffled_with_repeats(sample, seed=7)
    grouping = Grouping.from_keys("host", keys)
    parts = list(rollup.histogram_rows(sample, grouping, size))
    assert [(p.first, p.n) for p in parts] == [
        (f, min(size, grouping.n - f)) for f in range(0, grouping.n, size)]
    views = dict(zip(rollup.HISTOGRAM_VIEWS, (cats for _, cats in VIEWS), strict=False))
    assert views == {"all": (0, 1, 2, 3), "read": (0, 2), "write": (1, 3)}
    for part in parts:
        for j in range(part.n):
            name = grouping.names[part.first + j]
            members = [d for (_, d), k in zip(data, keys, strict=True) if k == name]
            mine = part.inst == j
            got = np.zeros((rollup.N_BUCKETS, 6))
            got[part.bucket[mine]] = part.counts[mine]
            assert np.all(np.diff(part.bucket[mine]) > 0)  # each bucket once, in order
            assert np.all(part.counts[mine].any(axis=1))  # only non-empty buckets
            for v, view in enumerate(rollup.HISTOGRAM_VIEWS):
                for k in range(2):
                    want = _reference(members, views[view], k).counts
                    assert np.array_equal(got[:, v * 2 + k], want), (name, view, k)


def _unaligned(batch: StatsBatch) -> StatsBatch:
    """``batch`` from the wire with its arrays one byte off their alignment (a frame's
    arrays lie where msgpack put them)."""
    out = {}
    for name, value in batch.to_wire().items():
        if isinstance(value, bytes):
            value = memoryview(b"\0" + value)[1:]
        out[name] = value
    return StatsBatch.from_wire(out)


@pytest.mark.parametrize("layout", ["wire", "unaligned", "one host"])
def test_a_window_sample_reads_each_hosts_arrays_where_they_lie(layout: str) -> None:
    """A measurement window of hosts' batches (one of no workloads) reads each batch's
    coordinates in place: every rollup type's metrics and histogram rows are those of the
    batches copied into one ``Sample``, bit for bit."""
    data = _workloads(14, seed=9)
    sizes = [14] if layout == "one host" else [5, 0, 6, 3]
    cuts = np.cumsum([0, *sizes])
    batches = [StatsBatch.from_wire(StatsBatch.from_stats(
        [s for s, _ in data[a:b]]).to_wire()) for a, b in itertools.pairwise(cuts)]
    if layout == "unaligned":
        batches = [_unaligned(b) for b in batches]
        assert not batches[0].counts.flags.aligned
    window = rollup.WindowSample.from_batches(batches)
    copied = Sample.concat([Sample.from_batch(b) for b in batches])
    assert window.n_workloads == copied.n_workloads == 14
    assert np.array_equal(window.counters, copied.counters)
    assert np.array_equal(window.lat, copied.lat)
    if layout == "wire":  # read in place: the batches' own arrays, no copy
        assert all(any(np.shares_memory(h, b.counts) for h in window.coords.held)
                   for b in batches if b.counts.size)
    for keys in ([f"w{w}" for w in range(14)], ["all"] * 14, [f"x{(w * 5) % 4}" for w in
                                                              range(14)]):
        g = Grouping.from_keys("t", keys)
        got, want = compute(window, g, 2.0), compute(copied, g, 2.0)
        assert np.array_equal(got.values, want.values, equal_nan=True)
        assert np.array_equal(got.ops, want.ops)
        for a, b in zip(rollup.histogram_rows(window, g, 3), rollup.histogram_rows(copied, g, 3),
                        strict=True):
            assert (a.first, a.n) == (b.first, b.n)
            for name in ("inst", "bucket", "counts"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_a_window_sample_pauses_between_hosts() -> None:
    """``from_batches_steps`` pauses after each ``PAUSE_EVERY`` batches and gives the window
    ``from_batches`` gives."""
    data = _workloads(3, seed=2)
    one = StatsBatch.from_wire(StatsBatch.from_stats([s for s, _ in data]).to_wire())
    n = 2 * rollup.PAUSE_EVERY + 1
    steps = rollup.WindowSample.from_batches_steps([one] * n)
    pauses = 0
    while True:
        try:
            next(steps)
            pauses += 1
        except StopIteration as done:
            window = done.value
            break
    assert pauses == 3 and window.n_workloads == 3 * n  # after each PAUSE_EVERY batches
    g = Grouping.from_keys("all", ["all"] * (3 * n))
    assert np.array_equal(compute(window, g, 1.0).values,
                          compute(rollup.WindowSample.from_batches([one] * n), g, 1.0).values,
                          equal_nan=True)
