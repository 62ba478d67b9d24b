"""A verified LUN two hosts reach (docs/verify.md, "Across hosts"): two OpenSSH hosts of the
network-namespace test bed see one loop device (one kernel's), which their slaves name with
one identity; the run keeps one map of it. One host writes it in the first step; the other,
given the master's map before its first read, reads and checks it in the second, and finds
the block damaged as that step began (exit 5); ``ivypy verify`` after the run finds it again.
Where two hosts' workloads would meet on the LUN's blocks in one step while one writes, the
run is refused before any I/O (in memory: two hosts on one file).

Needs root (loop devices, the test bed): skipped otherwise."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from master.cli.main import main
from protocol import verify as pv
from tests.master.memhosts import run_cli
from tests.master.runhelp import ended, ivypy_here, write_config
from tests.slave.conftest import LoopFactory

BLOCK = pv.MAP_BLOCK_BYTES
N_BLOCKS = 256


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _config(testbed: Any, lun: str) -> str:
    h1, h2 = testbed.hosts[:2]
    hosts = "\n".join(
        f"  - {{name: {h.name}, address: {h.address}, user: root, port: 22, "
        f"python: /usr/bin/python3, identity_file: {testbed.identity_file}, "
        f"known_hosts: {testbed.known_hosts}}}" for h in (h1, h2))
    return f"""\
test: shared
subinterval_seconds: 0.5
hosts:
{hosts}
verify: true
luns:
  - {{hosts: [{h1.name}, {h2.name}], path: {lun}, allow_write: true}}
steps:
  - name: write
    workloads:
      - {{name: w, luns: {{host: {h1.name}}}, iosequencer: sequential, blocksize: 4KiB,
         iodepth: 4, iops: 1000, read_fraction: 0%}}
    warmup_seconds: 0
    measure_seconds: 1
  - name: read
    workloads:
      - {{name: w, delete: true}}
      - {{name: r, luns: {{host: {h2.name}}}, iosequencer: sequential, blocksize: 4KiB,
         iodepth: 4, iops: 1000, read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 4
"""


@pytest.mark.root
def test_one_host_writes_a_shared_lun_and_the_other_checks_it(
        tmp_path: Path, testbed: Any, loop_device: LoopFactory) -> None:
    h1, h2 = (h.name for h in testbed.hosts[:2])
    dev = loop_device(N_BLOCKS * BLOCK)
    cfg = write_config(tmp_path, _config(testbed, dev.path))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
    deadline = time.monotonic() + 180
    while not any((tmp_path / "shared").glob("*/step0001-read")):
        assert time.monotonic() < deadline and thread.is_alive(), "the read step never began"
        time.sleep(0.02)
    with open(dev.backing_file, "r+b") as f:  # block 77 zeroed as h2's reads begin
        f.seek(77 * BLOCK)
        f.write(bytes(BLOCK))
        f.flush()
        os.fsync(f.fileno())
    status = ended(thread, box)
    (folder,) = (tmp_path / "shared").iterdir()
    events = _rows(folder / "events.csv")
    assert status == 5, events[-5:]
    # one map of the LUN, reached by both hosts
    (lun,) = json.loads((folder / "verify" / "map.json").read_text())["luns"]
    assert (lun["host"], lun["lun"], lun["also"]) == (h1, dev.path, [[h2, dev.path]])
    assert lun["identity"].startswith("dev:")
    # h2's reads checked what h1 wrote (every block, a pass at least) and found block 77
    rows = _rows(folder / "step0001-read" / "host" / f"{h2}.csv")
    assert sum(float(r["verify_blocks_checked"]) for r in rows) > 0
    found = [e for e in events if e["kind"] == "verify" and e["level"] == "ERROR"]
    assert found and found[0]["host"] == h2  # the host that read it
    assert found[0]["message"].startswith(
        f"verify: missing block at offset {77 * BLOCK} of LUN {dev.path} (workload "
        f"{h2}:{dev.path}:r)")
    assert all(f"offset {77 * BLOCK} " in e["message"] for e in found
               if e["message"].startswith("verify: missing block"))
    luns = {(r["host"], r["lun"]): r for r in _rows(folder / "luns.csv")}
    assert luns[(h1, dev.path)]["shared"] == luns[(h2, dev.path)]["shared"] == "true"
    # ivypy verify after the run names the block too
    assert main(["verify", str(folder), "--plain"]) == 5
    (checked,) = folder.glob("verify-*")
    assert [(int(r["offset_bytes"]) // BLOCK, r["class"]) for r in
            _rows(checked / "verify.csv")] == [(77, "missing")]


OVERLAP = """\
test: overlap
subinterval_seconds: 0.2
hosts: [h1, h2]
verify: true
luns:
  - {{hosts: [h1, h2], file: "{lun}", allow_write: true}}
steps:
  - name: both
    workloads:
      - {{name: w, luns: {{host: h1}}, iosequencer: sequential, blocksize: 4KiB, iops: 100,
         read_fraction: 0%, range_end: {w_end}}}
      - {{name: r, luns: {{host: h2}}, iosequencer: sequential, blocksize: 4KiB, iops: 100,
         read_fraction: 100%, range_start: 50%}}
    measure_seconds: 1
"""


@pytest.mark.parametrize(("w_end", "refused"), [("60%", True), ("50%", False)])
def test_two_hosts_whose_workloads_meet_on_a_verified_lun_are_refused_before_any_io(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        w_end: str, refused: bool) -> None:
    # in memory: two hosts' slave sessions discover one file, with one identity
    lun = tmp_path / "lun"
    lun.write_bytes(bytes(1 << 20))
    cfg = write_config(tmp_path, OVERLAP.format(lun=lun, w_end=w_end))
    status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"], monkeypatch)
    err = capsys.readouterr().err
    if refused:
        assert status == 2, err
        assert "step both: verify: h1:" in err and "reach one LUN from two hosts" in err
        # 60 % of 1 MiB, rounded onto the map's 4 KiB blocks
        assert "w's writes in bytes 0-626,688 meet r's reads in bytes 524,288-" in err
        (folder,) = (tmp_path / "overlap").iterdir()
        assert not list(folder.glob("step*"))  # no step began
    else:  # apart: past the check (the in-memory hosts then refuse to verify)
        assert "reach one LUN from two hosts" not in err
