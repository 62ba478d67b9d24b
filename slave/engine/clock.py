"""The engine loop's time, and how the general loop waits.

Owns ``Clock``, the one object the loop's parts (``EngineLoop``, ``Slots``, ``Waiter``) take
every timestamp from and every wait through: ``RealClock`` on every engine that does I/O,
``VirtualClock`` on the scripted fake engine's (so that a run is a function of its script);
a max-iops loop's wait for a completion (``Waiter``) and how long a paced loop blocks for a
scheduled time (``timed_wait_ns``). It must not reap, submit or decide anything: a wait here
only passes time (what a wait reaped is the caller's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from os import sched_yield
from typing import Protocol

import numpy as np
import numpy.typing as npt

from slave.engine import tuning


class Clock(Protocol):
    """Where the engine loop's time comes from, and how it passes time."""

    #: whether time moves only when the loop waits (a scripted engine's)
    virtual: bool

    def now_ns(self) -> int:
        """The time now, ns."""

    def sleep_until(self, t_ns: int) -> None:
        """Pass the time until ``t_ns`` (a virtual clock: or the next completion's due time)."""

    def idle(self, until_ns: int) -> None:
        """Nothing to do before ``until_ns`` but look again: yield the core (the device's
        kernel worker may need it); a virtual clock moves on as ``sleep_until``."""

    def looked(self, until_ns: int) -> None:
        """A look found nothing and the loop looks again at once, waiting for ``until_ns``: a
        real clock does nothing (the look was the wait); a virtual one moves as ``sleep_until``."""


class RealClock:
    """The monotonic clock: the loop's time on every engine that does I/O."""

    virtual = False
    now_ns = staticmethod(time.monotonic_ns)

    @staticmethod
    def sleep_until(t_ns: int) -> None:
        left = t_ns - time.monotonic_ns()
        if left > 0:
            time.sleep(left / 1e9)

    @staticmethod
    def idle(until_ns: int) -> None:
        sched_yield()

    @staticmethod
    def looked(until_ns: int) -> None:
        return None


REAL_CLOCK = RealClock()


class VirtualClock:
    """Time that moves only when the loop waits: to the wait's end or to the next completion
    the engine has due (``next_due_ns``, which the scripted engine sets), whichever is sooner,
    never back. Its time is ``word[0]``, which the compiled loop reads and moves too."""

    virtual = True

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.word: npt.NDArray[np.int64] = np.full(1, start_ns, dtype=np.int64)
        self._w = self.word.data  # plain ints: the Python loop reads it per I/O
        #: the engine's next completion's due time (None: no completion pending)
        self.next_due_ns: Callable[[], int | None] = lambda: None

    def now_ns(self) -> int:
        return self._w[0]

    def sleep_until(self, t_ns: int) -> None:
        due = self.next_due_ns()
        if due is not None and due < t_ns:
            t_ns = due
        if t_ns > self._w[0]:
            self._w[0] = t_ns

    def idle(self, until_ns: int) -> None:
        self.sleep_until(until_ns)

    def looked(self, until_ns: int) -> None:
        self.sleep_until(until_ns)


class Waiter:
    """The max-iops loops' wait for completions, called only when a look found none (so with
    I/Os in flight). It looks in the ring (yielding the core in between) for the first
    ``AWAIT_SPIN_NS`` and for a wait shorter than ``SLEEP_MIN_NS``, and blocks in the engine
    for the rest; but it looks first only while its recent waits were short (``mean_ns`` under
    ``AWAIT_SPIN_GATE_NS``): behind a slow device a look seldom finds anything and costs CPU.
    Unlike the compiled loop's (``await_choose``) it never measures blocking at once: its
    Python is its limit (docs/engine.md)."""

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
