"""Helpers for the ``gather:`` tests on real devices: loop devices over files in /dev/shm, a
free TCP port on 127.0.0.1, and ``ivypy run`` to the end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.master.runhelp import ROOT, write_config

MiB = 1 << 20


@contextmanager
def loop_devices(count: int, size_bytes: int = 32 * MiB) -> Iterator[list[str]]:
    """``count`` loop devices over fully written files in /dev/shm (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: loop devices")
    devices: list[str] = []
    files: list[Path] = []
    try:
        for i in range(count):
            backing = Path("/dev/shm") / f"ivypy-test-gather-{os.getpid()}-{i}.img"
            files.append(backing)
            backing.write_bytes(os.urandom(size_bytes))
            devices.append(subprocess.run(
                ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True,
                check=True, timeout=60).stdout.strip())
        yield devices
    finally:
        for dev in devices:
            subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=60, check=False)
        for backing in files:
            backing.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_to_end(tmp: Path, test: str, text: str, expect: int = 0, timeout_s: float = 240,
               in_memory: bool = False) -> Path:
    """Run the test ``text`` (named ``test``) and return its run folder: an ``ivypy run``
    process, or ``in_memory`` a ``Run`` on in-memory hosts (``master.hosts.memory``: the
    slave's discovery and sessions are real, its I/O synthetic), where what is tested is the
    run's logic and not its I/O."""
    if in_memory:
        from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run

        # not warped: the fixtures' counters are their clock's or a device's, in real time
        result = execute(memory_run(memory_config(tmp, text), MemoryHosts()), timeout_s,
                         warp=False)
        assert result.exit_code == expect, result.message
        return Path(result.folder)
    cfg = write_config(tmp, text)
    proc = subprocess.run(
        [sys.executable, "-m", "master", "run", str(cfg), "--output-root", str(tmp), "--plain"],
        capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    assert proc.returncode == expect, proc.stdout[-2000:] + proc.stderr[-3000:]
    (out,) = (tmp / test).iterdir()
    return out
