"""A workload as the engine loop holds it: what it joins with (``WorkloadSpec``), its state
in the loop (``LoopWorkload``: its slots, buffers, sequencer and ring of precomputed I/Os), the
making of that ring (``set_ring``), and how many I/Os a refused submission put in flight
(``took``). State only: the loop's parts (``slave.engine.loop`` and its ``loop_*`` modules) act
on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.stats import WorkloadStats
from slave.datapattern import WritePattern
from slave.engine.base import AlignedBuffers, IoEngine, SubmitError, int64_words
from slave.params import WorkloadParams
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
    ring: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 5), np.int64))
    ring_write: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))
    ring_words: memoryview = field(default_factory=lambda: memoryview(b"").cast("q"))
    ring_len: int = 0  # rows in ``ring``
    # writes among the ring's first i I/Os, at [i] (ring_len + 1 words; kept only while the
    # workload writes): whether a batch holds a write, in two word reads, not a numpy ``any``
    ring_writes_before: memoryview = field(default_factory=lambda: memoryview(b"").cast("q"))
    # the serial of the ring's first I/O (ring I/O i's is ring_serial + i: the data of its
    # write, ``WritePattern``), while the workload writes
    ring_serial: int = 1
    cur: int = 0
    # the next ``overdue`` I/Os of the ring (from ``cur``) are paced I/Os kept by an edit to
    # max iops: they keep their scheduled time (response time shows the backlog)
    overdue: int = 0
    fixed_cat: int = -1  # category of every I/O, or -1 when it varies
    write_only: bool = False  # every I/O a write (no read mask per batch)
    errors: dict[str, int] = field(default_factory=dict)
    errors_logged: int = 0
    ring_spread: float = 1.0  # a paced refill's size, relative (``EngineLoop._ahead``)
    old_buffers: list[AlignedBuffers] = field(default_factory=list)

    @property
    def params(self) -> WorkloadParams:
        return self.spec.params


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
    w.ring_words = int64_words(ring)
    w.ring_len = int(ring.shape[0])
    w.cur = 0
    if w.pattern is None:  # no writes: no data to place (``_put_write_data`` is not called)
        return
    before = np.zeros(w.ring_len + 1, dtype=np.int64)
    np.cumsum(is_write, out=before[1:])
    w.ring_writes_before = int64_words(before)
    if first_serial is None:
        first_serial = w.pattern.next_serial
    w.ring_serial = first_serial
    w.pattern.next_serial = first_serial + w.ring_len


def took(exc: IoEngineError) -> int:
    """How many I/Os of a refused submission the kernel took (in flight): ``SubmitError``
    says; another error, none."""
    return exc.submitted if isinstance(exc, SubmitError) else 0
