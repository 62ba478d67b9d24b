"""``LatencyHistogram``: the latency histogram every ivypy number comes from.

Owns recording (vectorised), merging, percentile and mean arithmetic, and the sparse wire form of
one histogram. It must stay pure: no I/O, no clocks, no threads; numpy only.

Semantics:

* Values are integer nanoseconds >= 0, binned on the one ladder of ``protocol.buckets``.
* ``count``, ``sum_ns`` (exact, a Python int), ``min_ns`` and ``max_ns`` are kept exactly beside
  the bucket counts, so min, max and mean are exact; only percentiles are estimates.
* Percentiles interpolate linearly inside the bucket that holds the rank, over the bucket's
  integer values ``[lower, upper - 1]`` narrowed to ``[min_ns, max_ns]``: the result is always
  inside ``[min_ns, max_ns]``, exact for a constant, and the overflow bucket (beyond ~73 min)
  interpolates up to the exact maximum.
* An empty histogram has ``None`` for every statistic, never 0.
* ``merge`` (``+``) returns a new histogram; ``+=`` merges in place. Histograms on another ladder
  are refused with ``LadderMismatchError`` (a ``ValueError``).

Wire form (all little-endian), see ``protocol/SPEC.md``::

    u16 ladder_id, u16 reserved (0), u32 nnz, u64 count, u64 sum_lo, u64 sum_hi,
    i64 min_ns, i64 max_ns, then nnz x u16 bucket index (strictly increasing),
    then nnz x u64 counts (each > 0)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.buckets import LADDER_ID, LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS, bucket_index
from protocol.errors import LadderMismatchError, RemoteProtocolError

#: Values are binned in chunks of this many so temporaries stay in cache.
RECORD_CHUNK: Final = 1 << 16

_HEADER = struct.Struct("<HHIQQQqq")
HEADER_BYTES: Final = _HEADER.size  # 48
_U64_MASK: Final = (1 << 64) - 1

# Integer values a bucket can hold: [lower, upper - 1]. The overflow bucket's top is the max.
_BUCKET_LO = LOWER_NS.astype(np.float64)
_BUCKET_HI = (UPPER_NS - 1).astype(np.float64)


class LatencyHistogram:
    """A latency histogram on the ivypy ladder; see the module docstring."""

    __slots__ = ("_counts", "_max_ns", "_min_ns", "_sum_ns", "ladder_id")

    def __init__(self, ladder_id: int = LADDER_ID) -> None:
        self.ladder_id = ladder_id
        self._counts: npt.NDArray[np.int64] = np.zeros(N_BUCKETS, dtype=np.int64)
        self._sum_ns = 0
        self._min_ns: int | None = None
        self._max_ns: int | None = None

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_values(cls, values_ns: npt.ArrayLike) -> LatencyHistogram:
        h = cls()
        h.record(values_ns)
        return h

    @classmethod
    def from_counts(
        cls,
        counts: npt.ArrayLike,
        *,
        sum_ns: int,
        min_ns: int | None,
        max_ns: int | None,
        ladder_id: int = LADDER_ID,
    ) -> LatencyHistogram:
        """Build from dense bucket counts and the exact side statistics."""
        c = np.asarray(counts, dtype=np.int64)
        if c.shape != (N_BUCKETS,):
            raise ValueError(f"expected {N_BUCKETS} bucket counts, got shape {c.shape}")
        if c.size and int(c.min()) < 0:
            raise ValueError("bucket counts must be >= 0")
        h = cls(ladder_id)
        h._counts = c.copy()
        total = int(c.sum())
        if total:
            if min_ns is None or max_ns is None or min_ns < 0 or max_ns < min_ns:
                raise ValueError("a non-empty histogram needs 0 <= min_ns <= max_ns")
            h._min_ns, h._max_ns, h._sum_ns = int(min_ns), int(max_ns), int(sum_ns)
        return h

    def copy(self) -> LatencyHistogram:
        h = LatencyHistogram(self.ladder_id)
        h._counts = self._counts.copy()
        h._sum_ns, h._min_ns, h._max_ns = self._sum_ns, self._min_ns, self._max_ns
        return h

    # ----------------------------------------------------------------- recording
    def record(self, values_ns: npt.ArrayLike) -> None:
        """Add latencies (integer nanoseconds >= 0), vectorised. Negative values are refused
        with ``ValueError`` and nothing of that call is recorded."""
        v = np.asarray(values_ns)
        if v.size == 0:
            return
        if v.dtype.kind not in "iu":
            if v.dtype.kind == "f" and np.all(np.isfinite(v)):
                v = v.astype(np.int64)
            else:
                raise ValueError(f"latencies must be integer nanoseconds, got dtype {v.dtype}")
        v = v.reshape(-1)
        lo = int(v.min())
        if lo < 0:
            raise ValueError(f"latencies must be >= 0 ns, got {lo}")
        hi = int(v.max())
        total = 0
        for start in range(0, v.size, RECORD_CHUNK):
            chunk = v[start : start + RECORD_CHUNK].astype(np.int64, copy=False)
            self._counts += np.bincount(bucket_index(chunk), minlength=N_BUCKETS)
            total += _exact_sum(chunk, hi)
        self._sum_ns += total
        self._min_ns = lo if self._min_ns is None else min(self._min_ns, lo)
        self._max_ns = hi if self._max_ns is None else max(self._max_ns, hi)

    # ----------------------------------------------------------------- statistics
    @property
    def counts(self) -> npt.NDArray[np.int64]:
        """Dense bucket counts (a read-only view)."""
        view = self._counts.view()
        view.setflags(write=False)
        return view

    @property
    def count(self) -> int:
        return int(self._counts.sum())

    @property
    def sum_ns(self) -> int:
        return self._sum_ns

    @property
    def min_ns(self) -> int | None:
        return self._min_ns

    @property
    def max_ns(self) -> int | None:
        return self._max_ns

    @property
    def mean_ns(self) -> float | None:
        n = self.count
        return self._sum_ns / n if n else None

    def percentile(self, p: float) -> float | None:
        """The p-th percentile (0 <= p <= 100) in ns, or None when empty."""
        out = self.percentiles([p])
        return None if out is None else float(out[0])

    def percentiles(self, ps: Sequence[float] | npt.ArrayLike) -> npt.NDArray[np.float64] | None:
        """Vectorised percentiles (each 0..100) in ns, or None when empty."""
        p = np.asarray(ps, dtype=np.float64).reshape(-1)
        if p.size and (np.isnan(p).any() or p.min() < 0 or p.max() > 100):
            raise ValueError(f"percentiles must be within [0, 100], got {ps!r}")
        if self._min_ns is None or self._max_ns is None:
            return None
        return percentiles_from_counts(self._counts, p, self._min_ns, self._max_ns)

    # ----------------------------------------------------------------- merging
    def _check_ladder(self, other: LatencyHistogram) -> None:
        if not isinstance(other, LatencyHistogram):
            raise TypeError(f"cannot merge {type(other).__name__} into a LatencyHistogram")
        if other.ladder_id != self.ladder_id:
            raise LadderMismatchError(
                f"cannot merge histograms on ladders {self.ladder_id} and {other.ladder_id}"
            )

    def merge_into(self, other: LatencyHistogram) -> None:
        """Add ``other`` into this histogram in place."""
        self._check_ladder(other)
        if other._min_ns is None or other._max_ns is None:
            return
        self._counts += other._counts
        self._sum_ns += other._sum_ns
        self._min_ns = other._min_ns if self._min_ns is None else min(self._min_ns, other._min_ns)
        self._max_ns = other._max_ns if self._max_ns is None else max(self._max_ns, other._max_ns)

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """A new histogram holding both."""
        out = self.copy()
        out.merge_into(other)
        return out

    def __add__(self, other: LatencyHistogram) -> LatencyHistogram:
        return self.merge(other)

    def __iadd__(self, other: LatencyHistogram) -> LatencyHistogram:
        self.merge_into(other)
        return self

    @classmethod
    def sum(cls, histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
        out = cls()
        for h in histograms:
            out.merge_into(h)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return (
            self.ladder_id == other.ladder_id
            and self._sum_ns == other._sum_ns
            and self._min_ns == other._min_ns
            and self._max_ns == other._max_ns
            and bool(np.array_equal(self._counts, other._counts))
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        if self._min_ns is None:
            return "LatencyHistogram(empty)"
        return (
            f"LatencyHistogram(count={self.count}, min_ns={self._min_ns}, "
            f"mean_ns={self.mean_ns:.1f}, max_ns={self._max_ns})"
        )

    # ----------------------------------------------------------------- wire form
    def to_bytes(self) -> bytes:
        """Sparse little-endian wire form (non-zero buckets only)."""
        nz = np.flatnonzero(self._counts)
        n = self.count
        header = _HEADER.pack(
            self.ladder_id,
            0,
            nz.size,
            n,
            self._sum_ns & _U64_MASK,
            self._sum_ns >> 64,
            self._min_ns if self._min_ns is not None else 0,
            self._max_ns if self._max_ns is not None else 0,
        )
        return b"".join(
            (header, nz.astype("<u2").tobytes(), self._counts[nz].astype("<u8").tobytes())
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> LatencyHistogram:
        """Decode the wire form; malformed input raises ``RemoteProtocolError`` and another
        ladder ``LadderMismatchError``."""
        return cls.sum_wire((data,))

    @classmethod
    def sum_wire(cls, blobs: Iterable[bytes | bytearray | memoryview]) -> LatencyHistogram:
        """Decode many wire histograms and merge them.

        Only the headers are read one by one; the bucket arrays are checked and added in a
        few vectorised passes over all of them at once, so 10,000 histograms cost tens of ms.
        """
        idx_parts: list[npt.NDArray[np.uint16]] = []
        cnt_parts: list[npt.NDArray[np.uint64]] = []
        heads: list[tuple[int, int, int, int, int]] = []
        frombuffer = np.frombuffer
        for blob in blobs:
            head = _parse_header(blob)
            nnz = head[0]
            if not nnz:
                continue
            idx_parts.append(frombuffer(blob, "<u2", nnz, HEADER_BYTES))
            cnt_parts.append(frombuffer(blob, "<u8", nnz, HEADER_BYTES + 2 * nnz))
            heads.append(head)
        h = cls()
        if not heads:
            return h
        nnzs, totals, sums, mins, maxs = zip(*heads, strict=True)
        idx = np.concatenate(idx_parts)
        cnt = np.concatenate(cnt_parts).view(np.int64)
        _check_sparse(idx, cnt, np.array(nnzs), totals, mins, maxs)
        if sum(totals) < 1 << 53:  # float64 weights are exact below 2**53
            h._counts += np.bincount(idx, weights=cnt, minlength=N_BUCKETS).astype(np.int64)
        else:
            np.add.at(h._counts, idx.astype(np.intp), cnt)
        h._sum_ns, h._min_ns, h._max_ns = sum(sums), min(mins), max(maxs)
        return h


def _exact_sum(v: npt.NDArray[np.int64], v_max: int) -> int:
    """Sum of non-negative int64 values without int64 overflow (split into 32-bit halves only
    when the plain sum could overflow)."""
    if v_max * v.size < 1 << 63:
        return int(v.sum())
    return (int((v >> 32).sum()) << 32) + int((v & 0xFFFFFFFF).sum())


def _parse_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int, int]:
    """Check one wire histogram's header and length; return nnz, count, sum, min, max."""
    size = len(data)
    if size < HEADER_BYTES:
        raise RemoteProtocolError(f"histogram of {size} bytes is shorter than its header")
    ladder, reserved, nnz, n, sum_lo, sum_hi, min_ns, max_ns = _HEADER.unpack_from(data)
    if ladder != LADDER_ID:
        raise LadderMismatchError(f"histogram on ladder {ladder}, expected ladder {LADDER_ID}")
    if reserved != 0:
        raise RemoteProtocolError(f"histogram reserved field is {reserved}, expected 0")
    if nnz > N_BUCKETS or size != HEADER_BYTES + 10 * nnz:
        raise RemoteProtocolError(
            f"histogram claims {nnz} non-zero buckets but has {size - HEADER_BYTES} payload bytes"
        )
    if n >= 1 << 63:
        raise RemoteProtocolError(f"histogram count {n} is beyond 2**63-1")
    if bool(n) != bool(nnz):
        raise RemoteProtocolError(f"histogram count {n} with {nnz} non-zero buckets")
    if n and not (0 <= min_ns <= max_ns):
        raise RemoteProtocolError(f"histogram min {min_ns} / max {max_ns} are inconsistent")
    return nnz, n, sum_lo | (sum_hi << 64), min_ns, max_ns


def _check_sparse(
    idx: npt.NDArray[np.uint16],
    cnt: npt.NDArray[np.int64],
    nnzs: npt.NDArray[np.int64],
    totals: Sequence[int],
    mins: Sequence[int],
    maxs: Sequence[int],
) -> None:
    """Vectorised checks of many concatenated sparse histograms (each with nnz > 0); ``cnt`` is
    the u64 counts viewed as int64, so one ``min`` finds both zeros and counts >= 2**63."""
    if int(cnt.min()) <= 0:
        raise RemoteProtocolError("histogram bucket counts must be in 1..2**63-1")
    starts = np.zeros(nnzs.size, dtype=np.int64)
    np.cumsum(nnzs[:-1], out=starts[1:])
    ends = starts + nnzs - 1
    step = np.diff(idx.astype(np.int32))
    step[starts[1:] - 1] = 1  # a new histogram may start anywhere
    if step.size and int(step.min()) <= 0:
        raise RemoteProtocolError("histogram bucket indices must increase")
    first, last = idx[starts].astype(np.intp), idx[ends].astype(np.intp)
    if int(last.max()) >= N_BUCKETS:
        raise RemoteProtocolError("histogram bucket index out of range")
    if not np.array_equal(np.add.reduceat(cnt, starts), np.array(totals, dtype=np.int64)):
        raise RemoteProtocolError("histogram count differs from its buckets' sum")
    lo, hi = np.array(mins, dtype=np.int64), np.array(maxs, dtype=np.int64)
    if not (
        bool(np.all((LOWER_NS[first] <= lo) & (lo < UPPER_NS[first])))
        and bool(np.all((LOWER_NS[last] <= hi) & (hi < UPPER_NS[last])))
    ):
        raise RemoteProtocolError("histogram min/max lie outside their first/last bucket")


#: percentiles are taken as exact decimals to this many parts per unit (99.9 = 99900000 / 1e6)
PCT_SCALE: Final = 10**6


def percentile_numerators(ps: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Percentiles (0..100) as exact integers ``p * PCT_SCALE`` (six decimal places)."""
    return np.rint(np.asarray(ps, dtype=np.float64) * PCT_SCALE).astype(np.int64)


def percentile_ranks(
    ps: npt.ArrayLike, total: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The rank ``p / 100 * total`` of each percentile among ``total`` samples: as a float (the
    continuous position, for interpolating inside a bucket) and as the whole number of samples
    the bucket holding it must reach (``ceil`` of the exact rank).

    Exact decimal arithmetic: ``99.9 / 100 * 12000`` in floating point is
    11988.000000000002, whose ceiling would send p99.9 of 12,000 samples to the bucket after
    the 11,988th sample. Here the percentile is an integer numerator over ``100 * PCT_SCALE``
    and ``total`` is split so that no product overflows int64 (valid up to 9e18 samples)."""
    num = percentile_numerators(ps)
    scale = 100 * PCT_SCALE
    q, r = divmod(int(total), scale)
    whole = q * num
    part = r * num  # < 1e16
    targets: npt.NDArray[np.int64] = whole + (part + scale - 1) // scale
    ranks: npt.NDArray[np.float64] = whole + part / scale
    return ranks, targets


def percentiles_from_counts(
    counts: npt.NDArray[np.int64],
    ps: npt.NDArray[np.float64],
    min_ns: int,
    max_ns: int,
) -> npt.NDArray[np.float64]:
    """Percentiles (0..100) of one non-empty dense histogram, interpolated inside buckets.

    The rank of percentile p is ``p / 100 * count`` (a continuous position among the samples,
    computed exactly: ``percentile_ranks``); the bucket holding it is the first whose
    cumulative count reaches it, and the value is interpolated linearly over the bucket's values
    narrowed to ``[min_ns, max_ns]``.
    """
    cum = np.cumsum(counts)
    total = int(cum[-1])
    rank, target = percentile_ranks(ps, total)
    b = np.searchsorted(cum, target, side="left")
    b = np.clip(b, 0, N_BUCKETS - 1)
    in_bucket = counts[b].astype(np.float64)
    before = (cum[b] - counts[b]).astype(np.float64)
    frac = np.where(in_bucket > 0, (rank - before) / np.maximum(in_bucket, 1), 0.0)
    frac = np.clip(frac, 0.0, 1.0)
    lo = np.maximum(_BUCKET_LO[b], float(min_ns))
    hi = np.where(b == OVERFLOW_INDEX, float(max_ns), np.minimum(_BUCKET_HI[b], float(max_ns)))
    out: npt.NDArray[np.float64] = np.clip(lo + frac * (hi - lo), float(min_ns), float(max_ns))
    return out
