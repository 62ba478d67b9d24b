"""The run's hosts, spoken to together: every host's call at once, bounded, and given up on an
interrupt.

Owns the sessions of the run's hosts (``master.hosts.session.HostSession``, by host name, in
the test's order), the run's interrupt (SIGINT, SIGTERM) and how long anything is waited for
once it came: each call to all hosts (``to_hosts``), a subinterval's results by their deadline
(``results``), a step's stop and end, and the close. Must not decide what to send (the step
loop does) or write files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from master.hosts.session import HostSession
from protocol.errors import HostError, IvyError
from protocol.messages import Stopped, SubintervalResult

T = TypeVar("T")
log = logging.getLogger(__name__)
STOP_WAIT_S = 5.0
#: A master that comes to a subinterval's results after their deadline (its own work on the
#: subinterval before, or a controller whose CPUs were taken, held it) first reads for this
#: long what the hosts sent meanwhile: a result that waited in a pipe or socket unread is not
#: a late host. Reading and decoding what is there takes a few loop turns (milliseconds).
LATE_READ_S = 0.2
#: ... and so does one whose wait ended this long after the deadline: its event loop was held
#: up (a stall of the whole process, the controller's CPUs taken) as the deadline passed, so
#: what the hosts sent before it may still wait unread. A loop that runs wakes within a
#: millisecond or two.
LATE_WAKE_S = 0.05
#: Once interrupted (Ctrl-C, SIGTERM), the longest the run waits for anything of the hosts'
#: (a result, the end of the step, a start-up stage): the run exits within 3 s of the signal.
INTERRUPT_WAIT_S = 1.0


class Abandoned(Exception):
    """What is awaited is given up: the run was interrupted."""


class Interrupted(IvyError):
    """SIGINT or SIGTERM came during a stage that would not end by itself soon (connecting,
    the handshake, discovery, creating workloads): it was abandoned."""


class Fleet:
    """The run's hosts; see the module docstring."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.sessions: dict[str, HostSession] = {}
        self.interrupted = asyncio.Event()
        #: the steps in which the master came late to a subinterval's results (said once)
        self._late_in_step: set[int] = set()
        #: while ``results`` waits: the hosts that sent a result or failed since it last
        #: looked, and what wakes it
        self._arrivals: list[HostSession] = []
        self._wake: asyncio.Event | None = None

    def interrupt(self) -> None:
        """SIGINT or SIGTERM came: ``interrupted`` set, and a wait for results woken."""
        self.interrupted.set()
        if self._wake is not None:
            self._wake.set()

    def _arrived(self, hs: HostSession) -> None:
        self._arrivals.append(hs)
        if self._wake is not None:
            self._wake.set()

    def left_s(self, deadline_ns: int) -> float:
        """Seconds from now to ``deadline_ns`` (0 once past)."""
        return max(0.0, (deadline_ns - self.clock()) / 1e9)

    async def stop_all(self, after: int, timeout_s: float = STOP_WAIT_S) -> None:
        """``Stop`` after subinterval ``after`` to every host, each read within
        ``timeout_s``."""
        await self.to_hosts([(hs, hs.stop(after, timeout_s)) for hs in self.sessions.values()],
                            f"read the Stop after subinterval {after}")

    async def to_hosts(self, calls: Sequence[tuple[HostSession, Awaitable[T]]], what: str
                        ) -> list[T]:
        """Every host's call at once, each bounded by its session (what it sends by the
        deadline given, an answer by its request's timeout); the first ``HostError`` is
        raised and the other calls are cancelled. Once the run is interrupted (before or while
        they wait) the hosts get ``INTERRUPT_WAIT_S`` more: every one still busy then is marked
        failed (it did not ``what``), which ends its calls, and the first one's error raised."""
        tasks = [asyncio.ensure_future(aw) for _, aw in calls]
        every: asyncio.Future[list[T]] = asyncio.gather(*tasks)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.interrupted.wait())
        try:
            await asyncio.wait([every, stop], return_when=asyncio.FIRST_COMPLETED)
            if not every.done():  # interrupted
                await asyncio.wait([every], timeout=INTERRUPT_WAIT_S)
            if not every.done():
                stuck = [hs.mark_failed(f"did not {what} within {INTERRUPT_WAIT_S:g} s of the "
                                        "interrupt")
                         for (hs, _), t in zip(calls, tasks, strict=True) if not t.done()]
                raise stuck[0]
            return every.result()
        finally:
            stop.cancel()
            for t in tasks:
                t.cancel()
            # what the calls cut short end with is not wanted (nor logged as never retrieved)
            every.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def results(self, step: int, k: int, deadline: int, late_ms: float
                      ) -> list[SubintervalResult] | None:
        """Every host's result of subinterval ``k`` of step ``step``, due at ``deadline`` (on
        the master's clock, ``late_ms`` after the subinterval's end). A host late at the
        deadline is marked failed there and then (``HostError``; it is not waited for again).
        None when the run was interrupted and the results would come later than
        ``INTERRUPT_WAIT_S`` from now: the step ends without ``k``. A master that comes to
        look after the deadline, or whose wait ends ``LATE_WAKE_S`` or more after it (its loop
        held up), reads for ``LATE_READ_S`` first, and says how late it was (on the console
        the first time in a step): what the hosts sent by then counts, as the master could
        not read it before."""
        behind_ns = self.clock() - deadline
        read_late = behind_ns > 0  # the master's own lateness: the hosts get LATE_READ_S
        if read_late:
            deadline = self._late(step, k, "came to", behind_ns)

        # one wait for every host (a task and three futures a host, each subinterval, cost
        # 0.1 s of the master's CPU at 1,000 hosts): a session tells ``_arrived`` of a result
        # or its failure, and only those are looked at again
        sessions = list(self.sessions.values())
        got: dict[str, SubintervalResult] = {}
        wake = self._wake = asyncio.Event()
        self._arrivals = []
        for hs in sessions:
            hs.arrived = self._arrived
        try:
            look = sessions
            while True:
                for hs in look:
                    if hs.host in got:
                        continue
                    if not hs.results.empty():
                        r = hs.results.get_nowait()
                        if r.step != step or r.subinterval != k:
                            raise HostError(f"sent result of step {r.step} subinterval "
                                            f"{r.subinterval}, expected step {step} "
                                            f"subinterval {k}", host=hs.host)
                        got[hs.host] = r
                    elif hs.failure is not None:
                        raise hs.failure
                if len(got) == len(sessions):
                    return [got[hs.host] for hs in sessions]
                left_s = (deadline - self.clock()) / 1e9
                if self.interrupted.is_set() and left_s > INTERRUPT_WAIT_S:
                    return None  # near the deadline, the results still count
                if left_s <= 0 and not read_late and -left_s >= LATE_WAKE_S:
                    read_late = True  # it woke late: held up as the deadline passed
                    deadline = self._late(step, k, "woke to", round(-left_s * 1e9))
                    left_s = (deadline - self.clock()) / 1e9
                if left_s <= 0:
                    late = [hs.mark_failed(f"result of subinterval {k} not received within "
                                           f"the deadline ({late_ms:.0f} ms after its end)")
                            for hs in sessions if hs.host not in got]
                    raise late[0]
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left_s):
                        await wake.wait()
                look, self._arrivals = self._arrivals, []
        finally:
            self._wake = None
            for hs in sessions:
                hs.arrived = None

    def _late(self, step: int, k: int, how: str, behind_ns: int) -> int:
        """The master ``how`` (came to, woke to) subinterval ``k``'s results ``behind_ns``
        after their deadline: said (on the console once a step: a master that cannot keep up
        would say it every subinterval; every time in run.log); the deadline of the reading
        that comes first."""
        level = logging.INFO if step in self._late_in_step else logging.WARNING
        self._late_in_step.add(step)
        log.log(level, "step %d subinterval %d: the master %s its results %.0f ms after their "
                "deadline (its own work, or the controller's CPUs taken); what the hosts sent "
                "meanwhile is read before any is judged late", step, k, how, behind_ns / 1e6)
        return self.clock() + round(LATE_READ_S * 1e9)

    async def abort_step(self) -> None:
        """A step failed: ``Stop`` to every healthy host, and their ``Stopped`` (those that
        do not confirm are not waited for beyond ``STOP_WAIT_S``)."""
        async def stop(hs: HostSession) -> None:
            with contextlib.suppress(IvyError, OSError):  # a host failing now is not waited for
                await hs.stop(-1, STOP_WAIT_S)

        with contextlib.suppress(IvyError):
            await self.to_hosts([(hs, stop(hs)) for hs in self.sessions.values()
                                 if hs.failure is None], "read the Stop that ends the step")
        await self.wait_stopped(healthy_only=True)

    async def wait_stopped(self, healthy_only: bool = False) -> dict[str, Stopped]:
        """Every healthy host's ``Stopped`` (returned by host); one that does not confirm
        within ``STOP_WAIT_S`` (``INTERRUPT_WAIT_S`` once interrupted, when it is marked
        failed and not waited for again) fails the step, unless ``healthy_only``."""
        interrupted = self.interrupted.is_set()
        got: dict[str, Stopped] = {}

        async def one(hs: HostSession) -> None:
            if hs.failure is not None:
                return
            wait_s = INTERRUPT_WAIT_S if interrupted else STOP_WAIT_S
            stopped = await hs.wait_stopped(wait_s)
            if stopped is not None:
                got[hs.host] = stopped
            elif interrupted:
                hs.mark_failed(f"did not confirm the end of the step within {wait_s:.0f} s "
                               "of the interrupt")
            elif not healthy_only:
                raise HostError("did not confirm the end of the step", host=hs.host)

        await asyncio.gather(*(one(hs) for hs in self.sessions.values()))
        return got

    async def close_all(self, grace_s: float = 2.0) -> None:
        await asyncio.gather(*(hs.close(grace_s) for hs in self.sessions.values()),
                             return_exceptions=True)

    async def or_interrupted(self, aw: Awaitable[Any], stage: str) -> Any:
        """``aw``'s result, or ``Interrupted`` as soon as SIGINT/SIGTERM comes (``aw`` is
        cancelled): connecting to a host that never answers waits for no timeout."""
        task = asyncio.ensure_future(aw)
        stop = asyncio.ensure_future(self.interrupted.wait())
        try:
            await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            raise Interrupted(f"interrupted while {stage}")
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
