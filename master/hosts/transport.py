"""Transports: start the slave on a host and pump bytes to and from it.

Owns: starting the slave zipapp as a local subprocess (``open_local``) or over SSH with asyncssh
(``open_ssh``), checking the host's Python first, uploading the zipapp to the host's cache, relaying
the slave's stderr lines to a logger per host (read as it comes, whatever the length of a line, so
the slave never blocks on a full stderr pipe; ``master.hosts.stderrlines`` cuts the lines), stopping
the slave, and translating foreign errors (asyncssh, OSError, timeouts) into ``HostError`` /
``SlaveStartError`` -- here and nowhere else.

Must not: know the protocol (it moves opaque bytes; framing and messages live in ``protocol/``),
read the test config (the run loop maps config hosts onto ``SshHostSpec``), or retry on its own.

API used by the run loop::

    conn = await open_local("localhost")                # or: await open_ssh(SshHostSpec(...))
    await conn.write(frame_bytes)                       # HostError if the slave is gone
    chunk = await conn.read()                           # b"" at EOF (slave closed stdout)
    ...
    status = await conn.close()                         # stdin closed; wait; terminate; kill
    conn.returncode                                     # exit status, -signal, or None

``SlaveConnection`` attributes: ``host`` (the name used in errors and logs), ``pid`` (the slave's
process id on its host), ``zipapp_path`` (where the zipapp lives on that host),
``zipapp_uploaded`` (False when the cached copy was used).
``wait()`` returns the exit status once the slave has exited. ``stderr_tail()`` gives the last
lines the slave wrote to stderr (for error messages). Each stderr line is logged at INFO on the
logger ``slave_logger_name(host)`` (``ivypy.slave.<host>``) and passed to ``on_stderr_line`` when
given; a line over ``STDERR_LINE_MAX_BYTES`` (64 KiB) is cut there and ends with
`` ... [line truncated: <n> bytes]``.

When the master dies (even by SIGKILL) the slave's stdin closes and the slave exits by itself:
locally because the master held the only write end of the stdin pipe; over SSH because the
kernel closes the TCP connection, sshd ends the session and closes the pipe to the remote
process's stdin. No pty is requested, so nothing else is needed. To stop a slave that does not
exit on EOF, ``close()`` signals it: locally directly, over SSH by running ``kill`` through a
second channel on the same connection, with the pid the remote command printed on stderr before
exec'ing the interpreter (OpenSSH 9.2's sshd, for one, ignores SSH "signal" requests). Local
slaves start in their own session so that a Ctrl-C at the terminal reaches the master only, which
then stops them in order.

Host keys are checked against known_hosts as OpenSSH does (``~/.ssh/known_hosts`` or the
``UserKnownHostsFile`` named in the ssh config) unless ``SshHostSpec.known_hosts`` names a file;
an unknown or changed key is refused. Keys come from the agent, ``~/.ssh/config`` and the default
identity files as asyncssh does, unless ``identity_file`` / ``ssh_config`` name files.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import errno
import io
import logging
import posixpath
import re
import secrets
import shlex
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by ``open_ssh``: a run on local hosts only does without (0.13 s)
    import asyncssh

from master.hosts.slaveloop import slave_zipapp
from master.hosts.stderrlines import MAX_LINE_BYTES as STDERR_LINE_MAX_BYTES
from master.hosts.stderrlines import StderrLines
from master.hosts.zipapp import SlaveZipapp, write_cached
from protocol.errors import HostError, SlaveStartError

logger = logging.getLogger(__name__)

MIN_PYTHON = (3, 10)
# module -> (minimum version, Debian package, pip name)
REQUIRED_MODULES: dict[str, tuple[tuple[int, ...], str, str]] = {
    "numpy": ((1, 24), "python3-numpy", "numpy"),
    "psutil": ((5, 9), "python3-psutil", "psutil"),
}
READ_CHUNK_BYTES = 1 << 16
STDERR_TAIL_LINES = 40
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_CLOSE_GRACE_S = 2.0
_KILL_WAIT_S = 1.0
PROBE_TIMEOUT_S = 30.0
REMOTE_CACHE_DIR = ".cache/ivypy"  # relative to the login directory, as ~/.cache/ivypy

# One command that reports the interpreter version and each required module separately, so the
# error can say exactly what to install. Prints "python M N P" then "<module> <version>" or
# "<module> MISSING <reason>" per module. Written to run (and fail legibly) on old Pythons too.
PROBE_SCRIPT = (
    "import sys, importlib\n"
    "sys.stdout.write('python %d %d %d\\n' % tuple(sys.version_info[:3]))\n"
    f"for m in {tuple(REQUIRED_MODULES)!r}:\n"
    "    try:\n"
    "        v = getattr(importlib.import_module(m), '__version__', '0')\n"
    "        sys.stdout.write('%s %s\\n' % (m, v))\n"
    "    except Exception as e:\n"
    "        sys.stdout.write('%s MISSING %s\\n' % (m, type(e).__name__))\n"
)


@dataclass(frozen=True)
class SshHostSpec:
    """How to reach one host over SSH. ``None`` means: as the ssh config / asyncssh default.

    ``address`` is what to connect to (a name, an IP, or a Host alias from the ssh config);
    ``name`` is how the host is called in errors and logs. ``python`` is a shell word list
    for the interpreter on the host (``"python3"``, ``"/usr/bin/python3"``).
    """

    name: str
    address: str
    user: str | None = None
    port: int | None = None
    python: str = "python3"
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    slave_args: tuple[str, ...] = ()  # the slave's command-line options (``--worker-cpus``)


@dataclass(frozen=True)
class PythonInfo:
    """What the probe found on a host."""

    version: tuple[int, int, int]
    module_versions: dict[str, str]


def slave_logger_name(host: str) -> str:
    """The logger that receives a host's slave stderr lines."""
    return f"ivypy.slave.{host}"


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _install_hint(module: str) -> str:
    _, deb, pip_name = REQUIRED_MODULES[module]
    return f"install {deb} (Debian/Ubuntu) or pip install {pip_name}"


def check_probe(
    host: str, python: str, exit_status: int | None, stdout: str, stderr: str
) -> PythonInfo:
    """Judge the probe's output: return what was found or raise ``SlaveStartError``.

    Pure, so every verdict is table-tested without a host.
    """
    if exit_status == 127:
        raise SlaveStartError(
            f"{python} not found: install python3 (>= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}) "
            "or set the host's python",
            host=host,
            exit_status=exit_status,
            stderr_tail=stderr,
        )
    lines = stdout.splitlines()
    head = lines[0].split() if lines else []
    if (
        exit_status != 0
        or len(head) != 4
        or head[0] != "python"
        or not all(p.isdigit() for p in head[1:])
    ):
        raise SlaveStartError(
            f"{python} did not run the interpreter check; is it a Python 3?",
            host=host,
            exit_status=exit_status,
            stderr_tail=stderr or stdout,
        )
    version = (int(head[1]), int(head[2]), int(head[3]))
    if version[:2] < MIN_PYTHON:
        raise SlaveStartError(
            f"{python} is Python {version[0]}.{version[1]}.{version[2]}; the slave needs "
            f"Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}",
            host=host,
        )
    found: dict[str, str] = {}
    problems: list[str] = []
    for line in lines[1:]:
        words = line.split()
        if len(words) >= 2 and words[0] in REQUIRED_MODULES:
            found[words[0]] = " ".join(words[1:])
    for module, (minimum, _deb, _pip) in REQUIRED_MODULES.items():
        seen = found.get(module)
        if seen is None or seen.startswith("MISSING"):
            problems.append(f"lacks {module}: {_install_hint(module)}")
        elif _version_tuple(seen) < minimum:
            wanted = ".".join(map(str, minimum))
            problems.append(f"has {module} {seen}, needs >= {wanted}: {_install_hint(module)}")
    if problems:
        raise SlaveStartError(f"{python} " + "; ".join(problems), host=host)
    return PythonInfo(version=version, module_versions=found)


def _own_probe() -> str:
    """The probe's output for the master's own interpreter, run in this process: a slave
    started on it needs no second interpreter started first to be asked (a quarter of a
    second, numpy's import, at each local start)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(PROBE_SCRIPT, {})
    return out.getvalue()


def _probe_command(python: str) -> str:
    """The probe as one shell line (no newlines inside quotes, which csh would refuse)."""
    return f"{python} -c {shlex.quote(f'exec({PROBE_SCRIPT!r})')}"


# The remote command reports the slave's pid on stderr before exec'ing the interpreter, so that
# close() can signal it through a second channel (OpenSSH 9.2's sshd ignores the SSH "signal"
# request). /bin/sh runs it whatever the user's login shell is.
_PID_MARKER = "ivypy-slave-pid"


def _slave_command(python: str, zipapp_path: str, slave_args: tuple[str, ...] = ()) -> str:
    words = " ".join(shlex.quote(w) for w in (zipapp_path, *slave_args))
    script = f"echo {_PID_MARKER} $$ >&2; exec {python} {words}"
    return f"exec /bin/sh -c {shlex.quote(script)}"


#: The most stderr lines a login may print before the pid marker (a shell's rc file, a banner).
_PID_MARKER_MAX_LINES = 200


def _parse_pid_marker(line: bytes) -> int | None:
    words = line.split()
    if len(words) == 2 and words[0] == _PID_MARKER.encode() and words[1].isdigit():
        return int(words[1])
    return None


async def _read_pid_marker(stderr: asyncssh.SSHReader[bytes]) -> tuple[int | None, bytes]:
    """The slave's pid from the marker line, and the stderr bytes before it (what the login
    printed: an rc file's echo, a warning), which are relayed like the slave's own lines.
    ``None`` when stderr ends or ``_PID_MARKER_MAX_LINES`` lines pass without the marker."""
    before = bytearray()
    for _ in range(_PID_MARKER_MAX_LINES):
        line = await stderr.readline()
        if not line:
            break
        pid = _parse_pid_marker(line)
        if pid is not None:
            return pid, bytes(before)
        before += line
    return None, bytes(before)


def describe_error(exc: BaseException, timeout_s: float | None = None) -> str:
    """The reason part of a HostError for a foreign exception."""
    ssh = sys.modules.get("asyncssh")  # none of its exceptions before it is imported
    if ssh is not None:
        if isinstance(exc, ssh.HostKeyNotVerifiable):
            return f"host key verification failed ({exc.reason})"
        if isinstance(exc, ssh.PermissionDenied):
            return f"permission denied ({exc.reason})"
        if isinstance(exc, ssh.ConnectionLost):
            return f"connection lost ({exc.reason})"
        if isinstance(exc, ssh.DisconnectError):
            return f"disconnected: {exc.reason}"
        if isinstance(exc, ssh.SFTPError):
            return f"SFTP error: {exc.reason}"
        if isinstance(exc, ssh.ChannelOpenError):
            return f"could not open an SSH channel: {exc.reason}"
        if isinstance(exc, ssh.KeyImportError):
            return f"cannot load an SSH key: {exc}"
    if isinstance(exc, TimeoutError):
        limit = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return f"unreachable: timeout{limit}"
    if isinstance(exc, ConnectionRefusedError):
        return "unreachable: connection refused"
    if isinstance(exc, socket.gaierror):
        return f"unreachable: cannot resolve the host name ({exc.strerror})"
    if isinstance(exc, OSError):
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"unreachable: {exc.strerror}"
        if exc.filename is not None:
            return f"cannot read {exc.filename}: {exc.strerror}"
        return f"unreachable: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


def foreign_errors() -> tuple[type[BaseException], ...]:
    """The foreign exceptions this module translates, and only here (asyncssh's once it is
    imported)."""
    ssh = sys.modules.get("asyncssh")
    extra = () if ssh is None else (ssh.Error, ssh.KeyImportError)
    return (*extra, OSError, asyncio.TimeoutError)


class SlaveConnection(abc.ABC):
    """A running slave: bytes in, bytes out, stderr relayed. See the module docstring."""

    def __init__(
        self,
        host: str,
        zipapp_path: str,
        zipapp_uploaded: bool,
        on_stderr_line: Callable[[str], None] | None,
    ) -> None:
        self.host = host
        self.zipapp_path = zipapp_path
        self.zipapp_uploaded = zipapp_uploaded
        self.pid: int | None = None  # the slave's process id on its host, when known
        self._on_stderr_line = on_stderr_line
        self._stderr_logger = logging.getLogger(slave_logger_name(host))
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_lines = StderrLines(STDERR_LINE_MAX_BYTES)
        self._stderr_task: asyncio.Task[None] | None = None

    # --- stderr relay -------------------------------------------------------------------------
    def _start_stderr_relay(self) -> None:
        self._stderr_task = asyncio.get_running_loop().create_task(
            self._relay_stderr(), name=f"slave-stderr-{self.host}"
        )

    async def _relay_stderr(self) -> None:
        while data := await self._read_stderr():
            self._relay_stderr_bytes(data)
        for line in self._stderr_lines.close():
            self._handle_stderr_line(line)

    def _relay_stderr_bytes(self, data: bytes) -> None:
        for line in self._stderr_lines.feed(data):
            self._handle_stderr_line(line)

    def _handle_stderr_line(self, line: str) -> None:
        self._stderr_tail.append(line)
        self._stderr_logger.info("%s", line)
        if self._on_stderr_line is not None:
            try:
                self._on_stderr_line(line)
            except Exception:
                logger.exception("host %s: stderr callback failed", self.host)

    async def _stderr_done(self, timeout_s: float = _KILL_WAIT_S) -> None:
        if self._stderr_task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout_s)
        except (asyncio.TimeoutError, Exception):
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task

    def stderr_tail(self) -> str:
        """The last lines the slave wrote to stderr, joined by newlines."""
        return "\n".join(self._stderr_tail)

    def _lost(self, what: str, exc: BaseException | None = None) -> HostError:
        reason = what if exc is None else f"{what}: {describe_error(exc)}"
        return HostError(
            reason, host=self.host, exit_status=self.returncode, stderr_tail=self.stderr_tail()
        )

    # --- the interface ------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def returncode(self) -> int | None:
        """Exit status, minus the signal number when killed by a signal, None while running."""

    @abc.abstractmethod
    async def _read_stderr(self) -> bytes:
        """Up to ``READ_CHUNK_BYTES`` of the slave's stderr as they come; ``b""`` at EOF."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Send bytes to the slave's stdin; ``HostError`` if the slave or link is gone."""

    @abc.abstractmethod
    async def read(self) -> bytes:
        """Up to ``READ_CHUNK_BYTES`` from the slave's stdout; ``b""`` at EOF."""

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Wait for the slave to exit; return ``returncode``."""

    @abc.abstractmethod
    async def close(self, grace_s: float = DEFAULT_CLOSE_GRACE_S) -> int | None:
        """Close stdin, give the slave ``grace_s`` to exit, then terminate and kill it."""


class LocalSlaveConnection(SlaveConnection):
    def __init__(
        self,
        host: str,
        proc: asyncio.subprocess.Process,
        zipapp_path: str,
        on_stderr_line: Callable[[str], None] | None,
    ) -> None:
        super().__init__(host, zipapp_path, False, on_stderr_line)
        self._proc = proc
        self.pid = proc.pid
        self._start_stderr_relay()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def _read_stderr(self) -> bytes:
        assert self._proc.stderr is not None
        return await self._proc.stderr.read(READ_CHUNK_BYTES)

    async def write(self, data: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise self._lost("the slave closed its stdin", exc) from exc

    async def read(self) -> bytes:
        assert self._proc.stdout is not None
        return await self._proc.stdout.read(READ_CHUNK_BYTES)

    async def wait(self) -> int | None:
        status = await self._proc.wait()
        await self._stderr_done()
        return status

    async def close(self, grace_s: float = DEFAULT_CLOSE_GRACE_S) -> int | None:
        stdin = self._proc.stdin
        loop = asyncio.get_running_loop()
        end = loop.time() + grace_s
        if stdin is not None and not stdin.is_closing():
            stdin.close()  # once the pipe has taken what is buffered
            closed = asyncio.ensure_future(stdin.wait_closed())
            if not (await asyncio.wait([closed], timeout=grace_s))[0]:
                # a slave that stopped reading (SIGSTOP, a hung device) never takes it: it is
                # dropped, or the slave would never be signalled
                stdin.transport.abort()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await closed
        for action, wait_s in ((None, max(0.0, end - loop.time())), ("terminate", _KILL_WAIT_S),
                               ("kill", None)):
            if self._proc.returncode is not None:
                break
            if action is not None:
                with contextlib.suppress(ProcessLookupError):
                    getattr(self._proc, action)()
                logger.warning("host %s: slave did not exit; sent %s", self.host, action)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), wait_s)
        await self._stderr_done()
        return self._proc.returncode


class _SshSlaveConnection(SlaveConnection):
    def __init__(
        self,
        host: str,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        pid: int | None,
        login_stderr: bytes,
        zipapp_path: str,
        zipapp_uploaded: bool,
        on_stderr_line: Callable[[str], None] | None,
    ) -> None:
        super().__init__(host, zipapp_path, zipapp_uploaded, on_stderr_line)
        self._conn = conn
        self._process = process
        self.pid = pid
        self._relay_stderr_bytes(login_stderr)
        self._start_stderr_relay()

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def _read_stderr(self) -> bytes:
        try:
            return await self._process.stderr.read(READ_CHUNK_BYTES)
        except (asyncssh.Error, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
        except (asyncssh.Error, OSError) as exc:
            raise self._lost("lost the slave's stdin", exc) from exc

    async def read(self) -> bytes:
        try:
            return await self._process.stdout.read(READ_CHUNK_BYTES)
        except (asyncssh.Error, OSError) as exc:
            raise self._lost("lost the slave's stdout", exc) from exc

    async def wait(self) -> int | None:
        await self._process.wait_closed()
        await self._stderr_done()
        return self.returncode

    async def close(self, grace_s: float = DEFAULT_CLOSE_GRACE_S) -> int | None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._process.stdin.write_eof()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._process.wait_closed(), grace_s)
        for sig in ("TERM", "KILL"):
            if self._process.returncode is not None:
                break
            if self.pid is None:
                logger.warning("host %s: slave did not exit, and its pid is not known (no "
                               "pid marker on stderr): closing the connection", self.host)
                break
            logger.warning("host %s: slave did not exit; sending %s", self.host, sig)
            with contextlib.suppress(asyncssh.Error, OSError, asyncio.TimeoutError):
                await asyncio.wait_for(
                    self._conn.run(f"kill -{sig} {self.pid}", stdin=asyncssh.DEVNULL),
                    _KILL_WAIT_S,
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._process.wait_closed(), _KILL_WAIT_S)
        self._process.close()
        self._conn.close()
        with contextlib.suppress(asyncssh.Error, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._conn.wait_closed(), _KILL_WAIT_S)
        await self._stderr_done()
        return self.returncode


# ------------------------------------------------------------------------------------------
# local


async def open_local(
    host_name: str = "localhost",
    python: str = sys.executable,
    *,
    zipapp: SlaveZipapp | None = None,
    cache_dir: Path | None = None,
    check_python: bool = True,
    on_stderr_line: Callable[[str], None] | None = None,
    slave_args: tuple[str, ...] = (),
) -> SlaveConnection:
    """Start the slave as a local subprocess: ``<python> <cache_dir>/slave-<hash16>.pyz
    <slave_args>``.

    ``python`` is split like a shell command line. The zipapp (default: built from this
    checkout) is written to ``cache_dir`` (default ``~/.cache/ivypy``), so local and remote
    hosts run the same bytes.
    """
    app = zipapp if zipapp is not None else await slave_zipapp()
    argv = shlex.split(python)
    try:
        path = write_cached(app, cache_dir)
        if check_python and argv == [sys.executable]:
            check_probe(host_name, python, 0, _own_probe(), "")
        elif check_python:
            probe = await asyncio.create_subprocess_exec(
                *argv,
                "-c",
                PROBE_SCRIPT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(probe.communicate(), PROBE_TIMEOUT_S)
            check_probe(
                host_name,
                python,
                probe.returncode,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
            )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            str(path),
            *slave_args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if exc.filename == argv[0]:
            check_probe(host_name, python, 127, "", str(exc))
        raise SlaveStartError(describe_error(exc), host=host_name) from exc
    except foreign_errors() as exc:
        raise SlaveStartError(describe_error(exc, PROBE_TIMEOUT_S), host=host_name) from exc
    logger.info("host %s: started local slave pid %d (%s)", host_name, proc.pid, path)
    return LocalSlaveConnection(host_name, proc, str(path), on_stderr_line)


# ------------------------------------------------------------------------------------------
# ssh


def _host_key_reason(spec: SshHostSpec) -> str:
    """Why the host's key was refused, told apart: a key known_hosts has for the host that is
    not the one it showed (changed: reinstalled, or someone in between), or none at all
    (unknown); the file, the line and what to do."""
    path = Path(spec.known_hosts or "~/.ssh/known_hosts").expanduser()
    port = spec.port if spec.port not in (None, 22) else None
    try:
        known = asyncssh.read_known_hosts(str(path))
        has_key = bool(known.match(spec.address, spec.address, port)[0])
    except (OSError, ValueError, asyncssh.Error):
        has_key = False
    target = f"[{spec.address}]:{port}" if port else spec.address
    if not has_key:
        scan = f"ssh-keyscan{f' -p {port}' if port else ''} {spec.address}"
        return (f"host key verification failed: {path} has no key for {target}; check the "
                f"host's key fingerprint, then add it ({scan} >> {path})")
    line = next((n for n, text in enumerate(_lines(path), 1)
                 if text.split() and target in text.split()[0].split(",")), None)
    where = f"{path}:{line}" if line else str(path)
    return (f"host key verification failed: the host's key CHANGED: it is not the one {where} "
            f"has for {target}. If the host was reinstalled, remove that line (ssh-keygen -R "
            f"'{target}' -f {path}) and connect again; otherwise someone may be between this "
            "controller and the host")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _connect_options(spec: SshHostSpec) -> dict[str, Any]:
    """asyncssh.connect keyword arguments; unset fields are left to the ssh config/defaults."""
    options: dict[str, Any] = {"connect_timeout": spec.connect_timeout_s}
    if spec.user is not None:
        options["username"] = spec.user
    if spec.port is not None:
        options["port"] = spec.port
    if spec.identity_file is not None:
        options["client_keys"] = [str(Path(spec.identity_file).expanduser())]
    if spec.known_hosts is not None:
        options["known_hosts"] = str(Path(spec.known_hosts).expanduser())
    if spec.ssh_config is not None:
        options["config"] = [str(Path(spec.ssh_config).expanduser())]
    return options


async def _probe_ssh(conn: asyncssh.SSHClientConnection, spec: SshHostSpec) -> PythonInfo:
    result = await asyncio.wait_for(
        conn.run(_probe_command(spec.python), check=False, stdin=asyncssh.DEVNULL),
        PROBE_TIMEOUT_S,
    )
    stdout = result.stdout if isinstance(result.stdout, str) else ""
    stderr = result.stderr if isinstance(result.stderr, str) else ""
    return check_probe(spec.name, spec.python, result.exit_status, stdout, stderr)


async def _ensure_uploaded(
    conn: asyncssh.SSHClientConnection, app: SlaveZipapp, remote_dir: str
) -> tuple[str, bool]:
    """Put ``app`` in ``remote_dir`` on the host unless it is there; return (path, uploaded).

    Uploads to a unique temporary name and renames it into place with the plain SFTP rename,
    which does not replace an existing file: two masters uploading at once both succeed and
    the file is never seen half-written. A failed or interrupted upload removes its temporary
    file when the connection still allows; temporaries older than ``STALE_UPLOAD_S`` (left by
    a master that lost its connection mid-upload) are removed by the next upload.
    """
    async with conn.start_sftp_client() as sftp:
        if not posixpath.isabs(remote_dir):
            remote_dir = posixpath.join(await sftp.realpath("."), remote_dir)
        final = posixpath.join(remote_dir, app.file_name)
        with contextlib.suppress(asyncssh.SFTPNoSuchFile):
            if (await sftp.stat(final)).size == app.size_bytes:
                return final, False
            logger.warning("replacing cached slave zipapp of the wrong size: %s", final)
            await sftp.remove(final)
        await sftp.makedirs(remote_dir, exist_ok=True)
        await _remove_stale_uploads(sftp, remote_dir)
        tmp = f"{final}{UPLOAD_TMP_MARK}{secrets.token_hex(8)}"
        try:
            async with sftp.open(tmp, "wb") as remote_file:
                await remote_file.write(app.data)
            try:
                await sftp.rename(tmp, final)
            except asyncssh.SFTPError:
                # Another master won the race; keep its (identical) file if it is whole.
                await sftp.remove(tmp)
                if (await sftp.stat(final)).size != app.size_bytes:
                    raise
        except BaseException:
            with contextlib.suppress(Exception):
                await sftp.remove(tmp)
            raise
        return final, True


UPLOAD_TMP_MARK = ".tmp-"
_UPLOAD_TMP = re.compile(r"slave-[0-9a-f]+\.pyz\.tmp-[0-9a-f]{16}")
STALE_UPLOAD_S = 3600.0  # an upload temporary this old belongs to no upload still running


async def _remove_stale_uploads(sftp: asyncssh.SFTPClient, remote_dir: str) -> None:
    """Remove zipapp upload temporaries in ``remote_dir`` not written to for an hour."""
    now = time.time()
    for entry in await sftp.readdir(remote_dir):
        name = entry.filename
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        mtime = entry.attrs.mtime
        if not _UPLOAD_TMP.fullmatch(name) or mtime is None or now - mtime < STALE_UPLOAD_S:
            continue
        logger.info("removing a stale slave upload %s", posixpath.join(remote_dir, name))
        with contextlib.suppress(asyncssh.SFTPError):
            await sftp.remove(posixpath.join(remote_dir, name))


async def open_ssh(
    spec: SshHostSpec,
    *,
    zipapp: SlaveZipapp | None = None,
    remote_cache_dir: str = REMOTE_CACHE_DIR,
    on_stderr_line: Callable[[str], None] | None = None,
) -> SlaveConnection:
    """Connect, check the host's Python, upload the zipapp if missing, start the slave.

    Raises ``HostError`` (unreachable, refused, timeout, host key verification failed,
    permission denied, ...) or ``SlaveStartError`` (python3 missing, too old, lacks numpy or
    psutil), always naming ``spec.name``.
    """
    global asyncssh  # the SSH code of this module runs after this import
    import asyncssh

    app = zipapp if zipapp is not None else await slave_zipapp()
    conn: asyncssh.SSHClientConnection | None = None
    phase = "connecting"
    try:
        conn = await asyncssh.connect(spec.address, **_connect_options(spec))
        phase = "checking the host's python"
        info = await _probe_ssh(conn, spec)
        phase = "uploading the slave"
        path, uploaded = await _ensure_uploaded(conn, app, remote_cache_dir)
        phase = "starting the slave"
        process = await conn.create_process(
            _slave_command(spec.python, path, spec.slave_args), encoding=None
        )
        pid, login_stderr = await asyncio.wait_for(
            _read_pid_marker(process.stderr), PROBE_TIMEOUT_S
        )
    except BaseException as exc:  # close the connection whatever happened, even cancellation
        if conn is not None:
            conn.close()
        if not isinstance(exc, foreign_errors()):
            raise
        if conn is None and isinstance(exc, asyncssh.HostKeyNotVerifiable):
            reason = _host_key_reason(spec)
        elif conn is None:
            reason = describe_error(exc, spec.connect_timeout_s)
        elif isinstance(exc, TimeoutError):
            reason = f"no answer after {PROBE_TIMEOUT_S:g} s while {phase}"
        else:
            reason = f"{describe_error(exc)} while {phase}"
        raise HostError(reason, host=spec.name) from exc
    connection = _SshSlaveConnection(
        spec.name, conn, process, pid, login_stderr, path, uploaded, on_stderr_line
    )
    logger.info(
        "host %s: started slave pid %s %s (%s; Python %d.%d.%d, %s)",
        spec.name,
        connection.pid,
        path,
        "uploaded" if uploaded else "cached",
        *info.version,
        ", ".join(f"{m} {v}" for m, v in info.module_versions.items()),
    )
    return connection
