"""scripts/kneedev_impl: a loop device over a FUSE file served as one FIFO queue with a fixed
service time (root and /dev/fuse needed). Checks what makes it a device with a known knee: every
request takes the service time, requests queue behind each other (never served in parallel, so
the IOPS cannot pass 1 / service time), reads return zeros, and nothing is left behind."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.kneedev_impl import knee_device

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount, loop device)"),
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this machine"),
]

SERVICE_US = 1000  # well above the path's own overhead (0.2-2 ms per request on a VM)


def read_direct(dev: str, count: int) -> tuple[float, bytes]:
    """``count`` 4 KiB O_DIRECT reads one after another: seconds taken and the last block."""
    buf = mmap.mmap(-1, 4096)  # page-aligned
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    try:
        t0 = time.monotonic()
        for i in range(count):
            assert os.preadv(fd, [buf], i * 4096) == 4096
        return time.monotonic() - t0, bytes(buf)
    finally:
        os.close(fd)


def test_each_request_takes_the_service_time_and_reads_zeros() -> None:
    with knee_device(64 << 20, SERVICE_US) as dev:
        seconds, block = read_direct(dev, 100)
    assert block == bytes(4096)
    per_io_us = seconds / 100 * 1e6
    assert per_io_us >= SERVICE_US, per_io_us  # never faster than its service time
    assert per_io_us < 10 * SERVICE_US, per_io_us  # the path adds 0.2-2 ms, more under load


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_requests_queue_so_iops_stop_at_one_over_the_service_time() -> None:
    with knee_device(64 << 20, SERVICE_US) as dev:
        out = subprocess.run(
            ["fio", "--name=q", f"--filename={dev}", "--direct=1", "--ioengine=libaio",
             "--rw=randread", "--bs=4k", "--iodepth=16", "--time_based", "--runtime=2",
             "--output-format=json"],
            check=True, capture_output=True, text=True, timeout=60).stdout
    read = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    limit = 1e6 / SERVICE_US
    assert read["iops"] <= limit * 1.02, read["iops"]  # one server: no parallel service
    assert read["iops"] >= limit * 0.8, read["iops"]  # busy most of the time
    # 16 queued behind one server (not served one at a time): about 16 service times each
    assert read["clat_ns"]["mean"] / 1e3 == pytest.approx(16 * SERVICE_US, rel=0.2)


def backing_file(dev: str) -> str:
    return subprocess.run(["losetup", "-n", "-O", "BACK-FILE", dev], capture_output=True,
                          text=True, check=True).stdout.strip()


def assert_gone(backing: str) -> None:
    assert not os.path.exists(os.path.dirname(backing))
    with open("/proc/mounts") as f:
        assert os.path.dirname(backing) not in f.read()
    listed = subprocess.run(["losetup", "-j", backing], capture_output=True, text=True).stdout
    assert listed.strip() == ""


def test_nothing_is_left_behind() -> None:
    with knee_device(8 << 20, SERVICE_US) as dev:
        mnt = backing_file(dev)
        assert mnt.endswith("/disk")
    assert_gone(mnt)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_command_cleans_up_when_stopped(sig: signal.Signals) -> None:
    """``python -m scripts.kneedev_impl`` prints the device and holds it until stopped; Ctrl-C
    and kill both remove loop device, mount and folder."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "scripts.kneedev_impl", "--size-mib", "8"],
                            cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        dev = proc.stdout.readline().strip()
        assert dev.startswith("/dev/loop"), dev
        mnt = backing_file(dev)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_gone(mnt)
