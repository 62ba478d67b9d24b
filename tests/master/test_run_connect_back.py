"""Connect-back in a run (``hosts: [{name, connect_back: true}]``, ``connect_back: {listen,
token_file, timeout_seconds}``): slaves started by hand in the test bed's network namespaces,
as a DaemonSet would start them (``ivypy slave --connect``), dial the master across the
bridge, each with a loop-device LUN; a slave with a wrong token is refused and its address
logged; hosts.csv says ``connect_back``; a connect-back slave killed mid-step ends the run as a
killed SSH slave does (exit 3). A host that never dials in is exit 3 naming it (in memory: no
slave is started). The handshake itself is tests/master/test_hosts_connectback.py's.

The namespace tests need root (loop devices, the test bed): skipped otherwise."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from master.cli.k8s import slave_args
from tests.master.memhosts import run_cli
from tests.master.runhelp import ended, ivypy_here, rows, wait_rows, write_config
from tests.slave.conftest import LoopFactory

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _config(names: list[str], luns: list[str], listen: str, token: Path, seconds: float,
            timeout_s: float = 60) -> str:
    hosts = "\n".join(f"  - {{name: {n}, connect_back: true}}" for n in names)
    lun_lines = "\n".join(f"  - {{hosts: {n}, path: {p}, allow_write: true}}"
                          for n, p in zip(names, luns, strict=True))
    return f"""\
test: back
subinterval_seconds: 0.5
# judged on the transport, not on the rate a loaded machine keeps
iops_tolerance_pct: 100
hosts:
{hosts}
connect_back: {{listen: "{listen}", token_file: {token}, timeout_seconds: {timeout_s}}}
luns:
{lun_lines}
steps:
  - name: randread
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 300}}
    warmup_seconds: 0
    measure_seconds: {seconds}
"""


def _listening(out: Path, deadline: float) -> None:
    while not any("connect_back: listening" in r["message"]
                  for e in out.glob("back/*/events.csv") for r in rows(e)):
        assert time.monotonic() < deadline, "the master never listened"
        time.sleep(0.05)


def _slave(ns: str, listen: str, token: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    """A slave started in namespace ``ns`` as a scheduler would, dialling the master: the
    command of the pods ``ivypy k8s manifest`` writes (``ivypy`` being this checkout's)."""
    host, port = listen.rsplit(":", 1)
    _, *words = slave_args(host, int(port), name, str(token))
    with open(log, "wb") as f:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "master", *words,
             "--watchdog-min-seconds", "5"], stdout=subprocess.DEVNULL, stderr=f)


@pytest.mark.root
@pytest.mark.parametrize("kill", [False, True])
def test_slaves_in_namespaces_dial_the_master(tmp_path: Path, testbed: Any,
                                              loop_device: LoopFactory, kill: bool) -> None:
    hosts = testbed.hosts[:3]
    names = [h.name for h in hosts[:2]]
    bridge = hosts[0].address.rsplit(".", 1)[0] + ".1"
    listen = f"{bridge}:{_free_port()}"
    token = tmp_path / "token"
    token.write_text("the-run's-token\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    loops = [loop_device(16 * MIB) for _ in names]
    cfg = write_config(tmp_path, _config(names, [lp.path for lp in loops], listen, token,
                                         8 if kill else 1.5))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
    _listening(tmp_path, time.monotonic() + 60)
    # an impostor in the third namespace, with the first host's name and a wrong token
    impostor = _slave(hosts[2].name, listen, wrong, names[0], tmp_path / "impostor.log")
    assert impostor.wait(60) == 1  # refused: the master's proof does not hold for it
    slaves = [_slave(n, listen, token, n, tmp_path / f"{n}.log") for n in names]
    try:
        (folder,) = (tmp_path / "back").iterdir()
        if kill:
            wait_rows(folder / "step0000-randread" / "all" / "all.csv", 2)
            slaves[0].kill()
        status = ended(thread, box)
    finally:
        for s in slaves:  # a slave ends by itself once its master's connection has: waited for
            try:
                s.wait(60)
            except subprocess.TimeoutExpired:
                s.terminate()
                s.wait(30)
    events = rows(folder / "events.csv")
    refused = [e for e in events if e["kind"] == "connect_back" and e["level"] == "WARNING"]
    assert refused and refused[0]["message"].startswith(
        f"connect_back: a connection from {hosts[2].address}:"), refused
    assert "hung up instead of proving the token" in refused[0]["message"]
    table = rows(folder / "hosts.csv")
    assert [(h["host"], h["transport"]) for h in table] == [(n, "connect_back") for n in names]
    if not kill:
        assert status == 0, events[-5:]
        per_host = {r["rollup_instance"]: float(r["IOPS"]) for r in rows(folder / "summary.csv")
                    if r["rollup_type"] == "host"}
        assert sorted(per_host) == sorted(names) and all(v > 0 for v in per_host.values())
        assert all(s.returncode == 0 for s in slaves)  # each ended with its master's Bye
    else:
        assert status == 3
        said = [e for e in events if e["kind"] == "run"][-1]["message"]
        assert names[0] in said and "ended its output unexpectedly" in said


def test_a_host_that_never_dials_in_is_exit_3_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    lun = tmp_path / "lun"
    lun.write_bytes(bytes(MIB))
    cfg = write_config(tmp_path, _config(["far"], [str(lun)], f"127.0.0.1:{_free_port()}",
                                         token, 1, timeout_s=1).replace(
        "path: ", "file: "))
    assert run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"],
                   monkeypatch) == 3
    err = capsys.readouterr().err
    assert "host far: did not dial in within 1 s" in err and "ivypy slave --connect" in err
