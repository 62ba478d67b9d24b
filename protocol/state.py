"""The legal order of messages, as one table, and a sans-I/O ``Conversation`` per side.

Owns every rule about *when* a message may be sent; all transition logic lives here (in the
manner of h11's ``_state.py``). Each side keeps its own ``Conversation``: messages it sends are
checked against the table as ``LocalProtocolError`` (our bug), messages it receives as
``RemoteProtocolError`` (the peer's fault, naming the host). No I/O: callers pump the bytes.

States of the conversation (the same on both sides; each side moves on what it sends and what
it receives)::

    START ─Hello─► HELLO ─HelloReply─► IDLE ─Go─► RUNNING ─Stop─► STOPPING ─Stopped─► IDLE
                                         │           │  Stopped (slave stopped by itself) ─► IDLE
                                         └──────── Bye (master) ─► CLOSING ─Bye (slave)─► CLOSED

A fatal ``Error`` from the slave moves to CLOSED in any state. Messages that can cross on the
wire are tolerated where they can legitimately arrive late: ``Continue`` and ``Stop`` in IDLE
(the slave stopped by itself), anything from the slave in CLOSING (a ``HelloReply`` too: the
master may say ``Bye`` right after ``Hello``).

A receiver acts on each message in the state that message leaves (``decode_data``, then
``receive`` and act, one message at a time): several messages arriving in one read must not all
move the state before the first is answered.
"""

from __future__ import annotations

import enum
from typing import Final

from protocol.codec import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encode
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    Go,
    Hello,
    HelloReply,
    LoadMap,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    Stopped,
    SubintervalResult,
    VerifyFound,
    VerifyLun,
    WindowRequest,
    WindowResult,
)


class Role(enum.Enum):
    MASTER = "master"
    SLAVE = "slave"


class State(enum.Enum):
    START = "START"
    HELLO = "HELLO"
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"


M, S = Role.MASTER, Role.SLAVE
_EDITS: Final = (CreateWorkload, EditWorkload, EditWorkloads, DeleteWorkload)
_SLAVE_CHATTER: Final = (Pong, Ack, Log, Error)


def _build() -> dict[tuple[State, Role, type[Message]], State]:
    t: dict[tuple[State, Role, type[Message]], State] = {}

    def allow(states: tuple[State, ...], role: Role, types: tuple[type[Message], ...],
              to: State | None = None) -> None:
        for st in states:
            for tp in types:
                t[(st, role, tp)] = st if to is None else to

    I, R, P = State.IDLE, State.RUNNING, State.STOPPING  # noqa: E741
    t[(State.START, M, Hello)] = State.HELLO
    t[(State.HELLO, S, HelloReply)] = State.IDLE
    t[(State.HELLO, S, Error)] = State.CLOSED
    t[(State.HELLO, S, Log)] = State.HELLO
    # master → slave
    allow((I, R, P), M, (Ping, *_EDITS))
    allow((I,), M, (DiscoverLuns, WindowRequest, LoadMap, VerifyLun))
    allow((I,), M, (Go,), to=R)
    allow((R,), M, (Continue,))
    allow((R,), M, (Stop,), to=P)
    allow((I,), M, (Continue, Stop))  # crossed a Stopped the slave sent by itself
    allow((I, R, P), M, (Bye,), to=State.CLOSING)
    allow((State.HELLO,), M, (Bye,), to=State.CLOSING)
    # slave → master
    allow((I, R, P), S, _SLAVE_CHATTER)
    allow((I,), S, (LunList, WindowResult, VerifyFound))
    allow((R, P), S, (SubintervalResult,))
    allow((R, P), S, (Stopped,), to=I)
    allow((State.CLOSING,), S, (*_SLAVE_CHATTER, HelloReply, LunList, SubintervalResult,
                                Stopped, WindowResult))
    allow((State.CLOSING,), S, (Bye,), to=State.CLOSED)
    return t


#: (state, sender, message type) → next state. A missing key is an illegal message.
TRANSITIONS: Final = _build()


class Conversation:
    """One side's view of the conversation: checks order, encodes and decodes."""

    def __init__(
        self,
        role: Role,
        host: str | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.role = role
        self.peer = S if role is M else M
        self.host = host
        self.state = State.START
        self.max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)

    def _next(self, sender: Role, msg: Message) -> State | None:
        if isinstance(msg, Error) and msg.fatal and sender is S and self.state is not State.CLOSED:
            return State.CLOSED
        return TRANSITIONS.get((self.state, sender, type(msg)))

    def send(self, msg: Message) -> bytes:
        """Check that we may send ``msg`` now, move on, and return its frame."""
        nxt = self._next(self.role, msg)
        if nxt is None:
            raise LocalProtocolError(
                f"{self.role.value} may not send {type(msg).__name__} in state "
                f"{self.state.value}",
                host=self.host,
            )
        frame = encode(msg, self.max_frame_bytes)
        self.state = nxt
        return frame

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a partial frame from the peer (EOF now is inside a frame: an error)."""
        return self._decoder.buffered_bytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Feed bytes from the peer; return the messages they complete, each checked.

        All of them are checked before the first is returned: a side that answers messages
        (whose answers move the state) uses ``decode_data`` and ``receive`` instead."""
        messages = self.decode_data(data)
        for msg in messages:
            self.receive(msg)
        return messages

    def decode_data(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Feed bytes from the peer; return the messages they complete, decoded and their
        fields checked but not yet their order: pass each to ``receive`` just before acting
        on it, so that it is checked in the state the messages before it (and the answers
        to them) left."""
        try:
            return self._decoder.feed(data)
        except RemoteProtocolError as exc:
            if exc.host is not None or self.host is None:
                raise
            raise type(exc)(str(exc), host=self.host) from exc

    def receive(self, msg: Message) -> None:
        """Check an already decoded message from the peer and move on."""
        nxt = self._next(self.peer, msg)
        if nxt is None:
            raise RemoteProtocolError(
                f"{self.peer.value} sent {type(msg).__name__} in state {self.state.value}",
                host=self.host,
            )
        self.state = nxt

    def receive_eof(self) -> None:
        """The peer closed its stream. Clean only after Bye, and at a frame boundary."""
        if not self._decoder.at_frame_boundary():
            raise RemoteProtocolError(
                f"stream ended inside a frame ({self._decoder.buffered_bytes} bytes buffered)",
                host=self.host,
            )
        if self.state not in (State.CLOSED, State.CLOSING, State.START):
            raise RemoteProtocolError(
                f"{self.peer.value} closed the stream in state {self.state.value}",
                host=self.host,
            )
        self.state = State.CLOSED
