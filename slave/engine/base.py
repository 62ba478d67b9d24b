"""The I/O engine interface and the slot table that engines and the engine loop share.

Owns ``SlotTable`` (libaio submits its rows as they are, the other engines read their words)
and the ``IoEngine`` protocol. It must not decide offsets, pacing or statistics: that is the
engine loop's. An engine takes batches of slot numbers (``submit``) and hands back completed
slots with their results (``reap`` / ``poll`` fill ``done_slot[:n]`` and ``done_res[:n]``; a
result is the byte count transferred or ``-errno``). Engines never allocate a Python object
per I/O on the hot path (the thread-pool fallback, which must, is the documented exception).
"""

from __future__ import annotations

import mmap
import time
from typing import Protocol

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.layout import ROW, ROW_WORDS

PAGE_BYTES = mmap.PAGESIZE
#: how many times an engine offers the kernel the rest of a batch it took only part of (EAGAIN,
#: as under memory pressure) before it calls that a refusal: about 1 s with ``submit_backoff``
SUBMIT_TRIES = 1000


def submit_backoff(tries: int) -> bool:
    """Before try ``tries`` (from 0) of the rest of a batch: sleep a little (none before the
    first; 0.1 ms more each time, up to 1 ms), so that the kernel can free what it lacked;
    False when the ``SUBMIT_TRIES`` are used up."""
    if tries >= SUBMIT_TRIES:
        return False
    if tries:
        time.sleep(0.0001 * min(tries, 10))
    return True


class SubmitError(IoEngineError):
    """A submission the kernel refused after it took ``submitted`` of the batch: those are in
    flight, and the engine loop's stop waits for them alone."""

    def __init__(self, message: str, submitted: int) -> None:
        super().__init__(message)
        self.submitted = submitted


class SlotTable:
    """``capacity`` I/O slots, one row each (``layout.ROW_DTYPE``: 16 int64 words, the slot's
    ``struct iocb`` first, whose ``aio_data`` is the slot number, which its completion brings
    back), page aligned, held as an int64 view with ``layout.ROW``'s columns."""

    ROW_WORDS = ROW_WORDS

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        row_bytes = self.ROW_WORDS * 8
        self._mem = mmap.mmap(-1, max(capacity * row_bytes, PAGE_BYTES))
        self.rows: npt.NDArray[np.int64] = np.frombuffer(
            self._mem, dtype=np.int64, count=capacity * self.ROW_WORDS
        ).reshape(capacity, self.ROW_WORDS)
        base = self.rows.ctypes.data
        self.addr = base + np.arange(capacity, dtype=np.uint64) * np.uint64(row_bytes)
        self.rows[:, ROW["data"]] = np.arange(capacity)


class AlignedBuffers:
    """``n`` page-aligned buffers of ``slot_bytes`` each (anonymous mmap), as a uint8 matrix."""

    def __init__(self, n: int, slot_bytes: int) -> None:
        slot_bytes = -(-slot_bytes // PAGE_BYTES) * PAGE_BYTES
        self._mem = mmap.mmap(-1, max(n * slot_bytes, PAGE_BYTES))
        self.array: npt.NDArray[np.uint8] = np.frombuffer(
            self._mem, dtype=np.uint8, count=n * slot_bytes
        ).reshape(n, slot_bytes)
        self.slot_bytes = slot_bytes
        self.addr = self.array.ctypes.data + np.arange(n, dtype=np.uint64) * np.uint64(slot_bytes)


class IoEngine(Protocol):
    """What the engine loop needs from an engine."""

    #: extra ``os.open`` flags for LUNs served by this engine (``O_DIRECT`` for libaio)
    open_flags: int
    #: the slot of each completion, as signed words (the loop indexes with them directly)
    done_slot: npt.NDArray[np.int64]
    done_res: npt.NDArray[np.int64]

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        """Start the I/Os described by ``table.rows[slots]``; all of them, or raise."""

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        """Wait up to ``timeout_ns`` for ``min_nr`` completions; returns how many are in
        ``done_slot`` / ``done_res`` (at most ``capacity``). ``timeout_ns`` 0 does not wait."""

    def poll(self) -> int:
        """Completions available now, without waiting (and, for libaio, without a syscall)."""

    def close(self) -> None:
        """Cancel or finish in-flight I/O and release kernel resources."""

