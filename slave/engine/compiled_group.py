"""The slave's rollup grouping in the compiled object (``ivy_loop.c``: ``ivy_group_bounds``,
``ivy_group_pass``): a batch's workloads added up into each rollup entry's groups, with their
merged histograms or their percentile tables, bit for bit what ``protocol.grouping``'s
``group_batch`` and ``view_percentiles`` give (``numpy_stats``). Why: numpy took the slave
555-1,000 ms of CPU per subinterval for 10,000 workloads on one host (49-97 ms for 1,000),
CPU that the I/O does not get; and the object ships to every host already.

Owns the call: which entries share a pass over the batch and in which role, the arrays handed
to the object and taken back, and what it refuses. One pass reads each workload's coordinates
once for several entries: one entry's groups gone through in turn (``GRP_DRIVER``), entries of
few groups held in the object's cells all along (``GRP_HELD``), and each workload's own
percentiles (``GRP_SINGLE``); an entry that fits none of these takes a pass of its own.
Entries that group alike are added up once.

The numpy path (``numpy_stats``) is the reference and the fallback: ``rollup`` takes it where
the compiled object is not loaded (``compiled_loop.library``), for a mapping numpy refuses
(numpy then says why) and for a batch the object does not take (one that is not valid). No
I/O and no clocks here; the object is loaded (or built, once per host) by ``compiled_loop``.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.batch import GroupStats, StatsBatch
from protocol.buckets import LOWER_NS, N_BUCKETS, UPPER_NS
from protocol.grouping import group_batch, view_percentiles
from protocol.histogram import percentile_numerators
from protocol.stats import ROWS_PER_WORKLOAD
from protocol.views import MEMBERSHIP, N_CATEGORIES, N_KINDS, N_VIEWS, PERCENTILES
from slave.engine import compiled_loop, layout
from slave.engine.compiled_loop import GRP_DRIVER, GRP_HELD, GRP_HELD_MAX, GRP_SINGLE

log = logging.getLogger(__name__)

#: ``struct ivy_grp``: a rollup entry's part in a pass (``ivy_loop.h``)
GRP_DTYPE: Final = layout.header_dtype("grp")
_NUMERATORS: Final = percentile_numerators(PERCENTILES)
#: ``ivy_group_pass``'s views: each view's categories (a bit each), then the percentiles'
#: numerators (rising: one walk up a view's histogram finds them all)
_VIEWS: Final = np.concatenate([MEMBERSHIP @ (1 << np.arange(N_CATEGORIES)),
                                _NUMERATORS]).astype(np.int64)
#: the values a bucket holds, as the percentiles read them: each one's lowest, then highest
_EDGES: Final = np.concatenate([LOWER_NS.astype(np.float64), (UPPER_NS - 1).astype(np.float64)])
_RISING: Final = bool(np.all(np.diff(_NUMERATORS) >= 0))
_CELLS: Final = ROWS_PER_WORKLOAD * N_BUCKETS  # a group's cells
_ACC: Final = 3 * ROWS_PER_WORKLOAD  # a group's rows' extents and totals (``struct g_acc``)
#: the most groups the held entries of a pass have in all: their cells (152 KB a group)
#: stay in a core's cache with the driver's
HELD_GROUPS: Final = 8


@dataclass(frozen=True)
class Entry:
    """A rollup entry to add a batch up by: each workload's group among ``n_groups``, and
    whether the groups' histograms are wanted (else their percentile tables)."""

    of_workload: npt.ArrayLike
    n_groups: int
    histograms: bool


def numpy_stats(batch: StatsBatch, of_workload: npt.ArrayLike, n_groups: int,
                histograms: bool) -> GroupStats:
    """A rollup entry by numpy (``protocol.grouping``): the groups of ``of_workload``, with
    their histograms, or without them and with their percentile tables."""
    grouped = group_batch(batch, of_workload, n_groups)
    if histograms:
        return GroupStats(grouped)
    side = StatsBatch(counters=grouped.counters, lat=grouped.lat, rows=grouped.rows[:0],
                      buckets=grouped.buckets[:0], counts=grouped.counts[:0])
    return GroupStats(side, view_percentiles(grouped))


def rollup(batch: StatsBatch, entries: Sequence[Entry]) -> list[GroupStats]:
    """Each entry's ``numpy_stats`` of ``batch``: by the compiled object where it is loaded
    and takes the batch, else by numpy; an entry that groups as an earlier one with the same
    output is that one's."""
    got = _compiled(batch, entries)
    if got is not None:
        return got
    out: list[GroupStats] = []
    for i, e in enumerate(entries):
        same = next((j for j in range(i) if entries[j].histograms == e.histograms
                     and _alike(entries[j], e)), None)
        out.append(out[same] if same is not None else
                   numpy_stats(batch, e.of_workload, e.n_groups, e.histograms))
    return out


def _alike(a: Entry, b: Entry) -> bool:
    return a.n_groups == b.n_groups and bool(np.array_equal(a.of_workload, b.of_workload))


# ----------------------------------------------------------------------------- the passes
@dataclass(eq=False)
class _Job:
    """Entries that group alike, added up once: the groups (``of``), what is wanted of
    them, and the arrays ``ivy_group_pass`` fills."""

    of: npt.NDArray[np.intp]
    n_groups: int
    identity: bool
    coords: bool = False
    pct: bool = False
    role: int = GRP_DRIVER
    of_driver: npt.NDArray[np.int64] | None = None  # held: its group of each driver's group
    out: StatsBatch | None = None
    table: npt.NDArray[np.float64] | None = None
    keep: list[npt.NDArray[np.generic]] = field(default_factory=list)


def _compiled(batch: StatsBatch, entries: Sequence[Entry]) -> list[GroupStats] | None:
    """``rollup`` by the compiled object, or None where it does not serve (the module's
    docstring)."""
    lib = compiled_loop.library()
    if lib is None or not _RISING or not _grp_layout_fits(lib):
        return None
    n = batch.n_workloads
    jobs: list[_Job] = []
    of_entry: list[_Job] = []
    for e in entries:
        g = _mapping(e, n)
        if g is None:
            return None  # numpy's to refuse
        job = next((j for j in jobs if j.n_groups == e.n_groups and np.array_equal(j.of, g)),
                   None)
        if job is None:
            job = _Job(g, e.n_groups, e.n_groups == n and bool(np.array_equal(g, np.arange(n))))
            jobs.append(job)
        job.coords |= e.histograms
        job.pct |= not e.histograms
        of_entry.append(job)
    if not _run(lib, batch, jobs):
        return None
    out: list[GroupStats] = []
    for e, job in zip(entries, of_entry, strict=True):
        if job.identity and e.histograms:
            out.append(GroupStats(batch))  # group_batch returns the batch as it is
            continue
        side = batch if job.identity else job.out
        assert side is not None
        if e.histograms:
            out.append(GroupStats(side))
            continue
        out.append(GroupStats(StatsBatch(counters=side.counters, lat=side.lat,
                                         rows=side.rows[:0], buckets=side.buckets[:0],
                                         counts=side.counts[:0]), job.table))
    return out


def _mapping(e: Entry, n: int) -> npt.NDArray[np.intp] | None:
    """The entry's groups as ``group_batch`` takes them, or None where it refuses them."""
    g = np.asarray(e.of_workload)
    if g.shape != (n,) or e.n_groups < 0 or (n and (
            g.dtype.kind not in "iu" or int(g.min()) < 0 or int(g.max()) >= e.n_groups)):
        return None
    return g.astype(np.intp, copy=False)


def _run(lib: ctypes.CDLL, batch: StatsBatch, jobs: list[_Job]) -> bool:
    """The jobs' passes over the batch, their outputs set; False where the object refused
    the batch."""
    n = batch.n_workloads
    rows = np.ascontiguousarray(batch.rows, dtype=np.uint32)
    bounds = np.empty(n * ROWS_PER_WORKLOAD + 1, dtype=np.int64)
    if lib.ivy_group_bounds(rows.ctypes.data, rows.size, bounds.size - 1, bounds.ctypes.data):
        log.debug("the compiled grouping refused a batch of %d workloads: its histogram rows "
                  "are out of order or of range; numpy groups it", n)
        return False
    arrays = (np.ascontiguousarray(batch.counters, dtype=np.int64),
              np.ascontiguousarray(batch.lat, dtype=np.int64),
              np.ascontiguousarray(batch.buckets, dtype=np.uint16),
              np.ascontiguousarray(batch.counts, dtype=np.int64))
    cells = np.zeros(_CELLS + N_BUCKETS, dtype=np.int64)
    nnz = int(rows.size)
    for part in _passes(jobs):
        grp = np.zeros(len(part), dtype=GRP_DTYPE)
        for k, job in enumerate(part):
            _prepare(job, grp[k], nnz)
        done = lib.ivy_group_pass(*(a.ctypes.data for a in arrays), bounds.ctypes.data, n,
                                  grp.ctypes.data, len(part), _VIEWS.ctypes.data,
                                  _EDGES.ctypes.data, cells.ctypes.data)
        if done < 0:
            log.debug("the compiled grouping refused a batch of %d workloads (not valid); "
                      "numpy groups it", n)
            return False
        for k, job in enumerate(part):
            if job.out is not None:
                m = int(grp[k]["n_coords"])
                job.out = StatsBatch(counters=job.out.counters, lat=job.out.lat,
                                     rows=job.out.rows[:m], buckets=job.out.buckets[:m],
                                     counts=job.out.counts[:m])
            job.keep.clear()
    return True


def _passes(jobs: list[_Job]) -> list[list[_Job]]:
    """The jobs in passes, each job's role set: the first pass takes each workload's own
    percentiles, the jobs of fewest groups held (up to ``HELD_GROUPS`` groups and
    ``GRP_HELD_MAX`` jobs) and the one of most groups left as its driver; each job left
    after that drives a pass of its own."""
    first: list[_Job] = []
    rest: list[_Job] = []
    held_groups = 0
    for job in sorted(jobs, key=lambda j: j.n_groups):
        if job.identity:
            if job.pct:
                job.role = GRP_SINGLE
                first.append(job)
        elif (held_groups + job.n_groups <= HELD_GROUPS
              and sum(j.role == GRP_HELD for j in first) < GRP_HELD_MAX):
            job.role = GRP_HELD
            held_groups += job.n_groups
            first.append(job)
        else:
            job.role = GRP_DRIVER
            rest.append(job)
    if rest:
        first.append(rest.pop())
        _take_driver(first)
    passes = [[job] for job in rest]
    if first:
        passes.insert(0, first)
    return passes


def _take_driver(part: list[_Job]) -> None:
    """Each held job of ``part`` whose groups are unions of the driver's (the last job) takes
    the driver's groups whole (``of_driver``) rather than each workload's rows: the lun
    groups add up to the host, the all and most attributes' groups."""
    driver = part[-1]
    for job in part:
        if job.role == GRP_HELD:
            of_driver = np.zeros(driver.n_groups, dtype=np.int64)
            of_driver[driver.of] = job.of
            if np.array_equal(of_driver[driver.of], job.of):
                job.of_driver = of_driver


def _prepare(job: _Job, grp: np.void, nnz: int) -> None:
    """The job's ``struct ivy_grp`` (``grp``) and its arrays, made and kept in ``job``."""
    def address(a: npt.NDArray[np.generic]) -> int:
        job.keep.append(a)
        return int(a.ctypes.data)

    g = job.n_groups
    grp["role"], grp["n_groups"] = job.role, g
    if job.pct:
        job.table = np.full((job.of.size if job.identity else g, N_VIEWS, N_KINDS,
                             len(PERCENTILES)), np.nan)
        grp["pct"] = address(job.table)
    if job.identity:
        return
    if job.role == GRP_DRIVER:
        members = np.empty(g + 1 + job.of.size, dtype=np.int64)
        members[0] = 0
        np.cumsum(np.bincount(job.of, minlength=g), out=members[1:g + 1])
        members[g + 1:] = np.argsort(job.of, kind="stable")
        grp["members"] = address(members)
    else:
        grp["of"] = address(np.ascontiguousarray(job.of, dtype=np.int64))
        if job.of_driver is not None:
            grp["of_driver"] = address(job.of_driver)
        grp["cells"] = address(np.zeros(g * _CELLS, dtype=np.int64))
        grp["acc"] = address(np.empty(g * _ACC, dtype=np.int64))
    room = min(nnz, g * _CELLS) if job.coords else 0
    out = StatsBatch.empty(g)
    job.out = StatsBatch(counters=out.counters, lat=out.lat,
                         rows=np.empty(room, dtype=np.uint32),
                         buckets=np.empty(room, dtype=np.uint16),
                         counts=np.empty(room, dtype=np.int64))
    grp["counters"], grp["lat"] = address(out.counters), address(out.lat)
    if job.coords:
        grp["rows"] = address(job.out.rows)
        grp["buckets"] = address(job.out.buckets)
        grp["counts"] = address(job.out.counts)


_fits: dict[int, bool] = {}


def _grp_layout_fits(lib: ctypes.CDLL) -> bool:
    """Whether ``GRP_DTYPE`` is ``struct ivy_grp`` as ``lib`` was compiled (said once)."""
    key = id(lib)
    if key not in _fits:
        fields = GRP_DTYPE.fields
        assert fields is not None
        mine = (GRP_DTYPE.itemsize, tuple((name, int(fields[name][1]), fields[name][0].itemsize)
                                          for name in GRP_DTYPE.names or ()))
        theirs = layout.compiled_layout(lib, "ivy_grp")
        _fits[key] = mine == theirs
        if mine != theirs:
            log.warning("the compiled grouping is not used: struct ivy_grp is %s compiled, "
                        "%s in its Python mirror", theirs, mine)
    return _fits[key]
