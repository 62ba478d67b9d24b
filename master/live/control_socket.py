"""The control socket of a running test: server, client and the registry of active runs.

Owns ``<run_dir>/control.sock`` (a Unix stream socket, mode 0600), the little line protocol
spoken on it, the client that ``ivypy status | edit | stop`` use, and the registry that lets
those commands find the run meant when no run folder is named (the one active run started from
the current directory or writing under it).

Must not: change workloads or steps itself (it calls a ``ControlHandler`` that the run loop
implements, in the run loop's event loop), decide what an edit means beyond parsing it
(``master.live.editparse``), or print anything (``master.cli.operator`` does).

Protocol
    One JSON object per line each way; a connection may carry several requests, answered in
    order. Requests longer than ``MAX_REQUEST_BYTES`` are refused and the connection closed; a
    request cut off by a disconnect is dropped unanswered and never executed.

    ========================================================  ==================================
    request                                                   reply (``ok`` added by the server)
    ========================================================  ==================================
    ``{"op": "status"}``                                      ``ControlHandler.status()``
    ``{"op": "edit", "instance": "host=h1",``                 ``ControlHandler.edit(...)``
    ``"params": {"iops": 5000, "read_fraction": "70%"}}``
    ``{"op": "stop"}``                                        ``ControlHandler.stop_step()``
    ``{"op": "stop_run"}``                                    ``ControlHandler.stop_run()``
    ========================================================  ==================================

    Every reply carries ``"ok": true`` or ``{"ok": false, "error": "<one line>"}``: bad JSON, an
    unknown op, an edit that ``master.live.editparse`` refuses (before the handler sees it), or any
    ``IvyError`` the handler raises (``EditRefused`` for an unknown instance or a value the
    workloads cannot take). An unexpected exception in the handler is logged and answered as an
    internal error; the server keeps serving. Non-finite floats travel as ``null``.

Handler replies (documented keys; more keys are allowed and shown generically)
    status: ``test``, ``run_dir``, ``step``, ``step_name``, ``subinterval``, ``phase``,
    ``subintervals_total``, optionally ``subinterval_s`` / ``time_left_s``, and ``rollups``:
    ``{type: [{"instance", "IOPS", "service_time_p99_ms", "iops_setting"}, ...]}``.
    edit: ``effective_subinterval`` (the first subinterval that runs with the edit), ``step``,
    optionally ``step_name``, ``workloads`` (the ids of the workloads changed); the server adds
    ``instance`` (as typed, normalised) and ``changes`` (``EditChanges.describe()``) unless the
    handler set them.
    stop: ``step``, optionally ``step_name``, ``last_subinterval`` (the step ends after it).
    stop_run: as stop, where a step is running (``step`` None between steps); the run ends
    once that step has (its state ``interrupted``, resumable from the next step).

Active-run registry
    ``$IVYPY_STATE_DIR/active-runs/`` when that variable is set, else
    ``~/.cache/ivypy/active-runs/`` (mode 0700). A started server writes ``<pid>-<n>.json``
    (``{"pid", "run_dir", "started_at", "cwd"}``: ``cwd`` the directory the run was started
    from; written atomically) and removes it on close. An entry
    whose process is gone, or whose socket is missing or refuses connections (a run killed,
    its pid taken by another process since, as after a reboot), is stale: ignored and deleted
    by whoever lists the registry.

Socket paths longer than ``sun_path`` allows (about 107 bytes) are reached through
``/proc/self/fd/<dir fd>/control.sock``, so a deep run folder still gets its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from master.live.editparse import EditChanges, parse_instance, parse_params
from protocol.errors import IvyError

__all__ = [
    "MAX_REQUEST_BYTES",
    "SOCKET_NAME",
    "STATE_DIR_ENV",
    "ActiveRun",
    "ControlError",
    "ControlHandler",
    "ControlServer",
    "RunNotChosen",
    "active_runs",
    "find_run_dir",
    "registry_dir",
    "remove_stale_socket",
    "request",
]

logger = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
STATE_DIR_ENV = "IVYPY_STATE_DIR"
DEFAULT_STATE_DIR = Path("~/.cache/ivypy")
MAX_REQUEST_BYTES = 64 * 1024
#: Replies (a status of a large cluster) may be longer than requests, but not without bound.
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: A connection that sends nothing for this long is closed.
IDLE_TIMEOUT_S = 300.0
_SUN_PATH_MAX = 100
_OPS = ("status", "edit", "stop", "stop_run")


class ControlError(IvyError):
    """The control socket could not be served or reached: no run found, run ended, bad reply."""


class RunNotChosen(ControlError):
    """No run folder named, and not exactly one active run started from this directory or
    writing under it: the command refuses rather than guess (the message lists the active
    runs)."""


class ControlUnavailable(ControlError):
    """The run folder cannot hold the control socket (a file system without Unix sockets, a
    folder it may not bind in): the run goes on without ``ivypy status``, ``edit`` and
    ``stop``."""


class ControlHandler(Protocol):
    """What the run loop offers the control socket (see the module docstring for the keys).

    Called in the server's event loop; calls from several clients may overlap. ``edit`` gets
    changes already validated by ``master.live.editparse`` and raises ``EditRefused`` (or any
    ``IvyError``) to refuse without changing anything, e.g. for an instance with no workloads.
    """

    async def status(self) -> dict[str, Any]: ...

    async def edit(self, rollup_type: str, instance: str, changes: EditChanges) -> dict[str, Any]:
        ...

    async def stop_step(self) -> dict[str, Any]: ...

    async def stop_run(self) -> dict[str, Any]: ...


# ---------------------------------------------------------------- socket addresses


@contextlib.contextmanager
def _sun_path(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits ``sun_path``: the path itself, or for a long one the
    same file through ``/proc/self/fd`` of its directory (kept open while in use)."""
    text = os.fspath(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def _connect_error(path: Path) -> OSError | None:
    """What connecting to the socket ``path`` raised, or None when a server accepted."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            with _sun_path(path) as address:
                probe.connect(address)
        except OSError as exc:
            return exc
    return None


def _answers(path: Path) -> bool:
    """Whether a server accepts connections on ``path`` (a live run, not a leftover file)."""
    return _connect_error(path) is None


def _refused(path: Path) -> bool:
    """Whether no server listens on ``path``: no such file, or a socket file that refuses
    connections (left behind by a killed run). A server too busy to accept is not refused."""
    return isinstance(_connect_error(path),
                      ConnectionRefusedError | FileNotFoundError | NotADirectoryError)


def _jsonable(value: object) -> Any:
    """``value`` with non-finite floats as None, numpy scalars as Python numbers, tuples as
    lists, and anything else unknown as its ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(TypeError, ValueError):
            return _jsonable(item())
    return str(value)


def _encode(obj: dict[str, Any]) -> bytes:
    return (json.dumps(_jsonable(obj), separators=(",", ":")) + "\n").encode()


# ---------------------------------------------------------------- active-run registry


@dataclass(frozen=True)
class ActiveRun:
    """One registry entry: a server process and the run folder it serves."""

    pid: int
    run_dir: Path
    started_at: float
    entry: Path
    #: the directory the run was started from (None: an entry of an older ivypy)
    cwd: Path | None = None

    def started_from(self, directory: Path) -> bool:
        """Whether the run was started from ``directory`` or writes its folder under it."""
        return ((self.cwd is not None and self.cwd.resolve() == directory)
                or self.run_dir.resolve().is_relative_to(directory))


_serial = itertools.count(1)


def registry_dir() -> Path:
    """Where active runs are registered (``$IVYPY_STATE_DIR/active-runs`` or the cache)."""
    base = os.environ.get(STATE_DIR_ENV)
    root = Path(base) if base else DEFAULT_STATE_DIR.expanduser()
    return root / "active-runs"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _register(run_dir: Path) -> Path | None:
    """Record ``run_dir`` as served by this process; the entry's path, or None if the registry
    cannot be written (the run is then only reachable by naming its folder)."""
    directory = registry_dir()
    entry = directory / f"{os.getpid()}-{next(_serial)}.json"
    record = {"pid": os.getpid(), "run_dir": str(run_dir), "started_at": time.time(),
              "cwd": os.getcwd()}
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = directory / f".{entry.name}.tmp"
        temporary.write_text(json.dumps(record))
        os.replace(temporary, entry)
    except OSError as exc:
        logger.warning("cannot register the run in %s: %s", directory, exc)
        return None
    return entry


def _read_entry(entry: Path) -> ActiveRun | None:
    try:
        record = json.loads(entry.read_text())
        cwd = record.get("cwd")
        return ActiveRun(int(record["pid"]), Path(record["run_dir"]),
                         float(record["started_at"]), entry,
                         Path(cwd) if isinstance(cwd, str) else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_stale_socket(run_dir: Path) -> bool:
    """Remove ``run_dir``'s control socket when no server listens on it (its master was
    killed: nothing removed it); whether one was removed."""
    path = run_dir / SOCKET_NAME
    if not _is_socket(path) or not _refused(path):
        return False
    with contextlib.suppress(OSError):
        path.unlink()
        logger.info("removed the stale control socket %s (its run is not running)", path)
        return True
    return False


def active_runs() -> list[ActiveRun]:
    """Live registry entries, oldest first; stale or unreadable entries are deleted, and the
    control socket a stale entry's run left behind."""
    directory = registry_dir()
    try:
        entries = sorted(p for p in directory.iterdir()
                         if p.suffix == ".json" and not p.name.startswith("."))
    except OSError:
        return []
    runs = []
    for entry in entries:
        run = _read_entry(entry)
        if run is None or not _pid_alive(run.pid) or not _is_socket(
                run.run_dir / SOCKET_NAME) or _refused(run.run_dir / SOCKET_NAME):
            logger.debug("removing stale active-run entry %s", entry)
            if run is not None:
                remove_stale_socket(run.run_dir)
            with contextlib.suppress(OSError):
                entry.unlink()
            continue
        runs.append(run)
    return sorted(runs, key=lambda r: r.started_at)


def find_run_dir(explicit: str | os.PathLike[str] | None) -> Path:
    """The run folder to talk to: ``explicit`` (a run folder with a control.sock, the socket
    itself, or a test folder: its newest run whose socket a server listens on, else its newest
    run with a socket), else the one active run started from the current directory or
    writing its folder under it. ``RunNotChosen`` when there is not exactly one such (another
    terminal's run elsewhere is never guessed at); ``ControlError`` when no run is active."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if path.name == SOCKET_NAME and _is_socket(path):
            return path.parent
        if not path.is_dir():
            raise ControlError(f"no running test at {path} (not a directory)")
        if _is_socket(path / SOCKET_NAME):
            return path
        try:
            runs = [child for child in path.iterdir() if _is_socket(child / SOCKET_NAME)]
        except OSError:
            runs = []
        if runs:  # a socket left behind by a killed run does not hide a live one
            live = [child for child in runs if not _refused(child / SOCKET_NAME)]
            return max(live or runs, key=lambda child: (child / SOCKET_NAME).stat().st_mtime)
        raise ControlError(f"no running test at {path} (no {SOCKET_NAME})")
    runs_now = active_runs()
    if not runs_now:
        raise ControlError("no active ivypy run found (name the run folder)")
    here = Path.cwd().resolve()
    chosen = [r for r in runs_now if r.started_from(here)]
    if len(chosen) == 1:
        return chosen[0].run_dir
    which = ("none of them" if not chosen else
             f"{len(chosen)} of them" if len(chosen) < len(runs_now) else "each of them")
    listed = "\n".join(f"  {r.run_dir}  (pid {r.pid}, started "
                       f"{time.strftime('%H:%M:%S', time.localtime(r.started_at))}"
                       f"{'' if r.cwd is None else f' from {r.cwd}'})" for r in runs_now)
    raise RunNotChosen(
        f"{len(runs_now)} active ivypy run{'s' if len(runs_now) > 1 else ''}, and {which} "
        f"started from {here} or writing under it: name the run folder\n{listed}")


# ---------------------------------------------------------------- server


class ControlServer:
    """Serves ``<run_dir>/control.sock`` for ``handler`` in the running event loop.

    ``async with ControlServer(run_dir, handler):`` or ``await start()`` / ``await close()``.
    ``close`` ends open connections, removes the socket and the registry entry.
    """

    def __init__(self, run_dir: Path, handler: ControlHandler) -> None:
        self.run_dir = Path(run_dir)
        self.handler = handler
        self._server: asyncio.AbstractServer | None = None
        self._inode: int | None = None
        self._entry: Path | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._ops: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "status": self._status,
            "edit": self._edit,
            "stop": self._stop,
            "stop_run": self._stop_run,
        }

    @property
    def socket_path(self) -> Path:
        return self.run_dir / SOCKET_NAME

    async def __aenter__(self) -> ControlServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        path = self.socket_path
        self._closing = False
        if path.exists() or path.is_symlink():
            if _answers(path):
                raise ControlError(f"another process is serving {path}")
            logger.info("removing leftover control socket %s", path)
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # bound in a private (0700) directory, made 0600, then moved into place: no one
            # else can connect in between, and the process-wide umask is left alone (other
            # threads create output files meanwhile)
            with tempfile.TemporaryDirectory(prefix=".control-", dir=self.run_dir) as private:
                staged = Path(private) / SOCKET_NAME
                with _sun_path(staged) as address:
                    sock.bind(address)
                os.chmod(staged, 0o600)
                os.rename(staged, path)
            self._inode = path.stat().st_ino
            sock.listen(16)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(
                self._connection, sock=sock, limit=MAX_REQUEST_BYTES
            )
        except OSError as exc:
            sock.close()
            self._remove_socket()
            raise ControlUnavailable(f"cannot open the control socket {path}: {exc}") from exc
        self._entry = _register(self.run_dir)
        logger.info("control socket %s", path)

    async def close(self) -> None:
        server, self._server = self._server, None
        self._closing = True
        if server is not None:
            server.close()
            await asyncio.sleep(0)  # let connections accepted just now start (and see _closing)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        self._remove_socket()
        if self._entry is not None:
            with contextlib.suppress(OSError):
                self._entry.unlink()
            self._entry = None

    def _remove_socket(self) -> None:
        """Remove our socket file (not one another server put there since)."""
        if self._inode is None:
            return
        with contextlib.suppress(OSError):
            if self.socket_path.stat().st_ino == self._inode:
                self.socket_path.unlink()
        self._inode = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while not self._closing:
                try:
                    line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
                except ValueError:  # no newline within the stream limit
                    await self._send(writer, {
                        "ok": False,
                        "error": f"request longer than {MAX_REQUEST_BYTES} bytes",
                    })
                    break
                except (asyncio.TimeoutError, ConnectionError):
                    break
                if not line.endswith(b"\n"):  # end of stream, perhaps mid-request: drop it
                    break
                reply = await self.dispatch(line)
                if not await self._send(writer, reply):
                    break
        except asyncio.CancelledError:
            # cancelled by close(): end quietly (a cancelled client_connected_cb task is
            # logged by asyncio as an error with a traceback)
            if not self._closing:
                raise
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, reply: dict[str, Any]) -> bool:
        try:
            writer.write(_encode(reply))
            await writer.drain()
        except (ConnectionError, OSError):
            return False
        return True

    async def dispatch(self, line: bytes) -> dict[str, Any]:
        """One request line → its reply (never raises for a bad request or handler error)."""
        try:
            request_obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth
            return {"ok": False, "error": "bad request: not a JSON object on one line"}
        if not isinstance(request_obj, dict):
            return {"ok": False, "error": "bad request: expected a JSON object"}
        op = request_obj.get("op")
        operation = self._ops.get(op) if isinstance(op, str) else None
        if operation is None:
            return {"ok": False, "error": f"unknown op {op!r} (known: {', '.join(_OPS)})"}
        try:
            result = await operation(request_obj)
        except IvyError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            logger.exception("control request %s failed", op)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
        if not isinstance(result, dict):
            logger.error("control handler returned %r for %s", result, op)
            return {"ok": False, "error": f"internal error: the {op} handler returned no dict"}
        return {"ok": True, **result}

    async def _status(self, request_obj: dict[str, Any]) -> dict[str, Any]:
        return await self.handler.status()

    async def _edit(self, request_obj: dict[str, Any]) -> dict[str, Any]:
        instance_text = request_obj.get("instance")
        params = request_obj.get("params")
        if not isinstance(instance_text, str):
            raise ControlError("bad edit request: 'instance' must be a string like host=h1")
        if not isinstance(params, dict):
            raise ControlError("bad edit request: 'params' must be an object like {\"iops\": 5000}")
        rollup_type, instance = parse_instance(instance_text)
        changes = parse_params(params)
        result = await self.handler.edit(rollup_type, instance, changes)
        if isinstance(result, dict):
            result.setdefault("instance", "all" if rollup_type == "all"
                              else f"{rollup_type}={instance}")
            result.setdefault("changes", changes.describe())
        return result

    async def _stop(self, request_obj: dict[str, Any]) -> dict[str, Any]:
        return await self.handler.stop_step()

    async def _stop_run(self, request_obj: dict[str, Any]) -> dict[str, Any]:
        return await self.handler.stop_run()


# ---------------------------------------------------------------- client


def request(run_dir: str | os.PathLike[str], obj: dict[str, Any],
            timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one request to the run at ``run_dir`` and return its reply (``ok`` true or false).

    Raises ``ControlError`` when the run cannot be reached or answers garbage."""
    folder = Path(run_dir)
    path = folder / SOCKET_NAME
    data = (json.dumps(obj) + "\n").encode()
    if len(data) > MAX_REQUEST_BYTES:
        raise ControlError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            with _sun_path(path) as address:
                sock.connect(address)
        except FileNotFoundError as exc:
            raise ControlError(f"no running test at {folder} (no {SOCKET_NAME})") from exc
        except ConnectionRefusedError as exc:
            raise ControlError(
                f"the run at {folder} is not running (connection refused)"
            ) from exc
        except PermissionError as exc:
            raise ControlError(
                f"not allowed to connect to {path} (does the run belong to another user?)"
            ) from exc
        except TimeoutError as exc:
            raise ControlError(
                f"the run at {folder} did not accept within {timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise ControlError(f"cannot connect to {path}: {exc}") from exc
        buffer = bytearray()
        try:
            sock.sendall(data)
            while not buffer.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    raise ControlError(f"the run at {folder} closed the connection without a reply")
                buffer += chunk
                if len(buffer) > MAX_REPLY_BYTES:
                    raise ControlError(f"the run at {folder} sent a reply over {MAX_REPLY_BYTES} "
                                       "bytes")
        except TimeoutError as exc:
            raise ControlError(f"no reply from the run at {folder} within {timeout_s:g} s") from exc
        except (ConnectionError, OSError) as exc:
            raise ControlError(f"lost the connection to the run at {folder}: {exc}") from exc
    try:
        reply = json.loads(bytes(buffer))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ControlError(f"the run at {folder} sent a malformed reply") from exc
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise ControlError(f"the run at {folder} sent a reply without 'ok'")
    return reply
