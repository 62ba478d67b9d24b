"""The block layer's own latency of each I/O, timed by the kernel's tracepoints (bench helper).

A third party to the tools the engine benchmark compares: for every request on the traced
devices, the time from its bio's arrival in the block layer (``block:block_bio_queue``, inside
the submitting ``io_submit``) to its request's completion (``block:block_rq_complete``, before
the completion reaches the AIO ring). That interval lies inside the submit -> reap interval any
tool measures for the same I/O, so every quantile a tool reports is at least the same quantile
of these (less the tool's own bucket rounding): a floor on its p50 and p99, where
``/sys/block/<dev>/stat`` gives one on the mean only.

What this owns: a trace instance of its own (``/sys/kernel/tracing/instances/<name>``), made on
entering and removed on leaving, so the global trace and any other user's instance are left
alone; and the pairing of the two events into latencies. It must not change the devices or the
I/O; the tracepoints cost each I/O a few hundred nanoseconds of kernel time, alike for every
tool. Timestamps are the TSC where the kernel offers the ``x86-tsc`` trace clock (converted to
nanoseconds by two markers stamped with ``CLOCK_MONOTONIC``), else the ``mono`` clock, which the
text trace prints to the microsecond only. Needs root; mounts tracefs when it is not mounted.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("block_bio_queue", "block_rq_complete")
_names = itertools.count()

# "<ts>: block_bio_queue: 7,0 RS 0 + 8 [dd]" and
# "<ts>: block_rq_complete: 7,0 RS () 0 + 8 be,0,4 [0]"
_EVENT = re.compile(
    rb" (\d+(?:\.\d+)?): block_(bio_queue|rq_complete): (\d+),(\d+) \S+ (?:\([^)]*\) )?(\d+) \+"
)
# "<ts>: block_bio_queue: 7,0 WS 2048 + 8 [python]": device, rwbs, sector, sectors
_BIO = re.compile(rb" block_bio_queue: (\d+),(\d+) (\S+) (\d+) \+ (\d+) ")
_MARK = re.compile(rb"\s(\d+(?:\.\d+)?): tracing_mark_write: ivypy-blocktrace (\d+)")


@dataclass(frozen=True)
class Latencies:
    """The block layer's latency of each paired request (unsorted; in ns from
    ``BlockTrace.latencies``, in the trace clock's unit from ``parse``), the moment each
    completed (CLOCK_MONOTONIC ns from ``BlockTrace.latencies``, trace time from ``parse``),
    and how many completions found no arrival to pair with (the trace buffer overran, or the
    I/O arrived before tracing started)."""

    ns: npt.NDArray[np.float64]
    unpaired: int
    done: npt.NDArray[np.float64]

    def within(self, start: float, end: float) -> Latencies:
        """The requests that completed in [start, end): a tool's measured window, where the
        trace ran longer (``unpaired`` stays the whole trace's)."""
        keep = (self.done >= start) & (self.done < end)
        return Latencies(self.ns[keep], self.unpaired, self.done[keep])

    def percentile(self, p: float) -> float:
        return float(np.percentile(self.ns, p)) if self.ns.size else float("nan")

    @property
    def mean(self) -> float:
        return float(self.ns.mean()) if self.ns.size else float("nan")


def kernel_dev(path: str) -> int:
    """The device number of a block device as the tracepoints print and filter it
    (the kernel's ``dev_t``: major << 20 | minor)."""
    rdev = os.stat(path).st_rdev
    return (os.major(rdev) << 20) | os.minor(rdev)


def pair(dev: npt.NDArray[np.int64], sector: npt.NDArray[np.int64],
         ts: npt.NDArray[np.float64], complete: npt.NDArray[np.bool_]) -> Latencies:
    """Latencies of the arrival/completion pairs among events (device, sector, time, whether a
    completion). Each completion is paired with the latest arrival on its device and sector
    before it that no other completion took; a completion without one is counted unpaired, an
    arrival without one (still in flight when tracing stopped) is left out."""
    if not dev.size:
        return Latencies(np.empty(0), 0, np.empty(0))
    # by device, sector, time; at one time an arrival before a completion
    order = np.lexsort((complete, ts, sector, dev))
    d, s, t, c = dev[order], sector[order], ts[order], complete[order]
    same = (d[1:] == d[:-1]) & (s[1:] == s[:-1])
    paired = same & ~c[:-1] & c[1:]
    ns = (t[1:] - t[:-1])[paired]
    return Latencies(ns.astype(np.float64), int(c.sum()) - int(paired.sum()),
                     t[1:][paired].astype(np.float64))


@dataclass(frozen=True)
class Bios:
    """The bios that arrived in the block layer, in the order they arrived: each one's device
    (the kernel's ``dev_t``), whether it writes, its first sector and its size in sectors."""

    dev: npt.NDArray[np.int64]
    write: npt.NDArray[np.bool_]
    sector: npt.NDArray[np.int64]
    sectors: npt.NDArray[np.int64]

    def of(self, dev: int) -> npt.NDArray[np.int64]:
        """Device ``dev``'s bios in order, as rows (writes, sector, sectors)."""
        on = self.dev == dev
        return np.stack([self.write[on].astype(np.int64), self.sector[on], self.sectors[on]],
                        axis=1)


def parse_bios(text: bytes) -> Bios:
    """The ``block_bio_queue`` events of a trace instance's ``trace`` file, in trace order."""
    events = np.array(_BIO.findall(text), dtype=np.bytes_).reshape(-1, 5)
    dev = (events[:, 0].astype(np.int64) << 20) | events[:, 1].astype(np.int64)
    write = np.char.find(events[:, 2], b"W") >= 0
    return Bios(dev, write, events[:, 3].astype(np.int64), events[:, 4].astype(np.int64))


def parse(text: bytes) -> tuple[Latencies, list[tuple[float, int]]]:
    """The paired latencies in the trace's own time unit, and the markers (trace time, ns of
    CLOCK_MONOTONIC) found in ``text``, a trace instance's ``trace`` file."""
    events = np.array(_EVENT.findall(text), dtype=np.bytes_).reshape(-1, 5)
    # numpy converts the byte strings in bulk: a million events in about a second
    ts = events[:, 0].astype(np.float64)
    complete = events[:, 1] == b"rq_complete"
    dev = (events[:, 2].astype(np.int64) << 20) | events[:, 3].astype(np.int64)
    sector = events[:, 4].astype(np.int64)
    marks = [(float(m[0]), int(m[1])) for m in _MARK.findall(text)]
    return pair(dev, sector, ts, complete), marks


class BlockTrace:
    """``with BlockTrace(devs) as bt: bt.start(); <I/O>; bt.stop(); lat = bt.latencies()``."""

    def __init__(self, devs: list[str], buffer_mib_per_cpu: int = 128,
                 pid: int | None = None) -> None:
        self.devs = devs
        self.buffer_mib_per_cpu = buffer_mib_per_cpu
        #: only the events of this task and of its io_uring workers (``iou-wrk-<pid>``, which
        #: issue what the ring could not issue at once): another process reading the devices
        #: is left out; a completion runs in another context, so with a task only ``bios``
        #: has a meaning
        self.pid = pid
        self.dir = TRACEFS / "instances" / f"ivypy-blocktrace-{os.getpid()}-{next(_names)}"

    def _write(self, name: str, value: str) -> None:
        (self.dir / name).write_text(value)

    def __enter__(self) -> BlockTrace:
        if not (TRACEFS / "instances").is_dir():
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True,
                           capture_output=True)
        missing = [ev for ev in EVENTS if not (TRACEFS / "events" / "block" / ev).is_dir()]
        if missing:
            raise RuntimeError(f"blocktrace: this kernel has no tracepoint {', '.join(missing)} "
                               f"under {TRACEFS / 'events' / 'block'}")
        self.dir.mkdir()
        try:
            clocks = (self.dir / "trace_clock").read_text().replace("[", "").replace("]", "")
            self.clock = "x86-tsc" if "x86-tsc" in clocks.split() else "mono"
            self._write("trace_clock", self.clock)
            self._write("buffer_size_kb", str(self.buffer_mib_per_cpu << 10))
            devs = " || ".join(f"dev == {kernel_dev(d)}" for d in self.devs)
            if self.pid is not None:  # and its io_uring workers, named after it
                devs = (f"({devs}) && (common_pid == {self.pid} || "
                         f"comm == \"iou-wrk-{self.pid}\")")
            for ev in EVENTS:
                self._write(f"events/block/{ev}/filter", devs)
                self._write(f"events/block/{ev}/enable", "1")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _mark(self) -> None:
        self._write("trace_marker", f"ivypy-blocktrace {time.monotonic_ns()}\n")

    def start(self) -> None:
        self._write("trace", "")  # empty the buffer
        self._write("tracing_on", "1")
        self._mark()

    def stop(self) -> None:
        """Stop tracing; the events stay in the buffer for ``latencies``."""
        self._mark()
        self._write("tracing_on", "0")

    def bios(self) -> Bios:
        """The traced bios in the order they arrived (``parse_bios``)."""
        return parse_bios((self.dir / "trace").read_bytes())

    def latencies(self) -> Latencies:
        """The traced I/Os' latencies in ns, and their completions in CLOCK_MONOTONIC ns
        (reading a million I/Os' trace takes seconds)."""
        lat, marks = parse((self.dir / "trace").read_bytes())
        if self.clock == "mono":  # seconds of CLOCK_MONOTONIC, printed to the microsecond
            return Latencies(lat.ns * 1e9, lat.unpaired, lat.done * 1e9)
        if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
            raise RuntimeError(f"blocktrace: the trace lost its clock markers ({marks!r})")
        (t0, m0), (t1, m1) = marks[0], marks[-1]
        scale = (m1 - m0) / (t1 - t0)
        return Latencies(lat.ns * scale, lat.unpaired, m0 + (lat.done - t0) * scale)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._write("tracing_on", "0")
            for name in EVENTS:
                self._write(f"events/block/{name}/enable", "0")
        finally:
            self.dir.rmdir()
