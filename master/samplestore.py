"""The subintervals a ``measure:`` step may still put in its window, kept within a memory bound.

A ``measure:`` step chooses its window after the fact (the longest passing window, or at a
timeout the best one seen), so every measurement subinterval's combined ``Sample`` must stay
available until the step ends. With the latency spreads of scripts/bench_master a Sample of
1,000 workloads is 20-30 MB, and a 10-minute timeout at 1-second subintervals would hold 600
of them: the master would run out of memory in the middle of a test. This store keeps the
newest samples in memory up to ``memory_bytes`` and writes older ones to files in a spill
directory (raw ``.npy`` arrays, read back memory-mapped when a window needs them); ``close``
deletes the directory.

It does not decide windows (``master.stepcontrol``), compute metrics (``master.rollup``) or
write result files (``master.output``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from master.rollup import Sample

logger = logging.getLogger(__name__)

#: Samples held in memory before the oldest go to the spill directory.
DEFAULT_MEMORY_BYTES = 1 << 30
_ARRAYS = ("counters", "lat", "rows", "buckets", "counts")


def sample_nbytes(sample: Sample) -> int:
    return sum(int(getattr(sample, name).nbytes) for name in _ARRAYS)


class SampleStore:
    """Samples by subinterval index: ``store[k] = sample``, ``store[k]``, ``k in store``."""

    def __init__(self, spill_parent: Path, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        if memory_bytes < 0:
            raise ValueError("memory_bytes must be >= 0")
        self.spill_parent = spill_parent
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[int, Sample] = OrderedDict()  # oldest first
        self._in_memory_bytes = 0
        self._spilled: dict[int, bool] = {}  # k -> coords_sorted
        self._dir: Path | None = None
        self.spilled_bytes = 0

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[int]:
        return iter(sorted([*self._memory, *self._spilled]))

    def __contains__(self, k: object) -> bool:
        return k in self._memory or k in self._spilled

    def __setitem__(self, k: int, sample: Sample) -> None:
        if k in self:
            raise KeyError(f"subinterval {k} is already stored")
        self._memory[k] = sample
        self._in_memory_bytes += sample_nbytes(sample)
        while self._in_memory_bytes > self.memory_bytes and self._memory:
            old_k, old = self._memory.popitem(last=False)
            self._in_memory_bytes -= sample_nbytes(old)
            self._spill(old_k, old)

    def __getitem__(self, k: int) -> Sample:
        sample = self._memory.get(k)
        if sample is not None:
            return sample
        if k not in self._spilled:
            raise KeyError(k)
        assert self._dir is not None
        arrays = {name: np.load(self._dir / f"{k}-{name}.npy", mmap_mode="r")
                  for name in _ARRAYS}
        return Sample(coords_sorted=self._spilled[k], **arrays)

    def _spill(self, k: int, sample: Sample) -> None:
        if self._dir is None:
            self.spill_parent.mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix=".measure-spill-", dir=self.spill_parent))
            logger.info("measurement subintervals beyond %d MiB of memory go to %s",
                        self.memory_bytes >> 20, self._dir)
        for name in _ARRAYS:
            np.save(self._dir / f"{k}-{name}.npy", np.ascontiguousarray(getattr(sample, name)))
        self._spilled[k] = sample.coords_sorted
        self.spilled_bytes += sample_nbytes(sample)

    @property
    def spill_dir(self) -> Path | None:
        return self._dir

    def close(self) -> None:
        """Forget every sample and delete the spill directory."""
        self._memory.clear()
        self._in_memory_bytes = 0
        self._spilled.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
