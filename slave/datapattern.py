"""Write-data patterns: what bytes a workload writes.

Owns ``WritePattern``, which fills the write buffers of a batch of I/O slots in a few vectorised
numpy operations, and ``WritePattern.verify`` which checks a block read back. It must not do
I/O or keep time.

Kinds:

* ``random``: incompressible and never duplicated. A block is a copy of one of a small pool of
  random blocks, with every 512-byte sector stamped in its first 16 bytes with the sector's
  byte offset on the LUN and the write's serial number (so no two writes are alike and a read
  back can be checked byte for byte);
* ``zeros``: all zero bytes;
* ``compressible`` (ratio r): the first ``blocksize / r`` bytes of each block random, the rest
  zero; the first 16 bytes stamped as above, so blocks stay unique;
* ``dedupable`` (ratio d): a write is unique (as ``random``) with probability ``1 / d``,
  otherwise an exact copy of one of ``DEDUP_POOL`` fixed random blocks.

For ``random`` and ``compressible`` blocks of up to ``PLAN_MAX_BYTES``, the engine loop plans
the data of its writes when it precomputes their offsets (``plan``: serial numbers, pool rows
and stamps, in bulk) and writes a batch into the slot buffers at submit time with ``apply``:
three numpy operations per batch instead of fill's eight.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from slave.params import WriteDataKind

SECTOR_BYTES: Final = 512
POOL_BLOCKS: Final = 64
DEDUP_POOL: Final = 16
#: largest block whose writes are planned (the stamps take 16 bytes per sector per write)
PLAN_MAX_BYTES: Final = 16 * 1024


class WritePattern:
    """Fills write buffers for one workload. ``buffers`` rows are slots (uint8, page aligned)."""

    def __init__(self, kind: WriteDataKind, ratio: float, blocksize_bytes: int, seed: int) -> None:
        if blocksize_bytes % SECTOR_BYTES:
            raise ValueError(f"blocksize {blocksize_bytes} is not a multiple of {SECTOR_BYTES}")
        self.kind = kind
        self.ratio = ratio
        self.blocksize_bytes = blocksize_bytes
        rng = np.random.default_rng([seed, 0x5EED])
        self._rng = rng
        bs = blocksize_bytes
        self._pool = rng.integers(0, 256, (POOL_BLOCKS, bs), dtype=np.uint8)
        if kind == "compressible":
            keep = max(16, min(bs, round(bs / ratio)))
            self._pool[:, keep:] = 0
        self._dups = rng.integers(0, 256, (DEDUP_POOL, bs), dtype=np.uint8)
        self._serial = 1
        sectors = bs // SECTOR_BYTES
        # stamp positions in uint64 words: every sector (random, dedupable) or the block head
        per_sector = kind in ("random", "dedupable")
        self._stamp_sectors = np.arange(sectors if per_sector else 1, dtype=np.int64)
        self._stamp_words = self._stamp_sectors * (SECTOR_BYTES // 8)
        #: ``plan`` / ``apply`` serve this pattern (else ``fill`` does, per batch)
        self.planned = kind in ("random", "compressible") and bs <= PLAN_MAX_BYTES
        self._stamp_offsets = self._stamp_sectors * SECTOR_BYTES
        #: sectors stamped per write, from the block's first (``plan``'s stamps per write)
        self.stamped_sectors = int(self._stamp_sectors.size)
        self._wide_pool = self._pool  # the pool padded to the buffers' row width (apply)
        self._views: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]] | None = None

    @property
    def next_serial(self) -> int:
        """The serial number of the next write planned or filled (the first is 1)."""
        return self._serial

    @next_serial.setter
    def next_serial(self, serial: int) -> None:  # a compiled loop planned up to here
        self._serial = serial

    def plan(
        self, offsets_bytes: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
        """The data of the next ``len(offsets_bytes)`` writes, in the order they will be
        applied: each one's pool row, and its stamps (``(n, stamped sectors, 2)``: the sector's
        offset on the LUN, the write's serial number)."""
        n = int(offsets_bytes.size)
        serials = np.arange(self._serial, self._serial + n, dtype=np.int64)
        self._serial += n
        stamps = np.empty((n, self._stamp_sectors.size, 2), dtype=np.int64)
        stamps[:, :, 0] = offsets_bytes[:, None] + self._stamp_offsets
        stamps[:, :, 1] = serials[:, None]
        return (serials % POOL_BLOCKS).astype(np.intp), stamps

    def apply(
        self,
        buffers: npt.NDArray[np.uint8],
        rows: npt.NDArray[np.intp],
        pool_rows: npt.NDArray[np.intp],
        stamps: npt.NDArray[np.int64],
    ) -> None:
        """Write planned data into ``buffers[rows]`` (rows of a multiple of 512 bytes, at
        least the blocksize: bytes past the block are left to chance)."""
        words = self._sector_words(buffers)
        buffers[rows] = self._wide_pool.take(pool_rows, axis=0)
        words[rows, : stamps.shape[1], :2] = stamps

    def apply_one(
        self,
        buffers: npt.NDArray[np.uint8],
        row: int,
        pool_row: int,
        stamps: npt.NDArray[np.int64],
    ) -> None:
        """``apply`` for one write (``stamps``: its ``(stamped sectors, 2)``), with basic
        indexing only: one write costs 1.7 us against ``apply``'s 3.9 us (fancy indexing);
        at four writes the two cost about the same."""
        words = self._sector_words(buffers)
        buffers[row] = self._wide_pool[pool_row]
        words[row, : stamps.shape[0], :2] = stamps

    def wide_pool_for(self, buffers: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """The pool blocks padded to the rows of ``buffers`` (what ``apply`` copies a write's
        block from, by its pool row), for compiled code that places planned data itself."""
        self._sector_words(buffers)
        return self._wide_pool

    def _sector_words(self, buffers: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
        """``buffers`` as int64 words by (row, sector, word), kept for the next call; the
        pool padded to the rows' width."""
        views = self._views
        if views is None or views[0] is not buffers:
            width = buffers.shape[1]
            if self._wide_pool.shape[1] != width:
                self._wide_pool = np.zeros((POOL_BLOCKS, width), dtype=np.uint8)
                self._wide_pool[:, : self.blocksize_bytes] = self._pool
            words = buffers.view(np.int64).reshape(buffers.shape[0], -1, SECTOR_BYTES // 8)
            views = self._views = (buffers, words)
        return views[1]

    def fill(
        self,
        buffers: npt.NDArray[np.uint8],
        slots: npt.NDArray[np.intp],
        offsets_bytes: npt.NDArray[np.int64],
    ) -> None:
        """Write the data of the next ``len(slots)`` writes into ``buffers[slots, :blocksize]``."""
        n = int(slots.size)
        if n == 0:
            return
        bs = self.blocksize_bytes
        if self.kind == "zeros":
            buffers[slots, :bs] = 0
            return
        if self.planned and buffers.shape[1] % SECTOR_BYTES == 0:
            self.apply(buffers, slots, *self.plan(offsets_bytes))
            return
        serials = np.arange(self._serial, self._serial + n, dtype=np.int64)
        self._serial += n
        buffers[slots, :bs] = self._pool[serials % POOL_BLOCKS]
        words = buffers.view(np.int64)
        cols = self._stamp_words
        rows = slots[:, None]
        words[rows, cols] = offsets_bytes[:, None] + self._stamp_sectors * SECTOR_BYTES
        words[rows, cols + 1] = serials[:, None]
        if self.kind == "dedupable":
            dup = self._rng.random(n) >= 1.0 / self.ratio
            k = int(dup.sum())
            if k:
                buffers[slots[dup], :bs] = self._dups[self._rng.integers(0, DEDUP_POOL, k)]

    def verify(self, block: npt.NDArray[np.uint8], offset_bytes: int) -> str | None:
        """Check one block read back from ``offset_bytes``; ``None`` when it is what this
        pattern writes there, else the reason it is not."""
        bs = self.blocksize_bytes
        if block.size != bs:
            return f"block has {block.size} bytes, expected {bs}"
        if self.kind == "zeros":
            return None if not block.any() else "non-zero bytes in a zeros block"
        if self.kind == "dedupable" and any(np.array_equal(block, d) for d in self._dups):
            return None
        words = block.view(np.int64)
        cols = self._stamp_words
        want_off = offset_bytes + self._stamp_sectors * SECTOR_BYTES
        if not np.array_equal(words[cols], want_off):
            return f"offset stamps {words[cols][:4].tolist()} != {want_off[:4].tolist()}"
        serial = int(words[1])
        if serial < 1 or not np.all(words[cols + 1] == serial):
            return f"serial stamps disagree: {words[cols + 1][:4].tolist()}"
        expect = self._pool[serial % POOL_BLOCKS].copy()
        ew = expect.view(np.int64)
        ew[cols] = want_off
        ew[cols + 1] = serial
        if not np.array_equal(block, expect):
            bad = int(np.flatnonzero(block != expect)[0])
            return f"byte {bad} differs from the pattern of serial {serial}"
        return None
