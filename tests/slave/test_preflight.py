"""Tests for slave/preflight.py: the decision table on synthetic LunInfo, and real loop devices."""

from __future__ import annotations

import dataclasses
import logging
import re
import struct
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from protocol.errors import PreflightError
from slave.luns import LunInfo, describe_block_device, discover_block_devices
from slave.preflight import check_lun, in_use_reasons, own_file_note, require_ok

if TYPE_CHECKING:
    from tests.slave.conftest import LoopDevice, LoopFactory, MountedLoop

CLEAN = LunInfo(path="/dev/sdx", kind="block", name="sdx", size_bytes=1 << 30)

REASON_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("clean", {}, ()),
    ("mounted", {"mount_points": ("/mnt/x",)}, ("mounted at /mnt/x",)),
    ("mounted twice", {"mount_points": ("/mnt/x", "/srv/y")},
     ("mounted at /mnt/x", "mounted at /srv/y")),
    ("swap", {"mount_points": ("[swap]",)}, ("in use as swap",)),
    ("partitions", {"partitions": ("sdx1", "sdx2")}, ("has partitions sdx1, sdx2",)),
    ("holders", {"holders": ("dm-0",)}, ("held by dm-0",)),
    ("ext4", {"signature": "ext4"}, ("carries an ext4 signature",)),
    ("LVM", {"signature": "LVM2_member"}, ("carries an LVM2_member signature",)),
    ("raid", {"signature": "linux_raid_member"}, ("carries a linux_raid_member signature",)),
    ("gpt", {"signature": "gpt"}, ("carries a gpt signature",)),
    ("open", {"open_by": ("1234:fio", "99:dd")}, ("open by pid 1234 (fio)", "open by pid 99 (dd)")),
    ("exclusive only", {"exclusive_busy": True},
     ("claimed exclusively by the kernel or another process (O_EXCL open: busy)",)),
    ("exclusive explained by the mount", {"exclusive_busy": True, "mount_points": ("/m",)},
     ("mounted at /m",)),
    ("unreadable", {"probe_error": "cannot open /dev/sdx: Permission denied"},
     ("contents could not be checked: cannot open /dev/sdx: Permission denied",)),
    ("loop: backing file open elsewhere",
     {"backing_file": "/srv/lun.img", "backing_open_by": ("77:qemu-system-x86",)},
     ("its backing file /srv/lun.img is open by pid 77 (qemu-system-x86)",)),
    ("loop: backing file attached twice",
     {"backing_file": "/srv/lun.img", "backing_shared_with": ("loop3", "loop5")},
     ("its backing file /srv/lun.img is also attached as loop3, loop5",)),
    ("partition: its disk is held",
     {"parent": "sdw", "disk_holders": ("dm-3",)}, ("its disk sdw is held by dm-3",)),
    ("partition: its disk is open",
     {"parent": "sdw", "disk_open_by": ("9:qemu",)}, ("its disk sdw is open by pid 9 (qemu)",)),
    ("everything", {"mount_points": ("/m",), "partitions": ("sdx1",), "holders": ("md0",),
                    "signature": "dos", "open_by": ("7:x",)},
     ("mounted at /m", "has partitions sdx1", "held by md0", "carries a dos signature",
      "open by pid 7 (x)")),
]


@pytest.mark.parametrize(("change", "reasons"), [c[1:] for c in REASON_CASES],
                         ids=[c[0] for c in REASON_CASES])
def test_in_use_reasons(change: dict[str, Any], reasons: tuple[str, ...]) -> None:
    assert in_use_reasons(dataclasses.replace(CLEAN, **change)) == reasons


FILE = LunInfo(path="/srv/lun", kind="file", name="lun", size_bytes=8 << 20,
               file_size_bytes=8 << 20)
MARKED = {"mark_created": "2026-11-25T16:54:19Z", "mark_size_bytes": 4 << 20}
HOLDING = "an existing non-empty file of 8 MiB (8,388,608 bytes) holding data"

FILE_CASES: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = [
    # (case, LunInfo fields, reasons, own_file_note)
    ("made by this run", {"created": True}, (), ""),
    ("ivypy's by its mark", {"created": True, "mark": "ok", **MARKED, "mark_size_bytes": 8 << 20},
     (), "file LUN /srv/lun: created by ivypy on 2026-11-25 16:54:19 UTC at 8 MiB (8,388,608 "
     "bytes), as its mark user.ivypy.lun says: ivypy's own, its writes need no allow_write"),
    ("no mark", {}, (f"{HOLDING}, which ivypy did not create",), ""),
    ("no mark, a signature", {"signature": "sqlite3"},
     ("carries a sqlite3 signature", "an existing non-empty file of 8 MiB (8,388,608 bytes) "
      "holding a sqlite3 signature, which ivypy did not create"), ""),
    ("resized", {"mark": "resized", **MARKED},
     (f"{HOLDING}, created by ivypy on 2026-11-25 16:54:19 UTC at 4 MiB (4,194,304 bytes) but "
      "resized since, so no longer ivypy's",), ""),
    ("copied", {"mark": "copied", **MARKED},
     (f"{HOLDING}, a copy of a file created by ivypy on 2026-11-25 16:54:19 UTC (its mark names "
      "another inode: copied with its extended attributes, e.g. cp -a or rsync -X), so not "
      "ivypy's",), ""),
    ("a mark with an odd date", {"mark": "resized", **MARKED, "mark_created": "yesterday"},
     (f"{HOLDING}, created by ivypy on yesterday at 4 MiB (4,194,304 bytes) but resized since, "
      "so no longer ivypy's",), ""),
    ("damaged", {"mark": "damaged"},
     (f"{HOLDING}, which ivypy did not create (its user.ivypy.lun attribute is not ivypy's "
      "mark)",), ""),
    ("no user xattrs", {"mark": "unsupported"},
     (f"{HOLDING}, which this run did not create (its file system keeps no user extended "
      "attributes, so a file ivypy made in an earlier run carries no mark)",), ""),
    ("no user xattrs, made by this run", {"mark": "unsupported", "created": True}, (), ""),
    ("empty", {"file_size_bytes": 0}, (), ""),
]


@pytest.mark.parametrize(("change", "reasons", "note"), [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_a_file_luns_reasons_say_whose_it_is(
        change: dict[str, Any], reasons: tuple[str, ...], note: str) -> None:
    lun = dataclasses.replace(FILE, **change)
    assert in_use_reasons(lun) == reasons
    assert own_file_note(lun) == note
    assert check_lun(lun, writes=True, allow_write=False, host="h").ok == (not reasons)


IN_USE = dataclasses.replace(CLEAN, signature="ext4", mount_points=("/mnt/x",))

DECISIONS = [
    # (lun, writes, allow_write, ok, overridden)
    (CLEAN, False, False, True, False),
    (CLEAN, True, False, True, False),
    (CLEAN, True, True, True, False),
    (IN_USE, False, False, True, False),
    (IN_USE, False, True, True, False),
    (IN_USE, True, False, False, False),
    (IN_USE, True, True, True, True),
]


@pytest.mark.parametrize(("lun", "writes", "allow", "ok", "overridden"), DECISIONS)
def test_check_lun_decision(
    lun: LunInfo, writes: bool, allow: bool, ok: bool, overridden: bool
) -> None:
    result = check_lun(lun, writes, allow, "h1")
    assert (result.ok, result.overridden) == (ok, overridden)
    assert (result.host, result.lun, result.writes, result.allow_write) == (
        "h1", lun.path, writes, allow)
    assert result.reasons == in_use_reasons(lun)


def test_require_ok_refusal_names_host_lun_and_every_reason() -> None:
    with pytest.raises(PreflightError) as info:
        require_ok(IN_USE, writes=True, allow_write=False, host="h7")
    err = info.value
    assert (err.host, err.lun) == ("h7", "/dev/sdx")
    for part in ("h7", "/dev/sdx", "mounted at /mnt/x", "carries an ext4 signature"):
        assert part in str(err)


def test_require_ok_override_logs_every_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="slave.preflight"):
        result = require_ok(IN_USE, writes=True, allow_write=True, host="h7")
    assert result.ok and result.overridden
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    for part in ("h7", "/dev/sdx", "mounted at /mnt/x", "carries an ext4 signature"):
        assert part in warnings[0]


def test_require_ok_reads_are_quiet(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="slave.preflight"):
        assert require_ok(IN_USE, writes=False, allow_write=False, host="h").ok
    assert not caplog.records


# ------------------------------------------------------------------------------------------------
# Real loop devices (root)
# ------------------------------------------------------------------------------------------------


def _settled(probe: Callable[[], LunInfo]) -> LunInfo:
    """``probe()`` again while other processes have the device open: a discovery running in a
    concurrent test process (another slave, another test run) opens every device for a moment."""
    deadline = time.monotonic() + 3
    lun = probe()
    while lun.open_by and time.monotonic() < deadline:
        time.sleep(0.05)
        lun = probe()
    return lun


def _lun(device: LoopDevice) -> LunInfo:
    for lun in discover_block_devices(paths=[device.path]):
        if lun.path == device.path:
            return lun
    raise AssertionError(f"{device.path} not discovered")


@pytest.mark.root
def test_blank_loop_device_allowed_for_writes(loop_device: LoopFactory) -> None:
    device = loop_device(8 * 1024 * 1024)
    lun = _settled(lambda: describe_block_device(device.path))
    result = require_ok(lun, writes=True, allow_write=False, host="h1")
    assert result.ok and not result.reasons


@pytest.mark.root
def test_ext4_loop_device_refused_for_writes_allowed_for_reads(
    ext4_loop_device: LoopDevice,
) -> None:
    lun = _lun(ext4_loop_device)
    with pytest.raises(PreflightError, match="carries an ext4 signature") as info:
        require_ok(lun, writes=True, allow_write=False, host="h1")
    assert info.value.lun == ext4_loop_device.path
    assert "h1" in str(info.value) and ext4_loop_device.path in str(info.value)
    assert require_ok(lun, writes=False, allow_write=False, host="h1").ok


@pytest.mark.root
def test_mounted_loop_device_refused_with_its_mount_point(
    mounted_loop_device: MountedLoop,
) -> None:
    lun = describe_block_device(mounted_loop_device.device.path)
    with pytest.raises(PreflightError) as info:
        require_ok(lun, writes=True, allow_write=False, host="h2")
    assert f"mounted at {mounted_loop_device.mount_point}" in str(info.value)
    assert info.value.host == "h2"


@pytest.mark.root
def test_allowed_override_on_a_real_device(
    ext4_loop_device: LoopDevice, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="slave.preflight"):
        result = require_ok(_lun(ext4_loop_device), writes=True, allow_write=True, host="h1")
    assert result.ok and result.overridden
    assert "carries an ext4 signature" in caplog.text


@pytest.mark.root
def test_loop_device_over_a_file_in_use_is_refused(loop_device: LoopFactory) -> None:
    device = loop_device(4 * 1024 * 1024)
    with open(device.backing_file, "rb") as fh, \
            subprocess.Popen(["sleep", "30"], stdin=fh) as proc:
        try:
            with pytest.raises(PreflightError) as info:
                require_ok(describe_block_device(device.path), writes=True, allow_write=False,
                           host="h3")
        finally:
            proc.kill()
    for part in ("h3", device.path, f"its backing file {device.backing_file}",
                 f"open by pid {proc.pid} (sleep)"):
        assert part in str(info.value)


ODD_SIZE_BYTES = 8 * 1024 * 1024 + 12 * 1024  # not a multiple of 64 KiB
MD_MAGIC = struct.pack("<I", 0xA92B4EFC)

END_SIGNATURES = [
    # (case, offset of the bytes from the start, bytes, signature named in the refusal)
    ("backup GPT header only", ODD_SIZE_BYTES - 512, b"EFI PART", "gpt (backup header only)"),
    ("md 0.90 superblock", (ODD_SIZE_BYTES & ~65535) - 65536, MD_MAGIC + struct.pack("<I", 0),
     "linux_raid_member"),
    ("md 1.0 superblock", ((ODD_SIZE_BYTES // 512 - 16) & ~7) * 512,
     MD_MAGIC + struct.pack("<I", 1), "linux_raid_member"),
    ("md 1.2 superblock", 4096, MD_MAGIC + struct.pack("<I", 1), "linux_raid_member"),
]


@pytest.mark.root
@pytest.mark.parametrize(("offset", "data", "signature"), [c[1:] for c in END_SIGNATURES],
                         ids=[c[0] for c in END_SIGNATURES])
def test_signature_away_from_the_start_refused_on_a_real_device(
    loop_device: LoopFactory, offset: int, data: bytes, signature: str
) -> None:
    def prepare(path: str) -> None:
        with open(path, "r+b") as fh:
            fh.seek(offset)
            fh.write(data)

    device = loop_device(ODD_SIZE_BYTES, prepare=prepare)
    lun = _settled(lambda: describe_block_device(device.path))
    with pytest.raises(PreflightError, match=re.escape(f"carries a {signature} signature")):
        require_ok(lun, writes=True, allow_write=False, host="h1")
    assert require_ok(lun, writes=False, allow_write=False, host="h1").ok
