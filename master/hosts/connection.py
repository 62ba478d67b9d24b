"""What a transport gives the master: a running slave, bytes in and bytes out.

Owns the ``Connection`` interface every way of reaching a slave implements: SSH and local
processes (``master.hosts.transport.SlaveConnection``) and the in-memory hosts
(``master.hosts.memory.MemoryHost``), and the ``Connector`` a run starts its hosts with.
Must not know the protocol: a connection moves opaque bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from master.config import HostConfig


class Connection(Protocol):
    """A running slave. ``read`` returns ``b""`` at its end; ``close`` ends it (within
    ``grace_s`` before it is stopped) and returns its exit status when it has one;
    ``stderr_tail`` is the last of what it wrote to stderr, for error messages."""

    host: str

    async def write(self, data: bytes) -> None: ...

    async def read(self) -> bytes: ...

    async def close(self, grace_s: float = ...) -> int | None: ...

    def stderr_tail(self) -> str: ...


#: How a run reaches a host of its test: a connection to a slave started there.
Connector = Callable[[HostConfig], Awaitable[Connection]]
