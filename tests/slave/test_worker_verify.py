"""Data verification through the worker pool (real worker processes, a real loop device): a
verified workload's create carries its target to the worker that runs it, each collected
subinterval carries the worker's report (the journal of blocks settled, each workload's counts,
the damaged blocks found with their bytes) in ``SubintervalResult.verify``'s form, a verified
LUN stays on its worker (its map) after its workloads are gone, and the next step's reader
finds a block damaged between the steps. Generous deadlines: nothing here is timed."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from protocol import verify as v
from protocol.params import WorkloadParams
from slave.engine import compiled_loop as pk
from slave.engine.verify_state import LoadedMap
from slave.worker import SubintervalResults, WorkerError, WorkerPool, merge_verify_reports
from tests.slave.conftest import LoopFactory

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="no C compiler (cc): the compiled loop cannot be built")

SUB_NS = 200_000_000
BLOCK = v.MAP_BLOCK_BYTES
N_BLOCKS = 128
#: the loop device's geometry, as discovery gives it to a create
GEOMETRY = {"logical_block_bytes": 512, "lun_size_bytes": N_BLOCKS * BLOCK}


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    p = WorkerPool(2)
    try:
        yield p
    finally:
        p.close()


def _step(pool: WorkerPool, n: int) -> list[SubintervalResults]:
    t0 = time.monotonic_ns() + 50_000_000
    pool.go(t0, SUB_NS)
    out = []
    for k in range(n):
        out.append(pool.collect(k, t0 + (k + 1) * SUB_NS + 3_000_000_000))
        pool.keep_going()
    pool.stop()
    return out


def _target(writer: int) -> dict[str, int]:
    return {"lun": 3, "first_bytes": 0, "size_bytes": N_BLOCKS * BLOCK, "run_key": 77,
            "attempt": 0, "writer": writer}


@pytest.mark.root
def test_a_verified_writer_and_reader_report_through_the_pool(
        pool: WorkerPool, loop_device: LoopFactory) -> None:
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    writer = "h:lun:w"
    pool.create_workload(writer, dev.path, "libaio", WorkloadParams(
        iosequencer="sequential", read_fraction=0.0, iodepth=4, iops=2000.0), **GEOMETRY,
        verify=_target(1))
    results = _step(pool, 3)
    reports = [r.verify for r in results]
    assert all(r is not None for r in reports)
    luns, blocks, map_bytes = [], [], []
    for r in reports:
        assert r is not None
        lun, block, byte = v.journal_from_wire(r["journal"])
        luns += lun.tolist()
        blocks += block.tolist()
        map_bytes += byte.tolist()
        assert r["found"] == 0 and r["findings"] == [] and writer not in r["counts"]
    assert set(luns) == {3} and set(blocks) == set(range(N_BLOCKS))  # 600 writes: all, 4x
    last = dict(zip(blocks, map_bytes, strict=True))
    assert all(b & v.GEN_MASK >= 2 for b in last.values())
    worker = pool.workloads[writer].worker
    pool.delete_workload(writer)
    assert dev.path in pool._workers[worker].luns  # its map stays with its worker
    with open(dev.backing_file, "r+b") as f:  # block 5 zeroed between the steps
        f.seek(5 * BLOCK)
        f.write(bytes(BLOCK))
        f.flush()
        os.fsync(f.fileno())
    reader = "h:lun:r"
    info = pool.create_workload(reader, dev.path, "libaio", WorkloadParams(
        iosequencer="sequential", iodepth=4, iops=2000.0), **GEOMETRY, verify=_target(2))
    assert info.worker == worker
    reports = [r.verify for r in _step(pool, 3)]
    counts = np.zeros(len(v.COUNT_NAMES), dtype=np.int64)
    for r in reports:
        assert r is not None
        counts += r["counts"].get(reader, 0)
    missing = 1 + v.CLASSES.index("missing")
    assert counts[0] >= N_BLOCKS and counts[missing] >= 1  # a pass at least: block 5 found
    assert counts[1:].sum() == counts[missing] == sum(r["found"] for r in reports if r)
    f = next(f for r in reports if r for f in r["findings"])
    assert f["workload_id"] == reader and f["class"] == "missing"
    assert f["offset_bytes"] == 5 * BLOCK and f["expected"] == last[5]
    assert f["data"] == bytes(BLOCK) and f["found"]["run_key"] == 0


def test_reports_merge_end_to_end() -> None:
    a = {"journal": v.journal_to_wire(np.array([1]), np.array([5]), np.array([3], np.uint8)),
         "counts": {"x": [4, 0, 0, 0, 0, 1]}, "found": 1, "findings": [{"workload_id": "x"}]}
    b = {"journal": v.journal_to_wire(np.array([2, 2]), np.array([7, 8]),
                                      np.array([1, 2], np.uint8)),
         "counts": {"y": [2, 0, 0, 0, 0, 0]}, "found": 0, "findings": []}
    assert merge_verify_reports([]) is None and merge_verify_reports([a]) is a
    m = merge_verify_reports([a, b])
    assert m is not None
    luns, blocks, bytes_ = v.journal_from_wire(m["journal"])
    assert luns.tolist() == [1, 2, 2] and blocks.tolist() == [5, 7, 8]
    assert bytes_.tolist() == [3, 1, 2]
    assert m["counts"] == {"x": [4, 0, 0, 0, 0, 1], "y": [2, 0, 0, 0, 0, 0]}
    assert m["found"] == 1 and m["findings"] == [{"workload_id": "x"}]


def _found(reports: list[dict[str, Any] | None], wid: str
           ) -> tuple[npt.NDArray[np.int64], set[int]]:
    """Workload ``wid``'s counts over ``reports`` (blocks checked, then each class), and the
    offsets of the damaged blocks they found."""
    counts = np.zeros(len(v.COUNT_NAMES), dtype=np.int64)
    offsets: set[int] = set()
    for r in reports:
        assert r is not None
        counts += r["counts"].get(wid, 0)
        offsets |= {f["offset_bytes"] for f in r["findings"]}
    return counts, offsets


def _written_by_another_pool(path: str, writer: str) -> npt.NDArray[np.uint8]:
    """A pool of its own writes ``path`` whole, reports its journals and ends: the master's
    map of the LUN (each block's last entry)."""
    master_map = np.zeros(N_BLOCKS, dtype=np.uint8)
    pool = WorkerPool(1)
    try:
        pool.create_workload(writer, path, "libaio", WorkloadParams(
            iosequencer="sequential", read_fraction=0.0, iodepth=4, iops=2000.0),
            **GEOMETRY, verify=_target(1))
        reports = [r.verify for r in _step(pool, 2)]
        reports.append(pool.take_final_verify())  # the drain's
    finally:
        pool.close()
    for r in reports:
        assert r is not None
        _, blocks, bytes_ = v.journal_from_wire(r["journal"])
        master_map[blocks] = bytes_  # in order: the last entry of a block wins
    assert (master_map & v.GEN_MASK).all()
    return master_map


@pytest.mark.root
def test_a_new_pool_given_the_masters_map_checks_what_an_earlier_one_wrote(
        loop_device: LoopFactory) -> None:
    # as a resumed run's or ivypy verify's hosts: one pool writes and reports its journals
    # (the master's map is their last entries), and ends; a block is zeroed; a new pool's
    # reader, given that map, checks every block from its first read and finds that one alone
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    master_map = _written_by_another_pool(dev.path, "h:lun:w")
    with open(dev.backing_file, "r+b") as f:
        f.seek(9 * BLOCK)
        f.write(bytes(BLOCK))
        f.flush()
        os.fsync(f.fileno())
    second = WorkerPool(1)
    try:
        second.create_workload("h:lun:r", dev.path, "libaio", WorkloadParams(
            iosequencer="sequential", iodepth=4, iops=2000.0), **GEOMETRY,
            verify=_target(2), verify_map=LoadedMap(master_map))
        reports = [r.verify for r in _step(second, 2)]
    finally:
        second.close()
    counts, offsets = _found(reports, "h:lun:r")
    assert counts[0] >= N_BLOCKS  # every block checked: the map came with the create
    assert counts[1:].sum() == counts[1 + v.CLASSES.index("missing")] >= 1
    assert offsets == {9 * BLOCK}


@pytest.mark.root
def test_an_edit_a_verified_workload_cannot_take_is_refused_by_its_worker(
        pool: WorkerPool, loop_device: LoopFactory) -> None:
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    pool.create_workload("h:lun:r", dev.path, "libaio", WorkloadParams(iops=100.0),
                         **GEOMETRY, verify=_target(1))
    pool.edit_workload("h:lun:r", WorkloadParams(iops=100.0, blocksize_bytes=512))
    with pytest.raises(WorkerError, match="a verified workload's blocksize must be a multiple "
                                          "of 4096 bytes, not 512"):
        for _ in range(50):  # the worker's answer comes with the next call that looks
            pool.create_workload("h:lun:x", dev.path, "libaio", WorkloadParams(), **GEOMETRY)
            pool.delete_workload("h:lun:x")


@pytest.mark.root
def test_a_map_replaced_between_steps_reaches_the_worker_that_holds_it(
        loop_device: LoopFactory) -> None:
    # as a host whose reader ran on a LUN before another host wrote it: its worker's map is
    # empty (its reads check nothing); between steps the master's map replaces it there
    # (load_map_part), and the next step's reads check every block, finding a zeroed one
    assert pk.available(), pk.why_not()
    dev = loop_device(N_BLOCKS * BLOCK)
    master_map = _written_by_another_pool(dev.path, "h2:lun:w")  # the other host's
    reader = WorkerPool(1)
    try:
        assert not reader.load_map_part(3, 0, master_map.tobytes())  # no worker holds it yet
        reader.create_workload("h1:lun:r", dev.path, "libaio", WorkloadParams(
            iosequencer="sequential", iodepth=4, iops=2000.0), **GEOMETRY, verify=_target(2))
        before = [r.verify for r in _step(reader, 2)]
        assert all(r is not None and "h1:lun:r" not in r["counts"] for r in before)
        with pytest.raises(ValueError, match="past its 128"):
            reader.load_map_part(3, 100, bytes(29))
        with open(dev.backing_file, "r+b") as f:
            f.seek(9 * BLOCK)
            f.write(bytes(BLOCK))
            f.flush()
            os.fsync(f.fileno())
        assert reader.load_map_part(3, 0, master_map[:64].tobytes())  # in two parts
        assert reader.load_map_part(3, 64, master_map[64:].tobytes())
        after = [r.verify for r in _step(reader, 2)]
    finally:
        reader.close()
    counts, offsets = _found(after, "h1:lun:r")
    assert counts[0] >= N_BLOCKS and offsets == {9 * BLOCK}
