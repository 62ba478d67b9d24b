"""``master.run.fleet``: a subinterval's results by their deadline, and a master that comes to
look after it (its own work, or a controller whose CPUs were taken, held it up)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from master.run import fleet as fleet_mod
from master.run.fleet import Fleet
from protocol.errors import HostError

MS = 1_000_000


class _Host:
    """What ``Fleet.results`` reads of a host's session: its results as its reader decoded
    them, and its failure."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.results: asyncio.Queue[Any] = asyncio.Queue()
        self.failed = asyncio.Event()
        self.failure: HostError | None = None
        self.arrived: Any = None

    def mark_failed(self, why: str) -> HostError:
        self.failure = HostError(why, host=self.host)
        self.failed.set()
        if self.arrived is not None:
            self.arrived(self)
        return self.failure

    def put(self, result: Any) -> None:
        """A result as the session's reader puts it: queued, and the waiter told."""
        self.results.put_nowait(result)
        if self.arrived is not None:
            self.arrived(self)

    def arrives(self, k: int, *, turns: int = 0, after_s: float = 0.0) -> None:
        """Subinterval ``k``'s result reaches the queue ``after_s`` from now, then ``turns``
        loop turns later (as a reader reads and decodes what waited in its pipe)."""
        loop = asyncio.get_running_loop()

        def hop(left: int) -> None:
            if left:
                loop.call_soon(hop, left - 1)
            else:
                self.put(SimpleNamespace(step=0, subinterval=k))

        loop.call_later(after_s, hop, turns)


def _fleet(*names: str) -> tuple[Fleet, list[_Host]]:
    fleet = Fleet(time.monotonic_ns)
    hosts = [_Host(name) for name in names]
    fleet.sessions = {h.host: h for h in hosts}  # type: ignore[misc]
    return fleet, hosts


@pytest.mark.parametrize(("case", "deadline_ms", "arrives_ms", "turns", "received"), [
    # the master on time: a result before the deadline counts, one after it fails the host
    ("on time, in time", 300, 10, 0, True),
    ("on time, late", 100, 1500, 0, False),  # (a wait held up past it gets LATE_READ_S)
    # the master comes after the deadline: what the host sent meanwhile waits in its pipe and
    # takes a few loop turns to read; it counts. One that comes after the reading does not
    ("master late, result waiting", -500, 0, 5, True),
    ("master late, result already read", -500, -1, 0, True),
    ("master late, nothing sent", -500, None, 0, False),
    ("master late, result after the reading", -500, 1000 * fleet_mod.LATE_READ_S + 400, 0,
     False),
])
def test_a_result_counts_when_the_master_could_read_it_by_the_deadline(
        case: str, deadline_ms: float, arrives_ms: float | None, turns: int, received: bool,
        caplog: pytest.LogCaptureFixture) -> None:
    got, said = _subinterval_3(deadline_ms, arrives_ms, turns, None, caplog)
    _judged(got, received, case)
    if deadline_ms < 0:
        assert len(said) == 1 and said[0].startswith(
            "step 0 subinterval 3: the master came to its results 5"), said  # ~500 ms late
        assert "what the hosts sent meanwhile is read before any is judged late" in said[0]
    else:
        assert said == [], said


@pytest.mark.parametrize(("case", "arrives_ms", "received"), [
    ("a result sent as the loop stalled", 90, True),
    ("nothing sent", None, False),
    ("a result sent after the reading", 300 + 1000 * fleet_mod.LATE_READ_S + 500, False),
])
def test_a_wait_held_up_past_its_deadline_reads_what_the_hosts_sent_first(
        case: str, arrives_ms: float | None, received: bool,
        caplog: pytest.LogCaptureFixture) -> None:
    """The master waits in time, but its loop is held up (the whole process stalled) from
    before the deadline (100 ms) to 300 ms after it: a result the host sent meanwhile, still
    a few loop turns from being read, counts; the lateness is the master's and said so."""
    got, said = _subinterval_3(100, arrives_ms, 3, (0.08, 0.32), caplog)
    _judged(got, received, case)
    assert len(said) == 1 and said[0].startswith(
        "step 0 subinterval 3: the master woke to its results "), said


def _subinterval_3(deadline_ms: float, arrives_ms: float | None, turns: int,
                   stall: tuple[float, float] | None, caplog: pytest.LogCaptureFixture
                   ) -> tuple[list[Any] | HostError | None, list[str]]:
    """One host's subinterval 3 due ``deadline_ms`` from now (negative: the master comes
    late), its result queued already (``arrives_ms`` < 0) or arriving then, ``turns`` loop
    turns from being read; the loop held up (``stall``: from, for how long, in s). What
    ``Fleet.results`` gave, and what it said."""
    async def main() -> list[Any] | HostError | None:
        fleet, (h1,) = _fleet("h1")
        if arrives_ms is not None and arrives_ms < 0:
            h1.results.put_nowait(SimpleNamespace(step=0, subinterval=3))
        elif arrives_ms is not None:
            h1.arrives(3, turns=turns, after_s=arrives_ms / 1000)
        if stall is not None:
            asyncio.get_running_loop().call_later(stall[0], time.sleep, stall[1])
        deadline = time.monotonic_ns() + round(deadline_ms * MS)
        try:
            return await fleet.results(0, 3, deadline, 750.0)
        except HostError as exc:
            return exc

    with caplog.at_level(logging.WARNING, logger="master.run.fleet"):
        got = asyncio.run(main())
    return got, [r.getMessage() for r in caplog.records]


def _judged(got: list[Any] | HostError | None, received: bool, case: str) -> None:
    if received:
        assert isinstance(got, list) and [r.subinterval for r in got] == [3], case
    else:
        assert isinstance(got, HostError), (case, got)
        assert "result of subinterval 3 not received within the deadline (750 ms after its " \
               "end)" in str(got), got


def test_a_late_master_judges_each_host_on_what_it_sent() -> None:
    """Two hosts, the master 500 ms late: the one whose result waited is read, the one that
    sent nothing is the one named."""
    async def main() -> HostError | list[Any] | None:
        fleet, (h1, h2) = _fleet("h1", "h2")
        h1.arrives(0, turns=3)
        try:
            return await fleet.results(0, 0, time.monotonic_ns() - 500 * MS, 750.0)
        except HostError as exc:
            assert h1.failure is None and h2.failure is exc
            return exc

    got = asyncio.run(main())
    assert isinstance(got, HostError) and got.host == "h2", got


def test_a_master_late_in_every_subinterval_says_so_on_the_console_once_a_step(
        caplog: pytest.LogCaptureFixture) -> None:
    """Late to three subintervals of step 0 and one of step 1: a warning the first time in
    each step, the others in run.log only (INFO)."""
    async def main() -> None:
        fleet, (h1,) = _fleet("h1")
        for step, k in ((0, 0), (0, 1), (0, 2), (1, 0)):
            h1.results.put_nowait(SimpleNamespace(step=step, subinterval=k))
            got = await fleet.results(step, k, time.monotonic_ns() - 100 * MS, 750.0)
            assert got is not None and got[0].subinterval == k

    with caplog.at_level(logging.INFO, logger="master.run.fleet"):
        asyncio.run(main())
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records] == [
        (logging.WARNING, "step 0 subinterval 0"), (logging.INFO, "step 0 subinterval 1"),
        (logging.INFO, "step 0 subinterval 2"), (logging.WARNING, "step 1 subinterval 0")]


@pytest.mark.parametrize(("case", "want"), [
    ("every result", "results"),
    ("one fails while the others wait", "h2 failed"),
    ("a result of another subinterval", "h1 wrong"),
    ("interrupted far from the deadline", "abandoned"),
    ("interrupted near the deadline, the results come", "results"),
    ("two late", "h2 late, h3 late"),
])
def test_one_wait_for_every_host(case: str, want: str) -> None:
    """Three hosts: the wait ends as soon as the last result came, a host failed, or an
    interrupt came with more than ``INTERRUPT_WAIT_S`` to go; at the deadline every host still
    missing is marked failed."""
    async def main() -> str:
        fleet, (h1, h2, h3) = _fleet("h1", "h2", "h3")
        loop = asyncio.get_running_loop()
        deadline_s = {"interrupted near the deadline, the results come": 0.5,
                      "two late": 0.3}.get(case, 30.0)
        if case != "a result of another subinterval":
            h1.arrives(4, after_s=0.01)
        if case == "one fails while the others wait":
            loop.call_later(0.05, h2.mark_failed, "gone")
        elif case == "a result of another subinterval":
            loop.call_later(0.02, h1.put, SimpleNamespace(step=0, subinterval=3))
        elif case.startswith("interrupted"):
            loop.call_later(0.05, fleet.interrupt)
        if case != "two late" and case != "one fails while the others wait":
            h2.arrives(4, after_s=0.1)
            h3.arrives(4, after_s=0.15, turns=2)
        t0 = time.monotonic()
        try:
            got = await fleet.results(0, 4, time.monotonic_ns() + round(deadline_s * 1e9), 750)
        except HostError as exc:
            failed = [h.host for h in (h1, h2, h3) if h.failure is not None]
            if "not received" in str(exc):
                return ", ".join(f"{h} late" for h in failed)
            return f"{exc.host} {'wrong' if 'expected' in str(exc) else 'failed'}"
        finally:
            assert time.monotonic() - t0 < deadline_s + 1  # never the whole 30 s
            assert all(h.arrived is None for h in (h1, h2, h3))
        if got is None:
            return "abandoned"
        assert [r.subinterval for r in got] == [4, 4, 4]
        return "results"

    assert asyncio.run(main()) == want
