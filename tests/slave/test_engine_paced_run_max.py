"""Max-iops workloads in the compiled word loop (``paced_run`` in
``slave/engine/ivy_loop.c``): several of them, mixed with paced ones, reading and writing,
on real libaio (loop devices and an O_DIRECT file). A max-iops I/O has no scheduled time in its
ring (0): it is scheduled as it goes out, so its response time is its service time; I/Os kept
from a paced schedule by an edit keep their times."""

from __future__ import annotations

import collections
import os
import time

import numpy as np
import pytest

from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.engine import compiled_loop as pk
from slave.engine import files, tuning
from slave.engine import loop as loop_mod
from slave.engine.loop import EngineLoop
from slave.engine.loop_native import NativeLoop
from slave.engine.threadpool import ThreadPoolEngine
from tests.slave.conftest import LoopFactory, settle
from tests.slave.rates import assert_kept
from tests.slave.readwitness import ReadWitness
from tests.slave.test_engine_compiled_loop import Control, _run_paced, codes
from tests.slave.test_engine_libaio import MiB, verify_range
from tests.slave.test_engine_lone_shallow import _compiled

_ = (_compiled, codes)  # fixtures: native AIO and the kernel (or fail as root); the codes


def _run_counting_reads(dev_name: str, path: str, params: list[WorkloadParams], sub_ns: int,
                        n_sub: int, ctl: Control | None = None
                        ) -> tuple[Control, EngineLoop, int]:
    """``_run_paced`` on a loop device, with the bytes it read from the device meanwhile."""
    settle()  # udev's probe of the new device reads it too
    witness = ReadWitness(dev_name)
    ctl, loop = _run_paced(path, params, sub_ns, n_sub, ctl)
    return ctl, loop, witness.bytes()


def _subs(ctl: Control, n_workloads: int, i: int) -> list[WorkloadStats]:
    """Workload ``i``'s stats, subinterval by subinterval."""
    return ctl.stats[i::n_workloads]


def test_several_max_workloads_run_compiled_and_every_read_is_counted(
        loop_device: LoopFactory, codes: collections.Counter[int]) -> None:
    """Four max-iops readers of depths 1, 2, 4 and 8 share one compiled loop through
    boundaries, generations of their I/Os in C and flushes: every slot is free or in flight
    at each boundary (``Control``), the loop stayed loaded over every boundary, the device
    read exactly what was recorded (and the few reaped past the last boundary), each one's
    response time is its service time, I/O by I/O, and each kept its queue full (its
    service times add up to over half its depth's time)."""
    dev = loop_device(64 * MiB)
    depths = [1, 2, 4, 8]
    params = [WorkloadParams(iodepth=d, seed=i, blocksize_bytes=4096)
              for i, d in enumerate(depths)]
    n_sub, sub_ns = 5, 100_000_000
    ctl, loop, read = _run_counting_reads(dev.name, dev.path, params, sub_ns, n_sub)
    assert codes[pk.R_WAKE] > 0 and ctl.loaded_boundaries == n_sub
    assert ctl.errors == {} and loop.in_flight == 0
    recorded = sum(st.ops() for st in ctl.stats)
    assert recorded > 20_000
    # the reads reaped past the last boundary (discarded with the stop) and those submitted
    # for them, which the stop drains
    assert recorded <= read // 4096 <= recorded + 2 * sum(depths), (recorded, read // 4096)
    for i, d in enumerate(depths):
        subs = _subs(ctl, len(depths), i)
        for st in subs:
            svc, rsp = st.histogram(0, 0), st.histogram(0, 1)
            assert svc.count == rsp.count == st.ops() > 200
            assert np.array_equal(st.hist[0, 0], st.hist[0, 1])
            assert (rsp.sum_ns, rsp.min_ns, rsp.max_ns) == (svc.sum_ns, svc.min_ns, svc.max_ns)
        busy = sum(st.histogram(0, 0).sum_ns for st in subs[1:-1]) / (d * (n_sub - 2) * sub_ns)
        assert 0.5 < busy <= 1.0, (d, busy)


def test_paced_and_max_workloads_share_the_compiled_loop(
        loop_device: LoopFactory, codes: collections.Counter[int]) -> None:
    """A paced workload keeps its rate (within 2 %) beside two max-iops ones that take the
    rest of the device, in one compiled loop; the paced one's I/Os are scheduled before they
    go out, the max-iops ones' as they go out."""
    dev = loop_device(64 * MiB)
    params = [WorkloadParams(iodepth=4, iops=5000.0, seed=1, blocksize_bytes=4096),
              WorkloadParams(iodepth=4, seed=2, blocksize_bytes=4096),
              WorkloadParams(iodepth=8, seed=3, blocksize_bytes=4096,
                             iosequencer="sequential")]
    ctl, loop, _ = _run_counting_reads(dev.name, dev.path, params, 100_000_000, 5)
    assert codes[pk.R_WAKE] > 0 and ctl.loaded_boundaries == 5
    assert ctl.errors == {} and loop.in_flight == 0
    assert_kept([ctl.stats[3 * k].ops() for k in (1, 2, 3)], [500] * 3, 5000)
    for k in (1, 2, 3):
        paced, rnd, seq = ctl.stats[3 * k : 3 * k + 3]
        # the max-iops ones take what the device gives: 3,350-11,984 random reads a
        # subinterval against the paced 500 on a written loop device of a shared 2-core host
        assert rnd.ops() > 4 * paced.ops() and seq.ops(2) > 4 * paced.ops()
        svc, rsp = paced.histogram(0, 0), paced.histogram(0, 1)
        assert rsp.sum_ns >= svc.sum_ns and (rsp.min_ns or 0) >= (svc.min_ns or 0)
        for st, cat in ((rnd, 0), (seq, 2)):
            assert st.histogram(cat, 1).sum_ns == st.histogram(cat, 0).sum_ns


@pytest.mark.beside
def test_max_writes_land_byte_for_byte(lun_file: str, codes: collections.Counter[int]) -> None:
    """Max-iops writes in the compiled loop, each workload on its own MiB: random data mixed
    with reads, compressible data alone, beside a reader; every block written holds what the
    pattern says for its offset, and nothing outside the ranges was written. Judged on what
    was done, not how fast: the run goes on until enough was (a loop held off the CPU by
    other work does it later)."""
    params = [
        WorkloadParams(read_fraction=0.5, iodepth=4, blocksize_bytes=4096, seed=41,
                       range_start_bytes=4 * MiB, range_end_bytes=5 * MiB),
        WorkloadParams(read_fraction=0.0, iodepth=8, blocksize_bytes=8192, seed=42,
                       range_start_bytes=5 * MiB, range_end_bytes=6 * MiB,
                       write_data="compressible", write_data_ratio=2.0),
        WorkloadParams(iodepth=2, blocksize_bytes=4096, seed=43,
                       range_start_bytes=6 * MiB, range_end_bytes=7 * MiB),
    ]

    def enough(c: Control) -> bool:
        # a subinterval of the first workload after its first with 100 reads and 100 writes;
        # its seed's first 300 I/Os write 113 blocks, the second's first 565 all 128 (each
        # issued I/O lands: the stop drains those in flight)
        firsts, seconds = c.stats[0::3], c.stats[1::3]
        return (any(st.ops(0) > 100 and st.ops(1) > 100 for st in firsts[1:])
                and sum(st.ops() for st in firsts) >= 300
                and sum(st.ops() for st in seconds) >= 565)

    ctl, loop = _run_paced(lun_file, params, 100_000_000, 3, Control(3, until=enough))
    n_sub = len(ctl.stats) // len(params)
    assert codes[pk.R_WAKE] > 0 and ctl.loaded_boundaries == n_sub
    assert ctl.errors == {} and loop.in_flight == 0
    # the first workload's subintervals after its first: reads and writes
    assert any(mixed.ops(0) > 100 and mixed.ops(1) > 100 for mixed in ctl.stats[3::3])
    written = [verify_range(lun_file, p, p.range_start_bytes, p.range_end_bytes)
               for p in params]
    assert written[0] > 100 and written[1] == 128 and written[2] == 0  # 1 MiB of 8 KiB, all
    with open(lun_file, "rb") as f:
        assert not any(f.read(4 * MiB))
        f.seek(7 * MiB)
        assert not any(f.read())


@pytest.mark.parametrize("carried", [True, False], ids=["carried over", "issued first"])
def test_a_backlog_kept_by_an_edit_to_max_keeps_its_times_across_a_second_edit(
        loop_device: LoopFactory, codes: collections.Counter[int],
        monkeypatch: pytest.MonkeyPatch, carried: bool) -> None:
    """A paced workload of depth 1 far behind its rate is edited to max iops: the I/Os its
    schedule had due and not issued go out first with their scheduled times (response >
    service) in the compiled loop. A second edit (to depth 16 and other write data, with the
    compiled loop switched off: the general loop) takes over those still not issued, with
    their times: thousands of them, beside a reader of depth 64 ("carried over"); none, where
    the compiled loop issued them all before it (fewer, beside a reader of depth 2: "issued
    first"). No max-iops I/O after them, timed at its submission, reads a response from a time
    it never had (0: the response would be the clock's whole reading). Once the backlog is
    out, response is service again."""
    dev = loop_device(64 * MiB)
    # the first edit keeps the first BACKLOG_BUDGET of some 100,000 I/Os due (the only paced
    # workload: all of the budget): thousands, or 512, which the compiled loop issues in the
    # next subinterval
    if carried:  # the kernel generates a ring's whole length at a time
        monkeypatch.setattr(tuning, "GEN_IOS", 1 << 20)
        # (16,384 kept 15,909 past the compiled loop's subinterval, too many for the general
        # loop to issue in 600 ms on a loaded machine)
        monkeypatch.setattr(tuning, "BACKLOG_BUDGET", 4096)
    else:  # short rings, and 512 generated at a time
        monkeypatch.setattr(tuning, "RING_MAX", 1024)
        monkeypatch.setattr(tuning, "BACKLOG_BUDGET", 512)
        monkeypatch.setattr(tuning, "BACKLOG_MIN", 256)
    behind = WorkloadParams(iodepth=1, iops=1_000_000.0, seed=1, blocksize_bytes=4096)
    # it writes a little, elsewhere: the LUN is opened for writing, as the second edit needs
    other = WorkloadParams(iodepth=64 if carried else 2, seed=2, blocksize_bytes=4096,
                           read_fraction=0.99, range_start_bytes=32 * MiB)
    ran: list[str] = []
    kept: list[int] = []

    def edit(loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        # the loop that ran the subinterval just finished
        ran.append("compiled" if loop.native.ws else "general")
        if finished == 0:
            loop.edit_workload("t:lun:w0", behind.replace(iops=None), boundary_ns)
        elif finished == 1:
            monkeypatch.setattr(tuning, "COMPILED_LOOP", False)  # the general loop from here
            loop.edit_workload("t:lun:w0", behind.replace(
                iops=None, iodepth=16, read_fraction=0.99, write_data="dedupable",
                write_data_ratio=2.0), boundary_ns)
        if finished in (0, 1):
            w = loop.workloads.live()[0]
            kept.append(w.overdue)

    n_sub = 8
    ctl, loop, _ = _run_counting_reads(dev.name, dev.path, [behind, other], 100_000_000,
                                       n_sub, Control(n_sub, at_boundary=edit))
    assert ran[:3] == ["compiled", "compiled", "general"], ran
    assert ctl.errors == {} and loop.in_flight == 0
    subs = _subs(ctl, 2, 0)
    late = [st.histogram(0, 1).sum_ns - st.histogram(0, 0).sum_ns for st in subs]
    if carried:  # the backlog in both loops: what the compiled loop had not issued, kept
        assert kept[0] > kept[1] > 0 and late[1] > 0 and late[2] > 0, (kept, late)
    else:  # issued in the compiled loop, the I/Os after it max-iops ones
        assert kept[1] == 0 and late[2:] == [0] * (n_sub - 2), (kept, late)
    assert late[-1] == 0, (kept, late)  # out by the last subinterval
    for st in subs:
        assert (st.histogram(0, 1).max_ns or 0) < n_sub * 100_000_000, (kept, late)


def test_max_workloads_keep_their_depth_when_the_set_is_given_back(
        loop_device: LoopFactory, codes: collections.Counter[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled loop frees a max-iops workload's slots and submits them again within its
    turn; given back between the two (it returned for a control poll after a batch), they go
    out at once. Two max-iops readers beside a paced one whose rate is edited at every poll
    for two subintervals (each edit gives the set back and takes it again), then joined by a
    reader on the thread-pool engine (as a LUN without O_DIRECT gets; one loop, two engines:
    the general loop): every slot is free or in flight at each boundary (``Control``: a slot
    left free would be neither there), the hand-backs did find such slots, and each reader
    keeps its queue full in the general loop."""
    dev = loop_device(64 * MiB)
    monkeypatch.setattr(tuning, "POLL_CONTROL_NS", 500_000)
    params = [WorkloadParams(iodepth=4, seed=1, blocksize_bytes=4096),
              WorkloadParams(iodepth=8, seed=2, blocksize_bytes=4096),
              WorkloadParams(iodepth=1, iops=1000.0, seed=3, blocksize_bytes=4096)]
    loops: list[str] = []
    fds: list[int] = []
    freed = [0, 0]  # max-iops slots the kernel had freed and not submitted; hand-backs
    give_back = NativeLoop.give_back

    def noting(native: NativeLoop) -> None:
        give_back(native)
        freed[0] += sum(len(w.free) for w in native.ws if not w.paced)
        freed[1] += 1

    monkeypatch.setattr(NativeLoop, "give_back", noting)
    sub_ns, n_sub, join = 100_000_000, 5, 2

    def edit(loop: EngineLoop, elapsed_ns: int) -> None:
        if loop.subinterval_index in (0, 1):
            rate = 1000.0 + 100 * (elapsed_ns // 1_000_000 % 2)
            loop.edit_workload("t:lun:w2", params[2].replace(iops=rate), time.monotonic_ns())

    def add(loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        loops.append("compiled" if loop.native.ws else "general")
        if finished == join - 1:
            loop.register_engine_kind("threadpool", ThreadPoolEngine)
            fds.append(files.open_lun(dev.path, writable=False, extra_flags=0))
            joiner = WorkloadParams(iodepth=2, seed=4, blocksize_bytes=4096)
            loop.add_workload(loop_mod.WorkloadSpec(
                "t:lun:w3", joiner, loop.engine("threadpool"), fds[0], dev.size_bytes, 512,
                (WorkloadStats(), WorkloadStats())), boundary_ns)

    try:
        ctl, loop, _ = _run_counting_reads(dev.name, dev.path, params, sub_ns, n_sub,
                                           Control(n_sub, at_poll=edit, at_boundary=add))
    finally:
        for fd in fds:
            os.close(fd)
    assert loops == ["compiled"] * join + ["general"] * (n_sub - join), loops
    assert ctl.errors == {} and loop.in_flight == 0
    # how many hand-backs fit in the two subintervals, and what each finds, follow the
    # machine's speed (each costs an edit in Python): 1 to 96 of them finding about 12 freed
    # slots each on a VM whose host was busy, one at every poll (391-396) finding 0.6-0.8
    # each on a quiet one; some found freed slots, which went out at once
    assert freed[1] > 0 and freed[0] > 0, freed
    for i, d in enumerate((4, 8)):
        st = _subs(ctl, 3, i)[join + 1]  # in the general loop, after the join
        busy = st.histogram(0, 0).sum_ns / (d * sub_ns)
        assert 0.5 < busy <= 1.0, (i, busy)


def test_an_edit_of_a_max_workload_to_a_rate_paces_it(
        loop_device: LoopFactory, codes: collections.Counter[int]) -> None:
    """A rate for a max-iops workload, given as DFC gives rates (``edit_workloads`` at a
    boundary, nothing else changed), beside a paced workload that also gets a new rate: the
    former is paced from then on at its rate (the compiled set's in-place retiming is for
    paced workloads only), the latter at its new one."""
    dev = loop_device(64 * MiB)
    params = [WorkloadParams(iodepth=4, seed=1, blocksize_bytes=4096),
              WorkloadParams(iodepth=4, iops=3000.0, seed=2, blocksize_bytes=4096)]

    def edit(loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        if finished == 0:
            loop.edit_workloads([("t:lun:w0", params[0].replace(iops=2000.0)),
                                 ("t:lun:w1", params[1].replace(iops=4000.0))], boundary_ns)

    ctl, loop, _ = _run_counting_reads(dev.name, dev.path, params, 100_000_000, 4,
                                       Control(4, at_boundary=edit))
    assert codes[pk.R_WAKE] > 0 and ctl.errors == {} and loop.in_flight == 0
    assert ctl.stats[0].ops() > 2000  # at max iops first
    for i, rate in enumerate((2000.0, 4000.0)):
        # in the first subinterval of its rate, the first workload's I/Os also count those of
        # max iops that were in flight at the edit, and those that completed just past the
        # boundary had sent out again before it (at most its depth each)
        first, want = ctl.stats[2 + i].ops(), rate * 0.1
        if i == 0:
            first -= min(2 * params[i].iodepth, max(0, round(first - want)))
        assert_kept([first, ctl.stats[4 + i].ops()], [want] * 2, rate, what=i)


def test_the_waits_try_both_ways_and_count_every_completion(
        loop_device: LoopFactory, codes: collections.Counter[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A max-iops reader of depth 8 on a real device, with trials of four 5 ms turns and
    holds of 20-40 ms (``await_choose``): by the last boundary the loop has tried both ways
    and kept one, and its count of completions is every completion recorded."""
    for name, value in (("AWAIT_TRIAL_NS", 5_000_000), ("AWAIT_TRIALS", 4),
                        ("AWAIT_HOLD_NS", 20_000_000), ("AWAIT_HOLD_MAX_NS", 40_000_000)):
        monkeypatch.setattr(tuning, name, value)
    seen: list[tuple[int, ...]] = []

    def at_boundary(loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        a = loop.native.args
        seen.append((finished, a.done, a.await_held, a.look_ns, a.block_ns, a.await_trials))

    dev = loop_device(64 * MiB)
    ctl, _ = _run_paced(dev.path, [WorkloadParams(iodepth=8, seed=5, blocksize_bytes=4096)],
                           100_000_000, 5, Control(5, at_boundary=at_boundary))
    assert ctl.errors == {} and ctl.loaded_boundaries == 5
    for finished, done, _, _, _, trials in seen:
        # the completions of the subintervals closed so far, every one counted in C
        assert done == sum(st.ops() for st in ctl.stats[: finished + 1]) > 0
        assert trials == 4
    assert any(held > 0 for _, _, held, _, _, _ in seen)  # a way was kept
    assert any(look > 0 for *_, look, _, _ in seen) and any(b > 0 for *_, b, _ in seen)
