"""Per-workload, per-subinterval statistics: the block a workload records into every subinterval.

Owns the layout of ``WorkloadStats`` (one flat int64 array, so it can live in shared memory and
be handed over between processes without copying objects) and the recording into it; the
sparse form a slave sends is ``protocol.batch``'s, the names of categories and views
``protocol.views``'. Pure numpy: no I/O, clocks or threads.

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

from collections.abc import Sequence
from typing import Final

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
from protocol.histogram import LatencyHistogram
from protocol.views import N_CATEGORIES, N_KINDS

OPS, BYTES, ERRORS = 0, 1, 2
SUM, MIN, MAX = 0, 1, 2
I64_MAX: Final = int(np.iinfo(np.int64).max)

COUNTER_CELLS: Final = N_CATEGORIES * 3
LAT_CELLS: Final = N_CATEGORIES * N_KINDS * 3
_N_HIST: Final = N_CATEGORIES * N_KINDS * N_BUCKETS
HEAD_CELLS: Final = COUNTER_CELLS + LAT_CELLS
# record_one's bucket arithmetic (buckets.bucket_index_scalar): values below 2 * PLAT_VAL have a
# bucket each; above, the group of bit length L starts at (L - PLAT_BITS) * PLAT_VAL
_ONE_PER_VALUE: Final = 2 * PLAT_VAL
_PLAT_SHIFT: Final = PLAT_BITS + 1
_PLAT_MASK: Final = PLAT_VAL - 1
#: Histogram rows per workload (category x kind): row = category * 2 + kind.
ROWS_PER_WORKLOAD: Final = N_CATEGORIES * N_KINDS


class WorkloadStats:
    """One workload's statistics for one subinterval, as views on one flat int64 array."""

    SIZE: Final = COUNTER_CELLS + LAT_CELLS + _N_HIST

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
        self.counters = b[:COUNTER_CELLS].reshape(N_CATEGORIES, 3)
        self.lat = b[COUNTER_CELLS : COUNTER_CELLS + LAT_CELLS].reshape(N_CATEGORIES, N_KINDS, 3)
        self.hist = b[COUNTER_CELLS + LAT_CELLS :].reshape(N_CATEGORIES, N_KINDS, N_BUCKETS)

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
        lat = COUNTER_CELLS + N_KINDS * 3 * category
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
        lat = COUNTER_CELLS + N_KINDS * 3 * category
        hist = COUNTER_CELLS + LAT_CELLS + N_KINDS * N_BUCKETS * category
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
    hist0 = at + COUNTER_CELLS + LAT_CELLS + cat * (N_KINDS * N_BUCKETS)
    lat0 = at + COUNTER_CELLS + cat * (N_KINDS * 3)
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
EMPTY_HEAD: Final = WorkloadStats().buffer[:HEAD_CELLS].copy()
