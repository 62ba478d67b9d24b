"""An engine loop's AIO context is sized to what its workloads need and grows with them.

Before, every engine loop asked ``io_setup`` for 8,192 events: with the default
``fs.aio-max-nr`` of 65,536 only 8 loops in a kernel had a context, and the rest ran on the
thread pool through the page cache while the run still said libaio. Now a context holds twice
the loop's slots in use (at least 64 events), grows at the boundary where a workload joins or
deepens (the I/Os in flight reaped first, the workloads going on where they were), and a
context the kernel will not give is a refusal naming the limit and the value it needs.

The sizes and the refusal's words are pure: they run beside the others (``beside``). The rest
need the machine (``alone``): a paced workload's rate in each 0.1 s, the machine's count of AIO
events in use (``fs.aio-nr``, which every other test's contexts move) and its limit
(``fs.aio-max-nr``, lowered for every other test too).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.engine import files, native
from slave.engine.base import SlotTable
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import MIN_AIO_EVENTS, LibaioEngine, aio_events_for
from slave.worker import WorkerError
from slave.worker_backend import WorkerBackend
from tests.slave.conftest import LoopFactory, require_here, settle
from tests.slave.readwitness import ReadWitness
from tests.slave.test_engine_libaio import Control

MiB = 1 << 20


@pytest.mark.beside
@pytest.mark.parametrize(("in_use", "capacity", "want"), [
    (0, 8192, MIN_AIO_EVENTS),
    (1, 8192, 64),
    (32, 8192, 64),  # twice the slots: an edit's retired in-flight I/Os beside the new ones
    (33, 8192, 128),
    (100, 8192, 256),
    (4096, 8192, 8192),
    (5000, 8192, 8192),  # never more than the loop's slots
    (40, 64, 64),
])
def test_a_context_holds_twice_the_slots_in_use(in_use: int, capacity: int, want: int) -> None:
    assert aio_events_for(in_use, capacity) == want


def _proc(tmp_path: Path, limit: int, used: int) -> dict[str, str]:
    (tmp_path / "max").write_text(f"{limit}\n")
    (tmp_path / "nr").write_text(f"{used}\n")
    return {"max_nr_path": str(tmp_path / "max"), "nr_path": str(tmp_path / "nr")}


@pytest.mark.beside
def test_the_limit_refusal_names_the_limit_the_use_and_the_value_needed(tmp_path: Path) -> None:
    text = native.setup_failure(512, errno.EAGAIN, **_proc(tmp_path, 65536, 65400))
    assert "fs.aio-max-nr is 65,536 events" in text
    assert "65,400 are in use" in text
    assert "needs at least 65,912" in text
    assert "sysctl -w fs.aio-max-nr=131072" in text


@pytest.mark.beside
def test_other_setup_failures_say_only_what_failed(tmp_path: Path) -> None:
    text = native.setup_failure(64, errno.ENOSYS, **_proc(tmp_path, 65536, 0))
    assert text.startswith("io_setup(64) failed") and "aio-max-nr" not in text
    missing = {"max_nr_path": str(tmp_path / "none"), "nr_path": str(tmp_path / "none")}
    assert "raise it" in native.setup_failure(64, errno.EAGAIN, **missing)


@pytest.fixture
def native_aio() -> None:
    require_here(native.aio_available())


def _aio_nr() -> int:
    return int(Path(native.AIO_NR_PATH).read_text())


@contextlib.contextmanager
def _aio_limit(headroom: int) -> Iterator[int]:
    """``fs.aio-max-nr`` lowered to what is in use now plus ``headroom`` events, and put back
    whatever happens (root)."""
    if os.geteuid() != 0:
        pytest.skip("lowering fs.aio-max-nr needs root (as root this runs)")
    path = Path(native.AIO_MAX_NR_PATH)
    old = path.read_text()
    limit = _aio_nr() + headroom
    path.write_text(f"{limit}\n")
    try:
        yield limit
    finally:
        path.write_text(old)


class _Editing(Control):
    """Counts each subinterval's I/Os per workload and applies ``changes[k]`` (a callable on
    the loop and the boundary time) at the end of subinterval ``k``."""

    def __init__(self, n: int, stats: dict[str, tuple[WorkloadStats, WorkloadStats]],
                 changes: dict[int, object]) -> None:
        super().__init__(n)
        self.stats = stats
        self.changes = changes
        self.per_sub: list[dict[str, int]] = []
        self.rooms: list[int] = []

    def boundary(self, loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        change = self.changes.get(finished)
        if change is not None:
            with loop.changes():
                change(loop, boundary_ns)  # type: ignore[operator]
        self.rooms.append(loop.engine("libaio").room)  # type: ignore[attr-defined]
        super().boundary(loop, finished, boundary_ns)

    def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                    errors: dict[str, dict[str, int]]) -> None:
        assert errors == {}
        counts = {}
        for wid, (a, b) in self.stats.items():
            buf = (a, b)[finished % 2]
            counts[wid] = buf.ops()
            if finished + 1 < self.n:
                buf.reset()
        self.per_sub.append(counts)


def test_the_context_grows_at_a_boundary_and_every_read_is_counted_once(
        native_aio: None, loop_device: LoopFactory) -> None:
    """A max-IOPS reader at QD4 beside a paced one starts on a 64-event context; an edit to
    QD100 and a third workload at QD200 grow it at their boundaries (the I/Os in flight reaped
    and recorded first). Every subinterval has I/O from every workload, the paced one keeps
    its rate, nothing is left in flight, and the device read exactly what was recorded (less
    what the stop drained). Before, a batch reaped past the boundary was recorded from the new
    context's events: reads of 0 bytes, counted as short."""
    dev = loop_device(64 * MiB)
    loop = EngineLoop(capacity=8192)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(dev.path, writable=False, extra_flags=eng.open_flags)
    stats = {w: (WorkloadStats(), WorkloadStats()) for w in ("t:l:max", "t:l:paced", "t:l:late")}
    pmax = WorkloadParams(iodepth=4, seed=1)
    paced = WorkloadParams(iodepth=8, iops=2000.0, seed=2)

    def spec(wid: str, p: WorkloadParams) -> WorkloadSpec:
        return WorkloadSpec(wid, p, eng, fd, dev.size_bytes, 512, stats[wid])

    loop.add_workload(spec("t:l:max", pmax), None)
    loop.add_workload(spec("t:l:paced", paced), None)
    assert eng.room == 64  # 12 slots: the smallest context, not 8,192
    changes = {
        0: lambda lp, at: lp.edit_workload("t:l:max", pmax.replace(iodepth=100), at),
        1: lambda lp, at: lp.add_workload(spec("t:l:late", pmax.replace(iodepth=200, seed=3)),
                                          at),
    }
    ctl = _Editing(4, stats, changes)
    settle()
    witness = ReadWitness(dev.name)
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, 100_000_000)
    finally:
        loop.close()
        os.close(fd)
    done = witness.bytes() // pmax.blocksize_bytes
    assert loop.in_flight == 0
    # 100 + 8 + the 4 retired (in flight), twice -> 256; then 100 + 8 + 200, twice -> 1024
    assert ctl.rooms == [256, 1024, 1024, 1024], ctl.rooms
    assert len(ctl.per_sub) == 4
    for k, counts in enumerate(ctl.per_sub):
        assert counts["t:l:max"] > 50, (k, ctl.per_sub)
        assert 150 <= counts["t:l:paced"] <= 250, (k, ctl.per_sub)  # 2,000 IOPS for 0.1 s
        assert (counts["t:l:late"] > 50) == (k >= 2), (k, ctl.per_sub)
    recorded = sum(sum(c.values()) for c in ctl.per_sub)
    # uncounted: a batch reaped past the last boundary and what the stop drained, each at
    # most every I/O in flight
    assert recorded <= done <= recorded + 2 * (100 + 200 + 8), (recorded, done, ctl.per_sub)


def test_a_loop_holds_only_the_events_it_needs(native_aio: None, lun_file: str) -> None:
    """Eight loops of two QD16 workloads hold 8 x 64 events of ``fs.aio-max-nr``, where eight
    loops held 65,536 (the whole default limit) before."""
    before = _aio_nr()
    loops = []
    try:
        for _ in range(8):
            loop = EngineLoop()
            loop.register_engine_kind("libaio", LibaioEngine)
            eng = loop.engine("libaio")
            fd = files.open_lun(lun_file, writable=False, extra_flags=eng.open_flags)
            loops.append((loop, fd))
            for i in range(2):
                loop.add_workload(WorkloadSpec(f"t:l:w{i}", WorkloadParams(iodepth=16), eng, fd,
                                               16 * MiB, 512, (WorkloadStats(), WorkloadStats())),
                                  None)
            assert eng.room == 64  # type: ignore[attr-defined]
        assert _aio_nr() - before <= 8 * 64  # other processes' contexts may come and go
    finally:
        for loop, fd in loops:
            loop.close()
            os.close(fd)


@pytest.fixture
def one_worker() -> Iterator[WorkerBackend]:
    backend = WorkerBackend(1)
    try:
        yield backend
    finally:
        backend.close()


def test_a_lun_that_cannot_have_its_context_is_refused_unless_the_fallback_is_allowed(
        native_aio: None, one_worker: WorkerBackend, loop_device: LoopFactory) -> None:
    """With ``fs.aio-max-nr`` nearly reached, a block device's workload whose context cannot
    grow is refused, naming the LUN, the limit and the value needed; it never runs on the
    thread pool unasked. With the fallback allowed it runs there, and says so."""
    from slave.luns import describe_block_device

    dev = loop_device(16 * MiB)
    lun = describe_block_device(dev.path)
    with _aio_limit(headroom=100):
        info = one_worker.create("h:l:small", lun, WorkloadParams(iodepth=16))
        assert info["engine"] == "libaio" and "warning" not in info  # 64 events fit
        with pytest.raises(WorkerError) as refused:
            one_worker.create("h:l:deep", lun, WorkloadParams(iodepth=200))
        text = str(refused.value)
        assert dev.path in text and "the libaio engine is unavailable" in text
        assert "fs.aio-max-nr is" in text and "sysctl -w fs.aio-max-nr=" in text
        assert "allow_engine_fallback: true" in text
        assert set(one_worker.pool.workloads) == {"h:l:small"}
        info = one_worker.create("h:l:deep", lun, WorkloadParams(iodepth=200), fallback=True)
        assert info["engine"] == "threadpool"
        assert "allow_engine_fallback" in info["warning"] and "fs.aio-max-nr" in info["warning"]
        assert "page cache" in info["warning"]
        with pytest.raises(WorkerError, match="the libaio engine is unavailable"):
            one_worker.create("h:l:asked", lun, WorkloadParams(iodepth=200), engine="libaio",
                              fallback=True)  # the fallback is for auto only


def test_io_setup_refused_is_an_engine_error_with_the_fix(native_aio: None) -> None:
    with _aio_limit(headroom=10), pytest.raises(IoEngineError, match=r"sysctl -w fs\.aio-max-nr"):
        eng = LibaioEngine(SlotTable(1024))
        eng.grow(512)  # a context of 1,024 events
