"""Time semantics of fio histogram log rows and their alignment onto common time quanta.

Owns (1) the window each row covers and (2) spreading each row's counts over fixed time quanta
in proportion to overlap, summed over all logs into one (slots x quanta x columns) float64
matrix. It must not parse text or compute percentiles.

Row windows (what fio's ``stat.c`` does: on the first completion after ``log_hist_msec`` has
passed, it copies the cumulative histogram and ``iolog.c`` logs the difference to the previous
copy, stamped with the time of that completion):

* a row's stamp is the **end** of its window; its counts are the I/Os completed in the window;
* a row covers ``(previous stamp of the same file and direction, its stamp]``;
* the first row of a direction covers the time since the job started: ``(0, stamp]`` for stamps
  relative to the job's start, ``(stamp - interval, stamp]`` for absolute (Unix-epoch) stamps,
  where ``interval`` is the file's logging interval;
* fio never logs the last partial window, so the last stamp is the end of the data.

Quanta: quantum ``q`` is ``[q * Q, (q + 1) * Q)`` ms on the logs' own time axis (job-relative
ms or Unix-epoch ms), so quanta of epoch logs fall on multiples of Q in wall-clock time. A row
spreads its counts over the quanta its window overlaps, in proportion to the overlap (I/O assumed
uniform within the row); a row of zero length (a repeated stamp) goes wholly to the quantum
that ends at or contains its stamp. Sums are float64: spread counts are fractional, and float64
keeps integer counts exact up to 2**53.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from master.fiologs import cfuncs
from master.fiologs.parse import N_DIRECTIONS, HistBlock

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Time stamps at or above this many ms are taken as Unix-epoch ms (1973-03-03); a job-relative
#: stamp this large would need a job running for more than three years.
EPOCH_THRESHOLD_MS: Final = 100_000_000_000


def looks_absolute(first_stamp_ms: int) -> bool:
    return first_stamp_ms >= EPOCH_THRESHOLD_MS


#: the rows of a direction the interval's estimate reads (its pairs grow as their square)
INTERVAL_ROWS: Final = 256


def detect_interval_ms(times_ms: IntArray, dirs: IntArray) -> float | None:
    """A log's interval (``log_hist_msec``), from its direction with the most rows: the median
    slope between every two of its first ``INTERVAL_ROWS`` rows over their row numbers
    (Theil-Sen), rounded to whole ms. fio logs a row at the first completion past a window's
    due time and takes that delay off the next window (``stat.c``: ``hist_last = elapsed -
    (this_window - hist_msec)``), so single steps jitter by a completion's delay, a stall makes
    one long step and the rows it owes come at the next completions (or never, once the job has
    ended); the mean step from the first row to the last read 52 ms for 50 on a loaded host.
    None when no direction has two rows at different times."""
    rows: IntArray | None = None
    for d in range(N_DIRECTIONS):
        t = times_ms[dirs == d][:INTERVAL_ROWS]
        if t.size > 1 and t[-1] > t[0] and (rows is None or t.size > rows.size):
            rows = t
    if rows is None:
        return None
    i, j = np.triu_indices(rows.size, k=1)
    step = _median((rows[j] - rows[i]) / (j - i))
    if step <= 0:  # most rows share their stamps: the mean step, which is above 0
        step = float(rows[-1] - rows[0]) / (rows.size - 1)
    return float(round(step)) if step >= 1 else step


def _median(x: FloatArray) -> float:
    """``np.median`` of a non-empty array without NaN, to the bit (the mean of the two middle
    values of an even count is their sum halved, as np.mean computes it), without the
    numpy.ma import np.median's NaN check makes (10 to 100 ms of a small run's start)."""
    half = x.size // 2
    if x.size % 2:
        return float(np.partition(x, half)[half])
    part = np.partition(x, (half - 1, half))
    return float((part[half - 1] + part[half]) / 2.0)


class RowWindows:
    """Per-file state that turns row stamps into windows ``(start_ms, end_ms]``."""

    def __init__(self, *, absolute: bool, interval_ms: float) -> None:
        self.absolute = absolute
        self.interval_ms = interval_ms
        self._last: list[float | None] = [None] * N_DIRECTIONS

    def windows(self, block: HistBlock) -> tuple[FloatArray, FloatArray]:
        end = block.times_ms.astype(np.float64)
        start = np.empty_like(end)
        for d in range(N_DIRECTIONS):
            sel = np.flatnonzero(block.dirs == d)
            if sel.size == 0:
                continue
            t = end[sel]
            prev = self._last[d]
            if prev is None:
                prev = t[0] - self.interval_ms if self.absolute else 0.0
                prev = min(prev, t[0])
            start[sel[0]] = prev
            start[sel[1:]] = t[:-1]
            self._last[d] = float(t[-1])
        return start, end


@dataclass(frozen=True)
class Spread:
    """Which quanta each row reaches, and with what weight (pairs of row x quantum)."""

    pair_row: IntArray
    pair_quantum: IntArray  # absolute quantum index
    pair_weight: FloatArray
    row_first_pair: IntArray  # index of each row's first pair
    row_pairs: IntArray  # number of pairs of each row


#: A window edge within this fraction of a quantum of a quantum boundary is on it: a quantum
#: that is not a binary fraction of a ms (``--time-quantum 4.02`` is 4019.9999999999995 ms)
#: must not hand a float-rounding sliver of a row to the quantum on the other side.
_ON_BOUNDARY: Final = 1e-6


def _on_boundaries(ms: FloatArray, quantum_ms: float) -> FloatArray:
    """``ms`` in quanta, snapped to whole quanta where within ``_ON_BOUNDARY`` of one."""
    q = ms / quantum_ms
    whole = np.rint(q)
    return np.where(np.abs(q - whole) <= _ON_BOUNDARY, whole, q)


def spread_rows(start_ms: FloatArray, end_ms: FloatArray, quantum_ms: float) -> Spread:
    """Split every row window over the quanta it overlaps (weights of a row sum to 1)."""
    duration = end_ms - start_ms
    point = duration <= 0
    q_last = np.ceil(_on_boundaries(end_ms, quantum_ms)).astype(np.int64) - 1
    q_first = np.where(point, q_last,
                       np.floor(_on_boundaries(start_ms, quantum_ms)).astype(np.int64))
    q_last = np.maximum(q_last, q_first)
    n_pairs = q_last - q_first + 1
    row_first = np.cumsum(n_pairs) - n_pairs
    total = int(n_pairs.sum())
    pair_row = np.repeat(np.arange(start_ms.size, dtype=np.int64), n_pairs)
    pair_q = q_first[pair_row] + (np.arange(total, dtype=np.int64) - row_first[pair_row])
    lo = np.maximum(start_ms[pair_row], pair_q * quantum_ms)
    hi = np.minimum(end_ms[pair_row], (pair_q + 1) * quantum_ms)
    safe = np.where(point, 1.0, duration)[pair_row]
    # a row within one quantum gives it all its counts, whatever the rounding of its edges
    whole = point | (n_pairs == 1)
    weight = np.where(whole[pair_row], 1.0, np.clip(hi - lo, 0.0, None) / safe)
    return Spread(pair_row, pair_q, weight, row_first, n_pairs)


class TooManyQuanta(Exception):
    """The rows reach more quanta than an accumulator may hold: ``need`` against ``limit``."""

    def __init__(self, need: int, limit: int) -> None:
        super().__init__(need, limit)
        self.need = need
        self.limit = limit


@dataclass(frozen=True)
class ExportedSums:
    """Sums handed from one ``QuantumAccumulator`` to another: quanta ``first_quantum`` to
    ``last_quantum`` reached (None: none), and the counts of columns ``first_column`` on
    (``slots x quanta x columns``; no columns when nothing was added)."""

    first_quantum: int | None
    last_quantum: int | None
    first_column: int
    counts: FloatArray


class QuantumAccumulator:
    """Sums of spread counts: ``counts[slot, quantum - base, column]`` (float64), grown on
    demand along the quantum axis. ``first_quantum``/``last_quantum`` span every quantum any
    row window reached, with or without I/O."""

    def __init__(self, n_slots: int, n_columns: int, max_bytes: int | None = None) -> None:
        """``max_bytes``: the most its matrix may take; room for more quanta raises
        ``TooManyQuanta`` (None: no limit)."""
        self.n_slots = n_slots
        self.n_columns = n_columns
        self.max_quanta = (None if max_bytes is None
                           else max_bytes // (8 * max(n_slots * n_columns, 1)))
        self._data: FloatArray = np.zeros((n_slots, 0, n_columns), dtype=np.float64)
        self._base = 0
        self.first_quantum: int | None = None
        self.last_quantum: int | None = None
        # the columns anything was added to (every other one holds 0.0 in every quantum)
        self._first_column = n_columns
        self._last_column = -1

    def reserve(self, q_lo: int, q_hi: int) -> None:
        """Make room for quanta ``q_lo..q_hi`` at once (an estimate: adding beyond it still
        works), which spares growing step by step. Counts are unchanged. An estimate over the
        limit reserves nothing: the quanta the rows reach are what counts. Nor does one that
        the room nearly holds already (within a sixteenth of it: the next file of a cluster,
        estimated a quantum further), which would copy the sums into half as much room again
        (20 ms of a small run's 0.5 s) for quanta its rows seldom reach."""
        if self.max_quanta is not None and q_hi - q_lo + 1 > self.max_quanta:
            return
        cap = self._data.shape[1]
        slack = cap // 16
        if cap and q_lo >= self._base - slack and q_hi < self._base + cap + slack:
            return
        with contextlib.suppress(TooManyQuanta):
            self._ensure(q_lo, q_hi, exact=True)

    def check_room(self, q_lo: int, q_hi: int) -> None:
        """``TooManyQuanta`` when quanta ``q_lo..q_hi`` and those reached so far are more than
        it may hold. For before spreading rows, whose work arrays grow with the quanta the rows
        reach (a stamp years off would take gigabytes before ``add`` could refuse it)."""
        if self.max_quanta is None:
            return
        lo = q_lo if self.first_quantum is None else min(q_lo, self.first_quantum)
        hi = q_hi if self.last_quantum is None else max(q_hi, self.last_quantum)
        if hi - lo + 1 > self.max_quanta:
            raise TooManyQuanta(hi - lo + 1, self.max_quanta)

    def _ensure(self, q_lo: int, q_hi: int, *, exact: bool = False) -> None:
        """Room for ``q_lo..q_hi``. The first sizing is just that (``exact``) or at least 64
        quanta; growing later adds half the capacity again, below when growing downwards. At
        the limit, the room of the limit, if every quantum reached fits in it."""
        cap = self._data.shape[1]
        if cap and q_lo >= self._base and q_hi < self._base + cap:
            return
        if cap == 0:
            new_base, new_cap = q_lo, max(q_hi - q_lo + 1, 1 if exact else 64)
        else:
            margin = cap // 2
            new_base = min(self._base, q_lo - margin if q_lo < self._base else q_lo)
            need = max(self._base + cap, q_hi + 1) - new_base
            new_cap = max(need, cap + margin)
        if self.max_quanta is not None and new_cap > self.max_quanta:
            lo = q_lo if self.first_quantum is None else min(q_lo, self.first_quantum)
            hi = q_hi if self.last_quantum is None else max(q_hi, self.last_quantum)
            if hi - lo + 1 > self.max_quanta:
                raise TooManyQuanta(hi - lo + 1, self.max_quanta)
            new_cap = self.max_quanta
            new_base = min(lo, max(new_base, hi + 1 - new_cap))
        grown = np.zeros((self.n_slots, new_cap, self.n_columns), dtype=np.float64)
        # the old room's quanta that the new one holds (every one reached)
        lo, hi = max(self._base, new_base), min(self._base + cap, new_base + new_cap)
        if hi > lo:
            grown[:, lo - new_base : hi - new_base] = self._data[:, lo - self._base :
                                                                  hi - self._base]
        self._data, self._base = grown, new_base

    def add(self, block: HistBlock, slot_of_row: IntArray, spread: Spread) -> None:
        """Add one block's cells, each row into its slot, spread as ``spread`` says."""
        if spread.pair_quantum.size == 0:
            return
        q_lo = int(spread.pair_quantum.min())
        q_hi = int(spread.pair_quantum.max())
        self.first_quantum = q_lo if self.first_quantum is None else min(self.first_quantum, q_lo)
        self.last_quantum = q_hi if self.last_quantum is None else max(self.last_quantum, q_hi)
        self._ensure(q_lo, q_hi)
        if block.entry_count.size == 0:
            return
        self._first_column = min(self._first_column, int(block.entry_col.min()))
        self._last_column = max(self._last_column, int(block.entry_col.max()))
        # where each row's first quantum starts in the flat matrix
        cap = self._data.shape[1]
        first = spread.row_first_pair
        row_base = (slot_of_row * cap + (spread.pair_quantum[first] - self._base)) * self.n_columns
        if int(spread.row_pairs.max()) <= 2:
            self._add_one_or_two(block.entry_row, block.entry_col, block.entry_count, row_base,
                                 spread)
            return
        simple = spread.row_pairs <= 2
        cell_simple = simple[block.entry_row]
        if cell_simple.any():
            self._add_one_or_two(block.entry_row[cell_simple], block.entry_col[cell_simple],
                                 block.entry_count[cell_simple], row_base, spread)
        rest = ~cell_simple
        self._add_pairs(block.entry_row[rest], block.entry_col[rest], block.entry_count[rest],
                        slot_of_row, spread)

    def _add_one_or_two(
        self, row: IntArray, col: IntArray, count: IntArray, row_base: IntArray, spread: Spread
    ) -> None:
        """Cells of rows that reach one or two quanta (nearly all rows): one ``add.at`` per
        quantum, without expanding cells into pairs (or the same additions in the same order
        in C, ``align.c``, where the master's object is available)."""
        flat_data = self._data.reshape(-1)
        first = spread.row_first_pair
        two = spread.row_pairs == 2
        fn = cfuncs.function("ivf_add_one_or_two")
        if fn is not None and row.size:
            self._add_one_or_two_c(fn, row, col, count, row_base, spread, two)
            return
        flat = row_base[row]
        flat += col
        if not two.any():  # every row in one quantum, with weight 1
            np.add.at(flat_data, flat, count.astype(np.float64))
            return
        first_part = count * spread.pair_weight[first][row]
        np.add.at(flat_data, flat, first_part)
        flat += self.n_columns  # the next quantum of the same slot
        if bool(two.all()):
            # the second quantum gets what the first did not: the parts add up to the count
            np.add.at(flat_data, flat, count - first_part)
            return
        w_second = np.where(two, spread.pair_weight[np.where(two, first + 1, first)], 0.0)
        cell_two = two[row]
        np.add.at(flat_data, flat[cell_two], count[cell_two] * w_second[row[cell_two]])

    def _add_one_or_two_c(self, fn: Any, row: IntArray, col: IntArray, count: IntArray,
                          row_base: IntArray, spread: Spread, two: npt.NDArray[np.bool_]
                          ) -> None:
        """``_add_one_or_two`` in C, after checking that every cell lands in the sums (the C
        does not look)."""
        n_cols = self.n_columns
        reach = row_base + np.where(two, n_cols, 0)
        if (int(row_base.min()) < 0 or int(reach.max()) + n_cols > self._data.size
                or int(col.min()) < 0 or int(col.max()) >= n_cols):
            raise IndexError("a cell beyond the sums")
        mode = 0 if not two.any() else 1 if bool(two.all()) else 2
        w_first = np.ascontiguousarray(spread.pair_weight[spread.row_first_pair])
        w_second = w_first
        if mode == 2:
            first = spread.row_first_pair
            w_second = np.where(two, spread.pair_weight[np.where(two, first + 1, first)], 0.0)
        two_bytes = np.ascontiguousarray(two).view(np.uint8)
        cells = [np.ascontiguousarray(a, dtype=np.int64) for a in (row, col, count, row_base)]
        fn(self._data.ctypes.data, cells[0].ctypes.data, cells[1].ctypes.data,
           cells[2].ctypes.data, row.size, cells[3].ctypes.data, w_first.ctypes.data,
           w_second.ctypes.data, two_bytes.ctypes.data, n_cols, mode)

    def _add_pairs(
        self, row: IntArray, col: IntArray, count: IntArray, slot_of_row: IntArray,
        spread: Spread
    ) -> None:
        """Cells of any rows: each cell is expanded into one value per quantum its row
        reaches."""
        if row.size == 0:
            return
        reps = spread.row_pairs[row]
        cell = np.repeat(np.arange(row.size, dtype=np.int64), reps)
        cell_first = np.cumsum(reps) - reps
        pair = spread.row_first_pair[row][cell] + (
            np.arange(cell.size, dtype=np.int64) - cell_first[cell]
        )
        cap = self._data.shape[1]
        flat = (slot_of_row[row][cell] * cap + (spread.pair_quantum[pair] - self._base)) * (
            self.n_columns
        ) + col[cell]
        values = count[cell] * spread.pair_weight[pair]
        np.add.at(self._data.reshape(-1), flat, values)

    def export(self) -> ExportedSums:
        """A copy of the counts from the first quantum reached to the last one, of the columns
        from the first anything was added to to the last (``slots x quanta x columns``; the
        others hold 0.0), for ``merge`` in another accumulator. Sending fewer columns from a
        reading process spares most of its sums' way through the pipe (18 MB for 1,200
        quanta: 70 ms of a small run), and adding the zeros left out would change nothing."""
        if (self.first_quantum is None or self.last_quantum is None
                or self._last_column < self._first_column):
            return ExportedSums(self.first_quantum, self.last_quantum, 0,
                                np.zeros((self.n_slots, 0, 0)))
        lo = self.first_quantum - self._base
        hi = self.last_quantum - self._base + 1
        part = self._data[:, lo:hi, self._first_column : self._last_column + 1]
        return ExportedSums(self.first_quantum, self.last_quantum, self._first_column,
                            np.ascontiguousarray(part))

    def merge(self, part: ExportedSums) -> None:
        """Add what ``export`` gave (another accumulator of the same slots and columns)."""
        if part.first_quantum is None or part.last_quantum is None:
            return
        first, last, counts = part.first_quantum, part.last_quantum, part.counts
        c0, c1 = part.first_column, part.first_column + counts.shape[2]
        if (counts.shape[0] != self.n_slots or c1 > self.n_columns
                or counts.shape[1] not in (0, last - first + 1)):
            raise ValueError(f"cannot merge counts of shape {counts.shape} from column {c0} "
                             f"into {self.n_slots} slots x {self.n_columns} columns")
        self.first_quantum = first if self.first_quantum is None else min(self.first_quantum, first)
        self.last_quantum = last if self.last_quantum is None else max(self.last_quantum, last)
        self._ensure(first, last)
        if counts.size == 0:
            return
        self._first_column = min(self._first_column, c0)
        self._last_column = max(self._last_column, c1 - 1)
        at = first - self._base
        self._data[:, at : at + counts.shape[1], c0:c1] += counts

    def column_span(self) -> tuple[int, int] | None:
        """Columns ``first..last`` (inclusive) span every one anything was added to (every other
        column holds 0.0 in every slot and quantum); None when nothing was added."""
        if self._last_column < self._first_column:
            return None
        return self._first_column, self._last_column

    def column_total(self, column: int) -> float:
        """Everything added to one column, over all slots and quanta."""
        return float(self._data[:, :, column].sum())

    def quanta(self) -> IntArray:
        """Absolute indices of every quantum from the first to the last reached."""
        if self.first_quantum is None or self.last_quantum is None:
            return np.zeros(0, dtype=np.int64)
        return np.arange(self.first_quantum, self.last_quantum + 1, dtype=np.int64)

    def counts(self, slot: int, q_from: int, q_to: int) -> FloatArray:
        """Counts of one slot for absolute quanta ``[q_from, q_to)`` (a view)."""
        return self._data[slot, q_from - self._base : q_to - self._base]

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)
