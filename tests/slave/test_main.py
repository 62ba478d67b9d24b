"""The slave as a process (``python -m slave``): the wire on stdout, logs on stderr, and a
prompt, complete exit on stdin EOF or SIGTERM — no child process left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from protocol.codec import FrameDecoder
from protocol.cpulist import format_cpu_list
from protocol.messages import (
    Ack,
    CreateWorkload,
    DiscoverLuns,
    Error,
    Go,
    Hello,
    HelloReply,
    LunList,
    Message,
    SubintervalResult,
)
from protocol.state import Conversation, Role
from protocol.stats import GroupStats
from protocol.version import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[2]


class Slave:
    def __init__(self, tmp: Path, **extra_env: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake:const:50000",
               **extra_env}
        self.proc = subprocess.Popen([sys.executable, "-m", "slave"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     cwd=tmp)
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
            if time.monotonic() > deadline:
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
        assert isinstance(self.recv(), LunList)
        self.send(CreateWorkload(2, "local:lun:w", str(lun),
                                 {"iodepth": 4, "iops": 500.0, "read_fraction": 1.0}, True))
        ack = self.recv()
        assert isinstance(ack, Ack) and ack.info["engine"] == "fake"
        self.send(Go(0, time.monotonic_ns() + 200_000_000, 300_000_000,
                     [{"type": "workload", "groups": [["local:lun:w"]], "histograms": True}]))
        result = self.recv()
        assert isinstance(result, SubintervalResult) and result.workload_ids == ["local:lun:w"]
        part = GroupStats.from_wire(result.rollups[0], histograms=True)
        assert part.batch.workload(0).ops() > 0
        tree = [psutil.Process(self.proc.pid)]
        tree += tree[0].children(recursive=True)
        assert len(tree) >= 2, "worker processes run the I/O"
        return tree


def _gone(tree: list[psutil.Process], timeout_s: float) -> bool:
    _, alive = psutil.wait_procs(tree, timeout=timeout_s)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_exits_within_a_second_leaving_nothing(tmp_path: Path, how: str) -> None:
    s = Slave(tmp_path)
    try:
        tree = s.running_step(tmp_path / "lun")
        t0 = time.monotonic()
        if how == "eof":
            assert s.proc.stdin is not None
            s.proc.stdin.close()
        else:
            s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(5)
        took = time.monotonic() - t0
        assert took < 1.0, f"exited after {took:.2f} s"
        assert _gone(tree, 1.0)
    finally:
        s.proc.kill()
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


def test_the_worker_cpus_option_pins_the_workers(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake:const:50000"}
    cpu = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-m", "slave", "--worker-cpus", str(cpu)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 20
        workers: list[psutil.Process] = []
        while not workers and time.monotonic() < deadline:
            workers = psutil.Process(proc.pid).children()
            time.sleep(0.05)
        time.sleep(0.2)
        assert len(workers) == 1, "one worker per listed CPU"
        assert os.sched_getaffinity(workers[0].pid) == {cpu}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("cc", "want"), [
    (None, "compiled"),
    ("none", "python: the compiled paced loop is turned off (IVYPY_SLAVE_CC=none)"),
    ("no-such-cc", "python: no C compiler 'no-such-cc' on this host to build the compiled "
                   "paced loop"),
])
def test_hello_reply_says_where_paced_io_runs(tmp_path: Path, cc: str | None, want: str
                                              ) -> None:
    if cc is None and shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) here: the compiled paced loop cannot be built")
    env = {} if cc is None else {"IVYPY_SLAVE_CC": cc, "XDG_CACHE_HOME": str(tmp_path)}
    s = Slave(tmp_path, **env)
    try:
        s.send(Hello(PROTOCOL_VERSION, "test", "local", time.monotonic_ns()))
        reply = s.recv()
        assert isinstance(reply, HelloReply) and reply.paced_loop == want
    finally:
        s.proc.kill()
        s.proc.wait(5)
