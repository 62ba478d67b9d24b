"""Focus metrics on a gathered metric, through a real run on a loop device: DFC holds a target
on a command source's rate of the device's completed reads (it follows the load, as an
array's own IOPS would), and ``measure`` runs until that metric is steady."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from tests.master.gatherhelp import loop_devices, run_to_end
from tests.master.runhelp import rows

# a gather command that must answer within 0.25 s of each boundary: beside the parallel part's
# runs it did not (subintervals 5-11 of one run had no sample) and the step timed out invalid;
# beside one paced run like it (``pair``), it did
pytestmark = [pytest.mark.alone, pytest.mark.pair]

SCRIPT = Path(__file__).parent / "fixtures" / "gather" / "diskstat.py"
METRIC = "gather.dev.disk.reads"
TARGET = 300.0


def test_dfc_holds_a_gathered_metric_and_measure_watches_one(tmp_path: Path) -> None:
    with loop_devices(1, 8 << 20) as (dev,):
        name = Path(dev).name
        folder = run_to_end(tmp_path, "gdfc", f"""\
test: gdfc
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{path: {dev}}}
gather:
  - {{name: dev, command: [{sys.executable}, {SCRIPT}, {name}], counters: [reads],
     join: {{element_type: disk, by: element_instance, lun_attribute: name}}}}
steps:
  - name: held
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 100}}
    dfc: {{focus_rollup: lun, focus_metric: {METRIC}, target: {TARGET:g}, low_iops: 20,
           high_iops: 5000}}
    warmup_seconds: 3
    measure_seconds: 3
  - name: steady
    workloads:
      - {{name: w, iops: 200}}
    measure: {{focus_metric: {METRIC}, accuracy: 10%, min_measure_seconds: 1.5,
               timeout_seconds: 6}}
""")
    moves = rows(folder / "step0000-held/dfc.csv")
    assert moves and all(m["metric"] == METRIC for m in moves)
    assert moves[0]["instance"] == f"localhost:{dev}"
    # the controller drives the device's own read rate to the target and holds it there
    measured = [float(m["measured"]) for m in moves if m["measured"]]
    tail = measured[len(measured) // 2:]
    assert statistics.median(tail) == pytest.approx(TARGET, rel=0.10), measured
    iops = [float(r["IOPS"]) for r in rows(folder / "step0000-held/all/all.csv")]
    assert statistics.median(iops[len(iops) // 2:]) == pytest.approx(TARGET, rel=0.10), iops
    # measure: steady on the gathered metric (valid step), its rows name it
    meas = rows(folder / "step0001-steady/measure.csv")
    assert meas and {r["metric"] for r in meas} == {METRIC}
    summary = [r for r in rows(folder / "summary.csv")
               if r["step_name"] == "steady" and r["rollup_type"] == "all"]
    assert summary[0]["valid"] == "true", summary
    print("dfc measured", [round(v) for v in measured], "IOPS", [round(v) for v in iops])
