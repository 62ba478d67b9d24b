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
from slave.engine.base import AlignedBuffers, IoEngine, SubmitError
from slave.engine.layout import R_OFF
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
    ring_len: int = 0  # rows in ``ring``
    # the planned data of the ring's I/Os (WritePattern.plan), when the pattern plans
    ring_pool_rows: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, np.intp))
    ring_stamps: npt.NDArray[np.int64] | None = None
    cur: int = 0
    # the next ``overdue`` I/Os of the ring (from ``cur``) are paced I/Os kept by an edit to
    # max iops: they keep their scheduled time (response time shows the backlog)
    overdue: int = 0
    fixed_cat: int = -1  # category of every I/O, or -1 when it varies
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
    plan: tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]] | None = None,
) -> None:
    """Make ``ring`` the workload's precomputed I/Os; ``plan``: their write data, planned
    (planned here when the pattern plans and it is not given)."""
    ring = np.ascontiguousarray(ring)
    w.ring = ring
    w.ring_write = is_write
    w.ring_len = int(ring.shape[0])
    w.cur = 0
    if w.pattern is None or not w.pattern.planned:  # no data to plan
        w.ring_stamps = None
        return
    if plan is None:
        plan = w.pattern.plan(ring[:, R_OFF])
    w.ring_pool_rows, w.ring_stamps = plan


def took(exc: IoEngineError) -> int:
    """How many I/Os of a refused submission the kernel took (in flight): ``SubmitError``
    says; another error, none."""
    return exc.submitted if isinstance(exc, SubmitError) else 0
