"""Write-data patterns: byte-exact verification, compressibility and dedupability."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from slave.datapattern import DEDUP_POOL, POOL_BLOCKS, WritePattern, pool_sizes, splitmix64

BS = 4096


def fill(p: WritePattern, n: int, base: int = 0) -> np.ndarray:
    """Writes 1..n at consecutive blocks from ``base``."""
    buf = np.zeros((n, BS), dtype=np.uint8)
    p.fill(buf, np.arange(n, dtype=np.intp), base + np.arange(n, dtype=np.int64) * BS,
           np.arange(1, n + 1, dtype=np.int64))
    return buf


def test_random_blocks_verify_at_their_offsets_and_nowhere_else() -> None:
    p = WritePattern("random", 1.0, BS, seed=3)
    buf = fill(p, 50, base=1 << 20)
    for i in range(50):
        assert p.verify(buf[i], (1 << 20) + i * BS) is None
    assert p.verify(buf[0], (1 << 20) + BS) is not None  # wrong offset
    bad = buf[1].copy()
    bad[777] ^= 1
    assert "byte 777" in (p.verify(bad, (1 << 20) + BS) or "")


def test_random_blocks_are_unique_and_incompressible() -> None:
    p = WritePattern("random", 1.0, BS, seed=1)
    buf = fill(p, 200)
    assert len({bytes(b) for b in buf}) == 200
    raw = buf.tobytes()
    assert len(zlib.compress(raw)) > 0.95 * len(raw)


def test_zeros() -> None:
    p = WritePattern("zeros", 1.0, BS, seed=1)
    buf = np.full((4, BS), 7, dtype=np.uint8)  # what a read left in the buffers
    p.fill(buf, np.arange(4, dtype=np.intp), np.arange(4, dtype=np.int64) * BS,
           np.arange(1, 5, dtype=np.int64))
    assert not buf.any()
    assert p.verify(buf[0], 0) is None


@pytest.mark.parametrize("ratio", [2.0, 4.0])
def test_compressible_to_its_ratio(ratio: float) -> None:
    p = WritePattern("compressible", ratio, BS, seed=1)
    buf = fill(p, 256)
    raw = buf.tobytes()
    got = len(raw) / len(zlib.compress(raw, 6))
    assert ratio * 0.85 < got < ratio * 1.25
    assert p.verify(buf[5], 5 * BS) is None


@pytest.mark.parametrize("ratio", [2.0, 5.0])
def test_dedupable_to_its_ratio(ratio: float) -> None:
    p = WritePattern("dedupable", ratio, BS, seed=1)
    buf = fill(p, 5000)
    unique = len({bytes(b) for b in buf})
    got = 5000 / unique
    assert ratio * 0.85 < got < ratio * 1.15
    assert all(p.verify(buf[i], i * BS) is None for i in range(0, 5000, 97))


@pytest.mark.parametrize("bs", [BS, 65536])
def test_compressible_blocks_keep_their_zero_tail(bs: int) -> None:
    # ratio 2: the first half of every block random (but for its stamp), the second zero
    p = WritePattern("compressible", 2.0, bs, seed=4)
    n = 64
    buf = np.zeros((n, bs), dtype=np.uint8)
    p.fill(buf, np.arange(n, dtype=np.intp), np.arange(n, dtype=np.int64) * bs,
           np.arange(7, 7 + n, dtype=np.int64))
    assert not buf[:, bs // 2 :].any()
    head = buf[:, 16 : bs // 2]
    assert abs(float(head.mean()) - 127.5) < 2 and (head == 0).mean() < 0.01


def test_splitmix64_is_the_reference_function() -> None:
    # SplitMix64's first outputs from state 0 (Vigna's splitmix64.c): the mix of
    # 0x9E3779B97F4A7C15 * k for k = 1, 2, 3
    z = np.array([0, 0x9E3779B97F4A7C15, (2 * 0x9E3779B97F4A7C15) % (1 << 64)],
                 dtype=np.uint64)
    assert splitmix64(z).tolist() == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
                                      0x06C45D188009454F]


@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0, 10.0])
def test_a_dedupable_write_is_a_duplicate_with_probability_1_minus_1_over_d(
        ratio: float) -> None:
    p = WritePattern("dedupable", ratio, BS, seed=12)
    serials = np.arange(1, 200_001, dtype=np.int64)
    unique = p.unique(serials)
    assert abs(float((~unique).mean()) - (1 - 1 / ratio)) < 0.005
    # which is a function of the serial (and the seed) alone
    assert np.array_equal(unique[1000:2000], p.unique(serials[1000:2000]))
    other = WritePattern("dedupable", ratio, BS, seed=13).unique(serials)
    assert ratio == 1.0 or not np.array_equal(unique, other)
    # the duplicates spread over the whole duplicate pool
    buf = np.zeros((4000, BS), dtype=np.uint8)
    p.fill(buf, np.arange(4000, dtype=np.intp), np.arange(4000, dtype=np.int64) * BS,
           serials[:4000])
    dups = {bytes(b) for b, u in zip(buf, unique[:4000], strict=True) if not u}
    assert len(dups) == (0 if ratio == 1.0 else p.dup_blocks)
    assert p.dup_blocks == DEDUP_POOL  # at 4 KiB


def test_verify_refuses_a_unique_block_where_the_serial_makes_a_duplicate() -> None:
    dd = WritePattern("dedupable", 3.0, BS, seed=5)
    serial = int(np.flatnonzero(~dd.unique(np.arange(1, 100, dtype=np.int64)))[0]) + 1
    rnd = WritePattern("random", 1.0, BS, seed=5)  # the same pool: drawn first from the seed
    buf = np.zeros((1, BS), dtype=np.uint8)
    rnd.fill(buf, np.zeros(1, np.intp), np.array([BS], np.int64), np.array([serial], np.int64))
    assert rnd.verify(buf[0], BS) is None
    assert "duplicate" in (dd.verify(buf[0], BS) or "")


@pytest.mark.parametrize(("kind", "ratio", "width"), [
    ("random", 1.0, BS),
    ("compressible", 2.0, BS),
    ("zeros", 1.0, BS),
    ("dedupable", 3.0, BS),
    ("random", 1.0, 2 * BS),  # buffer rows wider than the block (bytes past it untouched)
    ("dedupable", 2.0, 2 * BS),
])
def test_fill_one_writes_what_fill_writes(kind: str, ratio: float, width: int) -> None:
    offsets = np.arange(40, dtype=np.int64)[::-1] * BS + (3 << 20)
    serials = np.arange(40, dtype=np.int64) * 3 + 11
    rows = np.arange(40, dtype=np.intp)
    both = []
    for one in (False, True):
        p = WritePattern(kind, ratio, BS, seed=9)  # type: ignore[arg-type]
        buf = np.full((40, width), 0xA5, dtype=np.uint8)
        if one:
            for i in range(40):
                p.fill_one(buf, int(rows[i]), int(offsets[i]), int(serials[i]))
        else:
            p.fill(buf, rows, offsets, serials)
        assert all(p.verify(buf[i, :BS], int(offsets[i])) is None for i in range(40))
        assert (buf[:, BS:] == 0xA5).all()
        both.append(buf)
    assert np.array_equal(both[0], both[1])


@pytest.mark.parametrize(("bs", "pool", "dups"), [
    (512, POOL_BLOCKS, DEDUP_POOL), (4096, 64, 16), (8192, 32, 16), (65536, 4, 4),
    (1 << 20, 4, 2), (16 << 20, 4, 2),
])
def test_the_pools_hold_256_kib_each_but_a_few_blocks_at_least(bs: int, pool: int,
                                                                dups: int) -> None:
    assert pool_sizes(bs) == (pool, dups)
    p = WritePattern("dedupable", 2.0, bs, seed=1)
    assert (p.pool_blocks, p.dup_blocks) == (pool, dups)
    words = p.data_words()
    assert (words["pool_blocks"], words["dup_blocks"]) == (pool, dups)
    # a write of 1 MiB keeps 6 MiB of pools (it kept 80 MiB)
    assert p.pools_bytes == (pool + dups) * bs


def test_a_large_blocks_writes_cycle_through_its_small_pool() -> None:
    bs = 1 << 20
    p = WritePattern("random", 1.0, bs, seed=3)
    buf = np.zeros((8, bs), dtype=np.uint8)
    serials = np.arange(1, 9, dtype=np.int64)
    p.fill(buf, np.arange(8, dtype=np.intp), serials * bs, serials)
    # past each sector's stamp, serials 4 apart write the same pool block, others differ
    body = buf.reshape(8, -1, 512)[:, :, 16:]
    assert np.array_equal(body[0], body[4]) and not np.array_equal(body[0], body[1])
    assert all(p.verify(buf[i], int(serials[i]) * bs) is None for i in range(8))
