"""Synthetic disk images for the signature tests: byte pokes at offsets (an ext superblock, MBR
entries, magic numbers) laid into a zeroed buffer."""

from __future__ import annotations

import struct

MIB = 1024 * 1024

Poke = tuple[int, bytes]


def u16(v: int) -> bytes:
    return struct.pack("<H", v)


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def ext_pokes(compat: int, incompat: int, ro_compat: int = 0, log_block: int = 0) -> list[Poke]:
    sb = 1024
    return [(sb + 24, u32(log_block)), (sb + 56, u16(0xEF53)), (sb + 76, u32(1)),
            (sb + 92, u32(compat)), (sb + 96, u32(incompat)), (sb + 100, u32(ro_compat))]


def mbr_entry(index: int, boot: int, ptype: int, start: int, count: int) -> Poke:
    return (446 + 16 * index, struct.pack("<B3sB3sII", boot, b"\0" * 3, ptype, b"\0" * 3,
                                          start, count))


IMAGE_BYTES = 4 * MIB
MD_V10_OFFSET = ((IMAGE_BYTES // 512 - 16) & ~7) * 512
MD_V090_OFFSET = (IMAGE_BYTES & ~65535) - 65536
MBR_MAGIC: Poke = (510, b"\x55\xaa")

def image_bytes(pokes: list[Poke], size_bytes: int = IMAGE_BYTES) -> bytearray:
    buf = bytearray(size_bytes)
    for offset, data in pokes:
        buf[offset : offset + len(data)] = data
    return buf
