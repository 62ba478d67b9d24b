"""A fake engine with scripted latencies, errors and short transfers, for tests.

It does no I/O: every submitted slot completes after a latency drawn from a scripted
distribution, with an optional errno every N I/Os and a short transfer every M I/Os. It keeps a
log of what was submitted (offset, opcode, submit time) and the highest number of I/Os ever in
flight, so tests can check sequencers and queue-depth limits through the real engine loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from slave.engine.base import SlotTable
from slave.engine.layout import C_SCHED

LatencyFn = Callable[[np.random.Generator, int], npt.NDArray[np.int64]]


def exponential_ns(mean_ns: float) -> LatencyFn:
    return lambda rng, n: rng.exponential(mean_ns, n).astype(np.int64)


def constant_ns(value_ns: int) -> LatencyFn:
    return lambda rng, n: np.full(n, value_ns, dtype=np.int64)


class FakeEngine:
    name = "fake"
    open_flags = 0

    def __init__(
        self,
        table: SlotTable,
        latency: LatencyFn | None = None,
        *,
        error_every: int = 0,
        error_errno: int = 5,
        short_every: int = 0,
        seed: int = 0,
        keep_log: bool = False,
    ) -> None:
        self._table = table
        self._latency = latency or exponential_ns(100_000)
        self._rng = np.random.default_rng(seed)
        self._error_every = error_every
        self._error_errno = error_errno
        self._short_every = short_every
        self._count = 0
        cap = table.capacity
        self._pending_slot = np.zeros(0, dtype=np.int64)
        self._pending_due = np.zeros(0, dtype=np.int64)
        self._pending_res = np.zeros(0, dtype=np.int64)
        self.done_slot = np.zeros(cap, dtype=np.int64)
        self.done_res = np.zeros(cap, dtype=np.int64)
        self.max_in_flight = 0
        self.submitted = 0
        self.keep_log = keep_log
        # rows: offset, opcode, submit_ns, fd, and the engine loop's scheduled time of the I/O
        # (the slot row's ``sched_ns``)
        self.log: list[npt.NDArray[np.int64]] = []

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        opcode, fd, _, nbytes, offset = self._table.fields(slots)
        self._start(slots.astype(np.int64), opcode, fd, nbytes, offset,
                    self._table.rows[slots, C_SCHED])

    def _start(self, slots: npt.NDArray[np.int64], opcode: npt.NDArray[np.int64],
               fd: npt.NDArray[np.int64], nbytes: npt.NDArray[np.int64],
               offset: npt.NDArray[np.int64], sched: npt.NDArray[np.int64]) -> None:
        now = time.monotonic_ns()
        n = int(slots.size)
        res = nbytes.copy()
        serial = self._count + 1 + np.arange(n)
        self._count += n
        if self._short_every:
            short = serial % self._short_every == 0
            res[short] //= 2
        if self._error_every:
            res[serial % self._error_every == 0] = -self._error_errno
        self._pending_slot = np.concatenate([self._pending_slot, slots])
        self._pending_due = np.concatenate([self._pending_due, now + self._latency(self._rng, n)])
        self._pending_res = np.concatenate([self._pending_res, res])
        self.submitted += n
        self.max_in_flight = max(self.max_in_flight, int(self._pending_slot.size))
        if self.keep_log:
            self.log.append(
                np.stack(
                    [
                        offset,
                        opcode,
                        np.full(n, now, dtype=np.int64),
                        fd,
                        sched,
                    ],
                    axis=1,
                )
            )

    def _take(self, now: int) -> int:
        ready = self._pending_due <= now
        n = min(int(ready.sum()), self.done_slot.size)
        if n == 0:
            return 0
        idx = np.flatnonzero(ready)[:n]
        self.done_slot[:n] = self._pending_slot[idx]
        self.done_res[:n] = self._pending_res[idx]
        keep = np.ones(self._pending_slot.size, dtype=np.bool_)
        keep[idx] = False
        self._pending_slot = self._pending_slot[keep]
        self._pending_due = self._pending_due[keep]
        self._pending_res = self._pending_res[keep]
        return n

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        now = time.monotonic_ns()
        n = self._take(now)
        if n > 0 or timeout_ns == 0:  # never lose reaped slots by taking twice
            return n
        deadline = now + timeout_ns if timeout_ns > 0 else None
        if self._pending_due.size:
            due = int(np.sort(self._pending_due)[min(min_nr, self._pending_due.size) - 1])
            until = due if deadline is None else min(due, deadline)
        elif deadline is not None:
            until = deadline
        else:
            return 0
        delay = until - now
        if delay > 0:
            time.sleep(delay / 1e9)
        return self._take(time.monotonic_ns())

    def poll(self) -> int:
        return self._take(time.monotonic_ns())

    def close(self) -> None:
        self._pending_slot = self._pending_slot[:0]
        self._pending_due = self._pending_due[:0]
        self._pending_res = self._pending_res[:0]

    def offsets_log(self) -> npt.NDArray[np.int64]:
        """All logged submissions in order: rows (offset, opcode, submit_ns, fd, sched_ns)."""
        return np.concatenate(self.log) if self.log else np.zeros((0, 5), dtype=np.int64)
