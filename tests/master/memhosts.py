"""In-memory hosts for tests of the run's logic: ``master.run.lifecycle.Run`` talks to a real
``SlaveSession`` in this process over an in-memory byte pipe (no subprocess, no SSH, no
worker processes), whose I/O is ``SyntheticBackend``'s: each workload completes exactly its
IOPS setting, at a fixed latency. A test reaches into the wire (``MemoryHost.watch``: see
each message from the slave, or hang the slave from one on) and reads what the slave ran
(``SyntheticBackend.ran``).

Owns: the pipe, the slave's clock ticks and the synthetic I/O. Must not: start processes, or
leave a task running after the run closed its hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from master.config import HostConfig, TestConfig, parse_config_text
from master.live.view import LiveView
from master.run.lifecycle import Run
from protocol import credit
from protocol.codec import FrameDecoder, encode
from protocol.messages import Message
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from slave.luns import LunInfo
from slave.session import Collected, SlaveSession

#: I/Os a subinterval of an ``iops: max`` workload completes, per second
MAX_IOPS = 5000.0
LATENCY_NS = 200_000


class SyntheticBackend:
    """The slave's ``Backend`` without I/O: each workload completes its IOPS setting exactly
    in each subinterval. An edit holds from the subinterval after the one running (as the
    slave announces it), or, between steps, from the next step's start."""

    def __init__(self) -> None:
        self.workloads: dict[str, WorkloadParams] = {}
        #: edits staged, in the order taken: workload id -> [(first subinterval, parameters)]
        self.staged: dict[str, list[tuple[int, WorkloadParams]]] = {}
        #: (step, subinterval, {workload id: iops}) of every subinterval collected
        self.ran: list[tuple[int, int, dict[str, float | None]]] = []
        self.step = -1
        self.subinterval_s = 1.0
        self.running = False  # between a step's start and its halt
        self.collected = -1  # the last subinterval collected in this step
        self.calls: list[str] = []

    def create(self, workload_id: str, lun: LunInfo, params: WorkloadParams,
               engine: str = "auto", fallback: bool = False) -> dict[str, Any]:
        self.workloads[workload_id] = params
        return {"engine": "synthetic"}

    def engine_for(self, lun: LunInfo) -> str:
        return "synthetic"

    def edit(self, workload_id: str, params: WorkloadParams) -> None:
        self.staged.setdefault(workload_id, []).append(
            (credit.effective(self.collected + 1 if self.running else None), params))

    def edit_many(self, edits: Sequence[tuple[str, WorkloadParams]]) -> None:
        for wid, params in edits:
            self.edit(wid, params)

    def delete(self, workload_id: str) -> None:
        self.workloads.pop(workload_id, None)
        self.staged.pop(workload_id, None)

    def go(self, start_ns: int, subinterval_ns: int, granted: int) -> None:
        self.calls.append("go")
        self._take_staged(None)  # what was edited after the last step runs in this one
        self.step += 1
        self.subinterval_s = subinterval_ns / 1e9
        self.running, self.collected = True, -1

    def grant(self, subinterval: int) -> None:
        pass

    def stop_after(self, subinterval: int) -> None:
        pass

    def _take_staged(self, k: int | None) -> None:
        for wid, edits in list(self.staged.items()):
            due = [params for frm, params in edits if k is None or frm <= k]
            if due:
                self.workloads[wid] = due[-1]
                self.staged[wid] = [(frm, p) for frm, p in edits if k is not None and frm > k]

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        self._take_staged(subinterval)
        self.collected = subinterval
        ids = sorted(self.workloads)
        stats = []
        for wid in ids:
            s = WorkloadStats()
            iops = self.workloads[wid].iops
            n = round((MAX_IOPS if iops is None else iops) * self.subinterval_s)
            lat = np.full(n, LATENCY_NS, dtype=np.int64)
            s.record(0, lat, lat, 4096)
            stats.append(s)
        self.ran.append((self.step, subinterval,
                         {wid: self.workloads[wid].iops for wid in ids}))
        return Collected(ids, stats, [0], [{"switch_delay_ns": 0}])

    def release(self, subinterval: int) -> None:
        pass

    def halt(self) -> None:
        self.calls.append("halt")
        self.running = False

    def close(self) -> None:
        self.calls.append("close")

    def iops_in_step(self, step: int) -> list[dict[str, float | None]]:
        return [iops for s, _, iops in self.ran if s == step]


class MemoryHost:
    """One host's slave in this process, as the master's transport sees it (``write``,
    ``read``, ``close``, ``stderr_tail``). ``watch(message)`` sees each message from the
    slave as it is sent; returning False hangs the slave from that message on: it and
    everything after it are never delivered (a slave stopped by SIGSTOP, a stuck read)."""

    def __init__(self, name: str, watch: Callable[[Message], bool] | None = None) -> None:
        self.host = name
        self.watch = watch
        self.backend = SyntheticBackend()
        self.hung = False
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._decoder = FrameDecoder()
        self._eof = False
        self.session = SlaveSession(self.backend, self._from_slave, time.monotonic_ns)
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    def _from_slave(self, data: bytes) -> None:
        out = b""
        for msg in self._decoder.feed(data):
            if not self.hung and self.watch is not None and not self.watch(msg):
                self.hung = True
            if not self.hung:
                out += encode(msg)
        if out:
            self._inbox.put_nowait(out)

    def _after_slave(self) -> None:
        if self.session.closed and not self._eof and not self.hung:
            self._eof = True
            self._inbox.put_nowait(b"")

    async def _tick(self) -> None:
        while not self.session.closed:
            wake = self.session.next_wakeup_ns()
            left_s = 0.05 if wake is None else (wake - time.monotonic_ns()) / 1e9
            await asyncio.sleep(min(max(left_s, 0.0), 0.05))
            if not self.hung:
                self.session.on_tick()
        self._after_slave()

    async def write(self, data: bytes) -> None:
        if not self.session.closed and not self.hung:
            self.session.on_bytes(data)
            self._after_slave()

    async def read(self) -> bytes:
        return await self._inbox.get()

    async def close(self, grace_s: float = 2.0) -> int | None:
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        if not self.session.closed:
            self.session.shut_down()
        self.backend.close()
        if not self._eof:
            self._eof = True
            self._inbox.put_nowait(b"")
        return 0

    def stderr_tail(self) -> str:
        return ""


class MemoryHosts:
    """The connector of a ``Run`` (``connect=hosts.connect``): a ``MemoryHost`` per host of the
    test, made when the run connects to it, each watched by ``watch`` (its host name and the
    message)."""

    def __init__(self, watch: Callable[[str, Message], bool] | None = None) -> None:
        self.watch = watch
        self.hosts: dict[str, MemoryHost] = {}

    async def connect(self, host: HostConfig) -> MemoryHost:
        watch = self.watch
        self.hosts[host.name] = MemoryHost(
            host.name, None if watch is None else (lambda m: watch(host.name, m)))
        return self.hosts[host.name]

    def __getitem__(self, name: str) -> MemoryHost:
        return self.hosts[name]


def memory_config(tmp: Path, text: str) -> TestConfig:
    """The test ``text`` (a ``${output_root}`` file LUN for the synthetic I/O), its output
    root ``tmp/out``; test.yaml is written into ``tmp`` as the run's source."""
    source = tmp / "test.yaml"
    source.write_text(text)
    return parse_config_text(text, str(source), output_root_override=str(tmp / "out"), cwd=tmp)


def memory_run(cfg: TestConfig, hosts: MemoryHosts, **kw: Any) -> Run:
    return Run(cfg, view=LiveView(rich_mode=False), connect=hosts.connect, **kw)


def execute(run: Run, timeout_s: float = 30) -> Any:
    """``run.execute()`` to its end (its ``RunResult``), failing the test past ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(run.execute(), timeout_s))
