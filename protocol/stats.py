"""Per-workload, per-subinterval statistics: the block a workload reports every subinterval, and
the batched wire form that carries many workloads' blocks at once.

Owns the layout of ``WorkloadStats`` (one flat int64 array, so it can live in shared memory and
be handed over between processes without copying objects) and of ``StatsBatch`` (the sparse
form a slave sends per subinterval). Pure numpy: no I/O, clocks or threads.

Layout of one workload's block (int64, ``WorkloadStats.SIZE`` elements)::

    counters[4, 3]          per category: ops, bytes, errors
    lat[4, 2, 3]            per category and kind (0 service, 1 response): sum_ns, min_ns, max_ns
                            (min is INT64_MAX and max is -1 while empty)
    hist[4, 2, N_BUCKETS]   bucket counts on the ladder of ``protocol.buckets``

Categories, in order: random_read, random_write, sequential_read, sequential_write, so that
``category = 2 * is_sequential + is_write``. ``ops`` counts completed I/Os (each has one service
and one response time); ``errors`` counts failed I/Os and short transfers, which have no latency.
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
    OVERFLOW_INDEX,
    OVERFLOW_LOWER_NS,
    PLAT_BITS,
    PLAT_VAL,
    bucket_index,
    bucket_index_known,
)
from protocol.errors import RemoteProtocolError
from protocol.histogram import LatencyHistogram

CATEGORIES: Final = ("random_read", "random_write", "sequential_read", "sequential_write")
N_CATEGORIES: Final = 4
KINDS: Final = ("service", "response")
N_KINDS: Final = 2
OPS, BYTES, ERRORS = 0, 1, 2
SUM, MIN, MAX = 0, 1, 2
I64_MAX: Final = int(np.iinfo(np.int64).max)

_N_COUNTERS: Final = N_CATEGORIES * 3
_N_LAT: Final = N_CATEGORIES * N_KINDS * 3
_N_HIST: Final = N_CATEGORIES * N_KINDS * N_BUCKETS
_N_HEAD: Final = _N_COUNTERS + _N_LAT
#: StatsBatch.drain gathers histogram cells in pieces of about this many
_DRAIN_CELLS: Final = 1 << 20
# record_one's bucket arithmetic (buckets.bucket_index_scalar): values below 2 * PLAT_VAL have a
# bucket each; above, the group of bit length L starts at (L - PLAT_BITS) * PLAT_VAL
_ONE_PER_VALUE: Final = 2 * PLAT_VAL
_PLAT_SHIFT: Final = PLAT_BITS + 1
_PLAT_MASK: Final = PLAT_VAL - 1
#: Histogram rows per workload (category x kind): row = category * 2 + kind.
ROWS_PER_WORKLOAD: Final = N_CATEGORIES * N_KINDS


def category_index(is_sequential: bool, is_write: bool) -> int:
    return 2 * int(is_sequential) + int(is_write)


class WorkloadStats:
    """One workload's statistics for one subinterval, as views on one flat int64 array."""

    SIZE: Final = _N_COUNTERS + _N_LAT + _N_HIST

    __slots__ = ("_root", "_words", "buffer", "counters", "hist", "lat")

    def __init__(self, buffer: npt.NDArray[np.int64] | None = None) -> None:
        if buffer is None:
            buffer = np.empty(self.SIZE, dtype=np.int64)
            self.buffer = buffer
            self._bind()
            self.reset()
            return
        if buffer.dtype != np.int64 or buffer.shape != (self.SIZE,):
            raise ValueError(
                f"WorkloadStats needs a flat int64 buffer of {self.SIZE}, got "
                f"{buffer.dtype} {buffer.shape}"
            )
        self.buffer = buffer
        self._bind()

    def _bind(self) -> None:
        b = self.buffer
        self._root: tuple[npt.NDArray[np.int64], int] | None = None  # see _rooted
        self._words: memoryview | None = None  # see record_one
        self.counters = b[:_N_COUNTERS].reshape(N_CATEGORIES, 3)
        self.lat = b[_N_COUNTERS : _N_COUNTERS + _N_LAT].reshape(N_CATEGORIES, N_KINDS, 3)
        self.hist = b[_N_COUNTERS + _N_LAT :].reshape(N_CATEGORIES, N_KINDS, N_BUCKETS)

    def reset(self) -> None:
        self.buffer[:] = 0
        self.lat[:, :, MIN] = I64_MAX
        self.lat[:, :, MAX] = -1

    # ------------------------------------------------------------------ recording
    def record(
        self,
        category: npt.ArrayLike,
        service_ns: npt.ArrayLike,
        response_ns: npt.ArrayLike,
        nbytes: npt.ArrayLike,
    ) -> None:
        """Record a batch of completed I/Os, vectorised. ``category`` may be one int for the
        whole batch or an array; ``nbytes`` one int or an array. Latencies are int64 ns >= 0.
        ``response_ns`` given as the very object ``service_ns`` (I/Os at max iops, scheduled
        when submitted) is binned once for both."""
        same = response_ns is service_ns
        svc = np.asarray(service_ns, dtype=np.int64).reshape(-1)
        rsp = svc if same else np.asarray(response_ns, dtype=np.int64).reshape(-1)
        n = svc.size
        if n == 0:
            return
        if rsp.size != n:
            raise ValueError("service_ns and response_ns differ in length")
        cat = np.asarray(category, dtype=np.intp).reshape(-1)
        nb = np.asarray(nbytes, dtype=np.int64).reshape(-1)
        if cat.size == 1 or int(cat.min()) == int(cat.max()):
            self.record_category(int(cat[0]), svc, None if same else rsp,
                                 int(nb[0]) * n if nb.size == 1 else int(nb.sum()))
            return
        if cat.size != n:
            raise ValueError("category must be one value or one per I/O")
        if int(svc.min()) < 0 or (not same and int(rsp.min()) < 0):
            raise ValueError("latencies must be >= 0 ns")
        for c in range(N_CATEGORIES):
            mask = cat == c
            if mask.any():
                part = svc[mask]
                self.record(c, part, part if same else rsp[mask],
                            nb if nb.size == 1 else nb[mask])

    def record_category(
        self,
        category: int,
        service_ns: npt.NDArray[np.int64],
        response_ns: npt.NDArray[np.int64] | None,
        nbytes_total: int,
    ) -> None:
        """``record`` for I/Os of one category, given as 1-D int64 arrays (an engine's own
        buffers): ``response_ns`` None when the response times are the service times (binned
        once), ``nbytes_total`` their bytes together. Few operations, for a loop that bins
        thousands at a time while its I/Os wait: the counters are updated as words, and the
        least and greatest latency spare the bucket arithmetic its edge cases."""
        n = service_ns.size
        if n == 0:
            return
        kinds = [(service_ns, int(service_ns.min()), int(service_ns.max()))]
        if response_ns is None:
            kinds.append(kinds[0])
        elif response_ns.size != n:
            raise ValueError("service_ns and response_ns differ in length")
        else:
            kinds.append((response_ns, int(response_ns.min()), int(response_ns.max())))
        if kinds[0][1] < 0 or kinds[1][1] < 0:
            raise ValueError("latencies must be >= 0 ns")
        w = self._words
        if w is None:
            w = self._words = self.buffer.data
        c = 3 * category
        w[c + OPS] += n
        w[c + BYTES] += nbytes_total
        lat = _N_COUNTERS + N_KINDS * 3 * category
        hist = self.hist[category]
        for kind, (v, low, high) in enumerate(kinds):  # service, then response: the next triple
            if kind == 0 or response_ns is not None:  # else the service times': binned once
                counts = np.bincount(bucket_index_known(v, low, high), minlength=N_BUCKETS)
                total = int(v.sum())
            hist[kind] += counts
            w[lat + SUM] += total
            if low < w[lat + MIN]:
                w[lat + MIN] = low
            if high > w[lat + MAX]:
                w[lat + MAX] = high
            lat += 3

    def record_one(self, category: int, service_ns: int, response_ns: int, nbytes: int) -> None:
        """``record`` for one I/O, in plain ints: ~1.3-2.6 us here, where a ``record`` call
        costs ~40 us however few I/Os it gets. For an engine loop that bins one I/O at a time
        while it waits for its next I/O (no buffered I/Os binned all at once, no stall)."""
        if service_ns < 0 or response_ns < 0:
            raise ValueError("latencies must be >= 0 ns")
        w = self._words
        if w is None:
            w = self._words = self.buffer.data
        c = 3 * category
        w[c + OPS] += 1
        w[c + BYTES] += nbytes
        lat = _N_COUNTERS + N_KINDS * 3 * category
        hist = _N_COUNTERS + _N_LAT + N_KINDS * N_BUCKETS * category
        for v in (service_ns, response_ns):  # service, then response: the next triple and row
            w[lat + SUM] += v
            if v < w[lat + MIN]:
                w[lat + MIN] = v
            if v > w[lat + MAX]:
                w[lat + MAX] = v
            if v < _ONE_PER_VALUE:  # bucket_index_scalar, inlined
                w[hist + v] += 1
            elif v < OVERFLOW_LOWER_NS:
                e = v.bit_length() - _PLAT_SHIFT
                w[hist + ((e + 1) << PLAT_BITS) + ((v >> e) & _PLAT_MASK)] += 1
            else:
                w[hist + OVERFLOW_INDEX] += 1
            lat += 3
            hist += N_BUCKETS

    def record_errors(self, category: int, count: int = 1) -> None:
        self.counters[category, ERRORS] += count

    # ------------------------------------------------------------------ reading
    def histogram(self, category: int, kind: int) -> LatencyHistogram:
        lat = self.lat[category, kind]
        empty = int(lat[MAX]) < 0
        return LatencyHistogram.from_counts(
            self.hist[category, kind],
            sum_ns=int(lat[SUM]),
            min_ns=None if empty else int(lat[MIN]),
            max_ns=None if empty else int(lat[MAX]),
        )

    def ops(self, category: int | None = None) -> int:
        if category is None:
            return int(self.counters[:, OPS].sum())
        return int(self.counters[category, OPS])

    def merge_into(self, other: WorkloadStats) -> None:
        self.counters += other.counters
        self.hist += other.hist
        self.lat[:, :, SUM] += other.lat[:, :, SUM]
        np.minimum(self.lat[:, :, MIN], other.lat[:, :, MIN], out=self.lat[:, :, MIN])
        np.maximum(self.lat[:, :, MAX], other.lat[:, :, MAX], out=self.lat[:, :, MAX])

    def copy(self) -> WorkloadStats:
        return WorkloadStats(self.buffer.copy())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkloadStats):
            return NotImplemented
        return bool(np.array_equal(self.buffer, other.buffer))

    __hash__ = None  # type: ignore[assignment]


def record_groups(
    targets: Sequence[WorkloadStats | None],
    categories: Sequence[int],
    starts: npt.NDArray[np.intp],
    service_ns: npt.NDArray[np.int64],
    response_ns: npt.NDArray[np.int64],
    nbytes: npt.NDArray[np.int64],
) -> None:
    """Record I/Os sorted into consecutive groups: group ``g`` is rows ``starts[g]`` up to the
    next start, all of them I/Os of ``targets[g]`` (None: not recorded) in ``categories[g]``.
    ``WorkloadStats.record`` per group, with the vectorised work (bucket indices, sums, minima,
    maxima) done once for all groups: per group there is then only a histogram update and a
    few scalars; and when every target is a view of one region (a worker's shared memory),
    a dozen ``ufunc.at`` calls on that region for all the groups. ``record`` costs ~40 us per
    call however few I/Os it gets: an engine loop binning 8,192 I/Os of 512 workloads spent
    41 ms in it; 5.6 ms with a histogram update per group; 3.6 ms in one region (1 ms of it
    here, warm)."""
    n = service_ns.size
    if n == 0:
        return
    if int(service_ns.min()) < 0 or int(response_ns.min()) < 0:
        raise ValueError("latencies must be >= 0 ns")
    b_svc = bucket_index(service_ns)
    b_rsp = bucket_index(response_ns)
    reduced = [
        f.reduceat(v, starts).tolist()
        for v in (service_ns, response_ns)
        for f in (np.add, np.minimum, np.maximum)
    ]
    nb = np.add.reduceat(nbytes, starts).tolist()
    root = common_root(targets)
    if root is not None:
        _record_groups_in(root, targets, categories, starts, b_svc, b_rsp, reduced, nb)
        return
    ends = [*starts[1:].tolist(), n]
    for g, (a, b) in enumerate(zip(starts.tolist(), ends, strict=True)):
        st = targets[g]
        if st is None:
            continue
        c = categories[g]
        st.counters[c, OPS] += b - a
        st.counters[c, BYTES] += nb[g]
        for kind, idx in ((0, b_svc), (1, b_rsp)):
            np.add.at(st.hist[c, kind], idx[a:b], 1)
            lat = st.lat[c, kind]
            lat[SUM] += reduced[3 * kind][g]
            lat[MIN] = min(int(lat[MIN]), reduced[3 * kind + 1][g])
            lat[MAX] = max(int(lat[MAX]), reduced[3 * kind + 2][g])


def _rooted(st: WorkloadStats) -> tuple[npt.NDArray[np.int64], int]:
    """The array ``st.buffer`` is a view of (the first one that owns its memory or wraps a
    foreign buffer) and where in it ``st.buffer`` starts, in elements; kept on ``st``."""
    r = st._root
    if r is None:
        root = st.buffer
        while isinstance(root.base, np.ndarray):
            root = root.base
        at = st.buffer.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        r = st._root = (root, at // 8)
    return r


def rooted_at(st: WorkloadStats) -> int:
    """Where ``st.buffer`` starts in the array it is a view of (``common_root``), in elements."""
    return _rooted(st)[1]


def common_root(targets: Sequence[WorkloadStats | None]) -> npt.NDArray[np.int64] | None:
    """The one writable, flat int64 array every target is a view of (a worker's shared stats
    region), or None. Compiled code that bins into several workloads' blocks takes it and each
    block's ``rooted_at``."""
    root = None
    for st in targets:
        if st is None:
            continue
        r = _rooted(st)[0]
        if root is None:
            root = r
        elif r is not root:
            return None
    if (root is None or root.dtype != np.int64 or root.ndim != 1
            or not root.flags.c_contiguous or not root.flags.writeable):
        return None
    return root


def _record_groups_in(
    root: npt.NDArray[np.int64],
    targets: Sequence[WorkloadStats | None],
    categories: Sequence[int],
    starts: npt.NDArray[np.intp],
    b_svc: npt.NDArray[np.intp],
    b_rsp: npt.NDArray[np.intp],
    reduced: list[list[int]],
    nb: list[int],
) -> None:
    """``record_groups`` when every target is a view of ``root``: a dozen ``ufunc.at`` calls
    on ``root`` for all the groups (they handle several groups of one target and category)."""
    n = b_svc.size
    keep = [g for g, st in enumerate(targets) if st is not None]
    if not keep:
        return
    sizes = np.diff(np.append(starts, n))
    at = np.array([_rooted(st)[1] if st is not None else 0 for st in targets], dtype=np.int64)
    cat = np.asarray(categories, dtype=np.int64)
    # the group's histogram rows (service; response follows) and latency triples
    hist0 = at + _N_COUNTERS + _N_LAT + cat * (N_KINDS * N_BUCKETS)
    lat0 = at + _N_COUNTERS + cat * (N_KINDS * 3)
    live = np.array([st is not None for st in targets])
    rows = np.repeat(live, sizes)
    h = np.repeat(hist0, sizes)[rows]
    np.add.at(root, h + b_svc[rows], 1)
    np.add.at(root, h + N_BUCKETS + b_rsp[rows], 1)
    k = np.array(keep, dtype=np.intp)
    counters = (at + cat * 3)[k]
    np.add.at(root, counters + OPS, sizes[k])
    np.add.at(root, counters + BYTES, np.asarray(nb, dtype=np.int64)[k])
    for kind in (0, 1):
        lat = lat0[k] + kind * 3
        np.add.at(root, lat + SUM, np.asarray(reduced[3 * kind], dtype=np.int64)[k])
        np.minimum.at(root, lat + MIN, np.asarray(reduced[3 * kind + 1], dtype=np.int64)[k])
        np.maximum.at(root, lat + MAX, np.asarray(reduced[3 * kind + 2], dtype=np.int64)[k])


#: The counters and latency triples of an empty block (WorkloadStats.reset)
_EMPTY_HEAD: Final = WorkloadStats().buffer[:_N_HEAD].copy()


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
        col = _N_HEAD + (seg_row % ROWS_PER_WORKLOAD)[seg] * N_BUCKETS + bucket
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
        counters = flat[:, :_N_COUNTERS].reshape(w, N_CATEGORIES, 3).copy()
        lat = flat[:, _N_COUNTERS : _N_COUNTERS + _N_LAT].reshape(w, N_CATEGORIES, N_KINDS, 3)
        hist = flat[:, _N_COUNTERS + _N_LAT :].reshape(w * ROWS_PER_WORKLOAD, N_BUCKETS)
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
        head = blocks[idx, :_N_HEAD]
        counters = np.ascontiguousarray(head[:, :_N_COUNTERS]).reshape(w, N_CATEGORIES, 3)
        lat = np.ascontiguousarray(head[:, _N_COUNTERS:]).reshape(w, N_CATEGORIES, N_KINDS, 3)
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
        blocks[idx, :_N_HEAD] = _EMPTY_HEAD
        if audit is not None and blocks[idx[audit], _N_HEAD:].any():
            left = blocks[idx[audit], _N_HEAD:].reshape(ROWS_PER_WORKLOAD, N_BUCKETS)
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
    from protocol.grouping import N_VIEWS, PERCENTILES  # grouping imports this module

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
        # bytearrays: the arrays are writable, as the compiled kernels are compiled for
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
        from protocol.grouping import view_min_max

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
