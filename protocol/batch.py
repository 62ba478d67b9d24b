"""Many workloads' statistics of one subinterval in the sparse form that travels: ``StatsBatch``,
and a rollup entry of a slave's result, ``GroupStats`` (groups added up, with their
percentile table or their histograms).

Owns the wire layout of both and its checks (every field's type and length; a garbled batch is
a ``RemoteProtocolError``), and the drain of ``WorkloadStats`` blocks into a batch. Pure numpy:
no I/O, clocks or threads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast

import numpy as np
import numpy.typing as npt

from protocol.buckets import (
    N_BUCKETS,
    bucket_index,
)
from protocol.errors import RemoteProtocolError
from protocol.stats import (
    COUNTER_CELLS,
    EMPTY_HEAD,
    HEAD_CELLS,
    I64_MAX,
    LAT_CELLS,
    MAX,
    MIN,
    OPS,
    ROWS_PER_WORKLOAD,
    WorkloadStats,
)
from protocol.views import MEMBERSHIP, N_CATEGORIES, N_KINDS, N_VIEWS, PERCENTILES, VIEWS

_I64 = npt.NDArray[np.int64]
#: StatsBatch.drain gathers histogram cells in pieces of about this many
_DRAIN_CELLS: Final = 1 << 20


def _drain_rows(
    blocks: npt.NDArray[np.int64],
    idx: npt.NDArray[np.intp],
    seg_w: npt.NDArray[np.intp],
    seg_row: npt.NDArray[np.intp],
    first: npt.NDArray[np.intp],
    last: npt.NDArray[np.intp],
    ops: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint16], npt.NDArray[np.int64]]:
    """``StatsBatch.drain`` on some histogram rows: batch row ``seg_row[i]`` is a row of block
    ``idx[seg_w[i]]``, read and cleared from bucket ``first[i]`` to ``last[i]``, or whole when
    its counts there do not add up to ``ops[i]``. Returns the nonzero cells as (rows, buckets,
    counts), sorted as the rows come."""
    for whole in (False, True):
        lengths = last - first + 1
        offsets = np.cumsum(lengths) - lengths
        seg = np.repeat(np.arange(lengths.size), lengths)
        bucket = np.arange(int(lengths.sum())) - np.repeat(offsets - first, lengths)
        col = HEAD_CELLS + (seg_row % ROWS_PER_WORKLOAD)[seg] * N_BUCKETS + bucket
        blk = idx[seg_w][seg]
        vals = blocks[blk, col]
        if whole:
            break
        short = np.add.reduceat(vals, offsets) != ops
        if not short.any():
            break
        first = np.where(short, 0, first)
        last = np.where(short, N_BUCKETS - 1, last)
    nz = np.flatnonzero(vals)
    blocks[blk[nz], col[nz]] = 0
    return seg_row[seg[nz]].astype(np.uint32), bucket[nz].astype(np.uint16), vals[nz]


@dataclass(frozen=True, eq=False)
class StatsBatch:
    """Many workloads' statistics for one subinterval, in the sparse form that travels.

    ``counters``: (W, 4, 3) int64 (ops, bytes, errors); ``lat``: (W, 4, 2, 3) int64 (sum, min,
    max; min INT64_MAX / max -1 when empty); the histograms as coordinates sorted by
    (row, bucket): ``rows`` (row = workload * 8 + category * 2 + kind), ``buckets``, ``counts``.
    """

    counters: npt.NDArray[np.int64]
    lat: npt.NDArray[np.int64]
    rows: npt.NDArray[np.uint32]
    buckets: npt.NDArray[np.uint16]
    counts: npt.NDArray[np.int64]

    @property
    def n_workloads(self) -> int:
        return int(self.counters.shape[0])

    @classmethod
    def from_stats(cls, stats: list[WorkloadStats]) -> StatsBatch:
        if not stats:
            return cls.empty()
        flat = np.stack([s.buffer for s in stats])
        return cls.from_flat(flat)

    @classmethod
    def from_flat(cls, flat: npt.NDArray[np.int64]) -> StatsBatch:
        """From a (W, WorkloadStats.SIZE) array of stacked blocks."""
        w = flat.shape[0]
        counters = flat[:, :COUNTER_CELLS].reshape(w, N_CATEGORIES, 3).copy()
        lat = flat[:, COUNTER_CELLS:COUNTER_CELLS + LAT_CELLS].reshape(
            w, N_CATEGORIES, N_KINDS, 3)
        hist = flat[:, COUNTER_CELLS + LAT_CELLS:].reshape(w * ROWS_PER_WORKLOAD, N_BUCKETS)
        rows, buckets = np.nonzero(hist)
        return cls(
            counters=counters,
            lat=lat.copy(),
            rows=rows.astype(np.uint32),
            buckets=buckets.astype(np.uint16),
            counts=hist[rows, buckets].astype(np.int64),
        )

    @classmethod
    def drain(cls, blocks: npt.NDArray[np.int64],
              slots: Sequence[int] | npt.NDArray[np.intp], audit: int | None = None
              ) -> StatsBatch:
        """The statistics of the blocks ``blocks[slots]`` (``blocks``: a (N,
        WorkloadStats.SIZE) array or view, such as one side of a worker pool's shared region),
        leaving each of those blocks empty, as ``WorkloadStats.reset`` would.

        Reads and clears only what was recorded. A histogram row is looked at only when its
        category counted operations, and then only between the buckets of its minimum and
        maximum latency: every recording method keeps the counts there. A row whose counts
        there do not add up to its operations is read and cleared whole, so the batch shows
        what the block held and validation names it. ``audit``, an index into ``slots``: that
        block is checked in full afterwards, and a count left outside what was read raises
        ``ValueError`` (a caller auditing each block in turn finds a broken recording path).

        A block is 152 KB. Copying, scanning and resetting 512 of them took the slave 94 ms
        warm and 0.7 s when the copy was fresh memory; this takes 6-7 ms."""
        idx = np.asarray(slots, dtype=np.intp).reshape(-1)
        w = idx.size
        head = blocks[idx, :HEAD_CELLS]
        counters = np.ascontiguousarray(head[:, :COUNTER_CELLS]).reshape(w, N_CATEGORIES, 3)
        lat = np.ascontiguousarray(head[:, COUNTER_CELLS:]).reshape(w, N_CATEGORIES, N_KINDS, 3)
        # one segment per histogram row with operations, in row order
        wi, ci = np.nonzero(counters[:, :, OPS] > 0)
        seg_w = np.repeat(wi, N_KINDS)
        seg_c = np.repeat(ci, N_KINDS)
        seg_k = np.tile(np.arange(N_KINDS), wi.size)
        seg_ops = counters[seg_w, seg_c, OPS]
        low, high = lat[seg_w, seg_c, seg_k, MIN], lat[seg_w, seg_c, seg_k, MAX]
        sane = (low >= 0) & (low <= high)
        first = np.where(sane, bucket_index(np.where(sane, low, 0)), 0)
        last = np.where(sane, bucket_index(np.where(sane, high, 0)), N_BUCKETS - 1)
        seg_row = seg_w * ROWS_PER_WORKLOAD + seg_c * N_KINDS + seg_k
        parts = []
        # in pieces of about a million cells, so the temporaries stay a few tens of MB
        lengths = last - first + 1
        ends = np.cumsum(lengths)
        a = 0
        while a < seg_row.size:
            b = int(np.searchsorted(ends, ends[a] - lengths[a] + _DRAIN_CELLS, side="right"))
            b = max(b, a + 1)
            parts.append(_drain_rows(blocks, idx, seg_w[a:b], seg_row[a:b], first[a:b],
                                     last[a:b], seg_ops[a:b]))
            a = b
        blocks[idx, :HEAD_CELLS] = EMPTY_HEAD
        if audit is not None and blocks[idx[audit], HEAD_CELLS:].any():
            left = blocks[idx[audit], HEAD_CELLS:].reshape(ROWS_PER_WORKLOAD, N_BUCKETS)
            row, bucket = (int(v[0]) for v in np.nonzero(left))
            raise ValueError(
                f"block {int(idx[audit])}: histogram row {row} (category {row // N_KINDS}, "
                f"kind {row % N_KINDS}) kept {int(np.count_nonzero(left))} nonzero buckets "
                f"outside its recorded range, the first at bucket {bucket}")
        if not parts:
            return cls(counters=counters, lat=lat, rows=np.zeros(0, dtype=np.uint32),
                       buckets=np.zeros(0, dtype=np.uint16), counts=np.zeros(0, dtype=np.int64))
        return cls(counters=counters, lat=lat,
                   rows=np.concatenate([p[0] for p in parts]),
                   buckets=np.concatenate([p[1] for p in parts]),
                   counts=np.concatenate([p[2] for p in parts]))

    @classmethod
    def concat(cls, batches: Sequence[StatsBatch]) -> StatsBatch:
        """Workloads of several batches side by side (hosts of one subinterval), still sorted
        by (row, bucket)."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return cls.empty()
        nnz = [b.rows.size for b in batches]
        rows = np.empty(int(sum(nnz)), dtype=np.uint32)
        at, first_row = 0, 0
        for b, n in zip(batches, nnz, strict=True):
            np.add(b.rows, np.uint32(first_row), out=rows[at:at + n], casting="unsafe")
            at += n
            first_row += b.n_workloads * ROWS_PER_WORKLOAD
        return cls(
            counters=np.concatenate([b.counters for b in batches]),
            lat=np.concatenate([b.lat for b in batches]),
            rows=rows,
            buckets=np.concatenate([b.buckets for b in batches]),
            counts=np.concatenate([b.counts for b in batches]),
        )

    @classmethod
    def empty(cls, n_workloads: int = 0) -> StatsBatch:
        lat = np.zeros((n_workloads, N_CATEGORIES, N_KINDS, 3), dtype=np.int64)
        lat[..., MIN] = I64_MAX
        lat[..., MAX] = -1
        return cls(
            counters=np.zeros((n_workloads, N_CATEGORIES, 3), dtype=np.int64),
            lat=lat,
            rows=np.zeros(0, dtype=np.uint32),
            buckets=np.zeros(0, dtype=np.uint16),
            counts=np.zeros(0, dtype=np.int64),
        )

    def workload(self, i: int) -> WorkloadStats:
        """Dense statistics of workload ``i`` (for tests and small consumers)."""
        s = WorkloadStats()
        s.counters[:] = self.counters[i]
        s.lat[:] = self.lat[i]
        lo, hi = np.searchsorted(self.rows, [i * ROWS_PER_WORKLOAD, (i + 1) * ROWS_PER_WORKLOAD])
        r = self.rows[lo:hi].astype(np.intp) - i * ROWS_PER_WORKLOAD
        s.hist.reshape(ROWS_PER_WORKLOAD, N_BUCKETS)[r, self.buckets[lo:hi]] = self.counts[lo:hi]
        return s

    def reordered(self, perm: npt.NDArray[np.intp]) -> StatsBatch:
        """This batch with its workloads in the order ``perm`` (new workload j = old
        ``perm[j]``), coordinates sorted again."""
        new_of_old = np.empty_like(perm)
        new_of_old[perm] = np.arange(perm.size)
        rows = self.rows.astype(np.int64)
        new_rows = (new_of_old[rows // ROWS_PER_WORKLOAD] * ROWS_PER_WORKLOAD
                    + rows % ROWS_PER_WORKLOAD)
        order = np.lexsort((self.buckets, new_rows))
        return StatsBatch(counters=np.asarray(self.counters)[perm],
                          lat=np.asarray(self.lat)[perm],
                          rows=new_rows[order].astype(np.uint32), buckets=self.buckets[order],
                          counts=np.asarray(self.counts)[order])

    # ------------------------------------------------------------------ wire form
    def to_wire(self) -> dict[str, bytes | int]:
        return {
            "n": self.n_workloads,
            "counters": self.counters.astype("<i8").tobytes(),
            "lat": self.lat.astype("<i8").tobytes(),
            "rows": self.rows.astype("<u4").tobytes(),
            "buckets": self.buckets.astype("<u2").tobytes(),
            "counts": self.counts.astype("<i8").tobytes(),
        }

    @classmethod
    def from_wire(cls, wire: dict[str, object], *, validate: bool = True) -> StatsBatch:
        """Decode and validate; anything inconsistent raises ``RemoteProtocolError``. With
        ``validate=False`` only the shapes are checked, and the caller must validate the batch
        itself (the master does, with one compiled pass:
        ``master.analysis.kernels.validate_batch``)."""
        n, buf = _wire_fields(wire)
        batch = cls._of_buffers(n, *buf)
        if validate:
            batch.validate()
        return batch

    @classmethod
    def _of_buffers(cls, n: int, counters: _Buffer, lat: _Buffer, rows: _Buffer,
                    buckets: _Buffer, counts: _Buffer) -> StatsBatch:
        """A batch of ``n`` workloads over the wire fields' bytes (checked by
        ``_wire_fields``), without copying them."""
        return cls(counters=np.frombuffer(counters, dtype="<i8").reshape(n, N_CATEGORIES, 3),
                   lat=np.frombuffer(lat, dtype="<i8").reshape(n, N_CATEGORIES, N_KINDS, 3),
                   rows=np.frombuffer(rows, dtype="<u4"),
                   buckets=np.frombuffer(buckets, dtype="<u2"),
                   counts=np.frombuffer(counts, dtype="<i8"))

    def validate(self) -> None:
        """Raise ``RemoteProtocolError`` unless the batch is internally consistent."""
        n = self.n_workloads
        nnz = self.rows.size
        ascending = True
        if nnz > 1:
            key = self.rows.astype(np.int64) * N_BUCKETS + self.buckets
            ascending = bool(np.all(key[1:] > key[:-1]))
        in_range = nnz == 0 or int(self.rows[-1]) < n * ROWS_PER_WORKLOAD
        row_totals = np.zeros(0, dtype=np.int64)
        if in_range and ascending:  # the totals are read only then
            # exact int64 sums per row (bincount's float64 weights round beyond 2**53)
            row_totals = np.zeros(n * ROWS_PER_WORKLOAD, dtype=np.int64)
            if nnz:
                starts = np.flatnonzero(np.diff(self.rows, prepend=self.rows[0] + 1) != 0)
                row_totals[self.rows[starts]] = np.add.reduceat(
                    self.counts.astype(np.int64), starts)
        self.check_scan(int(self.buckets.max()) if nnz else 0, ascending,
                        int(self.counts.min()) if nnz else 1, row_totals)

    def check_scan(self, max_bucket: int, ascending: bool, min_count: int,
                   row_totals: npt.NDArray[np.int64]) -> None:
        """The checks of ``validate`` given one scan of the coordinates: the largest bucket,
        whether (row, bucket) rises strictly, the smallest count, and each histogram row's
        total (read only when the rows are in range and sorted). Shared with the master's
        compiled scan (``master.analysis.kernels.validate_batch``), so both refuse alike."""
        n = self.n_workloads
        if self.rows.size:
            if int(self.rows[-1]) >= n * ROWS_PER_WORKLOAD or max_bucket >= N_BUCKETS:
                raise RemoteProtocolError("stats batch histogram coordinates out of range")
            if not ascending:
                raise RemoteProtocolError("stats batch histogram coordinates are not sorted")
            if min_count <= 0:
                raise RemoteProtocolError("stats batch histogram counts must be > 0")
        per_row = row_totals.reshape(n, N_CATEGORIES, N_KINDS)
        ops = self.counters[:, :, OPS]
        same = np.array_equal(per_row[:, :, 0], ops) and np.array_equal(per_row[:, :, 1], ops)
        if n and not same:
            raise RemoteProtocolError("stats batch histogram counts differ from the ops counters")
        self.check_side()

    def check_side(self) -> None:
        """The checks of the counters and latency side statistics alone (a batch that carries
        no histograms: ``GroupStats`` with a percentile table)."""
        raise_side_findings(*self.side_findings())

    def side_findings(self) -> tuple[bool, bool]:
        """What ``check_side`` looks for: (a negative counter, a category with I/O whose
        latency minimum is negative or above its maximum)."""
        if not self.n_workloads:
            return False, False
        has = self.counters[:, :, OPS] > 0
        lat_min = self.lat[..., MIN]
        lat_max = self.lat[..., MAX]
        return (int(self.counters.min()) < 0,
                bool(np.any(has[:, :, None] & ((lat_min < 0) | (lat_max < lat_min)))))


_Buffer = bytes | bytearray | memoryview
#: A ``StatsBatch``'s wire fields after ``n``, and each one's bytes per workload (None: any
#: multiple of the coordinate's size).
_WIRE_FIELDS: Final = (("counters", 8 * N_CATEGORIES * 3), ("lat", 8 * N_CATEGORIES * N_KINDS * 3),
                       ("rows", None), ("buckets", None), ("counts", None))


def _wire_fields(wire: object) -> tuple[int, tuple[_Buffer, _Buffer, _Buffer, _Buffer, _Buffer]]:
    """A ``StatsBatch`` wire dict's workload count and the bytes of its five arrays
    (counters, lat, rows, buckets, counts), each checked for type and length; anything else
    raises ``RemoteProtocolError``."""
    fields = cast(dict[str, object], wire)  # anything else fails the lookups
    try:  # straight lookups: this runs for every host's every rollup entry, each subinterval
        n = fields["n"]
        buf = (fields["counters"], fields["lat"], fields["rows"], fields["buckets"],
               fields["counts"])
    except (KeyError, TypeError) as exc:
        raise RemoteProtocolError(f"stats batch lacks field {exc}") from exc
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > 1 << 20:
        raise RemoteProtocolError(f"stats batch workload count {n!r} is invalid")
    for (k, per_workload), v in zip(_WIRE_FIELDS, buf, strict=True):
        if not isinstance(v, bytes | bytearray | memoryview):
            raise RemoteProtocolError(f"stats batch field {k} is not bytes")
        if per_workload is not None and len(v) != per_workload * n:
            raise RemoteProtocolError(
                f"stats batch field {k} has {len(v)} bytes, expected {per_workload * n}")
    checked = cast(tuple[_Buffer, _Buffer, _Buffer, _Buffer, _Buffer], buf)
    nnz = len(checked[2]) // 4
    if (len(checked[2]), len(checked[3]), len(checked[4])) != (4 * nnz, 2 * nnz, 8 * nnz):
        raise RemoteProtocolError("stats batch histogram coordinate arrays differ in length")
    return n, checked


@functools.cache
def _pct_shape() -> tuple[int, int, int]:
    """A group's percentile table: (N_VIEWS, N_KINDS, len(PERCENTILES))."""
    return N_VIEWS, N_KINDS, len(PERCENTILES)


def _entry_fields(wire: object, histograms: bool
                  ) -> tuple[int, tuple[_Buffer, _Buffer, _Buffer, _Buffer, _Buffer], _Buffer]:
    """A ``GroupStats`` wire entry's group count, its batch's five arrays' bytes
    (``_wire_fields``) and its percentile table's bytes (empty with ``histograms``), each
    checked for type and length."""
    raw = wire.get("pct") if isinstance(wire, dict) else None
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise RemoteProtocolError("group statistics lack their pct field (bytes)")
    n, buf = _wire_fields(wire)
    if histograms:
        if len(raw):
            raise RemoteProtocolError("group statistics carry both histograms and percentiles")
        return n, buf, raw
    if len(buf[2]):
        raise RemoteProtocolError("group statistics carry histograms where percentiles "
                                  "were asked for")
    expect = 8 * n * math.prod(_pct_shape())
    if len(raw) != expect:
        raise RemoteProtocolError(f"group percentile table has {len(raw)} bytes, "
                                  f"expected {expect}")
    return n, buf, raw


def raise_side_findings(negative: bool, inconsistent: bool) -> None:
    """``StatsBatch.check_side``'s verdict from what a scan found: negative counters, or a
    category with I/O whose latency minimum is negative or above its maximum (shared with the
    master's compiled scan, so both refuse alike)."""
    if negative:
        raise RemoteProtocolError("stats batch has negative counters")
    if inconsistent:
        raise RemoteProtocolError("stats batch latency min/max are inconsistent")


@dataclass(frozen=True)
class GroupStats:
    """One rollup entry of a ``SubintervalResult``: G groups of a host's workloads, each
    added up (``protocol.grouping.group_batch``). ``batch`` holds their counters and latency
    side statistics, and their merged histograms when the entry asked for histograms;
    otherwise its coordinates are empty and ``pct`` holds each group's percentiles, in ns:
    (G, N_VIEWS, N_KINDS, len(PERCENTILES)) float64, NaN where the view had no I/O
    (``protocol.grouping.view_percentiles``)."""

    batch: StatsBatch
    pct: npt.NDArray[np.float64] | None = None

    @property
    def n_groups(self) -> int:
        return self.batch.n_workloads

    def to_wire(self) -> dict[str, bytes | int]:
        wire = self.batch.to_wire()
        wire["pct"] = b"" if self.pct is None else self.pct.astype("<f8").tobytes()
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, object], *, histograms: bool,
                  validate: bool = True) -> GroupStats:
        """Decode one entry. With ``histograms`` the batch's coordinates are the groups'
        histograms and ``pct`` must be empty; without, the coordinates must be empty and the
        percentile table complete. ``validate`` then checks the contents (``check``);
        without it only the shapes are checked and the caller must check the contents
        (the master does, once for all hosts of a subinterval)."""
        n, buf, raw = _entry_fields(wire, histograms)
        batch = StatsBatch._of_buffers(n, *buf)
        out = cls(batch) if histograms else cls(batch, np.frombuffer(raw, dtype="<f8").reshape(
            (n, *_pct_shape())))
        if validate:
            out.check()
        return out

    @classmethod
    def join_wire(cls, wires: Sequence[object], *, histograms: bool
                  ) -> tuple[GroupStats, list[int]]:
        """The groups of ``from_wire(w, histograms=..., validate=False)`` of each of ``wires``
        (every host's entry of one rollup type) side by side, as ``StatsBatch.concat`` puts
        batches, and each entry's group count. Each
        array is put together in one copy, straight from the wire's bytes. An entry that
        ``from_wire`` would refuse raises the same ``RemoteProtocolError`` here."""
        if not wires:
            raise ValueError("nothing to join")
        n_of: list[int] = []
        parts: list[tuple[_Buffer, _Buffer, _Buffer, _Buffer, _Buffer]] = []
        pcts: list[_Buffer] = []
        for wire in wires:
            n, buf, raw = _entry_fields(wire, histograms)
            n_of.append(n)
            parts.append(buf)
            pcts.append(raw)
        total = sum(n_of)
        # bytearrays: the arrays are writable (each entry's rows are offset in place below)
        c, lat, rows, buckets, counts = (bytearray().join(f) for f in zip(*parts, strict=True))
        batch = StatsBatch._of_buffers(total, c, lat, rows, buckets, counts)
        if batch.rows.size and len(parts) > 1:  # each entry's rows count from its first group
            first = np.cumsum([0, *n_of[:-1]], dtype=np.uint32) * np.uint32(ROWS_PER_WORKLOAD)
            np.add(batch.rows, np.repeat(first, [len(p[2]) // 4 for p in parts]),
                   out=batch.rows)
        if histograms:
            return cls(batch), n_of
        pct = np.frombuffer(bytearray().join(pcts), dtype="<f8").reshape((total, *_pct_shape()))
        return cls(batch, pct), n_of

    def check(self) -> None:
        """Raise ``RemoteProtocolError`` unless consistent: a batch with histograms as
        ``StatsBatch.validate``; with a percentile table, the counters and side statistics,
        and each percentile NaN exactly where its view had no I/O and within the view's exact
        minimum and maximum."""
        if self.pct is None:
            self.batch.validate()
            return
        mins, maxs, has = view_min_max(self.batch)
        pct = self.pct
        empty = np.isnan(pct)
        with np.errstate(invalid="ignore"):
            outside = (pct < mins[..., None]) | (pct > maxs[..., None])
        self.raise_findings(
            *self.batch.side_findings(),
            not np.array_equal(empty, np.broadcast_to(~has[..., None], pct.shape)),
            bool(np.any(outside & ~empty)))

    @staticmethod
    def raise_findings(negative: bool, inconsistent: bool, missing: bool, outside: bool
                       ) -> None:
        """``check``'s verdict on a percentile table's entry from what a scan found: the side
        statistics' findings (``raise_side_findings``), a percentile missing where its view
        had I/O or present where it had none, a percentile outside its view's exact minimum
        and maximum. Shared with the master's compiled scan
        (``master.analysis.kernels.check_group_stats``), so both refuse alike."""
        raise_side_findings(negative, inconsistent)
        if missing:
            raise RemoteProtocolError("group percentiles are missing, or present for a view "
                                      "without I/O")
        if outside:
            raise RemoteProtocolError("group percentiles lie outside the view's minimum and "
                                      "maximum latency")


def view_extremes(lat_min: npt.ArrayLike, lat_max: npt.ArrayLike) -> tuple[_I64, _I64]:
    """The smallest and largest latency of every view: from per-category minima and maxima
    (W, 4, 2) to (W, N_VIEWS, 2) int64, INT64_MAX and -1 for a view without I/O (as the
    master's ``rollup.compute`` builds them)."""
    mins = np.asarray(lat_min, dtype=np.int64)
    maxs = np.asarray(lat_max, dtype=np.int64)
    w = mins.shape[0]
    low: _I64 = np.empty((w, N_VIEWS, N_KINDS), dtype=np.int64)
    high: _I64 = np.empty((w, N_VIEWS, N_KINDS), dtype=np.int64)
    # a view's categories, one elementwise min / max after another (a reduction over the
    # middle axis of a broadcast array measured several times slower at 10,000 workloads)
    for v, (_, cats) in enumerate(VIEWS):
        lo, hi = low[:, v], high[:, v]
        lo[...] = mins[:, cats[0]]
        hi[...] = maxs[:, cats[0]]
        for c in cats[1:]:
            np.minimum(lo, mins[:, c], out=lo)
            np.maximum(hi, maxs[:, c], out=hi)
    return low, high


def view_min_max(batch: StatsBatch) -> tuple[_I64, _I64, npt.NDArray[np.bool_]]:
    """Each workload's views' smallest and largest latency ((W, N_VIEWS, 2) int64, as
    ``view_extremes``) and whether the view had I/O ((W, N_VIEWS, 2) bool, the same for
    both kinds): where ``view_percentiles`` is not NaN."""
    low, high = view_extremes(batch.lat[..., MIN], batch.lat[..., MAX])
    ops = np.asarray(batch.counters[:, :, OPS], dtype=np.int64)
    has = ((ops > 0).astype(np.int64) @ MEMBERSHIP.T) > 0
    return low, high, np.repeat(has[:, :, None], N_KINDS, axis=2)
