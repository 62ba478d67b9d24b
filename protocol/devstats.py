"""Device-side counters on the wire: one block device's kernel counters over one subinterval.

Owns ``DeviceDelta``, the value a slave sends per block device under the LUNs it drives
(``SubintervalResult.devices``), the names and order of its counters, and the checks every
field passes on decode (``from_wire`` raises ``RemoteProtocolError`` naming the field). Pure:
it does not read ``/sys`` (``slave.devstats``) and does not turn counters into metrics
(``master.analysis.devstats``).

The counters are the differences of ``/sys/dev/block/<major:minor>/stat`` fields
(Documentation/admin-guide/iostats.rst) between two samples the slave took as close as it
could to the subinterval's start and end boundaries; ``interval_ns`` is the time between the
two samples, ``start_late_ns`` and ``end_late_ns`` how long after each boundary they were
taken. ``ivypy_ops`` and ``ivypy_bytes`` are the I/Os ivypy's own workloads completed on the
device's LUNs in the subinterval and their bytes, so the host-versus-device check needs nothing
else (bytes tell a device that merged or split ivypy's I/Os from one that did not see them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import RemoteProtocolError

#: The counters of a ``DeviceDelta``, in wire order; ticks are milliseconds as the kernel
#: counts them (``io_ticks_ms``: time the device had I/O in flight; ``time_in_queue_ms``: the
#: sum over I/Os of their time in flight, so its rate is the average number in flight).
COUNTERS: Final = ("read_ios", "write_ios", "read_sectors", "write_sectors", "read_ticks_ms",
                   "write_ticks_ms", "io_ticks_ms", "time_in_queue_ms")
#: Bytes per sector in the kernel's counters (always 512, whatever the device's block size).
SECTOR_BYTES: Final = 512

_FIELDS: Final = frozenset({"device", "name", "luns", "ivypy_ops", "ivypy_bytes", "interval_ns",
                            "start_late_ns", "end_late_ns", "counters"})


@dataclass(frozen=True)
class DeviceDelta:
    """One block device (``device`` is ``major:minor``, ``name`` its kernel name) over one
    subinterval: the ``COUNTERS`` differences, and the LUNs of the host's workloads it serves
    (a block LUN itself, or the file LUNs on its file system)."""

    device: str
    name: str
    luns: tuple[str, ...]
    ivypy_ops: int
    ivypy_bytes: int
    interval_ns: int
    start_late_ns: int
    end_late_ns: int
    counters: tuple[int, ...]

    def counter(self, name: str) -> int:
        return self.counters[COUNTERS.index(name)]

    def to_wire(self) -> dict[str, Any]:
        return {"device": self.device, "name": self.name, "luns": list(self.luns),
                "ivypy_ops": self.ivypy_ops, "ivypy_bytes": self.ivypy_bytes,
                "interval_ns": self.interval_ns,
                "start_late_ns": self.start_late_ns, "end_late_ns": self.end_late_ns,
                "counters": list(self.counters)}

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> DeviceDelta:
        """The entry checked field by field; ``RemoteProtocolError`` names what is wrong."""
        if not isinstance(raw, Mapping):
            raise RemoteProtocolError(f"device entry is a {type(raw).__name__}, not a map")
        unknown, missing = set(raw) - _FIELDS, _FIELDS - set(raw)
        if unknown or missing:
            raise RemoteProtocolError(f"device entry has unknown fields {sorted(unknown)} "
                                      f"or lacks {sorted(missing)}")
        device = raw["device"]
        if not isinstance(device, str) or not _is_devno(device):
            raise RemoteProtocolError(f"device entry: device {device!r} is not major:minor")
        name = raw["name"]
        if not isinstance(name, str) or not name:
            raise RemoteProtocolError(f"device {device}: name {name!r} is not a device name")
        luns = raw["luns"]
        if (not isinstance(luns, list) or not luns
                or not all(isinstance(x, str) and x for x in luns)):
            raise RemoteProtocolError(f"device {device}: luns must be a non-empty list of paths")
        for key in ("ivypy_ops", "ivypy_bytes", "interval_ns", "start_late_ns", "end_late_ns"):
            if not _count(raw[key]):
                raise RemoteProtocolError(f"device {device}: {key} must be an int >= 0, not "
                                          f"{raw[key]!r}")
        if raw["interval_ns"] == 0:
            raise RemoteProtocolError(f"device {device}: interval_ns must be > 0")
        counters = raw["counters"]
        if (not isinstance(counters, list) or len(counters) != len(COUNTERS)
                or not all(_count(c) for c in counters)):
            raise RemoteProtocolError(f"device {device}: counters must be {len(COUNTERS)} "
                                      f"ints >= 0 ({', '.join(COUNTERS)})")
        return cls(device, name, tuple(luns), raw["ivypy_ops"], raw["ivypy_bytes"],
                   raw["interval_ns"], raw["start_late_ns"], raw["end_late_ns"], tuple(counters))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _is_devno(text: str) -> bool:
    major, sep, minor = text.partition(":")
    return bool(sep) and major.isdigit() and minor.isdigit() and major.isascii() \
        and minor.isascii()
