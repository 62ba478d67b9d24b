"""A loop's data verification state: the arrays the compiled loop's verification works on
(``ivy_loop.c``: ``verify_write``, ``verify_read_done``, and the same functions called one I/O
at a time for the general Python loop's I/Os), kept for the loop's whole life: each LUN's map
(a byte per 4 KiB block of the range its workloads reach, ``protocol.verify``'s map byte) and
what its stamps carry, each workload's LUN and writer number, the table of blocks with I/O in
flight, the journal of blocks a write settled, the damaged blocks found with their bytes, and
the blocks checked and damaged per workload.

Owns ``VerifyState``: it sizes and keeps those arrays alive, points a compiled set's arguments
at them (``attach``), makes the general loop's calls (``submitted``, ``completed``) and gives
back what the loop found, emptied (``spill`` at a flush, ``take`` at a boundary). It must not
check or stamp anything itself (the compiled loop does; ``protocol.verify`` is the reference)
nor do I/O.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol import verify
from slave.datapattern import splitmix64
from slave.engine import compiled_loop as pk
from slave.engine.layout import (
    DATA_DTYPE,
    IOCB_CMD_PWRITE,
    ROW,
    VFIND_DTYPE,
    VLUN_DTYPE,
    LoopArgs,
)

#: the damaged blocks kept between takes, each with its 4 KiB as read
FINDINGS_KEPT: Final = 64
#: words of counts per workload: blocks checked, then each class's by its code
COUNT_WORDS: Final = 8
#: the LUNs one loop can verify (a host runs at most 1,024 workloads)
MAX_LUNS: Final = 1024
#: the journal's room for one turn of the compiled loop: the blocks of the writes one reap
#: can complete (the loop returns to be spilled before fewer are left)
JOURNAL_TURN_BLOCKS: Final = 1 << 16


@dataclass(frozen=True)
class VerifiedLun:
    """A LUN a loop verifies: its number in the run's map, the range of it the map covers
    (whole 4 KiB blocks from ``first_bytes``), the run's key and attempt."""

    lun: int
    first_bytes: int
    size_bytes: int
    run_key: int
    attempt: int = 0

    def __post_init__(self) -> None:
        if self.first_bytes % verify.MAP_BLOCK_BYTES or self.size_bytes % verify.MAP_BLOCK_BYTES:
            raise ValueError(f"LUN {self.lun}: a verified range must be whole "
                             f"{verify.MAP_BLOCK_BYTES}-byte blocks, not {self.first_bytes} + "
                             f"{self.size_bytes} bytes")
        if not 0 <= self.lun < 1 << 16 or not 0 <= self.run_key < 1 << 32:
            raise ValueError(f"LUN number {self.lun} or run key {self.run_key} out of range")
        if not 0 <= self.attempt < 256:
            raise ValueError(f"attempt {self.attempt} out of range 0-255")


#: an attempt of the run that ended without its master hearing of every write, and each
#: writer's confirmed serial in it (by writer number; -1 none): ``LoadMap.crashes``' rows
Crash = tuple[int, Sequence[int]]


@dataclass(frozen=True, eq=False)
class LoadedMap:
    """A LUN's map as the master gave it (``LoadMap``), and the crashes it must account for
    (``Crash``, oldest first)."""

    map: npt.NDArray[np.uint8]
    crashes: Sequence[Crash] = ()


@dataclass(frozen=True, eq=False)
class WorkloadVerify:
    """What a verified workload stamps and checks against: its LUN's map and its own
    number in the run's map (the ``writer`` its stamps carry); ``initial``: the LUN's map as
    the master kept it (a resumed run, ``ivypy verify``), which a loop that has no map of the
    LUN yet starts from; the attempts that crashed before (``Crash``: each with its writers'
    confirmed serials), whose unconfirmed writes are taken into the map where they are found
    (``ivy_loop.c``: ``v_unconfirmed``)."""

    lun: VerifiedLun
    writer: int
    initial: npt.NDArray[np.uint8] | None = None
    crashes: Sequence[Crash] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.writer < 1 << 16:
            raise ValueError(f"writer number {self.writer} out of range 0-65535")


@dataclass
class Taken:
    """What a loop's verification found since the last take: the blocks settled (LUN number,
    block in its map, map byte, in order), the damaged blocks kept (``VFIND_DTYPE``) with
    their bytes, how many were found in all, and per workload index the blocks checked and
    each class's count (``COUNT_WORDS`` columns)."""

    luns: npt.NDArray[np.int64]
    blocks: npt.NDArray[np.int64]
    map_bytes: npt.NDArray[np.uint8]
    findings: npt.NDArray[np.void]
    finding_bytes: npt.NDArray[np.uint8]
    found: int
    counts: npt.NDArray[np.int64] = field(repr=False)


class VerifyState:
    """The verification arrays of one loop (one worker): LUN maps by number, each verified
    workload's LUN and writer by its index in the loop, and the rest sized for
    ``blocks_in_flight`` blocks with I/O in flight at once (grown by ``add``); the first
    ``findings_kept`` damaged blocks between takes kept whole (a read-back keeps every one
    of a read: ``slave.readback``)."""

    def __init__(self, blocks_in_flight: int = 64, findings_kept: int = FINDINGS_KEPT) -> None:
        self.findings_kept = findings_kept
        self.vlun = np.zeros(MAX_LUNS, dtype=VLUN_DTYPE)
        self.luns: list[VerifiedLun] = []
        self.maps: dict[int, npt.NDArray[np.uint8]] = {}
        self.args = LoopArgs()  # the general loop's calls' (their ``L``)
        self.data = self.args.array("data", np.zeros(16, dtype=DATA_DTYPE))
        self.counts = np.zeros((16, COUNT_WORDS), dtype=np.int64)
        self.vn = np.zeros(3, dtype=np.int64)
        self.vtab = self._table(blocks_in_flight)
        self.journal_room = JOURNAL_TURN_BLOCKS
        self.journal = np.zeros(4 * JOURNAL_TURN_BLOCKS, dtype=np.int64)
        self.findings = np.zeros(findings_kept, dtype=VFIND_DTYPE)
        self.finding_bytes = np.zeros((findings_kept, verify.MAP_BLOCK_BYTES), dtype=np.uint8)
        self._spilled: list[npt.NDArray[np.int64]] = []
        #: each verified workload's id by its index in the loop (kept after it leaves: its
        #: last subinterval's counts still name it)
        self.ids: dict[int, str] = {}
        self._confirmed: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        self._blocks_in_flight: dict[int, int] = {}
        self._point(self.args)
        self.args.n_owners = self.counts.shape[0]

    @staticmethod
    def _table(blocks_in_flight: int) -> npt.NDArray[np.int64]:
        """A table at most a quarter full: probes stay short, and it never fills."""
        return np.zeros(2 * (1 << max(4, (4 * max(1, blocks_in_flight) - 1).bit_length())),
                        dtype=np.int64)

    def add(self, index: int, v: WorkloadVerify, blocksize_bytes: int, iodepth: int,
            workload_id: str = "") -> None:
        """Workload ``index`` of the loop (``workload_id``) verifies ``v`` (its LUN's map made
        on first use), ``iodepth`` I/Os of ``blocksize_bytes`` in flight at most."""
        if blocksize_bytes % verify.MAP_BLOCK_BYTES:
            raise ValueError(f"a verified workload's blocksize must be a multiple of "
                             f"{verify.MAP_BLOCK_BYTES} bytes, not {blocksize_bytes}")
        lun = v.lun
        if lun.lun not in self.maps:
            if len(self.luns) == MAX_LUNS:
                raise ValueError(f"a loop verifies {MAX_LUNS} LUNs at most")
            m = self.maps[lun.lun] = np.zeros(lun.size_bytes // verify.MAP_BLOCK_BYTES,
                                               dtype=np.uint8)
            if v.initial is not None:
                if v.initial.size > m.size:
                    raise ValueError(f"LUN {lun.lun}: a map of {v.initial.size} blocks for a "
                                     f"range of {m.size}")
                m[: v.initial.size] = v.initial
            attempts, confirmed = crash_table(v.crashes)
            self._confirmed[lun.lun] = (attempts, confirmed)  # the loop has their addresses
            row = self.vlun[len(self.luns)]
            row["n_crashes"], row["crash_attempts"] = attempts.size, attempts.ctypes.data
            row["confirmed"], row["n_writers"] = confirmed.ctypes.data, confirmed.shape[1]
            row["map"], row["n_blocks"] = m.ctypes.data, m.size
            row["first_bytes"], row["run_key"] = lun.first_bytes, lun.run_key
            row["lun"], row["attempt"] = lun.lun, lun.attempt
            self.luns.append(lun)
        elif self.luns[self._lun_row(lun.lun)] != lun:
            raise ValueError(f"LUN {lun.lun} is verified as {self.luns[self._lun_row(lun.lun)]},"
                             f" not {lun}")
        self._grow(index + 1)
        self.ids[index] = workload_id or str(index)
        self.data["vlun"][index] = self.vlun_address(lun.lun)
        self.data["writer"][index] = v.writer
        self._blocks_in_flight[index] = iodepth * (blocksize_bytes // verify.MAP_BLOCK_BYTES + 1)
        need = self._table(sum(self._blocks_in_flight.values()))
        if need.size > self.vtab.size:
            self._grow_table(need)
        # no reap can settle more blocks than are in flight: the journal's room for one
        self._room(sum(self._blocks_in_flight.values()))

    def _grow(self, rows: int) -> None:
        """Room for workload indices below ``rows`` in the per-workload arrays."""
        if rows <= self.data.shape[0]:
            return
        size = max(rows, 2 * self.data.shape[0])
        data = np.zeros(size, dtype=DATA_DTYPE)
        data[: self.data.shape[0]] = self.data
        self.data = self.args.array("data", data)
        counts = np.zeros((size, COUNT_WORDS), dtype=np.int64)
        counts[: self.counts.shape[0]] = self.counts
        self.counts = counts
        self.args.array("vcount", counts)
        self.args.n_owners = size

    def _room(self, blocks: int) -> None:
        """A journal with room for ``blocks`` settled in one go, four times over (what it
        holds spilled first). Only from ``add``: a workload joins with the compiled set
        unloaded, and its next ``attach`` points the set at the new journal."""
        if blocks <= self.journal_room:
            return
        self.spill()
        self.journal_room = blocks
        self.journal = np.zeros(4 * blocks, dtype=np.int64)
        self._point(self.args)

    def load_part(self, lun: int, first_block: int, data: bytes) -> None:
        """Part of LUN ``lun``'s map replaced by the master's (``LoadMap`` between steps, for a
        LUN another host wrote: no I/O in flight); ``ValueError`` for a part past its end,
        ``KeyError`` for a LUN this loop does not verify."""
        m = self.maps[lun]
        part = np.frombuffer(data, dtype=np.uint8)
        if first_block < 0 or first_block + part.size > m.size:
            raise ValueError(f"LoadMap: LUN {lun}: blocks {first_block}-"
                             f"{first_block + part.size} past its {m.size}")
        m[first_block:first_block + part.size] = part  # in place: the loops hold its address

    def verifies(self, index: int) -> bool:
        """Whether workload ``index`` is verified."""
        return index < self.data.shape[0] and bool(self.data["vlun"][index])

    def vlun_address(self, lun: int) -> int:
        """The address of LUN ``lun``'s ``struct ivy_vlun`` (a workload's ``ivy_data.vlun``)."""
        return int(self.vlun.ctypes.data + self._lun_row(lun) * VLUN_DTYPE.itemsize)

    def _lun_row(self, lun: int) -> int:
        for i, v in enumerate(self.luns):
            if v.lun == lun:
                return i
        raise KeyError(f"LUN {lun} is not verified by this loop")

    def _grow_table(self, table: npt.NDArray[np.int64]) -> None:
        """The table's entries moved into a larger one (linear probing from each key's home,
        as ``vt_find`` places them), and every loop pointed at it."""
        old = self.vtab.reshape(-1, 2)
        mask = table.size // 2 - 1
        rows = table.reshape(-1, 2)
        for key, state in old[old[:, 0] != 0].tolist():
            i = int(splitmix64(np.array([key], dtype=np.uint64))[0]) & mask
            while rows[i, 0]:
                i = (i + 1) & mask
            rows[i] = (key, state)
        self.vtab = table
        self._point(self.args)

    def _point(self, args: LoopArgs) -> None:
        args.array("vtab", self.vtab)
        args.vtab_mask = self.vtab.size // 2 - 1
        args.array("vjournal", self.journal)
        args.vjournal_cap = self.journal.size
        args.vjournal_room = self.journal_room
        args.array("vfind", self.findings)
        args.array("vfind_bytes", self.finding_bytes)
        args.vfind_cap = self.findings_kept
        args.array("vn", self.vn)
        args.array("vcount", self.counts)

    def attach(self, args: LoopArgs, data: npt.NDArray[np.void], indexes: list[int]) -> None:
        """Point a compiled set's arguments at these arrays, and its workloads' write data
        (``data``, by place in the set; ``indexes``: each one's index in the loop) at their
        LUNs (each workload counts in its index's row: rows for ``args.n_owners``). The
        journal has room for what one of its reaps can settle (every verified block in flight:
        ``add`` sized it), and the loop returns to have it spilled before less is left."""
        self._grow(int(args.n_owners))
        self._point(args)
        for i, index in enumerate(indexes):
            if self.verifies(index):
                data["vlun"][i] = self.data["vlun"][index]
                data["writer"][i] = self.data["writer"][index]

    def submitted(self, rows: npt.NDArray[np.int64], slots: npt.NDArray[np.intp],
                  first_serial: int) -> None:
        """The general loop's I/Os on ``slots`` of one verified workload, their rows written
        and the data of their writes in their buffers, are about to go out: their blocks'
        generations taken and writes stamped (serials from ``first_serial``, in order)."""
        lib = _lib()
        addr = self.args.address
        rows[slots, ROW["serial"]] = first_serial + np.arange(slots.size)
        for i, s in enumerate(slots.tolist()):
            row = rows[s]
            owner, off, nbytes = int(row[ROW["owner"]]), int(row[ROW["offset"]]), int(
                row[ROW["nbytes"]])
            if int(row[ROW["opcode_fd"]]) & 0xFFFF == IOCB_CMD_PWRITE:
                lib.ivy_verify_write(addr, owner, off, nbytes, first_serial + i,
                                     int(row[ROW["buf"]]))
            else:
                lib.ivy_verify_read(addr, owner, off, nbytes)

    def completed(self, rows: npt.NDArray[np.int64], slots: npt.NDArray[np.intp],
                  res: npt.NDArray[np.int64], t_ns: int) -> None:
        """The general loop's completions of ``slots`` (results ``res``) reaped at ``t_ns``:
        those of verified workloads settle their writes and have their reads checked."""
        owners = rows[slots, ROW["owner"]]
        mine = np.flatnonzero(self.data["vlun"][np.minimum(owners, self.data.shape[0] - 1)]
                              * (owners < self.data.shape[0]))
        if mine.size == 0:
            return
        # room for every block these writes settle (at most those in flight: ``add`` sized
        # the journal for them) before the first is journaled
        if self.vn[1] + self.journal_room > self.journal.size:
            self.spill()
        lib = _lib()
        addr = self.args.address
        for j in mine.tolist():
            row = rows[int(slots[j])]
            owner, off, nbytes = int(row[ROW["owner"]]), int(row[ROW["offset"]]), int(
                row[ROW["nbytes"]])
            if int(row[ROW["opcode_fd"]]) & 0xFFFF == IOCB_CMD_PWRITE:
                lib.ivy_verify_write_done(addr, owner, off, nbytes, int(res[j]))
            else:
                lib.ivy_verify_read_done(addr, owner, owner, off, nbytes, int(res[j]),
                                         int(row[ROW["buf"]]), t_ns)

    def read_done(self, index: int, off: int, nbytes: int, res: int, buf: int,
                  t_ns: int) -> int:
        """A read of workload ``index`` at ``off`` (``nbytes``, result ``res``, its data at
        address ``buf``) completed at ``t_ns``, with no I/O of its blocks in flight (a
        read-back: ``slave.readback``): its blocks checked and counted; the worst verdict."""
        return int(_lib().ivy_verify_read_done(self.args.address, index, index, off, nbytes,
                                               res, buf, t_ns))

    def spill(self) -> None:
        """Move the journal's words aside (the loop returned to have room made)."""
        n = int(self.vn[1])
        if n:
            self._spilled.append(self.journal[:n].copy())
            self.vn[1] = 0

    def take(self) -> Taken:
        """What the loop's verification found since the last take, emptied."""
        self.spill()
        words = (np.concatenate(self._spilled) if self._spilled
                 else np.zeros(0, dtype=np.int64))
        self._spilled = []
        found = int(self.vn[2])
        kept = min(found, self.findings_kept)
        out = Taken(
            luns=(words >> 48).astype(np.int64), blocks=(words >> 8) & ((1 << 40) - 1),
            map_bytes=(words & 0xFF).astype(np.uint8), findings=self.findings[:kept].copy(),
            finding_bytes=self.finding_bytes[:kept].copy(), found=found,
            counts=self.counts.copy())
        self.vn[2] = 0
        self.counts[:] = 0
        return out

    @property
    def in_flight(self) -> int:
        """How many blocks the table holds (0 once no verified I/O is in flight)."""
        return int(self.vn[0])


def crash_table(crashes: Sequence[Crash]) -> tuple[npt.NDArray[np.int64],
                                                   npt.NDArray[np.int64]]:
    """``crashes`` as the compiled check reads them: the attempts, and a row of confirmed
    serials per attempt as wide as the most writers any has (-1 past a row's own)."""
    width = max((len(c) for _, c in crashes), default=0)
    attempts = np.array([a for a, _ in crashes], dtype=np.int64)
    table = np.full((len(crashes), max(width, 1)), -1, dtype=np.int64)
    for i, (attempt, confirmed) in enumerate(crashes):
        if not 0 <= attempt < 256:
            raise ValueError(f"a crashed attempt {attempt} out of range 0-255")
        table[i, : len(confirmed)] = confirmed
    if not crashes:
        table = np.zeros((0, 1), dtype=np.int64)
    return attempts, table


def verify_report(taken: Taken, ids: dict[int, str],
                  confirmed: dict[int, int] | None = None) -> dict[str, Any]:
    """What a worker sends of ``taken`` (``SubintervalResult.verify``'s form): the journal's
    arrays' bytes, each workload's counts by id (those that checked something), how many
    damaged blocks were found, those kept in full, and each writer's confirmed serial
    (``EngineLoop.confirmed_serials``; keys as text, as the wire's maps have)."""
    counts = {ids[i]: row[:len(verify.COUNT_NAMES)].tolist()
              for i, row in enumerate(taken.counts) if i in ids and row.any()}
    findings = []
    for f, data in zip(taken.findings, taken.finding_bytes, strict=True):
        owner = int(f["owner"])
        findings.append({
            "workload_id": ids.get(owner, str(owner)), "lun": int(f["lun"]),
            "offset_bytes": int(f["offset_bytes"]),
            "class": verify.CLASSES[int(f["verdict"]) - 1], "expected": int(f["expected"]),
            "sector": int(f["sector"]),
            "found": {"offset_bytes": int(f["found_offset_bytes"]),
                      "serial": int(f["found_serial"]), "run_key": int(f["found_run_key"]),
                      "lun": int(f["found_lun"]), "writer": int(f["found_writer"]),
                      "gen": int(f["found_gen"]), "attempt": int(f["found_attempt"]),
                      "crc_ok": bool(f["crc_ok"])},
            "done_ns": int(f["done_ns"]), "data": data.tobytes()})
    return {"journal": verify.journal_to_wire(taken.luns, taken.blocks, taken.map_bytes),
            "counts": counts, "found": taken.found, "findings": findings,
            "confirmed": {str(w): s for w, s in (confirmed or {}).items()}}


def _lib() -> ctypes.CDLL:
    lib = pk.library()
    if lib is None:
        raise RuntimeError(f"data verification needs the compiled loop: {pk.why_not()}")
    return lib
