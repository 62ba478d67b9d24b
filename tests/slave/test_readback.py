"""A read-back (``slave.readback``): a LUN file written with the reference stamps
(``protocol.verify.stamp``), its map, damage of each class made to it, and what the compiled
check names: exactly the damaged blocks, coalesced into extents, the first ones kept whole;
the windows read (only those the map holds), the crash rule, progress, refusals and giving
up. Files in the test's folder: no device, no time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from protocol import verify as v
from slave.readback import Found, ReadBackError, read_back, windows

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="no C compiler (cc): the compiled loop cannot be built")

BLOCK = v.MAP_BLOCK_BYTES
KEY = 0x5EED0001
N = 64  # blocks in the map's range


def _written(n: int = N, gen: int = 2, attempt: int = 0, serial0: int = 100
             ) -> npt.NDArray[np.uint8]:
    """``n`` blocks, each stamped as written by writer 3 at generation ``gen``."""
    data = np.random.default_rng(7).integers(0, 256, n * BLOCK, dtype=np.uint8)
    for b in range(n):
        v.stamp(data[b * BLOCK:(b + 1) * BLOCK], b * BLOCK, serial0 + b, [gen], KEY, 5, 3,
                attempt)
    return data


def _target(n: int = N) -> dict[str, int]:
    return {"lun": 5, "first_bytes": 0, "size_bytes": n * BLOCK, "run_key": KEY, "attempt": 0,
            "writer": 0}


def _lun(tmp: Path, data: npt.NDArray[np.uint8], extra_blocks: int = 0) -> str:
    path = tmp / "lun"
    path.write_bytes(data.tobytes() + bytes(extra_blocks * BLOCK))
    return str(path)


def _run(path: str, map_: npt.NDArray[np.uint8], **kw: object
         ) -> tuple[list[Found], npt.NDArray[np.void], object]:
    said: list[Found] = []
    done = read_back(path, kw.pop("target", _target(map_.size)), map_,  # type: ignore[arg-type]
                     say=said.append, **kw)  # type: ignore[arg-type]
    ext = np.zeros(0, dtype=v.EXTENT_DTYPE)
    for f in said:
        ext = v.merge_extents(ext, f.extents)
    return said, ext, done


def test_a_clean_lun_reads_back_every_written_block_and_names_nothing(tmp_path: Path) -> None:
    data = _written()
    map_ = np.full(N, 2, dtype=np.uint8)
    map_[40:] = 0  # never written: not read, not checked
    said, ext, done = _run(_lun(tmp_path, data), map_, chunk_bytes=16 * BLOCK)
    assert ext.size == 0
    assert done.counts == [40, 0, 0, 0, 0, 0]  # type: ignore[attr-defined]
    assert done.bytes_read == 3 * 16 * BLOCK  # type: ignore[attr-defined]  # windows 0-2
    assert said[-1].blocks_done == said[-1].blocks_total == 40


#: block -> (damage, class): each made to a block of generation 2 in a LUN written twice
DAMAGE = {
    3: ("flip", "corrupt"),
    9: ("other", "misplaced"),
    17: ("older", "stale"),
    20: ("half", "torn"),
    30: ("zeros", "missing"),
}


@pytest.mark.parametrize("chunk_blocks", [1, 4, 256])
def test_each_class_is_named_with_its_block_its_stamp_and_its_bytes(
        tmp_path: Path, chunk_blocks: int) -> None:
    older, data = _written(gen=1), _written(gen=2)
    blocks = data.reshape(N, BLOCK)
    for b, (how, _) in DAMAGE.items():
        if how == "flip":
            blocks[b, 700] ^= 0x10
        elif how == "other":
            blocks[b] = blocks[b + 1]
        elif how == "older":
            blocks[b] = older.reshape(N, BLOCK)[b]
        elif how == "half":
            blocks[b, :2048] = older.reshape(N, BLOCK)[b, :2048]
        else:
            blocks[b] = 0
    map_ = np.full(N, 2, dtype=np.uint8)
    said, ext, done = _run(_lun(tmp_path, data), map_, chunk_bytes=chunk_blocks * BLOCK,
                           kept_max=3)
    got = {int(e["offset_bytes"]) // BLOCK: v.CLASSES[int(e["cls"]) - 1] for e in ext}
    assert got == {b: c for b, (_, c) in DAMAGE.items()}
    assert set(ext["length_bytes"].tolist()) == {BLOCK}
    by = {int(e["offset_bytes"]) // BLOCK: e for e in ext}
    assert by[9]["stamp"] == v.STAMP_VALID and by[9]["found_offset_bytes"] == 10 * BLOCK
    assert by[17]["found_gen"] == 1 and by[17]["expected"] == 2 and by[17]["found_writer"] == 3
    assert by[30]["stamp"] == v.STAMP_NONE and by[30]["found_gen"] == 0
    assert by[3]["stamp"] == v.STAMP_BAD_CRC  # sector 1's data flipped: its CRC fails
    assert done.counts[0] == N and sum(done.counts[1:]) == 5  # type: ignore[attr-defined]
    kept = [k for f in said for k in f.kept]
    assert [k["offset_bytes"] // BLOCK for k in kept] == [3, 9, 17]  # the first three
    assert kept[2]["data"] == blocks[17].tobytes() and kept[2]["class"] == "stale"


def test_damage_over_many_blocks_is_one_extent_across_windows(tmp_path: Path) -> None:
    data = _written()
    data[10 * BLOCK:26 * BLOCK] = 0  # 16 blocks zeroed, across windows of 4
    data[40 * BLOCK:44 * BLOCK] = data[0:4 * BLOCK]  # blocks 0-3's data over 40-43
    _, ext, _ = _run(_lun(tmp_path, data), np.full(N, 2, dtype=np.uint8),
                     chunk_bytes=4 * BLOCK)
    rows = [(int(e["offset_bytes"]) // BLOCK, int(e["length_bytes"]) // BLOCK,
             v.CLASSES[int(e["cls"]) - 1], int(e["found_offset_bytes"]) // BLOCK) for e in ext]
    assert rows == [(10, 16, "missing", 0), (40, 4, "misplaced", 0)]


def test_the_crash_rule_takes_unconfirmed_writes_and_blames_confirmed_ones(
        tmp_path: Path) -> None:
    # the map says generation 1; the LUN holds generation 2 of attempt 0, serials 100 + b:
    # writer 3 confirmed up to serial 110, so blocks 11 on are writes never heard of (taken),
    # blocks 0-10 newer than the map from confirmed serials: damage (stale)
    data = _written(gen=2)
    confirmed = [-1, -1, -1, 110]
    _, ext, done = _run(_lun(tmp_path, data), np.full(N, 1, dtype=np.uint8),
                        crashes=[(0, confirmed)])
    assert [(int(e["offset_bytes"]) // BLOCK, int(e["length_bytes"]) // BLOCK) for e in ext] \
        == [(0, 11)]
    assert done.adopted == N - 11  # type: ignore[attr-defined]
    _, ext, done = _run(_lun(tmp_path, data), np.full(N, 1, dtype=np.uint8))  # no crash
    assert int(ext["length_bytes"].sum()) == N * BLOCK and done.adopted == 0  # type: ignore


def test_progress_comes_while_it_reads(tmp_path: Path) -> None:
    ticks = iter(range(0, 10**12, 400_000_000))  # 0.4 s a look at the clock
    said, _, _ = _run(_lun(tmp_path, _written()), np.full(N, 2, dtype=np.uint8),
                      chunk_bytes=BLOCK, clock=lambda: next(ticks))
    done = [f.blocks_done for f in said]
    assert len(done) > 5 and done == sorted(done) and done[-1] == N


def test_windows_are_those_with_a_written_block() -> None:
    m = np.zeros(20, dtype=np.uint8)
    m[[0, 9, 19]] = [1, v.UNSETTLED | 3, 7]
    m[5] = v.UNSETTLED  # no generation: nothing expected
    assert windows(m, 4).tolist() == [0, 2, 4]
    assert windows(m, 32).tolist() == [0]


def test_refusals_name_the_lun(tmp_path: Path) -> None:
    with pytest.raises(ReadBackError, match="cannot be opened") as err:
        read_back(str(tmp_path / "gone"), _target(), np.ones(N, np.uint8), say=lambda f: None)
    assert err.value.kind == "config"
    small = _lun(tmp_path, _written(n=8))
    with pytest.raises(ReadBackError, match=f"LUN {small} has {8 * BLOCK} bytes") as err:
        read_back(small, _target(), np.ones(N, np.uint8), say=lambda f: None)
    assert err.value.kind == "config"
    with pytest.raises(ValueError, match=r"verify\.run_key"):
        read_back(small, {**_target(), "run_key": -1}, np.ones(N, np.uint8), say=lambda f: None)


def test_a_check_that_raises_gives_up_between_windows(tmp_path: Path) -> None:
    path = _lun(tmp_path, _written())
    seen: list[int] = []

    def check(done: int, total: int) -> None:
        seen.append(done)
        if done >= 8:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        read_back(path, _target(), np.full(N, 2, np.uint8), say=lambda f: None, check=check,
                  chunk_bytes=4 * BLOCK)
    assert seen[-1] == 8 and os.path.exists(path)
