"""A lone max-iops read workload's ring of iocbs, in C (``ring_run`` in
``slave/engine/paced_kernel.c``) and in Python (``EngineLoop._loop_ring``): real libaio on a
loop device."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from protocol.errors import IoEngineError
from protocol.stats import WorkloadStats
from slave.engine import paced_kernel, tuning
from slave.engine.base import SubmitError
from slave.engine.loop import EngineLoop
from slave.params import WorkloadParams
from tests.slave.conftest import LoopFactory
from tests.slave.test_engine_scalar_run import (
    _compiled,
    _Control,
    _device_reads_of_run,
    _lone_reader,
)

MiB = 1 << 20
_ = _compiled  # the autouse fixture: native AIO and the compiled kernel, or fail as root


class _ServiceControl(_Control):
    """Notes each handed-over subinterval's sum of random reads' service times too."""

    def __init__(self, n: int, stats: tuple[WorkloadStats, WorkloadStats]) -> None:
        super().__init__(n, stats)
        self.service_ns: list[int] = []

    def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                    errors: dict[str, dict[str, int]]) -> None:
        self.service_ns.append(int(self.stats[finished % 2].lat[0, 0, 0]))
        super().handed_over(loop, finished, sw, ho, errors)


def _noting_ring_function(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The compiled ring loop's return codes, noted as it runs."""
    real = paced_kernel.ring_function()
    assert real is not None
    codes: list[int] = []

    def noting(addr: int) -> int:
        code = int(real(addr))
        codes.append(code)
        return code

    monkeypatch.setattr(paced_kernel, "ring_function", lambda: noting)
    return codes


@pytest.mark.parametrize("compiled", [True, False], ids=["ring_run", "python"])
@pytest.mark.parametrize("iodepth", [3, 32])
def test_the_ring_loop_records_every_read_and_leaves_nothing_behind(
    loop_device: LoopFactory, iodepth: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through boundaries, control polls, refills of the ring and flushes (``FLUSH_AT``):
    the device completed exactly the reads recorded, nothing is left in flight, every
    subinterval recorded; the service times add up to no more than the queue depth's time
    over the run (each read's submit -> reap inside it, at most ``iodepth`` at once) and, the
    queue being kept full, to more than half of it (a submit stamp taken late or a completion
    stamp early reads short); the compiled loop ran its turns (after the slots the ring adopted at
    its start completed in Python), or none ran."""
    dev = loop_device(64 * MiB)
    codes = _noting_ring_function(monkeypatch)
    monkeypatch.setattr(tuning, "COMPILED_RING", compiled)
    p = WorkloadParams(iodepth=iodepth, seed=5)
    loop, fd, stats = _lone_reader(dev, 64, p)
    n_subs, sub_ns = 5, 100_000_000
    ctl = _ServiceControl(n_subs, stats)
    service_ns = ctl.service_ns
    done = _device_reads_of_run(dev, loop, fd, ctl, sub_ns, p.blocksize_bytes)
    assert loop.in_flight == 0
    assert len(ctl.per_sub) == n_subs and all(n > 200 for n in ctl.per_sub), ctl.per_sub
    recorded = sum(ctl.per_sub)
    # not recorded: the reads reaped past the last boundary (the stop discards their
    # subinterval) and those resubmitted for them, which the stop drains
    assert recorded <= done <= recorded + 2 * iodepth, (recorded, done)
    # every read recorded was submitted after the start and reaped before the last boundary
    # (one subinterval's sum may hold more: reads submitted in the one before)
    busy = sum(service_ns) / (iodepth * n_subs * sub_ns)
    assert 0.5 < busy <= 1.0, (busy, [x / sub_ns for x in service_ns], ctl.per_sub)
    assert bool(codes) == compiled, codes[:5]
    if compiled:  # it refilled the ring; and where the ring is longer than the records (QD32:
        # 16,384 I/Os), it flushed them where a subinterval held more than twice as many (the
        # records are flushed at every boundary and refill too)
        assert paced_kernel.RR_REFILL in codes, sorted(set(codes))
        if iodepth * tuning.RING_PER_DEPTH > tuning.FLUSH_AT and max(
                ctl.per_sub[1:]) > 2 * tuning.FLUSH_AT:
            assert paced_kernel.RR_FLUSH in codes, (sorted(set(codes)), ctl.per_sub)


@pytest.mark.parametrize("compiled", [True, False], ids=["ring_run", "python"])
def test_a_refused_resubmission_raises_with_its_errno_at_once(
    loop_device: LoopFactory, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LUN's descriptor closed under the running loop, mid-subinterval: the ring's next
    io_submit fails (in C: RR_SUBMIT) and Python's submission of that batch raises naming the
    errno, instead of the loop going on or hanging; and the stop does not wait for the
    batch that was never resubmitted (before, it waited a second for those I/Os and raised
    "the LUN does not answer" in place of the real error)."""
    dev = loop_device(16 * MiB)
    codes = _noting_ring_function(monkeypatch)
    monkeypatch.setattr(tuning, "COMPILED_RING", compiled)
    loop, fd, stats = _lone_reader(dev, 16, WorkloadParams(iodepth=8))
    fired: list[float] = []

    def close_now() -> None:
        fired.append(time.monotonic())
        os.close(fd)

    closer = threading.Timer(0.08, close_now)  # in the second subinterval's middle
    closer.start()
    try:
        with pytest.raises(IoEngineError, match="Bad file descriptor") as raised:
            loop.run(_Control(10, stats), time.monotonic_ns() + 1_000_000, 50_000_000)
        stopped = time.monotonic()
    finally:
        closer.join()
        loop.close()
    assert not getattr(raised.value, "__notes__", None), raised.value.__notes__
    assert stopped - fired[0] < 0.5  # no second's wait for I/Os never submitted
    if compiled:
        assert codes[-1] == paced_kernel.RR_SUBMIT, codes[-5:]
        assert paced_kernel.RR_WAKE in codes[:-1], codes[:5]  # it ran turns before
    else:
        assert not codes


def test_a_resubmission_refused_part_way_is_the_rings_for_what_went_out(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaped batch's resubmission goes out in part (the kernel takes the first of its
    iocbs), then the LUN's descriptor closes and the rest is refused: the run raises naming
    the errno. Those that went out are the ring's, so the stop records them as its own (when
    they were not, its check that it reaped only I/Os it had in flight raised an
    AssertionError in place of the real error: once in a full run, the descriptor closing
    inside the C loop's io_submit), and it does not wait for the rest. The Python ring loop,
    whose submission call the test can cut short (the C loop's is the same bookkeeping:
    ``EngineLoop._ring_submit_rest``)."""
    dev = loop_device(16 * MiB)
    monkeypatch.setattr(tuning, "COMPILED_RING", False)
    loop, fd, stats = _lone_reader(dev, 16, WorkloadParams(iodepth=8))
    eng = loop.engine("libaio")
    fast, c_sys, c_ctx = eng.submit_fast_args()  # type: ignore[attr-defined]
    calls = [0]
    cut: list[tuple[int, int]] = []
    fired: list[float] = []

    def cutting(sys_nr: object, ctx: object, count: ctypes.c_long,
                ptrs: ctypes.c_void_p) -> int:
        calls[0] += 1
        n = count.value
        if cut or calls[0] < 2000 or n < 2:
            return int(fast(sys_nr, ctx, count, ptrs))
        took = int(fast(sys_nr, ctx, ctypes.c_long(n // 2), ptrs))
        cut.append((took, n))
        fired.append(time.monotonic())
        os.close(fd)
        return took

    monkeypatch.setattr(eng, "submit_fast_args", lambda: (cutting, c_sys, c_ctx))
    try:
        with pytest.raises(IoEngineError, match="Bad file descriptor") as raised:
            loop.run(_Control(100, stats), time.monotonic_ns() + 1_000_000, 50_000_000)
        stopped = time.monotonic()
    finally:
        loop.close()
        if not cut:
            os.close(fd)
    assert cut and cut[0][0] == cut[0][1] // 2 > 0, cut
    assert isinstance(raised.value, SubmitError) and raised.value.submitted == cut[0][0]
    assert not getattr(raised.value, "__notes__", None), raised.value.__notes__
    assert loop.in_flight == 0
    assert stopped - fired[0] < 0.5  # no second's wait for I/Os never submitted


class _EditingControl(_Control):
    """Applies ``edits[k]`` to the loop at the end of subinterval ``k``."""

    def __init__(self, n: int, stats: tuple[WorkloadStats, WorkloadStats],
                 edits: dict[int, WorkloadParams]) -> None:
        super().__init__(n, stats)
        self.edits = edits

    def boundary(self, loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        if finished in self.edits:
            loop.edit_workload("t:l:w", self.edits[finished], boundary_ns)
        super().boundary(loop, finished, boundary_ns)


def test_edits_take_the_workload_off_the_compiled_ring_and_back_counting_every_read_once(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone reader at QD8 on the compiled ring, then paced (it leaves the ring: drained,
    its slots reissued), then at max IOPS again (a new ring, which adopts the paced loop's
    slots and hands over to C once they complete), then deeper (QD16, another new ring): every
    subinterval has I/O, nothing is left in flight, and the device read what was recorded
    (less the reads the stop drained, which no subinterval counts)."""
    dev = loop_device(64 * MiB)
    codes = _noting_ring_function(monkeypatch)
    entered: list[int] = []
    enter = EngineLoop._enter_ring

    def counted_enter(self: EngineLoop, w: object) -> object:
        entered.append(1)
        return enter(self, w)  # type: ignore[arg-type]

    monkeypatch.setattr(EngineLoop, "_enter_ring", counted_enter)
    p = WorkloadParams(iodepth=8, seed=3)
    loop, fd, stats = _lone_reader(dev, 64, p)
    edits = {0: p.replace(iops=5000.0), 1: p, 2: p.replace(iodepth=16)}
    ctl = _EditingControl(4, stats, edits)
    done = _device_reads_of_run(dev, loop, fd, ctl, 100_000_000, p.blocksize_bytes)
    assert loop.in_flight == 0
    assert len(ctl.per_sub) == 4 and all(n > 200 for n in ctl.per_sub), ctl.per_sub
    assert 375 <= ctl.per_sub[1] <= 625  # the paced subinterval: 5,000 IOPS for 0.1 s
    recorded = sum(ctl.per_sub)
    assert recorded <= done <= recorded + 2 * 16, (recorded, done, ctl.per_sub)
    assert len(entered) >= 3, entered  # the first ring, after the paced one, after QD16
    assert paced_kernel.RR_WAKE in codes, sorted(set(codes))
