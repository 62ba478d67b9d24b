"""master.live.control_socket: the control socket served for a fake handler, reached by the real
client.

Each test runs its own event loop (``asyncio.run``); the blocking client runs in a worker thread
(``asyncio.to_thread``) so the server keeps serving. The active-run registry lives under
``tmp_path`` (``IVYPY_STATE_DIR``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from master.live.control_socket import (
    MAX_REQUEST_BYTES,
    SOCKET_NAME,
    ControlError,
    ControlServer,
    RunNotChosen,
    active_runs,
    find_run_dir,
    registry_dir,
    remove_stale_socket,
    request,
)
from master.live.editparse import EditChanges, EditRefused


class FakeHandler:
    """A run loop stand-in: two hosts, edits apply from the next subinterval."""

    def __init__(self) -> None:
        self.subinterval = 3
        self.edits: list[tuple[str, str, EditChanges]] = []
        self.stops = 0
        self.run_stops = 0
        self.fail_with: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def status(self) -> dict[str, Any]:
        if self.fail_with is not None:
            raise self.fail_with
        return {"test": "t", "step": 1, "subinterval": self.subinterval, "phase": "measure",
                "rollups": {"host": [{"instance": "h1", "IOPS": 100.0,
                                      "service_time_p99_ms": float("nan")}]}}

    async def edit(self, rollup_type: str, instance: str, changes: EditChanges) -> dict[str, Any]:
        if self.gate is not None:
            await self.gate.wait()
        if (rollup_type, instance) not in {("host", "h1"), ("host", "h2"), ("all", "all")}:
            raise EditRefused(f"no rollup instance {rollup_type}={instance}")
        self.edits.append((rollup_type, instance, changes))
        return {"effective_subinterval": self.subinterval + 1, "step": 1,
                "workloads": ["h1:/dev/sdb:rr", "h1:/dev/sdc:rr"]}

    async def stop_step(self) -> dict[str, Any]:
        self.stops += 1
        return {"step": 1, "last_subinterval": self.subinterval}

    async def stop_run(self) -> dict[str, Any]:
        self.run_stops += 1
        return {"step": 1, "last_subinterval": self.subinterval}


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("IVYPY_STATE_DIR", str(path))
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


def serve(run_dir: Path, body: Callable[[ControlServer, FakeHandler], Awaitable[None]],
          handler: FakeHandler | None = None) -> FakeHandler:
    """Run ``body`` with a started server in a fresh event loop; close it afterwards."""
    fake = handler or FakeHandler()

    async def main() -> None:
        async with ControlServer(run_dir, fake) as server:
            await body(server, fake)

    asyncio.run(asyncio.wait_for(main(), 30))
    return fake


async def call(run_dir: Path, obj: dict[str, Any], timeout_s: float = 10) -> dict[str, Any]:
    return await asyncio.to_thread(request, run_dir, obj, timeout_s)


async def raw_exchange(path: Path, payload: bytes, replies: int) -> list[dict[str, Any]]:
    """Send ``payload`` as is and read ``replies`` reply lines."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(payload)
    await writer.drain()
    out = [json.loads(await reader.readline()) for _ in range(replies)]
    writer.close()
    await writer.wait_closed()
    return out


# ---------------------------------------------------------------- round trips


def test_status_edit_stop_round_trip(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        status = await call(run_dir, {"op": "status"})
        assert status["ok"] is True and status["subinterval"] == 3
        assert status["rollups"]["host"][0]["service_time_p99_ms"] is None  # NaN travels as null
        reply = await call(run_dir, {"op": "edit", "instance": "host=h1",
                                     "params": {"iops": 5000, "read_fraction": "70%"}})
        assert reply == {"ok": True, "effective_subinterval": 4, "step": 1,
                         "workloads": ["h1:/dev/sdb:rr", "h1:/dev/sdc:rr"],
                         "instance": "host=h1", "changes": "iops=5000 read_fraction=70%"}
        stop = await call(run_dir, {"op": "stop"})
        assert stop == {"ok": True, "step": 1, "last_subinterval": 3}

    fake = serve(run_dir, body)
    assert fake.edits == [("host", "h1", EditChanges({"iops": 5000.0, "read_fraction": 0.7}))]
    assert fake.stops == 1


def test_socket_mode_is_0600_whatever_the_umask(run_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0)

    def no_umask(mask: int) -> int:
        raise AssertionError("the process-wide umask is not the server's to change")

    try:
        monkeypatch.setattr(os, "umask", no_umask)

        async def body(server: ControlServer, fake: FakeHandler) -> None:
            mode = server.socket_path.stat().st_mode
            assert stat.S_ISSOCK(mode)
            assert stat.S_IMODE(mode) == 0o600
            # the private directory it was bound in is gone
            assert [p.name for p in run_dir.iterdir()] == [SOCKET_NAME]
        serve(run_dir, body)
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_close_removes_socket_and_client_says_no_run(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        assert (run_dir / SOCKET_NAME).exists()

    serve(run_dir, body)
    assert not (run_dir / SOCKET_NAME).exists()
    with pytest.raises(ControlError, match=r"no running test at .*run \(no control.sock\)"):
        request(run_dir, {"op": "status"})


def test_leftover_socket_means_not_running_and_is_replaced(run_dir: Path) -> None:
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(run_dir / SOCKET_NAME))
    leftover.close()  # the file stays, nobody listens: a crashed run
    with pytest.raises(ControlError, match=r"the run at .* is not running \(connection refused\)"):
        request(run_dir, {"op": "status"})

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        assert (await call(run_dir, {"op": "status"}))["ok"]

    serve(run_dir, body)


def test_second_server_on_a_live_socket_is_refused(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        with pytest.raises(ControlError, match="another process is serving"):
            await ControlServer(run_dir, FakeHandler()).start()
        assert (await call(run_dir, {"op": "stop"}))["ok"]  # the first one still serves

    serve(run_dir, body)


def test_long_run_dir_path(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-fairly-long-folder-name"] * 6)
    deep.mkdir(parents=True)
    assert len(str(deep / SOCKET_NAME)) > 108

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        assert stat.S_IMODE((deep / SOCKET_NAME).stat().st_mode) == 0o600
        assert (await call(deep, {"op": "status"}))["step"] == 1

    serve(deep, body)
    assert not (deep / SOCKET_NAME).exists()


# ---------------------------------------------------------------- bad requests


BAD_REQUESTS = [
    (b"not json\n", "bad request: not a JSON object"),
    (b"[1, 2]\n", "bad request: expected a JSON object"),
    (b"\xff\xfe\n", "bad request: not a JSON object"),
    (b'{"op": "explode"}\n', "unknown op 'explode' (known: status, edit, stop, stop_run)"),
    (b'{"nop": 1}\n', "unknown op None"),
    (b'{"op": 5}\n', "unknown op 5"),
    (b'{"op": "edit", "params": {"iops": 5}}\n', "'instance' must be a string"),
    (b'{"op": "edit", "instance": "host=h1"}\n', "'params' must be an object"),
    (b'{"op": "edit", "instance": "host=h1", "params": {}}\n', "the edit changes nothing"),
    (b'{"op": "edit", "instance": "h1", "params": {"iops": 5}}\n', "bad instance 'h1'"),
    (b'{"op": "edit", "instance": "host=h1", "params": {"read_fraction": 1.5}}\n',
     "read_fraction=1.5: must be between 0 and 1"),
    (b'{"op": "edit", "instance": "host=h1", "params": {"iops": 5, "total_iops": 9}}\n',
     "iops and total_iops exclude each other"),
    (b'{"op": "edit", "instance": "host=h9", "params": {"iops": 5}}\n',
     "no rollup instance host=h9"),
]


def test_bad_requests_are_answered_and_change_nothing(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        # all on one connection: each gets its reply, the connection stays usable
        payload = b"".join(line for line, _ in BAD_REQUESTS) + b'{"op": "status"}\n'
        replies = await raw_exchange(server.socket_path, payload, len(BAD_REQUESTS) + 1)
        for (line, message), reply in zip(BAD_REQUESTS, replies[:-1], strict=True):
            assert reply["ok"] is False, line
            assert message in reply["error"], (line, reply)
        assert replies[-1]["ok"] is True

    fake = serve(run_dir, body)
    assert fake.edits == [] and fake.stops == 0


def test_oversized_request_is_refused_and_server_survives(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        huge = b'{"op": "status", "pad": "' + b"x" * (MAX_REQUEST_BYTES + 10) + b'"}\n'
        reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
        writer.write(huge)
        with contextlib.suppress(ConnectionError):  # the server may close before reading all
            await writer.drain()
        reply = await reader.readline()
        assert json.loads(reply) == {"ok": False,
                                     "error": f"request longer than {MAX_REQUEST_BYTES} bytes"}
        assert await reader.read() == b""  # and closed the connection
        writer.close()
        assert (await call(run_dir, {"op": "status"}))["ok"]

    serve(run_dir, body)


def test_client_gone_mid_request_is_not_executed(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        _reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
        writer.write(b'{"op": "stop"')  # no newline: cut off
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        # a client that sends a whole request and leaves before the reply
        fake.gate = asyncio.Event()
        _reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
        writer.write(b'{"op": "edit", "instance": "all", "params": {"iops": "max"}}\n')
        await writer.drain()
        writer.transport.abort()
        await asyncio.sleep(0.05)
        fake.gate.set()
        await asyncio.sleep(0.05)
        assert (await call(run_dir, {"op": "status"}))["ok"]

    fake = serve(run_dir, body)
    assert fake.stops == 0
    assert fake.edits == [("all", "all", EditChanges({"iops": None}))]


@pytest.mark.parametrize(("error", "message"), [
    (EditRefused("no step is running"), "no step is running"),
    (RuntimeError("boom"), "internal error: RuntimeError: boom"),
])
def test_handler_errors_become_replies(run_dir: Path, error: Exception, message: str) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        fake.fail_with = error
        assert await call(run_dir, {"op": "status"}) == {"ok": False, "error": message}
        fake.fail_with = None
        assert (await call(run_dir, {"op": "status"}))["ok"]

    serve(run_dir, body)


def test_close_with_a_connection_open(run_dir: Path) -> None:
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
        idle_reader, idle_writer = await asyncio.open_unix_connection(str(server.socket_path))
        writer.write(b'{"op": "status"}\n')
        assert json.loads(await reader.readline())["ok"]
        await server.close()  # one connection served, one perhaps not yet accepted
        assert await reader.read() == b""
        with contextlib.suppress(ConnectionError):
            assert await idle_reader.read() == b""
        idle_writer.close()
        writer.close()
        assert not server.socket_path.exists()

    serve(run_dir, body)


def test_client_timeout_when_the_run_does_not_answer(run_dir: Path) -> None:
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mute.bind(str(run_dir / SOCKET_NAME))
        mute.listen(1)
        with pytest.raises(ControlError, match=r"no reply from the run at .* within 0.3 s"):
            request(run_dir, {"op": "status"}, timeout_s=0.3)
    finally:
        mute.close()


def test_client_refuses_an_oversized_request(run_dir: Path) -> None:
    with pytest.raises(ControlError, match="request longer than"):
        request(run_dir, {"op": "status", "pad": "x" * MAX_REQUEST_BYTES})


# ---------------------------------------------------------------- registry and run lookup


def test_registry_lists_the_active_runs_and_each_names_where_it_was_started(
        tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "r1", tmp_path / "r2"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)

    async def main() -> None:
        async with ControlServer(first, FakeHandler()):
            assert find_run_dir(None) == first
            await asyncio.sleep(0.01)
            async with ControlServer(second, FakeHandler()):
                assert [(r.run_dir, r.cwd) for r in active_runs()] == [
                    (first, first), (second, first)]
                entries = list(registry_dir().iterdir())
                assert len(entries) == 2
                assert all(e.name.startswith(f"{os.getpid()}-") for e in entries)
                with pytest.raises(RunNotChosen):  # both started from here
                    find_run_dir(None)
            assert find_run_dir(None) == first
        assert list(registry_dir().iterdir()) == []

    asyncio.run(main())
    assert registry_dir() == state_dir / "active-runs"
    with pytest.raises(ControlError, match="no active ivypy run found"):
        find_run_dir(None)


#: (where the command runs, the run it reaches or None: refused, listing both). Run a is
#: started from lab/a and writes under lab/a/out; run b is started from lab/b and writes
#: under out/b (an output root elsewhere).
CHOSEN = [
    ("lab/a", "a"),  # started from here
    ("lab/a/out", "a"),  # its folder is under here
    ("lab/b", "b"),  # started from here, its folder elsewhere
    ("out", "b"),  # b's folder is under here
    ("lab", "a"),  # a's folder is under here; b was started from lab/b, writes under out/
    (".", None),  # both folders under here
    ("other", None),  # neither: another terminal's runs are not guessed at
]


@pytest.mark.parametrize(("where", "reached"), CHOSEN)
def test_without_a_run_folder_only_the_one_run_of_this_directory_is_reached(
        tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch, where: str,
        reached: str | None) -> None:
    folders = {"a": tmp_path / "lab/a/out/t/1", "b": tmp_path / "out/b/t/2"}
    started = {"a": tmp_path / "lab/a", "b": tmp_path / "lab/b"}
    for d in (*folders.values(), *started.values(), tmp_path / "other"):
        d.mkdir(parents=True, exist_ok=True)

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            for name in ("a", "b"):
                monkeypatch.chdir(started[name])
                await stack.enter_async_context(ControlServer(folders[name], FakeHandler()))
            monkeypatch.chdir(tmp_path / where)
            if reached is not None:
                assert find_run_dir(None) == folders[reached]
                return
            with pytest.raises(RunNotChosen) as info:
                find_run_dir(None)
            text = str(info.value)
            first = text.splitlines()[0]
            assert first.startswith("2 active ivypy runs, and ")
            assert first.endswith(f"started from {Path.cwd()} or writing under it: name the "
                                  "run folder")
            assert ("none of them" in first) == (where == "other")
            for name in ("a", "b"):
                assert f"  {folders[name]}  (pid {os.getpid()}, started " in text
                assert f" from {started[name]})" in text

    asyncio.run(main())


def test_one_active_run_started_elsewhere_is_not_guessed_at(
        tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        monkeypatch.chdir(elsewhere)
        with pytest.raises(RunNotChosen, match=r"^1 active ivypy run, and none of them"):
            find_run_dir(None)
        assert find_run_dir(str(run_dir)) == run_dir  # named, it is reached

    serve(run_dir, body)


def test_an_entry_of_an_older_ivypy_is_reached_by_its_folder_alone(
        tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry entry without ``cwd`` (an ivypy before it was recorded) qualifies only where
    its run folder is under the current directory."""
    directory = registry_dir()

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        (entry,) = directory.iterdir()
        record = json.loads(entry.read_text())
        del record["cwd"]
        entry.write_text(json.dumps(record))
        assert active_runs()[0].cwd is None
        monkeypatch.chdir(run_dir.parent)
        assert find_run_dir(None) == run_dir
        beside = tmp_path / "beside"
        beside.mkdir()
        monkeypatch.chdir(beside)
        with pytest.raises(RunNotChosen):
            find_run_dir(None)

    serve(run_dir, body)


def test_stale_registry_entries_are_ignored_and_removed(tmp_path: Path, run_dir: Path) -> None:
    directory = registry_dir()
    directory.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    no_socket = tmp_path / "ended"
    no_socket.mkdir()
    (directory / "1-1.json").write_text(json.dumps(
        {"pid": gone.pid, "run_dir": str(run_dir), "started_at": 9e12}))  # dead process
    (directory / f"{os.getpid()}-999.json").write_text(json.dumps(
        {"pid": os.getpid(), "run_dir": str(no_socket), "started_at": 9e12}))  # socket gone
    (directory / "2-1.json").write_text("{not json")
    (directory / "3-1.json").write_text(json.dumps({"pid": 3}))  # fields missing
    (directory / ".4-1.json.tmp").write_text("being written")

    with pytest.raises(ControlError, match="no active ivypy run found"):
        find_run_dir(None)
    assert sorted(p.name for p in directory.iterdir()) == [".4-1.json.tmp"]

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        (directory / "1-1.json").write_text(json.dumps(
            {"pid": gone.pid, "run_dir": str(no_socket), "started_at": 9e12}))
        assert find_run_dir(None) == run_dir  # the newer stale entry does not win
        assert not (directory / "1-1.json").exists()

    serve(run_dir, body)


def test_unwritable_registry_does_not_stop_the_server(run_dir: Path, state_dir: Path) -> None:
    state_dir.write_text("a file where the registry's parent should be")

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        assert (await call(run_dir, {"op": "status"}))["ok"]
        with pytest.raises(ControlError, match="no active ivypy run found"):
            find_run_dir(None)

    serve(run_dir, body)


def test_find_run_dir_explicit(tmp_path: Path, run_dir: Path) -> None:
    with pytest.raises(ControlError, match=r"no running test at .*run \(no control.sock\)$"):
        find_run_dir(str(run_dir))
    with pytest.raises(ControlError, match=r"no running test at .*nowhere \(not a directory\)"):
        find_run_dir(str(tmp_path / "nowhere"))

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        assert find_run_dir(str(run_dir)) == run_dir
        assert find_run_dir(str(run_dir / SOCKET_NAME)) == run_dir
        assert find_run_dir(str(tmp_path)) == run_dir  # a test folder: its live run

    serve(run_dir, body)


# ---------------------------------------------------------------- garbage and idle clients


def test_nesting_past_the_json_parsers_depth_is_answered(run_dir: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    # json.loads raised RecursionError: no reply, and asyncio logged the traceback as an
    # error into the run's log
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        for payload in (b"[" * 50_000 + b"\n",
                        b'{"op": "edit", "instance": "all", "params": ' + b"[" * 30_000 + b"\n"):
            (reply,) = await raw_exchange(server.socket_path, payload, 1)
            assert reply == {"ok": False, "error": "bad request: not a JSON object on one line"}
        assert (await call(run_dir, {"op": "status"}))["ok"]

    fake = serve(run_dir, body)
    assert fake.edits == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_close_with_idle_clients_logs_no_error(run_dir: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    # a client connected and silent (or mid-request) when the run ends: its connection task
    # was cancelled, and asyncio logged "Exception in callback ... CancelledError" with a
    # traceback into the run's log at every such end of a run
    async def body(server: ControlServer, fake: FakeHandler) -> None:
        idle = [await asyncio.open_unix_connection(str(server.socket_path)) for _ in range(3)]
        idle[1][1].write(b'{"op": "sta')
        await idle[1][1].drain()
        (reply,) = await raw_exchange(server.socket_path, b'{"op": "status"}\n', 1)
        assert reply["ok"]
        await server.close()
        for reader, writer in idle:
            with contextlib.suppress(ConnectionError):
                assert await reader.read() == b""
            writer.close()
        await asyncio.sleep(0.05)  # asyncio's done callbacks of the connection tasks

    with caplog.at_level(logging.DEBUG):
        serve(run_dir, body)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# ---------------------------------------------------------------- sockets of killed runs


def _leftover_socket(folder: Path) -> None:
    """A control.sock as a killed run leaves it: bound, then nobody listening."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # a deep tmp_path is past sun_path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
            dead.bind(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
    finally:
        os.close(fd)


def test_a_test_folder_reaches_its_live_run_past_a_newer_killed_one(tmp_path: Path) -> None:
    # the newest socket by mtime won, though nothing listened on it: "connection refused"
    # while the live run went on beside it
    test_folder = tmp_path / "results" / "t"
    live = test_folder / "20240101-000000"
    live.mkdir(parents=True)

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        killed = test_folder / "20240101-000001"
        _leftover_socket(killed)
        later = (live / SOCKET_NAME).stat().st_mtime + 10
        os.utime(killed / SOCKET_NAME, (later, later), follow_symlinks=False)
        assert find_run_dir(str(test_folder)) == live
        assert (await call(find_run_dir(str(test_folder)), {"op": "status"}))["ok"]

    serve(live, body)
    # no live run left: the newest socket still names the run folder (status describes it)
    assert find_run_dir(str(test_folder)) == test_folder / "20240101-000001"


def test_a_registry_entry_whose_socket_refuses_is_stale(tmp_path: Path, run_dir: Path) -> None:
    # a run killed, its pid since taken by another process (after a reboot, say): the entry
    # looked alive, was the newest, and "ivypy status" got "connection refused"
    killed = tmp_path / "killed"
    _leftover_socket(killed)
    directory = registry_dir()

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        entry = directory / "1-1.json"
        entry.write_text(json.dumps(
            {"pid": os.getpid(), "run_dir": str(killed), "started_at": 9e12}))
        assert find_run_dir(None) == run_dir
        assert not entry.exists()
        assert [r.run_dir for r in active_runs()] == [run_dir]

    serve(run_dir, body)


def test_a_stale_entrys_socket_goes_with_it_and_a_live_one_stays(tmp_path: Path,
                                                                 run_dir: Path) -> None:
    """A run killed leaves its registry entry and its control.sock: whoever lists the
    registry removes both (a later ``ivypy status`` of the folder would otherwise trip on
    the socket); a live run's socket is never touched."""
    killed = tmp_path / "killed"
    _leftover_socket(killed)
    gone = subprocess.Popen(["true"])
    gone.wait()
    directory = registry_dir()

    async def body(server: ControlServer, fake: FakeHandler) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "1-1.json").write_text(json.dumps(
            {"pid": gone.pid, "run_dir": str(killed), "started_at": 1.0}))
        assert [r.run_dir for r in active_runs()] == [run_dir]
        assert not (killed / SOCKET_NAME).exists()
        assert (run_dir / SOCKET_NAME).exists()
        assert not remove_stale_socket(run_dir)  # it answers: kept
        assert (run_dir / SOCKET_NAME).exists()

    serve(run_dir, body)
    _leftover_socket(killed)
    assert remove_stale_socket(killed) and not (killed / SOCKET_NAME).exists()
    assert not remove_stale_socket(killed)  # nothing left to remove
