"""The slave as a process (``python -m slave``, and the zipapp the master ships): the wire on
stdout, logs on stderr, and a prompt, complete exit on stdin EOF or SIGTERM — no child process
left behind, and (with real libaio I/O on a loop device) no I/O left in flight."""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from master.zipapp import build_slave_zipapp, write_cached
from protocol.codec import MAGIC, FrameDecoder, encode
from protocol.cpulist import format_cpu_list
from protocol.errors import RemoteProtocolError
from protocol.messages import (
    Ack,
    Bye,
    CreateWorkload,
    DiscoverLuns,
    Error,
    Go,
    Hello,
    HelloReply,
    LunList,
    Message,
    Ping,
    SubintervalResult,
)
from protocol.state import Conversation, Role
from protocol.stats import GroupStats
from protocol.version import PROTOCOL_VERSION
from slave.engine.paced_kernel import platform_tag
from slave.main import EXIT_FAILED

if TYPE_CHECKING:
    from tests.slave.conftest import LoopDevice, LoopFactory

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


class Slave:
    """A slave process and the master's side of its conversation. By default ``python -m
    slave`` from this checkout with the fake engine; ``argv``, ``base_env`` and ``new_session``
    start it some other way (``extra_env`` is added to either)."""

    def __init__(self, tmp: Path, *, argv: Sequence[str] = (sys.executable, "-m", "slave"),
                 base_env: Mapping[str, str] | None = None,
                 extra_env: Mapping[str, str] | None = None, new_session: bool = False) -> None:
        if base_env is None:
            base_env = {**os.environ, "PYTHONPATH": str(ROOT),
                        "IVYPY_SLAVE_ENGINE": "fake:const:50000"}
        env = {**base_env, **(extra_env or {})}
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     cwd=tmp, start_new_session=new_session)
        self.conv = Conversation(Role.MASTER, host="local")
        self.pending: list[Message] = []

    def send(self, msg: Message) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(self.conv.send(msg))
        self.proc.stdin.flush()

    def recv(self, timeout_s: float = 20) -> Message:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while not self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise TimeoutError("no message from the slave")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError(self.proc.stderr.read().decode() if self.proc.stderr else "")
            self.pending += self.conv.receive_data(chunk)
        return self.pending.pop(0)

    def running_step(self, lun: Path) -> list[psutil.Process]:
        self.send(Hello(PROTOCOL_VERSION, "test", "local", time.monotonic_ns()))
        assert isinstance(self.recv(), HelloReply)
        self.send(DiscoverLuns(1, [{"path": str(lun), "size_bytes": 16 << 20, "create": True}]))
        found = self.recv()
        assert isinstance(found, LunList)
        # discovery names the engine the LUN's workloads run on (the one create reports)
        (entry,) = [e for e in found.luns if e["info"]["path"] == str(lun)]
        assert entry["attributes"]["engine"] == "fake"
        self.send(CreateWorkload(2, "local:lun:w", str(lun),
                                 {"iodepth": 4, "iops": 500.0, "read_fraction": 1.0}, True))
        ack = self.recv()
        assert isinstance(ack, Ack) and ack.info["engine"] == "fake"
        return self.go("local:lun:w", 300_000_000)

    def running_on_device(self, device: str) -> list[psutil.Process]:
        """Random 4 KiB reads at ``iops: max``, depth 32, on a block device with whatever
        engine the slave picks (which must be libaio), running in subinterval 1 of 1 s."""
        self.send(Hello(PROTOCOL_VERSION, "test", "local", time.monotonic_ns()))
        assert isinstance(self.recv(), HelloReply)
        self.send(DiscoverLuns(1, []))
        found = self.recv()
        assert isinstance(found, LunList)
        (entry,) = [e for e in found.luns if e["info"]["path"] == device]
        assert entry["attributes"]["engine"] == "libaio"
        wid = f"local:{device}:w"
        self.send(CreateWorkload(2, wid, device, {"iodepth": 32, "read_fraction": 1.0}, False))
        ack = self.recv()
        assert isinstance(ack, Ack), ack
        assert ack.info["engine"] == "libaio", ack.info
        return self.go(wid, 1_000_000_000)

    def go(self, wid: str, subinterval_ns: int) -> list[psutil.Process]:
        """Start the step with ``wid`` alone; once subinterval 0 has come back with I/Os
        counted, the process tree (the slave first). Subinterval 1 is running then."""
        self.send(Go(0, time.monotonic_ns() + 200_000_000, subinterval_ns,
                     [{"type": "workload", "groups": [[wid]], "histograms": True}]))
        result = self.recv()
        assert isinstance(result, SubintervalResult) and result.workload_ids == [wid]
        part = GroupStats.from_wire(result.rollups[0], histograms=True)
        assert part.batch.workload(0).ops() > 0
        tree = [psutil.Process(self.proc.pid)]
        tree += tree[0].children(recursive=True)
        assert len(tree) >= 2, "worker processes run the I/O"
        return tree


def _gone(tree: list[psutil.Process], timeout_s: float) -> bool:
    _, alive = psutil.wait_procs(tree, timeout=timeout_s)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _stop_within_a_second(s: Slave, how: str) -> int:
    """Close the slave's stdin (``eof``) or send it SIGTERM; it must exit within a second.
    Returns its exit status."""
    t0 = time.monotonic()
    if how == "eof":
        assert s.proc.stdin is not None
        s.proc.stdin.close()
    else:
        s.proc.send_signal(signal.SIGTERM)
    status = s.proc.wait(5)
    took = time.monotonic() - t0
    assert took < 1.0, f"exited after {took:.2f} s"
    return status


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_exits_within_a_second_leaving_nothing(tmp_path: Path, how: str) -> None:
    s = Slave(tmp_path)
    try:
        tree = s.running_step(tmp_path / "lun")
        _stop_within_a_second(s, how)
        assert _gone(tree, 1.0)
    finally:
        s.proc.kill()
    err = s.proc.stderr.read().decode() if s.proc.stderr else ""
    assert "stopping all I/O" in err


def _in_flight(device: LoopDevice) -> tuple[int, int]:
    """The device's requests in flight, (reads, writes), as the block layer counts them."""
    reads, writes = (Path("/sys/block") / device.name / "inflight").read_text().split()
    return int(reads), int(writes)


def _reads_in_flight(device: LoopDevice, timeout_s: float) -> int:
    """The reads in flight on ``device`` as soon as there are some; 0 after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (reads := _in_flight(device)[0]) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    return reads


def _in_flight_after(device: LoopDevice, timeout_s: float) -> tuple[int, int]:
    """The device's requests in flight once they are none, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (now := _in_flight(device)) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


@pytest.mark.root
@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_the_shipped_zipapp_exits_within_a_second_with_libaio_io_in_flight(
        tmp_path: Path, loop_device: LoopFactory, how: str) -> None:
    """The slave as the master starts it on localhost (``master.transport.open_local``: the
    zipapp from ``master.zipapp`` run by this interpreter, in a session of its own), with no
    engine forced and no PYTHONPATH, reading a loop device through libaio at depth 32: on
    stdin EOF or SIGTERM it exits within a second, its workers are gone and the device has no
    request in flight."""
    device = loop_device(64 * MIB)
    pyz = write_cached(build_slave_zipapp(), tmp_path / "zipapp")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IVYPY_SLAVE_ENGINE")}
    s = Slave(tmp_path, argv=(sys.executable, str(pyz)), base_env=env, new_session=True)
    try:
        tree = s.running_on_device(device.path)
        assert _reads_in_flight(device, 0.5) > 0, "no read in flight on the loop device"
        status = _stop_within_a_second(s, how)
        assert status == (0 if how == "eof" else 128 + signal.SIGTERM)
        assert _gone(tree, 1.0), [p.pid for p in tree if p.is_running()]
        assert _in_flight_after(device, 1.0) == (0, 0)
    finally:
        s.proc.kill()
        s.proc.wait(5)
    err = s.proc.stderr.read().decode() if s.proc.stderr else ""
    assert "stopping all I/O" in err


def test_stray_print_cannot_corrupt_the_wire(tmp_path: Path) -> None:
    """fd 1 is moved to stderr before anything runs: a print lands in the log, not the wire."""
    code = ("import sys; from slave import main as m; import slave.session as s;"
            "orig = s.SlaveSession._on_hello\n"
            "def noisy(self, msg):\n    print('hello from a stray print')\n"
            "    orig(self, msg)\n"
            "s.SlaveSession._on_hello = noisy; sys.exit(m.main())")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake"}
    proc = subprocess.run([sys.executable, "-c", code], input=Conversation(Role.MASTER).send(
        Hello(PROTOCOL_VERSION, "t", "h", 0)), capture_output=True, env=env, timeout=30)
    msgs = FrameDecoder().feed(proc.stdout)
    assert [type(m) for m in msgs] == [HelloReply]
    assert b"hello from a stray print" in proc.stderr


def test_a_worker_cpu_this_host_lacks_is_a_fatal_config_error_naming_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake:const:50000"}
    missing = max(os.sched_getaffinity(0)) + 1
    proc = subprocess.Popen([sys.executable, "-m", "slave", "--worker-cpus", f"0,{missing}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    conv = Conversation(Role.MASTER, host="local")
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(conv.send(Hello(PROTOCOL_VERSION, "test", "local", time.monotonic_ns())))
    proc.stdin.flush()
    got: list[Message] = []
    while not got:
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        assert chunk, "the slave closed its wire without an answer"
        got += conv.receive_data(chunk)
    err = got[0]
    assert isinstance(err, Error) and err.fatal and err.kind == "config"
    assert err.message == (f"worker_cpus '0,{missing}': CPU {missing} is not available to the "
                           f"slave on this host (it may use "
                           f"{format_cpu_list(sorted(os.sched_getaffinity(0)))})")
    assert proc.wait(timeout=10) is not None


def _runs(p: psutil.Process, exe: str) -> bool:
    """Whether ``p`` is alive and runs ``exe``."""
    try:
        return p.exe() == exe
    except psutil.Error:
        return False


def test_the_worker_cpus_option_pins_the_workers(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake:const:50000"}
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-m", "slave", "--worker-cpus", str(cpu)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 20
        workers: list[psutil.Process] = []
        slave = psutil.Process(proc.pid)
        while not workers and time.monotonic() < deadline:
            # the workers run the slave's interpreter; another child (the C compiler building
            # the paced loop into a fresh cache: the suite at d6517b4 found it gone) is not
            # one, nor is it between its fork and its exec, when it still runs the interpreter
            # (gone 0.2 s later in a loaded suite): a worker is still there 0.2 s later
            workers = [c for c in slave.children() if _runs(c, slave.exe())]
            time.sleep(0.2)
            workers = [c for c in workers if _runs(c, slave.exe())]
        assert len(workers) == 1, "one worker per listed CPU"
        assert os.sched_getaffinity(workers[0].pid) == {cpu}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("cc", "want"), [
    (None, "compiled (built on this host)"),  # from the source tree: nothing shipped
    ("none", "python: the compiled paced loop is turned off (IVYPY_SLAVE_CC=none)"),
    ("no-such-cc", "python: no C compiler 'no-such-cc' on this host to build the compiled "
                   f"paced loop, and none shipped for {platform_tag()}"),
])
def test_hello_reply_says_where_paced_io_runs(tmp_path: Path, cc: str | None, want: str
                                              ) -> None:
    if cc is None and shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) here: the compiled paced loop cannot be built")
    env = {} if cc is None else {"IVYPY_SLAVE_CC": cc, "XDG_CACHE_HOME": str(tmp_path)}
    s = Slave(tmp_path, extra_env=env)
    try:
        s.send(Hello(PROTOCOL_VERSION, "test", "local", time.monotonic_ns()))
        reply = s.recv()
        assert isinstance(reply, HelloReply) and reply.paced_loop == want
    finally:
        s.proc.kill()
        s.proc.wait(5)


def _fed(stdin: bytes) -> tuple[int, list[Message], str]:
    """``python -m slave`` fed ``stdin`` then EOF: its exit status, the messages it wrote (all
    of its stdout must be whole frames) and its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake"}
    proc = subprocess.run([sys.executable, "-m", "slave", "--worker-cpus", "unpinned"],
                          input=stdin, capture_output=True, env=env, timeout=30)
    dec = FrameDecoder()
    msgs = dec.feed(proc.stdout)
    assert dec.at_frame_boundary(), proc.stdout[-100:]
    return proc.returncode, msgs, proc.stderr.decode()


HELLO = Hello(PROTOCOL_VERSION, "test", "local", 0)


def test_hello_and_bye_in_one_read_are_answered_and_the_slave_exits_0() -> None:
    conv = Conversation(Role.MASTER, host="local")
    status, msgs, err = _fed(conv.send(HELLO) + conv.send(Bye("changed my mind")))
    assert [type(m) for m in msgs] == [HelloReply, Bye], err
    assert status == 0 and "Traceback" not in err, err


@pytest.mark.parametrize(("stdin", "text"), [
    (Conversation(Role.MASTER).send(HELLO)[:9],
     "the master's stream ended inside a frame (9 bytes of it received)"),
    (Conversation(Role.MASTER).send(HELLO) + MAGIC + b"\x10\x00",
     "the master's stream ended inside a frame (4 bytes of it received)"),
    (b"Welcome to host h1\n", "bad frame magic b'Welcome to host h1\\n'"),
    (MAGIC + b"\xff\xff\xff\xff", "frame of 4294967295 bytes exceeds the"),
    (Conversation(Role.MASTER).send(Hello(PROTOCOL_VERSION + 1, "9", "h", 0)),
     f"peer speaks protocol version {PROTOCOL_VERSION + 1}"),
], ids=["eof-inside-hello", "eof-inside-a-2nd-frame", "banner", "huge-length", "version"])
def test_a_fatal_protocol_error_is_the_last_message_and_the_exit_is_non_zero(
        stdin: bytes, text: str) -> None:
    status, msgs, err = _fed(stdin)
    last = msgs[-1]
    assert isinstance(last, Error) and last.fatal and last.kind in ("protocol", "version"), msgs
    assert text in last.message
    assert [type(m) for m in msgs[:-1]] in ([], [HelloReply])
    assert status == EXIT_FAILED and "Traceback" not in err, err


@pytest.mark.parametrize("seed", range(6))
def test_the_slave_process_ends_cleanly_on_a_mutated_stdin(seed: int) -> None:
    """A few streams for the process itself (tests/slave/test_session_fuzz.py fuzzes the
    session in-process): a legal opening, cut, with bytes flipped, inserted or deleted, or a
    huge length header. The slave exits 0 or 1 without a traceback, its output is whole
    frames, and exit 1 comes with a fatal Error as its last message."""
    rng = random.Random(seed)
    frames = [encode(m) for m in (HELLO, Ping(1, 2), DiscoverLuns(2, []), Ping(3, 4),
                                  Bye("done"))]
    data = bytearray(b"".join(frames[:rng.randint(2, len(frames))]))
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(rng.choice([0, len(frames[0])]), len(data) + 1)  # half after Hello
        op = rng.choice(["flip", "insert", "delete", "truncate", "huge"])
        if op == "flip" and at < len(data):
            data[at] = rng.randrange(256)
        elif op == "insert":
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == "delete":
            del data[at:at + rng.randint(1, 8)]
        elif op == "truncate":
            del data[at:]
        elif op == "huge" and data[:2] == MAGIC:
            data[2:6] = rng.choice([2**32 - 1, 200 * MIB]).to_bytes(4, "little")
    status, msgs, err = _fed(bytes(data))
    assert "Traceback" not in err, err
    assert status in (0, EXIT_FAILED), (status, err)
    last = msgs[-1] if msgs else None
    if status == EXIT_FAILED:
        assert isinstance(last, Error) and last.fatal, (bytes(data), msgs)
    else:
        assert not [m for m in msgs if isinstance(m, Error)], msgs
    ref = FrameDecoder()
    try:
        ref.feed(bytes(data))
        broken = not ref.at_frame_boundary()
    except RemoteProtocolError:
        broken = True
    if broken:  # a stream that breaks the framing is answered, unless Bye came first
        assert status == EXIT_FAILED or isinstance(last, Bye), (bytes(data), msgs, status)


def test_a_slave_that_hears_nothing_from_its_master_stops_and_exits(tmp_path: Path) -> None:
    """The watchdog: a master cut off without its stdin closing (a cut SSH link under a stock
    sshd) says nothing more; past the bound (here its floor, 1 s, over three 0.3 s
    subintervals) the slave stops its I/O, closes its LUNs and exits non-zero, its workers
    gone. Before, it stopped its I/O (the master late) and lived on, the LUN held open."""
    s = Slave(tmp_path, argv=(sys.executable, "-m", "slave", "--watchdog-min-seconds", "1"))
    sent: list[float] = []
    send = s.send

    def noted(msg: Message) -> None:
        send(msg)
        sent.append(time.monotonic())

    s.send = noted  # type: ignore[method-assign]
    try:
        tree = s.running_step(tmp_path / "lun")  # its Go is the master's last word
        status = s.proc.wait(10)
        took = time.monotonic() - sent[-1]
    finally:
        s.proc.kill()
    err = s.proc.stderr.read().decode() if s.proc.stderr else ""
    assert status == EXIT_FAILED, err
    assert 1.0 <= took < 2.0, f"exited {took:.2f} s after the master's last word"
    assert "no word from the master for" in err and "watchdog" in err
    assert _gone(tree, 1.0)
    lun = str(tmp_path / "lun")
    assert not [p for p in psutil.process_iter() if _holds(p, lun)], "the LUN is still open"


def _holds(p: psutil.Process, path: str) -> bool:
    try:
        return any(f.path == path for f in p.open_files())
    except psutil.Error:
        return False


def test_the_watchdog_counts_subintervals_not_only_its_floor() -> None:
    from slave.session import WATCHDOG_SUBINTERVALS, SlaveSession

    session = SlaveSession.__new__(SlaveSession)
    session.longest_subinterval_ns = 0
    assert session.watchdog_s(30.0) == 30.0  # before any step
    session.longest_subinterval_ns = 60_000_000_000  # a step of 60 s subintervals
    assert session.watchdog_s(30.0) == WATCHDOG_SUBINTERVALS * 60.0


def test_a_watchdog_floor_that_is_not_positive_is_refused() -> None:
    proc = subprocess.run([sys.executable, "-m", "slave", "--watchdog-min-seconds", "0"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "--watchdog-min-seconds must be > 0" in proc.stderr


_FAILING_HALT = """
import sys
from protocol.errors import IvyError
from slave.main import serve
from slave.session import SlaveSession
from tests.slave.test_session import FakeBackend

class StuckBackend(FakeBackend):
    def halt(self):
        raise IvyError("3 I/Os still in flight on /dev/loop7 past the drain limit")

if sys.argv[1] == "bug":
    def on_tick(self):
        raise RuntimeError("a bug in the session")
    SlaveSession.on_tick = on_tick
sys.exit(serve(StuckBackend))
"""


@pytest.mark.parametrize("how", ["bug", "stdout-closed"])
def test_a_failure_whose_io_does_not_stop_cleanly_is_logged_and_the_exit_is_1(
        how: str) -> None:
    # the slave fails (a bug, or the master closed our stdout) and stopping its I/O fails too:
    # the stop's problem is logged with the rest and the exit is EXIT_FAILED, where the stop's
    # error once escaped the handler as a traceback
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _FAILING_HALT, how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    if how == "stdout-closed":
        proc.stdout.close()  # the HelloReply meets a closed pipe
    proc.stdin.write(Conversation(Role.MASTER).send(HELLO))
    proc.stdin.flush()
    _, err_b = proc.communicate(timeout=30)
    err = err_b.decode()
    assert proc.returncode == EXIT_FAILED, err
    want = "a bug in the session" if how == "bug" else "the master closed our stdout"
    assert want in err, err
    assert "stopping all I/O: 3 I/Os still in flight on /dev/loop7" in err, err
    assert err.count("Traceback") == (1 if how == "bug" else 0), err
