"""The join through a whole run on two loop devices (in-memory hosts: the slave's discovery of
the devices is real, its I/O synthetic): a fake array's per-LDEV metrics (its
``config_command`` maps each LDEV to a LUN by the loop device's kernel name) reach the ``lun``
and ``host`` rollup instances with the declared aggregation (``sum`` for one source, ``max``
for another) as columns of their rows and summaries (the step's and the run's summary.csv),
and the LDEV under no LUN is counted as non-participating."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.master.gatherhelp import loop_devices, run_to_end
from tests.master.runhelp import ROOT, rows

FIXTURES = Path(__file__).parent / "fixtures" / "gather"
N = 3
#: the fake's read counter is its clock when its process printed it, so a start that is late
#: under load moves a rate: 112.7 for 100 (0.5 s subintervals) in a full suite here. A sum
#: (300) and a max (200) of the two LDEVs stay apart at 25 %.
READS_REL = 0.25
LATE = "late: still running when the subinterval was recorded"


def _source(name: str, aggregate: str, pairs: str) -> str:
    script = FIXTURES / "fake_array.py"
    return (f"  - {{name: {name}, command: [{sys.executable}, {script}, perf, {pairs}], "
            f"counters: [reads], config_command: [{sys.executable}, {script}, config, {pairs}], "
            f"join: {{element_type: LDEV, by: lun_name, lun_attribute: name, "
            f"aggregate: {aggregate}}}, timeout: 0.5s}}\n")


def test_fake_array_joined_to_lun_and_host_instances(tmp_path: Path) -> None:
    with loop_devices(2, 8 << 20) as devs:
        names = [Path(d).name for d in devs]
        pairs = f'"1:{names[0]}", "2:{names[1]}"'
        folder = run_to_end(tmp_path, "gjoin", f"""\
test: gjoin
subinterval_seconds: 0.5
# judged on the joined columns, not on the rate a loaded machine keeps
iops_tolerance_pct: 100
hosts: [localhost]
luns:
  - {{path: {devs[0]}}}
  - {{path: {devs[1]}}}
gather:
{_source("arr", "sum", pairs)}{_source("arrmax", "max", pairs)}
steps:
  - name: s
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 50}}
    warmup_seconds: 0
    measure_seconds: {N * 0.5}
""", in_memory=True)
    step = folder / "step0000-s"
    config = rows(folder / "gather/arr/config/LDEV.csv")
    assert [(r["element_instance"], r["lun_name"]) for r in config] == [
        ("00:01", names[0]), ("00:02", names[1]), ("00:99", "not-a-lun")]
    busy, reads = "gather.{}.LDEV.busy_pct", "gather.{}.LDEV.reads"
    lun_files = {d: step / f"lun/localhost_dev_{Path(d).name}.csv" for d in devs}
    # a Python script's start-up slower than its lead (a busy machine) is in after its
    # subinterval was recorded: by design an empty cell, said in interlock.csv
    status = {(r["gather_source"], int(r["subinterval"])): r["gather_status"]
              for r in rows(step / "interlock.csv") if r["gather_source"]}
    assert set(status.values()) <= {"ok", LATE}, status

    def landed(source: str, k: int) -> bool:
        return status[(source, k)] == "ok"

    for source, host_busy, host_reads in (("arr", 30.0, 300.0), ("arrmax", 20.0, 200.0)):
        assert any(landed(source, k) for k in range(N)), status  # the source works
        # the joined metrics are columns of the rollup instances' rows
        checks = [(rows(lun_files[d]), 10.0 * n, 100.0 * n)
                  for n, d in enumerate(devs, start=1)]
        checks += [(rows(step / f"{rollup_type}/{instance}.csv"), host_busy, host_reads)
                   for rollup_type, instance in (("host", "localhost"), ("all", "all"))]
        for got, want_busy, want_reads in checks:
            assert [int(r["subinterval"]) for r in got] == list(range(N))
            for k, r in enumerate(got):
                if not landed(source, k):
                    assert r[busy.format(source)] == r[reads.format(source)] == ""
                    continue
                assert float(r[busy.format(source)]) == want_busy
                if k == 0 or landed(source, k - 1):  # after a late one: its base was late
                    assert float(r[reads.format(source)]) == pytest.approx(want_reads,
                                                                           rel=READS_REL)
        outside = rows(step / f"gather/{source}/non_participating.csv")
        assert [(r["elements"], float(r[busy.format(source)])) for r in outside
                if landed(source, int(r["subinterval"]))] == [("1", 990.0)] * sum(
            landed(source, k) for k in range(N))
        # the summaries: each instance's mean over the measurement window, in the step's
        # rollup summary.csv and the run's
        run_summary = {(r["rollup_type"], r["rollup_instance"]): r
                       for r in rows(folder / "summary.csv")}
        host = rows(step / "host/summary.csv")[0]
        assert host == run_summary[("host", "localhost")]
        assert (host["first_subinterval"], host["last_subinterval"]) == ("0", str(N - 1))
        assert float(host[busy.format(source)]) == host_busy
        assert float(run_summary[("lun", f"localhost:{devs[1]}")][busy.format(source)]) == 20.0
    header = list(rows(folder / "summary.csv")[0])
    at = header.index("device_queue_depth")
    assert header[at + 1:at + 5] == [busy.format("arr"), reads.format("arr"),
                                     busy.format("arrmax"), reads.format("arrmax")]
    assert not (step / "gather/arr/joined").exists()
    # ivypy compare reads the gathered columns from summary.csv; the report is made
    proc = subprocess.run(
        [sys.executable, "-m", "master", "compare", str(folder), str(folder), "--rollup", "host",
         "--metric", busy.format("arr"), "--format", "json",
         "--fail-if", f"{busy.format('arr')} < -1%"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert busy.format("arr") in proc.stdout and "30" in proc.stdout
    assert "report.html written" in (folder / "run.log").read_text()
    events = [e["message"] for e in rows(folder / "events.csv") if e["kind"] == "gather"]
    assert ("gather arr: 1 LDEV elements under no rollup instance (non-participating): 00:99"
            in events)
    # every LDEV, joined or not, is in the source's element file
    ldevs = rows(step / "gather/arr/LDEV.csv")
    assert sorted({r["element_instance"] for r in ldevs}) == ["00:01", "00:02", "00:99"]
