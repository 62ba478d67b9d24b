"""Stretches of time in which the test's process did not run (stopped, or not scheduled on a
loaded machine), for timing tests that must tell them from their subject's own delays.

In full runs the process was once held 128 ms, longer than a test's 100 ms subinterval: the
I/Os in flight then were reaped 128 ms late and a subinterval held almost none. No engine loop
can help that, so a test looks only at the subintervals that no such stretch touched.

A thread sleeps 1 ms at a time; a wake-up more than ``min_gap_ns`` late, across which the
process used under a quarter of the time in CPU, is such a stretch. A thread of the process
holding the GIL (busy) uses CPU, so it is not one: a loop that stalls itself is still seen.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType


class StallWatch:
    def __init__(self, min_gap_ns: int = 20_000_000) -> None:
        self.min_gap_ns = min_gap_ns
        self.stalls: list[tuple[int, int]] = []  # (start, end), time.monotonic_ns
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)

    def _watch(self) -> None:
        last, cpu = time.monotonic_ns(), time.process_time_ns()
        while not self._stop.is_set():
            time.sleep(0.001)
            now, c = time.monotonic_ns(), time.process_time_ns()
            if now - last > self.min_gap_ns and c - cpu < (now - last) // 4:
                self.stalls.append((last, now))
            last, cpu = now, c

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def __repr__(self) -> str:
        return "StallWatch(" + ", ".join(f"{(b - a) / 1e6:.0f} ms" for a, b in self.stalls) + ")"

    def touches(self, start_ns: int, end_ns: int) -> bool:
        """Whether a stall overlaps [``start_ns``, ``end_ns``)."""
        return any(a < end_ns and b > start_ns for a, b in self.stalls)

    def clear_subintervals(self, start_ns: int, sub_ns: int, n: int) -> list[int]:
        """The subintervals (of ``n``, ``sub_ns`` long from ``start_ns``) no stall touched."""
        return [k for k in range(n)
                if not self.touches(start_ns + k * sub_ns, start_ns + (k + 1) * sub_ns)]
