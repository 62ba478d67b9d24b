"""The master's end of connect-back: slaves a scheduler started dial in (``ivypy slave --connect
HOST:PORT --token-file FILE --name NAME``), and the run waits for the hosts of its test that
say ``connect_back: true`` (docs/transports.md).

Owns ``ConnectBackListener``: a TLS listener on the test's ``connect_back: listen`` with a
certificate made for the run (an ECDSA key that never leaves this process but for a temporary
file ``ssl`` loads it from, removed at once), the handshake of each connection
(``protocol.connectback``: the slave proves the token bound to this certificate, and the master
proves it back), and, once it passes, a ``Connection`` for the host it names. A peer that
does not prove the token, names no host of the test, or names one already connected is refused
and told through ``on_refused`` with its address (the run's events.csv), and does not count as
the host. Must not know the protocol past the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import ssl
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from protocol import connectback as cb
from protocol.errors import HostError

HANDSHAKE_TIMEOUT_S = 10.0
READ_BYTES = 1 << 16


def _certificate() -> tuple[ssl.SSLContext, bytes]:
    """A server context with a certificate made now (ECDSA P-256, a day), and its DER."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ivypy master")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="ivypy-cb-") as d:  # mode 0700
        cert_path, key_path = Path(d) / "cert.pem", Path(d) / "key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        ctx.load_cert_chain(cert_path, key_path)
    return ctx, cert.public_bytes(serialization.Encoding.DER)


class StreamConnection:
    """A dialled-in slave as the run's ``Connection``: bytes over its TLS stream."""

    def __init__(self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: str) -> None:
        self.host, self.peer = host, peer
        self._reader, self._writer = reader, writer

    async def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            raise HostError(f"the connection from {self.peer} is lost: {exc}",
                            host=self.host) from exc

    async def read(self) -> bytes:
        try:
            return await self._reader.read(READ_BYTES)
        except (ConnectionError, OSError, ssl.SSLError):
            return b""

    async def close(self, grace_s: float = 2.0) -> int | None:
        """The connection closed (the slave takes it as its master gone and stops), waiting
        up to ``grace_s`` for the slave's side to go."""
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), grace_s)
        return None

    def stderr_tail(self) -> str:
        return ""  # the slave's stderr is where it runs: its scheduler's log


class ConnectBackListener:
    """Listens on ``host``:``port`` for the slaves of ``names`` proving ``token``."""

    def __init__(self, host: str, port: int, token: str, names: Iterable[str],
                 on_refused: Callable[[str], None]) -> None:
        self.host, self.port, self.token = host, port, token
        self.names = set(names)
        self.on_refused = on_refused
        self._waiting: dict[str, asyncio.Future[StreamConnection]] = {}
        self._server: asyncio.base_events.Server | None = None
        self._fingerprint = b""

    async def start(self) -> None:
        ctx, der = _certificate()
        self._fingerprint = cb.fingerprint(der)
        loop = asyncio.get_running_loop()
        self._waiting = {n: loop.create_future() for n in self.names}
        self._server = await asyncio.start_server(self._accept, self.host, self.port, ssl=ctx,
                                                  ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        self.port = self._server.sockets[0].getsockname()[1]

    async def wait_for(self, name: str, timeout_s: float) -> StreamConnection:
        """Host ``name``'s connection once it has dialled in; ``HostError`` when it does not
        within ``timeout_s``."""
        fut = self._waiting[name]
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            raise HostError(f"did not dial in within {timeout_s:g} s (connect_back: its slave "
                            f"runs `ivypy slave --connect {self.host or '<this host>'}:"
                            f"{self.port} --token-file FILE --name {name}`?)",
                            host=name) from None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        try:
            name = await asyncio.wait_for(self._handshake(reader, writer, where),
                                          HANDSHAKE_TIMEOUT_S)
        except (ValueError, ConnectionError, OSError, ssl.SSLError,
                asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.on_refused(f"connect_back: a connection from {where} refused: "
                            f"{exc or 'no handshake in time'}")
            writer.close()
            return
        self._waiting[name].set_result(StreamConnection(name, reader, writer, where))

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         where: str) -> str:
        hello = cb.parse(await reader.readline())
        name, theirs = hello.get("name"), hello.get("nonce")
        if hello.get("ivypy_connect") != cb.FORMAT or not isinstance(name, str) or \
                not isinstance(theirs, str):
            raise ValueError("not an ivypy slave's greeting")
        mine = cb.new_nonce()
        writer.write(cb.line({"nonce": mine, "proof": cb.proof(
            self.token, "master", self._fingerprint, theirs, mine, name)}))
        await writer.drain()
        data = await reader.readline()
        if not data:
            raise ValueError(f"{name!r} hung up instead of proving the token (it found the "
                             "master's proof wrong: a wrong token on one side)")
        answer = cb.parse(data)
        if not cb.proves(cb.proof(self.token, "slave", self._fingerprint, theirs, mine, name),
                         answer.get("proof")):
            await self._refuse(writer, "wrong token")
            raise ValueError(f"it named itself {name!r} but did not prove the token")
        fut = self._waiting.get(name)
        if fut is None:
            await self._refuse(writer, f"{name} is no connect_back host of this test")
            raise ValueError(f"{name!r} is no connect_back host of this test "
                             f"({', '.join(sorted(self.names))})")
        if fut.done():
            await self._refuse(writer, f"{name} is connected already")
            raise ValueError(f"{name!r} is connected already")
        writer.write(cb.line({"ok": True}))
        await writer.drain()
        return name

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, why: str) -> None:
        with contextlib.suppress(Exception):
            writer.write(cb.line({"error": why}))
            await writer.drain()
