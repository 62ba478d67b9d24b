"""Who uses a LUN, from the kernel: mounts and active swap (``/proc/self/mountinfo``,
``/proc/swaps``), other processes' open descriptors (``/proc/<pid>/fd``), each loop device's
backing file (by name and by identity, asked of the kernel), and the signature read from the
LUN itself (``slave.signatures``); ``with_evidence`` adds all of it to the facts ``slave.luns``
read from sysfs or a file's stat.

Objects are matched as objects (device number; ``st_dev``/``st_ino``), never by name alone.
Paths on network or FUSE file systems are never stat'ed (a dead server would hang discovery).
Rules: this module only reads. It never writes to a device, never opens one for writing, and
never holds an exclusive claim longer than one ``open``/``close`` pair (``probe_path``). No
device holds up the others: their signature probes run at once, each within a time bound
(``slave.signatures.probe_paths``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import re
import stat
import struct
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from slave.lun_info import KIND_BLOCK, KIND_FILE, SWAP_MOUNT_POINT, LunInfo
from slave.signatures import ProbeTarget, probe_paths, probing_pids

log = logging.getLogger(__name__)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(text: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def read_text(path: str) -> str | None:
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
class Mounts:
    by_dev: Mapping[str, tuple[str, ...]]
    by_source: Mapping[str, tuple[str, ...]]
    network_points: tuple[str, ...] = ()
    #: the file system type of each mounted device (``major:minor``), as mountinfo names it
    fstype_by_dev: Mapping[str, str] = dataclasses.field(default_factory=dict)

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


def read_mounts(proc_root: str) -> Mounts:
    """Mount points by ``major:minor`` and by source path (realpath), plus active swap."""
    by_dev: dict[str, list[str]] = {}
    by_source: dict[str, list[str]] = {}
    network: list[str] = []
    fstypes: dict[str, str] = {}
    text = read_text(os.path.join(proc_root, "self", "mountinfo"))
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
        fstypes.setdefault(dev, fstype)
        if source.startswith("/"):
            by_source.setdefault(os.path.realpath(source), []).append(mount_point)
        if fstype in _NETWORK_FS or fstype.startswith("fuse."):
            network.append(mount_point)
    swaps = read_text(os.path.join(proc_root, "swaps")) or ""
    for line in swaps.splitlines()[1:]:
        fields = line.split()
        if fields:
            swap_path = os.path.realpath(_unescape(fields[0]))
            by_source.setdefault(swap_path, []).append(SWAP_MOUNT_POINT)
    return Mounts(
        by_dev={k: tuple(v) for k, v in by_dev.items()},
        by_source={k: tuple(v) for k, v in by_source.items()},
        network_points=tuple(network),
        fstype_by_dev=fstypes,
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
            f"{pid}:{read_text(os.path.join(proc_root, str(pid), 'comm')) or '?'}" for pid in pids
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


def rdev_number(dev: str) -> int | None:
    try:
        major, minor = dev.split(":")
        return os.makedev(int(major), int(minor))
    except ValueError:
        return None


def list_dir(path: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(path)))
    except OSError:
        return ()


@dataclass(frozen=True)
class Roots:
    sys_root: str
    proc_root: str
    dev_root: str


def _file_identity(lun: LunInfo) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a file LUN (None for block devices or a file that vanished)."""
    if lun.kind != KIND_FILE:
        return None
    try:
        st = os.stat(lun.path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def with_evidence(
    luns: list[LunInfo],
    roots: Roots,
    mounts: Mounts,
    *,
    exclusive: bool,
    use_blkid: bool,
    ignore_pids: Collection[int],
) -> list[LunInfo]:
    """Add signature, probe errors, exclusive-claim, open_by and (for loop devices) backing-file
    evidence to sysfs/stat facts. The signature probes (``slave.signatures.probe_paths``) run
    at once, each within ``PROBE_TIMEOUT_S``: a LUN that does not answer is ``unanswered``, its
    contents unknown, and holds nobody else up."""
    probes = probe_paths([
        ProbeTarget(lun.path, lun.size_bytes, lun.logical_block_bytes,
                    exclusive=exclusive and lun.kind == KIND_BLOCK, key=_probe_key(lun))
        for lun in luns
    ], use_blkid=use_blkid)
    probed: list[LunInfo] = []
    for lun, probe in zip(luns, probes, strict=True):
        if probe.error and not probe.unanswered:  # probe_paths warned about those
            log.info("LUN %s: %s; its contents are unknown", lun.path, probe.error)
        probed.append(dataclasses.replace(
            lun, signature=probe.signature, probe_error=probe.error,
            exclusive_busy=probe.busy, unanswered=probe.unanswered,
        ))
    disk_rdevs = [_disk_rdev(lun, roots.sys_root) for lun in probed]
    disk_nodes = {
        lun.path: os.path.join(roots.dev_root, lun.parent)
        for lun in probed if lun.kind == KIND_BLOCK and lun.parent
    }
    paths = {p for lun in probed for p in (lun.path, os.path.realpath(lun.path))}
    paths.update(disk_nodes.values())
    rdevs = {r for lun in probed if (r := rdev_number(lun.dev)) is not None}
    rdevs.update(r for r in disk_rdevs if r is not None)
    identities = [_file_identity(lun) for lun in probed]
    backings = _backing_files(probed, roots, mounts)
    opened = scan_open_files(
        roots.proc_root,
        paths | {b.path for b in backings.values() if not b.deleted},
        rdevs,
        {*ignore_pids, *probing_pids()},  # our own blkid, still waiting on a device, is us
        inodes={i for i in [*identities, *(b.identity for b in backings.values())] if i},
        may_hang=mounts.may_hang,
    )
    out = []
    for lun, identity, disk_rdev in zip(probed, identities, disk_rdevs, strict=True):
        keys = [lun.path, os.path.realpath(lun.path)]
        rdev = rdev_number(lun.dev)
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


def _probe_key(lun: LunInfo) -> str:
    """What names the LUN across probes: a block device's number (whatever node names it), a
    file's path."""
    if lun.kind == KIND_BLOCK and lun.dev:
        return f"block {lun.dev}"
    return f"{lun.kind} {os.path.realpath(lun.path)}"


def _disk_rdev(lun: LunInfo, sys_root: str) -> int | None:
    """The device number of a partition's whole disk (None for anything else)."""
    if lun.kind != KIND_BLOCK or not lun.parent:
        return None
    return rdev_number(read_text(os.path.join(sys_root, "block", lun.parent, "dev")) or "")


def _who(opened: Mapping[str, tuple[str, ...]], keys: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w for k in dict.fromkeys(keys) for w in opened.get(k, ())))


@dataclass(frozen=True)
class _Backing:
    """A loop LUN's backing file and the other loop devices over the same file."""

    path: str
    deleted: bool
    identity: tuple[int, int] | None
    shared_with: tuple[str, ...]


def _backing_files(luns: list[LunInfo], roots: Roots, mounts: Mounts) -> dict[str, _Backing]:
    """By LUN path, for every loop device among ``luns``: its file, by name and identity."""
    if not any(lun.backing_file for lun in luns):
        return {}
    loops = loop_files(roots.sys_root, roots.dev_root, mounts)
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
        if not stat.S_ISBLK(st.st_mode) or st.st_rdev != rdev_number(dev):
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


def loop_files(sys_root: str, dev_root: str, mounts: Mounts) -> dict[str, _LoopFile]:
    """Every attached loop device of the host. The kernel's backing_file is a name: it differs
    from ours for a hard link, through a bind mount, or once that name was deleted; so each
    device is also asked for its file's identity, unless that name lies on a network file
    system."""
    block_dir = os.path.join(sys_root, "block")
    found: dict[str, _LoopFile] = {}
    for name in list_dir(block_dir):
        if not name.startswith("loop"):
            continue
        backing = read_text(os.path.join(block_dir, name, "loop", "backing_file")) or ""
        if not backing:
            continue
        path = backing.removesuffix(" (deleted)")
        identity = None
        if not mounts.may_hang(path):
            dev = read_text(os.path.join(block_dir, name, "dev")) or ""
            identity = _loop_backing_identity(os.path.join(dev_root, name), dev)
        found[name] = _LoopFile(name, path, path != backing, identity)
    return found


def loops_backed_by(
    real_path: str, identity: tuple[int, int], loops: Mapping[str, _LoopFile]
) -> tuple[str, ...]:
    """Loop devices over the file ``real_path`` (st_dev, st_ino ``identity``), by any name."""
    me = _LoopFile("", real_path, False, identity)
    return tuple(name for name, loop in loops.items() if loop.same_file(me))
