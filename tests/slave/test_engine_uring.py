"""The io_uring engine (``slave.engine.native.UringEngine``) on real loop devices over fully
written files in /dev/shm: in the compiled loop (``paced_run``'s backend 1) and in the general
Python loop, at queue depth 1 and 32, paced and at max IOPS, with the device's own counters as
the witness of counts and bytes and the written blocks' contents of offsets; errors with errno
and short transfers; the ring itself (registered files and buffers, reaped from the mapped ring
and with a timed wait); the ring of an older kernel that refuses the newer set-up flags; the
refusal where io_uring cannot be had.

The tests judged on what the engine did (bytes, errors, reads the device did) run beside the
others (``beside``): each run goes on until enough I/O is done (``until``), so that a loop held
off the CPU does the same I/O, only later. A paced workload's rate to 1 %, a look that must
not be preempted and the device's own count of a worker's reads need the machine
(``alone``)."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave import engine as engine_mod
from slave.engine import base, choose_engine, compiled_loop, files, layout, native, tuning
from slave.engine.base import AlignedBuffers, SlotTable, SubmitError
from slave.engine.layout import LoopArgs
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import UringEngine
from tests.slave.conftest import LoopDevice, LoopFactory, require_here, settle
from tests.slave.readwitness import ReadWitness
from tests.slave.test_engine_libaio import Control, _read_slots, verify_range

MiB = 1 << 20


class _Lib:
    """The compiled object, but for its ``ivy_submit_rest`` (``rest``)."""

    def __init__(self, real: Any, rest: Callable[[int, int, int], int]) -> None:
        self._real = real
        self.ivy_submit_rest = rest

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture(autouse=True)
def _uring_here() -> None:
    """io_uring and the compiled kernel must be here when root runs the tests (CI); without
    root their absence skips."""
    require_here(native.uring_available() or compiled_loop.why_not())


#: ivy_loop.c spells out the parts of io_uring's ABI it uses (a host may lack the kernel's
#: header): each (its name there, the header's), compared by the compiler
_ABI_CONSTANTS = [
    ("IVY_OP_READ_FIXED", "IORING_OP_READ_FIXED"), ("IVY_OP_WRITE_FIXED", "IORING_OP_WRITE_FIXED"),
    ("IVY_SQE_FIXED_FILE", "IOSQE_FIXED_FILE"), ("IVY_ENTER_GETEVENTS", "IORING_ENTER_GETEVENTS"),
    ("IVY_ENTER_EXT_ARG", "IORING_ENTER_EXT_ARG"), ("IVY_SQ_TASKRUN", "IORING_SQ_TASKRUN"),
    ("IVY_FEATURES", "(IORING_FEAT_SINGLE_MMAP | IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG)"),
    ("IVY_UR_SETUP_FLAGS", "(IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER"
                           " | IORING_SETUP_TASKRUN_FLAG)"),
    ("IVY_UR_SETUP_FLAGS_OLD", "(IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG)"),
    ("IVY_UR_OFF_SQES", "IORING_OFF_SQES"), ("IVY_UR_FILES2", "IORING_REGISTER_FILES2"),
    ("IVY_UR_FILES_UPDATE2", "IORING_REGISTER_FILES_UPDATE2"),
    ("IVY_UR_BUFFERS2", "IORING_REGISTER_BUFFERS2"),
    ("IVY_UR_BUFFERS_UPDATE", "IORING_REGISTER_BUFFERS_UPDATE"),
]
#: (its struct, the header's, each field pair (its, the header's) by offset); the sizes too
_ABI_STRUCTS = [
    ("ivy_sqe", "io_uring_sqe", [("opcode", "opcode"), ("flags", "flags"), ("ioprio", "ioprio"),
                                 ("fd", "fd"), ("off", "off"), ("addr", "addr"), ("len", "len"),
                                 ("rw_flags", "rw_flags"), ("user_data", "user_data"),
                                 ("buf_index", "buf_index"), ("personality", "personality"),
                                 ("file_index", "file_index")]),
    ("ivy_cqe", "io_uring_cqe", [("user_data", "user_data"), ("res", "res"), ("flags", "flags")]),
    ("ivy_getevents_arg", "io_uring_getevents_arg", [("sigmask", "sigmask"),
                                                     ("sigmask_sz", "sigmask_sz"), ("ts", "ts")]),
    ("ivy_uring_params", "io_uring_params", [
        ("sq_entries", "sq_entries"), ("cq_entries", "cq_entries"), ("flags", "flags"),
        ("features", "features"), ("sq_off[1]", "sq_off.tail"), ("sq_off[4]", "sq_off.flags"),
        ("sq_off[2]", "sq_off.ring_mask"), ("sq_off[6]", "sq_off.array"),
        ("cq_off[0]", "cq_off.head"), ("cq_off[1]", "cq_off.tail"),
        ("cq_off[2]", "cq_off.ring_mask"), ("cq_off[5]", "cq_off.cqes")]),
    ("ivy_rsrc", "io_uring_rsrc_register", [("a", "nr"), ("c", "resv2"), ("d", "data"),
                                           ("e", "tags")]),
    ("ivy_rsrc", "io_uring_rsrc_update2", [("a", "offset"), ("c", "data"), ("d", "tags"),
                                          ("e", "nr")]),
]


_URING_HEADER = Path("/usr/include/linux/io_uring.h")


@pytest.mark.beside
@pytest.mark.skipif(shutil.which("cc") is None or not _URING_HEADER.exists(),
                    reason="no C compiler or no linux/io_uring.h (linux-libc-dev) to compare with")
def test_the_io_uring_abi_the_loop_spells_out_is_the_kernel_headers(tmp_path: Path) -> None:
    # every constant, struct size and field offset ivy_loop.c writes out for io_uring is
    # the kernel header's: the compiler checks each (an IORING_SQ_TASKRUN of 2, the overflow
    # bit, once left completions waiting for the task unseen by the loop's looks)
    asserts = [f"_Static_assert({ours} == {theirs}, \"{ours}\");"
               for ours, theirs in _ABI_CONSTANTS]
    for ours, theirs, fields in _ABI_STRUCTS:
        asserts.append(f"_Static_assert(sizeof(struct {ours}) == sizeof(struct {theirs}), "
                       f"\"{ours} size\");")
        for a, b in fields:
            asserts.append(f"_Static_assert(offsetof(struct {ours}, {a}) == "
                           f"offsetof(struct {theirs}, {b}), \"{ours}.{a}\");")
    src = tmp_path / "abi.c"
    src.write_text(compiled_loop.source() + "\n#include <linux/io_uring.h>\n" + "\n".join(asserts))
    done = subprocess.run(["cc", "-std=gnu11", "-fsyntax-only", str(src)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def _written(loop_device: LoopFactory, size_bytes: int = 16 * MiB) -> LoopDevice:
    """A loop device over a file written whole with random bytes (``loop_device`` writes
    zeros; ``verify_range`` takes a block of zeros for one never written)."""
    def fill(path: str) -> None:
        with open(path, "wb") as f:
            f.write(np.random.default_rng(1).integers(0, 256, size_bytes, dtype=np.uint8))
    dev = loop_device(size_bytes, prepare=fill)
    settle()
    return dev


def _one_workload(path: str, p: WorkloadParams, size_bytes: int
                  ) -> tuple[EngineLoop, UringEngine, int, tuple[WorkloadStats, WorkloadStats]]:
    """A loop on io_uring with workload ``t:l:w`` of ``p`` reading ``path``: the loop, its
    engine, the LUN's descriptor and the workload's stats, in one region as a worker's."""
    loop = EngineLoop(capacity=64)
    loop.register_engine_kind("io_uring", UringEngine)
    eng = loop.engine("io_uring")
    fd = files.open_lun(path, writable=False, extra_flags=eng.open_flags)
    region = np.zeros(2 * WorkloadStats.SIZE, dtype=np.int64)
    stats = (WorkloadStats(region[: WorkloadStats.SIZE]),
             WorkloadStats(region[WorkloadStats.SIZE :]))
    loop.add_workload(WorkloadSpec("t:l:w", p, eng, fd, size_bytes, 512, stats), None)
    return loop, eng, fd, stats  # type: ignore[return-value]


def _run_until(loop: EngineLoop, fd: int, stats: tuple[WorkloadStats, WorkloadStats],
               until: Callable[[Control, WorkloadStats], bool]) -> tuple[Control, WorkloadStats]:
    """Two subintervals of 50 ms and on until ``until`` holds (at most 5 s: ``Control``) on
    the control (its errors) and the workload's stats handed over, summed; then the loop and
    the descriptor closed. The control and the sum."""
    total = WorkloadStats()
    ctl = Control(2, until=lambda: until(ctl, total), adding=[(stats, total)])
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, 50_000_000)
    finally:
        loop.close()
        os.close(fd)
    return ctl, total


def _device_bytes(name: str) -> tuple[int, int]:
    """Bytes the device has read and written (``/sys/block/<dev>/stat`` sectors)."""
    with open(f"/sys/block/{name}/stat") as f:
        fields = f.read().split()
    return int(fields[2]) * 512, int(fields[6]) * 512


def _run(path: str, params: list[WorkloadParams], seconds: float, subintervals: int = 1,
         lbs: int = 512, until: Callable[[list[WorkloadStats]], bool] | None = None
         ) -> tuple[list[WorkloadStats], dict[str, dict[str, int]], EngineLoop]:
    """Workloads ``t:l:w0``... on io_uring in one loop, their stats in one region (as a
    worker's, which the compiled loop bins into), for ``seconds`` in ``subintervals`` and,
    with ``until`` (on each one's statistics so far), on until it holds (``Control``: at most
    100 subintervals); each one's statistics of every subinterval, merged, and the errors."""
    loop = EngineLoop(capacity=256)
    loop.register_engine_kind("io_uring", UringEngine)
    eng = loop.engine("io_uring")
    fd = files.open_lun(path, writable=any(p.writes for p in params),
                        extra_flags=eng.open_flags)
    size = files.probe(path).size_bytes
    n = WorkloadStats.SIZE
    region = np.zeros(2 * n * len(params), dtype=np.int64)
    stats = [(WorkloadStats(region[2 * i * n : (2 * i + 1) * n]),
              WorkloadStats(region[(2 * i + 1) * n : (2 * i + 2) * n])) for i in range(len(params))]
    for i, (p, st) in enumerate(zip(params, stats, strict=True)):
        loop.add_workload(WorkloadSpec(f"t:l:w{i}", p, eng, fd, size, lbs, st), None)
    for pair in stats:  # a view of zeros: the least latencies must start above any
        pair[0].reset()
        pair[1].reset()
    totals = [WorkloadStats() for _ in params]
    ctl = Control(subintervals, None if until is None else lambda: until(totals),
                  adding=zip(stats, totals, strict=True))
    try:
        loop.run(ctl, time.monotonic_ns() + 1_000_000, int(seconds / subintervals * 1e9))
    finally:
        loop.close()
        os.close(fd)
    return totals, ctl.errors, loop


def _noting_runs(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> list[int]:
    """The compiled loop's backend at each of its runs (``compiled``: whether it may run)."""
    monkeypatch.setattr(tuning, "COMPILED_LOOP", compiled)
    real = compiled_loop.run
    backends: list[int] = []

    def noting(args: LoopArgs) -> int:
        backends.append(int(args.backend))
        return real(args)

    monkeypatch.setattr(compiled_loop, "run", noting)
    return backends


@pytest.mark.root
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize("iops", [
    # at max IOPS, on until 300 reads are recorded; the paced rate to 1 % needs the machine
    pytest.param(None, id="max", marks=pytest.mark.beside),
    pytest.param(4000.0, id="paced"),
])
@pytest.mark.parametrize("iodepth", [1, 32])
def test_reads_recorded_are_the_reads_the_device_did(
    loop_device: LoopFactory, iodepth: int, iops: float | None, compiled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over 3 subintervals (at max IOPS, on until 300 are recorded and the compiled loop ran
    where it may): the reads recorded are the reads done (but for those reaped past the last
    boundary or in flight at the stop: at most twice the queue depth), counted by the kernel
    twice (``ReadWitness``: the lesser of the device's reads and this process's). A paced
    workload holds its rate, within 1 %, over 1 s: the I/Os its schedule had due and the
    loop had not issued yet at the stop (a backlog, which a paced workload keeps) are not
    counted, and at QD1 one late read of a few ms there missed 1 % of 0.3 s (the Python loop
    recorded 1,183 of 1,200 with the host quiet, 2026-11-29); the compiled loop ran on
    io_uring, or did not run."""
    dev = _written(loop_device)
    backends = _noting_runs(monkeypatch, compiled)
    p = WorkloadParams(iodepth=iodepth, iops=iops, seed=4)
    witness = ReadWitness(dev.name)
    seconds = 0.3 if iops is None else 1.0
    (st,), errors, loop = _run(
        dev.path, [p], seconds, subintervals=3,
        until=None if iops is not None else lambda sts: sts[0].ops(0) > 300 and (
            bool(backends) or not compiled))
    read = witness.bytes() // p.blocksize_bytes
    assert errors == {} and loop.in_flight == 0
    recorded = st.ops(0)
    assert recorded > 300
    assert recorded <= read <= recorded + 2 * iodepth, (recorded, read)
    assert int(st.counters[0, 1]) == recorded * p.blocksize_bytes
    if iops is not None:  # 1 s at 4,000 IOPS
        assert 0.99 * 4000 <= recorded <= 4000, recorded
    assert backends == [1] * len(backends) and bool(backends) == compiled


@pytest.mark.beside
@pytest.mark.root
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
def test_busy_poll_at_depth_one_looks_in_the_ring(
    loop_device: LoopFactory, compiled: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``busy_poll`` at QD1 (the compiled loop's ``lone`` wait looking in the completion ring,
    which asks the kernel to post what waits for this task): every read recorded is one the
    device did (witnessed as above), with a real latency."""
    dev = _written(loop_device)
    backends = _noting_runs(monkeypatch, compiled)
    p = WorkloadParams(iodepth=1, busy_poll=True, seed=6)
    witness = ReadWitness(dev.name)
    (st,), errors, _ = _run(dev.path, [p], 0.2, subintervals=2,
                            until=lambda sts: sts[0].ops(0) > 200 and (
                                bool(backends) or not compiled))
    read = witness.bytes() // p.blocksize_bytes
    assert errors == {} and st.ops(0) > 200
    assert st.ops(0) <= read <= st.ops(0) + 2, (st.ops(0), read)
    assert st.lat[0, 0, 1] > 0  # the least service time: a real latency, not zero
    assert backends == [1] * len(backends) and bool(backends) == compiled


@pytest.mark.beside
@pytest.mark.root
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize(("iodepth", "read_fraction"), [(1, 0.0), (32, 0.0), (32, 0.5)])
def test_writes_land_byte_for_byte_where_they_were_sent(
    loop_device: LoopFactory, iodepth: int, read_fraction: float, compiled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sequential writes over 1 MiB (with reads beside them): every block of the range holds
    its data for its offset (``WritePattern.verify``: the offset is stamped in each
    sector), nothing was written outside it, and the device wrote the bytes recorded."""
    dev = _written(loop_device)
    backends = _noting_runs(monkeypatch, compiled)
    start, end = 2 * MiB, 3 * MiB
    p = WorkloadParams(iosequencer="sequential", read_fraction=read_fraction, iodepth=iodepth,
                       range_start_bytes=start, range_end_bytes=end, seed=11)
    with open(dev.backing_file, "rb") as f:
        outside = f.read(start), f.read()[end - start :]
    _, wrote_before = _device_bytes(dev.name)
    # on until every block of the range was written (the stop drains the writes in flight;
    # going round it again writes the same data): with reads beside the writes, a block is
    # written in a round with odds 1/2, so 40 rounds leave one unwritten with odds 2^-40 (the
    # draws are the seed's: here every block is written by the 1,832nd I/O)
    rounds = 1 if read_fraction == 0 else 40
    (st,), errors, _ = _run(dev.path, [p], 0.3, subintervals=3,
                            until=lambda sts: sts[0].ops(3) >= 256
                            and sts[0].ops() >= 256 * rounds and (bool(backends) or not compiled))
    wrote = _device_bytes(dev.name)[1] - wrote_before
    assert errors == {}
    assert st.ops(3) >= 256
    assert st.ops(3) * p.blocksize_bytes <= wrote <= (st.ops(3) + 2 * iodepth) * p.blocksize_bytes
    with open(dev.backing_file, "rb") as f:
        assert (f.read(start), f.read()[end - start :]) == outside
    pattern_checked = verify_range(dev.backing_file, p, start, end)
    assert pattern_checked == 256
    assert bool(backends) == compiled


@pytest.mark.beside
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize("iodepth", [1, 32])
def test_reads_past_the_end_are_short_transfers_counted(
    lun_file: str, iodepth: int, compiled: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A workload over the last MiB of a file shrunk under its feet: every read is short (0
    bytes), counted as such and not as an I/O done, as libaio's are."""
    backends = _noting_runs(monkeypatch, compiled)
    p = WorkloadParams(iodepth=iodepth, range_start_bytes=15 * MiB, range_end_bytes=16 * MiB)
    os.truncate(lun_file, 16 * MiB)
    loop, _eng, fd, stats = _one_workload(lun_file, p, 16 * MiB)
    os.truncate(lun_file, 15 * MiB)  # every read is now beyond the end: 0 bytes
    ctl, total = _run_until(loop, fd, stats, lambda c, _: c.errors.get("t:l:w", {}).get(
        "short", 0) > 10 and (bool(backends) or not compiled))
    assert set(ctl.errors["t:l:w"]) == {"short"}
    assert total.counters[0, 2] == ctl.errors["t:l:w"]["short"] > 10
    assert total.ops() == 0
    assert bool(backends) == compiled


@pytest.mark.root
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
def test_paced_and_max_workloads_with_writes_share_the_ring(
    loop_device: LoopFactory, compiled: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four workloads on one ring, each on its own MiB: two paced, two at max IOPS, half
    writes: their I/Os go out together (one submission for all that are due) and every
    written block holds its data for its offset; the paced ones hold their rates."""
    dev = loop_device(16 * MiB)  # zeros, written whole
    backends = _noting_runs(monkeypatch, compiled)
    params = [WorkloadParams(read_fraction=0.5, iodepth=4, seed=30 + i,
                             iops=2000.0 if i % 2 else None,
                             range_start_bytes=(4 + i) * MiB, range_end_bytes=(5 + i) * MiB)
              for i in range(4)]
    stats, errors, _ = _run(dev.path, params, 0.3, subintervals=3)
    assert errors == {}
    for p, st in zip(params, stats, strict=True):
        assert st.ops(1) > 100 and st.ops(0) > 100
        if p.iops is not None:  # 0.3 s at 2,000 IOPS
            assert 0.99 * 600 <= st.ops() <= 600, st.ops()
        assert verify_range(dev.backing_file, p, p.range_start_bytes, p.range_end_bytes) > 50
    assert backends == [1] * len(backends) and bool(backends) == compiled


@pytest.mark.beside
@pytest.mark.root
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize("iodepth", [1, 32])
def test_errors_are_counted_with_their_errno(
    loop_device: LoopFactory, iodepth: int, compiled: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A workload whose file the ring no longer holds (unregistered after its slots were
    prepared): every I/O completes with -EBADF, counted under EBADF as libaio's errors are,
    none as done."""
    dev = _written(loop_device)
    backends = _noting_runs(monkeypatch, compiled)
    loop, eng, fd, stats = _one_workload(dev.path, WorkloadParams(iodepth=iodepth),
                                         dev.size_bytes)
    eng.forget_file(fd)  # type: ignore[attr-defined]
    ctl, total = _run_until(loop, fd, stats, lambda c, _: c.errors.get("t:l:w", {}).get(
        "EBADF", 0) > 10 and (bool(backends) or not compiled))
    assert set(ctl.errors["t:l:w"]) == {"EBADF"}
    assert total.counters[0, 2] == ctl.errors["t:l:w"]["EBADF"] > 10
    assert total.ops() == 0
    assert bool(backends) == compiled


def _ring_resources() -> tuple[int, int]:
    """This process's io_uring descriptors and mappings."""
    fds = sum("io_uring" in os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir(
        "/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))
    with open("/proc/self/maps", encoding="ascii") as f:
        maps = sum("io_uring" in line for line in f)
    return fds, maps


@pytest.mark.beside
def test_a_ring_whose_set_up_fails_says_where_and_leaves_nothing_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``ivy_uring_setup`` fails part way, after the ring is set up and mapped: the kernel
    refuses more sparse files than RLIMIT_NOFILE (EMFILE), and more buffers than it registers
    (EINVAL). The error names the stage and the errno; the ring's descriptor and mappings are
    gone."""
    before = _ring_resources()
    nofile = resource.RLIMIT_NOFILE
    limits = resource.getrlimit(nofile)
    # the kernel's limit 1,024 while the engine reads one past the 32,768 files it asks for
    resource.setrlimit(nofile, (min(1024, limits[0]), limits[1]))
    try:
        monkeypatch.setattr(native.resource, "getrlimit", lambda which: (1 << 20, 1 << 20))
        with pytest.raises(IoEngineError, match=r"^io_uring's registration of 32,768 sparse "
                                                r"files failed: Too many open files "
                                                r"\(errno 24\)$"):
            UringEngine(SlotTable(8))
    finally:
        resource.setrlimit(nofile, limits)
    assert _ring_resources() == before
    lib = compiled_loop.library()
    assert lib is not None
    args, maps, stage = LoopArgs(), np.zeros(4, dtype=np.int64), ctypes.c_int64(0)
    rc = lib.ivy_uring_setup(args.address, 8, 8, native.MAX_REG_BUFFERS + 1,
                             maps.ctypes.data, ctypes.byref(stage))
    assert (rc, stage.value) == (-22, 5)  # EINVAL, at the buffers
    assert _ring_resources() == before and args.uring_fd == 0 and not args.sqes


@pytest.mark.beside
@pytest.mark.root
def test_the_ring_roundtrip_registered_files_and_buffers(loop_device: LoopFactory) -> None:
    """A write and a read of one block through the engine by hand: the read finds the write's
    data; one reaped from the mapped ring without a system call, one with the timed wait;
    an unregistered descriptor's I/O completes with -EBADF, a read at an offset not a
    multiple of the logical block with -EINVAL (errno in the result, as libaio's); a file
    forgotten is no longer served."""
    dev = _written(loop_device)
    fd = os.open(dev.path, os.O_RDWR | os.O_DIRECT)
    table = SlotTable(8)
    bufs = AlignedBuffers(8, 4096)
    bufs.array[0, :] = np.arange(4096) % 251
    eng = UringEngine(table)
    try:
        slots = np.arange(8, dtype=np.intp)
        eng.prepare_slots(slots, fd, bufs)
        for slot, op, off, f in ((0, layout.IOCB_CMD_PWRITE, 8192, fd),
                                 (1, layout.IOCB_CMD_PREAD, 8192, fd),
                                 (2, layout.IOCB_CMD_PREAD, 0, fd + 100),
                                 (3, layout.IOCB_CMD_PREAD, 100, fd)):
            table.rows[slot, layout.ROW["opcode_fd"]] = layout.opcode_fd_word(op, f)
            table.rows[slot, layout.ROW["buf"]] = int(bufs.addr[slot])
            table.rows[slot, layout.ROW["nbytes"]] = 4096
            table.rows[slot, layout.ROW["offset"]] = off
        eng.submit(np.array([0], dtype=np.intp))
        assert eng.reap(1, 1_000_000_000) == 1
        assert int(eng.done_slot[0]) == 0 and int(eng.done_res[0]) == 4096
        eng.submit(np.array([1], dtype=np.intp))
        n = 0
        deadline = time.monotonic() + 2
        while n == 0 and time.monotonic() < deadline:
            n = eng.poll()
        assert n == 1 and int(eng.done_slot[0]) == 1 and int(eng.done_res[0]) == 4096
        assert np.array_equal(bufs.array[1], bufs.array[0])
        eng.submit(np.array([2, 3], dtype=np.intp))
        got: dict[int, int] = {}
        while len(got) < 2 and time.monotonic() < deadline:
            n = eng.reap(1, 100_000_000)
            got.update(zip(eng.done_slot[:n].tolist(), eng.done_res[:n].tolist(), strict=True))
        assert got == {2: -9, 3: -22}  # EBADF, EINVAL
        assert eng.reap(1, 20_000_000) == 0  # nothing in flight: the wait times out
        eng.forget_file(fd)  # its last workload let go of it: unregistered
        eng.submit(np.array([1], dtype=np.intp))
        assert eng.reap(1, 1_000_000_000) == 1 and int(eng.done_res[0]) == -9
    finally:
        eng.close()
        os.close(fd)


@pytest.mark.root
def test_a_look_takes_a_completion_that_waits_for_the_task_to_enter(
        loop_device: LoopFactory) -> None:
    # the ring is set up with DEFER_TASKRUN (or COOP_TASKRUN): a completion may wait,
    # unposted, until the task enters the kernel, and the ring's flags say so
    # (IORING_SQ_TASKRUN). A look (poll: no
    # system call while the ring holds completions) that finds the ring empty and that flag up
    # enters, so it takes the completion then, not at the task's next system call or tick.
    # Watched from Python with no system call between the submission and the one look, until
    # the flag was seen up 5 times. Where the device's kernel worker runs on this test's CPU it
    # preempts the test, which posts the completion on its way back (seen in some runs, for
    # minutes): the flag is never seen then, and the test says so and skips (the compiler's
    # check of the constant above holds either way)
    dev = _written(loop_device)
    fd = os.open(dev.path, os.O_RDONLY | os.O_DIRECT)
    table, bufs = _read_slots(fd, 1)
    eng = UringEngine(table)
    taskrun = 1 << 2  # IORING_SQ_TASKRUN
    try:
        eng.prepare_slots(np.arange(1, dtype=np.intp), fd, bufs)
        flags = ctypes.c_uint32.from_address(eng.args.sq_flags)
        head = ctypes.c_uint32.from_address(eng.args.cq_head)
        tail = ctypes.c_uint32.from_address(eng.args.cq_tail)
        waited, tries = 0, 0
        while waited < 5 and tries < 300:
            tries += 1
            eng.submit(np.array([0], dtype=np.intp))
            deadline = time.perf_counter() + 0.5  # the vDSO's clock: no system call
            while (head.value == tail.value and not flags.value & taskrun
                   and time.perf_counter() < deadline):
                pass
            if head.value == tail.value and flags.value & taskrun:
                waited += 1
            assert eng.poll() == 1, (waited, flags.value)
            assert int(eng.done_slot[0]) == 0 and int(eng.done_res[0]) == 4096
    finally:
        eng.close()
        os.close(fd)
    if not waited:
        pytest.skip(f"in {tries} I/Os no completion waited for the task when looked for: the "
                    "kernel posted each before the look (as when its worker runs on this CPU)")


@pytest.mark.beside
def test_a_submission_the_kernel_did_not_take_stays_in_the_ring_until_it_does(
    loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``finish_submit`` (the compiled loop's R_SUBMIT comes back to it too): entries the kernel
    did not take (EAGAIN, as under memory pressure; the first call is made to say so) stay in
    the submission ring and go out at the next call, each once; a refusal is a
    ``SubmitError`` saying how many went out, and the entries it did not take leave the
    ring (none goes out with a later submission)."""
    dev = _written(loop_device)
    fd = os.open(dev.path, os.O_RDONLY | os.O_DIRECT)
    table, bufs = _read_slots(fd, 4)
    eng = UringEngine(table)
    try:
        eng.prepare_slots(np.arange(4, dtype=np.intp), fd, bufs)
        blind = LoopArgs()  # the engine's words, but a descriptor that io_uring_enter
        ctypes.memmove(blind.address, eng.args.address, ctypes.sizeof(LoopArgs))
        blind.uring_fd = -1  # refuses (EBADF): the entries stay in the ring, not taken
        real_submit, lib = eng._submit, eng._lib
        calls: list[int] = []

        def busy_once(addr: int, done: int, n: int) -> int:
            calls.append(n - done)
            if len(calls) == 1:
                return -11  # EAGAIN: nothing taken
            return int(lib.ivy_submit_rest(addr, done, n))

        slept: list[float] = []
        monkeypatch.setattr(base.time, "sleep", slept.append)
        monkeypatch.setattr(eng, "_submit",
                            lambda addr, slots, n: real_submit(blind.address, slots, n))
        monkeypatch.setattr(eng, "_lib", _Lib(lib, busy_once))
        eng.submit(np.array([0, 1], dtype=np.intp))
        assert calls[:2] == [2, 2] and slept == [0.0001]  # offered again after a short sleep
        got: dict[int, int] = {}
        deadline = time.monotonic() + 2
        while len(got) < 2 and time.monotonic() < deadline:
            n = eng.reap(1, 100_000_000)
            got.update(zip(eng.done_slot[:n].tolist(), eng.done_res[:n].tolist(), strict=True))
        assert got == {0: 4096, 1: 4096}
        assert eng.reap(1, 20_000_000) == 0  # each went out once
        monkeypatch.setattr(eng, "_lib", _Lib(lib, lambda *a: -77))  # EBADFD
        with pytest.raises(SubmitError) as refused:
            eng.submit(np.array([2], dtype=np.intp))
        assert refused.value.submitted == 0 and "errno 77" in str(refused.value)
        # a kernel that takes nothing, ever: offered SUBMIT_TRIES times over about 1 s of
        # sleeps (up to 1 ms each), then a refusal saying so
        slept.clear()
        monkeypatch.setattr(eng, "_lib", _Lib(lib, lambda *a: 0))
        with pytest.raises(SubmitError, match="took 0 of 1 I/Os and then no more"):
            eng.submit(np.array([3], dtype=np.intp))
        assert len(slept) == base.SUBMIT_TRIES - 1 and max(slept) == 0.001
        assert 0.9 < sum(slept) < 1.1, sum(slept)
        # the two refused entries (slots 2 and 3) were dropped from the ring: the next
        # submission sends its own I/O and no other
        head = ctypes.c_uint32.from_address(eng.args.sq_head)
        tail = ctypes.c_uint32.from_address(eng.args.sq_tail)
        assert head.value == tail.value
        monkeypatch.setattr(eng, "_submit", real_submit)
        monkeypatch.setattr(eng, "_lib", lib)
        eng.submit(np.array([0], dtype=np.intp))
        assert eng.reap(1, 1_000_000_000) == 1 and int(eng.done_slot[0]) == 0
        assert eng.reap(1, 50_000_000) == 0  # nothing else went out
    finally:
        eng.close()
        os.close(fd)


@pytest.mark.beside
def test_an_explicit_io_uring_is_refused_where_it_cannot_be_had(
    lun_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where io_uring is unavailable the choice is refused, naming the LUN and the reason,
    never served by another engine. The probe is patched: this host has io_uring, and an old
    kernel or a seccomp filter cannot be had in a test."""
    monkeypatch.setattr(engine_mod.native, "uring_available",
                        lambda: "io_uring_setup(8) failed: Operation not permitted (errno 1)")
    with pytest.raises(IoEngineError) as info:
        choose_engine("io_uring", lun_file, 512)
    text = str(info.value)
    assert lun_file in text and "io_uring engine is unavailable" in text and "errno 1" in text
    assert choose_engine("auto", lun_file, 512).kind == "libaio"  # auto keeps today's choice


@pytest.mark.beside
def test_io_uring_where_o_direct_is_refused_is_refused(
    lun_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_mod.files, "direct_io_works",
                        lambda path, lbs: "O_DIRECT read failed: EINVAL")
    with pytest.raises(IoEngineError, match="io_uring engine is unavailable: O_DIRECT read"):
        choose_engine("io_uring", lun_file, 512)


@pytest.mark.beside
@pytest.mark.parametrize(("mode", "ring", "refused"), [
    ("0", "ok", None), ("1", "ok", None),
    ("1", "EPERM", "not permitted (errno 1); kernel.io_uring_disabled = 1 on this host"),
    ("0", "ENOSYS", "Function not implemented (errno 38)"),
    ("2", "ok", "disabled on this host (kernel.io_uring_disabled = 2)"),
])
def test_the_kernels_switch_and_the_ring_say_why_io_uring_cannot_be_had(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, mode: str, ring: str,
    refused: str | None,
) -> None:
    """``kernel.io_uring_disabled`` from a file of the test's, and a ring that fails as the
    kernel would (the host's own switch is not the test's to set, nor its kernel's age): 2
    refuses before any ring, 1 names itself beside the ring's refusal, a kernel without
    io_uring (or a seccomp filter) is the ring's errno."""
    path = os.path.join(tmp_path, "io_uring_disabled")
    with open(path, "w") as f:
        f.write(mode + "\n")
    rings: list[int] = []

    class Ring:
        def __init__(self, table: SlotTable) -> None:
            entries = table.capacity
            rings.append(entries)
            if ring != "ok":
                err = {"EPERM": 1, "ENOSYS": 38}[ring]
                raise IoEngineError(f"io_uring_setup({entries}) failed: {os.strerror(err)} "
                                    f"(errno {err})")

        def close(self) -> None:
            pass

    monkeypatch.setattr(native, "_AVAILABLE", set())
    monkeypatch.setattr(native, "UringEngine", Ring)
    why = native.uring_available(path)
    assert (why is None) == (refused is None)
    assert refused is None or (why is not None and refused in why), why
    assert bool(rings) == (mode != "2")


@pytest.mark.root
def test_a_worker_refuses_io_uring_before_any_io_where_it_cannot_be_had(
        loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real worker (forked after the probe is patched: this host has io_uring, and an
    old kernel or a seccomp filter cannot be had in a test): the create is refused with the LUN
    and the reason, no workload is left and the device did no I/O but the engine choice's
    read of its first block (``files.direct_io_works``); where io_uring can be had
    the same create runs on it, and says so (the master adds the host: test_run_refusals)."""
    from slave.luns import describe_block_device
    from slave.worker import WorkerError
    from slave.worker_backend import WorkerBackend

    dev = _written(loop_device)
    lun = describe_block_device(dev.path)
    reason = "io_uring_setup(8) failed: Function not implemented (errno 38)"
    with monkeypatch.context() as m:
        m.setattr(engine_mod.native, "uring_available", lambda: reason)
        backend = WorkerBackend(1)
    try:
        before = _device_bytes(dev.name)
        with pytest.raises(WorkerError) as refused:
            backend.create("h:l:w", lun, WorkloadParams(iodepth=4), engine="io_uring")
        text = str(refused.value)
        assert dev.path in text and f"the io_uring engine is unavailable: {reason}" in text
        assert backend.pool.workloads == {}
        read, wrote = _device_bytes(dev.name)  # the engine choice's O_DIRECT probe: one block
        assert read - before[0] <= 4096 and wrote == before[1]
    finally:
        backend.close()
    backend = WorkerBackend(1)
    try:
        info = backend.create("h:l:w", lun, WorkloadParams(iodepth=4), engine="io_uring")
        assert info["engine"] == "io_uring" and "warning" not in info
    finally:
        backend.close()


#: an LD_PRELOAD stand-in for libc's ``syscall``: an io_uring_setup whose flags meet
#: IVY_REFUSE_SETUP_FLAGS fails with EINVAL, as on a kernel that predates them; each setup's
#: flags and what became of them are appended to IVY_SETUP_LOG; every other call goes through
_OLD_KERNEL_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>

long syscall(long n, ...)
{
    static long (*real)(long, ...);
    long a[6];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    if (n == SYS_io_uring_setup) {
        uint32_t flags = *(uint32_t *)((char *)a[1] + 8); /* io_uring_params.flags */
        const char *mask = getenv("IVY_REFUSE_SETUP_FLAGS"), *path = getenv("IVY_SETUP_LOG");
        int refuse = mask && (flags & (uint32_t)strtoul(mask, NULL, 0)) != 0;
        FILE *log = path ? fopen(path, "a") : NULL;
        if (log) {
            fprintf(log, "%u %s\n", flags, refuse ? "refused" : "taken");
            fclose(log);
        }
        if (refuse) {
            errno = EINVAL;
            return -1;
        }
    }
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""

_CHILD = """\
import json, sys
from slave.engine import compiled_loop, tuning
from protocol.params import WorkloadParams
from tests.slave.test_engine_uring import _run
tuning.COMPILED_LOOP = sys.argv[2] == "compiled"
backends, real = [], compiled_loop.run
compiled_loop.run = lambda args: (backends.append(int(args.backend)), real(args))[1]
(st,), errors, loop = _run(sys.argv[1], [WorkloadParams(iodepth=8, iops=4000.0, seed=4)], 0.3,
                           subintervals=3)
print(json.dumps({"ops": st.ops(0), "bytes": int(st.counters[0, 1]), "errors": errors,
                  "in_flight": loop.in_flight, "backends": backends}))
"""

DEFER_TASKRUN, SINGLE_ISSUER, COOP_TASKRUN, TASKRUN_FLAG = 1 << 13, 1 << 12, 1 << 8, 1 << 9


@pytest.mark.root
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) for the shim")
@pytest.mark.parametrize("compiled", [True, False], ids=["paced_run", "python"])
@pytest.mark.parametrize(("refused", "tried"), [
    # before 6.1: no DEFER_TASKRUN or SINGLE_ISSUER, so COOP_TASKRUN | TASKRUN_FLAG (5.19)
    (DEFER_TASKRUN, [DEFER_TASKRUN | SINGLE_ISSUER | TASKRUN_FLAG,
                     COOP_TASKRUN | TASKRUN_FLAG]),
    # before 5.19: none of them
    (DEFER_TASKRUN | COOP_TASKRUN, [DEFER_TASKRUN | SINGLE_ISSUER | TASKRUN_FLAG,
                                    COOP_TASKRUN | TASKRUN_FLAG, 0]),
], ids=["before-6.1", "before-5.19"])
def test_an_older_kernels_ring_without_the_newer_set_up_flags_does_the_same_io(
        loop_device: LoopFactory, tmp_path: Path, refused: int, tried: list[int],
        compiled: bool) -> None:
    """On a kernel that refuses the newest set-up flags (EINVAL, made so by a stand-in for
    libc's ``syscall`` loaded before it), the ring is set up with the next set, and then with
    none: each refused in turn, the last taken; a paced workload on that ring holds its rate
    (1,200 reads in 0.3 s at 4,000 IOPS, to 1 %) in the compiled loop and in the Python one,
    without errors, every read recorded done by the device (its own counters)."""
    shim = tmp_path / "old_kernel.so"
    (tmp_path / "old_kernel.c").write_text(_OLD_KERNEL_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim),
                    str(tmp_path / "old_kernel.c"), "-ldl"], check=True, timeout=120)
    dev = _written(loop_device)
    log = tmp_path / "setups"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LD_PRELOAD": str(shim), "IVY_REFUSE_SETUP_FLAGS": str(refused),
           "IVY_SETUP_LOG": str(log), "PYTHONPATH": str(root)}
    before = _device_bytes(dev.name)[0]
    done = subprocess.run([sys.executable, "-c", _CHILD, dev.path,
                           "compiled" if compiled else "python"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    read = _device_bytes(dev.name)[0] - before
    got = json.loads(done.stdout.splitlines()[-1])
    setups = [line.split() for line in log.read_text().splitlines()]
    assert setups == [[str(f), "refused"] for f in tried[:-1]] + [[str(tried[-1]), "taken"]]
    assert got["errors"] == {} and got["in_flight"] == 0
    assert 0.99 * 1200 <= got["ops"] <= 1200, got
    assert got["bytes"] == got["ops"] * 4096 <= read, (got, read)
    assert bool(got["backends"]) == compiled and set(got["backends"]) <= {1}, got
