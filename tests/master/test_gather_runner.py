"""``master.gather.runner`` on real processes and sockets: a command's stdout, its failures as
one-line reasons, a hang killed at the timeout with its whole process group, and the HTTP GET
against small local servers (200, 404, not HTTP, refused, silent)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest

from master.gather.runner import GatherFailed, http_get, run_command
from tests.master.gatherhelp import free_port


def test_command_output() -> None:
    assert asyncio.run(run_command(["sh", "-c", "echo a,b,c,1"], 5)) == "a,b,c,1\n"


@pytest.mark.parametrize(("argv", "reason"), [
    (["sh", "-c", "echo bad >&2; exit 4"], "sh exited with status 4: bad"),
    (["sh", "-c", "kill -9 $$"], "sh was killed by signal 9"),
    (["/nonexistent/tool"], "cannot run /nonexistent/tool: No such file or directory"),
])
def test_command_failures(argv: list[str], reason: str) -> None:
    with pytest.raises(GatherFailed) as info:
        asyncio.run(run_command(argv, 5))
    assert info.value.reason == reason


def test_a_hang_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    t0 = time.monotonic()
    with pytest.raises(GatherFailed) as info:
        asyncio.run(run_command(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 0.3))
    assert time.monotonic() - t0 < 2
    assert "within its timeout of 0.3s" in info.value.reason
    child = int(pid_file.read_text())
    try:
        proc = psutil.Process(child)
        proc.wait(timeout=2)  # SIGKILLed with the group: gone (or a zombie init reaps)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        assert proc.status() == psutil.STATUS_ZOMBIE, "the script's child outlived the timeout"


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _serve(answer: bytes | None) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if answer is None:
            await asyncio.sleep(5)  # says nothing
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()
    return handle


async def _get_from(answer: bytes | None, timeout_s: float = 2) -> str:
    server = await asyncio.start_server(_serve(answer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await http_get(f"http://127.0.0.1:{port}/metrics", timeout_s)
    finally:
        server.close()


def test_http_get_ok() -> None:
    body = asyncio.run(_get_from(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nm 1\n"))
    assert body == "m 1\n"


@pytest.mark.parametrize(("answer", "reason"), [
    (b"HTTP/1.1 404 Not Found\r\n\r\nnope", "answered 404 Not Found"),
    (b"SSH-2.0-OpenSSH\r\n", "did not answer HTTP"),
    (None, "did not answer within its timeout of 0.3s"),
])
def test_http_get_failures(answer: bytes | None, reason: str) -> None:
    with pytest.raises(GatherFailed) as info:
        asyncio.run(_get_from(answer, 0.3))
    assert reason in info.value.reason


def test_http_get_refused() -> None:
    with pytest.raises(GatherFailed) as info:
        asyncio.run(http_get(f"http://127.0.0.1:{free_port()}/metrics", 2))
    assert info.value.reason.startswith("cannot connect to 127.0.0.1:")
