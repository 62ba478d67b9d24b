"""The compiled loop's side in Python: the set's state as the arrays the compiled turn works
on (``CompiledPaced``). It lays out and gives back state; the turns themselves are C
(``slave.engine.paced_kernel``) and the Python that calls them is ``NativeLoop``'s
(``slave.engine.loop_native``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from protocol.stats import rooted_at
from slave.engine import paced_kernel as pk
from slave.engine import tuning
from slave.engine.aio_abi import IOCB_CMD_PREAD, IOCB_CMD_PWRITE, opcode_fd_word
from slave.engine.base import IoEngine, KernelHandles
from slave.engine.layout import R_OPFD, R_SCHED
from slave.engine.loop_args import DATA_DTYPE, GEN_DTYPE, LoopArgs
from slave.engine.loop_state import LoopWorkload, set_ring

if TYPE_CHECKING:
    from slave.engine.loop_records import Records
    from slave.engine.loop_slots import Slots


class CompiledPaced:
    """A set of workloads' (``ws``: paced ones, max-iops ones, or both) state in the arrays the
    compiled turn (``paced_kernel``) works on: each workload's ring (its address), cursor and
    length, its free slots (a stack at ``free_off[k]``, ``free_n[k]`` deep), the heap of armed
    workloads, and where each workload's stats blocks lie in the worker's stats region. While
    ``loaded`` the arrays, not the workloads' ``free`` and ``cur``, are the truth, across
    boundaries; ``unload`` gives them back (``NativeLoop.unload`` does so before anything else
    looks). ``wl``: the loop's workloads (the set's, and any deleted: their stats blocks are
    left out)."""

    def __init__(self, ws: list[LoopWorkload], eng: IoEngine, h: KernelHandles,
                 root: npt.NDArray[np.int64], slots: Slots, records: Records,
                 wl: list[LoopWorkload | None]) -> None:
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
        self.slot_pos = np.full(slots.table.capacity, -1, dtype=np.int64)
        for i, w in enumerate(ws):
            self.slot_pos[w.slots] = i
        self.armed = np.zeros(k, dtype=np.uint8)  # 0 no, 1 in the heap, 2 wants a refill
        # each workload's write data (``struct ivy_data``; its ring's first serial set with
        # the ring)
        self.data = np.zeros(k, dtype=DATA_DTYPE)
        # each workload's generator (``struct ivy_gen``) and how many I/Os its ring array holds
        self.gen = np.zeros(k, dtype=GEN_DTYPE)
        self.rcap = np.zeros(k, dtype=np.int64)
        self.phase_fraction = np.array([w.seq.phase_fraction for w in ws], dtype=np.float64)
        self.pos_of = {w.spec.workload_id: i for i, w in enumerate(ws)}
        self.args = LoopArgs()
        self._engine_args(slots, records, h)
        self._workload_args()
        self._write_args()
        self.stat_addr = self._stats_args(wl, root)
        self.loaded = False

    def _engine_args(self, slots: Slots, records: Records, h: KernelHandles) -> None:
        """The kernel's words for the engine, the slot table and the loop's records."""
        a = self.args
        a.array("ring_header", h.ring_header)
        a.array("ring_events", h.ring_events)
        a.array("events", h.events)
        a.events_cap = h.events_cap
        a.ctx = h.ctx_id
        for name, value in h.words.items():
            setattr(a, name, value)
        a.array("rows", slots.rows)
        a.array("iocb_addr", h.iocb_addr)
        a.array("ptrs", h.ptrs)
        a.array("out", np.zeros(slots.table.capacity, dtype=np.int64))
        a.n_slots = slots.table.capacity
        a.array("pend", records.pend)
        a.flush_at = records.flush_at
        a.compact_at = tuning.COMPACT_AT
        a.sleep_min_ns = tuning.SLEEP_MIN_NS
        a.long_wait_ns = tuning.LONG_WAIT_NS
        a.wake_early_ns = tuning.WAKE_EARLY_NS
        a.n_max = sum(not w.paced for w in self.ws)
        a.spin_ns = tuning.AWAIT_SPIN_NS
        a.spin_gate_ns = tuning.AWAIT_SPIN_GATE_NS
        # a lone max-iops workload of depth 1-2 waits as soon as its I/Os went out
        a.lone = int(len(self.ws) == 1 and not self.ws[0].paced
                     and self.ws[0].params.iodepth <= tuning.LONE_DEPTH_MAX)
        a.busy_spin_ns = tuning.BUSY_SPIN_NS
        a.busy_hot_ns = tuning.BUSY_HOT_NS
        a.block_wait_ns = tuning.BLOCK_WAIT_NS

    def _workload_args(self) -> None:
        """The kernel's words for the workloads' rings, free slots and heap."""
        a = self.args
        k = len(self.ws)
        for name, arr in (("rings", self.rings), ("cur", self.cur), ("rlen", self.rlen),
                          ("free_buf", self.free_buf), ("free_off", self.free_off),
                          ("free_n", self.free_n), ("slot_pos", self.slot_pos),
                          ("armed", self.armed), ("gen", self.gen),
                          ("rcap", self.rcap),
                          ("heap_t", np.zeros(k, dtype=np.int64)),
                          ("heap_k", np.zeros(k, dtype=np.int64))):
            a.array(name, arr)
        a.n_workloads = k
        a.gen_ios = tuning.GEN_IOS

    def _write_args(self) -> None:
        """The kernel's words for writes: each writing workload's data
        (``WritePattern.data_words``: its kind, pool, duplicates, dedup key and bound) and
        block size; its ring's first serial comes with the ring (``set_ring``)."""
        d = self.data
        # kept alive: the kernel has their arrays' addresses only
        self._patterns = [w.pattern for w in self.ws]
        for i, w in enumerate(self.ws):
            if w.pattern is None:
                continue
            (d["kind"][i], d["pool"][i], d["dups"][i], d["dedup_key"][i],
             d["unique_below"][i]) = w.pattern.data_words()
            d["block_bytes"][i] = w.pattern.blocksize_bytes
        self.args.array("data", d)

    def _stats_args(self, wl: list[LoopWorkload | None],
                    root: npt.NDArray[np.int64]) -> list[int]:
        """The kernel's words for binning: the stats region, each workload's category when
        fixed, and where its block of either buffer lies in ``root`` (-1: deleted; the set is
        made anew whenever a workload joins or leaves). Returns the address of each buffer's
        offsets (``stat_off`` is set to the running one before each run)."""
        a = self.args
        a.array("root", root)
        stat_off = np.array([[-1 if w is None else rooted_at(w.spec.stats[b]) for w in wl]
                             for b in (0, 1)], dtype=np.int64).reshape(2, len(wl))
        a.array("stat_off", stat_off)
        a.array("fixcat", np.array([-1 if w is None else w.fixed_cat for w in wl],
                                   dtype=np.int64))
        a.n_owners = len(wl)
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
        self.args.heap_n = 0
        self.args.refill = 0
        self.loaded = True

    def set_ring(self, i: int, w: LoopWorkload) -> None:
        """Workload ``i``'s ring and cursor (and its first I/O's serial), and its generator,
        as the workload has them now."""
        self.rings[i] = w.ring.ctypes.data
        self.rlen[i] = w.ring_len
        self.cur[i] = w.cur
        self.data["ring_serial"][i] = w.ring_serial
        self.rcap[i] = int(w.ring.shape[0])
        gs = w.seq.generator_state()
        if gs is None:
            self.gen[i] = 0  # Python refills it (R_REFILL)
            return
        fd = w.spec.fd
        self.gen[i] = pk.generator(
            gs, opcode_fd_word(IOCB_CMD_PREAD, fd), opcode_fd_word(IOCB_CMD_PWRITE, fd))

    def take_back(self, i: int) -> None:
        """Give workload ``i``'s sequencer and write pattern back what the kernel generated
        since ``set_ring``, and the workload the I/Os in its ring (which the kernel wrote in
        place, from the top) with their directions and first serial."""
        gen = self.gen
        made = int(gen["made"][i])
        if not made and not gen["resync"][i]:
            return
        w = self.ws[i]
        if w.seq.params is not w.spec.params:  # retimed in place (``retime_loaded``)
            w.seq.rerate(w.spec.params)
        w.seq.resume(*pk.generator_progress(gen[i]))
        gen["resync"][i] = 0
        if not made:  # retimed in place: the ring stands
            return
        ring = w.ring[: int(self.rlen[i])]
        is_write = (ring[:, R_OPFD] & 0xFFFF) == IOCB_CMD_PWRITE
        set_ring(w, ring, is_write, int(self.data["ring_serial"][i]))
        gen["made"][i] = 0

    def unload(self) -> None:
        """Give the workloads back their free slots, cursors and what the kernel generated
        (completions reaped past a boundary and not recorded yet stay in ``args``:
        ``NativeLoop.unload``). A max-iops workload's I/Os kept from its paced
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
