"""A lone max-iops read workload deeper than the depth 1-2 loop's, in the compiled loop
(``paced_run`` in ``slave/engine/ivy_loop.c``) and, where that cannot run, in Python
(the general loop): real libaio on a loop device."""

from __future__ import annotations

import os
import threading
import time

import pytest

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.engine import compiled_loop, tuning
from slave.engine.layout import LoopArgs
from slave.engine.loop import EngineLoop
from slave.engine.loop_native import NativeLoop
from tests.slave.conftest import LoopFactory
from tests.slave.test_engine_lone_shallow import (
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


def _noting_runs(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> list[int]:
    """The compiled loop's return codes, noted as it runs (``compiled``: whether it may)."""
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    real = compiled_loop.run
    codes: list[int] = []

    def noting(args: LoopArgs) -> int:
        code = real(args)
        codes.append(code)
        return code

    monkeypatch.setattr(compiled_loop, "run", noting)
    return codes


@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize("iodepth", [3, 32])
def test_a_lone_deep_reader_records_every_read_and_leaves_nothing_behind(
    loop_device: LoopFactory, iodepth: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through boundaries, control polls, the I/Os generated as they run out and the
    records' flushes: the device completed exactly the reads recorded, nothing is left in
    flight, every
    subinterval recorded; the service times add up to no more than the queue depth's time
    over the run (each read's submit -> reap inside it, at most ``iodepth`` at once) and, the
    queue being kept full, to more than half of it (a submit stamp taken late or a completion
    stamp early reads short); the compiled loop ran its turns, or none ran."""
    dev = loop_device(64 * MiB)
    codes = _noting_runs(monkeypatch, compiled)
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
    if compiled:  # it came back at the boundaries, never for an I/O of another workload
        assert compiled_loop.R_WAKE in codes and compiled_loop.R_STRAY not in codes, codes[:5]


@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
def test_a_refused_resubmission_raises_with_its_errno_at_once(
    loop_device: LoopFactory, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LUN's descriptor closed under the running loop, mid-subinterval: the next
    io_submit fails (in C: R_SUBMIT) and Python's submission of that batch raises naming the
    errno, instead of the loop going on or hanging; and the stop does not wait for the
    batch that was never resubmitted (before, it waited a second for those I/Os and raised
    "the LUN does not answer" in place of the real error)."""
    dev = loop_device(16 * MiB)
    codes = _noting_runs(monkeypatch, compiled)
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
        assert codes[-1] == compiled_loop.R_SUBMIT, codes[-5:]
        assert compiled_loop.R_WAKE in codes[:-1], codes[:5]  # it ran turns before
    else:
        assert not codes


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


def test_edits_hand_the_workload_back_and_load_it_again_counting_every_read_once(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone reader at QD8 in the compiled loop, then paced (an edit of more than the rate:
    the set is given back, its slots and I/Os taken back, and loaded again), then at max IOPS
    again, then deeper (QD16, new slots while the old ones finish): every subinterval has I/O,
    nothing is left in flight, and the device read what was recorded (less the reads the stop
    drained, which no subinterval counts)."""
    dev = loop_device(64 * MiB)
    codes = _noting_runs(monkeypatch, True)
    loads: list[int] = []
    load = NativeLoop.load

    def counted_load(self: NativeLoop) -> None:
        loads.append(len(self.ws))
        load(self)

    monkeypatch.setattr(NativeLoop, "load", counted_load)
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
    assert len(loads) >= 4, loads  # the first set, after each of the three edits
    assert compiled_loop.R_WAKE in codes, sorted(set(codes))
