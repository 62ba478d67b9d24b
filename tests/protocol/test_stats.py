"""The per-workload statistics block and its batched sparse wire form."""

from __future__ import annotations

import numpy as np
import pytest

from protocol.errors import RemoteProtocolError
from protocol.histogram import LatencyHistogram
from protocol.stats import (
    BYTES,
    CATEGORIES,
    ERRORS,
    OPS,
    StatsBatch,
    WorkloadStats,
    category_index,
)


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
    from master import kernels

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
