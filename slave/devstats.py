"""Device counters on the slave: which block device is under each LUN, its kernel counters at a
boundary, and the counters' differences over a subinterval.

Owns the path from LUNs to ``/sys/dev/block/<major:minor>/stat`` (a block LUN's own device
number; for a file LUN the device its file system is on, from ``st_dev``), reading those
files, and ``protocol.devstats.DeviceDelta`` values from two samples. Must not: do anything
slow at a boundary (a sample reads one small ``/sys`` file per device, nothing else), write
anything, or turn counters into rates (``master.analysis.devstats``). The session decides when to
sample (``slave.session``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from protocol.devstats import COUNTERS, DeviceDelta
from slave.lun_info import KIND_BLOCK, LunInfo

#: Where each of ``COUNTERS`` is among a ``stat`` file's fields (iostats.rst: read I/Os,
#: read merges, read sectors, read ticks, write I/Os, write merges, write sectors, write
#: ticks, in flight, io_ticks, time_in_queue, then discard and flush fields on newer kernels).
STAT_INDEX: Final = (0, 4, 2, 6, 3, 7, 9, 10)
assert len(STAT_INDEX) == len(COUNTERS)
_MIN_STAT_FIELDS: Final = 11


def parse_stat(text: str) -> tuple[int, ...]:
    """``COUNTERS`` out of one ``stat`` file's text; ``ValueError`` for anything else."""
    parts = text.split()
    if len(parts) < _MIN_STAT_FIELDS or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a block device stat line: {text.strip()[:80]!r}")
    return tuple(int(parts[i]) for i in STAT_INDEX)


def counter_delta(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...] | None:
    """``after - before`` per counter; None when a counter went back (the device was removed
    and another took its number: the counters of the two samples are not one device's)."""
    delta = tuple(a - b for a, b in zip(after, before, strict=True))
    return None if any(d < 0 for d in delta) else delta


@dataclass(frozen=True)
class Sample:
    """Counters of some devices read at one boundary: ``taken_ns`` on the slave's clock,
    ``late_ns`` after the boundary. ``failed`` maps a device that could not be read to why."""

    taken_ns: int
    late_ns: int
    counters: dict[str, tuple[int, ...]]
    failed: dict[str, str] = field(default_factory=dict)


class DeviceSampler:
    """Finds the device of each LUN once and reads devices' counters on demand."""

    def __init__(self, sys_root: str = "/sys",
                 stat: Callable[[str], os.stat_result] = os.stat) -> None:
        self.sys_root = sys_root.rstrip("/") or "/"
        self._stat = stat
        self._device_of: dict[str, str | None] = {}  # LUN path → major:minor, or None
        self._names: dict[str, str] = {}

    def _stat_path(self, devno: str) -> str:
        return f"{self.sys_root}/dev/block/{devno}/stat"

    def name(self, devno: str) -> str:
        """The device's kernel name (``loop0``, ``sda1``), or its number when unknown."""
        return self._names.get(devno, devno)

    def resolve(self, luns: Iterable[LunInfo]) -> list[tuple[str, str]]:
        """Find the device of every LUN not seen before; returns (LUN path, why it has no
        device) for each new LUN without one (said once per LUN for the sampler's life)."""
        none: list[tuple[str, str]] = []
        for lun in luns:
            if lun.path in self._device_of:
                continue
            devno, why = self._find(lun)
            self._device_of[lun.path] = devno
            if devno is None:
                none.append((lun.path, why))
        return none

    def _find(self, lun: LunInfo) -> tuple[str | None, str]:
        if lun.kind == KIND_BLOCK:
            devno = lun.dev
            if not devno:
                return None, "its device number is not known"
        else:
            try:
                st_dev = self._stat(lun.path).st_dev
            except OSError as exc:
                return None, f"its file cannot be looked at ({exc.strerror or exc})"
            devno = f"{os.major(st_dev)}:{os.minor(st_dev)}"
        link = f"{self.sys_root}/dev/block/{devno}"
        if not os.path.exists(f"{link}/stat"):
            fs = f" ({lun.fs_type})" if lun.fs_type else ""
            return None, (f"no block device under it: device {devno}{fs} has no kernel "
                          "counters (a memory, network or FUSE file system)")
        self._names[devno] = os.path.basename(os.path.realpath(link))
        return devno, ""

    def devices(self, lun_paths: Iterable[str]) -> dict[str, list[str]]:
        """The devices under ``lun_paths`` (resolved before), each with its LUNs."""
        out: dict[str, list[str]] = {}
        for path in sorted(set(lun_paths)):
            devno = self._device_of.get(path)
            if devno is not None:
                out.setdefault(devno, []).append(path)
        return out

    def take(self, devnos: Iterable[str], boundary_ns: int, clock: Callable[[], int]) -> Sample:
        """Read every device's counters now (the boundary ``boundary_ns`` has passed)."""
        counters: dict[str, tuple[int, ...]] = {}
        failed: dict[str, str] = {}
        taken = clock()
        for devno in devnos:
            try:
                with open(self._stat_path(devno)) as fh:
                    counters[devno] = parse_stat(fh.read())
            except OSError as exc:
                failed[devno] = f"its counters cannot be read ({exc.strerror or exc}): gone?"
            except ValueError as exc:
                failed[devno] = str(exc)
        return Sample(taken, max(0, taken - boundary_ns), counters, failed)


def deltas(before: Sample, after: Sample, luns_of: Mapping[str, list[str]],
           ops_by_lun: Mapping[str, tuple[int, int]], names: Callable[[str], str]
           ) -> tuple[list[DeviceDelta], dict[str, str]]:
    """A ``DeviceDelta`` per device of ``luns_of`` read in both samples (``ops_by_lun``: ivypy's
    I/Os and bytes per LUN), and why each other one has none (a device read in neither sample
    is new and has no reason)."""
    out: list[DeviceDelta] = []
    why: dict[str, str] = {}
    interval = after.taken_ns - before.taken_ns
    for devno, luns in luns_of.items():
        a, b = before.counters.get(devno), after.counters.get(devno)
        if a is None or b is None:
            reason = after.failed.get(devno) or before.failed.get(devno)
            if reason:
                why[devno] = reason
            continue
        delta = counter_delta(a, b)
        if delta is None:
            why[devno] = "its counters went back (another device took its number?)"
            continue
        if interval <= 0:
            continue
        ops = [ops_by_lun.get(p, (0, 0)) for p in luns]
        out.append(DeviceDelta(devno, names(devno), tuple(luns), sum(o for o, _ in ops),
                               sum(b for _, b in ops), interval,
                               before.late_ns, after.late_ns, delta))
    return out, why
