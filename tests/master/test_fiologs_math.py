"""master.fiologs.pctiles / align: the vectorised percentile is protocol.histogram's rule, and
row windows spread over quanta in proportion to overlap."""

from __future__ import annotations

import numpy as np
import pytest

from master.fiologs import align
from master.fiologs.align import (
    QuantumAccumulator,
    RowWindows,
    detect_interval_ms,
    spread_rows,
)
from master.fiologs.columns import make_layout
from master.fiologs.parse import HistBlock
from master.fiologs.pctiles import (
    format_value,
    percentile_label,
    percentile_matrix,
)
from protocol.buckets import FIO_BUCKETS, N_BUCKETS
from protocol.histogram import percentiles_from_counts

PS = [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0]


@pytest.mark.parametrize("seed", range(8))
def test_percentile_matrix_is_the_protocol_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    layout = make_layout(3, 0)
    counts = np.zeros((5, FIO_BUCKETS), dtype=np.int64)
    for row in counts:
        lo = int(rng.integers(0, FIO_BUCKETS - 60))
        hot = rng.integers(lo, min(lo + int(rng.integers(1, 400)), FIO_BUCKETS), size=30)
        np.add.at(row, hot, rng.integers(1, 1000, size=30))
    counts[3, -1] += 5  # something in fio's open last bucket
    stats = percentile_matrix(counts.astype(np.float64), PS, layout.lower_ns, layout.upper_ns)
    for r, row in enumerate(counts):
        nz = np.flatnonzero(row)
        lo_ns = int(layout.lower_ns[nz[0]])
        hi_ns = int(layout.upper_ns[nz[-1]])
        padded = np.zeros(N_BUCKETS, dtype=np.int64)
        padded[:FIO_BUCKETS] = row
        want = percentiles_from_counts(padded, np.array(PS), lo_ns, hi_ns)
        assert np.allclose(stats.pct_ns[r], want, rtol=0, atol=1e-6)
        assert stats.min_ns[r] == lo_ns and stats.max_ns[r] == hi_ns
        assert stats.samples[r] == row.sum()


def test_empty_rows_are_nan_and_constant_is_exact() -> None:
    layout = make_layout(3, 0)
    counts = np.zeros((2, FIO_BUCKETS))
    counts[1, 100] = 7.0  # bucket 100 holds exactly the value 100 ns
    stats = percentile_matrix(counts, [50.0, 99.0], layout.lower_ns, layout.upper_ns)
    assert np.isnan(stats.pct_ns[0]).all() and np.isnan(stats.min_ns[0])
    assert stats.samples[0] == 0
    assert list(stats.pct_ns[1]) == [100.0, 100.0]


def test_coarse_and_fio2_columns_cover_the_right_ns() -> None:
    c2 = make_layout(3, 2)
    assert c2.n_columns == 464
    # column 40 holds fine buckets 160..163: group m=7 ([128, 256), width 2) -> [192, 199]
    assert (c2.lower_ns[40], c2.upper_ns[40]) == (192.0, 199.0)
    f2 = make_layout(2, 0)
    # fio 2 bucket 600 in us: group m=14 ([16384, 32768) us, width 256): index 600 = 9*64 + 24
    assert (f2.lower_ns[600], f2.upper_ns[600]) == (
        (16384 + 24 * 256) * 1000.0,
        (16384 + 25 * 256) * 1000.0 - 1,
    )
    assert f2.upper_ns[-1] == f2.lower_ns[-1]  # open last bucket reports its lower edge


def test_labels_and_units() -> None:
    assert [percentile_label(p) for p in (50, 99.9, 99.99, 0.5)] == [
        "p50", "p99.9", "p99.99", "p0.5"]
    assert format_value(1_234_567.0, "us") == "1234.567"
    assert format_value(1_234_567.0, "ms") == "1.234567"
    assert format_value(1500.0, "ns") == "1500"
    assert format_value(float("nan"), "us") == ""


def _block(times: list[int], dirs: list[int], cells: list[list[int]]) -> HistBlock:
    counts = np.array(cells, dtype=np.int64)
    return HistBlock.from_dense(
        np.array(times, dtype=np.int64),
        np.array(dirs, dtype=np.int64),
        np.arange(1, len(times) + 1, dtype=np.int64),
        counts,
    )


def test_windows_relative_epoch_and_directions() -> None:
    block = _block([1000, 1000, 2000, 2100, 3000], [0, 1, 0, 1, 0], [[1]] * 5)
    start, end = RowWindows(absolute=False, interval_ms=1000).windows(block)
    assert list(start) == [0, 0, 1000, 1000, 2000]
    assert list(end) == [1000, 1000, 2000, 2100, 3000]
    epoch = _block([1_700_000_000_250, 1_700_000_001_250], [1, 1], [[1]] * 2)
    win = RowWindows(absolute=True, interval_ms=1000)
    start, _ = win.windows(epoch)
    assert list(start) == [1_699_999_999_250, 1_700_000_000_250]
    start, _ = win.windows(_block([1_700_000_002_250], [1], [[1]]))  # state carries over
    assert list(start) == [1_700_000_001_250]


@pytest.mark.parametrize(
    ("start", "end", "q_ms", "want"),
    [
        (0, 1000, 1000, {0: 1.0}),
        (500, 1500, 1000, {0: 0.5, 1: 0.5}),
        (250, 1250, 1000, {0: 0.75, 1: 0.25}),
        (0, 1000, 250, {0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25}),
        (2000, 5000, 1000, {2: 1 / 3, 3: 1 / 3, 4: 1 / 3}),
        (3000, 3000, 1000, {2: 1.0}),  # zero length: the quantum that ends at its stamp
        (3000, 3001, 1000, {3: 1.0}),
    ],
)
def test_spread_weights(start: float, end: float, q_ms: float, want: dict[int, float]) -> None:
    s = spread_rows(np.array([float(start)]), np.array([float(end)]), q_ms)
    got = dict(zip(s.pair_quantum.tolist(), s.pair_weight.tolist(), strict=True))
    assert got.keys() == want.keys()
    for q, w in want.items():
        assert got[q] == pytest.approx(w)


def test_accumulator_grows_both_ways_and_sums() -> None:
    acc = QuantumAccumulator(2, 3)
    b1 = _block([2000, 3000], [0, 1], [[4, 0, 0], [0, 6, 0]])
    s1 = spread_rows(np.array([1000.0, 2000.0]), np.array([2000.0, 3000.0]), 1000.0)
    acc.add(b1, b1.dirs, s1)
    b0 = _block([100_000], [0], [[0, 0, 2]])
    acc.add(b0, b0.dirs, spread_rows(np.array([-500.0]), np.array([500.0]), 1000.0))
    b2 = _block([500_000], [1], [[0, 0, 0]])  # no I/O: still widens the covered range
    acc.add(b2, b2.dirs, spread_rows(np.array([499_000.0]), np.array([500_000.0]), 1000.0))
    assert acc.first_quantum == -1 and acc.last_quantum == 499
    assert acc.quanta().size == 501
    assert list(acc.counts(0, -1, 3)[:, 2]) == [1.0, 1.0, 0.0, 0.0]
    assert list(acc.counts(0, -1, 3)[:, 0]) == [0.0, 0.0, 4.0, 0.0]
    assert list(acc.counts(1, 1, 3)[:, 1]) == [0.0, 6.0]
    assert acc.counts(1, 499, 500).sum() == 0


def test_detect_interval() -> None:
    t = np.array([501, 501, 1001, 1002, 1501, 1501], dtype=np.int64)
    d = np.array([0, 1, 1, 0, 0, 1], dtype=np.int64)
    assert detect_interval_ms(t, d) == 500.0
    assert detect_interval_ms(t[:2], d[:2]) is None


def _stamps(steps: list[int], first: int = 51) -> list[int]:
    return list(np.cumsum([first, *steps]))


# fio 3.33's reads of a 2 s psync job at log_hist_msec=50 beside two CPU burners
_LOADED = [54, 46, 50, 50, 52, 48, 52, 48, 50, 50, 50, 50, 50, 50, 50, 50, 52, 48, 50, 50]


@pytest.mark.parametrize(("reads", "writes", "want"), [
    pytest.param(_stamps(_LOADED), [], 50.0, id="jitter-from-fio-under-load"),
    # the rows a stall owes come at the next completions: one long step, then steps of ~0
    pytest.param(_stamps([50] * 10 + [250, 1, 0, 1, 0, 48] + [50] * 10), [], 50.0,
                 id="stall-caught-up"),
    # a stall just before the job's end: the rows it owed never came (mean step: 54.2)
    pytest.param(_stamps([50] * 35 + [200]), [], 50.0, id="stall-at-the-end"),
    # early jitter over few rows (mean step 52)
    pytest.param(_stamps([52, 48, 56, 44, 52, 48, 56]), [], 50.0, id="few-jittered-rows"),
    # a writer that has nothing to say most windows beside a busy reader
    pytest.param(_stamps([50] * 20), [900, 1430, 2010], 50.0, id="sparse-direction"),
    pytest.param([], _stamps([50] * 5), 50.0, id="writes-only"),
    # a log that does not take the delay off the next window drifts: its rows' own cadence
    pytest.param(_stamps([52] * 20), [], 52.0, id="drifting-cadence"),
    # sub-ms intervals stay as they are
    pytest.param([0, 0, 1, 1, 2, 2, 3, 3, 4], [], 0.5, id="half-ms"),
    # most rows at one stamp: the mean step (7 / 6), rounded
    pytest.param([0, 0, 0, 0, 0, 0, 7], [], 1.0, id="mostly-one-stamp"),
    pytest.param([100], [100], None, id="one-row-each"),
    pytest.param([100, 100], [], None, id="one-stamp"),
])
def test_detect_interval_reads_the_cadence_not_the_delays(reads: list[int], writes: list[int],
                                                          want: object) -> None:
    t = np.array(sorted(reads + writes), dtype=np.int64)
    order = np.argsort(np.array(reads + writes), kind="stable")
    d = np.array([0] * len(reads) + [1] * len(writes), dtype=np.int64)[order]
    assert detect_interval_ms(t, d) == want


def test_a_whole_rank_stays_in_the_column_that_reaches_it() -> None:
    # 11,988 of 12,000 samples in column 100: p99.9 is there (99.9 / 100 * 12000 in floating
    # point is 11988.000000000002, which would move it to the far column)
    layout = make_layout(3, 0)
    counts = np.zeros((1, FIO_BUCKETS))
    counts[0, 100] = 11988.0
    counts[0, 900] = 12.0
    stats = percentile_matrix(counts, [99.9], layout.lower_ns, layout.upper_ns)
    assert stats.pct_ns[0, 0] <= layout.upper_ns[100]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 16, 17, 999, 1000])
@pytest.mark.parametrize("seed", range(20))
def test_the_intervals_median_is_numpys_to_the_bit(size: int, seed: int) -> None:
    # align._median (np.partition, without the numpy.ma import np.median makes) against
    # np.median on row-step ratios of many kinds: ties, halves, large and tiny values
    rng = np.random.default_rng(seed)
    kind = seed % 4
    if kind == 0:
        x = rng.normal(1000.0, 50.0, size)
    elif kind == 1:
        x = rng.integers(0, 4, size).astype(np.float64) * 500.0  # many ties
    elif kind == 2:
        x = rng.uniform(0, 1, size) / rng.integers(1, 7, size)  # the ratios' thirds, sevenths
    else:
        x = np.exp(rng.uniform(-30, 30, size))
    assert align._median(x) == float(np.median(x))
