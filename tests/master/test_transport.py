"""Tests for master/hosts/transport.py without root: the interpreter probe's verdicts (table), the
local subprocess transport, and the SSH transport against the in-process asyncssh server
(tests/sshserver.py), which runs real processes, so the zipapp really runs through SSH."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import asyncssh
import pytest

from master.hosts.transport import (
    _PID_MARKER,
    PROBE_SCRIPT,
    STDERR_LINE_MAX_BYTES,
    SlaveConnection,
    SshHostSpec,
    _own_probe,
    check_probe,
    describe_error,
    open_local,
    open_ssh,
    slave_logger_name,
)
from master.hosts.zipapp import SlaveZipapp, build_slave_zipapp
from protocol.errors import HostError, SlaveStartError
from tests.sshserver import SshServerInfo, new_key, ssh_server

if TYPE_CHECKING:
    from tests.master.conftest import Testbed, TestbedHost

SYSTEM_PYTHON = "/usr/bin/python3"
REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def run(coro: Awaitable[T], timeout_s: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


def pid_gone(pid: int) -> bool:
    """True when the process no longer exists or is a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pid: int, within_s: float) -> float:
    start = time.monotonic()
    while not pid_gone(pid):
        if time.monotonic() - start > within_s:
            raise AssertionError(f"process {pid} still running after {within_s} s")
        time.sleep(0.02)
    return time.monotonic() - start


class Reader:
    """Buffers what ``conn.read()`` returns, so a line and the bytes after it are both kept."""

    def __init__(self, conn: SlaveConnection) -> None:
        self.conn = conn
        self.buffer = b""

    async def _fill(self) -> None:
        chunk = await self.conn.read()
        assert chunk, f"EOF from {self.conn.host}; buffered {self.buffer[:100]!r}"
        self.buffer += chunk

    async def line(self) -> bytes:
        while b"\n" not in self.buffer:
            await self._fill()
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"

    async def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


async def read_line(conn: SlaveConnection) -> bytes:
    """The first line of a slave that has not been sent anything else (nothing can follow)."""
    return await Reader(conn).line()


async def echo_roundtrip(conn: SlaveConnection, payload: bytes) -> int:
    """Read the slave's pid line, echo ``payload`` through it, and return the pid."""
    reader = Reader(conn)
    pid = int(await reader.line())
    writer = asyncio.create_task(conn.write(payload))
    assert await reader.exactly(len(payload)) == payload
    await writer
    return pid


# --------------------------------------------------------------------------------------------
# the probe's verdicts


GOOD = "python 3 11 2\nnumpy 1.24.2\npsutil 5.9.4\n"


@pytest.mark.parametrize(
    ("status", "stdout", "expected"),
    [
        (127, "", "python3 not found: install python3"),
        (0, "python 3 9 2\nnumpy 1.24.2\npsutil 5.9.4\n", "is Python 3.9.2; the slave needs"),
        (
            0,
            "python 3 11 2\nnumpy MISSING ModuleNotFoundError\npsutil 5.9.4\n",
            "python3 lacks numpy: install python3-numpy (Debian/Ubuntu) or pip install numpy",
        ),
        (
            0,
            "python 3 11 2\nnumpy 1.24.2\npsutil MISSING ImportError\n",
            "python3 lacks psutil: install python3-psutil (Debian/Ubuntu) or pip install psutil",
        ),
        (
            0,
            "python 3 12 0\nnumpy MISSING ModuleNotFoundError\npsutil MISSING X\n",
            "lacks numpy: install python3-numpy (Debian/Ubuntu) or pip install numpy; lacks psutil",
        ),
        (0, "python 3 11 2\nnumpy 1.21.5\npsutil 5.9.4\n", "has numpy 1.21.5, needs >= 1.24"),
        (0, "python 3 11 2\npsutil 5.9.4\n", "lacks numpy"),
        (1, "", "did not run the interpreter check"),
        (0, "('python', 2, 7, 18)\n", "did not run the interpreter check"),
        (None, "", "did not run the interpreter check"),
    ],
)
def test_probe_verdicts_name_the_host_and_what_to_install(
    status: int | None, stdout: str, expected: str
) -> None:
    with pytest.raises(SlaveStartError) as info:
        check_probe("h2", "python3", status, stdout, "")
    assert info.value.host == "h2"
    assert str(info.value).startswith("host h2: ")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "stdout",
    [
        GOOD,
        "python 3 10 0\nnumpy 2.1.0rc1\npsutil 6.0.0\n",
        "python 3 13 1\nnumpy 1.26\npsutil 5.9\n",
    ],
)
def test_probe_accepts_good_interpreters(stdout: str) -> None:
    info = check_probe("h1", "python3", 0, stdout, "")
    assert info.version[:2] >= (3, 10)
    assert set(info.module_versions) == {"numpy", "psutil"}


def test_the_masters_own_interpreter_is_probed_in_process() -> None:
    """A local slave on the master's own interpreter is not preceded by a probe process: the
    probe run in the master says what that process would say."""
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True,
                          text=True, timeout=60, check=True)
    assert _own_probe() == done.stdout
    assert check_probe("h1", sys.executable, 0, _own_probe(), "").version == sys.version_info[:3]


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (asyncssh.HostKeyNotVerifiable("Host key is not trusted"), "host key verification failed"),
        (asyncssh.PermissionDenied("Permission denied"), "permission denied (Permission denied)"),
        (asyncssh.ConnectionLost("Connection lost"), "connection lost (Connection lost)"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "unreachable: connection refused"),
        (TimeoutError(), "unreachable: timeout after 2.5 s"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "unreachable: No route to host"),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), "unreachable: Network is"),
        (socket.gaierror(-2, "Name or service not known"), "unreachable: cannot resolve the host"),
        (FileNotFoundError(errno.ENOENT, "No such file", "/k/id"), "cannot read /k/id: No such"),
        (asyncssh.KeyImportError("Passphrase must be specified"), "cannot load an SSH key"),
        (asyncssh.SFTPFailure("disk full"), "SFTP error: disk full"),
    ],
)
def test_foreign_errors_become_reasons(exc: BaseException, expected: str) -> None:
    assert describe_error(exc, 2.5).startswith(expected)


# --------------------------------------------------------------------------------------------
# local subprocess


def test_local_echo_relays_stderr_and_exits_cleanly(
    tmp_path: Path, echo_zipapp: SlaveZipapp, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    async def scenario() -> tuple[int, int | None, str]:
        conn = await open_local(
            "local-a", zipapp=echo_zipapp, cache_dir=tmp_path, on_stderr_line=seen.append
        )
        # Bigger than a pipe buffer, written while reading: exercises drain and backpressure.
        pid = await echo_roundtrip(conn, os.urandom(300_000))
        status = await conn.close()
        assert conn.zipapp_path == str(tmp_path / echo_zipapp.file_name)
        return pid, status, conn.stderr_tail()

    with caplog.at_level(logging.INFO, logger=slave_logger_name("local-a")):
        pid, status, tail = run(scenario())
    assert status == 0
    assert pid_gone(pid)
    assert any(line.startswith(f"echo-slave pid {pid} ") for line in seen)
    assert seen[0] in tail
    relayed = [r for r in caplog.records if r.name == slave_logger_name("local-a")]
    assert relayed and relayed[0].getMessage() == seen[0]


# A stand-in slave that writes one 1 MiB line to stderr, then ordinary lines, then exits.
_LONG_LINE_BYTES = 1 << 20
NOISY_SOURCE = b"""\
import sys


def main():
    err = sys.stderr.buffer
    err.write(b"x" * %d + b"\\n")
    err.write(b"after the long line\\r\\n")
    err.write(b"\\n")
    err.write(b"no newline at the end")
    err.flush()
    return 0
""" % _LONG_LINE_BYTES


@pytest.fixture(scope="module")
def noisy_zipapp() -> SlaveZipapp:
    return build_slave_zipapp("ivypy_noisy_slave:main",
                              extra_files={"ivypy_noisy_slave.py": NOISY_SOURCE})


def _check_relayed_long_line(seen: list[str]) -> None:
    """The 1 MiB line arrives cut, with a marker; every later line arrives whole."""
    (long_line, *later) = [line for line in seen if not line.startswith(_PID_MARKER)]
    assert long_line == "x" * STDERR_LINE_MAX_BYTES + (
        f" ... [line truncated: {_LONG_LINE_BYTES} bytes]")
    assert later == ["after the long line", "", "no newline at the end"]


def test_local_relays_a_1_mib_stderr_line_cut_and_the_lines_after_it(
    tmp_path: Path, noisy_zipapp: SlaveZipapp, caplog: pytest.LogCaptureFixture
) -> None:
    """A stderr line longer than the relay's limit used to end the relay (and, as the pipe
    filled, block the slave for good): it is cut with a marker, and the relay goes on."""
    seen: list[str] = []

    async def scenario() -> int | None:
        conn = await open_local("local-noisy", zipapp=noisy_zipapp, cache_dir=tmp_path,
                                on_stderr_line=seen.append)
        try:
            return await asyncio.wait_for(conn.wait(), 10)
        finally:
            await conn.close()

    with caplog.at_level(logging.INFO, logger=slave_logger_name("local-noisy")):
        assert run(scenario(), timeout_s=20) == 0
    _check_relayed_long_line(seen)
    logged = [r.getMessage() for r in caplog.records if r.name == slave_logger_name("local-noisy")]
    assert logged == seen


SLAVE_ARGS = ("--worker-cpus", "0-3,8", "a 'b'; c")  # a word the shell must not split


def test_local_passes_the_slave_its_arguments(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    seen: list[str] = []

    async def scenario() -> None:
        conn = await open_local("local-args", zipapp=echo_zipapp, cache_dir=tmp_path,
                                on_stderr_line=seen.append, slave_args=SLAVE_ARGS)
        await read_line(conn)
        assert await conn.close() == 0

    run(scenario())
    assert seen[0].endswith(f" argv {list(SLAVE_ARGS)!r}"), seen[0]


def test_local_exit_status_and_write_after_exit(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> None:
        conn = await open_local("local-b", zipapp=echo_zipapp, cache_dir=tmp_path)
        await read_line(conn)
        await conn.write(b"EXIT 5\n")
        assert await conn.wait() == 5
        assert conn.returncode == 5
        assert await conn.read() == b""
        with pytest.raises(HostError, match="host local-b: the slave closed its stdin"):
            for _ in range(50):  # the first write after exit may still land in the pipe buffer
                await conn.write(b"x" * 65536)
        assert await conn.close() == 5

    run(scenario())


def test_local_close_terminates_a_slave_that_ignores_eof(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> tuple[int | None, float]:
        conn = await open_local("local-c", zipapp=echo_zipapp, cache_dir=tmp_path)
        await read_line(conn)
        await conn.write(b"IGNORE-EOF\n")
        await read_line(conn)
        start = time.monotonic()
        status = await conn.close(grace_s=0.3)
        return status, time.monotonic() - start

    status, elapsed_s = run(scenario())
    assert status == -signal.SIGTERM
    assert elapsed_s < 2.0


def test_local_close_kills_a_stopped_slave_whose_stdin_is_full(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    """A SIGSTOPped slave never takes what its stdin pipe still holds: closing it drops that
    after the grace, so it is killed, within the grace and the terminate's wait, rather than
    closing waiting for the pipe forever (and the slave left stopped)."""

    async def scenario() -> tuple[int | None, float]:
        conn = await open_local("local-s", zipapp=echo_zipapp, cache_dir=tmp_path)
        assert conn.pid is not None
        await read_line(conn)
        os.kill(conn.pid, signal.SIGSTOP)
        writer = asyncio.ensure_future(conn.write(b"x" * (4 << 20)))
        await asyncio.sleep(0.1)
        assert not writer.done()  # the pipe is full
        start = time.monotonic()
        try:
            status = await asyncio.wait_for(conn.close(grace_s=0.3), 10)
        finally:
            writer.cancel()
            if conn.returncode is None:
                os.kill(conn.pid, signal.SIGKILL)
        return status, time.monotonic() - start

    status, elapsed_s = run(scenario(), timeout_s=30)
    assert status == -signal.SIGKILL  # a stopped process does not act on SIGTERM
    assert elapsed_s < 2.0, elapsed_s


def test_local_missing_interpreter_is_a_start_error(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    with pytest.raises(SlaveStartError, match="host local-d: /nonexistent/python3 not found"):
        run(open_local("local-d", "/nonexistent/python3", zipapp=echo_zipapp, cache_dir=tmp_path))


def test_local_interpreter_without_numpy_is_named(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    # -S: no site-packages, so the system python3 sees neither numpy nor psutil.
    with pytest.raises(SlaveStartError) as info:
        run(open_local("local-e", f"{SYSTEM_PYTHON} -S", zipapp=echo_zipapp, cache_dir=tmp_path))
    text = str(info.value)
    assert text.startswith("host local-e: /usr/bin/python3 -S lacks numpy: install python3-numpy")
    assert "lacks psutil: install python3-psutil" in text


_HOLD_LOCAL = """
import asyncio, sys
from pathlib import Path
from master.hosts.transport import open_local
from master.hosts.zipapp import build_slave_zipapp
sys.path.insert(0, {tests!r})
from conftest import ECHO_SOURCE

async def main():
    app = build_slave_zipapp("ivypy_echo_slave:main",
                             extra_files={{"ivypy_echo_slave.py": ECHO_SOURCE}})
    conn = await open_local("held", cache_dir=Path({cache!r}), zipapp=app)
    line = b""
    while not line.endswith(b"\\n"):
        line += await conn.read()
    print(line.decode().strip(), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_local_slave_exits_when_the_master_is_killed(tmp_path: Path) -> None:
    code = _HOLD_LOCAL.format(tests=str(REPO_ROOT / "tests" / "master"), cache=str(tmp_path))
    master = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        assert master.stdout is not None
        slave_pid = int(master.stdout.readline())
        assert not pid_gone(slave_pid)
        master.send_signal(signal.SIGKILL)
        master.wait()
        wait_gone(slave_pid, within_s=2.0)
    finally:
        master.kill()
        master.wait()


# --------------------------------------------------------------------------------------------
# ssh through the in-process server


def spec_for(server: SshServerInfo, name: str = "h-test", **overrides: object) -> SshHostSpec:
    fields: dict[str, object] = {
        "name": name,
        "address": server.host,
        "port": server.port,
        "user": "ivytest",
        "python": SYSTEM_PYTHON,
        "identity_file": str(server.client_key_path),
        "known_hosts": str(server.known_hosts_path),
        "ssh_config": os.devnull,  # the user's ~/.ssh/config must not change what is tested
        "connect_timeout_s": 5.0,
    }
    fields.update(overrides)
    return SshHostSpec(**fields)  # type: ignore[arg-type]


def test_ssh_uploads_once_runs_under_system_python_and_caches_by_hash(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            spec = spec_for(server, "h1")
            first = await open_ssh(spec, zipapp=echo_zipapp)
            second = await open_ssh(spec, zipapp=echo_zipapp)
            try:
                assert first.zipapp_uploaded and not second.zipapp_uploaded
                expected = server.home / ".cache" / "ivypy" / echo_zipapp.file_name
                assert first.zipapp_path == second.zipapp_path == str(expected)
                assert hashlib.sha256(expected.read_bytes()).hexdigest() == echo_zipapp.sha256
                assert sorted(p.name for p in expected.parent.iterdir()) == [expected.name]
                payload = os.urandom(200_000)
                pids = await asyncio.gather(
                    echo_roundtrip(first, payload), echo_roundtrip(second, payload[::-1])
                )
                assert pids[0] != pids[1]
            finally:
                statuses = [await first.close(), await second.close()]
            assert statuses == [0, 0]
            assert all(pid_gone(pid) for pid in pids)
            assert "impl msgpack.fallback" in first.stderr_tail()

    run(scenario())


def test_ssh_passes_the_slave_its_arguments(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> str:
        async with ssh_server(tmp_path) as server:
            conn = await open_ssh(spec_for(server, "h1", slave_args=SLAVE_ARGS),
                                  zipapp=echo_zipapp)
            try:
                await read_line(conn)
            finally:
                assert await conn.close() == 0
            return conn.stderr_tail()

    assert f" argv {list(SLAVE_ARGS)!r}" in run(scenario())


def test_ssh_replaces_a_truncated_cached_zipapp(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            cached = server.home / "cache" / echo_zipapp.file_name
            cached.parent.mkdir()
            cached.write_bytes(echo_zipapp.data[:1000])
            conn = await open_ssh(
                spec_for(server), zipapp=echo_zipapp, remote_cache_dir=str(cached.parent)
            )
            try:
                assert conn.zipapp_uploaded
                assert cached.read_bytes() == echo_zipapp.data
                await echo_roundtrip(conn, b"abc")
            finally:
                await conn.close()

    run(scenario())


def test_ssh_upload_removes_stale_temporaries_and_keeps_fresh_ones(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            cache = server.home / "cache"
            cache.mkdir()
            stale = cache / f"{echo_zipapp.file_name}.tmp-{'a' * 16}"
            fresh = cache / f"{echo_zipapp.file_name}.tmp-{'b' * 16}"  # another master's, now
            other = cache / "notes.tmp-0123456789abcdef"  # not ours
            for f in (stale, fresh, other):
                f.write_bytes(b"partial")
            two_hours_ago = time.time() - 7200
            for f in (stale, other):
                os.utime(f, (two_hours_ago, two_hours_ago))
            conn = await open_ssh(spec_for(server), zipapp=echo_zipapp,
                                  remote_cache_dir=str(cache))
            await conn.close()
            assert sorted(p.name for p in cache.iterdir()) == sorted(
                [echo_zipapp.file_name, fresh.name, other.name])

    run(scenario())


def test_ssh_failed_upload_leaves_no_temporary(
    tmp_path: Path, echo_zipapp: SlaveZipapp, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing_write(self: object, data: bytes, offset: int | None = None) -> int:
        raise asyncssh.SFTPFailure("No space left on device")

    monkeypatch.setattr(asyncssh.SFTPClientFile, "write", failing_write)

    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            cache = server.home / "cache"
            with pytest.raises((HostError, SlaveStartError), match="h-test"):
                await open_ssh(spec_for(server), zipapp=echo_zipapp,
                               remote_cache_dir=str(cache))
            assert list(cache.iterdir()) == []

    run(scenario())


def test_ssh_relays_a_1_mib_stderr_line_cut_and_the_lines_after_it(
    tmp_path: Path, noisy_zipapp: SlaveZipapp
) -> None:
    seen: list[str] = []

    async def scenario() -> int | None:
        async with ssh_server(tmp_path) as server:
            conn = await open_ssh(spec_for(server, "h-noisy"), zipapp=noisy_zipapp,
                                  on_stderr_line=seen.append)
            try:
                return await asyncio.wait_for(conn.wait(), 10)
            finally:
                await conn.close()

    assert run(scenario(), timeout_s=30) == 0
    _check_relayed_long_line(seen)


def test_ssh_exit_status_and_terminate_reach_the_master(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            conn = await open_ssh(spec_for(server, "h-exit"), zipapp=echo_zipapp)
            await read_line(conn)
            await conn.write(b"EXIT 3\n")
            assert await conn.wait() == 3
            assert await conn.close() == 3

            conn = await open_ssh(spec_for(server, "h-stuck"), zipapp=echo_zipapp)
            pid = int(await read_line(conn))
            await conn.write(b"IGNORE-EOF\n")
            await read_line(conn)
            assert await conn.close(grace_s=0.3) == -signal.SIGTERM
            wait_gone(pid, within_s=2.0)

    run(scenario())


def test_ssh_finds_the_pid_after_what_the_login_printed_and_relays_that(
    tmp_path: Path, echo_zipapp: SlaveZipapp, caplog: pytest.LogCaptureFixture
) -> None:
    # a login shell's rc file that writes to stderr before the command runs: its lines reach
    # the log as the slave's, and the pid marker after them still lets close() stop a slave
    # that ignores EOF
    login = [f"rc line {i}: {'x' * (i * 40)}" for i in range(30)]
    seen: list[str] = []

    async def scenario() -> None:
        login_stderr = "".join(line + "\n" for line in login).encode()
        async with ssh_server(tmp_path, login_stderr=login_stderr) as server:
            conn = await open_ssh(spec_for(server, "h-rc"), zipapp=echo_zipapp,
                                  on_stderr_line=seen.append)
            pid = int(await read_line(conn))
            assert conn.pid == pid
            await conn.write(b"IGNORE-EOF\n")
            await read_line(conn)
            assert await conn.close(grace_s=0.3) == -signal.SIGTERM
            wait_gone(pid, within_s=2.0)

    with caplog.at_level(logging.INFO, logger=slave_logger_name("h-rc")):
        run(scenario())
    assert seen[: len(login)] == login
    assert seen[len(login)].startswith("echo-slave pid ")
    assert not any("ivypy-slave-pid" in line for line in seen)
    relayed = [r.getMessage() for r in caplog.records if r.name == slave_logger_name("h-rc")]
    assert relayed[: len(login)] == login


def test_ssh_connection_lost_mid_run_is_a_host_error(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            conn = await open_ssh(spec_for(server, "h-lost"), zipapp=echo_zipapp)
            reader = Reader(conn)
            await reader.line()
        # the server and its connections are gone
        try:
            assert await conn.read() == b""
        except HostError as exc:
            assert exc.host == "h-lost"
        with pytest.raises(HostError, match="host h-lost: lost the slave's stdin"):
            await conn.write(b"anyone there?\n")
        await conn.close(grace_s=0.1)

    run(scenario())


def test_ssh_interpreter_without_numpy_names_host_and_package(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            await open_ssh(spec_for(server, "h2", python=f"{SYSTEM_PYTHON} -S"), zipapp=echo_zipapp)

    with pytest.raises(SlaveStartError) as info:
        run(scenario())
    assert info.value.host == "h2"
    assert "lacks numpy: install python3-numpy (Debian/Ubuntu) or pip install numpy" in str(
        info.value
    )


def test_ssh_missing_interpreter(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            await open_ssh(spec_for(server, "h3", python="python3.0-nope"), zipapp=echo_zipapp)

    with pytest.raises(SlaveStartError, match=r"host h3: python3\.0-nope not found"):
        run(scenario())


def test_ssh_changed_host_key_is_refused(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            wrong = server.write_known_hosts(new_key(), tmp_path / "known_hosts_old")
            await open_ssh(spec_for(server, "h4", known_hosts=str(wrong)), zipapp=echo_zipapp)

    with pytest.raises(HostError) as info:
        run(scenario())
    assert info.value.host == "h4"
    text = str(info.value)
    assert text.startswith("host h4: host key verification failed: the host's key CHANGED: it "
                           f"is not the one {tmp_path / 'known_hosts_old'}:1 has for "), text
    assert "If the host was reinstalled, remove that line (ssh-keygen -R " in text
    assert not (tmp_path / "home" / ".cache").exists()  # nothing was uploaded


def test_ssh_unknown_host_key_is_refused(tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            await open_ssh(spec_for(server, "h5", known_hosts=os.devnull), zipapp=echo_zipapp)

    with pytest.raises(HostError) as info:
        run(scenario())
    assert str(info.value).startswith(
        f"host h5: host key verification failed: {os.devnull} has no key for "), info.value
    assert ">> /dev/null)" in str(info.value) and "ssh-keyscan -p " in str(info.value)


def test_ssh_wrong_client_key_is_permission_denied(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    other_key = tmp_path / "other_key"
    new_key().write_private_key(str(other_key))

    async def scenario() -> None:
        async with ssh_server(tmp_path) as server:
            await open_ssh(spec_for(server, "h6", identity_file=str(other_key)), zipapp=echo_zipapp)

    with pytest.raises(HostError, match="host h6: permission denied"):
        run(scenario())


def test_ssh_closed_port_is_connection_refused_quickly(echo_zipapp: SlaveZipapp) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nobody listens
    spec = SshHostSpec(
        name="h7", address="127.0.0.1", port=port, ssh_config=os.devnull, connect_timeout_s=2.0
    )
    start = time.monotonic()
    with pytest.raises(HostError) as info:
        run(open_ssh(spec, zipapp=echo_zipapp))
    assert time.monotonic() - start < 2.0
    assert str(info.value) == "host h7: unreachable: connection refused"
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


def test_ssh_to_a_host_that_never_speaks_is_cancelled_at_once(echo_zipapp: SlaveZipapp) -> None:
    """A port that accepts TCP and never sends an SSH banner: the handshake waits (its own
    timeout is long), and cancelling it (the operator's Ctrl-C while the run starts its hosts)
    ends it within 0.5 s, the connection closed."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        spec = SshHostSpec(name="mute", address="127.0.0.1", port=server.getsockname()[1],
                           ssh_config=os.devnull, connect_timeout_s=30.0)

        async def scenario() -> float:
            task = asyncio.ensure_future(open_ssh(spec, zipapp=echo_zipapp))
            await asyncio.sleep(1.0)
            assert not task.done()  # waiting for the banner
            task.cancel()
            start = time.monotonic()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return time.monotonic() - start

        took = run(scenario())
        assert took < 0.5, f"the handshake ended {took:.2f} s after it was cancelled"
        conn, _ = server.accept()  # it had connected; the master's end is closed
        with conn:
            conn.settimeout(5)
            assert conn.recv(4096).startswith(b"SSH-")  # the client's banner, then its close
            while conn.recv(4096):
                pass


# --------------------------------------------------------------------------------------------
# real OpenSSH hosts in network namespaces (scripts/testbed; root only)


def spec_on_testbed(testbed: Testbed, host: TestbedHost, **overrides: object) -> SshHostSpec:
    fields: dict[str, object] = {
        "name": host.name,
        "address": host.address,
        "user": "root",
        "python": SYSTEM_PYTHON,
        "identity_file": testbed.identity_file,
        "known_hosts": testbed.known_hosts,
        "ssh_config": os.devnull,
        "connect_timeout_s": 5.0,
    }
    fields.update(overrides)
    return SshHostSpec(**fields)  # type: ignore[arg-type]


def net_namespace_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.root
def test_testbed_three_hosts_share_one_upload_and_echo(
    testbed: Testbed, tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    # The namespaces share this machine's file system, so one remote cache directory serves all
    # three hosts: they race to upload the same file, which must end up whole and alone.
    remote_dir = str(tmp_path / "remote-cache")

    async def scenario() -> None:
        specs = [spec_on_testbed(testbed, h) for h in testbed.hosts]
        conns = await asyncio.gather(
            *(open_ssh(s, zipapp=echo_zipapp, remote_cache_dir=remote_dir) for s in specs)
        )
        try:
            payloads = [os.urandom(100_000 + i) for i in range(len(conns))]
            pids = await asyncio.gather(
                *(echo_roundtrip(c, p) for c, p in zip(conns, payloads, strict=True))
            )
            for conn, host, pid in zip(conns, testbed.hosts, pids, strict=True):
                assert conn.pid == pid
                # each slave runs in its host's namespace, under that host's sshd
                assert net_namespace_of(pid) == net_namespace_of(host.sshd_pid)
            assert len({net_namespace_of(pid) for pid in pids}) == 3
        finally:
            statuses = [await c.close() for c in conns]
        assert statuses == [0, 0, 0]
        assert any(c.zipapp_uploaded for c in conns)
        cached = Path(remote_dir) / echo_zipapp.file_name
        assert [p.name for p in Path(remote_dir).iterdir()] == [cached.name]
        assert hashlib.sha256(cached.read_bytes()).hexdigest() == echo_zipapp.sha256

    run(scenario())


@pytest.mark.root
def test_testbed_host_through_its_ssh_config_alias(
    testbed: Testbed, tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    # Only the alias and the config file: HostName, User, IdentityFile and UserKnownHostsFile
    # all come from the ssh config, as they would for OpenSSH's ssh.
    host = testbed.hosts[1]
    spec = SshHostSpec(
        name=host.name, address=host.name, python=SYSTEM_PYTHON, ssh_config=testbed.ssh_config
    )

    async def scenario() -> None:
        conn = await open_ssh(spec, zipapp=echo_zipapp, remote_cache_dir=str(tmp_path))
        try:
            await echo_roundtrip(conn, b"via ssh_config\n")
        finally:
            assert await conn.close() == 0

    run(scenario())


@pytest.mark.root
def test_testbed_close_kills_a_slave_that_ignores_eof(
    testbed: Testbed, tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    async def scenario() -> int:
        spec = spec_on_testbed(testbed, testbed.hosts[2])
        conn = await open_ssh(spec, zipapp=echo_zipapp, remote_cache_dir=str(tmp_path))
        reader = Reader(conn)
        pid = int(await reader.line())
        await conn.write(b"IGNORE-EOF\n")
        await reader.line()
        assert await conn.close(grace_s=0.3) == -signal.SIGTERM
        return pid

    wait_gone(run(scenario()), within_s=2.0)


@pytest.mark.root
def test_testbed_changed_host_key_is_refused(
    testbed: Testbed, tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    host = testbed.hosts[0]
    stale = tmp_path / "known_hosts"
    stale.write_text(f"{host.name},{host.address} {new_key().export_public_key().decode()}")
    with pytest.raises(HostError) as info:
        run(open_ssh(spec_on_testbed(testbed, host, known_hosts=str(stale)), zipapp=echo_zipapp))
    assert info.value.host == host.name
    assert str(info.value).startswith(f"host {host.name}: host key verification failed")


@pytest.mark.root
def test_testbed_address_without_a_host_times_out_quickly(
    testbed: Testbed, echo_zipapp: SlaveZipapp
) -> None:
    # 10.77.0.250 is inside the test bed's /24 (on the bridge) but no namespace answers there.
    spec = SshHostSpec(
        name="ghost",
        address="10.77.0.250",
        user="root",
        ssh_config=os.devnull,
        known_hosts=testbed.known_hosts,
        connect_timeout_s=0.5,
    )
    start = time.monotonic()
    with pytest.raises(HostError) as info:
        run(open_ssh(spec, zipapp=echo_zipapp))
    assert time.monotonic() - start < 1.5
    assert str(info.value) == "host ghost: unreachable: timeout after 0.5 s"


_HOLD_SSH = """
import asyncio, sys
from master.hosts.transport import SshHostSpec, open_ssh
from master.hosts.zipapp import build_slave_zipapp
sys.path.insert(0, {tests!r})
from conftest import ECHO_SOURCE

async def main():
    app = build_slave_zipapp("ivypy_echo_slave:main",
                             extra_files={{"ivypy_echo_slave.py": ECHO_SOURCE}})
    conn = await open_ssh(SshHostSpec(**{spec!r}), zipapp=app, remote_cache_dir={cache!r})
    print(conn.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.mark.root
def test_testbed_slave_exits_when_the_master_is_killed(testbed: Testbed, tmp_path: Path) -> None:
    host = testbed.hosts[0]
    spec = dataclasses.asdict(spec_on_testbed(testbed, host))
    code = _HOLD_SSH.format(
        tests=str(REPO_ROOT / "tests" / "master"), spec=spec, cache=str(tmp_path)
    )
    master = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        assert master.stdout is not None
        remote_pid = int(master.stdout.readline())
        assert not pid_gone(remote_pid)
        assert net_namespace_of(remote_pid) == net_namespace_of(host.sshd_pid)
        master.send_signal(signal.SIGKILL)
        master.wait()
        wait_gone(remote_pid, within_s=2.0)
    finally:
        master.kill()
        master.wait()
