"""The rollup's grouping in the compiled object (``slave.engine.compiled_group``) against its
numpy reference (``numpy_stats``: ``protocol.grouping``), bit for bit, wire byte for wire byte:
randomized batches (many workloads, sparse and dense histograms, the overflow bucket, counts
past 2**32 and 2**53, empty groups, one group, errors only, zero I/O), plans that take every
role of a pass (held, driver, each workload's own, a pass of its own, entries grouped alike),
the batches and plans of ``scripts/bench_master``, and ``rollup_parts`` with and without the
compiled object. Inputs that are not valid batches are refused by the object and grouped by
numpy, so the wire is the same either way; mappings numpy refuses are refused as numpy does."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.results.output import RunOutput
from master.run.recorder import StepRecorder
from protocol.batch import GroupStats, StatsBatch
from protocol.buckets import N_BUCKETS
from protocol.stats import MAX, OPS, WorkloadStats
from protocol.views import N_KINDS, N_VIEWS, PERCENTILES
from scripts.bench_master_impl import ROLLUPS, host_batch, make_pool, make_workloads, placed
from slave.engine import compiled_group as cg
from slave.engine import compiled_loop as pk
from slave.engine.compiled_loop import GRP_DRIVER, GRP_HELD, GRP_HELD_MAX, GRP_SINGLE
from slave.session import group_maps, parse_plan, rollup_parts
from tests.protocol.test_grouping import _recorded, _synthetic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _compiled_here() -> None:
    if not pk.available():
        pytest.skip(f"no compiled object here: {pk.why_not()}")


def _wire(stats: GroupStats) -> dict[str, bytes | int]:
    return stats.to_wire()


def _assert_same(got: GroupStats, want: GroupStats) -> None:
    """The same arrays (dtypes, shapes, values, NaN where NaN) and the same wire bytes."""
    for name in ("counters", "lat", "rows", "buckets", "counts"):
        a, b = getattr(got.batch, name), getattr(want.batch, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name
    assert (got.pct is None) == (want.pct is None)
    if want.pct is not None:
        assert got.pct is not None and got.pct.dtype == want.pct.dtype
        assert np.array_equal(got.pct, want.pct, equal_nan=True)
    assert _wire(got) == _wire(want)


def _assert_compiled_is_numpy(batch: StatsBatch, entries: list[cg.Entry]) -> None:
    got = cg._compiled(batch, entries)
    assert got is not None, "the compiled object refused a valid batch"
    assert len(got) == len(entries)
    for e, stats in zip(entries, got, strict=True):
        _assert_same(stats, cg.numpy_stats(batch, e.of_workload, e.n_groups, e.histograms))


def _entries(rng: np.random.Generator, n: int, sizes: list[int]) -> list[cg.Entry]:
    """Each size a random mapping of ``n`` workloads, as percentiles and as histograms; the
    identity both ways too."""
    out = []
    for g in sizes:
        of = rng.integers(0, g, n) if n else np.zeros(0, dtype=np.intp)
        out += [cg.Entry(of, g, False), cg.Entry(of, g, True)]
    ident = np.arange(n)
    return [*out, cg.Entry(ident, n, False), cg.Entry(ident, n, True)]


def _errors_only(n: int) -> StatsBatch:
    stats = []
    for w in range(n):
        s = WorkloadStats()
        s.record_errors(w % 4, 1 + w)
        stats.append(s)
    return StatsBatch.from_stats(stats)


# ----------------------------------------------------------------------------- bit for bit
@pytest.mark.parametrize("seed", range(6))
def test_recorded_batches_are_numpy_bit_for_bit(seed: int) -> None:
    """Lognormal latencies in one to four categories, some workloads recording nothing."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    batch = _recorded(seed, n, sizes=None if seed % 2 else [0, 1, 2, 3, 50, 3000])
    _assert_compiled_is_numpy(batch, _entries(rng, n, [1, 2, 3, 7, max(1, n // 3), n, n + 5]))


@pytest.mark.parametrize(("seed", "scale", "span", "overflow", "sizes"), [
    (1, 1, 40, False, [1, 3, 60]),
    (2, 1, 40, True, [1, 3, 60]),  # the overflow bucket: interpolated up to the exact maximum
    (3, 3 << 33, 40, True, [1, 3, 60]),  # counts past 2**32
    (4, 1 << 40, 1, False, [1, 3, 60]),  # rows of one bucket
    (5, 1 << 54, 2, False, []),  # views of up to 2**62.6 I/Os (their groups would pass int64)
])
def test_synthetic_rows_are_numpy_bit_for_bit(seed: int, scale: int, span: int,
                                              overflow: bool, sizes: list[int]) -> None:
    batch = _synthetic(seed, 60, scale=scale, span=span, overflow=overflow)
    _assert_compiled_is_numpy(batch, _entries(np.random.default_rng(seed), 60, sizes))


def test_groups_past_int64_are_left_to_numpy() -> None:
    """A group whose operations pass 2**63 (numpy wraps them) is numpy's to add up."""
    batch = _synthetic(5, 60, scale=1 << 54, span=2)
    entries = [cg.Entry(np.zeros(60, dtype=np.intp), 1, False)]
    assert cg._compiled(batch, entries) is None
    _assert_same(cg.rollup(batch, entries)[0], cg.numpy_stats(batch, entries[0].of_workload,
                                                               1, False))


def test_sums_past_float64_are_numpy_bit_for_bit() -> None:
    """Counts of 54 significant bits, added exactly (numpy's float64 bincount would round:
    it splits them), and their percentiles."""
    batch = _synthetic(5, 8, scale=(1 << 53) + 1, span=2, validate=False)
    _assert_compiled_is_numpy(batch, _entries(np.random.default_rng(5), 8, [1, 2, 8]))


@pytest.mark.parametrize("batch_of", [
    lambda: StatsBatch.empty(),  # no workloads
    lambda: StatsBatch.empty(5),  # zero I/O
    lambda: _errors_only(9),  # errors only: no latency
    lambda: _recorded(7, 1, sizes=[1]),  # one workload of one I/O
    lambda: _recorded(8, 12, sizes=[12_000]),  # p99.9 of 12,000 is exactly the 11,988th
    lambda: _recorded(9, 30, sizes=[0, 0, 0, 1]),  # mostly empty
], ids=["no-workloads", "zero-io", "errors-only", "one-io", "exact-rank", "mostly-empty"])
def test_edge_batches_are_numpy_bit_for_bit(batch_of: Callable[[], StatsBatch]) -> None:
    batch = batch_of()
    n = batch.n_workloads
    none = np.zeros(n, dtype=np.intp)
    entries = _entries(np.random.default_rng(n), n, [1, 4] if n else [])
    entries += [cg.Entry(none, 3, False), cg.Entry(none, 3, True)]  # groups 1 and 2 empty
    _assert_compiled_is_numpy(batch, entries)


def test_many_workloads_in_every_role_are_numpy_bit_for_bit() -> None:
    """3,000 workloads: groups of four spread over the batch (the driver), three held entries,
    each workload's own percentiles, and a second entry of many groups (a pass of its own)."""
    n = 3_000
    batch = _recorded(21, n, sizes=[0, 10, 200, 2000, 5])
    rng = np.random.default_rng(21)
    by_four = np.arange(n) % (n // 4)
    entries = [cg.Entry(np.zeros(n, dtype=np.intp), 1, True),
               cg.Entry(np.zeros(n, dtype=np.intp), 1, False),
               cg.Entry(by_four, n // 4, False), cg.Entry(by_four, n // 4, True),
               cg.Entry(np.arange(n) % 3, 3, True), cg.Entry(rng.integers(0, 4, n), 4, False),
               cg.Entry(rng.integers(0, 300, n), 300, True), cg.Entry(np.arange(n), n, False)]
    _assert_compiled_is_numpy(batch, entries)


def test_the_passes_give_each_entry_its_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each workload's own percentiles, the entries of fewest groups held, the largest left
    the driver, the others a pass each; entries that group alike are added up once; a held
    entry whose groups are unions of the driver's takes them whole."""
    n = 40
    ones = np.zeros(n, dtype=np.intp)
    entries = [cg.Entry(ones, 1, True), cg.Entry(ones, 1, False),
               cg.Entry(np.arange(n) % 3, 3, False), cg.Entry(np.arange(n) % 10, 10, False),
               cg.Entry(np.arange(n) % 20, 20, False), cg.Entry(np.arange(n), n, False),
               cg.Entry(np.arange(n), n, True)]
    seen: list[list[tuple[int, int, bool]]] = []
    passes = cg._passes

    def spy(jobs: list[cg._Job]) -> list[list[cg._Job]]:
        out = passes(jobs)
        seen.extend([[(j.role, j.n_groups, j.of_driver is not None) for j in p] for p in out])
        return out

    monkeypatch.setattr(cg, "_passes", spy)
    _assert_compiled_is_numpy(_recorded(3, n), entries)
    # the one group takes the driver's 20 groups whole; the three groups do not (w % 20
    # does not tell w % 3)
    assert seen == [[(GRP_HELD, 1, True), (GRP_HELD, 3, False), (GRP_SINGLE, n, False),
                     (GRP_DRIVER, 20, False)], [(GRP_DRIVER, 10, False)]]


def test_more_entries_than_a_pass_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries beyond ``GRP_HELD_MAX`` (or ``HELD_GROUPS`` groups) drive passes of their own."""
    n = 50
    rng = np.random.default_rng(4)
    entries = [cg.Entry(rng.integers(0, 2, n), 2, bool(i % 2)) for i in range(GRP_HELD_MAX + 3)]
    batch = _recorded(4, n)
    _assert_compiled_is_numpy(batch, entries)  # HELD_GROUPS: four held
    monkeypatch.setattr(cg, "HELD_GROUPS", 1000)
    _assert_compiled_is_numpy(batch, entries)  # GRP_HELD_MAX held


# ----------------------------------------------------------------------------- refusals
def _broken(kind: str) -> StatsBatch:
    """A batch that is not valid, in one way."""
    b = _recorded(11, 20, sizes=[0, 3, 400])
    counters, lat = b.counters.copy(), b.lat.copy()
    rows, buckets, counts = b.rows.copy(), b.buckets.copy(), b.counts.copy()
    k = int(np.flatnonzero(np.diff(rows) == 0)[5]) + 1  # a coordinate after one of its row
    w, c = divmod(int(rows[k]) // 2, 4)
    if kind == "rows-unsorted":
        rows[[k, -1]] = rows[[-1, k]]
    elif kind == "row-out-of-range":
        rows[-1] = b.n_workloads * 8
    elif kind == "bucket-out-of-range":
        buckets[k] = N_BUCKETS
    elif kind == "bucket-repeated":
        buckets[k] = buckets[k - 1]
    elif kind == "count-zero":
        counts[k] = 0
    elif kind == "count-negative":
        counts[k - 1] += counts[k] + 1
        counts[k] = -1
    elif kind == "rows-differ-from-ops":
        counters[w, c, OPS] += 1
    elif kind == "ops-negative":
        empty = np.argwhere(counters[:, :, OPS] == 0)[0]
        counters[empty[0], empty[1], OPS] = -1
    elif kind == "max-below-minus-one":
        empty = np.argwhere(counters[:, :, OPS] == 0)[0]
        lat[empty[0], empty[1], 0, MAX] = -7
    return StatsBatch(counters=counters, lat=lat, rows=rows, buckets=buckets, counts=counts)


def _outcome(fn: Callable[[], list[GroupStats]]) -> list[dict[str, bytes | int]] | str:
    try:
        return [_wire(s) for s in fn()]
    except Exception as exc:  # numpy's own failure on a broken batch
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("kind", [
    "rows-unsorted", "row-out-of-range", "bucket-out-of-range", "bucket-repeated",
    "count-zero", "count-negative", "rows-differ-from-ops", "ops-negative",
    "max-below-minus-one"])
def test_a_batch_that_is_not_valid_is_left_to_numpy(kind: str) -> None:
    batch = _broken(kind)
    n = batch.n_workloads
    entries = _entries(np.random.default_rng(1), n, [1, 3, 8])
    entries.append(cg.Entry(np.arange(n) % 10, 10, False))  # a driver
    assert cg._compiled(batch, entries) is None
    numpy = _outcome(lambda: [cg.numpy_stats(batch, e.of_workload, e.n_groups, e.histograms)
                              for e in entries])
    assert _outcome(lambda: cg.rollup(batch, entries)) == numpy


def test_batches_broken_at_random_are_refused_or_numpy_s() -> None:
    """Rows, buckets, counts, counters and latencies changed at random: the object refuses
    the batch, or what it gives is numpy's bit for bit (a change that keeps it valid)."""
    rng = np.random.default_rng(64)
    took = 0
    for _ in range(300):
        n = int(rng.integers(1, 30))
        b = _recorded(int(rng.integers(0, 1000)), n, sizes=[0, 1, 5, 300])
        c, lat, rows = b.counters.copy(), b.lat.copy(), b.rows.copy()
        buckets, counts = b.buckets.copy(), b.counts.copy()
        at = rng.integers(0, max(rows.size, 1), int(rng.integers(1, 4)))
        what = int(rng.integers(0, 6))
        if rows.size and what == 0:
            rows[at] = rng.integers(0, n * 8 + 3, at.size)
        elif rows.size and what == 1:
            buckets[at] = rng.integers(0, 1 << 16, at.size)
        elif rows.size and what == 2:
            counts[at] = rng.integers(-5, 5, at.size)
        elif what == 3:
            c[rng.integers(0, n), rng.integers(0, 4), OPS] = rng.integers(-3, 3)
        elif what == 4:
            lat[rng.integers(0, n), rng.integers(0, 4), rng.integers(0, 2),
                rng.integers(0, 3)] = rng.integers(-10, 10**6)
        elif rows.size:
            counts[at] = np.int64(1) << 62
        broken = StatsBatch(counters=c, lat=lat, rows=rows, buckets=buckets, counts=counts)
        entries = [cg.Entry(rng.integers(0, g, n), g, bool(rng.integers(0, 2)))
                   for g in (1, 2, max(1, n // 3), n)] + [cg.Entry(np.arange(n), n, False)]
        got = cg._compiled(broken, entries)
        if got is None:
            continue
        took += 1
        for e, stats in zip(entries, got, strict=True):
            _assert_same(stats, cg.numpy_stats(broken, e.of_workload, e.n_groups, e.histograms))
    assert 0 < took < 300


@pytest.mark.parametrize(("of", "n_groups", "message"), [
    ([0, 1], 2, "shape"),
    ([0, 1, 2], 2, "outside"),
    ([0, -1, 1], 2, "outside"),
    ([0.0, 1.0, 1.0], 2, "integers"),
    ([0, 0, 0], -1, ">= 0"),
])
def test_mappings_numpy_refuses_are_refused_alike(of: list[float], n_groups: int,
                                                  message: str) -> None:
    batch = _recorded(seed=2, n=3)
    entries = [cg.Entry(np.zeros(3, dtype=np.intp), 1, False), cg.Entry(np.array(of), n_groups,
                                                                      False)]
    with pytest.raises(ValueError, match=message):
        cg.rollup(batch, entries)


def test_a_mirror_that_differs_from_the_compiled_struct_is_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lib = pk.library()
    assert lib is not None and cg._grp_layout_fits(lib)
    batch = _recorded(2, 10)
    entries = [cg.Entry(np.arange(10) % 2, 2, False)]
    monkeypatch.setattr(cg, "GRP_DTYPE", np.dtype([("role", "<i8"), ("n_groups", "<i8")]))
    monkeypatch.setattr(cg, "_fits", {})
    assert cg._compiled(batch, entries) is None
    _assert_same(cg.rollup(batch, entries)[0], cg.numpy_stats(batch, np.arange(10) % 2, 2, False))


# ----------------------------------------------------------------------------- the slave's
def _bench_hosts(tmp_path: Path, n_hosts: int, per_host: int
                 ) -> list[tuple[list[dict[str, Any]], list[str], StatsBatch]]:
    """``scripts/bench_master``'s inputs: per host, its rollup plan from the master's recorder,
    its workload ids and a batch of its workloads from the bench's pool."""
    workloads, ids_by_host = make_workloads(n_hosts, per_host)
    hosts = [f"host{h:03d}" for h in range(n_hosts)]
    settings = placed(workloads)
    output = RunOutput(tmp_path / "run")
    try:
        rec = StepRecorder(output, 0, "bench", ROLLUPS, 1.0, workloads, settings, "host",
                           hosts=hosts, fold_measurement=True)
        pool = make_pool(24, np.random.default_rng(7))
        rng = np.random.default_rng(n_hosts)
        return [(rec.plan_for(h), ids, host_batch(pool, rng.integers(0, 24, len(ids))))
                for h, ids in zip(hosts, ids_by_host, strict=True)]
    finally:
        output.close()


@pytest.mark.parametrize(("n_hosts", "per_host"), [(3, 40), (1, 2_000)])
def test_rollup_parts_on_the_bench_s_inputs_is_the_same_without_the_object(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_hosts: int, per_host: int) -> None:
    """Several hosts (the all and vendor+model entries as histograms) and one host of many
    workloads (every entry a percentile table): the wire of ``rollup_parts`` with the compiled
    object and without it (``compiled_loop.library`` None) is the same, and each entry is
    numpy's."""
    for raw, ids, batch in _bench_hosts(tmp_path, n_hosts, per_host):
        plan = parse_plan(raw, set(ids))
        maps = group_maps(plan, ids)
        compiled = rollup_parts(plan, maps, batch)
        assert any(e.histograms for e in plan) == (n_hosts > 1)
        entries = [cg.Entry(of, len(e.groups), e.histograms)
                   for e, of in zip(plan, maps, strict=True)]
        _assert_compiled_is_numpy(batch, entries)
        with monkeypatch.context() as m:
            m.setattr(pk, "library", lambda: None)
            assert rollup_parts(plan, maps, batch) == compiled


def test_a_slave_without_the_compiled_object_groups_by_numpy(tmp_path: Path) -> None:
    """In a fresh process with the compiler turned off: no object, the same wire."""
    batch = _recorded(12, 30, sizes=[0, 5, 900])
    np.savez(tmp_path / "b.npz", **{k: getattr(batch, k)
                                   for k in ("counters", "lat", "rows", "buckets", "counts")})
    code = ("import pickle, sys\n"
            "import numpy as np\n"
            "from protocol.batch import StatsBatch\n"
            "from slave.engine import compiled_group as cg, compiled_loop as pk\n"
            f"d = np.load({str(tmp_path / 'b.npz')!r})\n"
            "b = StatsBatch(**{k: d[k] for k in d.files})\n"
            "es = [cg.Entry(np.arange(30) % 4, 4, False), cg.Entry(np.zeros(30, int), 1, True)]\n"
            "print(pk.library() is None)\n"
            "sys.stdout.flush()\n"
            "sys.stdout.buffer.write(pickle.dumps([s.to_wire() for s in cg.rollup(b, es)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT,
                          env={**os.environ, "IVYPY_SLAVE_CC": "none",
                               "XDG_CACHE_HOME": str(tmp_path)}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    head, _, body = done.stdout.partition(b"\n")
    assert head == b"True"
    entries = [cg.Entry(np.arange(30) % 4, 4, False), cg.Entry(np.zeros(30, int), 1, True)]
    assert pickle.loads(body) == [_wire(s) for s in cg.rollup(batch, entries)]


def test_the_table_s_shape_and_nan() -> None:
    batch = _recorded(13, 6, sizes=[0, 40])
    (stats,) = cg.rollup(batch, [cg.Entry(np.arange(6) % 2, 2, False)])
    assert stats.pct is not None
    assert stats.pct.shape == (2, N_VIEWS, N_KINDS, len(PERCENTILES))
    assert stats.batch.rows.size == 0
