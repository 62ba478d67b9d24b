"""The master's side of one host (``master.hosts.session``) over an in-memory connection whose
slave answers from a script: how the end of the slave's output is judged."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from master.hosts import session as hostsession
from master.hosts.session import HostSession
from protocol.codec import FrameDecoder, encode
from protocol.errors import HostError
from protocol.messages import (
    Ack,
    Bye,
    DiscoverLuns,
    Error,
    Hello,
    HelloReply,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    VerifyFound,
    VerifyLun,
)
from protocol.state import Conversation, Role, State
from protocol.version import PROTOCOL_VERSION

REPLY = HelloReply(PROTOCOL_VERSION, "0.1.0", "h", "6.1", "3.11", "1.24", 2, 9, 5, "compiled")

# what the scripted slave writes after its answer to a message (then, with ``eof``, it ends)
Extra = Callable[[Message], bytes]


class ScriptedSlave:
    """A ``Connection`` whose slave answers Hello, Ping and Bye as a slave does; ``after``
    may add bytes behind an answer and ``eof_after`` end the output there."""

    def __init__(self, after: Extra = lambda m: b"",
                 eof_after: type[Message] | None = None) -> None:
        self.host = "h1"
        self.conv = Conversation(Role.SLAVE)
        self.out: asyncio.Queue[bytes] = asyncio.Queue()
        self.after = after
        self.eof_after = eof_after

    async def write(self, data: bytes) -> None:
        for msg in self.conv.receive_data(data):  # the master writes one frame at a time
            if isinstance(msg, Hello):
                answer = self.conv.send(REPLY)
            elif isinstance(msg, Ping):
                answer = self.conv.send(Pong(msg.seq, msg.master_send_ns, 7))
            elif isinstance(msg, Bye):
                answer = self.conv.send(Bye("master said bye"))
            else:
                raise AssertionError(f"unexpected {msg}")
            self.out.put_nowait(answer + self.after(msg))
            if isinstance(msg, self.eof_after or ()):
                self.out.put_nowait(b"")

    async def read(self) -> bytes:
        return await self.out.get()

    async def close(self, grace_s: float = 2.0) -> int | None:
        self.out.put_nowait(b"")
        return 0

    def stderr_tail(self) -> str:
        return "last words"


def _run(conn: ScriptedSlave) -> HostSession:
    """Handshake (one ping), then, unless the slave's output ends by itself, say bye."""

    async def scenario() -> HostSession:
        hs = HostSession(conn, "h1")
        await hs.start(pings=1)
        if conn.eof_after is not Bye:
            await asyncio.wait_for(hs.failed.wait(), 5)
        await hs.close(grace_s=1)
        return hs

    return asyncio.run(asyncio.wait_for(scenario(), 10))


def test_the_end_after_the_slaves_bye_is_clean() -> None:
    hs = _run(ScriptedSlave(eof_after=Bye))
    assert hs.failure is None and hs.conv.state is State.CLOSED


def test_output_ending_inside_a_frame_after_bye_is_a_protocol_error() -> None:
    frame = encode(Pong(1, 2, 3))
    hs = _run(ScriptedSlave(after=lambda m: frame[:9] if isinstance(m, Bye) else b"",
                            eof_after=Bye))
    assert isinstance(hs.failure, HostError) and hs.failure.host == "h1"
    assert "protocol error: the slave's output ended inside a frame (9 bytes of it " \
        "received)" in str(hs.failure)
    assert hs.failure.stderr_tail == "last words"


def test_output_ending_inside_a_frame_mid_conversation_is_a_protocol_error() -> None:
    hs = _run(ScriptedSlave(after=lambda m: b"IV\x05" if isinstance(m, Ping) else b"",
                            eof_after=Ping))
    assert isinstance(hs.failure, HostError)
    assert "protocol error: the slave's output ended inside a frame (3 bytes of it " \
        "received)" in str(hs.failure)


def test_output_ending_between_frames_mid_conversation_is_a_lost_slave() -> None:
    hs = _run(ScriptedSlave(eof_after=Ping))
    assert isinstance(hs.failure, HostError)
    assert "the slave ended its output unexpectedly" in str(hs.failure)


def test_a_fatal_protocol_error_from_the_slave_is_a_host_failure() -> None:
    fatal = Conversation(Role.SLAVE)
    fatal.state = State.IDLE
    frame = fatal.send(Error(kind="protocol", message="stream ended inside a frame", fatal=True))
    hs = _run(ScriptedSlave(after=lambda m: frame if isinstance(m, Ping) else b"",
                            eof_after=Ping))
    assert isinstance(hs.failure, HostError)
    assert "slave failed (protocol): stream ended inside a frame" in str(hs.failure)


class _Counting(ScriptedSlave):
    """Counts the master's pings after the handshake; its close may hang for good."""

    def __init__(self, close_hangs: bool = False) -> None:
        super().__init__()
        self.pings = 0
        self.close_hangs = close_hangs
        self.close_grace: float | None = None
        self.frames = FrameDecoder()

    async def write(self, data: bytes) -> None:
        self.pings += sum(isinstance(m, Ping) for m in self.frames.feed(data))
        await super().write(data)

    async def close(self, grace_s: float = 2.0) -> int | None:
        self.close_grace = grace_s
        if self.close_hangs:
            await asyncio.sleep(3600)  # an SSH kill over a cut link
        return await super().close(grace_s)


@pytest.mark.parametrize(("watchdog_s", "keepalive_s"), [
    (1.0, 0.25),  # the least watchdog_seconds: pinged well within it
    (30.0, 7.5),  # the default: a step of 5 s subintervals needs no ping, its grants do
    (120.0, 30.0),
    (3600.0, 30.0),  # never silent longer than KEEPALIVE_MAX_S (a firewall's idle timer)
])
def test_the_keepalive_is_a_quarter_of_the_watchdog_and_at_most_30s(
        watchdog_s: float, keepalive_s: float) -> None:
    assert hostsession.keepalive_s(watchdog_s) == keepalive_s
    assert HostSession(_Counting(), "h1", watchdog_s=watchdog_s).keepalive_s == keepalive_s


def test_a_quiet_master_pings_its_slave_every_keepalive_period() -> None:
    """The slave's watchdog takes a master that says nothing for long for gone: an idle master
    (between steps, waiting on another host) says Ping every quarter of the host's watchdog,
    and stops at close."""
    conn = _Counting()

    async def scenario() -> tuple[int, int]:
        hs = HostSession(conn, "h1", watchdog_s=0.2)
        await hs.start(pings=1)
        at_start = conn.pings
        await asyncio.sleep(0.5)
        idle = conn.pings - at_start
        await hs.close(grace_s=1)
        after = conn.pings
        await asyncio.sleep(0.2)
        assert conn.pings == after, "pings after close"
        return at_start, idle

    at_start, idle = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert at_start == 1  # the handshake's one
    assert 5 <= idle <= 12, idle


def test_a_host_marked_failed_is_closed_at_once_even_when_its_close_hangs() -> None:
    """A host late at its deadline is not waited for: closing it takes the short grace and is
    cut off at ``FAILED_CLOSE_LIMIT_S`` (its watchdog ends a slave out of reach)."""
    conn = _Counting(close_hangs=True)

    async def scenario() -> float:
        hs = HostSession(conn, "h1")
        await hs.start(pings=1)
        err = hs.mark_failed("result of subinterval 3 not received within the deadline")
        assert hs.failure is err and hs.failed.is_set() and err.host == "h1"
        t0 = time.monotonic()
        await hs.close(grace_s=2)
        return time.monotonic() - t0

    took = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert conn.close_grace == hostsession.FAILED_CLOSE_GRACE_S
    assert took <= hostsession.FAILED_CLOSE_LIMIT_S + 0.3, took


class _Link(ScriptedSlave):
    """Each ping's round trip takes the next of ``rtts_ns`` on the session's clock (the last
    one repeats); ``clock`` is that clock."""

    def __init__(self, rtts_ns: list[int]) -> None:
        super().__init__()
        self.rtts_ns = rtts_ns
        self.now = 1_000_000_000
        self.pings = 0
        self.frames = FrameDecoder()

    def clock(self) -> int:
        return self.now

    async def write(self, data: bytes) -> None:
        for m in self.frames.feed(data):
            if isinstance(m, Ping):
                self.now += self.rtts_ns[min(self.pings, len(self.rtts_ns) - 1)]
                self.pings += 1
        await super().write(data)


MS = 1_000_000


@pytest.mark.parametrize("rtts_ns, limit_ns, pings, uncertainty_ns", [
    ([100_000], MS, 9, 50_000),  # a good link: the usual nine
    ([4 * MS], None, 9, 2 * MS),  # no limit: the usual nine
    ([4 * MS] * 9 + [3 * MS, 1_500_000], MS, 11, 750_000),  # until it is within the limit
    ([4 * MS], MS, hostsession.MAX_PINGS, 2 * MS),  # never within: up to MAX_PINGS
    ([2 * MS + 1], MS, hostsession.MAX_PINGS, MS + 1),  # half the RTT, rounded up
    ([2 * MS], MS, 9, MS),  # at the limit is within it
])
def test_the_clock_is_pinged_again_while_its_offset_is_uncertain(
        rtts_ns: list[int], limit_ns: int | None, pings: int, uncertainty_ns: int) -> None:
    link = _Link(rtts_ns)

    async def scenario() -> HostSession:
        hs = HostSession(link, "h1", clock=link.clock)
        await hs.start(uncertainty_limit_ns=limit_ns)
        await hs.close(grace_s=0.1)
        return hs

    hs = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert len(hs.clock_samples) == pings
    assert hs.offset_uncertainty_ns == uncertainty_ns
    assert hs.rtt_ns == min(s.rtt_ns for s in hs.clock_samples)


def test_the_clock_pings_wait_for_the_masters_start_up() -> None:
    """The handshake goes ahead at once; the pings wait until ``before_pings`` is set (the
    master's rollup kernels loading would lengthen their round trips)."""
    seen: list[type[Message]] = []
    conn = ScriptedSlave(after=lambda m: seen.append(type(m)) or b"")

    async def scenario() -> None:
        hs = HostSession(conn, "h1")
        ready = asyncio.Event()
        start = asyncio.ensure_future(hs.start(pings=2, before_pings=ready))
        for _ in range(200):
            await asyncio.sleep(0)
        assert hs.hello == REPLY and seen == [Hello] and not start.done()
        ready.set()
        assert await asyncio.wait_for(start, 5) == REPLY
        assert seen == [Hello, Ping, Ping] and len(hs.clock_samples) == 2
        await hs.close(grace_s=1)

    asyncio.run(asyncio.wait_for(scenario(), 10))


class _StopsReading(ScriptedSlave):
    """Once ``stopped``, the slave reads nothing: a write waits (its pipe is full) until the
    connection is closed, or 10 s (then the test fails rather than hangs)."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False
        self.closed = asyncio.Event()

    async def write(self, data: bytes) -> None:
        if self.stopped:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closed.wait(), 10)
            return
        await super().write(data)

    async def close(self, grace_s: float = 2.0) -> int | None:
        self.closed.set()
        return await super().close(grace_s)


def test_a_write_the_slave_does_not_take_is_bounded_and_ends_when_the_host_fails() -> None:
    """A ``Continue`` the slave does not take within its timeout fails the host, naming it; a
    request's send is bounded by its own timeout; a write waiting when the host is failed for
    another reason ends at once; the Bye at close waits no longer than the grace."""

    async def scenario() -> None:
        for case in ("timeout", "request", "failed", "close"):
            conn = _StopsReading()
            hs = HostSession(conn, "h1")
            await hs.start(pings=1)
            conn.stopped = True
            t0 = time.monotonic()
            if case == "timeout":
                with pytest.raises(HostError, match=r"^host h1: did not read what the master "
                                   r"sent for 0\.3 s \(Continue\)"):
                    await hs.grant(3, timeout_s=0.3)
                assert hs.failure is not None
            elif case == "request":
                with pytest.raises(HostError, match=r"did not read what the master sent for "
                                   r"0\.2 s \(EditWorkloads\)"):
                    await hs.edit_many([("w", {"iops": 1.0})], send_timeout_s=0.2)
            elif case == "failed":
                send = asyncio.ensure_future(hs.grant(3, timeout_s=60))
                await asyncio.sleep(0.1)
                hs.mark_failed("result of subinterval 2 not received within the deadline")
                with pytest.raises(HostError, match="subinterval 2 not received"):
                    await asyncio.wait_for(send, 1)
            took = time.monotonic() - t0
            await hs.close(grace_s=0.3)
            assert time.monotonic() - t0 < took + 2.0, case
            assert took < 0.6, (case, took)

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("case", ["cancelled", "failed, both waiting", "failed and cancelled"])
def test_a_waiting_write_ends_as_its_sender_is_cancelled_or_its_host_fails(case: str) -> None:
    """Writes wait in their senders' own tasks: a sender cancelled (a call to every host cut
    short) gets its cancel and leaves the host as it was; a host that fails ends every write
    waiting for it with its failure; a sender both cancelled and ended by the failure is
    cancelled (the failure does not swallow a cancel)."""

    async def scenario() -> None:
        conn = _StopsReading()
        hs = HostSession(conn, "h1")
        await hs.start(pings=1)
        conn.stopped = True
        sends = [asyncio.ensure_future(hs.grant(3, timeout_s=60)) for _ in range(2)]
        await asyncio.sleep(0.05)
        if case == "cancelled":
            sends[0].cancel()
            with pytest.raises(asyncio.CancelledError):
                await sends[0]
            assert hs.failure is None and not sends[1].done()
            hs.mark_failed("gone")
            with pytest.raises(HostError, match="gone"):
                await asyncio.wait_for(sends[1], 1)
        elif case == "failed, both waiting":
            hs.mark_failed("result of subinterval 2 not received within the deadline")
            for send in sends:
                with pytest.raises(HostError, match="subinterval 2 not received"):
                    await asyncio.wait_for(send, 1)
        else:
            hs.mark_failed("gone")
            sends[0].cancel()
            with pytest.raises(asyncio.CancelledError):
                await sends[0]
            with pytest.raises(HostError, match="gone"):
                await asyncio.wait_for(sends[1], 1)
        assert not hs._senders
        await hs.close(grace_s=0.3)

    asyncio.run(asyncio.wait_for(scenario(), 30))


class TalkingSlave(ScriptedSlave):
    """A slave that answers a long request (``VerifyLun`` or ``DiscoverLuns``) with ``words``
    messages as it goes (``VerifyFound`` or a layout's ``Log``), each one second after the one
    before on the master's clock (``now``, which it moves), then its answer (``Ack`` or
    ``LunList``), or (``silent``) a minute of silence."""

    def __init__(self, words: int, silent: bool) -> None:
        super().__init__()
        self.words, self.silent = words, silent
        self.now = 0

    def clock(self) -> int:
        return self.now

    async def write(self, data: bytes) -> None:
        for msg in FrameDecoder().feed(data):
            if isinstance(msg, VerifyLun | DiscoverLuns):
                self.conv.receive(msg)
                asyncio.get_running_loop().create_task(self._answer(msg))
                return
        await super().write(data)

    async def _answer(self, msg: VerifyLun | DiscoverLuns) -> None:
        seq = msg.seq
        for k in range(self.words):
            await asyncio.sleep(0.01)
            self.now += 1_000_000_000
            self.out.put_nowait(self.conv.send(
                VerifyFound(seq, k + 1, 9, 4096 * (k + 1), b"") if isinstance(msg, VerifyLun)
                else Log("INFO", f"layout of file LUN /f: {k + 1} %", self.now,
                         {"kind": "layout", "lun": "/f"})))
        await asyncio.sleep(0.01)
        if self.silent:
            self.now += 60_000_000_000
        elif isinstance(msg, VerifyLun):
            self.out.put_nowait(self.conv.send(Ack(seq, -1, {"blocks_checked": 9})))
        else:
            self.out.put_nowait(self.conv.send(LunList(seq, [])))


def _talk(conn: TalkingSlave, ask: Callable[[HostSession], Awaitable[Any]]) -> Any:
    """``ask`` of a session of ``conn``: its answer, or the ``HostError`` it raised."""

    async def scenario() -> Any:
        hs = HostSession(conn, "h1", clock=conn.clock)
        await hs.start(pings=1)
        try:
            return await ask(hs)
        except HostError as exc:
            return exc
        finally:
            await hs.close(grace_s=0.2)

    return asyncio.run(asyncio.wait_for(scenario(), 20))


def _read_back(conn: TalkingSlave) -> tuple[Message | BaseException, list[int]]:
    """``verify_lun`` against ``conn``, 1.5 s of silence allowed (on its clock)."""
    heard: list[int] = []
    got = _talk(conn, lambda hs: hs.verify_lun("/dev/x", {"lun": 0}, 0,
                                               lambda m: heard.append(m.blocks_done), 1.5))
    return got, heard


def test_a_read_back_is_heard_as_it_goes_and_ends_on_its_answer() -> None:
    # five words a second apart: none 1.5 s after the one before, though the whole takes 5 s
    got, heard = _read_back(TalkingSlave(5, silent=False))
    assert isinstance(got, Ack) and got.info == {"blocks_checked": 9} and heard == [1, 2, 3, 4, 5]


def test_a_read_back_that_falls_silent_fails_its_host() -> None:
    got, heard = _read_back(TalkingSlave(2, silent=True))
    assert isinstance(got, HostError) and heard == [1, 2]
    assert "no word of the read-back of /dev/x for 1.5 s" in str(got)


# a layout of 16 MiB: its progress, not its size, keeps the host alive (a deadline of the
# size at 20 MB/s would have ended 2.3 s in)
FILES = [{"path": "/f", "size_bytes": 16 << 20, "create": True, "layout": "random"},
         {"path": "/g", "size_bytes": 1 << 30, "create": True, "layout": "none"}]


def test_a_discovery_that_lays_out_is_waited_for_while_it_tells_its_progress(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # five progress lines a second apart with 1.5 s of silence allowed: the whole 5 s is
    # waited for, as a layout at any pace the disk keeps is
    monkeypatch.setattr(hostsession, "REQUEST_TIMEOUT_S", 1.5)
    events: list[str] = []
    conn = TalkingSlave(5, silent=False)

    async def ask(hs: HostSession) -> Any:
        hs.on_event = lambda ev: events.append(ev.message)
        return await hs.discover(FILES, [])

    assert _talk(conn, ask) == []
    assert events == [f"layout of file LUN /f: {k} %" for k in range(1, 6)]


def test_a_discovery_that_falls_silent_fails_its_host_naming_the_layout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostsession, "REQUEST_TIMEOUT_S", 1.5)
    got = _talk(TalkingSlave(2, silent=True), lambda hs: hs.discover(FILES, []))
    assert isinstance(got, HostError) and got.host == "h1"
    assert ("no word while the slave discovered its LUNs (laying out up to 1 file, "
            "0.02 GiB) for 1.5 s") in str(got)
