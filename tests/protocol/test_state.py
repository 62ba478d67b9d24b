"""The legal order of messages, exercised on an in-memory connection pair (h11 style)."""

from __future__ import annotations

import pytest

from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DiscoverLuns,
    EditWorkloads,
    Error,
    Go,
    Hello,
    HelloReply,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    Stopped,
    SubintervalResult,
    WindowRequest,
    WindowResult,
)
from protocol.state import TRANSITIONS, Conversation, Role, State
from protocol.version import PROTOCOL_VERSION


class Pair:
    """A master and a slave conversation joined in memory."""

    def __init__(self) -> None:
        self.master = Conversation(Role.MASTER, host="h1")
        self.slave = Conversation(Role.SLAVE)

    def m(self, msg: Message) -> list[Message]:
        return self.slave.receive_data(self.master.send(msg))

    def s(self, msg: Message) -> list[Message]:
        return self.master.receive_data(self.slave.send(msg))

    def states(self) -> tuple[State, State]:
        return self.master.state, self.slave.state


HELLO = Hello(PROTOCOL_VERSION, "0.1.0", "h1", 1)
REPLY = HelloReply(PROTOCOL_VERSION, "0.1.0", "h", "6.1", "3.11", "1.24", 2, 9, 5, "compiled")
RESULT = SubintervalResult(0, 0, 0, 1, [], [], {}, [], 2)


def test_full_conversation() -> None:
    p = Pair()
    script: list[tuple[str, Message, State]] = [
        ("m", HELLO, State.HELLO),
        ("s", REPLY, State.IDLE),
        ("m", Ping(1, 10), State.IDLE),
        ("s", Pong(1, 10, 20), State.IDLE),
        ("m", DiscoverLuns(2), State.IDLE),
        ("s", LunList(2, [{"path": "/dev/loop0"}]), State.IDLE),
        ("m", CreateWorkload(3, "h1:/dev/loop0:rr", "/dev/loop0", {"iops": None}), State.IDLE),
        ("s", Ack(3), State.IDLE),
        ("m", Go(0, 100, 10), State.RUNNING),
        ("s", RESULT, State.RUNNING),
        ("m", Continue(2), State.RUNNING),
        ("m", EditWorkloads(5, [["h1:/dev/loop0:rr", {"iops": 5.0}]]), State.RUNNING),
        ("s", Ack(5, 3, {"edited": 1}), State.RUNNING),
        ("s", Log("WARNING", "engine fallback", 5), State.RUNNING),
        ("m", Stop(2), State.STOPPING),
        ("s", RESULT, State.STOPPING),
        ("s", Stopped(0, 2), State.IDLE),
        ("m", WindowRequest(4, 0, 1, 2), State.IDLE),
        ("s", WindowResult(4, 0, 1, 2, [], {}), State.IDLE),
        ("m", Bye(), State.CLOSING),
        ("s", Bye(), State.CLOSED),
    ]
    for side, msg, expect in script:
        out = p.m(msg) if side == "m" else p.s(msg)
        assert out == [msg]
        assert p.states() == (expect, expect), f"after {type(msg).__name__}"


@pytest.mark.parametrize(
    "prefix, side, msg",
    [
        ([], "m", Go(0, 1, 1)),
        ([], "s", REPLY),
        ([("m", HELLO)], "m", Ping(1, 1)),
        ([("m", HELLO), ("s", REPLY)], "m", Continue(2)),  # IDLE Continue is tolerated...
        ([("m", HELLO), ("s", REPLY)], "s", RESULT),
        ([("m", HELLO), ("s", REPLY)], "s", Stopped(0, 0)),
        ([("m", HELLO), ("s", REPLY), ("m", Go(0, 1, 1))], "m", Go(0, 1, 1)),
        ([("m", HELLO), ("s", REPLY), ("m", Go(0, 1, 1))], "m", DiscoverLuns(1)),
        ([("m", HELLO), ("s", REPLY), ("m", Go(0, 1, 1))], "m", WindowRequest(1, 0, 0, 0)),
        ([("m", HELLO), ("s", REPLY), ("m", Go(0, 1, 1))], "s",
         WindowResult(1, 0, 0, 0, [], {})),
        ([("m", HELLO), ("s", REPLY), ("m", Go(0, 1, 1))], "s", LunList(1, [])),
        ([("m", HELLO), ("s", REPLY), ("m", Bye())], "m", Ping(1, 1)),
        ([], "m", Error(kind="protocol", message="a master has no errors to send", fatal=True)),
        ([("m", HELLO), ("s", REPLY)], "m", Error(kind="io", message="x", fatal=True)),
    ],
)
def test_out_of_order(prefix: list[tuple[str, Message]], side: str, msg: Message) -> None:
    p = Pair()
    for s, m in prefix:
        p.m(m) if s == "m" else p.s(m)
    sender, receiver = (p.master, p.slave) if side == "m" else (p.slave, p.master)
    legal = (sender.state, sender.role, type(msg)) in TRANSITIONS
    if isinstance(msg, Continue) and sender.state is State.IDLE:
        assert legal  # the tolerated crossing
        return
    assert not legal
    with pytest.raises(LocalProtocolError):
        sender.send(msg)
    # A peer that sends it anyway is named in the remote error.
    raw = Conversation(sender.role)
    raw.state = sender.state
    raw_table_bypass = __import__("protocol.codec", fromlist=["encode"]).encode(msg)
    with pytest.raises(RemoteProtocolError) as err:
        receiver.receive_data(raw_table_bypass)
    if receiver.role is Role.MASTER:
        assert "h1" in str(err.value)


def test_fatal_error_closes_from_any_state() -> None:
    p = Pair()
    p.m(HELLO)
    p.s(REPLY)
    p.m(Go(0, 1, 1))
    p.s(Error(kind="io", message="device gone", fatal=True))
    assert p.states() == (State.CLOSED, State.CLOSED)
    with pytest.raises(LocalProtocolError):
        p.master.send(Continue(2))


def test_version_mismatch_refused_in_hello() -> None:
    p = Pair()
    from protocol.codec import encode
    from protocol.errors import VersionMismatchError

    with pytest.raises(VersionMismatchError):
        p.slave.receive_data(encode(Hello(PROTOCOL_VERSION + 1, "9", "h1", 0)))


def test_eof_rules() -> None:
    p = Pair()
    p.m(HELLO)
    p.s(REPLY)
    with pytest.raises(RemoteProtocolError, match="closed the stream in state IDLE"):
        p.master.receive_eof()
    q = Pair()
    q.m(HELLO)
    frame = q.slave.send(REPLY)
    q.master.receive_data(frame[:5])
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        q.master.receive_eof()
    r = Pair()
    r.m(HELLO)
    r.s(REPLY)
    r.m(Bye())
    r.s(Bye())
    r.master.receive_eof()
    assert r.master.state is State.CLOSED


def test_hello_and_bye_in_one_read_are_answered_one_at_a_time() -> None:
    """The master says Bye right after Hello; the slave reads both at once. Checked one at a
    time (``decode_data``, then ``receive`` and answer), Hello is answered in HELLO and Bye in
    IDLE; the master, in CLOSING since its Bye, accepts the HelloReply that crossed it."""
    p = Pair()
    sent = p.master.send(HELLO) + p.master.send(Bye("done"))
    assert p.master.state is State.CLOSING
    answers = b""
    for msg in p.slave.decode_data(sent):
        p.slave.receive(msg)
        answers += p.slave.send(REPLY if isinstance(msg, Hello) else Bye("master said bye"))
    assert p.master.receive_data(answers) == [REPLY, Bye("master said bye")]
    assert p.states() == (State.CLOSED, State.CLOSED)
    # checked all at once, an answer can fall into the state a later message left
    q = Pair()
    q.m(HELLO)
    q.s(REPLY)
    q.slave.receive_data(q.master.send(WindowRequest(4, 0, 1, 2)) + q.master.send(Go(1, 1, 1)))
    with pytest.raises(LocalProtocolError, match="WindowResult in state RUNNING"):
        q.slave.send(WindowResult(4, 0, 1, 2, [], {}))


def test_slave_may_stop_by_itself_and_late_continue_is_tolerated() -> None:
    p = Pair()
    p.m(HELLO)
    p.s(REPLY)
    p.m(Go(0, 1, 1))
    in_flight = p.master.send(Continue(2))  # master sends, slave stops before reading it
    p.s(Error(kind="late", message="master late"))
    p.s(Stopped(0, 1))
    assert p.slave.receive_data(in_flight) == [Continue(2)]
    assert p.states() == (State.IDLE, State.IDLE)
