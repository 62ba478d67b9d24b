"""Data verification through the engine loop on real loop devices (over fully written files in
/dev/shm), in the compiled loop and in the general Python loop, on libaio and io_uring: a
verified sequential writer stamps every block it writes; a verified reader then finds nothing
wrong; the test damages the backing file offline, block by block, as a device could (a flipped
byte, another block's data, an older write's data, half an older write, zeros), and the
reader's next pass names exactly those blocks, each with its class, its found stamp and its
bytes as read. Each run lasts several times what one pass needs: nothing here is timed."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from protocol import verify as v
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.engine import compiled_loop as pk
from slave.engine import files, native, tuning
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine, UringEngine
from slave.engine.verify_state import Taken, VerifiedLun, WorkloadVerify
from tests.slave.conftest import LoopDevice, LoopFactory, require_here
from tests.slave.test_engine_compiled_loop import Control

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(shutil.which("cc") is None,
                                 reason="no C compiler (cc): the compiled loop cannot be built")]

BLOCK = v.MAP_BLOCK_BYTES
N_BLOCKS = 256  # 1 MiB: a pass of either workload takes a few ms
KEY = 0x5EED1234
ENGINES = {"libaio": LibaioEngine, "io_uring": UringEngine}
#: block -> the damage done to it, and the class it must be found as
DAMAGE = {10: "corrupt", 21: "misplaced", 30: "stale", 40: "torn", 50: "missing"}


class Verified:
    """One loop, kept across runs (its map with it), on one device, in one way."""

    def __init__(self, dev: LoopDevice, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dev = dev
        self.loop = EngineLoop(capacity=64)
        self.loop.register_engine_kind(engine, ENGINES[engine])
        self.eng = self.loop.engine(engine)
        self.fd = files.open_lun(dev.path, writable=True, extra_flags=self.eng.open_flags)
        self.lun = VerifiedLun(lun=7, first_bytes=0, size_bytes=N_BLOCKS * BLOCK, run_key=KEY,
                               attempt=0)
        self.region = np.zeros(2 * WorkloadStats.SIZE, dtype=np.int64)
        self.n = 0
        self.monkeypatch = monkeypatch

    def run(self, read_fraction: float, n_sub: int = 4, iosequencer: str = "sequential",
            iodepth: int = 4, iops: float | None = 4000.0, blocks: int = N_BLOCKS,
            at_boundary: Callable[[EngineLoop, int, int], None] | None = None) -> None:
        """A sequential workload (writes or reads) over the first ``blocks`` of the device at
        ``iops`` and queue depth 4, ``n_sub`` subintervals of 100 ms (a pass takes 64 ms: six
        are due; a loop starved of the CPU beside a busy suite makes fewer, one is enough),
        then dropped."""
        n = WorkloadStats.SIZE
        pair = (WorkloadStats(self.region[:n]), WorkloadStats(self.region[n:]))
        pair[0].reset()
        pair[1].reset()
        ctl = Control(n_sub, at_boundary=at_boundary)
        ctl.per_workload.append(pair)
        self.n += 1
        name = f"t:lun:w{self.n}"
        p = WorkloadParams(iosequencer=iosequencer, read_fraction=read_fraction,  # type: ignore[arg-type]
                           iodepth=iodepth, iops=iops, blocksize_bytes=BLOCK, seed=self.n,
                           range_end_bytes=blocks * BLOCK)
        self.loop.add_workload(
            WorkloadSpec(name, p, self.eng, self.fd, self.dev.size_bytes, 512, pair,
                         verify=WorkloadVerify(self.lun, writer=self.n)), None)
        self.loop.run(ctl, time.monotonic_ns() + 1_000_000, 100_000_000)
        assert ctl.errors == {} and self.loop.in_flight == 0
        done = sum(st.ops() for st in ctl.stats)
        assert done >= blocks, done  # a pass at least: every block
        self.loop.remove_workload(name)

    def take(self) -> Taken:
        assert self.loop.verify is not None
        return self.loop.verify.take()

    def close(self) -> None:
        self.loop.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _blocks(dev: LoopDevice) -> npt.NDArray[np.uint8]:
    with open(dev.backing_file, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK).copy()


def _put(dev: LoopDevice, block: int, data: npt.NDArray[np.uint8], at: int = 0) -> None:
    with open(dev.backing_file, "r+b") as f:
        f.seek(block * BLOCK + at)
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())


@pytest.fixture(params=["compiled", "python"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(tuning, "COMPILED_LOOP", request.param == "compiled")
    return str(request.param)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_reader_finds_exactly_the_blocks_damaged_offline_each_by_its_class(
        loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch, way: str,
        engine: str) -> None:
    if engine == "io_uring":
        require_here(native.uring_available() or pk.why_not())
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    runs = count_runs(monkeypatch)
    t = Verified(dev, engine, monkeypatch)
    try:
        t.run(read_fraction=0.0)  # every block written, some more than once
        assert t.loop.verify is not None
        first = t.loop.verify.maps[7].copy()
        assert (first & v.GEN_MASK).all() and not (first & v.UNSETTLED).any()
        taken = t.take()  # the blocks settled, each with its map byte as it is now
        last = dict(zip(taken.blocks.tolist(), taken.map_bytes.tolist(), strict=True))
        assert last == dict(enumerate(first.tolist()))
        older = _blocks(dev)
        t.run(read_fraction=0.0)  # written again: the older data is stale now
        second = t.loop.verify.maps[7]
        assert (second[list(DAMAGE)] != first[list(DAMAGE)]).all()
        t.run(read_fraction=1.0)  # all clean
        clean = t.take()
        assert clean.found == 0 and clean.counts[:, 1:].sum() == 0
        assert clean.counts[:, 0].sum() >= N_BLOCKS  # every block checked at least once
        now = _blocks(dev)
        flipped = now[10].copy()
        flipped[3 * 512 + 77] ^= 0x40
        _put(dev, 10, flipped)
        _put(dev, 21, now[22])
        _put(dev, 30, older[30])
        _put(dev, 40, older[40][: BLOCK // 2])
        _put(dev, 50, np.zeros(BLOCK, dtype=np.uint8))
        t.run(read_fraction=1.0)
        found = t.take()
        kept = found.findings
        counts = found.counts.sum(axis=0)
        # each damaged block once a pass (the run may end inside one); the first kept
        assert found.found == counts[1:].sum() >= len(kept) >= len(DAMAGE)
        assert {int(o) // BLOCK: v.CLASSES[int(c) - 1] for o, c in zip(
            kept["offset_bytes"], kept["verdict"], strict=True)} == DAMAGE
        per_class = [int(counts[v.CODES[name]]) for name in DAMAGE.values()]
        assert min(per_class) >= 1 and max(per_class) - min(per_class) <= 1, per_class
        by_block = {int(f["offset_bytes"]) // BLOCK: (f, found.finding_bytes[i])
                    for i, f in enumerate(kept)}
        f, raw = by_block[21]
        assert f["found_offset_bytes"] == 22 * BLOCK and f["crc_ok"] == 1
        f, raw = by_block[30]
        assert f["found_gen"] == first[30] and f["expected"] == second[30]
        f, raw = by_block[10]
        assert f["crc_ok"] == 0 and f["sector"] == 3 and np.array_equal(raw, flipped)
        f, raw = by_block[50]
        assert not raw.any() and f["found_run_key"] == 0
        assert t.loop.verify.in_flight == 0
    finally:
        t.close()
    assert (runs[0] > 0) == (way == "compiled")  # which loop served


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_random_reads_and_writes_of_few_blocks_at_depth_32_find_nothing_wrong(
        loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch, way: str,
        engine: str) -> None:
    # 16 blocks, half reads, 32 in flight as fast as the device goes: most reads meet a write
    # of their block in flight and many writes another write, and nothing is damaged, so
    # nothing may be found; a sequential reader after it, with nothing in flight, checks
    # every block against the map the overlaps left (UNSETTLED where two writes overlapped)
    if engine == "io_uring":
        require_here(native.uring_available() or pk.why_not())
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    t = Verified(dev, engine, monkeypatch)
    try:
        t.run(read_fraction=0.0, blocks=16)  # every block written before the mix
        t.run(read_fraction=0.5, iosequencer="random_independent", iodepth=32, iops=None,
              blocks=16)
        mixed = t.take()
        assert mixed.found == 0 and mixed.counts[:, 1:].sum() == 0
        assert t.loop.verify is not None
        assert (t.loop.verify.maps[7][:16] & v.UNSETTLED).any()  # writes overlapped
        assert mixed.counts[:, 0].sum() >= 100
        t.run(read_fraction=1.0, blocks=16)
        after = t.take()
        assert after.found == 0 and after.counts[:, 0].sum() >= 32
        assert t.loop.verify is not None and t.loop.verify.in_flight == 0
    finally:
        t.close()


@pytest.mark.parametrize("iops", [4000.0, None])
def test_a_writers_confirmed_serial_says_which_writes_are_in_the_journal(
        loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch, way: str,
        iops: float | None) -> None:
    # a sequential writer (serial s writes block s - 1, modulo): at each boundary every write
    # up to the confirmed serial has completed and is in the journal taken there, and no more
    # than the depth's beyond it (the oldest write in flight holds it)
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    t = Verified(dev, "libaio", monkeypatch)
    seen: list[tuple[int, int]] = []  # (confirmed, journaled so far) at each boundary
    journaled = [0]

    def boundary(loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        assert loop.verify is not None
        (confirmed,) = loop.confirmed_serials().values()
        journaled[0] += loop.verify.take().blocks.size
        seen.append((confirmed, journaled[0]))

    try:
        t.run(read_fraction=0.0, iops=iops, at_boundary=boundary)
    finally:
        t.close()
    assert len(seen) >= 2
    assert [c for c, _ in seen] == sorted(c for c, _ in seen) and seen[-1][0] > 0
    for confirmed, done in seen:
        assert confirmed <= done <= confirmed + 4, seen


def count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the compiled loop ran (``compiled_loop.run`` counted)."""
    runs = [0]
    run = pk.run

    def counted(args: object) -> int:
        runs[0] += 1
        return run(args)  # type: ignore[arg-type]

    monkeypatch.setattr(pk, "run", counted)
    return runs
