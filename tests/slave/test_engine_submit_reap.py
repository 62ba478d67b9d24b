"""The libaio engine's ``submit_reap``: one I/O's submission and the wait for a completion in
one compiled call (``slave/engine/paced_kernel.c``), used by the max-iops loop of queue depth
1-2 when it blocks. Real AIO on a file that takes O_DIRECT and on a loop device."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from protocol.errors import IoEngineError
from protocol.stats import WorkloadStats
from slave.engine import aio_abi, files, paced_kernel
from slave.engine import loop as loop_mod
from slave.engine.base import AlignedBuffers, SlotTable
from slave.engine.libaio import LibaioEngine
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.params import WorkloadParams
from tests.slave.conftest import LoopFactory, settle
from tests.slave.test_engine_libaio import Control

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _compiled() -> None:
    """Native AIO and the compiled kernel (gcc: ``scripts/test`` installs it) must be here when
    root runs the tests; without root their absence skips."""
    why = aio_abi.available() or paced_kernel.why_not()
    if why is None:
        return
    if os.geteuid() == 0:
        pytest.fail(f"as root this is a failure, not a skip: {why}")
    pytest.skip(f"{why}; not root, so skipped (as root this fails)")


def _reads(fd: int, offsets: list[int]) -> tuple[SlotTable, AlignedBuffers]:
    """One 4 KiB read slot of ``fd`` per offset (keep the buffers alive)."""
    table = SlotTable(len(offsets))
    bufs = AlignedBuffers(len(offsets), 4096)
    for slot, off in enumerate(offsets):
        table.rows[slot, aio_abi.W_OPCODE_FD] = aio_abi.opcode_fd_word(aio_abi.IOCB_CMD_PREAD, fd)
        table.rows[slot, aio_abi.W_BUF] = int(bufs.addr[slot])
        table.rows[slot, aio_abi.W_NBYTES] = 4096
        table.rows[slot, aio_abi.W_OFFSET] = off
    return table, bufs


def test_one_call_submits_the_slot_and_returns_its_completion(lun_file: str) -> None:
    data = np.random.default_rng(5).integers(0, 256, 16 * 4096, dtype=np.uint8)
    with open(lun_file, "r+b") as f:
        f.write(data.tobytes())
    fd = os.open(lun_file, os.O_RDONLY | os.O_DIRECT)
    table, bufs = _reads(fd, [3 * 4096, 11 * 4096])
    eng = LibaioEngine(table)
    try:
        assert eng.submit_reap is not None
        for slot, block in ((1, 11), (0, 3), (1, 11)):
            bufs.array[slot, :] = 0
            assert eng.submit_reap(slot, 500_000_000) == 1
            assert int(eng.done_slot[0]) == slot and int(eng.done_res[0]) == 4096
            assert np.array_equal(bufs.array[slot], data[block * 4096 : (block + 1) * 4096])
    finally:
        eng.close()
        os.close(fd)


def test_a_refused_submission_raises_with_its_errno(lun_file: str) -> None:
    fd = os.open(lun_file, os.O_RDONLY | os.O_DIRECT)
    table, _bufs = _reads(fd, [0])
    os.close(fd)  # the iocb's descriptor is gone: io_submit says EBADF
    eng = LibaioEngine(table)
    try:
        assert eng.submit_reap is not None
        with pytest.raises(IoEngineError, match="Bad file descriptor"):
            eng.submit_reap(0, 100_000_000)
    finally:
        eng.close()


def test_without_the_kernel_the_engine_has_none(
    lun_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paced_kernel, "_submit_reap_fn", None)  # as on a host without cc
    table, _bufs = _reads(0, [0])
    eng = LibaioEngine(table)
    try:
        assert eng.submit_reap is None
    finally:
        eng.close()


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


def _device_reads(name: str) -> int:
    with open(f"/sys/block/{name}/stat") as f:
        return int(f.read().split()[0])


@pytest.mark.parametrize("compiled", [True, False], ids=["scalar_run", "python+submit_reap"])
@pytest.mark.parametrize("iodepth", [1, 2])
def test_the_depth_one_loop_waits_through_it_and_leaves_nothing_behind(
    loop_device: LoopFactory, iodepth: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocking loop of depth 1-2 for a lone workload of reads, in C (``scalar_run``) or
    in Python with ``submit_reap``: every I/O resubmitted goes out with the next wait (or, at
    the end of a turn, on its own), the device completed exactly the reads recorded, nothing
    is left in flight, every subinterval recorded."""
    dev = loop_device(16 * MiB)
    calls = {"submit_reap": 0, "compiled turns": 0}
    real_sr: Callable[[LibaioEngine, int, int], int] = LibaioEngine._submit_reap
    real_turn = EngineLoop._loop_scalar_compiled

    def counting_sr(self: LibaioEngine, slot: int, timeout_ns: int) -> int:
        calls["submit_reap"] += 1
        return real_sr(self, slot, timeout_ns)

    def counting_turn(self: EngineLoop, *args: Any) -> int:
        calls["compiled turns"] += 1
        return real_turn(self, *args)

    monkeypatch.setattr(LibaioEngine, "_submit_reap", counting_sr)
    monkeypatch.setattr(EngineLoop, "_loop_scalar_compiled", counting_turn)
    monkeypatch.setattr(loop_mod, "COMPILED_SCALAR", compiled)
    loop = EngineLoop(capacity=16)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(dev.path, writable=False, extra_flags=eng.open_flags)
    stats = (WorkloadStats(), WorkloadStats())
    p = WorkloadParams(iodepth=iodepth, seed=9)
    loop.add_workload(WorkloadSpec("t:l:w", p, eng, fd, dev.size_bytes, 512, stats), None)
    ctl = _Control(4, stats)
    settle()  # udev's probe of the new device reads it too
    before = _device_reads(dev.name)
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, 50_000_000)
    finally:
        loop.close()
        os.close(fd)
    done = _device_reads(dev.name) - before
    assert loop.in_flight == 0
    assert len(ctl.per_sub) == 4 and all(n > 50 for n in ctl.per_sub), ctl.per_sub
    recorded = sum(ctl.per_sub)
    # not recorded: the reads the loop reaped past the last boundary (they belong to the
    # subinterval the stop discards) and those it had resubmitted, which the stop drains
    assert recorded <= done <= recorded + 2 * iodepth, (recorded, done)
    if compiled:
        assert calls["compiled turns"] > 0 and calls["submit_reap"] == 0, calls
    else:  # each reaped batch's last resubmission went out through it
        assert calls["compiled turns"] == 0, calls
        assert calls["submit_reap"] >= recorded // 2 > 0, (calls, recorded)


def test_a_submission_refused_inside_the_compiled_loop_raises_with_its_errno(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LUN's descriptor closed under the running loop, mid-subinterval: the C loop's next
    io_submit fails (SR_SUBMIT) and Python's submission of the held slot raises naming the
    errno, instead of the loop going on or hanging."""
    dev = loop_device(16 * MiB)
    loop = EngineLoop(capacity=16)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(dev.path, writable=False, extra_flags=eng.open_flags)
    stats = (WorkloadStats(), WorkloadStats())
    loop.add_workload(WorkloadSpec("t:l:w", WorkloadParams(iodepth=1), eng, fd,
                                   dev.size_bytes, 512, stats), None)
    codes: list[int] = []
    real = paced_kernel.scalar_function()
    assert real is not None

    def noting(addr: int) -> int:
        code = int(real(addr))
        codes.append(code)
        return code

    monkeypatch.setattr(paced_kernel, "scalar_function", lambda: noting)
    closer = threading.Timer(0.08, os.close, (fd,))  # in the second subinterval's middle
    closer.start()
    try:
        with pytest.raises(IoEngineError, match="Bad file descriptor"):
            loop.run(_Control(10, stats), time.monotonic_ns() + 1_000_000, 50_000_000)
    finally:
        closer.join()
        loop.close()
    assert codes[-1] == paced_kernel.SR_SUBMIT, codes[-5:]
    # it ran turns before (returning at control polls and boundaries)
    assert {paced_kernel.SR_WAKE, paced_kernel.SR_LATE} & set(codes[:-1]), codes[:5]
