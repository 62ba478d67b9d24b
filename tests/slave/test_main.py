"""The slave as a process (``python -m slave``, and the zipapp the master ships), where a clock
bounds it: a prompt, complete exit on stdin EOF or SIGTERM — no child process left behind, and
(with real libaio I/O on a loop device) no I/O left in flight — and the watchdog's. What no
clock bounds (answers, exit statuses, worker CPUs) is ``test_main_untimed.py``'s, beside the
other tests."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from master.hosts.zipapp import build_slave_zipapp, write_cached
from protocol.batch import GroupStats
from protocol.messages import (
    Ack,
    CreateWorkload,
    DiscoverLuns,
    Go,
    Hello,
    HelloReply,
    LunList,
    Message,
    SubintervalResult,
)
from protocol.state import Conversation, Role
from protocol.version import PROTOCOL_VERSION
from slave.main import EXIT_FAILED
from tests.master.runhelp import all_gone

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
        self.send(DiscoverLuns(1, [], [device]))
        found = self.recv()
        assert isinstance(found, LunList)
        (entry,) = found.luns  # the device named, and no other
        assert entry["info"]["path"] == device
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
        assert all_gone(tree, 1.0)
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
    """The slave as the master starts it on localhost (``master.hosts.transport.open_local``: the
    zipapp from ``master.hosts.zipapp`` run by this interpreter, in a session of its own), with no
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
        assert all_gone(tree, 1.0), [p.pid for p in tree if p.is_running()]
        assert _in_flight_after(device, 1.0) == (0, 0)
    finally:
        s.proc.kill()
        s.proc.wait(5)
    err = s.proc.stderr.read().decode() if s.proc.stderr else ""
    assert "stopping all I/O" in err


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
    assert all_gone(tree, 1.0)
    lun = str(tmp_path / "lun")
    assert not [p for p in psutil.process_iter() if _holds(p, lun)], "the LUN is still open"


def _holds(p: psutil.Process, path: str) -> bool:
    try:
        return any(f.path == path for f in p.open_files())
    except psutil.Error:
        return False
