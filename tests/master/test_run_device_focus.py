"""Device-side focus metrics through real runs of ``ivypy run`` on localhost:

* DFC holds ``device_IOPS`` of a loop device (over a fully written file in /dev/shm) at a
  target by moving ivypy's IOPS, and ``measure`` runs until ``device_IOPS`` is steady;
* a file LUN on tmpfs has no block device: its ``device_IOPS`` is empty, so measure never
  counts it steady and the step times out invalid (exit 1);
* a focus rollup that splits a LUN's workloads between instances (``workload`` with two
  workloads on one LUN) has no device columns: refused with the key path, exit 2, before any
  I/O.

Needs root (loop devices) for the first; the others run anywhere.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from tests.master.gatherhelp import loop_devices, run_to_end
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows, write_config

TARGET = 400.0


# the device's counters, sampled at each boundary, steer DFC to within 10 %: beside the parallel
# part's runs a sample may come late and move reads between subintervals, as
# test_run_gather_dfc.py's did (the other two tests time nothing: they run beside the others)
@pytest.mark.alone
@pytest.mark.pair  # beside one paced run like it, its samples came on time
def test_dfc_holds_device_iops_and_measure_watches_it(tmp_path: Path) -> None:
    with loop_devices(1, 16 << 20) as (dev,):
        folder = run_to_end(tmp_path, "devdfc", f"""\
test: devdfc
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{path: {dev}}}
steps:
  - name: held
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 100}}
    dfc: {{focus_rollup: lun, focus_metric: device_IOPS, target: {TARGET:g}, low_iops: 20,
           high_iops: 5000}}
    warmup_seconds: 3
    measure_seconds: 3
  - name: steady
    workloads:
      - {{name: w, iops: 200}}
    measure: {{focus_metric: device_IOPS, accuracy: 10%, min_measure_seconds: 1.5,
               timeout_seconds: 6}}
""")
    moves = rows(folder / "step0000-held/dfc.csv")
    assert moves and all(m["metric"] == "device_IOPS" for m in moves)
    assert moves[0]["instance"] == f"localhost:{dev}"
    measured = [float(m["measured"]) for m in moves if m["measured"]]
    assert measured[0] < TARGET / 2, measured  # it started at 100 IOPS and moved
    tail = measured[len(measured) // 2:]
    assert statistics.median(tail) == pytest.approx(TARGET, rel=0.10), measured
    # the device's IOPS are the rows' device_IOPS, and ivypy's own follow
    lun_rows = rows(folder / f"step0000-held/lun/localhost_dev_{Path(dev).name}.csv")
    device = [float(r["device_IOPS"]) for r in lun_rows]
    assert [round(v, 3) for v in measured] == [round(v, 3) for v in device[:len(measured)]]
    iops = [float(r["IOPS"]) for r in lun_rows]
    assert statistics.median(iops[len(iops) // 2:]) == pytest.approx(TARGET, rel=0.10), iops
    meas = rows(folder / "step0001-steady/measure.csv")
    assert meas and {r["metric"] for r in meas} == {"device_IOPS"}
    summary = [r for r in rows(folder / "summary.csv")
               if r["step_name"] == "steady" and r["rollup_type"] == "all"]
    assert summary[0]["valid"] == "true", summary
    assert float(summary[0]["device_IOPS"]) == pytest.approx(200, rel=0.10)
    print("dfc device_IOPS", [round(v) for v in measured], "IOPS", [round(v) for v in iops])


def test_measure_on_a_device_metric_without_a_device_never_steadies(tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("needs /dev/shm (tmpfs)")
    lun = Path("/dev/shm") / f"ivypy-test-devfocus-{os.getpid()}.lun"
    try:
        folder = run_to_end(tmp_path, "nodev", f"""\
test: nodev
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{file: {lun}, size: 4MiB, create: true, engine: threadpool}}
steps:
  - name: steady
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 200, read_fraction: 100%}}
    measure: {{focus_metric: device_IOPS, accuracy: 50%, min_measure_seconds: 1,
               timeout_seconds: 2}}
""", expect=1, in_memory=True)
    finally:
        lun.unlink(missing_ok=True)
    meas = rows(folder / "step0000-steady/measure.csv")
    assert meas and all(r["passed"] != "true" for r in meas), meas
    summary = [r for r in rows(folder / "summary.csv") if r["rollup_type"] == "all"]
    assert summary[0]["valid"] == "false" and summary[0]["device_IOPS"] == "", summary


def test_a_focus_rollup_that_splits_a_lun_is_refused(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, f"""\
test: split
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{file: {tmp_path / "lun"}, size: 4MiB, create: true}}
steps:
  - name: s
    workloads:
      - {{name: a, iosequencer: random_steady, iops: 100}}
      - {{name: b, iosequencer: random_steady, iops: 100}}
    dfc: {{focus_rollup: workload, focus_metric: device_util_pct, target: 50, low_iops: 20,
           high_iops: 5000}}
""")
    result = execute(memory_run(memory_config(tmp_path, cfg.read_text()), MemoryHosts()))
    assert result.exit_code == 2, result.message
    assert ("steps[0].dfc.focus_rollup: device_util_pct needs a LUN-based focus rollup, but "
            "workload splits the workloads of LUN localhost:") in result.message, result.message
    created = list((tmp_path / "out").glob("split/*/step0000-s/workload/*.csv"))
    assert not created, created  # refused before the step made its rows
