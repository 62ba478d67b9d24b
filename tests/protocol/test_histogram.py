"""LatencyHistogram: accuracy over named distributions, exact side statistics, merging, wire."""

from __future__ import annotations

import numpy as np
import pytest

from protocol.buckets import LADDER_ID, OVERFLOW_INDEX, OVERFLOW_LOWER_NS
from protocol.errors import LadderMismatchError, RemoteProtocolError
from protocol.histogram import HEADER_BYTES, LatencyHistogram, percentile_ranks
from tests.protocol.datasets import DATASETS, N, sample

PCTS = [1.0, 50.0, 90.0, 99.0, 99.9, 99.99]


@pytest.fixture(scope="module", params=sorted(DATASETS))
def dataset(request: pytest.FixtureRequest) -> tuple[str, np.ndarray, LatencyHistogram]:
    values = sample(request.param)
    return request.param, values, LatencyHistogram.from_values(values)


def test_percentiles_within_one_percent(dataset: tuple[str, np.ndarray, LatencyHistogram]) -> None:
    name, values, h = dataset
    exact = np.percentile(values, PCTS)
    got = h.percentiles(PCTS)
    assert got is not None
    for p, e, g in zip(PCTS, exact, got, strict=True):
        beyond = N * (100 - p) / 100
        if beyond < 100:
            continue
        assert g == pytest.approx(e, rel=0.01, abs=1.0), f"{name} p{p}: {g} vs exact {e}"
        assert h.percentile(p) == pytest.approx(g)


def test_min_max_mean_count_exact(dataset: tuple[str, np.ndarray, LatencyHistogram]) -> None:
    _, values, h = dataset
    assert h.count == values.size
    assert h.min_ns == int(values.min())
    assert h.max_ns == int(values.max())
    assert h.sum_ns == int(values.sum(dtype=np.int64))
    assert h.mean_ns == int(values.sum(dtype=np.int64)) / values.size


def test_merge_of_random_split_equals_whole(
    dataset: tuple[str, np.ndarray, LatencyHistogram],
) -> None:
    _, values, whole = dataset
    rng = np.random.default_rng(7)
    part = rng.integers(0, 5, values.size)
    pieces = [LatencyHistogram.from_values(values[part == k]) for k in range(5)]
    merged = pieces[0] + pieces[1]
    for piece in pieces[2:]:
        merged += piece
    assert merged == whole
    assert np.array_equal(merged.counts, whole.counts)
    assert LatencyHistogram.sum(pieces) == whole
    assert LatencyHistogram.sum_wire(p.to_bytes() for p in pieces) == whole


def test_pareto_tail_reaches_minutes() -> None:
    values = sample("pareto_minutes")
    assert values.max() > 60 * 10**9


def test_percentiles_are_monotonic_and_clamped(
    dataset: tuple[str, np.ndarray, LatencyHistogram],
) -> None:
    _, _values, h = dataset
    ps = np.linspace(0, 100, 1001)
    got = h.percentiles(ps)
    assert got is not None
    assert np.all(np.diff(got) >= 0)
    assert got[0] == h.min_ns and got[-1] == h.max_ns


def test_empty_histogram_yields_none() -> None:
    h = LatencyHistogram()
    assert h.count == 0
    assert h.min_ns is None and h.max_ns is None and h.mean_ns is None
    assert h.percentile(50) is None and h.percentiles([50, 99]) is None
    h.record(np.array([], dtype=np.int64))
    assert h.count == 0
    assert LatencyHistogram.from_bytes(h.to_bytes()) == h


@pytest.mark.parametrize(
    "bad",
    [np.array([5, -1, 7]), [-1], np.array([1.0, np.nan]), np.array(["a"])],
)
def test_bad_values_are_refused_and_nothing_recorded(bad: object) -> None:
    h = LatencyHistogram.from_values([10, 20])
    before = h.copy()
    with pytest.raises(ValueError):
        h.record(bad)  # type: ignore[arg-type]
    assert h == before


@pytest.mark.parametrize("p", [-0.1, 100.1, float("nan")])
def test_percentile_out_of_range(p: float) -> None:
    with pytest.raises(ValueError):
        LatencyHistogram.from_values([1]).percentile(p)


def test_other_ladder_is_refused() -> None:
    a = LatencyHistogram.from_values([1, 2, 3])
    b = LatencyHistogram(ladder_id=LADDER_ID + 1)
    with pytest.raises(LadderMismatchError):
        a.merge(b)
    with pytest.raises(ValueError):
        a += b
    blob = bytearray(a.to_bytes())
    blob[0] = LADDER_ID + 1
    with pytest.raises(LadderMismatchError):
        LatencyHistogram.from_bytes(bytes(blob))


@pytest.mark.parametrize(
    "values",
    [[0], [127, 128, 129], [5] * 10, [OVERFLOW_LOWER_NS * 3, 1], list(range(0, 10**6, 997))],
)
def test_wire_round_trip(values: list[int]) -> None:
    h = LatencyHistogram.from_values(values)
    blob = h.to_bytes()
    nnz = int(np.count_nonzero(h.counts))
    assert len(blob) == HEADER_BYTES + 10 * nnz
    assert LatencyHistogram.from_bytes(blob) == h
    assert LatencyHistogram.from_bytes(memoryview(blob)) == h


def test_huge_sum_survives_the_wire() -> None:
    big = OVERFLOW_LOWER_NS * 1000
    h = LatencyHistogram.from_values(np.full(10_000_000, big // 1000 * 1000, dtype=np.int64))
    h += h.copy()
    assert h.sum_ns > 2**64
    assert LatencyHistogram.from_bytes(h.to_bytes()).sum_ns == h.sum_ns


def _mutations(blob: bytes) -> list[bytes]:
    out = [blob[:10], blob[:-1], blob + b"\0", b"", b"\xff" * len(blob)]
    nnz = (len(blob) - HEADER_BYTES) // 10
    idx_at = HEADER_BYTES
    swapped = bytearray(blob)
    swapped[idx_at : idx_at + 4] = blob[idx_at + 2 : idx_at + 4] + blob[idx_at : idx_at + 2]
    out.append(bytes(swapped))
    zero_count = bytearray(blob)
    cnt_at = HEADER_BYTES + 2 * nnz
    zero_count[cnt_at : cnt_at + 8] = b"\0" * 8
    out.append(bytes(zero_count))
    wrong_total = bytearray(blob)
    wrong_total[8] ^= 1
    out.append(bytes(wrong_total))
    reserved = bytearray(blob)
    reserved[2] = 1
    out.append(bytes(reserved))
    huge = bytearray(blob)
    huge[8:16] = (1 << 63).to_bytes(8, "little")
    out.append(bytes(huge))
    huge_count = bytearray(blob)
    huge_count[cnt_at : cnt_at + 8] = (1 << 63).to_bytes(8, "little")
    out.append(bytes(huge_count))
    bad_min = bytearray(blob)
    bad_min[32:40] = (10**12).to_bytes(8, "little")
    out.append(bytes(bad_min))
    return out


def test_malformed_wire_is_a_protocol_error() -> None:
    blob = LatencyHistogram.from_values([100, 200, 300, 5000, 5001]).to_bytes()
    for bad in _mutations(blob):
        with pytest.raises((RemoteProtocolError, LadderMismatchError)):
            LatencyHistogram.from_bytes(bad)


def test_overflow_bucket_interpolates_to_exact_max() -> None:
    two_hours = 2 * 3600 * 10**9
    h = LatencyHistogram.from_values([1000] * 99 + [two_hours])
    assert int(np.flatnonzero(h.counts)[-1]) == OVERFLOW_INDEX
    assert h.max_ns == two_hours
    assert h.percentile(100) == two_hours
    p = h.percentile(99.5)
    assert p is not None and OVERFLOW_LOWER_NS <= p <= two_hours


def test_float_input_of_whole_numbers_is_accepted() -> None:
    h = LatencyHistogram.from_values(np.array([1000.0, 2000.0]))
    assert h.count == 2 and h.sum_ns == 3000


# (percentile, samples): p / 100 * n is a whole number that floating point puts just above it
# (99.9 / 100 * 12000 = 11988.000000000002) or just below it, or hits exactly
EXACT_RANKS = [(99.9, 12000), (99.9, 3000), (99.9, 5000), (99.9, 1000), (99.99, 10000),
               (99.99, 20000), (99.0, 100), (90.0, 10), (50.0, 2), (95.0, 20)]


@pytest.mark.parametrize("p, n", EXACT_RANKS)
def test_a_whole_rank_stays_in_the_bucket_that_reaches_it(p: float, n: int) -> None:
    # the first p % of the samples are 100 ns, the rest 1 ms: the p-th percentile is 100 ns
    low = round(p * n / 100)
    h = LatencyHistogram.from_values(np.r_[np.full(low, 100), np.full(n - low, 1_000_000)])
    assert h.percentile(p) == 100.0
    further = h.percentile(min(100.0, p + 100 / n))  # one sample further: the far value
    assert further is not None and further > 900_000


def test_percentile_ranks_are_exact_decimals() -> None:
    ranks, targets = percentile_ranks([0, 50, 99.9, 99.99, 100], 12000)
    assert targets.tolist() == [0, 6000, 11988, 11999, 12000]
    assert ranks.tolist() == [0.0, 6000.0, 11988.0, 11998.8, 12000.0]
    _, big = percentile_ranks([99.9, 99.99], 10**17 + 1)  # no int64 overflow
    assert big.tolist() == [99_900_000_000_000_001, 99_990_000_000_000_001]
