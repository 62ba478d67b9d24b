"""Tests for slave/signatures.py: our own signature probe on synthetic images (table), against
real mkfs-style tools and blkid, and blkid as a second opinion."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from slave.luns import file_lun
from slave.signatures import blkid_signatures, detect_signature
from tests.slave.sigimages import (
    IMAGE_BYTES,
    MBR_MAGIC,
    MD_V090_OFFSET,
    MD_V10_OFFSET,
    Poke,
    ext_pokes,
    image_bytes,
    mbr_entry,
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


@pytest.mark.parametrize(
    ("tool", "argv"),
    [
        ("mkfs.ext4", ["mkfs.ext2", "-q", "-F"]),
        ("mkfs.ext4", ["mkfs.ext3", "-q", "-F"]),
        ("mkfs.ext4", ["mkfs.ext4", "-q", "-F"]),
        ("mkswap", ["mkswap"]),
    ],
    ids=["ext2", "ext3", "ext4", "swap"],
)
def test_signature_of_real_tools_agrees_with_blkid(
    tool: str, argv: list[str], tmp_path: Path
) -> None:
    if shutil.which(tool) is None or shutil.which(argv[0]) is None:
        pytest.skip(f"needs {argv[0]}")
    if shutil.which("blkid") is None:
        pytest.skip("needs blkid")
    image = tmp_path / "fs.img"
    image.write_bytes(b"")
    os.truncate(image, 16 * MIB)
    subprocess.run([*argv, str(image)], check=True, capture_output=True)
    blkid = subprocess.run(["blkid", "-p", "-s", "TYPE", "-o", "value", str(image)],
                           capture_output=True, text=True, check=True).stdout.strip()
    ours = file_lun(str(image), use_blkid=False).signature
    assert ours == blkid


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
