"""The compiled kernels against plain numpy (rollup percentiles and CSV text are compared with
their references in test_rollup.py and test_recorder.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from master.analysis import kernels
from master.results import csvkernels
from master.run import warmup
from master.run.heap import keep_freed_memory
from protocol.batch import GroupStats, StatsBatch
from protocol.buckets import N_BUCKETS
from protocol.errors import RemoteProtocolError
from protocol.grouping import view_percentiles
from protocol.stats import MAX, MIN, OPS, WorkloadStats


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
    assert warmup.warm_up() >= 0.0


def test_heap_thresholds_are_set_on_glibc() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # once per process, then a no-op


def _batch() -> StatsBatch:
    """Three workloads: random reads and writes, sequential reads, and errors only."""
    rng = np.random.default_rng(3)
    stats = [WorkloadStats() for _ in range(3)]
    for cat, n in ((0, 500), (1, 200)):
        svc = rng.lognormal(np.log(2e5), 0.6, n).astype(np.int64)
        stats[0].record(cat, svc, svc + 1000, 4096)
    svc = rng.lognormal(np.log(5e4), 0.3, 300).astype(np.int64)
    stats[1].record(2, svc, svc, 131072)
    stats[2].record_errors(1, 4)
    return StatsBatch.from_stats(stats)


def _with(batch: StatsBatch, **arrays: np.ndarray) -> StatsBatch:
    fields = {k: getattr(batch, k).copy() for k in ("counters", "lat", "rows", "buckets",
                                                     "counts")}
    return StatsBatch(**{**fields, **arrays})


def _bad_batches() -> list[tuple[str, StatsBatch]]:
    b = _batch()
    out = []
    counters = b.counters.copy()
    counters[2, 1, 2] = -1
    out.append(("negative counters", _with(b, counters=counters)))
    rows = b.rows.copy()
    rows[-1] = 3 * 8
    out.append(("out of range", _with(b, rows=rows)))
    buckets = b.buckets.copy()
    buckets[7] = N_BUCKETS
    out.append(("out of range", _with(b, buckets=buckets)))
    order = np.arange(b.rows.size)
    order[[10, 11]] = order[[11, 10]]
    out.append(("not sorted", _with(b, rows=b.rows[order], buckets=b.buckets[order],
                                    counts=b.counts[order])))
    buckets = b.buckets.copy()
    buckets[11] = buckets[10]  # the same (row, bucket) twice
    out.append(("not sorted", _with(b, buckets=buckets)))
    for bad_count in (0, -3):
        counts = b.counts.copy()
        counts[5] = bad_count
        out.append(("counts must be > 0", _with(b, counts=counts)))
    counters = b.counters.copy()
    counters[1, 2, OPS] += 1
    out.append(("differ from the ops counters", _with(b, counters=counters)))
    lat = b.lat.copy()
    lat[0, 1, 0, MIN] = lat[0, 1, 0, MAX] + 1
    out.append(("min/max are inconsistent", _with(b, lat=lat)))
    lat = b.lat.copy()
    lat[1, 2, 1, MIN] = -5
    out.append(("min/max are inconsistent", _with(b, lat=lat)))
    # two faults: the first check in StatsBatch.validate's order is the one reported
    counts = b.counts[order].copy()
    counts[0] = 0
    out.append(("not sorted", _with(b, rows=b.rows[order], buckets=b.buckets[order],
                                    counts=counts)))
    return out


def _refused_alike(message: str, by_numpy: Callable[[], None],
                   compiled: Callable[[], None]) -> None:
    """Both checks refuse, with the same words, and those say ``message``."""
    with pytest.raises(RemoteProtocolError, match=message) as numpy_way:
        by_numpy()
    with pytest.raises(RemoteProtocolError) as compiled_way:
        compiled()
    assert str(compiled_way.value) == str(numpy_way.value)


@pytest.mark.parametrize(("message", "batch"), _bad_batches(),
                         ids=[f"{i}-{m}" for i, (m, _) in enumerate(_bad_batches())])
def test_validate_batch_refuses_what_statsbatch_validate_refuses(message: str,
                                                                   batch: StatsBatch) -> None:
    _refused_alike(message, batch.validate, lambda: kernels.validate_batch(batch))


@pytest.mark.parametrize("batch", [_batch(), StatsBatch.empty(), StatsBatch.empty(5)],
                         ids=["three-workloads", "none", "five-empty"])
def test_validate_batch_passes_what_statsbatch_validate_passes(batch: StatsBatch) -> None:
    batch.validate()
    kernels.validate_batch(batch)
    wire = StatsBatch.from_wire(batch.to_wire(), validate=False)  # the wire's dtypes
    kernels.validate_batch(wire)


def _pct_entry() -> GroupStats:
    """A percentile-table entry as a slave sends it: the three workloads of ``_batch`` (and
    one with no I/O at all), each its own group."""
    b = StatsBatch.concat([_batch(), StatsBatch.empty(1)])
    side = StatsBatch(counters=b.counters, lat=b.lat, rows=np.zeros(0, dtype=np.uint32),
                      buckets=np.zeros(0, dtype=np.uint16), counts=np.zeros(0, dtype=np.int64))
    return GroupStats(side, view_percentiles(b))


def _with_pct(gs: GroupStats, **arrays: np.ndarray) -> GroupStats:
    pct = arrays.pop("pct", gs.pct)
    b = gs.batch
    fields = {k: getattr(b, k).copy() for k in ("counters", "lat", "rows", "buckets", "counts")}
    return GroupStats(StatsBatch(**{**fields, **arrays}), pct)


def _bad_pct_entries() -> list[tuple[str, GroupStats]]:
    gs = _pct_entry()
    assert gs.pct is not None
    out = []
    counters = gs.batch.counters.copy()
    counters[3, 2, 1] = -1  # even in a category without I/O
    out.append(("negative counters", _with_pct(gs, counters=counters)))
    lat = gs.batch.lat.copy()
    lat[0, 1, 1, MIN] = lat[0, 1, 1, MAX] + 1
    out.append(("min/max are inconsistent", _with_pct(gs, lat=lat)))
    pct = gs.pct.copy()
    pct[0, 1, 0, 3] = np.nan  # a view with I/O lacks its p99
    out.append(("missing, or present", _with_pct(gs, pct=pct)))
    pct = gs.pct.copy()
    pct[3, 0, 1, 0] = 5.0  # a workload without I/O has a p50
    out.append(("missing, or present", _with_pct(gs, pct=pct)))
    pct = gs.pct.copy()
    pct[1, 0, 0, 5] = float(gs.batch.lat[1, 2, 0, MAX]) + 1.0
    out.append(("outside the view", _with_pct(gs, pct=pct)))
    pct = gs.pct.copy()
    pct[0, 2, 1, 0] = float(gs.batch.lat[0, 1, 1, MIN]) - 1.0
    out.append(("outside the view", _with_pct(gs, pct=pct)))
    pct = gs.pct.copy()
    pct[0, 0, 0, 0] = -np.inf
    out.append(("outside the view", _with_pct(gs, pct=pct)))
    # two faults: the first in GroupStats.check's order is the one reported
    lat = gs.batch.lat.copy()
    lat[1, 2, 0, MIN] = -1
    out.append(("min/max are inconsistent", _with_pct(gs, lat=lat, pct=pct)))
    return out


@pytest.mark.parametrize(("message", "entry"), _bad_pct_entries(),
                         ids=[f"{i}-{m}" for i, (m, _) in enumerate(_bad_pct_entries())])
def test_check_group_stats_refuses_what_groupstats_check_refuses(message: str,
                                                                  entry: GroupStats) -> None:
    _refused_alike(message, entry.check, lambda: kernels.check_group_stats(entry))


def test_check_group_stats_passes_what_groupstats_check_passes() -> None:
    gs = _pct_entry()
    for entry in (gs, GroupStats(_batch()), GroupStats(StatsBatch.empty(0), gs.pct[:0])):
        entry.check()
        kernels.check_group_stats(entry)
    wire = GroupStats.from_wire(gs.to_wire(), histograms=False)  # the wire's read-only arrays
    kernels.check_group_stats(wire)
    # a percentile exactly at its view's extremes is inside
    assert gs.pct is not None
    pct = gs.pct.copy()
    pct[0, 0, 0, 0] = float(gs.batch.lat[0, :, 0, MIN].min())
    pct[0, 0, 0, 5] = float(gs.batch.lat[0, :, 0, MAX].max())
    kernels.check_group_stats(GroupStats(gs.batch, pct))


def _metrics_by_numpy(counters: np.ndarray, lat: np.ndarray, of: np.ndarray, g_count: int,
                      dur: float, pct_w: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """``rollup.compute``'s metrics as it computed them with numpy before the kernel (the
    reference: same values to the bit)."""
    from protocol.batch import view_extremes
    from protocol.stats import BYTES, ERRORS, SUM
    from protocol.views import MEMBERSHIP

    order = np.argsort(of, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(of, minlength=g_count))[:-1]])
    lat_o = lat[order]
    cnt = np.add.reduceat(counters[order], starts, axis=0)
    lsum = np.add.reduceat(lat_o[..., SUM], starts, axis=0)
    lmin = np.minimum.reduceat(lat_o[..., MIN], starts, axis=0)
    lmax = np.maximum.reduceat(lat_o[..., MAX], starts, axis=0)
    ops_v = cnt[:, :, OPS] @ MEMBERSHIP.T
    bytes_v = cnt[:, :, BYTES] @ MEMBERSHIP.T
    err_v = cnt[:, :, ERRORS] @ MEMBERSHIP.T
    sum_v = (lsum.transpose(0, 2, 1) @ MEMBERSHIP.T).transpose(0, 2, 1)
    low, high = view_extremes(lmin, lmax)
    min_v, max_v = low.astype(np.float64), high.astype(np.float64)
    n_pct = 6
    per_view = 4 + 2 * (3 + n_pct)
    values = np.full((g_count, 5, per_view), -7.0)  # the kernel leaves pct columns alone
    ops = ops_v.astype(np.float64)
    has = ops > 0
    nan = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        values[:, :, 0] = ops / dur
        values[:, :, 1] = bytes_v / dur / 1e6
        values[:, :, 2] = np.where(has, bytes_v / ops / 1024, nan)
        for k in range(2):
            at = 3 + k * (3 + n_pct)
            values[:, :, at] = np.where(has, sum_v[:, :, k] / ops / 1e6, nan)
            values[:, :, at + 1] = np.where(has, min_v[:, :, k] / 1e6, nan)
            if pct_w is not None:
                pct = np.empty_like(pct_w)
                pct[of] = pct_w
                np.divide(pct[:, :, k, :], 1e6, out=values[:, :, at + 2:at + 2 + n_pct])
            values[:, :, at + 2 + n_pct] = np.where(has, max_v[:, :, k] / 1e6, nan)
        values[:, :, per_view - 1] = err_v
    return values, ops_v, min_v, max_v


@pytest.mark.parametrize(("w_count", "g_count", "with_pct"),
                         [(1, 1, False), (7, 1, False), (40, 9, False), (500, 500, True),
                          (300, 300, False), (1000, 37, False)])
def test_instance_metrics_equal_numpy_to_the_bit(w_count: int, g_count: int,
                                                 with_pct: bool) -> None:
    from protocol.views import MEMBERSHIP

    rng = np.random.default_rng(w_count * 31 + g_count)
    counters = rng.integers(0, 1 << 40, (w_count, 4, 3))
    counters[rng.random((w_count, 4)) < 0.3] = 0  # empty categories
    lat = rng.integers(0, 1 << 50, (w_count, 4, 2, 3))
    lat[..., MIN] = rng.integers(0, 1 << 30, (w_count, 4, 2))
    lat[..., MAX] = lat[..., MIN] + rng.integers(0, 1 << 30, (w_count, 4, 2))
    empty = counters[:, :, OPS] == 0
    lat[empty, :, MIN] = np.iinfo(np.int64).max
    lat[empty, :, MAX] = -1
    lat[rng.random((w_count, 4)) < 0.05, :, MAX] = -5  # garbage an empty category may carry
    of = (np.arange(w_count) if g_count == w_count
          else np.concatenate([np.arange(g_count), rng.integers(0, g_count, w_count - g_count)]))
    of = rng.permutation(of) if g_count < w_count else rng.permutation(w_count)
    pct_w = None
    if with_pct:
        pct_w = rng.uniform(1e3, 1e9, (w_count, 5, 2, 6))
        pct_w[rng.random((w_count, 5)) < 0.2] = np.nan
    want = _metrics_by_numpy(counters, lat, of, g_count, 1.7, pct_w)
    order = np.argsort(of, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(of, minlength=g_count))])
    counters_ro, lat_ro = counters.copy(), lat.copy()
    counters_ro.flags.writeable = lat_ro.flags.writeable = False  # as the wire's arrays are
    got = kernels.instance_metrics(counters_ro, lat_ro, order, ptr, MEMBERSHIP > 0, 1.7, pct_w,
                                   22)
    if not with_pct:
        got[0][:, :, [5, 6, 7, 8, 9, 10, 14, 15, 16, 17, 18, 19]] = -7.0
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w, equal_nan=True)


def test_instance_metrics_of_an_instance_without_workloads_is_empty() -> None:
    """An instance no workload maps to reads nothing out of range: no I/O, NaN times."""
    from protocol.views import MEMBERSHIP

    counters = np.ones((2, 4, 3), dtype=np.int64)
    lat = np.ones((2, 4, 2, 3), dtype=np.int64)
    values, ops, mins, maxs = kernels.instance_metrics(
        counters, lat, np.arange(2), np.array([0, 2, 2]), MEMBERSHIP > 0, 1.0,
        np.ones((2, 5, 2, 6)), 22)
    assert ops[1].tolist() == [0] * 5 and ops[0, 0] == 8
    assert np.isnan(values[1, :, 3:21]).all() and (values[1, :, 0] == 0).all()
    assert (maxs[1] == -1).all() and (mins[1] > maxs[1]).all()


def _histogram_rows_reference(of_workload: np.ndarray, rows: np.ndarray, buckets: np.ndarray,
                              counts: np.ndarray, first: int, n: int
                              ) -> dict[tuple[int, int], list[int]]:
    """(instance - first, bucket) -> the six counts, one coordinate at a time."""
    out: dict[tuple[int, int], list[int]] = {}
    for r, b, c in zip(rows.tolist(), buckets.tolist(), counts.tolist(), strict=True):
        inst = int(of_workload[r // 8]) - first
        if not 0 <= inst < n:
            continue
        cells = out.setdefault((inst, b), [0] * 6)
        kind, cat = r % 8 % 2, r % 8 // 2
        cells[kind] += c  # the overall view
        cells[(1 if cat % 2 == 0 else 2) * 2 + kind] += c  # read (even category) or write
    return out


@pytest.mark.parametrize(("n_workloads", "n_inst", "first", "n"), [
    (1, 1, 0, 1), (30, 7, 0, 7), (30, 7, 2, 3), (30, 7, 6, 1), (200, 40, 10, 25),
    (5, 9, 4, 5),  # instances 4..8, some without workloads
])
@pytest.mark.parametrize("layout", ["one array", "in parts"])
def test_histogram_rows_add_each_instances_buckets(n_workloads: int, n_inst: int, first: int,
                                                   n: int, layout: str) -> None:
    rng = np.random.default_rng(n_workloads * 31 + first)
    rows, buckets, counts = _coords(rng, n_workloads * 60, n_workloads * 8)
    of_workload = rng.integers(0, n_inst, n_workloads)
    members = rng.permutation(np.flatnonzero((of_workload >= first)
                                             & (of_workload < first + n)))
    bounds = np.searchsorted(rows, np.arange(n_workloads * 8 + 1))
    coords = kernels.Coords.flat(bounds, buckets, counts)
    if layout == "in parts":  # the workloads' coordinates apart, each part's numbered anew
        cut = n_workloads // 2 * 8
        parts = [kernels.Coords.flat(bounds[:cut + 1], buckets.copy(), counts.copy()),
                 kernels.Coords.flat(bounds[cut:] - bounds[cut], buckets[bounds[cut]:].copy(),
                                     counts[bounds[cut]:].copy())]
        coords = kernels.Coords.joined(parts)
    inst, bucket, summed = kernels.histogram_rows(of_workload, members, coords, first, n)
    want = _histogram_rows_reference(of_workload, rows, buckets, counts, first, n)
    keys = sorted(want)
    assert list(zip(inst.tolist(), bucket.tolist(), strict=True)) == keys  # in order, once
    assert summed.tolist() == [want[k] for k in keys]


def test_histogram_rows_refuses_what_it_would_index_out_of_range() -> None:
    one = np.ones(1, dtype=np.int64)
    bounds = np.array([0] + [1] * 8)
    coords = kernels.Coords.flat(bounds, one, one)
    with pytest.raises(ValueError, match=r"instances outside 2\.\.2"):
        kernels.histogram_rows(one, one - 1, coords, 2, 1)
    with pytest.raises(ValueError, match="buckets outside"):
        kernels.histogram_rows(one, one - 1, kernels.Coords.flat(bounds, one * N_BUCKETS, one),
                               1, 1)
    with pytest.raises(ValueError, match="2 workloads' instances for 1"):
        kernels.histogram_rows(np.ones(2, dtype=np.int64), one - 1, coords, 1, 1)


@pytest.mark.parametrize(("bounds", "buckets", "counts", "match"), [
    ([0, 1], [1], [1], "2 row bounds for 1 buckets"),
    ([0] + [1] * 8, [1, 2], [1], "9 row bounds for 2 buckets and 1 counts"),
    ([0] + [2] * 8, [1], [1], r"row bounds outside 0\.\.1 or falling"),
    ([0, 1, 0, 1, 1, 1, 1, 1, 1], [1], [1], "or falling"),
    ([1] + [1] * 8, [-1], [1], "buckets outside"),
    ([0] + [1] * 8, [70_000], [1], "buckets outside"),
])
def test_coordinates_in_one_array_are_refused_where_they_do_not_fit(
        bounds: list[int], buckets: list[int], counts: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        kernels.Coords.flat(np.array(bounds), np.array(buckets), np.array(counts))



@pytest.mark.parametrize("which", [[], [0], [2, 0, 2, 1], [1, 1, 1]])
def test_gather_texts_puts_the_chosen_texts_one_after_another(which: list[int]) -> None:
    texts = ["0,1", "", "4398046511104,9223372036854775807"]
    data, ends = b"".join(t.encode() for t in texts), np.cumsum([len(t) for t in texts])
    got, got_ends = csvkernels.gather_texts(data, ends, np.array(which, dtype=np.intp))
    assert got == "".join(texts[i] for i in which).encode()
    assert got_ends.tolist() == np.cumsum([len(texts[i]) for i in which]).tolist()
    with pytest.raises(ValueError, match=r"texts 0\.\.3 of 3"):
        csvkernels.gather_texts(data, ends, np.array([0, 3]))


def _paths(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [f.encode() + b"\0" for f in files]
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts


def test_write_lines_appends_to_open_files_by_path_and_skips(tmp_path: Path) -> None:
    """Line i to fds[i]: an open descriptor, BY_PATH (open for appending, write, close: no
    descriptor left behind) or SKIP (untouched)."""
    files = [str(tmp_path / f"f{i}") for i in range(5)]
    for f in files:
        Path(f).write_text("h\n")
    held = os.open(files[0], os.O_WRONLY | os.O_APPEND)
    lines = [b"zero\n", b"one\n", b"", b"three\n", b"four\n"]
    data = np.frombuffer(b"".join(lines), dtype=np.uint8)
    ends = np.cumsum([len(x) for x in lines]).astype(np.int64)
    by_path, skip = csvkernels.BY_PATH, csvkernels.SKIP
    fds = np.array([held, by_path, by_path, skip, by_path], dtype=np.int32)
    before = len(os.listdir("/proc/self/fd"))
    try:
        for _ in range(2):
            assert csvkernels.write_lines(fds, data, ends, 0, None, *_paths(files)) == (
                -1, 0, csvkernels.FAILED_WRITE)
    finally:
        os.close(held)
    assert len(os.listdir("/proc/self/fd")) == before - 1
    assert [Path(f).read_text() for f in files] == [
        "h\nzero\nzero\n", "h\none\none\n", "h\n", "h\n", "h\nfour\nfour\n"]


def test_write_lines_stops_at_a_file_it_cannot_open(tmp_path: Path) -> None:
    files = [str(tmp_path / "a"), str(tmp_path / "gone"), str(tmp_path / "c")]
    for f in (files[0], files[2]):
        Path(f).touch()
    data = np.frombuffer(b"1\n22\n3\n", dtype=np.uint8)
    ends = np.array([2, 5, 7], dtype=np.int64)
    fds = np.full(3, csvkernels.BY_PATH, dtype=np.int32)
    assert csvkernels.write_lines(fds, data, ends, 0, None, *_paths(files)) == (
        1, 2, csvkernels.FAILED_WRITE)
    assert not os.path.exists(files[1])  # never created: no O_CREAT
    assert csvkernels.write_lines(fds, data, ends, 2, None, *_paths(files)) == (
        -1, 0, csvkernels.FAILED_WRITE)
    assert [Path(files[0]).read_text(), Path(files[2]).read_text()] == ["1\n", "3\n"]


@pytest.mark.parametrize(("fds", "paths", "message"), [
    ([csvkernels.BY_PATH], None, "no paths"),
    ([-3], None, "neither a descriptor"),
    ([csvkernels.BY_PATH], (np.frombuffer(b"/x", dtype=np.uint8), np.zeros(1, dtype=np.int64)),
     "NUL-terminated"),
    ([csvkernels.BY_PATH, csvkernels.SKIP], (np.frombuffer(b"/x\0", dtype=np.uint8),
                                       np.zeros(1, dtype=np.int64)), "1 path offsets"),
    ([csvkernels.BY_PATH], (np.frombuffer(b"/x\0", dtype=np.uint8), np.array([3])), "not all in"),
    ([csvkernels.BY_PATH], (np.frombuffer(b"/x\0", dtype=np.uint8), np.array([-1])), "not all in"),
])
def test_write_lines_refuses_what_it_cannot_follow(fds: list[int], paths, message: str) -> None:
    n = len(fds)
    data = np.frombuffer(b"x\n" * n, dtype=np.uint8)
    ends = np.arange(2, 2 * n + 1, 2, dtype=np.int64)
    with pytest.raises(ValueError, match=message):
        csvkernels.write_lines(np.array(fds, dtype=np.int32), data, ends, 0, None,
                            *(paths or (None, None)))
