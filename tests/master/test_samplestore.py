"""SampleStore: the newest samples in memory up to a bound, older ones in spill files, every one
read back exactly; windows mixing both add up to the same; close removes the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from master.rollup import Sample
from master.samplestore import SampleStore, sample_nbytes
from protocol.stats import ROWS_PER_WORKLOAD


def make_sample(seed: int, n_workloads: int = 3) -> Sample:
    rng = np.random.default_rng(seed)
    # distinct (row, bucket) coordinates in order, as a StatsBatch has them
    lin = np.unique(rng.integers(0, n_workloads * ROWS_PER_WORKLOAD * 2000, 40))
    return Sample(
        counters=rng.integers(0, 1000, (n_workloads, 4, 3)),
        lat=rng.integers(0, 10**9, (n_workloads, 4, 2, 3)),
        rows=lin // 2000, buckets=lin % 2000,
        counts=rng.integers(1, 100, lin.size),
        coords_sorted=bool(seed % 2),
    )


def same(a: Sample, b: Sample) -> bool:
    return a.coords_sorted == b.coords_sorted and all(
        np.array_equal(getattr(a, n), getattr(b, n))
        for n in ("counters", "lat", "rows", "buckets", "counts"))


@pytest.mark.parametrize("keep", [0, 2, 100])  # samples that fit in memory
def test_every_sample_reads_back_exactly(tmp_path: Path, keep: int) -> None:
    samples = {k: make_sample(k) for k in range(6)}
    per = max(sample_nbytes(s) for s in samples.values())
    store = SampleStore(tmp_path / "step", memory_bytes=keep * per)
    for k, s in samples.items():
        store[k] = s
    assert list(store) == list(range(6)) and len(store) == 6 and 3 in store and 6 not in store
    for k, s in samples.items():
        assert same(store[k], s), k
    assert (store.spill_dir is not None) == (keep < 6)
    if keep >= 6:
        assert not (tmp_path / "step").exists()  # nothing spilled, nothing created
    store.close()
    assert len(store) == 0 and not any((tmp_path / "step").glob(".measure-spill-*"))


def test_spilled_and_kept_samples_add_up_the_same(tmp_path: Path) -> None:
    samples = [make_sample(k) for k in range(8)]
    store = SampleStore(tmp_path, memory_bytes=3 * sample_nbytes(samples[0]))
    for k, s in enumerate(samples):
        store[k] = s
    assert store.spilled_bytes > 0
    window = range(2, 8)  # spilled and in-memory samples together
    got = Sample.add([store[k] for k in window])
    want = Sample.add([samples[k] for k in window])
    assert same(got, want)
    store.close()


def test_the_newest_stay_in_memory(tmp_path: Path) -> None:
    samples = [make_sample(k) for k in range(5)]
    store = SampleStore(tmp_path, memory_bytes=sum(sample_nbytes(s) for s in samples[3:]))
    for k, s in enumerate(samples):
        store[k] = s
    assert store[4] is samples[4] and store[3] is samples[3]  # not read back from a file
    assert isinstance(store[0].rows, np.memmap)
    store.close()


def test_bad_use_is_refused(tmp_path: Path) -> None:
    store = SampleStore(tmp_path)
    store[1] = make_sample(1)
    with pytest.raises(KeyError, match="already stored"):
        store[1] = make_sample(2)
    with pytest.raises(KeyError):
        store[7]
    with pytest.raises(ValueError, match="memory_bytes"):
        SampleStore(tmp_path, memory_bytes=-1)
