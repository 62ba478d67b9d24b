"""An event loop whose idle waits take no time: a run of in-memory hosts (``memory``) without
the seconds it would spend asleep between its subintervals.

Owns ``WarpLoop`` (an asyncio loop whose clock is the monotonic clock plus the idle time it
skipped), ``run_warped`` (``asyncio.run`` on one) and ``loop_clock_ns`` (the running loop's
clock in nanoseconds: what a ``Run`` and its in-memory hosts are given as their clock, so that
they keep the loop's time, warped or not).

Time moves as it does on any loop while something runs (the master's and the in-memory
slaves' work takes its real time, and a stall is a stall); only a wait with nothing to wait
for is skipped. The loop jumps to its next timer when the selector has nothing ready at once,
no callback is due, no job it gave a thread (``run_in_executor``, ``asyncio.to_thread``) is
still out and no process it started (a gather command) is still running; it waits for real
when it has no timer at all. So it suits a run whose parties live in the loop or are its own
threads and processes: in-memory hosts, the master, its gather commands. A party it does not
know of, a thread or process of the caller's that answers in real time (an operator's
``ivypy edit``, a scraper of the metrics), is not waited for: such a run keeps an ordinary
loop.

Must not: change what a run decides, only how long its idle waits take; patch the time
module (pytest's own timing, and other threads, keep real time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_clock_ns() -> int:
    """The running loop's clock (``loop.time()``) in nanoseconds; outside a loop, the
    monotonic clock (which an ordinary loop's is)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return time.monotonic_ns()
    if isinstance(loop, WarpLoop):
        return loop.time_ns()
    return round(loop.time() * 1e9)


class _WarpSelector(selectors.DefaultSelector):
    """The loop's selector: a wait for a timer with nothing ready is a jump of the clock."""

    def __init__(self, loop: WarpLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0 or self._loop.waits_for_real():
            return super().select(timeout)
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if not ready:
            self._loop.skip(timeout)
        return ready


class WarpLoop(asyncio.SelectorEventLoop):
    """See the module docstring. ``skipped_s``: the idle time skipped so far."""

    def __init__(self) -> None:
        super().__init__(_WarpSelector(self))
        self._skipped_ns = 0
        #: jobs handed to threads and not yet back, and processes being started
        self._jobs_out = 0
        #: the processes started (``asyncio.create_subprocess_exec``), until each has exited
        self._children: list[asyncio.SubprocessTransport] = []

    def waits_for_real(self) -> bool:
        """Whether something outside the loop may still answer: a thread's job, or a process
        that has not exited (until then the loop's waits take their real time)."""
        self._children = [c for c in self._children if c.get_returncode() is None]
        return bool(self._jobs_out or self._children)

    @property
    def skipped_s(self) -> float:
        return self._skipped_ns / 1e9

    def skip(self, seconds: float) -> None:
        # a nanosecond over, so that the timer ``seconds`` away is due when the loop looks
        self._skipped_ns += int(seconds * 1e9) + 1

    def time_ns(self) -> int:
        return time.monotonic_ns() + self._skipped_ns

    def time(self) -> float:
        return self.time_ns() / 1e9

    def run_in_executor(  # type: ignore[override]
            self, executor: concurrent.futures.Executor | None, func: Callable[..., T],
            *args: Any) -> asyncio.Future[T]:
        fut = super().run_in_executor(executor, func, *args)
        self._jobs_out += 1

        def back(_: asyncio.Future[T]) -> None:
            self._jobs_out -= 1

        fut.add_done_callback(back)
        return fut

    async def _make_subprocess_transport(
            self, *args: Any, **kwargs: Any) -> asyncio.SubprocessTransport:
        # asyncio's one path to a child process (``subprocess_exec``, ``_shell``): counted
        # from before its fork, then watched until it has exited
        self._jobs_out += 1
        try:
            child: asyncio.SubprocessTransport = await (
                super()._make_subprocess_transport(*args, **kwargs))  # type: ignore[misc]
        finally:
            self._jobs_out -= 1
        self._children.append(child)
        return child


def run_warped(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a ``WarpLoop``."""
    with asyncio.Runner(loop_factory=WarpLoop) as runner:
        return runner.run(main)
