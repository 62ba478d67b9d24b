"""How the engine loop waits: the max-iops loops' wait for a completion (``Waiter``: look
first, then block) and how long a paced loop blocks for a scheduled time (``timed_wait_ns``).
Only the waiting: what was reaped is the caller's. Its time and its yields are its clock's
(``slave.engine.clock``).
"""

from __future__ import annotations

from collections.abc import Callable

from slave.engine import tuning
from slave.engine.clock import REAL_CLOCK, Clock


class Waiter:
    """The max-iops loops' wait for completions, called only when a look found none (so
    with I/Os in flight). It looks in the ring (yielding the core in between) for the first
    ``AWAIT_SPIN_NS`` and for a wait shorter than ``SLEEP_MIN_NS``, and blocks in the engine
    for the rest; but it only looks first while its recent waits were short (their running
    mean, ``mean_ns``, under ``AWAIT_SPIN_GATE_NS``): behind a slow device (a disk's milliseconds)
    a look would seldom find anything and would cost up to ``AWAIT_SPIN_NS`` of CPU per
    completion (what each bought: docs/engine.md). The compiled loop's wait also measures
    whether blocking at once completes more (``paced_kernel.c: await_choose``); this one,
    whose Python is its limit, always looks first."""

    __slots__ = ("clock", "mean_ns")

    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self.mean_ns = 0  # the recent waits, from the call to a completion or to wake

    def wait(self, poll: Callable[[], int], reap: Callable[[int, int], int], wake: int) -> int:
        """Completions reaped by ``wake`` (0: none came)."""
        clock = self.clock
        mono = clock.now_ns
        t0 = mono()
        spin_until = t0 + tuning.AWAIT_SPIN_NS if self.mean_ns < tuning.AWAIT_SPIN_GATE_NS else t0
        while True:
            now = mono()
            left = wake - now
            if left <= 0:
                n = 0
                break
            if now < spin_until or left < tuning.SLEEP_MIN_NS:
                n = poll()
                if not n:
                    clock.idle(wake)  # let the device's kernel worker run if it shares our core
                    n = poll()
            else:
                n = reap(1, left)
            if n:
                break
        self.mean_ns += (mono() - t0 - self.mean_ns) >> 3  # a running mean over ~8 waits
        return n


def timed_wait_ns(left: int) -> int:
    """How long to block for a wake-up due in ``left`` ns (``left >= SLEEP_MIN_NS``): all of
    it when short, else all but ``WAKE_EARLY_NS`` (the loop then waits again, briefly)."""
    return left - tuning.WAKE_EARLY_NS if left > tuning.LONG_WAIT_NS else left
