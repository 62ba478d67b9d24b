"""A ring of precomputed read iocbs for one max-iops read workload: submission without slots.

The slot path rewrites a completed slot's iocb with the workload's next I/O before resubmitting
it (a gather, a stamp and a scatter of 128-byte rows per batch) and copies each completed slot's
whole row into the completion records. Here the workload's next I/Os are already whole iocbs,
in submission order, so a batch of ``n`` completions is answered by handing the kernel the
addresses of the next ``n`` iocbs (``io_submit`` copies an iocb when it is called, so the
memory can be rewritten at once). Each iocb's ``aio_data`` is ``TAG | seq``, its number in the
workload's submission order; a completion is recorded as its 4 event words, a batch of
submissions as (sequence end, time) and a batch of completions as (record end, time): two
words each, plain ints, no numpy per batch. ``collect`` turns them into service times when the
loop bins.

Buffers: position ``i`` of the ring reads into buffer ``i % iodepth`` of the workload. The I/Os in
flight are (nearly always) the last ``iodepth`` submitted, so they use distinct buffers, as fio's
do; a straggler completing after ``iodepth`` later ones shares its buffer with one of them. Only
reads use the ring: the data read is not looked at.

Owns: the iocb memory and its pointer array, the sequence numbers, the records and marks, and
which I/Os are still in flight at each ``collect`` (with their submit times and offsets, for
error messages). It must not submit, reap or bin: the engine loop does.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from slave.engine.aio_abi import (
    IOCB_CMD_PREAD,
    W_BUF,
    W_DATA,
    W_NBYTES,
    W_OFFSET,
    W_OPCODE_FD,
    opcode_fd_word,
)
from slave.engine.base import int64_words

#: ``aio_data`` of a ring iocb: this bit and the sequence number (slot numbers are far below)
TAG: Final = 1 << 62
#: words of a completion record: the io_event as the kernel wrote it (data, obj, res, res2)
EV_WORDS: Final = 4
E_DATA, E_RES = 0, 2


class IocbRing:
    """``size`` read iocbs of ``nbytes`` on ``fd`` for a workload of queue depth ``iodepth``.

    Positions ``[cur, end)`` hold I/Os precomputed and not yet submitted; position ``i`` holds
    sequence number ``seq0 + i``. The engine loop advances ``cur`` by each batch it submits
    (noting ``(seq0 + cur, time)`` in ``sub_words``) and appends each batch of completions to
    ``rec_words`` (noting ``(record end, time)`` in ``done_words``); ``records`` completions at
    most between two ``collect`` calls. ``refill`` only right after a ``collect``: the offsets
    of the I/Os in flight are saved there, before their iocbs are rewritten.
    """

    def __init__(self, size: int, iodepth: int, fd: int, nbytes: int,
                 buffer_addrs: npt.NDArray[np.uint64], records: int) -> None:
        if size < 2 * iodepth:
            raise ValueError(f"a ring of {size} I/Os is too small for queue depth {iodepth}")
        self.size = size
        self.iodepth = iodepth
        self.nbytes = nbytes
        self.iocbs = np.zeros((size, 8), dtype=np.int64)
        pos = np.arange(size)
        self.iocbs[:, W_OPCODE_FD] = opcode_fd_word(IOCB_CMD_PREAD, fd)
        self.iocbs[:, W_BUF] = buffer_addrs[pos % iodepth].astype(np.int64)
        self.iocbs[:, W_NBYTES] = nbytes
        self.ptrs = (self.iocbs.ctypes.data + 64 * pos).astype(np.uint64)
        self.ptrs_addr = int(self.ptrs.ctypes.data)
        self.seq0 = 0
        self.cur = 0
        self.end = 0
        # completions and marks since the last ``collect``: a batch holds at most ``iodepth``
        # completions, and one may be added past ``records`` (the loop then collects)
        cap = records + 2 * iodepth
        self._recs = np.zeros(cap * EV_WORDS, dtype=np.int64)
        self.rec_words = int64_words(self._recs)
        self.n_rec = 0
        self._done = np.zeros(2 * cap, dtype=np.int64)  # (record end, completion time)
        self.done_words = int64_words(self._done)
        self.n_done = 0
        self._sub = np.zeros(2 * (cap + 1), dtype=np.int64)  # (sequence end, submit time)
        self.sub_words = int64_words(self._sub)
        self.n_sub = 0
        self.records = records
        #: the addresses of the records and of both marks' words, for compiled code
        self.rec_addr = int(self._recs.ctypes.data)
        self.done_addr = int(self._done.ctypes.data)
        self.sub_addr = int(self._sub.ctypes.data)
        self._lo = 0  # the first sequence number submitted since the last collect
        # I/Os in flight at the last collect: sequence numbers (ascending), submit times, offsets
        self._carry = np.zeros((3, 0), dtype=np.int64)
        #: the slot path's I/Os still in flight when the ring took over (they complete here)
        self.adopted = 0
        #: False once the loop has stopped submitting and reaped all it submitted
        self.active = True

    @property
    def next_seq(self) -> int:
        """The sequence number of the next I/O submitted."""
        return self.seq0 + self.cur

    def append(self, offsets: npt.NDArray[np.int64]) -> None:
        """Precomputed I/Os at ``offsets`` after the last one (there must be room)."""
        k = int(offsets.size)
        e = self.end
        if e + k > self.size:
            raise ValueError(f"{k} I/Os do not fit the ring's {self.size - e} free places")
        self.iocbs[e : e + k, W_OFFSET] = offsets
        self.iocbs[e : e + k, W_DATA] = TAG + self.seq0 + np.arange(e, e + k)
        self.end = e + k

    def refill(self, offsets: npt.NDArray[np.int64]) -> None:
        """The I/Os not submitted yet move to the front; ``offsets`` follow them."""
        c = self.cur
        rest = self.end - c
        if rest:
            self.iocbs[:rest, W_OFFSET] = self.iocbs[c : self.end, W_OFFSET]
            self.iocbs[:rest, W_DATA] = self.iocbs[c : self.end, W_DATA]
        self.seq0 += c
        self.cur = 0
        self.end = rest
        self.append(offsets)

    def unsubmitted(self) -> npt.NDArray[np.int64]:
        """Offsets of the I/Os precomputed and not submitted, in order."""
        return self.iocbs[self.cur : self.end, W_OFFSET].copy()

    def collect(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                               npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The completions recorded since the last call: (service ns, result, offset,
        completion time) per I/O, in reap order; records and marks are cleared. Offsets are
        given for the I/Os whose result is not ``nbytes`` (the others read 0).

        Submit times are looked up in a table by sequence number from the oldest I/O in
        flight at the last call (``base``) to the next to submit (``hi``): those submitted
        since then spread from the submission marks (one ``repeat``), those in flight then
        from the saved ones. (A binary search of each record among the marks cost ~200 us
        per 8,192 records in the loop.)"""
        n = self.n_rec
        hi = self.next_seq
        lo = self._lo
        carry = self._carry  # (sequence, submit time, offset) of those in flight at the last
        base = int(carry[0, 0]) if carry.shape[1] else lo
        recs = self._recs[: EV_WORDS * n].reshape(n, EV_WORDS)
        at = recs[:, E_DATA] - (TAG + base)  # places in the table
        res = recs[:, E_RES].copy()
        marks = self._done[: 2 * self.n_done].reshape(-1, 2)
        done = marks[:, 1].repeat(np.diff(marks[:, 0], prepend=0))
        sub_marks = self._sub[: 2 * self.n_sub].reshape(-1, 2)
        submit = np.empty(hi - base, dtype=np.int64)
        submit[lo - base :] = sub_marks[:, 1].repeat(np.diff(sub_marks[:, 0], prepend=lo))
        live = np.zeros(hi - base, dtype=np.bool_)  # in flight: submitted and not reaped
        live[lo - base :] = True
        if carry.shape[1]:
            old = carry[0] - base
            submit[old] = carry[1]
            live[old] = True
        # (none reaped: nothing to check; the table may be empty, when the ring has submitted
        # nothing yet because the slots it adopted have not completed)
        if n and (int(at.min()) < 0 or int(at.max()) >= hi - base or not bool(live[at].all())):
            raise AssertionError("the ring reaped an I/O it did not have in flight")
        live[at] = False
        offsets = np.zeros(n, dtype=np.int64)
        bad = res != self.nbytes
        if bool(bad.any()):
            offsets[bad] = self._offsets(at[bad] + base, carry)
        # in flight now; their offsets saved before a refill rewrites their iocbs
        left = np.flatnonzero(live) + base
        self._carry = np.stack((left, submit[left - base], self._offsets(left, carry)))
        self._lo = hi
        self.n_rec = self.n_done = self.n_sub = 0
        return done - submit[at], res, offsets, done

    def _offsets(self, seq: npt.NDArray[np.int64],
                 carry: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Offsets of I/Os submitted since the last collect (their iocbs intact) or in flight
        at it (``carry``, saved then)."""
        out = np.empty(seq.size, dtype=np.int64)
        new = seq >= self._lo
        out[new] = self.iocbs[seq[new] - self.seq0, W_OFFSET]
        if not bool(new.all()):
            out[~new] = carry[2, np.searchsorted(carry[0], seq[~new])]
        return out

    @property
    def in_flight_at_collect(self) -> int:
        """I/Os the ring had in flight at the last ``collect``."""
        return int(self._carry.shape[1])
