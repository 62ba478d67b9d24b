"""Device-side metrics: the kernel's counters of the block devices under the LUNs, rolled up by
instance, over each subinterval and the measurement window, and the host-versus-device check.

Owns the ``device_*`` columns (``DEVICE_COLUMNS``), the arithmetic from the slaves'
``protocol.devstats.DeviceDelta`` values to them, which rollup types get them, the rows of a
step's ``devices.csv``, and the events of the host-versus-device check. No I/O, no clocks: the
recorder hands the decoded deltas in and writes what comes out (``master.run.recorder``).

The rules:

* **Distinct devices.** An instance's device metrics are over the set of distinct devices
  (host and ``major:minor``) under its LUNs: two file LUNs on one file system share one device,
  counted once however many of the instance's LUNs it serves. Where one device serves LUNs of
  two instances (two file LUNs of one file system in the ``lun`` rollup), each instance shows
  the device's whole counts: the device's I/O is not ivypy's to divide, so such instances'
  device columns do not add up across instances (``devices.csv`` names each device's LUNs).
* **Which rollups.** A rollup type has device columns in a step when each LUN's workloads all
  lie in one of its instances: ``all``, ``host`` and ``lun`` always, an attribute rollup of LUN
  or host attributes always, ``workload`` and an attribute rollup that mixes workload
  attributes only when no LUN's workloads are split between its instances (else a device's
  I/O would be shown as each workload's). Elsewhere the columns are there and empty.
* **Rolled up as their kind needs.** IOPS, MB/s and the queue depth (the average number in
  flight) add over the devices; the service time (time per completed I/O, the kernel's read
  and write ticks over its I/Os) is weighted by the devices' I/O counts; the busy % is the
  mean over the devices. Rates use the time between the two samples of each device.
* **Missing.** A LUN without a block device (tmpfs) adds no device; an instance with none has
  empty columns. A device without a delta in a subinterval (gone, or new) empties its
  instances' columns for that subinterval, and for a window that holds it.
* **Host versus device.** Where ivypy's I/Os on a device's LUNs and the device's own differ by
  more than ``DISAGREE_FRACTION`` of ivypy's in a subinterval with ivypy I/O (a file LUN read
  from the page cache, another tenant on the device), the step's ``Disagreement`` per device
  names the host, the LUNs, both IOPS and the subintervals; the run warns once per device,
  with its worst step's (``master.run``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from master.analysis import spans
from master.analysis.rollup import Grouping
from master.config.catalog import DEVICE_METRICS
from protocol.devstats import SECTOR_BYTES, DeviceDelta

DEVICE_COLUMNS: Final = DEVICE_METRICS
#: ivypy's and the device's I/O counts on a device differ by more than this part of ivypy's,
#: and so do their bytes: ivy's host-versus-subsystem check. Counts alone would cry wolf where
#: the block layer merges ivypy's I/Os (sequential 128 KiB reads: a fifth of the count, the
#: same bytes) or splits them.
DISAGREE_FRACTION: Final = 0.15
#: A device's differing subintervals are named as at most this many runs (``0-3, 7``), the
#: rest counted: a device that differs every other subinterval of a day-long step would
#: otherwise keep, and print, a run for each.
MAX_SPANS: Final = 1000

_READ_IOS, _WRITE_IOS, _READ_SECT, _WRITE_SECT, _READ_TICKS, _WRITE_TICKS, _IO_TICKS, _QUEUE = (
    range(8))

DeviceKey = tuple[str, str]  # (host, major:minor)


class Disagreement(NamedTuple):
    """A device whose I/O differed from ivypy's on its LUNs in a step."""

    host: str
    device: DeviceKey
    #: how far the device's IOPS were from ivypy's over the subintervals that differed, as a
    #: part of ivypy's (the figure by which the run's worst step is chosen)
    off: float
    message: str


def device_metrics(counters: npt.NDArray[np.int64], interval_s: npt.NDArray[np.float64],
                   inst: npt.NDArray[np.intp], dev: npt.NDArray[np.intp],
                   present: npt.NDArray[np.bool_], n: int) -> npt.NDArray[np.float64]:
    """``DEVICE_COLUMNS`` of ``n`` instances, (n, 7), from D devices' counter deltas (D, 8)
    over ``interval_s`` (D,) each. Instance ``inst[j]`` has device ``dev[j]`` (each pair once);
    an instance without devices, or with one not ``present``, is all NaN."""
    c = counters.astype(np.float64)
    dt = np.where(present, interval_s, 1.0)
    ios = c[:, _READ_IOS] + c[:, _WRITE_IOS]
    per_device = np.stack([
        ios / dt,
        c[:, _READ_IOS] / dt,
        c[:, _WRITE_IOS] / dt,
        (c[:, _READ_SECT] + c[:, _WRITE_SECT]) * SECTOR_BYTES / 1e6 / dt,
        c[:, _READ_TICKS] + c[:, _WRITE_TICKS],  # summed, then over the I/Os
        # averaged over the devices; at most 100: the kernel adds io_ticks a jiffy at a time,
        # so a busy device's count can pass the time between two samples by up to a jiffy
        # (one run: 100.76 % over 0.5 s)
        np.minimum(c[:, _IO_TICKS] / (dt * 1e3) * 100.0, 100.0),
        c[:, _QUEUE] / (dt * 1e3),
        ios,
    ], axis=1)
    out = np.full((n, len(DEVICE_COLUMNS)), np.nan)
    if inst.size == 0:
        return out
    sums = np.stack([np.bincount(inst, weights=per_device[dev, j], minlength=n)
                     for j in range(per_device.shape[1])], axis=1)
    members = np.bincount(inst, minlength=n)
    absent = np.bincount(inst, weights=(~present[dev]).astype(np.float64), minlength=n) > 0
    ok = (members > 0) & ~absent
    out[ok, 0:4] = sums[ok, 0:4]
    with np.errstate(invalid="ignore", divide="ignore"):
        out[ok, 4] = np.where(sums[ok, 7] > 0, sums[ok, 4] / sums[ok, 7], np.nan)
        out[ok, 5] = sums[ok, 5] / members[ok]
    out[ok, 6] = sums[ok, 6]
    return out


@dataclass(frozen=True)
class _Seen:
    """One device's delta of one subinterval, as the master keeps it."""

    counters: tuple[int, ...]
    interval_ns: int
    ivypy_ops: int
    ivypy_bytes: int


@dataclass(frozen=True)
class _Layout:
    devices: tuple[DeviceKey, ...]
    at: dict[DeviceKey, int]
    pairs: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]


class _Differed:
    """One device's subintervals whose I/O differed from ivypy's (``_disagree``), added up as
    they come (in order): their runs (at most ``MAX_SPANS``, then a count of the rest) and
    the sums the ``Disagreement`` is made of."""

    def __init__(self) -> None:
        self.spans: spans.Runs = []
        self.more = 0  # differing subintervals beyond MAX_SPANS runs
        self.n = 0
        self.ivypy_ops = self.ivypy_bytes = self.device_ios = self.device_sectors = 0
        self.interval_ns = 0

    def add(self, k: int, s: _Seen) -> None:
        self.n += 1
        self.ivypy_ops += s.ivypy_ops
        self.ivypy_bytes += s.ivypy_bytes
        self.device_ios += s.counters[_READ_IOS] + s.counters[_WRITE_IOS]
        self.device_sectors += s.counters[_READ_SECT] + s.counters[_WRITE_SECT]
        self.interval_ns += s.interval_ns
        if len(self.spans) < MAX_SPANS or self.spans[-1][1] + 1 == k:
            spans.add(self.spans, k)
        else:
            self.more += 1

    def text(self) -> str:
        return spans.text(self.spans) + (f" and {self.more} more" if self.more else "")


class DeviceRollups:
    """One step's device columns: built from the step's workloads (their LUNs, in the
    recorder's plan order) and its rollup groupings; fed each subinterval's deltas.

    What it keeps does not grow with the step: the last subinterval's deltas (devices.csv),
    the measurement window's (with ``fold``: added up as they come, as the slaves add the
    statistics of a fixed-length step's window; else each measurement subinterval's, for a
    window the step chooses at its end, which ``measure:``'s timeout bounds), and each
    device's differing subintervals added up (``_Differed``)."""

    def __init__(self, lun_of_workload: Sequence[DeviceKey], groupings: Mapping[str, Grouping],
                 subinterval_s: float, *, fold: bool = False) -> None:
        """``lun_of_workload``: (host, LUN path) of each workload, in the groupings' order.
        ``fold``: the window will be exactly the subintervals recorded as ``measured``."""
        self.subinterval_s = subinterval_s
        self.fold = fold
        index: dict[DeviceKey, int] = {}
        of_wl = np.fromiter((index.setdefault(key, len(index)) for key in lun_of_workload),
                            dtype=np.intp, count=len(lun_of_workload))
        self.luns: tuple[DeviceKey, ...] = tuple(index)
        #: per LUN-based rollup type, the instance of each LUN
        self.inst_of_lun: dict[str, npt.NDArray[np.intp]] = {}
        self.groupings = dict(groupings)
        n_luns = len(self.luns)
        for t, g in self.groupings.items():
            pairs = np.unique(of_wl.astype(np.int64) * max(g.n, 1) + g.of_workload)
            lun_of_pair = pairs // max(g.n, 1)
            if np.array_equal(lun_of_pair, np.arange(n_luns)):  # one instance per LUN
                self.inst_of_lun[t] = (pairs % max(g.n, 1)).astype(np.intp)
        self.device_of_lun: dict[DeviceKey, DeviceKey] = {}  # as the slaves said, kept
        self.names: dict[DeviceKey, str] = {}
        self.luns_of: dict[DeviceKey, tuple[str, ...]] = {}
        #: each measured subinterval's deltas (without ``fold``), for the window
        self.kept: dict[int, dict[DeviceKey, _Seen]] = {}
        #: with ``fold``: the measured subintervals (runs), their deltas added up, and the
        #: devices in every one of them
        self._folded_runs: spans.Runs = []
        self._folded: dict[DeviceKey, _Seen] = {}
        self._folded_everywhere: set[DeviceKey] = set()
        self._last: tuple[int, dict[DeviceKey, _Seen]] = (-1, {})
        self._differed: dict[DeviceKey, _Differed] = {}
        self._layout: _Layout | None = None  # of ``device_of_lun`` as it is

    def lun_based(self, rollup_type: str) -> bool:
        return rollup_type in self.inst_of_lun

    # ------------------------------------------------------------------ a subinterval
    def record(self, k: int, by_host: Iterable[tuple[str, Sequence[DeviceDelta]]],
               measured: bool = True) -> dict[str, npt.NDArray[np.float64]]:
        """Take subinterval ``k``'s deltas (kept for the window when ``measured``); the
        device columns of every rollup type."""
        seen: dict[DeviceKey, _Seen] = {}
        for host, deltas in by_host:
            for d in deltas:
                key = (host, d.device)
                s = seen[key] = _Seen(d.counters, d.interval_ns, d.ivypy_ops, d.ivypy_bytes)
                self.names[key] = d.name
                self.luns_of[key] = d.luns
                for lun in d.luns:
                    if self.device_of_lun.get((host, lun)) != key:
                        self.device_of_lun[(host, lun)] = key
                        self._layout = None
                if _disagree(s):
                    self._differed.setdefault(key, _Differed()).add(k, s)
        self._last = (k, seen)
        if measured and self.fold:
            if not self._folded_runs:
                self._folded_everywhere = set(seen)
            self._folded_everywhere &= set(seen)
            spans.add(self._folded_runs, k)
            _add_into(self._folded, seen)
        elif measured:
            self.kept[k] = seen
        return self._columns(seen)

    def _layout_now(self) -> _Layout:
        """The devices in order, and each LUN-based type's (instance, device) pairs."""
        if self._layout is None:
            devices = tuple(sorted(set(self.device_of_lun.values())))
            at = {key: i for i, key in enumerate(devices)}
            dev_of_lun = np.array([at.get(self.device_of_lun.get(lun, ("", "")), -1)
                                   for lun in self.luns], dtype=np.intp)
            has_dev = dev_of_lun >= 0
            width = max(len(devices), 1)
            pairs = {}
            for t, inst_of_lun in self.inst_of_lun.items():
                both = np.unique(inst_of_lun[has_dev].astype(np.int64) * width
                                 + dev_of_lun[has_dev])
                pairs[t] = ((both // width).astype(np.intp), (both % width).astype(np.intp))
            self._layout = _Layout(devices, at, pairs)
        return self._layout

    def _columns(self, seen: Mapping[DeviceKey, _Seen]) -> dict[str, npt.NDArray[np.float64]]:
        layout = self._layout_now()
        n_dev = len(layout.devices)
        counters = np.zeros((n_dev, 8), dtype=np.int64)
        interval_s = np.ones(n_dev)
        present = np.zeros(n_dev, dtype=bool)
        for key, s in seen.items():
            i = layout.at.get(key)
            if i is None:  # a device none of the LUNs is on any more
                continue
            counters[i] = s.counters
            interval_s[i] = s.interval_ns / 1e9
            present[i] = True
        out = {}
        for t, g in self.groupings.items():
            pairs = layout.pairs.get(t)
            if pairs is None:
                out[t] = np.full((g.n, len(DEVICE_COLUMNS)), np.nan)
            else:
                out[t] = device_metrics(counters, interval_s, pairs[0], pairs[1], present, g.n)
        return out

    # ------------------------------------------------------------------ the window
    def window(self, window: Sequence[int]) -> dict[str, npt.NDArray[np.float64]]:
        """The device columns over the subintervals ``window``: each device's deltas added
        up over them (a device missing from one of them is missing from the window)."""
        if self.fold and window and spans.of(window) == self._folded_runs:
            gone = set(self.device_of_lun.values()) - self._folded_everywhere
            return self._columns({key: s for key, s in self._folded.items()
                                  if key not in gone})
        total: dict[DeviceKey, _Seen] = {}
        missing: set[DeviceKey] = set()
        for k in window:
            seen = self.kept.get(k, {})
            missing |= set(self.device_of_lun.values()) - set(seen)
            _add_into(total, seen)
        return self._columns({key: s for key, s in total.items() if key not in missing})

    # ------------------------------------------------------------------ devices.csv
    def file_rows(self, k: int, phase: str, late_us: Mapping[DeviceKey, tuple[float, float]]
                  ) -> list[dict[str, Any]]:
        """Rows of ``devices.csv`` for subinterval ``k`` (the last recorded): each device's
        own metrics."""
        rows = []
        last_k, last = self._last
        for key, s in sorted(last.items() if last_k == k else ()):
            (values,) = device_metrics(np.array([s.counters], dtype=np.int64),
                                       np.array([s.interval_ns / 1e9]), np.zeros(1, np.intp),
                                       np.zeros(1, np.intp), np.ones(1, bool), 1)
            start_us, end_us = late_us.get(key, (float("nan"), float("nan")))
            rows.append({"subinterval": k, "phase": phase, "host": key[0], "device": key[1],
                         "device_name": self.names[key], "luns": " ".join(self.luns_of[key]),
                         "ivypy_IOPS": s.ivypy_ops / self.subinterval_s,
                         "ivypy_MB_per_s": s.ivypy_bytes / 1e6 / self.subinterval_s,
                         **dict(zip(DEVICE_COLUMNS, values.tolist(), strict=True)),
                         "sample_interval_s": s.interval_ns / 1e9,
                         "start_sample_late_us": start_us, "end_sample_late_us": end_us})
        return rows

    # ------------------------------------------------------------------ the check
    def disagreements(self) -> list[Disagreement]:
        """Each device of the step whose I/O count and bytes both differ from ivypy's on its
        LUNs by more than ``DISAGREE_FRACTION`` in some subinterval with ivypy I/O."""
        out = []
        for key in sorted(set(self.device_of_lun.values())):
            bad = self._differed.get(key)
            if bad is None:
                continue
            ivy = bad.ivypy_ops / (bad.n * self.subinterval_s)
            ivy_mb = bad.ivypy_bytes / (bad.n * self.subinterval_s) / 1e6
            dev_bytes = SECTOR_BYTES * bad.device_sectors
            seconds = bad.interval_ns / 1e9
            host, devno = key
            luns = ", ".join(self.luns_of[key])
            dev_iops = bad.device_ios / seconds
            out.append(Disagreement(host, key, abs(dev_iops - ivy) / ivy if ivy else math.inf, (
                f"host {host} LUN {luns}: ivypy's IOPS and MB/s and the device's differ by "
                f"more than {DISAGREE_FRACTION:.0%} (ivypy {ivy:.6g} IOPS {ivy_mb:.6g} MB/s, "
                f"device {self.names[key]} ({devno}) {dev_iops:.6g} IOPS "
                f"{dev_bytes / seconds / 1e6:.6g} MB/s) in subintervals {bad.text()}: a file "
                "LUN served from the page cache, or another tenant on the device?")))
        return out


def _add_into(total: dict[DeviceKey, _Seen], seen: Mapping[DeviceKey, _Seen]) -> None:
    """Each device's deltas of ``seen`` added into ``total``."""
    for key, s in seen.items():
        t = total.get(key)
        total[key] = s if t is None else _Seen(
            tuple(a + b for a, b in zip(t.counters, s.counters, strict=True)),
            t.interval_ns + s.interval_ns, t.ivypy_ops + s.ivypy_ops,
            t.ivypy_bytes + s.ivypy_bytes)


def _disagree(s: _Seen) -> bool:
    """Counts and bytes both off by more than ``DISAGREE_FRACTION`` of ivypy's."""
    ios = s.counters[_READ_IOS] + s.counters[_WRITE_IOS]
    nbytes = SECTOR_BYTES * (s.counters[_READ_SECT] + s.counters[_WRITE_SECT])
    return (s.ivypy_ops > 0 and abs(ios - s.ivypy_ops) > DISAGREE_FRACTION * s.ivypy_ops
            and abs(nbytes - s.ivypy_bytes) > DISAGREE_FRACTION * s.ivypy_bytes)

