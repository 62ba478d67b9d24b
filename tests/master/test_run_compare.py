"""``ivypy compare`` (the command, as a process) on two whole runs' folders: the same paced
workload on a file LUN, on in-memory hosts (``master.hosts.memory``), the second run at half
the IOPS. ``--fail-if "IOPS < -10%"`` exits 1 naming IOPS, the
step and the instance (for the ``all`` and the ``workload`` rollups); the runs swapped, it
exits 0; the json output holds the measured halving."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import ROOT

TEST = """\
test: paced
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, file: {lun}, size: 8MiB, create: true}}
steps:
  - name: paced_reads
    workloads:
      - {{name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: {iops},
         read_fraction: 100%}}
    warmup_seconds: 0.5
    measure_seconds: 1.5
"""


def one_run(tmp: Path, name: str, lun: Path, iops: int) -> Path:
    out = tmp / name
    out.mkdir()
    result = execute(memory_run(memory_config(out, TEST.format(lun=lun, iops=iops)),
                                MemoryHosts()))
    assert result.exit_code == 0, result.message
    return Path(result.folder)


def compare(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "master", "compare", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


def test_half_the_iops_fails_the_gate(tmp_path: Path) -> None:
    lun = tmp_path / "lun"
    base = one_run(tmp_path, "base", lun, 400)
    new = one_run(tmp_path, "new", lun, 200)
    gate = "IOPS < -10%"

    proc = compare(str(base), str(new), "--fail-if", gate)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failing = [line for line in proc.stderr.splitlines() if "FAIL" in line]
    assert len(failing) == 1, proc.stderr
    assert failing[0].startswith(f"ivypy compare: FAIL {gate}: step paced_reads, all all: ")
    assert f"FAIL {gate}" in proc.stdout and "paced_reads" in proc.stdout

    proc = compare(str(base), str(new), "--fail-if", gate, "--rollup", "workload")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAIL {gate}: step paced_reads, workload localhost:{lun}:w: " in proc.stderr

    proc = compare(str(new), str(base), "--fail-if", gate)  # swapped: twice the IOPS
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout + proc.stderr
    assert "ok: no --fail-if condition holds" in proc.stdout

    proc = compare(str(base), str(new), "--format", "json", "--fail-if", gate)
    doc = json.loads(proc.stdout)
    iops = doc["rows"][0]["metrics"]["IOPS"]
    print(f"measured IOPS: base {iops['base']}, new {iops['new']}, "
          f"change {iops['change_pct']} %")
    assert doc["rows"][0]["base_valid"] and doc["rows"][0]["new_valid"]
    assert abs(iops["base"] - 400) < 20 and abs(iops["new"] - 200) < 10, iops
    assert -55 < iops["change_pct"] < -45, iops
