"""Safety preflight: may a workload write to this LUN?

Owns the decision and its wording. ``in_use_reasons`` turns the evidence ``slave/luns.py``
gathered into human reasons; ``check_lun`` decides (pure: no I/O, no clock); ``require_ok``
raises ``PreflightError`` naming host, LUN and every reason when a write is refused.

Rules: reads are always allowed. A write is refused when the LUN is mounted (or active swap), has
partitions, has holders (device mapper, md, a loop device over a file), carries a signature
(file system, LVM, RAID, partition table, ...), is open by another process, is claimed exclusively
by someone, could not be read to look for a signature, is a loop device whose backing file is
open by another process or attached to another loop device too, is a partition whose whole
disk has holders or is open by another process, or is an existing non-empty file that is not
ivypy's own: neither made by this run nor carrying ivypy's mark for its inode and size
(``slave.lun_mark``; a typo in ``file:`` must not overwrite a database or a VM image). The test may
allow writes to a LUN explicitly; then the write goes ahead and every overridden reason is
logged as a warning, and the session hands it to the master for the console and events.csv.
This module gathers no evidence itself and must not touch
devices.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from protocol.errors import PreflightError
from slave.lun_mark import (
    MARK_COPIED,
    MARK_DAMAGED,
    MARK_OK,
    MARK_RESIZED,
    MARK_UNSUPPORTED,
    MARK_XATTR,
)
from slave.luns import KIND_FILE, SWAP_MOUNT_POINT, LunInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreflightResult:
    """The verdict for one workload on one LUN.

    ``reasons`` lists every sign of use found, whether or not it mattered: for reads and for
    allowed writes it is informational. ``overridden`` is True when a write goes ahead only
    because the test allowed it.
    """

    host: str
    lun: str
    writes: bool
    allow_write: bool
    ok: bool
    reasons: tuple[str, ...]
    overridden: bool

    def message(self) -> str:
        """One line naming host, LUN and every reason."""
        listed = "; ".join(self.reasons) if self.reasons else "no sign of use"
        if not self.ok:
            return (
                f"host {self.host}: refusing to write to LUN {self.lun}: {listed} "
                "(the test must explicitly allow writes to this LUN to go ahead)"
            )
        if self.overridden:
            return (
                f"host {self.host}: writing to LUN {self.lun} as the test allows, "
                f"despite: {listed}"
            )
        verb = "writes" if self.writes else "reads"
        return f"host {self.host}: LUN {self.lun} ok for {verb} ({listed})"


def _pid_comm(entry: str) -> str:
    pid, _, comm = entry.partition(":")
    return f"pid {pid} ({comm})" if comm else f"pid {pid}"


def _article(name: str) -> str:
    """'an' before names read with a leading vowel sound (ext4, xfs, LVM2_member, ntfs)."""
    return "an" if name[:1] in tuple("aeiouxnAEIOUXN") or name.startswith("LVM") else "a"


def in_use_reasons(lun: LunInfo) -> tuple[str, ...]:
    """Every sign that ``lun`` is in use, in a fixed order, worded for the operator."""
    reasons: list[str] = []
    for mount_point in lun.mount_points:
        if mount_point == SWAP_MOUNT_POINT:
            reasons.append("in use as swap")
        else:
            reasons.append(f"mounted at {mount_point}")
    if lun.partitions:
        reasons.append(f"has partitions {', '.join(lun.partitions)}")
    if lun.holders:
        reasons.append(f"held by {', '.join(lun.holders)}")
    if lun.signature:
        reasons.append(f"carries {_article(lun.signature)} {lun.signature} signature")
    for entry in lun.open_by:
        reasons.append(f"open by {_pid_comm(entry)}")
    if lun.backing_shared_with:
        reasons.append(
            f"its backing file {lun.backing_file} is also attached as "
            f"{', '.join(lun.backing_shared_with)}"
        )
    for entry in lun.backing_open_by:
        reasons.append(f"its backing file {lun.backing_file} is open by {_pid_comm(entry)}")
    if lun.disk_holders:
        reasons.append(f"its disk {lun.parent} is held by {', '.join(lun.disk_holders)}")
    for entry in lun.disk_open_by:
        reasons.append(f"its disk {lun.parent} is open by {_pid_comm(entry)}")
    if lun.exclusive_busy and not (lun.mount_points or lun.holders or lun.open_by):
        reasons.append("claimed exclusively by the kernel or another process (O_EXCL open: busy)")
    if lun.probe_error:
        reasons.append(f"contents could not be checked: {lun.probe_error}")
    if lun.kind == KIND_FILE and lun.file_size_bytes > 0 and not lun.created:
        holds = f"{_article(lun.signature)} {lun.signature} signature" if lun.signature else (
            "data")
        reasons.append(f"an existing non-empty file of {_size_text(lun.file_size_bytes)} "
                       f"holding {holds}, {_not_ivypys(lun)}")
    return tuple(reasons)


def _not_ivypys(lun: LunInfo) -> str:
    """Why an existing file is not ivypy's own, from its mark (``slave.lun_mark``)."""
    made = f"created by ivypy on {_date_text(lun.mark_created)}"
    if lun.mark == MARK_RESIZED:
        return (f"{made} at {_size_text(lun.mark_size_bytes)} but resized since, so no longer "
                "ivypy's")
    if lun.mark == MARK_COPIED:
        return (f"a copy of a file {made} (its mark names another inode: copied with its "
                "extended attributes, e.g. cp -a or rsync -X), so not ivypy's")
    if lun.mark == MARK_DAMAGED:
        return f"which ivypy did not create (its {MARK_XATTR} attribute is not ivypy's mark)"
    if lun.mark == MARK_UNSUPPORTED:
        return ("which this run did not create (its file system keeps no user extended "
                "attributes, so a file ivypy made in an earlier run carries no mark)")
    return "which ivypy did not create"


def own_file_note(lun: LunInfo) -> str:
    """For a file LUN whose mark makes it ivypy's own: a line saying so (its writes need no
    ``allow_write``); else ""."""
    if lun.kind != KIND_FILE or not lun.created or lun.mark != MARK_OK:
        return ""
    return (f"file LUN {lun.path}: created by ivypy on {_date_text(lun.mark_created)} at "
            f"{_size_text(lun.mark_size_bytes)}, as its mark {MARK_XATTR} says: ivypy's own, "
            "its writes need no allow_write")


def _date_text(iso_utc: str) -> str:
    """``2026-11-25 16:54:19 UTC`` from the mark's ``2026-11-25T16:54:19Z``."""
    if len(iso_utc) == 20 and iso_utc[10] == "T" and iso_utc.endswith("Z"):
        return f"{iso_utc[:10]} {iso_utc[11:19]} UTC"
    return iso_utc or "an unknown date"


def _size_text(n_bytes: int) -> str:
    """``200 MiB (209,715,200 bytes)``; bytes alone below 1 KiB."""
    value, unit = float(n_bytes), ""
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    if not unit:
        return f"{n_bytes:,} bytes"
    return f"{value:.4g} {unit} ({n_bytes:,} bytes)"


def check_lun(lun: LunInfo, writes: bool, allow_write: bool, host: str) -> PreflightResult:
    """Decide whether a workload (writing or not) may run on ``lun``. Pure."""
    reasons = in_use_reasons(lun)
    refused = writes and bool(reasons) and not allow_write
    overridden = writes and bool(reasons) and allow_write
    return PreflightResult(
        host=host,
        lun=lun.path,
        writes=writes,
        allow_write=allow_write,
        ok=not refused,
        reasons=reasons,
        overridden=overridden,
    )


def require_ok(lun: LunInfo, writes: bool, allow_write: bool, host: str) -> PreflightResult:
    """``check_lun``, raising ``PreflightError`` on refusal and warning about overrides."""
    result = check_lun(lun, writes, allow_write, host)
    if not result.ok:
        raise PreflightError(result.message(), host=host, lun=lun.path)
    if result.overridden:
        log.warning("%s", result.message())
    return result
