"""A workload as the engine loop holds it: what it joins with (``WorkloadSpec``) and its state in
the loop (``LoopWorkload``: slots, buffers, sequencer and ring of precomputed I/Os with their
write data); making that ring and taking its next I/Os; how many I/Os a refused submission put
in flight (``took``).

Owns a workload's own state. It must not touch the slot table's rows, the records or an
engine: the loop's parts do, and say which of a workload's fields they keep (``Slots`` keeps
``slots`` and ``free``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.datapattern import WritePattern
from slave.engine import tuning
from slave.engine.base import AlignedBuffers, IoEngine, SubmitError
from slave.engine.layout import IO, IO_WORDS, IOCB_CMD_PREAD, IOCB_CMD_PWRITE, opcode_fd_word
from slave.engine.verify_state import WorkloadVerify
from slave.sequencer import Sequencer


@dataclass
class WorkloadSpec:
    """Everything a workload needs to join a loop (prepared outside the hot path)."""

    workload_id: str
    params: WorkloadParams
    engine: IoEngine
    fd: int
    lun_size_bytes: int
    logical_block_bytes: int
    stats: tuple[WorkloadStats, WorkloadStats]
    on_release: Callable[[], None] | None = None  # called when the loop drops the workload
    # data verification: its writes stamped and its reads checked (``verify_state``)
    verify: WorkloadVerify | None = None


@dataclass
class LoopWorkload:
    index: int
    spec: WorkloadSpec
    seq: Sequencer
    pattern: WritePattern | None
    slots: npt.NDArray[np.intp]
    buffers: AlignedBuffers
    paced: bool
    free: list[int] = field(default_factory=list)
    ring: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, IO_WORDS), np.int64))
    ring_write: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))
    ring_len: int = 0  # rows in ``ring``
    # the serial of the ring's first I/O (ring I/O i's is ring_serial + i: the data of its
    # write, ``WritePattern``), while the workload writes
    ring_serial: int = 1
    cur: int = 0
    # the next ``overdue`` I/Os of the ring (from ``cur``): paced ones an edit to max iops
    # kept, with their scheduled times
    overdue: int = 0
    fixed_cat: int = -1  # category of every I/O, or -1 when it varies
    ring_spread: float = 1.0  # a paced refill's size, relative (``ring_ahead``)
    ahead: int = tuning.RING_MIN  # I/Os a refill precomputes (``ring_ahead``, kept by the loop)
    old_buffers: list[AlignedBuffers] = field(default_factory=list)

    @property
    def params(self) -> WorkloadParams:
        return self.spec.params

    def refill(self, need: int) -> None:
        """Precompute the next I/Os, at least ``need`` (keeping the unused rest)."""
        n = max(self.ahead, need, 4 * self.params.iodepth)
        ch = self.seq.chunk(n)
        fd = self.spec.fd
        c = self.cur
        left = self.ring_len - c
        # the unused rest, then the new I/Os, written in place (no concatenation)
        both = np.empty((left + n, IO_WORDS), dtype=np.int64)
        both[:left] = self.ring[c:]
        ring = both[left:]
        read = opcode_fd_word(IOCB_CMD_PREAD, fd)
        if self.pattern is None:  # reads only
            ring[:, IO["opcode_fd"]] = read
        else:
            ring[:, IO["opcode_fd"]] = np.where(ch.is_write,
                                                opcode_fd_word(IOCB_CMD_PWRITE, fd), read)
        ring[:, IO["offset"]] = ch.offset_bytes
        ring[:, IO["cat"]] = ch.category
        ring[:, IO["submit_ns"]] = 0
        ring[:, IO["sched_ns"]] = ch.sched_ns
        set_ring(
            self,
            both,
            np.concatenate([self.ring_write[c:], ch.is_write]) if left else ch.is_write,
            self.ring_serial + c,  # the unused rest's serials, then the new I/Os' next ones
        )

    def next_ios(self, slots: npt.NDArray[np.intp],
                 buffer_row: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The next ``len(slots)`` precomputed I/Os (refilling the ring when short), the data
        of the writes among them put into the buffers of their slots (``buffer_row``: each
        slot's buffer row, by slot)."""
        k = int(slots.size)
        c = self.cur
        if c + k > self.ring_len:
            self.refill(k)
            c = 0
        self.cur = c + k
        if self.pattern is not None:
            writes = self.ring_write[c : c + k]
            if writes.any():
                write_data(self, buffer_row[slots[writes]], c, c + k, writes)
        return self.ring[c : c + k]


def ring_ahead(w: LoopWorkload, n_max_iops: int, n_paced: int) -> int:
    """How many I/Os ``w`` precomputes at a refill, beside ``n_max_iops`` max-iops and
    ``n_paced`` paced workloads (itself included)."""
    iops = w.params.iops
    if iops is None:
        share = tuning.RING_BUDGET // max(n_max_iops, 1)
        per_depth = tuning.RING_PER_DEPTH * w.params.iodepth
        return max(tuning.RING_MIN, min(tuning.RING_MAX, share, per_depth))
    # paced: a quarter second ahead within those bounds, times the workload's own factor in
    # [0.5, 1.5) (``ring_spread``), so that workloads of one rate started together do not all
    # stall the loop with their refills at the same moment
    share = tuning.RING_BUDGET // max(n_paced, 1)
    quarter_s = min(tuning.RING_MAX, share, int(iops / 4))
    return int(max(tuning.PACED_RING_MIN, quarter_s) * w.ring_spread)


def write_data(
    w: LoopWorkload,
    rows: npt.NDArray[np.intp],
    lo: int,
    hi: int,
    writes: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Put the data of ring I/Os ``lo:hi`` (those in ``writes``, else all) into the buffer
    ``rows``."""
    assert w.pattern is not None
    offsets = w.ring[lo:hi, IO["offset"]]
    serials = np.arange(w.ring_serial + lo, w.ring_serial + hi, dtype=np.int64)
    if writes is not None:
        offsets, serials = offsets[writes], serials[writes]
    w.pattern.fill(w.buffers.array, rows, offsets, serials)


def set_ring(
    w: LoopWorkload,
    ring: npt.NDArray[np.int64],
    is_write: npt.NDArray[np.bool_],
    first_serial: int | None = None,
) -> None:
    """Make ``ring`` the workload's precomputed I/Os; ``first_serial``: the serial of its
    first I/O (by default the pattern's next). The pattern's next serial is then the one
    after the ring's last."""
    ring = np.ascontiguousarray(ring)
    w.ring = ring
    w.ring_write = is_write
    w.ring_len = int(ring.shape[0])
    w.cur = 0
    if w.pattern is None:  # no writes: no data to place
        return
    if first_serial is None:
        first_serial = w.pattern.next_serial
    w.ring_serial = first_serial
    w.pattern.next_serial = first_serial + w.ring_len


def took(exc: IoEngineError) -> int:
    """How many I/Os of a refused submission the kernel took (in flight): ``SubmitError``
    says; another error, none."""
    return exc.submitted if isinstance(exc, SubmitError) else 0
