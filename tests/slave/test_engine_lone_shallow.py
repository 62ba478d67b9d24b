"""A lone max-iops workload of reads at queue depth 1-2, blocking or polling (``busy_poll``),
in the compiled loop (``paced_run`` in ``slave/engine/ivy_loop.c``, its ``lone`` wait) and
in Python (the general loop, where the compiled loop cannot run): real libaio on a loop
device.

All but one need the machine (``alone``): the depth 1-2 loop's count in every 50 ms
subinterval, and whether a loop sleeps or looks. The refused submission, which waits for the
compiled loop's first boundary rather than for a time, runs beside the others (``beside``)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.engine import compiled_loop, files, native, tuning
from slave.engine.layout import LoopArgs
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine
from tests.slave.conftest import LoopDevice, LoopFactory, require_here, settle
from tests.slave.readwitness import ReadWitness
from tests.slave.test_engine_libaio import Control

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _compiled() -> None:
    """Native AIO and the compiled kernel (gcc: ``scripts/test`` installs it) must be here when
    root runs the tests; without root their absence skips."""
    require_here(native.aio_available() or compiled_loop.why_not())


class _Control(Control):
    """Counts each handed-over subinterval's I/Os."""

    def __init__(self, n: int, stats: tuple[WorkloadStats, WorkloadStats]) -> None:
        super().__init__(n)
        self.stats = stats
        self.per_sub: list[int] = []

    def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                    errors: dict[str, dict[str, int]]) -> None:
        assert errors == {}
        buf = self.stats[finished % 2]
        self.per_sub.append(buf.ops())
        if finished + 1 < self.n:
            buf.reset()


def _lone_reader(dev: LoopDevice, capacity: int, params: WorkloadParams
                 ) -> tuple[EngineLoop, int, tuple[WorkloadStats, WorkloadStats]]:
    """An engine loop of ``capacity`` slots on libaio with one read workload of ``params`` on
    ``dev``: the loop, the LUN's descriptor (the caller closes it) and the workload's two
    stats buffers, in one region as a worker's are (the compiled loop bins into it)."""
    loop = EngineLoop(capacity=capacity)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(dev.path, writable=False, extra_flags=eng.open_flags)
    region = np.zeros(2 * WorkloadStats.SIZE, dtype=np.int64)
    stats = (WorkloadStats(region[: WorkloadStats.SIZE]),
             WorkloadStats(region[WorkloadStats.SIZE :]))
    loop.add_workload(WorkloadSpec("t:l:w", params, eng, fd, dev.size_bytes, 512, stats), None)
    return loop, fd, stats


def _device_reads_of_run(dev: LoopDevice, loop: EngineLoop, fd: int, ctl: Control,
                         sub_ns: int, blocksize_bytes: int) -> int:
    """Run ``loop`` under ``ctl`` (subintervals of ``sub_ns``), then close it and the LUN's
    descriptor: the reads of ``blocksize_bytes`` the device did meanwhile."""
    settle()  # udev's probe of the new device reads it too
    witness = ReadWitness(dev.name)
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, sub_ns)
    finally:
        loop.close()
        os.close(fd)
    return witness.bytes() // blocksize_bytes


def _noting_runs(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> list[tuple[int, int]]:
    """The compiled loop's return codes and whether it ran as a lone workload's (``lone``),
    noted as it runs (``compiled``: whether it may run)."""
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    real = compiled_loop.run
    codes: list[tuple[int, int]] = []

    def noting(args: LoopArgs) -> int:
        code = real(args)
        codes.append((code, int(args.lone)))
        return code

    monkeypatch.setattr(compiled_loop, "run", noting)
    return codes


@pytest.mark.parametrize("busy_poll", [False, True], ids=["blocking", "busy_poll"])
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize("iodepth", [1, 2])
def test_the_depth_one_loop_records_every_read_and_leaves_nothing_behind(
    loop_device: LoopFactory, iodepth: int, compiled: bool, busy_poll: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through boundaries, control polls, the workload's next I/Os made as they run out and
    flushes (8,192 records): the device completed exactly the reads recorded, nothing is left
    in flight, every subinterval recorded; the compiled loop ran its turns, each as a lone
    workload's, or none ran."""
    dev = loop_device(16 * MiB)
    codes = _noting_runs(monkeypatch, compiled)
    p = WorkloadParams(iodepth=iodepth, seed=9, busy_poll=busy_poll)
    loop, fd, stats = _lone_reader(dev, 16, p)
    ctl = _Control(4, stats)
    done = _device_reads_of_run(dev, loop, fd, ctl, 50_000_000, p.blocksize_bytes)
    assert loop.in_flight == 0
    # every subinterval recorded some (how many is the machine's: with a CPU hog beside it the
    # last of 50 ms recorded 30 reads where the others recorded 1,100-2,500)
    assert len(ctl.per_sub) == 4 and all(n > 0 for n in ctl.per_sub), ctl.per_sub
    recorded = sum(ctl.per_sub)
    # not recorded: the reads the loop reaped past the last boundary (they belong to the
    # subinterval the stop discards) and those it had resubmitted, which the stop drains
    assert recorded <= done <= recorded + 2 * iodepth, (recorded, done)
    assert bool(codes) == compiled, codes[:5]
    assert all(lone == 1 for _, lone in codes), codes[:5]


def _sleeps() -> int:
    """How often this thread has slept (its voluntary context switches): a wait that blocks
    sleeps; a look in the completion ring that yields the core does not (the thread stays
    runnable: an involuntary switch, if any)."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
def test_busy_poll_looks_for_its_completions_instead_of_sleeping(
    loop_device: LoopFactory, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QD1 on a loop device over tmpfs: with ``busy_poll`` the loop's thread finds each
    completion by looking and sleeps a handful of times in the whole run (the start, the
    drain), where the blocking loop sleeps about once per read (measured with the spin set
    as here, either loop, alone or beside two CPU burners: 2-3 sleeps in 560-11,200 reads
    polling; 0.2-1 per read blocking).

    The spin (``BUSY_SPIN_NS``, after which polling blocks by design) is set past any read's
    time here, so that the check does not depend on the host's speed: on a slow day the loop
    device read in 98 us at QD1 (fio: 7,610 IOPS), about the default spin, and the general
    loop's polling then blocked for one read in four (CI, 2026-11-28: 622 sleeps in 2,594
    reads). The general loop's blocking wait looks in the ring before it blocks (its
    ``Waiter``, for AWAIT_SPIN_NS); that look is turned off here, so that a loop that ignored
    ``busy_poll`` would sleep as the blocking one does. With both cores loaded by other
    processes the blocking loop, preempted, often finds its completion there when it runs
    again (0.2 sleeps per read seen), hence the relative bound."""
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    monkeypatch.setattr(tuning, "BUSY_SPIN_NS", 20_000_000)
    monkeypatch.setattr(tuning, "AWAIT_SPIN_NS", 0)
    dev = loop_device(16 * MiB)
    sleeps: dict[bool, tuple[int, int]] = {}
    for busy in (False, True):
        p = WorkloadParams(iodepth=1, seed=3, busy_poll=busy)
        loop, fd, stats = _lone_reader(dev, 16, p)
        ctl = _Control(3, stats)
        before = _sleeps()
        _device_reads_of_run(dev, loop, fd, ctl, 100_000_000, p.blocksize_bytes)
        sleeps[busy] = (_sleeps() - before, sum(ctl.per_sub))
    (blocked, reads_blocking), (polled, reads_polling) = sleeps[False], sleeps[True]
    # (polling in Python yields after each empty look: with four busy processes on the two
    # cores each yield gave them the core for a while, and it read only ~70 reads in 0.3 s)
    assert reads_blocking > 50 and reads_polling > 50, sleeps
    assert blocked > reads_blocking // 20, sleeps  # the blocking loop sleeps in its waits
    # and the polling one a tenth as often per read at most (a few times in all when idle)
    assert polled * reads_blocking * 10 < blocked * reads_polling, sleeps


@pytest.mark.beside
def test_a_submission_refused_inside_the_compiled_loop_raises_with_its_errno(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LUN's descriptor closed under the running loop, once the compiled loop has come
    back at a boundary (by a thread that waits for that, not for a time: a loop held off the
    CPU meets the close later, never before its first turn ends): the C loop's next
    io_submit fails (R_SUBMIT) and Python's learning why raises naming the errno, instead of
    the loop going on or hanging. No control polls and no refill of the workload's ring from
    Python (each a way back to Python, which could meet the closed descriptor first; a
    boundary's way back uses no descriptor)."""
    dev = loop_device(16 * MiB)
    loop, fd, stats = _lone_reader(dev, 16, WorkloadParams(iodepth=1))
    noted = _noting_runs(monkeypatch, True)
    monkeypatch.setattr(tuning, "POLL_CONTROL_NS", 10_000_000_000)
    # and a ring of precomputed I/Os too long to run out in the test: a refill's slot goes
    # out from Python (at 120,000 IOPS, a 2,048-I/O ring ran out every 17 ms, and once in a
    # full run the descriptor was closed during a refill, so Python's submission raised first)
    monkeypatch.setattr(tuning, "RING_MIN", 1 << 16)
    boundary = {compiled_loop.R_WAKE, compiled_loop.R_LATE}

    def close_after_a_boundary() -> None:
        deadline = time.monotonic() + 10
        while not boundary & {code for code, _ in noted} and time.monotonic() < deadline:
            time.sleep(0.001)
        os.close(fd)

    closer = threading.Thread(target=close_after_a_boundary)
    closer.start()
    try:  # (up to 10 s of subintervals: the close ends the run long before)
        with pytest.raises(IoEngineError, match="Bad file descriptor"):
            loop.run(_Control(200, stats), time.monotonic_ns() + 1_000_000, 50_000_000)
    finally:
        closer.join()
        loop.close()
    codes = [code for code, _ in noted]
    assert codes[-1] == compiled_loop.R_SUBMIT, codes[-5:]
    # it ran turns before (returning at the first boundary)
    assert {compiled_loop.R_WAKE, compiled_loop.R_LATE} & set(codes[:-1]), codes[:5]
