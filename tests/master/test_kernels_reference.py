"""master.analysis.kernels: each C kernel (kernels.c, ``_<name>``) against its Python reference
(``master.analysis.kernelref.<name>_py``), bit for bit, on random and edge-case inputs: empty ones,
one workload, the sparse and dense walks of the percentiles, NaN and infinities, int64 sums that
wrap; the refusals of ``validate_batch`` and ``check_group_stats`` against ``StatsBatch.validate``
and ``GroupStats.check``; and the C compiled alone without a warning."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from master.analysis import kernelref as ref
from master.analysis import kernels as k
from master.analysis import native
from protocol.batch import GroupStats, StatsBatch, view_min_max
from protocol.buckets import N_BUCKETS, OVERFLOW_INDEX
from protocol.errors import RemoteProtocolError
from protocol.grouping import view_percentiles as group_view_percentiles
from protocol.histogram import PCT_SCALE, percentile_numerators
from protocol.stats import MAX, MIN, OPS, ROWS_PER_WORKLOAD, WorkloadStats
from protocol.views import MEMBERSHIP, N_VIEWS

SOURCE = Path(k.__file__).with_suffix(".c")
needs_cc = pytest.mark.skipif(not native.compiler(), reason="no C compiler here")
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def _bits_equal(got: Any, want: Any) -> bool:
    """Same dtype, shape and bits (NaN payloads too)."""
    got, want = np.asarray(got), np.asarray(want)
    return (got.dtype == want.dtype and got.shape == want.shape
            and np.array_equal(got.view(np.uint8), want.view(np.uint8)))


# ----------------------------------------------------------------------------- the source
@needs_cc
def test_the_source_compiles_without_a_warning(tmp_path: Path) -> None:
    """With the build's own compiler and flags, alone (it must not need csvkernels.c); its
    exported functions are the ivk_ ones, every helper static."""
    out = tmp_path / "kernels.so"
    done = subprocess.run([*native.compiler(), *native.FLAGS, "-Wextra", "-Werror", "-o",
                           str(out), str(SOURCE), *native.LIBS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if shutil.which("nm") is None:
        pytest.skip("no nm here to list the exported names")
    listed = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True,
                            text=True, check=True).stdout.split("\n")
    exported = {line.split()[2] for line in listed
                if line.split()[1:2] == ["T"] and not line.split()[2].startswith("_")}
    assert exported == {*k._SIGNATURES}, exported


# ----------------------------------------------------------------------------- percentiles
def _percentile_case(rng: np.random.Generator, n_workloads: int, sizes: list[int],
                     n_views: int, pcts: list[float]) -> dict[str, Any]:
    """Workloads of up to 8 histogram rows each (rows empty at random, buckets rising with
    repeats, some near the overflow bucket, a few counts 0), their totals mostly the rows'
    sums (sometimes more or less, or set on an empty row), instances of ``sizes`` workloads
    each (0: none), the standard views and random ones, extremes mostly ordered, sometimes
    NaN or infinite, sometimes 0 and inf (the buckets' edges then bound the values)."""
    buckets: list[int] = []
    counts: list[int] = []
    bounds = [0]
    row_tot = np.zeros(n_workloads * ROWS_PER_WORKLOAD, dtype=np.int64)
    for r in range(n_workloads * ROWS_PER_WORKLOAD):
        if rng.random() < 0.35:
            n = 0
        else:
            n = int(rng.integers(1, 25))
            base = int(rng.choice([0, rng.integers(0, 2000), OVERFLOW_INDEX - 30]))
            got = np.sort(rng.integers(base, min(base + 60, N_BUCKETS), n))  # repeats too
            c = rng.integers(1, 40, n)
            if rng.random() < 0.2:
                c = c * (1 << int(rng.integers(20, 44)))  # totals past 100 * PCT_SCALE
            c[rng.random(n) < 0.03] = 0  # what validation refuses, but alike
            buckets += got.tolist()
            counts += c.tolist()
            row_tot[r] = int(c.sum())
        bounds.append(bounds[-1] + n)
        roll = rng.random()
        if roll < 0.05:
            row_tot[r] += int(rng.integers(1, 50))  # more I/Os than counted
        elif roll < 0.1 and row_tot[r] > 1:
            row_tot[r] -= int(rng.integers(1, row_tot[r]))  # fewer
    assert sum(sizes) == n_workloads
    order = rng.permutation(n_workloads)
    inst_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    g = len(sizes)
    cats = np.concatenate([MEMBERSHIP > 0, rng.random((max(n_views - N_VIEWS, 0), 4)) < 0.5])
    cats = cats[:n_views]
    if n_views > N_VIEWS:
        cats[-1] = False  # a view of no category
    mins = rng.uniform(0, 1e9, (g, n_views, 2))
    maxs = mins + rng.uniform(0, 1e12, (g, n_views, 2))
    odd = rng.random((g, n_views, 2))
    mins[odd < 0.05] = np.nan
    maxs[(odd > 0.05) & (odd < 0.1)] = np.inf
    mins[(odd > 0.1) & (odd < 0.13)] = -np.inf
    maxs[(odd > 0.13) & (odd < 0.16)] = 1.0  # below the minimum
    mins[odd > 0.7] = 0.0  # the buckets' own edges, not the extremes, bound the values
    maxs[odd > 0.7] = np.inf
    return {"row_bounds": np.array(bounds, dtype=np.int64),
            "buckets": np.array(buckets, dtype=np.int64),
            "counts": np.array(counts, dtype=np.int64), "row_tot": row_tot, "order": order,
            "inst_ptr": inst_ptr, "view_cats": cats,
            "percentiles": np.array(pcts, dtype=np.float64), "mins": mins, "maxs": maxs}


def _percentiles(case: dict[str, Any]) -> F64:
    """``kernels.view_percentiles`` of a case, its coordinates one array's."""
    c = dict(case)
    coords = k.Coords.flat(c.pop("row_bounds"), c.pop("buckets"), c.pop("counts"))
    return k.view_percentiles(coords, **c)


def _percentiles_py(case: dict[str, Any]) -> F64:
    c = case
    out = np.full((c["inst_ptr"].size - 1, c["view_cats"].shape[0], 2, c["percentiles"].size),
                  np.nan)
    with np.errstate(all="ignore"):
        ref.view_percentiles_py(c["row_bounds"], c["buckets"], c["counts"], c["row_tot"],
                               c["order"], c["inst_ptr"], c["view_cats"],
                               percentile_numerators(c["percentiles"]), 100 * PCT_SCALE, k._LO,
                               k._HI, OVERFLOW_INDEX, c["mins"], c["maxs"], out)
    return out


_PCTS = [50.0, 90.0, 95.0, 99.0, 99.9, 99.99]
_PERCENTILE_CASES = {
    # name: (workloads, instance sizes, views, percentiles)
    "one-workload": (1, [1], 5, _PCTS),
    "sparse-only": (12, [1] * 12, 5, _PCTS),
    "dense-only": (12, [3, 4, 5], 5, _PCTS),
    "mixed-and-empty-instances": (20, [1, 0, 6, 1, 2, 0, 10], 8, _PCTS),
    "one-instance-of-all": (25, [25], 7, [0.0, 0.0001, 50.0, 100.0]),
    "one-percentile": (9, [1, 8], 5, [99.9999]),
    "ends-and-repeats": (10, [5, 1, 1, 3], 6, [100.0, 0.0, 50.0, 50.0, 33.333333]),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(_PERCENTILE_CASES))
def test_view_percentiles_equal_the_reference_to_the_bit(name: str, seed: int) -> None:
    n, sizes, views, pcts = _PERCENTILE_CASES[name]
    case = _percentile_case(np.random.default_rng([seed, len(name)]), n, sizes, views, pcts)
    got = _percentiles(case)
    want = _percentiles_py(case)
    assert _bits_equal(got, want)
    assert not np.isnan(got).all() or name == "one-workload"  # the cases find percentiles


def test_view_percentiles_skip_buckets_of_no_count() -> None:
    """Two workloads (the dense walks) and one (the sparse walks), whose lowest buckets count
    0: the dense walks pass them by, the sparse ones stop at the first (as the reference:
    only a batch that validation refused has such counts)."""
    cells = {0: [(2000, 0), (2005, 3)], 2: [(1999, 0), (2010, 1)],  # workload 0: categories
             8: [(2001, 0), (2005, 2)],  # 0 and 1 (view all: two rows); workload 1
             16: [(2000, 0), (2003, 4)], 18: [(1998, 0), (2004, 1)]}  # workload 2
    bounds = np.cumsum([0] + [len(cells.get(r, [])) for r in range(24)])
    coords = [cell for r in range(24) for cell in cells.get(r, [])]
    case = {"row_bounds": bounds, "buckets": np.array([b for b, _ in coords]),
            "counts": np.array([c for _, c in coords]),
            "row_tot": np.array([sum(c for _, c in cells.get(r, [])) for r in range(24)]),
            "order": np.arange(3), "inst_ptr": np.array([0, 2, 3]),
            "view_cats": MEMBERSHIP > 0, "percentiles": np.array([0.0, 50.0, 100.0]),
            "mins": np.zeros((2, N_VIEWS, 2)), "maxs": np.full((2, N_VIEWS, 2), np.inf)}
    got = _percentiles(case)
    assert _bits_equal(got, _percentiles_py(case))
    all_, read = 0, 1  # protocol.views: all categories; reads (here category 0 alone)
    assert got[0, all_, 0, 0] == got[0, read, 0, 0] == k._LO[2005]
    assert got[1, all_, 0, 0] == k._LO[1998] and got[1, read, 0, 0] == k._LO[2000]


def test_view_percentiles_of_nothing() -> None:
    """No instances, no coordinates, no percentiles: NaN or empty, as numba gave."""
    rng = np.random.default_rng(1)
    case = _percentile_case(rng, 4, [1, 3], 5, _PCTS)
    none = {**case, "inst_ptr": np.zeros(1, dtype=np.int64), "mins": case["mins"][:0],
            "maxs": case["maxs"][:0]}
    assert _percentiles(none).shape == (0, 5, 2, 6)
    empty = {**case, "row_bounds": np.zeros(33, dtype=np.int64),
             "buckets": np.zeros(0, dtype=np.int64), "counts": np.zeros(0, dtype=np.int64),
             "row_tot": np.zeros(32, dtype=np.int64)}
    assert _bits_equal(_percentiles(empty), _percentiles_py(empty))
    assert np.isnan(_percentiles(empty)).all()
    no_pct = _percentiles({**case, "percentiles": np.zeros(0)})
    assert no_pct.shape == (2, 5, 2, 0)


# ----------------------------------------------------------------------------- instance metrics
def _metrics_case(rng: np.random.Generator, w: int, sizes: list[int], n_views: int,
                  with_pct: bool, big: bool) -> dict[str, Any]:
    counters = rng.integers(0, 1 << 40, (w, 4, 3))
    if big:  # sums past 2**63: numpy's int64 wraps, the C's too
        counters[rng.random((w, 4, 3)) < 0.3] = (1 << 62) + rng.integers(0, 1 << 40)
        counters[rng.random((w, 4, 3)) < 0.05] *= -1
    counters[rng.random((w, 4)) < 0.3] = 0
    lat = rng.integers(0, 1 << 50, (w, 4, 2, 3))
    if big:
        lat[..., 0][rng.random((w, 4, 2)) < 0.3] = (1 << 62) + 5
    lat[..., MAX] = lat[..., MIN] + rng.integers(-5, 1 << 30, (w, 4, 2))
    empty = counters[:, :, OPS] == 0
    lat[empty, :, MIN] = np.iinfo(np.int64).max
    lat[empty, :, MAX] = -1
    member = np.concatenate([MEMBERSHIP > 0, rng.random((max(n_views - N_VIEWS, 0), 4)) < 0.5])
    member = member[:n_views]
    if n_views > N_VIEWS:
        member[-1] = False
    n_pct = 6
    pct = np.zeros((0, n_views, 2, n_pct))
    if with_pct:
        pct = rng.uniform(1e3, 1e9, (w, n_views, 2, n_pct))
        pct[rng.random((w, n_views, 2, n_pct)) < 0.1] = np.nan
        pct[rng.random((w, n_views, 2, n_pct)) < 0.03] = np.inf
    return {"counters": counters, "lat": lat, "order": rng.permutation(w).astype(np.int64),
            "inst_ptr": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            "member": member, "pct": pct, "per_view": 4 + 2 * (3 + n_pct)}


def _metrics(fn: Callable[..., None], case: dict[str, Any], dur: float) -> tuple[Any, ...]:
    g, v = case["inst_ptr"].size - 1, case["member"].shape[0]
    out = (np.full((g, v, case["per_view"]), -7.0), np.full((g, v), -7, dtype=np.int64),
           np.full((g, v, 2), -7.0), np.full((g, v, 2), -7.0))
    with np.errstate(all="ignore"):
        fn(case["counters"], case["lat"], case["order"], case["inst_ptr"], case["member"], dur,
           case["pct"], *out)
    return out


@pytest.mark.parametrize("dur", [1.7, 1e-300, np.inf, np.nan, -2.0, 0.0])
@pytest.mark.parametrize(("w", "sizes", "views", "with_pct", "big"), [
    (1, [1], 5, True, False), (1, [1], 5, False, True), (30, [30], 5, False, True),
    (30, [1] * 30, 6, True, True), (30, [4, 0, 10, 1, 15, 0], 7, True, False),
    (12, [0, 12, 0], 5, False, False),
])
def test_instance_metrics_equal_the_reference_to_the_bit(w: int, sizes: list[int], views: int,
                                                         with_pct: bool, big: bool,
                                                         dur: float) -> None:
    """Every output cell, NaN and infinities included; a duration of 0 gives numpy's inf and
    NaN in both (``instance_metrics`` refuses it before: next test)."""
    case = _metrics_case(np.random.default_rng(w * 7 + len(sizes)), w, sizes, views, with_pct,
                         big)
    for got, want in zip(_metrics(k._instance_metrics, case, dur),
                         _metrics(ref.instance_metrics_py, case, dur), strict=True):
        assert _bits_equal(got, want)


def test_instance_metrics_refuses_a_duration_of_zero_as_numba_did() -> None:
    case = _metrics_case(np.random.default_rng(2), 3, [3], 5, False, False)
    args = (case["counters"], case["lat"], case["order"], case["inst_ptr"], case["member"])
    with pytest.raises(ZeroDivisionError, match=r"^division by zero$"):
        k.instance_metrics(*args, 0.0, None, case["per_view"])
    values, ops, _, _ = k.instance_metrics(case["counters"], case["lat"], case["order"],
                                           np.zeros(1, dtype=np.int64), case["member"], 0.0,
                                           None, case["per_view"])  # no instance: no division
    assert values.shape == (0, 5, 22) and ops.shape == (0, 5)


# ----------------------------------------------------------------------------- adding samples
def _sorted_coords(rng: np.random.Generator, n: int, rows: int, big: bool
                   ) -> tuple[I64, I64, I64]:
    key = np.unique(rng.integers(0, rows * N_BUCKETS, n))
    counts = rng.integers(1, 1000, key.size)
    if big:
        counts[rng.random(key.size) < 0.5] = (1 << 62) + 3  # two of them wrap
    return key // N_BUCKETS, key % N_BUCKETS, counts


@pytest.mark.parametrize(("na", "nb", "rows", "big"), [
    (0, 0, 1, False), (0, 9, 3, False), (9, 0, 3, True), (1, 1, 1, False),
    (300, 300, 2, True), (2000, 50, 40, False), (700, 700, 1, False),
])
def test_merge_sorted_equals_the_reference_to_the_bit(na: int, nb: int, rows: int,
                                                      big: bool) -> None:
    rng = np.random.default_rng(na + 3 * nb + rows)
    a, b = _sorted_coords(rng, na, rows, big), _sorted_coords(rng, nb, rows, big)
    n_out = a[0].size + b[0].size
    got = [np.full(n_out, -1, dtype=np.int64) for _ in range(3)]
    want = [np.full(n_out, -1, dtype=np.int64) for _ in range(3)]
    n = k._merge_sorted(*a, *b, *got)
    with np.errstate(over="ignore"):
        assert n == ref.merge_sorted_py(*a, *b, *want)
    assert all(_bits_equal(g, w) for g, w in zip(got, want, strict=True))
    assert all(_bits_equal(g, w[:n]) for g, w in zip(k.merge_sorted(a, b), want, strict=True))


# ----------------------------------------------------------------------------- histogram files
@pytest.mark.parametrize(("n_workloads", "n_inst", "first", "n", "odd"), [
    (1, 1, 0, 1, ""), (30, 7, 0, 7, ""), (30, 7, 2, 3, "sparse"),
    (40, 9, 4, 5, "wrap"), (5, 9, 4, 5, ""), (20, 4, 0, 4, "out-of-range"),
    (20, 4, 1, 0, ""),
])
def test_histogram_rows_equal_the_reference_to_the_bit(n_workloads: int, n_inst: int,
                                                       first: int, n: int, odd: str) -> None:
    rng = np.random.default_rng(n_workloads * 31 + first + len(odd))
    per = 2 if odd == "sparse" else 60  # sparse: most rows and some workloads empty
    rows, buckets, counts = _sorted_coords(rng, n_workloads * per, n_workloads * 8,
                                           odd == "wrap")
    row_bounds = np.searchsorted(rows, np.arange(n_workloads * 8 + 1))
    if odd == "out-of-range":
        buckets[rng.integers(0, buckets.size)] = N_BUCKETS + 2
    of_workload = rng.integers(0, n_inst, n_workloads)
    members = rng.permutation(np.flatnonzero((of_workload >= first)
                                             & (of_workload < first + n)))
    args = (of_workload, members, row_bounds, buckets, counts, first, n)
    got = k._histogram_rows(*args)
    with np.errstate(over="ignore"):
        want = ref.histogram_rows_py(*args)
    assert got[3] == want[3] == (odd != "out-of-range" or not members.size)
    assert all(_bits_equal(g, w) for g, w in zip(got[:3], want[:3], strict=True))


def test_histogram_rows_fill_their_bound_where_every_bucket_is_taken() -> None:
    """The rows are made in one pass into room for a bound per instance: its workloads'
    coordinates or every bucket, the fewer. Instance 0's two workloads take every bucket in
    every row (more coordinates than buckets): N_BUCKETS rows, its bound exactly; instance
    1's workload has three coordinates, each its own bucket: its bound too. The rows are the
    reference's."""
    rows_per = ROWS_PER_WORKLOAD
    full = np.tile(np.arange(N_BUCKETS, dtype=np.int64), rows_per)
    small = np.array([5, 9, 12], dtype=np.int64)
    buckets = np.concatenate([full, full, small])
    counts = np.arange(1, buckets.size + 1, dtype=np.int64)
    row_bounds = np.concatenate([np.arange(2 * rows_per) * N_BUCKETS,
                                 2 * rows_per * N_BUCKETS + np.array([0, 1, 1, 3, 3, 3, 3, 3, 3
                                                                      ][:rows_per + 1])])
    of_workload = np.array([0, 0, 1])
    members = np.array([1, 0, 2])
    coords = k.Coords.flat(row_bounds, buckets, counts)
    assert k._histogram_rows_cap(of_workload, members, coords, 0, 2) == N_BUCKETS + 3
    args = (of_workload, members, row_bounds, buckets, counts, 0, 2)
    got = k._histogram_rows(*args)
    want = ref.histogram_rows_py(*args)
    assert got[3] and want[3]
    assert got[0].size == N_BUCKETS + 3
    assert all(_bits_equal(g, w) for g, w in zip(got[:3], want[:3], strict=True))


def test_histogram_rows_refuses_a_negative_count_of_instances_as_numba_did() -> None:
    one = np.ones(1, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^negative dimensions not allowed$"):
        k.histogram_rows(one, one[:0], k.Coords.flat(np.array([0] + [1] * 8), one, one), 0,
                         -1)


# ----------------------------------------------------------------------------- validation
def _scan_case(rng: np.random.Generator, n: int, n_rows: int, fault: str,
               wire: bool) -> tuple[Any, Any, I64, I64]:
    key = np.unique(rng.integers(0, n_rows * N_BUCKETS, n))
    rows, buckets = key // N_BUCKETS, key % N_BUCKETS
    counts = rng.integers(1, 1 << 40, key.size)
    if fault == "unsorted" and key.size > 2:
        rows[[0, -1]] = rows[[-1, 0]]
    if fault == "repeat" and key.size > 2:
        buckets[1], rows[1] = buckets[0], rows[0]
    if fault == "counts":
        counts[rng.random(key.size) < 0.2] = rng.integers(-5, 1)
    if fault == "rows-beyond":
        rows[-3:] += n_rows
    if fault == "negative-rows" and not wire:
        rows[:3] -= n_rows  # a negative row counts from the end, as numpy's index
    if wire:
        return rows.astype(np.uint32), buckets.astype(np.uint16), counts, np.zeros(n_rows,
                                                                                  np.int64)
    return rows, buckets, counts, np.zeros(n_rows, dtype=np.int64)


@pytest.mark.parametrize("wire", [True, False], ids=["uint32-uint16", "int64"])
@pytest.mark.parametrize("fault", ["", "unsorted", "repeat", "counts", "rows-beyond",
                                   "negative-rows"])
@pytest.mark.parametrize("n", [1, 2, 500])
def test_scan_coords_equals_the_reference(n: int, fault: str, wire: bool) -> None:
    """The largest bucket, whether sorted, the smallest count and the rows' totals. The
    reference is given the coordinates as int64: its Python arithmetic on a uint32 row would
    wrap where the C's (and numba's) is int64."""
    rows, buckets, counts, row_tot = _scan_case(np.random.default_rng(n + len(fault)), n, 40,
                                                fault, wire)
    tot_ref = row_tot.copy()
    got = k._scan_coords(rows, buckets, counts, row_tot)
    want = ref.scan_coords_py(rows.astype(np.int64), buckets.astype(np.int64), counts, tot_ref)
    assert got == tuple(want) and type(got[1]) is bool
    assert _bits_equal(row_tot, tot_ref)


def _random_batch(rng: np.random.Generator, w: int) -> StatsBatch:
    """``w`` workloads, each with I/O in some categories (lognormal latencies)."""
    stats = [WorkloadStats() for _ in range(w)]
    for s in stats:
        for cat in np.flatnonzero(rng.random(4) < 0.6).tolist():
            n = int(rng.integers(1, 300))
            svc = rng.lognormal(np.log(float(rng.uniform(2e4, 2e6))), 0.7, n).astype(np.int64)
            s.record(cat, svc, svc + rng.integers(0, 5000, n), 4096)
    return StatsBatch.from_stats(stats)


def _refusal(check: Callable[[], None]) -> str:
    try:
        check()
    except RemoteProtocolError as exc:
        return str(exc)
    return ""


def _spoil(rng: np.random.Generator, b: StatsBatch) -> StatsBatch:
    """The batch with a fault or two at random (or none)."""
    f = {n: getattr(b, n).copy() for n in ("counters", "lat", "rows", "buckets", "counts")}
    for _ in range(int(rng.integers(0, 3))):
        at = int(rng.integers(0, f["rows"].size))
        match int(rng.integers(0, 7)):
            case 0:
                f["counters"][tuple(rng.integers(0, s) for s in f["counters"].shape)] = -1
            case 1:
                f["counts"][at] = int(rng.integers(-2, 1))
            case 2:
                f["buckets"][at] = N_BUCKETS + int(rng.integers(0, 5))
            case 3:
                f["rows"][at] = f["rows"][at - 1]
                f["buckets"][at] = f["buckets"][at - 1]
            case 4:
                f["lat"][(*(rng.integers(0, s) for s in f["lat"].shape[:3]), MIN)] = -3
            case 5:
                f["counts"][at] += 1
            case _:
                f["rows"][-1] = f["counters"].shape[0] * ROWS_PER_WORKLOAD
    return StatsBatch(**f)


def test_validate_batch_refuses_as_statsbatch_validate_does() -> None:
    """Random batches, each with faults at random: the same verdict, in the same words
    (the first fault in ``StatsBatch.validate``'s order), also from the wire's read-only
    arrays."""
    rng = np.random.default_rng(8)
    verdicts = set()
    for i in range(60):
        batch = _spoil(rng, _random_batch(rng, int(rng.integers(1, 6))))
        want = _refusal(batch.validate)
        assert _refusal(lambda b=batch: k.validate_batch(b)) == want, i
        wire = StatsBatch.from_wire(batch.to_wire(), validate=False)
        assert _refusal(lambda b=wire: k.validate_batch(b)) == want, i
        verdicts.add(want)
    assert len(verdicts) >= 5 and "" in verdicts  # the faults were varied; some batches pass


def test_validate_batch_reads_unaligned_wire_arrays() -> None:
    """A wire's array at an odd offset is copied aligned before the C reads it."""
    batch = _random_batch(np.random.default_rng(4), 3)
    raw = b"\0" + batch.rows.astype("<u4").tobytes()
    rows = np.frombuffer(raw, dtype="<u4", offset=1)
    assert not rows.flags.aligned
    odd = StatsBatch(counters=batch.counters, lat=batch.lat, rows=rows, buckets=batch.buckets,
                     counts=batch.counts)
    odd.validate()
    k.validate_batch(odd)


def _pct_entry(rng: np.random.Generator, w: int) -> GroupStats:
    b = _random_batch(rng, w)
    b.counters[rng.random((w, 4)) < 0.3, OPS] = 0
    side = StatsBatch(counters=b.counters, lat=b.lat, rows=np.zeros(0, dtype=np.uint32),
                      buckets=np.zeros(0, dtype=np.uint16), counts=np.zeros(0, dtype=np.int64))
    pct = rng.uniform(0, 1 << 40, (w, N_VIEWS, 2, 6))
    mins, maxs, has = view_min_max(side)
    pct = np.clip(pct, mins[..., None].astype(np.float64), maxs[..., None].astype(np.float64))
    pct[~has] = np.nan
    return GroupStats(side, pct)


def _spoil_pct(rng: np.random.Generator, gs: GroupStats) -> GroupStats:
    assert gs.pct is not None
    b, pct = gs.batch, gs.pct.copy()
    counters, lat = b.counters.copy(), b.lat.copy()
    for _ in range(int(rng.integers(0, 3))):
        at = tuple(rng.integers(0, s) for s in pct.shape)
        match int(rng.integers(0, 6)):
            case 0:
                pct[at] = np.nan
            case 1:
                pct[at] = float(rng.choice([-np.inf, np.inf, -1.0, 2.0 ** 60]))
            case 2:
                pct[at] = 0.5  # present, or below the minimum
            case 3:
                counters[at[0], int(rng.integers(0, 4)), int(rng.integers(0, 3))] = -1
            case 4:
                lat[at[0], int(rng.integers(0, 4)), at[2], MIN] = -1
            case _:
                pct[at] = np.nextafter(pct[at], np.inf)  # just above the maximum, or NaN
    side = StatsBatch(counters=counters, lat=lat, rows=b.rows, buckets=b.buckets,
                      counts=b.counts)
    return GroupStats(side, pct)


def test_check_group_stats_refuses_as_groupstats_check_does() -> None:
    rng = np.random.default_rng(9)
    verdicts = set()
    for i in range(80):
        entry = _spoil_pct(rng, _pct_entry(rng, int(rng.integers(1, 5))))
        want = _refusal(entry.check)
        assert _refusal(lambda e=entry: k.check_group_stats(e)) == want, i
        verdicts.add(want)
    assert len(verdicts) >= 4 and "" in verdicts


@pytest.mark.parametrize("n_pct", [0, 1, 2, 5, 6, 7])
@pytest.mark.parametrize("n_views", [1, 5, 8])
def test_scan_group_pct_equals_the_reference(n_views: int, n_pct: int) -> None:
    """Every finding both ways, with odd and even percentile counts (the C takes two at a
    time) and views of no category."""
    rng = np.random.default_rng(n_views * 10 + n_pct)
    member = rng.random((n_views, 4)) < 0.5
    member[0] = False
    seen = set()
    for _ in range(40):
        w = int(rng.integers(0, 6))
        counters = rng.integers(0, 5, (w, 4, 3)) - (rng.random((w, 4, 3)) < 0.02)
        lat = rng.integers(0, 1000, (w, 4, 2, 3))
        lat[..., MAX] = lat[..., MIN] + rng.integers(-2, 500, (w, 4, 2))
        lat[rng.random((w, 4, 2)) < 0.03, MIN] = -1
        pct = rng.uniform(-10.0, 1600.0, (w, n_views, 2, n_pct))
        has = ((counters[:, :, OPS] > 0).astype(np.int64) @ member.T.astype(np.int64)) > 0
        pct[~has] = np.nan
        pct[rng.random(pct.shape) < 0.01] = np.nan
        pct[rng.random(pct.shape) < 0.01] = rng.choice([-np.inf, np.inf, 3.0])
        got = k._scan_group_pct(counters, lat, pct, member)
        want = tuple(bool(x) for x in ref.scan_group_pct_py(counters, lat, pct, member))
        assert got == want
        seen.add(got)
    assert len(seen) > 2


def test_the_scans_read_the_groups_percentiles_as_the_slave_makes_them() -> None:
    """A real entry: ``protocol.grouping.view_percentiles`` of a random batch passes."""
    b = _random_batch(np.random.default_rng(12), 4)
    side = StatsBatch(counters=b.counters, lat=b.lat, rows=np.zeros(0, dtype=np.uint32),
                      buckets=np.zeros(0, dtype=np.uint16), counts=np.zeros(0, dtype=np.int64))
    entry = GroupStats(side, group_view_percentiles(b))
    entry.check()
    k.check_group_stats(entry)
    assert k._scan_group_pct(side.counters, side.lat, entry.pct, MEMBERSHIP > 0) == (
        False, False, False, False)
