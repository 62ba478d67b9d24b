"""protocol.verify, the reference of data verification: CRC-32C, the generations' cycle, the
map byte's accepted generations, the stamp's layout, and each class of damage a block can
show, from blocks stamped and then damaged as a device could damage them."""

from __future__ import annotations

import numpy as np
import pytest

from protocol import verify as v

KEY, LUN = 0x1234ABCD, 3


def test_crc32c_is_castagnolis() -> None:
    assert v.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert v.crc32c(b"") == 0
    assert v.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720's 32 bytes of zeros


@pytest.mark.parametrize(("gen", "after", "before"), [
    (0, 1, None), (1, 2, 127), (126, 127, 125), (127, 1, 126)])
def test_generations_cycle_1_to_127(gen: int, after: int, before: int | None) -> None:
    assert v.next_gen(gen) == after
    if before is not None:
        assert v.prev_gen(gen) == before


@pytest.mark.parametrize(("map_byte", "accepted"), [
    (0, ()), (v.UNSETTLED, ()), (5, (5,)), (5 | v.UNSETTLED, (5, 4)),
    (1 | v.UNSETTLED, (1, 127)), (127, (127,))])
def test_a_map_byte_accepts_its_generation_and_unsettled_the_one_before(
        map_byte: int, accepted: tuple[int, ...]) -> None:
    assert v.accepted(map_byte) == accepted


def _written(gens: list[int], offset: int = 0, serial: int = 7, lun: int = LUN,
             seed: int = 1) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, len(gens) * v.MAP_BLOCK_BYTES,
                                                dtype=np.uint8)
    v.stamp(data, offset, serial, gens, KEY, lun, writer=9, attempt=2)
    return data


def test_a_stamp_holds_what_it_says_in_its_32_bytes_and_the_rest_is_the_data() -> None:
    raw = np.random.default_rng(1).integers(0, 256, 2 * v.MAP_BLOCK_BYTES, dtype=np.uint8)
    data = raw.copy()
    v.stamp(data, 8192, 7, [4, 5], KEY, LUN, writer=9, attempt=2)
    heads = v.decode(data.reshape(-1, 512))
    assert heads["offset_bytes"].tolist() == [8192 + 512 * i for i in range(16)]
    assert set(heads["serial"].tolist()) == {7} and set(heads["writer"].tolist()) == {9}
    assert heads["gen"].tolist() == [4] * 8 + [5] * 8
    assert set(heads["run_key"].tolist()) == {KEY} and set(heads["lun"].tolist()) == {LUN}
    assert set(heads["attempt"].tolist()) == {2} and set(heads["zero"].tolist()) == {0}
    sectors = data.reshape(-1, 512)
    assert heads["crc"].tolist() == v.crc32c_sectors(sectors).tolist()
    assert v.crc32c(sectors[5, :28].tobytes() + sectors[5, 32:].tobytes()) == heads["crc"][5]
    assert np.array_equal(sectors[:, 32:], raw.reshape(-1, 512)[:, 32:])


def test_a_write_of_part_of_a_block_is_refused() -> None:
    with pytest.raises(ValueError, match="a write of 512 bytes"):
        v.stamp(np.zeros(512, dtype=np.uint8), 0, 1, [1], KEY, LUN, 0, 0)


def _damaged(kind: str) -> tuple[np.ndarray, list[int]]:
    """Two blocks written at generation 6 (an older write at 5 under them), read back after
    ``kind`` of damage to the second; their map bytes."""
    new, old = _written([6, 6], serial=8), _written([5, 5], serial=4, seed=2)
    got = new.copy()
    second = slice(v.MAP_BLOCK_BYTES, 2 * v.MAP_BLOCK_BYTES)
    if kind == "corrupt":
        got[v.MAP_BLOCK_BYTES + 3 * 512 + 100] ^= 0x10  # a flipped bit in a payload
    elif kind == "corrupt_stamp":
        got[v.MAP_BLOCK_BYTES + 512 + 24] ^= 1  # the generation's byte itself
    elif kind == "misplaced":
        got[second] = new[: v.MAP_BLOCK_BYTES]  # the first block's data again
    elif kind == "other_lun":
        got[second] = _written([6, 6], serial=8, lun=LUN + 1)[second]
    elif kind == "stale":
        got[second] = old[second]
    elif kind == "torn":
        got[v.MAP_BLOCK_BYTES : v.MAP_BLOCK_BYTES + 2048] = old[
            v.MAP_BLOCK_BYTES : v.MAP_BLOCK_BYTES + 2048]
    elif kind == "zeros":
        got[second] = 0
    elif kind == "foreign":
        got[second] = np.random.default_rng(9).integers(0, 256, v.MAP_BLOCK_BYTES,
                                                        dtype=np.uint8)
    elif kind == "other_run":
        other = new[second].copy()
        v.stamp(other, v.MAP_BLOCK_BYTES, 8, [6], KEY + 1, LUN, 9, 2)
        got[second] = other
    return got, [6, 6]


@pytest.mark.parametrize(("kind", "verdict"), [
    ("none", "clean"), ("corrupt", "corrupt"), ("corrupt_stamp", "corrupt"),
    ("misplaced", "misplaced"), ("other_lun", "misplaced"), ("stale", "stale"),
    ("torn", "torn"), ("zeros", "missing"), ("foreign", "missing"),
    ("other_run", "missing")])
def test_each_damage_gets_its_class_and_the_block_beside_it_none(kind: str,
                                                                 verdict: str) -> None:
    got, map_bytes = _damaged(kind)
    want = v.CLEAN if verdict == "clean" else v.CODES[verdict]
    assert v.check_blocks(got, 0, map_bytes, KEY, LUN) == [v.CLEAN, want]


def test_a_block_the_map_never_saw_written_expects_nothing() -> None:
    assert v.check_blocks(np.zeros(v.MAP_BLOCK_BYTES, dtype=np.uint8), 0, [0], KEY,
                          LUN) == [v.CLEAN]


@pytest.mark.parametrize(("map_byte", "halves", "verdict"), [
    (6 | v.UNSETTLED, (5, 5), "clean"),  # the write before, which may have landed last
    (6 | v.UNSETTLED, (5, 6), "clean"),  # both, each in part
    (6 | v.UNSETTLED, (4, 4), "stale"),
    (6 | v.UNSETTLED, (4, 6), "torn"),
    (6, (5, 5), "stale"), (6, (5, 6), "torn"), (6, (6, 6), "clean"),
    (1, (127, 127), "stale"), (1 | v.UNSETTLED, (127, 127), "clean")])
def test_the_generations_a_block_holds_against_its_map_byte(
        map_byte: int, halves: tuple[int, int], verdict: str) -> None:
    first, second = (_written([g], serial=g) for g in halves)
    got = np.concatenate([first[:2048], second[2048:]])
    want = v.CLEAN if verdict == "clean" else v.CODES[verdict]
    assert v.check_blocks(got, 0, [map_byte], KEY, LUN) == [want]
