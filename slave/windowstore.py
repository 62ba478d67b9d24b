"""What a step keeps of every workload's statistics for its measurement window.

Owns the per-workload ``StatsBatch`` of each subinterval from ``Go.keep_from`` on, until the
master asks for a window (``WindowRequest``) after the step: then it adds the window's
subintervals up (``protocol.grouping.add_batches``). Two ways to keep:

* ``fold`` (a fixed-length step, whose window is ``keep_from`` .. ``keep_to``): a
  running total, plus the last ``FOLD_DELAY`` subintervals on their own, so that a window
  ending one or two subintervals early (the master stopped before it recorded a result that
  crossed its ``Stop``) is still exact. Memory stays that of about three subintervals however
  long the step.
* otherwise (a ``measure:`` step picks its window afterwards): each subinterval on its own, in
  memory up to ``memory_bytes`` and then in a temporary file (``spill_dir``), which
  ``close`` removes (it has no name: nothing is left behind even when the slave is killed).

No I/O on LUNs, no protocol messages (``slave.session`` answers the request).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Final

import numpy as np

from protocol.batch import StatsBatch
from protocol.grouping import add_batches
from protocol.views import N_CATEGORIES, N_KINDS

log = logging.getLogger(__name__)

#: Subintervals a fold keeps on their own before adding them to the running total.
FOLD_DELAY: Final = 2
#: Kept subintervals beyond this many bytes go to a temporary file.
#: (16 MiB: about 20 subintervals of 64 workloads; the slave stays within its 150 MB.)
DEFAULT_MEMORY_BYTES: Final = 16 << 20
#: Subintervals added at once when a window is read (bounds the temporary memory).
ADD_CHUNK: Final = 16


def spill_dir() -> str | None:
    """Where kept subintervals spill: ``$TMPDIR`` when set, else /var/tmp (on disk by
    convention; /tmp is often RAM), else Python's default."""
    if os.environ.get("TMPDIR"):
        return None
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else None


class WindowError(ValueError):
    """The window asked for cannot be given exactly (subintervals not kept, or added up
    with others already)."""


@dataclass(frozen=True)
class _Spilled:
    offset: int
    n: int
    nnz: int


def _nbytes(b: StatsBatch) -> int:
    return int(b.counters.nbytes + b.lat.nbytes + b.rows.nbytes + b.buckets.nbytes
               + b.counts.nbytes)


class WindowStore:
    """See the module docstring. ``add`` every subinterval's batch as it is sent; ``window``
    once the step has stopped."""

    def __init__(self, step: int, keep_from: int, keep_to: int, fold: bool,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        """Keep subintervals ``keep_from`` .. ``keep_to`` (-1: no end)."""
        self.step = step
        self.keep_from = max(0, keep_from)
        self.keep_to = keep_to
        self.fold = fold
        self.memory_bytes = memory_bytes
        self.ids: tuple[str, ...] | None = None
        # fold: the running total over [keep_from, _total_last] and the recent ones
        self._total: StatsBatch | None = None
        self._total_last = self.keep_from - 1
        self._recent: deque[tuple[int, StatsBatch]] = deque()
        # keep: each subinterval, in memory or in the spill file
        self._kept: dict[int, StatsBatch | _Spilled] = {}
        self._in_memory_bytes = 0
        self._spill: IO[bytes] | None = None
        self._spill_end = 0

    # ------------------------------------------------------------------ adding
    def add(self, k: int, ids: Sequence[str], batch: StatsBatch) -> None:
        """Subinterval ``k``'s statistics of the workloads ``ids`` (ignored outside
        ``keep_from`` .. ``keep_to``)."""
        if k < self.keep_from or 0 <= self.keep_to < k:
            return
        key = tuple(ids)
        if self.ids is None:
            self.ids = key
        elif key != self.ids:
            raise WindowError(f"the workloads changed within step {self.step} at subinterval "
                              f"{k}; its window cannot be added up")
        if self.fold:
            self._recent.append((k, batch))
            while len(self._recent) > FOLD_DELAY:
                j, oldest = self._recent.popleft()
                self._total = oldest if self._total is None else add_batches(
                    [self._total, oldest])
                self._total_last = j
            return
        if self._in_memory_bytes + _nbytes(batch) <= self.memory_bytes:
            self._kept[k] = batch
            self._in_memory_bytes += _nbytes(batch)
        else:
            self._kept[k] = self._write_spill(batch)

    def _write_spill(self, b: StatsBatch) -> _Spilled:
        if self._spill is None:
            # kept open until close(): the file lives as long as the step's window
            self._spill = tempfile.TemporaryFile(  # noqa: SIM115
                prefix="ivypy-window-", dir=spill_dir())
            log.info("step %d: kept subintervals pass %d MiB; the rest go to a temporary file",
                     self.step, self.memory_bytes >> 20)
        at = self._spill_end
        self._spill.seek(at)
        for a, dt in ((b.counters, "<i8"), (b.lat, "<i8"), (b.rows, "<u4"), (b.buckets, "<u2"),
                      (b.counts, "<i8")):
            self._spill.write(np.ascontiguousarray(a, dtype=dt).tobytes())
        self._spill_end = self._spill.tell()
        return _Spilled(at, b.n_workloads, int(b.rows.size))

    def _read_spill(self, s: _Spilled) -> StatsBatch:
        assert self._spill is not None
        self._spill.seek(s.offset)
        n, nnz = s.n, s.nnz

        def take(dt: str, count: int) -> np.ndarray:
            width = np.dtype(dt).itemsize
            raw = self._spill.read(width * count)  # type: ignore[union-attr]
            if len(raw) != width * count:
                raise WindowError(f"the spill file of step {self.step} ended early")
            return np.frombuffer(raw, dtype=dt)

        counters = take("<i8", n * N_CATEGORIES * 3).reshape(n, N_CATEGORIES, 3)
        lat = take("<i8", n * N_CATEGORIES * N_KINDS * 3).reshape(n, N_CATEGORIES, N_KINDS, 3)
        return StatsBatch(counters=counters, lat=lat, rows=take("<u4", nnz),
                          buckets=take("<u2", nnz), counts=take("<i8", nnz))

    # ------------------------------------------------------------------ reading
    def window(self, first: int, last: int) -> tuple[list[str], StatsBatch]:
        """The workloads and their statistics added up over ``first`` .. ``last``."""
        if last < first:
            raise WindowError(f"window {first}..{last} is empty")
        if first < self.keep_from:
            raise WindowError(f"subintervals before {self.keep_from} of step {self.step} were "
                              f"not kept (Go.keep_from)")
        if self.ids is None:
            raise WindowError(f"no subinterval of step {self.step} from {self.keep_from} on was "
                              "kept")
        parts: list[StatsBatch] = []
        have: list[int] = []
        if self.fold:
            if first != self.keep_from:
                raise WindowError(f"step {self.step} added its subintervals up from "
                                  f"{self.keep_from} on (a fixed-length step); a window from "
                                  f"{first} cannot be taken out")
            if self._total is not None:
                if last < self._total_last:
                    raise WindowError(f"subintervals up to {self._total_last} of step "
                                      f"{self.step} are already added up; a window ending at "
                                      f"{last} cannot be taken out")
                parts.append(self._total)
                have += range(self.keep_from, self._total_last + 1)
            for j, b in self._recent:
                if j <= last:
                    parts.append(b)
                    have.append(j)
        else:
            for j in range(first, last + 1):
                got = self._kept.get(j)
                if got is None:
                    continue
                parts.append(got if isinstance(got, StatsBatch) else self._read_spill(got))
                have.append(j)
                if len(parts) > ADD_CHUNK:
                    parts = [add_batches(parts)]
        missing = sorted(set(range(first, last + 1)) - set(have))
        if missing:
            raise WindowError(f"subintervals {missing[:5]} of step {self.step} were not kept "
                              f"(the last one kept is {max(have) if have else 'none'})")
        return list(self.ids), parts[0] if len(parts) == 1 else add_batches(parts)

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._kept.clear()
        self._recent.clear()
        self._total = None
