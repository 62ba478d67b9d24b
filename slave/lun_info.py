"""A LUN's description: ``LunInfo`` (its attributes and the evidence of who uses it, a value
that travels to the master as a plain dict, checked field by field when it comes back) and the
kinds of LUN. A value only: finding LUNs and their evidence is ``slave.luns`` and
``slave.lun_usage``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.errors import RemoteProtocolError
from slave.lun_mark import MARK_STATES
from slave.signatures import SECTOR_BYTES

KIND_BLOCK = "block"
KIND_FILE = "file"


SWAP_MOUNT_POINT = "[swap]"


@dataclass(frozen=True)
class LunInfo:
    """One LUN as seen from its host. Empty strings / empty tuples mean "not exposed" or "none".

    ``dev`` is ``major:minor`` for block devices. ``parent`` is the whole disk a partition belongs
    to. ``open_by`` lists other processes as ``pid:comm``. ``exclusive_busy`` is True when an
    ``O_EXCL`` open failed with EBUSY (mounted, held, or claimed by another process).
    ``probe_error`` is set when the device or file could not be read to look for a signature, or
    did not answer in time (``unanswered``), in which case nothing is known about its contents.
    For a loop device, ``backing_open_by`` lists other processes that have its backing file open
    (``pid:comm``) and ``backing_shared_with`` the other loop devices over the same file: a
    write to the loop device is a write to them.
    A partition of a loop device has its disk's ``backing_file`` and the same two checks.
    For a partition, ``disk_holders`` and ``disk_open_by`` are its whole disk's holders and
    other openers (a device-mapper map over the disk, a VM with the disk open): a write to the
    partition is a write to the disk they use. ``file_size_bytes`` is a file LUN's file size,
    which may exceed ``size_bytes`` (the LUN is then the file's first ``size_bytes``); 0 for a
    block device. ``created`` is True for a file LUN whose data are ivypy's own: one this run
    made (a new file, or an empty one it extended), one carrying ivypy's mark that still holds
    (``mark``: ``slave.lun_mark``), or, in a resumed run, the file the run created before (by
    ``file_id``, for a file system that keeps no mark). Any other existing non-empty file is
    someone's data.
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
    #: the device (or file) did not answer the probe's reads within
    #: ``slave.signatures.PROBE_TIMEOUT_S`` (``probe_error`` says so): it may be stuck, and any
    #: other read of it (an engine's O_DIRECT test, say) may block as long
    unanswered: bool = False
    backing_open_by: tuple[str, ...] = ()
    backing_shared_with: tuple[str, ...] = ()
    disk_holders: tuple[str, ...] = ()
    disk_open_by: tuple[str, ...] = ()
    file_size_bytes: int = 0
    created: bool = False
    #: a file LUN's ``st_dev:st_ino`` (a resumed run knows the file it created by it)
    file_id: str = ""
    #: a file LUN's file system type (``ext4``, ``tmpfs`` ...), from mountinfo
    fs_type: str = ""
    #: a file LUN with unwritten ranges (SEEK_HOLE finds a hole within it): reads there
    #: return zeros without any I/O
    has_holes: bool = False
    #: a file LUN's ivypy mark as found (``slave.lun_mark.MARK_*``: "" none, ``ok``, ``copied``,
    #: ``resized``, ``damaged``, ``unsupported``), with the date it says ivypy made the file
    #: (ISO 8601 UTC) and the size it was marked at
    mark: str = ""
    mark_created: str = ""
    mark_size_bytes: int = 0
    #: what tells this LUN from every other, as far as the host can tell (``identity_of``):
    #: two hosts' LUNs with one identity are one LUN (a verified run keeps one map of it)
    identity: str = ""

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
            "fs_type": self.fs_type,
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
        if kwargs.get("mark", "") not in MARK_STATES:
            raise RemoteProtocolError(
                f"LunInfo: mark must be one of {', '.join(map(repr, MARK_STATES))}, "
                f"not {data['mark']!r}"
            )
        return cls(**kwargs)


_INT_FIELDS = frozenset({
    "size_bytes", "logical_block_bytes", "physical_block_bytes", "file_size_bytes",
    "mark_size_bytes",
})


_BOOL_FIELDS = frozenset({"read_only", "exclusive_busy", "unanswered", "created", "has_holes"})


_TUPLE_FIELDS = frozenset({
    "partitions", "holders", "mount_points", "open_by", "backing_open_by", "backing_shared_with",
    "disk_holders", "disk_open_by",
})


def boot_id() -> str:
    """This kernel's boot id (``/proc/sys/kernel/random/boot_id``: a random UUID each boot),
    "" where it cannot be read. Hosts in namespaces of one kernel share it."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def identity_of(lun: LunInfo, boot: str) -> str:
    """``lun``'s identity: ``wwid:<wwid>`` where the device has one (every host a SAN LUN is
    zoned to reads the same), else ``dev:<boot id>:<major:minor>`` for a block device (one
    kernel's device, whatever namespace looks at it), ``file:<boot id>:<st_dev:st_ino>`` for
    a file; "" where nothing can be told (no boot id: another kernel could hold the same
    numbers)."""
    if lun.wwid:
        return f"wwid:{lun.wwid}"
    if not boot:
        return ""
    if lun.kind == KIND_BLOCK and lun.dev:
        return f"dev:{boot}:{lun.dev}"
    if lun.kind == KIND_FILE and lun.file_id:
        return f"file:{boot}:{lun.file_id}"
    return ""


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
