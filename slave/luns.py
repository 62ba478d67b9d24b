"""LUN discovery: which block devices and files this host offers, what they are, and who uses them.

Owns ``LunInfo`` (one LUN's attributes and in-use evidence, a value that travels to the master as a
plain dict) and the functions that build it:

- ``discover_block_devices`` walks ``/sys/block`` (whole disks and their partitions: sd, nvme, dm,
  md, loop with its backing file, virtio, ...). Loop devices without a backing file, zero-size
  devices and hidden devices (nvme multipath legs) are skipped.
- ``describe_block_device`` describes the one block device a test names (any path to a device
  node, e.g. ``/dev/mapper/vg-lv``) and also asks the kernel whether someone holds it exclusively.
- ``file_lun`` describes a file named by a test, creating or extending it (sparse) when the test
  says so, never truncating it. ``lun_for_path`` picks between the two.

Evidence of use comes from the kernel: mounts (``/proc/self/mountinfo``, matched by device number
and by source path), active swap (``/proc/swaps``), holders and partitions (sysfs), other
processes' open file descriptors (``/proc/<pid>/fd``, excluding our own pid and ``ignore_pids``),
and a signature read from the device itself (``slave/signatures.py``: our own probe of small
regions of it, with blkid as a second opinion where it is installed).
Devices and files are matched as objects (device number; ``st_dev``/``st_ino``, for a loop
device's file as the kernel reports it), never by name alone: a device node outside /dev, a hard
link, a bind mount or a deleted name is still the same LUN. Paths on network or FUSE file systems
are never stat'ed (a dead server would hang discovery); there names are all we compare.
Only what is visible from this host's mount and pid namespaces can be seen; a mount in another
mount namespace is caught only by the exclusive-open probe of ``describe_block_device``.

Rules: this module only reads (plus creating or growing a file LUN on request). It never writes to a
device, never opens one for writing, and never holds an exclusive claim longer than one
``open``/``close`` pair. Sysfs entries that vanish or cannot be read mid-scan are logged and
skipped; discovery does not crash on them. Deciding whether a write may go ahead is
``slave/preflight.py``'s job, not this module's.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import logging
import os
import re
import stat
import struct
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import PreflightError, RemoteProtocolError
from slave.signatures import SECTOR_BYTES, BlkidRun, probe_path

log = logging.getLogger(__name__)

KIND_BLOCK = "block"
KIND_FILE = "file"
SWAP_MOUNT_POINT = "[swap]"

# Errors that mean "this entry vanished or is unreadable": log and skip, never crash the scan.
_SKIPPABLE = (OSError, ValueError, struct.error)


@dataclass(frozen=True)
class LunInfo:
    """One LUN as seen from its host. Empty strings / empty tuples mean "not exposed" or "none".

    ``dev`` is ``major:minor`` for block devices. ``parent`` is the whole disk a partition belongs
    to. ``open_by`` lists other processes as ``pid:comm``. ``exclusive_busy`` is True when an
    ``O_EXCL`` open failed with EBUSY (mounted, held, or claimed by another process).
    ``probe_error`` is set when the device or file could not be read to look for a signature, in
    which case nothing is known about its contents. For a loop device, ``backing_open_by`` lists
    other processes that have its backing file open (``pid:comm``) and ``backing_shared_with``
    the other loop devices over the same file: a write to the loop device is a write to them.
    A partition of a loop device has its disk's ``backing_file`` and the same two checks.
    For a partition, ``disk_holders`` and ``disk_open_by`` are its whole disk's holders and
    other openers (a device-mapper map over the disk, a VM with the disk open): a write to the
    partition is a write to the disk they use. ``file_size_bytes`` is a file LUN's file size,
    which may exceed ``size_bytes`` (the LUN is then the file's first ``size_bytes``); 0 for a
    block device.
    """

    path: str
    kind: str
    name: str
    size_bytes: int
    logical_block_bytes: int = SECTOR_BYTES
    physical_block_bytes: int = SECTOR_BYTES
    rotational: bool | None = None
    vendor: str = ""
    model: str = ""
    serial: str = ""
    wwid: str = ""
    dev: str = ""
    parent: str = ""
    backing_file: str = ""
    read_only: bool = False
    partitions: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()
    mount_points: tuple[str, ...] = ()
    signature: str = ""
    open_by: tuple[str, ...] = ()
    exclusive_busy: bool = False
    probe_error: str = ""
    backing_open_by: tuple[str, ...] = ()
    backing_shared_with: tuple[str, ...] = ()
    disk_holders: tuple[str, ...] = ()
    disk_open_by: tuple[str, ...] = ()
    file_size_bytes: int = 0

    def attributes(self) -> dict[str, str]:
        """String attributes the master uses as rollup and selection keys (stable per LUN)."""
        rotational = "" if self.rotational is None else ("1" if self.rotational else "0")
        return {
            "lun": self.path,
            "kind": self.kind,
            "name": self.name,
            "size_bytes": str(self.size_bytes),
            "vendor": self.vendor,
            "model": self.model,
            "serial": self.serial,
            "wwid": self.wwid,
            "rotational": rotational,
            "logical_block_bytes": str(self.logical_block_bytes),
            "physical_block_bytes": str(self.physical_block_bytes),
            "parent": self.parent,
            "backing_file": self.backing_file,
            "file_size_bytes": str(self.file_size_bytes) if self.kind == KIND_FILE else "",
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of str / int / bool / None / list of str, fit for msgpack."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LunInfo:
        """Inverse of ``to_dict``; a missing required key, unknown key or wrong type is an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RemoteProtocolError(f"LunInfo: unknown field(s) {', '.join(unknown)}")
        for required in ("path", "kind", "name", "size_bytes"):
            if required not in data:
                raise RemoteProtocolError(f"LunInfo: missing field {required!r}")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            kwargs[key] = _checked_field(key, value)
        if kwargs["kind"] not in (KIND_BLOCK, KIND_FILE):
            raise RemoteProtocolError(
                f"LunInfo: kind must be 'block' or 'file', not {data['kind']!r}"
            )
        return cls(**kwargs)


_INT_FIELDS = frozenset({
    "size_bytes", "logical_block_bytes", "physical_block_bytes", "file_size_bytes",
})
_BOOL_FIELDS = frozenset({"read_only", "exclusive_busy"})
_TUPLE_FIELDS = frozenset({
    "partitions", "holders", "mount_points", "open_by", "backing_open_by", "backing_shared_with",
    "disk_holders", "disk_open_by",
})


def _checked_field(key: str, value: Any) -> Any:
    if key in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RemoteProtocolError(f"LunInfo: {key} must be a non-negative int, not {value!r}")
        return value
    if key in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise RemoteProtocolError(f"LunInfo: {key} must be a bool, not {value!r}")
        return value
    if key == "rotational":
        if value is not None and not isinstance(value, bool):
            raise RemoteProtocolError(f"LunInfo: rotational must be a bool or None, not {value!r}")
        return value
    if key in _TUPLE_FIELDS:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise RemoteProtocolError(f"LunInfo: {key} must be a list of str, not {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise RemoteProtocolError(f"LunInfo: {key} must be a str, not {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# /proc: mounts, swaps, open file descriptors
# --------------------------------------------------------------------------------------------

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(text: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


# File systems where a stat() can block for as long as a server does not answer (a hard NFS
# mount of a dead server, a stuck FUSE daemon): discovery never stats a path on one of these.
_NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "9p", "afs", "lustre", "gpfs", "glusterfs",
    "beegfs", "ncpfs", "fuse", "fuseblk",
})


@dataclass(frozen=True)
class _Mounts:
    by_dev: Mapping[str, tuple[str, ...]]
    by_source: Mapping[str, tuple[str, ...]]
    network_points: tuple[str, ...] = ()

    def lookup(self, dev: str, paths: Iterable[str]) -> tuple[str, ...]:
        found = list(self.by_dev.get(dev, ())) if dev else []
        for p in paths:
            found.extend(self.by_source.get(p, ()))
        return tuple(dict.fromkeys(found))

    def may_hang(self, path: str) -> bool:
        """True when ``path`` lies on a network or FUSE file system (a stat there may block)."""
        return any(
            path == point or path.startswith(point.rstrip("/") + "/")
            for point in self.network_points
        )


def _read_mounts(proc_root: str) -> _Mounts:
    """Mount points by ``major:minor`` and by source path (realpath), plus active swap."""
    by_dev: dict[str, list[str]] = {}
    by_source: dict[str, list[str]] = {}
    network: list[str] = []
    text = _read_text(os.path.join(proc_root, "self", "mountinfo"))
    if text is None:
        log.warning("cannot read %s/self/mountinfo: mount points unknown", proc_root)
        text = ""
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-")
            dev, mount_point, source = fields[2], _unescape(fields[4]), _unescape(fields[sep + 2])
            fstype = fields[sep + 1]
        except (ValueError, IndexError):
            continue
        by_dev.setdefault(dev, []).append(mount_point)
        if source.startswith("/"):
            by_source.setdefault(os.path.realpath(source), []).append(mount_point)
        if fstype in _NETWORK_FS or fstype.startswith("fuse."):
            network.append(mount_point)
    swaps = _read_text(os.path.join(proc_root, "swaps")) or ""
    for line in swaps.splitlines()[1:]:
        fields = line.split()
        if fields:
            swap_path = os.path.realpath(_unescape(fields[0]))
            by_source.setdefault(swap_path, []).append(SWAP_MOUNT_POINT)
    return _Mounts(
        by_dev={k: tuple(v) for k, v in by_dev.items()},
        by_source={k: tuple(v) for k, v in by_source.items()},
        network_points=tuple(network),
    )


def scan_open_files(
    proc_root: str,
    paths: Collection[str],
    rdevs: Collection[int] = (),
    ignore_pids: Collection[int] = (),
    inodes: Collection[tuple[int, int]] = (),
    may_hang: Callable[[str], bool] | None = None,
) -> dict[str, tuple[str, ...]]:
    """Which other processes have one of ``paths``, a block device numbered in ``rdevs`` or a
    regular file ``(st_dev, st_ino)`` in ``inodes`` open.

    Returns path-, ``rdev:<n>``- and ``ino:<dev>:<ino>``-keyed ``("pid:comm", ...)`` (a
    descriptor found by both its name and its object is listed under both keys). Devices and
    files are matched by the object each descriptor refers to (a stat through
    ``/proc/<pid>/fd/<n>``), not by the name its opener used: a device node outside /dev (a
    container's, kubelet's), a hard link or a bind mount is the same object. Descriptors whose
    name ``may_hang`` says lies on a network file system are matched by name only. Our own pid
    and ``ignore_pids`` are left out; processes we may not inspect are skipped silently (non-root
    sees only its own).
    """
    own = {os.getpid(), *ignore_pids}
    wanted_paths = set(paths)
    wanted_rdevs = set(rdevs)
    wanted_inodes = set(inodes)
    hits: dict[str, list[int]] = {}
    try:
        pid_names = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError as exc:
        log.warning("cannot list %s: open files unknown: %s", proc_root, exc)
        return {}
    for pid_name in pid_names:
        pid = int(pid_name)
        if pid in own:
            continue
        fd_dir = os.path.join(proc_root, pid_name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            link = os.path.join(fd_dir, fd)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            keys = [target] if target in wanted_paths else []
            if (
                (wanted_rdevs or wanted_inodes)
                and target.startswith("/")
                and not (may_hang is not None and may_hang(target))
            ):
                keys.append(_object_key(link, wanted_rdevs, wanted_inodes) or "")
            for key in filter(None, keys):
                pids = hits.setdefault(key, [])
                if pid not in pids:
                    pids.append(pid)
    result: dict[str, tuple[str, ...]] = {}
    for key, pids in hits.items():
        result[key] = tuple(
            f"{pid}:{_read_text(os.path.join(proc_root, str(pid), 'comm')) or '?'}" for pid in pids
        )
    return result


def _object_key(
    link: str, rdevs: Collection[int], inodes: Collection[tuple[int, int]]
) -> str | None:
    """``rdev:<n>`` or ``ino:<dev>:<ino>`` when the file behind ``link`` is one we look for."""
    try:
        st = os.stat(link)
    except OSError:
        return None
    if stat.S_ISBLK(st.st_mode) and st.st_rdev in rdevs:
        return f"rdev:{st.st_rdev}"
    if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in inodes:
        return _inode_key(st.st_dev, st.st_ino)
    return None


def _inode_key(st_dev: int, st_ino: int) -> str:
    return f"ino:{st_dev}:{st_ino}"


def _rdev_number(dev: str) -> int | None:
    try:
        major, minor = dev.split(":")
        return os.makedev(int(major), int(minor))
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# Block devices from sysfs
# --------------------------------------------------------------------------------------------


def _list_dir(path: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(path)))
    except OSError:
        return ()


def _int_attr(path: str, default: int) -> int:
    text = _read_text(path)
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
            text = _read_text(os.path.join(disk_dir, name))
            if text:
                return text
        return ""

    serial = first("device/serial", "serial") or _vpd_serial(os.path.join(device, "vpd_pg80"))
    wwid = first("wwid", "device/wwid", "dm/uuid", "md/uuid")
    return first("device/vendor"), first("device/model"), serial, wwid


@dataclass(frozen=True)
class _Roots:
    sys_root: str
    proc_root: str
    dev_root: str


def _sys_block_lun(
    name: str, sysdir: str, disk_dir: str, parent: str, roots: _Roots, mounts: _Mounts,
    dev_path: str | None = None,
) -> LunInfo | None:
    """One LunInfo from sysfs (without signature / open_by), or None to skip the device."""
    if _read_text(os.path.join(sysdir, "hidden")) == "1":
        return None
    size_text = _read_text(os.path.join(sysdir, "size"))
    if size_text is None:
        raise FileNotFoundError(errno.ENOENT, "size vanished", sysdir)
    size_bytes = int(size_text) * SECTOR_BYTES
    if size_bytes == 0:
        return None
    backing = ""
    if name.startswith("loop") and not parent:
        backing = _read_text(os.path.join(sysdir, "loop", "backing_file")) or ""
        if not backing:
            return None
    elif parent.startswith("loop"):  # a partition of a loop device: its data is in that file
        backing = _read_text(os.path.join(disk_dir, "loop", "backing_file")) or ""
    queue = os.path.join(disk_dir, "queue")
    rotational_text = _read_text(os.path.join(queue, "rotational"))
    path = dev_path or os.path.join(roots.dev_root, name.replace("!", "/"))
    dev = _read_text(os.path.join(sysdir, "dev")) or ""
    partitions: tuple[str, ...] = ()
    if not parent:
        partitions = tuple(
            e for e in _list_dir(sysdir)
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
        read_only=_read_text(os.path.join(sysdir, "ro")) == "1",
        partitions=partitions,
        holders=_list_dir(os.path.join(sysdir, "holders")),
        disk_holders=_list_dir(os.path.join(disk_dir, "holders")) if parent else (),
        mount_points=mounts.lookup(dev, dict.fromkeys((path, real))),
        vendor=vendor,
        model=model,
        serial=serial,
        wwid=wwid,
    )


def _file_identity(lun: LunInfo) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a file LUN (None for block devices or a file that vanished)."""
    if lun.kind != KIND_FILE:
        return None
    try:
        st = os.stat(lun.path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _finish(
    luns: list[LunInfo],
    roots: _Roots,
    mounts: _Mounts,
    *,
    exclusive: bool,
    use_blkid: bool,
    ignore_pids: Collection[int],
) -> list[LunInfo]:
    """Add signature, probe errors, exclusive-claim, open_by and (for loop devices) backing-file
    evidence to sysfs/stat facts."""
    blkid = BlkidRun(lun.path for lun in luns) if use_blkid else None
    probed: list[LunInfo] = []
    for lun in luns:
        signature, error, busy = probe_path(
            lun.path, lun.size_bytes, lun.logical_block_bytes,
            exclusive=exclusive and lun.kind == KIND_BLOCK,
        )
        if error:
            log.info("LUN %s: %s; its contents are unknown", lun.path, error)
        probed.append(
            dataclasses.replace(lun, signature=signature, probe_error=error, exclusive_busy=busy)
        )
    disk_rdevs = [_disk_rdev(lun, roots.sys_root) for lun in probed]
    disk_nodes = {
        lun.path: os.path.join(roots.dev_root, lun.parent)
        for lun in probed if lun.kind == KIND_BLOCK and lun.parent
    }
    paths = {p for lun in probed for p in (lun.path, os.path.realpath(lun.path))}
    paths.update(disk_nodes.values())
    rdevs = {r for lun in probed if (r := _rdev_number(lun.dev)) is not None}
    rdevs.update(r for r in disk_rdevs if r is not None)
    identities = [_file_identity(lun) for lun in probed]
    backings = _backing_files(probed, roots, mounts)
    if blkid is not None and blkid.proc is not None:  # our blkid has them open right now
        ignore_pids = {*ignore_pids, blkid.proc.pid}
    opened = scan_open_files(
        roots.proc_root,
        paths | {b.path for b in backings.values() if not b.deleted},
        rdevs,
        ignore_pids,
        inodes={i for i in [*identities, *(b.identity for b in backings.values())] if i},
        may_hang=mounts.may_hang,
    )
    second = blkid.result() if blkid is not None else {}
    for i, lun in enumerate(probed):
        if blkid is not None and blkid.failed and not lun.signature and not lun.probe_error:
            # our probe knows fewer signatures than blkid (not hardware-RAID metadata such as
            # DDF or Intel IMSM, DRBD, VDO, BitLocker, UDF, ZFS cache/spare devices ...): a
            # blank answer from it alone is not enough to let a write through
            probed[i] = lun = dataclasses.replace(lun, probe_error=(
                f"{blkid.failed}, and our own probe, which knows fewer signatures, found none"))
        theirs = second.get(lun.path, "")
        if theirs and not lun.signature:
            log.info("LUN %s: blkid found %s where our probe found none", lun.path, theirs)
            probed[i] = dataclasses.replace(lun, signature=theirs)
        elif theirs and theirs != lun.signature:
            log.debug("LUN %s: our probe says %s, blkid says %s", lun.path, lun.signature, theirs)
    out = []
    for lun, identity, disk_rdev in zip(probed, identities, disk_rdevs, strict=True):
        keys = [lun.path, os.path.realpath(lun.path)]
        rdev = _rdev_number(lun.dev)
        if rdev is not None:
            keys.append(f"rdev:{rdev}")
        if identity is not None:
            keys.append(_inode_key(*identity))
        lun = dataclasses.replace(lun, open_by=_who(opened, keys))
        if lun.path in disk_nodes:
            disk_keys = [disk_nodes[lun.path], *([f"rdev:{disk_rdev}"] if disk_rdev else [])]
            lun = dataclasses.replace(lun, disk_open_by=_who(opened, disk_keys))
        backing = backings.get(lun.path)
        if backing is not None:
            backing_keys = [] if backing.deleted else [backing.path]
            if backing.identity is not None:
                backing_keys.append(_inode_key(*backing.identity))
            lun = dataclasses.replace(
                lun,
                backing_open_by=_who(opened, backing_keys),
                backing_shared_with=backing.shared_with,
            )
        out.append(lun)
    return out


def _disk_rdev(lun: LunInfo, sys_root: str) -> int | None:
    """The device number of a partition's whole disk (None for anything else)."""
    if lun.kind != KIND_BLOCK or not lun.parent:
        return None
    return _rdev_number(_read_text(os.path.join(sys_root, "block", lun.parent, "dev")) or "")


def _who(opened: Mapping[str, tuple[str, ...]], keys: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w for k in dict.fromkeys(keys) for w in opened.get(k, ())))


@dataclass(frozen=True)
class _Backing:
    """A loop LUN's backing file and the other loop devices over the same file."""

    path: str
    deleted: bool
    identity: tuple[int, int] | None
    shared_with: tuple[str, ...]


def _backing_files(luns: list[LunInfo], roots: _Roots, mounts: _Mounts) -> dict[str, _Backing]:
    """By LUN path, for every loop device among ``luns``: its file, by name and identity."""
    if not any(lun.backing_file for lun in luns):
        return {}
    loops = _loop_files(roots.sys_root, roots.dev_root, mounts)
    found: dict[str, _Backing] = {}
    for lun in luns:
        loop_name = lun.parent or lun.name  # a partition's file is its loop device's
        mine = loops.get(loop_name)
        if not lun.backing_file or mine is None:
            continue
        if mine.identity is None and not mounts.may_hang(mine.path):  # node not in dev_root
            mine = dataclasses.replace(
                mine, identity=_loop_backing_identity(lun.path, lun.dev)
            )
        shared = tuple(
            name for name, other in loops.items() if name != loop_name and other.same_file(mine)
        )
        found[lun.path] = _Backing(mine.path, mine.deleted, mine.identity, shared)
    return found


def discover_block_devices(
    sys_root: str = "/sys",
    proc_root: str = "/proc",
    *,
    dev_root: str = "/dev",
    use_blkid: bool = True,
    ignore_pids: Collection[int] = (),
) -> list[LunInfo]:
    """Every block device of this host (whole disks, then each disk's partitions after it).

    Does not take exclusive claims (a concurrent ``mount`` elsewhere must never fail because
    discovery was looking); ``describe_block_device`` does that for the devices a test names.
    ``dev_root`` and the other roots exist so tests can run this over a fake tree.
    """
    roots = _Roots(sys_root, proc_root, dev_root)
    mounts = _read_mounts(proc_root)
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
    return _finish(
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
    roots = _Roots(sys_root, proc_root, "/dev")
    mounts = _read_mounts(proc_root)
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
    return _finish(
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
    text = _read_text(os.path.join(dev_dir, "queue", "rotational"))
    if text is None:  # a partition: the queue belongs to its disk
        text = _read_text(os.path.join(dev_dir, "..", "queue", "rotational"))
    return None if text not in ("0", "1") else text == "1"


_LOOP_GET_STATUS64 = 0x4C05
_LOOP_INFO64 = struct.Struct("<QQ")  # lo_device, lo_inode: the start of struct loop_info64
_LOOP_INFO64_BYTES = 232


def _loop_backing_identity(node: str, dev: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file behind the loop device ``node`` (sysfs ``dev`` numbers it).

    Asked of the kernel (LOOP_GET_STATUS64), so it holds when the file was renamed, deleted or is
    reached by another name. None when ``node`` is not that device or the kernel does not say.
    """
    try:
        fd = os.open(node, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISBLK(st.st_mode) or st.st_rdev != _rdev_number(dev):
            return None
        info = fcntl.ioctl(fd, _LOOP_GET_STATUS64, bytes(_LOOP_INFO64_BYTES))
    except OSError:
        return None
    finally:
        os.close(fd)
    st_dev, st_ino = _LOOP_INFO64.unpack_from(info)
    return (st_dev, st_ino)


@dataclass(frozen=True)
class _LoopFile:
    """One attached loop device and its backing file, by name and (where known) identity."""

    name: str
    path: str  # the kernel's name for the file, without " (deleted)"
    deleted: bool
    identity: tuple[int, int] | None

    def same_file(self, other: _LoopFile) -> bool:
        if self.identity is not None and other.identity is not None:
            return self.identity == other.identity
        return not self.deleted and not other.deleted and self.path == other.path


def _loop_files(sys_root: str, dev_root: str, mounts: _Mounts) -> dict[str, _LoopFile]:
    """Every attached loop device of the host. The kernel's backing_file is a name: it differs
    from ours for a hard link, through a bind mount, or once that name was deleted; so each
    device is also asked for its file's identity, unless that name lies on a network file
    system."""
    block_dir = os.path.join(sys_root, "block")
    found: dict[str, _LoopFile] = {}
    for name in _list_dir(block_dir):
        if not name.startswith("loop"):
            continue
        backing = _read_text(os.path.join(block_dir, name, "loop", "backing_file")) or ""
        if not backing:
            continue
        path = backing.removesuffix(" (deleted)")
        identity = None
        if not mounts.may_hang(path):
            dev = _read_text(os.path.join(block_dir, name, "dev")) or ""
            identity = _loop_backing_identity(os.path.join(dev_root, name), dev)
        found[name] = _LoopFile(name, path, path != backing, identity)
    return found


def _loops_backed_by(
    real_path: str, identity: tuple[int, int], loops: Mapping[str, _LoopFile]
) -> tuple[str, ...]:
    """Loop devices over the file ``real_path`` (st_dev, st_ino ``identity``), by any name."""
    me = _LoopFile("", real_path, False, identity)
    return tuple(name for name, loop in loops.items() if loop.same_file(me))


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
) -> LunInfo:
    """A file named by a test as a LUN; created sparse (or extended) to ``size_bytes`` on request.

    Never truncates: an existing file larger than ``size_bytes`` keeps its size and data, and the
    LUN is its first ``size_bytes`` (I/O stays there, as with fio's ``size=``). A file smaller
    than ``size_bytes`` is extended only when ``create`` is true. Without ``size_bytes`` the LUN
    is the whole file. Loop devices backed by the file are reported as its holders. Raises
    PreflightError naming the path on any refusal.
    """
    abspath = os.path.abspath(path)

    def refuse(reason: str) -> PreflightError:
        return PreflightError(f"file LUN {abspath}: {reason}", host=host, lun=abspath)

    if size_bytes is not None and size_bytes < 0:
        raise refuse(f"requested size {size_bytes} bytes is negative")
    try:
        st = os.stat(abspath)
    except FileNotFoundError:
        if not create:
            raise refuse("does not exist and the test does not ask to create it") from None
        if not size_bytes:
            raise refuse("does not exist; creating it needs a size") from None
        st = _create_or_extend(abspath, size_bytes, refuse)
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from exc
    if stat.S_ISBLK(st.st_mode):
        raise refuse("is a block device; name it as a block LUN")
    if not stat.S_ISREG(st.st_mode):
        raise refuse("is not a regular file")
    if size_bytes is not None and st.st_size < size_bytes:
        if not create:
            raise refuse(
                f"is {st.st_size} bytes, smaller than the requested {size_bytes} bytes, and the "
                "test does not ask to create (extend) it"
            )
        st = _create_or_extend(abspath, size_bytes, refuse)
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
    mounts = _read_mounts(proc_root)
    lun = LunInfo(
        path=abspath,
        kind=KIND_FILE,
        name=os.path.basename(abspath),
        size_bytes=lun_bytes,
        file_size_bytes=st.st_size,
        logical_block_bytes=block_bytes,
        physical_block_bytes=block_bytes,
        rotational=_underlying_rotational(st.st_dev, sys_root),
        holders=_loops_backed_by(
            real, (st.st_dev, st.st_ino), _loop_files(sys_root, dev_root, mounts)
        ),
        mount_points=mounts.lookup("", dict.fromkeys((abspath, real))),
        read_only=not os.access(abspath, os.W_OK),
    )
    roots = _Roots(sys_root, proc_root, os.path.dirname(abspath))
    return _finish(
        [lun], roots, mounts, exclusive=False, use_blkid=use_blkid, ignore_pids=ignore_pids
    )[0]


def _create_or_extend(
    path: str, size_bytes: int, refuse: Callable[[str], PreflightError]
) -> os.stat_result:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise refuse(f"cannot create: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("is not a regular file")
        if st.st_size < size_bytes:  # re-checked on the open file: never shrink
            os.ftruncate(fd, size_bytes)
            log.info("file LUN %s: sized to %d bytes (sparse)", path, size_bytes)
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
) -> LunInfo:
    """``describe_block_device`` when ``path`` is a block device, else ``file_lun``."""
    try:
        is_block = stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        is_block = False
    if is_block:
        return describe_block_device(
            path, sys_root, proc_root, use_blkid=use_blkid, ignore_pids=ignore_pids, host=host
        )
    return file_lun(
        path, size_bytes, create, sys_root=sys_root, proc_root=proc_root, use_blkid=use_blkid,
        ignore_pids=ignore_pids, host=host,
    )
