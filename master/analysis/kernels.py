"""The inner loops of the rollups, in C (``kernels.c``): percentiles, instance metrics, adding
samples, histogram files and the checks of what the slaves sent.

At 10,000 workloads a subinterval carries about nine million histogram coordinates; whole-array
numpy passes cost tens of milliseconds each, and the rollups need many of them. These loops
touch each coordinate once per rollup type instead. They hold no state and do no I/O; the
callers in ``master.analysis.rollup`` and ``master.results.output`` own the data layout and the
meaning.

Each C function (``ivk_<name>``) repeats a plain Python reference
(``master.analysis.kernelref.<name>_py``) operation for operation, so that their results are
the same to the bit; ``_<name>`` calls it with the reference's arguments, and the tests compare
the two. This module owns the C
functions' signatures (``_SIGNATURES``, declared once, on first use: ``_kernels``) and passes
every array as a pointer to an aligned, C-contiguous array of the exact type the C names, its
sizes beside it; ``master.analysis.native`` builds and loads the object (compiled once, or
shipped in the wheel). ctypes releases the GIL for each call.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from master.analysis import native
from protocol.batch import GroupStats, StatsBatch
from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.histogram import PCT_SCALE, percentile_numerators
from protocol.stats import ROWS_PER_WORKLOAD
from protocol.views import MEMBERSHIP

_LO = LOWER_NS.astype(np.float64)
#: (N_VIEWS, 4): whether each view adds each category up.
_VIEW_CATS = MEMBERSHIP > 0
_HI = (UPPER_NS - 1).astype(np.float64)

# ----------------------------------------------------------------------------- the C functions
_P = ctypes.c_void_p  # an array's data (``a.ctypes.data``, the array held by the caller)
_I = ctypes.c_int64
_D = ctypes.c_double
#: Each C function's result and argument types (``kernels.c``).
_SIGNATURES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "ivk_rows_per_workload": (_I, ()),
    "ivk_view_percentiles": (_I, (_P, _P, _P, _P, _P, _P, _I, _P, _I, _P, _I, _I, _P, _P, _I,
                                  _I, _P, _P, _P)),
    "ivk_instance_metrics": (None, (_P, _P, _P, _P, _I, _P, _I, _D, _P, _I, _I, _I, _I, _P, _I,
                                    _P, _P, _P)),
    "ivk_merge_sorted": (_I, (_P, _P, _P, _I, _P, _P, _P, _I, _P, _P, _P)),
    "ivk_histogram_rows": (_I, (_P, _P, _I, _P, _P, _P, _I, _I, _I, _I, _P, _P, _P)),
    "ivk_scan_coords_wire": (None, (_P, _P, _P, _I, _P, _I, _P)),
    "ivk_scan_coords_i64": (None, (_P, _P, _P, _I, _P, _I, _P)),
    "ivk_scan_group_pct": (_I, (_P, _P, _I, _P, _I, _I, _I, _P, _I)),
}
#: ``ivk_scan_group_pct``'s findings, one bit each (``kernels.c``: FOUND_*)
_NEGATIVE, _INCONSISTENT, _MISSING, _OUTSIDE = 1, 2, 4, 8

_lock = threading.Lock()
_lib: Any = None


def _kernels() -> Any:
    """The loaded C kernels, each function's types declared (once per process)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                lib = native.library()
                for name, (restype, argtypes) in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                if lib.ivk_rows_per_workload() != ROWS_PER_WORKLOAD:
                    raise native.KernelsUnavailable(
                        f"kernels.c is written for {lib.ivk_rows_per_workload()} histogram rows "
                        f"per workload, protocol.stats has {ROWS_PER_WORKLOAD}")
                _lib = lib
    return _lib


def _c_array(a: npt.ArrayLike, dtype: type) -> Any:
    """``a`` as an aligned, C-contiguous array of ``dtype``, copied only when it is not (a
    read-only array, as the wire's are, is read where it is)."""
    out: Any = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.aligned else out.copy()


def _out(a: Any, dtype: type, shape: tuple[int, ...]) -> int:
    """The data of ``a``, an array the C writes into: of ``dtype`` and ``shape``, aligned,
    C-contiguous and writable (a converted copy would take the results)."""
    f = a.flags
    if a.dtype != dtype or a.shape != shape or not (f.c_contiguous and f.aligned
                                                    and f.writeable):
        raise ValueError(f"output array {a.dtype}{list(a.shape)} is not a writable, "
                         f"C-contiguous {np.dtype(dtype)}{list(shape)}")
    return int(a.ctypes.data)


# ----------------------------------------------------------------------------- coordinates
@dataclass(frozen=True, eq=False)
class Coords:
    """A sample's histogram coordinates by workload, read where each workload's lie
    (``kernels.c``: ``bucket_ptrs``): one array's (``flat``), or each host's own arrays of a
    measurement window (``of_batches``: 90 million coordinates at 100,000 workloads, which a
    copy into one array would put in 2 GB of fresh memory).

    ``bounds`` (W * ROWS_PER_WORKLOAD + 1): workload w's row r starts at coordinate
    ``bounds[w * ROWS_PER_WORKLOAD + r]``, numbered as if every workload's were one array (so
    ``bounds`` rises); ``bucket_at[w]`` and ``count_at[w]``: the addresses of workload w's
    first bucket (uint16) and first count (int64); ``held``: the arrays those are in, kept
    alive with this object."""

    bounds: npt.NDArray[np.int64]
    bucket_at: npt.NDArray[np.uintp]
    count_at: npt.NDArray[np.uintp]
    held: tuple[npt.NDArray[Any], ...]

    @property
    def n_workloads(self) -> int:
        return int(self.bucket_at.size)

    @classmethod
    def flat(cls, bounds: npt.ArrayLike, buckets: npt.ArrayLike, counts: npt.ArrayLike
             ) -> Coords:
        """One array's coordinates grouped by row: ``bounds`` as above (W * ROWS + 1), the
        buckets as uint16 (a bucket outside 0..65535 is refused; one from N_BUCKETS up is the
        kernels' to refuse or the caller's to have ruled out)."""
        bounds_c = _c_array(bounds, np.int64)
        b = np.asarray(buckets)
        c = _c_array(counts, np.int64)
        if (bounds_c.ndim != 1 or (bounds_c.size - 1) % ROWS_PER_WORKLOAD
                or b.shape != c.shape or b.ndim != 1):
            raise ValueError(f"{bounds_c.size} row bounds for {b.size} buckets and {c.size} "
                             f"counts")
        if bounds_c.size and (int(bounds_c[0]) < 0 or int(bounds_c[-1]) > c.size
                              or bool(np.any(bounds_c[1:] < bounds_c[:-1]))):
            raise ValueError(f"row bounds outside 0..{c.size} or falling")
        if b.dtype != np.uint16 and b.size and (int(b.min()) < 0
                                                or int(b.max()) > np.iinfo(np.uint16).max):
            raise ValueError(f"buckets outside 0..{N_BUCKETS - 1}")
        b16 = _c_array(b, np.uint16)
        starts = bounds_c[:-1:ROWS_PER_WORKLOAD].astype(np.uintp)
        return cls(bounds_c, np.uintp(b16.ctypes.data) + starts * np.uintp(2),
                   np.uintp(c.ctypes.data) + starts * np.uintp(8), (b16, c))

    @classmethod
    def of_batches(cls, batches: Sequence[StatsBatch]) -> Coords:
        """The coordinates of ``batches``, their workloads side by side, each read in its own
        arrays (the wire's: uint16 buckets, int64 counts; copied only where unaligned). Each
        batch must be valid (``validate_batch``: sorted by row and bucket, in range)."""
        return cls.joined([cls.flat(
            np.searchsorted(b.rows, np.arange(b.n_workloads * ROWS_PER_WORKLOAD + 1,
                                              dtype=b.rows.dtype)), b.buckets, b.counts)
            for b in batches])

    @classmethod
    def joined(cls, parts: Sequence[Coords]) -> Coords:
        """The workloads of ``parts`` side by side (each part's as they lie)."""
        bounds = [np.zeros(1, dtype=np.int64)]
        at = 0
        for c in parts:
            bounds.append(c.bounds[1:] - c.bounds[0] + at)
            at += int(c.bounds[-1] - c.bounds[0])
        return cls(np.concatenate(bounds),
                   np.concatenate([np.zeros(0, np.uintp), *(c.bucket_at for c in parts)]),
                   np.concatenate([np.zeros(0, np.uintp), *(c.count_at for c in parts)]),
                   tuple(a for c in parts for a in c.held))


# ----------------------------------------------------------------------------- percentiles
def _view_percentiles(
    row_bounds: Any, buckets: Any, counts: Any, row_tot: Any, order: Any, inst_ptr: Any,
    view_cats: Any,
    pct_num: Any, scale: int, lo_e: Any, hi_e: Any, overflow: int, mins: Any, maxs: Any,
    out: Any,
) -> None:
    """``kernelref.view_percentiles_py`` in C (``ivk_view_percentiles``), its coordinates
    one array's (``Coords.flat``)."""
    _view_percentiles_at(Coords.flat(row_bounds, buckets, counts), row_tot, order, inst_ptr,
                         view_cats, pct_num, scale, lo_e, hi_e, overflow, mins, maxs, out)


def _view_percentiles_at(
    coords: Coords, row_tot: Any, order: Any, inst_ptr: Any, view_cats: Any, pct_num: Any,
    scale: int, lo_e: Any, hi_e: Any, overflow: int, mins: Any, maxs: Any, out: Any,
) -> None:
    """``_view_percentiles`` of ``coords`` wherever they lie."""
    tot_c, order_c, ptr_c, num_c = (
        _c_array(a, np.int64) for a in (row_tot, order, inst_ptr, pct_num))
    if tot_c.size != coords.bounds.size - 1 or (
            order_c.size and int(order_c.max()) >= coords.n_workloads):
        raise ValueError(f"row totals {tot_c.size} and workloads {order_c.size} for "
                         f"{coords.n_workloads} workloads' coordinates")
    cats = _c_array(view_cats, np.bool_)
    lo_c, hi_c, mins_c, maxs_c = (_c_array(a, np.float64) for a in (lo_e, hi_e, mins, maxs))
    shape = (ptr_c.size - 1, cats.shape[0], 2, num_c.size)
    if lo_c.size != hi_c.size or mins_c.shape != shape[:3] or maxs_c.shape != shape[:3]:
        raise ValueError(f"bucket edges {lo_c.shape} and {hi_c.shape}, extremes "
                         f"{mins_c.shape} and {maxs_c.shape} for percentiles {shape}")
    if _kernels().ivk_view_percentiles(
            coords.bounds.ctypes.data, coords.bucket_at.ctypes.data,
            coords.count_at.ctypes.data, tot_c.ctypes.data, order_c.ctypes.data,
            ptr_c.ctypes.data, shape[0], cats.ctypes.data, shape[1], num_c.ctypes.data, shape[3],
            scale, lo_c.ctypes.data, hi_c.ctypes.data, lo_c.size, overflow, mins_c.ctypes.data,
            maxs_c.ctypes.data,
            _out(out, np.float64, shape)):
        raise MemoryError("view_percentiles: no memory for its scratch histograms")


def view_percentiles(
    coords: Coords,
    row_tot: npt.NDArray[np.int64],
    order: npt.NDArray[np.intp],
    inst_ptr: npt.NDArray[np.int64],
    view_cats: npt.NDArray[np.bool_],
    percentiles: npt.NDArray[np.float64],
    mins: npt.NDArray[np.float64],
    maxs: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles (G, V, 2, P) of every instance's views; see ``kernelref.view_percentiles_py``
    (its buckets in range: the caller's to have ruled out)."""
    out = np.full((inst_ptr.size - 1, view_cats.shape[0], 2, percentiles.size), np.nan)
    _view_percentiles_at(
        coords,
        np.ascontiguousarray(row_tot, dtype=np.int64),
        np.ascontiguousarray(order, dtype=np.int64), np.ascontiguousarray(inst_ptr),
        np.ascontiguousarray(view_cats, dtype=np.bool_),
        percentile_numerators(percentiles), 100 * PCT_SCALE, _LO, _HI, OVERFLOW_INDEX,
        np.ascontiguousarray(mins, dtype=np.float64), np.ascontiguousarray(maxs, dtype=np.float64),
        out)
    return out


# ----------------------------------------------------------------------------- instance metrics
def _instance_metrics(counters: Any, lat: Any, order: Any, inst_ptr: Any, member: Any,
                      dur: float, pct: Any, values: Any, ops_v: Any, min_v: Any,
                      max_v: Any) -> None:
    """``kernelref.instance_metrics_py`` in C (``ivk_instance_metrics``): numpy's arithmetic, so a
    ``dur`` of 0 gives inf or NaN here (``instance_metrics`` refuses it first)."""
    counters_c, lat_c, order_c, ptr_c = (_c_array(a, np.int64)
                                         for a in (counters, lat, order, inst_ptr))
    member_c = _c_array(member, np.bool_)
    pct_c = _c_array(pct, np.float64)
    g_count, n_views, per_view = ptr_c.size - 1, member_c.shape[0], values.shape[2]
    _kernels().ivk_instance_metrics(
        counters_c.ctypes.data, lat_c.ctypes.data, order_c.ctypes.data, ptr_c.ctypes.data,
        g_count, member_c.ctypes.data, n_views, float(dur), pct_c.ctypes.data,
        pct_c.shape[0], pct_c.shape[1], pct_c.shape[2], pct_c.shape[3],
        _out(values, np.float64, (g_count, n_views, per_view)), per_view,
        _out(ops_v, np.int64, (g_count, n_views)),
        _out(min_v, np.float64, (g_count, n_views, 2)),
        _out(max_v, np.float64, (g_count, n_views, 2)))


def instance_metrics(counters: npt.NDArray[np.int64], lat: npt.NDArray[np.int64],
                     order: npt.NDArray[np.intp], inst_ptr: npt.NDArray[np.int64],
                     member: npt.NDArray[np.bool_], duration_s: float,
                     pct: npt.NDArray[np.float64] | None, per_view: int,
                     ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64],
                                npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(values (G, V, ``per_view``), ops (G, V), views' minima and maxima (G, V, 2)); see
    ``kernelref.instance_metrics_py``. Without ``pct`` the percentile columns are uninitialised: the
    caller fills them."""
    g_count, n_views = inst_ptr.size - 1, member.shape[0]
    n_pct = (per_view - 4) // 2 - 3
    values = np.empty((g_count, n_views, per_view))
    ops_v = np.empty((g_count, n_views), dtype=np.int64)
    min_v = np.empty((g_count, n_views, 2))
    max_v = np.empty((g_count, n_views, 2))
    table = (np.zeros((0, n_views, 2, n_pct)) if pct is None
             else _c_array(pct, np.float64))
    if table.shape[1:] != (n_views, 2, n_pct):
        raise ValueError(f"percentile table of shape {table.shape}, expected (W, {n_views}, 2, "
                         f"{n_pct})")
    if float(duration_s) == 0.0 and g_count > 0 and n_views > 0:
        raise ZeroDivisionError("division by zero")  # IOPS = ops / duration (as numba raised)
    _instance_metrics(_c_array(counters, np.int64), _c_array(lat, np.int64),
                      np.ascontiguousarray(order, dtype=np.int64),
                      np.ascontiguousarray(inst_ptr, dtype=np.int64),
                      np.ascontiguousarray(member, dtype=np.bool_), float(duration_s), table,
                      values, ops_v, min_v, max_v)
    return values, ops_v, min_v, max_v


assert _LO.size == N_BUCKETS


# ----------------------------------------------------------------------------- adding samples
def _merge_sorted(ra: Any, ba: Any, ca: Any, rb: Any, bb: Any, cb: Any, ro: Any, bo: Any,
                  co: Any) -> int:
    """``kernelref.merge_sorted_py`` in C (``ivk_merge_sorted``)."""
    ra_c, ba_c, ca_c, rb_c, bb_c, cb_c = (_c_array(x, np.int64) for x in (ra, ba, ca, rb, bb, cb))
    na, nb = ra_c.size, rb_c.size
    if ba_c.size != na or ca_c.size != na or bb_c.size != nb or cb_c.size != nb:
        raise ValueError(f"coordinates of {na}, {ba_c.size}, {ca_c.size} and {nb}, "
                         f"{bb_c.size}, {cb_c.size}")
    if min(ro.size, bo.size, co.size) < na + nb:
        raise ValueError(f"room for {min(ro.size, bo.size, co.size)} of {na + nb} coordinates")
    n: int = _kernels().ivk_merge_sorted(
        ra_c.ctypes.data, ba_c.ctypes.data, ca_c.ctypes.data, na, rb_c.ctypes.data,
        bb_c.ctypes.data, cb_c.ctypes.data, nb, _out(ro, np.int64, ro.shape),
        _out(bo, np.int64, bo.shape), _out(co, np.int64, co.shape))
    return n


def merge_sorted(a: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
                 b: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(rows, buckets, counts) of two histogram-coordinate lists added up; each list sorted
    strictly by (row, bucket), and so is the result."""
    na, nb = a[0].size, b[0].size
    ro = np.empty(na + nb, dtype=np.int64)
    bo = np.empty(na + nb, dtype=np.int64)
    co = np.empty(na + nb, dtype=np.int64)
    n = _merge_sorted(*a, *b, ro, bo, co)
    return ro[:n], bo[:n], co[:n]


# ----------------------------------------------------------------------------- histogram files
def _histogram_rows(of_workload: Any, members: Any, row_bounds: Any, buckets: Any, counts: Any,
                    first: int, n: int) -> tuple[Any, Any, Any, bool]:
    """``kernelref.histogram_rows_py`` in C (``ivk_histogram_rows``, filled in one pass),
    its coordinates one array's (``Coords.flat``)."""
    return _histogram_rows_at(of_workload, members, Coords.flat(row_bounds, buckets, counts),
                              first, n)


def _histogram_rows_at(of_workload: Any, members: Any, coords: Coords, first: int, n: int
                       ) -> tuple[Any, Any, Any, bool]:
    """``_histogram_rows`` of ``coords`` wherever they lie."""
    if n < 0:
        raise ValueError("negative dimensions not allowed")  # as numba's np.zeros(n * ...)
    of_c, members_c = _c_array(of_workload, np.int64), _c_array(members, np.int64)
    if of_c.size != coords.n_workloads:
        raise ValueError(f"{of_c.size} workloads' instances for {coords.n_workloads} "
                         "workloads' coordinates")
    args = (of_c.ctypes.data, members_c.ctypes.data, members_c.size, coords.bounds.ctypes.data,
            coords.bucket_at.ctypes.data, coords.count_at.ctypes.data, int(first), int(n),
            N_BUCKETS)
    fn = _kernels().ivk_histogram_rows
    cap = _histogram_rows_cap(of_c, members_c, coords, first, n)
    out_inst = np.empty(cap, dtype=np.int64)
    out_bucket = np.empty(cap, dtype=np.int64)
    summed = np.empty((cap, 6), dtype=np.int64)
    n_rows = fn(*args, cap, out_inst.ctypes.data, out_bucket.ctypes.data, summed.ctypes.data)
    if n_rows == -1:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty, np.zeros((0, 6), dtype=np.int64), False
    if n_rows == -2:
        raise MemoryError("histogram_rows: no memory for its scratch")
    if n_rows < 0:
        raise RuntimeError(f"histogram_rows: more rows than their bound {cap}")
    out_inst, out_bucket, summed = out_inst[:n_rows], out_bucket[:n_rows], summed[:n_rows]
    return (out_inst.astype(np.intp, copy=False), out_bucket.astype(np.intp, copy=False), summed,
            True)


def _histogram_rows_cap(of_workload: npt.NDArray[np.int64], members: npt.NDArray[np.int64],
                        coords: Coords, first: int, n: int) -> int:
    """The most rows ``ivk_histogram_rows`` can give (the members' instances in
    ``first .. first + n - 1``, the caller's check): per instance, its members' coordinates
    or every bucket, whichever is fewer (a coordinate adds one bucket at most). Rows are
    filled in one pass into room for this many (the room never reached is never written;
    fresh pages of it are never touched), where counting them first read every coordinate
    twice."""
    starts = members * ROWS_PER_WORKLOAD
    per_member = coords.bounds[starts + ROWS_PER_WORKLOAD] - coords.bounds[starts]
    per_inst = np.bincount(of_workload[members] - first, weights=per_member, minlength=n)
    return int(np.minimum(per_inst, N_BUCKETS).sum())


def histogram_rows(of_workload: npt.NDArray[np.intp], members: npt.NDArray[np.intp],
                   coords: Coords, first: int, n: int
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """See ``kernelref.histogram_rows_py``: (instance - first, bucket, counts (rows, 6)) per
    non-empty bucket of the workloads ``members`` (``coords``' workloads, numbered as
    ``of_workload``). Their instances must lie in ``first .. first + n - 1`` and the buckets in
    range (checked: the kernel indexes by them; the buckets by the kernel itself, as it reads
    the members' coordinates, so a slice costs its own coordinates only)."""
    inst = of_workload[members]
    if inst.size and (int(inst.min()) < first or int(inst.max()) >= first + n):
        raise ValueError(f"workloads of instances outside {first}..{first + n - 1}")
    out_inst, out_bucket, summed, in_range = _histogram_rows_at(
        of_workload, members, coords, first, n)
    if not in_range:
        raise ValueError(f"buckets outside 0..{N_BUCKETS - 1}")
    return out_inst, out_bucket, summed


# ----------------------------------------------------------------------------- validation
def _scan_coords(rows: Any, buckets: Any, counts: Any, row_tot: Any) -> tuple[int, bool, int]:
    """``kernelref.scan_coords_py`` in C: the wire's types as they are (``ivk_scan_coords_wire``:
    uint32 rows, uint16 buckets), other integers as int64 (``ivk_scan_coords_i64``)."""
    if rows.dtype == np.uint32 and buckets.dtype == np.uint16:
        scan = _kernels().ivk_scan_coords_wire
        rows_c, buckets_c = _c_array(rows, np.uint32), _c_array(buckets, np.uint16)
    else:
        scan = _kernels().ivk_scan_coords_i64
        rows_c, buckets_c = _c_array(rows, np.int64), _c_array(buckets, np.int64)
    counts_c = _c_array(counts, np.int64)
    if buckets_c.size != rows_c.size or counts_c.size != rows_c.size:
        raise ValueError(f"{rows_c.size} rows, {buckets_c.size} buckets, {counts_c.size} counts")
    found = np.empty(3, dtype=np.int64)  # the largest bucket, ascending, the smallest count
    scan(rows_c.ctypes.data, buckets_c.ctypes.data, counts_c.ctypes.data, rows_c.size,
         _out(row_tot, np.int64, row_tot.shape), row_tot.size, found.ctypes.data)
    bmax, ascending, cmin = found.tolist()
    return bmax, bool(ascending), cmin


def validate_batch(batch: StatsBatch) -> None:
    """``StatsBatch.validate`` with its scan of the coordinates in C (eight numpy passes
    there, one here); the checks themselves are ``StatsBatch.check_scan``, shared."""
    row_tot = np.zeros(batch.n_workloads * ROWS_PER_WORKLOAD, dtype=np.int64)
    bmax, ascending, cmin = 0, True, 1
    if batch.rows.size:
        bmax, ascending, cmin = _scan_coords(batch.rows, batch.buckets, batch.counts, row_tot)
    batch.check_scan(int(bmax), bool(ascending), int(cmin), row_tot)


def _scan_group_pct(counters: Any, lat: Any, pct: Any, member: Any
                    ) -> tuple[bool, bool, bool, bool]:
    """``kernelref.scan_group_pct_py`` in C (``ivk_scan_group_pct``)."""
    counters_c, lat_c = _c_array(counters, np.int64), _c_array(lat, np.int64)
    pct_c, member_c = _c_array(pct, np.float64), _c_array(member, np.bool_)
    found = _kernels().ivk_scan_group_pct(
        counters_c.ctypes.data, lat_c.ctypes.data, counters_c.shape[0], pct_c.ctypes.data,
        pct_c.shape[1], pct_c.shape[2], pct_c.shape[3], member_c.ctypes.data,
        member_c.shape[0])
    if found < 0:
        raise MemoryError("check_group_stats: no memory for its scratch")
    return (bool(found & _NEGATIVE), bool(found & _INCONSISTENT), bool(found & _MISSING),
            bool(found & _OUTSIDE))


def check_group_stats(gs: GroupStats) -> None:
    """``GroupStats.check`` with its scans in C: the coordinates of an entry with histograms
    (``validate_batch``), or the side statistics and percentile table of one without (one
    pass here, a dozen numpy passes there); the verdicts are ``GroupStats.raise_findings``,
    shared."""
    if gs.pct is None:
        validate_batch(gs.batch)
        return
    b = gs.batch
    gs.raise_findings(*_scan_group_pct(_c_array(b.counters, np.int64), _c_array(b.lat, np.int64),
                                       _c_array(gs.pct, np.float64), _VIEW_CATS))
