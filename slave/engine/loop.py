"""The engine loop: one thread of control that drives many workloads through shared engines.

Owns the hot path: reap a batch of completions, resubmit the completed slots (before any
bookkeeping) with the next precomputed I/Os of their workloads, submit paced I/Os when their
scheduled time comes, buffer raw completion records and bin them into the running subinterval's
``WorkloadStats`` in bulk, and switch subinterval buffers at each boundary. One timestamp is
taken per submit batch and one per reap batch. Small batches (queue depth 1 and 2) take a plain
scalar path; larger ones are handled with a fixed number of numpy operations per batch. A batch
that holds several workloads' I/Os is grouped by workload with plain ints and resubmitted in one
call (one ring copy per workload, then one stamp, scatter and submission); paced I/Os of several
workloads due together, likewise. Before this, one call per workload per batch cost 8 workloads
of depth 4 a third of their IOPS (140,000 -> 190,000-210,000 on a tmpfs loop device). A lone
max-iops workload of queue depth 1 or 2 on an engine that exposes its completions as words
(libaio, fake) runs in ``_loop_scalar``: plain ints and memoryviews, no numpy per I/O. A lone
max-iops read workload of a larger depth runs in ``_loop_ring`` on an engine that takes iocbs
by address (libaio, fake): its I/Os precomputed as whole iocbs (``IocbRing``), a reaped batch
answered by submitting the next ones by address and recorded as the events' words, no numpy
per batch (QD32 on a tmpfs loop device: user CPU per I/O 1.39 -> 0.97 us, median of 4 rounds
against fio's 0.79); it goes back to the slot path, drained, before any change. Where the host
built ``slave.engine.paced_kernel``, the ring's turns run in C (``_loop_ring_compiled``), as do
the depth 1-2 loop's for reads that block (``_loop_scalar_compiled``) and the paced loop's
(``_loop_paced_compiled``). Elsewhere it
runs in ``_loop_single``: the batch path's numpy operations with its lookups held in locals.
Paced workloads alone on such an engine run in ``_loop_paced``: plain ints per I/O, all their
due I/Os submitted in one call per turn; where that loop runs compiled, max-iops workloads join
it, alone or beside paced ones (a max-iops workload's I/Os are always due: its free slots go
out in the turn that freed them). Busy polling spins on the completion ring for a while after
each completion, then blocks.

It must not talk to processes, pipes or the network: everything outside the loop goes through
the ``LoopControl`` it is given (the worker process implements it; tests implement it in-process).

Time: ``time.monotonic_ns``. Service time = submit -> completion; response time = scheduled start
-> completion (for ``iops=max`` the scheduled start is the submit time). Paced I/Os keep their
schedule when the device cannot keep up, so the backlog shows in response time (no coordinated
omission). A workload never has more than ``iodepth`` I/Os in flight: it owns exactly
``iodepth`` slots.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as errno_mod
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from os import sched_yield
from typing import Any, Final, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.stats import N_CATEGORIES, WorkloadStats, common_root, record_groups, rooted_at
from slave.datapattern import WritePattern
from slave.engine import paced_kernel as pk
from slave.engine.aio_abi import (
    IOCB_CMD_PREAD,
    IOCB_CMD_PWRITE,
    W_BUF,
    W_NBYTES,
    W_OFFSET,
    W_OPCODE_FD,
    opcode_fd_word,
)
from slave.engine.base import (
    AlignedBuffers,
    IocbEngine,
    IoEngine,
    KernelHandles,
    SlotTable,
    SubmitError,
    int64_words,
)
from slave.engine.iocb_ring import EV_WORDS, TAG, IocbRing
from slave.params import WorkloadParams
from slave.sequencer import Sequencer, stream_fraction

log = logging.getLogger(__name__)
_T = TypeVar("_T")

FLUSH_AT: Final = 8192  # completion records buffered before binning
COMPACT_AT: Final = FLUSH_AT // 2  # records binned one at a time before the rest is moved up
RING_MIN: Final = 2048  # I/Os precomputed per refill of a max-iops workload, at least
# a max-iops workload precomputes RING_PER_DEPTH times its queue depth, up to RING_MAX (41
# bytes each). A refill holds up the loop's I/Os in flight (in the QD32 loop 150-250 us for
# 2,048 I/Os, 450-900 us for 16,384: numpy's code and the memory it writes are cold there), so
# at most one of the workload's I/Os in RING_PER_DEPTH waits one out, beyond the p99; RING_MIN
# alone put 1 in 64 of a QD32 workload's I/Os behind a refill. QD32, median of p99 / fio's p99
# in the same round, three runs of 8-10 rounds: 1.23 -> 1.15, 1.23 -> 1.48, 1.82 -> 1.67 (the
# VM's noise is as large as the effect)
RING_PER_DEPTH: Final = 512
RING_MAX: Final = 16384
# and the max-iops workloads of one loop share this many (10.5 MB of reads; writes carry 24
# more bytes each, their data's plan): 64 workloads of QD32 hold 4,096 each. Its paced
# workloads share as many again, up to RING_MAX each: a paced refill stalls the loop like a
# max-iops one (one workload at 131,000 IOPS: 190 us for 2,048 I/Os, 350 us for 16,384), and
# with at most RING_MIN each (as before) its 64 refills a second put the service-time p99 at
# 1.14x fio's (208 vs 160 us in six interleaved rounds), with RING_MAX 0.89-1.13x (180 us)
RING_BUDGET: Final = 1 << 18
# at least this many for a paced workload (41 bytes each): a refill costs ~70 us however few
# I/Os it makes, and 512 workloads of 78 IOPS each refilled every quarter second spent 30 % of
# their loop's time in it
PACED_RING_MIN: Final = 256
# the compiled paced loop generates a workload's next I/Os itself, this many at a time (at most
# its ring array's rows): 7-24 us each time (warm), against a Python refill's 0.35-1.2 ms
GEN_IOS: Final = 512
POLL_CONTROL_NS: Final = 2_000_000  # how often the loop lets the control look at commands
SCALAR_MAX: Final = 2  # batches up to this size take the scalar path
# a workload's share of a batch up to this size gets its planned write data one write at a time
# (basic indexing); above it, in one fancy-indexed operation
WRITE_ONE_MAX: Final = 4
# busy_poll: check the completion ring without a system call, yielding the core after every
# empty check (the device's kernel worker may need it), for up to BUSY_SPIN_NS after the last
# completion; then block in the engine's reap until the next one. Measured on 2 shared cores:
# pure spinning loses to blocking (it starves the loop device's worker and loses the CPU
# scheduler's wake-up preference); spinning 100 us then blocking beats both.
BUSY_SPIN_NS: Final = 100_000
# a max-iops loop that finds no completion looks again (yielding the core in between) for this long
# before it blocks in the engine's reap, while its recent waits were shorter than this
# (``_Waiter``): on the 2-core VM a blocking wait took ~45 us to return (the sleeping CPU's
# wake-up), by when 7 of 8 I/Os in flight had completed, so a QD8 workload ran at 0.55x fio's IOPS
# (116,000 vs 201,000; fio's one-at-a-time submission seldom finds the ring empty: 0.02 sleeps per
# I/O against ivypy's 0.11). Looking for 50 us first (about the wake-up's cost): QD8 116,000 ->
# 208,000-221,000 IOPS, QD32 258,000 -> 333,000-372,000, QD32 on a device that holds data 215,000
# -> 265,000-282,000 (fio 293,000), user CPU per I/O unchanged (0.6-0.7 at QD32; the spin replaces
# the sleep's system time). Behind the VM's own disk (a direct-I/O loop device: 0.15-0.5 ms per
# wait), looking first whatever the recent waits cost 9 empty looks and 10.8 us of user CPU per I/O
# at QD4 (2.7 at QD32); looking only after short waits, 0.3 looks and 7.1 us (1.2 at QD32)
AWAIT_SPIN_NS: Final = 50_000
# "short waits": a running mean under this. At AWAIT_SPIN_NS itself the gate trapped a loop in
# blocking: a wait that outlasts the look and blocks reads the sleeper's wake-up (~45 us on the
# VM) on top, so the mean, once past the gate, stayed past it. Measured with the compiled ring
# loop (tmpfs loop devices, QD32): two LUNs, a worker each, 631,000 IOPS gated at 50 us against
# 769,000-784,000 at 200 (fio's two jobs: 541,000); one LUN 587,000-698,000 against
# 636,000-707,000. Behind a direct-I/O loop device on the VM's disk (~150 us a read) QD4 read
# 26,000-28,000 IOPS at 1.2-1.8 us of user CPU per I/O gated at 50, 32,000-33,000 at 4.0-4.1 at
# 200; QD32 the same (98,000-100,000 at 0.3 us)
AWAIT_SPIN_GATE_NS: Final = 200_000
# a wait shorter than this is spent looking in the completion ring instead of sleeping: a sleep
# costs about this much in wake-up (measured on the 2-core VM: a bare Python QD1 loop reads
# ~95 us where C reads ~40-70). Paced at 50,000 IOPS (20 us apart) this halved the service-time
# p50 (151 -> 78 us; fio 79 us at the same rate) for 8 % more user CPU per I/O.
SLEEP_MIN_NS: Final = 30_000
# a wait longer than LONG_WAIT_NS for a paced I/O's scheduled time ends WAKE_EARLY_NS before it,
# and a second, short wait covers the rest (``_timed_wait_ns``): an idle CPU that stops polling
# sleeps deeper and wakes late. On the 2-core VM (guest halt-polling 200 us) a timed sleep of
# 40-200 us ended 8-12 us late (p50), one of 500 us 31 us and one of 1 ms 42 us (p99 209 and
# 315 us); bare metal's deep C-states cost the same kind of exit latency
LONG_WAIT_NS: Final = 200_000
WAKE_EARLY_NS: Final = 50_000
# the longest a blocking wait for a completion may hold up a control poll (POLL_CONTROL_NS):
# measured on a VM, io_getevents with a 2 ms timeout costs ~1/4 more per I/O than with 10 ms
BLOCK_WAIT_NS: Final = 10_000_000
LOGGED_ERRORS_PER_WORKLOAD: Final = 5
# paced workloads alone on a libaio engine (reads, and writes of planned data) run in compiled
# C where the host could build it (``slave.engine.paced_kernel``; ``_CompiledPaced``), and
# max-iops workloads with them or without them (but a lone one that a loop of its own serves);
# tests and bench_engine switch it off to run the Python loops
COMPILED_PACED = True
# and the max-iops loop of depth 1-2 that blocks, for a lone workload of reads
# (``pk.scalar_function``; ``EngineLoop._loop_scalar_compiled``); tests switch it off too
COMPILED_SCALAR = True
# and the lone max-iops read workload's ring of iocbs (``pk.ring_function``;
# ``EngineLoop._loop_ring_compiled``); tests switch it off to run the Python loop
COMPILED_RING = True
_INF: Final = 1 << 62
# bookkeeping words of a slot row (after the 8 iocb words); pending records copy whole rows
C_OWNER, C_CAT, C_SUBMIT, C_SCHED, C_NBYTES, C_ROW, C_RES, C_DONE = 8, 9, 10, 11, 12, 13, 14, 15
# a precomputed I/O: (opcode|fd word, offset, category, submit time, scheduled time), scattered
# into these row words in one operation
_SCATTER: Final = np.array([2, 5, C_CAT, C_SUBMIT, C_SCHED], dtype=np.intp)
R_OPFD, R_OFF, R_CAT, R_SUBMIT, R_SCHED = 0, 1, 2, 3, 4


class LoopControl(Protocol):
    """What the engine loop asks of its owner."""

    def poll(self, loop: EngineLoop) -> None:
        """Called every few ms while running: stage commands, or call ``loop.request_stop()``."""

    def poll_fd(self) -> int | None:
        """A descriptor that is readable (or closed) whenever ``poll`` has something to do, or
        None. With one, the compiled paced loop looks at it every ``POLL_CONTROL_NS`` itself
        and comes back for ``poll`` only when it is: each way back to Python cost 8-64 us,
        during which the I/Os due waited (at 35,000 IOPS, 2 % of them)."""

    def boundary(self, loop: EngineLoop, finished_index: int, boundary_ns: int) -> None:
        """At the end of subinterval ``finished_index`` (its records are already binned):
        check that the next buffer is ready to run (raise if not) and apply staged changes."""

    def handed_over(
        self,
        loop: EngineLoop,
        finished_index: int,
        switch_done_ns: int,
        handed_over_ns: int,
        io_errors: dict[str, dict[str, int]],
    ) -> None:
        """Subinterval ``finished_index`` is complete in its buffer; latencies are relative to
        the boundary."""


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
class _Workload:
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
    # the planned data of the ring's I/Os (WritePattern.plan), when the pattern plans
    ring_pool_rows: npt.NDArray[np.intp] = field(default_factory=lambda: np.zeros(0, np.intp))
    ring_stamps: npt.NDArray[np.int64] | None = None
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


class _PacedSet:
    """The paced loop's workloads (``ws``) and, for those with a free slot, a heap of their
    next scheduled times (``(time, position in ws)``; ``armed``: which are in it). Where the
    set runs compiled (``compiled``), it may hold max-iops workloads too: their I/Os have no
    time (0) but those an edit kept from a paced schedule, so they are always due."""

    def __init__(self, loop: EngineLoop, ws: list[_Workload]) -> None:
        self.ws = ws
        self.pos = {w.index: i for i, w in enumerate(ws)}
        self.heap: list[tuple[int, int]] = []
        self.armed = [False] * len(ws)
        self._refill = loop._refill
        self.compiled: _CompiledPaced | None = None  # set by EngineLoop._compile_paced

    def arm(self, i: int) -> None:
        """Put workload ``i`` (which has a free slot) in the heap at its next I/O's time."""
        w = self.ws[i]
        if w.cur >= w.ring_len:
            self._refill(w, len(w.free))
        heappush(self.heap, (w.ring_words[5 * w.cur + R_SCHED], i))
        self.armed[i] = True


class _CompiledPaced:
    """A ``_PacedSet``'s state in the arrays the compiled turn (``paced_kernel``) works on:
    each workload's ring (its address), cursor and length, its free slots (a stack at
    ``free_off[k]``, ``free_n[k]`` deep), the heap of armed workloads, and where each
    workload's stats blocks lie in the worker's stats region. While ``loaded`` the arrays,
    not the workloads' ``free`` and ``cur``, are the truth, across boundaries; ``unload``
    gives them back (the engine loop does so before anything else looks: ``_hand_back``)."""

    def __init__(self, loop: EngineLoop, paced: _PacedSet, eng: IoEngine, h: KernelHandles,
                 root: npt.NDArray[np.int64]) -> None:
        ws = paced.ws
        k = len(ws)
        self.ws = ws
        self.eng = eng
        self.finish_submit = h.finish_submit
        depth = np.array([w.params.iodepth for w in ws], dtype=np.int64)
        self.cur = np.zeros(k, dtype=np.int64)
        self.rlen = np.zeros(k, dtype=np.int64)
        self.rings = np.zeros(k, dtype=np.int64)  # each ring's address (the ws keep them)
        self.free_off = np.zeros(k, dtype=np.int64)
        np.cumsum(depth[:-1], out=self.free_off[1:])
        self.free_n = np.zeros(k, dtype=np.int64)
        self.free_buf = np.zeros(int(depth.sum()), dtype=np.int64)
        self.slot_pos = np.full(loop.table.capacity, -1, dtype=np.int64)
        for i, w in enumerate(ws):
            self.slot_pos[w.slots] = i
        self.armed = np.zeros(k, dtype=np.uint8)  # 0 no, 1 in the heap, 2 wants a refill
        self.st = np.zeros(pk.ST_WORDS, dtype=np.int64)
        # the ring's planned write data, by address (set with the ring)
        self.pool_rows = np.zeros(k, dtype=np.int64)
        self.stamps = np.zeros(k, dtype=np.int64)
        # each workload's generator (``pk.G``) and how many I/Os its ring array holds
        self.gen = np.zeros((k, pk.GEN_WORDS), dtype=np.int64)
        self.rcap = np.zeros(k, dtype=np.int64)
        self.phase_fraction = np.array([w.seq.phase_fraction for w in ws], dtype=np.float64)
        self.pos_of = {w.spec.workload_id: i for i, w in enumerate(ws)}
        self.args = pk.Args()
        self._engine_args(loop, h)
        self._workload_args()
        self._write_args()
        self.stat_addr = self._stats_args(loop, root)
        self.loaded = False

    def _engine_args(self, loop: EngineLoop, h: KernelHandles) -> None:
        """The kernel's words for the engine, the slot table and the loop's records."""
        a = self.args
        a.array("RING_HEADER", h.ring_header)
        a.array("RING_EVENTS", h.ring_events)
        a.array("EVENTS", h.events)
        a.set("EVENTS_CAP", h.events_cap)
        a.set("CTX", h.ctx_id)
        a.array("ROWS", loop._rows)
        a.array("IOCB_ADDR", h.iocb_addr)
        a.array("PTRS", h.ptrs)
        a.array("OUT", np.zeros(loop.table.capacity, dtype=np.int64))
        a.set("N_SLOTS", loop.table.capacity)
        a.array("PEND", loop._pend)
        a.set("FLUSH_AT", FLUSH_AT)
        a.set("COMPACT_AT", COMPACT_AT)
        a.set("SLEEP_MIN", SLEEP_MIN_NS)
        a.set("LONG_WAIT", LONG_WAIT_NS)
        a.set("WAKE_EARLY", WAKE_EARLY_NS)
        a.set("N_MAX", sum(not w.paced for w in self.ws))
        a.set("SPIN_NS", AWAIT_SPIN_NS)
        a.set("SPIN_GATE_NS", AWAIT_SPIN_GATE_NS)

    def _workload_args(self) -> None:
        """The kernel's words for the workloads' rings, free slots and heap."""
        a = self.args
        k = len(self.ws)
        for name, arr in (("RINGS", self.rings), ("CUR", self.cur), ("RLEN", self.rlen),
                          ("FREE_BUF", self.free_buf), ("FREE_OFF", self.free_off),
                          ("FREE_N", self.free_n), ("SLOT_POS", self.slot_pos),
                          ("ARMED", self.armed), ("ST", self.st), ("GEN", self.gen),
                          ("RCAP", self.rcap),
                          ("HEAP_T", np.zeros(k, dtype=np.int64)),
                          ("HEAP_K", np.zeros(k, dtype=np.int64))):
            a.array(name, arr)
        a.set("N_WORKLOADS", k)
        a.set("GEN_IOS", GEN_IOS)

    def _write_args(self) -> None:
        """The kernel's words for writes: each workload's pool padded to its buffers' rows
        (``WritePattern.wide_pool_for``), its stride and stamped sectors; the ring's pool rows
        and stamps come with the ring (``set_ring``)."""
        k = len(self.ws)
        n_stamps = np.zeros(k, dtype=np.int64)
        pools = np.zeros(k, dtype=np.int64)
        strides = np.zeros(k, dtype=np.int64)
        self._pools = []  # kept alive: the kernel has their addresses only
        for i, w in enumerate(self.ws):
            if w.pattern is not None:
                pool = w.pattern.wide_pool_for(w.buffers.array)
                assert pool.flags.c_contiguous
                self._pools.append(pool)
                pools[i] = pool.ctypes.data
                strides[i] = pool.strides[0]
                n_stamps[i] = w.pattern.stamped_sectors
        for name, arr in (("POOL_ROWS", self.pool_rows), ("STAMPS", self.stamps),
                          ("N_STAMPS", n_stamps), ("POOL", pools), ("POOL_STRIDE", strides)):
            self.args.array(name, arr)

    def _stats_args(self, loop: EngineLoop, root: npt.NDArray[np.int64]) -> list[int]:
        """The kernel's words for binning: the stats region, each workload's category when
        fixed, and where its block of either buffer lies in ``root`` (-1: deleted; the set is
        made anew whenever a workload joins or leaves). Returns the address of each buffer's
        offsets (``STAT_OFF`` is set to the running one before each run)."""
        wl = loop._wl
        a = self.args
        a.array("ROOT", root)
        stat_off = np.array([[-1 if w is None else rooted_at(w.spec.stats[b]) for w in wl]
                             for b in (0, 1)], dtype=np.int64).reshape(2, len(wl))
        a.array("STAT_OFF", stat_off)
        a.array("FIXCAT", np.array([-1 if w is None else w.fixed_cat for w in wl],
                                   dtype=np.int64))
        a.set("N_OWNERS", len(wl))
        return [int(stat_off[b].ctypes.data) for b in (0, 1)]

    def load(self) -> None:
        """Take the workloads' free slots and cursors."""
        for i, w in enumerate(self.ws):
            self.set_ring(i, w)
            n = len(w.free)
            off = int(self.free_off[i])
            self.free_buf[off : off + n] = w.free
            self.free_n[i] = n
        self.armed[:] = 0
        self.st[pk.ST_HEAP_N] = 0
        self.st[pk.ST_REFILL] = 0
        self.loaded = True

    def set_ring(self, i: int, w: _Workload) -> None:
        """Workload ``i``'s ring and cursor (and its writes' planned data), and its generator,
        as the workload has them now."""
        self.rings[i] = w.ring.ctypes.data
        self.rlen[i] = w.ring_len
        self.cur[i] = w.cur
        cap = int(w.ring.shape[0])
        if w.ring_stamps is not None:
            assert w.ring_stamps.flags.c_contiguous and w.ring_pool_rows.flags.c_contiguous
            self.pool_rows[i] = w.ring_pool_rows.ctypes.data
            self.stamps[i] = w.ring_stamps.ctypes.data
            cap = min(cap, int(w.ring_stamps.shape[0]), int(w.ring_pool_rows.shape[0]))
        self.rcap[i] = cap
        gs = w.seq.generator_state()
        if gs is None:
            self.gen[i] = 0  # Python refills it (R_REFILL)
            return
        fd = w.spec.fd
        self.gen[i] = pk.generator_words(
            gs, opcode_fd_word(IOCB_CMD_PREAD, fd), opcode_fd_word(IOCB_CMD_PWRITE, fd),
            None if w.pattern is None else w.pattern.next_serial)

    def take_back(self, i: int) -> None:
        """Give workload ``i``'s sequencer and write pattern back what the kernel generated
        since ``set_ring``, and the workload the I/Os in its ring (which the kernel wrote in
        place, from the top) with their directions and planned data."""
        g = self.gen[i]
        made = int(g[pk.G["MADE"]])
        if not made and not g[pk.G["RESYNC"]]:
            return
        w = self.ws[i]
        if w.seq.params is not w.spec.params:  # retimed in place (``_retime_loaded``)
            w.seq.rerate(w.spec.params)
        progress, serial = pk.generator_progress(g)
        w.seq.resume(*progress)
        g[pk.G["RESYNC"]] = 0
        if not made:  # retimed in place: the ring stands
            return
        n = int(self.rlen[i])
        ring = w.ring[:n]
        plan = None
        if w.pattern is not None:
            w.pattern.next_serial = serial
            if w.ring_stamps is not None:
                plan = (w.ring_pool_rows[:n], w.ring_stamps[:n])
        is_write = (ring[:, R_OPFD] & 0xFFFF) == IOCB_CMD_PWRITE
        _set_ring(w, ring, is_write, plan)
        g[pk.G["MADE"]] = 0

    def unload(self) -> None:
        """Give the workloads back their free slots, cursors and what the kernel generated
        (completions reaped past a boundary and not recorded yet stay in ``st``:
        ``EngineLoop._unload_paced``). A max-iops workload's I/Os kept from its paced
        schedule (``overdue``) are those still at the head of its ring with a time (the
        kernel issued the rest)."""
        if not self.loaded:
            return
        self.loaded = False
        for i, w in enumerate(self.ws):
            self.take_back(i)
            off = int(self.free_off[i])
            w.free = self.free_buf[off : off + int(self.free_n[i])].tolist()
            w.cur = int(self.cur[i])
            if w.overdue:
                timed = w.ring[w.cur : w.ring_len, R_SCHED] != 0
                w.overdue = min(w.overdue, int(timed.argmin()) if not timed.all()
                                else int(timed.size))


def _set_ring(
    w: _Workload,
    ring: npt.NDArray[np.int64],
    is_write: npt.NDArray[np.bool_],
    plan: tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]] | None = None,
) -> None:
    """Make ``ring`` the workload's precomputed I/Os; ``plan``: their write data, planned
    (planned here when the pattern plans and it is not given)."""
    ring = np.ascontiguousarray(ring)
    w.ring = ring
    w.ring_write = is_write
    w.ring_words = int64_words(ring)
    w.ring_len = int(ring.shape[0])
    w.cur = 0
    if w.pattern is None:  # no writes: no data to place (``_put_write_data`` is not called)
        w.ring_stamps = None
        return
    before = np.zeros(w.ring_len + 1, dtype=np.int64)
    np.cumsum(is_write, out=before[1:])
    w.ring_writes_before = int64_words(before)
    if not w.pattern.planned:
        w.ring_stamps = None
        return
    if plan is None:
        plan = w.pattern.plan(ring[:, R_OFF])
    w.ring_pool_rows, w.ring_stamps = plan


class _Waiter:
    """The max-iops loops' wait for completions, called only when a look found none (so
    with I/Os in flight). It looks in the ring (yielding the core in between) for the first
    ``AWAIT_SPIN_NS`` and for a wait shorter than ``SLEEP_MIN_NS``, and blocks in the engine
    for the rest; but it only looks first while its recent waits were short (their running
    mean, ``mean_ns``, under ``AWAIT_SPIN_GATE_NS``): behind a slow device (a disk's milliseconds)
    a look would seldom find anything and would cost up to ``AWAIT_SPIN_NS`` of CPU per
    completion."""

    __slots__ = ("mean_ns",)

    def __init__(self) -> None:
        self.mean_ns = 0  # the recent waits, from the call to a completion or to wake

    def wait(self, poll: Callable[[], int], reap: Callable[[int, int], int], wake: int) -> int:
        """Completions reaped by ``wake`` (0: none came)."""
        mono = time.monotonic_ns
        t0 = mono()
        spin_until = t0 + AWAIT_SPIN_NS if self.mean_ns < AWAIT_SPIN_GATE_NS else t0
        while True:
            now = mono()
            left = wake - now
            if left <= 0:
                n = 0
                break
            if now < spin_until or left < SLEEP_MIN_NS:
                n = poll()
                if not n:
                    sched_yield()  # let the device's kernel worker run if it shares our core
                    n = poll()
            else:
                n = reap(1, left)
            if n:
                break
        self.mean_ns += (mono() - t0 - self.mean_ns) >> 3  # a running mean over ~8 waits
        return n


# a compiled max-iops loop's function and its argument and state words (``scalar_run``:
# ``pk.S`` and ``pk.SS_*``; ``ring_run``: ``pk.RA`` and ``pk.RS_*``)
_CompiledWords = tuple[Callable[[int], int], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def _compiled_words(eng: IoEngine, fn: Callable[[int], int] | None, arg_index: dict[str, int],
                    state_words: int) -> tuple[KernelHandles, _CompiledWords] | None:
    """A compiled max-iops loop's argument and state words for ``eng``, its ``CTX``,
    ``EVENTS_CAP``, ``EVENTS`` and ``ST`` words set (``arg_index``: where each word is), with
    the engine's handles for the rest; None where it cannot run: no kernel here (``fn`` None),
    or an engine whose completion ring compiled code cannot read."""
    handles = getattr(eng, "kernel_handles", None)
    h = None if handles is None or fn is None else handles()
    if fn is None or h is None:
        return None
    args = np.zeros(len(arg_index), dtype=np.int64)
    st = np.zeros(state_words, dtype=np.int64)
    args[arg_index["CTX"]] = h.ctx_id
    args[arg_index["EVENTS_CAP"]] = h.events_cap
    args[arg_index["EVENTS"]] = h.events_addr
    args[arg_index["ST"]] = st.ctypes.data
    return h, (fn, args, st)


def _took(exc: IoEngineError) -> int:
    """How many I/Os of a refused submission the kernel took (in flight): ``SubmitError``
    says; another error, none."""
    return exc.submitted if isinstance(exc, SubmitError) else 0


def _timed_wait_ns(left: int) -> int:
    """How long to block for a wake-up due in ``left`` ns (``left >= SLEEP_MIN_NS``): all of
    it when short, else all but ``WAKE_EARLY_NS`` (the loop then waits again, briefly)."""
    return left - WAKE_EARLY_NS if left > LONG_WAIT_NS else left


def _errno_name(res: int) -> str:
    if res >= 0:
        return "short"
    return errno_mod.errorcode.get(-res, f"errno{-res}")


class EngineLoop:
    """Serves many workloads through one slot table and one engine per engine kind."""

    def __init__(self, capacity: int = 8192, name: str = "loop") -> None:
        self.name = name
        self.table = SlotTable(capacity)
        self._rows = self.table.rows
        self._rows_words = int64_words(self._rows)  # the same memory, for scalar paths
        self._rows_flat = self._rows.reshape(-1)
        # each slot's buffer row in its workload: a strided view, so index it (``[slots]``),
        # never ``.take``: numpy's take first copies a strided source whole (8,192 rows of
        # 128 bytes read for a handful of words: 6.8 us against 0.2 us per batch of writes)
        self._slot_rows = self._rows[:, C_ROW]
        # flat indices of each slot's words that a precomputed I/O is scattered into
        self._scatter_idx = (
            np.arange(capacity, dtype=np.intp)[:, None] * SlotTable.ROW_WORDS + _SCATTER
        )
        self._active = np.full(capacity, -1, dtype=np.int64)  # owner that resubmits, or -1
        self._active_list = [-1] * capacity
        self._free_slots: list[int] = list(range(capacity - 1, -1, -1))
        self._pend = np.zeros((FLUSH_AT + capacity, SlotTable.ROW_WORDS), dtype=np.int64)
        self._pend_words = int64_words(self._pend)
        self._p = 0
        self._binned = 0  # records of _pend[:_p] already binned one at a time (_bin_idle)
        # completion times not yet in their rows (``_loop_single``): the records from
        # ``_mark_from`` up to ``_marks[0, 0]`` completed at ``_marks[0, 1]``, and so on for
        # the first ``_n_marks`` (written as words: ~0.1 us a batch)
        self._mark_from = 0
        self._n_marks = 0
        self._mark_owner = -1  # the workload whose I/Os the notes are (``_loop_single``'s)
        self._marks = np.zeros((FLUSH_AT + capacity, 2), dtype=np.int64)
        self._marks_words = int64_words(self._marks)
        self._wl: list[_Workload | None] = []
        self._index_of: dict[str, int] = {}  # live workloads by id
        self._deferring = 0  # inside changes(): _refresh waits for the end
        self._refresh_due = False
        self._engines: dict[str, IoEngine] = {}
        self._engine_makers: dict[str, Callable[[SlotTable], IoEngine]] = {}
        self._engine_list: list[IoEngine] = []
        self._in_flight = 0
        self._retired_in_flight = 0
        self._pending_release: list[Callable[[], None]] = []
        self._buf = 0  # which of the two stats buffers is running
        self._stop = False
        self._discard = False
        self._busy_poll = False
        self._waiter = _Waiter()  # the max-iops loops' wait for completions
        self._single: _Workload | None = None  # the only workload, when it runs at max iops
        # the index of the only workload with slots in flight (none retired), or -1: completed
        # slots then need no owner lookup
        self._sole = -1
        self._scalar: tuple[_Workload, IoEngine, memoryview] | None = None  # see _pick_word_loops
        # the compiled scalar and ring loops for an engine: (engine, their words)
        self._scalar_words: tuple[IoEngine, _CompiledWords] | None = None
        self._ring_c_words: tuple[IoEngine, _CompiledWords] | None = None
        self._paced_words: tuple[_PacedSet, IoEngine, memoryview] | None = None  # likewise
        self._paced: list[_Workload] = []
        self._n_max_iops = 0  # live workloads at max iops (they share RING_BUDGET)
        # staging: the I/Os of several workloads put together for one submission per engine
        # (``_stage``, ``_submit_staged``) instead of one system call per workload
        self._staging = False
        self._staged: list[npt.NDArray[np.intp]] = []
        self._staged_one: list[int] = []
        # of the staged slots, those whose scheduled time is their submit time (max iops)
        self._staged_now: list[npt.NDArray[np.intp]] = []
        self._staged_now_one: list[int] = []
        self._staged_engine: IoEngine | None = None
        self._gather = np.zeros((capacity, 5), dtype=np.int64)  # see _resubmit_max
        self._gather_words = int64_words(self._gather)
        # the lone max-iops read workload's ring of iocbs (``_loop_ring``), while it runs there
        # or holds records not binned yet; whose I/Os they are, and of which category
        self._ring: IocbRing | None = None
        self._ring_w: _Workload | None = None
        self._ring_cat = 0
        self._ring_counts: list[ctypes.c_long] = []  # batch sizes as ctypes, for io_submit
        # a batch reaped past a boundary, kept while the boundary is handled (``_ring_late``)
        self._ring_late_ev = np.zeros(EV_WORDS * capacity, dtype=np.int64)
        self._ring_late_words = int64_words(self._ring_late_ev)
        self.subinterval_index = -1

    # ------------------------------------------------------------------ set-up
    def register_engine_kind(self, kind: str, maker: Callable[[SlotTable], IoEngine]) -> None:
        self._engine_makers[kind] = maker

    def engine(self, kind: str) -> IoEngine:
        """The loop's engine of ``kind``, created on first use."""
        eng = self._engines.get(kind)
        if eng is None:
            maker = self._engine_makers.get(kind)
            if maker is None:
                raise IoEngineError(f"{self.name}: no engine of kind {kind!r}")
            eng = maker(self.table)
            self._engines[kind] = eng
            self._engine_list = list(self._engines.values())
            self._pick_word_loops()
        return eng

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def running_buffer(self) -> int:
        return self._buf

    def workload_ids(self) -> list[str]:
        return [w.spec.workload_id for w in self._wl if w is not None]

    def _set_active(self, slots: npt.NDArray[np.intp], owner: int) -> None:
        """Which workload resubmits ``slots`` (-1: none); a list mirror serves scalar paths."""
        self._active[slots] = owner
        for s in slots.tolist():
            self._active_list[s] = owner

    def _alloc_slots(self, n: int, workload_id: str) -> npt.NDArray[np.intp]:
        if n > len(self._free_slots):
            raise IoEngineError(
                f"{self.name}: workload {workload_id} needs {n} I/O slots, only "
                f"{len(self._free_slots)} of {self.table.capacity} are free"
            )
        got = [self._free_slots.pop() for _ in range(n)]
        return np.array(got, dtype=np.intp)

    def _setup_slots(self, w: _Workload) -> None:
        p = w.params
        slots = w.slots
        rows = self._rows
        rows[slots, W_BUF] = w.buffers.addr[: slots.size].astype(np.int64)
        rows[slots, W_NBYTES] = p.blocksize_bytes
        rows[slots, C_ROW] = np.arange(slots.size)
        rows[slots, C_OWNER] = w.index
        rows[slots, C_NBYTES] = p.blocksize_bytes
        self._set_active(slots, w.index)
        w.fixed_cat = -1
        w.write_only = p.read_fraction == 0.0
        if p.read_fraction in (0.0, 1.0):
            w.fixed_cat = 2 * (p.iosequencer == "sequential") + (p.read_fraction == 0.0)

    def add_workload(self, spec: WorkloadSpec, at_ns: int | None) -> None:
        """Join ``spec``; with ``at_ns`` (loop running) its schedule starts then and a max-iops
        workload fills its queue at once."""
        p = spec.params
        if spec.workload_id in self._index_of:
            raise IoEngineError(f"{self.name}: workload {spec.workload_id} exists already")
        self._hand_back()
        w = _Workload(
            index=len(self._wl),
            spec=spec,
            seq=Sequencer(
                p,
                lun_size_bytes=spec.lun_size_bytes,
                logical_block_bytes=spec.logical_block_bytes,
                stream=spec.workload_id,
            ),
            pattern=self._make_pattern(p),
            slots=self._alloc_slots(p.iodepth, spec.workload_id),
            buffers=AlignedBuffers(p.iodepth, p.blocksize_bytes),
            paced=p.iops is not None,
            ring_spread=0.5 + stream_fraction(spec.workload_id, b"ivypy-ring"),
        )
        self._wl.append(w)
        self._index_of[spec.workload_id] = w.index
        self._setup_slots(w)
        self._refresh()
        if at_ns is not None:
            self._start_workload(w, at_ns)

    @staticmethod
    def _make_pattern(p: WorkloadParams) -> WritePattern | None:
        if not p.writes:
            return None
        return WritePattern(p.write_data, p.write_data_ratio, p.blocksize_bytes, p.seed)

    def edit_workload(self, workload_id: str, params: WorkloadParams, at_ns: int | None) -> None:
        """New parameters for a workload (at a boundary when running). Its schedule restarts at
        ``at_ns``. Paced I/Os the old schedule had due before ``at_ns`` and not yet issued (the
        LUN or the loop was behind) are still issued, first, with their scheduled times (also
        when the edit makes the workload run at max iops), so the backlog stays in response
        time (no coordinated omission); they are dropped, with a warning, only where they no
        longer fit (the blocksize changed, or they are writes and the workload no longer
        writes). A sequential workload resumes at its first I/O not issued."""
        w = self._find(workload_id)
        self._hand_back()
        old = w.params
        if (at_ns is not None and w.paced and params.iops is not None
                and params.same_but_rate(old)):
            self._retime(w, params, at_ns)
            return
        rest = w.ring[w.cur :]
        due = 0
        if at_ns is not None and w.paced:
            due = int(rest[:, R_SCHED].searchsorted(at_ns, "left"))  # the ring is in time order
        elif at_ns is not None:
            due = w.overdue  # kept by an earlier edit and still not issued
        overdue = rest[:due].copy()
        overdue_write = w.ring_write[w.cur : w.cur + due].copy()
        resume = int(rest[due, R_OFF]) if due < rest.shape[0] else None
        w.spec.params = params
        w.seq = w.seq.edited(params, at_ns=at_ns or 0, resume_offset_bytes=resume)
        w.pattern = self._make_pattern(params)
        same_slots = params.iodepth == old.iodepth and params.blocksize_bytes == old.blocksize_bytes
        was_paced = w.paced
        w.paced = params.iops is not None
        if due and (params.blocksize_bytes != old.blocksize_bytes or w.pattern is None):
            if params.blocksize_bytes != old.blocksize_bytes:
                why, keep = "the blocksize changed", np.zeros(due, dtype=np.bool_)
            else:  # no write pattern any more: the writes among them have no data
                why, keep = "the workload no longer writes", ~overdue_write
            dropped = due - int(keep.sum())
            if dropped:
                log.warning(
                    "workload %s: %d I/Os due before its edit were not issued yet (the LUN was "
                    "behind) and are dropped: %s", workload_id, dropped, why,
                )
                overdue, overdue_write = overdue[keep], overdue_write[keep]
        _set_ring(w, overdue, overdue_write)
        w.overdue = 0 if w.paced else int(overdue.shape[0])
        if same_slots:
            self._setup_slots(w)
            self._mixed_categories(w)
            self._refresh()
            if at_ns is not None and was_paced and not w.paced and w.free:
                free = np.array(w.free, dtype=np.intp)
                w.free = []
                self._issue(w, free)
            return
        self._retire(w)
        w.old_buffers.append(w.buffers)  # in-flight I/Os may still use them
        w.buffers = AlignedBuffers(params.iodepth, params.blocksize_bytes)
        w.slots = self._alloc_slots(params.iodepth, workload_id)
        self._setup_slots(w)
        self._mixed_categories(w)
        self._refresh()
        if at_ns is not None:
            self._start_workload(w, at_ns)

    def edit_workloads(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int | None
                       ) -> None:
        """``edit_workload`` for each, in order, with one look over all workloads at the end
        (``changes``); in place where every edit only sets a new rate of a paced workload
        that the compiled loop holds (``_retime_loaded``)."""
        if at_ns is not None and self._retime_loaded(edits, at_ns):
            return
        with self.changes():
            for workload_id, params in edits:
                self.edit_workload(workload_id, params, at_ns)

    def _retime_loaded(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int) -> bool:
        """DFC's edit (a new rate for every workload at every boundary) while the compiled
        paced loop holds the workloads: ``_retime``'s result without giving the set back.
        The kernel rewrites the rings' times and the generators' schedules
        (``paced_kernel.retime``); each sequencer takes its new rate and schedule when the
        set is given back (``_CompiledPaced.take_back``). Given back and loaded again at
        every boundary, 1,024 workloads held a worker's I/O some 30 ms each time. False
        (nothing done) where any edit is not such an edit."""
        pw = self._paced_words
        cp = None if pw is None else pw[0].compiled
        if cp is None or not cp.loaded:
            return False
        pos_of = cp.pos_of
        on = cp.gen[:, pk.G["ON"]].tolist()
        ws = cp.ws
        chosen: dict[int, WorkloadParams] = {}
        for workload_id, params in edits:
            k = pos_of.get(workload_id)
            if (k is None or not on[k] or not ws[k].paced or params.iops is None
                    or not params.same_but_rate(ws[k].spec.params)):
                return False
            chosen[k] = params  # the last edit of a workload counts
        ks = np.fromiter(chosen, dtype=np.int64, count=len(chosen))
        iops = np.fromiter((p.iops for p in chosen.values()), dtype=np.float64,
                           count=len(chosen))
        for k, params in chosen.items():
            ws[k].spec.params = params
        periods, bases = Sequencer.schedule_starts(cp.phase_fraction[ks], iops, at_ns)
        pk.retime(cp.args, cp.gen, at_ns, ks, periods, bases)
        # the kernel's heap holds the old times: its next run arms every workload anew
        cp.armed[cp.armed == 1] = 0
        cp.st[pk.ST_HEAP_N] = 0
        return True

    def _retime(self, w: _Workload, params: WorkloadParams, at_ns: int) -> None:
        """``edit_workload`` of a running paced workload whose new parameters differ only in
        its rate (DFC's edit, for every workload at every boundary): the I/Os it precomputed
        keep their offsets, data and place in the ring; those due before ``at_ns`` keep their
        scheduled times (the backlog), the rest take the new schedule's. Remaking the ring
        instead cost a refill of ~70 us per workload soon after each such boundary."""
        rest = w.ring[w.cur :]
        due = int(rest[:, R_SCHED].searchsorted(at_ns, "left"))  # the ring is in time order
        w.spec.params = params
        w.seq.retime(params, at_ns)  # on after everything precomputed
        if due < rest.shape[0]:
            rest[due:, R_SCHED] = w.seq.schedule(rest.shape[0] - due)
        self._refresh()  # the paced loop's heap holds the old times

    @staticmethod
    def _mixed_categories(w: _Workload) -> None:
        """I/Os kept from the old settings may be of another category than the new settings'
        only one: then every I/O is recorded by its own category."""
        if w.fixed_cat >= 0 and w.ring_len and bool((w.ring[:, R_CAT] != w.fixed_cat).any()):
            w.fixed_cat = -1

    def remove_workload(self, workload_id: str) -> None:
        """Drop a workload: its in-flight I/Os finish uncounted; its slots return to the pool."""
        w = self._find(workload_id)
        self._hand_back()
        self._retire(w)
        self._wl[w.index] = None
        del self._index_of[workload_id]
        self._refresh()
        if w.spec.on_release is not None:
            # its in-flight I/Os may still use the fd (the thread-pool engine by number)
            self._pending_release.append(w.spec.on_release)
            if self._retired_in_flight == 0:
                self._refresh()

    def _find(self, workload_id: str) -> _Workload:
        i = self._index_of.get(workload_id)
        w = None if i is None else self._wl[i]
        if w is None:
            raise IoEngineError(f"{self.name}: no workload {workload_id}")
        return w

    def _retire(self, w: _Workload) -> None:
        """Stop resubmitting ``w``'s slots: idle ones go back to the pool now, in-flight ones
        when they complete."""
        self._set_active(w.slots, -1)
        # not running: nothing is in flight; running: only a paced workload's free slots idle
        running = self.subinterval_index >= 0
        idle = w.slots.tolist() if not running else list(w.free) if w.paced else []
        self._free_slots.extend(idle)
        self._retired_in_flight += int(w.slots.size) - len(idle)
        w.free = []

    @contextlib.contextmanager
    def changes(self) -> Iterator[None]:
        """Several adds, edits and deletes with one look over all workloads at the end, not
        one per change: a controller that edits every workload at a boundary (DFC) otherwise
        made the boundary quadratic (512 edits took 175 ms, 2,048 took 2.1 s, while I/Os
        waited)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring and self._refresh_due:
                self._refresh()

    def _refresh(self) -> None:
        if self._deferring:
            self._refresh_due = True
            return
        self._refresh_due = False
        live = [w for w in self._wl if w is not None]
        self._paced = [w for w in live if w.paced]
        self._n_max_iops = len(live) - len(self._paced)
        self._busy_poll = any(w.params.busy_poll for w in live)
        self._single = None
        self._sole = -1
        if len(live) == 1 and self._retired_in_flight == 0:
            self._sole = live[0].index
            if not live[0].paced:
                self._single = live[0]
        self._pick_word_loops()
        if self._retired_in_flight == 0 and self._pending_release:
            release, self._pending_release = self._pending_release, []
            for fn in release:
                fn()

    def _pick_word_loops(self) -> None:
        """Whether the queue-depth 1-2 loop serves: one max-iops workload of iodepth <=
        SCALAR_MAX, alone on one engine that lays out its completions as words. And whether
        the paced loop serves: all workloads on one such engine, none retired with I/O in
        flight (with ``busy_poll``, it looks in the completion ring instead of sleeping while
        I/O is in flight); paced workloads only (any mix of reads and writes), or, where the
        set runs compiled, any mix of paced and max-iops workloads but a lone max-iops one
        that a loop of its own serves (``_lone_loop_serves``). The general loop's Python
        spends 1.1 us of user CPU per I/O on 8 max-iops workloads of QD4, 1.6-1.9 where they
        write: the compiled loop, which submits a max-iops workload's free slots as soon as it
        frees them, does the same work in C."""
        self._scalar = None
        self._unload_paced()
        self._paced_words = None
        engines = self._engine_list
        paced = self._paced
        live = [w for w in self._wl if w is not None]
        lone = self._single
        if (live and len(engines) == 1 and self._retired_in_flight == 0
                and (lone is None or not self._lone_loop_serves(lone))):
            eng = engines[0]
            words = getattr(eng, "done_words", None)
            if words is not None and all(w.spec.engine is eng for w in live):
                ps = _PacedSet(self, live)
                ps.compiled = self._compile_paced(ps, eng)
                if ps.compiled is not None or len(paced) == len(live):
                    self._paced_words = (ps, eng, words)
        w = self._single
        if w is None or w.params.iodepth > SCALAR_MAX or len(engines) != 1:
            return
        eng = engines[0]
        words = getattr(eng, "done_words", None)
        if eng is w.spec.engine and words is not None:
            self._scalar = (w, eng, words)

    def _lone_loop_serves(self, w: _Workload) -> bool:
        """Whether a lone max-iops workload runs in a loop of its own: the queue-depth 1-2
        loop (``_loop_scalar``), or, for reads that do not poll, the iocb ring or the batch
        loop (``_loop_ring``, ``_loop_single``)."""
        return w.params.iodepth <= SCALAR_MAX or (w.pattern is None and not self._busy_poll)

    def _compile_paced(self, paced: _PacedSet, eng: IoEngine) -> _CompiledPaced | None:
        """The paced set's compiled state, when it can run compiled: the kernel was built
        here, the engine's completion ring can be read (libaio), the data of every workload's
        writes is planned (``WritePattern.planned``: random or compressible, blocks up to
        16 KiB; other data is made in Python, per batch) and every workload's stats lie in one
        array (a worker's region)."""
        if not COMPILED_PACED or any(w.pattern is not None and not w.pattern.planned
                                     for w in paced.ws):
            return None
        handles = getattr(eng, "kernel_handles", None)
        if handles is None:
            return None
        root = common_root([st for w in self._wl if w is not None for st in w.spec.stats])
        if root is None:
            return None
        h = handles()
        if h is None or not pk.available():
            return None
        return _CompiledPaced(self, paced, eng, h, root)

    def _hand_back(self, *, restart: bool = True, timeout_ns: int = 1_000_000_000) -> None:
        """Leave the specialised loops' own state before a change of workloads or a drain:
        the lone workload's iocb ring (``_leave_ring``) and the compiled paced set's slots and
        cursors (``_unload_paced``)."""
        self._leave_ring(restart=restart, timeout_ns=timeout_ns)
        self._unload_paced(restart=restart)

    def _unload_paced(self, *, restart: bool = True) -> None:
        """Give the compiled paced loop's state back to the workloads, before anything else
        looks at their free slots and cursors: a change of workloads, a drain, a new paced
        set. Completions it reaped past a boundary and left for its next run are recorded
        here instead (the general way, as ``_reaped_late`` does). A max-iops workload's
        slots that it freed and had not submitted again go out now (``restart``, while
        running): elsewhere a max-iops workload has every slot in flight."""
        pw = self._paced_words
        cp = None if pw is None else pw[0].compiled
        if cp is None or not cp.loaded:  # given back already, with what it reaped late
            return
        cp.unload()
        n = int(cp.st[pk.ST_N])
        if n:
            cp.st[pk.ST_N] = 0
            self._complete(cp.eng, n, int(cp.st[pk.ST_T]))
        for w in cp.ws:
            if w.free and not w.paced:
                free = np.array(w.free, dtype=np.intp)
                w.free = []
                if restart and self.subinterval_index >= 0:
                    self._issue(w, free)

    def _start_workload(self, w: _Workload, at_ns: int) -> None:
        w.seq.start(at_ns)
        if w.paced:
            w.free = w.slots.tolist()[::-1]
        else:
            self._issue(w, w.slots)

    # ------------------------------------------------------------------ issuing I/O
    def _refill(self, w: _Workload, need: int) -> None:
        """Precompute the workload's next I/Os (keeping the unused rest)."""
        n = max(self._ahead(w), need, 4 * w.params.iodepth)
        ch = w.seq.chunk(n)
        fd = w.spec.fd
        c = w.cur
        left = w.ring_len - c
        # the unused rest, then the new I/Os, written in place (no concatenation)
        both = np.empty((left + n, 5), dtype=np.int64)
        both[:left] = w.ring[c:]
        ring = both[left:]
        read = opcode_fd_word(IOCB_CMD_PREAD, fd)
        if w.pattern is None:  # reads only
            ring[:, R_OPFD] = read
        else:
            ring[:, R_OPFD] = np.where(ch.is_write, opcode_fd_word(IOCB_CMD_PWRITE, fd), read)
        ring[:, R_OFF] = ch.offset_bytes
        ring[:, R_CAT] = ch.category
        ring[:, R_SUBMIT] = 0
        ring[:, R_SCHED] = ch.sched_ns
        plan = None
        if w.ring_stamps is not None and w.pattern is not None:
            rows, stamps = w.pattern.plan(ch.offset_bytes)
            plan = (
                np.concatenate([w.ring_pool_rows[c:], rows]),
                np.concatenate([w.ring_stamps[c:], stamps]),
            )
        _set_ring(
            w,
            both,
            np.concatenate([w.ring_write[c:], ch.is_write]) if left else ch.is_write,
            plan,
        )

    def _ahead(self, w: _Workload) -> int:
        """How many I/Os ``w`` precomputes at a refill."""
        iops = w.params.iops
        if iops is None:
            share = RING_BUDGET // max(self._n_max_iops, 1)
            return max(RING_MIN, min(RING_MAX, share, RING_PER_DEPTH * w.params.iodepth))
        # paced: about a quarter second ahead, at least PACED_RING_MIN, at most its share of
        # RING_BUDGET among the paced workloads and RING_MAX; times the workload's own factor
        # in [0.5, 1.5) (``ring_spread``), so that workloads of one rate started together do
        # not all run out, and stall the loop with their refills, at the same moment
        share = RING_BUDGET // max(len(self._paced), 1)
        return int(max(PACED_RING_MIN, min(RING_MAX, share, int(iops / 4))) * w.ring_spread)

    def _issue(self, w: _Workload, slots: npt.NDArray[np.intp]) -> None:
        """Submit ``w``'s next ``len(slots)`` I/Os on ``slots``."""
        k = int(slots.size)
        if k == 1:
            self._issue1(w, int(slots[0]))
            return
        ring = self._next_ios(w, slots)
        if self._staging:
            # the submit time (and a max-iops I/O's scheduled time) is written at submission
            if w.paced:
                kept = k
            else:
                kept = min(k, w.overdue)
                w.overdue -= kept
            self._rows_flat.put(self._scatter_idx.take(slots, axis=0), ring)
            self._stage(w.spec.engine, slots, slots[kept:] if kept < k else None)
            return
        t_sub = time.monotonic_ns()
        if w.paced:
            ring[:, R_SUBMIT] = t_sub
        elif w.overdue:
            kept = min(k, w.overdue)
            w.overdue -= kept
            ring[:, R_SUBMIT] = t_sub
            ring[kept:, R_SCHED] = t_sub
        else:
            ring[:, R_SUBMIT:] = t_sub
        self._rows_flat.put(self._scatter_idx.take(slots, axis=0), ring)
        try:
            w.spec.engine.submit(slots)
        except IoEngineError as exc:
            self._in_flight += _took(exc)
            raise
        self._in_flight += k

    def _next_ios(self, w: _Workload, slots: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """``w``'s next ``len(slots)`` precomputed I/Os (refilling its ring when short), their
        write data put into the buffers of ``slots``."""
        k = int(slots.size)
        c = self._advance(w, slots, 0, k)
        return w.ring[c : c + k]

    def _advance(self, w: _Workload, slots: npt.NDArray[np.intp], lo: int, k: int) -> int:
        """Take ``w``'s next ``k`` precomputed I/Os (refilling its ring when short), their
        write data put into the buffers of ``slots[lo : lo + k]``; returns the ring index of
        the first."""
        c = w.cur
        if c + k > w.ring_len:
            self._refill(w, k)
            c = 0
        w.cur = c + k
        if w.pattern is not None:
            self._put_write_data(w, slots if k == slots.size else slots[lo : lo + k], c, c + k)
        return c

    def _put_write_data(self, w: _Workload, slots: npt.NDArray[np.intp], lo: int,
                        hi: int) -> None:
        """The data of the writes among ring I/Os ``lo:hi`` into the buffers of ``slots``."""
        if hi - lo <= WRITE_ONE_MAX and w.ring_stamps is not None:
            tw = self._rows_words
            is_write = w.ring_write
            for j, s in enumerate(slots.tolist()):
                if is_write[lo + j]:
                    self._write_one(w, tw[SlotTable.ROW_WORDS * s + C_ROW], lo + j)
            return
        if w.write_only:
            self._write_data(w, self._slot_rows[slots], lo, hi)
        else:
            before = w.ring_writes_before
            if before[hi] != before[lo]:
                wmask = w.ring_write[lo:hi]
                self._write_data(w, self._slot_rows[slots[wmask]], lo, hi, wmask)

    @classmethod
    def _write_for(cls, w: _Workload, row: int, i: int) -> None:
        """The data of ring I/O ``i`` (a write) into buffer ``row``."""
        if w.ring_stamps is not None:
            cls._write_one(w, row, i)
        else:
            cls._write_data(w, np.array([row], dtype=np.intp), i, i + 1)

    @staticmethod
    def _write_one(w: _Workload, row: int, i: int) -> None:
        """The planned data of ring I/O ``i`` into buffer ``row``."""
        assert w.pattern is not None and w.ring_stamps is not None
        w.pattern.apply_one(w.buffers.array, row, int(w.ring_pool_rows[i]), w.ring_stamps[i])

    @staticmethod
    def _write_data(
        w: _Workload,
        rows: npt.NDArray[np.intp],
        lo: int,
        hi: int,
        writes: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """Put the data of ring I/Os ``lo:hi`` (those in ``writes``, else all) into the buffer
        ``rows``: planned data where the pattern plans, else filled now."""
        assert w.pattern is not None
        if w.ring_stamps is not None:
            pool_rows, stamps = w.ring_pool_rows[lo:hi], w.ring_stamps[lo:hi]
            if writes is not None:
                pool_rows, stamps = pool_rows[writes], stamps[writes]
            w.pattern.apply(w.buffers.array, rows, pool_rows, stamps)
            return
        offsets = w.ring[lo:hi, R_OFF]
        w.pattern.fill(w.buffers.array, rows, offsets if writes is None else offsets[writes])

    def _issue1(self, w: _Workload, slot: int) -> None:
        """``_issue`` for one slot, with scalar operations only (no numpy on reads)."""
        c = w.cur
        if c >= w.ring_len:
            self._refill(w, 1)
            c = 0
        w.cur = c + 1
        rw = w.ring_words
        b = 5 * c
        tw = self._rows_words
        r = SlotTable.ROW_WORDS * slot
        off = rw[b + R_OFF]
        if w.pattern is not None and w.ring_write[c]:
            self._write_for(w, tw[r + C_ROW], c)
        tw[r + W_OPCODE_FD] = rw[b]
        tw[r + W_OFFSET] = off
        tw[r + C_CAT] = rw[b + R_CAT]
        starts_now = not w.paced and not w.overdue  # max iops: scheduled when submitted
        if not starts_now:
            if not w.paced:
                w.overdue -= 1
            tw[r + C_SCHED] = rw[b + R_SCHED]
        if self._staging:
            if starts_now:
                self._staged_now_one.append(slot)
            self._stage_for(w.spec.engine)
            self._staged_one.append(slot)
            return
        t_sub = time.monotonic_ns()
        tw[r + C_SUBMIT] = t_sub
        if starts_now:
            tw[r + C_SCHED] = t_sub
        try:
            w.spec.engine.submit_one(slot)
        except IoEngineError as exc:
            self._in_flight += _took(exc)
            raise
        self._in_flight += 1

    def _stage(self, eng: IoEngine, slots: npt.NDArray[np.intp],
               sched_now: npt.NDArray[np.intp] | None) -> None:
        """Hold ``slots`` (their rows written but for the submit time) for the next
        ``_submit_staged``; ``sched_now``: those of them that start when submitted."""
        self._stage_for(eng)
        self._staged.append(slots)
        if sched_now is not None:
            self._staged_now.append(sched_now)

    def _stage_for(self, eng: IoEngine) -> None:
        """Make ``eng`` the engine of the staged slots (submitting those of another)."""
        if self._staged_engine is not eng:
            self._submit_staged()
            self._staged_engine = eng

    def _in_one_submission(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, with the I/Os it issues staged and then submitted in one call."""
        self._staging = True
        try:
            out = fn(*args)
        finally:
            self._staging = False
        self._submit_staged()
        return out

    def _submit_staged(self) -> None:
        """Submit the staged slots in one call, stamped with one submit time."""
        eng = self._staged_engine
        if eng is None:
            return
        self._staged_engine = None
        parts, self._staged = self._staged, []
        if self._staged_one:
            parts.append(np.array(self._staged_one, dtype=np.intp))
            self._staged_one = []
        now_parts, self._staged_now = self._staged_now, []
        if self._staged_now_one:
            now_parts.append(np.array(self._staged_now_one, dtype=np.intp))
            self._staged_now_one = []
        slots = parts[0] if len(parts) == 1 else np.concatenate(parts)
        rows = self._rows
        t_sub = time.monotonic_ns()
        rows[slots, C_SUBMIT] = t_sub
        if now_parts:
            rows[now_parts[0] if len(now_parts) == 1 else np.concatenate(now_parts),
                 C_SCHED] = t_sub
        try:
            eng.submit(slots)
        except IoEngineError as exc:
            self._in_flight += _took(exc)
            raise
        self._in_flight += int(slots.size)

    def _submit_due(self, now: int) -> int:
        """Submit every paced I/O whose time has come and that has a free slot; returns the
        earliest scheduled time of a waiting I/O that has a slot (or a far future)."""
        if len(self._paced) > 1:  # one submission for all the workloads
            return self._in_one_submission(self._stage_due, now)
        return self._stage_due(now)

    def _stage_due(self, now: int) -> int:
        """``_submit_due``'s work, each workload's due I/Os issued (or staged)."""
        next_due = _INF
        for w in self._paced:
            if not w.free:
                continue
            nfree = len(w.free)
            c = w.cur
            if c + nfree > w.ring_len:
                self._refill(w, nfree)
                c = 0
            first = w.ring_words[5 * c + R_SCHED]
            if first > now:
                if first < next_due:
                    next_due = first
                continue
            k = 1
            if nfree > 1:
                k = int(w.ring[c : c + nfree, R_SCHED].searchsorted(now, "right"))
            if k == 1:
                self._issue1(w, w.free.pop())
            else:
                self._issue(w, np.array([w.free.pop() for _ in range(k)], dtype=np.intp))
            if w.free:
                nxt = w.cur
                if nxt < w.ring_len:
                    next_due = min(next_due, w.ring_words[5 * nxt + R_SCHED])
                else:
                    next_due = now
        return next_due

    # ------------------------------------------------------------------ completions
    def _complete(self, engine: IoEngine, n: int, t: int) -> None:
        """Record ``n`` reaped completions (reaped at ``t``) and recycle their slots."""
        self._in_flight -= n
        if n <= SCALAR_MAX:
            self._complete_scalar(engine, n, t)
            return
        slots = engine.done_slot[:n]  # a view: used up before the engine reaps again
        p = self._p
        q = p + n
        pend = self._pend
        self._rows.take(slots, axis=0, out=pend[p:q], mode="clip")  # "clip": see _loop_single
        single = self._single
        if single is not None:
            self._issue(single, slots)  # resubmit before the bookkeeping
        else:
            self._recycle(slots)
        pend[p:q, C_RES] = engine.done_res[:n]
        pend[p:q, C_DONE] = t
        self._p = q
        if q >= FLUSH_AT:
            self.flush()

    def _complete_scalar(self, engine: IoEngine, n: int, t: int) -> None:
        if n > 1:  # one submission for the batch
            self._in_one_submission(self._complete_words, engine, n, t)
        else:
            self._complete_words(engine, n, t)
        if self._p >= FLUSH_AT:
            self.flush()

    def _complete_words(self, engine: IoEngine, n: int, t: int) -> None:
        """``_complete`` for a few completions, with plain ints."""
        pw = self._pend_words
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        p = self._p
        for s, res in zip(engine.done_slot[:n].tolist(), engine.done_res[:n].tolist(), strict=True):
            b = rw * p
            pw[b : b + rw] = tw[rw * s : rw * s + rw]
            pw[b + C_RES] = res
            pw[b + C_DONE] = t
            p += 1
            owner = self._active_list[s]
            if owner < 0:
                self._free_slots.append(s)
                self._retired_in_flight -= 1
                if self._retired_in_flight == 0:
                    self._refresh()
            else:
                w = self._wl[owner]
                assert w is not None
                if w.paced:
                    w.free.append(s)
                else:
                    self._issue1(w, s)
        self._p = p

    def _recycle(self, slots: npt.NDArray[np.intp]) -> None:
        """Completed slots of several workloads: resubmit (max iops), free (paced) or return
        to the pool (retired)."""
        if self._sole >= 0:
            self._recycle_one(self._sole, slots)
            return
        # group by owner with plain ints: at the batch sizes of a busy loop (tens) this costs
        # a third of sorting with numpy, whose every call is paid again after each system call
        al = self._active_list
        by: dict[int, list[int]] = {}
        for s in slots.tolist():
            o = al[s]
            g = by.get(o)
            if g is None:
                by[o] = [s]
            else:
                g.append(s)
        if len(by) == 1:
            self._recycle_one(next(iter(by)), slots)
            return
        wl = self._wl
        for o in list(by):  # paced: the slots wait for their next scheduled I/O
            w = wl[o] if o >= 0 else None
            if w is not None and w.paced:
                w.free.extend(by.pop(o))
        if not by:
            return
        if -1 not in by and self._resubmit_max(by):
            return
        self._in_one_submission(self._recycle_groups, by)  # one submission for them all

    def _recycle_groups(self, by: dict[int, list[int]]) -> None:
        for o, g in by.items():
            self._recycle_one(o, np.array(g, dtype=np.intp))

    def _resubmit_max(self, by: dict[int, list[int]]) -> bool:
        """Resubmit completed slots (``by`` owner) with their workloads' next I/Os, when every
        owner runs at max iops without a backlog: one ring copy per workload, then one stamp,
        one scatter and one submission for the batch. Returns False (nothing done)
        otherwise."""
        wl = self._wl
        groups: list[tuple[_Workload, list[int]]] = []
        order: list[int] = []
        for o, g in by.items():
            w = wl[o]
            assert w is not None and not w.paced  # _recycle freed the paced ones' slots
            if w.overdue:
                return False
            groups.append((w, g))
            order += g
        slots = np.array(order, dtype=np.intp)
        out = self._gather[: len(order)]
        gw = self._gather_words
        a = 0
        for w, g in groups:
            # each workload's next I/Os copied as words: a numpy view and assignment per
            # workload (``_next_ios``) cost ~2 us, and a batch holds I/Os of up to all of them
            k = len(g)
            b = a + k
            c = self._advance(w, slots, a, k)
            gw[5 * a : 5 * b] = w.ring_words[5 * c : 5 * (c + k)]
            a = b
        out[:, R_SUBMIT:] = time.monotonic_ns()
        self._rows_flat.put(self._scatter_idx.take(slots, axis=0), out)
        try:  # the engine that reaped them serves them all
            groups[0][0].spec.engine.submit(slots)
        except IoEngineError as exc:
            self._in_flight += _took(exc)
            raise
        self._in_flight += a
        return True

    def _recycle_one(self, owner: int, slots: npt.NDArray[np.intp]) -> None:
        if owner < 0:
            self._free_slots.extend(slots.tolist())
            self._retired_in_flight -= int(slots.size)
            if self._retired_in_flight == 0:
                self._refresh()
            return
        w = self._wl[owner]
        assert w is not None
        if w.paced:
            w.free.extend(slots.tolist())
        else:
            self._issue(w, slots)

    # ------------------------------------------------------------------ statistics
    def _noted_done(self) -> npt.NDArray[np.int64]:
        """The completion times that ``_loop_single`` noted per reaped batch (two words written
        instead of a numpy assignment per batch), one per record from ``_mark_from``; the
        notes are cleared."""
        marks = self._marks[: self._n_marks]
        self._n_marks = 0
        counts = np.diff(marks[:, 0], prepend=np.int64(self._mark_from))
        return marks[:, 1].repeat(counts)

    def _stamp_done(self) -> None:
        """Write the noted completion times into the records they belong to."""
        start = self._mark_from
        end = self._marks_words[2 * self._n_marks - 2]
        self._pend[start:end, C_DONE] = self._noted_done()

    def flush(self) -> None:
        """Bin the buffered completion records into the running stats buffers."""
        if self._ring is not None:
            self._flush_ring(self._ring)
        p = self._p
        b = self._binned
        done: npt.NDArray[np.int64] | None = None
        noted_owner = -1
        if self._n_marks:
            if self._mark_from == b and self._marks_words[2 * self._n_marks - 2] == p:
                # every record to bin was noted: their times as an array, not written into
                # the records' column (a strided write over 1 MB: ~200 us of the flush); and
                # all are I/Os of the workload that ``_loop_single`` ran
                done = self._noted_done()
                noted_owner = self._mark_owner
            else:
                self._stamp_done()
        self._p = self._binned = 0
        if p == b:
            return
        rows = self._pend[b:p]
        if done is None:
            done = rows[:, C_DONE]
        ok = rows[:, C_RES] == rows[:, C_NBYTES]
        if not bool(ok.all()):
            self._count_errors(rows[~ok])
            rows = rows[ok]
            done = done[ok]
            if rows.shape[0] == 0:
                return
        if noted_owner >= 0:
            self._record(noted_owner, rows, done)
            return
        owner = rows[:, C_OWNER]
        lo = int(owner.min())
        if lo == int(owner.max()):
            self._record(lo, rows, done)
            return
        if self._discard:
            return
        # several workloads: one vectorised pass, grouped by workload and category
        key = owner * N_CATEGORIES + rows[:, C_CAT]
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        wl = self._wl
        targets: list[WorkloadStats | None] = []
        cats: list[int] = []
        for k in key[starts].tolist():
            o, c = divmod(k, N_CATEGORIES)
            w = wl[o] if o < len(wl) else None
            targets.append(None if w is None else w.spec.stats[self._buf])
            cats.append(c)
        done = done[order]  # the columns needed, not whole 128-byte rows
        record_groups(targets, cats, starts, done - rows[:, C_SUBMIT][order],
                      done - rows[:, C_SCHED][order], rows[:, C_NBYTES][order])

    def _bin_idle(self, until: int, ready: Callable[[], int]) -> None:
        """Bin buffered completion records one at a time (``WorkloadStats.record_one``, ~2 us
        each) until all are binned, ``until`` comes (the next scheduled I/O) or a completion
        is ready: a loop that waits between its I/Os bins in the wait. ``flush`` binned 8,192
        records at once; at 40,000 IOPS the I/Os due or completing in those 1-4 ms went out or
        were timed late, and put the service-time p99 of 512 paced workloads at 8-13 ms."""
        if self._n_marks:
            self._stamp_done()
        pw = self._pend_words
        rw = SlotTable.ROW_WORDS
        wl = self._wl
        nwl = len(wl)
        buf = self._buf
        discard = self._discard
        mono = time.monotonic_ns
        b = self._binned
        p = self._p
        while b < p:
            r = rw * b
            b += 1
            owner = pw[r + C_OWNER]
            nbytes = pw[r + C_NBYTES]
            if pw[r + C_RES] != nbytes:
                self._count_errors(self._pend[b - 1 : b])
            elif not discard:
                w = wl[owner] if owner < nwl else None
                if w is not None:  # else deleted: its last I/Os are not counted (as _record)
                    done = pw[r + C_DONE]
                    w.spec.stats[buf].record_one(
                        pw[r + C_CAT] if w.fixed_cat < 0 else w.fixed_cat,
                        done - pw[r + C_SUBMIT], done - pw[r + C_SCHED], nbytes)
            if mono() >= until or ready():
                break
        if b == p:
            self._p = self._binned = 0
        elif b >= COMPACT_AT:  # move the few left to the front, so _p stays short of FLUSH_AT
            p -= b
            self._pend[:p] = self._pend[b : b + p]
            self._p = p
            self._binned = 0
        else:
            self._binned = b

    def _record(self, owner: int, rows: npt.NDArray[np.int64],
                done: npt.NDArray[np.int64]) -> None:
        """Bin ``rows``, completed at ``done``, all of them I/Os of workload ``owner``."""
        w = self._wl[owner] if owner < len(self._wl) else None
        if w is None or self._discard:
            return  # the workload was deleted (its last I/Os are not counted), or stop
        submit = rows[:, C_SUBMIT]
        sched = rows[:, C_SCHED]
        service = done - submit
        # at max iops every I/O is scheduled when it is submitted: the response times are the
        # service times, binned once
        response = None if np.array_equal(sched, submit) else done - sched
        stats = w.spec.stats[self._buf]
        if w.fixed_cat >= 0:
            stats.record_category(w.fixed_cat, service, response, int(rows[:, C_NBYTES].sum()))
        else:
            stats.record(rows[:, C_CAT], service, service if response is None else response,
                         rows[:, C_NBYTES])

    def _count_errors(self, bad: npt.NDArray[np.int64]) -> None:
        for row in bad.tolist():
            owner, cat, nbytes, res = row[C_OWNER], row[C_CAT], row[C_NBYTES], row[C_RES]
            w = self._wl[owner] if owner < len(self._wl) else None
            if w is None or self._discard:
                continue
            name = _errno_name(res)
            w.errors[name] = w.errors.get(name, 0) + 1
            w.spec.stats[self._buf].record_errors(cat, 1)
            if w.errors_logged < LOGGED_ERRORS_PER_WORKLOAD:
                w.errors_logged += 1
                what = (
                    f"short transfer of {res} of {nbytes} bytes"
                    if res >= 0
                    else f"{name} ({os.strerror(-res)})"
                )
                log.warning(
                    "workload %s: I/O error at offset %d: %s",
                    w.spec.workload_id,
                    row[W_OFFSET],
                    what,
                )

    def take_errors(self) -> dict[str, dict[str, int]]:
        """I/O errors per workload since the last call, by errno name (``short`` for short
        transfers)."""
        out: dict[str, dict[str, int]] = {}
        for w in self._wl:
            if w is not None and w.errors:
                out[w.spec.workload_id] = w.errors
                w.errors = {}
        return out

    # ------------------------------------------------------------------ running
    def request_stop(self, *, record: bool = True) -> None:
        """Stop after the current step; with ``record=False`` the I/Os drained from then on
        are not recorded (their buffer may no longer be ours)."""
        self._stop = True
        if not record:
            self._discard = True

    def run(self, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
        """Run from ``start_ns`` until ``request_stop`` (or an error raised by ``control``).
        Subinterval k covers ``[start + k*sub, start + (k+1)*sub)`` and records into stats
        buffer ``k % 2``. On return nothing is in flight (unless the drain timed out)."""
        self._stop = False
        self._discard = False
        self._buf = 0
        next_poll = 0
        while True:  # wait for the start, still answering the control
            now = time.monotonic_ns()
            if now >= start_ns or self._stop:
                break
            if now >= next_poll:
                control.poll(self)
                next_poll = now + POLL_CONTROL_NS
            left = start_ns - now
            if left > 200_000:
                time.sleep(min(left - 100_000, POLL_CONTROL_NS) / 1e9)
        if self._stop:
            return
        self.subinterval_index = 0
        try:
            for w in self._wl:
                if w is not None:
                    self._start_workload(w, start_ns)
            self._loop(control, start_ns, subinterval_ns)
        except BaseException as exc:
            try:
                self._drain()
            except IoEngineError as also:  # the first error is the one to report
                exc.add_note(f"and while stopping: {also}")
            raise
        else:
            self._drain()
        finally:
            self.subinterval_index = -1

    def _loop(self, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
        boundary = start_ns + subinterval_ns
        next_poll = time.monotonic_ns() + POLL_CONTROL_NS
        mono = time.monotonic_ns
        last_done = mono()  # when the last completion was reaped (busy polling spins after it)
        while not self._stop:
            now = mono()
            if now >= boundary:
                self._boundary(control, boundary)
                boundary += subinterval_ns
                continue
            if now >= next_poll:
                control.poll(self)
                next_poll = now + POLL_CONTROL_NS
                continue
            wake = boundary if boundary < next_poll else next_poll
            ring = self._ring
            if ring is not None and ring.active:
                boundary = self._loop_ring(control, ring, boundary, subinterval_ns, wake)
                continue
            scalar = self._scalar
            if scalar is not None:
                boundary = self._loop_scalar(control, *scalar, boundary, subinterval_ns, wake)
                continue
            single = self._single
            if (single is not None and single.pattern is None and not single.overdue
                    and not self._busy_poll and single.params.iodepth > SCALAR_MAX
                    and len(self._engine_list) == 1
                    and self._engine_list[0] is single.spec.engine):
                if single.fixed_cat >= 0 and getattr(single.spec.engine, "takes_iocbs", False):
                    ring = self._enter_ring(single)
                    boundary = self._loop_ring(control, ring, boundary, subinterval_ns, wake)
                else:
                    boundary = self._loop_single(control, single, single.spec.engine, boundary,
                                                 subinterval_ns, wake)
                continue
            paced_words = self._paced_words
            if paced_words is not None:
                boundary = self._loop_paced(control, *paced_words, boundary, subinterval_ns,
                                            wake)
                continue
            if self._paced:
                due = self._submit_due(now)
                if due < wake:
                    wake = due
            engines = self._engine_list
            if len(engines) == 1:
                eng = engines[0]
                if self._busy_poll:
                    n = eng.poll()
                    if not n:
                        sched_yield()  # let the device's kernel worker run if it shares our core
                        if now - last_done < BUSY_SPIN_NS:
                            continue
                        left = wake - mono()
                        if left < SLEEP_MIN_NS:  # too near to sleep: keep looking
                            continue
                        n = eng.reap(1, _timed_wait_ns(left))
                else:
                    # look in the ring first when completions are likely there (no syscall); a
                    # short wait for a fuller batch (min_nr 8, 20 us) was measured: fewer IOPS
                    # on an idle machine, no clear CPU saving under load
                    n = eng.poll() if self._in_flight > 2 else 0
                    if not n and self._in_flight and not self._paced:
                        # max-iops workloads only, as the lone-workload loops: look a while
                        # before blocking (one QD32 workload of 70 % reads: +1 to +11 % IOPS;
                        # eight of QD4: -5 to +6 %, within the VM's noise; the loop's Python
                        # is their limit)
                        n = self._waiter.wait(eng.poll, eng.reap, wake)
                    elif not n:
                        left = wake - mono()
                        if left < SLEEP_MIN_NS:  # too near to sleep: look again
                            n = eng.poll()
                            if not n:
                                continue
                        else:
                            n = eng.reap(1, _timed_wait_ns(left))
                if n:
                    t = mono()
                    last_done = t
                    if t >= boundary:
                        self._boundary(control, boundary)
                        boundary += subinterval_ns
                    self._complete(eng, n, t)
                continue
            if not engines:
                time.sleep(max(wake - mono(), 0) / 1e9)
                continue
            got = 0
            for eng in engines:
                n = eng.poll()
                if n:
                    got += n
                    last_done = mono()
                    self._complete(eng, n, last_done)
            if not got:
                if self._busy_poll:  # as with one engine: spin a while, then block
                    sched_yield()
                    if now - last_done < BUSY_SPIN_NS:
                        continue
                left = wake - mono()
                if left >= SLEEP_MIN_NS:  # else too near to sleep: look again
                    eng = engines[0]
                    n = eng.reap(1, min(left, 200_000))
                    if n:
                        self._complete(eng, n, mono())

    def _loop_scalar(
        self,
        control: LoopControl,
        w: _Workload,
        eng: IoEngine,
        ev: memoryview,
        boundary: int,
        subinterval_ns: int,
        wake: int,
    ) -> int:
        """The loop for one max-iops workload of iodepth <= ``SCALAR_MAX`` on an engine that
        exposes its completions as words (libaio): plain ints and memoryviews only, until
        ``wake`` (the next boundary or control poll) or a completion reaped after the boundary
        (handled here, before it is recorded). Returns the next boundary."""
        mono = time.monotonic_ns
        busy = self._busy_poll
        poll = eng.poll
        reap = eng.reap
        submit_one = eng.submit_one
        # writes fill their buffer first; I/Os kept from a paced schedule keep their time
        issue1 = None if w.pattern is None and not w.overdue else self._issue1
        if not busy and issue1 is None and COMPILED_SCALAR:
            words = self._scalar_args(eng)
            if words is not None:
                return self._loop_scalar_compiled(control, w, eng, words, boundary,
                                                  subinterval_ns, wake)
        pw = self._pend_words
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        # the ring of precomputed I/Os, held in locals while this runs (``w.cur`` kept up)
        cur = w.cur
        ring_len = w.ring_len
        ring = w.ring_words
        spin_ns = BUSY_SPIN_NS
        now = mono()
        spin_until = now + spin_ns
        while now < wake:
            if busy:
                n = poll()
                if not n:
                    sched_yield()  # let the device's kernel worker run if it shares our core
                    now = mono()
                    if now < spin_until or now >= wake:
                        continue
                    n = reap(1, min(boundary - now, BLOCK_WAIT_NS))  # spun long enough: block
                    if not n:
                        now = mono()
                        continue
            else:
                # a far timeout (a near one costs a timer reprogramming per I/O); a control
                # poll waits for the next completion, up to BLOCK_WAIT_NS; a boundary never
                n = reap(1, min(boundary - now, BLOCK_WAIT_NS))
                if not n:
                    now = mono()
                    continue
            t = mono()
            if t >= boundary:
                return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
            p = self._p
            for i in range(n):
                s = ev[4 * i]
                b = rw * p
                r = rw * s
                pw[b : b + rw] = tw[r : r + rw]
                pw[b + C_RES] = ev[4 * i + 2]
                pw[b + C_DONE] = t
                p += 1
                # resubmit before the next record (in-flight count unchanged)
                if issue1 is not None:
                    self._in_flight -= 1
                    issue1(w, s)
                    cur = w.cur
                    ring_len = w.ring_len
                    ring = w.ring_words
                    continue
                if cur >= ring_len:
                    self._refill(w, 1)
                    cur = 0
                    ring_len = w.ring_len
                    ring = w.ring_words
                k = 5 * cur
                cur += 1
                w.cur = cur
                tw[r + W_OPCODE_FD] = ring[k]
                tw[r + W_OFFSET] = ring[k + R_OFF]
                tw[r + C_CAT] = ring[k + R_CAT]
                t_sub = mono()
                tw[r + C_SUBMIT] = t_sub
                tw[r + C_SCHED] = t_sub
                try:
                    submit_one(s)
                except IoEngineError as exc:  # it was counted in flight
                    self._in_flight -= 1 - _took(exc)
                    raise
            self._p = p
            if p >= FLUSH_AT:
                self.flush()
            now = t
            spin_until = now + spin_ns
        return boundary

    def _scalar_args(self, eng: IoEngine) -> _CompiledWords | None:
        """The compiled scalar loop's function, argument and state words for ``eng`` (made
        once per engine), or None where it cannot run: no kernel here, or an engine whose
        completion ring compiled code cannot read."""
        sw = self._scalar_words
        if sw is not None and sw[0] is eng:
            return sw[1]
        made = _compiled_words(eng, pk.scalar_function(), pk.S, pk.SS_WORDS)
        if made is None:
            return None
        h, words = made
        args = words[1]
        args[pk.S["ROWS"]] = self._rows.ctypes.data
        args[pk.S["PEND"]] = self._pend.ctypes.data
        args[pk.S["IOCB_ADDR"]] = h.iocb_addr.ctypes.data
        args[pk.S["FLUSH_AT"]] = FLUSH_AT
        args[pk.S["BLOCK_WAIT"]] = BLOCK_WAIT_NS
        self._scalar_words = (eng, words)
        return words

    def _loop_scalar_compiled(
        self,
        control: LoopControl,
        w: _Workload,
        eng: IoEngine,
        words: _CompiledWords,
        boundary: int,
        subinterval_ns: int,
        wake: int,
    ) -> int:
        """``_loop_scalar`` for a lone workload of reads that blocks, its turns in C
        (``pk.scalar_function``): Python only for what the C returns for (a refill, a flush,
        a submission it could not make, a completion past the boundary) and at ``wake``.
        Returns the next boundary."""
        fn, args, st = words
        addr = args.ctypes.data
        args[pk.S["BOUNDARY"]] = boundary
        args[pk.S["WAKE"]] = wake
        st[pk.SS_NHELD] = 0
        rw = SlotTable.ROW_WORDS
        tw = self._rows_words
        while True:
            args[pk.S["RING"]] = w.ring.ctypes.data
            st[pk.SS_CUR] = w.cur
            st[pk.SS_RLEN] = w.ring_len
            st[pk.SS_P] = self._p
            code = int(fn(addr))
            w.cur = int(st[pk.SS_CUR])
            self._p = int(st[pk.SS_P])
            if code == pk.SR_LATE:  # nothing held: the wait went out with its submission
                return self._reaped_late(control, eng, int(st[pk.SS_N]), int(st[pk.SS_T]),
                                         boundary, subinterval_ns)
            if code == pk.SR_WAKE or code == pk.SR_SUBMIT:
                taken = max(int(st[pk.SS_SUB_DONE]), 0) if code == pk.SR_SUBMIT else 0
                held = st[pk.SS_HELD0 + taken : pk.SS_HELD0 + int(st[pk.SS_NHELD])].tolist()
                for i, slot in enumerate(held):  # one by one (a refusal raises, naming errno)
                    t_sub = time.monotonic_ns()
                    tw[rw * slot + C_SUBMIT] = t_sub
                    tw[rw * slot + C_SCHED] = t_sub
                    try:
                        eng.submit_one(slot)
                    except IoEngineError as exc:  # the held slots were counted in flight
                        self._in_flight -= len(held) - i - _took(exc)
                        raise
                st[pk.SS_NHELD] = 0
                if code == pk.SR_WAKE:
                    return boundary
                continue
            if code == pk.SR_REFILL:  # the ring ran out: refilled, the slots left go out now
                for slot in st[pk.SS_NEED0 : pk.SS_NEED0 + int(st[pk.SS_NNEED])].tolist():
                    self._in_flight -= 1  # completed, recorded; _issue1 counts it again
                    self._issue1(w, slot)
            if self._p >= FLUSH_AT:  # SR_FLUSH, or a refill's records
                self.flush()

    def _loop_single(
        self,
        control: LoopControl,
        w: _Workload,
        eng: IoEngine,
        boundary: int,
        subinterval_ns: int,
        wake: int,
    ) -> int:
        """The loop for one max-iops workload that only reads, of queue depth above
        ``SCALAR_MAX``, alone on its engine: ``_complete`` and ``_issue`` inlined with their
        lookups held in locals (a fixed handful of numpy operations per reaped batch), until
        ``wake`` (the next boundary or control poll) or a completion reaped after the boundary
        (handled here, before it is recorded). Returns the next boundary."""
        mono = time.monotonic_ns
        poll = eng.poll
        reap = eng.reap
        await_completions = self._waiter.wait
        submit = eng.submit
        done_slot = eng.done_slot
        done_res = eng.done_res
        take_rows = self._rows.take
        pend = self._pend
        put_rows = self._rows_flat.put
        take_scatter = self._scatter_idx.take
        marks = self._marks_words
        nm = self._n_marks
        # rows recorded the general way since, or the notes are another workload's
        if nm and (marks[2 * nm - 2] != self._p or self._mark_owner != w.index):
            self._stamp_done()
        self._mark_owner = w.index
        while True:
            n = poll()
            if not n:
                n = await_completions(poll, reap, wake)
                if not n:
                    return boundary
            t = mono()
            if t >= boundary:
                return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
            slots = done_slot[:n]  # a view: used up before the engine reaps again
            p = self._p
            q = p + n
            # "clip": the slots are ours (each event returns the slot we submitted); numpy's
            # default "raise" copies ``out`` first, to leave it unchanged on an error
            take_rows(slots, axis=0, out=pend[p:q], mode="clip")
            # resubmit before the bookkeeping (in-flight count unchanged)
            c = w.cur
            if c + n > w.ring_len:
                self._refill(w, n)
                c = 0
            w.cur = c + n
            ring = w.ring[c : c + n]
            ring[:, R_SUBMIT:] = mono()
            put_rows(take_scatter(slots, axis=0), ring)
            try:
                submit(slots)
            except IoEngineError as exc:  # they were counted in flight
                self._in_flight -= n - _took(exc)
                raise
            pend[p:q, C_RES] = done_res[:n]
            # the batch's completion time, noted: the flush reads the notes as one array
            nm = self._n_marks
            if not nm:
                self._mark_from = p
            marks[2 * nm] = q
            marks[2 * nm + 1] = t
            self._n_marks = nm + 1
            self._p = q
            if q >= FLUSH_AT:
                self.flush()
            if t >= wake:
                return boundary

    # ------------------------------------------------------------------ the ring of iocbs
    def _enter_ring(self, w: _Workload) -> IocbRing:
        """``w`` (alone, max iops, reads of one category, on an engine that takes iocbs of
        ours) goes on in ``_loop_ring``: its I/Os precomputed as whole iocbs, the unused rest
        of its ring first. Its slots' I/Os in flight are adopted: each completes there and is
        recorded from its slot row, and a ring I/O replaces it."""
        if self._ring is not None:
            self.flush()  # the records of a ring left earlier (then dropped)
        p = w.params
        rest = w.ring[w.cur : w.ring_len, R_OFF]
        size = max(self._ahead(w), int(rest.size) + 4 * p.iodepth)
        ring = IocbRing(size, p.iodepth, w.spec.fd, p.blocksize_bytes, w.buffers.addr,
                        FLUSH_AT)
        ring.append(rest)
        ring.append(w.seq.chunk(size - ring.end).offset_bytes)
        _set_ring(w, w.ring[:0], w.ring_write[:0])
        ring.adopted = self._in_flight  # w is the only workload: these are its slots'
        if len(self._ring_counts) <= p.iodepth:
            self._ring_counts = [ctypes.c_long(i) for i in range(p.iodepth + 1)]
        self._ring = ring
        self._ring_w = w
        self._ring_cat = w.fixed_cat
        return ring

    def _loop_ring(self, control: LoopControl, ring: IocbRing, boundary: int,
                   subinterval_ns: int, wake: int) -> int:
        """``_loop_single`` on a ring of iocbs: a reaped batch of ``n`` is answered by
        submitting the ring's next ``n`` iocbs (their addresses are already an array) and
        recorded as the events' words plus two marks, with no numpy call per batch, until
        ``wake`` or a completion reaped after the boundary. Returns the next boundary. Its
        turns run in C where they can (``_loop_ring_compiled``): once the slots it adopted
        have completed, on an engine whose completion ring compiled code can read."""
        w = self._ring_w
        assert w is not None
        eng = cast(IocbEngine, w.spec.engine)
        if not ring.adopted and COMPILED_RING:
            words = self._ring_c_args(eng)
            if words is not None:
                return self._loop_ring_compiled(control, ring, words, boundary,
                                                subinterval_ns, wake)
        mono = time.monotonic_ns
        poll = eng.poll
        reap = eng.reap
        await_completions = self._waiter.wait
        fast, c_sys, c_ctx = eng.submit_fast_args()
        counts = self._ring_counts
        void_p = ctypes.c_void_p
        ev = eng.done_words
        rec = ring.rec_words
        done_marks = ring.done_words
        sub_marks = ring.sub_words
        ptrs = ring.ptrs_addr
        records = ring.records
        while True:
            n = poll()
            if not n:
                n = await_completions(poll, reap, wake)
                if not n:
                    return boundary
            t = mono()
            # resubmit before the bookkeeping (in-flight count unchanged)
            c = ring.cur
            if c + n > ring.end:
                self._refill_ring(ring, w)
                c = 0
            t_sub = mono()
            got = fast(c_sys, c_ctx, counts[n], void_p(ptrs + 8 * c))
            if got != n:
                self._ring_submit_rest(ring, eng, n, got, t_sub)
            c += n
            ring.cur = c
            k = ring.n_sub
            sub_marks[2 * k] = ring.seq0 + c
            sub_marks[2 * k + 1] = t_sub
            ring.n_sub = k + 1
            if t >= boundary:
                return self._ring_late(control, ring, n, t, boundary, subinterval_ns)
            if ring.adopted:
                self._ring_take(ring, ev, n, t)
            else:
                p = ring.n_rec
                q = p + n
                rec[EV_WORDS * p : EV_WORDS * q] = ev[: EV_WORDS * n]
                k = ring.n_done
                done_marks[2 * k] = q
                done_marks[2 * k + 1] = t
                ring.n_done = k + 1
                ring.n_rec = q
            if ring.n_rec >= records:
                self.flush()
            if t >= wake:
                return boundary

    def _refill_ring(self, ring: IocbRing, w: _Workload) -> None:
        """Fill ``ring`` up with ``w``'s next I/Os, its records flushed first (the ring saves
        the offsets of its I/Os in flight there, before their iocbs are rewritten)."""
        self.flush()
        ring.refill(w.seq.chunk(ring.size - ring.end + ring.cur).offset_bytes)

    def _ring_submit_rest(self, ring: IocbRing, eng: IocbEngine, n: int, got: int,
                          t_sub: int) -> None:
        """The ring's resubmission of a reaped batch of ``n`` (its next iocbs, from ``cur``,
        submitted at ``t_sub``) took ``got`` (-1: failed): learn why, or submit the rest. When
        that raises, those the kernel took are the ring's submissions (so that the stop
        records them as the ring's, not as I/Os it never had in flight: an AssertionError
        then replaced the real error), and the rest leave the in-flight count (the ring keeps
        it unchanged across a batch), so that the stop does not wait for I/Os that were never
        submitted (a second of waiting, and a "does not answer" error in place of this
        one)."""
        try:
            eng.submit_iocbs(ring.ptrs_addr + 8 * ring.cur, n, got)
        except IoEngineError as exc:
            took = max(_took(exc), got, 0)
            if took:
                ring.cur += took
                k = ring.n_sub
                ring.sub_words[2 * k] = ring.seq0 + ring.cur
                ring.sub_words[2 * k + 1] = t_sub
                ring.n_sub = k + 1
            self._in_flight -= n - took
            raise

    def _ring_c_args(self, eng: IoEngine) -> _CompiledWords | None:
        """The compiled ring loop's function, argument and state words for ``eng`` (made once
        per engine), or None where it cannot run: no kernel here, or an engine whose
        completion ring compiled code cannot read."""
        rw = self._ring_c_words
        if rw is not None and rw[0] is eng:
            return rw[1]
        made = _compiled_words(eng, pk.ring_function(), pk.RA, pk.RS_WORDS)
        if made is None:
            return None
        h, words = made
        args = words[1]
        args[pk.RA["RING_HEADER"]] = h.ring_header.ctypes.data
        args[pk.RA["RING_EVENTS"]] = h.ring_events.ctypes.data
        args[pk.RA["SPIN_NS"]] = AWAIT_SPIN_NS
        args[pk.RA["SPIN_GATE_NS"]] = AWAIT_SPIN_GATE_NS
        args[pk.RA["SLEEP_MIN_NS"]] = SLEEP_MIN_NS
        self._ring_c_words = (eng, words)
        return words

    def _loop_ring_compiled(self, control: LoopControl, ring: IocbRing, words: _CompiledWords,
                            boundary: int, subinterval_ns: int, wake: int) -> int:
        """``_loop_ring`` with its turns in C (``pk.ring_function``), for a ring that adopted
        no slots: Python only for what the C returns for (a refill, a flush, a submission it
        could not make whole, a batch reaped past the boundary) and at ``wake``. Returns the
        next boundary."""
        fn, args, st = words
        w = self._ring_w
        assert w is not None
        eng = cast(IocbEngine, w.spec.engine)
        waiter = self._waiter
        addr = args.ctypes.data
        args[pk.RA["PTRS"]] = ring.ptrs_addr
        args[pk.RA["REC"]] = ring.rec_addr
        args[pk.RA["DONE"]] = ring.done_addr
        args[pk.RA["SUB"]] = ring.sub_addr
        args[pk.RA["RECORDS"]] = ring.records
        args[pk.RA["BOUNDARY"]] = boundary
        args[pk.RA["WAKE"]] = wake
        st[pk.RS_STAGE] = 0
        while True:
            args[pk.RA["SEQ0"]] = ring.seq0
            st[pk.RS_CUR] = ring.cur
            st[pk.RS_END] = ring.end
            st[pk.RS_N_REC] = ring.n_rec
            st[pk.RS_N_DONE] = ring.n_done
            st[pk.RS_N_SUB] = ring.n_sub
            st[pk.RS_MEAN] = waiter.mean_ns
            code = int(fn(addr))
            ring.cur = int(st[pk.RS_CUR])
            ring.n_rec = int(st[pk.RS_N_REC])
            ring.n_done = int(st[pk.RS_N_DONE])
            ring.n_sub = int(st[pk.RS_N_SUB])
            waiter.mean_ns = int(st[pk.RS_MEAN])
            if code == pk.RR_WAKE:
                return boundary
            if code == pk.RR_LATE:
                return self._ring_late(control, ring, int(st[pk.RS_N]), int(st[pk.RS_T]),
                                       boundary, subinterval_ns)
            if code == pk.RR_REFILL:
                self._refill_ring(ring, w)
            elif code == pk.RR_SUBMIT:
                self._ring_submit_rest(ring, eng, int(st[pk.RS_N]), int(st[pk.RS_SUB_DONE]),
                                       int(st[pk.RS_T_SUB]))
                st[pk.RS_STAGE] = 2
            else:  # RR_FLUSH
                self.flush()

    def _ring_take(self, ring: IocbRing, ev: memoryview, n: int, t: int,
                   slot_rows: dict[int, list[int]] | None = None) -> None:
        """Record ``n`` completions (events as words in ``ev``) reaped at ``t``: the ring's
        as they are, an adopted slot's from its row (``slot_rows[i]`` for event ``i`` when
        given: a copy taken before the slots were reused) into the loop's records."""
        p = ring.n_rec
        rec = ring.rec_words
        if ring.adopted:
            pw = self._pend_words
            tw = self._rows_words
            rw = SlotTable.ROW_WORDS
            g = self._p
            for i in range(n):
                e = EV_WORDS * i
                d = ev[e]
                if d >= TAG:
                    rec[EV_WORDS * p : EV_WORDS * p + EV_WORDS] = ev[e : e + EV_WORDS]
                    p += 1
                    continue
                b = rw * g
                if slot_rows is None:
                    pw[b : b + rw] = tw[rw * d : rw * d + rw]
                else:
                    for j, word in enumerate(slot_rows[i]):
                        pw[b + j] = word
                pw[b + C_RES] = ev[e + 2]
                pw[b + C_DONE] = t
                g += 1
                ring.adopted -= 1
            self._p = g
        else:
            rec[EV_WORDS * p : EV_WORDS * (p + n)] = ev[: EV_WORDS * n]
            p += n
        k = ring.n_done
        ring.done_words[2 * k] = p
        ring.done_words[2 * k + 1] = t
        ring.n_done = k + 1
        ring.n_rec = p

    def _ring_late(self, control: LoopControl, ring: IocbRing, n: int, t: int, boundary: int,
                   subinterval_ns: int) -> int:
        """``_loop_ring`` reaped ``n`` completions at ``t``, past ``boundary`` (their
        replacements submitted): close the subinterval first (they count in the next one; a
        change there may take the workload off the ring, draining it), then record them.
        Returns the next boundary."""
        w = self._ring_w
        assert w is not None
        ev = self._ring_late_words
        ev[: EV_WORDS * n] = cast(IocbEngine, w.spec.engine).done_words[: EV_WORDS * n]
        slot_rows = None
        if ring.adopted:  # an adopted slot may be reused in the boundary: copy its row now
            tw = self._rows_words
            rw = SlotTable.ROW_WORDS
            slot_rows = {}
            for i in range(n):
                d = ev[EV_WORDS * i]
                if d < TAG:
                    slot_rows[i] = tw[rw * d : rw * d + rw].tolist()
        self._boundary(control, boundary)
        self._ring_take(ring, ev, n, t, slot_rows)
        if ring.n_rec >= ring.records:
            self.flush()
        return boundary + subinterval_ns

    def _leave_ring(self, *, restart: bool, timeout_ns: int = 1_000_000_000) -> None:
        """Take the ring's workload back to the slot path (before a change, or at the end of
        a run): reap every I/O in flight, recording it (binned at the next flush, so in the
        subinterval running then); its precomputed I/Os not submitted go back to its ring in
        order, and with ``restart`` its slots are issued, as the slot path expects of a
        max-iops workload. An I/O that does not complete within ``timeout_ns`` is an error
        (its completion could not be told from a slot's later)."""
        ring = self._ring
        w = self._ring_w
        if ring is None or not ring.active or w is None:
            return
        eng = cast(IocbEngine, w.spec.engine)
        deadline = time.monotonic_ns() + timeout_ns
        while self._in_flight > 0:
            left = deadline - time.monotonic_ns()
            if left <= 0:
                raise IoEngineError(
                    f"{self.name}: workload {w.spec.workload_id}: {self._in_flight} I/Os "
                    f"still in flight {timeout_ns / 1e9:g} s after its loop stopped "
                    "submitting; the LUN does not answer"
                )
            n = eng.reap(1, min(left, 20_000_000))
            if n:
                self._in_flight -= n
                self._ring_take(ring, eng.done_words, n, time.monotonic_ns())
        ring.active = False
        offsets = ring.unsubmitted()
        rows = np.zeros((offsets.size, 5), dtype=np.int64)
        rows[:, R_OPFD] = opcode_fd_word(IOCB_CMD_PREAD, w.spec.fd)
        rows[:, R_OFF] = offsets
        rows[:, R_CAT] = self._ring_cat
        _set_ring(w, rows, np.zeros(offsets.size, dtype=np.bool_))
        if restart:
            self._issue(w, w.slots)

    def _flush_ring(self, ring: IocbRing) -> None:
        """Bin the ring's completion records (a ring left and binned is dropped)."""
        service, res, offsets, _done = ring.collect()
        w = self._ring_w
        if not ring.active:
            self._ring = None
            self._ring_w = None
        if service.size == 0 or w is None or self._wl[w.index] is not w or self._discard:
            return  # none, or the workload was deleted (its last I/Os are not counted)
        cat = self._ring_cat
        nbytes = ring.nbytes
        ok = res == nbytes
        if not bool(ok.all()):
            bad = np.zeros((int(ok.size - ok.sum()), SlotTable.ROW_WORDS), dtype=np.int64)
            bad[:, C_OWNER] = w.index
            bad[:, C_CAT] = cat
            bad[:, C_NBYTES] = nbytes
            bad[:, C_RES] = res[~ok]
            bad[:, W_OFFSET] = offsets[~ok]
            self._count_errors(bad)
            service = service[ok]
        w.spec.stats[self._buf].record_category(cat, service, None, nbytes * int(service.size))

    def _loop_paced(
        self,
        control: LoopControl,
        paced: _PacedSet,
        eng: IoEngine,
        ev: memoryview,
        boundary: int,
        subinterval_ns: int,
        wake: int,
    ) -> int:
        """The loop for paced workloads only (``paced.ws``), all on an engine that exposes its
        completions as words: plain ints and memoryviews, no numpy per turn (but for the data
        of writes), until ``wake`` (the next boundary or control poll) or a completion reaped
        after the boundary. Each turn records what completed and frees its slots, then
        submits the I/Os of every workload whose time has come (those that have a free slot)
        in one call, then sleeps until the next completion or the next scheduled time, unless
        that is nearer than ``SLEEP_MIN_NS``. A heap holds each workload's next scheduled time
        while it has a free slot, so a turn touches only the workloads that have something to
        do. The general path spent ~25 us of Python per turn on one workload, so at 110,000
        IOPS about 6 due I/Os waited for each ``io_submit`` and the measured service time
        carried the wait; on four workloads of 10,000 IOPS it spent 17-20 us of user CPU per
        I/O. A walk over every workload each turn put the service-time p50 at 115 us for 128
        workloads of 312 IOPS and 369 us for 512; with the heap, 45-67 and 50-137 us. When
        nothing is due and nothing completed, it bins what completed (``_bin_idle``) instead of
        leaving it to a flush, whose stall of 1-4 ms put the p99 of 512 workloads at 8-13 ms.
        Returns the next boundary. Where the set can run compiled, it does
        (``_loop_paced_compiled``); only then does it hold max-iops workloads (this loop's
        Python per I/O would cost them more than the general loop's numpy per batch)."""
        if paced.compiled is not None:
            return self._loop_paced_compiled(control, paced.compiled, eng, boundary,
                                             subinterval_ns, wake)
        assert all(w.paced for w in paced.ws), "max-iops workloads in the Python paced loop"
        mono = time.monotonic_ns
        poll = eng.poll
        ready = eng.ready
        reap = eng.reap
        submit_list = eng.submit_list
        record = self._record_words
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        al = self._active_list
        ws = paced.ws
        pos = paced.pos
        heap = paced.heap
        armed = paced.armed
        arm = paced.arm
        for i, w in enumerate(ws):  # slots freed outside this loop (a late reap, a start)
            if w.free and not armed[i]:
                arm(i)
        lone = ws[0].free if len(ws) == 1 else None  # one workload: no owner lookup
        busy = self._busy_poll
        n = 0
        while True:
            if not n:
                n = poll()
            if n:
                t = mono()
                if t >= boundary:
                    return self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
                record(ev, n, t)
                if lone is not None:
                    lone.extend(ev[0 : 4 * n : 4].tolist())
                    if not armed[0]:
                        arm(0)
                else:
                    for s in ev[0 : 4 * n : 4].tolist():
                        i = pos[al[s]]
                        ws[i].free.append(s)
                        if not armed[i]:
                            arm(i)
                self._in_flight -= n
                n = 0
                now = t
            else:
                now = mono()
            if now >= wake:
                return boundary
            out: list[int] = []
            while heap and heap[0][0] <= now:
                i = heappop(heap)[1]
                armed[i] = False
                w = ws[i]
                free = w.free
                cur = w.cur
                ring = w.ring_words
                lim = min(len(free), w.ring_len - cur)
                k = 0
                b = 5 * cur + R_SCHED
                while k < lim and ring[b] <= now:
                    k += 1
                    b += 5
                assert k, "an armed workload has a free slot and an I/O due"
                slots = free[-k:]
                del free[-k:]
                b = 5 * cur
                for j, s in enumerate(slots):
                    r = rw * s
                    if w.pattern is not None and w.ring_write[cur + j]:
                        self._write_for(w, tw[r + C_ROW], cur + j)
                    tw[r + W_OPCODE_FD] = ring[b]
                    tw[r + W_OFFSET] = ring[b + R_OFF]
                    tw[r + C_CAT] = ring[b + R_CAT]
                    tw[r + C_SCHED] = ring[b + R_SCHED]
                    b += 5
                w.cur = cur + k
                out += slots
                if free:
                    arm(i)  # its next I/O (due now too when the ring ran out: popped again)
            if out:
                t_sub = mono()
                try:
                    submit_list(out)
                except IoEngineError as exc:
                    self._in_flight += _took(exc)
                    raise
                for s in out:
                    tw[rw * s + C_SUBMIT] = t_sub
                self._in_flight += len(out)
                continue  # look for completions at once
            due = heap[0][0] if heap else _INF
            until = wake if wake < due else due
            if self._binned < self._p:  # nothing to do but bin: bin until something is
                self._bin_idle(until, ready)
                continue
            left = until - now
            if busy:  # look again at once while I/O is in flight or the next is near
                if not self._in_flight and left >= LONG_WAIT_NS:
                    n = reap(1, left - WAKE_EARLY_NS)
                else:
                    sched_yield()  # letting the device's kernel worker run if it shares the core
            elif left >= SLEEP_MIN_NS:  # else too near to sleep: look again
                n = reap(1, _timed_wait_ns(left))

    def _loop_paced_compiled(self, control: LoopControl, cp: _CompiledPaced, eng: IoEngine,
                             boundary: int, subinterval_ns: int, wake: int) -> int:
        """``_loop_paced`` in compiled code (``paced_kernel.run``), which comes back here for
        what only Python does: a completion reaped past the boundary, a workload's refill,
        a flush, an I/O error to count, a submission the kernel took only in part."""
        if not cp.loaded:
            cp.load()
        st = cp.st
        args = cp.args
        args.set("STAT_OFF", cp.stat_addr[self._buf])
        args.set("BOUNDARY", boundary)
        args.set("WAKE", wake)
        args.set("DISCARD", int(self._discard))
        fd = control.poll_fd()
        args.set("CONTROL_FD", -1 if fd is None else fd)
        args.set("POLL_NS", POLL_CONTROL_NS)
        args.set("BUSY_POLL", int(self._busy_poll))
        while True:
            st[pk.ST_P] = self._p
            st[pk.ST_BINNED] = self._binned
            st[pk.ST_IN_FLIGHT] = self._in_flight
            code = pk.run(args)
            self._p = int(st[pk.ST_P])
            self._binned = int(st[pk.ST_BINNED])
            self._in_flight = int(st[pk.ST_IN_FLIGHT])
            if code == pk.R_WAKE:
                return boundary
            if code == pk.R_LATE:
                # the completions stay in the engine's events and ``st``: the next run records
                # them in the next subinterval (or ``_unload_paced``, if the boundary's changes
                # unload the set), as ``_reaped_late`` does
                self._boundary(control, boundary)
                return boundary + subinterval_ns
            if code == pk.R_REFILL:
                st[pk.ST_REFILL] = 0
                for i in np.flatnonzero(cp.armed == 2).tolist():
                    w = cp.ws[i]
                    cp.take_back(i)
                    w.cur = int(cp.cur[i])
                    self._refill(w, int(cp.free_n[i]))
                    cp.set_ring(i, w)
                    cp.armed[i] = 0
            elif code in (pk.R_FLUSH, pk.R_ERROR):
                self.flush()
            elif code == pk.R_SUBMIT:
                m = int(st[pk.ST_SUB_N])
                try:
                    cp.finish_submit(int(st[pk.ST_SUB_DONE]), m)
                except IoEngineError as exc:  # the kernel counted all m in flight
                    self._in_flight -= m - _took(exc)
                    raise
            elif code == pk.R_STRAY:
                raise IoEngineError(
                    f"{self.name}: a completion came for I/O slot {int(st[pk.ST_N])}, which no "
                    "paced workload of this loop owns; the loop stops")
            else:  # pragma: no cover - the kernel returns only the codes above
                raise AssertionError(f"paced kernel returned {code}")

    def _record_words(self, ev: memoryview, n: int, t: int) -> None:
        """Buffer ``n`` completions laid out as words (slot at ``4*i``, result at ``4*i + 2``),
        reaped at ``t``: each slot's row copied whole, with its result and completion time."""
        pw = self._pend_words
        tw = self._rows_words
        rw = SlotTable.ROW_WORDS
        p = self._p
        for i in range(n):
            b = rw * p
            r = rw * ev[4 * i]
            pw[b : b + rw] = tw[r : r + rw]
            pw[b + C_RES] = ev[4 * i + 2]
            pw[b + C_DONE] = t
            p += 1
        self._p = p
        if p >= FLUSH_AT:
            self.flush()

    def _reaped_late(self, control: LoopControl, eng: IoEngine, n: int, t: int, boundary: int,
                     subinterval_ns: int) -> int:
        """A specialised loop reaped ``n`` completions at ``t``, past ``boundary``: close the
        subinterval first (the I/Os count in the next one), then record them the general way.
        Returns the next boundary."""
        self._boundary(control, boundary)
        self._complete(eng, n, t)
        return boundary + subinterval_ns

    def _boundary(self, control: LoopControl, boundary_ns: int) -> None:
        finished = self.subinterval_index
        self.flush()
        errors = self.take_errors()
        control.boundary(self, finished, boundary_ns)  # raises when the master is late
        self._buf ^= 1
        self.subinterval_index = finished + 1
        switch_done = time.monotonic_ns() - boundary_ns
        control.handed_over(
            self, finished, switch_done, time.monotonic_ns() - boundary_ns, errors
        )

    def _drain(self, timeout_ns: int = 1_000_000_000) -> None:
        """Reap every in-flight I/O (recording it), then reset slots for the next run."""
        self._hand_back(restart=False, timeout_ns=timeout_ns)
        deadline = time.monotonic_ns() + timeout_ns
        for w in self._wl:  # completions must not resubmit
            if w is not None:
                self._set_active(w.slots, -1)
        self._single = None
        self._sole = -1
        self._scalar = None
        self._paced_words = None
        while self._in_flight > 0:
            left = deadline - time.monotonic_ns()
            if left <= 0:
                log.error("%s: %d I/Os still in flight after stop", self.name, self._in_flight)
                break
            for eng in self._engine_list:
                n = eng.reap(1, min(left, 20_000_000))
                if n:
                    self._complete(eng, n, time.monotonic_ns())
        self.flush()
        owned: set[int] = set()
        for w in self._wl:
            if w is not None:
                self._set_active(w.slots, w.index)
                owned.update(w.slots.tolist())
                w.free = []
                _set_ring(w, w.ring[:0], w.ring_write[:0])
                w.overdue = 0
        self._free_slots = [s for s in range(self.table.capacity - 1, -1, -1) if s not in owned]
        self._retired_in_flight = 0
        self._in_flight = max(self._in_flight, 0)
        self._refresh()

    def close(self) -> None:
        for eng in self._engine_list:
            eng.close()
        self._engines.clear()
        self._engine_list = []
        self._scalar = None
        self._paced_words = None
