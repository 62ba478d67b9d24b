"""The ring of precomputed iocbs: what it hands the kernel, and the service times, results and
offsets it gives back from its records and marks, checked against a plain model of the I/Os
(submitted in order, completed in any order, across collects and refills)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from slave.engine.aio_abi import (
    IOCB_CMD_PREAD,
    W_BUF,
    W_DATA,
    W_NBYTES,
    W_OFFSET,
    W_OPCODE_FD,
    opcode_fd_word,
)
from slave.engine.iocb_ring import EV_WORDS, TAG, IocbRing

BUFS = np.uint64(1 << 30) + np.arange(4, dtype=np.uint64) * np.uint64(4096)


class Model:
    """Drives an IocbRing as the engine loop does and keeps what each I/O really was."""

    def __init__(self, size: int, iodepth: int, records: int = 64) -> None:
        self.ring = IocbRing(size, iodepth, fd=7, nbytes=4096, buffer_addrs=BUFS,
                             records=records)
        self.next_offset = 0
        self.offset: dict[int, int] = {}  # seq -> offset, as precomputed
        self.submit_t: dict[int, int] = {}
        self.in_flight: list[int] = []
        self.expect: list[tuple[int, int, int, int]] = []  # (service, res, offset, done)
        self.fill(size)

    def _offsets(self, k: int) -> np.ndarray:
        offs = (self.next_offset + np.arange(k)) * 4096 % (1 << 24)
        self.next_offset += k
        return offs.astype(np.int64)

    def fill(self, k: int) -> None:
        first = self.ring.seq0 + self.ring.end
        offs = self._offsets(k)
        self.ring.append(offs)
        self.offset.update(zip(range(first, first + k), offs.tolist(), strict=True))

    def submit(self, k: int, t: int) -> None:
        r = self.ring
        if r.cur + k > r.end:  # as the loop: collect, then refill
            self.collect()
            first = r.seq0 + r.end
            n_new = r.size - r.end + r.cur
            offs = self._offsets(n_new)
            r.refill(offs)
            self.offset.update(zip(range(first, first + n_new), offs.tolist(), strict=True))
        # what the kernel would read: the next k iocbs, by address
        ptrs = np.ctypeslib.as_array((ctypes.c_uint64 * k).from_address(r.ptrs_addr + 8 * r.cur))
        for a in ptrs.tolist():
            iocb = np.ctypeslib.as_array((ctypes.c_int64 * 8).from_address(a))
            seq = int(iocb[W_DATA]) - TAG
            assert iocb[W_OFFSET] == self.offset[seq]
            assert iocb[W_OPCODE_FD] == opcode_fd_word(IOCB_CMD_PREAD, 7)
            assert iocb[W_NBYTES] == 4096 and iocb[W_BUF] in BUFS
            self.submit_t[seq] = t
            self.in_flight.append(seq)
        r.cur += k
        r.sub_words[2 * r.n_sub] = r.next_seq
        r.sub_words[2 * r.n_sub + 1] = t
        r.n_sub += 1

    def complete(self, seqs: list[int], res: list[int], t: int) -> None:
        r = self.ring
        p = r.n_rec
        for i, (s, x) in enumerate(zip(seqs, res, strict=True)):
            self.in_flight.remove(s)
            e = EV_WORDS * (p + i)
            r.rec_words[e] = TAG + s
            r.rec_words[e + 1] = 0
            r.rec_words[e + 2] = x
            self.expect.append((t - self.submit_t[s], x, self.offset[s] if x != 4096 else 0, t))
        r.n_rec = p + len(seqs)
        r.done_words[2 * r.n_done] = r.n_rec
        r.done_words[2 * r.n_done + 1] = t
        r.n_done += 1

    def collect(self) -> None:
        service, res, offsets, done = self.ring.collect()
        got = list(zip(service.tolist(), res.tolist(), offsets.tolist(), done.tolist(),
                       strict=True))
        assert got == self.expect
        self.expect = []
        assert self.ring.in_flight_at_collect == len(self.in_flight)


def test_a_batch_in_flight_across_a_collect_keeps_its_submit_time() -> None:
    m = Model(size=8, iodepth=4)
    m.submit(4, t=1_000)  # seqs 0-3
    m.complete([2, 0], [4096, 4096], t=1_500)
    m.submit(2, t=1_600)  # seqs 4, 5
    m.collect()  # 1, 3, 4, 5 in flight
    m.complete([3, 5, 1], [4096, 4096, 4096], t=2_000)
    m.submit(3, t=2_100)  # 6, 7, then a refill: 8
    m.complete([4], [-5], t=2_500)  # an error of an I/O submitted before the refill
    m.collect()
    assert m.ring.seq0 > 0  # the ring was refilled


def test_a_collect_before_anything_was_submitted_gives_nothing() -> None:
    """The ring took over slots whose I/Os have not completed (a slow or stalled LUN), so it
    has submitted nothing when the boundary collects: nothing is given back, and nothing is
    wrong (this raised "reaped an I/O it did not have in flight" and ended the worker)."""
    m = Model(size=8, iodepth=4)
    m.collect()
    m.collect()
    m.submit(2, t=1_000)  # then its first I/Os
    m.complete([1], [4096], t=1_300)
    m.collect()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("size", "iodepth"), [(8, 4), (16, 4), (64, 4)])
def test_random_orders_refills_and_errors_match_the_model(seed: int, size: int,
                                                         iodepth: int) -> None:
    """Completions in random order and batches, a collect every few batches, refills as the
    ring runs out, some short and failed reads: every completion comes back with its own
    service time, result and (when failed) offset."""
    rng = np.random.default_rng(seed)
    m = Model(size=size, iodepth=iodepth)
    t = 1_000
    m.submit(iodepth, t)
    for step in range(300):
        t += int(rng.integers(1, 1000))
        k = int(rng.integers(1, len(m.in_flight) + 1))
        done = rng.permutation(m.in_flight)[:k].tolist()
        res = rng.choice([4096, 4096, 4096, 4096, 0, 2048, -5], size=k).tolist()
        m.complete(done, res, t)
        t += int(rng.integers(1, 100))
        m.submit(k, t)
        if step % int(rng.integers(1, 6)) == 0:
            m.collect()
    m.collect()


def test_unsubmitted_gives_the_precomputed_offsets_in_order() -> None:
    m = Model(size=8, iodepth=2)
    m.submit(2, 10)
    m.complete([1, 0], [4096, 4096], 20)
    m.submit(2, 30)
    m.complete([3], [4096], 40)
    m.submit(1, 50)
    assert m.ring.unsubmitted().tolist() == [m.offset[s] for s in range(5, 8)]


@pytest.mark.parametrize(
    ("size", "iodepth", "offsets", "error"),
    [
        (7, 4, 0, "too small for queue depth 4"),
        (8, 4, 9, "9 I/Os do not fit the ring's 8 free places"),
    ],
)
def test_bad_sizes_are_refused(size: int, iodepth: int, offsets: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ring = IocbRing(size, iodepth, fd=3, nbytes=512, buffer_addrs=BUFS, records=8)
        ring.append(np.zeros(offsets, dtype=np.int64))
