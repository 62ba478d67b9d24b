"""Write-data patterns: byte-exact verification, compressibility and dedupability."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from slave.datapattern import WritePattern

BS = 4096


def fill(p: WritePattern, n: int, base: int = 0) -> np.ndarray:
    buf = np.zeros((n, BS), dtype=np.uint8)
    p.fill(buf, np.arange(n, dtype=np.intp), base + np.arange(n, dtype=np.int64) * BS)
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
    buf = np.full((4, BS), 7, dtype=np.uint8)
    p.fill(buf, np.arange(4, dtype=np.intp), np.arange(4, dtype=np.int64) * BS)
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


@pytest.mark.parametrize(("kind", "ratio", "width"), [
    ("random", 1.0, BS),
    ("compressible", 2.0, BS),
    ("random", 1.0, 2 * BS),  # buffer rows wider than the block (bytes past it untouched)
])
def test_apply_one_writes_what_apply_writes(kind: str, ratio: float, width: int) -> None:
    offsets = np.arange(40, dtype=np.int64)[::-1] * BS + (3 << 20)
    rows = np.arange(40, dtype=np.intp)
    both = []
    for one in (False, True):
        p = WritePattern(kind, ratio, BS, seed=9)  # type: ignore[arg-type]
        buf = np.full((40, width), 0xA5, dtype=np.uint8)
        pool_rows, stamps = p.plan(offsets)
        if one:
            for i in range(40):
                p.apply_one(buf, int(rows[i]), int(pool_rows[i]), stamps[i])
        else:
            p.apply(buf, rows, pool_rows, stamps)
        assert all(p.verify(buf[i, :BS], int(offsets[i])) is None for i in range(40))
        both.append(buf)
    assert np.array_equal(both[0], both[1])
