"""The join through a real run on two loop devices: a fake array's per-LDEV metrics (its
``config_command`` maps each LDEV to a LUN by the loop device's kernel name) reach the ``lun``
and ``host`` rollup instances with the declared aggregation (``sum`` for one source, ``max``
for another), and the LDEV under no LUN is counted as non-participating."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.master.gatherhelp import loop_devices, run_to_end
from tests.master.runhelp import rows

FIXTURES = Path(__file__).parent / "fixtures" / "gather"
N = 3


def _source(name: str, aggregate: str, pairs: str) -> str:
    script = FIXTURES / "fake_array.py"
    return (f"  - {{name: {name}, command: [{sys.executable}, {script}, perf, {pairs}], "
            f"counters: [reads], config_command: [{sys.executable}, {script}, config, {pairs}], "
            f"join: {{element_type: LDEV, by: lun_name, lun_attribute: name, "
            f"aggregate: {aggregate}}}}}\n")


def test_fake_array_joined_to_lun_and_host_instances(tmp_path: Path) -> None:
    with loop_devices(2, 8 << 20) as devs:
        names = [Path(d).name for d in devs]
        pairs = f'"1:{names[0]}", "2:{names[1]}"'
        folder = run_to_end(tmp_path, "gjoin", f"""\
test: gjoin
subinterval_seconds: 0.5
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
""")
    step = folder / "step0000-s"
    config = rows(folder / "gather/arr/config/LDEV.csv")
    assert [(r["element_instance"], r["lun_name"]) for r in config] == [
        ("00:01", names[0]), ("00:02", names[1]), ("00:99", "not-a-lun")]
    busy, reads = "gather.{}.LDEV.busy_pct", "gather.{}.LDEV.reads"
    for source, host_busy, host_reads in (("arr", 30.0, 300.0), ("arrmax", 20.0, 200.0)):
        lun = rows(step / f"gather/{source}/joined/lun.csv")
        assert [(int(r["subinterval"]), r["rollup_instance"]) for r in lun] == [
            (k, f"localhost:{d}") for k in range(N) for d in devs]
        for r in lun:
            n = 1 if r["rollup_instance"].endswith(devs[0]) else 2
            assert r["elements"] == "1" and float(r[busy.format(source)]) == 10 * n
            assert float(r[reads.format(source)]) == pytest.approx(100 * n, rel=0.1)
        for rollup_type, instance in (("host", "localhost"), ("all", "all")):
            got = rows(step / f"gather/{source}/joined/{rollup_type}.csv")
            assert [(int(r["subinterval"]), r["rollup_instance"], r["elements"])
                    for r in got] == [(k, instance, "2") for k in range(N)]
            for r in got:
                assert float(r[busy.format(source)]) == host_busy
                assert float(r[reads.format(source)]) == pytest.approx(host_reads, rel=0.1)
        outside = rows(step / f"gather/{source}/joined/non_participating.csv")
        assert [(r["elements"], float(r[busy.format(source)])) for r in outside] == [
            ("1", 990.0)] * N
        # the step's summary: each instance's mean over the measurement window
        summary = {(r["rollup_type"], r["rollup_instance"]): r
                   for r in rows(step / f"gather/{source}/joined/summary.csv")}
        assert summary == {(r["rollup_type"], r["rollup_instance"]): r
                           for r in rows(folder / f"gather/{source}/summary.csv")}
        host = summary[("host", "localhost")]
        assert (host["first_subinterval"], host["last_subinterval"], host["subintervals"]) == (
            "0", str(N - 1), str(N))
        assert float(host[busy.format(source)]) == host_busy
        assert float(summary[("non_participating", "non_participating")][
            busy.format(source)]) == 990.0
    events = [e["message"] for e in rows(folder / "events.csv") if e["kind"] == "gather"]
    assert ("gather arr: 1 LDEV elements under no rollup instance (non-participating): 00:99"
            in events)
    # every LDEV, joined or not, is in the source's element file
    ldevs = rows(step / "gather/arr/LDEV.csv")
    assert sorted({r["element_instance"] for r in ldevs}) == ["00:01", "00:02", "00:99"]
