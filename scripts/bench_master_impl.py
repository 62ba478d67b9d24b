"""Master benchmark (run through scripts/bench_master): the per-subinterval path of the master.

Measures exactly what the master does with one subinterval's results: ``FrameDecoder.feed`` of
pre-encoded ``SubintervalResult`` frames from simulated hosts, then ``StepRecorder.record``
(decode and validate every host's rollup groups, add the groups of instances spread over hosts
(all, vendor+model) and read their percentiles, take the per-host instances' percentile tables
(host, lun, workload), write one CSV row per instance per rollup type plus cpu.csv and
interlock.csv). The process keeps freed arrays in its heap as ``ivypy run`` does
(``master.run.heap``). No real I/O engine or network: each host's per-workload statistics are
made beforehand from ``WorkloadStats`` filled with lognormal latencies (random reads and
writes, a few hundred to a few thousand I/Os per category per workload), and added up by the
step's rollup plan with the slave's own code (``slave.session.rollup_parts``), untimed here
but measured and printed as the slave's cost per host. The run folder lives on /dev/shm when
it exists (page cache only).

Also printed: the master's work at the end of a step (the measurement window's per-workload
statistics from every host, the summary rows and their files, each rollup type's and the
run's summary.csv, and the histogram files), once per step.

Target: 10,000 workloads per subinterval in <= 100 ms on one core (the process is pinned to one
CPU), in a run's first step and in its third (each step's files closed at its end, as a run
does: ``later_steps_case``). Without ``--quick``, issue #64's goals too, the 100,000-workload
case (1,000 hosts x 100) on every CPU the process may use (the master's threads): a subinterval
in <= 500 ms wall (median), the step's end in <= 10 s and its start in <= 1 s, and one host's
slave adding up 10,000 workloads in <= 100 ms of CPU. The start is what a run's step takes
before its Go: the plan and the instance files its lead and first subinterval leave no time for
(``master.run.stepfiles``; the rest are made after the Go and timed apart, and must take no
more than that time); it is measured at this bench's 1 s subintervals and at the default 5 s.
The 100,000-workload case runs twice, on the master's writer threads
(``master.results.writers``) and then on one, and the step's files of the two must be byte for
byte the same (a SHA-256 over the step folder). Also prints 1,000 and 100,000 workloads and the
cost per workload, to show the path scales linearly.

The verification map's part (``--only map``): ``VerifyMap.apply`` of one subinterval's journal
entries at 100,000 writes of 4 KiB per second in 5 s subintervals (500,000 entries at random
blocks of a 64 GiB LUN's map, 16 Mi blocks), in memory and the record appended and fsynced,
in a run folder on disk (``--map-dir``; the system's temporary directory by default: on tmpfs
an fsync costs nothing). Target: the median apply under 10% of a subinterval, 0.5 s. Also
printed: the record's size and a snapshot of the map (once per 64 MiB of journal).

A missed target prints MISSED and the exit status is 1.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from master.analysis.rollup import finished
from master.config.schema import LunChoice, RollupSpec, WorkloadSpec
from master.results.output import RunOutput
from master.results.schema import MEASURE_SUMMARY_COLUMNS
from master.results.summaryfiles import write_summaries
from master.run.heap import keep_freed_memory
from master.run.hostrows import HostResult
from master.run.recorder import StepRecorder
from master.run.settings import Settings
from master.run.startlead import MIN_START_LEAD_NS
from master.run.workloads import Lun, SelectedLun, WorkloadInstance
from master.verify.mapstore import JOURNAL_LIMIT_BYTES, MapLun, MapWriter, VerifyMap
from protocol.batch import StatsBatch
from protocol.codec import FrameDecoder, encode
from protocol.messages import SubintervalResult
from protocol.params import WorkloadParams
from protocol.stats import ROWS_PER_WORKLOAD, WorkloadStats
from slave.session import group_maps, parse_plan, rollup_parts

TARGET_S = 0.100
MAP_TARGET_S = 0.5
MAP_SUB_S = 5.0
MAP_WRITES_PER_S = 100_000
MAP_LUN_BYTES = 64 << 30
TARGET_WORKLOADS = 10_000
#: issue #64's goals at 1,000 hosts x 100 workloads, and for one host of 10,000
GOAL_SUBINTERVAL_S = 0.5
GOAL_STEP_END_S = 10.0
GOAL_STEP_START_S = 1.0
GOAL_SLAVE_S = 0.1
#: the CPUs the process may use before it pins itself to one (the 100,000-workload case's)
ALL_CPUS: set[int] = set()
SUB_NS = 1_000_000_000
#: the instance files a step of 1 s subintervals may leave for after its Go: those made in its
#: lead (a later step's, its Go read in time) and first subinterval (``StepRecorder``)
FILES_BUDGET_S = (MIN_START_LEAD_NS + SUB_NS) / 1e9
#: the run's default subinterval (``master.config.loader``), the start's second measurement
DEFAULT_SUB_S = 5.0
WORKLOADS_PER_LUN = 4
VENDOR_MODELS = (("ACME", "F900"), ("ACME", "F700"), ("Hitachi", "VSP5000"))
ROLLUPS = (
    RollupSpec("all", (), builtin=True),
    RollupSpec("host", (), builtin=True),
    RollupSpec("lun", (), builtin=True),
    RollupSpec("workload", (), builtin=True),
    RollupSpec("vendor+model", ("vendor", "model")),
)


# ---------------------------------------------------------------------- simulated data
@dataclass(frozen=True)
class Pool:
    """Distinct workload blocks to draw from, in sparse form (rows local to the workload)."""

    counters: npt.NDArray[np.int64]  # (P, 4, 3)
    lat: npt.NDArray[np.int64]  # (P, 4, 2, 3)
    rows: list[npt.NDArray[np.uint32]]
    buckets: list[npt.NDArray[np.uint16]]
    counts: list[npt.NDArray[np.int64]]


def make_pool(size: int, rng: np.random.Generator) -> Pool:
    stats = []
    for _ in range(size):
        s = WorkloadStats()
        n_read = int(rng.integers(300, 3000))
        n_write = int(n_read * rng.uniform(0.2, 0.6))
        for cat, n, median_us in ((0, n_read, rng.uniform(80, 400)),
                                  (1, n_write, rng.uniform(150, 900))):
            svc = rng.lognormal(np.log(median_us * 1e3), rng.uniform(0.4, 0.9), n).astype(np.int64)
            rsp = svc + rng.exponential(median_us * 300, n).astype(np.int64)
            s.record(cat, svc, rsp, 8192)
        stats.append(s)
    b = StatsBatch.from_stats(stats)
    bounds = np.searchsorted(b.rows, np.arange(size + 1) * ROWS_PER_WORKLOAD)
    rows, buckets, counts = [], [], []
    for i in range(size):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        rows.append((b.rows[lo:hi] - i * ROWS_PER_WORKLOAD).astype(np.uint32))
        buckets.append(b.buckets[lo:hi].copy())
        counts.append(b.counts[lo:hi].copy())
    return Pool(b.counters.copy(), b.lat.copy(), rows, buckets, counts)


def host_batch(pool: Pool, picks: npt.NDArray[np.intp]) -> StatsBatch:
    return StatsBatch(
        counters=pool.counters[picks],
        lat=pool.lat[picks],
        rows=np.concatenate([pool.rows[p] + np.uint32(j * ROWS_PER_WORKLOAD)
                             for j, p in enumerate(picks)]).astype(np.uint32),
        buckets=np.concatenate([pool.buckets[p] for p in picks]),
        counts=np.concatenate([pool.counts[p] for p in picks]),
    )


def make_workloads(n_hosts: int, per_host: int) -> tuple[dict[str, WorkloadInstance],
                                                         list[list[str]]]:
    """Workload instances as ``expand_step`` makes them: per host, LUNs with 4 workloads each
    (ids ordered workload-spec major within a host, as the slave reports them)."""
    specs = [WorkloadSpec(name=f"w{j}", luns=LunChoice(), iosequencer="random_steady",
                          iops=("max" if j % 2 else 500.0 * (j + 1)))
             for j in range(WORKLOADS_PER_LUN)]
    n_luns = -(-per_host // WORKLOADS_PER_LUN)
    out: dict[str, WorkloadInstance] = {}
    ids_by_host: list[list[str]] = []
    for h in range(n_hosts):
        host = f"host{h:03d}"
        luns = []
        for li in range(n_luns):
            vendor, model = VENDOR_MODELS[(h + li) % len(VENDOR_MODELS)]
            attrs = {"vendor": vendor, "model": model}
            lun = Lun(host, f"/dev/sd{li:04d}", 1 << 40, 512, attrs, (), {})
            luns.append(SelectedLun(lun, True, (0,)))
        ids: list[str] = []
        for spec in specs:
            for sl in luns:
                if len(ids) == per_host:
                    break
                wid = f"{host}:{sl.lun.path}:{spec.name}"
                params = WorkloadParams(iops=None if spec.iops == "max" else float(spec.iops))
                out[wid] = WorkloadInstance(
                    wid, spec.name, host, sl, spec, params,
                    {**sl.lun.attributes, "host": host, "lun": sl.lun.path,
                     "workload": spec.name})
                ids.append(wid)
        ids_by_host.append(ids)
    return out, ids_by_host


def make_frames(pool: Pool, rec: StepRecorder, hosts: list[str], ids_by_host: list[list[str]],
                k: int, rng: np.random.Generator) -> tuple[list[bytes], list[float], StatsBatch]:
    """Each host's frame of subinterval ``k``, the slave's CPU seconds to add its workloads up
    by the plan, and the last host's per-workload batch."""
    frames, slave_s = [], []
    batch = StatsBatch.empty()
    for host, ids in zip(hosts, ids_by_host, strict=True):
        picks = rng.integers(0, len(pool.rows), len(ids))
        batch = host_batch(pool, picks)
        t0 = time.thread_time()
        plan = parse_plan(rec.plan_for(host), set(ids))
        parts = rollup_parts(plan, group_maps(plan, ids), batch)
        slave_s.append(time.thread_time() - t0)
        msg = SubintervalResult(
            step=0, subinterval=k, start_ns=k * SUB_NS, end_ns=(k + 1) * SUB_NS,
            workload_ids=ids, rollups=parts,
            cpu={"busy_pct": 37.5, "per_core_busy_pct": [30.0, 45.0, 37.0, 38.0],
                 "slave_user_s": 0.21, "slave_system_s": 0.09},
            interlock=[{"worker": w, "switch_ns": (k + 1) * SUB_NS + 20_000 + w,
                        "switch_delay_ns": 20_000, "handover_delay_ns": 60_000}
                       for w in range(2)],
            send_ns=(k + 1) * SUB_NS + 900_000)
        frames.append(encode(msg))
    return frames, slave_s, batch


# ---------------------------------------------------------------------- the measurement
@dataclass
class Case:
    n_hosts: int
    per_host: int
    times_s: list[float]  # CPU time of this thread per subinterval
    wall_s: list[float]
    frame_bytes: int
    decode_s: list[float]
    slave_s: float  # median CPU of one simulated slave adding its workloads up per subinterval
    coords: int  # histogram coordinates the master received per subinterval
    workload_coords: int  # what the workloads' own histograms would have been
    step_end_s: float  # the master's work on the measurement window at the step's end (wall)
    step_start_s: float  # the recorder made: its plan and the files made before the go (wall)
    after_go_s: float  # the rest of the instance files, their rows' texts and slices: after the go
    files_after_go: int  # how many of them
    threads: int  # the recorder's writer threads
    digest: str  # SHA-256 of the step folder's files (relative paths and bytes); '' unasked

    @property
    def workloads(self) -> int:
        return self.n_hosts * self.per_host


def placed(workloads: dict[str, WorkloadInstance]) -> Settings:
    """The settings in force: every workload placed with its own parameters."""
    settings = Settings()
    for wid, inst in workloads.items():
        settings.placed(wid, inst.params)
    return settings


def host_results(hosts: list[str], decoders: list[FrameDecoder], frames: list[bytes], k: int
                 ) -> list[HostResult]:
    """Subinterval ``k``'s frames decoded, as the master's hosts hand them to the recorder."""
    results = []
    for host, dec, frame in zip(hosts, decoders, frames, strict=True):
        (msg,) = dec.feed(frame)
        assert isinstance(msg, SubintervalResult)
        results.append(HostResult(host, msg, lambda ns: ns, (k + 1) * SUB_NS + 1_000_000))
    return results


def run_case(n_hosts: int, per_host: int, subintervals: int, distinct: int, pool: Pool,
             root: Path, profile: Path | None = None, threads: int | None = None,
             digest: bool = False) -> Case:
    rng = np.random.default_rng(n_hosts * 1_000_003 + per_host)
    workloads, ids_by_host = make_workloads(n_hosts, per_host)
    hosts = [f"host{h:03d}" for h in range(n_hosts)]
    folder = Path(tempfile.mkdtemp(prefix="bench-master-", dir=root))
    output = RunOutput(folder)
    # a fixed-length step, the common case (the slaves add the window up: Go.fold)
    t0 = time.perf_counter()
    settings = placed(workloads)
    rec = StepRecorder(output, 0, "bench", ROLLUPS, SUB_NS / 1e9, workloads, settings, "host",
                       files_budget_s=FILES_BUDGET_S,
                       hosts=hosts, fold_measurement=True, threads=threads)
    step_start_s = time.perf_counter() - t0
    files_after_go = rec.files.total - rec.files.made
    t0 = time.perf_counter()
    finished(rec.after_go_steps())
    after_go_s = time.perf_counter() - t0
    made = [make_frames(pool, rec, hosts, ids_by_host, k, rng) for k in range(distinct)]
    frame_sets = [m[0] for m in made]
    slave_s = statistics.median(t for m in made for t in m[1])
    nbytes = sum(len(f) for f in frame_sets[0])
    decoders = [FrameDecoder() for _ in ids_by_host]
    times: list[float] = []
    wall: list[float] = []
    decode: list[float] = []
    prof = cProfile.Profile() if profile is not None else None
    try:
        for k in range(subintervals):
            frames = frame_sets[k % distinct]
            if prof is not None and k == subintervals - 1:
                prof.enable()
            t0, w0 = time.thread_time(), time.perf_counter()
            results = host_results(hosts, decoders, frames, k)
            decode.append(time.thread_time() - t0)
            rec.record(k, "measurement", results, (k + 1) * SUB_NS)
            times.append(time.thread_time() - t0)
            wall.append(time.perf_counter() - w0)
            if prof is not None and k == subintervals - 1:
                prof.disable()
            coords = sum(len(e["rows"]) // 4 for r in results for e in r.result.rollups)
            del results
        # the end of the step: every host's window (here: one subinterval's per-workload
        # statistics standing for the window the slave added up), the summary rows and the
        # histogram files of every instance
        window = [(h, ids, host_batch(pool, rng.integers(0, len(pool.rows), len(ids))).to_wire())
                  for h, ids in zip(hosts, ids_by_host, strict=True)]
        workload_coords = sum(len(w[2]["rows"]) // 4 for w in window)
        t0 = time.perf_counter()
        total = rec.window_sample(window)
        _, rows, _ = rec.summarise(list(range(subintervals)), total)
        header = [*rec.summary_columns, *MEASURE_SUMMARY_COLUMNS]  # as the run writes them
        with output.subinterval():
            write_summaries(output, rec.dir, rows, header, header)
        step_end_s = time.perf_counter() - t0
        files_digest = folder_digest(folder / rec.dir) if digest else ""
    finally:
        output.close()
        shutil.rmtree(folder, ignore_errors=True)
    if prof is not None and profile is not None:
        with open(profile, "w") as fh:
            pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(40)
    return Case(n_hosts, per_host, times, wall, nbytes, decode, slave_s, coords,
                workload_coords, step_end_s, step_start_s, after_go_s, files_after_go,
                rec.threads, files_digest)


@dataclass(frozen=True)
class StartCase:
    """A step's start alone: before its Go, and the instance files made after it."""

    budget_s: float  # the time the lead and the first subinterval leave for files
    start_s: float
    after_go_s: float
    files_after_go: int
    files: int


def start_case(n_hosts: int, per_host: int, sub_s: float, root: Path) -> StartCase:
    """The recorder of a step of ``sub_s`` subintervals made as a run makes it (its files'
    budget: a later step's lead and the first subinterval), then the rest of its files."""
    workloads, _ = make_workloads(n_hosts, per_host)
    hosts = [f"host{h:03d}" for h in range(n_hosts)]
    folder = Path(tempfile.mkdtemp(prefix="bench-master-start-", dir=root))
    output = RunOutput(folder)
    budget_s = MIN_START_LEAD_NS / 1e9 + sub_s
    try:
        t0 = time.perf_counter()
        rec = StepRecorder(output, 0, "bench", ROLLUPS, sub_s, workloads, placed(workloads),
                           "host", hosts=hosts, fold_measurement=True, files_budget_s=budget_s)
        start_s = time.perf_counter() - t0
        left = rec.files.total - rec.files.made
        t0 = time.perf_counter()
        finished(rec.after_go_steps())
        return StartCase(budget_s, start_s, time.perf_counter() - t0, left, rec.files.total)
    finally:
        output.close()
        shutil.rmtree(folder, ignore_errors=True)


def later_steps_case(pool: Pool, root: Path, subintervals: int, steps: int = 3
                     ) -> list[float]:
    """The 10,000-workload case (100 hosts x 100) as ``steps`` steps of one run, each on one
    thread, each step's files let go at its end as a run lets them go
    (``StepRecorder.release_files``; the summaries a run writes before are left out): each
    step's median CPU time a subinterval. A step's files held open to the run's end used to leave
    a later step none of the open-file budget (its third step: 100-105 ms against 68)."""
    rng = np.random.default_rng(11)
    workloads, ids_by_host = make_workloads(100, 100)
    hosts = [f"host{h:03d}" for h in range(100)]
    folder = Path(tempfile.mkdtemp(prefix="bench-master-steps-", dir=root))
    output = RunOutput(folder)
    settings = placed(workloads)
    medians = []
    try:
        for step in range(steps):
            rec = StepRecorder(output, step, f"s{step}", ROLLUPS, SUB_NS / 1e9, workloads,
                               settings, "host", hosts=hosts, fold_measurement=True, threads=1)
            frames = make_frames(pool, rec, hosts, ids_by_host, 0, rng)[0]
            decoders = [FrameDecoder() for _ in hosts]
            times = []
            for k in range(subintervals):
                t0 = time.thread_time()
                rec.record(k, "measurement", host_results(hosts, decoders, frames, k),
                           (k + 1) * SUB_NS)
                times.append(time.thread_time() - t0)
            medians.append(statistics.median(times))
            rec.release_files()
    finally:
        output.close()
        shutil.rmtree(folder, ignore_errors=True)
    return medians


def folder_digest(top: Path) -> str:
    """SHA-256 over every file under ``top``: its path relative to ``top`` and its bytes,
    in path order."""
    h = hashlib.sha256()
    for path in sorted(p for p in top.rglob("*") if p.is_file()):
        name = str(path.relative_to(top)).encode()
        data = path.read_bytes()
        h.update(len(name).to_bytes(8, "little") + name + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def describe(c: Case) -> str:
    best, med = min(c.times_s), statistics.median(c.times_s)
    return (f"{c.workloads:>7,} workloads = {c.n_hosts:>4} hosts x {c.per_host:>6,}: "
            f"CPU best {best * 1e3:8.1f} ms  median {med * 1e3:8.1f} ms "
            f"({best / c.workloads * 1e6:6.1f} us/workload; "
            f"wall best {min(c.wall_s) * 1e3:.1f} ms)")


def breakdown(c: Case) -> str:
    best = min(c.times_s)
    dec = min(c.decode_s)
    return (f"    frames {c.frame_bytes / 2**20:.1f} MiB, {c.coords / 1e6:.2f} M histogram "
            f"coordinates (the workloads' own: {c.workload_coords / 1e6:.2f} M); frame decode "
            f"{dec * 1e3:.1f} ms, validation + rollups + rows + CSV {(best - dec) * 1e3:.1f} ms\n"
            f"    each simulated slave adds its {c.per_host:,} workloads up in "
            f"{c.slave_s * 1e3:.1f} ms of CPU per subinterval\n"
            f"    once per step, the master's start (plan, the instance files made before "
            f"the Go) takes {c.step_start_s * 1e3:.0f} ms of wall time ({c.files_after_go:,} "
            f"files after it: {c.after_go_s * 1e3:.0f} ms), its end (window, summary, "
            f"histogram files) {c.step_end_s * 1e3:.0f} ms")


# ---------------------------------------------------------------------- the verification map
@dataclass
class MapCase:
    apply_wall_s: list[float]
    apply_cpu_s: list[float]
    record_bytes: int
    snapshot_s: float
    folder: Path


def run_map_case(root: Path, applies: int) -> MapCase:
    """``applies`` timed applies of 500,000 entries each (three distinct sets, made untimed),
    then one snapshot."""
    rng = np.random.default_rng(62)
    blocks = MAP_LUN_BYTES // 4096
    n = int(MAP_WRITES_PER_S * MAP_SUB_S)
    sets = [(np.zeros(n, np.int64), rng.integers(0, blocks, n, dtype=np.int64),
             rng.integers(1, 128, n, dtype=np.uint8)) for _ in range(3)]
    writers = [MapWriter(w, "host000", f"host000:/dev/sdb:w{w}") for w in range(64)]
    folder = Path(tempfile.mkdtemp(prefix="bench-master-map-", dir=root))
    wall, cpu = [], []
    try:
        vm = VerifyMap.create(folder, 1, [MapLun(0, "host000", "/dev/sdb", 0, MAP_LUN_BYTES)],
                              writers, journal_limit_bytes=1 << 40)
        journal = folder / "verify" / "journal.bin"
        with vm:
            for k in range(applies):
                luns, where, values = sets[k % len(sets)]
                confirmed = {w.number: k * 1000 + w.number for w in writers}
                t0, w0 = time.thread_time(), time.perf_counter()
                vm.apply(k, luns, where, values, confirmed)
                wall.append(time.perf_counter() - w0)
                cpu.append(time.thread_time() - t0)
            record_bytes = journal.stat().st_size // applies
            w0 = time.perf_counter()
            vm.snapshot()
            snapshot_s = time.perf_counter() - w0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return MapCase(wall, cpu, record_bytes, snapshot_s, root)


def map_part(root: Path, applies: int) -> bool:
    c = run_map_case(root, applies)
    med = statistics.median(c.apply_wall_s)
    ok = med < MAP_TARGET_S
    n = int(MAP_WRITES_PER_S * MAP_SUB_S)
    print(f"verification map: {n:,} journal entries per apply ({MAP_WRITES_PER_S:,} writes/s "
          f"of 4 KiB, {MAP_SUB_S:.0f} s subintervals) over a {MAP_LUN_BYTES >> 30} GiB LUN's "
          f"map ({MAP_LUN_BYTES // 4096:,} blocks), run folder under {c.folder}")
    print(f"  apply (in memory + record appended and fsynced), {applies} applies: wall "
          f"median {med * 1e3:.1f} ms, best {min(c.apply_wall_s) * 1e3:.1f} ms; CPU median "
          f"{statistics.median(c.apply_cpu_s) * 1e3:.1f} ms; record "
          f"{c.record_bytes / 2**20:.2f} MiB")
    print(f"  snapshot of the map: {c.snapshot_s * 1e3:.0f} ms (once per "
          f"~{JOURNAL_LIMIT_BYTES // max(c.record_bytes, 1)} subintervals at the "
          f"{JOURNAL_LIMIT_BYTES >> 20} MiB journal limit)")
    print(f"  target: apply under {MAP_TARGET_S * 1e3:.0f} ms (10% of a {MAP_SUB_S:.0f} s "
          f"subinterval): {'met' if ok else 'MISSED'} (median {med * 1e3:.1f} ms, ratio "
          f"{MAP_TARGET_S / med:.2f}x)")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subintervals", type=int, default=6, help="timed subintervals per case")
    ap.add_argument("--quick", action="store_true", help="skip the 100,000-workload case")
    ap.add_argument("--big-subintervals", type=int, default=15,
                    help="timed subintervals of the 100,000-workload case (each of its two "
                         "runs: the writer threads, then one thread)")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the 10,000 x 100 case here")
    ap.add_argument("--only", choices=("rollups", "map"),
                    help="run one part: the per-subinterval rollups, or the verification map")
    ap.add_argument("--map-applies", type=int, default=7, help="timed applies of the map part")
    ap.add_argument("--map-dir", type=Path, default=Path(tempfile.gettempdir()),
                    help="where the map part's run folder goes (on disk: its fsyncs count)")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        ALL_CPUS.update(os.sched_getaffinity(0))
        cpu = sorted(ALL_CPUS)[-1]
        os.sched_setaffinity(0, {cpu})
        print(f"pinned to cpu {cpu}; load average {os.getloadavg()[0]:.2f} "
              f"(other processes on this core inflate the figures)")
    print(f"glibc heap thresholds raised (master.run.heap, as ivypy run does): "
          f"{keep_freed_memory()}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open file limit: soft {soft}, hard {hard}")
    failures = 0
    if args.only != "map":
        failures += rollups_part(args)
    if args.only != "rollups":
        failures += not map_part(args.map_dir, args.map_applies)
    print("result:", "all targets met" if not failures else f"{failures} target(s) MISSED")
    return 1 if failures else 0


def rollups_part(args: argparse.Namespace) -> int:
    """The per-subinterval rollups, CSV rows and step end; the targets it missed."""
    root = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    pool = make_pool(256, np.random.default_rng(7))
    rows_per_wl = np.count_nonzero(pool.counters[:, :, 0]) * 2 / len(pool.rows)
    nnz = np.mean([r.size for r in pool.rows])
    print(f"simulated workloads: random read+write, {rows_per_wl:.1f} histogram rows and "
          f"{nnz:.0f} non-zero buckets per workload ({nnz / rows_per_wl:.0f} per row)")
    print(f"rollups: {', '.join(r.type for r in ROLLUPS)}; CSV under {root}")
    failures = 0
    n = args.subintervals
    main_case = run_case(100, 100, n, 3, pool, root, args.profile)
    best = min(main_case.times_s)
    ok = best <= TARGET_S
    failures += not ok
    print(describe(main_case))
    print(breakdown(main_case))
    print(f"  target: 10,000 workloads in <= {TARGET_S * 1e3:.0f} ms on one core: "
          f"{'met' if ok else 'MISSED'} (ratio {TARGET_S / best:.2f}x)")
    later = later_steps_case(pool, root, n)
    ok = later[-1] <= TARGET_S
    failures += not ok
    print(f" 10,000 workloads, the steps of one run (100 hosts x 100, one thread): CPU median "
          f"{', '.join(f'{t * 1e3:.1f}' for t in later)} ms; its step {len(later)}: "
          f"{'met' if ok else 'MISSED'} (ratio {TARGET_S / later[-1]:.2f}x)")
    others = [run_case(1, 10_000, n, 3, pool, root), run_case(10, 1_000, n, 3, pool, root)]
    for c in others:
        print(describe(c))
        print(breakdown(c))
    print("scaling (100 workloads per host):")
    scale = [run_case(10, 100, n, 3, pool, root), main_case]
    one_thread: Case | None = None
    default_start: StartCase | None = None
    if not args.quick:  # on every core the process may use: the master's threads too
        pinned = os.sched_getaffinity(0) if ALL_CPUS else set()
        if ALL_CPUS:
            os.sched_setaffinity(0, ALL_CPUS)
        try:
            big = args.big_subintervals
            scale.append(run_case(1000, 100, big, 1, pool, root, digest=True))
            one_thread = run_case(1000, 100, big, 1, pool, root, threads=1, digest=True)
            default_start = start_case(1000, 100, DEFAULT_SUB_S, root)
        finally:
            if ALL_CPUS:
                os.sched_setaffinity(0, pinned)
    base = min(scale[0].times_s) / scale[0].workloads
    for c in scale:
        per = min(c.times_s) / c.workloads
        print(f"  {describe(c)}  x{per / base:.2f} of the 1,000 case per workload")
        print(f"  {breakdown(c)}")
    if args.profile:
        print(f"profile of one 10,000-workload subinterval: {args.profile}")
    if one_thread is not None and default_start is not None:
        failures += thousand_hosts_goals(scale[-1], others[0], one_thread, default_start)
    return failures


def thousand_hosts_goals(big: Case, one_host: Case, one_thread: Case,
                         default_start: StartCase) -> int:
    """Issue #64's table: the 100,000-workload case (1,000 hosts x 100) on the master's writer
    threads (its start also at the default subinterval: ``default_start``) and one host adding
    up 10,000 workloads, each against its goal, and the step's files against the same case on
    one thread (``one_thread``); the goals it missed."""
    rows = [
        ("100,000 workloads per subinterval, median wall", statistics.median(big.wall_s),
         GOAL_SUBINTERVAL_S),
        ("the step's end at 100,000 workloads, wall", big.step_end_s, GOAL_STEP_END_S),
        ("the step's start at 100,000 workloads, 1 s subintervals, wall", big.step_start_s,
         GOAL_STEP_START_S),
        (f"the step's start at 100,000 workloads, {DEFAULT_SUB_S:g} s subintervals (the "
         "default), wall", default_start.start_s, GOAL_STEP_START_S),
        ("one host's slave adding up 10,000 workloads, CPU", one_host.slave_s, GOAL_SLAVE_S),
    ]
    print(f"issue #64's goals (the 100,000-workload case on {len(ALL_CPUS) or 1} cores, where "
          "the master's threads may run; one host's slave on one):")
    missed = 0
    for what, got, goal in rows:
        ok = got <= goal
        missed += not ok
        print(f"  {what}: {got * 1e3:,.0f} ms, goal <= {goal * 1e3:,.0f} ms: "
              f"{'met' if ok else 'MISSED'} (ratio {goal / got:.2f}x)")
    print(f"  the subintervals' wall times on {big.threads} writer threads (ms): "
          f"{', '.join(f'{w * 1e3:.0f}' for w in big.wall_s)}; mean "
          f"{statistics.mean(big.wall_s) * 1e3:.0f} (a file's rows cross a page every few "
          f"subintervals, and these cross together: the slow ones)")
    print(f"  the same on one thread, in the same process after it: median "
          f"{statistics.median(one_thread.wall_s) * 1e3:,.0f} ms, mean "
          f"{statistics.mean(one_thread.wall_s) * 1e3:,.0f} ms; step end "
          f"{one_thread.step_end_s:.1f} s, start {one_thread.step_start_s:.2f} s")
    starts = [(f"{SUB_NS / 1e9:g} s", FILES_BUDGET_S, big.after_go_s, big.files_after_go),
              (f"{DEFAULT_SUB_S:g} s", default_start.budget_s, default_start.after_go_s,
               default_start.files_after_go)]
    for sub, budget_s, after_s, n in starts:  # before the first results, or they wait
        ok = after_s <= budget_s
        missed += not ok
        print(f"  at {sub} subintervals, {n:,} of the step's {default_start.files:,} instance "
              f"files made after the Go in {after_s:.2f} s, of the {budget_s:.2f} s its lead "
              f"and first subinterval leave: {'within' if ok else 'OVER: MISSED'}")
    same = big.digest == one_thread.digest
    missed += not same
    print(f"  the step's files at 100,000 workloads, {big.threads} threads against one: "
          f"{'byte for byte the same' if same else 'DIFFERENT: MISSED'} (SHA-256 "
          f"{big.digest[:16]} and {one_thread.digest[:16]})")
    return missed


if __name__ == "__main__":
    sys.exit(main())
