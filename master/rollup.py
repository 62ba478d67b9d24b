"""Rollups: add workloads' statistics up by instance and turn them into metrics.

Owns the arithmetic from ``StatsBatch`` samples to per-instance metric columns (IOPS, MB/s,
average block size, service and response time mean / percentiles / max, errors) for the
overall, read, write, random and sequential views. Pure numpy on whole arrays: one reduction
per rollup type, never a Python loop per workload. No I/O, no clocks.

A ``Sample`` is counters, latency side statistics and histogram coordinates for W workloads;
samples concatenate (hosts of one subinterval) and add up (subintervals of a window) without
loss, because histograms are added, never percentiles averaged. A ``Grouping`` maps each
workload to an instance of one rollup type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.buckets import LOWER_NS, N_BUCKETS, OVERFLOW_INDEX, UPPER_NS
from protocol.stats import BYTES, ERRORS, I64_MAX, MAX, MIN, OPS, ROWS_PER_WORKLOAD, SUM, StatsBatch

#: Views: column prefix → categories (0 random_read, 1 random_write, 2 seq_read, 3 seq_write).
VIEWS: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("", (0, 1, 2, 3)),
    ("read_", (0, 2)),
    ("write_", (1, 3)),
    ("random_", (0, 1)),
    ("sequential_", (2, 3)),
)
N_VIEWS: Final = len(VIEWS)
PERCENTILES: Final[tuple[float, ...]] = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
KIND_NAMES: Final = ("service_time", "response_time")
#: Each category lands in three views: overall, read or write, random or sequential.
_VIEWS_OF_CATEGORY: Final = np.array([[0, 1, 3], [0, 2, 3], [0, 1, 4], [0, 2, 4]], dtype=np.intp)
_MEMBERSHIP: Final = np.zeros((N_VIEWS, 4), dtype=np.int64)
for _v, (_, _cats) in enumerate(VIEWS):
    _MEMBERSHIP[_v, list(_cats)] = 1
#: Dense histogram cells built at once; larger rollups are processed in chunks of instances.
DENSE_CELLS: Final = 1 << 22
_LO: Final = LOWER_NS.astype(np.float64)
_HI: Final = (UPPER_NS - 1).astype(np.float64)


def pct_label(p: float) -> str:
    """Column label of a percentile: 99 → ``p99``, 99.9 → ``p99_9`` (as in
    ``master.config.catalog``)."""
    return "p" + f"{p:g}".replace(".", "_")


def metric_columns() -> list[str]:
    """Every metric column, in output order."""
    cols: list[str] = []
    for prefix, _ in VIEWS:
        cols += [f"{prefix}IOPS", f"{prefix}MB_per_s", f"{prefix}avg_blocksize_KiB"]
        for kind in KIND_NAMES:
            cols.append(f"{prefix}{kind}_mean_ms")
            cols.append(f"{prefix}{kind}_min_ms")
            cols += [f"{prefix}{kind}_{pct_label(p)}_ms" for p in PERCENTILES]
            cols.append(f"{prefix}{kind}_max_ms")
        cols.append(f"{prefix}errors")
    return cols


METRIC_COLUMNS: Final = tuple(metric_columns())


@dataclass(frozen=True, eq=False)
class Sample:
    """Statistics of W workloads over some period (see ``StatsBatch`` for the layout).
    Histogram coordinates need not be unique or sorted."""

    counters: npt.NDArray[np.int64]  # (W, 4, 3)
    lat: npt.NDArray[np.int64]  # (W, 4, 2, 3)
    rows: npt.NDArray[np.int64]
    buckets: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]

    @property
    def n_workloads(self) -> int:
        return int(self.counters.shape[0])

    @classmethod
    def from_batch(cls, batch: StatsBatch) -> Sample:
        return cls(
            counters=np.asarray(batch.counters, dtype=np.int64),
            lat=np.asarray(batch.lat, dtype=np.int64),
            rows=batch.rows.astype(np.int64),
            buckets=batch.buckets.astype(np.int64),
            counts=np.asarray(batch.counts, dtype=np.int64),
        )

    @classmethod
    def concat(cls, parts: Sequence[Sample]) -> Sample:
        """Workloads of several samples side by side (e.g. all hosts of a subinterval)."""
        offsets = np.cumsum([0] + [p.n_workloads for p in parts])
        return cls(
            counters=np.concatenate([p.counters for p in parts]),
            lat=np.concatenate([p.lat for p in parts]),
            rows=np.concatenate(
                [p.rows + int(o) * ROWS_PER_WORKLOAD for p, o in zip(parts, offsets, strict=False)]
            ),
            buckets=np.concatenate([p.buckets for p in parts]),
            counts=np.concatenate([p.counts for p in parts]),
        )

    @classmethod
    def add(cls, parts: Sequence[Sample]) -> Sample:
        """The same W workloads over consecutive periods added up (a measurement window)."""
        if not parts:
            raise ValueError("nothing to add")
        w = parts[0].n_workloads
        if any(p.n_workloads != w for p in parts):
            raise ValueError("samples to add must have the same workloads")
        lat = parts[0].lat.copy()
        for p in parts[1:]:
            lat[..., SUM] += p.lat[..., SUM]
            np.minimum(lat[..., MIN], p.lat[..., MIN], out=lat[..., MIN])
            np.maximum(lat[..., MAX], p.lat[..., MAX], out=lat[..., MAX])
        return cls(
            counters=np.sum([p.counters for p in parts], axis=0),
            lat=lat,
            rows=np.concatenate([p.rows for p in parts]),
            buckets=np.concatenate([p.buckets for p in parts]),
            counts=np.concatenate([p.counts for p in parts]),
        )


@dataclass(frozen=True, eq=False)
class Grouping:
    """Instances of one rollup type: ``of_workload[w]`` is workload w's instance index."""

    rollup_type: str
    names: tuple[str, ...]
    of_workload: npt.NDArray[np.intp]

    @classmethod
    def from_keys(cls, rollup_type: str, keys: Sequence[str]) -> Grouping:
        """Instances named by each workload's key, in order of first appearance."""
        names: dict[str, int] = {}
        of = np.fromiter(
            (names.setdefault(k, len(names)) for k in keys), dtype=np.intp, count=len(keys)
        )
        return cls(rollup_type, tuple(names), of)

    @property
    def n(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class RollupResult:
    """Metric columns (each a float array over instances; NaN where undefined) and the
    per-instance, per-view, per-kind histograms' exact side statistics."""

    grouping: Grouping
    duration_s: float
    columns: dict[str, npt.NDArray[np.float64]]
    ops: npt.NDArray[np.int64]  # (G, N_VIEWS)

    def row(self, i: int) -> dict[str, float]:
        return {k: float(v[i]) for k, v in self.columns.items()}


def _percentiles_dense(
    counts: npt.NDArray[np.float64],
    ps: Sequence[float],
    mins: npt.NDArray[np.float64],
    maxs: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Percentiles of many dense histograms at once: (R, N_BUCKETS) → (R, len(ps)).
    Same rule as ``protocol.histogram.percentiles_from_counts``; NaN for empty rows."""
    cum = np.cumsum(counts, axis=1)
    total = cum[:, -1]
    out = np.full((counts.shape[0], len(ps)), np.nan)
    live = total > 0
    if not live.any():
        return out
    cum_l, cnt_l, tot_l = cum[live], counts[live], total[live]
    lo_clamp, hi_clamp = mins[live], maxs[live]
    rows = np.arange(cum_l.shape[0])
    for j, p in enumerate(ps):
        rank = p / 100.0 * tot_l
        b = np.minimum((cum_l < rank[:, None]).sum(axis=1), N_BUCKETS - 1)
        in_b = cnt_l[rows, b]
        before = cum_l[rows, b] - in_b
        frac = np.clip(np.where(in_b > 0, (rank - before) / np.maximum(in_b, 1), 0.0), 0, 1)
        lo = np.maximum(_LO[b], lo_clamp)
        hi = np.where(b == OVERFLOW_INDEX, hi_clamp, np.minimum(_HI[b], hi_clamp))
        out[live, j] = np.clip(lo + frac * (hi - lo), lo_clamp, hi_clamp)
    return out


def compute(sample: Sample, grouping: Grouping, duration_s: float) -> RollupResult:
    """Metrics of every instance of ``grouping`` over a period of ``duration_s`` seconds."""
    if grouping.of_workload.shape != (sample.n_workloads,):
        raise ValueError(
            f"grouping {grouping.rollup_type} covers {grouping.of_workload.size} workloads, "
            f"sample has {sample.n_workloads}"
        )
    g_count = grouping.n
    g = grouping.of_workload
    # counters and latency side statistics per instance and category
    cnt = np.zeros((g_count, 4, 3), dtype=np.int64)
    np.add.at(cnt, g, sample.counters)
    lsum = np.zeros((g_count, 4, 2), dtype=np.int64)
    np.add.at(lsum, g, sample.lat[..., SUM])
    lmin = np.full((g_count, 4, 2), I64_MAX, dtype=np.int64)
    np.minimum.at(lmin, g, sample.lat[..., MIN])
    lmax = np.full((g_count, 4, 2), -1, dtype=np.int64)
    np.maximum.at(lmax, g, sample.lat[..., MAX])
    # per view
    ops_v = cnt[:, :, OPS] @ _MEMBERSHIP.T  # (G, V)
    bytes_v = cnt[:, :, BYTES] @ _MEMBERSHIP.T
    err_v = cnt[:, :, ERRORS] @ _MEMBERSHIP.T
    sum_v = np.einsum("gck,vc->gvk", lsum, _MEMBERSHIP)  # (G, V, 2)
    big = np.where(_MEMBERSHIP[None, :, :, None] > 0, lmin[:, None, :, :], I64_MAX)
    min_v = big.min(axis=2).astype(np.float64)  # (G, V, 2)
    small = np.where(_MEMBERSHIP[None, :, :, None] > 0, lmax[:, None, :, :], -1)
    max_v = small.max(axis=2).astype(np.float64)
    pct = _view_percentiles(sample, g, g_count, min_v, max_v)  # (G, V, 2, P)

    cols: dict[str, npt.NDArray[np.float64]] = {}
    dur = float(duration_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        for v, (prefix, _) in enumerate(VIEWS):
            ops = ops_v[:, v].astype(np.float64)
            has = ops > 0
            cols[f"{prefix}IOPS"] = ops / dur
            cols[f"{prefix}MB_per_s"] = bytes_v[:, v] / dur / 1e6
            cols[f"{prefix}avg_blocksize_KiB"] = np.where(has, bytes_v[:, v] / ops / 1024, np.nan)
            for k, kind in enumerate(KIND_NAMES):
                cols[f"{prefix}{kind}_mean_ms"] = np.where(has, sum_v[:, v, k] / ops / 1e6, np.nan)
                cols[f"{prefix}{kind}_min_ms"] = np.where(has, min_v[:, v, k] / 1e6, np.nan)
                for j, p in enumerate(PERCENTILES):
                    cols[f"{prefix}{kind}_{pct_label(p)}_ms"] = pct[:, v, k, j] / 1e6
                cols[f"{prefix}{kind}_max_ms"] = np.where(has, max_v[:, v, k] / 1e6, np.nan)
            cols[f"{prefix}errors"] = err_v[:, v].astype(np.float64)
    return RollupResult(grouping=grouping, duration_s=dur, columns=cols, ops=ops_v)


def _view_percentiles(
    sample: Sample,
    g: npt.NDArray[np.intp],
    g_count: int,
    min_v: npt.NDArray[np.float64],
    max_v: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    out = np.full((g_count, N_VIEWS, 2, len(PERCENTILES)), np.nan)
    if sample.rows.size == 0 or g_count == 0:
        return out
    w = sample.rows // ROWS_PER_WORKLOAD
    r = sample.rows % ROWS_PER_WORKLOAD
    cat, kind = r // 2, r % 2
    inst = g[w]
    cells_per_inst = N_VIEWS * 2 * N_BUCKETS
    chunk = max(1, DENSE_CELLS // cells_per_inst)
    if g_count > chunk:
        order = np.argsort(inst, kind="stable")
        inst, cat, kind = inst[order], cat[order], kind[order]
        buckets, counts = sample.buckets[order], sample.counts[order]
        bounds = np.searchsorted(inst, np.arange(0, g_count + chunk, chunk))
    else:
        buckets, counts = sample.buckets, sample.counts
        bounds = np.array([0, inst.size])
    for c, start in enumerate(range(0, g_count, chunk)):
        a, b = int(bounds[c]), int(bounds[min(c + 1, bounds.size - 1)])
        if a == b:
            continue
        n_inst = min(chunk, g_count - start)
        views = _VIEWS_OF_CATEGORY[cat[a:b]]  # (n, 3)
        base = ((inst[a:b] - start)[:, None] * N_VIEWS + views) * 2 + kind[a:b, None]
        key = (base * N_BUCKETS + buckets[a:b, None]).ravel()
        weights = np.repeat(counts[a:b], 3).astype(np.float64)
        dense = np.asarray(
            np.bincount(key, weights=weights, minlength=n_inst * cells_per_inst),
            dtype=np.float64,
        ).reshape(n_inst * N_VIEWS * 2, N_BUCKETS)
        sl = slice(start, start + n_inst)
        res = _percentiles_dense(dense, PERCENTILES, min_v[sl].reshape(-1), max_v[sl].reshape(-1))
        out[sl] = res.reshape(n_inst, N_VIEWS, 2, len(PERCENTILES))
    return out


def dense_histograms(sample: Sample, grouping: Grouping) -> npt.NDArray[np.float64]:
    """Bucket counts per instance for the overall, read and write views and both kinds:
    shape (G, 3, 2, N_BUCKETS). For histogram files; large rollups should be written in
    slices of instances."""
    out = np.zeros((grouping.n, 3, 2, N_BUCKETS))
    if sample.rows.size == 0 or grouping.n == 0:
        return out
    w = sample.rows // ROWS_PER_WORKLOAD
    r = sample.rows % ROWS_PER_WORKLOAD
    cat, kind = r // 2, r % 2
    inst = grouping.of_workload[w]
    views = np.stack([np.zeros_like(cat), np.where(cat % 2 == 0, 1, 2)], axis=1)  # all, rd/wr
    key = ((inst[:, None] * 3 + views) * 2 + kind[:, None]) * N_BUCKETS + sample.buckets[:, None]
    flat = np.asarray(
        np.bincount(key.ravel(), weights=np.repeat(sample.counts, 2).astype(np.float64),
                    minlength=out.size),
        dtype=np.float64,
    )
    return flat.reshape(out.shape)
