"""The per-workload statistics block and its batched sparse wire form."""

from __future__ import annotations

import numpy as np
import pytest

from protocol import batch as batch_mod
from protocol.batch import StatsBatch
from protocol.errors import RemoteProtocolError
from protocol.histogram import LatencyHistogram
from protocol.stats import BYTES, ERRORS, OPS, WorkloadStats, record_groups
from protocol.views import CATEGORIES, category_index


def _filled(seed: int, n: int = 5000) -> tuple[WorkloadStats, dict[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    cat = rng.integers(0, 4, n)
    svc = rng.lognormal(11, 1, n).astype(np.int64)
    s = WorkloadStats()
    s.record(cat, svc, svc + 1000, 4096)
    return s, {c: svc[cat == c] for c in range(4)}


def test_category_index_order() -> None:
    assert [CATEGORIES[category_index(seq, w)] for seq in (0, 1) for w in (0, 1)] == [
        "random_read",
        "random_write",
        "sequential_read",
        "sequential_write",
    ]


def test_record_mixed_batch_matches_per_category_histograms() -> None:
    s, by_cat = _filled(1)
    for c, svc in by_cat.items():
        assert s.counters[c, OPS] == svc.size
        assert s.counters[c, BYTES] == 4096 * svc.size
        assert s.histogram(c, 0) == LatencyHistogram.from_values(svc)
        assert s.histogram(c, 1) == LatencyHistogram.from_values(svc + 1000)


def test_record_single_category_and_errors() -> None:
    s = WorkloadStats()
    s.record(3, [10, 20], [30, 40], [512, 1024])
    s.record_errors(3, 2)
    assert s.counters[3].tolist() == [2, 1536, 2]
    assert s.histogram(3, 1).min_ns == 30
    assert s.histogram(0, 0).count == 0 and s.histogram(0, 0).mean_ns is None


@pytest.mark.parametrize("cats", ["one", "mixed"])
@pytest.mark.parametrize("values", [[5], [0, 7, 7, 123_456, 99_000_000], [1 << 45, 3]])
def test_record_with_response_the_service_array_bins_it_for_both(cats: str,
                                                                  values: list[int]) -> None:
    """Max iops hands ``record`` one array for both (binned once): the same result as two."""
    svc = np.array(values, dtype=np.int64)
    cat: int | np.ndarray = 2 if cats == "one" else np.arange(svc.size) % 3
    once, twice = WorkloadStats(), WorkloadStats()
    once.record(cat, svc, svc, 4096)
    twice.record(cat, svc, svc.copy(), 4096)
    assert np.array_equal(once.buffer, twice.buffer)
    first = 2 if cats == "one" else 0  # the first value's category
    assert once.histogram(first, 1) == once.histogram(first, 0) != LatencyHistogram()
    with pytest.raises(ValueError):
        once.record(cat, -svc - 1, -svc - 1, 4096)


def test_record_rejects_bad_batches() -> None:
    s = WorkloadStats()
    with pytest.raises(ValueError):
        s.record(0, [1, 2], [1], 4096)
    with pytest.raises(ValueError):
        s.record(0, [-1], [1], 4096)
    with pytest.raises(ValueError):
        s.record([0, 1, 2], [1, 2], [1, 2], 4096)
    with pytest.raises(ValueError):
        WorkloadStats(np.zeros(10, dtype=np.int64))


def test_merge_into_equals_recording_both() -> None:
    a, _ = _filled(1)
    b, _ = _filled(2)
    both = WorkloadStats()
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        cat = rng.integers(0, 4, 5000)
        svc = rng.lognormal(11, 1, 5000).astype(np.int64)
        both.record(cat, svc, svc + 1000, 4096)
    a.merge_into(b)
    assert a == both


def test_batch_round_trip() -> None:
    stats = [_filled(i)[0] for i in range(5)] + [WorkloadStats()]
    batch = StatsBatch.from_stats(stats)
    back = StatsBatch.from_wire(batch.to_wire())
    assert back.n_workloads == 6
    for i, s in enumerate(stats):
        assert back.workload(i) == s
    assert StatsBatch.from_wire(StatsBatch.from_stats([]).to_wire()).n_workloads == 0


def _corrupt(wire: dict[str, object], key: str, value: object) -> dict[str, object]:
    out = dict(wire)
    out[key] = value
    return out


def test_batch_malformed_is_a_protocol_error() -> None:
    s, _ = _filled(3, 100)
    wire: dict[str, object] = dict(StatsBatch.from_stats([s, s.copy()]).to_wire())
    counters = np.frombuffer(wire["counters"], dtype="<i8").copy()  # type: ignore[call-overload]
    counters[0] += 1
    counts = np.frombuffer(wire["counts"], dtype="<i8").copy()  # type: ignore[call-overload]
    rows = np.frombuffer(wire["rows"], dtype="<u4").copy()  # type: ignore[call-overload]
    cases = [
        _corrupt(wire, "n", 3),
        _corrupt(wire, "n", -1),
        _corrupt(wire, "n", "2"),
        _corrupt(wire, "counters", b"\0" * 7),
        _corrupt(wire, "counters", counters.tobytes()),
        _corrupt(wire, "counts", (counts * 0).tobytes()),
        _corrupt(wire, "rows", rows[::-1].copy().tobytes()),
        _corrupt(wire, "buckets", b"\0"),
        _corrupt(wire, "lat", 5),
        {k: v for k, v in wire.items() if k != "rows"},
    ]
    for bad in cases:
        with pytest.raises(RemoteProtocolError):
            StatsBatch.from_wire(bad)


def test_errors_counter_independent_of_histograms() -> None:
    s = WorkloadStats()
    s.record_errors(1, 5)
    back = StatsBatch.from_wire(StatsBatch.from_stats([s]).to_wire()).workload(0)
    assert back.counters[1, ERRORS] == 5


@pytest.mark.parametrize("extra", [0, 1])
def test_row_totals_are_exact_beyond_2_to_the_53(extra: int) -> None:
    """A histogram row whose counts add up past 2**53 (float64 would round 2**53 + 1 down):
    a batch whose counters agree is accepted, by both validators, and one off by one is
    refused."""
    from master.analysis import kernels

    big = 1 << 53
    s = WorkloadStats()
    c = category_index(False, True)  # random write
    s.counters[c, OPS] = big + 1 + extra
    s.lat[c, :, :] = [[(big + 1) * 1000, 1000, 2000]] * 2
    rows = s.hist.reshape(-1, s.hist.shape[-1])
    for r in (2 * c, 2 * c + 1):  # service and response time rows
        rows[r, 10], rows[r, 11] = big, 1
    batch = StatsBatch.from_wire(StatsBatch.from_stats([s]).to_wire(), validate=False)
    if extra:
        with pytest.raises(RemoteProtocolError, match="differ from the ops counters"):
            batch.validate()
        with pytest.raises(RemoteProtocolError, match="differ from the ops counters"):
            kernels.validate_batch(batch)
    else:
        batch.validate()
        kernels.validate_batch(batch)


def _entries(histograms: bool) -> list[dict[str, object]]:
    """Three hosts' entries of one rollup type: 3 groups, none, 2 groups."""
    from protocol.batch import GroupStats
    from protocol.grouping import view_percentiles

    out = []
    for seed, n in ((1, 3), (2, 0), (3, 2)):
        batch = StatsBatch.from_stats([_filled(seed * 10 + i, 300)[0] for i in range(n)])
        if histograms:
            gs = GroupStats(batch)
        else:
            side = StatsBatch(batch.counters, batch.lat, batch.rows[:0], batch.buckets[:0],
                              batch.counts[:0])
            gs = GroupStats(side, view_percentiles(batch))
        out.append(dict(gs.to_wire()))
    return out


@pytest.mark.parametrize("histograms", [True, False])
def test_join_wire_is_concat_of_from_wire(histograms: bool) -> None:
    from protocol.batch import GroupStats

    entries = _entries(histograms)
    for pick in ([0], [1], [0, 1, 2], [2, 1, 0, 0]):
        wires = [entries[i] for i in pick]
        joined, sizes = GroupStats.join_wire(wires, histograms=histograms)
        alone = [GroupStats.from_wire(w, histograms=histograms) for w in wires]
        pcts = [p.pct for p in alone if p.pct is not None]
        want = GroupStats(StatsBatch.concat([p.batch for p in alone]),
                          np.concatenate(pcts) if pcts else None)
        assert sizes == [int(w["n"]) for w in wires]  # type: ignore[call-overload]
        for name in ("counters", "lat", "rows", "buckets", "counts"):
            got, ref = getattr(joined.batch, name), getattr(want.batch, name)
            assert got.dtype == ref.dtype and np.array_equal(got, ref), name
            assert got.flags.writeable  # as the compiled kernels take them
        assert (joined.pct is None) == (want.pct is None)
        if joined.pct is not None and want.pct is not None:
            assert np.array_equal(joined.pct, want.pct, equal_nan=True)
        joined.check()


@pytest.mark.parametrize("histograms", [True, False])
def test_join_wire_refuses_what_from_wire_refuses(histograms: bool) -> None:
    from protocol.batch import GroupStats

    entries = _entries(histograms)
    other = _entries(not histograms)
    bad_entries = [
        _corrupt(entries[2], "counters", b"\0" * 7),
        _corrupt(entries[2], "n", 7),
        _corrupt(entries[2], "pct", 5),
        {k: v for k, v in entries[2].items() if k != "lat"},
        other[2],  # histograms where a percentile table was asked for, or the reverse
        _corrupt(entries[2], "pct", b"\0" * 8 if histograms else b"\0" * 16),
        [1, 2],
    ]
    for bad in bad_entries:
        with pytest.raises(RemoteProtocolError) as alone:
            GroupStats.from_wire(bad, histograms=histograms, validate=False)  # type: ignore[arg-type]
        with pytest.raises(RemoteProtocolError) as joined:
            GroupStats.join_wire([entries[0], bad, entries[1]], histograms=histograms)
        assert str(joined.value) == str(alone.value)
    with pytest.raises(ValueError, match="nothing"):
        GroupStats.join_wire([], histograms=histograms)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize(("groups", "seed"), [(1, 0), (5, 1), (40, 2), (300, 3)])
def test_record_groups_equals_record_per_group(groups: int, seed: int, shared: bool) -> None:
    # shared: the targets are views of one region (as a worker's shared memory), which takes
    # the path of a dozen ufunc.at calls; else one update per group
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 30, groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp)
    n = int(sizes.sum())
    svc = rng.integers(0, 5_000_000_000, n).astype(np.int64)  # up to 5 s: also the overflow
    rsp = svc + rng.integers(0, 1_000_000, n)
    nb = rng.choice([512, 4096, 65536], n).astype(np.int64)
    cats = rng.integers(0, 4, groups).tolist()
    owners = rng.integers(0, max(groups // 3, 1), groups).tolist()  # several groups per target
    count = max(owners) + 1
    if shared:
        region = np.zeros(WorkloadStats.SIZE * (count + 2), dtype=np.int64)
        z = WorkloadStats.SIZE
        mine = [WorkloadStats(region[(i + 1) * z : (i + 2) * z]) for i in range(count)]
        for st in mine:
            st.reset()
    else:
        mine = [WorkloadStats() for _ in range(count)]
    want = [WorkloadStats() for _ in mine]
    targets: list[WorkloadStats | None] = [mine[o] for o in owners]
    targets[-1] = None  # a deleted workload: its group is not recorded
    record_groups(targets, cats, starts, svc, rsp, nb)
    for g, (a, size) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
        if g < groups - 1:
            b = a + size
            want[owners[g]].record(cats[g], svc[a:b], rsp[a:b], nb[a:b])
    for got, exp in zip(mine, want, strict=True):
        assert got == exp
    if shared:  # nothing outside the targets' blocks was touched
        assert not region[: WorkloadStats.SIZE].any() and not region[-WorkloadStats.SIZE :].any()


def test_record_groups_refuses_negative_latency() -> None:
    st = WorkloadStats()
    with pytest.raises(ValueError, match=">= 0"):
        record_groups([st], [0], np.array([0], dtype=np.intp), np.array([5, -1]),
                      np.array([5, 5]), np.array([4096, 4096]))
    assert st == WorkloadStats()


# latencies at the ladder's seams: one bucket per value below 128 ns, then groups of 64; the
# overflow bucket from 2**42 ns
_SEAMS = [0, 1, 63, 64, 127, 128, 129, 191, 192, 255, 256, 4095, 4096, 123_456,
          (1 << 42) - 1, 1 << 42, (1 << 42) + 7, 1 << 62]


@pytest.mark.parametrize(("case", "svc", "rsp", "cats"), [
    ("seams, one category", _SEAMS, [v + 3 for v in _SEAMS], [0] * len(_SEAMS)),
    ("seams, every category", _SEAMS, _SEAMS[::-1], [i % 4 for i in range(len(_SEAMS))]),
    ("random", None, None, None),
])
@pytest.mark.parametrize("shared", [False, True])
def test_record_one_equals_record(case: str, svc: list[int] | None, rsp: list[int] | None,
                                  cats: list[int] | None, shared: bool) -> None:
    if svc is None or rsp is None or cats is None:
        rng = np.random.default_rng(7)
        svc = rng.lognormal(11, 2, 3000).astype(np.int64).tolist()
        rsp = [v + int(d) for v, d in zip(svc, rng.integers(0, 10**6, 3000), strict=True)]
        cats = rng.integers(0, 4, 3000).tolist()
    nb = [512 * (1 + i % 9) for i in range(len(svc))]
    if shared:  # a view inside a worker's region: nothing outside it may change
        z = WorkloadStats.SIZE
        region = np.zeros(3 * z, dtype=np.int64)
        got = WorkloadStats(region[z : 2 * z])
        got.reset()
    else:
        got = WorkloadStats()
    for c, s, r, b in zip(cats, svc, rsp, nb, strict=True):
        got.record_one(c, s, r, b)
    want = WorkloadStats()
    want.record(np.array(cats), np.array(svc), np.array(rsp), np.array(nb))
    assert got == want, case
    if shared:
        assert not region[: WorkloadStats.SIZE].any() and not region[-WorkloadStats.SIZE :].any()


@pytest.mark.parametrize(("case", "svc", "rsp"), [
    ("seams", _SEAMS, [v + 3 for v in _SEAMS]),
    ("seams, response is service", _SEAMS, None),
    ("inside the ladder", [64, 65, 4096, 123_456, (1 << 42) - 1], [70, 80, 90, 100, 1 << 30]),
    ("random", None, None),
])
def test_record_category_equals_record_one(case: str, svc: list[int] | None,
                                           rsp: list[int] | None) -> None:
    """The engine's form (int64 arrays, one category, bytes summed, response None when it is
    the service time) bins exactly as one I/O at a time, into a stats block already holding
    I/Os (its min and max kept where they are lower / higher)."""
    if case == "random":
        rng = np.random.default_rng(11)
        svc = rng.lognormal(11, 2, 3000).astype(np.int64).tolist()
        rsp = [v + int(d) for v, d in zip(svc, rng.integers(0, 10**6, 3000), strict=True)]
    assert svc is not None
    got, want = WorkloadStats(), WorkloadStats()
    for st in (got, want):
        st.record_one(1, 100, 200, 512)
        st.record_one(1, 1 << 43, 1 << 43, 512)
    for s, r in zip(svc, svc if rsp is None else rsp, strict=True):
        want.record_one(1, s, r, 4096)
    got.record_category(1, np.array(svc, dtype=np.int64),
                        None if rsp is None else np.array(rsp, dtype=np.int64), 4096 * len(svc))
    assert got == want, case


@pytest.mark.parametrize(("svc", "rsp"), [([5, -1], [5, 6]), ([5, 6], [7, -1])])
def test_record_category_refuses_negative_latency_and_changes_nothing(
        svc: list[int], rsp: list[int]) -> None:
    st = WorkloadStats()
    with pytest.raises(ValueError, match=">= 0"):
        st.record_category(0, np.array(svc), np.array(rsp), 8192)
    assert st == WorkloadStats()


@pytest.mark.parametrize(("svc", "rsp"), [(-1, 5), (5, -1)])
def test_record_one_refuses_negative_latency(svc: int, rsp: int) -> None:
    st = WorkloadStats()
    with pytest.raises(ValueError, match=">= 0"):
        st.record_one(0, svc, rsp, 4096)
    assert st == WorkloadStats()


def _region_of(fills: list[str], seed: int) -> np.ndarray:
    """A worker-like region: (len(fills), 2, SIZE) blocks, side 0 filled as each case says,
    side 1 with something else (drain must leave it alone)."""
    rng = np.random.default_rng(seed)
    z = WorkloadStats.SIZE
    region = np.zeros((len(fills), 2, z), dtype=np.int64)
    for i, how in enumerate(fills):
        st, other = WorkloadStats(region[i, 0]), WorkloadStats(region[i, 1])
        st.reset()
        other.reset()
        other.record_one(1, 1000 + i, 2000 + i, 512)
        n = int(rng.integers(1, 300))
        svc = rng.lognormal(11, 2, n).astype(np.int64)
        rsp = svc + rng.integers(0, 10**6, n)
        cat = rng.integers(0, 4, n)
        if how == "record":
            st.record(cat, svc, rsp, 4096)
        elif how == "record_one":
            for c, s, r in zip(cat.tolist(), svc.tolist(), rsp.tolist(), strict=True):
                st.record_one(c, s, r, 4096)
        elif how == "seams":
            st.record(np.arange(len(_SEAMS)) % 4, np.array(_SEAMS), np.array(_SEAMS[::-1]), 512)
        elif how == "one value":
            st.record(2, np.full(n, 77_777), np.full(n, 77_777), 512)
        elif how == "errors only":
            st.record_errors(3, 5)
        elif how == "bytes without latency":  # not a state recording makes; drained as is
            st.counters[0, BYTES] = 4096
        elif how not in ("empty", "groups"):
            raise AssertionError(how)
    if "groups" in fills:  # several blocks at once through the shared region's path
        mine = [WorkloadStats(region[i, 0]) for i, how in enumerate(fills) if how == "groups"]
        sizes = rng.integers(1, 40, 3 * len(mine))
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp)
        n = int(sizes.sum())
        svc = rng.integers(0, 5_000_000_000, n).astype(np.int64)
        record_groups([mine[g % len(mine)] for g in range(sizes.size)],
                      rng.integers(0, 4, sizes.size).tolist(), starts, svc,
                      svc + rng.integers(0, 10**6, n), np.full(n, 4096, dtype=np.int64))
    return region


@pytest.mark.parametrize("fills", [
    ["record", "record_one", "seams", "one value", "errors only", "empty", "groups", "groups"],
    ["empty"] * 5,
    ["record"] * 40,
    ["bytes without latency", "record"],
    [],
])
@pytest.mark.parametrize("pieces", ["one piece", "a piece per row"])
def test_drain_equals_a_copy_and_leaves_the_blocks_empty(
    fills: list[str], pieces: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pieces == "a piece per row":  # the gather in pieces must not change the result
        monkeypatch.setattr(batch_mod, "_DRAIN_CELLS", 1)
    region = _region_of(fills, seed=len(fills))
    before = region.copy()
    slots = np.arange(len(fills))[::-1].copy()  # any order of slots
    got = StatsBatch.drain(region[:, 0], slots)
    want = StatsBatch.from_flat(before[slots, 0])
    for name in ("counters", "lat", "rows", "buckets", "counts"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    got.validate()
    empty = WorkloadStats().buffer
    assert all(np.array_equal(region[i, 0], empty) for i in range(len(fills)))
    assert np.array_equal(region[:, 1], before[:, 1])  # the other side is untouched


def test_drain_leaves_slots_it_was_not_asked_for() -> None:
    region = _region_of(["record", "record", "record"], seed=3)
    before = region.copy()
    got = StatsBatch.drain(region[:, 0], [1])
    assert got.n_workloads == 1 and got.workload(0) == WorkloadStats(before[1, 0].copy())
    assert np.array_equal(region[[0, 2]], before[[0, 2]])


@pytest.mark.parametrize("break_it", ["a latency without its minimum and maximum",
                                      "an operation without latencies",
                                      "a count inside the range"])
def test_drain_reads_a_row_whole_when_its_counts_do_not_add_up(break_it: str) -> None:
    """A row whose counts between its minimum's and maximum's buckets do not add up to its
    operations is read and cleared whole: the batch shows what the block held, and
    validation names what does not add up."""
    region = _region_of(["record", "record"], seed=9)
    st = WorkloadStats(region[1, 0])
    c = int(np.flatnonzero(st.counters[:, OPS])[0])
    if break_it == "a latency without its minimum and maximum":  # outside the range
        st.counters[c, OPS] += 1
        st.hist[c, :, 3] += 1
    elif break_it == "an operation without latencies":
        st.counters[c, OPS] += 1
    else:
        st.hist[c, 1, int(np.flatnonzero(st.hist[c, 1])[-1])] += 1
    before = region.copy()
    got = StatsBatch.drain(region[:, 0], [0, 1], audit=1)
    want = StatsBatch.from_flat(before[:, 0])
    for name in ("counters", "lat", "rows", "buckets", "counts"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert np.array_equal(region[1, 0], WorkloadStats().buffer)
    if break_it != "a latency without its minimum and maximum":  # that one adds up
        with pytest.raises(RemoteProtocolError):
            got.validate()


@pytest.mark.parametrize("bucket", [3, 2000, -1])
def test_drain_audit_finds_a_count_outside_the_recorded_range(bucket: int) -> None:
    """A count outside [bucket(min), bucket(max)] is not read (no recording method puts one
    there: the equality test above would miss it). The audit of that block finds it."""
    region = _region_of(["record", "record"], seed=9)
    st = WorkloadStats(region[1, 0])
    c = int(np.flatnonzero(st.counters[:, OPS])[0])
    st.hist[c, 1, bucket] += 1
    StatsBatch.drain(region[:, 0].copy(), [0, 1], audit=0)  # another block: not seen
    with pytest.raises(ValueError, match=f"block 1: histogram row {2 * c + 1} .*kept 1 "
                       f"nonzero buckets outside its recorded range, the first at bucket "
                       f"{bucket % 2369}"):
        StatsBatch.drain(region[:, 0], [0, 1], audit=1)
