"""Detecting and repairing the histogram logs fio writes in client/server mode.

In ``fio --client`` runs the client writes each row ``k`` of a direction as the true window
``k`` plus the row it logged for ``k - 2`` (so rows accumulate: ``L_k = T_k + L_{k-2}``); we
verified this with real fio 3.33 (``--server`` / ``--client`` on loopback) against its json+
totals. Owns the shape test and the inverse (``T_k = L_k - L_{k-2}`` per direction, streamed).
It must not read files or align time.

Shape test (on the first rows of each direction, dense): every row is elementwise at least the
row two before it, and rows grow (the mean total of rows 2.. is at least 1.5 x the mean of rows
0 and 1; honest logs of steady I/O keep their totals flat and are rarely elementwise monotone).
A direction needs 3 rows to be judged; a file is client-shaped when every judged direction fits
and at least one was judged. The test looks no further than the first ``HOLD_ROWS`` rows of a
file (the reader holds them back until the verdict), so a direction that starts later is not
judged and memory stays bounded when a file has only one or two directions.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from master.fiologs.parse import N_DIRECTIONS, HistBlock
from protocol.errors import LogFormatError

IntArray = npt.NDArray[np.int64]

DETECT_ROWS: Final = 32  # rows per direction the shape test looks at
HOLD_ROWS: Final = 2 * N_DIRECTIONS * DETECT_ROWS  # rows of a file it may wait for
GROWTH: Final = 1.5


def client_shaped(rows: IntArray) -> bool | None:
    """Whether one direction's first rows (dense, in order) have the client/server shape;
    None when there are too few rows to judge."""
    if rows.shape[0] < 3:
        return None
    if bool(np.any(rows[2:] < rows[:-2])):
        return False
    totals = rows.sum(axis=1).astype(np.float64)
    head = float(totals[:2].mean())
    return bool(float(totals[2:].mean()) >= GROWTH * head) and head > 0


class ShapeDetector:
    """Collects the first ``DETECT_ROWS`` rows of each direction of one file."""

    def __init__(self) -> None:
        self._rows: list[list[IntArray]] = [[] for _ in range(N_DIRECTIONS)]
        self._n = [0] * N_DIRECTIONS
        self._seen = 0

    @property
    def full(self) -> bool:
        """Seen enough: every direction has its rows, or ``HOLD_ROWS`` rows went by and every
        direction that appeared has its rows."""
        if all(n >= DETECT_ROWS for n in self._n):
            return True
        return self._seen >= HOLD_ROWS and all(n == 0 or n >= DETECT_ROWS for n in self._n)

    def feed(self, block: HistBlock) -> None:
        self._seen += block.n_rows
        want = [d for d in range(N_DIRECTIONS) if self._n[d] < DETECT_ROWS]
        if not want:
            return
        for d in want:
            sel = np.flatnonzero(block.dirs == d)[: DETECT_ROWS - self._n[d]]
            if sel.size:
                self._rows[d].append(block.dense(sel))
                self._n[d] += int(sel.size)

    def verdict(self) -> bool:
        judged = [
            client_shaped(np.concatenate(parts)) for parts in self._rows if parts
        ]
        decided = [v for v in judged if v is not None]
        return bool(decided) and all(decided)


class ClientLogRepairer:
    """Streams ``T_k = L_k - L_{k-2}`` per direction over the blocks of one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._prev: list[IntArray] = [
            np.zeros((0, 0), dtype=np.int64) for _ in range(N_DIRECTIONS)
        ]

    def repair(self, block: HistBlock) -> HistBlock:
        dense = block.dense()
        out = dense.copy()
        for d in range(N_DIRECTIONS):
            sel = np.flatnonzero(block.dirs == d)
            if sel.size == 0:
                continue
            logged = dense[sel]
            prev = self._prev[d]
            history = np.concatenate((prev, logged)) if prev.size else logged
            m = history.shape[0] - logged.shape[0]  # rows carried from earlier blocks
            fixed = logged.copy()
            k0 = max(0, 2 - m)  # first row of this block with a row two before it
            if k0 < logged.shape[0]:
                fixed[k0:] -= history[m + k0 - 2 : m + logged.shape[0] - 2]
            negative = np.flatnonzero((fixed < 0).any(axis=1))
            if negative.size:
                raise LogFormatError(
                    "repairing as a client/server log gives negative counts: this log does "
                    "not have that shape (drop --repair-client-logs for it)",
                    file=self.path,
                    line=int(block.line_no[sel[negative[0]]]),
                )
            out[sel] = fixed
            self._prev[d] = history[-2:].copy()
        return HistBlock.from_dense(block.times_ms, block.dirs, block.line_no, out)
