"""One definition of the draws: the compiled generator (``ivy_loop.c``: ``generate`` when a
ring runs out, ``paced_retime`` at an edit of the rate) and ``Sequencer`` (``chunk``,
``retime`` and ``schedule``, as ``LoopWorkload.refill`` and ``Workloads._retime`` call them) give a
workload the same offsets, directions, categories and scheduled times, bit for bit, for every
sequencer (Poisson too), at many rates, from the first arrival on, across refills of any size
and across edits of the rate; and a sequencer resumed where the kernel left it goes on as its
twin does."""

from __future__ import annotations

import shutil

import numpy as np
import numpy.typing as npt
import pytest

from protocol.params import WorkloadParams
from slave.engine import compiled_loop as pk
from slave.engine import layout, tuning
from slave.engine.layout import LoopArgs
from slave.sequencer import Sequencer

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="no C compiler (cc): the compiled paced loop cannot be "
                                       "built")

MiB = 1 << 20
_READ = layout.opcode_fd_word(layout.IOCB_CMD_PREAD, 7)
_WRITE = layout.opcode_fd_word(layout.IOCB_CMD_PWRITE, 7)
_CAP = 1024  # ring rows: the largest refill below
#: a start far from 0, as a monotonic clock's (16 days): the times' doubles round there
_T0 = 1_382_400_123_456_789


def _sequencer(params: WorkloadParams, start_ns: int = _T0) -> Sequencer:
    seq = Sequencer(params, lun_size_bytes=256 * MiB, logical_block_bytes=512,
                    stream="h:lun:w7")
    seq.start(start_ns)
    return seq


class _Kernel:
    """One workload's ring and generator row in the kernel's arrays, driven as the compiled
    loop drives them."""

    def __init__(self, seq: Sequencer) -> None:
        gs = seq.generator_state()
        assert gs is not None
        self.ring = np.zeros((_CAP, 5), dtype=np.int64)
        self.gen = np.stack([pk.generator(gs, _READ, _WRITE)])
        self.cur = np.zeros(1, dtype=np.int64)
        self.rlen = np.zeros(1, dtype=np.int64)
        self.phase = np.array([seq.phase_fraction])
        self.args = LoopArgs()
        for name, arr in (("rings", np.array([self.ring.ctypes.data], dtype=np.int64)),
                          ("cur", self.cur), ("rlen", self.rlen), ("gen", self.gen)):
            self.args.array(name, arr)

    def generate(self, m: int) -> npt.NDArray[np.int64]:
        pk.generate(self.args, 0, m)
        return self.ring[:m].copy()

    def retime(self, iops: float, at_ns: int, issued: int) -> npt.NDArray[np.int64]:
        """An edit of the rate at ``at_ns`` with the ring's first ``issued`` I/Os issued
        (``NativeLoop.retime_loaded``)."""
        self.cur[0] = issued
        periods, bases = Sequencer.schedule_starts(self.phase, np.array([iops]), at_ns)
        pk.retime(self.args, self.gen, at_ns, np.array([0], dtype=np.int64), periods, bases)
        return self.ring[: int(self.rlen[0])].copy()

    def hand_back(self, seq: Sequencer, iops: float | None) -> None:
        """``NativeLoop.take_back``: the sequencer takes the kernel's rate and place."""
        if iops is not None and seq.params.iops != iops:
            seq.rerate(seq.params.replace(iops=iops))
        seq.resume(*pk.generator_progress(self.gen[0]))


class _Python:
    """The same workload in Python: ``LoopWorkload.refill``'s ring and ``Workloads._retime``'s
    edit."""

    def __init__(self, seq: Sequencer) -> None:
        self.seq = seq
        self.ring = np.zeros((0, 5), dtype=np.int64)

    def generate(self, m: int) -> npt.NDArray[np.int64]:
        ch = self.seq.chunk(m)
        ring = np.zeros((m, 5), dtype=np.int64)
        ring[:, layout.IO["opcode_fd"]] = np.where(ch.is_write, _WRITE, _READ)
        ring[:, layout.IO["offset"]] = ch.offset_bytes
        ring[:, layout.IO["cat"]] = ch.category
        ring[:, layout.IO["sched_ns"]] = ch.sched_ns
        self.ring = ring
        return ring.copy()

    def retime(self, iops: float, at_ns: int, issued: int) -> npt.NDArray[np.int64]:
        rest = self.ring[issued:]
        due = int(rest[:, layout.IO["sched_ns"]].searchsorted(at_ns, "left"))
        self.seq.rewind_schedule(rest.shape[0] - due)  # drawn again from where theirs were
        self.seq.retime(self.seq.params.replace(iops=iops), at_ns)
        if due < rest.shape[0]:
            rest[due:, layout.IO["sched_ns"]] = self.seq.schedule(rest.shape[0] - due)
        return self.ring.copy()


def _same(got: npt.NDArray[np.int64], want: npt.NDArray[np.int64], what: str) -> None:
    """Equal, or the first row that differs, named."""
    assert got.shape == want.shape, what
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, (f"{what}: {bad.size} rows differ, the first at {bad[0]}: kernel "
                           f"{got[bad[0]].tolist()}, Python {want[bad[0]].tolist()}")


_POISSON = {"iosequencer": "random_independent"}
STREAMS = {
    "Poisson, 0.25 IOPS": WorkloadParams(iops=0.25, seed=11, **_POISSON),
    "Poisson, 77.7 IOPS, hot zone, 60 % reads": WorkloadParams(
        iops=77.7, seed=12, hot_zone_bytes=4 * MiB, hot_zone_fraction=0.7, read_fraction=0.6,
        **_POISSON),
    "Poisson, 5,000 IOPS, writes": WorkloadParams(iops=5000.0, seed=13, read_fraction=0.0,
                                                  **_POISSON),
    "Poisson, 123,456.7 IOPS, 8 KiB": WorkloadParams(iops=123_456.7, seed=14,
                                                    blocksize_bytes=8192, **_POISSON),
    "Poisson, 2,500,000 IOPS": WorkloadParams(iops=2.5e6, seed=15, read_fraction=0.3,
                                              **_POISSON),
    "Poisson, max iops": WorkloadParams(iops=None, seed=16, read_fraction=0.5, **_POISSON),
    "random_steady, 3 IOPS": WorkloadParams(iops=3.0, seed=21),
    "random_steady, 35,000 IOPS, hot zone": WorkloadParams(
        iops=35_000.0, seed=22, hot_zone_bytes=1 * MiB, hot_zone_fraction=0.2,
        read_fraction=0.9),
    "random_steady, 999,999.9 IOPS": WorkloadParams(iops=999_999.9, seed=23),
    "sequential, 3,000 IOPS, wrapping": WorkloadParams(
        iops=3000.0, seed=31, iosequencer="sequential", read_fraction=0.5,
        range_start_bytes=1 * MiB, range_end_bytes=1 * MiB + 100 * 4096,
        seq_start_bytes=1 * MiB + 90 * 4096),
    "sequential, 41,000.5 IOPS": WorkloadParams(iops=41_000.5, seed=32,
                                                iosequencer="sequential"),
}
#: refill sizes: the kernel's own (``GEN_IOS``), and others as Python's refills make them
_SIZES = (tuning.GEN_IOS, 1, 7, 300, 1024, tuning.GEN_IOS, 2, 513)


@pytest.mark.parametrize("name", list(STREAMS))
def test_refills_draw_the_same_ios_in_c_and_in_python(name: str) -> None:
    # 40 refills of various sizes (~13,000 I/Os) from the kernel's generator and from a twin
    # sequencer (same seed, same stream): every row the same; then the sequencer, resumed
    # where the kernel left it, goes on as the twin does
    params = STREAMS[name]
    seq, twin = _sequencer(params), _sequencer(params)
    c, py = _Kernel(seq), _Python(twin)
    for i in range(40):
        m = _SIZES[i % len(_SIZES)]
        got, want = c.generate(m), py.generate(m)
        _same(got, want, f"refill {i} of {m}")
        if i == 0 and params.iops is not None and "Poisson" in name:
            assert got[0, layout.IO["sched_ns"]] == _T0  # the first arrival is at the start
    c.hand_back(seq, params.iops)
    _same(_Python(seq).generate(700), py.generate(700), "resumed")


@pytest.mark.parametrize("iosequencer", ["random_independent", "random_steady", "sequential"])
def test_edits_of_the_rate_mid_stream_agree_in_c_and_in_python(iosequencer: str) -> None:
    # refills and edits of the rate in turn, as DFC makes them: at a time inside the ring
    # (on an I/O's time, and 1 ns past one), before its first, after its last, with some of
    # it issued; each edit's first arrival is at the edit (Poisson) and the backlog keeps its
    # times. The kernel's ring and the Python ring agree after every step, and so do the
    # sequencers after it all
    params = WorkloadParams(iops=5000.0, seed=41, iosequencer=iosequencer, read_fraction=0.7,
                            range_end_bytes=3 * MiB)
    seq, twin = _sequencer(params), _sequencer(params)
    c, py = _Kernel(seq), _Python(twin)
    rates = [20_000.0, 1234.5, 0.5, 80_000.0, 777.7, 333_333.3, 5000.0, 64.0]
    iops = params.iops
    for step, new in enumerate(rates):
        m = (tuning.GEN_IOS, 300, 1024, 7)[step % 4]
        ring = c.generate(m)
        _same(ring, py.generate(m), f"refill {step}")
        issued = (0, 3, m // 2, 1)[step % 4]
        sched = ring[:, layout.IO["sched_ns"]]
        at = {0: int(sched[m // 3]), 1: int(sched[m // 5]) + 1, 2: int(sched[0]) - 10,
              3: int(sched[-1]) + 1}[step % 4]
        got, want = c.retime(new, at, issued), py.retime(new, at, issued)
        _same(got, want, f"edit {step} to {new} IOPS at {at}")
        later = got[issued:, layout.IO["sched_ns"]]
        if iosequencer == "random_independent" and (later >= at).any():
            assert later[later >= at][0] == at  # the new schedule's first arrival
        iops = new
    c.hand_back(seq, iops)
    for m in (tuning.GEN_IOS, 5):
        _same(_Python(seq).generate(m), py.generate(m), f"resumed, {m}")
