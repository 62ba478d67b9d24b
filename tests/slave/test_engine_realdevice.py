"""Real libaio I/O through the worker pool on loop devices, checked from outside the tool.

The tool's own statistics are not the witness here; the kernel is:

- queue depth: the block layer's trace of every bio the worker queued and every request
  completed on the device (a private ftrace instance), walked in the order of a global event
  counter, plus the device's in-flight counter (``/sys/block/<dev>/inflight``) sampled in a
  tight loop;
- paced rate: the device's completed-read counter (``/sys/block/<dev>/stat``);
- Poisson arrivals: the times at which the block layer received each of the worker's bios
  (``block_bio_queue``, traced in the submitting ``io_submit`` call itself).

Other processes may read a loop device too (on a shared host, any LUN discovery probes every
block device: blkid, ivypy's own): the traces keep the worker's bios alone.

As root (CI) every test runs: a missing loop device, native AIO or tracefs is a failure. Without
root they skip, saying so.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import pytest

from protocol.params import IoSequencerName, WorkloadParams
from slave.engine import compiled_loop, native, tuning
from slave.worker import SubintervalResults, WorkerPool
from tests.slave.rates import assert_kept

if TYPE_CHECKING:
    from tests.slave.conftest import LoopDevice, LoopFactory

pytestmark = pytest.mark.root

MIB = 1 << 20
BLOCK_BYTES = 4096
SECTORS_PER_IO = BLOCK_BYTES // 512


@pytest.fixture(autouse=True)
def _real_devices_here() -> None:
    """Skip without root (only root attaches loop devices and traces the block layer); as root,
    whatever is missing is a failure (losetup and loop support: the ``loop_device`` fixture)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: loop devices and the block layer's trace are root's only")
    assert native.aio_available() is None, f"no native AIO: {native.aio_available()}"


# ====================================================================== the block layer's trace
@dataclass(frozen=True)
class BlockEvent:
    """One traced block event: its timestamp (the instance's clock: a global event counter, or
    microseconds), name, direction (``rwbs``: R, W, ...) and first sector and size in sectors."""

    ts: int
    name: str
    rwbs: str
    sector: int
    sectors: int


# "  python-1234  [000] ..s..  2535022: block_rq_complete: 7,0 R () 90280 + 8 be,0,4 [0]"
_LINE = re.compile(
    r"^\s*.*?-\d+\s+(?:\(\s*[\d-]+\)\s+)?\[\d+\]\s+(?:\S+\s+)?(?P<ts>\d+(?:\.\d+)?):\s+"
    r"(?P<event>\w+):\s+(?P<major>\d+),(?P<minor>\d+)\s+(?P<rwbs>\S+)\s+(?:\(.*?\)\s+)?"
    r"(?P<sector>\d+)\s+\+\s+(?P<sectors>\d+)\b"
)


class TraceInstance:
    """A private ftrace instance (``instances/<name>``, made here): started, stopped, its lost
    events counted, removed."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.mkdir(self.dir)

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def start(self) -> None:
        self._write("tracing_on", "1")

    def stop(self) -> None:
        self._write("tracing_on", "0")

    def dropped(self) -> int:
        """Events lost to a full buffer (or overwritten), over all CPUs."""
        lost = 0
        for cpu in os.listdir(os.path.join(self.dir, "per_cpu")):
            with open(os.path.join(self.dir, "per_cpu", cpu, "stats")) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() in ("overrun", "commit overrun", "dropped events"):
                        lost += int(value)
        return lost

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self._write("tracing_on", "0")
        # the kernel removes the whole instance; retried while a reader of ours lets go
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


class BlockTrace(TraceInstance):
    """A trace instance that records the block layer's events (``configure``) for one device
    only. Its clock: ``counter`` (a global atomic count of events, which orders events of all
    CPUs as they happened) or ``mono`` (microseconds)."""

    def __init__(self, directory: str, device: LoopDevice) -> None:
        super().__init__(directory)
        self.clock = ""
        rdev = os.stat(device.path).st_rdev
        self.major, self.minor = os.major(rdev), os.minor(rdev)

    def configure(self, events: Sequence[str], *, clock: str, buffer_kib: int,
                  submitter: int | None) -> None:
        """Record ``events`` of this device; ``block_bio_queue`` (traced in the submitting
        task) only of the process ``submitter``, when given."""
        self.clock = clock
        self._write("tracing_on", "0")
        self._write("trace_clock", clock)
        self._write("buffer_size_kb", str(buffer_kib))
        # a full buffer drops new events instead of overwriting old ones; dropped() says so
        self._write("options/overwrite", "0")
        for event in events:
            where = f"dev == {(self.major << 20) | self.minor}"  # the kernel's dev_t
            if event == "block_bio_queue" and submitter is not None:
                where += f" && common_pid == {submitter}"
            self._write(f"events/block/{event}/filter", where)
            self._write(f"events/block/{event}/enable", "1")
        self._write("trace", "")

    def events(self) -> list[BlockEvent]:
        """Every event recorded, in timestamp order (only this device's: checked)."""
        found: list[BlockEvent] = []
        with open(os.path.join(self.dir, "trace")) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                m = _LINE.match(line)
                assert m is not None, f"cannot read trace line {line!r}"
                assert (int(m["major"]), int(m["minor"])) == (self.major, self.minor), line
                ts = m["ts"]
                if self.clock != "counter":  # seconds.microseconds
                    secs, _, usecs = ts.partition(".")
                    ts = str(int(secs) * 1_000_000 + int(usecs.ljust(6, "0")))
                found.append(BlockEvent(int(ts), m["event"], m["rwbs"], int(m["sector"]),
                                        int(m["sectors"])))
        found.sort(key=lambda e: e.ts)
        return found


class CallTrace(TraceInstance):
    """A trace instance that counts one process's submit system calls (``io_submit`` and
    ``io_uring_enter``) of more than ``over`` I/Os (``configure_calls``): the kernel's filter
    compares, nothing is parsed but the calls' names."""

    _CALLS: Final = (("sys_enter_io_submit", "nr"), ("sys_enter_io_uring_enter", "to_submit"))

    def configure_calls(self, submitter: int, over: int) -> None:
        self._write("tracing_on", "0")
        self._write("buffer_size_kb", "16384")
        self._write("options/overwrite", "0")
        for event, count in self._CALLS:
            assert os.path.isdir(os.path.join(self.dir, "events", "syscalls", event)), (
                f"no tracepoint syscalls/{event}: a kernel without CONFIG_FTRACE_SYSCALLS")
            self._write(f"events/syscalls/{event}/filter",
                        f"common_pid == {submitter} && {count} > {over}")
            self._write(f"events/syscalls/{event}/enable", "1")
        self._write("trace", "")

    def calls(self) -> int:
        with open(os.path.join(self.dir, "trace")) as f:
            return sum(1 for line in f if "sys_io_submit(" in line
                       or "sys_io_uring_enter(" in line)


@pytest.fixture
def tracefs() -> Iterator[tuple[str, list[TraceInstance]]]:
    """tracefs's root, and a list of the instances made under it: mounted on a private
    directory when it is not mounted at /sys/kernel/tracing; at teardown, always, the instances
    are removed and what was mounted unmounted."""
    made: list[TraceInstance] = []
    mounted: str | None = None
    root = "/sys/kernel/tracing"
    try:
        if not os.path.isdir(os.path.join(root, "instances")):
            mounted = tempfile.mkdtemp(prefix="ivypy-tracefs-")
            proc = subprocess.run(["mount", "-t", "tracefs", "nodev", mounted],
                                  capture_output=True, text=True, timeout=30, check=False)
            assert proc.returncode == 0, f"cannot mount tracefs (as root): {proc.stderr.strip()}"
            root = mounted
        yield root, made
    finally:
        for trace in made:
            trace.remove()
        if mounted is not None:
            subprocess.run(["umount", mounted], capture_output=True, timeout=30, check=False)
            with contextlib.suppress(OSError):
                os.rmdir(mounted)


@pytest.fixture
def block_trace(tracefs: tuple[str, list[TraceInstance]]) -> Callable[..., BlockTrace]:
    """Factory: ``block_trace(device, events, *, clock, buffer_kib=1024, submitter=None) ->
    BlockTrace`` (see ``BlockTrace.configure``), tracing stopped."""
    root, made = tracefs

    def make(device: LoopDevice, events: Sequence[str], *, clock: str,
             buffer_kib: int = 1024, submitter: int | None = None) -> BlockTrace:
        name = f"ivypy-test-{os.getpid()}-{device.name}-{len(made)}"
        trace = BlockTrace(os.path.join(root, "instances", name), device)
        made.append(trace)  # removed at teardown, even if what follows fails
        trace.configure(events, clock=clock, buffer_kib=buffer_kib, submitter=submitter)
        return trace

    return make


@pytest.fixture
def call_trace(tracefs: tuple[str, list[TraceInstance]]) -> Callable[[int, int], CallTrace]:
    """Factory: ``call_trace(submitter, over) -> CallTrace`` (``CallTrace.configure_calls``),
    tracing stopped."""
    root, made = tracefs

    def make(submitter: int, over: int) -> CallTrace:
        trace = CallTrace(os.path.join(root, "instances",
                                       f"ivypy-test-{os.getpid()}-calls-{len(made)}"))
        made.append(trace)
        trace.configure_calls(submitter, over)
        return trace

    return make


def _reads_completed(device: LoopDevice) -> int:
    """The device's own count of reads, in I/Os: completed requests plus the bios merged into
    them (``/sys/block/<dev>/stat`` fields 0 and 1)."""
    with open(f"/sys/block/{device.name}/stat") as f:
        fields = f.read().split()
    return int(fields[0]) + int(fields[1])


def _read_ops(r: SubintervalResults, wid: str) -> int:
    """Random reads ``wid`` completed in ``r``."""
    return int(r.stats[wid].counters[0, 0])


def _run_queue_wait_ns(pid: int) -> int:
    """How long the thread ``pid`` has waited on a run queue, runnable (schedstat field 1)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[1])


def _start(pool: WorkerPool, subinterval_ns: int) -> int:
    t0 = time.monotonic_ns() + 100_000_000
    pool.go(t0, subinterval_ns)
    return t0


def _sleep_until(t_ns: int) -> None:
    left = t_ns - time.monotonic_ns()
    if left > 0:
        time.sleep(left / 1e9)


# ====================================================================== queue depth
@pytest.mark.parametrize("iodepth", [4, 1])
def test_never_more_than_iodepth_in_flight_seen_by_the_block_layer(
    loop_device: LoopFactory, block_trace: Callable[..., BlockTrace], iodepth: int
) -> None:
    """A max-iops random-read workload of queue depth ``iodepth``: the block layer never holds
    more than ``iodepth`` of its I/Os, and holds that many some of the time.

    The witness is the trace, in the order of a global event counter: every bio the worker
    queued (+1), and every request completed on the device (-1 for each of the worker's bios
    it covers: a request may hold merged bios, and another process's reads are not counted).
    A bio is traced inside ``io_submit``, after the tool counts it in flight; a request is
    traced completing before its completion reaches the tool. So the traced count never
    exceeds what the tool has in flight: above ``iodepth`` is the tool's fault, and reaching
    ``iodepth`` shows the tool kept its queue full.

    ``/sys/block/<dev>/inflight`` is sampled too, from this process in a tight loop, and must
    reach ``iodepth``. It is not held to ``<= iodepth``: the kernel counts a request done
    (``block_io_done``) after it has delivered the completion, and a tool that polls its
    completion ring resubmits in between. Measured on the 2-core VM (Linux 6.18) at queue depth
    4: the counter read 5-7 in some runs (at most 1 sample in 500); traced at the same time,
    the kernel's own accounting (``block_io_start`` - ``block_io_done``) reached 5 while this
    count held to 4, in the order a request traced complete, a new bio queued, the first
    request accounted done. fio (which reaps with a system call) never read above 4 there."""
    device = loop_device(64 * MIB)
    wid = f"t:{device.path}:qd{iodepth}"
    sub_ns = 700_000_000  # the sampling and 0.2 s past it
    trace_ns = 300_000_000  # tens of thousands of I/Os at QD4: a few MB of trace
    sample_ns = 500_000_000  # a few hundred thousand samples
    with WorkerPool(1) as pool:
        info = pool.create_workload(wid, device.path, "libaio",
                                    WorkloadParams(iodepth=iodepth, seed=7))
        assert info.engine == "libaio"
        trace = block_trace(device, ("block_bio_queue", "block_rq_complete"), clock="counter",
                            buffer_kib=16384, submitter=pool.pids[0])
        trace.start()  # before the first I/O: the count starts at 0
        t0 = _start(pool, sub_ns)
        fd = os.open(f"/sys/block/{device.name}/inflight", os.O_RDONLY)
        seen: dict[bytes, int] = {}
        tracing = True
        try:
            _sleep_until(t0)
            while (now := time.monotonic_ns()) < t0 + sample_ns:
                sample = os.pread(fd, 64, 0)
                seen[sample] = seen.get(sample, 0) + 1
                if tracing and now >= t0 + trace_ns:
                    trace.stop()
                    tracing = False
        finally:
            os.close(fd)
            trace.stop()
        r = pool.collect(0, t0 + sub_ns + 3_000_000_000)
        pool.stop()
    assert _read_ops(r, wid) > 1000, "the workload hardly ran"

    assert trace.dropped() == 0, "the trace lost events: its count would be wrong"
    events = trace.events()
    queued = [e for e in events if e.name == "block_bio_queue"]
    assert len(queued) > 500, f"only {len(queued)} bios traced in {trace_ns / 1e9} s"
    assert all(e.sectors == SECTORS_PER_IO and e.rwbs.startswith("R") for e in queued), (
        {(e.rwbs, e.sectors) for e in queued})
    outstanding: dict[int, int] = {}  # the worker's bios in flight, by first sector
    in_flight, completed, depth = 0, 0, []
    for e in events:
        if e.name == "block_bio_queue":
            outstanding[e.sector] = outstanding.get(e.sector, 0) + 1
            in_flight += 1
        else:
            first = -(-e.sector // SECTORS_PER_IO) * SECTORS_PER_IO
            for sector in range(first, e.sector + e.sectors, SECTORS_PER_IO):
                if outstanding.get(sector):
                    outstanding[sector] -= 1
                    in_flight -= 1
                    completed += 1
        depth.append(in_flight)
    # every bio's completion was found, but those still in flight when the trace stopped
    assert completed >= len(queued) - iodepth, f"{completed} of {len(queued)} bios completed"
    counts = dict(enumerate(np.bincount(np.array(depth)).tolist()))
    assert max(depth) <= iodepth, f"traced events seen at each number in flight: {counts}"
    assert max(depth) == iodepth, f"never {iodepth} in flight: {counts}"

    samples = {tuple(int(x) for x in k.split()): n for k, n in seen.items()}
    assert sum(samples.values()) > 10_000, f"only {sum(samples.values())} samples"
    assert max(reads for reads, _ in samples) >= iodepth, f"never {iodepth}: {samples}"


# ====================================================================== paced rate
def test_2000_iops_for_5_s_lands_within_2_percent(loop_device: LoopFactory) -> None:
    """A paced random_steady read workload at 2,000 IOPS, 1 s subintervals: each of the five
    measured subintervals (1-5) counts 2,000 I/Os to 2 % (tests.slave.rates: with those a late
    loop moved over its boundaries), the five together 10,000 to 2 %, and the device's own
    count of reads over the same window (moved by when it was read) agrees with the tool's to
    2 % (200 reads; a LUN discovery that probes the device meanwhile reads 36 (ivypy) or 48
    (blkid) blocks of it once, measured here, and after that from the page cache)."""
    device = loop_device(64 * MIB)
    wid = f"t:{device.path}:paced"
    sub_ns = 1_000_000_000
    with WorkerPool(1) as pool:
        info = pool.create_workload(wid, device.path, "libaio",
                                    WorkloadParams(iodepth=4, iops=2000.0, seed=3))
        assert info.engine == "libaio"
        t0 = _start(pool, sub_ns)
        pool.collect(0, t0 + sub_ns + 2_000_000_000)  # subinterval 0: the start
        pool.keep_going()
        device0, at0 = _reads_completed(device), time.monotonic_ns()
        counts = []
        for k in range(1, 6):
            r = pool.collect(k, t0 + (k + 1) * sub_ns + 2_000_000_000)
            pool.keep_going()
            counts.append(_read_ops(r, wid))
        device1, at1 = _reads_completed(device), time.monotonic_ns()
        pool.stop()
    assert_kept(counts, [2000] * 5, 2000, what="subintervals 1-5")
    assert sum(counts) == pytest.approx(10_000, rel=0.02), counts
    # the device is read after collect returned, past the boundaries of subintervals 1 and 6
    # by a few ms (~10 I/Os) alone, by 190 ms once in a full suite (376 reads): its window is
    # the tool's moved by those two lags, which the paced rate turns into reads
    lag_s = ((at1 - (t0 + 6 * sub_ns)) - (at0 - (t0 + sub_ns))) / 1e9
    assert device1 - device0 == pytest.approx(sum(counts) + 2000 * lag_s, rel=0.02), (
        f"the device counted {device1 - device0} reads, the tool {sum(counts)}, the device "
        f"read {lag_s * 1e3:+.0f} ms later at the end than at the start")


# ====================================================================== submit calls
def _submit_calls(device: LoopDevice, call_trace: Callable[[int, int], CallTrace],
                  engine: str, params: WorkloadParams, limit: int) -> tuple[int, int]:
    """The worker's submit calls over 0.3 s of ``params`` on ``device``: how many carried
    I/Os, and how many carried more than ``limit`` (the kernel's counts). Its one subinterval
    ends soon after the trace: the call returns then."""
    wid = f"t:{device.path}:calls"
    sub_ns = 700_000_000
    with WorkerPool(1) as pool:
        info = pool.create_workload(wid, device.path, engine, params)
        assert info.engine == engine
        every = call_trace(pool.pids[0], 0)
        over = call_trace(pool.pids[0], limit)
        t0 = _start(pool, sub_ns)
        _sleep_until(t0 + 300_000_000)  # past the start
        every.start()
        over.start()
        _sleep_until(t0 + 600_000_000)
        every.stop()
        over.stop()
        r = pool.collect(0, t0 + sub_ns + 3_000_000_000)
        pool.stop()
    assert _read_ops(r, wid) > 10_000, "the workload hardly ran"
    assert every.dropped() == 0 and over.dropped() == 0
    return every.calls(), over.calls()


@pytest.mark.parametrize("engine", ["libaio", "io_uring"])
def test_paced_ios_go_out_one_to_a_call_seen_by_the_kernel(
    loop_device: LoopFactory, call_trace: Callable[[int, int], CallTrace],
    monkeypatch: pytest.MonkeyPatch, engine: str,
) -> None:
    """A paced workload at a rate where several I/Os fall due at once (Poisson arrivals at
    100,000 IOPS, queue depth 32): in the kernel's trace of the worker's submit calls
    (``io_submit``'s ``nr``, ``io_uring_enter``'s ``to_submit``) none carries more than
    ``tuning.PACED_PER_CALL`` (1) I/O. A call of more than 2 plugs the block layer, which holds
    the first requests until the last is in (docs/engine.md). The same workload with the limit
    lifted makes calls of more, so the trace would see them; and a max-iops workload still
    submits in batches (its throughput counts, not how soon one of a batch is queued)."""
    assert compiled_loop.available(), f"no compiled loop: {compiled_loop.why_not()}"
    device = loop_device(64 * MIB)
    paced = WorkloadParams(iosequencer="random_independent", iodepth=32, iops=100_000.0,
                           seed=5)
    limit = tuning.PACED_PER_CALL
    assert limit == 1
    calls, over = _submit_calls(device, call_trace, engine, paced, limit)
    assert calls > 3000 and over == 0, (calls, over)

    with monkeypatch.context() as m:
        m.setattr(tuning, "PACED_PER_CALL", 1 << 20)  # the worker forks with it
        calls, over = _submit_calls(device, call_trace, engine, paced, limit)
    assert over > 0, f"{calls} calls, none of more than {limit} I/O: the check cannot fail"

    calls, over = _submit_calls(device, call_trace, engine, WorkloadParams(iodepth=32, seed=6),
                                limit)
    assert over > 0, f"{calls} calls of the max-iops workload, none of more than {limit} I/O"


# ====================================================================== Poisson arrivals
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("sequencer", ["random_independent", "random_steady"])
def test_submission_gaps_of_poisson_and_steady_arrivals(
    loop_device: LoopFactory, block_trace: Callable[..., BlockTrace],
    monkeypatch: pytest.MonkeyPatch, sequencer: IoSequencerName, compiled: bool,
) -> None:
    """2,000 IOPS paced on a real device, the time each I/O actually reached the block layer
    traced (``block_bio_queue``, inside ``io_submit``), in the compiled paced loop and in the
    Python one.

    ``random_independent`` (Poisson arrivals): the gaps between submissions have a coefficient
    of variation (CV) of 0.9-1.2, a robust CV (1.4826 MAD / median: 1.03 for exponential gaps)
    of 0.9-1.2, and 1 - 1/e of them are shorter than the mean. ``random_steady``: a robust CV
    of at most 0.1, the median gap the period to 2 % (the Python loop: 0.9-1.4 and 0.2, below).
    Measured on the shared 2-core VM: Poisson CV 0.99-1.00, once 1.117 (robust 1.140) in the
    Python loop in a full suite (a submission sent late makes one long gap and a burst of short
    ones: both CVs grow; gaps of the wrong law read far off: uniform 0.58, steady 0); steady
    robust CV 0.00-0.04. While the hypervisor took the CPUs, 1.53 and 0.39 (a failure then is a
    skip: tests/slave/conftest.py).

    Steady's plain CV is reported, not held near 0: it is the host's. On the VM it read
    0.08-0.6, a few late starts each making one long gap and a burst, and the trace of the
    scheduler showed why: a timer that fired 280 us late on an idle vCPU, and the woken worker
    (``SCHED_FIFO``) waiting 0.35-1.3 ms for a neighbour's kernel code to give up the CPU (the
    kernel is ``PREEMPT_NONE``); the tool had asked for the right wake-up each time.

    The worker runs ``SCHED_FIFO`` (set from here; it is not pinned), so that ordinary tasks
    cannot hold it up: as an ordinary task it waited 13-39 ms of the 2 s on a run queue behind
    other test runs, and with both cores busy (two spinning processes) Poisson's CV read 1.2-2.4
    and steady's robust CV up to 461; as ``SCHED_FIFO``, Poisson's 1.00."""
    if compiled:
        assert compiled_loop.available(), f"no compiled paced loop: {compiled_loop.why_not()}"
    else:
        monkeypatch.setattr(tuning, "COMPILED_LOOP", False)  # the workers fork with it
    device = loop_device(64 * MIB)
    wid = f"t:{device.path}:{sequencer}"
    iops, window_s = 2000.0, 2.0
    sub_ns = 2_500_000_000  # the window (0.3-2.3 s) and 0.2 s past it
    with WorkerPool(cpus=[None]) as pool:
        info = pool.create_workload(wid, device.path, "libaio",
                                    WorkloadParams(iosequencer=sequencer, iodepth=8, iops=iops,
                                                   seed=11))
        assert info.engine == "libaio"
        worker = pool.pids[0]
        trace = block_trace(device, ("block_bio_queue",), clock="mono", submitter=worker)
        os.sched_setscheduler(worker, os.SCHED_FIFO, os.sched_param(1))
        t0 = _start(pool, sub_ns)
        _sleep_until(t0 + 300_000_000)  # past the start
        waited0 = _run_queue_wait_ns(worker)
        trace.start()
        _sleep_until(t0 + 300_000_000 + int(window_s * 1e9))
        trace.stop()
        waited_ms = (_run_queue_wait_ns(worker) - waited0) / 1e6
        r = pool.collect(0, t0 + sub_ns + 3_000_000_000)
        pool.stop()
    assert _read_ops(r, wid) == pytest.approx(iops * sub_ns / 1e9, rel=0.06)
    assert trace.dropped() == 0
    events = trace.events()
    assert all(e.sectors == SECTORS_PER_IO and e.rwbs.startswith("R") for e in events)
    submits_us = np.array([e.ts for e in events], dtype=np.float64)
    # Poisson: 4,000 arrivals expected, sd 63
    assert submits_us.size == pytest.approx(iops * window_s, rel=0.06)
    gaps_us = np.diff(submits_us)
    mean_us = float(gaps_us.mean())
    cv = float(gaps_us.std() / mean_us)
    median_us = float(np.median(gaps_us))
    robust_cv = 1.4826 * float(np.median(np.abs(gaps_us - median_us))) / median_us
    below = float((gaps_us < mean_us).mean())
    summary = (f"{gaps_us.size} gaps: mean {mean_us:.1f} us, median {median_us:.1f} us, CV "
               f"{cv:.3f}, robust CV {robust_cv:.3f}, {below:.3f} below the mean; p1/p50/p99 "
               f"{np.percentile(gaps_us, [1, 50, 99]).round(1).tolist()} us; the worker waited "
               f"{waited_ms:.1f} ms on a run queue")
    assert mean_us == pytest.approx(1e6 / iops, rel=0.06), summary
    # the Python loop's wider bounds: on 2026-11-30 the VM (alone, at this commit and at one of
    # a week before) read Poisson CVs of 1.20-1.26, robust 1.19-1.24, and steady robust CVs of
    # 0.10-0.12 in it, where the compiled loop stayed in the compiled bounds; each bound is
    # still far from the wrong law (uniform 0.58 and steady 0 against Poisson; Poisson 1.03
    # against steady)
    poisson_cv_max, steady_robust_cv_max = (1.2, 0.1) if compiled else (1.4, 0.2)
    if sequencer == "random_independent":
        assert 0.9 <= cv <= poisson_cv_max, summary
        assert 0.9 <= robust_cv <= poisson_cv_max, summary
        assert below == pytest.approx(1 - np.exp(-1), abs=0.03), summary
    else:
        assert robust_cv <= steady_robust_cv_max, summary
        assert median_us == pytest.approx(1e6 / iops, rel=0.02), summary
