"""Run one gather: a command (its stdout) or an HTTP GET of a Prometheus page, with a timeout.

Owns the process and socket handling of a gather on the controller, and the translation of
its failures (a missing program, a non-zero exit, a hang, a refused connection, an HTTP error)
into ``GatherFailed`` with a one-line reason. A command runs in its own session (process group)
with stdin closed; at its timeout, or when the gather is cancelled, the whole group is killed
(SIGKILL), so a script's children go too. The HTTP GET is a small asyncio HTTP/1.0 client
rather than urllib in a thread: a thread cannot be stopped at the timeout, while a cancelled
coroutine closes its socket at once and leaves nothing running. This module must not parse
what a gather prints (``lines``, ``promtext``) or schedule gathers (``gathering``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from urllib.parse import urlsplit

from protocol.errors import IvyError

__all__ = ["MAX_OUTPUT_BYTES", "GatherFailed", "http_get", "run_command"]

#: the most a gather may print or serve: node_exporter's full page is ~100-300 KiB; a source
#: beyond this is refused rather than held in memory every subinterval
MAX_OUTPUT_BYTES = 64 * 1024 * 1024


class GatherFailed(IvyError):
    """A gather gave no sample: ``reason`` is one line saying why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(data: bytes) -> str:
    text = " ".join(data.decode("utf-8", "replace").split())
    return text[-200:]


async def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """The command's stdout; ``GatherFailed`` when it cannot start, exits non-zero or runs
    past ``timeout_s`` (then its process group is killed)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=MAX_OUTPUT_BYTES)
    except OSError as exc:
        raise GatherFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        raise GatherFailed(f"did not finish within its timeout of {timeout_s:g}s "
                           "(its process group was killed)") from None
    except BaseException:  # cancelled: the step ended, the run stops
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        how = (f"was killed by signal {-proc.returncode}" if proc.returncode is not None
               and proc.returncode < 0 else f"exited with status {proc.returncode}")
        tail = _tail(err)
        raise GatherFailed(f"{argv[0]} {how}" + (f": {tail}" if tail else ""))
    if len(out) > MAX_OUTPUT_BYTES:
        raise GatherFailed(f"printed more than {MAX_OUTPUT_BYTES} bytes")
    return out.decode("utf-8", "replace")


async def _get(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 80
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        raise GatherFailed(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
                     "Accept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read(MAX_OUTPUT_BYTES + 1)
        while True:
            more = await reader.read(MAX_OUTPUT_BYTES + 1 - len(data))
            if not more or len(data) > MAX_OUTPUT_BYTES:
                break
            data += more
    except OSError as exc:
        raise GatherFailed(f"reading {url}: {exc.strerror or exc}") from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if len(data) > MAX_OUTPUT_BYTES:
        raise GatherFailed(f"{url} served more than {MAX_OUTPUT_BYTES} bytes")
    head, sep, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    fields = status.split(None, 2)
    if not sep or len(fields) < 2 or not fields[0].startswith("HTTP/"):
        raise GatherFailed(f"{url} did not answer HTTP")
    if fields[1] != "200":
        raise GatherFailed(f"{url} answered {status[len(fields[0]):].strip()}")
    if b"transfer-encoding: chunked" in head.lower():
        raise GatherFailed(f"{url} answered chunked to an HTTP/1.0 request")
    return body.decode("utf-8", "replace")


async def http_get(url: str, timeout_s: float) -> str:
    """The body of ``url`` (status 200); ``GatherFailed`` otherwise or past ``timeout_s``."""
    try:
        return await asyncio.wait_for(_get(url), timeout_s)
    except TimeoutError:
        raise GatherFailed(f"{url} did not answer within its timeout of {timeout_s:g}s") from None
