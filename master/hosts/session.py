"""One host's conversation from the master's side, over any transport.

Owns: the handshake, the clock-offset measurement, request/answer pairing by ``seq``, the queue
of subinterval results, relaying the slave's ``Log`` events, and turning a lost or misbehaving
slave into a ``HostError`` naming the host. It does not decide what to run
(``master.run.lifecycle``) and does not open connections itself: it is handed a ``SlaveConnection``.

Sends: every message the slave must take is bounded by the deadline of what it is part of (a
request's timeout, a ``Go`` by its step's first result, a ``Continue`` or ``Stop`` by the next
result): a slave that stopped reading (SIGSTOP, its main loop stuck on a hung device) holds the
master's write once the pipe or the SSH window is full, and is failed then, naming the host
(``did not read what the master sent for N s``). A host failed for any reason ends the writes
still waiting on it at once.

Keepalive: once the handshake is done the session sends a ``Ping`` whenever it has sent nothing
for a quarter of the host's watchdog (``keepalive_s``: 7.5 s for the default 30 s, 0.25 s for
the least, 1 s), so that a slave hears from a live master well within it (the slave's watchdog
stops its I/O and exits when it does not: ``slave.session.watchdog_s``). A step's grants go out
every subinterval, so a step of subintervals shorter than that needs no ping.

Clock: the master's clock is ``time.monotonic_ns``. ``offset_ns`` is the slave's clock minus the
master's, from the ping with the smallest round trip: ``offset = slave_ns - (send + rtt / 2)``.
The slave read its clock somewhere inside that round trip, so the offset is known to within
``offset_uncertainty_ns`` = half the best RTT; while that exceeds the run's limit the session
pings again, up to ``MAX_PINGS`` in all (a loaded link's best RTT falls with more samples).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from master.config.hosts import DEFAULT_WATCHDOG_S
from master.hosts.connection import Connection
from protocol.errors import HostError, ProtocolError
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    Go,
    Hello,
    HelloReply,
    LoadMap,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    Stopped,
    SubintervalResult,
    VerifyFound,
    VerifyLun,
    WindowRequest,
    WindowResult,
)
from protocol.params import WorkloadParams, to_wire
from protocol.state import Conversation, Role, State
from protocol.version import PROTOCOL_VERSION, __version__

log = logging.getLogger(__name__)

PINGS = 9
#: The most pings spent on one host's clock offset while its uncertainty exceeds the limit.
MAX_PINGS = 64
#: The share of a host's watchdog the master stays silent towards its slave at most (a
#: ``Ping`` then), and the longest it stays silent whatever the watchdog (an idle TCP
#: connection through a stateful firewall or NAT is forgotten after minutes).
KEEPALIVE_SHARE = 0.25
KEEPALIVE_MAX_S = 30.0
#: How long a host that failed (late, cut off, stopped) gets to exit once its stdin is closed
#: before it is terminated and killed: it is not waited for (the run ends within 3 s of a
#: missed deadline).
FAILED_CLOSE_GRACE_S = 0.2
#: ... and how long its closing may take in all (an SSH kill over a cut link never returns).
FAILED_CLOSE_LIMIT_S = 1.5
REQUEST_TIMEOUT_S = 60.0


class LunRefusedError(HostError):
    """A host refused a file LUN the test names (a directory, a missing parent, no size): the
    test's fault, not the host's. ``lun`` is the file's path."""

    def __init__(self, message: str, *, host: str, lun: str) -> None:
        self.lun = lun
        super().__init__(message, host=host)


def window_timeout_s(subintervals: int, subinterval_s: float, folded: bool) -> float:
    """How long a slave gets to answer a ``WindowRequest`` of ``subintervals`` subintervals
    of ``subinterval_s``: ``REQUEST_TIMEOUT_S`` as for any request, plus, unless the step
    folded them as they came, one subinterval's time for each subinterval in the window.

    The rule follows what the request does on the slave (``slave.windowstore``). A folded
    window (a fixed-length step) is a running total and the last ``FOLD_DELAY`` subintervals,
    added in memory: no more work for a longer window. Otherwise the slave reads each kept
    subinterval back (from memory, or from its spill file) and adds it to the others; while
    the step ran it grouped, kept (spilled) and sent the same subinterval's statistics within
    that subinterval's deadline, less than a subinterval, with all its I/O going on besides,
    so reading it back and adding it takes no longer."""
    return REQUEST_TIMEOUT_S + (0.0 if folded else subintervals * subinterval_s)


def _uncertainty(rtt_ns: int) -> int:
    """How far an offset from a ping of this round trip may be off: half of it, rounded up
    (the slave read its clock somewhere between the send and the receipt)."""
    return (rtt_ns + 1) // 2


@dataclass
class ClockSample:
    rtt_ns: int
    offset_ns: int


@dataclass
class SlaveEvent:
    """A ``Log`` or ``Error`` from the slave, stamped with the master's clock."""

    host: str
    level: str
    message: str
    master_ns: int
    context: dict[str, Any] = field(default_factory=dict)


def keepalive_s(watchdog_s: float) -> float:
    """How long the master may say nothing to a slave whose watchdog is ``watchdog_s`` (the
    host's ``watchdog_seconds``: the least the slave waits) before it sends a ``Ping``."""
    return min(KEEPALIVE_MAX_S, KEEPALIVE_SHARE * watchdog_s)


class HostSession:
    """The master's side of one host; see the module docstring."""

    def __init__(
        self,
        conn: Connection,
        host: str,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        on_event: Callable[[SlaveEvent], None] | None = None,
        watchdog_s: float = DEFAULT_WATCHDOG_S,
    ) -> None:
        self.conn = conn
        self.host = host
        self.clock = clock
        self.on_event = on_event
        self.conv = Conversation(Role.MASTER, host=host)
        self.hello: HelloReply | None = None
        self.clock_samples: list[ClockSample] = []
        self.offset_ns = 0
        self.rtt_ns = 0
        #: the offset is right to within this (half the best round trip)
        self.offset_uncertainty_ns = 0
        self.results: asyncio.Queue[SubintervalResult] = asyncio.Queue()
        self.stopped: asyncio.Queue[Stopped] = asyncio.Queue()
        self.failure: HostError | None = None
        self.failed = asyncio.Event()
        #: told of this session when a result comes or it fails (``Fleet.results``' wait)
        self.arrived: Callable[[HostSession], None] | None = None
        self._seq = 0
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self.keepalive_s = keepalive_s(watchdog_s)
        self._last_sent_ns = 0
        #: when the slave last said anything (the master's clock): a long answer it keeps
        #: talking through (a layout's progress, a read-back's findings) is alive
        self.heard_ns = 0
        self._hearing: set[asyncio.Future[None]] = set()  # long answers' waits (_answer)
        self._bye = asyncio.Event()
        #: the tasks in ``send`` (a write waiting for the slave to read ends when the host
        #: fails: ``_fail`` cancels them)
        self._senders: set[asyncio.Task[Any]] = set()
        #: what each read-back (``verify_lun``, by seq) is told as it goes
        self._found: dict[int, Callable[[VerifyFound], None]] = {}

    # ------------------------------------------------------------------ plumbing
    async def send(self, msg: Message, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        """Send ``msg``; the slave must take its bytes within ``timeout_s`` (the deadline of
        what it is part of), else the host is failed. A write that needs no wait goes through
        even when the deadline has passed; one cut short leaves its frame whole in the
        transport's buffer (the host is failed then, and nothing more is sent to it)."""
        if self.failure is not None:
            raise self.failure
        try:
            frame = self.conv.send(msg)
        except ProtocolError as exc:
            raise self._fail(f"cannot send {type(msg).__name__}: {exc}") from exc
        self._last_sent_ns = self.clock()
        # in the sender's own task, bounded by a timeout (a task and a wait of its own for
        # each write cost 0.1 s of the master's CPU a subinterval at 1,000 hosts)
        task = asyncio.current_task()
        assert task is not None
        self._senders.add(task)
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await self.conn.write(frame)  # HostError: the slave or the link is gone
        except TimeoutError:
            if self.failure is not None:  # failed meanwhile
                raise self.failure from None
            raise self._fail(f"did not read what the master sent for {timeout_s:.1f} s "
                             f"({type(msg).__name__})") from None
        except asyncio.CancelledError:
            # a failure meanwhile: ``_fail`` cancelled this sender once (one in ``send`` when
            # the host failed); its failure, unless the task was cancelled besides
            if self.failure is not None and task.uncancel() == 0:
                raise self.failure from None
            raise
        finally:
            self._senders.discard(task)

    def mark_failed(self, message: str) -> HostError:
        """This host failed in the run's eyes (it missed a deadline): it is not waited for
        again, and ``close`` kills it at once. Returns the ``HostError`` to raise."""
        return self._fail(message)

    async def _keep_alive(self) -> None:
        """A ``Ping`` whenever nothing was sent for ``keepalive_s`` (its ``Pong`` is ignored)."""
        interval_ns = round(self.keepalive_s * 1e9)
        while self.failure is None:
            quiet_ns = self.clock() - self._last_sent_ns
            if quiet_ns < interval_ns:
                await asyncio.sleep((interval_ns - quiet_ns) / 1e9)
                continue
            if self.conv.state not in (State.IDLE, State.RUNNING, State.STOPPING):
                return  # closing: nothing more to say
            with contextlib.suppress(HostError, OSError):
                await self.send(Ping(self._next_seq(), self.clock()))

    def _fail(self, message: str) -> HostError:
        if self.failure is None:
            self.failure = HostError(message, host=self.host, stderr_tail=self.conn.stderr_tail())
            self.failed.set()
            if self.arrived is not None:
                self.arrived(self)
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(self.failure)
            try:
                me = asyncio.current_task()
            except RuntimeError:  # no loop running
                me = None
            for task in self._senders - {me}:  # their writes end at once
                task.cancel()
        return self.failure

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.conn.read()
                if not data:
                    self._on_eof()
                    return
                self.heard_ns = self.clock()
                for heard in self._hearing:
                    if not heard.done():
                        heard.set_result(None)
                for msg in self.conv.receive_data(data):
                    self._dispatch(msg)
        except ProtocolError as exc:
            self._fail(f"protocol error: {exc}")
        except HostError as exc:
            self._fail(str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not hang the run
            log.exception("reader for host %s failed", self.host)
            self._fail(f"reader failed: {exc!r}")

    def _on_eof(self) -> None:
        """The slave's output ended: clean after its ``Bye`` (or fatal ``Error``) at a frame
        boundary; inside a frame a protocol error (SPEC, Framing); else the slave is lost."""
        if self.conv.buffered_bytes:
            self._fail(f"protocol error: the slave's output ended inside a frame "
                       f"({self.conv.buffered_bytes} bytes of it received)")
        elif not (self._bye.is_set() or self.conv.state is State.CLOSED):
            self._fail("the slave ended its output unexpectedly (process died or "
                       "connection lost)")

    def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, SubintervalResult):
            self.results.put_nowait(msg)
            if self.arrived is not None:
                self.arrived(self)
        elif isinstance(msg, Stopped):
            self.stopped.put_nowait(msg)
        elif isinstance(msg, Log):
            self._event(msg.level, msg.message, msg.context)
        elif isinstance(msg, Error):
            fut = self._pending.pop(msg.seq, None) if msg.seq >= 0 else None
            if fut is not None and not fut.done():
                fut.set_result(msg)  # a refusal: the requester reports it, once
                return
            ctx = {k: v for k, v in (("workload", msg.workload_id), ("lun", msg.lun)) if v}
            self._event("ERROR", f"{msg.kind}: {msg.message}", {"kind": msg.kind, **ctx})
            if msg.fatal:
                self._fail(f"slave failed ({msg.kind}): {msg.message}")
            elif msg.kind in ("late", "io", "internal"):
                self._fail(f"{msg.kind}: {msg.message}")
        elif isinstance(msg, VerifyFound):
            told = self._found.get(msg.seq)
            if told is not None:
                told(msg)
        elif isinstance(msg, Bye):
            self._bye.set()
        elif isinstance(msg, Pong | Ack | LunList | HelloReply | WindowResult):
            key = -1 if isinstance(msg, HelloReply) else msg.seq
            fut = self._pending.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    def _event(self, level: str, message: str, context: dict[str, Any]) -> None:
        ev = SlaveEvent(self.host, level, message, self.clock(), dict(context))
        if self.on_event is not None:
            self.on_event(ev)  # which logs it (the run: console, run.log, events.csv)
            return
        numeric = logging.getLevelName(level)  # the number for a known level name
        log.log(numeric if isinstance(numeric, int) else logging.INFO, "[host=%s] %s",
                self.host, message)

    async def _request(
        self, msg: Message, key: int, timeout_s: float = REQUEST_TIMEOUT_S,
        send_timeout_s: float | None = None, silent: str | None = None,
    ) -> Message:
        """``msg`` and its answer within ``timeout_s`` in all; the slave must take the bytes
        within ``send_timeout_s`` when that is sooner (the deadline of what the request is part
        of). With ``silent``, the answer may take as long as the slave keeps talking: the host
        fails (``no word ... for N s``, ``silent`` saying of what) only once it has said
        nothing for ``timeout_s``."""
        if self.failure is not None:  # a host given up is not asked again (nor waited for)
            raise self.failure
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        t0 = self.clock()
        try:
            await self.send(msg, timeout_s if send_timeout_s is None
                            else min(timeout_s, send_timeout_s))
            return await self._answer(fut, timeout_s, t0, type(msg).__name__, silent)
        finally:
            self._pending.pop(key, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # ``_fail`` set it (this host failed): raised already

    async def _answer(self, fut: asyncio.Future[Message], timeout_s: float, t0_ns: int,
                      what: str, silent: str | None) -> Message:
        """``fut``'s answer within ``timeout_s`` of ``t0_ns``; with ``silent``, for as long as
        the slave says anything at least every ``timeout_s`` from when the request was sent.
        Judged on the session's clock, again at each word and when the wait has run out."""
        loop = asyncio.get_running_loop()
        since = self.clock()  # the request is sent
        while True:
            from_ns = t0_ns if silent is None else max(since, self.heard_ns)
            left_s = timeout_s - (self.clock() - from_ns) / 1e9
            if left_s <= 0:
                raise self._fail(f"no answer to {what} within {timeout_s:.0f} s"
                                 if silent is None else
                                 f"no word {silent} for {timeout_s:g} s")
            waits: list[asyncio.Future[Any]] = [fut]
            if silent is not None:
                heard: asyncio.Future[None] = loop.create_future()
                self._hearing.add(heard)
                waits.append(heard)
            try:
                await asyncio.wait(waits, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if silent is not None:
                    self._hearing.discard(heard)
            if fut.done():
                return fut.result()

    # ------------------------------------------------------------------ conversation
    async def start(self, pings: int = PINGS, uncertainty_limit_ns: int | None = None,
                    before_pings: asyncio.Event | None = None,
                    ping_slots: asyncio.Semaphore | None = None) -> HelloReply:
        """Handshake and clock offset (``measure_clock``). The pings wait for ``before_pings``
        to be set (the master's own start-up, which would lengthen their round trips), then
        for a place in ``ping_slots`` (other hosts' pings would), the keepalive telling the
        slave meanwhile that its master is there."""
        self._reader = asyncio.create_task(self._read_loop(), name=f"reader-{self.host}")
        reply = await self._request(
            Hello(PROTOCOL_VERSION, __version__, self.host, self.clock()), key=-1
        )
        if isinstance(reply, Error):
            raise self._fail(f"slave refused the handshake: {reply.message}")
        assert isinstance(reply, HelloReply)
        self.hello = reply
        self._keepalive = asyncio.create_task(self._keep_alive(), name=f"keepalive-{self.host}")
        if before_pings is not None:
            await before_pings.wait()
        async with ping_slots or contextlib.nullcontext():
            await self.measure_clock(pings, uncertainty_limit_ns)
        return reply

    async def measure_clock(self, pings: int = PINGS, uncertainty_limit_ns: int | None = None
                            ) -> None:
        """``pings`` round trips; then more, one at a time up to ``MAX_PINGS`` in all, while
        half the best round trip exceeds ``uncertainty_limit_ns``."""
        samples: list[ClockSample] = []
        best: ClockSample | None = None

        def more() -> bool:
            if len(samples) < pings:
                return True
            if uncertainty_limit_ns is None or len(samples) >= MAX_PINGS:
                return False
            assert best is not None
            return _uncertainty(best.rtt_ns) > uncertainty_limit_ns

        while more():
            seq = self._next_seq()
            sent = self.clock()
            pong = await self._request(Ping(seq, sent), key=seq, timeout_s=10.0)
            got = self.clock()
            assert isinstance(pong, Pong)
            rtt = got - sent
            samples.append(ClockSample(rtt, pong.slave_ns - (sent + rtt // 2)))
            if best is None or rtt < best.rtt_ns:  # the first of equal round trips
                best = samples[-1]
        assert best is not None
        self.clock_samples = samples
        self.offset_ns, self.rtt_ns = best.offset_ns, best.rtt_ns
        self.offset_uncertainty_ns = _uncertainty(best.rtt_ns)

    async def ping(self, timeout_s: float = REQUEST_TIMEOUT_S) -> int:
        """One round trip (``Ping``, ``Pong``), in ns. The slave answers its messages in the
        order they came: a ``Pong`` also says that it has handled every message sent before
        the ``Ping``."""
        seq = self._next_seq()
        sent = self.clock()
        pong = await self._request(Ping(seq, sent), key=seq, timeout_s=timeout_s)
        assert isinstance(pong, Pong)
        return self.clock() - sent

    def to_slave_ns(self, master_ns: int) -> int:
        return master_ns + self.offset_ns

    def to_master_ns(self, slave_ns: int) -> int:
        return slave_ns - self.offset_ns

    async def discover(self, files: list[dict[str, Any]], devices: list[str]
                       ) -> list[dict[str, Any]]:
        """The host's LUNs: ``files`` and the block devices the globs ``devices`` match
        (``DiscoverLuns``), waited for as long as the slave keeps talking: it tells a file's
        layout at least once a second and syncs it as it goes (``slave.luns.lay_out``), so a
        layout takes what the disk takes while a slave hung on a device, or gone, fails its
        host after ``REQUEST_TIMEOUT_S`` of silence."""
        seq = self._next_seq()
        laid = [int(f.get("size_bytes") or 0) for f in files
                if f.get("create") and f.get("layout", "none") != "none"]
        what = "while the slave discovered its LUNs" + (
            f" (laying out up to {len(laid)} file{'s' * (len(laid) != 1)}, "
            f"{sum(laid) / 2**30:.2f} GiB)" if laid else "")
        reply = await self._request(DiscoverLuns(seq, files, devices), key=seq,
                                    timeout_s=REQUEST_TIMEOUT_S, silent=what)
        if isinstance(reply, Error):
            if reply.kind in ("config", "preflight") and reply.lun:
                raise LunRefusedError(reply.message, host=self.host, lun=reply.lun)
            raise HostError(reply.message, host=self.host)
        assert isinstance(reply, LunList)
        return reply.luns

    async def create(self, workload_id: str, lun_path: str, params: WorkloadParams,
                     allow_write: bool, engine: str = "auto",
                     allow_engine_fallback: bool = False, shared: bool = False,
                     verify: dict[str, int] | None = None) -> Ack | Error:
        seq = self._next_seq()
        reply = await self._request(CreateWorkload(seq, workload_id, lun_path, to_wire(params),
                                                   allow_write, engine, allow_engine_fallback,
                                                   shared, verify), key=seq)
        assert isinstance(reply, Ack | Error)
        return reply

    async def load_map(self, lun: int, data: bytes, crashes: Sequence[Sequence[int]] = (),
                       part_bytes: int = 8 << 20) -> Error | None:
        """LUN ``lun``'s map (``LoadMap``), in parts of ``part_bytes``, with the crashes it
        must account for (``[attempt, confirmed serial by writer ...]`` each); the first
        refusal."""
        for first in range(0, max(len(data), 1), part_bytes):
            seq = self._next_seq()
            reply = await self._request(LoadMap(seq, lun, first, data[first:first + part_bytes],
                                                [list(c) for c in crashes]), key=seq)
            if isinstance(reply, Error):
                return reply
        return None

    async def verify_lun(self, lun_path: str, target: dict[str, int], kept_max: int,
                         on_found: Callable[[VerifyFound], None],
                         silence_s: float = REQUEST_TIMEOUT_S) -> Ack | Error:
        """Read back LUN ``lun_path`` against the map ``load_map`` gave it (``VerifyLun``):
        ``on_found`` gets each ``VerifyFound`` as it comes; the answer (``Ack`` with the
        totals, or the refusal). The slave says how it goes at least once a second: no word
        for ``silence_s`` fails the host."""
        seq = self._next_seq()
        self._found[seq] = on_found
        try:
            reply = await self._request(VerifyLun(seq, lun_path, dict(target), kept_max),
                                        key=seq, timeout_s=silence_s,
                                        silent=f"of the read-back of {lun_path}")
        finally:
            self._found.pop(seq, None)
        assert isinstance(reply, Ack | Error)
        return reply

    async def edit(self, workload_id: str, params: dict[str, Any]) -> Ack | Error:
        seq = self._next_seq()
        reply = await self._request(EditWorkload(seq, workload_id, params), key=seq)
        assert isinstance(reply, Ack | Error)
        return reply

    async def edit_many(self, edits: Sequence[tuple[str, dict[str, Any]]],
                        send_timeout_s: float | None = None) -> Ack | Error:
        """Edits of many workloads in one request (``EditWorkloads``): all hold, or none. The
        slave must take it within ``send_timeout_s`` (a DFC move: by the next result)."""
        seq = self._next_seq()
        reply = await self._request(EditWorkloads(seq, [[wid, p] for wid, p in edits]), key=seq,
                                    send_timeout_s=send_timeout_s)
        assert isinstance(reply, Ack | Error)
        return reply

    async def delete(self, workload_id: str) -> Ack | Error:
        seq = self._next_seq()
        reply = await self._request(DeleteWorkload(seq, workload_id), key=seq)
        assert isinstance(reply, Ack | Error)
        return reply

    async def go(self, step: int, start_master_ns: int, subinterval_ns: int,
                 rollups: list[dict[str, Any]], keep_from: int = 0, keep_to: int = -1,
                 fold: bool = False, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        """Start step ``step`` with its rollup plan (``Go.rollups``) and what to keep for the
        measurement window (``Go.keep_from``, ``Go.keep_to``, ``Go.fold``); the slave must take
        it within ``timeout_s`` (the deadline of the step's first result)."""
        while not self.results.empty():
            self.results.get_nowait()
        await self.send(Go(step, self.to_slave_ns(start_master_ns), subinterval_ns,
                           rollups, keep_from, keep_to, fold), timeout_s)

    async def window(self, step: int, first: int, last: int,
                     timeout_s: float = REQUEST_TIMEOUT_S) -> WindowResult:
        """Every workload's statistics of subintervals ``first`` .. ``last`` of ``step``,
        added up by the slave, within ``timeout_s`` (``window_timeout_s``). A refusal (the
        slave did not keep them) is a ``HostError``."""
        seq = self._next_seq()
        reply = await self._request(WindowRequest(seq, step, first, last), key=seq,
                                    timeout_s=timeout_s)
        if isinstance(reply, Error):
            raise HostError(f"measurement window {first}..{last} of step {step}: "
                            f"{reply.message}", host=self.host)
        assert isinstance(reply, WindowResult)
        return reply

    async def grant(self, subinterval: int, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        """``Continue``: the slave must take it within ``timeout_s`` (by the next result)."""
        await self.send(Continue(subinterval), timeout_s)

    async def stop(self, after_subinterval: int, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        """``Stop`` while the step runs (else nothing); taken within ``timeout_s``."""
        if self.conv.state is State.RUNNING:
            await self.send(Stop(after_subinterval), timeout_s)

    async def wait_stopped(self, timeout_s: float) -> Stopped | None:
        try:
            return await asyncio.wait_for(self.stopped.get(), timeout_s)
        except asyncio.TimeoutError:
            return None

    async def close(self, grace_s: float = 2.0) -> int | None:
        """Say bye (when still possible), then close the transport: a host that failed is
        given ``FAILED_CLOSE_GRACE_S`` to exit, then terminated and killed."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.failure is None and self.conv.state in (State.IDLE, State.RUNNING, State.STOPPING):
            with contextlib.suppress(HostError, ProtocolError, OSError):
                await self.send(Bye("run finished"), grace_s)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._bye.wait(), grace_s)
        if self.failure is None:
            status = await self.conn.close(grace_s)
        else:  # over a cut link the kill cannot arrive either: the slave's watchdog ends it
            status = None
            with contextlib.suppress(asyncio.TimeoutError):
                status = await asyncio.wait_for(self.conn.close(FAILED_CLOSE_GRACE_S),
                                                FAILED_CLOSE_LIMIT_S)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        return status
