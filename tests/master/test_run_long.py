"""A long step keeps the master's memory flat (#64 item 6): what the master does with each
subinterval of a step (the settings' advance, the recorder's rows with every host's device
counters, measure's and DFC's decisions and rows, the live view's lines) is driven for N, 2N
and 3N subintervals in this process, and tracemalloc's traced memory may grow over the smaller
of the two spans between them (a cache that fills once in a process that ran other tests is
not a subinterval's) by no more than a few bytes a subinterval. Before the fix the master kept
every subinterval's device deltas, phase and folded number and every DFC move as an object
until the step's end: 2.8 kB a subinterval on the soak's test bed (4 hosts, 4 loop devices),
~10 MB an hour. No clock, no hosts, no sleeping: what is judged is allocations, not time, so
a busy machine cannot fail it. The whole run on real SSH hosts is ``scripts/bench_soak``'s."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import tracemalloc
from pathlib import Path

import numpy as np

from master.analysis.stepcontrol import StepControl
from master.config import StepConfig, parse_config_text
from master.live.rows import dfc_lines, measure_lines
from master.live.view import LiveView
from master.results.output import RunOutput
from master.results.schema import DFC_COLUMNS
from master.run.hostrows import HostResult
from master.run.recorder import StepRecorder
from master.run.settings import split_total
from protocol.devstats import DeviceDelta
from protocol.params import WorkloadParams
from tests.master.test_recorder import ROLLUPS, _host_result, _Slaves, _workloads, settings_of

STEP = """\
test: long
subinterval_seconds: 1
hosts: [h1, h2]
luns: [{file: /x/lun0, create: true, size: 1MiB}]
steps:
  - name: long
    workloads: [{name: w, iosequencer: random_steady, iops: 200}]
    dfc: {focus_rollup: host, focus_metric: service_time_p99_ms, target: 0.1,
          low_iops: 100, high_iops: 1000}
    warmup_seconds: 2
    measure_seconds: 100000
"""
#: The subintervals recorded before the first reading (caches, the files' buffers and the
#: allocator's pools fill), and between each two of the three readings
FIRST = 100
MORE = 120
#: What may still grow: each DFC focus instance's moves, kept for the step's verdict as
#: typed columns (``stepcontrol.MoveLog``: 25 bytes a move, its arrays over-allocated by up
#: to an eighth), and a margin for caches still filling (measured here: 59 bytes a
#: subinterval in all, 81 after other tests in the process). The growth fixed was 1,720
#: bytes a subinterval here (3 devices' deltas, the phase, the folded number, 2 DFC moves as
#: objects).
DFC_MOVE_BYTES = 32
MARGIN_BYTES_PER_SUBINTERVAL = 128


def _step() -> StepConfig:
    return parse_config_text(STEP, "t.yaml", cwd=Path("/x")).steps[0]


def _device(device: str, lun: str, ivypy_ops: int, device_ios: int, k: int) -> dict[str, object]:
    return DeviceDelta(device, f"dev{device}", (lun,), ivypy_ops, 4096 * ivypy_ops, 10**9,
                       10_000, 20_000,
                       (device_ios, 0, 8 * device_ios, 0, 500 + k % 7, 0, 900, 2000)).to_wire()


def test_a_long_step_keeps_the_masters_memory_flat(tmp_path: Path) -> None:
    wl = {w: dataclasses.replace(i, params=WorkloadParams(iops=100.0))
          for w, i in _workloads().items()}
    settings = settings_of(wl)
    out = RunOutput(tmp_path)
    step = _step()
    control = StepControl(step, 1.0, {"all": ("all",), "host": ("h1", "h2"),
                                      "lun": (), "workload": (), "vendor+model": ()})
    rec = StepRecorder(out, 0, "long", ROLLUPS, 1.0, wl, settings, "host", hosts=["h1", "h2"],
                       fold_measurement=True)
    ids = {h: [w for w in rec.ids if w.startswith(h + ":")] for h in ("h1", "h2")}
    sim = _Slaves(rec)
    rng = np.random.default_rng(6)
    # each host's result as its slave adds it up, made once: each subinterval is a copy
    made = {h: _host_result(sim, h, ids[h], 0, rng, 40.0)[0] for h in ids}
    members = {h: [wl[w] for w in ids[h]] for h in ids}
    view = LiveView(open(os.devnull, "w"), rich_mode=False)  # noqa: SIM115 - closed below

    def subinterval(k: int) -> None:
        settings.advance(k)
        phase = control.phase_of(k)
        hosts = []
        for h, made_h in made.items():
            # h1's loop device does ivypy's I/O; h2's does a tenth of it (the page cache):
            # a disagreement every subinterval, added up as it comes
            devices = ([_device("7:0", "/dev/sd0", 800, 800, k),
                        _device("8:16", "/dev/sd1", 400, 400, k)] if h == "h1"
                       else [_device("7:1", "/dev/sd0", 800, 80, k)])
            r = dataclasses.replace(made_h.result, subinterval=k, start_ns=k * 10**9,
                                    end_ns=(k + 1) * 10**9, devices=devices)
            hosts.append(HostResult(h, r, made_h.to_master_ns, (k + 1) * 10**9 + 50_000,
                                    2_500))
        with out.subinterval():
            got = rec.record(k, phase, hosts, (k + 1) * 10**9)
            totals = {h: settings.total_iops(ids[h]) or 0.0 for h in ids}
            dec = control.after(k, got.results, totals)
            t = out.table(f"{rec.dir}/dfc.csv", DFC_COLUMNS)
            for row in dec.dfc_rows:
                t.write(row)
        view.subinterval(k, phase, rec.show_type, got.live_total, got.live,
                         dfc_lines(dec.dfc_rows), got.live_instances,
                         measure_lines(dec.measure_rows))
        for h, total in dec.new_totals.items():  # DFC's moves, in force from k + 1
            split = split_total(total, [(m.lun_key, settings.latest(m.id)) for m in members[h]])
            for m, params in zip(members[h], split, strict=True):
                settings.taken(m.id, params, k + 1, "dfc")

    readings = []
    tracemalloc.start()
    try:
        for k in range(FIRST + 2 * MORE):
            subinterval(k)
            if k + 1 in (FIRST, FIRST + MORE, FIRST + 2 * MORE):
                gc.collect()
                readings.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
        view.stream.close()
    out.close()
    last = FIRST + 2 * MORE - 1
    assert control.phase_of(last) == "measurement"  # the window still open
    assert set(control.dfc_moves) == {"h1", "h2"}
    grew = [(b - a) / MORE for a, b in itertools.pairwise(readings)]
    bound = MARGIN_BYTES_PER_SUBINTERVAL + DFC_MOVE_BYTES * len(control.dfc_moves)
    assert min(grew) <= bound, (
        f"the master's memory grew {grew[0]:.0f} then {grew[1]:.0f} bytes a subinterval over "
        f"two spans of {MORE} subintervals (at most {bound} may: DFC's moves and a margin)")
    # what the device check added up stands: h2's device differed in every subinterval
    (differed,) = rec.devices.disagreements()
    assert differed.host == "h2" and f"in subintervals 0-{last}:" in differed.message

