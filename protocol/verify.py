"""Data verification's contract: the stamp every verified sector carries, the byte the map
keeps per block, and the classes of damage, with a numpy reference of stamping and checking.

Owns the stamp's layout (``STAMP_DTYPE``, the first ``STAMP_BYTES`` of every 512-byte sector a
verified write puts down), the map's block and its byte (``MAP_BLOCK_BYTES``, ``gen_of``,
``next_gen``, ``accepted``), the class names and codes (``CLASSES``), CRC-32C
(``crc32c_sectors``), and the reference ``stamp`` / ``check_blocks`` that the compiled loop
(``slave/engine/ivy_loop.c``: ``verify_stamp``, ``verify_check``) must match byte for byte and
class for class. Pure numpy: no I/O, clocks or threads. docs/verify.md tells the design.

A stamp (little-endian), at the head of each 512-byte sector::

    0   u64  offset_bytes   the sector's own byte offset on the LUN
    8   u64  serial         the writing I/O's serial in its workload (``slave.datapattern``)
    16  u32  run_key        the run's verification key (a sector of another run fails it)
    20  u16  lun            the LUN's number in the run's map
    22  u16  writer         the writing workload's number in the run's map
    24  u8   gen            the block's write generation, 1-127
    25  u8   attempt        the run's attempt (0; one more at each ``--resume``)
    26  u16  0
    28  u32  crc            CRC-32C of the sector's other 508 bytes: [0, 28) then [32, 512)

The first 16 bytes are what every write pattern already stamps (offset, serial); the rest of
the sector keeps the pattern's bytes, so a pattern keeps its meaning outside the 32 bytes.

The map keeps one byte per ``MAP_BLOCK_BYTES`` block: its generation (bits 0-6; 0: never
written) and ``UNSETTLED`` (bit 7): the generation before it is accepted too (two writes of
the block were in flight at once, or one was at a crash: which landed last is not known).

A block read back is, by the first that holds of its sectors: ``corrupt`` (a sector of this
run's key whose CRC fails), ``misplaced`` (a valid stamp of another LUN or offset),
``missing`` (a sector without this run's key: zeros, someone else's data); else, when some
sector's generation is not one the map accepts, ``torn`` (valid sectors of different
generations) or ``stale`` (valid, of one older generation); else it is clean.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

SECTOR_BYTES: Final = 512
STAMP_BYTES: Final = 32
MAP_BLOCK_BYTES: Final = 4096
SECTORS_PER_BLOCK: Final = MAP_BLOCK_BYTES // SECTOR_BYTES
GEN_MASK: Final = 0x7F
GEN_MAX: Final = 127
UNSETTLED: Final = 0x80

STAMP_DTYPE: Final = np.dtype([
    ("offset_bytes", "<u8"), ("serial", "<u8"), ("run_key", "<u4"), ("lun", "<u2"),
    ("writer", "<u2"), ("gen", "u1"), ("attempt", "u1"), ("zero", "<u2"), ("crc", "<u4")])
assert STAMP_DTYPE.itemsize == STAMP_BYTES

#: a block's verdict: 0 clean, then the classes of damage by name (the order of precedence
#: is ``PRECEDENCE``'s); the compiled loop uses the same numbers
CLEAN: Final = 0
CLASSES: Final = ("corrupt", "misplaced", "stale", "torn", "missing")
CODES: Final = {name: i + 1 for i, name in enumerate(CLASSES)}
#: which class a block gets when its sectors show several: the first here
PRECEDENCE: Final = ("corrupt", "misplaced", "missing", "torn", "stale")

_POLY: Final = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _crc_table() -> npt.NDArray[np.uint32]:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> np.uint32(1)) ^ np.uint32(_POLY), t >> np.uint32(1))
    return t.astype(np.uint32)


_TABLE: Final = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (init and final xor all ones: ``crc32c(b"123456789")`` is
    ``0xE3069283``)."""
    return int(crc32c_rows(np.frombuffer(data, dtype=np.uint8)[None, :])[0])


def crc32c_rows(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """CRC-32C of each row of a 2-D uint8 array, one byte column at a time over all rows."""
    c = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        c = _TABLE[(c ^ rows[:, j]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return c ^ np.uint32(0xFFFFFFFF)


def crc32c_sectors(sectors: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """The stamp's CRC of each 512-byte sector (rows of ``sectors``): of its bytes [0, 28) and
    [32, 512), the CRC field itself left out."""
    return crc32c_rows(np.concatenate([sectors[:, :28], sectors[:, STAMP_BYTES:]], axis=1))


def gen_of(map_byte: int) -> int:
    """The generation a map byte holds (0: never written)."""
    return map_byte & GEN_MASK


def next_gen(gen: int) -> int:
    """The generation a block's next write takes: 1 after 0 and after 127, else one more."""
    return gen % GEN_MAX + 1


def prev_gen(gen: int) -> int:
    """The generation before ``gen`` (1-127): 127 before 1."""
    return (gen - 2) % GEN_MAX + 1


def accepted(map_byte: int) -> tuple[int, ...]:
    """The generations a block whose map byte is ``map_byte`` may hold when read: its own, and
    the one before when ``UNSETTLED``; none for a block never written."""
    gen = gen_of(map_byte)
    if gen == 0:
        return ()
    return (gen, prev_gen(gen)) if map_byte & UNSETTLED else (gen,)


def stamp(buffer: npt.NDArray[np.uint8], offset_bytes: int, serial: int, gens: list[int],
          run_key: int, lun: int, writer: int, attempt: int) -> None:
    """Stamp a write's data in place: ``buffer`` holds the write (a whole number of map
    blocks) at ``offset_bytes`` on the LUN, ``gens`` each of its map blocks' generation."""
    n = buffer.size // SECTOR_BYTES
    if buffer.size % MAP_BLOCK_BYTES or len(gens) != n // SECTORS_PER_BLOCK:
        raise ValueError(f"a write of {buffer.size} bytes with {len(gens)} generations")
    sectors = buffer.reshape(n, SECTOR_BYTES)
    heads = sectors[:, :STAMP_BYTES].copy().view(STAMP_DTYPE).reshape(n)
    heads["offset_bytes"] = offset_bytes + SECTOR_BYTES * np.arange(n, dtype=np.uint64)
    heads["serial"] = serial
    heads["run_key"] = run_key
    heads["lun"] = lun
    heads["writer"] = writer
    heads["gen"] = np.repeat(np.asarray(gens, dtype=np.uint8), SECTORS_PER_BLOCK)
    heads["attempt"] = attempt
    heads["zero"] = 0
    sectors[:, :STAMP_BYTES] = heads.view(np.uint8).reshape(n, STAMP_BYTES)
    heads["crc"] = crc32c_sectors(sectors)
    sectors[:, :STAMP_BYTES] = heads.view(np.uint8).reshape(n, STAMP_BYTES)


def decode(sectors: npt.NDArray[np.uint8]) -> npt.NDArray[np.void]:
    """The stamps at the heads of ``sectors`` (rows of 512 bytes), as ``STAMP_DTYPE``."""
    return sectors[:, :STAMP_BYTES].copy().view(STAMP_DTYPE).reshape(sectors.shape[0])


def check_blocks(data: npt.NDArray[np.uint8], offset_bytes: int, map_bytes: list[int],
                 run_key: int, lun: int) -> list[int]:
    """The verdict (``CLEAN`` or a class's code) of each map block of ``data``, read from
    ``offset_bytes`` on the LUN, against its map byte; a block never written is ``CLEAN``
    (nothing is expected of it)."""
    n = data.size // SECTOR_BYTES
    sectors = data.reshape(n, SECTOR_BYTES)
    heads = decode(sectors)
    crc_ok = heads["crc"] == crc32c_sectors(sectors)
    key_ok = heads["run_key"] == run_key
    place_ok = (heads["lun"] == lun) & (
        heads["offset_bytes"] == offset_bytes + SECTOR_BYTES * np.arange(n, dtype=np.uint64))
    out = []
    for b, map_byte in enumerate(map_bytes):
        s = slice(b * SECTORS_PER_BLOCK, (b + 1) * SECTORS_PER_BLOCK)
        out.append(classify(key_ok[s], crc_ok[s], place_ok[s], heads["gen"][s], map_byte))
    return out


def classify(key_ok: npt.NDArray[np.bool_], crc_ok: npt.NDArray[np.bool_],
             place_ok: npt.NDArray[np.bool_], gens: npt.NDArray[np.uint8],
             map_byte: int) -> int:
    """One map block's verdict from its sectors' stamps: whether each has this run's key, a
    CRC that holds and this LUN and offset, and its generation."""
    if gen_of(map_byte) == 0:
        return CLEAN
    if (key_ok & ~crc_ok).any():
        return CODES["corrupt"]
    valid = key_ok & crc_ok
    if (valid & ~place_ok).any():
        return CODES["misplaced"]
    if not valid.all():
        return CODES["missing"]
    ok = accepted(map_byte)
    if all(int(g) in ok for g in gens):  # an unsettled block: either write, or both in part
        return CLEAN
    return CODES["torn"] if (gens != gens[0]).any() else CODES["stale"]


# ---------------------------------------------------------------------------- on the wire
#: a verified workload's target (``CreateWorkload.verify``): its LUN's number in the run's
#: map and the map's range on it, the run's key and attempt, the workload's writer number
TARGET_KEYS: Final = ("lun", "first_bytes", "size_bytes", "run_key", "attempt", "writer")
_TARGET_RANGES: Final = {"lun": 1 << 16, "run_key": 1 << 32, "attempt": 256, "writer": 1 << 16,
                         "first_bytes": 1 << 62, "size_bytes": 1 << 62}
#: a report's per-workload counts (``SubintervalResult.verify["counts"]``): blocks checked,
#: then each class's damaged blocks in ``CLASSES``' order
COUNT_NAMES: Final = ("checked", *CLASSES)


def check_target(target: dict[str, int]) -> dict[str, int]:
    """``target`` if it is a whole verification target (every key of ``TARGET_KEYS``, each an
    int in its range, the range whole map blocks); else ``ValueError`` naming the key."""
    if set(target) != set(TARGET_KEYS):
        raise ValueError(f"verify: keys {sorted(target)}, expected {list(TARGET_KEYS)}")
    for key in TARGET_KEYS:
        value = target[key]
        if type(value) is not int or not 0 <= value < _TARGET_RANGES[key]:
            raise ValueError(f"verify.{key}: {value!r} is not an integer in "
                             f"0..{_TARGET_RANGES[key] - 1}")
    for key in ("first_bytes", "size_bytes"):
        if target[key] % MAP_BLOCK_BYTES:
            raise ValueError(f"verify.{key}: {target[key]} is not a multiple of "
                             f"{MAP_BLOCK_BYTES}")
    if target["size_bytes"] == 0:
        raise ValueError("verify.size_bytes: 0 (an empty map)")
    return target


def journal_to_wire(luns: npt.NDArray[np.int64], blocks: npt.NDArray[np.int64],
                    map_bytes: npt.NDArray[np.uint8]) -> dict[str, bytes]:
    """The blocks a host's writes settled, as little-endian arrays' bytes."""
    return {"luns": luns.astype("<u2").tobytes(), "blocks": blocks.astype("<u8").tobytes(),
            "map_bytes": map_bytes.astype(np.uint8).tobytes()}


def journal_from_wire(wire: dict[str, bytes]) -> tuple[npt.NDArray[np.int64],
                                                       npt.NDArray[np.int64],
                                                       npt.NDArray[np.uint8]]:
    """``journal_to_wire``'s arrays back; ``ValueError`` when their lengths disagree."""
    luns = np.frombuffer(wire["luns"], dtype="<u2").astype(np.int64)
    blocks = np.frombuffer(wire["blocks"], dtype="<u8").astype(np.int64)
    map_bytes = np.frombuffer(wire["map_bytes"], dtype=np.uint8).copy()
    if not luns.size == blocks.size == map_bytes.size:
        raise ValueError(f"verify journal: {luns.size} LUNs, {blocks.size} blocks, "
                         f"{map_bytes.size} map bytes")
    return luns, blocks, map_bytes


# --------------------------------------------------------------------------- read-back extents
#: a damaged extent of a read-back (``VerifyFound.extents``, ``ivypy verify``'s verify.csv
#: rows): consecutive damaged blocks of one class whose expected map byte, found stamp (its
#: generation, attempt, LUN, writer, and offset as far from its place as the first's) and
#: stamp state agree. ``stamp``: ``STAMP_NONE`` no stamp of this run (its found fields mean
#: nothing), ``STAMP_VALID`` one whose CRC holds, ``STAMP_BAD_CRC`` one whose CRC fails (the
#: first sector out of line's). Little-endian on the wire.
EXTENT_DTYPE: Final = np.dtype([
    ("offset_bytes", "<u8"), ("length_bytes", "<u8"), ("found_offset_bytes", "<u8"),
    ("found_serial", "<u8"), ("found_lun", "<u2"), ("found_writer", "<u2"), ("cls", "u1"),
    ("expected", "u1"), ("found_gen", "u1"), ("found_attempt", "u1"), ("stamp", "u1"),
    ("pad", "V7")])
STAMP_NONE: Final = 0
STAMP_VALID: Final = 1
STAMP_BAD_CRC: Final = 2


def extents(offsets: npt.NDArray[np.int64], cls: npt.NDArray[np.int64],
            expected: npt.NDArray[np.int64], stamp_state: npt.NDArray[np.int64],
            found_offsets: npt.NDArray[np.int64], found_serials: npt.NDArray[np.int64],
            found_luns: npt.NDArray[np.int64], found_writers: npt.NDArray[np.int64],
            found_gens: npt.NDArray[np.int64], found_attempts: npt.NDArray[np.int64]
            ) -> npt.NDArray[np.void]:
    """Damaged blocks (ascending ``offsets``, one ``MAP_BLOCK_BYTES`` block each) as
    ``EXTENT_DTYPE`` extents: a block joins the extent before it where it follows it on the
    LUN and agrees with it in class, expected map byte, stamp state and, where it has a stamp,
    the stamp's generation, attempt, LUN, writer and displacement (found offset minus offset).
    An extent keeps its first block's serial."""
    n = offsets.size
    out = np.zeros(n, dtype=EXTENT_DTYPE)
    if n == 0:
        return out
    has = stamp_state != STAMP_NONE
    shift = np.where(has, found_offsets.astype(np.int64) - offsets, 0)
    keys = [cls, expected, stamp_state, np.where(has, found_gens, 0),
            np.where(has, found_attempts, 0), np.where(has, found_luns, 0),
            np.where(has, found_writers, 0), shift]
    joins = np.ones(n, dtype=bool)
    joins[0] = False
    joins[1:] &= offsets[1:] == offsets[:-1] + MAP_BLOCK_BYTES
    for k in keys:
        joins[1:] &= k[1:] == k[:-1]
    starts = np.flatnonzero(~joins)
    ends = np.append(starts[1:], n)
    out = np.zeros(starts.size, dtype=EXTENT_DTYPE)
    out["offset_bytes"] = offsets[starts]
    out["length_bytes"] = (ends - starts) * MAP_BLOCK_BYTES
    out["cls"], out["expected"], out["stamp"] = cls[starts], expected[starts], stamp_state[starts]
    for name, values in (("found_offset_bytes", found_offsets), ("found_serial", found_serials),
                         ("found_lun", found_luns), ("found_writer", found_writers),
                         ("found_gen", found_gens), ("found_attempt", found_attempts)):
        out[name] = np.where(has[starts], values[starts], 0)
    return out


def merge_extents(a: npt.NDArray[np.void], b: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    """``a`` then ``b`` (each coalesced, ``b`` after ``a`` on the LUN), with ``b``'s first
    extent joined to ``a``'s last where ``extents`` would have joined them."""
    if a.size and b.size:
        x, y = a[-1], b[0]
        same = all(x[k] == y[k] for k in ("cls", "expected", "stamp", "found_gen",
                                          "found_attempt", "found_lun", "found_writer"))
        shift_x = int(x["found_offset_bytes"]) - int(x["offset_bytes"])
        shift_y = int(y["found_offset_bytes"]) - int(y["offset_bytes"])
        if (same and int(x["offset_bytes"]) + int(x["length_bytes"]) == int(y["offset_bytes"])
                and (x["stamp"] == STAMP_NONE or shift_x == shift_y)):
            a = a.copy()
            a[-1]["length_bytes"] += y["length_bytes"]
            b = b[1:]
    return np.concatenate([a, b])


def extents_from_wire(data: bytes) -> npt.NDArray[np.void]:
    """``EXTENT_DTYPE`` extents from their bytes; ``ValueError`` for a length not whole
    extents or a class out of range."""
    if len(data) % EXTENT_DTYPE.itemsize:
        raise ValueError(f"verify extents: {len(data)} bytes, not whole "
                         f"{EXTENT_DTYPE.itemsize}-byte extents")
    out = np.frombuffer(data, dtype=EXTENT_DTYPE)
    if out.size and (int(out["cls"].min()) < 1 or int(out["cls"].max()) > len(CLASSES)
                     or int(out["stamp"].max()) > STAMP_BAD_CRC):
        raise ValueError("verify extents: a class or stamp state out of range")
    return out
