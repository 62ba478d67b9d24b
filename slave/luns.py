"""LUN discovery: which block devices and files this host offers, what they are, and who uses them.

Owns the functions that build ``LunInfo`` (``slave.lun_info``: one LUN's attributes and in-use
evidence, a value that travels to the master as a plain dict) from sysfs and a file's stat; the
evidence of use is gathered by ``slave.lun_usage``:

- ``discover_block_devices`` walks ``/sys/block`` (whole disks and their partitions: sd, nvme, dm,
  md, loop with its backing file, virtio, ...), keeping those whose path the test's globs
  match. Loop devices without a backing file, zero-size devices and hidden devices (nvme
  multipath legs) are skipped.
- ``describe_block_device`` describes the one block device a test names (any path to a device
  node, e.g. ``/dev/mapper/vg-lv``) and also asks the kernel whether someone holds it exclusively.
- ``file_lun`` describes a file named by a test, creating it, or extending (sparse) an empty
  file or one of ivypy's own, when the test says so, never truncating it nor growing anyone
  else's, and tells whether its data are ivypy's own (made by this run, or carrying ivypy's
  mark for its inode and size: ``slave.lun_mark``). ``lun_for_path`` picks between the two.

Evidence of use comes from the kernel: mounts (``/proc/self/mountinfo``, matched by device number
and by source path), active swap (``/proc/swaps``), holders and partitions (sysfs), other
processes' open file descriptors (``/proc/<pid>/fd``, excluding our own pid and ``ignore_pids``),
and a signature read from the device itself (``slave/signatures.py``: our own probe of small
regions of it, with blkid as a second opinion where it is installed). All devices are probed at
once, each within ``PROBE_TIMEOUT_S``: one that does not answer (a dead path queueing I/O, a
LUN failing over) is reported as not probed (``unanswered``; its ``probe_error``, "did not
answer a read within 5 s", refuses a write to it without ``allow_write``) and holds up neither
the other devices' probes nor ``discover_block_devices`` past that bound; its probe is left
waiting, and not started again while it waits.
Devices and files are matched as objects (device number; ``st_dev``/``st_ino``, for a loop
device's file as the kernel reports it), never by name alone: a device node outside /dev, a hard
link, a bind mount or a deleted name is still the same LUN. Paths on network or FUSE file systems
are never stat'ed (a dead server would hang discovery); there names are all we compare.
Only what is visible from this host's mount and pid namespaces can be seen; a mount in another
mount namespace is caught only by the exclusive-open probe of ``describe_block_device``.

Rules: this module only reads (plus creating a file LUN on request, growing one that is empty
or ivypy's own, and marking a file it made or sized as ivypy's: a file someone else made is
never changed, whatever the test asks). It never writes to a device, never opens one for writing,
and never holds an exclusive claim longer than one ``open``/``close`` pair. Sysfs entries that
vanish or cannot be read mid-scan are logged and skipped; discovery does not crash on them.
Deciding whether a write may go ahead is ``slave/preflight.py``'s job, not this module's.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import logging
import os
import shutil
import stat
import struct
import subprocess
from collections.abc import Callable, Collection, Sequence

import numpy as np

from protocol.errors import PreflightError
from slave.lun_info import KIND_BLOCK, KIND_FILE, SWAP_MOUNT_POINT, LunInfo, boot_id, identity_of
from slave.lun_mark import MARK_NONE, MARK_OK, MARK_UNSUPPORTED, read_mark, write_mark
from slave.lun_usage import (
    Mounts,
    Roots,
    list_dir,
    loop_files,
    loops_backed_by,
    read_mounts,
    read_text,
    scan_open_files,
    with_evidence,
)
from slave.signatures import SECTOR_BYTES

__all__ = [
    "KIND_BLOCK", "KIND_FILE", "SWAP_MOUNT_POINT", "LunInfo", "boot_id",
    "describe_block_device", "discover_block_devices", "file_lun", "identity_of",
    "lun_for_path", "scan_open_files",
]

log = logging.getLogger(__name__)

# Errors that mean "this entry vanished or is unreadable": log and skip, never crash the scan.
_SKIPPABLE = (OSError, ValueError, struct.error)


# --------------------------------------------------------------------------------------------
# Block devices from sysfs
# --------------------------------------------------------------------------------------------


def _int_attr(path: str, default: int) -> int:
    text = read_text(path)
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _vpd_serial(path: str) -> str:
    """Unit serial number from a SCSI VPD page 0x80 (4-byte header, then the serial)."""
    try:
        with open(path, "rb") as fh:
            page = fh.read(260)
    except OSError:
        return ""
    if len(page) < 4 or page[1] != 0x80:
        return ""
    length = (page[2] << 8) | page[3]
    return page[4 : 4 + length].decode("ascii", "replace").strip(" \x00")


def _identity(disk_dir: str) -> tuple[str, str, str, str]:
    """vendor, model, serial and wwid of a whole disk, where the kernel exposes them."""
    device = os.path.join(disk_dir, "device")

    def first(*names: str) -> str:
        for name in names:
            text = read_text(os.path.join(disk_dir, name))
            if text:
                return text
        return ""

    serial = first("device/serial", "serial") or _vpd_serial(os.path.join(device, "vpd_pg80"))
    wwid = first("wwid", "device/wwid", "dm/uuid", "md/uuid")
    return first("device/vendor"), first("device/model"), serial, wwid


def _sys_block_lun(
    name: str, sysdir: str, disk_dir: str, parent: str, roots: Roots, mounts: Mounts,
    dev_path: str | None = None,
) -> LunInfo | None:
    """One LunInfo from sysfs (without signature / open_by), or None to skip the device."""
    if read_text(os.path.join(sysdir, "hidden")) == "1":
        return None
    size_text = read_text(os.path.join(sysdir, "size"))
    if size_text is None:
        raise FileNotFoundError(errno.ENOENT, "size vanished", sysdir)
    size_bytes = int(size_text) * SECTOR_BYTES
    if size_bytes == 0:
        return None
    backing = ""
    if name.startswith("loop") and not parent:
        backing = read_text(os.path.join(sysdir, "loop", "backing_file")) or ""
        if not backing:
            return None
    elif parent.startswith("loop"):  # a partition of a loop device: its data is in that file
        backing = read_text(os.path.join(disk_dir, "loop", "backing_file")) or ""
    queue = os.path.join(disk_dir, "queue")
    rotational_text = read_text(os.path.join(queue, "rotational"))
    path = dev_path or os.path.join(roots.dev_root, name.replace("!", "/"))
    dev = read_text(os.path.join(sysdir, "dev")) or ""
    partitions: tuple[str, ...] = ()
    if not parent:
        partitions = tuple(
            e for e in list_dir(sysdir)
            if e.startswith(name) and os.path.exists(os.path.join(sysdir, e, "partition"))
        )
    real = os.path.realpath(path)
    vendor, model, serial, wwid = _identity(disk_dir)
    return LunInfo(
        path=path,
        kind=KIND_BLOCK,
        name=name,
        size_bytes=size_bytes,
        logical_block_bytes=_int_attr(os.path.join(queue, "logical_block_size"), SECTOR_BYTES),
        physical_block_bytes=_int_attr(os.path.join(queue, "physical_block_size"), SECTOR_BYTES),
        rotational=None if rotational_text not in ("0", "1") else rotational_text == "1",
        dev=dev,
        parent=parent,
        backing_file=backing,
        read_only=read_text(os.path.join(sysdir, "ro")) == "1",
        partitions=partitions,
        holders=list_dir(os.path.join(sysdir, "holders")),
        disk_holders=list_dir(os.path.join(disk_dir, "holders")) if parent else (),
        mount_points=mounts.lookup(dev, dict.fromkeys((path, real))),
        vendor=vendor,
        model=model,
        serial=serial,
        wwid=wwid,
    )


def discover_block_devices(
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    *,
    dev_root: str = "/dev",
    use_blkid: bool = True,
    ignore_pids: Collection[int] = (),
    paths: Sequence[str] | None = None,
) -> list[LunInfo]:
    """Every block device of this host (whole disks, then each disk's partitions after it), or
    with ``paths`` (shell globs of device paths, as a test's ``luns[].path``) only those whose
    path one of them matches: only those are read for their signatures, and ``paths=[]``
    touches no device at all.

    Does not take exclusive claims (a concurrent ``mount`` elsewhere must never fail because
    discovery was looking); ``describe_block_device`` does that for the devices a test names.
    Returns within about ``PROBE_TIMEOUT_S`` whatever the devices do: one that does not answer
    its probe in time is in the list, ``unanswered``.
    ``dev_root`` and the other roots exist so tests can run this over a fake tree.
    """
    if paths is not None and not paths:
        return []
    roots = Roots(sys_root, proc_root, dev_root)
    mounts = read_mounts(proc_root)
    block_dir = os.path.join(sys_root, "block")
    try:
        disks = sorted(os.listdir(block_dir))
    except OSError as exc:
        log.warning("cannot list %s: no block devices discovered: %s", block_dir, exc)
        return []
    luns: list[LunInfo] = []
    for disk in disks:
        disk_dir = os.path.join(block_dir, disk)
        try:
            lun = _sys_block_lun(disk, disk_dir, disk_dir, "", roots, mounts)
        except _SKIPPABLE as exc:
            log.warning("skipping block device %s: %s", disk, exc)
            continue
        if lun is None:
            continue
        luns.append(lun)
        for part in lun.partitions:
            try:
                part_lun = _sys_block_lun(
                    part, os.path.join(disk_dir, part), disk_dir, disk, roots, mounts
                )
            except _SKIPPABLE as exc:
                log.warning("skipping partition %s of %s: %s", part, disk, exc)
                continue
            if part_lun is not None:
                luns.append(part_lun)
    if paths is not None:
        luns = [lun for lun in luns if any(fnmatch.fnmatchcase(lun.path, p) for p in paths)]
    return with_evidence(
        luns, roots, mounts, exclusive=False, use_blkid=use_blkid, ignore_pids=ignore_pids
    )


def describe_block_device(
    path: str,
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    *,
    use_blkid: bool = True,
    ignore_pids: Collection[int] = (),
    host: str | None = None,
) -> LunInfo:
    """The block device at ``path`` (any node or symlink to one), including an ``O_EXCL`` probe.

    ``path`` stays as the test named it; ``name`` is the kernel's name. Raises PreflightError
    naming the path when it is not a block device or sysfs does not know it.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise PreflightError(f"LUN {path}: {exc.strerror or exc}", host=host, lun=path) from exc
    if not stat.S_ISBLK(st.st_mode):
        raise PreflightError(f"LUN {path} is not a block device", host=host, lun=path)
    dev = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    sysdir = os.path.realpath(os.path.join(sys_root, "dev", "block", dev))
    name = os.path.basename(sysdir)
    is_partition = os.path.exists(os.path.join(sysdir, "partition"))
    disk_dir = os.path.dirname(sysdir) if is_partition else sysdir
    roots = Roots(sys_root, proc_root, "/dev")
    mounts = read_mounts(proc_root)
    try:
        lun = _sys_block_lun(
            name, sysdir, disk_dir, os.path.basename(disk_dir) if is_partition else "",
            roots, mounts, dev_path=path,
        )
    except _SKIPPABLE as exc:
        raise PreflightError(
            f"LUN {path} (block device {dev}): cannot read its sysfs entry: {exc}",
            host=host, lun=path,
        ) from exc
    if lun is None:
        raise PreflightError(
            f"LUN {path} ({name}) is empty: size 0, no backing file, or hidden", host=host, lun=path
        )
    return with_evidence(
        [lun], roots, mounts, exclusive=True, use_blkid=use_blkid, ignore_pids=ignore_pids
    )[0]


# --------------------------------------------------------------------------------------------
# File LUNs
# --------------------------------------------------------------------------------------------


def _file_block_bytes(path: str) -> int:
    """The file system's block size (statvfs f_bsize), clamped to 512..4096."""
    try:
        bsize = os.statvfs(path).f_bsize
    except OSError:
        return SECTOR_BYTES
    return max(SECTOR_BYTES, min(4096, bsize))


def _underlying_rotational(st_dev: int, sys_root: str) -> bool | None:
    dev_dir = os.path.join(sys_root, "dev", "block", f"{os.major(st_dev)}:{os.minor(st_dev)}")
    text = read_text(os.path.join(dev_dir, "queue", "rotational"))
    if text is None:  # a partition: the queue belongs to its disk
        text = read_text(os.path.join(dev_dir, "..", "queue", "rotational"))
    return None if text not in ("0", "1") else text == "1"


def file_lun(
    path: str,
    size_bytes: int | None = None,
    create: bool = False,
    *,
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    dev_root: str = "/dev",
    use_blkid: bool = True,
    ignore_pids: Collection[int] = (),
    host: str | None = None,
    created_as: str = "",
    layout: str = "none",
    progress: Callable[[int, int], None] | None = None,
    warn: Callable[[str], None] | None = None,
    discovered: bool = False,
) -> LunInfo:
    """A file named by a test as a LUN; created sparse (or extended) to ``size_bytes`` on request.

    The file's data are ivypy's own (``created``) when this call makes it (or sizes an empty
    one), when it carries ivypy's mark (``slave.lun_mark``) for its inode and size, or when
    it is ``created_as``: the ``file_id`` (``dev:inode``) of the file this run created before
    it was resumed (a file system without user extended attributes keeps no mark), unless a
    mark says it was copied or resized since. A file this call makes or sizes for ivypy gets
    the mark; where it cannot (no user extended attributes), ``warn`` (default: the log) is
    told once, naming the file.

    ``layout``: how a file this call creates is filled before use, ``random`` or ``zero``
    (every byte written, so that no read lands on a hole the file system answers without I/O:
    ``lay_out``), or ``none`` (sparse). ``progress(done_bytes, total_bytes)`` is called after
    each piece written; an exception it raises (the slave is stopping) abandons the layout,
    leaving no file at ``path``.

    Never truncates: an existing file larger than ``size_bytes`` keeps its size and data, and the
    LUN is its first ``size_bytes`` (I/O stays there, as with fio's ``size=``). A file smaller
    than ``size_bytes`` is extended only when ``create`` is true and the file is empty or
    ivypy's own (above): a file someone else made is refused, never grown (that would be a
    write the test did not ask for, before any evidence of its use was looked at). Without
    ``size_bytes`` the LUN is the whole file. ``discovered``: the file was this LUN at
    discovery and is looked at again (before a write): a file gone or now smaller than
    ``size_bytes`` is refused saying so. Loop devices backed by the file are reported as its
    holders. Raises PreflightError naming the path on any refusal.
    """
    abspath = os.path.abspath(path)

    def refuse(reason: str) -> PreflightError:
        return PreflightError(f"file LUN {abspath}: {reason}", host=host, lun=abspath)

    def unmarked(why: str) -> None:
        (warn or log.warning)(
            f"file LUN {abspath}: ivypy cannot mark it as its own ({why}): a later run will "
            "take it for someone's data and refuse to write it unless its luns: entry sets "
            "allow_write: true"
        )

    if size_bytes is not None and size_bytes < 0:
        raise refuse(f"requested size {size_bytes} bytes is negative")
    created = False
    try:
        st = os.stat(abspath)
    except FileNotFoundError:
        if discovered:
            raise refuse("no longer exists (it did at discovery)") from None
        if not create:
            raise refuse("does not exist and the test does not ask to create it") from None
        if not size_bytes:
            raise refuse("does not exist; creating it needs a size") from None
        if layout == "none":
            st = _create_or_extend(abspath, size_bytes, refuse, new=True, mark_layout="none",
                                   unmarked=unmarked)
        else:
            st = lay_out(abspath, size_bytes, layout, refuse, progress, unmarked=unmarked)
        created = True
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from exc
    if stat.S_ISBLK(st.st_mode):
        raise refuse("is a block device; name it as a block LUN")
    if stat.S_ISDIR(st.st_mode):
        raise refuse("is a directory; name a file in it")
    if not stat.S_ISREG(st.st_mode):
        raise refuse("is not a regular file")
    file_id = f"{st.st_dev}:{st.st_ino}"
    mark_state, mark = read_mark(abspath, st)
    # a resumed run's own file, where no mark says otherwise (a file system that keeps none)
    claimed = bool(created_as) and created_as == file_id
    created = created or mark_state == MARK_OK or (
        claimed and mark_state in (MARK_NONE, MARK_UNSUPPORTED))
    if size_bytes is not None and st.st_size < size_bytes:
        if discovered:
            raise refuse(f"is now {st.st_size:,} bytes, smaller than the {size_bytes:,} bytes "
                         "it had as a LUN at discovery")
        if not create:
            raise refuse(
                f"is {st.st_size:,} bytes, smaller than the requested {size_bytes:,} bytes, and "
                "the test does not ask to create (extend) it"
            )
        if not created and st.st_size > 0:
            raise refuse(
                f"is {st.st_size:,} bytes, smaller than the requested size ({size_bytes:,} "
                "bytes) and not ivypy's: ivypy grows only files it created (or empty ones); "
                "ask for a size the file has, or name another file"
            )
        # ivypy's own file stays its own at its new size (its mark's layout and date kept);
        # an empty one (it held nobody's data) becomes its own
        created = True
        own = mark if mark_state == MARK_OK else None
        st = _create_or_extend(
            abspath, size_bytes, refuse, unmarked=unmarked, seen=st,
            mark_layout=own.layout if own else "none", mark_created=own.created if own else "",
        )
        file_id = f"{st.st_dev}:{st.st_ino}"
        mark_state, mark = read_mark(abspath, st)
    if st.st_size == 0:
        raise refuse("is empty; give a size and allow creating it")
    lun_bytes = st.st_size
    if size_bytes and size_bytes < st.st_size:
        lun_bytes = size_bytes
        log.info(
            "file LUN %s: the file is %d bytes; I/O stays in its first %d (the requested size)",
            abspath, st.st_size, size_bytes,
        )
    block_bytes = _file_block_bytes(abspath)
    real = os.path.realpath(abspath)
    mounts = read_mounts(proc_root)
    fs_type = mounts.fstype_by_dev.get(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", "")
    lun = LunInfo(
        path=abspath,
        kind=KIND_FILE,
        name=os.path.basename(abspath),
        size_bytes=lun_bytes,
        file_size_bytes=st.st_size,
        logical_block_bytes=block_bytes,
        physical_block_bytes=block_bytes,
        rotational=_underlying_rotational(st.st_dev, sys_root),
        holders=loops_backed_by(
            real, (st.st_dev, st.st_ino), loop_files(sys_root, dev_root, mounts)
        ),
        mount_points=mounts.lookup("", dict.fromkeys((abspath, real))),
        read_only=not os.access(abspath, os.W_OK),
        created=created,
        file_id=file_id,
        fs_type=fs_type,
        has_holes=_has_holes(abspath, lun_bytes),
        mark=mark_state,
        mark_created=mark.created if mark else "",
        mark_size_bytes=mark.size_bytes if mark else 0,
    )
    roots = Roots(sys_root, proc_root, os.path.dirname(abspath))
    return with_evidence(
        [lun], roots, mounts, exclusive=False, use_blkid=use_blkid, ignore_pids=ignore_pids
    )[0]


#: what ``lay_out`` writes per call: large enough to stream, small enough to report often
LAYOUT_CHUNK_BYTES = 4 << 20
#: ... and syncs every this many bytes: its progress is of bytes on the device, and the sync
#: at its end (of what the page cache still holds: gigabytes on a host with much memory) is
#: short. The master hears the progress (at least once a second) and gives up on a host only
#: after a minute without a word (``master.hosts.session.HostSession.discover``): a device
#: that writes under about 1 MB/s would go that long between syncs.
LAYOUT_SYNC_BYTES = 64 << 20


def lay_out(path: str, size_bytes: int, layout: str, refuse: Callable[[str], PreflightError],
            progress: Callable[[int, int], None] | None = None, *,
            unmarked: Callable[[str], None] | None = None) -> os.stat_result:
    """Create ``path`` with all of its ``size_bytes`` written: random bytes (``random``: a
    storage system that compresses or dedupes sees no shortcut) or zeros (``zero``), marked as
    ivypy's (``slave.lun_mark``), synced every ``LAYOUT_SYNC_BYTES`` and at the end;
    ``progress(done_bytes, size_bytes)`` is called after each part written (and synced at the
    sync points). It is written under a hidden name beside it and
    linked into place only when whole, so a layout cut off (the run stopped, the disk full)
    never leaves a half-written file under its name, nor a marked one that a later run would
    take for ivypy's whole file; the hidden file of an earlier cut-off layout is removed first.
    Refuses (naming the file) a file someone else made meanwhile. Where the mark cannot be set,
    ``unmarked`` (default: the log) is told why and the file is laid out without it."""
    if layout not in ("random", "zero"):
        raise ValueError(f"layout {layout!r}: random, zero or none")
    part = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.ivypy-layout")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(part)
    try:
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        parent = os.path.dirname(path)
        if exc.errno == errno.ENOENT and not os.path.isdir(parent):
            raise refuse(f"cannot create: its directory {parent} does not exist") from exc
        raise refuse(f"cannot create: {exc.strerror or exc}") from exc
    rng = np.random.default_rng()
    zeros = bytes(min(LAYOUT_CHUNK_BYTES, size_bytes)) if layout == "zero" else b""
    done = synced = 0
    try:
        while done < size_bytes:
            n = min(LAYOUT_CHUNK_BYTES, size_bytes - done)
            data = memoryview(zeros)[:n] if layout == "zero" else memoryview(rng.bytes(n))
            while data:
                data = data[os.write(fd, data):]
            done += n
            if done - synced >= LAYOUT_SYNC_BYTES and done < size_bytes:
                os.fdatasync(fd)
                synced = done
            if progress is not None:
                progress(done, size_bytes)
        if layout == "random":
            _unspell_signatures(fd, part, path, rng)
        why = write_mark(fd, layout)
        if why:
            (unmarked or log.warning)(why)
        os.fsync(fd)
        os.link(part, path)
    except FileExistsError as exc:
        raise refuse("was created by someone else while ivypy was laying it out") from exc
    except OSError as exc:
        raise refuse(f"cannot lay out ({done} of {size_bytes} bytes written): "
                     f"{exc.strerror or exc}") from exc
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(part)
    log.info("file LUN %s: laid out, %d bytes of %s data", path, size_bytes, layout)
    return os.stat(path)


#: how many times ``_unspell_signatures`` changes what wipefs finds before it gives up
UNSPELL_ROUNDS = 8


def _unspell_signatures(fd: int, part: str, path: str, rng: np.random.Generator) -> None:
    """Random bytes can spell a signature that blkid knows: blkid 2.38 takes a file larger
    than 1,440 KiB (smaller ones it calls tiny and does not probe for RAID members) whose last
    sector starts with ``JM`` for a JMicron RAID member, one layout in 65,536, and a later run
    would then refuse to write to ivypy's own file. Each signature that wipefs (util-linux,
    beside blkid) finds in ``part``, the layout of ``path`` just written, has the first byte of
    its magic changed to another until none is found; where one stays (or wipefs fails), the
    log says so and the preflight will name it."""
    wipefs = shutil.which("wipefs")
    if wipefs is None:
        return
    for changes in range(UNSPELL_ROUNDS + 1):
        try:
            done = subprocess.run([wipefs, "--no-act", "--json", part], capture_output=True,
                                  text=True, timeout=60, stdin=subprocess.DEVNULL, check=True)
            found = json.loads(done.stdout or "{}").get("signatures", [])
            offsets = {int(sig["offset"], 16): sig["type"] for sig in found}
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as exc:
            why = getattr(exc, "stderr", None) or exc  # a failed wipefs: what it said
            log.warning("file LUN %s: its random layout was not checked for signatures "
                        "(wipefs: %s)", path, str(why).strip())
            return
        if not offsets:
            return
        if changes == UNSPELL_ROUNDS:
            log.warning("file LUN %s: its random layout still shows a signature after %d "
                        "changes: %s", path, changes, ", ".join(sorted(set(offsets.values()))))
            return
        for offset, kind in sorted(offsets.items()):
            (byte,) = os.pread(fd, 1, offset)
            os.pwrite(fd, bytes([byte ^ int(rng.integers(1, 256))]), offset)
            log.info("file LUN %s: its random bytes spelled a %s signature at byte %d: "
                     "changed", path, kind, offset)


def _has_holes(path: str, size_bytes: int) -> bool:
    """Whether the first ``size_bytes`` of the file hold a hole (an unwritten range, read as
    zeros without I/O): SEEK_HOLE finds one before their end. False where it cannot tell."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) < size_bytes
    except OSError:
        return False
    finally:
        os.close(fd)


def _create_or_extend(
    path: str, size_bytes: int, refuse: Callable[[str], PreflightError], *, new: bool = False,
    seen: os.stat_result | None = None, mark_layout: str = "", mark_created: str = "",
    unmarked: Callable[[str], None] | None = None,
) -> os.stat_result:
    """Size ``path`` to ``size_bytes`` (sparse), never shrinking it; ``new``: create it, and
    refuse one that another process made meanwhile (it would be taken for ours); ``seen``:
    the stat of the existing file judged ivypy's (or empty), refused if the file opened is
    no longer that file at that size (replaced or written meanwhile).
    ``mark_layout``: the file is ivypy's; mark it at its new size with that layout and
    ``mark_created`` (default: now; an earlier mark's date for a file ivypy made before),
    telling ``unmarked`` (default: the log) why not where the mark cannot be set."""
    flags = os.O_WRONLY | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if new else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError as exc:
        raise refuse("was created by someone else while ivypy was creating it") from exc
    except OSError as exc:
        parent = os.path.dirname(path)
        if not new:
            raise refuse(f"cannot open it to size it to {size_bytes:,} bytes: "
                         f"{exc.strerror or exc}") from exc
        if exc.errno == errno.ENOENT and not os.path.isdir(parent):
            raise refuse(f"cannot create: its directory {parent} does not exist") from exc
        raise refuse(f"cannot create: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("is not a regular file")
        if seen is not None and (st.st_dev, st.st_ino, st.st_size) != (
                seen.st_dev, seen.st_ino, seen.st_size):
            raise refuse("changed (replaced or resized) while ivypy was looking at it; not grown")
        if st.st_size < size_bytes:  # re-checked on the open file: never shrink
            os.ftruncate(fd, size_bytes)
            log.info("file LUN %s: sized to %d bytes (sparse)", path, size_bytes)
        if mark_layout:
            why = write_mark(fd, mark_layout, created=mark_created)
            if why:
                (unmarked or log.warning)(why)
        return os.fstat(fd)
    except OSError as exc:
        raise refuse(f"cannot size to {size_bytes} bytes: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def lun_for_path(
    path: str,
    size_bytes: int | None = None,
    create: bool = False,
    *,
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    use_blkid: bool = True,
    ignore_pids: Collection[int] = (),
    host: str | None = None,
    discovered_as: str = "",
) -> LunInfo:
    """``describe_block_device`` when ``path`` is a block device, else ``file_lun``.

    ``discovered_as``: the kind (``KIND_BLOCK``, ``KIND_FILE``) of the LUN discovery found at
    ``path``, looked at again now: a LUN gone since, or no longer a block device, is refused
    saying so (not as a file the test did not ask to create)."""
    try:
        is_block = stat.S_ISBLK(os.stat(path).st_mode)
    except FileNotFoundError:
        if discovered_as == KIND_BLOCK:
            raise PreflightError(f"LUN {path}: no longer exists (it did at discovery, a block "
                                 "device)", host=host, lun=path) from None
        is_block = False  # file_lun says what is missing
    except OSError:
        is_block = discovered_as == KIND_BLOCK  # describe_block_device says why it cannot look
    if is_block:
        return describe_block_device(
            path, sys_root, proc_root, use_blkid=use_blkid, ignore_pids=ignore_pids, host=host
        )
    if discovered_as == KIND_BLOCK:
        raise PreflightError(f"LUN {path} was a block device at discovery and is not one now",
                             host=host, lun=path)
    return file_lun(
        path, size_bytes, create, sys_root=sys_root, proc_root=proc_root, use_blkid=use_blkid,
        ignore_pids=ignore_pids, host=host, discovered=bool(discovered_as),
    )
