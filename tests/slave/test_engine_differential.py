"""The compiled loop against the Python loop on real loop devices, the kernel as witness.

Randomized mixes of workloads (``tests.slave.mixes``: paced and max IOPS, queue depths 1-256,
read fractions, all three sequencers, every write-data kind, block sizes up to 64 KiB), each
workload on a loop device of its own, on libaio and on io_uring, run once through the compiled
loop (``paced_run``) and once through the Python loop (``tuning.COMPILED_LOOP`` off), each run
under the block layer's tracepoint ``block_bio_queue`` (``scripts/blocktrace.py``). The bios
reach each device in the order the loop submitted its I/Os (on io_uring, but for those the ring
hands to an io-wq worker, which reach the device a little later), so:

- both runs' I/O streams agree bio for bio (direction, sector, size) as far as the shorter
  one goes: the same draws of offsets, sizes and directions, in the same order (on io_uring,
  the same I/Os within a window of two queues);
- each run's own counts agree with its trace: the operations and bytes it recorded, per
  direction, are what the device was asked for, less at most two queues' worth around the
  stop (reaped past the last boundary, and submitted in their place: drained unrecorded).

Timing differs between the runs (how many I/Os each got through, when), so the streams are
compared as prefixes; the scheduled times of paced I/Os are the draws' business, checked bit
for bit against numpy's in ``test_engine_compiled_loop`` and ``test_sequencer``. Each run goes
on until every workload recorded ``IOS`` I/Os and, compiled, the kernel ran: judged on what it
did, not how fast, so the tests run beside the others (a loop held off the CPU does the same,
later), but for a case whose catch-up after such a hold the trace counts twice (``_beside``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import pytest

from protocol.params import IOSEQUENCERS, WRITE_DATA_KINDS, WorkloadParams
from protocol.stats import WorkloadStats
from scripts.blocktrace import TRACEFS, BlockTrace, kernel_dev
from slave.engine import files, tuning
from slave.engine.base import IoEngine, SlotTable
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine, UringEngine
from tests.slave import mixes
from tests.slave.conftest import LoopDevice, LoopFactory, count_kernel_runs, settle
from tests.slave.test_engine_compiled_loop import Control
from tests.slave.test_engine_lone_shallow import _compiled  # noqa: F401  (fails as root)

MiB = 1 << 20
#: randomized mixes, each run both ways: several workloads (the odd ones with an edit at the
#: first boundary), then a lone max-IOPS workload at QD 1-2 (the compiled loop's lone wait)
MIXES, LONE = 6, 2
CASES = MIXES + LONE
SUB_NS, N_SUB = 100_000_000, 2
#: the I/Os each workload records in each run (its trace holds at least those): the run goes
#: on, past ``N_SUB`` subintervals, until they are there
IOS = 50
ENGINES: dict[str, Callable[[SlotTable], IoEngine]] = {
    "libaio": LibaioEngine, "io_uring": UringEngine}
#: a loop device's requests in flight (its ``queue/nr_requests``, the loop driver's default)
LOOP_REQUESTS = 128


def _mix(case: int) -> list[WorkloadParams]:
    return mixes.mix(case, case >= MIXES)


def _edit(case: int, params: list[WorkloadParams]) -> WorkloadParams | None:
    return mixes.edit(case, params, case >= MIXES)


class _Run:
    """One run of a mix: each workload's recorded (operations, bytes) by direction, and each
    device's bios as the kernel saw them arrive."""

    def __init__(self, ops: npt.NDArray[np.int64], nbytes: npt.NDArray[np.int64],
                 bios: list[npt.NDArray[np.int64]], kernel_runs: int) -> None:
        self.ops = ops  # [workload, read/write]
        self.nbytes = nbytes
        self.bios = bios  # per workload: rows (writes, sector, sectors)
        self.kernel_runs = kernel_runs


def _run(devs: list[LoopDevice], params: list[WorkloadParams], edit: WorkloadParams | None,
         engine: str, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> _Run:
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    kernel_runs = count_kernel_runs(monkeypatch)
    loop = EngineLoop(capacity=sum(p.iodepth for p in params) + 16)
    loop.register_engine_kind(engine, ENGINES[engine])
    eng = loop.engine(engine)
    n = WorkloadStats.SIZE
    region = np.zeros(2 * n * len(params), dtype=np.int64)  # one region, as a worker's
    def at_boundary(lp: EngineLoop, finished: int, boundary_ns: int) -> None:
        if finished == 0 and edit is not None:
            lp.edit_workload(f"t:{devs[0].name}:w", edit, boundary_ns)

    def enough(c: Control) -> bool:
        # by count, not time: each workload's I/Os, and the compiled loop's turns
        done = [0] * len(params)
        for k, st in enumerate(c.stats):
            done[k % len(params)] += st.ops()
        return min(done) >= IOS and (kernel_runs[0] > 0 or not compiled)

    ctl = Control(N_SUB, at_boundary=at_boundary, until=enough)
    fds = []
    try:
        for i, (dev, p) in enumerate(zip(devs, params, strict=True)):
            pair = (WorkloadStats(region[2 * i * n : (2 * i + 1) * n]),
                    WorkloadStats(region[(2 * i + 1) * n : (2 * i + 2) * n]))
            pair[0].reset()
            pair[1].reset()
            ctl.per_workload.append(pair)
            fd = files.open_lun(dev.path, writable=p.writes, extra_flags=eng.open_flags)
            fds.append(fd)
            loop.add_workload(WorkloadSpec(f"t:{dev.name}:w", p, eng, fd, dev.size_bytes, 512,
                                           pair), None)
        settle()
        # this thread's bios only (it submits every I/O: io_submit and io_uring_enter queue
        # them in its own context): another process probing the devices is not the stream
        with BlockTrace([d.path for d in devs], buffer_mib_per_cpu=32,
                        pid=threading.get_native_id()) as bt:
            bt.start()
            try:
                loop.run(ctl, time.monotonic_ns() + 1_000_000, SUB_NS)
            finally:
                loop.close()
            bt.stop()
            bios = bt.bios()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    assert ctl.errors == {} and loop.in_flight == 0
    ops = np.zeros((len(params), 2), dtype=np.int64)
    nbytes = np.zeros((len(params), 2), dtype=np.int64)
    for k, st in enumerate(ctl.stats):
        w = k % len(params)
        for d in (0, 1):  # reads, writes
            ops[w, d] += sum(st.ops(cat) for cat in (d, d + 2))
            nbytes[w, d] += sum(int(st.counters[cat, 1]) for cat in (d, d + 2))
    return _Run(ops, nbytes, [bios.of(kernel_dev(d.path)) for d in devs], kernel_runs[0])


@pytest.fixture
def devices(loop_device: LoopFactory) -> Iterator[list[LoopDevice]]:
    if not (TRACEFS / "events" / "block" / "block_bio_queue").is_dir() and os.path.ismount(
            TRACEFS):
        pytest.fail(f"no block_bio_queue tracepoint under {TRACEFS}")
    yield [loop_device(16 * MiB) for _ in range(3)]


def _beside(case: int, engine: str) -> bool:
    """Whether the case runs beside the others: judged on the bios and counts, each run long
    enough by count (``IOS``), whatever the load. But not on io_uring with a workload deeper
    than a loop device's requests (case 1's, of depth 256): held off the CPU (some 60 ms at
    its 2,080 IOPS), it catches up with more I/Os in flight than the device has requests, and
    io_uring's nowait bios that find none fail and go out again from an io-wq worker, so the
    trace shows them twice (a hold of 300 ms made a thousand bios from io-wq workers; one of
    800 ms, 2,732 write bios for the 2,079 writes recorded: past the two queues' slack)."""
    return engine != "io_uring" or max(p.iodepth for p in _mix(case)) <= LOOP_REQUESTS


@pytest.mark.parametrize(("case", "engine"), [
    pytest.param(case, engine, marks=[pytest.mark.beside] if _beside(case, engine) else [])
    for case in range(CASES) for engine in sorted(ENGINES)])
def test_compiled_and_python_loops_send_the_same_ios(
        case: int, engine: str, devices: list[LoopDevice],
        monkeypatch: pytest.MonkeyPatch) -> None:
    params = _mix(case)
    devs = devices[: len(params)]
    edit = _edit(case, params)
    runs = {c: _run(devs, params, edit, engine, c, monkeypatch) for c in (True, False)}
    # the compiled run ran in the kernel, whatever the workloads' write data
    assert runs[False].kernel_runs == 0
    assert runs[True].kernel_runs > 0, [p.write_data for p in params]
    for w, p in enumerate(params):
        what = f"case {case} workload {w}: {p}, edited to {edit if w == 0 else None}"
        for r in runs.values():
            traced = r.bios[w]
            # every bio is one I/O of the workload's size, inside the device
            assert np.all(traced[:, 2] * 512 == p.blocksize_bytes), what
            assert np.all((traced[:, 1] + traced[:, 2]) * 512 <= devs[w].size_bytes), what
            # the run's counts against the kernel's: the device was asked for at most two
            # queues more (those reaped past the last boundary, discarded with the stop, and
            # those submitted in their place, which the stop drains)
            for d in (0, 1):
                asked = int((traced[:, 0] == d).sum())
                got = int(r.ops[w, d])
                assert got <= asked <= got + 2 * p.iodepth, (what, d, got, asked)
                assert r.nbytes[w, d] == got * p.blocksize_bytes, what
            assert traced.shape[0] >= IOS, what
        c, py = runs[True].bios[w], runs[False].bios[w]
        m = min(c.shape[0], py.shape[0])
        if engine == "libaio":  # io_submit queues each bio before it returns: in order
            same = np.all(c[:m] == py[:m], axis=1)
            first = int(np.argmin(same)) if not same.all() else m
            assert same.all(), (what, m, first, c[first : first + 3].tolist(),
                                py[first : first + 3].tolist())
        else:  # an I/O the ring cannot issue at once goes out from an io-wq worker, later
            window = 2 * p.iodepth + 8
            assert _contained(c[: m - window], py[:m]), what
            assert _contained(py[: m - window], c[:m]), what


def _contained(part: npt.NDArray[np.int64], whole: npt.NDArray[np.int64]) -> bool:
    """Whether every row of ``part`` is in ``whole``, as often as in ``part``."""
    have = collections.Counter(map(tuple, whole.tolist()))
    need = collections.Counter(map(tuple, part.tolist()))
    return all(have[k] >= n for k, n in need.items())


@pytest.mark.beside
def test_the_mixes_cover_what_they_claim() -> None:
    # over the cases: paced and max, shallow and deep, reads, writes and mixes, every
    # sequencer and write-data kind the mixes draw
    ps = [p for case in range(CASES) for p in _mix(case)]
    assert {p.iops is None for p in ps} == {True, False}
    edits = [(_mix(case)[0], _edit(case, _mix(case))) for case in range(CASES)]
    kinds = {(a.iops is None, b.iops is None) for a, b in edits if b is not None}
    assert kinds >= {(False, True), (True, False)}  # paced to max, max to paced
    assert [len(_mix(case)) == 1 and _mix(case)[0].iodepth <= 2 and _mix(case)[0].iops is None
            for case in range(MIXES, CASES)] == [True] * LONE
    assert min(p.iodepth for p in ps) <= 2 and max(p.iodepth for p in ps) >= 32
    assert {p.read_fraction for p in ps} >= {1.0, 0.0} and any(0 < p.read_fraction < 1
                                                               for p in ps)
    assert {p.iosequencer for p in ps} == set(IOSEQUENCERS)
    # every kind writes in the compiled loop: the mixes draw them all, blocks over 16 KiB too
    assert {p.write_data for p in ps if p.writes} == set(WRITE_DATA_KINDS)
    assert any(p.writes and p.blocksize_bytes > 16384 for p in ps)
