"""The portable fallback engine: a pool of threads doing ``os.preadv`` / ``os.pwritev``.

Used where O_DIRECT or native AIO is unavailable (a file on ramfs, or on tmpfs before Linux
6.6; a host without the compiled loop). It reads each slot's iocb words, so the engine loop
drives it as it drives libaio. It costs one queue item per I/O (the GIL is released during the
system call): a correctness fallback, not a fast path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import threading

import numpy as np
import numpy.typing as npt

from slave.engine.base import EngineCaps, SlotTable
from slave.engine.layout import IOCB_CMD_PWRITE, ROW


class ThreadPoolEngine:
    caps = EngineCaps.NONE
    open_flags = 0

    def __init__(self, table: SlotTable, max_threads: int = 64) -> None:
        self._table = table
        self._todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._max_threads = max_threads
        self._in_flight = 0
        self.done_slot = np.zeros(table.capacity, dtype=np.int64)
        self.done_res = np.zeros(table.capacity, dtype=np.int64)

    def _worker(self) -> None:
        rows = self._table.rows
        while True:
            slot = self._todo.get()
            if slot < 0:
                return
            opfd, buf, n, offset = rows[slot, ROW["opcode_fd"] : ROW["offset"] + 1].tolist()
            view = memoryview((ctypes.c_char * n).from_address(buf)).cast("B")
            try:
                if opfd & 0xFFFF == IOCB_CMD_PWRITE:
                    res = os.pwritev(opfd >> 32, [view], offset)
                else:
                    res = os.preadv(opfd >> 32, [view], offset)
            except OSError as exc:
                res = -(exc.errno or 5)
            self._done.put((slot, res))

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        self._in_flight += int(slots.size)
        want = min(self._in_flight, self._max_threads)
        while len(self._threads) < want:
            t = threading.Thread(target=self._worker, name="ivypy-pio", daemon=True)
            t.start()
            self._threads.append(t)
        for s in slots.tolist():
            self._todo.put(s)

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        """The first completion, waited for ``timeout_ns`` at most, then every one there."""
        n = 0
        with contextlib.suppress(queue.Empty):
            if timeout_ns == 0:
                item = self._done.get_nowait()
            else:
                item = self._done.get(timeout=timeout_ns / 1e9)
            while True:
                self.done_slot[n], self.done_res[n] = item
                n += 1
                if n == self.done_slot.size:
                    break
                item = self._done.get_nowait()
        self._in_flight -= n
        return n

    def poll(self) -> int:
        return self.reap(0, 0)

    def close(self) -> None:
        for _ in self._threads:
            self._todo.put(-1)
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
