"""A host whose network link is cut mid-step, over real OpenSSH (network-namespace test bed):
the master reports it at the deadline of the subinterval running and the run is over within
3 s of that (exit 3, the host named); the slave, whose stdin never sees an EOF through the
still-open sshd channel, is ended by its own watchdog (``watchdog_seconds``), its workers and
its LUN with it. Before, the master exited 12-16 s after the fault and the slave outlived a
150 s partition holding its LUN open."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from tests.master.runhelp import (
    all_gone,
    process_tree,
    rows,
    run_folder,
    slave_pids,
    start_run,
    wait_rows,
    write_config,
)

MIB = 1 << 20
SUB_S = 0.5
WATCHDOG_S = 3.0


def _config(host: Any, identity: str, known_hosts: str, lun: str) -> str:
    return f"""\
test: cut
subinterval_seconds: {SUB_S}
hosts:
  - {{name: {host.name}, address: {host.address}, user: root, port: 22,
     python: /usr/bin/python3, identity_file: {identity}, known_hosts: {known_hosts},
     watchdog_seconds: {WATCHDOG_S}}}
luns:
  - {{hosts: [{host.name}], path: {lun}}}
steps:
  - name: rr
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 1000,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 60
"""


def _link(host: Any, state: str) -> None:
    subprocess.run(["ip", "link", "set", f"{host.name}-r", state], check=True,
                   capture_output=True, timeout=30)


def test_a_cut_link_is_reported_at_the_deadline_and_the_slave_ends_by_its_watchdog(
        tmp_path: Path, testbed: Any, loop_device: Any) -> None:
    host = testbed.hosts[0]
    lun = loop_device(16 * MIB)
    cfg = write_config(tmp_path, _config(host, testbed.identity_file, testbed.known_hosts,
                                         lun.path))
    proc = start_run(cfg, tmp_path)
    cut = False
    try:
        folder = run_folder(tmp_path, "cut")
        wait_rows(folder / "step0000-rr/all/all.csv", 2, timeout_s=60)
        slave = psutil.Process(slave_pids(folder)[0])
        tree = process_tree(slave.pid)
        _link(host, "down")
        cut = True
        t_cut = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t_cut
        assert proc.returncode == 3, err
        assert host.name in err and "not received within the deadline" in err
        # the subinterval running at the cut ends within SUB_S, its result is due 0.75 later
        assert took < 1.75 * SUB_S + 3.0, f"the run ended {took:.2f} s after the cut"
        # the slave heard its last word at the cut at the latest: its watchdog ends it
        assert all_gone(tree, WATCHDOG_S + 3.0), [p.pid for p in tree if p.is_running()]
    finally:
        proc.kill()
        if cut:
            _link(host, "up")
    assert any("not received within the deadline" in e["message"]
               for e in rows(folder / "events.csv"))
