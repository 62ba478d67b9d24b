"""The OpenSSH test bed with a loop-device LUN per host, for the benchmarks that run on it
(``scripts/bench_skew``, ``scripts/bench_soak``).

Owns: bringing the test bed up with enough hosts (``scripts/testbed``: brought up unless it is
up with as many; a smaller one is brought down first), giving each host its own loop device
over a fully written 16 MiB file in a private /dev/shm directory (a sparse file's holes read as
no I/O), the test file's ``hosts:`` and ``luns:`` lines for them, and undoing all of it (the
loop devices, the directory, and the test bed where it brought it up) however the benchmark
ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scripts.testbed_users import TestbedUse, using_testbed

ROOT = Path(__file__).resolve().parent.parent
TESTBED = ROOT / "scripts" / "testbed"
STATE = Path("/run/ivypy-testbed")
LUN_MIB = 16


@dataclass(frozen=True)
class Bed:
    """The hosts in use (``hosts.json``'s entries), each one's loop device (in order), and
    the benchmark's own directory (removed at the end)."""

    hosts: list[dict[str, str]]
    loops: list[str]
    tmp: Path

    @property
    def host_lines(self) -> str:
        """The test file's ``hosts:`` entries, a line each."""
        return self.host_lines_with([""] * len(self.hosts))

    def host_lines_with(self, extra: list[str]) -> str:
        """``host_lines`` with ``extra[i]`` (keys and values, ``key: value, ...``) in host i's
        entry where it is not empty."""
        return "\n".join(
            f"  - {{name: {h['name']}, address: {h['address']}, user: root, "
            f"python: /usr/bin/python3, identity_file: {STATE}/id_ed25519, "
            f"known_hosts: {STATE}/known_hosts{', ' + more if more else ''}}}"
            for h, more in zip(self.hosts, extra, strict=True))

    @property
    def lun_lines(self) -> str:
        """The test file's ``luns:`` entries: each host its own loop device."""
        return "\n".join(f"  - {{hosts: [{h['name']}], path: {lp}}}"
                         for h, lp in zip(self.hosts, self.loops, strict=True))


@contextlib.contextmanager
def testbed_with_luns(n_hosts: int, prefix: str) -> Iterator[Bed]:
    """The test bed with ``n_hosts`` hosts and a LUN each (see the module docstring); the
    directory is named ``prefix``… in /dev/shm. The test bed is held throughout
    (``scripts/testbed_users.py``): a test run cannot bring it down or up meanwhile, nor can
    this bring down one that others use."""
    with (using_testbed(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]])) as use,
          brought_up(use, n_hosts), _with_luns(n_hosts, prefix) as bed):
        yield bed


@contextlib.contextmanager
def brought_up(use: TestbedUse, n_hosts: int) -> Iterator[bool]:
    """The test bed up with at least ``n_hosts`` hosts; whether this brought it up (and takes
    it down at the end). Up and down are run with ``use`` let go of."""
    up = subprocess.run([str(TESTBED), "status"], capture_output=True).returncode == 0
    started = False
    if not up or len(json.loads((STATE / "hosts.json").read_text())) < n_hosts:
        with use.let_go_while():
            if up:
                _testbed("down")
            _testbed("up", str(n_hosts))
        started = True
    try:
        yield started
    finally:
        if started:
            use.let_go()
            subprocess.run([str(TESTBED), "down"], check=False, capture_output=True)


def _testbed(*args: str) -> None:
    """``scripts/testbed`` with ``args``; its own words when it refuses."""
    done = subprocess.run([str(TESTBED), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/testbed {' '.join(args)}: {done.stderr.strip()}")


@contextlib.contextmanager
def _with_luns(n_hosts: int, prefix: str) -> Iterator[Bed]:
    """``testbed_with_luns``' LUNs on the hosts that are up."""
    loops: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/dev/shm"))
    try:
        hosts = json.loads((STATE / "hosts.json").read_text())[:n_hosts]
        for h in hosts:
            img = tmp / f"{h['name']}.img"
            with open(img, "wb") as fh:  # written whole: a sparse file's holes read as no I/O
                for _ in range(LUN_MIB):
                    fh.write(os.urandom(1 << 20))
            loops.append(subprocess.run(["losetup", "--find", "--show", str(img)], check=True,
                                        capture_output=True, text=True).stdout.strip())
        yield Bed(hosts, loops, tmp)
    finally:
        for lp in loops:
            subprocess.run(["losetup", "-d", lp], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
