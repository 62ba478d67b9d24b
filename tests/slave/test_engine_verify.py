"""The compiled loop's data verification (``ivy_loop.c``: ``verify_write``,
``verify_write_done``, ``verify_read``, ``verify_read_done``) against ``protocol.verify``,
called directly with the arrays of ``slave.engine.verify_state.VerifyState``: its CRC (the
CPU's instruction and the table), its stamps byte for byte, each class of damage, the map's
generations and UNSETTLED, a read's leniency where a write of its block was in flight, the
journal and findings, and the table of blocks in flight against a model. No I/O and no time:
beside the others."""

from __future__ import annotations

import ctypes
import shutil
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from protocol import verify as v
from slave.engine import compiled_loop as pk
from slave.engine.layout import DATA_DTYPE, LoopArgs
from slave.engine.verify_state import FINDINGS_KEPT, VerifiedLun, VerifyState, WorkloadVerify

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="no C compiler (cc): the compiled loop cannot be built")

BLOCK = v.MAP_BLOCK_BYTES
KEY = 0xC0FFEE01


@dataclass
class Loop:
    """A compiled loop's arguments with verification: workload k writes LUN ``luns[k]`` as
    writer ``10 + k`` and records for owner k."""

    args: LoopArgs
    state: VerifyState
    lib: ctypes.CDLL

    def write(self, k: int, off: int, data: npt.NDArray[np.uint8], serial: int = 1) -> None:
        self.lib.ivy_verify_write(self.args.address, k, off, data.size, serial,
                                  data.ctypes.data)

    def write_done(self, k: int, off: int, nbytes: int, res: int | None = None) -> None:
        self.lib.ivy_verify_write_done(self.args.address, k, off, nbytes,
                                       nbytes if res is None else res)

    def read(self, k: int, off: int, nbytes: int) -> None:
        self.lib.ivy_verify_read(self.args.address, k, off, nbytes)

    def read_done(self, k: int, off: int, data: npt.NDArray[np.uint8],
                  res: int | None = None) -> int:
        return int(self.lib.ivy_verify_read_done(self.args.address, k, k, off, data.size,
                                                 data.size if res is None else res,
                                                 data.ctypes.data, 123))

    def check(self, k: int, off: int, data: npt.NDArray[np.uint8]) -> int:
        self.read(k, off, data.size)
        return self.read_done(k, off, data)

    def put(self, k: int, off: int, data: npt.NDArray[np.uint8], serial: int = 1) -> None:
        """A write of ``data`` that went out and completed."""
        self.write(k, off, data, serial)
        self.write_done(k, off, data.size)


def _loop(luns: list[VerifiedLun], lun_of: list[int], blocks_in_flight: int = 64) -> Loop:
    assert pk.available(), pk.why_not()
    lib = pk.library()
    assert lib is not None
    state = VerifyState(blocks_in_flight)
    by_number = {lun.lun: lun for lun in luns}
    for k, lun in enumerate(lun_of):
        state.add(k, WorkloadVerify(by_number[lun], 10 + k), BLOCK, iodepth=1)
    return Loop(state.args, state, lib)


def _one_lun(size: int = 64 * BLOCK, first: int = 0) -> Loop:
    return _loop([VerifiedLun(lun=4, first_bytes=first, size_bytes=size, run_key=KEY,
                              attempt=1)], [4, 4])


def _data(blocks: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, blocks * BLOCK, dtype=np.uint8)


def test_the_compiled_crc_is_the_references_by_instruction_and_by_table() -> None:
    lib = pk.library()
    assert lib is not None and pk.available()
    sectors = _data(5)[: 37 * 512].reshape(37, 512)  # 37: four at a time, then the rest
    want = v.crc32c_sectors(sectors)
    for force in (0, 1):
        out = np.zeros(37, dtype=np.uint32)
        way = lib.ivy_verify_crc(sectors.ctypes.data, 37, out.ctypes.data, force)
        assert way in ((1, 2) if force == 0 else (1,))
        assert out.tolist() == want.tolist(), way


def test_a_write_is_stamped_as_the_reference_stamps_it_and_takes_its_blocks_next_gen() -> None:
    lp = _one_lun(first=64 * BLOCK)
    m = lp.state.maps[4]
    m[2:6] = [0, 5, 127 | v.UNSETTLED, 1]
    raw = _data(4)
    got = raw.copy()
    lp.write(0, 66 * BLOCK, got, serial=77)
    want = raw.copy()
    v.stamp(want, 66 * BLOCK, 77, [1, 6, 1, 2], KEY, lun=4, writer=10, attempt=1)
    assert np.array_equal(got, want)
    assert m[2:6].tolist() == [1, 6, 1, 2]  # the map holds them from the submission on
    assert lp.state.in_flight == 4
    lp.write_done(0, 66 * BLOCK, got.size)
    assert lp.state.in_flight == 0
    taken = lp.state.take()
    assert taken.luns.tolist() == [4] * 4 and taken.blocks.tolist() == [2, 3, 4, 5]
    assert taken.map_bytes.tolist() == [1, 6, 1, 2]
    assert lp.state.take().blocks.size == 0


def _damaged_reads(lp: Loop) -> dict[str, npt.NDArray[np.uint8]]:
    """Blocks 8-9 written twice (the map at their second generation), and what a read of
    them may bring back after each kind of damage to block 9."""
    old, new = _data(2, seed=1), _data(2, seed=2)
    lp.put(0, 8 * BLOCK, old, serial=1)
    kept_old = old.copy()
    lp.put(0, 8 * BLOCK, new, serial=2)
    other = _data(2, seed=3)
    lp.put(0, 20 * BLOCK, other, serial=3)
    b9 = slice(BLOCK, 2 * BLOCK)
    out = {"clean": new.copy()}
    for kind in ("corrupt", "misplaced", "stale", "torn", "missing"):
        got = new.copy()
        if kind == "corrupt":
            got[BLOCK + 700] ^= 4
        elif kind == "misplaced":
            got[b9] = other[b9]
        elif kind == "stale":
            got[b9] = kept_old[b9]
        elif kind == "torn":
            got[BLOCK : BLOCK + 1536] = kept_old[BLOCK : BLOCK + 1536]
        else:
            got[b9] = 0
        out[kind] = got
    return out


def test_each_class_of_damage_is_the_references_counted_and_found_with_its_bytes() -> None:
    lp = _one_lun()
    reads = _damaged_reads(lp)
    lp.state.take()  # the writes' journal, out of the way
    m = lp.state.maps[4]
    for kind, got in reads.items():
        want = v.check_blocks(got, 8 * BLOCK, [int(m[8]), int(m[9])], KEY, 4)
        verdict = lp.check(1, 8 * BLOCK, got)
        assert [verdict] == [w for w in want if w] or (kind == "clean" and verdict == 0), kind
        taken = lp.state.take()
        counts = taken.counts
        assert counts[1, 0] == 2 and counts[0].sum() == 0  # two blocks checked, for owner 1
        assert counts[1, 1:].sum() == (kind != "clean")
        found, blocks, n = taken.findings, taken.finding_bytes, taken.found
        if kind == "clean":
            assert n == 0
            continue
        assert counts[1, v.CODES[kind]] == 1
        assert n == 1 and found["verdict"][0] == v.CODES[kind]
        assert found["offset_bytes"][0] == 9 * BLOCK and found["lun"][0] == 4
        assert found["owner"][0] == 1 and found["expected"][0] == m[9]
        assert found["done_ns"][0] == 123
        assert np.array_equal(blocks[0], got[BLOCK:])
        head = v.decode(got[BLOCK:].reshape(8, 512))[found["sector"][0]]
        if kind in ("misplaced", "stale", "torn"):
            assert found["crc_ok"][0] == 1
            assert found["found_offset_bytes"][0] == head["offset_bytes"]
            assert found["found_gen"][0] == head["gen"]
            assert found["found_writer"][0] == 10 and found["found_run_key"][0] == KEY
        if kind == "misplaced":
            assert found["found_offset_bytes"][0] == 21 * BLOCK
        if kind == "stale":
            assert found["found_gen"][0] == m[9] - 1 and found["found_serial"][0] == 1
        if kind == "corrupt":
            assert found["crc_ok"][0] == 0 and found["sector"][0] == 1
    assert lp.state.in_flight == 0


def test_another_luns_stamp_is_misplaced() -> None:
    lp = _loop([VerifiedLun(1, 0, 16 * BLOCK, KEY), VerifiedLun(2, 0, 16 * BLOCK, KEY)],
               [1, 2])
    a, b = _data(1, seed=1), _data(1, seed=2)
    lp.put(0, 0, a)
    lp.put(1, 0, b)
    assert lp.check(0, 0, a) == 0
    assert lp.check(0, 0, b) == v.CODES["misplaced"]  # LUN 2's block where LUN 1's belongs


def test_a_block_never_written_is_not_checked() -> None:
    lp = _one_lun()
    assert lp.check(0, 0, np.zeros(4 * BLOCK, dtype=np.uint8)) == 0
    assert lp.state.take().counts.sum() == 0


def test_two_writes_of_a_block_in_flight_at_once_leave_it_unsettled() -> None:
    # which of the two landed last is not known: either is clean, and so is each in part;
    # the next write alone settles it
    lp = _one_lun()
    first, second = _data(1, seed=1), _data(1, seed=2)
    lp.write(0, 0, first, serial=1)
    lp.write(0, 0, second, serial=2)
    lp.write_done(0, 0, BLOCK)
    lp.write_done(0, 0, BLOCK)
    m = lp.state.maps[4]
    assert m[0] == 2 | v.UNSETTLED
    assert lp.state.take().map_bytes.tolist() == [2 | v.UNSETTLED]  # once, when both are done
    mixed = np.concatenate([first[:2048], second[2048:]])
    assert [lp.check(0, 0, d) for d in (first, second, mixed)] == [0, 0, 0]
    third = _data(1, seed=3)
    lp.put(0, 0, third)
    assert m[0] == 3
    assert lp.check(0, 0, second) == v.CODES["stale"]


def test_a_failed_write_leaves_its_blocks_unsettled() -> None:
    lp = _one_lun()
    before, failed = _data(2, seed=1), _data(2, seed=2)
    lp.put(0, 0, before)
    lp.write(0, 0, failed)
    lp.write_done(0, 0, 2 * BLOCK, res=-5)  # EIO: either may be there
    assert lp.state.maps[4][:2].tolist() == [2 | v.UNSETTLED] * 2
    assert lp.check(0, 0, before) == 0 and lp.check(0, 0, failed) == 0


def test_a_read_during_a_write_of_its_block_may_find_either_or_both() -> None:
    lp = _one_lun()
    old, new = _data(1, seed=1), _data(1, seed=2)
    lp.put(0, 0, old)
    # the read went out first, the write after it and done before it: lenient
    lp.read(1, 0, BLOCK)
    lp.write(0, 0, new)  # stamped in place
    mixed = np.concatenate([new[:1024], old[1024:]])
    lp.write_done(0, 0, BLOCK)
    assert lp.read_done(1, 0, mixed) == 0
    # a write in flight from before the read to after it: the generation before it or its
    # own, not one older
    third = _data(1, seed=3)
    lp.write(0, 0, third)
    assert lp.check(1, 0, new) == 0 and lp.check(1, 0, third) == 0
    assert lp.check(1, 0, old) == v.CODES["stale"]
    lp.write_done(0, 0, BLOCK)
    # and once nothing overlaps, the map's generation alone
    assert lp.check(1, 0, third) == 0
    assert lp.check(1, 0, new) == v.CODES["stale"]
    assert lp.check(1, 0, np.zeros(BLOCK, dtype=np.uint8)) == v.CODES["missing"]
    assert lp.state.in_flight == 0


def test_a_block_first_written_during_a_read_may_still_hold_anything() -> None:
    lp = _one_lun()
    lp.read(1, 0, BLOCK)
    lp.write(0, 0, _data(1, seed=1))
    assert lp.read_done(1, 0, np.zeros(BLOCK, dtype=np.uint8)) == 0  # what was there before
    lp.write_done(0, 0, BLOCK)
    assert lp.check(1, 0, np.zeros(BLOCK, dtype=np.uint8)) == v.CODES["missing"]


def test_a_failed_read_is_not_checked_and_leaves_nothing_in_flight() -> None:
    lp = _one_lun()
    lp.put(0, 0, _data(1))
    lp.read(1, 0, BLOCK)
    assert lp.read_done(1, 0, np.zeros(BLOCK, dtype=np.uint8), res=-5) == 0
    assert lp.state.take().counts.sum() == 0 and lp.state.in_flight == 0


def test_findings_past_the_kept_are_counted_not_kept() -> None:
    lp = _one_lun(size=128 * BLOCK)
    for b in range(0, 100, 10):
        lp.put(0, b * BLOCK, _data(10, seed=b))
    lp.state.take()  # the writes' journal, out of the way
    assert lp.check(1, 0, np.zeros(100 * BLOCK, dtype=np.uint8)) == v.CODES["missing"]
    taken = lp.state.take()
    found, blocks, n = taken.findings, taken.finding_bytes, taken.found
    assert n == 100 and len(found) == FINDINGS_KEPT == len(blocks)
    assert found["offset_bytes"].tolist() == [b * BLOCK for b in range(FINDINGS_KEPT)]
    assert taken.counts[1, v.CODES["missing"]] == 100


def test_the_table_of_blocks_in_flight_agrees_with_a_model_through_many_collisions() -> None:
    # a table of 16 entries (at most 4 blocks in flight sized for; here up to 12 at once, so
    # the probes collide and wrap) against a dict: after every step the same blocks in flight,
    # and at the end none; every block read back clean (a write's generation is its count)
    lp = _loop([VerifiedLun(0, 0, 64 * BLOCK, KEY)], [0, 0], blocks_in_flight=1)
    assert lp.state.vtab.size == 2 * 16
    rng = np.random.default_rng(5)
    model: dict[int, list[int]] = {}
    pending: list[tuple[str, int, npt.NDArray[np.uint8]]] = []
    written: dict[int, npt.NDArray[np.uint8]] = {}
    for _ in range(3000):
        if pending and (len(model) >= 12 or rng.random() < 0.5):
            kind, b, data = pending.pop(int(rng.integers(len(pending))))
            if kind == "w":
                lp.write_done(0, b * BLOCK, BLOCK)
            else:
                assert lp.read_done(1, b * BLOCK, data) in (0, v.CODES["stale"])
            model[b][kind == "w"] -= 1
            if model[b] == [0, 0]:
                del model[b]
        else:
            b = int(rng.integers(64))
            if rng.random() < 0.5:
                data = _data(1, seed=int(rng.integers(1 << 30)))
                lp.write(0, b * BLOCK, data)
                written[b] = data
                pending.append(("w", b, data))
                model.setdefault(b, [0, 0])[1] += 1
            else:
                lp.read(1, b * BLOCK, BLOCK)
                pending.append(("r", b, written.get(b, np.zeros(BLOCK, dtype=np.uint8))))
                model.setdefault(b, [0, 0])[0] += 1
        assert lp.state.in_flight == len(model)
        keys = {int(x) - 1 for x in lp.state.vtab[0::2] if x}
        assert keys == set(model)
    while pending:
        kind, b, data = pending.pop()
        if kind == "w":
            lp.write_done(0, b * BLOCK, BLOCK)
        else:
            lp.read_done(1, b * BLOCK, data)
    assert lp.state.in_flight == 0 and not lp.state.vtab[0::2].any()


def test_a_workload_that_needs_more_room_grows_the_table_with_its_entries_in_it() -> None:
    lp = _loop([VerifiedLun(0, 0, 64 * BLOCK, KEY)], [0, 0], blocks_in_flight=1)
    size = lp.state.vtab.size
    datas = [_data(1, seed=b) for b in range(6)]
    for b, d in enumerate(datas):
        lp.write(0, b * BLOCK, d)
    lp.read(1, 20 * BLOCK, BLOCK)
    lp.state.add(2, WorkloadVerify(lp.state.luns[0], 12), 16 * BLOCK, iodepth=32)
    assert lp.state.vtab.size > size and lp.state.in_flight == 7
    for b in range(6):
        lp.write_done(0, b * BLOCK, BLOCK)
    assert lp.read_done(1, 20 * BLOCK, np.zeros(BLOCK, dtype=np.uint8)) == 0
    assert lp.state.in_flight == 0 and not lp.state.vtab[0::2].any()
    assert [lp.check(0, b * BLOCK, d) for b, d in enumerate(datas)] == [0] * 6
    assert lp.state.take().map_bytes.tolist() == [1] * 6


@pytest.mark.parametrize(("blocksize", "lun", "why"), [
    (2048, VerifiedLun(0, 0, 64 * BLOCK, KEY), "multiple of 4096"),
    (BLOCK, VerifiedLun(0, 0, 64 * BLOCK, KEY + 1), "is verified as"),
])
def test_a_workload_the_map_cannot_serve_is_refused(blocksize: int, lun: VerifiedLun,
                                                    why: str) -> None:
    lp = _loop([VerifiedLun(0, 0, 64 * BLOCK, KEY)], [0])
    with pytest.raises(ValueError, match=why):
        lp.state.add(1, WorkloadVerify(lun, 11), blocksize, iodepth=1)


@pytest.mark.parametrize(("make", "why"), [
    (lambda: VerifiedLun(0, 100, 64 * BLOCK, KEY), "whole 4096-byte blocks"),
    (lambda: VerifiedLun(70000, 0, BLOCK, KEY), "out of range"),
    (lambda: VerifiedLun(0, 0, BLOCK, KEY, attempt=256), "attempt 256"),
    (lambda: WorkloadVerify(VerifiedLun(0, 0, BLOCK, KEY), writer=1 << 16), "writer number"),
])
def test_numbers_a_stamp_cannot_carry_are_refused(make: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        make()  # type: ignore[operator]


def test_a_set_of_more_owners_than_verified_workloads_has_a_row_of_counts_each() -> None:
    # the compiled set counts by owner (the loop's workload index): a loop whose later
    # workloads are not verified still has a row for every owner, and its verified one points
    # at its LUN
    lp = _loop([VerifiedLun(0, 0, 64 * BLOCK, KEY)], [0])
    args = LoopArgs()
    args.n_owners = 40
    data = np.zeros(2, dtype=DATA_DTYPE)
    lp.state.attach(args, data, [0, 39])
    assert lp.state.counts.shape[0] >= 40
    assert data["vlun"].tolist() == [int(lp.state.data["vlun"][0]), 0]
    assert data["writer"].tolist() == [10, 0]


def test_the_journal_has_room_for_every_block_in_flight_and_keeps_what_it_held() -> None:
    # a reap settles at most the verified blocks in flight: a workload of 512 writes of 1 MiB
    # in flight grows the journal to room for them all (what it held spilled, not lost), and
    # a compiled set attached after points at the new one
    lp = _loop([VerifiedLun(0, 0, 64 * BLOCK, KEY)], [0])
    lp.put(0, 0, _data(2))
    assert lp.state.journal_room == 1 << 16
    lp.state.add(1, WorkloadVerify(lp.state.luns[0], 11), 256 * BLOCK, iodepth=512)
    room = lp.state.journal_room
    assert room >= 512 * 256 and lp.state.journal.size == 4 * room
    assert lp.args.vjournal_room == room and lp.args.vjournal_cap == lp.state.journal.size
    compiled = LoopArgs()
    compiled.n_owners = 2
    lp.state.attach(compiled, np.zeros(2, dtype=DATA_DTYPE), [0, 1])
    assert compiled.vjournal == lp.state.journal.ctypes.data
    assert compiled.vjournal_room == room
    lp.put(0, 4 * BLOCK, _data(1))
    assert lp.state.take().blocks.tolist() == [0, 1, 4]


def _resumed(initial: npt.NDArray[np.uint8], crashes: list[tuple[int, dict[int, int]]]
             ) -> Loop:
    """A loop of attempt 2 on LUN 0 (its workload writer 10) given the master's map
    ``initial``, after the attempts ``crashes`` name crashed, each with its confirmed serials
    by writer."""
    lib = pk.library()
    assert lib is not None
    state = VerifyState()
    rows = []
    for attempt, confirmed in crashes:
        serials = [-1] * 16
        for w, s in confirmed.items():
            serials[w] = s
        rows.append((attempt, serials))
    state.add(0, WorkloadVerify(VerifiedLun(0, 0, 16 * BLOCK, KEY, attempt=2), 10, initial,
                                rows), BLOCK, 1)
    return Loop(state.args, state, lib)


@pytest.mark.parametrize(("serial", "crashes", "map_gen", "verdict"), [
    (9, [(0, {10: 5})], 1, "clean"),  # above its writer's confirmed 5 in attempt 0: adopted
    (5, [(0, {10: 5})], 1, "stale"),  # confirmed, yet not the map's: a lost write
    (9, [], 1, "stale"),  # no crash to account for
    (9, [(1, {10: 5})], 1, "stale"),  # another attempt crashed, not the stamp's
    # attempt 0 crashed, attempt 1 too: the older crash still counts (a block attempt 1
    # never read keeps attempt 0's unconfirmed write)
    (9, [(0, {10: 5}), (1, {10: 100})], 1, "clean"),
    # the map moved two generations past the stamp's since (a later attempt wrote it twice,
    # its last write lost): a stamp behind the map's is not an unconfirmed write
    (9, [(0, {10: 5})], 3, "stale"),
])
def test_a_write_the_crashed_attempts_master_never_heard_of_is_taken_into_the_map(
        serial: int, crashes: list[tuple[int, dict[int, int]]], map_gen: int,
        verdict: str) -> None:
    before = _loop([VerifiedLun(0, 0, 16 * BLOCK, KEY, attempt=0)], [0])
    old, new = _data(1, seed=1), _data(1, seed=2)
    before.put(0, 0, old, serial=3)  # confirmed: the master's map holds generation 1
    before.put(0, 0, new, serial=serial)  # generation 2: confirmed or not, as the case says
    master_map = np.zeros(16, dtype=np.uint8)
    master_map[0] = map_gen
    after = _resumed(master_map, crashes)
    want = 0 if verdict == "clean" else v.CODES[verdict]
    assert after.check(0, 0, new) == want
    taken = after.state.take()
    if verdict == "clean":  # the map takes it, and the journal tells the master
        assert after.state.maps[0][0] == 2
        assert taken.blocks.tolist() == [0] and taken.map_bytes.tolist() == [2]
        assert after.check(0, 0, old) == v.CODES["stale"]  # the older one is stale now
    else:
        assert after.state.maps[0][0] == map_gen and taken.blocks.size == 0


@pytest.mark.parametrize(("serial", "verdict"), [
    (9, "clean"),  # above its writer's confirmed 5: what the block held before the write
    (5, "stale"),  # confirmed, yet not the map's: a lost write, as without the write
])
def test_a_read_beside_a_write_finds_the_crashed_attempts_unheard_write_clean(
        serial: int, verdict: str) -> None:
    """A resumed attempt reads a block while its own write of it is in flight, and finds the
    crashed attempt's last write of it (the map's generation 1; the crashed attempt wrote 2
    and 3, the write in flight takes 2): the block held that before the write, so it is clean
    where the serial is one the master never heard of, and the map is not moved by the read
    (the write in flight settles the block). It was called stale: a kill of the master
    mid-step, then ``--resume`` of a mixed step, failed so once under load."""
    before = _loop([VerifiedLun(0, 0, 16 * BLOCK, KEY, attempt=0)], [0])
    old, new = _data(1, seed=1), _data(1, seed=2)
    before.put(0, 0, old, serial=3)
    before.put(0, 0, _data(1, seed=4), serial=4)  # generation 2, confirmed
    before.put(0, 0, new, serial=serial)  # generation 3, heard of or not as the case says
    master_map = np.zeros(16, dtype=np.uint8)
    master_map[0] = 1
    after = _resumed(master_map, [(0, {10: 5})])
    mine = _data(1, seed=3)
    after.write(0, 0, mine, serial=1)  # in flight, not done
    want = 0 if verdict == "clean" else v.CODES[verdict]
    assert after.check(0, 0, new) == want
    after.write_done(0, 0, mine.size)
    assert after.check(0, 0, mine) == 0  # the resumed write settled the block
    assert after.state.maps[0][0] == 2  # its generation: the map's 1 and one



def test_a_read_that_went_out_behind_a_write_may_find_the_block_as_it_was_before_it() -> None:
    """A read of a block goes out while a write of it is in flight; the write completes and is
    settled first, then the read, whose data the device may have read before the write landed:
    the generation before the write is clean (the two were in flight at once), as is the
    write's own. It was called stale: a stress test of 16 blocks at depth 32 on io_uring found
    one such block under the suite's load."""
    lp = _one_lun()
    old, new, third = _data(1, seed=1), _data(1, seed=2), _data(1, seed=3)
    lp.put(0, 0, old)  # generation 1, settled
    lp.write(0, 0, new)  # generation 2, in flight
    lp.read(0, 0, BLOCK)  # out behind it
    lp.write_done(0, 0, BLOCK)  # settled first
    assert lp.read_done(0, 0, old) == 0  # read by the device before the write landed
    lp.write(0, 0, third)  # generation 3
    lp.read(0, 0, BLOCK)
    lp.write_done(0, 0, BLOCK)
    assert lp.read_done(0, 0, third) == 0  # after it landed
    assert lp.check(0, 0, third) == 0  # nothing in flight: the last write's generation
    assert lp.check(0, 0, new) == v.CODES["stale"]  # and nothing older
