"""The master's connect-back listener (``master.hosts.connectback``) against the slave's own
dialling (``slave.connectback.dial``), in this process over TLS on 127.0.0.1: a host that
proves the token gets a connection whose bytes reach the slave's pipes and come back; a wrong
token on either side, an unknown name or a second connection of one host is refused and told
with the peer's address, and does not count as the host; a host that never dials in is a
``HostError`` naming it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest

from master.hosts.connectback import ConnectBackListener
from protocol.errors import HostError
from slave.connectback import DialError, dial

TOKEN = "s3cret-token"


def _with_listener(names: list[str],
                   body: Callable[[ConnectBackListener, list[str]], Awaitable[None]]
                   ) -> list[str]:
    refused: list[str] = []

    async def main() -> None:
        listener = ConnectBackListener("127.0.0.1", 0, TOKEN, names, refused.append)
        await listener.start()
        try:
            await body(listener, refused)
        finally:
            await listener.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    return refused


def test_a_host_that_proves_the_token_gets_its_connection_both_ways() -> None:
    async def body(listener: ConnectBackListener, refused: list[str]) -> None:
        dialled = await asyncio.to_thread(dial, "127.0.0.1", listener.port, TOKEN, "h1")
        conn = await listener.wait_for("h1", 10)
        assert conn.host == "h1" and conn.peer.startswith("127.0.0.1:")
        await conn.write(b"to the slave")
        got = await asyncio.to_thread(os.read, dialled.stdin_fd, 100)
        assert got == b"to the slave"
        await asyncio.to_thread(os.write, dialled.stdout_fd, b"to the master")
        assert await conn.read() == b"to the master"
        await conn.close(1)  # the master's end: the slave's stdin ends
        assert await asyncio.to_thread(os.read, dialled.stdin_fd, 100) == b""
        os.close(dialled.stdin_fd)
        os.close(dialled.stdout_fd)

    assert _with_listener(["h1"], body) == []


@pytest.mark.parametrize(("token", "name", "slave_says", "master_says"), [
    ("wrong", "h1", "the master did not prove it holds the token",
     "'h1' hung up instead of proving the token"),
    (TOKEN, "h9", "the master refused: h9 is no connect_back host of this test",
     "'h9' is no connect_back host of this test (h1)"),
])
def test_a_peer_that_fails_the_handshake_is_refused_and_told(
        token: str, name: str, slave_says: str, master_says: str) -> None:
    async def body(listener: ConnectBackListener, refused: list[str]) -> None:
        with pytest.raises(DialError, match=slave_says):
            await asyncio.to_thread(dial, "127.0.0.1", listener.port, token, name)
        for _ in range(100):  # the master's side sees the refusal a moment later
            if refused:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(HostError, match=r"did not dial in within 0\.2 s"):
            await listener.wait_for("h1", 0.2)  # the refused peer does not count as h1

    refused = _with_listener(["h1"], body)
    assert len(refused) == 1 and refused[0].startswith(
        "connect_back: a connection from 127.0.0.1:"), refused
    assert master_says in refused[0]


def test_a_second_connection_of_one_host_is_refused() -> None:
    async def body(listener: ConnectBackListener, refused: list[str]) -> None:
        first = await asyncio.to_thread(dial, "127.0.0.1", listener.port, TOKEN, "h1")
        with pytest.raises(DialError, match="h1 is connected already"):
            await asyncio.to_thread(dial, "127.0.0.1", listener.port, TOKEN, "h1")
        conn = await listener.wait_for("h1", 5)
        await conn.close(1)
        for fd in (first.stdin_fd, first.stdout_fd):
            os.close(fd)

    refused = _with_listener(["h1"], body)
    assert any("'h1' is connected already" in r for r in refused), refused


def test_a_master_that_is_not_there_is_a_dial_error() -> None:
    with pytest.raises(DialError, match=r"cannot reach the master at 127\.0\.0\.1:1"):
        dial("127.0.0.1", 1, TOKEN, "h1")
