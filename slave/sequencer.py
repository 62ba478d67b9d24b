"""I/O sequencers: what decides each I/O's offset, direction and scheduled start time.

Owns ``Sequencer`` (``random_steady``, ``random_independent`` (Poisson arrivals) and
``sequential``), which produces I/Os in vectorised chunks (``OpChunk``: numpy arrays, no Python
object per I/O). It must not submit I/O, read clocks or sleep: the engine loop asks for a chunk
and keeps the schedule; times here are plain integers handed in by the caller.

Rules:

* offsets lie on a grid of ``blocksize`` steps that starts at the range start rounded up to the
  LUN's logical block size, so every offset is aligned to the logical block size and every I/O
  stays inside ``[range_start, range_end)``;
* ``hot_zone_fraction`` of random I/Os land in the first ``hot_zone_bytes`` of the range;
* ``sequential`` starts at ``seq_start`` (rounded down onto the grid) and wraps to the range
  start after the last whole block of the range;
* scheduled times: ``random_steady`` and ``sequential`` are evenly spaced at ``1e9 / iops`` ns,
  from the start time plus a phase (a fraction of the period fixed by the stream, the workload's
  id), ``random_independent`` has exponential gaps with that mean, each drawn by inversion
  (``-log1p(-u)`` periods) with the C library's ``log1p``, as the compiled generator draws
  them (``slave/engine/ivy_loop.c``: the same numbers); with ``iops=None`` (max)
  there is no schedule and ``sched_ns`` is all zeros (the engine uses the submit time);
* ``read_fraction`` is drawn per I/O.

The draws: two PCG64 streams of uniform doubles, one for the I/Os and one for the Poisson
schedule's gaps (so a rate edit between max and paced leaves the I/Os' stream as it is). An
I/O takes its draws from the I/O stream in a fixed order, I/O by I/O: its offset (random
sequencers), the hot zone's choice and a hot offset (with a hot zone: both drawn whatever the
choice), its direction (a read fraction strictly between 0 and 1): ``draws_per_io`` of them.
The I/Os are therefore the same however they are cut into chunks, and the compiled generator
draws them one I/O at a time; an edit that drops I/Os generated and never issued winds the
I/O stream back by their draws (``edited``), so the stream goes on at the first I/O not issued.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from protocol.params import WorkloadParams


def stream_fraction(stream: str, use: bytes = b"ivypy-phase") -> float:
    """A number in [0, 1) fixed by ``stream`` and ``use`` (up to 16 bytes), unrelated for
    similar streams and for different uses of one stream."""
    digest = hashlib.blake2b(stream.encode(), digest_size=8, person=use).digest()
    return int.from_bytes(digest, "little") / 2**64


def _wind_back(rng: np.random.Generator, n: int) -> None:
    """``rng``'s stream moved back by ``n`` draws: a 128-bit PCG64 state (``default_rng``'s)
    moved forward by its size less ``n``; another bit generator is left where it is."""
    bg = rng.bit_generator
    if n and isinstance(bg, np.random.PCG64):
        bg.advance((1 << 128) - n)


@dataclass(frozen=True)
class OpChunk:
    """A chunk of consecutive I/Os of one workload (all arrays of the same length)."""

    offset_bytes: npt.NDArray[np.int64]
    is_write: npt.NDArray[np.bool_]
    category: npt.NDArray[np.int64]  # 2 * is_sequential + is_write (protocol.stats order)
    sched_ns: npt.NDArray[np.int64]  # zeros when iops is max

    def __len__(self) -> int:
        return int(self.offset_bytes.size)


def check_fits(params: WorkloadParams, *, lun_size_bytes: int, logical_block_bytes: int
               ) -> tuple[int, int]:
    """Refuse (``ValueError``) parameters a sequencer cannot run on this LUN; else the
    range's first offset and number of whole blocks. What ``Sequencer`` checks, without
    making its random generator (~50 us: the slave checked every DFC edit twice)."""
    if params.blocksize_bytes % logical_block_bytes:
        raise ValueError(
            f"blocksize_bytes {params.blocksize_bytes} is not a multiple of the LUN's "
            f"logical block size {logical_block_bytes}"
        )
    return _grid(params, lun_size_bytes, logical_block_bytes)


def _grid(params: WorkloadParams, lun_size_bytes: int, logical_block_bytes: int) -> tuple[int, int]:
    """(first offset, number of whole blocks) of the workload's range."""
    lbs = logical_block_bytes
    end = params.range_end_bytes or lun_size_bytes
    end = min(end, lun_size_bytes)
    first = -(-params.range_start_bytes // lbs) * lbs
    n_blocks = (end - first) // params.blocksize_bytes
    if n_blocks < 1:
        raise ValueError(
            f"range [{params.range_start_bytes}, {end}) of a {lun_size_bytes}-byte LUN holds no "
            f"whole {params.blocksize_bytes}-byte block"
        )
    return first, n_blocks


@dataclass(frozen=True)
class GeneratorState:
    """A sequencer as numbers, for a compiled loop that goes on generating its I/Os
    (``slave/engine/ivy_loop.c``: ``generate``): what ``chunk`` draws from, in the order
    it draws, and where the schedule and the sequential position stand. The compiled loop
    hands the moving parts back through ``Sequencer.resume``."""

    rng_state: int  # the I/O stream's PCG64 bit generator: 128-bit state and increment
    rng_inc: int
    sched_rng_state: int  # the schedule's (Poisson gaps)
    sched_rng_inc: int
    first_offset_bytes: int
    n_blocks: int
    blocksize_bytes: int
    n_hot_blocks: int  # 0: no hot zone
    hot_zone_fraction: float
    read_fraction: float
    sequential: bool
    seq_next: int
    poisson: bool
    period_ns: float
    sched_base_ns: int
    sched_k: int
    sched_last_ns: float
    first_arrival_due: bool  # a Poisson schedule's first arrival, at its start, still to come


class Sequencer:
    """Generates one workload's I/Os chunk by chunk. Not thread-safe; one owner."""

    def __init__(
        self,
        params: WorkloadParams,
        *,
        lun_size_bytes: int,
        logical_block_bytes: int,
        stream: str = "",
        rng: tuple[np.random.Generator, np.random.Generator] | None = None,
    ) -> None:
        self._first, self._n_blocks = check_fits(
            params, lun_size_bytes=lun_size_bytes, logical_block_bytes=logical_block_bytes)
        self.params = params
        self._lun_size_bytes = lun_size_bytes
        self._lbs = logical_block_bytes
        self._stream = stream
        # rng: an edit's sequencer carries on its predecessor's generators (a new one cost
        # ~50 us, a tenth of a second at a boundary where DFC edits 2,000 workloads)
        if rng is None:
            key = [params.seed, zlib.crc32(stream.encode())]
            self._rng = np.random.default_rng(key)
            self._sched_rng = np.random.default_rng([*key, 1])
        else:
            self._rng, self._sched_rng = rng
        hot = min(params.hot_zone_bytes, self._n_blocks * params.blocksize_bytes)
        # blocks in the hot zone, 0 when it takes no share: no draw for it then
        self._n_hot = hot // params.blocksize_bytes if params.hot_zone_fraction > 0 else 0
        seq = max(params.seq_start_bytes - self._first, 0) // params.blocksize_bytes
        self._seq_next = int(seq % self._n_blocks)
        self._period_ns = 1e9 / params.iops if params.iops else 0.0
        # evenly spaced schedules start a fraction of a period late, a fraction fixed by the
        # stream (the workload; none without one): workloads of one rate started together do
        # not all issue at the same instants. Eight of 13,750 IOPS each on one loop device,
        # all at the same instants, read a service-time p50 of 79-88 us; spread, 48-50 us
        # (fio, one job at the same 110,000 IOPS: 48 us)
        self._phase_fraction = stream_fraction(stream) if stream else 0.0
        self._phase_ns = self._phase_of(self._period_ns)
        self._sched_base_ns = 0
        self._sched_k = 0
        self._sched_last_ns = 0.0
        self._first_poisson = True

    # ------------------------------------------------------------------ schedule
    @property
    def paced(self) -> bool:
        return self.params.iops is not None

    @property
    def phase_fraction(self) -> float:
        """An evenly spaced schedule's phase as a fraction of its period (0 for Poisson)."""
        return 0.0 if self.params.iosequencer == "random_independent" else self._phase_fraction

    def _phase_of(self, period_ns: float) -> int:
        return round(period_ns * self.phase_fraction)  # half to even, as schedule_starts

    @staticmethod
    def schedule_starts(phase_fraction: npt.NDArray[np.float64], iops: npt.NDArray[np.float64],
                        at_ns: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """The periods and first scheduled times that ``retime(params, at_ns)`` gives
        sequencers of these ``phase_fraction`` at these rates, for many in one numpy pass
        (the same numbers: ``_phase_of``'s ``round`` and ``np.rint`` both round half to
        even), for a compiled loop that retimes in place."""
        period = 1e9 / iops
        return period, at_ns + np.rint(period * phase_fraction).astype(np.int64)

    def start(self, at_ns: int) -> None:
        """Restart the schedule: the next I/O is due at ``at_ns`` (plus the stream's phase, for
        evenly spaced schedules)."""
        self._sched_base_ns = at_ns + self._phase_ns
        self._sched_k = 0
        self._sched_last_ns = float(at_ns)
        self._first_poisson = True

    def edited(
        self, params: WorkloadParams, *, at_ns: int, resume_offset_bytes: int | None = None,
        unissued: int = 0,
    ) -> Sequencer:
        """A sequencer for ``params`` that continues this one's sequential position, with its
        schedule starting at ``at_ns``. ``resume_offset_bytes``: the first I/O this one
        generated that was never issued (the caller drops the rest of what it generated);
        without it, the position after everything generated. ``unissued``: how many I/Os
        this one generated last that the caller drops; the I/O stream is wound back by their
        draws, so the new one's first I/O takes the draws of the first of them."""
        _wind_back(self._rng, unissued * self.draws_per_io)
        self.rewind_schedule(unissued)
        new = Sequencer(
            params, lun_size_bytes=self._lun_size_bytes, logical_block_bytes=self._lbs,
            stream=self._stream, rng=(self._rng, self._sched_rng),
        )
        bs = params.blocksize_bytes
        if params.iosequencer == "sequential" and self.params.iosequencer == "sequential" and (
            new._first == self._first and bs == self.params.blocksize_bytes
        ):
            if resume_offset_bytes is not None:
                new._seq_next = (resume_offset_bytes - new._first) // bs % new._n_blocks
            else:
                new._seq_next = self._seq_next % new._n_blocks
        new.start(at_ns)
        return new

    def retime(self, params: WorkloadParams, at_ns: int) -> None:
        """In place, what ``edited`` makes of parameters that differ from this sequencer's
        in ``iops`` alone (``WorkloadParams.same_but_rate``): the new rate, its schedule
        starting at ``at_ns``, the stream and the sequential position going on (a new
        sequencer per edit was a sixth of DFC's edit of every workload)."""
        self.rerate(params)
        self.start(at_ns)

    def rerate(self, params: WorkloadParams) -> None:
        """The new rate of ``params`` (which differ from this sequencer's in ``iops`` alone),
        leaving the schedule where it stands: ``retime`` without the ``start``, for a
        compiled loop that retimed in place and gives the schedule back with ``resume``."""
        if params.iops is None or not params.same_but_rate(self.params):
            raise ValueError("retime: only a new rate (iops) for a paced sequencer")
        self.params = params
        self._period_ns = 1e9 / params.iops
        self._phase_ns = self._phase_of(self._period_ns)

    def rewind_schedule(self, n: int) -> None:
        """A Poisson schedule's stream wound back by the arrivals of its last ``n`` I/Os (one
        draw each), dropped or about to be drawn again: the next arrival takes the draw of the
        first of them, however far ahead a loop had drawn (the compiled loop's
        ``paced_retime`` does the same)."""
        if self.paced and self.params.iosequencer == "random_independent":
            _wind_back(self._sched_rng, n)

    @property
    def draws_per_io(self) -> int:
        """The uniform doubles an I/O takes from the I/O stream: its offset (random), the
        hot zone's choice and offset (with a hot zone), its direction (a mixed read
        fraction)."""
        random = self.params.iosequencer != "sequential"
        mixed = 0.0 < self.params.read_fraction < 1.0
        return (1 + (2 if self._n_hot else 0) if random else 0) + (1 if mixed else 0)

    def schedule(self, n: int) -> npt.NDArray[np.int64]:
        """The next ``n`` scheduled times alone (for I/Os generated before an edit of the rate,
        whose offsets stand)."""
        return self._sched(n)

    def _sched(self, n: int) -> npt.NDArray[np.int64]:
        if not self.paced:
            return np.zeros(n, dtype=np.int64)
        if self.params.iosequencer == "random_independent":
            return self._poisson(n)
        k = np.arange(self._sched_k, self._sched_k + n, dtype=np.float64)
        self._sched_k += n
        return self._sched_base_ns + np.round(k * self._period_ns).astype(np.int64)

    def _poisson(self, n: int) -> npt.NDArray[np.int64]:
        """The next ``n`` Poisson arrivals, drawn as the compiled generator draws them
        (``ivy_loop.c``: ``schedule``), bit for bit: for each, a uniform double ``u``
        (``Generator.random``) and the gap ``-log1p(-u) * period`` (inversion), the time
        the last one's plus the gap, added in turn (``cumsum`` from the last time: the C's
        order), truncated to ns. The first arrival's gap is drawn and dropped: it is at the
        start. ``log1p`` is the C library's, the function the C calls: ``math.log1p`` calls
        it, one element at a time; numpy's vectorised ``np.log1p`` may run other (SIMD) code
        that differs from it in the last bit (docs/run.md)."""
        u = self._sched_rng.random(n)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        np.negative(u, out=u)
        gaps = np.fromiter(map(math.log1p, u.data), dtype=np.float64, count=n)
        np.negative(gaps, out=gaps)
        gaps *= self._period_ns
        if self._first_poisson:
            gaps[0] = 0.0
            self._first_poisson = False
        gaps[0] += self._sched_last_ns
        t = np.cumsum(gaps)
        self._sched_last_ns = float(t[-1])
        return t.astype(np.int64)

    # ------------------------------------------------------------------ offsets
    def chunk(self, n: int) -> OpChunk:
        """The next ``n`` I/Os: each one's draws in turn (the module's docstring). An offset
        is a 53-bit uniform double scaled by the blocks and truncated: each block's share
        differs from 1/blocks by under blocks / 2**53 of itself (1e-7 for 2**30 blocks: 4 TiB
        of 4 KiB blocks), and the product stays below the blocks (a double just under 1 times
        an integer below 2**53 rounds below it); ``Generator.integers`` is exact but cost ~100
        us a call in the engine loop's refill, against ~30 us for this."""
        k = self.draws_per_io
        u = self._rng.random(n * k).reshape(n, k) if k else np.empty((n, 0))
        bs = self.params.blocksize_bytes
        sequential = self.params.iosequencer == "sequential"
        col = 0
        if sequential:
            idx = (self._seq_next + np.arange(n, dtype=np.int64)) % self._n_blocks
            self._seq_next = int((self._seq_next + n) % self._n_blocks)
        else:
            idx = (u[:, 0] * self._n_blocks).astype(np.int64)
            col = 1
            if self._n_hot:
                hot = u[:, 1] < self.params.hot_zone_fraction
                idx[hot] = (u[hot, 2] * self._n_hot).astype(np.int64)
                col = 3
        idx *= bs
        idx += self._first
        rf = self.params.read_fraction
        if rf >= 1.0:
            is_write = np.zeros(n, dtype=np.bool_)
        elif rf <= 0.0:
            is_write = np.ones(n, dtype=np.bool_)
        else:
            is_write = u[:, col] >= rf
        category = is_write.astype(np.int64)
        if sequential:
            category += 2
        return OpChunk(idx, is_write, category, self._sched(n))

    def generator_state(self) -> GeneratorState | None:
        """This sequencer as numbers for a compiled generator; None where one cannot go on
        from here: a bit generator other than PCG64 (``default_rng``'s). At max IOPS the
        period is 0: no schedule (every time 0, as ``chunk`` gives), and no draw for one."""
        p = self.params
        bg = self._rng.bit_generator.state
        if bg["bit_generator"] != "PCG64" or (
                self._sched_rng.bit_generator.state["bit_generator"] != "PCG64"):
            return None
        sg = self._sched_rng.bit_generator.state
        return GeneratorState(
            rng_state=bg["state"]["state"], rng_inc=bg["state"]["inc"],
            sched_rng_state=sg["state"]["state"], sched_rng_inc=sg["state"]["inc"],
            first_offset_bytes=self._first, n_blocks=self._n_blocks,
            blocksize_bytes=p.blocksize_bytes,
            n_hot_blocks=self._n_hot,
            hot_zone_fraction=p.hot_zone_fraction, read_fraction=p.read_fraction,
            sequential=p.iosequencer == "sequential", seq_next=self._seq_next,
            poisson=p.iosequencer == "random_independent", period_ns=self._period_ns,
            sched_base_ns=self._sched_base_ns, sched_k=self._sched_k,
            sched_last_ns=self._sched_last_ns,
            first_arrival_due=self._first_poisson and p.iosequencer == "random_independent")

    def resume(self, rng_state: int, sched_rng_state: int, seq_next: int, sched_base_ns: int,
               sched_k: int, sched_last_ns: float, first_arrival_due: bool) -> None:
        """Go on from where a compiled generator left this sequencer (``generator_state``):
        its two bit generators' states, its sequential position and its schedule."""
        for gen, state in ((self._rng, rng_state), (self._sched_rng, sched_rng_state)):
            bg = gen.bit_generator.state
            bg["state"]["state"] = state
            gen.bit_generator.state = bg
        self._seq_next = seq_next
        self._sched_base_ns = sched_base_ns
        self._sched_k = sched_k
        self._sched_last_ns = sched_last_ns
        self._first_poisson = first_arrival_due
