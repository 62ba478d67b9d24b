"""Run one gather: a command (its stdout) or an HTTP GET of a Prometheus page, with a timeout.

Owns the process and socket handling of a gather on the controller, and the translation of
its failures (a missing program, a non-zero exit, a hang, too much output, a refused
connection, a bad host name, an HTTP error) into ``GatherFailed`` with a one-line reason. A
command runs in its own session (process group) with stdin closed; its stdout and stderr are
pipes this module owns and reads as the bytes come (stdout up to ``MAX_OUTPUT_BYTES``, of
stderr only a tail for the reason). At its timeout, once it printed more than
``MAX_OUTPUT_BYTES``, or when the gather is cancelled, the whole group is killed (SIGKILL), so
a script's children go too. A gather returns within its timeout and ``REAP_GRACE_S`` whatever
its children do: a process that left its own session (``setsid``, a daemon) and holds the
stdout open is not waited for, its pipe is closed. The HTTP GET is a small asyncio HTTP/1.0
client rather than urllib in a thread: a thread cannot be stopped at the timeout, while a
cancelled coroutine closes its socket at once and leaves nothing running. This module must
not parse what a gather prints (``lines``, ``promtext``) or schedule gathers (``gathering``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from urllib.parse import urlsplit

from protocol.errors import IvyError

__all__ = ["MAX_OUTPUT_BYTES", "REAP_GRACE_S", "GatherFailed", "http_get", "run_command"]

#: the most a gather may print or serve: node_exporter's full page is ~100-300 KiB; a source
#: beyond this is refused rather than held in memory every subinterval
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: how long a killed command's process may take to go after its timeout; one stuck in the
#: kernel (uninterruptible I/O) past this is left to the event loop's child watcher
REAP_GRACE_S = 0.5
#: the end of a failed command's stderr kept for its reason (the reason shows 200 characters)
_STDERR_TAIL_BYTES = 4096


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


class _Pipe(asyncio.Protocol):
    """The read end of a command's stdout or stderr: its first ``limit_bytes`` and a byte
    more (``over`` then, and reading stops), or with ``tail`` its last ``limit_bytes``."""

    def __init__(self, limit_bytes: int, *, tail: bool = False) -> None:
        self.limit_bytes = limit_bytes
        self.tail = tail
        self.data = bytearray()
        self.over = False
        #: done at the end of the output (EOF, an error, or ``over``)
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.ReadTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.over:
            return
        self.data += data
        if len(self.data) <= self.limit_bytes:
            return
        if self.tail:
            del self.data[:-self.limit_bytes]
            return
        self.over = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._end()

    def eof_received(self) -> None:
        self._end()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def close(self) -> None:
        """Close the read end (a process still writing gets EPIPE)."""
        if self.transport is not None:
            self.transport.close()


async def _spawn(argv: Sequence[str]) -> tuple[asyncio.subprocess.Process, _Pipe, _Pipe]:
    """The started command with its stdout and stderr; ``GatherFailed`` if it cannot start."""
    loop = asyncio.get_running_loop()
    fds: list[int] = []
    try:
        fds += os.pipe()
        fds += os.pipe()
    except OSError as exc:  # out of file descriptors
        for fd in fds:
            os.close(fd)
        raise GatherFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    out_r, out_w, err_r, err_w = fds
    # the read ends as files, each closed by its transport (or below, when there is none)
    ends = [open(out_r, "rb", buffering=0), open(err_r, "rb", buffering=0)]  # noqa: SIM115
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                start_new_session=True)
        except OSError as exc:
            raise GatherFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        finally:
            os.close(out_w)
            os.close(err_w)
        out, err = _Pipe(MAX_OUTPUT_BYTES), _Pipe(_STDERR_TAIL_BYTES, tail=True)
        try:
            await loop.connect_read_pipe(lambda: out, ends[0])
            await loop.connect_read_pipe(lambda: err, ends[1])
        except BaseException:  # cancelled
            out.close()
            err.close()
            _kill_group(proc)
            raise
    except BaseException:
        for end in ends:
            end.close()  # a file its transport closed already: nothing
        raise
    return proc, out, err


async def _watch(proc: asyncio.subprocess.Process, exited: asyncio.Task[int], out: _Pipe,
                 deadline_s: float, timeout_s: float) -> str | None:
    """Why the command failed by ``deadline_s`` (loop time), or None once it exited and its
    stdout ended (or it exited non-zero: its stdout is not needed then)."""
    loop = asyncio.get_running_loop()
    while True:
        if out.over:
            return f"printed more than {MAX_OUTPUT_BYTES} bytes (its process group was killed)"
        if exited.done() and (out.ended.done() or proc.returncode != 0):
            return None
        remaining_s = deadline_s - loop.time()
        if remaining_s <= 0:
            break
        await asyncio.wait([f for f in (exited, out.ended) if not f.done()],
                           timeout=remaining_s, return_when=asyncio.FIRST_COMPLETED)
    if not exited.done():
        return (f"did not finish within its timeout of {timeout_s:g}s "
                "(its process group was killed)")
    return (f"exited, but its stdout was still open at its timeout of {timeout_s:g}s: a "
            "process it left running holds it (redirect a background process's output)")


async def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """The command's stdout; ``GatherFailed`` when it cannot start, exits non-zero, prints
    more than ``MAX_OUTPUT_BYTES``, or has not exited and closed its stdout by ``timeout_s``
    (then its process group is killed). Returns within ``timeout_s`` and ``REAP_GRACE_S``."""
    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + timeout_s
    proc, out, err = await _spawn(argv)
    exited = asyncio.ensure_future(proc.wait())
    try:
        why = await _watch(proc, exited, out, deadline_s, timeout_s)
        if why is None and proc.returncode != 0 and not err.ended.done():
            # its stderr tail for the reason, as long as the timeout allows
            await asyncio.wait([err.ended], timeout=max(0.0, deadline_s - loop.time()))
        if why is not None:
            _kill_group(proc)
            if not exited.done():
                await asyncio.wait([exited], timeout=REAP_GRACE_S)
    except asyncio.CancelledError:  # the step ended, the run stops: the gather goes
        _kill_group(proc)
        if not exited.done():
            with contextlib.suppress(asyncio.CancelledError):  # cancelled again: no waiting
                await asyncio.wait([exited], timeout=REAP_GRACE_S)
        raise
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        out.close()
        err.close()
        exited.cancel()
    if why is not None:
        raise GatherFailed(why)
    if proc.returncode != 0:
        how = (f"was killed by signal {-proc.returncode}" if proc.returncode is not None
               and proc.returncode < 0 else f"exited with status {proc.returncode}")
        tail = _tail(bytes(err.data))
        raise GatherFailed(f"{argv[0]} {how}" + (f": {tail}" if tail else ""))
    return out.data.decode("utf-8", "replace")


async def _get(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 80
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        raise GatherFailed(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # UnicodeError too: a host name that does not IDNA-encode
        raise GatherFailed(f"cannot connect to {host}:{port}: bad host name ({exc})") from exc
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
                     "Accept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = bytearray()
        while len(data) <= MAX_OUTPUT_BYTES:
            more = await reader.read(MAX_OUTPUT_BYTES + 1 - len(data))
            if not more:
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
