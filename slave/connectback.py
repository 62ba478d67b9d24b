"""A slave that dials its master (``ivypy slave --connect HOST:PORT --token-file FILE``): for
hosts a scheduler starts (a DaemonSet's pods, a Job, ``srun``) rather than the master.

Owns ``dial``: the TLS connection to the master, the handshake (``protocol.connectback``: each
side proves the token, bound to the certificate the slave saw), and then the relay between that
connection and the pipes ``slave.main.serve`` speaks the protocol on, on a thread of its own
running an event loop (TLS in both directions on one connection). The conversation is then the
same as over SSH; the master's end closing is the slave's stdin at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

from protocol import connectback as cb

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
READ_BYTES = 1 << 16


class DialError(Exception):
    """The master could not be reached, or the handshake failed (the reason)."""


@dataclass
class Dialled:
    """A connection whose handshake passed: the pipes ``serve`` reads from (``stdin_fd``) and
    writes to (``stdout_fd``), and how to wait for the relay's end."""

    stdin_fd: int
    stdout_fd: int
    done: threading.Event


def _context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # the master's certificate is its own, made for the run: the token proof binds to it
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str,
                     name: str) -> None:
    ssl_object = writer.get_extra_info("ssl_object")
    cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not cert:
        raise DialError("the master presented no certificate")
    fp = cb.fingerprint(cert)
    mine = cb.new_nonce()
    writer.write(cb.line({"ivypy_connect": cb.FORMAT, "name": name, "nonce": mine}))
    await writer.drain()
    answer = cb.parse(await reader.readline())
    if "error" in answer:
        raise DialError(f"the master refused: {answer['error']}")
    theirs = answer.get("nonce")
    if not isinstance(theirs, str) or not cb.proves(
            cb.proof(token, "master", fp, mine, theirs, name), answer.get("proof")):
        raise DialError("the master did not prove it holds the token (a wrong token on one "
                        "side, or someone in between): nothing was sent")
    writer.write(cb.line({"proof": cb.proof(token, "slave", fp, mine, theirs, name)}))
    await writer.drain()
    done = cb.parse(await reader.readline())
    if done.get("ok") is not True:
        raise DialError(f"the master refused: {done.get('error', 'no reason given')}")


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, to_slave: int,
                 from_slave: int) -> None:
    """The master's bytes into ``to_slave`` (closed at their end: the slave's stdin at EOF),
    the slave's bytes from ``from_slave`` to the master (its end closes the connection). The
    pipes are the loop's own (non-blocking, no threads: nothing holds the process at its
    exit, where this thread, a daemon, just ends)."""
    loop = asyncio.get_running_loop()
    pipe_in = asyncio.StreamReader(limit=READ_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(pipe_in),
                                 os.fdopen(from_slave, "rb", buffering=0))
    out_transport, out_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(), os.fdopen(to_slave, "wb", buffering=0))
    pipe_out = asyncio.StreamWriter(out_transport, out_protocol, None, loop)

    await asyncio.gather(_pump(reader, pipe_out, "the master's connection ended"),
                         _pump(pipe_in, writer, "cannot send to the master"))


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, what: str) -> None:
    """``source``'s bytes into ``sink`` until its end, then ``sink`` closed."""
    try:
        while data := await source.read(READ_BYTES):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError, ssl.SSLError) as exc:
        log.warning("%s: %s", what, exc)
    finally:
        sink.close()
        with contextlib.suppress(Exception):
            await sink.wait_closed()


def dial(host: str, port: int, token: str, name: str,
         started: Callable[[], None] | None = None) -> Dialled:
    """Dial the master, pass the handshake, and relay from then on (a thread); raises
    ``DialError`` saying why it could not."""
    ready: dict[str, object] = {}
    gate = threading.Event()
    done = threading.Event()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    async def run() -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, ssl=_context(), server_hostname=None,
                limit=cb.MAX_LINE_BYTES + READ_BYTES), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            ready["error"] = DialError(f"cannot reach the master at {host}:{port}: "
                                       f"{getattr(exc, 'strerror', None) or exc or 'timeout'}")
            gate.set()
            return
        try:
            await asyncio.wait_for(_handshake(reader, writer, token, name), CONNECT_TIMEOUT_S)
        except (DialError, ValueError, OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            ready["error"] = exc if isinstance(exc, DialError) else DialError(
                f"the handshake with the master failed: {exc or 'timeout'}")
            writer.close()
            gate.set()
            return
        gate.set()
        if started is not None:
            started()
        await _relay(reader, writer, in_w, out_r)

    def thread() -> None:
        try:
            asyncio.run(run())
        finally:
            done.set()

    threading.Thread(target=thread, name="connect-back", daemon=True).start()
    gate.wait()
    error = ready.get("error")
    if isinstance(error, DialError):
        for fd in (in_r, in_w, out_r, out_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        raise error
    return Dialled(in_r, out_w, done)
