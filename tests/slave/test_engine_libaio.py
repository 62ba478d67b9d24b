"""Real engines (libaio, thread pool): data written lands byte for byte at the expected offsets;
the kernel AIO wrapper; engine choice and its fallback warning.

The tests judged on what the engine did (bytes, errors, counts of I/Os done) run beside the
others (``beside``): each run goes on until enough I/O is done (``Control``'s ``until``), so
that a loop held off the CPU does the same I/O, only later. The depth 1-2 loop's count in every
60 ms subinterval and the paced workload's rate need the machine (``alone``)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pytest

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave import engine as engine_mod
from slave.datapattern import WritePattern
from slave.engine import choose_engine, compiled_loop, files, layout, native, tuning
from slave.engine.base import AlignedBuffers, SlotTable, SubmitError
from slave.engine.layout import LoopArgs
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine
from slave.engine.threadpool import ThreadPoolEngine

MiB = 1 << 20


@pytest.fixture
def _native_aio() -> None:
    """Native AIO must work here when root runs the tests; otherwise its absence skips."""
    why = native.aio_available()
    if why is None:
        return
    if os.geteuid() == 0:
        pytest.fail(f"no native AIO here, and as root that is a failure, not a skip: {why}")
    pytest.skip(f"no native AIO here ({why}); not root, so skipped (as root this fails)")


needs_aio = pytest.mark.usefixtures("_native_aio")


class Control:
    """Stops after ``n`` subintervals; the I/O errors handed over, summed.

    With ``until``, a run judged on what it did rather than how fast: it goes on past ``n``
    until ``until()`` holds at a boundary (on what was handed over by then: the subinterval
    just ended is not yet), at most ``most`` subintervals, so that a loop held off the CPU
    by other work does the same I/Os, only later.

    ``adding``: (a workload's pair of stats blocks, its total) each: the block of the
    subinterval handed over is added to the total and reset."""

    def __init__(self, n: int, until: Callable[[], bool] | None = None, most: int = 100,
                 adding: Iterable[tuple[tuple[WorkloadStats, WorkloadStats], WorkloadStats]]
                 = ()) -> None:
        self.n = n
        self.until = until
        self.most = most
        self.adding = list(adding)
        self.errors: dict[str, dict[str, int]] = {}

    def poll(self, loop: EngineLoop) -> None:
        pass

    def poll_fd(self) -> int | None:
        return None

    def boundary(self, loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        if finished + 1 >= self.n and (self.until is None or finished + 1 >= self.most
                                       or self.until()):
            loop.request_stop()

    def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                    errors: dict[str, dict[str, int]]) -> None:
        for wid, by_name in errors.items():
            mine = self.errors.setdefault(wid, {})
            for name, n in by_name.items():
                mine[name] = mine.get(name, 0) + n
        for pair, total in self.adding:
            total.merge_into(pair[finished % 2])
            pair[finished % 2].reset()


#: the subintervals of ``run_workloads``' runs
SUB_NS = 100_000_000


def run_workload(path: str, kind: str, params: WorkloadParams, seconds: float,
                 lbs: int = 512, until: Callable[[WorkloadStats], bool] | None = None
                 ) -> tuple[WorkloadStats, dict[str, dict[str, int]]]:
    stats, errors = run_workloads(path, kind, [params], seconds, lbs,
                                  None if until is None else lambda st: until(st[0]))
    return stats[0], errors


def run_workloads(path: str, kind: str, params: list[WorkloadParams], seconds: float,
                  lbs: int = 512, until: Callable[[list[WorkloadStats]], bool] | None = None
                  ) -> tuple[list[WorkloadStats], dict[str, dict[str, int]]]:
    """Workloads ``t:lun:w0``, ``w1``... on ``path`` in one loop for ``seconds`` (subintervals
    of ``SUB_NS``) and, with ``until`` (on each one's statistics of the subintervals handed
    over), on until it holds (``Control``: at most 10 s); each one's statistics, the drain's
    I/Os too."""
    loop = EngineLoop(capacity=256)
    loop.register_engine_kind("libaio", LibaioEngine)
    loop.register_engine_kind("threadpool", ThreadPoolEngine)
    eng = loop.engine(kind)
    fd = files.open_lun(path, writable=any(p.writes for p in params),
                        extra_flags=eng.open_flags)
    size = files.probe(path).size_bytes
    stats = [(WorkloadStats(), WorkloadStats()) for _ in params]
    for i, (p, st) in enumerate(zip(params, stats, strict=True)):
        loop.add_workload(WorkloadSpec(f"t:lun:w{i}", p, eng, fd, size, lbs, st), None)
    totals = [WorkloadStats() for _ in params]
    ctl = Control(max(1, round(seconds * 1e9 / SUB_NS)),
                  None if until is None else lambda: until(totals),
                  adding=zip(stats, totals, strict=True))
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, SUB_NS)
    finally:
        loop.close()
        os.close(fd)
    for st, total in zip(stats, totals, strict=True):  # the drain's, in the next buffer
        total.merge_into(st[0])
        total.merge_into(st[1])
    return totals, ctl.errors


def verify_range(path: str, params: WorkloadParams, start: int, end: int) -> int:
    """Check every block of [start, end) against the pattern; returns how many were written."""
    pattern = WritePattern(params.write_data, params.write_data_ratio, params.blocksize_bytes,
                           params.seed)
    bs = params.blocksize_bytes
    with open(path, "rb") as f:
        f.seek(start)
        data = np.frombuffer(f.read(end - start), dtype=np.uint8).reshape(-1, bs)
    written = 0
    for i, block in enumerate(data):
        if not block.any():
            continue  # never written
        written += 1
        why = pattern.verify(block, start + i * bs)
        assert why is None, f"block at {start + i * bs}: {why}"
    return written


def _covered(st: WorkloadStats) -> bool:
    """Sequential writes of 4 KiB have covered a MiB (once they are all done: the stop drains
    those in flight); going round it again writes the same data."""
    return st.ops(3) >= 256


#: random writes enough that more than 100 of the 256 blocks of a range were written: 400
#: leave about 256 * (1 - exp(-400 / 256)) = 202
ENOUGH_WRITES = 400


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize("kind", ["libaio", "threadpool"])
def test_sequential_writes_land_byte_for_byte(lun_file: str, kind: str) -> None:
    start, end = 2 * MiB, 3 * MiB
    p = WorkloadParams(iosequencer="sequential", read_fraction=0.0, iodepth=8,
                       range_start_bytes=start, range_end_bytes=end, seed=11)
    stats, errors = run_workload(lun_file, kind, p, 0.3, until=_covered)
    assert errors == {}
    assert stats.ops(3) >= 256  # the range was covered at least once
    assert verify_range(lun_file, p, start, end) == 256
    with open(lun_file, "rb") as f:  # nothing outside the range
        assert not any(f.read(start))
        f.seek(end)
        assert not any(f.read())


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize(("read_fraction", "write_data", "ratio"), [
    (0.5, "random", 1.0),        # a read mask per batch
    (0.0, "random", 1.0),        # every I/O a write (no mask)
    (0.5, "compressible", 2.0),  # one stamp per block
    (0.0, "dedupable", 3.0),     # unique or a duplicate, as each write's serial says
])
def test_random_mixed_writes_verify_and_stay_in_range(
        lun_file: str, read_fraction: float, write_data: str, ratio: float) -> None:
    start, end = 4 * MiB, 6 * MiB
    p = WorkloadParams(read_fraction=read_fraction, iodepth=16, blocksize_bytes=8192,
                       range_start_bytes=start, range_end_bytes=end, seed=5,
                       write_data=write_data, write_data_ratio=ratio)  # type: ignore[arg-type]
    stats, errors = run_workload(
        lun_file, "libaio", p, 0.3,
        until=lambda st: st.ops(1) >= ENOUGH_WRITES and (read_fraction == 0 or st.ops(0) > 100))
    assert errors == {}
    assert stats.ops(1) > 100 and (read_fraction == 0 or stats.ops(0) > 100)
    assert verify_range(lun_file, p, start, end) > 100
    with open(lun_file, "rb") as f:
        assert not any(f.read(start))
        f.seek(end)
        assert not any(f.read())


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize(("read_fraction", "iops"), [(0.0, None), (0.5, None), (0.5, 3000.0)])
def test_several_write_workloads_on_one_loop_verify(lun_file: str, read_fraction: float,
                                                    iops: float | None) -> None:
    # four workloads of one loop, each on its own MiB: their completions come back in shared
    # batches, resubmitted together (or, paced, submitted together when due), with each
    # write's data put in its buffer one at a time
    params = [WorkloadParams(read_fraction=read_fraction, iodepth=3, seed=20 + i, iops=iops,
                             range_start_bytes=(4 + i) * MiB, range_end_bytes=(5 + i) * MiB)
              for i in range(4)]
    # (a paced one that fell behind catches up: each stays in its MiB all the same)
    stats, errors = run_workloads(lun_file, "libaio", params, 0.3,
                                  until=lambda sts: all(st.ops(1) >= 200 for st in sts))
    assert errors == {}
    for p, st in zip(params, stats, strict=True):  # (200 random writes leave ~138 blocks)
        assert st.ops(1) > 50
        assert verify_range(lun_file, p, p.range_start_bytes, p.range_end_bytes) > 50
    with open(lun_file, "rb") as f:
        assert not any(f.read(4 * MiB))
        f.seek(8 * MiB)
        assert not any(f.read())


@pytest.mark.beside
@needs_aio
def test_busy_poll_at_depth_one(lun_file: str) -> None:
    p = WorkloadParams(iodepth=1, busy_poll=True)
    stats, errors = run_workload(lun_file, "libaio", p, 0.2, until=lambda st: st.ops(0) > 100)
    assert errors == {} and stats.ops(0) > 100
    assert stats.lat[0, 0, 1] > 0  # a real latency, not zero


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize("iodepth", [1, 4])
def test_busy_poll_blocks_once_it_has_spun_long_enough(
    lun_file: str, iodepth: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tuning, "BUSY_SPIN_NS", 0)  # block at the first empty check
    p = WorkloadParams(iodepth=iodepth, busy_poll=True)
    stats, errors = run_workload(lun_file, "libaio", p, 0.2, until=lambda st: st.ops(0) > 100)
    assert errors == {} and stats.ops(0) > 100
    assert stats.lat[0, 0, 1] > 0


def _stats_in_one_region() -> tuple[WorkloadStats, WorkloadStats]:
    """A workload's two stats buffers in one region, as a worker's are (the compiled loop bins
    into such a region only)."""
    region = np.zeros(2 * WorkloadStats.SIZE, dtype=np.int64)
    return WorkloadStats(region[: WorkloadStats.SIZE]), WorkloadStats(region[WorkloadStats.SIZE :])


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize(
    ("iodepth", "compiled"),
    # each depth runs in the compiled loop (compiled_loop.paced_run: depth 1 in its lone
    # wait) or in the Python loop
    [(4, True), (4, False), (1, True), (1, False)],
)
def test_io_errors_are_counted_with_errno(lun_file: str, iodepth: int, compiled: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # a 4096-byte block size with 512-byte alignment at odd offsets on O_DIRECT is fine, but a
    # read past the end of the file is short: shrink the file under the workload's feet
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    turns: list[int] = []
    real = compiled_loop.run

    def counted(args: LoopArgs) -> int:
        turns.append(1)
        return real(args)

    monkeypatch.setattr(compiled_loop, "run", counted)
    p = WorkloadParams(iodepth=iodepth, range_start_bytes=15 * MiB, range_end_bytes=16 * MiB)
    os.truncate(lun_file, 16 * MiB)
    loop = EngineLoop(capacity=64)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(lun_file, writable=False, extra_flags=eng.open_flags)
    stats = _stats_in_one_region()
    loop.add_workload(WorkloadSpec("t:l:w", p, eng, fd, 16 * MiB, 512, stats), None)
    os.truncate(lun_file, 15 * MiB)  # every read is now beyond the end: 0 bytes
    total = WorkloadStats()
    # on until enough short reads were counted and the compiled loop (where asked for) ran
    ctl = Control(2, until=lambda: ctl.errors.get("t:l:w", {}).get("short", 0) > 10 and (
        bool(turns) or not compiled or not compiled_loop.available()),
        adding=[(stats, total)])
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, 50_000_000)
    finally:
        loop.close()
        os.close(fd)
    assert set(ctl.errors["t:l:w"]) == {"short"}
    assert total.counters[0, 2] == ctl.errors["t:l:w"]["short"] > 10
    assert total.ops() == 0
    if compiled_loop.available():  # the errors came through the loop asked for
        assert bool(turns) == compiled


@pytest.mark.beside
@needs_aio
def test_aio_context_roundtrip(lun_file: str) -> None:
    fd = os.open(lun_file, os.O_RDWR | os.O_DIRECT)
    table = SlotTable(4)
    bufs = AlignedBuffers(2, 4096)
    bufs.array[0, :] = np.arange(4096) % 251
    for slot, op in ((0, layout.IOCB_CMD_PWRITE), (1, layout.IOCB_CMD_PREAD)):
        table.rows[slot, layout.ROW["opcode_fd"]] = layout.opcode_fd_word(op, fd)
        table.rows[slot, layout.ROW["buf"]] = int(bufs.addr[slot])
        table.rows[slot, layout.ROW["nbytes"]] = 4096
        table.rows[slot, layout.ROW["offset"]] = 8192
    eng = LibaioEngine(table)
    try:
        eng.submit(np.array([0], dtype=np.intp))
        assert eng.reap(1, 1_000_000_000) == 1
        assert int(eng.done_slot[0]) == 0 and int(eng.done_res[0]) == 4096
        eng.submit(np.array([1], dtype=np.intp))
        n = 0
        deadline = time.monotonic() + 2
        while n == 0 and time.monotonic() < deadline:
            n = eng.poll()  # from the mapped ring, no syscall
        assert n == 1 and int(eng.done_slot[0]) == 1
        assert np.array_equal(bufs.array[1], bufs.array[0])
    finally:
        eng.close()
        os.close(fd)


# (LUN, O_DIRECT works, AIO available, choice, fallback) -> engine, or the refusal's words
_CHOICES = [
    # a LUN that O_DIRECT serves runs on libaio, or is refused: never silently elsewhere
    ("file", True, True, "auto", False, "libaio"),
    ("block", True, True, "auto", False, "libaio"),
    ("file", True, False, "auto", False, "error: no AIO on this test host"),
    ("block", True, False, "auto", False, "error: no AIO on this test host"),
    ("block", True, False, "libaio", False, "error: no AIO on this test host"),
    ("block", False, True, "auto", False, "error: O_DIRECT read failed"),
    # ... unless the test allows the fallback for it (auto only)
    ("block", True, False, "auto", True, "threadpool: allow_engine_fallback"),
    ("file", True, False, "auto", True, "threadpool: allow_engine_fallback"),
    ("block", False, True, "auto", True, "threadpool: allow_engine_fallback"),
    ("block", True, False, "libaio", True, "error: no AIO on this test host"),
    # a file on a file system without O_DIRECT (tmpfs) has no native engine but the pool
    ("file", False, True, "auto", False, "threadpool: does not take O_DIRECT"),
    ("file", False, True, "libaio", False, "error: O_DIRECT read failed"),
    # the thread pool when the test asks for it (no warning: it is what the test says)
    ("block", True, True, "threadpool", False, "threadpool"),
    ("file", True, False, "threadpool", False, "threadpool"),
]


@pytest.mark.beside
@pytest.mark.parametrize(("lun", "direct", "aio", "choice", "fallback", "expect"), _CHOICES)
def test_engine_choice(lun_file: str, monkeypatch: pytest.MonkeyPatch, lun: str, direct: bool,
                       aio: bool, choice: str, fallback: bool, expect: str) -> None:
    monkeypatch.setattr(engine_mod.native, "aio_available",
                        lambda: None if aio else "no AIO on this test host")
    monkeypatch.setattr(engine_mod.files, "direct_io_works",
                        lambda path, lbs: None if direct else "O_DIRECT read failed: EINVAL")
    monkeypatch.setattr(engine_mod, "_is_block_device", lambda path: lun == "block")
    if expect.startswith("error: "):
        with pytest.raises(IoEngineError) as info:
            choose_engine(choice, lun_file, 512, fallback=fallback)
        text = str(info.value)
        assert expect.removeprefix("error: ") in text and lun_file in text
        assert "allow_engine_fallback: true" in text  # the way out is named
        return
    d = choose_engine(choice, lun_file, 512, fallback=fallback)
    kind, _, words = expect.partition(": ")
    assert d.kind == kind
    if not words:
        assert d.warning is None
    else:
        assert d.warning is not None and words in d.warning and "page cache" in d.warning


@pytest.mark.beside
def test_an_unknown_engine_is_refused(lun_file: str) -> None:
    with pytest.raises(IoEngineError, match="unknown engine"):
        choose_engine("spdk", lun_file, 512)


@pytest.mark.beside
def test_the_master_and_the_slave_know_the_same_lun_engines() -> None:
    from master.config.catalog import LUN_ENGINES

    assert LUN_ENGINES == engine_mod.LUN_ENGINE_CHOICES


@pytest.mark.beside
@pytest.mark.parametrize(
    ("setups", "answers", "made"),
    [
        (["ok", "ok"], [None, None, None], 1),  # one test context per process
        (["busy", "ok", "ok"], ["busy", None, None], 2),  # a failure is asked again
        (["busy", "busy", "busy"], ["busy", "busy", "busy"], 3),
    ],
)
def test_aio_is_tried_once_per_process_and_failures_again(
    monkeypatch: pytest.MonkeyPatch, setups: list[str], answers: list[str | None], made: int
) -> None:
    """The test context's io_destroy waits for the kernel (30-50 ms): set up per workload, it
    made 512 workloads take 20 s to create."""
    outcomes = iter(setups)
    contexts: list[str] = []

    class Context:
        def __init__(self, table: SlotTable) -> None:
            contexts.append(outcome := next(outcomes))
            if outcome != "ok":
                raise IoEngineError(f"io_setup: {outcome}")

        def close(self) -> None:
            pass

    monkeypatch.setattr(native, "_AVAILABLE", set())
    monkeypatch.setattr(native, "LibaioEngine", Context)
    got = [native.aio_available() for _ in answers]
    assert [None if g is None else g.removeprefix("io_setup: ") for g in got] == answers
    assert len(contexts) == made


@pytest.mark.beside
@needs_aio
def test_auto_picks_libaio_where_o_direct_works(lun_file: str) -> None:
    assert choose_engine("auto", lun_file, 512).kind == "libaio"


@pytest.fixture
def loop_device() -> Iterator[str]:
    """A 32 MiB loop device over a file in /dev/shm. Not root: skipped. As root, a loop device
    that cannot be attached is a failure naming why."""
    if os.geteuid() != 0:
        pytest.skip("not root: a loop device can only be attached by root")
    img = f"/dev/shm/ivypy-test-loop-{os.getpid()}.img"
    with open(img, "wb") as f:
        f.truncate(32 * MiB)
    try:
        dev = subprocess.run(["losetup", "--find", "--show", img], check=True,
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        os.unlink(img)
        stderr = getattr(exc, "stderr", None)
        pytest.fail(f"as root, losetup must attach a loop device: {exc}"
                    + (f": {stderr.strip()}" if stderr else ""))
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False, capture_output=True, timeout=60)
        os.unlink(img)


@pytest.mark.beside
@pytest.mark.root
@needs_aio
def test_loop_device_writes_verify(loop_device: str) -> None:
    geo = files.probe(loop_device)
    assert geo.is_block_device and geo.size_bytes == 32 * MiB
    p = WorkloadParams(iosequencer="sequential", read_fraction=0.0, iodepth=16,
                       range_start_bytes=MiB, range_end_bytes=2 * MiB, seed=9)
    stats, errors = run_workload(loop_device, "libaio", p, 0.3, lbs=geo.logical_block_bytes,
                                 until=_covered)
    assert errors == {} and stats.ops(3) >= 256
    assert verify_range(loop_device, p, MiB, 2 * MiB) == 256


@needs_aio
@pytest.mark.parametrize(
    ("iodepth", "busy_poll", "writes"),
    [(1, False, False), (1, True, False), (2, False, False), (1, False, True), (2, True, True)],
)
def test_depth_one_and_two_over_several_subintervals(
    lun_file: str, iodepth: int, busy_poll: bool, writes: bool
) -> None:
    """A lone workload of queue depth <= 2 (in the compiled loop where it can run, its stats
    in one region as a worker's): every subinterval records, service <= response, written
    blocks verify."""
    start, end = 1 * MiB, 1 * MiB + 64 * 4096
    p = WorkloadParams(iodepth=iodepth, busy_poll=busy_poll, seed=3,
                       read_fraction=0.0 if writes else 1.0,
                       iosequencer="sequential" if writes else "random_independent",
                       range_start_bytes=start, range_end_bytes=end)
    loop = EngineLoop(capacity=16)
    loop.register_engine_kind("libaio", LibaioEngine)
    eng = loop.engine("libaio")
    fd = files.open_lun(lun_file, writable=writes, extra_flags=eng.open_flags)
    stats = _stats_in_one_region()
    loop.add_workload(WorkloadSpec("t:l:w", p, eng, fd, 16 * MiB, 512, stats), None)
    per_sub: list[int] = []

    class Counting(Control):
        def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                        errors: dict[str, dict[str, int]]) -> None:
            super().handed_over(loop, finished, sw, ho, errors)
            buf = stats[finished % 2]
            per_sub.append(buf.ops())
            if finished + 1 < self.n:
                buf.reset()

    ctl = Counting(4)
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, 60_000_000)
    finally:
        loop.close()
        os.close(fd)
    assert loop.in_flight == 0
    assert ctl.errors == {}
    assert len(per_sub) == 4 and all(n > 20 for n in per_sub), per_sub
    cat = 3 if writes else 0  # sequential write / random read
    last = stats[3 % 2]
    assert last.ops(cat) == per_sub[-1] > 0
    assert last.lat[cat, 0, 1] > 0  # min service time: a real latency
    assert last.lat[cat, 0, 0] <= last.lat[cat, 1, 0]  # service <= response (sums)
    if writes:
        assert verify_range(lun_file, p, start, end) == 64


def _read_slots(fd: int, n: int) -> tuple[SlotTable, AlignedBuffers]:
    """``n`` slots, each a 4 KiB read of ``fd`` at offset ``4096 * slot`` (keep the buffers)."""
    table = SlotTable(n)
    bufs = AlignedBuffers(n, 4096)
    for slot in range(n):
        table.rows[slot, layout.ROW["opcode_fd"]] = layout.opcode_fd_word(
            layout.IOCB_CMD_PREAD, fd)
        table.rows[slot, layout.ROW["buf"]] = int(bufs.addr[slot])
        table.rows[slot, layout.ROW["nbytes"]] = 4096
        table.rows[slot, layout.ROW["offset"]] = 4096 * slot
    return table, bufs


@pytest.mark.beside
@needs_aio
def test_ring_reads_across_its_wrap(lun_file: str) -> None:
    """Batches of completions read from the mapped ring, many times round it."""
    fd = os.open(lun_file, os.O_RDONLY | os.O_DIRECT)
    table, _bufs = _read_slots(fd, 7)
    eng = LibaioEngine(table)
    slots = np.arange(7, dtype=np.intp)
    try:
        # the mapped ring's header: id, nr, head, tail, ...
        hdr = np.frombuffer((ctypes.c_uint32 * 8).from_address(eng.args.ring_header),
                            dtype=np.uint32)

        def ready() -> int:
            return (int(hdr[3]) - int(hdr[2])) % int(hdr[1])

        for _ in range(300):  # 2100 events through a ring of a few hundred entries
            eng.submit(slots)
            deadline = time.monotonic() + 2
            while ready() < 7 and time.monotonic() < deadline:
                time.sleep(0)
            assert ready() == 7
            assert eng.poll() == 7
            assert eng.done_res[:7].tolist() == [4096] * 7
            assert sorted(eng.done_slot[:7].tolist()) == list(range(7))
            assert ready() == 0
        assert eng.poll() == 0
    finally:
        eng.close()
        os.close(fd)


@pytest.mark.beside
@needs_aio
def test_submit_hands_the_kernel_the_slots_given(lun_file: str) -> None:
    fd = os.open(lun_file, os.O_RDONLY | os.O_DIRECT)
    table, _bufs = _read_slots(fd, 8)
    eng = LibaioEngine(table)
    try:
        for chosen in ([5], [7, 2, 4], [0, 1, 2, 3, 4, 5, 6, 7]):
            eng.submit(np.array(chosen, dtype=np.intp))
            got: list[int] = []
            deadline = time.monotonic() + 2
            while len(got) < len(chosen) and time.monotonic() < deadline:
                n = eng.reap(1, 100_000_000)
                got += eng.done_slot[:n].tolist()
                assert eng.done_res[:n].tolist() == [4096] * n
            assert sorted(got) == sorted(chosen)
    finally:
        eng.close()
        os.close(fd)


@pytest.mark.beside
@needs_aio
@pytest.mark.parametrize("how", ["submit", "finish_submit"])
def test_a_batch_refused_part_way_says_how_many_went_out(lun_file: str, how: str) -> None:
    """Slots 0-4 read the file, slot 5 names a closed descriptor: the kernel takes the first
    five, then refuses; the error names the errno and that five went out (the engine loop
    counts those in flight), and the five complete."""
    fd = os.open(lun_file, os.O_RDONLY | os.O_DIRECT)
    table, _bufs = _read_slots(fd, 8)
    closed = os.open(lun_file, os.O_RDONLY)
    os.close(closed)
    table.rows[5, layout.ROW["opcode_fd"]] = layout.opcode_fd_word(layout.IOCB_CMD_PREAD, closed)
    eng = LibaioEngine(table)
    slots = [0, 1, 2, 3, 4, 5, 6, 7]
    try:
        with pytest.raises(SubmitError, match=r"Bad file descriptor \(errno 9\)") as raised:
            if how == "submit":
                eng.submit(np.array(slots, dtype=np.intp))
            else:  # compiled code's io_submit, of the iocbs in ptrs, took the first two
                ptrs = np.frombuffer((ctypes.c_int64 * 8).from_address(eng.args.ptrs),
                                     dtype=np.int64)
                ptrs[:] = table.addr[slots]
                assert eng._lib.ivy_submit_rest(eng.args.address, 0, 2) == 2
                eng.finish_submit(2, 8)
        assert raised.value.submitted == 5
        got: list[int] = []
        deadline = time.monotonic() + 2
        while len(got) < 5 and time.monotonic() < deadline:
            n = eng.reap(1, 100_000_000)
            got += eng.done_slot[:n].tolist()
        assert sorted(got) == [0, 1, 2, 3, 4]
        assert eng.reap(1, 20_000_000) == 0
    finally:
        eng.close()
        os.close(fd)


@needs_aio
def test_a_lone_paced_read_workload_on_libaio_keeps_its_rate(lun_file: str) -> None:
    p = WorkloadParams(iodepth=16, iops=5_000.0, iosequencer="random_independent", seed=5)
    stats, errors = run_workload(lun_file, "libaio", p, 0.5)
    assert errors == {}
    assert abs(stats.ops() - 2_500) <= 250, stats.ops()  # Poisson count over 0.5 s: 5 sigma
    assert stats.lat[0, 0, 1] > 0  # min service time: a real latency
    assert stats.lat[0, 0, 0] <= stats.lat[0, 1, 0]  # service <= response (sums)
