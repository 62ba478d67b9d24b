"""Write-data patterns: what bytes a workload writes.

Owns the definition of a write's data, ``WritePattern``: ``fill`` (a batch of writes, in a few
vectorised numpy operations) and ``fill_one`` (one write) put it into slot buffers, ``verify``
checks a block read back, and ``data_words`` gives the compiled loop what it needs to place the
same bytes itself (``slave/engine/ivy_loop.c``: ``put_write_data``). It must not do I/O or
keep time.

A write's data depends on its pattern, its byte offset on the LUN and its serial number alone
(nothing is drawn per write), so the Python and the compiled loop write the same bytes. Every
I/O a workload's engine loop precomputes takes the next serial (the first is 1), read or
write, in the order of the workload's I/O stream: the ring's first I/O's serial and its index
give an I/O's serial.

Kinds:

* ``random``: incompressible and never duplicated. A block is a copy of pool block
  ``serial % pool_blocks`` (random bytes from the seed) with every 512-byte sector stamped in
  its first 16 bytes with the sector's byte offset on the LUN and the serial (so no two
  writes are alike and a read back can be checked byte for byte);
* ``zeros``: all zero bytes;
* ``compressible`` (ratio r): the pool blocks' first ``blocksize / r`` bytes random, the rest
  zero; only the block's first 16 bytes stamped as above, so blocks stay unique;
* ``dedupable`` (ratio d): a write is unique (as ``random``) or an exact copy of one of
  ``dup_blocks`` fixed random blocks, as ``x = splitmix64(dedup_key + serial)`` says:
  unique when ``x >> 11 < unique_below`` (``round(2**53 / d)``: probability ``1 / d``), else
  duplicate block ``x % dup_blocks``. ``dedup_key`` is drawn from the seed.

The pool holds ``POOL_BLOCKS`` blocks and the duplicates ``DEDUP_POOL``, fewer where that would
pass ``POOL_BYTES`` (``pool_sizes``): at 4 KiB and below 64 and 16 blocks, at 1 MiB 4 and 2 (64
and 16 MiB of a workload's memory before). The pool repeats every 256 KiB of writes up to
64 KiB blocks, every 4 blocks above (every sector is stamped, so no two sectors written are
alike).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.params import WriteDataKind

SECTOR_BYTES: Final = 512
POOL_BLOCKS: Final = 64
DEDUP_POOL: Final = 16
#: the pool's and the duplicates' bytes, each, at most (but 4 and 2 blocks at least)
POOL_BYTES: Final = 256 * 1024
#: each kind's number in the compiled loop (``struct ivy_data``'s ``kind``; 0: no writes)
KIND_CODES: Final[dict[WriteDataKind, int]] = {
    "random": 1, "compressible": 2, "zeros": 3, "dedupable": 4}
_U64: Final = (1 << 64) - 1
_SECTOR_WORDS: Final = SECTOR_BYTES // 8


def splitmix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's output function of each ``z`` (arithmetic modulo 2**64), as
    ``ivy_loop.c``'s ``mix64``."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def pool_sizes(blocksize_bytes: int) -> tuple[int, int]:
    """How many blocks the pool and the duplicates hold at ``blocksize_bytes``."""
    fit = POOL_BYTES // blocksize_bytes
    return max(4, min(POOL_BLOCKS, fit)), max(2, min(DEDUP_POOL, fit))


def _splitmix64_one(z: int) -> int:
    """``splitmix64`` of one value (a Python int below 2**64), without numpy."""
    z = (z + 0x9E3779B97F4A7C15) & _U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


class WritePattern:
    """One workload's write data. Buffers are rows of a uint8 matrix (slots), each at least
    the blocksize wide and a multiple of 512 bytes; bytes past the block are left alone."""

    def __init__(self, kind: WriteDataKind, ratio: float, blocksize_bytes: int, seed: int) -> None:
        if blocksize_bytes % SECTOR_BYTES:
            raise ValueError(f"blocksize {blocksize_bytes} is not a multiple of {SECTOR_BYTES}")
        self.kind = kind
        self.ratio = ratio
        self.blocksize_bytes = bs = blocksize_bytes
        rng = np.random.default_rng([seed, 0x5EED])
        # the pool (kinds that copy it), then the duplicates and the key (dedupable): each
        # drawn only where used, so a block of 1 MiB costs no more memory than it must
        empty = np.zeros((0, bs), dtype=np.uint8)
        self.pool_blocks, self.dup_blocks = pool_sizes(bs)
        self._pool = empty if kind == "zeros" else rng.integers(
            0, 256, (self.pool_blocks, bs), dtype=np.uint8)
        if kind == "compressible":
            keep = max(16, min(bs, round(bs / ratio)))
            self._pool[:, keep:] = 0
        self._dups = empty
        #: dedupable: the mix's key, and the bound under which a write is unique
        self.dedup_key = 0
        self.unique_below = 1 << 53
        if kind == "dedupable":
            self._dups = rng.integers(0, 256, (self.dup_blocks, bs), dtype=np.uint8)
            self.dedup_key = int(rng.integers(0, _U64, dtype=np.uint64, endpoint=True))
            self.unique_below = min(1 << 53, round(2.0**53 / ratio))
        self._serial = 1
        # stamped sectors: every one (random, dedupable's unique blocks) or the block's first
        sectors = bs // SECTOR_BYTES if kind in ("random", "dedupable") else 1
        self._stamp_offsets = np.arange(sectors, dtype=np.int64) * SECTOR_BYTES
        self._stamp_words = self._stamp_offsets // 8
        # fill_one's stamps, made in place through views of their columns
        self._one_stamps = np.zeros((sectors, 2), dtype=np.int64)
        self._one_offsets, self._one_serials = self._one_stamps[:, 0], self._one_stamps[:, 1]
        self._views: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]] | None = None

    @property
    def pools_bytes(self) -> int:
        """The memory the pool and the duplicates hold."""
        return self._pool.nbytes + self._dups.nbytes

    @property
    def next_serial(self) -> int:
        """The serial number of the next I/O (the first is 1)."""
        return self._serial

    @next_serial.setter
    def next_serial(self, serial: int) -> None:  # a loop took serials up to here
        self._serial = serial

    def data_words(self) -> dict[str, int]:
        """What the compiled loop places a write's data from, by field of ``struct
        ivy_data`` (all but the ring's serial): the kind's code (``KIND_CODES``), the block's
        bytes, the pool's and the duplicates' addresses (0: none; each a C-contiguous array
        of blocks, kept alive by this pattern) and sizes in blocks, the dedup key and the
        unique bound."""
        return {"kind": KIND_CODES[self.kind], "block_bytes": self.blocksize_bytes,
                "pool": self._pool.ctypes.data if self._pool.size else 0,
                "pool_blocks": self.pool_blocks,
                "dups": self._dups.ctypes.data if self._dups.size else 0,
                "dup_blocks": self.dup_blocks, "dedup_key": self.dedup_key,
                "unique_below": self.unique_below}

    def unique(self, serials: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of the writes ``serials`` are unique blocks (all but dedupable's
        duplicates)."""
        if self.kind != "dedupable":
            return np.ones(serials.shape, dtype=np.bool_)
        return self._mix(serials) >> np.uint64(11) < np.uint64(self.unique_below)

    def _mix(self, serials: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        return splitmix64(serials.astype(np.uint64) + np.uint64(self.dedup_key))

    def fill(
        self,
        buffers: npt.NDArray[np.uint8],
        rows: npt.NDArray[np.intp],
        offsets_bytes: npt.NDArray[np.int64],
        serials: npt.NDArray[np.int64],
    ) -> None:
        """The data of writes ``serials`` at ``offsets_bytes`` into ``buffers[rows]``."""
        if rows.size == 0:
            return
        bs = self.blocksize_bytes
        if self.kind == "zeros":
            buffers[rows, :bs] = 0
            return
        buffers[rows, :bs] = self._pool.take(serials % self.pool_blocks, axis=0)
        words = self._sector_words(buffers)
        k = self._stamp_offsets.size
        words[rows, :k, 0] = offsets_bytes[:, None] + self._stamp_offsets
        words[rows, :k, 1] = serials[:, None]
        if self.kind == "dedupable":
            x = self._mix(serials)
            dup = x >> np.uint64(11) >= np.uint64(self.unique_below)
            if dup.any():
                which = (x[dup] % np.uint64(self.dup_blocks)).astype(np.intp)
                buffers[rows[dup], :bs] = self._dups.take(which, axis=0)

    def fill_one(self, buffers: npt.NDArray[np.uint8], row: int, offset_bytes: int,
                 serial: int) -> None:
        """``fill`` for one write, with basic indexing only: about 2 us for a random 4 KiB
        write against ``fill``'s 4-5 for one (``tuning.WRITE_ONE_MAX``)."""
        bs = self.blocksize_bytes
        if self.kind == "zeros":
            buffers[row, :bs] = 0
            return
        if self.kind == "dedupable":
            x = _splitmix64_one((self.dedup_key + serial) & _U64)
            if x >> 11 >= self.unique_below:
                buffers[row, :bs] = self._dups[x % self.dup_blocks]
                return
        buffers[row, :bs] = self._pool[serial % self.pool_blocks]
        stamps = self._one_stamps
        np.add(self._stamp_offsets, offset_bytes, out=self._one_offsets)
        self._one_serials.fill(serial)
        self._sector_words(buffers)[row, : stamps.shape[0], :2] = stamps

    def _sector_words(self, buffers: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
        """``buffers`` as int64 words by (row, sector, word), kept for the next call."""
        views = self._views
        if views is not None and views[0] is buffers:
            return views[1]
        if buffers.shape[1] % SECTOR_BYTES or not buffers.flags.c_contiguous:
            raise ValueError(f"write buffers must be C-contiguous rows of a multiple of "
                             f"{SECTOR_BYTES} bytes, not {buffers.shape[1]}")
        words = buffers.view(np.int64).reshape(buffers.shape[0], -1, _SECTOR_WORDS)
        self._views = (buffers, words)
        return words

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
        want_off = offset_bytes + self._stamp_offsets
        if not np.array_equal(words[cols], want_off):
            return f"offset stamps {words[cols][:4].tolist()} != {want_off[:4].tolist()}"
        serial = int(words[1])
        if serial < 1 or not np.all(words[cols + 1] == serial):
            return f"serial stamps disagree: {words[cols + 1][:4].tolist()}"
        if not self.unique(np.array([serial], dtype=np.int64))[0]:
            return f"serial {serial} writes a duplicate block, not a unique one"
        expect = self._pool[serial % self.pool_blocks].copy()
        ew = expect.view(np.int64)
        ew[cols] = want_off
        ew[cols + 1] = serial
        if not np.array_equal(block, expect):
            bad = int(np.flatnonzero(block != expect)[0])
            return f"byte {bad} differs from the pattern of serial {serial}"
        return None
