"""Engine benchmark (run through scripts/bench_engine, as root).

4 KiB random reads on loop devices over files in /dev/shm. Every round runs each ivypy case and
the fio jobs it is compared with back to back (interleaved, so a busy neighbour hurts both
alike); the medians over the rounds are compared. A case's run during which the host took
more than ``--steal-max`` (5 %) of the time the CPUs wanted to run (steal over non-idle time)
is run again, ``--retries`` (1) times at most, and the round keeps the run the host took least
of; every run is printed. On the 2-core VM the host took from nil to 35 % of all the CPUs'
time case by case, and a run at 24 % read under half the IOPS of a quiet one, for either tool:
a verdict between runs of unlike steal was the host's. (Over all the time, steal also follows
the run's own demand, as it accrues only while a vCPU wants to run.) Targets (ivypy / fio):

* one LUN, QD32: IOPS >= 1.0x fio's best job (the best of three, by median IOPS: fio's
  ``libaio`` default, ``libaio`` with ``iodepth_batch_submit=16 iodepth_batch_complete_max=32``,
  and ``io_uring`` with ``fixedbufs registerfiles`` and the same batching, run interleaved in
  the same rounds); mean latency and p50 within 5 % of fio's default job's; p99 <= 1.1x; user
  CPU <= 1 us per I/O; ivypy on io_uring (``engine: io_uring``) >= 0.95x ivypy on libaio;
* QD1 blocking: IOPS >= 0.9x fio's libaio QD1 job; QD1 with busy_poll: >= 0.9x fio's polling
  job (``userspace_reap=1``, ``iodepth_batch_complete_min=0``);
* two LUNs at QD32, one worker process each: IOPS >= 1.1x fio's best of the three with two
  jobs (the ratio to fio's default two jobs is printed, not judged). Every run prints the
  share of all the CPUs' time that was idle meanwhile (``idle``): in this case both tools'
  runs left 15-23 % of it idle on the 2-core VM (2026-11-29), ivypy making no more system
  calls per I/O than fio: the loop devices' own kernel work, not either tool, bound it there
  (docs/engine.md, "Two LUNs: what bounds them"), and no tool reads 1.1x another on devices
  that bind both;
* the same workload on both sides: one LUN, QD32, both paced at one fixed rate (half of fio's
  QD32 IOPS, measured first): IOPS within 1 %, ivypy's p50 within 5 % and p99 within 10 %
  of fio's, and ivypy's user CPU per I/O no more than fio's.

"Within x %" of fio's latency is judged one-sided: no more than x % above fio's (ratio <= 1 + x).
Each such line also prints the two-sided reading (|ratio - 1| <= x) and whether it holds, so
nothing is hidden; the count of missed targets follows the one-sided reading. Why one-sided:

* the issue writes the QD32 p99 bound one-sided ("p99 <= 1.1x") and the same quantity's
  "within 10 %" beside it;
* at a full queue the mean is the queue depth over the rate (Little's law), so a two-sided
  bound on the QD32 mean would cap the IOPS target, written open-ended (>= 1.0x), at 1.05x;
* the traced runs (below) show what agreeing with fio two-sided would take: at QD32 fio's I/Os
  spend about nine tenths of their reported latency outside the block layer (its p50 233 us
  above the block layer's 17.8 in the first run), and on the same paced workload fio adds
  more to the block layer's p50 and p99 than ivypy does (15.8 and 153.8 us against 6.0 and
  37.9). A two-sided match would mean adding fio's own path to ivypy's figures.

The issue's text left the reading open; it was asked of the planners in the closing notes of
several sessions without an answer, and taken here (2026-11-25) on the evidence above.

A latency below fio's is believed only with the fidelity checks (targets):

* Little's law on ivypy's own clock, QD32 at ``iops=max``: mean service time x IOPS over the
  queue depth within 0.95..1.01. A service time measured short (a submit stamp taken after
  ``io_submit``, a completion stamp before the reap) reads below 0.95; so does one that
  leaves slots idle (book-keeping between reap and resubmit);
* no ivypy case's mean service time below the block layer's own mean for the same I/Os
  (``blk``, below): a request's life in the block layer lies within its submit -> reap;
* the same floor on the percentiles: in runs made apart with the kernel's block tracepoints on
  (cases ending ``traced``: QD32, QD1 and the paced case, each tool; ``scripts/blocktrace.py``
  times each I/O from its bio's arrival in the block layer to its request's completion), ivypy's
  p50 and p99 at least the block layer's p50 and p99 of the same I/Os, less the histogram's
  rounding inside one bucket (1/64). The same I/Os: those the trace saw complete within the
  measured subintervals (the trace runs from before the ramp to after the last one), which
  must number ivypy's own count within 0.5 % (fio's: the trace's last ``--seconds``). The same
  runs print what each tool adds to the block layer's p50, p99 and mean: on the same workload,
  the part of the latency each tool's own path puts there. The tracepoints cost each I/O some
  kernel time, so the target cases run untraced.

Every loop device is fully written (random data) before it is attached: tmpfs answers a read
of a page never written by zeroing the buffer, without reading a page, which flatters every
tool (before the devices were written, ivypy's QD32 IOPS read 250-275k there against 183-194k
on a written device, and its user CPU per I/O half). Also printed, not targets: eight
workloads of QD4 on one LUN in one worker (against fio's one QD32 job), also paced at the
paced case's rate in all (against fio's paced job); QD32 on the third device, where the write
cases run. In-process, the Python time per reaped batch stayed
about 15 us, but the batches shrank from 13 completions to 9-11, and io_submit took 3.7 us per
I/O instead of 3.2. And 70 % random reads / 30 % random writes at QD32 on that device, one
workload and eight (against fio's ``randrw`` with ``rwmixread=70``). For ivypy's paced cases,
the response time (scheduled -> completion) beside the service time: the difference is how late
ivypy itself submitted the I/Os (fio's ``lat`` starts at issue, so fio has no such figure); a
paced case at 1,000 IOPS, where the worker sleeps between I/Os and its wake-up decides that;
and the paced case again in the Python loop, as a host without a C compiler runs it (paced reads
run in compiled C where the host has ``cc``: ``slave/engine/compiled_loop.py``).

fio's ``lat`` at a paced rate includes its process's wake-up from ``io_getevents`` for each
completion; ivypy's paced loop looks in the completion ring instead (as it does for waits
shorter than 30 us), so it reads lower, nearer the block layer's own time (``blk`` below).
fio with ``userspace_reap=1`` and ``iodepth_batch_complete_min=0`` (it then polls the ring for
its completions) is the like reference, but it does not hold the paced case's rate (64,000-67,000
IOPS when asked for 88,000); it holds a quarter of fio's QD32 IOPS, so the two run there too
("like reference", not a target). There the p50s agreed to 8 % (15.4 against 14.3 us at 40,000
IOPS, three rounds) and ivypy's p99 read 3.8x fio's (141.5 against 37.6 us; from one run to the
next, minutes apart, ivypy's p99 there ranged 79-720 us and fio's 31-48). Ahead of its schedule
fio waits for every I/O in flight to complete (``io_u_quiesce``) and then sleeps, and behind it
it submits one I/O per call; ivypy keeps to its schedule and submits all the I/Os due in one
call, so when its loop was held up (0.06-2 ms, 10-20 times in 6 s on the VM: another process or
the device's kernel worker on its core; raising the worker's priority to nice -10 changed
nothing) the I/Os that came due meanwhile went out together, 16-32 at a time, and queued at the
device. The block layer's own mean read 17-34 us under ivypy against 14 under fio. On a faster
host (fio's QD32 300,000 IOPS) the polling job is itself two-moded at the same settings: when
it held 80,000 IOPS its p50 read 7.3-8.8 us (block layer 11 us), when it fell to 51,000-53,000
IOPS in the next round 18.6-19.1 us (block layer 17-18), whichever CPU it was pinned to; ivypy
at 80,000 read 15.7-19.8 us pinned to either CPU or unpinned. ivypy with ``busy_poll`` (it
then looks in the ring instead of sleeping while I/O is in flight, as fio's polling job spins)
read no lower there (p50 19.1 against 16.3 us, medians of three rounds).

On a faster host (kernel 6.18; fio's QD32 450,000-530,000 IOPS) fio's own QD1 job read
51,000-105,000 IOPS from one run to the next, minutes apart: the QD1 ratios move with it more
than with either tool. There a QD1 loop in Python read 30,000-51,000 IOPS, with the block
layer's mean twice fio's: a loop device's kernel worker is woken by the submission, often onto
the submitting CPU, and waits there while the submitter runs (in C, 3 us of work between
io_submit and io_getevents took a QD1 loop from 84,000 to 38,000 IOPS); the compiled QD1 loop
(then a loop of its own, now ``paced_run``'s lone wait) read 61,000-73,000 against fio's
44,000-83,000 in the same rounds. Polling loses to blocking on that device: C loops polling for
their completion read 0.15-0.54x the IOPS of one that blocks, so ``busy_poll`` is judged against
fio's own polling job at QD1 (``userspace_reap=1``, ``iodepth_batch_complete_min=0``; ``fio qd1
poll``), which read 50,600-52,200 IOPS there while its blocking job read 75,600-105,000, and
ivypy's ``busy_poll`` 52,700-55,700 (in Python; the same poll in C read the same, 52,700-55,700,
at half the user CPU, and was not kept then). On a host where polling wins (fio's QD32 job
140,000-170,000 IOPS; its QD1 polling job 66,700, its blocking job 47,200; medians of five
rounds) the Python poll read 47,000 and the poll in C 72,000 (mean 13.5 us against fio's polling
14.4), so the compiled QD1 loop polls too; looking without a yield for the first 20 us after
each completion, 79,000 against fio's polling 84,800 (``slave.engine.tuning.BUSY_HOT_NS``). Two
LUNs there were bound by the kernel's work while the tools' loops were in Python: fio's two jobs
read what its one job does (470,000-530,000), and so did ivypy. With the ring's turns in C (now
``paced_run``'s: 0.16-0.22 us of user CPU per I/O) one LUN read 660,000-700,000 and two
600,000-630,000; two LUNs then lost to one because each worker's wait for completions stopped
looking in the ring and slept (its gate on the recent waits' mean, at the look's own 50 us, held
once passed: see ``slave.engine.tuning.AWAIT_SPIN_GATE_NS``); gated at 200 us two LUNs read
770,000-780,000.

At ``iops=max`` the two tools run at different rates, and at a full queue the mean latency is
the queue depth over the rate (Little's law): a faster engine reads lower latencies there. The
paced case compares the latency measurement itself.

Latency is submit -> completion on both sides (ivypy's service time; fio's ``lat``, which
includes the submission). A missed target is printed as MISSED with its figure and the exit
status is 1.

CPU is each tool's run time per I/O, user and kernel together, which every kernel counts to
the nanosecond (the scheduler's: ivypy's workers' threads' ``/proc/<pid>/task/<tid>/schedstat``;
fio's ``usr_cpu`` + ``sys_cpu``, which getrusage scales to sum to that same run time): ``cpu``.
User CPU is the share of it that ``perf record``'s samples of the ``cpu-clock`` event (a timer
of the process's own run time, every ``SAMPLE_PERIOD_NS``) found in user code: ``usr``. Not the
kernel's ``utime``: where the kernel accounts by tick (``CONFIG_TICK_CPU_ACCOUNTING``, HZ 250
on the 2-core VM) it charges each whole tick to where the CPU was at that tick, and over the few
seconds of a case the paced loop's share by ``utime`` read 0.09 to 0.25 of its run time in five
rounds while perf's samples of the same seconds read 0.17 to 0.22 (2026-11-27); per I/O,
``utime`` had read 0.04 to 2.90 us from one round to the next. Without perf the bench falls back
to ``utime`` and says so under the verdict.

Every run also reads the block layer's own mean service time of its loop devices
(``/sys/block/<dev>/stat``: read ticks over reads; ivypy's measured seconds, fio's including its
1 s ramp) as ``blk``: a third party to both tools. A tool's mean minus ``blk`` is what its own
path (submission call, reaping) adds to the latency it reports; ``blk`` itself moves when a
tool's CPU use slows the device's kernel worker.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import numpy as np

from protocol.batch import StatsBatch
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from scripts.bench_engine_verify import LoopCases
from scripts.blocktrace import BlockTrace, Latencies
from slave.engine import tuning
from slave.worker import WorkerPool

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    iops: float
    mean_us: float
    p50_us: float
    p99_us: float
    usr_us_per_io: float
    blk_mean_us: float  # the block layer's mean service time of the devices, same run
    cpu_us_per_io: float  # user + kernel CPU of the tool's processes, to the ns (see above)
    # ivypy only (fio's lat starts at issue, not at the I/O's scheduled time): response time,
    # scheduled -> completion, of the random reads; minus the service time it is how late
    # ivypy itself submitted them
    resp_p50_us: float = float("nan")
    resp_p99_us: float = float("nan")
    # traced runs only: the block layer's own latency of the same I/Os (scripts/blocktrace.py)
    kern_p50_us: float = float("nan")
    kern_p99_us: float = float("nan")
    kern_mean_us: float = float("nan")
    kern_ios: int = 0
    kern_unpaired: int = 0
    # the share of all the CPUs' time that was idle while the tool ran (``idle_share``): where
    # it is well above 0, the CPUs were not what bound the IOPS
    idle_pct: float = float("nan")

    def traced(self, lat: Latencies | None) -> Result:
        """This result with the block layer's figures of a traced run (``lat``), if any."""
        if lat is None:
            return self
        return replace(self, kern_p50_us=lat.percentile(50) / 1e3,
                       kern_p99_us=lat.percentile(99) / 1e3, kern_mean_us=lat.mean / 1e3,
                       kern_ios=int(lat.ns.size), kern_unpaired=lat.unpaired)


# per CPU: a traced run's two events per I/O (about 64 bytes each in the ring), for 400,000
# IOPS for 5 s on one CPU; the buffer is the kernel's memory while the instance exists
TRACE_MIB_PER_CPU = 256


def block_trace(devs: list[str], on: bool) -> AbstractContextManager[BlockTrace | None]:
    """The devices' block trace for a run with ``trace`` set, else nothing (None)."""
    return BlockTrace(devs, TRACE_MIB_PER_CPU) if on else nullcontext()


def block_reads(devs: list[str]) -> tuple[int, int]:
    """(reads completed, ms spent on reads) of the devices, from /sys/block/<dev>/stat."""
    reads = ticks = 0
    for dev in devs:
        with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
            fields = f.read().split()
        reads += int(fields[0])
        ticks += int(fields[3])
    return reads, ticks


def block_mean_us(before: tuple[int, int], after: tuple[int, int]) -> float:
    reads = after[0] - before[0]
    return (after[1] - before[1]) * 1e3 / reads if reads else 0.0


def run_ns(pids: list[int]) -> int:
    """The processes' threads' run time so far, user and kernel, to the ns (schedstat's first
    field, which the scheduler keeps on every kernel)."""
    ran = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran += int(f.read().split()[0])
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
    return ran


def utime_s(pids: list[int]) -> float:
    """The processes' user time as the kernel accounts it (``utime``): on a tick-accounting
    kernel, whole ticks charged by where the CPU was at each (see the module's docstring)."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            total += int(f.read().rsplit(")", 1)[1].split()[11]) / CLK_TCK
    return total


#: the period of the CPU samples that split a tool's run time into user and kernel: a
#: high-resolution timer of the process's own run time, in no step with the scheduler's tick;
#: at 100 us the VM's timer lost two samples in five, at 1 ms one in ten, alike in user and
#: kernel (the split read 0.76, 0.77 and 0.76 of a yielding spin loop at 1 ms, 250 us, 100 us)
SAMPLE_PERIOD_NS = 1_000_000
PERF = shutil.which("perf")


class UserShare:
    """The share of a tool's run time spent in user mode, from ``perf record``'s samples of the
    software ``cpu-clock`` event every ``SAMPLE_PERIOD_NS`` of run time (each sample lands in
    user or kernel code), stamped with CLOCK_MONOTONIC. ``attach(pids)`` samples running
    processes until ``stop()``: start it before the tool's ramp, as perf's start (reading the
    processes' maps) takes a core for a while, and ``read`` only the measured window's samples;
    ``wrap(cmd)`` prefixes a command so that it and its children are sampled. Without perf,
    ``read`` gives None and the caller falls back to ``utime``."""

    def __init__(self) -> None:
        # in memory, as the devices: no write to a disk while a case runs
        self.path = f"/dev/shm/ivypy-bench-{os.getpid()}.perf"
        self.proc: subprocess.Popen[bytes] | None = None

    def _record(self) -> list[str]:
        return [PERF or "perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock",
                "-c", str(SAMPLE_PERIOD_NS), "-o", self.path]

    def attach(self, pids: list[int]) -> UserShare:
        if PERF:
            self.proc = subprocess.Popen([*self._record(), "-p", ",".join(map(str, pids))],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def wrap(self, cmd: list[str]) -> list[str]:
        return [*self._record(), "--", *cmd] if PERF else cmd

    def __enter__(self) -> UserShare:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.stop()
        if exc_type is not None and os.path.exists(self.path):  # no read() will come
            os.unlink(self.path)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)
            self.proc = None

    def read(self, window: tuple[int, int] | None = None,
             skip_first: bool = False) -> float | None:
        """The user share of the samples (None without perf or samples): those stamped within
        ``window`` (monotonic ns), if given; ``skip_first``: less the lowest pid's (fio's main
        process, whose children are its jobs)."""
        if not PERF or not os.path.exists(self.path):
            return None
        try:
            out = subprocess.run([PERF, "script", "-i", self.path, "--ns", "-F", "pid,time,ip"],
                                 check=True, capture_output=True, text=True).stdout
        finally:
            os.unlink(self.path)
        rows = [(int(pid), int(stamp.rstrip(":").replace(".", "")), int(ip, 16))
                for pid, stamp, ip in (line.split() for line in out.splitlines() if line.strip())]
        if window:
            rows = [r for r in rows if window[0] <= r[1] < window[1]]
        if skip_first and rows:
            first = min(r[0] for r in rows)
            rows = [r for r in rows if r[0] != first]
        if not rows:
            return None
        kernel = sum(1 for r in rows if r[2] >= 1 << 63)  # the kernel's half of the addresses
        return (len(rows) - kernel) / len(rows)


def run_ivypy(devs: list[str], qd: int, busy_poll: bool, seconds: int,
              iops: float | None = None, per_lun: int = 1, read_fraction: float = 1.0,
              compiled: bool = True, trace: bool = False, engine: str = "libaio",
              pinned: bool = True) -> Result:
    """``per_lun`` workloads of queue depth ``qd`` on each LUN (one worker per LUN), on
    ``engine``. IOPS and CPU count reads and writes; latency is the random reads' service
    time. ``compiled=False``: paced reads in the Python loop (a host without a C compiler),
    not the compiled one. ``trace``: the block layer's latency of the measured seconds' I/Os
    beside (blocktrace). ``pinned=False``: the workers left to the scheduler (``worker_cpus:
    unpinned``), not each pinned to a CPU (the default)."""
    params = WorkloadParams(iodepth=qd, busy_poll=busy_poll, blocksize_bytes=4096, iops=iops,
                            read_fraction=read_fraction)
    tuning.COMPILED_LOOP = compiled  # the workers fork from here: they inherit it
    try:
        pool = WorkerPool(len(devs), cpus=None if pinned else [None] * len(devs))
    finally:
        tuning.COMPILED_LOOP = True
    with block_trace(devs, trace) as bt, pool, UserShare().attach(pool.pids) as sampler:
        for i, dev in enumerate(devs):
            for j in range(per_lun):
                pool.create_workload(f"bench:{dev}:w{j}", dev, engine,
                                     params.replace(seed=i * per_lun + j))
        sub = 1_000_000_000
        t0 = time.monotonic_ns() + 50_000_000
        if bt:  # from the ramp on: the measured window's first I/Os complete before
            bt.start()  # collect(0) returns
        pool.go(t0, sub)
        pool.collect(0, t0 + 2 * sub + 500_000_000)  # ramp, like fio's ramp_time=1
        pool.keep_going()
        ran0, utime0, from_ns = run_ns(pool.pids), utime_s(pool.pids), time.monotonic_ns()
        blk0, stat0 = block_reads(devs), stat_line()
        total = WorkloadStats()
        for k in range(1, seconds + 1):
            r = pool.collect(k, t0 + (k + 1) * sub + 500_000_000)
            pool.keep_going()
            merge_batch(total, r.batch)
        ran1, utime1, to_ns = run_ns(pool.pids), utime_s(pool.pids), time.monotonic_ns()
        blk1, stat1 = block_reads(devs), stat_line()
        if bt:
            bt.stop()
        sampler.stop()  # before the workers end; perf takes a while to write its samples
        pool.stop()
        # the measured subintervals' I/Os, by their completion (the trace began in the ramp)
        lat = bt.latencies().within(t0 + sub, t0 + (seconds + 1) * sub) if bt else None
    h = total.histogram(0, 0)  # random read, service time
    rh = total.histogram(0, 1)  # random read, response time
    ops = total.ops()
    p50, p99, r50, r99 = (float(x or 0) for x in (h.percentile(50), h.percentile(99),
                                                  rh.percentile(50), rh.percentile(99)))
    cpu_us = (ran1 - ran0) / 1e3 / max(ops, 1)
    share = sampler.read((from_ns, to_ns))
    usr_us = cpu_us * share if share is not None else (utime1 - utime0) * 1e6 / max(ops, 1)
    res = Result(ops / seconds, (h.mean_ns or 0) / 1e3, p50 / 1e3, p99 / 1e3, usr_us,
                 block_mean_us(blk0, blk1), cpu_us, r50 / 1e3, r99 / 1e3,
                 idle_pct=idle_share(stat0, stat1))
    return res.traced(lat)


def merge_batch(total: WorkloadStats, batch: StatsBatch) -> None:
    for i in range(batch.n_workloads):
        total.merge_into(batch.workload(i))


#: fio's batching of the issue's reference jobs (libaio's and io_uring's)
FIO_BATCH = ["--iodepth_batch_submit=16", "--iodepth_batch_complete_max=32"]
#: fio's io_uring reference job: registered buffers and files, with that batching
FIO_URING = ["--fixedbufs", "--registerfiles", *FIO_BATCH]


def run_fio(devs: list[str], qd: int, seconds: int, extra: list[str],
            trace: bool = False, engine: str = "libaio") -> Result:
    """fio's job(s) on ``engine``; ``trace``: the block layer's latency of its I/Os beside
    (blocktrace), of those that completed in the last ``seconds`` of the trace: fio's measured
    time, after its ramp (``blk`` includes the ramp)."""
    cmd = [
        "fio", "--output-format=json", "--group_reporting", f"--ioengine={engine}", "--direct=1",
        "--rw=randread", "--bs=4k", f"--iodepth={qd}", "--time_based", f"--runtime={seconds}",
        "--ramp_time=1", "--lat_percentiles=1", *extra,
    ]
    for i, dev in enumerate(devs):
        cmd += [f"--name=j{i}", f"--filename={dev}"]
    with block_trace(devs, trace) as bt:
        if bt:
            bt.start()
        # the idle share over fio's whole run, its ramp included (ivypy's: its measured window)
        blk0, stat0 = block_reads(devs), stat_line()
        with UserShare() as sampler:
            out = subprocess.run(sampler.wrap(cmd), check=True, capture_output=True,
                                 text=True).stdout
        blk, stat1 = block_mean_us(blk0, block_reads(devs)), stat_line()
        if bt:
            bt.stop()
        lat = bt.latencies() if bt else None
    if lat is not None and lat.done.size:  # fio's measured seconds: the last, after its ramp
        end = float(lat.done.max())
        lat = lat.within(end - seconds * 1e9, end + 1)
    job = json.loads(out[out.index("{"):])["jobs"][0]
    rd = job["read"]
    lat_ns = rd["lat_ns"]
    pct = lat_ns["percentile"]
    ios = (rd["total_ios"] + job["write"]["total_ios"]) or 1
    # usr_cpu is a percentage of job_runtime, the measured time (after ramp_time) summed over
    # the jobs: that product is the user CPU of the I/Os counted in total_ios. (``elapsed`` is
    # whole seconds of the run including the ramp; with it fio's figure read 1.25-1.5x too high.)
    usr_s, sys_s = (job[k] / 100 * job["job_runtime"] / 1000 for k in ("usr_cpu", "sys_cpu"))
    cpu_s = usr_s + sys_s  # getrusage scales the two so that they sum to the run time
    share = sampler.read(skip_first=True)  # fio's jobs only, as its usr_cpu and sys_cpu
    if share is not None:
        usr_s = cpu_s * share
    res = Result(rd["iops"] + job["write"]["iops"], lat_ns["mean"] / 1e3,
                 pct["50.000000"] / 1e3, pct["99.000000"] / 1e3, usr_s * 1e6 / ios, blk,
                 cpu_s * 1e6 / ios, idle_pct=idle_share(stat0, stat1))
    return res.traced(lat)


def _cpu_words(cpu_line: str) -> list[int]:
    """/proc/stat's first line (``cpu  user nice system idle iowait irq softirq steal ...``):
    its first eight fields, in ticks (guest time, after them, is inside user already)."""
    return [int(w) for w in cpu_line.split()[1:9]]


def busy_and_steal(cpu_line: str) -> tuple[int, int]:
    """Of /proc/stat's first line, in ticks: the time the CPUs wanted to run (all of the eight
    but idle and iowait), and of it the steal (time the hypervisor gave them to others
    meanwhile). Steal over all the time would follow the run's own demand too: 0.2 % idle,
    1-2 % with one CPU busy, 1-6 % with both, in one quiet phase."""
    words = _cpu_words(cpu_line)
    return sum(words) - words[3] - words[4], words[7]


def idle_and_all(cpu_line: str) -> tuple[int, int]:
    """Of /proc/stat's first line, in ticks: the time the CPUs were idle (idle and iowait: no
    task wanted them) and all of their time."""
    words = _cpu_words(cpu_line)
    return words[3] + words[4], sum(words)


def stat_line() -> str:
    """/proc/stat's first line now: the machine's CPU time so far."""
    with open("/proc/stat") as f:
        return f.readline()


def cpu_ticks() -> tuple[int, int]:
    """``busy_and_steal`` of the machine so far."""
    return busy_and_steal(stat_line())


def idle_share(before: str, after: str) -> float:
    """The share of all the CPUs' time that was idle between two /proc/stat first lines, %."""
    idle0, all0 = idle_and_all(before)
    idle1, all1 = idle_and_all(after)
    return 100 * (idle1 - idle0) / max(all1 - all0, 1)


def tries_of(measure: Callable[[], Result], steal_max: float, retries: int,
             ticks: Callable[[], tuple[int, int]] = cpu_ticks) -> list[tuple[Result, float]]:
    """Each try of one case in one round, with the share of the time its CPUs wanted to run
    that the host took (``ticks``: ``cpu_ticks``): a try the host took more than
    ``steal_max`` of is measured again, ``retries`` times at most. The round keeps the try the
    host took least of (the first of equals)."""
    tries: list[tuple[Result, float]] = []
    while True:
        busy0, steal0 = ticks()
        res = measure()
        busy1, steal1 = ticks()
        tries.append((res, (steal1 - steal0) / max(busy1 - busy0, 1)))
        if tries[-1][1] <= steal_max or len(tries) > retries:
            return tries


def least_stolen(tries: list[tuple[Result, float]]) -> tuple[Result, float]:
    """The try of ``tries_of`` that a round keeps."""
    return min(tries, key=lambda t: t[1])


def user_cpu_source() -> str:
    """Where the user CPU figures come from: perf's samples, or (without perf) the kernel's
    own accounting, which /proc/config.gz says is sampled at its tick or counted at every
    entry and exit."""
    if PERF:
        return f"user share of the run time from perf's samples every {SAMPLE_PERIOD_NS} ns"
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            config = f.read()
    except OSError:
        return "utime, no perf; no /proc/config.gz says how the kernel accounts it"
    if "CONFIG_VIRT_CPU_ACCOUNTING_GEN=y" in config or "CONFIG_VIRT_CPU_ACCOUNTING_NATIVE=y" \
            in config:
        return "utime, no perf; the kernel counts it at every entry (VIRT_CPU_ACCOUNTING)"
    hz = re.search(r"^CONFIG_HZ=(\d+)", config, re.M)
    return (f"utime, no perf: sampled at the tick ({hz.group(1) if hz else '?'} Hz, "
            "TICK_CPU_ACCOUNTING), a draw of its rounds")


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def setup(n: int, size_mib: int) -> tuple[list[str], list[str]]:
    images, devs = [], []
    for i in range(n):
        img = f"/dev/shm/ivypy-bench-{os.getpid()}-{i}.img"
        rng = np.random.default_rng(i)
        with open(img, "wb") as f:  # every byte written: no page of it reads as a hole
            for _ in range(size_mib):
                f.write(rng.bytes(1 << 20))
        images.append(img)
        devs.append(sh("losetup", "--find", "--show", img))
    return images, devs


def teardown(images: list[str], devs: list[str]) -> None:
    for dev in devs:
        subprocess.run(["losetup", "-d", dev], check=False)
    for img in images:
        if os.path.exists(img):
            os.unlink(img)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=4, help="measured seconds per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=512, help="size of each loop device")
    ap.add_argument("--steal-max", type=float, default=5.0, metavar="PCT",
                    help="a case's run in a round during which the host took more than PCT %% "
                         "of the time the CPUs wanted to run (steal) is run again, --retries "
                         "times at most, and the round keeps the run it took least of (every "
                         "run is printed)")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--only", metavar="REGEX",
                    help="run only the cases whose name this matches (re.search), print their "
                         "medians and judge no target: for looking at a few cases by hand")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_engine: needs root", file=sys.stderr)
        return 2
    s = args.seconds
    images, devs = setup(4, args.size_mib)
    one, two, written = devs[:1], devs[:2], devs[2:3]
    # the data verification cases (bench_engine_verify): their own device, which a verified
    # loop keeps in step with its map; the unstamped writes go to the third
    in_loop = LoopCases(devs[3], devs[2])

    def loop_case(read_fraction: float, verify: bool) -> Result:
        stat0 = stat_line()
        r = in_loop.run(read_fraction, verify, s)
        nan = float("nan")
        return Result(r.iops, r.mean_us, nan, nan, nan, nan, r.cpu_us_per_io,
                      idle_pct=idle_share(stat0, stat_line()))

    try:
        # the write cases run on the third device, so they do not change the others between
        # rounds
        calibration = run_fio(one, 32, 2, [])
        rate = max(1000, round(calibration.iops / 2, -3))  # the paced case's IOPS, both tools
        quarter = max(1000, round(calibration.iops / 4, -3))  # the like reference's
        polling = ["--userspace_reap=1", "--iodepth_batch_complete_min=0"]
        cases: dict[str, Callable[[], Result]] = {
            "ivypy qd32": lambda: run_ivypy(one, 32, False, s),
            "ivypy qd32 io_uring": lambda: run_ivypy(one, 32, False, s, engine="io_uring"),
            "fio qd32": lambda: run_fio(one, 32, s, []),
            "fio qd32 batch": lambda: run_fio(one, 32, s, FIO_BATCH),
            "fio qd32 io_uring": lambda: run_fio(one, 32, s, FIO_URING, engine="io_uring"),
            "ivypy qd1 busy_poll": lambda: run_ivypy(one, 1, True, s),
            "ivypy qd1 blocking": lambda: run_ivypy(one, 1, False, s),
            "ivypy qd1 blocking io_uring": lambda: run_ivypy(one, 1, False, s,
                                                             engine="io_uring"),
            "fio qd1": lambda: run_fio(one, 1, s, []),
            # not a target: fio's own polling job at QD1, the like reference of busy_poll
            "fio qd1 poll": lambda: run_fio(one, 1, s, polling),
            "ivypy 2 luns qd32": lambda: run_ivypy(two, 32, False, s),
            "ivypy 2 luns qd32 io_uring": lambda: run_ivypy(two, 32, False, s, engine="io_uring"),
            "fio 2 jobs qd32": lambda: run_fio(two, 32, s, []),
            "fio 2 jobs qd32 batch": lambda: run_fio(two, 32, s, FIO_BATCH),
            "fio 2 jobs qd32 io_uring": lambda: run_fio(two, 32, s, FIO_URING, engine="io_uring"),
            # not targets: the workers left to the scheduler (worker_cpus: unpinned), where the
            # cases above pin each to a CPU as ivypy does by default
            "ivypy qd1 blocking unpinned": lambda: run_ivypy(one, 1, False, s, pinned=False),
            "ivypy qd32 unpinned": lambda: run_ivypy(one, 32, False, s, pinned=False),
            "ivypy 2 luns qd32 unpinned": lambda: run_ivypy(two, 32, False, s, pinned=False),
            "ivypy 2 luns qd32 io_uring unpinned": lambda: run_ivypy(
                two, 32, False, s, engine="io_uring", pinned=False),
            "ivypy qd32 paced": lambda: run_ivypy(one, 32, False, s, iops=rate),
            "ivypy qd32 paced io_uring": lambda: run_ivypy(one, 32, False, s, iops=rate,
                                                           engine="io_uring"),
            "fio qd32 paced": lambda: run_fio(one, 32, s, [f"--rate_iops={rate:.0f}"]),
            # not a target: the like reference, fio polling its completions as ivypy's paced
            # loop does, at a rate it holds
            "ivypy qd32 paced quarter": lambda: run_ivypy(one, 32, False, s, iops=quarter),
            "fio qd32 paced quarter poll": lambda: run_fio(
                one, 32, s, [f"--rate_iops={quarter:.0f}", *polling]),
            # and ivypy polling too (busy_poll: it looks in the ring, never sleeping while I/O
            # is in flight, as fio's polling job spins)
            "ivypy qd32 paced quarter busy_poll": lambda: run_ivypy(one, 32, True, s,
                                                                    iops=quarter),
            # not a target: the same in the Python loop, as on a host without a C compiler
            "ivypy qd32 paced python": lambda: run_ivypy(one, 32, False, s, iops=rate,
                                                         compiled=False),
            # not a target: a low rate, where the worker sleeps between I/Os and its wake-up
            # for the next one decides how late that one goes out (response - service)
            "ivypy qd32 paced 1000": lambda: run_ivypy(one, 32, False, s, iops=1000.0),
            "fio qd32 paced 1000": lambda: run_fio(one, 32, s, ["--rate_iops=1000"]),
            # not targets: many workloads in one worker (fio qd32 above compares); a device
            # that holds data; writes (on that device)
            "ivypy 8 workloads qd4": lambda: run_ivypy(one, 4, False, s, per_lun=8),
            "ivypy 8 workloads paced": lambda: run_ivypy(one, 4, False, s, iops=rate / 8,
                                                         per_lun=8),
            "ivypy qd32 written": lambda: run_ivypy(written, 32, False, s),
            "fio qd32 written": lambda: run_fio(written, 32, s, []),
            "ivypy qd32 70% reads": lambda: run_ivypy(written, 32, False, s, read_fraction=0.7),
            "fio qd32 70% reads": lambda: run_fio(written, 32, s,
                                                  ["--rw=randrw", "--rwmixread=70"]),
            "ivypy 8 workloads qd4 70%": lambda: run_ivypy(written, 4, False, s, per_lun=8,
                                                           read_fraction=0.7),
            # not targets: runs again with the block layer's own latency of each I/O traced
            # (scripts/blocktrace.py), for the fidelity floor on percentiles; the trace costs
            # each I/O some kernel time, so these are apart from the target cases
            "ivypy qd32 traced": lambda: run_ivypy(one, 32, False, s, trace=True),
            "fio qd32 traced": lambda: run_fio(one, 32, s, [], trace=True),
            "ivypy qd1 blocking traced": lambda: run_ivypy(one, 1, False, s, trace=True),
            "fio qd1 traced": lambda: run_fio(one, 1, s, [], trace=True),
            "ivypy qd32 paced traced": lambda: run_ivypy(one, 32, False, s, iops=rate,
                                                         trace=True),
            "fio qd32 paced traced": lambda: run_fio(one, 32, s, [f"--rate_iops={rate:.0f}"],
                                                     trace=True),
            # data verification's cost (bench_engine_verify): one loop in this process,
            # pinned, the same I/O with and without verify
            "loop qd32 reads": lambda: loop_case(1.0, False),
            "loop qd32 reads verify": lambda: loop_case(1.0, True),
            "loop qd32 writes": lambda: loop_case(0.0, False),
            "loop qd32 writes verify": lambda: loop_case(0.0, True),
        }
        if args.only:
            cases = {k: fn for k, fn in cases.items() if re.search(args.only, k)}
            if not cases:
                print(f"bench_engine: no case matches --only {args.only!r}", file=sys.stderr)
                return 2
        results: dict[str, list[Result]] = {k: [] for k in cases}
        # each case's share of the CPUs' wanted time stolen by the host, round by round
        stolen_of: dict[str, list[float]] = {k: [] for k in cases}
        print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
              f"{args.rounds} rounds of {s} s (+1 s ramp) per case, "
              f"loop devices {', '.join(devs)}; "
              f"paced cases at {rate:.0f} IOPS, the like reference at {quarter:.0f} "
              f"(fio qd32 calibration: {calibration.iops:.0f})")
        runs_again = 0  # the runs taken again for their steal
        for rnd in range(args.rounds):
            for name, fn in cases.items():
                tries = tries_of(fn, args.steal_max / 100, args.retries)
                res, steal = least_stolen(tries)
                runs_again += len(tries) - 1
                stolen_of[name].append(steal)
                results[name].append(res)
                for t, (run, st) in enumerate(tries):
                    print(f"round {rnd + 1} {name:28s} {run.iops:10.0f} IOPS"
                          f"  mean {run.mean_us:8.1f} us  p50 {run.p50_us:8.1f}"
                          f"  p99 {run.p99_us:8.1f}  usr {run.usr_us_per_io:5.2f} us/IO"
                          f"  cpu {run.cpu_us_per_io:5.2f} us/IO"
                          f"  blk {run.blk_mean_us:6.1f} us"
                          + (f"  block layer p50 {run.kern_p50_us:6.1f} p99 {run.kern_p99_us:6.1f}"
                             f" ({run.kern_ios} I/Os, {run.kern_unpaired} unpaired)"
                             if run.kern_ios else "")
                          + f"  steal {100 * st:.1f} %  idle {run.idle_pct:4.1f} %"
                          + ("" if len(tries) == 1 else
                             f"  (try {t + 1} of {len(tries)}"
                             + (", kept)" if run is res else ")")), flush=True)
    finally:
        in_loop.close()
        teardown(images, devs)

    def med(name: str, field: str) -> float:
        return float(statistics.median(getattr(x, field) for x in results[name]))

    stolen = [x for xs in stolen_of.values() for x in xs]
    print(f"\n# medians over {args.rounds} rounds (load average now {os.getloadavg()[0]:.2f}; "
          f"the host took {100 * statistics.median(stolen):.1f} % of the time the CPUs wanted "
          "to run in the "
          f"median case, {100 * max(stolen):.1f} % at most: a figure of a case that lost "
          "much is the host's as much as the tool's; "
          f"{runs_again} run(s) taken again for more than {args.steal_max:g} % steal, "
          f"at most {args.retries} time(s) each, the least stolen kept)")
    for name in cases:
        print(f"{name:28s} {med(name, 'iops'):10.0f} IOPS  mean {med(name, 'mean_us'):8.1f} us"
              f"  p50 {med(name, 'p50_us'):8.1f}  p99 {med(name, 'p99_us'):8.1f}"
              f"  usr {med(name, 'usr_us_per_io'):5.2f} us/IO"
              f"  cpu {med(name, 'cpu_us_per_io'):5.2f} us/IO"
              f"  blk {med(name, 'blk_mean_us'):6.1f} us  idle {med(name, 'idle_pct'):4.1f} %")

    missed = 0

    def check(label: str, value: float, ok: bool, target: str,
              rounds_of: tuple[str, ...] = ()) -> None:
        """One verdict; ``rounds_of``: cases whose IOPS, from their lowest round to their
        highest, are printed under it, with the share of the CPUs' wanted time the host took
        in those rounds (a reference whose own rounds spread wider than the target's margin,
        as fio's polling job's medians of three rounds did, 49,600 to 67,400 within an hour on
        one host, makes the verdict a draw of its rounds; rounds that lost a quarter of all the
        CPUs' time read under half the IOPS of quiet ones, 2026-11-28)."""
        nonlocal missed
        missed += not ok
        print(f"{'ok    ' if ok else 'MISSED'} {label:44s} {value:7.3f}  (target {target})")
        if rounds_of:
            print(f"{'':7s}rounds' IOPS: " + "; ".join(
                f"{n} {min(x.iops for x in results[n]):,.0f}-"
                f"{max(x.iops for x in results[n]):,.0f}"
                f" (steal {100 * min(stolen_of[n]):.1f}-{100 * max(stolen_of[n]):.1f} %,"
                f" CPUs idle {min(x.idle_pct for x in results[n]):.0f}-"
                f"{max(x.idle_pct for x in results[n]):.0f} %)"
                for n in rounds_of))

    def ratio(a: str, b: str, field: str) -> float:
        return med(a, field) / med(b, field)

    def best(base: str) -> str:
        """fio's best of the three reference jobs of ``base`` (by median IOPS)."""
        return max((base, f"{base} batch", f"{base} io_uring"), key=lambda c: med(c, "iops"))

    def verify_targets() -> None:
        """Data verification's cost (bench_engine_verify), where its cases ran."""
        for what in ("reads", "writes"):
            plain, verified = f"loop qd32 {what}", f"loop qd32 {what} verify"
            if plain in cases and verified in cases:
                r = ratio(verified, plain, "iops")
                check(f"qd32 {what} IOPS: verify / without", r, r >= 0.9, ">= 0.9",
                      (verified, plain))
                print(f"{'':7s}CPU per I/O: {med(verified, 'cpu_us_per_io'):.2f} us verified, "
                      f"{med(plain, 'cpu_us_per_io'):.2f} us without")

    if args.only:
        print(f"\n# --only {args.only!r}: {len(cases)} case(s) run; only data "
              "verification's targets are judged, where both their cases ran")
        verify_targets()
        return 1 if missed else 0
    print("\n# targets")
    verify_targets()
    best32, best2 = best("fio qd32"), best("fio 2 jobs qd32")
    r = ratio("ivypy qd32", best32, "iops")
    check(f"qd32 IOPS / fio's best ({best32})", r, r >= 1.0, ">= 1.0", ("ivypy qd32", best32))
    r = ratio("ivypy qd32 io_uring", "ivypy qd32", "iops")
    check("qd32 IOPS: ivypy on io_uring / on libaio", r, r >= 0.95, ">= 0.95",
          ("ivypy qd32 io_uring", "ivypy qd32"))
    def within(label: str, r: float, x: float) -> None:
        """The issue's "within x %" of fio's latency, one-sided (no more than x % above fio's);
        the two-sided reading printed beside it (see the docstring)."""
        two = "ok" if abs(r - 1) <= x else "MISSED"
        check(label, r, r <= 1 + x, f"<= {1 + x:.2f}; two-sided within {x:.0%}: {two}")

    r = ratio("ivypy qd32", "fio qd32", "mean_us")
    within("qd32 mean latency / fio", r, 0.05)
    r = ratio("ivypy qd32", "fio qd32", "p50_us")
    within("qd32 p50 / fio", r, 0.05)
    r = ratio("ivypy qd32", "fio qd32", "p99_us")
    check("qd32 p99 / fio", r, r <= 1.10, "<= 1.1")
    u = med("ivypy qd32", "usr_us_per_io")
    check("qd32 user CPU us per I/O", u, u <= 1.0, "<= 1.0")
    r = ratio("ivypy qd1 blocking", "fio qd1", "iops")
    check("qd1 blocking IOPS / fio qd1", r, r >= 0.9, ">= 0.9", ("ivypy qd1 blocking", "fio qd1"))
    r = ratio("ivypy qd1 busy_poll", "fio qd1 poll", "iops")
    check("qd1 busy_poll IOPS / fio qd1 polling", r, r >= 0.9,
          ">= 0.9; fio's job with userspace_reap=1, iodepth_batch_complete_min=0",
          ("ivypy qd1 busy_poll", "fio qd1 poll"))
    r = ratio("ivypy qd1 busy_poll", "fio qd1", "iops")
    print(f"{'':7s}{'qd1 busy_poll IOPS / fio qd1':44s} {r:7.3f}  (not a target)")
    r = ratio("ivypy 2 luns qd32", "fio 2 jobs qd32", "iops")
    print(f"{'':7s}{'2 LUNs IOPS / fio 2 jobs (default)':44s} {r:7.3f}  (not a target)")
    r = ratio("ivypy 2 luns qd32", best2, "iops")
    check(f"2 LUNs IOPS / fio's best ({best2})", r, r >= 1.1, ">= 1.1",
          ("ivypy 2 luns qd32", "ivypy 2 luns qd32 io_uring", best2))
    r = ratio("ivypy 2 luns qd32 io_uring", best2, "iops")
    print(f"{'':7s}{'2 LUNs IOPS, ivypy on io_uring / fio best':44s} {r:7.3f}  (not a target: "
          "the target is ivypy's default engine, libaio)")
    for a, b in (("ivypy qd1 blocking unpinned", "fio qd1"),
                 ("ivypy qd32 unpinned", best32),
                 ("ivypy 2 luns qd32 unpinned", best2),
                 ("ivypy 2 luns qd32 io_uring unpinned", best2)):
        print(f"{'':7s}{a + ' / ' + b:44s} {ratio(a, b, 'iops'):7.3f}  (not a target: "
              "worker_cpus: unpinned)")
    print("\n# io_uring (not targets but the first above): ivypy on io_uring / on libaio, and "
          "fio's three reference jobs / fio's libaio default (medians)")
    for a, b in (("ivypy qd32 io_uring", "ivypy qd32"),
                 ("ivypy qd1 blocking io_uring", "ivypy qd1 blocking"),
                 ("ivypy 2 luns qd32 io_uring", "ivypy 2 luns qd32"),
                 ("ivypy qd32 paced io_uring", "ivypy qd32 paced"),
                 ("fio qd32 batch", "fio qd32"), ("fio qd32 io_uring", "fio qd32"),
                 ("fio 2 jobs qd32 batch", "fio 2 jobs qd32"),
                 ("fio 2 jobs qd32 io_uring", "fio 2 jobs qd32")):
        print(f"{a:28s} / {b:20s} IOPS {ratio(a, b, 'iops'):6.3f}"
              f"  user CPU {med(a, 'usr_us_per_io'):5.2f} vs {med(b, 'usr_us_per_io'):5.2f} us/IO"
              f"  p50 {ratio(a, b, 'p50_us'):6.3f}  p99 {ratio(a, b, 'p99_us'):6.3f}")
    print()
    r = ratio("ivypy qd32 paced", "fio qd32 paced", "iops")
    check(f"paced at {rate:.0f} IOPS: IOPS / fio (same load)", r, abs(r - 1) <= 0.01, "within 1 %")
    r = ratio("ivypy qd32 paced", "fio qd32 paced", "p50_us")
    within("paced: p50 / fio (same workload)", r, 0.05)
    r = ratio("ivypy qd32 paced", "fio qd32 paced", "p99_us")
    within("paced: p99 / fio (same workload)", r, 0.10)
    r = ratio("ivypy qd32 paced", "fio qd32 paced", "usr_us_per_io")
    check("paced: user CPU per I/O / fio's", r, r <= 1.0,
          f"<= 1.0; {med('ivypy qd32 paced', 'usr_us_per_io'):.2f} against "
          f"{med('fio qd32 paced', 'usr_us_per_io'):.2f} us; {user_cpu_source()}")
    print(f"{'':7s}rounds' user CPU: " + "; ".join(
        f"{n} " + ", ".join(f"{x.usr_us_per_io:.2f}" for x in results[n])
        for n in ("ivypy qd32 paced", "fio qd32 paced")) + " us/IO")
    r = ratio("ivypy qd32 paced", "fio qd32 paced", "cpu_us_per_io")
    print(f"{'':7s}{'paced: CPU (user + kernel) per I/O / fio':44s} {r:7.3f}  (not a target: "
          f"{med('ivypy qd32 paced', 'cpu_us_per_io'):.2f} against "
          f"{med('fio qd32 paced', 'cpu_us_per_io'):.2f} us, counted to the ns)")
    print("\n# fidelity: a latency below fio's is believed only where these hold (targets)")

    def per_round(name: str, of: Callable[[Result], float]) -> float:
        return float(statistics.median(of(x) for x in results[name]))

    little = {c: per_round(c, lambda x: x.mean_us * 1e-6 * x.iops / 32)
              for c in ("ivypy qd32", "fio qd32")}
    check("qd32: mean x IOPS / iodepth (Little's law)", little["ivypy qd32"],
          0.95 <= little["ivypy qd32"] <= 1.01, f"0.95..1.01; fio's {little['fio qd32']:.3f}")
    floor = {c: per_round(c, lambda x: x.mean_us / x.blk_mean_us) for c in cases
             if c.startswith("ivypy") and all(x.blk_mean_us > 0 for x in results[c])}
    lowest = min(floor, key=floor.__getitem__)
    check(f"ivypy mean / block layer's mean, lowest ({lowest})", floor[lowest],
          floor[lowest] >= 1.0, ">= 1 in every ivypy case")
    traced = [c for c in cases if c.endswith(" traced") and all(x.kern_ios for x in results[c])]

    def over_block(case: str, field: str, how: Callable[[float, float], float]) -> float:
        """Per round: ``how(tool's figure, the block layer's)`` of one statistic."""
        return per_round(case, lambda x: how(getattr(x, f"{field}_us"),
                                             getattr(x, f"kern_{field}_us")))

    for c in cases:
        if c.endswith(" traced") and c not in traced:
            check(f"{c}: the trace holds its I/Os", 0.0, False, "every round's trace")
    counted = {c: per_round(c, lambda x: x.kern_ios / (x.iops * s)) for c in traced
               if c.startswith("ivypy")}
    if counted:  # the trace's I/Os of the measured window are the ones ivypy counted
        off = max(counted, key=lambda c: abs(counted[c] - 1))
        check(f"traced I/Os / ivypy's I/Os, measured window, farthest ({off})", counted[off],
              abs(counted[off] - 1) <= 0.005, "within 0.5 % in every traced ivypy case")
    if traced:
        # each I/O's life in the block layer lies inside its submit -> reap, so each quantile
        # of a tool's latency is at least the block layer's, less the histogram's rounding
        # inside one bucket (1/64 of its power-of-two group)
        for q in ("p50", "p99"):
            r_of = {c: over_block(c, q, lambda t, k: t / k) for c in traced}
            ivy = [c for c in traced if c.startswith("ivypy")]
            fio = [c for c in traced if c.startswith("fio")]
            if not ivy or not fio:
                break  # missed above: a traced run found nothing in its trace
            low, fio_low = min(ivy, key=r_of.__getitem__), min(fio, key=r_of.__getitem__)
            check(f"ivypy {q} / block layer's {q}, same I/Os, lowest ({low})", r_of[low],
                  r_of[low] >= 1 - 1 / 64,
                  f">= {1 - 1 / 64:.3f} in every traced ivypy case; fio's lowest "
                  f"{r_of[fio_low]:.3f}")
        print("\n# the block layer's own latency of the same I/Os (tracepoints block_bio_queue ->"
              " block_rq_complete, traced runs; medians; not targets): what each tool adds")
        for c in traced:
            untraced = c.removesuffix(" traced")
            cost = (f"  IOPS / untraced {ratio(c, untraced, 'iops'):5.3f}"
                    if untraced in results else "")
            cols = "".join(f"  {q} {med(c, f'{q}_us'):7.1f} us = {med(c, f'kern_{q}_us'):6.1f}"
                           f" + {over_block(c, q, lambda t, k: t - k):6.1f}"
                           for q in ("p50", "p99", "mean"))
            print(f"{c:26s}{cols}{cost}")
    print("\n# many workloads in one worker, a device that holds data, and 70 % reads on it "
          "(IOPS: reads and writes; not targets)")
    for a, b in (("ivypy 8 workloads qd4", "fio qd32"),
                 ("ivypy 8 workloads paced", "fio qd32 paced"),
                 ("ivypy qd32 written", "fio qd32 written"),
                 ("ivypy qd32 70% reads", "fio qd32 70% reads"),
                 ("ivypy 8 workloads qd4 70%", "fio qd32 70% reads")):
        print(f"{a:26s} / {b:20s} IOPS {ratio(a, b, 'iops'):6.3f}"
              f"  user CPU {med(a, 'usr_us_per_io'):5.2f} vs {med(b, 'usr_us_per_io'):5.2f} us/IO"
              f"  p50 {ratio(a, b, 'p50_us'):6.3f}  p99 {ratio(a, b, 'p99_us'):6.3f}")
    print("\n# ivypy's own lateness at paced rates: response time (scheduled -> completion) "
          "against service time (submit -> completion), medians; not a target")
    for case in ("ivypy qd32 paced", "ivypy qd32 paced python", "ivypy 8 workloads paced",
                 "ivypy qd32 paced quarter", "ivypy qd32 paced quarter busy_poll",
                 "ivypy qd32 paced 1000"):
        print(f"{case:26s} response p50 {med(case, 'resp_p50_us'):7.1f} us"
              f" (service {med(case, 'p50_us'):6.1f})  p99 {med(case, 'resp_p99_us'):7.1f} us"
              f" (service {med(case, 'p99_us'):6.1f})")
    r50, r99 = (ratio("ivypy qd32 paced 1000", "fio qd32 paced 1000", f)
                for f in ("p50_us", "p99_us"))
    print(f"{'paced at 1000 IOPS':26s} service p50 / fio {r50:6.3f}  p99 / fio {r99:6.3f}")
    for label, case in (("like reference", "ivypy qd32 paced quarter"),
                        ("like reference, busy_poll", "ivypy qd32 paced quarter busy_poll")):
        r50, r99, r = (ratio(case, "fio qd32 paced quarter poll", f)
                       for f in ("p50_us", "p99_us", "iops"))
        print(f"{label:26s} service p50 / fio polling {r50:6.3f}  p99 / fio polling "
              f"{r99:6.3f}  (at {quarter:.0f} IOPS; IOPS / fio {r:6.3f})")
    r50, r99 = (ratio("ivypy qd32 paced python", "fio qd32 paced", f)
                for f in ("p50_us", "p99_us"))
    print(f"{'paced, Python loop':26s} service p50 / fio {r50:6.3f}  p99 / fio {r99:6.3f}")
    print("\n# what each tool adds over the block layer's mean (mean - blk, medians; not a target)")
    for case in ("ivypy qd32", "fio qd32", "ivypy qd1 blocking", "fio qd1",
                 "ivypy qd32 paced", "ivypy qd32 paced python", "fio qd32 paced"):
        over = med(case, "mean_us") - med(case, "blk_mean_us")
        print(f"{case:26s} {over:8.1f} us over blk {med(case, 'blk_mean_us'):6.1f} us")
    print(f"\n{missed} target(s) missed" if missed else "\nall targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
