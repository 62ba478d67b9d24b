"""Fixtures for master tests: a stand-in slave zipapp and the multi-host test bed.

Owns: ``echo_zipapp`` (the real zipapp builder with a small echo entry point in place of
``slave.main``, so transports are tested end to end while the slave is being written) and
``testbed`` (``scripts/testbed up 3`` once for the tests/master directory, ``down`` after its
last test; root only). The in-process SSH server lives in tests/sshserver.py; the real runs
several test files share, in tests/master/sharedruns.py.

Must not: leave processes, namespaces or files behind, or touch the user's ~/.cache (every
cache directory here is under tmp_path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from master.hosts.zipapp import SlaveZipapp, build_slave_zipapp
from master.results import writers
from scripts.testbed_luns import brought_up
from scripts.testbed_users import using_testbed

REPO_ROOT = Path(__file__).resolve().parents[2]
# tests/master has no __init__.py, so pytest does not put the repository root on sys.path for
# it; the tests here import shared helpers from the ``tests`` package (tests/sshserver.py).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
TESTBED_SCRIPT = REPO_ROOT / "scripts" / "testbed"
TESTBED_STATE = Path("/run/ivypy-testbed")
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def _writer_threads_ended() -> Iterator[None]:
    """Every test ends with the master's writer threads ended, as it began: a later test in
    the same worker process may need one without other threads (``ivypy fio-pctiles`` forks
    its readers only then)."""
    yield
    writers.close_pools()

# The stand-in entry point. It imports the packed msgpack/protocol/slave (so a broken zipapp
# fails), reports on stderr where msgpack came from and its arguments, writes its pid as the
# first stdout line, then echoes stdin to stdout until EOF, exiting 0. "EXIT n\n" makes it
# exit with status n; "IGNORE-EOF\n" makes it ignore EOF and sleep (to test terminate/kill).
ECHO_SOURCE = b"""\
import os, sys, time


def main():
    import msgpack, protocol, slave
    packed = msgpack.unpackb(msgpack.packb({"ok": [1, 2]}))
    sys.stderr.write("echo-slave pid %d msgpack %s impl %s file %s roundtrip %r argv %r\\n" % (
        os.getpid(), ".".join(map(str, msgpack.version)), msgpack.Packer.__module__,
        msgpack.__file__, packed, sys.argv[1:]))
    sys.stderr.flush()
    out = sys.stdout.buffer
    out.write(b"%d\\n" % os.getpid())
    out.flush()
    ignore_eof = False
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            if ignore_eof:
                while True:
                    time.sleep(60)
            return 0
        if chunk.startswith(b"EXIT "):
            return int(chunk.split()[1])
        if chunk == b"IGNORE-EOF\\n":
            ignore_eof = True
        out.write(chunk)
        out.flush()
"""


@pytest.fixture(scope="session")
def echo_zipapp() -> SlaveZipapp:
    return build_slave_zipapp(
        "ivypy_echo_slave:main", extra_files={"ivypy_echo_slave.py": ECHO_SOURCE}
    )


@dataclass(frozen=True)
class TestbedHost:
    name: str
    address: str
    sshd_pid: int


@dataclass(frozen=True)
class Testbed:
    hosts: list[TestbedHost]
    state_dir: Path

    @property
    def identity_file(self) -> str:
        return str(self.state_dir / "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return str(self.state_dir / "known_hosts")

    @property
    def ssh_config(self) -> str:
        return str(self.state_dir / "ssh_config")


def _testbed_status_ok() -> bool:
    return subprocess.run([str(TESTBED_SCRIPT), "status"], capture_output=True).returncode == 0


def _testbed_hosts() -> list[TestbedHost]:
    """The hosts of the test bed that is up (its ``hosts.json``)."""
    return [TestbedHost(h["name"], h["address"], int(h["pid"]))
            for h in json.loads((TESTBED_STATE / "hosts.json").read_text())]


@pytest.fixture(scope="package")
def testbed() -> Iterator[Testbed]:
    """Three OpenSSH hosts in network namespaces, held while the tests use them
    (``scripts/testbed_users.py``: a benchmark on the test bed is not brought down under
    them, nor they under it). Reuses a test bed that is already up; one with fewer hosts is
    someone's, left as it is (the tests skip). Brought up, and down after the last test, as
    the benchmarks bring theirs (``scripts/testbed_luns.py``)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test bed creates network namespaces and runs sshd")
    with using_testbed(f"pytest (pid {os.getpid()}): tests/master's test bed tests") as use:
        if _testbed_status_ok() and len(hosts := _testbed_hosts()) < 3:
            pytest.skip(f"a test bed with {len(hosts)} hosts is up; these tests need 3")
        with brought_up(use, 3):
            yield Testbed(hosts=_testbed_hosts()[:3], state_dir=TESTBED_STATE)


# Loop-device fixtures (loop_device, ext4_loop_device, mounted_loop_device) for run tests, and
# the real runs several test files share (tests/master/sharedruns.py: once per session).
from tests.master.sharedruns import (  # noqa: E402, F401
    interrupted_run,
    master_killed_run,
    quickstart_run,
    slave_killed_run,
)
from tests.slave.conftest import ext4_loop_device, loop_device  # noqa: E402, F401
