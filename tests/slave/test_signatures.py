"""Tests for slave/signatures.py: our own signature probe on synthetic images (tables; the sparse
ones far from the start also checked against blkid), against real mkfs-style tools and blkid, and
blkid as a second opinion."""

from __future__ import annotations

import functools
import os
import random
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slave.luns import file_lun
from slave.signatures import HEAD_BYTES, blkid_signatures, detect_signature, probe_path
from tests.slave.sigimages import (
    IMAGE_BYTES,
    MBR_MAGIC,
    MD_V090_OFFSET,
    MD_V10_OFFSET,
    Poke,
    ext_pokes,
    image_bytes,
    mbr_entry,
    u16,
    u32,
)

MIB = 1024 * 1024

SIGNATURE_CASES: list[tuple[str, list[Poke], int, str]] = [
    # (case id, pokes, logical block bytes, expected)
    ("zeros", [], 512, ""),
    ("ext2", ext_pokes(compat=0, incompat=0x2), 512, "ext2"),
    ("ext3", ext_pokes(compat=0x4, incompat=0x2), 512, "ext3"),
    ("ext4", ext_pokes(compat=0x4, incompat=0x2 | 0x40 | 0x200), 512, "ext4"),
    ("ext4 without journal", ext_pokes(compat=0, incompat=0x40), 512, "ext4"),
    ("ext4 by ro_compat", ext_pokes(compat=0x4, incompat=0x2, ro_compat=0x400), 512, "ext4"),
    ("ext journal device", ext_pokes(compat=0, incompat=0x8), 512, "jbd"),
    ("stray 0xEF53", ext_pokes(compat=0, incompat=0, log_block=99), 512, ""),
    ("xfs", [(0, b"XFSB")], 512, "xfs"),
    ("btrfs", [(65600, b"_BHRfS_M")], 512, "btrfs"),
    ("LVM2 in sector 1", [(512, b"LABELONE"), (536, b"LVM2 001")], 512, "LVM2_member"),
    ("LVM2 in sector 0", [(0, b"LABELONE"), (24, b"LVM2 001")], 512, "LVM2_member"),
    ("LABELONE without LVM2", [(512, b"LABELONE")], 512, ""),
    ("md v1.1", [(0, u32(0xA92B4EFC) + u32(1))], 512, "linux_raid_member"),
    ("md v1.2", [(4096, u32(0xA92B4EFC) + u32(1))], 512, "linux_raid_member"),
    ("md v1.0 at the end", [(MD_V10_OFFSET, u32(0xA92B4EFC) + u32(1))], 512,
     "linux_raid_member"),
    ("md v0.90 at the end", [(MD_V090_OFFSET, u32(0xA92B4EFC) + u32(0))], 512,
     "linux_raid_member"),
    ("md v1.0 member wins over its ext4",
     [*ext_pokes(compat=0x4, incompat=0x40), (MD_V10_OFFSET, u32(0xA92B4EFC) + u32(1))], 512,
     "linux_raid_member"),
    ("md magic, wrong version", [(4096, u32(0xA92B4EFC) + u32(7))], 512, ""),
    ("swap, 4 KiB pages", [(4086, b"SWAPSPACE2")], 512, "swap"),
    ("swap, 64 KiB pages", [(65526, b"SWAPSPACE2")], 512, "swap"),
    ("old swap", [(4086, b"SWAP-SPACE")], 512, "swap"),
    ("LUKS", [(0, b"LUKS\xba\xbe")], 512, "crypto_LUKS"),
    ("bcache", [(4096 + 24, bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81"))], 512, "bcache"),
    ("iso9660", [(32769, b"CD001")], 512, "iso9660"),
    ("squashfs", [(0, b"hsqs")], 512, "squashfs"),
    ("ntfs", [(3, b"NTFS    "), MBR_MAGIC], 512, "ntfs"),
    ("exfat", [(3, b"EXFAT   "), MBR_MAGIC], 512, "exfat"),
    ("vfat 32", [(82, b"FAT32   "), MBR_MAGIC], 512, "vfat"),
    ("vfat 16", [(54, b"FAT16   "), MBR_MAGIC], 512, "vfat"),
    ("dos", [mbr_entry(0, 0x80, 0x83, 2048, 8192), MBR_MAGIC], 512, "dos"),
    ("dos, second entry", [mbr_entry(1, 0, 0x8E, 2048, 8192), MBR_MAGIC], 512, "dos"),
    ("0x55AA, no entries", [MBR_MAGIC], 512, ""),
    ("0x55AA, bad boot flag", [mbr_entry(0, 0x13, 0x83, 2048, 8192), MBR_MAGIC], 512, ""),
    ("0x55AA, entry of length 0", [mbr_entry(0, 0, 0x83, 2048, 0), MBR_MAGIC], 512, ""),
    ("gpt, 512-byte sectors",
     [mbr_entry(0, 0, 0xEE, 1, 8191), MBR_MAGIC, (512, b"EFI PART")], 512, "gpt"),
    ("gpt, 4 KiB sectors", [(4096, b"EFI PART")], 4096, "gpt"),
    ("protective MBR, no GPT header", [mbr_entry(0, 0, 0xEE, 1, 8191), MBR_MAGIC], 512, "PMBR"),
    ("protective MBR, backup GPT only",
     [mbr_entry(0, 0, 0xEE, 1, 8191), MBR_MAGIC, (IMAGE_BYTES - 512, b"EFI PART")], 512, "gpt"),
    ("backup GPT only, first MiB zeroed", [(IMAGE_BYTES - 512, b"EFI PART")], 512,
     "gpt (backup header only)"),
    ("backup GPT only, 4 KiB sectors", [(IMAGE_BYTES - 4096, b"EFI PART")], 4096,
     "gpt (backup header only)"),
    ("dos MBR wins over a stale backup GPT",
     [mbr_entry(0, 0x80, 0x83, 2048, 8192), MBR_MAGIC, (IMAGE_BYTES - 512, b"EFI PART")], 512,
     "dos"),
    # files a typo in a test's file: would hit (blkid knows none of them)
    ("sqlite", [(0, b"SQLite format 3\x00")], 512, "sqlite3"),
    ("sqlite magic not at 0", [(512, b"SQLite format 3\x00")], 512, ""),
    ("qcow2 v3", [(0, b"QFI\xfb" + struct.pack(">I", 3))], 512, "qcow2"),
    ("qcow2 v2", [(0, b"QFI\xfb" + struct.pack(">I", 2))], 512, "qcow2"),
    ("qcow v1", [(0, b"QFI\xfb" + struct.pack(">I", 1))], 512, "qcow"),
    ("vmdk sparse extent", [(0, b"KDMV")], 512, "vmdk"),
    ("vmdk descriptor", [(0, b"# Disk DescriptorFile\nversion=1\n")], 512, "vmdk"),
    ("vhdx", [(0, b"vhdxfile")], 512, "vhdx"),
    ("vhd", [(0, b"conectix")], 512, "vhd"),
    ("vdi", [(0, b"<<< Oracle VM VirtualBox Disk Image >>>\n"), (64, u32(0xBEDA107F))], 512,
     "vdi"),
    ("an ext4 file system wins over file formats", [*ext_pokes(compat=0x4, incompat=0x40),
                                                     (0, b"conectix")], 512, "ext4"),
]


def _reader(buf: bytes | bytearray) -> Callable[[int, int], bytes]:
    return lambda offset, length: bytes(buf[offset : offset + length])


@pytest.mark.parametrize(
    ("pokes", "logical", "expected"),
    [c[1:] for c in SIGNATURE_CASES],
    ids=[c[0] for c in SIGNATURE_CASES],
)
def test_detect_signature(pokes: list[Poke], logical: int, expected: str) -> None:
    buf = image_bytes(pokes)
    assert detect_signature(_reader(buf), len(buf), logical) == expected


def test_random_data_has_no_signature() -> None:
    rng = random.Random(20240601)
    for _ in range(20):
        buf = rng.randbytes(IMAGE_BYTES // 16)
        assert detect_signature(_reader(buf), len(buf)) == ""


def test_tiny_image_does_not_crash() -> None:
    for size in (0, 1, 511, 1100, 5000):
        assert detect_signature(_reader(bytes(size)), size) == ""


KIB = 1024
# Not a multiple of the 256 KiB ZFS label size, so L2/L3 sit below the unaligned tail.
BIG_BYTES = 64 * MIB + 96 * KIB


@dataclass(frozen=True)
class Sparse:
    """An image of ``size_bytes`` zeros with ``pokes`` laid in, read without building it whole;
    pokes reaching past the end are cut there, as truncating a file cuts them."""

    size_bytes: int
    pokes: tuple[Poke, ...]

    def read_at(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size_bytes)
        if offset < 0 or offset >= end:
            return b""
        buf = bytearray(end - offset)
        for at, data in self.pokes:
            lo, hi = max(at, offset), min(at + len(data), end)
            if lo < hi:
                buf[lo - offset : hi - offset] = data[lo - at : hi - at]
        return bytes(buf)

    def write(self, path: Path) -> None:
        with open(path, "wb") as fh:
            for at, data in self.pokes:
                fh.seek(at)
                fh.write(data)
            fh.truncate(self.size_bytes)


def _crc32_seeded(seed: int, data: bytes) -> int:
    return zlib.crc32(data, seed ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def zfs_pokes(size: int, labels: tuple[int, ...] = (0, 1, 2, 3), per_label: int = 1,
              order: str = "<", value: int = 0x00BAB10C, shift: int = 0) -> list[Poke]:
    """``per_label`` uberblock magics in 4 KiB slots (ashift 12) of each of ``labels``."""
    end = size - size % (256 * KIB)
    starts = (0, 256 * KIB, end - 512 * KIB, end - 256 * KIB)
    magic = struct.pack(order + "Q", value)
    return [(starts[label] + 128 * KIB + (4 + i) * 4 * KIB + shift, magic)
            for label in labels for i in range(per_label)]


def f2fs_pokes(version: tuple[int, int] = (1, 15), checksum: bool = False,
               corrupt: bool = False, at: int = KIB) -> list[Poke]:
    sb = bytearray(0xC80)
    struct.pack_into("<IHHIIII", sb, 0, 0xF2F52010, *version, 9, 3, 12, 9)
    if checksum:
        struct.pack_into("<I", sb, 0x20, 0xC7C)
        struct.pack_into("<I", sb, 0xC7C, _crc32_seeded(0xF2F52010, bytes(sb[:0xC7C])))
    if corrupt:
        sb[0x6C] ^= 0xFF  # a byte of the UUID, under the checksum
    return [(at, bytes(sb))]


def jfs_pokes(bsize: int = 4096, l2bsize: int = 12, l2bfactor: int = 3, pbsize: int = 512,
              l2pbsize: int = 9, at: int = 32 * KIB) -> list[Poke]:
    return [(at, struct.pack("<4sIQIHHIH", b"JFS1", 1, 0, bsize, l2bsize, l2bfactor, pbsize,
                             l2pbsize))]


def reiser_pokes(sb_kib: int = 64, magic: bytes = b"ReIsEr2Fs", magic_at: int = 0x34,
                 blocksize: int = 4096, journal_block: int = 18) -> list[Poke]:
    sb = sb_kib * KIB
    return [(sb + 12, u32(journal_block)), (sb + 44, u16(blocksize)), (sb + magic_at, magic)]


def gfs_pokes(fs_format: int, multihost_format: int, order: str = ">") -> list[Poke]:
    return [(64 * KIB, struct.pack(order + "II", 0x01161970, 1)),
            (64 * KIB + 24, struct.pack(">II", fs_format, multihost_format))]


def nilfs_superblock(size: int, dev_size: int | None = None, corrupt: bool = False) -> bytes:
    sb = bytearray(1024)
    seed, sb_bytes = 0x5EED1234, 280
    struct.pack_into("<IHHHHI", sb, 0, 2, 0, 0x3434, sb_bytes, 0, seed)
    struct.pack_into("<IQQ", sb, 20, 2, 1, size if dev_size is None else dev_size)
    crc = _crc32_seeded(seed, bytes(sb[:16]) + bytes(4) + bytes(sb[20:sb_bytes]))
    struct.pack_into("<I", sb, 16, crc ^ 1 if corrupt else crc)
    return bytes(sb)


def nilfs_backup_at(size: int) -> int:
    return (size // 512 - 8) * 512


_BCACHE_MAGIC = bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81")
_BCACHEFS_MAGIC = bytes.fromhex("c68573f666ce90a9d96a60cf803df7ef")


def bcachefs_pokes(magic: bytes = _BCACHEFS_MAGIC, where: int = 8, dev_idx: int = 0,
                   nr_devices: int = 1, bcache_offset: int = 0) -> list[Poke]:
    sb = 4096
    return [(sb + 8, struct.pack("<Q", bcache_offset)), (sb + 24, magic),
            (sb + 104, struct.pack("<Q", where)), (sb + 122, bytes([dev_idx, nr_devices])),
            (sb + 124, u32(16))]


NILFS_BYTES = 8 * MIB
VMFS_VOLUME = (MIB, u32(0xC001D00D))
VMFS_FS = (2 * MIB, u32(0x2FABF15E))
AMBIVALENT = "blkid -p sees both signatures: ambivalent"

SPARSE_CASES: list[tuple[str, int, list[Poke], str]] = [
    # (case id, image bytes, pokes, expected)
    ("zfs, one uberblock per label", BIG_BYTES, zfs_pokes(BIG_BYTES), "zfs_member"),
    ("zfs, 4 in L0, big-endian pool", BIG_BYTES, zfs_pokes(BIG_BYTES, (0,), 4, ">"),
     "zfs_member"),
    ("zfs, first MiB wiped: 2 each in L2 and L3", BIG_BYTES,
     zfs_pokes(BIG_BYTES, (2, 3), 2), "zfs_member"),
    ("zfs, 256 KiB-aligned size", 64 * MIB, zfs_pokes(64 * MIB), "zfs_member"),
    ("zfs, only 3 uberblocks", BIG_BYTES, zfs_pokes(BIG_BYTES, (0, 1, 2)), ""),
    ("zfs, 4 magics off the 1 KiB slots", BIG_BYTES, zfs_pokes(BIG_BYTES, shift=8), ""),
    ("zfs, 4 magics in the nvlist half of L0", BIG_BYTES,
     [(16 * KIB + i * KIB, data) for i, (_, data) in enumerate(zfs_pokes(BIG_BYTES))], ""),
    # 100 KiB into the arrays of labels placed from the unaligned end: outside the real arrays
    ("zfs, L2/L3 not aligned to 256 KiB", BIG_BYTES,
     [*zfs_pokes(BIG_BYTES, (0, 1)),
      *[(BIG_BYTES - n * 256 * KIB + 128 * KIB + 100 * KIB, u32(0x00BAB10C) + bytes(4))
        for n in (1, 2)]], ""),
    ("zfs, wrong byte in the magic", BIG_BYTES, zfs_pokes(BIG_BYTES, value=0x00BAB10D), ""),
    ("zfs, 4-byte magic in a busy 8-byte word", BIG_BYTES, zfs_pokes(BIG_BYTES, value=0x700BAB10C),
     ""),
    ("zfs, image below 64 MiB", 64 * MIB - KIB, zfs_pokes(64 * MIB - KIB, (0,), 4), ""),
    ("VMFS volume member", 4 * MIB, [VMFS_VOLUME], "VMFS_volume_member"),
    ("VMFS datastore: volume member wins over its VMFS", 4 * MIB, [VMFS_VOLUME, VMFS_FS],
     "VMFS_volume_member"),
    ("VMFS", 4 * MIB, [VMFS_FS], "VMFS"),
    ("VMFS volume magic 512 bytes late", 4 * MIB, [(MIB + 512, VMFS_VOLUME[1])], ""),
    ("VMFS magic big-endian", 4 * MIB, [(2 * MIB, struct.pack(">I", 0x2FABF15E))], ""),
    ("VMFS volume magic cut by the end", MIB + 2, [VMFS_VOLUME], ""),
    ("VMFS magic cut by the end", 2 * MIB + 3, [VMFS_FS], ""),
    ("Oracle ASM disk", 4 * MIB, [(32, b"ORCLDISK")], "oracleasm"),
    ("ASMLib-labelled disk", 4 * MIB, [(32, b"ORCLDISKDATA01")], "oracleasm"),
    ("ORCLDISK at 0", 4 * MIB, [(0, b"ORCLDISK")], ""),
    ("ORCLDISC at 32", 4 * MIB, [(32, b"ORCLDISC")], ""),
    ("ceph bluestore", 4 * MIB, [(0, b"bluestore block device" + u32(1))], "ceph_bluestore"),
    ("bluestore magic at 512", 4 * MIB, [(512, b"bluestore block device")], ""),
    ("bluestore magic one byte short", 4 * MIB, [(0, b"bluestore block devic")], ""),
    ("f2fs", BIG_BYTES, f2fs_pokes(), "f2fs"),
    ("f2fs with superblock checksum", BIG_BYTES, f2fs_pokes(checksum=True), "f2fs"),
    ("f2fs 1.0 (no checksum field)", BIG_BYTES, f2fs_pokes((1, 0), corrupt=True), "f2fs"),
    ("f2fs, checksum does not match", BIG_BYTES, f2fs_pokes(checksum=True, corrupt=True), ""),
    ("f2fs, checksum does not match, copy at 5 KiB", BIG_BYTES,
     [*f2fs_pokes(checksum=True, corrupt=True), *f2fs_pokes(at=5 * KIB)], "f2fs"),
    ("f2fs magic at 0", BIG_BYTES, f2fs_pokes(at=0), ""),
    ("f2fs magic only at 5 KiB", BIG_BYTES, f2fs_pokes(at=5 * KIB), ""),
    ("jfs", 16 * MIB, jfs_pokes(), "jfs"),
    ("jfs, block size not 2^l2bsize", 16 * MIB, jfs_pokes(l2bsize=11), ""),
    ("jfs, l2bfactor inconsistent", 16 * MIB, jfs_pokes(l2bfactor=2), ""),
    ("jfs magic 512 bytes late", 16 * MIB, jfs_pokes(at=32 * KIB + 512), ""),
    ("jfs, image below 16 MiB", 16 * MIB - KIB, jfs_pokes(), ""),
    ("reiserfs 3.6", 4 * MIB, reiser_pokes(), "reiserfs"),
    ("reiserfs 3.5 at 8 KiB", 4 * MIB, reiser_pokes(8, b"ReIsErFs", blocksize=1024), "reiserfs"),
    ("reiserfs with journal relocation (ReIsEr3Fs)", 4 * MIB, reiser_pokes(magic=b"ReIsEr3Fs"),
     "reiserfs"),
    ("reiserfs, superblock inside its journal", 4 * MIB, reiser_pokes(journal_block=4), ""),
    ("reiserfs, block size below 512", 4 * MIB, reiser_pokes(blocksize=256), ""),
    ("reiserfs magic at + 0x30", 4 * MIB, reiser_pokes(magic_at=0x30), ""),
    ("reiserfs, image below 128 KiB", 128 * KIB - 512, reiser_pokes(8, b"ReIsErFs"), ""),
    ("reiser4", 4 * MIB, [(64 * KIB, b"ReIsEr4")], "reiser4"),
    ("ocfs2 at 2 KiB", 14000 * KIB, [(2 * KIB, b"OCFSV2")], "ocfs2"),
    ("ocfs2 at 8 KiB", 14000 * KIB, [(8 * KIB, b"OCFSV2")], "ocfs2"),
    ("OCFSV2 at 3 KiB", 14000 * KIB, [(3 * KIB, b"OCFSV2")], ""),
    ("ocfs2, image below 14000 KiB", 14000 * KIB - 512, [(2 * KIB, b"OCFSV2")], ""),
    ("gfs2 (format 1802, as gfs2-utils writes)", 32 * MIB, gfs_pokes(1802, 1900), "gfs2"),
    ("gfs2 (format 1801)", 32 * MIB, gfs_pokes(1801, 1900), "gfs2"),
    ("gfs", 32 * MIB, gfs_pokes(1309, 1401), "gfs"),
    ("gfs magic, mixed formats", 32 * MIB, gfs_pokes(1309, 1900), ""),
    ("gfs2 magic little-endian", 32 * MIB, gfs_pokes(1802, 1900, "<"), ""),
    ("gfs2, image below 32 MiB", 32 * MIB - KIB, gfs_pokes(1802, 1900), ""),
    ("nilfs2", NILFS_BYTES, [(KIB, nilfs_superblock(NILFS_BYTES))], "nilfs2"),
    ("nilfs2, only the backup superblock", NILFS_BYTES,
     [(nilfs_backup_at(NILFS_BYTES), nilfs_superblock(NILFS_BYTES))], "nilfs2"),
    ("nilfs2, checksum does not match", NILFS_BYTES,
     [(KIB, nilfs_superblock(NILFS_BYTES, corrupt=True))], ""),
    ("nilfs2 on a grown LUN", NILFS_BYTES,
     [(KIB, nilfs_superblock(NILFS_BYTES, dev_size=NILFS_BYTES - MIB))], "nilfs2"),
    ("nilfs2 backup of another size", NILFS_BYTES,
     [(nilfs_backup_at(NILFS_BYTES), nilfs_superblock(NILFS_BYTES, dev_size=NILFS_BYTES - MIB))],
     ""),
    ("nilfs2, image below 1 MiB", MIB - 512, [(KIB, nilfs_superblock(MIB - 512))], ""),
    ("bcachefs", 4 * MIB, bcachefs_pokes(), "bcachefs"),
    ("bcachefs with bcache's magic (early bcachefs)", 4 * MIB, bcachefs_pokes(_BCACHE_MAGIC),
     "bcachefs"),
    ("bcache's magic, bcache's own superblock", 4 * MIB,
     bcachefs_pokes(_BCACHE_MAGIC, bcache_offset=8), "bcache"),
    ("bcachefs, member index beyond the member count", 4 * MIB, bcachefs_pokes(dev_idx=1), ""),
    ("bcachefs, superblock not at sector 8", 4 * MIB, bcachefs_pokes(where=16), ""),
    ("zfs member wins over a stale ext4", BIG_BYTES,
     [*ext_pokes(compat=0x4, incompat=0x40), *zfs_pokes(BIG_BYTES, (2, 3), 2)], "zfs_member"),
    ("ASM disk wins over a stale jfs", 16 * MIB, [(32, b"ORCLDISK"), *jfs_pokes()], "oracleasm"),
]


NEWER_LIBBLKID = "libblkid 2.38 (Debian 12) does not check this; the current one does, as we do"
# case id -> (what blkid may say instead of our answer, why)
BLKID_MAY_SAY: dict[str, tuple[str, str]] = {
    "f2fs, checksum does not match": ("f2fs", NEWER_LIBBLKID),
    "f2fs, checksum does not match, copy at 5 KiB": (
        "", "libblkid does not look at the second superblock; the kernel mounts from it"),
    "nilfs2 on a grown LUN": (
        "", "the current libblkid wants s_dev_size = the device size, also of the primary"),
    "nilfs2 backup of another size": ("nilfs2", NEWER_LIBBLKID),
    "zfs member wins over a stale ext4": ("ambivalent", AMBIVALENT),
    "ASM disk wins over a stale jfs": ("ambivalent", AMBIVALENT),
}


def _sparse(size: int, pokes: list[Poke]) -> Sparse:
    return Sparse(size, tuple(pokes))


def test_case_ids_are_unique_and_blkid_notes_name_cases() -> None:
    ids = [c[0] for c in SPARSE_CASES]
    assert len(set(ids)) == len(ids)
    assert set(BLKID_MAY_SAY) <= set(ids)


@pytest.mark.parametrize(
    ("size", "pokes", "expected"),
    [c[1:4] for c in SPARSE_CASES],
    ids=[c[0] for c in SPARSE_CASES],
)
def test_detect_signature_far_from_the_start(size: int, pokes: list[Poke], expected: str) -> None:
    image = _sparse(size, pokes)
    assert detect_signature(image.read_at, size) == expected


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory in /dev/shm (memory, like the loop-device tests), else ``tmp_path``."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="ivypy-sig-") as name:
            yield Path(name)
    else:
        yield tmp_path


def _blkid_type(path: Path) -> str:
    """blkid's low-level TYPE (or PTTYPE, or ``ambivalent``) for one file, "" for none."""
    out = subprocess.run(["blkid", "-p", "-o", "export", str(path)], capture_output=True,
                         text=True, check=False)
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    found = values.get("TYPE") or values.get("PTTYPE") or ""
    return found or ("ambivalent" if "ambivalent" in out.stderr else "")


@functools.cache
def _blkid_known_types() -> frozenset[str]:
    out = subprocess.run(["blkid", "-k"], capture_output=True, text=True, check=False).stdout
    return frozenset(out.split())


@pytest.mark.parametrize(
    ("case", "size", "pokes", "expected"), SPARSE_CASES, ids=[c[0] for c in SPARSE_CASES]
)
def test_sparse_file_probe_agrees_with_blkid(
    case: str, size: int, pokes: list[Poke], expected: str, shm_dir: Path
) -> None:
    path = shm_dir / "lun.img"
    _sparse(size, pokes).write(path)
    assert os.path.getsize(path) == size
    assert probe_path(str(path), size, 512, exclusive=False) == (expected, "", False)
    if shutil.which("blkid") is None:
        pytest.skip("blkid (util-linux) is not installed: our probe checked alone")
    if expected and expected not in _blkid_known_types():
        pytest.skip(f"this blkid does not know {expected} (blkid -k)")
    instead, _why = BLKID_MAY_SAY.get(case, (expected, ""))
    assert _blkid_type(path) in {expected, instead}


class _CountingReader:
    """Reads from ``image``, keeping ``keep(offset, length)`` bytes of each read, and counts."""

    def __init__(self, image: Sparse, keep: Callable[[int, int], int] | None = None) -> None:
        self.image = image
        self.keep = keep
        self.reads: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        data = self.image.read_at(offset, length)
        return data[: self.keep(offset, length)] if self.keep else data


def test_reads_stay_small() -> None:
    # a blank LUN is the worst case: every check reads, and all four ZFS labels are looked at
    blank = _CountingReader(_sparse(BIG_BYTES, []))
    assert detect_signature(blank, BIG_BYTES) == ""
    assert max(length for _, length in blank.reads) == 128 * KIB
    assert sum(length for _, length in blank.reads) <= HEAD_BYTES + 4 * 128 * KIB + 4 * KIB
    # a healthy ZFS member: one uberblock array (L0) is enough
    zfs = _CountingReader(_sparse(BIG_BYTES, zfs_pokes(BIG_BYTES, (0,), 4)))
    assert detect_signature(zfs, BIG_BYTES) == "zfs_member"
    assert sum(length for _, length in zfs.reads) <= HEAD_BYTES + 128 * KIB + 64


@pytest.mark.parametrize(
    ("size", "pokes", "expected"),
    [c[1:4] for c in SPARSE_CASES if c[3]],
    ids=[c[0] for c in SPARSE_CASES if c[3]],
)
def test_short_reads_mean_no_signature(size: int, pokes: list[Poke], expected: str) -> None:
    # a device that returns half of what is asked, or nothing past its first MiB, never makes
    # the probe raise; evidence it could not read is not reported
    image = _sparse(size, pokes)
    halves = _CountingReader(image, keep=lambda _offset, length: length // 2)
    assert isinstance(detect_signature(halves, size), str)
    cut = _CountingReader(image, keep=lambda offset, length: max(0, min(length, MIB - offset)))
    found = detect_signature(cut, size)
    if all(offset + len(data) <= MIB for offset, data in pokes):
        assert found == expected
    else:
        assert found != expected


def test_zfs_label_read_short_counts_none() -> None:
    image = _sparse(BIG_BYTES, zfs_pokes(BIG_BYTES))
    assert detect_signature(image.read_at, BIG_BYTES) == "zfs_member"
    short = _CountingReader(image, keep=lambda offset, length: length - 1)
    assert detect_signature(short, BIG_BYTES) == ""


def test_zfs_member_wiped_by_wipefs_is_blank(shm_dir: Path) -> None:
    # wipefs -a erases uberblock magics one by one until blkid sees fewer than 4: ours must
    # agree that the LUN is then blank, or a lab could never clear it
    if shutil.which("wipefs") is None:
        pytest.skip("needs wipefs (util-linux)")
    path = shm_dir / "zfs.img"
    _sparse(BIG_BYTES, zfs_pokes(BIG_BYTES, per_label=2)).write(path)
    assert probe_path(str(path), BIG_BYTES, 512, exclusive=False)[0] == "zfs_member"
    subprocess.run(["wipefs", "-a", str(path)], check=True, capture_output=True, timeout=60)
    assert probe_path(str(path), BIG_BYTES, 512, exclusive=False)[0] == ""


REAL_TOOL_CASES: list[tuple[str, list[str], int, str, str]] = [
    # (case id, mkfs argv before the image path, image bytes, expected, Debian package)
    ("ext2", ["mkfs.ext2", "-q", "-F"], 16 * MIB, "ext2", "e2fsprogs"),
    ("ext3", ["mkfs.ext3", "-q", "-F"], 16 * MIB, "ext3", "e2fsprogs"),
    ("ext4", ["mkfs.ext4", "-q", "-F"], 16 * MIB, "ext4", "e2fsprogs"),
    ("swap", ["mkswap"], 16 * MIB, "swap", "util-linux"),
    ("f2fs", ["mkfs.f2fs", "-q", "-f"], 64 * MIB, "f2fs", "f2fs-tools"),
    ("f2fs with superblock checksum", ["mkfs.f2fs", "-q", "-f", "-O", "sb_checksum"], 64 * MIB,
     "f2fs", "f2fs-tools"),
    ("jfs", ["mkfs.jfs", "-q"], 16 * MIB, "jfs", "jfsutils"),
    ("reiserfs", ["mkfs.reiserfs", "-q", "-f", "-f", "-s", "513"], 16 * MIB, "reiserfs",
     "reiserfsprogs"),
    ("nilfs2", ["mkfs.nilfs2", "-q", "-f", "-b", "1024", "-B", "16"], 8 * MIB, "nilfs2",
     "nilfs-tools"),
    ("ocfs2", ["mkfs.ocfs2", "-q", "-F", "-M", "local"], 16 * MIB, "ocfs2", "ocfs2-tools"),
    ("gfs2", ["mkfs.gfs2", "-O", "-p", "lock_nolock", "-j", "1", "-J", "8"], 32 * MIB, "gfs2",
     "gfs2-utils"),
]


@pytest.mark.parametrize(
    ("argv", "size", "expected", "package"),
    [c[1:] for c in REAL_TOOL_CASES],
    ids=[c[0] for c in REAL_TOOL_CASES],
)
def test_signature_of_real_tools_agrees_with_blkid(
    argv: list[str], size: int, expected: str, package: str, shm_dir: Path
) -> None:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"needs {argv[0]} (Debian package {package})")
    image = shm_dir / "fs.img"
    image.write_bytes(b"")
    os.truncate(image, size)
    subprocess.run([*argv, str(image)], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    assert file_lun(str(image), use_blkid=False).signature == expected
    if shutil.which("blkid") is None:
        pytest.skip("blkid (util-linux) is not installed: our probe checked alone")
    assert _blkid_type(image) == expected


def _romfs(path: Path) -> str:
    """An image only blkid recognises (romfs is not in our own probe's list)."""
    buf = bytearray(MIB)
    buf[0:8] = b"-rom1fs-"
    buf[8:12] = MIB.to_bytes(4, "big")
    buf[16:20] = b"test"
    path.write_bytes(bytes(buf))
    return str(path)


def test_blkid_is_a_second_opinion(tmp_path: Path) -> None:
    if shutil.which("blkid") is None:
        pytest.skip("needs blkid")
    first, second = _romfs(tmp_path / "a.img"), _romfs(tmp_path / "b.img")
    blank = tmp_path / "blank.img"
    blank.write_bytes(bytes(MIB))
    assert blkid_signatures([first, str(blank), second]) == {first: "romfs", second: "romfs"}
    assert file_lun(first, use_blkid=False).signature == ""
    assert file_lun(first).signature == "romfs"
    assert file_lun(str(blank)).signature == ""
