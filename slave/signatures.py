"""Signatures on a device: is there a filesystem, LVM, RAID member or partition table on it?

Owns ``detect_signature`` (our own probe of the first and last few KiB of a device or file, so
the answer does not depend on which hosts have util-linux), ``probe_path`` (that probe on a path,
with the exclusive-open test of whether someone holds the device), and ``blkid_signatures`` /
``BlkidRun`` (blkid as a second opinion where it is installed, run while we probe).

Rules: only reads. It never writes to a device, never opens one for writing, and never holds an
exclusive claim longer than one ``open``/``close`` pair. Deciding what a signature means for a
write is ``slave/preflight.py``'s job; building ``LunInfo`` is ``slave/luns.py``'s.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import subprocess
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

SECTOR_BYTES = 512
BLKID_TIMEOUT_S = 10.0


HEAD_BYTES = 69632  # 68 KiB: covers btrfs (64 KiB + 64), swap up to 64 KiB pages, iso9660
_MD_MAGIC = 0xA92B4EFC
_BCACHE_MAGIC = bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81")
_EXT_MAGIC = 0xEF53


def _at(buf: bytes, offset: int, magic: bytes) -> bool:
    return buf[offset : offset + len(magic)] == magic


def _u16(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from("<H", buf, offset)[0] if len(buf) >= offset + 2 else None


def _u32(buf: bytes, offset: int) -> int | None:
    return struct.unpack_from("<I", buf, offset)[0] if len(buf) >= offset + 4 else None


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
    this order (RAID first, because md v0.90/v1.0 members carry a file system at offset 0):

    - md RAID magic 0xa92b4efc: v1.1 at 0, v1.2 at 4 KiB, v1.0 near the end, v0.90 in the last
      64 KiB-aligned 64 KiB -> ``linux_raid_member``
    - LUKS ``LUKS\\xba\\xbe`` at 0 -> ``crypto_LUKS``; LVM2 ``LABELONE`` + ``LVM2 001`` in one of
      sectors 0-3 (normally 512 + 24 = 536) -> ``LVM2_member``; bcache magic at 4096 + 24
    - XFS ``XFSB`` at 0; btrfs ``_BHRfS_M`` at 65600; ext2/3/4 magic 0xEF53 at 1080 with a sane
      superblock (the flavour from its feature flags); squashfs ``hsqs`` at 0; iso9660 ``CD001``
      at 32769; NTFS / exFAT OEM id at 3; FAT type string at 54 or 82
    - swap ``SWAPSPACE2`` / ``SWAP-SPACE`` at page end - 10 for 4..64 KiB pages
    - partition tables: GPT ``EFI PART`` at LBA 1 -> ``gpt``; MBR 0x55AA at 510 with valid
      entries (boot flag 0 or 0x80, at least one used entry with start and length) -> ``dos``,
      or ``PMBR`` when the only entry is GPT's protective 0xEE; without a primary GPT header,
      a backup header in the last LBA -> ``gpt`` behind a protective MBR, else
      ``gpt (backup header only)`` (a wiped first MiB leaves the partitions behind it intact;
      blkid and the kernel ignore such a table, so ours is the only warning)

    Reads are small (68 KiB at the start and a few 8-byte reads near the end).
    """
    head = read_at(0, HEAD_BYTES)
    if _md_member(head, read_at, size_bytes):
        return "linux_raid_member"
    if _at(head, 0, b"LUKS\xba\xbe"):
        return "crypto_LUKS"
    for sector in range(4):
        base = sector * SECTOR_BYTES
        if _at(head, base, b"LABELONE") and _at(head, base + 24, b"LVM2 001"):
            return "LVM2_member"
    if _at(head, 4096 + 24, _BCACHE_MAGIC):
        return "bcache"
    if _at(head, 0, b"XFSB"):
        return "xfs"
    if _at(head, 65600, b"_BHRfS_M"):
        return "btrfs"
    ext = _ext_type(head)
    if ext:
        return ext
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
    for page in (4096, 8192, 16384, 32768, 65536):
        if _at(head, page - 10, b"SWAPSPACE2") or _at(head, page - 10, b"SWAP-SPACE"):
            return "swap"
    return _partition_table(head, read_at, size_bytes, logical_block_bytes)


def probe_path(
    path: str, size_bytes: int, logical_block_bytes: int, *, exclusive: bool
) -> tuple[str, str, bool]:
    """(signature, probe_error, exclusive_busy) for a device or file; reads with buffered preads.

    With ``exclusive`` (block devices only) the open first tries ``O_EXCL``: EBUSY means a mount,
    holder or another process claims the device. The claim is released immediately.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    busy = False
    try:
        if exclusive:
            try:
                fd = os.open(path, flags | os.O_EXCL)
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                busy = True
                fd = os.open(path, flags)
        else:
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


def blkid_signatures(paths: Iterable[str]) -> dict[str, str]:
    """blkid's opinion on ``paths``: path -> TYPE or PTTYPE (or ``ambivalent``). Never raises.

    One path: ``blkid -p -o export`` (low-level probe, which also reports ambivalent results,
    i.e. several signatures at once). Several paths: one ``blkid -c /dev/null -o export`` process
    for all of them, probing each device afresh (the empty cache file bypasses the cache) but
    leaving ambivalent devices out; ``blkid -p`` cannot be used there because, given several
    devices, it stops at the first one where it finds nothing. Empty when blkid is missing.
    """
    return BlkidRun(paths).result()


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

    def result(self) -> dict[str, str]:
        if self.proc is None:
            return {}
        try:
            out, err = self.proc.communicate(timeout=BLKID_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            self.failed = f"blkid gave no answer within {BLKID_TIMEOUT_S:g} s"
            log.warning("%s; LUNs our own probe finds blank are reported as unchecked",
                        self.failed)
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
