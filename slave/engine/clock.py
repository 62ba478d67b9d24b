"""The engine loop's time: one clock object that the loop's parts share (``EngineLoop``,
``Slots``, ``Waiter``) and take every timestamp from and every wait through.

Owns ``Clock`` (the interface), ``RealClock`` (the monotonic clock, real sleeps and yields:
every engine that does I/O) and ``VirtualClock`` (the scripted fake engine's: time that only
a wait moves, to the wait's end or to the engine's next completion, whichever is sooner, so
that a run is a function of its script; the compiled loop reads and moves the same word). It
must not reap, submit or decide anything: a wait here only passes time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from os import sched_yield
from typing import Protocol

import numpy as np
import numpy.typing as npt


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
        """A look found nothing and the loop looks again at once, waiting for ``until_ns``:
        nothing on a real clock (the look was the wait); a virtual clock, which no look
        moves, moves on as ``sleep_until``."""


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
    never back. Its time is the word ``word[0]``, whose address the compiled loop is given."""

    virtual = True

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.word: npt.NDArray[np.int64] = np.full(1, start_ns, dtype=np.int64)
        #: the engine's next completion's due time (None: no completion pending)
        self.next_due_ns: Callable[[], int | None] = lambda: None

    def now_ns(self) -> int:
        return int(self.word[0])

    def sleep_until(self, t_ns: int) -> None:
        due = self.next_due_ns()
        if due is not None and due < t_ns:
            t_ns = due
        if t_ns > self.word[0]:
            self.word[0] = t_ns

    def idle(self, until_ns: int) -> None:
        self.sleep_until(until_ns)

    def looked(self, until_ns: int) -> None:
        self.sleep_until(until_ns)
