"""A worker's data verification state, the arrays the compiled loop's verification works on
(``ivy_loop.c``: ``verify_write``, ``verify_read_done``): each LUN's map (a byte per 4 KiB
block of the range its workloads reach, ``protocol.verify``'s map byte) and what its stamps
carry, the table of blocks with I/O in flight, the journal of blocks a write settled, the
damaged blocks found with their bytes, and the blocks checked and damaged per owner.

Owns ``VerifyState``: it sizes and keeps those arrays alive, points a loop's arguments at them
(``attach``) and gives what the loop put there back, emptied (``drain_journal``,
``drain_findings``, ``take_counts``). It must not check or stamp anything itself (the
compiled loop does, and ``protocol.verify`` is the reference) nor do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol import verify
from slave.engine.layout import VFIND_DTYPE, VLUN_DTYPE, LoopArgs

#: the damaged blocks a worker keeps between drains, each with its 4 KiB as read
FINDINGS_KEPT: Final = 64
#: words of counts per owner: blocks checked, then each class's by its code
COUNT_WORDS: Final = 8


@dataclass(frozen=True)
class VerifiedLun:
    """A LUN this worker verifies: its number in the run's map, the range of it the map
    covers (whole 4 KiB blocks from ``first_bytes``), the run's key and attempt."""

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


class VerifyState:
    """The verification arrays of one compiled loop: ``luns`` (the map of each, its bytes in
    ``maps``), room for ``blocks_in_flight`` blocks with I/O in flight at once and for
    ``journal_room`` blocks settled in one of the loop's turns (it returns to be drained
    before fewer are left), and ``n_owners`` owners' counts."""

    def __init__(self, luns: list[VerifiedLun], blocks_in_flight: int, journal_room: int,
                 n_owners: int) -> None:
        self.luns = luns
        self.vlun = np.zeros(len(luns), dtype=VLUN_DTYPE)
        self.maps = [np.zeros(v.size_bytes // verify.MAP_BLOCK_BYTES, dtype=np.uint8)
                     for v in luns]
        for i, (v, m) in enumerate(zip(luns, self.maps, strict=True)):
            row = self.vlun[i]
            row["map"] = m.ctypes.data
            row["first_bytes"], row["n_blocks"] = v.first_bytes, m.size
            row["run_key"], row["lun"], row["attempt"] = v.run_key, v.lun, v.attempt
        # a table at most a quarter full: probes stay short, and it never fills
        size = 1 << max(4, (4 * max(1, blocks_in_flight) - 1).bit_length())
        self.vtab = np.zeros(2 * size, dtype=np.int64)
        self.journal_room = max(1, journal_room)
        self.journal = np.zeros(4 * self.journal_room, dtype=np.int64)
        self.findings = np.zeros(FINDINGS_KEPT, dtype=VFIND_DTYPE)
        self.finding_bytes = np.zeros((FINDINGS_KEPT, verify.MAP_BLOCK_BYTES), dtype=np.uint8)
        self.counts = np.zeros((max(1, n_owners), COUNT_WORDS), dtype=np.int64)
        self._args: LoopArgs | None = None

    def vlun_address(self, lun: int) -> int:
        """The address of LUN ``lun``'s ``struct ivy_vlun`` (a workload's ``ivy_data.vlun``)."""
        for i, v in enumerate(self.luns):
            if v.lun == lun:
                return int(self.vlun.ctypes.data + i * VLUN_DTYPE.itemsize)
        raise KeyError(f"LUN {lun} is not verified by this loop")

    def attach(self, args: LoopArgs) -> None:
        """Point the loop's arguments at these arrays (its counts and lengths from zero)."""
        args.array("vtab", self.vtab)
        args.vtab_mask = self.vtab.size // 2 - 1
        args.vtab_n = 0
        args.array("vjournal", self.journal)
        args.vjournal_n, args.vjournal_cap = 0, self.journal.size
        args.vjournal_room = self.journal_room
        args.array("vfind", self.findings)
        args.array("vfind_bytes", self.finding_bytes)
        args.vfind_n, args.vfind_cap = 0, FINDINGS_KEPT
        args.array("vcount", self.counts)
        self._args = args

    def drain_journal(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                     npt.NDArray[np.uint8]]:
        """The blocks writes settled since the last drain, in order: each one's LUN number,
        block (its index in the LUN's map) and map byte."""
        args = self._attached()
        words = self.journal[: args.vjournal_n].copy()
        args.vjournal_n = 0
        return ((words >> 48).astype(np.int64), (words >> 8) & ((1 << 40) - 1),
                (words & 0xFF).astype(np.uint8))

    def drain_findings(self) -> tuple[npt.NDArray[np.void], npt.NDArray[np.uint8], int]:
        """The damaged blocks kept since the last drain (with their bytes as read) and how
        many were found in all (those past ``FINDINGS_KEPT`` are counted, not kept)."""
        args = self._attached()
        found = int(args.vfind_n)
        kept = min(found, FINDINGS_KEPT)
        out = self.findings[:kept].copy(), self.finding_bytes[:kept].copy()
        args.vfind_n = 0
        return out[0], out[1], found

    def take_counts(self) -> npt.NDArray[np.int64]:
        """Per owner, the blocks checked and each class's damaged blocks since the last take
        (``COUNT_WORDS`` columns: checked, then by ``protocol.verify.CODES``)."""
        out = self.counts.copy()
        self.counts[:] = 0
        return out

    def in_flight(self) -> int:
        """How many blocks the table holds (0 once no verified I/O is in flight)."""
        return int(self._attached().vtab_n)

    def _attached(self) -> LoopArgs:
        if self._args is None:
            raise RuntimeError("VerifyState is not attached to a loop")
        return self._args
