"""``VerifyMap``: the master's map of what verified writes put down, in real files, checked
against a plain reference (a loop over the entries); torn and garbled journals, a kill between
snapshot and truncation, and a child killed with SIGKILL at random moments among its applies."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import select
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from master.verify.mapstore import MapLun, MapWriter, VerifyMap, VerifyMapError
from protocol.errors import IvyError, OutputError
from protocol.verify import GEN_MASK, UNSETTLED
from tests.master.filelimit import file_size_limit

LUNS = [MapLun(3, "h1", "/dev/sdb", 0, 64 * 4096),
        MapLun(7, "h2", "/dev/sdc", 10 * 4096, 256 * 4096)]
WRITERS = [MapWriter(0, "h1", "h1:/dev/sdb:w1"), MapWriter(5, "h2", "h2:/dev/sdc:w2")]
RUN_KEY = 0xC0FFEE

Entry = tuple[int, int, int]  # LUN number, block, map byte


@dataclass
class Reference:
    """What the map must hold: each entry applied in order by a plain loop."""

    maps: dict[int, np.ndarray] = field(default_factory=lambda: {
        x.number: np.zeros(x.blocks, dtype=np.uint8) for x in LUNS})
    confirmed: dict[int, int] = field(default_factory=dict)
    last: int | None = None

    def apply(self, subinterval: int, entries: list[Entry], confirmed: dict[int, int]) -> None:
        for lun, block, byte in entries:
            self.maps[lun][block] = byte
        self.confirmed.update(confirmed)
        self.last = subinterval

    def check(self, vm: VerifyMap) -> None:
        for lun, expected in self.maps.items():
            np.testing.assert_array_equal(vm.map_of(lun), expected, err_msg=f"LUN {lun}")
        assert vm.confirmed == self.confirmed
        assert vm.last_subinterval == self.last


def apply(vm: VerifyMap, ref: Reference | None, subinterval: int, entries: list[Entry],
          confirmed: dict[int, int] | None = None) -> None:
    confirmed = confirmed or {}
    cols = np.array(entries, dtype=np.int64).reshape(-1, 3)
    vm.apply(subinterval, cols[:, 0], cols[:, 1], cols[:, 2].astype(np.uint8), confirmed)
    if ref is not None:
        ref.apply(subinterval, entries, confirmed)


def random_entries(seed: int, n: int = 200) -> list[Entry]:
    """``n`` entries over both LUNs with many repeats of a block (a small LUN, few blocks)."""
    rng = np.random.default_rng(seed)
    luns = rng.choice([3, 7], n)
    blocks = np.where(luns == 3, rng.integers(0, 64, n), rng.integers(0, 256, n))
    values = rng.integers(1, 256, n)
    return [(int(a), int(b), int(c)) for a, b, c in zip(luns, blocks, values, strict=True)]


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[VerifyMap]:
    m = VerifyMap.create(tmp_path, RUN_KEY, LUNS, WRITERS)
    yield m
    m.close()


def journal(run_dir: Path) -> Path:
    return run_dir / "verify" / "journal.bin"


# ---------------------------------------------------------------------- round trips
ROUND_TRIPS: dict[str, list[tuple[list[Entry], dict[int, int]]]] = {
    "nothing applied": [],
    "one apply": [([(3, 0, 1), (7, 255, 2 | UNSETTLED), (3, 63, 127)], {0: 10})],
    "an apply with no entries": [([], {5: 3})],
    "several": [([(3, 1, 1)], {0: 1}), ([(7, 0, 2), (3, 1, 2)], {0: 5, 5: 9}),
                ([(7, 200, 3)], {5: 10})],
    "many, random": [(random_entries(s), {0: s, 5: 2 * s}) for s in range(6)],
}


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_apply_then_load_gives_the_same_map(tmp_path: Path, vm: VerifyMap, case: str) -> None:
    ref = Reference()
    for k, (entries, confirmed) in enumerate(ROUND_TRIPS[case]):
        apply(vm, ref, k, entries, confirmed)
    ref.check(vm)
    vm.close()
    loaded = VerifyMap.load(tmp_path)
    ref.check(loaded)
    assert (loaded.run_key, loaded.attempt, loaded.luns, loaded.writers) == (
        RUN_KEY, 0, tuple(LUNS), tuple(WRITERS))
    assert loaded.torn_tail_bytes == 0
    for lun, expected in ref.maps.items():
        np.testing.assert_array_equal(loaded.written_blocks(lun),
                                      np.flatnonzero(expected & GEN_MASK))


DUPLICATES: dict[str, tuple[list[list[Entry]], dict[tuple[int, int], int]]] = {
    "twice in one apply": ([[(3, 1, 5), (3, 1, 6)]], {(3, 1): 6}),
    "thrice, interleaved": ([[(3, 1, 5), (7, 1, 9), (3, 1, 6), (7, 1, 8), (3, 1, 7)]],
                            {(3, 1): 7, (7, 1): 8}),
    "an older generation last": ([[(7, 9, 40), (7, 9, 3)]], {(7, 9): 3}),
    "across applies": ([[(3, 2, 1), (3, 2, 2)], [(3, 2, 3)], [(7, 2, 4)]],
                       {(3, 2): 3, (7, 2): 4}),
    "a later apply unsettles": ([[(3, 4, 5)], [(3, 4, 6 | UNSETTLED), (3, 5, 1)]],
                                {(3, 4): 6 | UNSETTLED, (3, 5): 1}),
}


@pytest.mark.parametrize("case", DUPLICATES)
def test_the_last_entry_of_a_block_wins(tmp_path: Path, vm: VerifyMap, case: str) -> None:
    applies, expected = DUPLICATES[case]
    for k, entries in enumerate(applies):
        apply(vm, None, k, entries)
    vm.close()
    for m in (vm, VerifyMap.load(tmp_path)):
        assert {key: int(m.map_of(key[0])[key[1]]) for key in expected} == expected


def test_many_repeats_in_one_apply_against_the_loop(tmp_path: Path, vm: VerifyMap) -> None:
    ref = Reference()
    entries = random_entries(11, 20_000)  # every block many times over
    apply(vm, ref, 0, entries, {0: 1})
    ref.check(vm)
    vm.close()
    ref.check(VerifyMap.load(tmp_path))


def test_wide_gaps_between_blocks_round_trip(tmp_path: Path) -> None:
    big = MapLun(1, "h1", "/dev/sdd", 0, (1 << 25) * 4096)  # 32 Mi blocks: gaps need 4 bytes
    with VerifyMap.create(tmp_path, 1, [big], []) as m:
        blocks = np.array([(1 << 25) - 1, 0, 300, 70_000, 1 << 24], dtype=np.int64)
        m.apply(0, np.ones(5, np.int64), blocks, np.arange(1, 6, dtype=np.uint8), {})
    loaded = VerifyMap.load(tmp_path)
    assert loaded.map_of(1)[blocks].tolist() == [1, 2, 3, 4, 5]
    assert loaded.written_blocks(1).tolist() == sorted(blocks.tolist())


def test_the_map_is_a_read_only_view(vm: VerifyMap) -> None:
    apply(vm, None, 0, [(3, 1, 1)])
    view = vm.map_of(3)
    with pytest.raises(ValueError):
        view[0] = 1
    with pytest.raises(KeyError, match="LUN 4"):
        vm.map_of(4)


# ---------------------------------------------------------------------- torn and garbled
def three_records(run_dir: Path, vm: VerifyMap) -> tuple[list[int], list[Reference]]:
    """Three applies: the journal's length and the reference after each (and before)."""
    ref, sizes, states = Reference(), [0], [Reference()]
    for k in range(3):
        apply(vm, ref, k, random_entries(k, 30), {0: k})
        sizes.append(journal(run_dir).stat().st_size)
        states.append(Reference(maps={n: a.copy() for n, a in ref.maps.items()},
                                confirmed=dict(ref.confirmed), last=ref.last))
    vm.close()
    return sizes, states


def test_a_torn_last_record_at_every_length_leaves_the_records_before_it(
        tmp_path: Path, vm: VerifyMap) -> None:
    sizes, states = three_records(tmp_path, vm)
    whole = journal(tmp_path).read_bytes()
    for length in range(sizes[2], sizes[3]):
        journal(tmp_path).write_bytes(whole[:length])
        loaded = VerifyMap.load(tmp_path)
        states[2].check(loaded)
        assert loaded.torn_tail_bytes == length - sizes[2], length
    journal(tmp_path).write_bytes(whole)
    states[3].check(VerifyMap.load(tmp_path))


def test_an_apply_after_a_torn_tail_writes_over_it(tmp_path: Path, vm: VerifyMap) -> None:
    sizes, states = three_records(tmp_path, vm)
    with open(journal(tmp_path), "r+b") as fh:
        fh.truncate(sizes[3] - 5)
    loaded = VerifyMap.load(tmp_path)
    assert loaded.torn_tail_bytes == sizes[3] - 5 - sizes[2]
    ref = states[2]
    apply(loaded, ref, 9, [(3, 0, 99)], {5: 1})
    loaded.close()
    again = VerifyMap.load(tmp_path)
    ref.check(again)
    assert again.torn_tail_bytes == 0


# where in the journal a byte is flipped: (record, offset in it; negative from its end)
GARBLED: dict[str, tuple[int, int]] = {
    "the last record's CRC": (2, -1),
    "the last record's payload": (2, 20),
    "the last record's magic": (2, 0),
    "the last record's length": (2, 5),
    "the middle record's CRC": (1, -2),
}


@pytest.mark.parametrize("case", GARBLED)
def test_a_garbled_record_and_all_after_it_are_left_out(tmp_path: Path, vm: VerifyMap,
                                                        case: str) -> None:
    record, offset = GARBLED[case]
    sizes, states = three_records(tmp_path, vm)
    data = bytearray(journal(tmp_path).read_bytes())
    at = sizes[record] + offset if offset >= 0 else sizes[record + 1] + offset
    data[at] ^= 0x5A
    journal(tmp_path).write_bytes(bytes(data))
    loaded = VerifyMap.load(tmp_path)
    states[record].check(loaded)
    assert loaded.torn_tail_bytes == sizes[3] - sizes[record]


# ---------------------------------------------------------------------- snapshots
def test_a_snapshot_empties_the_journal_and_loads_back(tmp_path: Path, vm: VerifyMap) -> None:
    ref = Reference()
    apply(vm, ref, 0, random_entries(1), {0: 3})
    vm.snapshot()
    assert journal(tmp_path).stat().st_size == 0
    assert sorted(p.name for p in (tmp_path / "verify").iterdir()) == [
        "journal.bin", "lun3.map", "lun7.map", "map.json", "snapshot.json"]
    apply(vm, ref, 1, [(3, 5, 77)], {5: 4})
    vm.close()
    ref.check(VerifyMap.load(tmp_path))


def test_a_snapshot_writes_only_the_luns_written(tmp_path: Path, vm: VerifyMap) -> None:
    ref = Reference()
    apply(vm, ref, 0, [(7, 5, 1)])
    vm.snapshot()
    assert not (tmp_path / "verify" / "lun3.map").exists()
    vm.close()
    ref.check(VerifyMap.load(tmp_path))


# the files a kill leaves as they were before the snapshot: the snapshot's steps run in
# the order maps, snapshot.json, journal truncated
KILLED_SNAPSHOTS: dict[str, tuple[str, ...]] = {
    "before the truncation": ("journal.bin",),
    "before snapshot.json": ("journal.bin", "snapshot.json"),
    "after one map file": ("journal.bin", "snapshot.json", "lun7.map"),
    "before any map file": ("journal.bin", "snapshot.json", "lun3.map", "lun7.map"),
}


@pytest.mark.parametrize("case", KILLED_SNAPSHOTS)
def test_a_kill_inside_a_snapshot_loses_nothing(tmp_path: Path, vm: VerifyMap,
                                                case: str) -> None:
    ref = Reference()
    apply(vm, ref, 0, random_entries(1), {0: 1})
    vm.snapshot()
    for k in range(1, 4):  # both LUNs change again, in the journal only
        apply(vm, ref, k, random_entries(k + 1), {0: k, 5: k})
    folder = tmp_path / "verify"
    before = {name: (folder / name).read_bytes() for name in KILLED_SNAPSHOTS[case]}
    vm.snapshot()
    vm.close()
    for name, data in before.items():  # as the kill left them
        (folder / name).write_bytes(data)
    loaded = VerifyMap.load(tmp_path)
    ref.check(loaded)
    # and the journal's replay over the snapshot carries on
    apply(loaded, ref, 9, [(3, 0, 5)], {5: 50})
    loaded.snapshot()
    loaded.close()
    ref.check(VerifyMap.load(tmp_path))


def test_apply_takes_a_snapshot_past_the_journal_limit(tmp_path: Path) -> None:
    ref = Reference()
    with VerifyMap.create(tmp_path, RUN_KEY, LUNS, WRITERS, journal_limit_bytes=2048) as m:
        for k in range(12):
            apply(m, ref, k, random_entries(k, 100), {0: k})
            assert journal(tmp_path).stat().st_size < 2048
    assert (tmp_path / "verify" / "snapshot.json").exists()
    ref.check(VerifyMap.load(tmp_path))


def test_a_failed_append_changes_nothing_and_is_written_over(tmp_path: Path) -> None:
    big = MapLun(1, "h1", "/dev/sdd", 0, (1 << 20) * 4096)
    vm = VerifyMap.create(tmp_path, 1, [big], WRITERS)
    rng = np.random.default_rng(5)
    vm.apply(0, np.ones(3, np.int64), np.arange(3), np.full(3, 7, np.uint8), {0: 1})
    size = journal(tmp_path).stat().st_size
    n = 100_000  # a record of about 200 KB
    with (pytest.raises(OutputError, match=r"cannot write .*journal\.bin"),
          file_size_limit(64 * 1024)):
        vm.apply(1, np.ones(n, np.int64), rng.integers(0, 1 << 20, n),
                 np.full(n, 9, np.uint8), {0: 2})
    assert vm.written_blocks(1).tolist() == [0, 1, 2] and vm.confirmed == {0: 1}
    assert vm.last_subinterval == 0
    assert VerifyMap.load(tmp_path).torn_tail_bytes == journal(tmp_path).stat().st_size - size
    vm.apply(2, np.ones(1, np.int64), np.array([5]), np.array([3], np.uint8), {0: 3})
    vm.close()
    loaded = VerifyMap.load(tmp_path)
    assert loaded.torn_tail_bytes == 0 and loaded.confirmed == {0: 3}
    assert loaded.written_blocks(1).tolist() == [0, 1, 2, 5]


# ---------------------------------------------------------------------- refusals
BAD_ENTRIES: dict[str, tuple[list[Entry], str]] = {
    "an unknown LUN": ([(3, 0, 1), (4, 0, 1)], "entry 1: LUN 4 block 0: no such LUN"),
    "a negative LUN": ([(-1, 0, 1)], "entry 0: LUN -1 block 0: no such LUN"),
    "a LUN past u16": ([(3, 1, 1), (70_000, 0, 1)], "entry 1: LUN 70000 block 0: no such LUN"),
    "a block past the map": ([(7, 255, 1), (3, 64, 1)],
                             "entry 1: LUN 3 block 64: outside its map of 64 blocks"),
    "a negative block": ([(7, -1, 1)], "entry 0: LUN 7 block -1: outside"),
}


@pytest.mark.parametrize("case", BAD_ENTRIES)
def test_a_bad_entry_is_refused_and_nothing_changes(tmp_path: Path, vm: VerifyMap,
                                                    case: str) -> None:
    entries, message = BAD_ENTRIES[case]
    ref = Reference()
    apply(vm, ref, 0, [(3, 0, 9), (7, 0, 9)], {0: 1})
    size = journal(tmp_path).stat().st_size
    with pytest.raises(ValueError, match=f"subinterval 1: journal {message}"):
        apply(vm, None, 1, entries, {0: 2})
    ref.check(vm)
    assert journal(tmp_path).stat().st_size == size
    vm.close()
    ref.check(VerifyMap.load(tmp_path))


@pytest.mark.parametrize("confirmed, message", [
    ({9: 1}, "subinterval 1: a confirmed serial of writer 9, not in the map"),
    ({0: -1}, "writer 0's confirmed serial -1"),
    ({5: 1 << 64}, "writer 5's confirmed serial"),
])
def test_a_bad_confirmed_serial_is_refused(tmp_path: Path, vm: VerifyMap,
                                           confirmed: dict[int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply(vm, None, 1, [(3, 0, 1)], confirmed)
    assert journal(tmp_path).stat().st_size == 0
    assert vm.confirmed == {} and vm.written_blocks(3).size == 0


def test_create_refuses_an_existing_map(tmp_path: Path, vm: VerifyMap) -> None:
    apply(vm, None, 0, [(3, 0, 1)])
    with pytest.raises(VerifyMapError, match=r"map\.json: a verification map exists already"):
        VerifyMap.create(tmp_path, 1, LUNS, WRITERS)
    assert VerifyMap.load(tmp_path).map_of(3)[0] == 1


@pytest.mark.parametrize("lun, message", [
    ((3, "h1", "/dev/sdb", 0, 4097), "LUN 3 \\(h1:/dev/sdb\\): the map's range must be whole"),
    ((3, "h1", "/dev/sdb", 512, 4096), "LUN 3 .*whole 4096-byte blocks, not 512"),
    ((3, "h1", "/dev/sdb", 0, 0), "LUN 3"),
    ((65536, "h1", "/dev/sdb", 0, 4096), "LUN 65536 .*0-65535"),
])
def test_a_lun_must_be_whole_blocks(lun: tuple[int, str, str, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MapLun(*lun)


def test_numbers_must_not_repeat(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="LUN 3 is in the map twice"):
        VerifyMap.create(tmp_path, 1, [LUNS[0], LUNS[0]], [])
    with pytest.raises(ValueError, match="writer 0 is in the map twice"):
        VerifyMap.create(tmp_path, 1, LUNS, [WRITERS[0], WRITERS[0]])


def _edit_meta(doc: dict[str, object], **changes: object) -> str:
    return json.dumps({**doc, **changes})


# how map.json is broken: its text from the good document, and what the error says
BAD_META = {
    "missing": (None, "missing"),
    "empty": (lambda d: "", "not JSON"),
    "not JSON": (lambda d: "{luns: [", "not JSON"),
    "a list": (lambda d: "[]", "not a verification map's file of format 1"),
    "another format": (lambda d: _edit_meta(d, format=2), "format 1"),
    "no LUNs": (lambda d: _edit_meta(d, luns=None), "luns is None, not list"),
    "no run key": (lambda d: json.dumps({k: v for k, v in d.items() if k != "run_key"}),
                   "run_key is missing"),
    "a LUN of half a block": (
        lambda d: _edit_meta(d, luns=[{**d["luns"][0], "size_bytes": 2048}]),
        "luns\\[0\\]: LUN 3 .*whole"),
    "a writer without a workload": (
        lambda d: _edit_meta(d, writers=[{"number": 0, "host": "h1"}]),
        "writers\\[0\\]: workload is missing"),
    "a LUN twice": (lambda d: _edit_meta(d, luns=[d["luns"][0]] * 2), "LUN 3 is in the map twice"),
    "another block size": (lambda d: _edit_meta(d, map_block_bytes=512), "map_block_bytes"),
}


@pytest.mark.parametrize("case", BAD_META)
def test_a_missing_or_garbled_map_json_names_the_file(tmp_path: Path, vm: VerifyMap,
                                                      case: str) -> None:
    make, message = BAD_META[case]
    meta = tmp_path / "verify" / "map.json"
    if make is None:
        meta.unlink()
    else:
        meta.write_text(make(json.loads(meta.read_text())))
    with pytest.raises(VerifyMapError, match=message) as err:
        VerifyMap.load(tmp_path)
    assert isinstance(err.value, IvyError)
    assert err.value.path == str(meta) and str(err.value).startswith(f"{meta}: ")


def test_a_map_file_the_snapshot_names_must_be_there_and_whole(tmp_path: Path,
                                                               vm: VerifyMap) -> None:
    apply(vm, None, 0, [(3, 1, 1), (7, 2, 2)])
    vm.snapshot()
    vm.close()
    lun7 = tmp_path / "verify" / "lun7.map"
    lun7.write_bytes(lun7.read_bytes()[:-1])
    with pytest.raises(VerifyMapError, match=r"lun7\.map: 255 bytes where LUN 7's map has 256"):
        VerifyMap.load(tmp_path)
    lun7.unlink()
    with pytest.raises(VerifyMapError, match=r"lun7\.map: missing"):
        VerifyMap.load(tmp_path)


def test_a_new_map_is_not_taken_for_a_crashed_one(tmp_path: Path) -> None:
    """Files left by a map whose map.json was lost are not read into a new one."""
    with VerifyMap.create(tmp_path, 1, LUNS, WRITERS) as m:
        apply(m, None, 0, [(3, 1, 1)], {0: 4})
        m.snapshot()
    (tmp_path / "verify" / "map.json").unlink()
    VerifyMap.create(tmp_path, 2, LUNS, WRITERS).close()
    fresh = VerifyMap.load(tmp_path)
    assert fresh.written_blocks(3).size == 0 and fresh.confirmed == {}


# ---------------------------------------------------------------------- attempts
def test_next_attempt_is_kept_in_map_json(tmp_path: Path, vm: VerifyMap) -> None:
    apply(vm, None, 0, [(3, 1, 1)])
    assert vm.next_attempt() == 1
    vm.close()
    loaded = VerifyMap.load(tmp_path)
    assert loaded.attempt == 1 and loaded.map_of(3)[1] == 1
    assert loaded.next_attempt() == 2
    assert VerifyMap.load(tmp_path).attempt == 2
    assert json.loads((tmp_path / "verify" / "map.json").read_text())["attempt"] == 2
    assert [p.name for p in (tmp_path / "verify").glob(".*")] == []


def test_each_attempt_that_ended_is_kept_with_its_confirmed_serials(
        tmp_path: Path, vm: VerifyMap) -> None:
    # writers 0 and 5: attempt 0 ends with writer 0 confirmed at 4, writer 5 never; attempt 1
    # at 9 and 2; by writer number, -1 where none
    apply(vm, None, 0, [(3, 1, 1)], {0: 4})
    vm.next_attempt()
    apply(vm, None, 1, [(3, 2, 1)], {0: 9, 5: 2})
    first, second = [4, -1, -1, -1, -1, -1], [9, -1, -1, -1, -1, 2]
    assert vm.crash_rows(with_last=True) == [[0, *first], [1, *second]]  # the last as it stands
    assert vm.crash_rows() == [[0, *first]]
    vm.close()
    loaded = VerifyMap.load(tmp_path)
    assert loaded.crashes == [(0, first)]
    loaded.next_attempt()
    assert VerifyMap.load(tmp_path).crashes == [(0, first), (1, second)]
    meta = json.loads((tmp_path / "verify" / "map.json").read_text())
    assert meta["crashes"] == [{"attempt": 0, "confirmed": first},
                               {"attempt": 1, "confirmed": second}]


def test_the_last_attempt_the_stamp_carries(tmp_path: Path, vm: VerifyMap) -> None:
    meta = tmp_path / "verify" / "map.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "attempt": 255}))
    loaded = VerifyMap.load(tmp_path)
    with pytest.raises(VerifyMapError, match="attempt 255 is the last"):
        loaded.next_attempt()
    assert VerifyMap.load(tmp_path).attempt == 255


# ---------------------------------------------------------------------- killed at any moment
def _applier(run_dir: str, fd: int) -> None:
    """The child: carry on from what is on disk, one apply after another, telling the parent
    (8 bytes on a pipe) each one that returned."""
    vm = VerifyMap.load(Path(run_dir), journal_limit_bytes=4096)
    k = -1 if vm.last_subinterval is None else vm.last_subinterval
    while True:
        k += 1
        entries = random_entries(k)
        cols = np.array(entries, dtype=np.int64)
        vm.apply(k, cols[:, 0], cols[:, 1], cols[:, 2].astype(np.uint8), {0: k, 5: 2 * k})
        os.write(fd, k.to_bytes(8, "little"))


def test_applies_killed_at_random_moments_leave_a_prefix_of_whole_applies(
        tmp_path: Path) -> None:
    VerifyMap.create(tmp_path, RUN_KEY, LUNS, WRITERS).close()
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(62)
    ref = Reference()
    done = -1  # the last apply the reference holds
    for _ in range(30):
        r, w = os.pipe()
        child = ctx.Process(target=_applier, args=(str(tmp_path), w))
        child.start()
        os.close(w)
        # its first apply returned (a busy machine only makes this wait longer), then a
        # random moment among the next ones: in an apply, its fsync, a snapshot
        assert select.select([r], [], [], 120)[0], "the child applied nothing in 120 s"
        reported = os.read(r, 8)
        assert len(reported) == 8, f"the child ended: exit code {child.exitcode}"
        time.sleep(rng.uniform(0.0, 0.04))
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        while chunk := os.read(r, 1 << 16):
            reported += chunk
        os.close(r)
        told = [int.from_bytes(reported[i:i + 8], "little") for i in range(0, len(reported), 8)]
        loaded = VerifyMap.load(tmp_path)
        last = -1 if loaded.last_subinterval is None else loaded.last_subinterval
        # nothing reported is lost, at most the apply in progress is there beyond it
        assert last >= max(told, default=done) >= done
        assert last <= max(told, default=done) + 1
        for k in range(done + 1, last + 1):
            ref.apply(k, random_entries(k), {0: k, 5: 2 * k})
        done = last
        ref.check(loaded)  # whole applies only: no entry of a partial one
    assert done >= 29  # each child applied one at least


def test_a_later_steps_luns_and_writers_extend_the_map_and_survive_a_load(
        tmp_path: Path) -> None:
    first = MapLun(0, "h1", "/dev/a", 0, 16 * 4096)
    vm = VerifyMap.create(tmp_path, 5, [first], [MapWriter(0, "h1", "h1:/dev/a:w")])
    vm.apply(0, np.array([0]), np.array([3]), np.array([2], np.uint8), {0: 7})
    second = MapLun(1, "h2", "/dev/b", 0, 8 * 4096)
    vm.extend([second], [MapWriter(1, "h2", "h2:/dev/b:w")])
    vm.apply(1, np.array([1, 0]), np.array([7, 4]), np.array([1, 5], np.uint8), {1: 3})
    with pytest.raises(ValueError, match="LUN"):
        vm.extend([MapLun(1, "h3", "/dev/c", 0, 4096)], [])
    assert [x.number for x in vm.luns] == [0, 1]  # nothing changed by the refusal
    vm.close()
    back = VerifyMap.load(tmp_path)
    assert back.map_of(0)[[3, 4]].tolist() == [2, 5] and back.map_of(1)[7] == 1
    assert back.confirmed == {0: 7, 1: 3} and [w.workload for w in back.writers] == [
        "h1:/dev/a:w", "h2:/dev/b:w"]
    back.close()
