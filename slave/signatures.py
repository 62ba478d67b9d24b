"""Signatures on a device: is there a filesystem, LVM, RAID member or partition table on it?

Owns ``detect_signature`` (our own probe of small regions of a device or file: its first 68 KiB,
4 bytes at 1 and 2 MiB, the ZFS uberblock arrays, a few KiB near the end; so the answer does not
depend on which hosts have util-linux), ``probe_path`` (that probe on a path, with the
exclusive-open test of whether someone holds the device), ``blkid_signatures`` / ``BlkidRun``
(blkid as a second opinion where it is installed, run while we probe), and ``probe_paths``
(both on many devices at once, each within ``PROBE_TIMEOUT_S``: a device that does not answer
is reported as not probed, and its probe, stuck in the kernel, is left behind).

Rules: only reads. It never writes to a device, never opens one for writing, and never holds an
exclusive claim longer than one ``open``/``close`` pair (released before the first read). No
read of a device is waited for past ``PROBE_TIMEOUT_S``, nor started while an earlier probe of
that device still waits. Deciding what a signature means for a write is
``slave/preflight.py``'s job; building ``LunInfo`` is ``slave/luns.py``'s.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import shutil
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

SECTOR_BYTES = 512


KIB = 1024
MIB = 1024 * KIB
# 68 KiB: covers btrfs (64 KiB + 64), swap up to 64 KiB pages, iso9660, and the superblocks at
# 64 KiB of gfs/gfs2 (+ 32) and reiserfs (+ 0x34 + 9)
HEAD_BYTES = 69632
_MD_MAGIC = 0xA92B4EFC
_BCACHE_MAGIC = bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81")
_BCACHEFS_MAGIC = bytes.fromhex("c68573f666ce90a9d96a60cf803df7ef")
_EXT_MAGIC = 0xEF53
_BLUESTORE_MAGIC = b"bluestore block device"
_VMFS_VOLUME_MAGIC = struct.pack("<I", 0xC001D00D)  # at 1 MiB
_VMFS_MAGIC = struct.pack("<I", 0x2FABF15E)  # at 2 MiB
# at 32: the ASM disk header's provider string, "ORCLDISK" + the label on ASMLib disks
_ASM_MAGIC = b"ORCLDISK"
_F2FS_MAGIC = struct.pack("<I", 0xF2F52010)
_GFS_MAGIC = struct.pack(">I", 0x01161970)
# ZFS vdev labels: 4 x 256 KiB (two at the start, two in the 256 KiB-aligned end), each with its
# uberblock array in its second half. blkid steps through the array in 1 KiB slots (the real slot
# is 1 KiB << max(ashift - 10, 0), at most 8 KiB, so 1 KiB steps visit every one).
_ZFS_LABEL_BYTES = 256 * KIB
_ZFS_UBERBLOCKS_AT = 128 * KIB
_ZFS_SLOT_BYTES = KIB
_ZFS_UB_MAGICS = (struct.pack("<Q", 0x00BAB10C), struct.pack(">Q", 0x00BAB10C))
_ZFS_WANT = 4
_ZFS_MIN_BYTES = 64 * MIB  # ZFS's SPA_MINDEVSIZE and blkid's minimum
_REISER_MAGICS = (  # (superblock KiB, magic offset in it, magic); the first that matches counts
    (8, 0x34, b"ReIsErFs"), (64, 0x34, b"ReIsEr2Fs"), (64, 0x34, b"ReIsEr3Fs"),
    (64, 0x34, b"ReIsErFs"), (8, 20, b"ReIsErFs"),
)
_NILFS_SB_BYTES = 1024


def _at(buf: bytes, offset: int, magic: bytes) -> bool:
    return buf[offset : offset + len(magic)] == magic


def _u16(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from("<H", buf, offset)[0] if len(buf) >= offset + 2 else None


def _u32(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from("<I", buf, offset)[0] if len(buf) >= offset + 4 else None


def _u64(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from("<Q", buf, offset)[0] if len(buf) >= offset + 8 else None


def _within(
    read_at: Callable[[int, int], bytes], size_bytes: int, offset: int, length: int
) -> bytes:
    """``length`` bytes at ``offset``, or fewer (b"") where the device is too small for them."""
    if offset < 0 or offset + length > size_bytes:
        return b""
    return read_at(offset, length)


def _crc32_seeded(seed: int, data: bytes) -> int:
    """util-linux's ``crc32(seed, ...)`` (CRC-32 without zlib's pre/post inversion), via zlib."""
    return zlib.crc32(data, seed ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def _md_superblock_at(read_at: Callable[[int, int], bytes], offset: int, version: int) -> bool:
    if offset < 0:
        return False
    head = read_at(offset, 8)
    return _u32(head, 0) == _MD_MAGIC and _u32(head, 4) == version


def _md_member(
    head: bytes, read_at: Callable[[int, int], bytes], size_bytes: int
) -> bool:
    # v1.1 at 0, v1.2 at 4 KiB (major_version 1); v1.0 at the end: (sectors - 16) & ~7.
    if _u32(head, 0) == _MD_MAGIC and _u32(head, 4) == 1:
        return True
    if _u32(head, 4096) == _MD_MAGIC and _u32(head, 4100) == 1:
        return True
    sectors = size_bytes // SECTOR_BYTES
    if sectors >= 16 and _md_superblock_at(read_at, ((sectors - 16) & ~7) * SECTOR_BYTES, 1):
        return True
    # v0.90: the 64 KiB-aligned 64 KiB block at the end; major_version 0.
    if size_bytes >= 2 * 65536:
        offset = (size_bytes & ~(65536 - 1)) - 65536
        if _md_superblock_at(read_at, offset, 0):
            return True
    return False


def _ext_type(head: bytes) -> str:
    """ext2 / ext3 / ext4 / jbd from the superblock's feature flags, as blkid names them."""
    sb = 1024
    if _u16(head, sb + 56) != _EXT_MAGIC:
        return ""
    log_block = _u32(head, sb + 24)
    rev_level = _u32(head, sb + 76)
    if log_block is None or log_block > 6 or rev_level is None or rev_level > 1:
        return ""  # a stray 0xEF53 in random data, not a superblock
    compat = _u32(head, sb + 92) or 0
    incompat = _u32(head, sb + 96) or 0
    ro_compat = _u32(head, sb + 100) or 0
    if incompat & 0x8:
        return "jbd"
    beyond_ext3_ro = ro_compat & ~0x7  # SPARSE_SUPER | LARGE_FILE | BTREE_DIR
    if compat & 0x4:  # has_journal
        return "ext4" if (incompat & ~0x16) or beyond_ext3_ro else "ext3"
    return "ext4" if (incompat & ~0x12) or beyond_ext3_ro else "ext2"


def _bcache_type(head: bytes, size_bytes: int) -> str:
    """``bcache`` or ``bcachefs`` from the superblock at 4 KiB (both keep their magic at + 24).

    A bcachefs superblock must pass libblkid's structural checks: where it says it sits (+ 104)
    is sector 8, its member index is below its member count, it fits in 4 KiB, on at least
    128 KiB. We skip libblkid's checksum (crc32c, crc64 or xxhash, chosen by a flag), which
    errs towards reporting. Early bcachefs used bcache's magic: such a superblock counts as
    bcachefs when bcache's own "where I sit" field (+ 8) is not sector 8.
    """
    sb = 4096
    magic = head[sb + 24 : sb + 40]
    if magic not in (_BCACHE_MAGIC, _BCACHEFS_MAGIC):
        return ""
    if size_bytes >= 128 * KIB and _bcachefs_sane(head, sb) and (
        magic == _BCACHEFS_MAGIC or _u64(head, sb + 8) != 8
    ):
        return "bcachefs"
    return "bcache" if magic == _BCACHE_MAGIC else ""


def _bcachefs_sane(head: bytes, sb: int) -> bool:
    if len(head) < sb + 128 or _u64(head, sb + 104) != 8:
        return False
    dev_idx, nr_devices = head[sb + 122], head[sb + 123]
    u64s = _u32(head, sb + 124) or 0
    return nr_devices > 0 and dev_idx < nr_devices and 752 + 8 * u64s <= 4096


def _zfs_member(read_at: Callable[[int, int], bytes], size_bytes: int) -> bool:
    """At least 4 uberblock magics (either byte order) in the uberblock arrays of the 4 labels.

    blkid's rule, label by label (L0, L1, L2, L3), stopping at the 4th find: every sync writes
    the same uberblock into all 4 labels, so a pool that ever synced has at least 4, and a
    healthy one usually has 4 in L0 alone (one 128 KiB read). We do not ask for fewer:
    ``wipefs -a`` clears a ZFS member by erasing uberblock magics one at a time until blkid
    finds fewer than 4 (it leaves 3), so a lower threshold would keep refusing a LUN the lab
    has wiped. A label that cannot be read whole counts none.
    """
    if size_bytes < _ZFS_MIN_BYTES:
        return False
    end = size_bytes - size_bytes % _ZFS_LABEL_BYTES
    array_bytes = _ZFS_LABEL_BYTES - _ZFS_UBERBLOCKS_AT
    found = 0
    for label in (0, _ZFS_LABEL_BYTES, end - 2 * _ZFS_LABEL_BYTES, end - _ZFS_LABEL_BYTES):
        array = read_at(label + _ZFS_UBERBLOCKS_AT, array_bytes)
        if len(array) != array_bytes:
            continue
        found += sum(
            array[slot : slot + 8] in _ZFS_UB_MAGICS
            for slot in range(0, array_bytes, _ZFS_SLOT_BYTES)
        )
        if found >= _ZFS_WANT:
            return True
    return False


def _f2fs(head: bytes) -> bool:
    """f2fs magic at 1 KiB (the first of its two superblocks, the second at 5 KiB).

    From version 1.1 on, a superblock with a checksum offset (0xC7C when mkfs.f2fs enables it,
    0 when not) must match its CRC-32 (seed 0xF2F52010), as newer libblkid checks (2.38 does
    not). Unlike libblkid we also take a first superblock that fails it when the second one
    carries the magic too: the kernel mounts from that copy. The checksum must lie in the head:
    blkid would read anywhere, but no real superblock puts it past its 4 KiB block.
    """
    sb = KIB
    if not _at(head, sb, _F2FS_MAGIC) or len(head) < sb + 0x24:
        return False
    if _at(head, 5 * KIB, _F2FS_MAGIC):
        return True
    if struct.unpack_from("<HH", head, sb + 4) == (1, 0):
        return True  # version 1.0: no checksum field
    csum_at = struct.unpack_from("<I", head, sb + 0x20)[0]
    if csum_at == 0:
        return True
    stored = _u32(head, sb + csum_at)
    return stored == _crc32_seeded(0xF2F52010, head[sb : sb + csum_at])


def _jfs(head: bytes, size_bytes: int) -> bool:
    """``JFS1`` at 32 KiB with consistent block sizes (bsize = 2^l2bsize, pbsize = 2^l2pbsize,
    l2bfactor = l2bsize - l2pbsize), on at least 16 MiB."""
    sb = 32 * KIB
    if size_bytes < 16 * MIB or not _at(head, sb, b"JFS1") or len(head) < sb + 30:
        return False
    bsize, l2bsize, l2bfactor, pbsize, l2pbsize = struct.unpack_from("<IHHIH", head, sb + 16)
    return bool(
        l2bsize < 32 and bsize == 1 << l2bsize and l2pbsize < 32 and pbsize == 1 << l2pbsize
        and l2bsize - l2pbsize == l2bfactor
    )


def _reiser_type(head: bytes, size_bytes: int) -> str:
    """``reiserfs`` (magics at 8 or 64 KiB, block size >= 512, superblock before the journal)
    or ``reiser4`` (``ReIsEr4`` at 64 KiB), on at least 128 KiB."""
    if size_bytes < 128 * KIB:
        return ""
    for sb_kib, magic_at, magic in _REISER_MAGICS:
        sb = sb_kib * KIB
        if _at(head, sb + magic_at, magic):
            blocksize, journal_block = _u16(head, sb + 44), _u32(head, sb + 12)
            if blocksize is None or journal_block is None or blocksize >> 9 == 0:
                return ""
            return "" if sb_kib // (blocksize >> 9) > journal_block // 2 else "reiserfs"
    return "reiser4" if _at(head, 64 * KIB, b"ReIsEr4") else ""


def _gfs_type(head: bytes, size_bytes: int) -> str:
    """gfs / gfs2: magic 0x01161970 (big-endian) at 64 KiB and the superblock's format pair.

    gfs is exactly (1309, 1401). For gfs2, libblkid 2.38 (Debian 12) accepts any 18xx file
    system format with a 19xx multihost format: gfs2-utils now writes 1802, not 1801.
    """
    sb = 64 * KIB
    if size_bytes < 32 * MIB or not _at(head, sb, _GFS_MAGIC) or len(head) < sb + 32:
        return ""
    fs_format, multihost_format = struct.unpack_from(">II", head, sb + 24)
    if (fs_format, multihost_format) == (1309, 1401):
        return "gfs"
    if fs_format // 100 == 18 and multihost_format // 100 == 19:
        return "gfs2"
    return ""


def _nilfs_superblock(sb: bytes, size_bytes: int, *, backup: bool) -> bool:
    """Magic 0x3434 at + 6 and the CRC-32 (seeded at + 12) over the first ``s_bytes`` bytes,
    with the checksum field at + 16 read as zero, as libblkid checks.

    Newer libblkid also wants the file system's device size (at + 32) to equal the device's;
    we ask that of the backup only, whose place is counted from the end (else it may be the
    last partition's), not of the primary: a LUN grown on the array keeps its nilfs2.
    """
    if len(sb) < _NILFS_SB_BYTES or _u16(sb, 6) != 0x3434:
        return False
    if backup and _u64(sb, 32) != size_bytes:
        return False
    sb_bytes, seed, stored = struct.unpack_from("<HxxII", sb, 8)
    if not 20 <= sb_bytes <= _NILFS_SB_BYTES:
        return False
    return _crc32_seeded(seed, sb[:16] + bytes(4) + sb[20:sb_bytes]) == int(stored)


def _nilfs2(head: bytes, read_at: Callable[[int, int], bytes], size_bytes: int) -> bool:
    """A valid nilfs2 superblock at 1 KiB or its backup 8 sectors before the end (>= 1 MiB)."""
    if size_bytes < MIB:
        return False
    if _nilfs_superblock(head[KIB : KIB + _NILFS_SB_BYTES], size_bytes, backup=False):
        return True
    backup = _within(read_at, size_bytes, (size_bytes // SECTOR_BYTES - 8) * SECTOR_BYTES,
                     _NILFS_SB_BYTES)
    return _nilfs_superblock(backup, size_bytes, backup=True)


def _gpt_backup(read_at: Callable[[int, int], bytes], size_bytes: int, logical: int) -> bool:
    """A GPT header in the last logical block (the backup copy), for 512-byte or 4 KiB LBAs."""
    for lba_bytes in dict.fromkeys((logical, 512, 4096)):
        last = (size_bytes // lba_bytes - 1) * lba_bytes
        if last >= lba_bytes and read_at(last, 8) == b"EFI PART":
            return True
    return False


def _partition_table(
    head: bytes, read_at: Callable[[int, int], bytes], size_bytes: int, logical_block_bytes: int
) -> str:
    for lba1 in dict.fromkeys((logical_block_bytes, 512, 4096)):
        if _at(head, lba1, b"EFI PART"):
            return "gpt"
    mbr = _mbr(head)
    if mbr == "dos":
        return mbr
    if _gpt_backup(read_at, size_bytes, logical_block_bytes):
        # The primary header is gone (a wiped first MiB): the partitions behind it may not be.
        return "gpt" if mbr == "PMBR" else "gpt (backup header only)"
    return mbr


def _mbr(head: bytes) -> str:
    """``dos`` for an MBR with valid entries, ``PMBR`` when its only entry is GPT's 0xEE."""
    if not _at(head, 510, b"\x55\xaa"):
        return ""
    types = []
    for i in range(4):
        entry = head[446 + 16 * i : 446 + 16 * (i + 1)]
        if len(entry) < 16 or entry[0] not in (0x00, 0x80):
            return ""
        ptype = entry[4]
        start, count = struct.unpack_from("<II", entry, 8)
        if ptype == 0:
            continue
        if start == 0 or count == 0:
            return ""
        types.append(ptype)
    if not types:
        return ""
    return "PMBR" if types == [0xEE] else "dos"


def detect_signature(
    read_at: Callable[[int, int], bytes], size_bytes: int, logical_block_bytes: int = SECTOR_BYTES
) -> str:
    """Name of the on-disk signature found through ``read_at(offset, length)``, or "" for none.

    Names follow blkid's TYPE / PTTYPE values so the two opinions compare directly. Checked, in
    this order: RAID and volume-manager members first, because a member may show a file system
    signature too, of the file system it holds (md v0.90/v1.0 at offset 0, a VMFS volume its
    VMFS at 2 MiB) or a stale one it did not overwrite; then file systems, swap, partition
    tables:

    - md RAID magic 0xa92b4efc: v1.1 at 0, v1.2 at 4 KiB, v1.0 near the end, v0.90 in the last
      64 KiB-aligned 64 KiB -> ``linux_raid_member``
    - LUKS ``LUKS\\xba\\xbe`` at 0 -> ``crypto_LUKS``; LVM2 ``LABELONE`` + ``LVM2 001`` in one of
      sectors 0-3 (normally 512 + 24 = 536) -> ``LVM2_member``
    - bcache magic at 4096 + 24 -> ``bcache``; bcachefs magic there with a sane superblock (or
      bcache's magic with a bcachefs superblock, as early bcachefs wrote) -> ``bcachefs``
    - Ceph ``bluestore block device`` at 0 -> ``ceph_bluestore``; VMFS volume magic 0xc001d00d
      (LE) at 1 MiB -> ``VMFS_volume_member``; Oracle ASM / ASMLib ``ORCLDISK`` at 32 ->
      ``oracleasm``
    - ZFS: at least 4 uberblock magics 0x00bab10c (8 bytes, either byte order) in 1 KiB steps
      through the uberblock arrays (label + 128 KiB) of labels L0 at 0, L1 at 256 KiB, L2 and L3
      in the last 512 KiB of the 256 KiB-aligned size, on at least 64 MiB -> ``zfs_member``
    - XFS ``XFSB`` at 0; btrfs ``_BHRfS_M`` at 65600; ext2/3/4 magic 0xEF53 at 1080 with a sane
      superblock (the flavour from its feature flags); f2fs 0xF2F52010 (LE) at 1 KiB with its
      checksum from version 1.1, or with the magic again at 5 KiB; JFS ``JFS1`` at 32 KiB with
      consistent block sizes (>= 16 MiB); reiserfs ``ReIsErFs`` / ``ReIsEr2Fs`` / ``ReIsEr3Fs``
      at 8 or 64 KiB + 0x34 (or 8 KiB + 20) with its superblock before its journal, reiser4
      ``ReIsEr4`` at 64 KiB (>= 128 KiB); OCFS2 ``OCFSV2`` at 1, 2, 4 or 8 KiB (>= 14000 KiB);
      gfs / gfs2 0x01161970 (BE) at 64 KiB with their format numbers (>= 32 MiB); nilfs2 with a
      valid superblock at 1 KiB, or 8 sectors before the end for this size (>= 1 MiB); VMFS
      0x2fabf15e (LE) at 2 MiB -> ``VMFS``; squashfs ``hsqs`` at 0; iso9660 ``CD001`` at 32769;
      NTFS / exFAT OEM id at 3; FAT type string at 54 or 82
    - swap ``SWAPSPACE2`` / ``SWAP-SPACE`` at page end - 10 for 4..64 KiB pages
    - partition tables: GPT ``EFI PART`` at LBA 1 -> ``gpt``; MBR 0x55AA at 510 with valid
      entries (boot flag 0 or 0x80, at least one used entry with start and length) -> ``dos``,
      or ``PMBR`` when the only entry is GPT's protective 0xEE; without a primary GPT header,
      a backup header in the last LBA -> ``gpt`` behind a protective MBR, else
      ``gpt (backup header only)`` (a wiped first MiB leaves the partitions behind it intact;
      blkid and the kernel ignore such a table, so ours is the only warning)

    The sizes in brackets are blkid's minimum device sizes for those types; a device too small
    for a layout, or a short read, means "not that signature". Reads are small: 68 KiB at the
    start, 4 bytes at 1 MiB and 2 MiB, up to four 128 KiB ZFS uberblock arrays (one for a
    healthy ZFS member), 1 KiB for the nilfs2 backup and a few 8-byte reads near the end.
    """
    head = read_at(0, HEAD_BYTES)
    return (
        _member_type(head, read_at, size_bytes)
        or _filesystem_type(head, read_at, size_bytes)
        or _swap_type(head)
        or _partition_table(head, read_at, size_bytes, logical_block_bytes)
        or _file_format(head)
    )


def _file_format(head: bytes) -> str:
    """Databases and virtual-disk images, the files a typo in a test's ``file:`` would most
    likely hit (blkid knows none of them): SQLite ``SQLite format 3\0`` at 0 -> ``sqlite3``;
    QEMU ``QFI\xfb`` at 0 -> ``qcow2`` (version 2 or 3) or ``qcow``; VMware sparse extent
    ``KDMV`` at 0 or a descriptor ``# Disk DescriptorFile`` -> ``vmdk``; Hyper-V ``vhdxfile``
    at 0 -> ``vhdx``, ``conectix`` at 0 (a dynamic VHD's footer copy) -> ``vhd``; VirtualBox
    0xbeda107f (LE) at 64 -> ``vdi``."""
    if _at(head, 0, b"SQLite format 3\x00"):
        return "sqlite3"
    if _at(head, 0, b"QFI\xfb"):
        return "qcow2" if _u32_be(head, 4) in (2, 3) else "qcow"
    if _at(head, 0, b"KDMV") or _at(head, 0, b"# Disk DescriptorFile"):
        return "vmdk"
    if _at(head, 0, b"vhdxfile"):
        return "vhdx"
    if _at(head, 0, b"conectix"):
        return "vhd"
    if _at(head, 64, struct.pack("<I", 0xBEDA107F)):
        return "vdi"
    return ""


def _u32_be(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from(">I", buf, offset)[0] if offset + 4 <= len(buf) else None


def _member_type(head: bytes, read_at: Callable[[int, int], bytes], size_bytes: int) -> str:
    """RAID, encryption and volume-manager members, in ``detect_signature``'s order."""
    if _md_member(head, read_at, size_bytes):
        return "linux_raid_member"
    if _at(head, 0, b"LUKS\xba\xbe"):
        return "crypto_LUKS"
    for sector in range(4):
        base = sector * SECTOR_BYTES
        if _at(head, base, b"LABELONE") and _at(head, base + 24, b"LVM2 001"):
            return "LVM2_member"
    if bcache := _bcache_type(head, size_bytes):
        return bcache
    if _at(head, 0, _BLUESTORE_MAGIC):
        return "ceph_bluestore"
    if _within(read_at, size_bytes, MIB, 4) == _VMFS_VOLUME_MAGIC:
        return "VMFS_volume_member"
    if _at(head, 32, _ASM_MAGIC):
        return "oracleasm"
    if _zfs_member(read_at, size_bytes):
        return "zfs_member"
    return ""


def _filesystem_type(head: bytes, read_at: Callable[[int, int], bytes], size_bytes: int) -> str:
    """File systems, in ``detect_signature``'s order."""
    if _at(head, 0, b"XFSB"):
        return "xfs"
    if _at(head, 65600, b"_BHRfS_M"):
        return "btrfs"
    if ext := _ext_type(head):
        return ext
    if _f2fs(head):
        return "f2fs"
    if _jfs(head, size_bytes):
        return "jfs"
    if reiser := _reiser_type(head, size_bytes):
        return reiser
    if size_bytes >= 14000 * KIB and any(_at(head, k * KIB, b"OCFSV2") for k in (1, 2, 4, 8)):
        return "ocfs2"
    if gfs := _gfs_type(head, size_bytes):
        return gfs
    if _nilfs2(head, read_at, size_bytes):
        return "nilfs2"
    if _within(read_at, size_bytes, 2 * MIB, 4) == _VMFS_MAGIC:
        return "VMFS"
    if _at(head, 0, b"hsqs"):
        return "squashfs"
    if _at(head, 32769, b"CD001"):
        return "iso9660"
    if _at(head, 3, b"NTFS    "):
        return "ntfs"
    if _at(head, 3, b"EXFAT   "):
        return "exfat"
    if _at(head, 510, b"\x55\xaa") and (
        _at(head, 82, b"FAT32   ") or any(_at(head, 54, t) for t in (b"FAT12   ", b"FAT16   "))
    ):
        return "vfat"
    return ""


def _swap_type(head: bytes) -> str:
    for page in (4096, 8192, 16384, 32768, 65536):
        if _at(head, page - 10, b"SWAPSPACE2") or _at(head, page - 10, b"SWAP-SPACE"):
            return "swap"
    return ""


def probe_path(
    path: str, size_bytes: int, logical_block_bytes: int, *, exclusive: bool
) -> tuple[str, str, bool]:
    """(signature, probe_error, exclusive_busy) for a device or file; reads with buffered preads.
    Waits as long as the device takes to answer: ``probe_paths`` bounds that.

    With ``exclusive`` (block devices only) an ``O_EXCL`` open comes first: EBUSY means a mount,
    holder or another process claims the device. That claim is released before anything is
    read: a read stuck on the device must not keep holding it (a ``mount`` would fail).
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    busy = False
    try:
        if exclusive:
            try:
                os.close(os.open(path, flags | os.O_EXCL))
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                busy = True
        fd = os.open(path, flags)
    except OSError as exc:
        return "", f"cannot open {path}: {exc.strerror or exc}", busy
    try:

        def read_at(offset: int, length: int) -> bytes:
            return os.pread(fd, length, offset)

        return detect_signature(read_at, size_bytes, logical_block_bytes), "", busy
    except OSError as exc:
        return "", f"cannot read {path}: {exc.strerror or exc}", busy
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Probing many devices, each within a time bound
# --------------------------------------------------------------------------------------------

#: How long one device (or file) has to answer its probe (our reads and blkid's, at once)
#: before it is reported as not probed: "did not answer a read within 5 s", its contents
#: unknown, so a write to it is refused without allow_write. A healthy device answers the
#: probe's few dozen small reads in milliseconds, a busy array in well under a second (even at
#: 100 ms a read, ours take 2 s). Longer means a device in trouble: paths failing over
#: (multipath fails a path after fast_io_fail_tmo, 5 s by default), a dead path queueing I/O
#: for good (queue_if_no_path), a SCSI command waiting out its 30 s timeout. Waiting for one
#: would hold up discovery, and so every test on the host, whether it names the device or not
#: (a slow device at 2 s a request took 38 s, a stuck one forever). A disk spun down takes
#: longer to spin up (10-15 s) and is reported unprobed too (discover again, or allow_write).
#: 5 s keeps a discovery far inside the master's 60 s for it, even in a few rounds
#: (``PROBES_AT_ONCE``) of devices that all time out.
PROBE_TIMEOUT_S = 5.0

#: How many devices are probed at once, each in its own thread with its own blkid process:
#: a host with hundreds of LUNs over several paths is probed in a few rounds, not one device
#: after another. A probe past its ``PROBE_TIMEOUT_S`` gives its place up (its thread is left
#: behind, waiting on the device).
PROBES_AT_ONCE = 128


@dataclass(frozen=True)
class ProbeTarget:
    """One path to probe. ``key`` names the device (or file) across probes (its
    ``major:minor``, else its path): one whose earlier probe still waits is not probed again."""

    path: str
    size_bytes: int
    logical_block_bytes: int
    exclusive: bool
    key: str


@dataclass(frozen=True)
class Probe:
    """What probing one path found: ``signature`` (ours, or blkid's where ours found none),
    ``error`` (why its contents are unknown, or ""), ``busy`` (the ``O_EXCL`` open failed with
    EBUSY) and ``unanswered`` (its reads got no answer within ``PROBE_TIMEOUT_S``: the device
    may be stuck, and another read of it may block as long)."""

    signature: str = ""
    error: str = ""
    busy: bool = False
    unanswered: bool = False


# The probes still waiting on their device, by ``ProbeTarget.key`` (with ``_RunningProbe.wakes``
# under ``_IN_FLIGHT_LOCK``): a probe leaves when its thread is done with the device.
_IN_FLIGHT: dict[str, _RunningProbe] = {}
_IN_FLIGHT_LOCK = threading.Lock()


class _RunningProbe:
    """One target's probe in its own daemon thread: blkid started, our own reads, then blkid's
    answer awaited until the deadline (past it blkid is killed and waited for: while it is
    stuck on the device, the device's probe is not over). A thread stuck in the kernel cannot
    be stopped, so nobody waits for it beyond the deadline, and it never holds up the exit of
    the process. What it learns is published as it comes (``ours``, then ``theirs``, under
    ``lock``), so that what is known at the deadline is used."""

    def __init__(self, target: ProbeTarget, use_blkid: bool, wake: threading.Event) -> None:
        self.target = target
        self.use_blkid = use_blkid
        self.timeout_s = PROBE_TIMEOUT_S
        self.started_s = time.monotonic()
        self.deadline_s = self.started_s + self.timeout_s
        self.lock = threading.Lock()
        self.ours: tuple[str, str, bool] | None = None
        self.theirs: dict[str, str] | None = None  # None: blkid asked, no answer (yet)
        self.blkid_pid = 0
        self.over = threading.Event()
        self.wakes = [wake]  # set when the thread is done
        self.thread = threading.Thread(
            target=self._run, name=f"ivypy probe {target.path}", daemon=True
        )

    def _run(self) -> None:
        t = self.target
        try:
            blkid = BlkidRun([t.path]) if self.use_blkid else None
            if blkid is not None and blkid.proc is not None:
                self.blkid_pid = blkid.proc.pid
            try:
                ours = probe_path(t.path, t.size_bytes, t.logical_block_bytes,
                                  exclusive=t.exclusive)
            except Exception as exc:  # a bug in a detector must not pass for a stuck device
                log.exception("LUN %s: probe failed", t.path)
                ours = ("", f"cannot probe {t.path}: {exc!r}", False)
            with self.lock:
                self.ours = ours
            if blkid is None:
                theirs: dict[str, str] = {}
            else:
                theirs = blkid.result(self.deadline_s - time.monotonic(), reap=True)
                if blkid.failed:
                    return
            with self.lock:
                self.theirs = theirs
        finally:
            with _IN_FLIGHT_LOCK:
                if _IN_FLIGHT.get(t.key) is self:
                    del _IN_FLIGHT[t.key]
                self.over.set()
                wakes = list(self.wakes)
            for wake in wakes:
                wake.set()

    def outcome(self) -> Probe:
        """The probe's answer, when it is over or past its deadline."""
        path = self.target.path
        with self.lock:
            ours, theirs = self.ours, self.theirs
        if ours is None:
            error = f"did not answer a read within {self.timeout_s:g} s"
            log.warning("LUN %s: %s: not probed, its contents are unknown", path, error)
            return Probe(error=error, unanswered=True)
        signature, error, busy = ours
        if theirs is None:
            if not signature and not error:
                # our probe knows fewer signatures than blkid (not hardware-RAID metadata such
                # as DDF or Intel IMSM, DRBD, VDO, BitLocker, UDF, ZFS cache/spare devices ...):
                # a blank answer from it alone is not enough to let a write through
                error = (f"blkid gave no answer within {self.timeout_s:g} s, and our own probe, "
                         "which knows fewer signatures, found none")
            log.warning("LUN %s: blkid gave no answer within %g s", path, self.timeout_s)
            return Probe(signature, error, busy)
        their = theirs.get(path, "")
        if their and not signature:
            log.info("LUN %s: blkid found %s where our probe found none", path, their)
            signature = their
        elif their and their != signature:
            log.debug("LUN %s: our probe says %s, blkid says %s", path, signature, their)
        return Probe(signature, error, busy)


def _start(target: ProbeTarget, use_blkid: bool, wake: threading.Event) -> _RunningProbe | Probe:
    """A new probe of ``target``; the one still running on the same device, when there is
    one (a target named twice); or, where that one is past its deadline, the answer that the
    device does not answer, without a second probe stuck behind the first."""
    with _IN_FLIGHT_LOCK:
        earlier = _IN_FLIGHT.get(target.key)
        if earlier is None:
            running = _IN_FLIGHT[target.key] = _RunningProbe(target, use_blkid, wake)
            running.thread.start()
            return running
        now_s = time.monotonic()
        if now_s < earlier.deadline_s:
            earlier.wakes.append(wake)
            return earlier
    error = (f"did not answer a read within {earlier.timeout_s:g} s (ivypy's probe of it, "
             f"started {now_s - earlier.started_s:.0f} s ago, still waits)")
    log.warning("LUN %s: %s: not probed again, its contents are unknown", target.path, error)
    return Probe(error=error, unanswered=True)


def probe_paths(targets: Sequence[ProbeTarget], *, use_blkid: bool) -> list[Probe]:
    """``probe_path`` on every target, with blkid's second opinion (``use_blkid``, where it is
    installed), in the order of ``targets``: up to ``PROBES_AT_ONCE`` at once, each in its own
    daemon thread with ``PROBE_TIMEOUT_S`` to answer. A target that does not answer in time is
    ``unanswered`` ("did not answer a read within N s") and left behind: its thread keeps
    waiting on the device, and until it is done no new probe of that device starts (later
    probes get the same answer at once). A target whose reads answered but whose blkid did not
    keeps the signature we found, or, blank to us, is "could not be checked". Returns within
    about ``PROBE_TIMEOUT_S`` times the rounds of ``PROBES_AT_ONCE``, whatever the devices do."""
    wake = threading.Event()
    waiting = collections.deque(enumerate(targets))
    running: dict[int, _RunningProbe] = {}
    found: dict[int, Probe] = {}
    while waiting or running:
        while waiting and len(running) < PROBES_AT_ONCE:
            i, target = waiting.popleft()
            started = _start(target, use_blkid, wake)
            if isinstance(started, Probe):
                found[i] = started
            else:
                running[i] = started
        wake.clear()  # before looking: a probe over from here on sets it again
        now_s = time.monotonic()
        finished = [i for i, r in running.items() if r.over.is_set() or now_s >= r.deadline_s]
        for i in finished:
            found[i] = running.pop(i).outcome()
        if running and not finished:
            wake.wait(max(0.0, min(r.deadline_s for r in running.values()) - now_s))
    return [found[i] for i in range(len(targets))]


def probing_pids() -> set[int]:
    """The blkid processes of our probes still waiting on their device (they have it open: that
    is us looking, not someone using it)."""
    with _IN_FLIGHT_LOCK:
        return {r.blkid_pid for r in _IN_FLIGHT.values() if r.blkid_pid}


def blkid_signatures(paths: Iterable[str]) -> dict[str, str]:
    """blkid's opinion on ``paths``: path -> TYPE or PTTYPE (or ``ambivalent``). Never raises.

    One path: ``blkid -p -o export`` (low-level probe, which also reports ambivalent results,
    i.e. several signatures at once). Several paths: one ``blkid -c /dev/null -o export`` process
    for all of them, probing each device afresh (the empty cache file bypasses the cache) but
    leaving ambivalent devices out; ``blkid -p`` cannot be used there because, given several
    devices, it stops at the first one where it finds nothing. Empty when blkid is missing or
    gave no answer within ``PROBE_TIMEOUT_S``.
    """
    return BlkidRun(paths).result(PROBE_TIMEOUT_S)


class BlkidRun:
    """A blkid process started now and read later, so it runs while we do our own probing."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = list(dict.fromkeys(paths))
        self.proc: subprocess.Popen[str] | None = None
        #: why blkid gave no opinion although it is installed (timeout), or ""
        self.failed = ""
        exe = shutil.which("blkid")
        if not self.paths or exe is None:
            return
        mode = ["-p"] if len(self.paths) == 1 else ["-c", "/dev/null"]
        try:
            self.proc = subprocess.Popen(
                [exe, *mode, "-o", "export", *self.paths],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            log.warning("cannot run blkid, relying on our own signature probe: %s", exc)

    def result(self, timeout_s: float, *, reap: bool = False) -> dict[str, str]:
        """blkid's answer, waited for up to ``timeout_s``; past it blkid is killed, ``failed``
        says so and the answer is empty. A blkid stuck in the kernel dies only when its read
        returns: ``reap`` waits for that, else a daemon thread does."""
        if self.proc is None:
            return {}
        proc = self.proc
        try:
            out, err = proc.communicate(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            proc.kill()
            self.failed = f"blkid gave no answer within {timeout_s:g} s"
            if reap:
                proc.communicate()
            else:
                threading.Thread(target=proc.communicate, name="ivypy blkid reaper",
                                 daemon=True).start()
            return {}
        found: dict[str, str] = {}
        for block in out.split("\n\n"):
            values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            name = values.get("TYPE") or values.get("PTTYPE")
            if name and values.get("DEVNAME") in self.paths:
                found[values["DEVNAME"]] = name
        if len(self.paths) == 1 and not found and "ambivalent" in err:
            found[self.paths[0]] = "ambivalent"
        return found
