"""In-memory hosts: a run's slaves in the master's own process, over an in-memory pipe, with a
synthetic device instead of I/O.

Owns ``MemoryHost`` (a ``Connection``: a real ``slave.session.SlaveSession`` fed and read as
bytes, ticked by an asyncio task on the running loop's clock: ``warp.loop_clock_ns``, which
the ``Run`` is given too, so that on a ``warp.WarpLoop`` the idle waits take no time),
``MemoryHosts`` (the ``Connector`` a ``Run`` is given:
``Run(cfg, connect=MemoryHosts().connect, clock=loop_clock_ns)``), and ``SyntheticBackend``,
the slave's ``Backend`` without I/O: every workload completes exactly its IOPS setting, every
I/O of a subinterval taking the ``Plant``'s latency at the host's total IOPS, which rises past
a knee, so that DFC and ``measure:`` meet a device with a known curve and converge the same way each
time. As httpx ships ``MockTransport``, this ships with ivypy: the run's decisions (steps,
DFC, measure, edits, verdicts, refusals, resume) are tested through it, with no process, SSH
or device. It is the one module of the master that imports the slave's code.

Must not: start processes, touch devices, or leave a task running after the run closed its
hosts. A test reaches into the wire (``watch``: see each message from the slave, or hang the
slave from one on) and reads what the slave ran (``SyntheticBackend.ran``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from master.config import HostConfig
from master.hosts.warp import loop_clock_ns
from protocol import credit
from protocol.codec import FrameDecoder, encode
from protocol.errors import HostError
from protocol.messages import Message
from protocol.params import WorkloadParams
from protocol.stats import WorkloadStats
from protocol.views import category_index
from slave.engine.verify_state import LoadedMap
from slave.luns import LunInfo
from slave.session import Collected, SlaveSession


@dataclass(frozen=True)
class Plant:
    """The synthetic device of a memory host. Each workload completes its IOPS setting exactly
    (``max_iops`` at ``iops: max``), up to the device's ``capacity_iops`` in all (beyond it,
    each completes its share of the capacity); with ``poisson`` a ``random_independent``
    workload's count is a Poisson draw around its setting (seeded by the workload's seed, step
    and subinterval: the same every run). Every I/O of a subinterval takes
    ``base_latency_ns * (1 + (total / knee_iops) ** knee_exponent)``, ``total`` the host's IOPS
    in that subinterval (flat at ``base_latency_ns`` without a knee)."""

    base_latency_ns: int = 200_000
    knee_iops: float | None = None
    knee_exponent: float = 4.0
    max_iops: float = 5000.0
    capacity_iops: float | None = None
    poisson: bool = False

    def latency_ns(self, total_iops: float) -> int:
        if self.knee_iops is None:
            return self.base_latency_ns
        rise: float = (total_iops / self.knee_iops) ** self.knee_exponent
        return round(self.base_latency_ns * (1.0 + rise))

    def iops_at(self, latency_ns: float) -> float:
        """The host total at which an I/O takes ``latency_ns`` (the knee's inverse): what DFC
        holding that latency should settle at."""
        if self.knee_iops is None or latency_ns <= self.base_latency_ns:
            return 0.0
        return float(self.knee_iops * (latency_ns / self.base_latency_ns - 1.0)
                     ** (1.0 / self.knee_exponent))


#: the subintervals a ``SyntheticBackend`` keeps in ``ran``, the latest (a test reads a few
#: dozen; a day-long in-memory run keeps 570 kB a host of them, not 49 MB)
RAN_KEPT = 1000


class SyntheticBackend:
    """The slave's ``Backend`` without I/O (see the module docstring). An edit holds from the
    subinterval the session announced (``protocol.credit.effective``), or, between steps,
    from the next step's start."""

    def __init__(self, plant: Plant | None = None) -> None:
        self.plant = plant or Plant()
        self.workloads: dict[str, WorkloadParams] = {}
        #: edits staged, in the order taken: workload id -> [(first subinterval, parameters)]
        self.staged: dict[str, list[tuple[int, WorkloadParams]]] = {}
        #: (step, subinterval, {workload id: iops}) of the last ``RAN_KEPT`` subintervals
        #: collected (a long run's record stays bounded: 570 bytes a host and subinterval)
        self.ran: collections.deque[tuple[int, int, dict[str, float | None]]] = (
            collections.deque(maxlen=RAN_KEPT))
        self.step = -1
        self.subinterval_s = 1.0
        self.running = False  # between a step's start and its halt
        self.collected = -1  # the last subinterval collected in this step
        self.calls: list[str] = []

    def create(self, workload_id: str, lun: LunInfo, params: WorkloadParams,
               engine: str = "auto", fallback: bool = False,
               verify: dict[str, int] | None = None,
               verify_map: LoadedMap | None = None) -> dict[str, Any]:
        if verify is not None:
            raise ValueError("an in-memory host has no data to verify (its I/O is synthetic)")
        self.workloads[workload_id] = params
        return {"engine": "synthetic"}

    def engine_for(self, lun: LunInfo) -> str:
        return "synthetic"

    def final_verify(self) -> dict[str, Any] | None:
        return None  # it verifies nothing

    def load_map_part(self, lun: int, first_block: int, data: bytes) -> bool:
        return False  # it verifies nothing (``create`` refuses)

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
            due = [params for first, params in edits if k is None or first <= k]
            if due:
                self.workloads[wid] = due[-1]
                self.staged[wid] = [(f, p) for f, p in edits if k is not None and f > k]

    def _iops(self, params: WorkloadParams) -> float:
        return self.plant.max_iops if params.iops is None else params.iops

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        self._take_staged(subinterval)
        self.collected = subinterval
        ids = sorted(self.workloads)
        plant = self.plant
        total = sum(self._iops(self.workloads[w]) for w in ids)
        share = 1.0 if plant.capacity_iops is None or total <= plant.capacity_iops else (
            plant.capacity_iops / total)
        latency = plant.latency_ns(total * share)
        stats = []
        for wid in ids:
            p = self.workloads[wid]
            s = WorkloadStats()
            mean = self._iops(p) * share * self.subinterval_s
            if plant.poisson and p.iosequencer == "random_independent":
                rng = np.random.default_rng((p.seed, self.step + 1, subinterval))
                n = int(rng.poisson(mean))
            else:
                n = round(mean)
            writes = round(n * (1.0 - p.read_fraction))
            sequential = p.iosequencer == "sequential"
            for is_write, count in ((False, n - writes), (True, writes)):
                if count:
                    lat = np.full(count, latency, dtype=np.int64)
                    s.record(category_index(sequential, is_write), lat, lat, p.blocksize_bytes)
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


#: how long an in-memory slave waits for a grant past its boundary before it calls the master
#: late (``MemoryHost._tick``); a real slave, in its own process, does not wait
GRANT_GRACE_S = 1.0


class MemoryHost:
    """One host's slave in this process, as the master's ``Connection`` sees it.
    ``watch(message)`` sees each message from the slave as it is sent; returning False hangs
    the slave from that message on: it and everything after it are never delivered (a slave
    stopped by SIGSTOP, a stuck read)."""

    def __init__(self, name: str, watch: Callable[[Message], bool] | None = None,
                 plant: Plant | None = None) -> None:
        self.host = name
        self.watch = watch
        self.backend = SyntheticBackend(plant)
        self.hung = False
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._decoder = FrameDecoder()
        self._eof = False
        self.session = SlaveSession(self.backend, self._from_slave, loop_clock_ns)
        self._wakeup: asyncio.Future[None] | None = None  # the ticker's nap (``_nap``)
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

    def _poke(self) -> None:
        """Wake the ticker: a message came in, which may move the session's next wake-up."""
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _nap(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (None: until poked), or less if a message comes in meanwhile.
        One future and one timer a nap: a thousand hosts in one process wake only when their
        session has something to do (a ticker that polled every 50 ms cost a master of a
        thousand in-memory hosts seconds of its thread per subinterval)."""
        loop = asyncio.get_running_loop()
        self._wakeup = loop.create_future()
        timer = None if seconds is None else loop.call_later(max(seconds, 0.0), self._poke)
        try:
            await self._wakeup
        finally:
            if timer is not None:
                timer.cancel()
            self._wakeup = None

    async def _tick(self) -> None:
        while not self.session.closed:
            if self.hung:  # it never ticks again: ``die`` or ``close`` ends the ticker
                await self._nap(None)
                continue
            wake = self.session.next_wakeup_ns()
            if wake is None or wake > loop_clock_ns():
                await self._nap(None if wake is None else (wake - loop_clock_ns()) / 1e9)
                continue  # poked or due: what is due is read again
            # the master runs in this process and shares its stalls: a grant it has not sent
            # yet when a boundary passes is waited for, up to GRANT_GRACE_S, before the slave
            # calls it late (one stall of the whole process longer than a subinterval ended
            # in-memory runs so under a busy suite: the slave crossed two boundaries in one
            # tick while the master had no turn between them)
            while True:  # a boundary at a time, the master's turn between them
                until = loop_clock_ns() + round(GRANT_GRACE_S * 1e9)
                while (self.session.grant_overdue() and not self.session.closed
                       and not self.hung and loop_clock_ns() < until):
                    await self._nap((until - loop_clock_ns()) / 1e9)  # a grant pokes
                if self.hung:
                    break
                self.session.on_tick(most=1)
                wake = self.session.next_wakeup_ns()
                if self.session.closed or wake is None or loop_clock_ns() < wake:
                    break
                await asyncio.sleep(0)
        self._after_slave()

    async def write(self, data: bytes) -> None:
        if not self.session.closed and not self.hung:
            self.session.on_bytes(data)
            self._after_slave()
            self._poke()

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

    def die(self) -> None:
        """The slave is gone at once (killed): nothing more comes from it, its pipe ends and
        what is written to it is lost."""
        self.hung = True
        self._ticker.cancel()
        if not self._eof:
            self._eof = True
            self._inbox.put_nowait(b"")


class MemoryHosts:
    """The ``Connector`` of a ``Run`` (``connect=hosts.connect``): a ``MemoryHost`` per host of
    the test, made when the run connects to it, each watched by ``watch`` (its host name and
    the message), each on the ``Plant`` ``plants`` names for it (else ``plant``); a host
    ``unreachable`` names is refused with its reason."""

    def __init__(self, watch: Callable[[str, Message], bool] | None = None,
                 plant: Plant | None = None, plants: dict[str, Plant] | None = None,
                 unreachable: dict[str, str] | None = None) -> None:
        self.watch = watch
        self.plant = plant
        self.plants = plants or {}
        #: the hosts whose connection fails, and why (``HostError``, as a transport's)
        self.unreachable = unreachable or {}
        self.hosts: dict[str, MemoryHost] = {}

    async def connect(self, host: HostConfig) -> MemoryHost:
        if host.name in self.unreachable:
            raise HostError(self.unreachable[host.name], host=host.name)
        watch = self.watch
        self.hosts[host.name] = MemoryHost(
            host.name, None if watch is None else (lambda m: watch(host.name, m)),
            self.plants.get(host.name, self.plant))
        return self.hosts[host.name]

    def __getitem__(self, name: str) -> MemoryHost:
        return self.hosts[name]
