"""Tests for scripts/testbed: up N / status / down with real namespaces, veths, a bridge and
OpenSSH (root only). A test bed that is already up (someone's, or the tests/master fixture's) is
left alone: these tests skip rather than tear it down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.testbed_users import TestbedUse

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "testbed"
STATE = Path("/run/ivypy-testbed")

pytestmark = pytest.mark.root


def run_testbed(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, check=check, timeout=60
    )


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("ivy-h")}


def ivy_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {line.split(": ")[1].split("@")[0] for line in out.splitlines()}
    return {n for n in names if n.startswith(("ivy-h", "ivybr"))}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ssh(host: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-F", str(STATE / "ssh_config"), "-o", "BatchMode=yes", host, command],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def clean_bed() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test bed creates network namespaces and runs sshd")
    if STATE.exists() or namespaces():
        pytest.skip("a test bed is already up; not tearing it down")
    try:
        yield
    finally:
        run_testbed("down", check=False)


def test_up_status_ssh_and_down(clean_bed: None) -> None:
    run_testbed("up", "2")
    hosts = json.loads((STATE / "hosts.json").read_text())
    assert [(h["name"], h["address"]) for h in hosts] == [
        ("ivy-h1", "10.77.0.11"),
        ("ivy-h2", "10.77.0.12"),
    ]
    assert namespaces() == {"ivy-h1", "ivy-h2"}
    assert ivy_links() == {"ivybr0", "ivy-h1-r", "ivy-h2-r"}
    for name in ("id_ed25519", "id_ed25519.pub", "known_hosts", "ssh_config"):
        assert (STATE / name).is_file()
    known = (STATE / "known_hosts").read_text().splitlines()
    assert [line.split()[0] for line in known] == ["ivy-h1,10.77.0.11", "ivy-h2,10.77.0.12"]

    status = run_testbed("status")
    assert "ivy-h1   10.77.0.11" in status.stdout
    assert status.stdout.count(" up\n") == 2

    # OpenSSH's own client, strict host key checking, through the generated ssh_config; the
    # command runs inside the host's namespace, which has its address and no default route.
    for host in hosts:
        result = ssh(host["name"], "ip -4 -o addr show dev eth0; ip route")
        assert result.returncode == 0, result.stderr
        assert f"inet {host['address']}/24" in result.stdout
        assert "default" not in result.stdout
        assert alive(host["pid"])

    pids = [h["pid"] for h in hosts]
    run_testbed("down")
    assert not STATE.exists()
    assert namespaces() == set()
    assert ivy_links() == set()
    deadline = time.monotonic() + 2.0
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)
    assert run_testbed("status", check=False).returncode == 1


def test_up_again_recreates_cleanly_with_new_keys(clean_bed: None) -> None:
    run_testbed("up", "1")
    first_key = (STATE / "id_ed25519.pub").read_text()
    again = run_testbed("up", "2")
    assert "removing it first" in again.stderr
    assert (STATE / "id_ed25519.pub").read_text() != first_key
    assert namespaces() == {"ivy-h1", "ivy-h2"}
    assert run_testbed("status").returncode == 0
    assert ssh("ivy-h2", "true").returncode == 0


def test_up_and_down_refuse_while_a_user_holds_the_bed(clean_bed: None) -> None:
    """A benchmark or a test run holds the bed (``scripts/testbed_users.py``): up and down
    refuse, exit 2, naming it, and leave the bed as it is; once it lets go they work. A user
    that died holds nothing (its lock went with it)."""
    run_testbed("up", "1")
    use = TestbedUse("bench_soak --minutes 60")
    use.hold()
    try:
        for args in (("down",), ("up", "2")):
            refused = run_testbed(*args, check=False)
            assert refused.returncode == 2, refused.stderr
            assert (f"the test bed is in use (pid {os.getpid()}: bench_soak --minutes 60); "
                    "not changing it") in refused.stderr
            assert namespaces() == {"ivy-h1"} and run_testbed("status").returncode == 0
    finally:
        use.let_go()
    dead = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"
                             "from scripts.testbed_users import TestbedUse\n"
                             "TestbedUse('gone').hold(); import os; os._exit(0)",
                             str(REPO_ROOT)])
    assert dead.wait(timeout=30) == 0
    run_testbed("down")
    assert namespaces() == set()


def test_down_never_fails_and_cleans_a_partial_bed(clean_bed: None) -> None:
    assert run_testbed("down").returncode == 0  # nothing up at all
    subprocess.run(["ip", "netns", "add", "ivy-h7"], check=True)
    subprocess.run(
        ["ip", "link", "add", "ivy-h7-r", "type", "veth", "peer", "name", "ivy-h7-x"], check=True
    )
    subprocess.run(["ip", "link", "add", "ivybr0", "type", "bridge"], check=True)
    STATE.mkdir()
    status = run_testbed("status", check=False)
    assert status.returncode == 1
    run_testbed("down")
    assert namespaces() == set()
    assert ivy_links() == set()
    assert not STATE.exists()


@pytest.mark.parametrize("count", ["0", "65", "two", ""])
def test_up_refuses_a_bad_count(clean_bed: None, count: str) -> None:
    result = run_testbed("up", count, check=False)
    assert result.returncode == 2
    assert "usage: testbed up N" in result.stderr
    assert namespaces() == set()
