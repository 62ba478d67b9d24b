"""The engine loop's native side: whether the compiled loop can serve the workloads
(``NativeLoop.pick``, else ``EngineLoop._loop`` does), the arrays its turns work on, the turns
in C (``compiled_loop.run``: completions recorded, the I/Os due submitted, Python only for what
the C returns for), the state given back to the workloads before anything else looks at them
(``unload``), and DFC's rate edits made in that state in place (``retime_loaded``).

Owns ``NativeLoop``: the compiled set (``ws``) and its arrays, which hold the workloads' free
slots and cursors while ``loaded``. It syncs the records' counts (``p``, ``binned``) and the
slots' in-flight count with the compiled struct around each turn, and must not add, edit or
remove workloads, nor reap outside the compiled turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from protocol.stats import common_root, rooted_at
from slave.engine import compiled_loop as pk
from slave.engine import tuning
from slave.engine.base import IoEngine, compiled
from slave.engine.layout import (
    DATA_DTYPE,
    GEN_DTYPE,
    IO,
    IOCB_CMD_PREAD,
    IOCB_CMD_PWRITE,
    LoopArgs,
    opcode_fd_word,
)
from slave.engine.loop_records import Records
from slave.engine.loop_slots import Slots
from slave.engine.loop_state import LoopWorkload, set_ring, took
from slave.engine.verify_state import VerifyState
from slave.sequencer import Sequencer

if TYPE_CHECKING:
    from slave.engine.loop import LoopControl

#: the fields of ``struct ivy_loop`` that are their ``tuning`` constant's namesakes
_TUNING_WORDS = ("compact_at", "sleep_min_ns", "long_wait_ns", "wake_early_ns", "gen_ios",
                 "busy_spin_ns", "busy_hot_ns", "block_wait_ns", "paced_per_call",
                 "await_trial_ns", "await_trials", "await_hold_ns", "await_hold_max_ns",
                 "await_switch_pct", "await_look_pct")


class NativeLoop:
    """The compiled loop of a loop's workloads (``wl``): the set it serves (``ws``: paced,
    max-iops or both; empty where the general loop serves) and the arrays of its turns (each
    workload's free slots a stack at ``free_off[k]``, ``free_n[k]`` deep). While ``loaded``
    the arrays, not the workloads' ``free`` and ``cur``, are the truth, across boundaries;
    ``unload`` gives them back."""

    def __init__(self, name: str, slots: Slots, records: Records,
                 wl: list[LoopWorkload | None],
                 complete: Callable[[IoEngine, int, int], None],
                 complete_due: Callable[[IoEngine, int, int], None]) -> None:
        self.name = name
        self.ws: list[LoopWorkload] = []
        self.loaded = False
        self._slots = slots
        self._records = records
        self._wl = wl
        self._complete = complete  # ``EngineLoop._complete``
        self._complete_due = complete_due  # ``EngineLoop._complete_due``
        self.verify: VerifyState | None = None  # the loop's, once a workload verifies

    def pick(self, live: list[LoopWorkload], engines: list[IoEngine]) -> None:
        """Whether the compiled loop serves ``live`` (any mix of paced and max-iops workloads):
        all on one engine, none retired with I/O in flight, and the set can run compiled
        (``_compile``). Else the general loop serves, at several times the compiled loop's
        user CPU per I/O (docs/engine.md)."""
        self.unload()
        self.ws = []
        if live and len(engines) == 1 and self._slots.retired_in_flight == 0:
            eng = engines[0]
            if all(w.spec.engine is eng for w in live):
                self._compile(live, eng)

    def _compile(self, ws: list[LoopWorkload], eng: IoEngine) -> None:
        """Lay the set out for the compiled loop, when it can run compiled: the kernel was
        built here, the engine's completion ring can be read (libaio, io_uring) and every
        workload's stats lie in one array (a worker's region)."""
        if not tuning.COMPILED_LOOP:
            return
        reads = compiled(eng)
        if reads is None:
            return
        root = common_root([st for w in self._wl if w is not None for st in w.spec.stats])
        if root is None:
            return
        words = reads.loop_words()
        if words is None or not pk.available():
            return
        k = len(ws)
        self.ws = ws
        self.eng = eng
        self.finish_submit = reads.finish_submit
        self.loaded = False
        a = self.args = LoopArgs()
        depth = np.array([w.params.iodepth for w in ws], dtype=np.int64)
        self.cur = a.array("cur", np.zeros(k, dtype=np.int64))
        self.rlen = a.array("rlen", np.zeros(k, dtype=np.int64))
        # each ring's address (the ws keep them)
        self.rings = a.array("rings", np.zeros(k, dtype=np.int64))
        self.free_off = a.array("free_off", np.zeros(k, dtype=np.int64))
        np.cumsum(depth[:-1], out=self.free_off[1:])
        self.free_n = a.array("free_n", np.zeros(k, dtype=np.int64))
        self.free_buf = a.array("free_buf", np.zeros(int(depth.sum()), dtype=np.int64))
        slot_pos = a.array("slot_pos", np.full(self._slots.table.capacity, -1, dtype=np.int64))
        for i, w in enumerate(ws):
            slot_pos[w.slots] = i
        # 0 no, 1 in the heap
        self.armed = a.array("armed", np.zeros(k, dtype=np.uint8))
        a.array("heap_t", np.zeros(k, dtype=np.int64))
        a.array("heap_k", np.zeros(k, dtype=np.int64))
        a.n_workloads = k
        # each workload's generator (``struct ivy_gen``) and how many I/Os its ring array holds
        self.gen = a.array("gen", np.zeros(k, dtype=GEN_DTYPE))
        self.rcap = a.array("rcap", np.zeros(k, dtype=np.int64))
        self.phase_fraction = np.array([w.seq.phase_fraction for w in ws], dtype=np.float64)
        self.pos_of = {w.spec.workload_id: i for i, w in enumerate(ws)}
        self._engine_args(words)
        self._write_args()
        self.stat_addr = self._stats_args(root)

    def _engine_args(self, words: dict[str, int]) -> None:
        """The kernel's words for the engine (its ``loop_words``: the engine keeps what they
        point at), the slot table, the loop's records and its tuning."""
        a = self.args
        for name, value in words.items():
            setattr(a, name, value)
        if not words.get("ptrs"):  # io_submit's array, which only libaio reads
            a.array("ptrs", np.zeros(self._slots.table.capacity, dtype=np.int64))
        a.array("iocb_addr", self._slots.table.addr)
        a.array("rows", self._slots.rows)
        a.array("out", np.zeros(self._slots.table.capacity, dtype=np.int64))
        a.n_slots = self._slots.table.capacity
        a.array("pend", self._records.pend)
        a.flush_at = self._records.flush_at
        for name in _TUNING_WORDS:
            setattr(a, name, getattr(tuning, name.upper()))
        a.n_max = sum(not w.paced for w in self.ws)
        a.spin_ns = tuning.AWAIT_SPIN_NS
        a.spin_gate_ns = tuning.AWAIT_SPIN_GATE_NS
        # a lone max-iops workload of depth 1-2 waits as soon as its I/Os went out
        a.lone = int(len(self.ws) == 1 and not self.ws[0].paced
                     and self.ws[0].params.iodepth <= tuning.LONE_DEPTH_MAX)

    def _write_args(self) -> None:
        """The kernel's words for writes: each writing workload's data (``struct ivy_data``:
        ``WritePattern.data_words``); its ring's first serial comes with the ring
        (``set_ring``)."""
        d = self.data = self.args.array("data", np.zeros(len(self.ws), dtype=DATA_DTYPE))
        # kept alive: the kernel has their arrays' addresses only
        self._patterns = [w.pattern for w in self.ws]
        for i, w in enumerate(self.ws):
            if w.pattern is not None:
                for name, value in w.pattern.data_words().items():
                    d[name][i] = value
        if self.verify is not None:
            self.args.n_owners = len(self._wl)
            self.verify.attach(self.args, d, [w.index for w in self.ws])

    def _stats_args(self, root: npt.NDArray[np.int64]) -> list[int]:
        """The kernel's words for binning: the stats region, each workload's category when
        fixed, and where its block of either buffer lies in ``root`` (-1: deleted). Returns
        the address of each buffer's offsets (``turns`` sets ``stat_off`` to the running one)."""
        a = self.args
        wl = self._wl
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
        self.loaded = True

    def set_ring(self, i: int, w: LoopWorkload) -> None:
        """Workload ``i``'s ring, cursor, first serial and generator, as the workload has them
        now. A ring smaller than the workload's own refill (none yet, or an edit kept a few
        I/Os of backlog) is first refilled to its usual size, as the general loop would: the
        kernel generates into the ring it is given, and would go on a few I/Os at a time (and a
        retime in place sees no further than the ring)."""
        if w.ring.shape[0] < min(w.ahead, tuning.GEN_IOS):
            w.refill(0)
        self.rings[i] = w.ring.ctypes.data
        self.rlen[i] = w.ring_len
        self.cur[i] = w.cur
        self.data["ring_serial"][i] = w.ring_serial
        self.rcap[i] = int(w.ring.shape[0])
        gs = w.seq.generator_state()
        assert gs is not None  # PCG64: the loop's workloads make their own generators
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
        is_write = (ring[:, IO["opcode_fd"]] & 0xFFFF) == IOCB_CMD_PWRITE
        set_ring(w, ring, is_write, int(self.data["ring_serial"][i]))
        gen["made"][i] = 0

    def give_back(self) -> None:
        """Give the workloads back their free slots, cursors and what the kernel generated. A
        max-iops workload's I/Os kept from its paced schedule (``overdue``) are those still at
        the head of its ring with a time (the kernel issued the rest)."""
        self.loaded = False
        for i, w in enumerate(self.ws):
            self.take_back(i)
            off = int(self.free_off[i])
            w.free = self.free_buf[off : off + int(self.free_n[i])].tolist()
            w.cur = int(self.cur[i])
            if w.overdue:
                timed = w.ring[w.cur : w.ring_len, IO["sched_ns"]] != 0
                w.overdue = min(w.overdue, int(timed.argmin()) if not timed.all()
                                else int(timed.size))

    def unload(self, *, restart: bool = True) -> None:
        """Give the compiled state back to the workloads (``give_back``) before anything else
        looks at their free slots and cursors. Completions reaped past a boundary and left for
        the next run are recorded here instead. A max-iops workload's freed slots go out now
        (``restart``, while running): the general loop keeps all its slots in flight."""
        if not self.ws or not self.loaded:  # given back already, with what it reaped late
            return
        self.give_back()
        n = int(self.args.n)
        if n:
            self.args.n = 0
            self._complete(self.eng, n, int(self.args.t_ns))
        for w in self.ws:
            if w.free and not w.paced:
                free = np.array(w.free, dtype=np.intp)
                w.free = []
                if restart and self._slots.running:
                    self._slots.issue([(w, free)])

    def turns(self, control: LoopControl, boundary: int, subinterval_ns: int, wake: int,
              busy_poll: bool, late: Callable[[IoEngine, int, int, int], bool]) -> int:
        """The set's turns in compiled code (``compiled_loop.run``) until ``wake`` (the next
        boundary or control poll), back in Python only for: completions reaped past the
        boundary (``late``: ``EngineLoop._boundary_holding``; a boundary without them is the
        caller's), a flush, an I/O error to count, a submission taken only in part.
        Returns the next boundary."""
        assert self.ws  # only a set that runs compiled is picked
        if not self.loaded:
            self.load()
        args = self.args
        records, slots = self._records, self._slots
        args.stat_off = self.stat_addr[records.buf]
        args.boundary_ns = boundary
        args.wake_ns = wake
        args.discard = int(records.discard)
        fd = control.poll_fd()
        args.control_fd = -1 if fd is None else fd
        args.poll_ns = tuning.POLL_CONTROL_NS
        args.busy_poll = int(busy_poll)
        while True:
            args.p = records.p
            args.binned = records.binned
            args.in_flight = slots.in_flight
            code = pk.run(args)
            records.p = int(args.p)
            records.binned = int(args.binned)
            slots.in_flight = int(args.in_flight)
            if code == pk.R_WAKE:
                return boundary
            if code == pk.R_LATE:
                # held in the engine's events while ``late`` closes the subinterval, they are
                # recycled as the boundary's changes left the workloads (an edit to a rate does
                # not resubmit a slot a max-iops workload freed at the boundary). Still held
                # after it: the next run records them while the set stays loaded, else here
                n, t = int(args.n), int(args.t_ns)
                args.n = 0
                if late(self.eng, n, t, boundary):
                    if self.loaded:
                        args.n = n
                        args.t_ns = t
                    else:
                        self._complete_due(self.eng, n, t)
                return boundary + subinterval_ns
            if code in (pk.R_FLUSH, pk.R_ERROR):
                records.flush()
                if self.verify is not None:  # the journal may be what needed room
                    self.verify.spill()
            elif code == pk.R_SUBMIT:
                m = int(args.sub_n)
                try:
                    self.finish_submit(int(args.sub_done), m)
                except IoEngineError as exc:  # the kernel counted all m in flight
                    slots.in_flight -= m - took(exc)
                    raise
            elif code == pk.R_STRAY:
                raise IoEngineError(
                    f"{self.name}: a completion came for I/O slot {int(args.n)}, which no "
                    "paced workload of this loop owns; the loop stops")
            elif code == pk.R_WAIT:
                err, args.n = int(args.n), 0
                raise IoEngineError(f"{self.name}: the wait for completions failed: "
                                    f"{os.strerror(err)} (errno {err}); the loop stops")
            else:  # pragma: no cover - the kernel returns only the codes above
                raise AssertionError(f"the compiled loop returned {code}")

    def _reach(self, k: int, at_ns: int, cap: int) -> bool:
        """Extend workload ``k``'s ring, as the kernel makes its next I/Os, until its last I/O
        is due at or after ``at_ns`` or it holds more than ``cap`` unissued I/Os due before
        (``cap``: the most backlog an edit keeps, as in ``Workloads._backlog``). A ring all
        issued is made anew; else its unissued I/Os move to its top and the next follow, in a
        larger ring where it is full (``_grow``). Returns whether the backlog is longer than
        ``cap``."""
        ring, gen_ios, sched = self.ws[k].ring, int(self.args.gen_ios), IO["sched_ns"]
        if self.cur[k] >= self.rlen[k]:
            pk.generate(self.args, k, min(int(self.rcap[k]), gen_ios))
        while ring[int(self.rlen[k]) - 1, sched] < at_ns:
            cur, rlen = int(self.cur[k]), int(self.rlen[k])
            if rlen - cur > cap:
                return True  # more due than an edit keeps, as the general edit sees it
            if cur:  # the issued rows give their room; the rest keep their serials
                ring[: rlen - cur] = ring[cur:rlen]
                self.data["ring_serial"][k] += cur
                self.cur[k], self.rlen[k] = 0, rlen - cur
            rlen = int(self.rlen[k])
            if rlen == int(self.rcap[k]):
                ring = self._grow(k, max(rlen + 1, min(2 * rlen, cap + 1 + gen_ios)))
            pk.extend(self.args, k, min(int(self.rcap[k]) - rlen, gen_ios))
        cur, rlen = int(self.cur[k]), int(self.rlen[k])
        return int(ring[cur:rlen, sched].searchsorted(at_ns, "left")) > cap

    def _grow(self, k: int, rows: int) -> npt.NDArray[np.int64]:
        """Move workload ``k``'s ring, unissued I/Os at the top, into a new one of ``rows`` rows,
        which the workload keeps (the kernel has its address only); returns it."""
        w, rlen = self.ws[k], int(self.rlen[k])
        ring = np.empty((rows, w.ring.shape[1]), dtype=np.int64)
        ring[:rlen] = w.ring[:rlen]
        w.ring = ring
        self.rings[k] = ring.ctypes.data
        self.rcap[k] = rows
        return ring

    def retime_loaded(self, edits: Sequence[tuple[str, WorkloadParams]], at_ns: int,
                      cap: int) -> list[LoopWorkload] | None:
        """DFC's edit (a new rate for every workload at every boundary) in the loaded set:
        ``Workloads._retime``'s result without giving the set back (giving it back and loading
        it again at every boundary held the worker's I/O: docs/engine.md). The kernel rewrites
        the rings' times and the generators' schedules (``compiled_loop.retime``) after
        ``_reach``; each sequencer takes its new rate when the set is given back
        (``take_back``). Returns the workloads whose backlog was longer than ``cap`` (each
        keeps its first ``cap``; the warning is the caller's), or None where any edit is not
        such an edit: the caller then gives the set back (rings may
        hold I/Os drawn meanwhile)."""
        if not self.ws or not self.loaded:
            return None
        ws = self.ws
        chosen: dict[int, WorkloadParams] = {}
        cut: dict[int, LoopWorkload] = {}
        for workload_id, params in edits:
            k = self.pos_of.get(workload_id)
            if (k is None or not ws[k].paced or params.iops is None
                    or not params.same_but_rate(ws[k].spec.params)):
                return None
            chosen[k] = params  # the last edit of a workload counts
            if self._reach(k, at_ns, cap):
                cut[k] = ws[k]
        ks = np.fromiter(chosen, dtype=np.int64, count=len(chosen))
        iops = np.fromiter((p.iops for p in chosen.values()), dtype=np.float64,
                           count=len(chosen))
        for k, params in chosen.items():
            ws[k].spec.params = params
        periods, bases = Sequencer.schedule_starts(self.phase_fraction[ks], iops, at_ns)
        pk.retime(self.args, self.gen, at_ns, ks, periods, bases, cap)
        # the kernel's heap holds the old times: its next run arms every workload anew
        self.armed[self.armed == 1] = 0
        self.args.heap_n = 0
        return list(cut.values())
