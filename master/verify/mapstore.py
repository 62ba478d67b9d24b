"""The master's map of what verified writes put down, and its files in the run folder.

Owns ``VerifyMap``: per LUN of the run's map one byte per ``MAP_BLOCK_BYTES`` block
(``protocol.verify``'s map byte: generation in bits 0-6, 0 never written, ``UNSETTLED`` in bit
7), per writer (a workload's number in the map) its confirmed serial, and the files under
``<run folder>/verify/`` that keep them. It takes what slaves journal each subinterval
(``apply``) and must not talk to hosts, check data or decide what a verdict is.

Files (``verify/``)::

    map.json       the run: format, run key, attempt, the LUNs and writers; replaced whole
    journal.bin    a record per apply, appended and synced before ``apply`` returns
    lun<N>.map     LUN N's map at the last snapshot, raw bytes (absent: never written)
    snapshot.json  the confirmed serials and last subinterval at the last snapshot, and
                   which LUNs have a map file; replaced whole after the map files

A journal record (little-endian)::

    0   4   magic b"IvJ1"
    4   u32 payload_bytes
    8   ... payload
    ..  u32 CRC-32 (zlib.crc32) of the payload

    payload:
    0   i64 subinterval
    8   u32 groups        one per LUN with entries, ascending LUN index in map.json
    12  u32 entries       the distinct blocks settled (the last entry of a block only)
    16  u32 writers       confirmed serials carried
    20  u8  delta_bytes   1, 2, 4 or 8: the width of a block's gap from the one before it
    21  3 bytes zero
    24  groups  x 16:  lun u16, zero u16, count u32, first_block u64
    ..  writers x 10:  writer u16, serial u64
    ..  (entries - groups) x delta_bytes: each later block's gap from the one before it in
        its group (blocks ascend within a group)
    ..  entries x u8:  the map bytes, in the order of the blocks

500,000 random entries over a 64 GiB LUN make a record of about 1.5 MB.

Safe against a kill at any moment (SIGKILL, power loss): a record is complete with a CRC that
holds, or it is the torn tail: ``load`` stops at the first record that is not complete
(``torn_tail_bytes``) and the next append overwrites it; a record's entries are applied
whole or not at all. Every value in a record is absolute (a block's byte, a writer's serial,
not a change), so replaying records over a state that already holds them changes nothing:
``snapshot`` writes the map files, then snapshot.json, each whole (temporary file, fsync,
rename, fsync of the directory), and only then empties the journal; a kill between the two
leaves a snapshot and the journal it holds, whose replay gives the same state.

Memory: one byte per block of each LUN's range, every LUN in one array: a 1 TiB LUN is
268,435,456 blocks = 256 MiB. Nothing per entry is kept after ``apply``; ``load`` reads the
journal whole (at most ``journal_limit_bytes`` and a record).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol.errors import IvyError, OutputError
from protocol.verify import GEN_MASK, MAP_BLOCK_BYTES

FORMAT: Final = 1
DIR: Final = "verify"
MAP_JSON: Final = "map.json"
JOURNAL: Final = "journal.bin"
SNAPSHOT_JSON: Final = "snapshot.json"
#: the journal's size past which ``apply`` takes a snapshot and empties it
JOURNAL_LIMIT_BYTES: Final = 64 << 20
MAGIC: Final = b"IvJ1"
#: the numbers of LUNs and writers are the stamp's u16; the attempt its u8
MAX_NUMBER: Final = 0xFFFF
MAX_ATTEMPT: Final = 0xFF
#: blocks of one LUN's map at most (4 PiB): a block and its LUN's base fit an int64
MAX_BLOCKS: Final = 1 << 40

_RECORD_HEAD: Final = struct.Struct("<4sI")
_CRC: Final = struct.Struct("<I")
_PAYLOAD_HEAD: Final = struct.Struct("<qIIIB3x")
_GROUP: Final = np.dtype([("lun", "<u2"), ("zero", "<u2"), ("count", "<u4"),
                          ("first_block", "<u8")])
_SERIAL: Final = np.dtype([("writer", "<u2"), ("serial", "<u8")])
assert _GROUP.itemsize == 16 and _SERIAL.itemsize == 10 and _PAYLOAD_HEAD.size == 24


class VerifyMapError(IvyError):
    """The verification map of a run folder cannot be used: ``map.json`` missing or garbled, a
    map file of the wrong size, a complete journal record that breaks the format, a map made
    where one exists, or a resume past the last attempt. ``path`` names the file."""

    def __init__(self, message: str, *, path: Path | str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class MapLun:
    """A LUN of the run's map: its number (the stamp's ``lun``), where it is (the first host
    and path the run reached it by), the range the map covers (whole blocks from
    ``first_bytes``), what tells it from every other LUN (``identity``, the slave's; "" none
    known) and the other hosts and paths the run reached it by (``also``: a LUN that several
    hosts see, docs/verify.md)."""

    number: int
    host: str
    lun: str
    first_bytes: int
    size_bytes: int
    identity: str = ""
    also: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        name = f"LUN {self.number} ({self.host}:{self.lun})"
        if not 0 <= self.number <= MAX_NUMBER:
            raise ValueError(f"{name}: the number must be 0-{MAX_NUMBER}")
        if (self.first_bytes < 0 or self.size_bytes <= 0 or self.first_bytes % MAP_BLOCK_BYTES
                or self.size_bytes % MAP_BLOCK_BYTES):
            raise ValueError(f"{name}: the map's range must be whole {MAP_BLOCK_BYTES}-byte "
                             f"blocks, not {self.first_bytes} + {self.size_bytes} bytes")
        if self.blocks > MAX_BLOCKS:
            raise ValueError(f"{name}: {self.blocks} blocks, more than {MAX_BLOCKS}")

    @property
    def blocks(self) -> int:
        return self.size_bytes // MAP_BLOCK_BYTES


@dataclass(frozen=True)
class MapWriter:
    """A workload that writes verified data: its number (the stamp's ``writer``) and id."""

    number: int
    host: str
    workload: str

    def __post_init__(self) -> None:
        if not 0 <= self.number <= MAX_NUMBER:
            raise ValueError(f"writer {self.number} ({self.workload}): the number must be "
                             f"0-{MAX_NUMBER}")


class VerifyMap:
    """The map of a run folder (``create`` a new one, ``load`` one after a crash or for
    ``--resume``). Its one owner calls ``apply`` each subinterval and ``snapshot`` at a step's
    end; ``close`` when done."""

    def __init__(self, folder: Path, run_key: int, attempt: int, luns: Iterable[MapLun],
                 writers: Iterable[MapWriter], journal_limit_bytes: int) -> None:
        self._dir = folder
        self.run_key = run_key
        self.attempt = attempt
        self.luns = tuple(luns)
        self.writers = tuple(writers)
        self.journal_limit_bytes = journal_limit_bytes
        if not 0 <= run_key < 1 << 32:
            raise ValueError(f"run key {run_key}: must be 0 to 2**32 - 1")
        if not 0 <= attempt <= MAX_ATTEMPT:
            raise ValueError(f"attempt {attempt}: must be 0-{MAX_ATTEMPT}")
        _unique("LUN", [x.number for x in self.luns])
        _unique("writer", [x.number for x in self.writers])
        self._writer_numbers = frozenset(w.number for w in self.writers)
        self._by_number = {x.number: i for i, x in enumerate(self.luns)}
        self._index = np.full(MAX_NUMBER + 1, -1, dtype=np.int64)
        self._numbers = np.array([x.number for x in self.luns], dtype=np.int64)
        self._index[self._numbers] = np.arange(len(self.luns))
        self._blocks = np.array([x.blocks for x in self.luns], dtype=np.int64)
        self._base = np.concatenate([[0], np.cumsum(self._blocks)]).astype(np.int64)
        self._map = np.zeros(int(self._base[-1]), dtype=np.uint8)
        self._confirmed: dict[int, int] = {}
        #: the attempts before this one (each ended without its master hearing of every
        #: write, ``next_attempt``) with each writer's confirmed serial there, by number
        self.crashes: list[tuple[int, list[int]]] = []
        self.last_subinterval: int | None = None
        #: LUN indices changed since the last snapshot, and LUN numbers with a map file
        self._dirty: set[int] = set()
        self._mapped: set[int] = set()
        self._fd: int | None = None
        #: the journal's length up to its last complete record
        self._journal_bytes = 0
        self.torn_tail_bytes = 0

    # ------------------------------------------------------------------ making and loading
    @classmethod
    def create(cls, run_dir: Path, run_key: int, luns: list[MapLun], writers: list[MapWriter],
               *, journal_limit_bytes: int = JOURNAL_LIMIT_BYTES) -> VerifyMap:
        """A new, empty map in ``run_dir/verify/`` (attempt 0). ``VerifyMapError`` where
        ``map.json`` exists already, ``ValueError`` for numbers that repeat or do not fit."""
        folder = run_dir / DIR
        vm = cls(folder, run_key, 0, luns, writers, journal_limit_bytes)
        meta = folder / MAP_JSON
        if meta.exists():
            raise VerifyMapError("a verification map exists already: a new run cannot be "
                                 "made over it (continue it with --resume)", path=meta)
        journal = folder / JOURNAL
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # the journal first: map.json is what says the map exists
            fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            for stale in (SNAPSHOT_JSON, *(f"lun{x.number}.map" for x in vm.luns)):
                with contextlib.suppress(FileNotFoundError):
                    (folder / stale).unlink()
            _sync_dir(folder)
        except OSError as exc:
            raise OutputError(str(journal), exc) from exc
        vm._write_meta()
        with contextlib.suppress(OSError):
            _sync_dir(run_dir)
        return vm

    @classmethod
    def load(cls, run_dir: Path, *, journal_limit_bytes: int = JOURNAL_LIMIT_BYTES
             ) -> VerifyMap:
        """The map of ``run_dir`` as a kill at any moment left it: the last snapshot and the
        journal's complete records; a torn or garbled tail is left out and counted in
        ``torn_tail_bytes`` (the next ``apply`` overwrites it). Reads only."""
        folder = run_dir / DIR
        vm = _from_meta(folder, journal_limit_bytes)
        vm._load_snapshot()
        vm._replay()
        return vm

    def _load_snapshot(self) -> None:
        path = self._dir / SNAPSHOT_JSON
        listed: set[int] = set()
        if path.exists():
            doc = _read_json(path)
            try:
                confirmed = {int(w): int(s) for w, s in doc["confirmed"]}
                listed = {int(n) for n in doc["maps"]}
                last = doc["last_subinterval"]
                self.last_subinterval = None if last is None else int(last)
            except (KeyError, TypeError, ValueError) as exc:
                raise VerifyMapError(f"garbled snapshot ({exc!r})", path=path) from exc
            self._confirmed = confirmed
        for i, x in enumerate(self.luns):
            file = self._dir / f"lun{x.number}.map"
            try:
                with open(file, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    if size != x.blocks:
                        raise VerifyMapError(f"{size} bytes where LUN {x.number}'s map has "
                                             f"{x.blocks} blocks", path=file)
                    view = self._map[self._base[i]:self._base[i + 1]].data
                    while view:
                        got = fh.readinto(view)
                        if not got:
                            raise VerifyMapError("shorter than it was a moment ago", path=file)
                        view = view[got:]
            except FileNotFoundError:
                if x.number in listed:
                    raise VerifyMapError("missing: the snapshot has a map file for this LUN",
                                         path=file) from None
                continue
            except OSError as exc:
                raise VerifyMapError(f"cannot be read: {exc.strerror or exc}",
                                     path=file) from exc
            self._mapped.add(x.number)

    def _replay(self) -> None:
        path = self._dir / JOURNAL
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise VerifyMapError(f"cannot be read: {exc.strerror or exc}", path=path) from exc
        end = 0
        for start, payload in _records(data):
            try:
                self._take(*self._decode(payload))
            except ValueError as exc:
                raise VerifyMapError(f"the record at byte {start}: {exc}", path=path) from exc
            end = start + _RECORD_HEAD.size + len(payload) + _CRC.size
        self._journal_bytes = end
        self.torn_tail_bytes = len(data) - end

    # ------------------------------------------------------------------ the subinterval's work
    def apply(self, subinterval: int, luns: npt.NDArray[np.int64], blocks: npt.NDArray[np.int64],
              map_bytes: npt.NDArray[np.uint8], confirmed: Mapping[int, int]) -> None:
        """Take one subinterval's journal entries (for each block a write settled: its LUN
        number, block index and map byte, in the order settled: a later entry of a block wins)
        and confirmed serials (writer number → serial); returns once they are in the journal
        on disk. ``ValueError``, with nothing changed, for an entry of an unknown LUN or a
        block outside its map, or a serial of an unknown writer; ``OutputError`` when the
        journal cannot be written (then nothing changed either)."""
        lun_a = np.asarray(luns, dtype=np.int64).reshape(-1)
        block_a = np.asarray(blocks, dtype=np.int64).reshape(-1)
        byte_a = np.asarray(map_bytes, dtype=np.uint8).reshape(-1)
        if not lun_a.size == block_a.size == byte_a.size:
            raise ValueError(f"subinterval {subinterval}: {lun_a.size} LUNs, {block_a.size} "
                             f"blocks and {byte_a.size} map bytes")
        serials = self._check_confirmed(subinterval, confirmed)
        index = self._index[np.clip(lun_a, 0, MAX_NUMBER)]
        index[(lun_a < 0) | (lun_a > MAX_NUMBER)] = -1
        limit = self._blocks[index.clip(0)] if self.luns else np.zeros_like(block_a)
        bad = (index < 0) | (block_a < 0) | (block_a >= limit)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            lun, block = int(lun_a[i]), int(block_a[i])
            why = ("no such LUN in the map" if index[i] < 0 else
                   f"outside its map of {int(self._blocks[index[i]])} blocks")
            raise ValueError(f"subinterval {subinterval}: journal entry {i}: LUN {lun} "
                             f"block {block}: {why}")
        # the last entry of each block: the first of the reversed arrays (np.unique's index is
        # of first occurrences); keys ascend, so by LUN index, then block
        keys, first = np.unique((self._base[index] + block_a)[::-1], return_index=True)
        values = byte_a[::-1][first]
        lun_index = np.asarray(np.searchsorted(self._base, keys, side="right") - 1, np.int64)
        payload = self._encode(subinterval, keys, lun_index, values, serials)
        self._append(payload)
        self._take(subinterval, keys, lun_index, values, serials)
        if self._journal_bytes >= self.journal_limit_bytes:
            self.snapshot()

    def _check_confirmed(self, subinterval: int, confirmed: Mapping[int, int]
                         ) -> npt.NDArray[np.void]:
        out = np.zeros(len(confirmed), dtype=_SERIAL)
        for i, (writer, serial) in enumerate(sorted(confirmed.items())):
            if writer not in self._writer_numbers:
                raise ValueError(f"subinterval {subinterval}: a confirmed serial of writer "
                                 f"{writer}, not in the map")
            if not 0 <= serial < 1 << 64:
                raise ValueError(f"subinterval {subinterval}: writer {writer}'s confirmed "
                                 f"serial {serial} is not a u64")
            out[i] = (writer, serial)
        return out

    def _take(self, subinterval: int, keys: npt.NDArray[np.int64],
              lun_index: npt.NDArray[np.int64], values: npt.NDArray[np.uint8],
              serials: npt.NDArray[np.void]) -> None:
        """Put distinct blocks' bytes (``keys``: positions in the one array) and serials in
        memory."""
        self._map[keys] = values
        if keys.size:
            self._dirty.update(np.unique(lun_index).tolist())
        self._confirmed.update(zip(serials["writer"].tolist(), serials["serial"].tolist(),
                                   strict=True))
        self.last_subinterval = subinterval

    # ------------------------------------------------------------------ records
    def _encode(self, subinterval: int, keys: npt.NDArray[np.int64],
                lun_index: npt.NDArray[np.int64], values: npt.NDArray[np.uint8],
                serials: npt.NDArray[np.void]) -> bytes:
        n = keys.size
        blocks = keys - self._base[lun_index]
        starts = np.flatnonzero(np.diff(lun_index, prepend=-1)) if n else np.zeros(0, np.int64)
        counts = np.diff(np.append(starts, n))
        groups = np.zeros(starts.size, dtype=_GROUP)
        groups["lun"] = self._numbers[lun_index[starts]]
        groups["count"] = counts
        groups["first_block"] = blocks[starts]
        later = np.ones(n, dtype=bool)
        later[starts] = False
        gaps = np.diff(blocks, prepend=0)[later]
        top = int(gaps.max()) if gaps.size else 0
        width = next(w for w in (1, 2, 4, 8) if top < 1 << (8 * w))
        head = _PAYLOAD_HEAD.pack(subinterval, starts.size, n, serials.size, width)
        return b"".join((head, groups.tobytes(), serials.tobytes(),
                         gaps.astype(f"<u{width}").tobytes(), values.tobytes()))

    def _decode(self, payload: bytes) -> tuple[int, npt.NDArray[np.int64],
                                               npt.NDArray[np.int64], npt.NDArray[np.uint8],
                                               npt.NDArray[np.void]]:
        """A record's payload as ``_take``'s arguments; ``ValueError`` where it breaks the
        format or names what the map has not."""
        if len(payload) < _PAYLOAD_HEAD.size:
            raise ValueError(f"a payload of {len(payload)} bytes")
        subinterval, ng, n, nw, width = _PAYLOAD_HEAD.unpack_from(payload)
        if width not in (1, 2, 4, 8) or ng > n or (ng == 0) != (n == 0):
            raise ValueError(f"{ng} groups of {n} entries, gaps of {width} bytes")
        sizes = (ng * _GROUP.itemsize, nw * _SERIAL.itemsize, (n - ng) * width, n)
        if _PAYLOAD_HEAD.size + sum(sizes) != len(payload):
            raise ValueError(f"{len(payload)} bytes for {ng} groups of {n} entries and {nw} "
                             f"serials")
        at = np.cumsum((_PAYLOAD_HEAD.size, *sizes)).tolist()
        groups = np.frombuffer(payload, _GROUP, ng, at[0])
        serials = np.frombuffer(payload, _SERIAL, nw, at[1]).copy()
        gaps = np.frombuffer(payload, np.dtype(f"<u{width}"), n - ng, at[2]).astype(np.int64)
        values = np.frombuffer(payload, np.uint8, n, at[3]).copy()
        counts = groups["count"].astype(np.int64)
        firsts = groups["first_block"].astype(np.int64)
        lun_index = self._index[groups["lun"]]
        if (counts <= 0).any() or counts.sum() != n or (lun_index < 0).any():
            raise ValueError("groups that do not add up, or of a LUN not in the map")
        if (gaps <= 0).any() or (firsts < 0).any():
            raise ValueError("blocks that do not ascend")
        if not np.isin(serials["writer"], list(self._writer_numbers)).all():
            raise ValueError("a serial of a writer not in the map")
        starts = np.cumsum(counts) - counts
        later = np.ones(n, dtype=bool)
        later[starts] = False
        steps = np.empty(n, dtype=np.int64)
        steps[later] = gaps
        steps[starts] = firsts
        total = np.cumsum(steps)
        blocks = total - np.repeat(total[starts] - firsts, counts)
        per_entry = np.repeat(lun_index, counts)
        if ((blocks < 0) | (blocks >= self._blocks[per_entry])).any():
            raise ValueError("a block outside its LUN's map")
        return subinterval, self._base[per_entry] + blocks, per_entry, values, serials

    def _journal(self) -> int:
        """The journal open for appending, ending at its last complete record."""
        if self._fd is None:
            path = self._dir / JOURNAL
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            try:
                if os.fstat(fd).st_size != self._journal_bytes:  # a torn tail, or a failed write
                    os.ftruncate(fd, self._journal_bytes)
                    os.fsync(fd)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _append(self, payload: bytes) -> None:
        record = b"".join((_RECORD_HEAD.pack(MAGIC, len(payload)), payload,
                           _CRC.pack(zlib.crc32(payload))))
        try:
            fd = self._journal()
            try:
                view = memoryview(record)
                while view:
                    view = view[os.write(fd, view):]
                os.fdatasync(fd)
            except OSError:
                # a part written: the next append cuts the journal back to its last record
                os.close(fd)
                self._fd = None
                raise
        except OSError as exc:
            raise OutputError(str(self._dir / JOURNAL), exc) from exc
        self._journal_bytes += len(record)

    # ------------------------------------------------------------------ snapshots and resumes
    def snapshot(self) -> None:
        """Write the maps changed since the last snapshot and the confirmed serials, each
        file whole, then empty the journal. ``OutputError`` when a file cannot be written
        (the journal is then left as it was)."""
        files = [(self._dir / f"lun{self.luns[i].number}.map",
                  self._map[self._base[i]:self._base[i + 1]].data)
                 for i in sorted(self._dirty)]
        mapped = self._mapped | {self.luns[i].number for i in self._dirty}
        doc = {"format": FORMAT, "last_subinterval": self.last_subinterval,
               "confirmed": sorted(self._confirmed.items()), "maps": sorted(mapped)}
        _replace_files(files)
        _replace_files([(self._dir / SNAPSHOT_JSON, memoryview(_json_bytes(doc)))])
        self._mapped = mapped
        self._dirty.clear()
        try:
            fd = self._journal()
            os.ftruncate(fd, 0)
            os.fsync(fd)
        except OSError as exc:
            raise OutputError(str(self._dir / JOURNAL), exc) from exc
        self._journal_bytes = 0

    def extend(self, luns: Iterable[MapLun], writers: Iterable[MapWriter]) -> None:
        """More LUNs (after those it has: their indices in the journal stay) and writers, in
        ``map.json`` before it returns (a later step's, before its first I/O). ``ValueError``
        for a number it has, with nothing changed."""
        new_luns, new_writers = tuple(luns), tuple(writers)
        _unique("LUN", [x.number for x in (*self.luns, *new_luns)])
        _unique("writer", [x.number for x in (*self.writers, *new_writers)])
        old = (self.luns, self.writers)
        self.luns, self.writers = self.luns + new_luns, self.writers + new_writers
        try:
            self._write_meta()
        except OutputError:
            self.luns, self.writers = old
            raise
        self._writer_numbers = frozenset(w.number for w in self.writers)
        self._by_number = {x.number: i for i, x in enumerate(self.luns)}
        self._numbers = np.array([x.number for x in self.luns], dtype=np.int64)
        self._index[self._numbers] = np.arange(len(self.luns))
        self._blocks = np.array([x.blocks for x in self.luns], dtype=np.int64)
        self._base = np.concatenate([[0], np.cumsum(self._blocks)]).astype(np.int64)
        grown = np.zeros(int(self._base[-1]), dtype=np.uint8)
        grown[: self._map.size] = self._map
        self._map = grown

    def reached_by(self, number: int, host: str, lun: str) -> None:
        """LUN ``number`` is reached by ``host`` at ``lun`` too (another host that sees it),
        kept in ``map.json`` before it returns; nothing where it is known."""
        x = self.lun(number)
        if (host, lun) == (x.host, x.lun) or (host, lun) in x.also:
            return
        old = self.luns
        i = self._by_number[number]
        self.luns = (*old[:i], replace(x, also=(*x.also, (host, lun))), *old[i + 1:])
        try:
            self._write_meta()
        except OutputError:
            self.luns = old
            raise

    def next_attempt(self) -> int:
        """One more attempt (``--resume``), kept in ``map.json`` before it returns; the
        attempt before it is a crash (``crashes``: whatever ended it, a write its master never
        heard of may be on the LUNs), with each writer's confirmed serial as it stands."""
        if self.attempt >= MAX_ATTEMPT:
            raise VerifyMapError(f"attempt {self.attempt} is the last the stamp can carry",
                                 path=self._dir / MAP_JSON)
        old = self.crashes
        self.crashes = [*old, (self.attempt, self.confirmed_list())]
        self.attempt += 1
        try:
            self._write_meta()
        except OutputError:
            self.attempt -= 1
            self.crashes = old
            raise
        return self.attempt

    def confirmed_list(self) -> list[int]:
        """Each writer's confirmed serial by writer number (-1: none)."""
        top = max((w.number for w in self.writers), default=-1)
        return [self._confirmed.get(w, -1) for w in range(top + 1)]

    def crash_rows(self, with_last: bool = False) -> list[list[int]]:
        """The crashes a check of the LUNs must account for, as ``LoadMap.crashes`` rows
        (``[attempt, confirmed serial by writer ...]``): those of the attempts before, and
        with ``with_last`` the last attempt's too (it may have ended in one: a read-back's,
        ``ivypy verify``)."""
        last = [(self.attempt, self.confirmed_list())] if with_last else []
        return [[a, *c] for a, c in (*self.crashes, *last)]

    def _write_meta(self) -> None:
        doc = {"format": FORMAT, "map_block_bytes": MAP_BLOCK_BYTES, "run_key": self.run_key,
               "attempt": self.attempt, "luns": [asdict(x) for x in self.luns],
               "writers": [asdict(w) for w in self.writers],
               "crashes": [{"attempt": a, "confirmed": c} for a, c in self.crashes]}
        _replace_files([(self._dir / MAP_JSON, memoryview(_json_bytes(doc)))])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> VerifyMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def lun(self, number: int) -> MapLun:
        """The map's LUN of ``number``."""
        try:
            return self.luns[self._by_number[number]]
        except KeyError:
            raise KeyError(f"LUN {number} is not in the map") from None

    def map_of(self, lun: int) -> npt.NDArray[np.uint8]:
        """LUN ``lun``'s map (its number), a read-only view: block i's map byte at i."""
        try:
            i = self._by_number[lun]
        except KeyError:
            raise KeyError(f"LUN {lun} is not in the map") from None
        view = self._map[self._base[i]:self._base[i + 1]]
        view.flags.writeable = False
        return view

    def written_blocks(self, lun: int) -> npt.NDArray[np.int64]:
        """The blocks of LUN ``lun`` with a generation (written by this run), ascending."""
        return np.flatnonzero(self.map_of(lun) & GEN_MASK).astype(np.int64)

    @property
    def confirmed(self) -> dict[int, int]:
        """Each writer's confirmed serial (a copy): writers without one are absent."""
        return dict(self._confirmed)

    @property
    def folder(self) -> Path:
        return self._dir


# ---------------------------------------------------------------------- helpers
def _unique(what: str, numbers: list[int]) -> None:
    seen: set[int] = set()
    for n in numbers:
        if n in seen:
            raise ValueError(f"{what} {n} is in the map twice")
        seen.add(n)


def _records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The complete records of a journal's bytes with their offsets, up to the first that is
    not (torn, or garbled)."""
    at = 0
    head, crc = _RECORD_HEAD.size, _CRC.size
    while at + head <= len(data):
        magic, size = _RECORD_HEAD.unpack_from(data, at)
        end = at + head + size + crc
        if magic != MAGIC or end > len(data):
            return
        payload = data[at + head:at + head + size]
        if _CRC.unpack_from(data, end - crc)[0] != zlib.crc32(payload):
            return
        yield at, payload
        at = end


def _json_bytes(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise VerifyMapError("missing: no verification map here", path=path) from None
    except OSError as exc:
        raise VerifyMapError(f"cannot be read: {exc.strerror or exc}", path=path) from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise VerifyMapError(f"not JSON ({exc})", path=path) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise VerifyMapError(f"not a verification map's file of format {FORMAT}", path=path)
    return doc


def _from_meta(folder: Path, journal_limit_bytes: int) -> VerifyMap:
    path = folder / MAP_JSON
    doc = _read_json(path)
    where = ""
    try:
        if _typed(doc, "map_block_bytes", int) != MAP_BLOCK_BYTES:
            raise ValueError(f"map_block_bytes is {doc['map_block_bytes']}, not "
                             f"{MAP_BLOCK_BYTES}")
        run_key, attempt = _typed(doc, "run_key", int), _typed(doc, "attempt", int)
        luns, writers = [], []
        for i, x in enumerate(_typed(doc, "luns", list)):
            where = f"luns[{i}]: "
            also = x.get("also", []) if isinstance(x, dict) else []
            if not isinstance(also, list) or not all(
                    isinstance(a, list) and len(a) == 2 and all(isinstance(t, str) for t in a)
                    for a in also):
                raise TypeError(f"also is {also!r:.60}, not a list of [host, path]")
            identity = x.get("identity", "") if isinstance(x, dict) else ""
            if not isinstance(identity, str):
                raise TypeError(f"identity is {identity!r:.60}, not str")
            luns.append(MapLun(**{f: _typed(x, f, t) for f, t in _LUN_FIELDS.items()},
                               identity=identity, also=tuple((a[0], a[1]) for a in also)))
        for i, x in enumerate(_typed(doc, "writers", list)):
            where = f"writers[{i}]: "
            writers.append(MapWriter(**{f: _typed(x, f, t) for f, t in _WRITER_FIELDS.items()}))
        where = ""
        vm = VerifyMap(folder, run_key, attempt, luns, writers, journal_limit_bytes)
        where = "crashes: "
        for c in doc.get("crashes", []):
            serials = _typed(c, "confirmed", list)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in serials):
                raise TypeError(f"confirmed is {serials!r:.60}, not a list of serials")
            vm.crashes.append((_typed(c, "attempt", int), serials))
        return vm
    except (TypeError, ValueError) as exc:
        raise VerifyMapError(f"garbled: {where}{exc}", path=path) from exc


_LUN_FIELDS: Final = {"number": int, "host": str, "lun": str, "first_bytes": int,
                      "size_bytes": int}
_WRITER_FIELDS: Final = {"number": int, "host": str, "workload": str}


def _typed(doc: Any, key: str, kind: type) -> Any:
    """``doc[key]`` when ``doc`` is an object holding a ``kind`` there; else ``TypeError`` or
    ``ValueError`` naming the key."""
    if not isinstance(doc, dict):
        raise TypeError(f"{doc!r:.60} is not an object")
    if key not in doc:
        raise ValueError(f"{key} is missing")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{key} is {value!r:.60}, not {kind.__name__}")
    return value


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_files(files: list[tuple[Path, memoryview]]) -> None:
    """Replace each file whole (``.<name>.tmp`` beside it, fsync, rename), then sync the
    directory once: a kill leaves each file old or new. ``OutputError`` naming the file."""
    if not files:
        return
    path = files[0][0]
    try:
        for path, data in files:
            tmp = path.with_name(f".{path.name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = data.cast("B")
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        for path, _ in files:
            os.replace(path.with_name(f".{path.name}.tmp"), path)
        _sync_dir(path.parent)
    except OSError as exc:
        for other, _ in files:
            with contextlib.suppress(OSError):
                other.with_name(f".{other.name}.tmp").unlink()
        raise OutputError(str(path), exc) from exc
