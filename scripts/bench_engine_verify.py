"""bench_engine's data verification cases (issue #62, item 7): 4 KiB random I/O at QD32, at
``iops=max``, through one engine loop in the benchmark's own process (pinned to one CPU), with
and without ``verify``, interleaved in bench_engine's rounds. Verified reads check every block
against the map (the device is first written whole by a verified sequential writer, so every
read is checked); verified writes stamp every sector (CRC-32C) and keep the map, the table of
blocks in flight and the journal. Targets: verified reads >= 0.9x the same reads unverified,
verified writes >= 0.9x the same writes unstamped.

Both sides run the same loop in the same process, so the ratio is the verification's own cost;
the worker processes of ``ivypy run`` add the same around both.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from protocol.verify import MAP_BLOCK_BYTES
from slave.engine import files
from slave.engine.loop import EngineLoop, WorkloadSpec
from slave.engine.native import LibaioEngine
from slave.engine.verify_state import VerifiedLun, WorkloadVerify

SUB_NS = 1_000_000_000


@dataclass
class _Control:
    """Stops after ``n`` subintervals; keeps each one's I/O count, service time sum and the
    thread's CPU time at each boundary."""

    n: int
    pair: tuple[WorkloadStats, WorkloadStats]
    ops: list[int] = field(default_factory=list)
    lat_ns: list[int] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def poll(self, loop: EngineLoop) -> None:
        pass

    def poll_fd(self) -> int | None:
        return None

    def boundary(self, loop: EngineLoop, finished: int, boundary_ns: int) -> None:
        self.cpu_s.append(time.thread_time())
        if finished + 1 >= self.n:
            loop.request_stop()

    def handed_over(self, loop: EngineLoop, finished: int, sw: int, ho: int,
                    errors: dict[str, dict[str, int]]) -> None:
        if errors:
            raise RuntimeError(f"I/O errors: {errors}")
        st = self.pair[finished % 2]
        self.ops.append(st.ops())
        self.lat_ns.append(int(st.lat[:, 0, 0].sum()))
        st.reset()


@dataclass(frozen=True)
class LoopResult:
    """One run's measured subintervals (the first, the ramp, left out)."""

    iops: float
    mean_us: float
    cpu_us_per_io: float


class LoopCases:
    """The in-process cases' loops: a verified one per device, kept across rounds (its map
    with it: its device is written whole by it first), and plain ones made per run."""

    def __init__(self, verified_dev: str, plain_write_dev: str) -> None:
        self.verified_dev = verified_dev
        self.plain_write_dev = plain_write_dev
        self._loop: EngineLoop | None = None
        self._fd = -1
        self._n = 0
        self._lun: VerifiedLun | None = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def run(self, read_fraction: float, verify: bool, seconds: int) -> LoopResult:
        """4 KiB random I/O at QD32 and ``iops=max`` for ``seconds`` (+1 s ramp): reads
        (``read_fraction`` 1) on the verified device, writes (0) on it when verified, else on
        the plain write device."""
        if verify:
            loop, fd, size = self._verified()
            return self._one(loop, fd, size, read_fraction, seconds, verify=True)
        dev = self.verified_dev if read_fraction else self.plain_write_dev
        loop = EngineLoop(capacity=64)
        loop.register_engine_kind("libaio", LibaioEngine)
        eng = loop.engine("libaio")
        fd = files.open_lun(dev, writable=not read_fraction, extra_flags=eng.open_flags)
        try:
            return self._one(loop, fd, files.probe(dev).size_bytes, read_fraction, seconds,
                             verify=False)
        finally:
            loop.close()
            os.close(fd)

    def _verified(self) -> tuple[EngineLoop, int, int]:
        size = files.probe(self.verified_dev).size_bytes
        if self._loop is None:
            loop = self._loop = EngineLoop(capacity=64)
            loop.register_engine_kind("libaio", LibaioEngine)
            eng = loop.engine("libaio")
            self._fd = files.open_lun(self.verified_dev, writable=True,
                                      extra_flags=eng.open_flags)
            self._lun = VerifiedLun(lun=1, first_bytes=0, size_bytes=size, run_key=0xB0B0)
            # every block written once, stamped: the reads after it are all checked
            blocks = size // MAP_BLOCK_BYTES
            self._one(loop, self._fd, size, 0.0, 0, verify=True, sequential_ios=blocks)
            assert loop.verify is not None
            m = loop.verify.maps[1]
            if not m.all():
                raise RuntimeError(f"the verified writer left {int((m == 0).sum())} of "
                                   f"{m.size} blocks unwritten")
            loop.verify.take()
        return self._loop, self._fd, size

    def _one(self, loop: EngineLoop, fd: int, size: int, read_fraction: float, seconds: int,
             verify: bool, sequential_ios: int = 0) -> LoopResult:
        eng = loop.engine("libaio")
        region = np.zeros(2 * WorkloadStats.SIZE, dtype=np.int64)
        n = WorkloadStats.SIZE
        pair = (WorkloadStats(region[:n]), WorkloadStats(region[n:]))
        pair[0].reset()
        pair[1].reset()
        self._n += 1
        name = f"bench:verify:w{self._n}"
        if sequential_ios:  # one pass, at a rate that makes it in whole subintervals
            subs = 2 + sequential_ios // 50_000
            p = WorkloadParams(iosequencer="sequential", read_fraction=0.0, iodepth=32,
                               iops=sequential_ios / (subs - 1) * 1.02, blocksize_bytes=4096)
        else:
            subs = seconds + 1
            p = WorkloadParams(iodepth=32, blocksize_bytes=4096, read_fraction=read_fraction,
                               seed=self._n)
        assert self._lun is not None or not verify
        spec = WorkloadSpec(name, p, eng, fd, size, 512, pair,
                            verify=WorkloadVerify(self._lun, 1) if verify and self._lun else None)
        ctl = _Control(subs, pair)
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {max(cpus)})  # as a worker is pinned
        try:
            loop.add_workload(spec, None)
            cpu0 = time.thread_time()
            loop.run(ctl, time.monotonic_ns() + 20_000_000, SUB_NS)
            loop.remove_workload(name)
        finally:
            os.sched_setaffinity(0, cpus)
        if sequential_ios:
            return LoopResult(0.0, 0.0, 0.0)
        ops = sum(ctl.ops[1:])
        cpu = ctl.cpu_s[-1] - (ctl.cpu_s[0] if len(ctl.cpu_s) > 1 else cpu0)
        return LoopResult(ops / seconds, sum(ctl.lat_ns[1:]) / max(ops, 1) / 1e3,
                          cpu * 1e6 / max(ops, 1))
