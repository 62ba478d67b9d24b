"""CPU sampling (``slave.cpu``) on real load, and the CPU cost per I/O it feeds (cpu.csv).

A child process pinned to one CPU burns a known amount of CPU time: that core's busy % and the
host's between two snapshots must show at least that much. The slave's own CPU time (itself,
its threads, its live and its reaped children, as a slave has its workers) must match what was
burned, measured independently with ``getrusage``. ``/proc/stat`` read just before and after a
snapshot brackets each core's counters. The arithmetic from two snapshots, and
``slave_cpu_us_per_io`` (computed on the master, ``master.run.recorder``, from a host's CPU seconds
and its I/Os of the subinterval), are checked table-driven where they are pure.
"""

from __future__ import annotations

import collections
import csv
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.config.schema import LunChoice, RollupSpec, WorkloadSpec
from master.results.output import RunOutput
from master.results.schema import CPU_COLUMNS
from master.run.hostrows import HostResult
from master.run.recorder import StepRecorder
from master.run.settings import Settings
from master.run.workloads import Lun, SelectedLun, WorkloadInstance
from protocol.batch import StatsBatch
from protocol.messages import SubintervalResult
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.cpu import CpuSampler, CpuSnapshot, _busy_total
from slave.session import group_maps, parse_plan, rollup_parts

CPUS = sorted(os.sched_getaffinity(0))
N_CPUS = os.cpu_count() or 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: /proc counters are in clock ticks: each of the up to four fields read (user, system and
#: the children's two) is off by up to one tick at either end of an interval
TICKS_S = 4 / CLK_TCK

#: A child that pins itself to CPU argv[1], burns argv[2] seconds of CPU there, prints that
#: CPU time and its whole CPU time so far (getrusage), then exits or (argv[3] == "hold") waits
#: for its stdin to close, so that it is still alive when the parent looks.
BURN = r"""
import os, resource, sys, time
cpu, seconds, hold = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "hold"
os.sched_setaffinity(0, {cpu})
assert os.sched_getaffinity(0) == {cpu}, os.sched_getaffinity(0)
start = time.process_time()
x = 0
while time.process_time() - start < seconds:
    for _ in range(10000):
        x += 1
burned = time.process_time() - start
ru = resource.getrusage(resource.RUSAGE_SELF)
print(burned, ru.ru_utime + ru.ru_stime, flush=True)
if hold:
    sys.stdin.read()
"""


def _burn(cpu: int, seconds: float) -> float:
    """Run a burner child to its end; the CPU seconds it burned pinned to ``cpu``."""
    proc = subprocess.run([sys.executable, "-c", BURN, str(cpu), str(seconds), "exit"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.split()[0])


def _rusage_s(who: int) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def _own_s(d: dict[str, Any]) -> float:
    return float(d["slave_user_s"]) + float(d["slave_system_s"])


def _proc_stat_cores() -> list[tuple[float, float]]:
    """(busy_s, total_s) per core from /proc/stat, read here independently of psutil: busy is
    user + nice + system + irq + softirq + steal (guest time is already inside user and nice),
    idle is idle + iowait."""
    out = []
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if not (name.startswith("cpu") and name[3:].isdigit()):
                continue
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
            busy = user + nice + system + irq + softirq + steal
            out.append((busy / CLK_TCK, (busy + idle + iowait) / CLK_TCK))
    return out


# ---------------------------------------------------------------------- real counters
def test_snapshot_has_every_core_and_is_bracketed_by_proc_stat() -> None:
    """One (busy, total) per CPU, in CPU order, each between /proc/stat read just before and
    just after the snapshot (a swapped core, idle counted as busy, or a field left out or
    counted twice falls outside)."""
    first = _proc_stat_cores()
    snap = CpuSampler().snapshot()
    last = _proc_stat_cores()
    assert len(snap.per_core) == len(first) == N_CPUS
    slack = 2 / CLK_TCK  # iowait and idle may step back by a tick (NO_HZ)
    for i, ((busy, total), (b0, t0), (b1, t1)) in enumerate(
            zip(snap.per_core, first, last, strict=True)):
        assert 0 <= busy <= total, (i, busy, total)
        assert b0 - slack <= busy <= b1 + slack, (i, b0, busy, b1)
        assert t0 - slack <= total <= t1 + slack, (i, t0, total, t1)


@pytest.mark.parametrize("cpu", CPUS[:4])
def test_burning_one_core_shows_in_that_core_and_in_the_host(cpu: int) -> None:
    """A child pinned to ``cpu`` burning 1 s of CPU: between the snapshots that core's busy
    counter rose by about that much and its busy % is at least that share of the wall time
    (other load on the machine only adds); the host's busy counters and busy % likewise over
    all cores; every value within 0..100, one per CPU.

    The floors are 85 % of what was burned: the busy counters are tick-sampled, and on a VM a
    core's /proc/stat times may cover less than the wall time (seen: 56 %..107 % over 0.25 s),
    so busy % is relative to the time the kernel accounted, not to the wall clock."""
    sampler = CpuSampler()
    before = sampler.snapshot()
    t0 = time.monotonic()
    burned = _burn(cpu, 1.0)
    wall = time.monotonic() - t0
    after = sampler.snapshot()
    d = CpuSampler.difference(before, after)
    per_core = d["per_core_busy_pct"]
    assert len(per_core) == N_CPUS
    assert all(0.0 <= v <= 100.0 for v in per_core), per_core
    assert 0.0 <= d["busy_pct"] <= 100.0
    assert burned >= 1.0
    busy_s = [b1 - b0 for (b0, _), (b1, _) in zip(before.per_core, after.per_core, strict=True)]
    assert busy_s[cpu] >= 0.85 * burned - TICKS_S, (cpu, busy_s, burned)
    assert sum(busy_s) >= 0.85 * burned - TICKS_S, (busy_s, burned)
    assert per_core[cpu] >= 0.85 * 100.0 * burned / wall - 2, (cpu, per_core, burned, wall)
    assert d["busy_pct"] >= 0.85 * 100.0 * burned / (wall * N_CPUS) - 1, (d, burned, wall)


def test_own_cpu_counts_a_reaped_child() -> None:
    """A child that ran and was waited for between the snapshots (a worker that exited): its
    CPU time, as the kernel's rusage of reaped children says, is in the slave's."""
    sampler = CpuSampler()
    self0, children0 = _rusage_s(resource.RUSAGE_SELF), _rusage_s(resource.RUSAGE_CHILDREN)
    before = sampler.snapshot()
    burned = _burn(CPUS[-1], 0.8)
    after = sampler.snapshot()
    own = _rusage_s(resource.RUSAGE_SELF) - self0
    child = _rusage_s(resource.RUSAGE_CHILDREN) - children0
    got = _own_s(CpuSampler.difference(before, after))
    assert child >= burned >= 0.8
    assert child - TICKS_S <= got <= child + own + TICKS_S, (got, child, own)


def test_own_cpu_counts_a_live_child() -> None:
    """A child still running at the second snapshot (a worker in a step) is counted through
    the process tree: its CPU time so far is in the slave's."""
    sampler = CpuSampler()
    self0 = _rusage_s(resource.RUSAGE_SELF)
    before = sampler.snapshot()
    proc = subprocess.Popen([sys.executable, "-c", BURN, str(CPUS[0]), "0.8", "hold"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        burned, child = map(float, proc.stdout.readline().split())
        after = sampler.snapshot()
        own = _rusage_s(resource.RUSAGE_SELF) - self0
        assert proc.poll() is None  # it was alive when we looked
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    got = _own_s(CpuSampler.difference(before, after))
    assert child >= burned >= 0.8
    # after printing, the child only blocks on its stdin: a tick or so more
    assert child - TICKS_S <= got <= child + own + 0.05 + TICKS_S, (got, child, own)


def test_own_cpu_counts_its_threads() -> None:
    """CPU burned by a thread of the slave process is in the slave's own time, and nothing
    more than the process used."""
    sampler = CpuSampler()
    burned: list[float] = []

    def spin() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.5:
            sum(range(1000))
        burned.append(time.thread_time() - start)

    self0 = _rusage_s(resource.RUSAGE_SELF)
    before = sampler.snapshot()
    t = threading.Thread(target=spin)
    t.start()
    t.join(timeout=30)
    after = sampler.snapshot()
    own = _rusage_s(resource.RUSAGE_SELF) - self0
    assert burned and burned[0] >= 0.5
    got = _own_s(CpuSampler.difference(before, after))
    assert burned[0] - TICKS_S <= got <= own + TICKS_S, (got, burned, own)


# ---------------------------------------------------------------------- pure arithmetic
Times = collections.namedtuple(
    "Times", "user nice system idle iowait irq softirq steal guest guest_nice")
NoIowait = collections.namedtuple("NoIowait", "user nice system idle")


@pytest.mark.parametrize(("times", "busy", "total"), [
    (Times(10, 1, 4, 80, 5, 0, 0, 0, 0, 0), 15, 100),  # iowait is idle
    (Times(3, 0, 2, 10, 0, 1, 2, 2, 0, 0), 10, 20),  # irq, softirq, steal are busy
    (Times(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0),
    # guest time is in user already, guest_nice in nice: counted once (a host running VMs)
    (Times(10, 0, 0, 10, 0, 0, 0, 0, 10, 0), 10, 20),
    (Times(10, 4, 2, 20, 0, 0, 0, 0, 6, 4), 16, 36),
    (NoIowait(1.5, 0.5, 1.0, 7.0), 3.0, 10.0),  # platforms without iowait
])
def test_busy_total_of_one_cpu_times_entry(times: Any, busy: float, total: float) -> None:
    got_busy, got_total = _busy_total(times)
    assert (got_busy, got_total) == pytest.approx((busy, total))


def _snap(cores: tuple[tuple[float, float], ...], user: float = 0.0,
          system: float = 0.0) -> CpuSnapshot:
    return CpuSnapshot(cores, user, system)


@pytest.mark.parametrize(("before", "after", "busy_pct", "per_core", "user_s", "system_s"), [
    # equal elapsed time on both cores: the host is their mean
    (_snap(((10, 100), (50, 100))), _snap(((60, 200), (50, 200))), 25.0, [50.0, 0.0], 0, 0),
    # the host weighs each core by its elapsed time (40 busy of 400)
    (_snap(((0, 0), (0, 0))), _snap(((30, 100), (10, 300))), 10.0, [30.0, 3.333], 0, 0),
    # a core with no elapsed time reads 0, and so does a host with none
    (_snap(((5, 50), (5, 50))), _snap(((5, 50), (5, 50))), 0.0, [0.0, 0.0], 0, 0),
    (_snap(((0, 0),)), _snap(((1, 3),)), 33.333, [33.333], 0, 0),
    # the slave's own seconds are differences, rounded to the microsecond
    (_snap(((0, 1),), 1.0, 0.5), _snap(((1, 2),), 1.25, 0.5000004), 100.0, [100.0], 0.25, 0.0),
    # a count that went down (a reaped grandchild's time leaves the tree) is not negative
    (_snap(((0, 1),), 2.0, 1.0), _snap(((0, 2),), 1.5, 1.25), 0.0, [0.0], 0.0, 0.25),
])
def test_difference_of_two_snapshots(before: CpuSnapshot, after: CpuSnapshot, busy_pct: float,
                                     per_core: list[float], user_s: float,
                                     system_s: float) -> None:
    d = CpuSampler.difference(before, after)
    assert d == {"busy_pct": busy_pct, "per_core_busy_pct": per_core, "slave_user_s": user_s,
                 "slave_system_s": system_s}


# ---------------------------------------------------------------------- CPU per I/O
WID = "h1:/dev/sdx:w"


def _recorder(out: RunOutput) -> StepRecorder:
    lun = Lun("h1", "/dev/sdx", 1 << 30, 512, {}, (), {})
    spec = WorkloadSpec(name="w", luns=LunChoice(), iosequencer="random_steady")
    wl = {WID: WorkloadInstance(WID, "w", "h1", SelectedLun(lun, True, (0,)), spec,
                                WorkloadParams(), {})}
    settings = Settings()
    settings.placed(WID, WorkloadParams())
    return StepRecorder(out, 0, "s", [RollupSpec("all", (), builtin=True),
                                      RollupSpec("workload", (), builtin=True)], 1.0, wl,
                        settings)


def _result(rec: StepRecorder, cpu: dict[str, Any], ops: dict[int, int]) -> HostResult:
    """Host h1's subinterval 0 with ``ops[c]`` I/Os of category c (service time 100 us)."""
    stats = WorkloadStats()
    for category, n in ops.items():
        svc = np.full(n, 100_000, dtype=np.int64)
        stats.record(category, svc, svc + 1_000, 4096)
    batch = StatsBatch.from_stats([stats])
    plan = parse_plan(rec.plan_for("h1"), {WID})
    msg = SubintervalResult(
        step=0, subinterval=0, start_ns=0, end_ns=10**9, workload_ids=[WID],
        rollups=rollup_parts(plan, group_maps(plan, [WID]), batch), cpu=cpu,
        interlock=[], send_ns=10**9)
    return HostResult("h1", msg, lambda ns: ns, 10**9)


def _cpu_row(tmp_path: Path, cpu: dict[str, Any], ops: dict[int, int]) -> dict[str, str]:
    out = RunOutput(tmp_path)
    try:
        rec = _recorder(out)
        rec.record(0, "measurement", [_result(rec, cpu, ops)], 10**9)
    finally:
        out.close()
    with open(tmp_path / "step0000-s" / "cpu.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == CPU_COLUMNS and len(rows) == 1
    return rows[0]


@pytest.mark.parametrize(("user_s", "system_s", "ops", "cell"), [
    (0.2, 0.1, {0: 1000}, "300"),
    # every category's I/Os count: 300 reads and 100 writes
    (0.03, 0.01, {0: 300, 1: 100}, "100"),
    (0.0, 0.0, {0: 50}, "0"),
    (0.000123, 0.0, {2: 7}, "17.5714"),
    (0.75, 0.75, {3: 1}, "1500000"),
    # no I/O in the subinterval: empty, neither 0 nor infinite
    (0.5, 0.25, {}, ""),
])
def test_cpu_us_per_io_table(tmp_path: Path, user_s: float, system_s: float,
                             ops: dict[int, int], cell: str) -> None:
    cpu = {"busy_pct": 12.5, "per_core_busy_pct": [20.0, 5.0], "slave_user_s": user_s,
           "slave_system_s": system_s}
    row = _cpu_row(tmp_path, cpu, ops)
    assert row["slave_cpu_us_per_io"] == cell
    assert row["busy_pct"] == "12.5" and row["per_core_busy_pct"] == "20 5"
    assert row["host"] == "h1" and row["subinterval"] == "0"


def test_cpu_us_per_io_from_a_real_sample(tmp_path: Path) -> None:
    """A host's real CPU sample (a worker-like child burning 0.3 s) over 1,234 I/Os."""
    sampler = CpuSampler()
    before = sampler.snapshot()
    burned = _burn(CPUS[0], 0.3)
    cpu = CpuSampler.difference(before, sampler.snapshot())
    row = _cpu_row(tmp_path, cpu, {0: 1000, 2: 234})
    spent_s = _own_s(cpu)
    assert spent_s >= burned - TICKS_S
    assert float(row["slave_cpu_us_per_io"]) == pytest.approx(spent_s * 1e6 / 1234, rel=1e-5)
    assert float(row["slave_user_s"]) == pytest.approx(cpu["slave_user_s"])
    assert len(row["per_core_busy_pct"].split()) == N_CPUS
