"""The exec transport in a run (``hosts: [{name, exec: ...}]``): two hosts of the
network-namespace test bed reached by ``ip netns exec NS`` beside one reached by SSH, each with
a loop-device LUN. The exec hosts' slaves travel down the pipe and run inside their namespaces
(``ip netns identify`` of their pids while the step runs); hosts.csv says which transport each
host used; every host's I/O is in the rollups. The transport's own failures and its bootstrap
are tests/master/test_transport.py's.

Needs root (loop devices, the test bed): skipped otherwise."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.master.runhelp import ended, ivypy_here, rows, write_config
from tests.slave.conftest import LoopFactory

MIB = 1 << 20


def _config(testbed: Any, loops: list[Any]) -> str:
    ssh, *execs = testbed.hosts[:3]
    luns = "\n".join(f"  - {{hosts: {h.name}, path: {lp.path}, allow_write: true}}"
                     for h, lp in zip(testbed.hosts[:3], loops, strict=True))
    first, last = execs[0].name, execs[-1].name
    prefix = first.rstrip("0123456789")  # ivy-h: the names' common stem
    return f"""\
test: exec
subinterval_seconds: 0.5
# judged on the transport, not on the rate a loaded machine keeps
iops_tolerance_pct: 100
hosts:
  - {{name: {ssh.name}, address: {ssh.address}, user: root, python: /usr/bin/python3,
     identity_file: {testbed.identity_file}, known_hosts: {testbed.known_hosts}}}
  - {{name: "{prefix}[{first[len(prefix):]}-{last[len(prefix):]}]",
     exec: "ip netns exec {{name}}", python: /usr/bin/python3}}
luns:
{luns}
steps:
  - name: randread
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 500}}
    warmup_seconds: 0
    measure_seconds: 3
"""


@pytest.mark.root
def test_exec_hosts_in_namespaces_run_beside_an_ssh_host(
        tmp_path: Path, testbed: Any, loop_device: LoopFactory) -> None:
    hosts = [h.name for h in testbed.hosts[:3]]
    loops = [loop_device(16 * MIB) for _ in hosts]
    cfg = write_config(tmp_path, _config(testbed, loops))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
    deadline = time.monotonic() + 180
    while not any((tmp_path / "exec").glob("*/step0000-randread/all/all.csv")):
        assert time.monotonic() < deadline and thread.is_alive(), "the step never began"
        time.sleep(0.05)
    (folder,) = (tmp_path / "exec").iterdir()
    slaves = {h["host"]: int(h["slave_pid"]) for h in rows(folder / "hosts.csv")}
    # while the step runs, each exec host's slave is inside its own namespace
    where = {h: subprocess.run(["ip", "netns", "identify", str(slaves[h])], capture_output=True,
                               text=True).stdout.strip() for h in hosts[1:]}
    status = ended(thread, box)
    assert status == 0, rows(folder / "events.csv")[-5:]
    assert where == {h: h for h in hosts[1:]}
    table = rows(folder / "hosts.csv")
    assert [(h["host"], h["transport"]) for h in table] == [
        (hosts[0], "ssh"), (hosts[1], "exec"), (hosts[2], "exec")]
    assert all(h["io_loop"].startswith("compiled") for h in table)
    per_host = {r["rollup_instance"]: float(r["IOPS"]) for r in rows(folder / "summary.csv")
                if r["rollup_type"] == "host"}
    assert sorted(per_host) == sorted(hosts) and all(v > 0 for v in per_host.values())
