"""An in-process SSH server for tests (in the style of asyncssh's tests/server.py).

Owns: an asyncssh server on 127.0.0.1, port 0, with a throwaway host key and a throwaway
client key, that runs each exec request as a real ``/bin/sh -c`` process (cwd and ``$HOME`` are
the server's home directory) and serves SFTP with relative paths under that home, as sshd does.
``known_hosts`` and the client key are written to files, so clients connect exactly as they
would to OpenSSH.

Must not: touch anything outside its work directory, or outlive its ``async with`` block (every
process it started is killed on exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh


@dataclass(frozen=True)
class SshServerInfo:
    """Where the server listens and the files a client needs."""

    host: str
    port: int
    home: Path
    host_key: asyncssh.SSHKey
    client_key_path: Path
    known_hosts_path: Path

    def write_known_hosts(self, key: asyncssh.SSHKey, path: Path) -> Path:
        """Write a known_hosts file that lists ``key`` for this server (e.g. a wrong one)."""
        path.write_text(f"[{self.host}]:{self.port} {key.export_public_key().decode()}")
        return path


def new_key() -> asyncssh.SSHKey:
    """A throwaway ed25519 key."""
    return asyncssh.generate_private_key("ssh-ed25519")


class _HomeSFTPServer(asyncssh.SFTPServer):
    """SFTP with relative paths resolved in ``home``, like sshd's login directory."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], home: Path) -> None:
        super().__init__(chan)
        self._home = os.fsencode(home)

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else os.path.join(self._home, path)


class _ProcessRunner:
    """Runs exec requests as real processes and remembers them so they can be killed."""

    def __init__(self, home: Path, login_stderr: bytes) -> None:
        self._home = home
        self._login_stderr = login_stderr
        self._procs: set[asyncio.subprocess.Process] = set()

    async def handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if not process.command:
            process.stderr.write(b"this test server only runs commands\n")
            process.exit(1)
            return
        process.stderr.write(self._login_stderr)  # what a login shell's rc file printed
        env = dict(os.environ, HOME=str(self._home))
        proc = await asyncio.create_subprocess_shell(
            process.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._home,
            env=env,
            start_new_session=True,
        )
        self._procs.add(proc)
        try:
            pumps = [
                asyncio.create_task(self._pump_in(process, proc)),
                asyncio.create_task(_pump_out(proc.stdout, process.stdout)),
                asyncio.create_task(_pump_out(proc.stderr, process.stderr)),
            ]
            status = await proc.wait()
            await asyncio.gather(*pumps[1:])
            pumps[0].cancel()
            if status < 0:
                process.exit_with_signal(signal.Signals(-status).name.removeprefix("SIG"))
            else:
                process.exit(status)
        finally:
            self._procs.discard(proc)

    @staticmethod
    async def _pump_in(
        process: asyncssh.SSHServerProcess[bytes], proc: asyncio.subprocess.Process
    ) -> None:
        """Channel -> process stdin; EOF or a closed channel closes the pipe, as sshd does.

        A ``signal`` request from the client arrives as ``SignalReceived`` in the stdin stream,
        also after EOF, so the stream is polled until the process exits (this task is then
        cancelled) and the signal is delivered to the process.
        """
        assert proc.stdin is not None
        try:
            while True:
                try:
                    data = await process.stdin.read(65536)
                except asyncssh.SignalReceived as exc:
                    with contextlib.suppress(ProcessLookupError, KeyError):
                        proc.send_signal(signal.Signals["SIG" + exc.signal])
                    continue
                if data and not proc.stdin.is_closing():
                    proc.stdin.write(data)
                    await proc.stdin.drain()
                elif not data:
                    proc.stdin.close()
                    await asyncio.sleep(0.05)
        except (asyncssh.Error, OSError):
            return
        finally:
            proc.stdin.close()

    async def kill_all(self) -> None:
        for proc in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def _pump_out(
    source: asyncio.StreamReader | None, channel: asyncssh.SSHWriter[bytes]
) -> None:
    """Process stdout/stderr -> channel, until the process closes it."""
    assert source is not None
    while data := await source.read(65536):
        try:
            channel.write(data)
            await channel.drain()
        except (asyncssh.Error, OSError):
            # The client is gone: keep draining so the process never blocks on a full pipe.
            continue


@contextlib.asynccontextmanager
async def ssh_server(
    workdir: Path, *, host_key: asyncssh.SSHKey | None = None, login_stderr: bytes = b""
) -> AsyncIterator[SshServerInfo]:
    """Run an SSH server on 127.0.0.1:<free port> for the duration of the block.

    ``workdir`` receives ``home/`` (the login directory), ``client_key`` and ``known_hosts``.
    ``login_stderr`` is written to each command's stderr before it runs, as a login shell's rc
    file or a banner would.
    """
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    server_key = host_key if host_key is not None else new_key()
    client_key = new_key()
    client_key_path = workdir / "client_key"
    client_key.write_private_key(str(client_key_path))
    client_key_path.chmod(0o600)
    runner = _ProcessRunner(home, login_stderr)

    def sftp_factory(chan: asyncssh.SSHServerChannel[bytes]) -> asyncssh.SFTPServer:
        return _HomeSFTPServer(chan, home)

    acceptor = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[server_key],
        authorized_client_keys=asyncssh.import_authorized_keys(
            client_key.export_public_key().decode()
        ),
        process_factory=runner.handle,
        sftp_factory=sftp_factory,
        encoding=None,
        allow_scp=False,
    )
    try:
        port = acceptor.get_port()
        info = SshServerInfo(
            host="127.0.0.1",
            port=port,
            home=home,
            host_key=server_key,
            client_key_path=client_key_path,
            known_hosts_path=workdir / "known_hosts",
        )
        info.write_known_hosts(server_key, info.known_hosts_path)
        yield info
    finally:
        acceptor.close()
        await runner.kill_all()
        await acceptor.wait_closed()
