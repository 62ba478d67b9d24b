"""``master.gather.runner`` on real processes and sockets: a command's stdout, its failures as
one-line reasons, a hang killed at the timeout with its whole process group, a gather that
returns by its timeout whatever its children do with its pipes, output over the cap killed
as it comes, and the HTTP GET against small local servers (200, 404, not HTTP, refused,
silent) and a host name the resolver cannot take."""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest

from master.gather import runner
from master.gather.runner import REAP_GRACE_S, GatherFailed, http_get, run_command
from tests.master.gatherhelp import free_port
from tests.master.runhelp import lives


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
    _assert_gone(int(pid_file.read_text()))


def _assert_gone(pid: int) -> None:
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout=2)  # SIGKILLed with the group: gone (or a zombie init reaps)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        assert not lives(proc), "the script's child outlived its gather"


@pytest.mark.parametrize(("script", "reason"), [
    # still running at the timeout; a helper in its own session holds the stdout too
    ("setsid sleep 6 & sleep 6", "did not finish within its timeout of 0.3s"),
    # exited at once, but left a daemon (its own session: not killed) holding the stdout
    ("setsid sleep 6 & echo a,b,c,1", "exited, but its stdout was still open at its timeout"),
    # the same with the helper in its group: the group is killed
    ("sleep 6 & echo a,b,c,1", "exited, but its stdout was still open at its timeout"),
])
def test_a_gather_ends_by_its_timeout_whatever_holds_its_pipes(script: str, reason: str
                                                                ) -> None:
    t0 = time.monotonic()
    with pytest.raises(GatherFailed) as info:
        asyncio.run(run_command(["sh", "-c", script], 0.3))
    took_s = time.monotonic() - t0
    assert reason in info.value.reason
    # the helpers live 6 s; 2 s of slack for a loaded 2-core machine
    assert took_s < 0.3 + REAP_GRACE_S + 2, f"a gather with a 0.3 s timeout took {took_s:.1f}s"


def test_a_background_child_holding_only_stderr_does_not_delay_the_output() -> None:
    t0 = time.monotonic()
    text = asyncio.run(run_command(["sh", "-c", "sleep 6 >/dev/null & echo a,b,c,1"], 3))
    assert text == "a,b,c,1\n" and time.monotonic() - t0 < 3  # not the 6 s of the sleep


def test_output_over_the_cap_is_killed_as_it_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "MAX_OUTPUT_BYTES", 1 << 20)  # 1 MiB for the test
    printer = ("import sys, time\n"
               "for _ in range(96):\n"
               "    sys.stdout.buffer.write(b'x' * (1 << 20)); sys.stdout.flush()\n"
               "time.sleep(30)\n")  # like `cat /dev/sdX`: it does not end by itself
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(GatherFailed) as info:
        asyncio.run(run_command([sys.executable, "-c", printer], 20))
    assert info.value.reason == ("printed more than 1048576 bytes "
                                 "(its process group was killed)")
    assert time.monotonic() - t0 < 10  # at the cap, not at the timeout
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) / 1024
    assert grown_mib < 16, f"held {grown_mib:.0f} MiB of a source capped at 1 MiB"


def test_a_cancelled_gather_kills_its_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"

    async def go() -> None:
        task = asyncio.ensure_future(run_command(
            ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 30))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    _assert_gone(int(pid_file.read_text()))


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


@pytest.mark.parametrize("host", ["node..lab", "a" * 64 + ".lab"])
def test_http_get_bad_host_name(host: str) -> None:
    # the config refuses these; a URL that got past it still fails as a gather
    with pytest.raises(GatherFailed) as info:
        asyncio.run(http_get(f"http://{host}:9100/metrics", 2))
    assert info.value.reason.startswith(f"cannot connect to {host}:9100: bad host name")
