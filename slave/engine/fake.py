"""A fake engine with scripted latencies, errors and short transfers, for tests.

It does no I/O: every submitted slot completes after a latency, with an optional errno every
N-th submission of a descriptor and a short transfer (half the bytes) every M-th. Latencies are
drawn from a distribution (``latency``, on the real clock) or read from a script by the
submission's number among its descriptor's (``script``, on a ``VirtualClock``, so that a run is
a function of its script; a workload has a descriptor of its own, so its I/Os take the same
latencies whatever the order of several workloads' I/Os in one submission). Scripted, it serves
the compiled loop too (``loop_words``), on the same structs as its Python reap and submit, so
the two loops can be compared I/O for I/O. It logs what was submitted (``offsets_log``) and the
most I/Os ever in flight, so tests can check sequencers and queue-depth limits through the real
engine loop. It must not decide anything of the loop's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.base import EngineCaps, SlotTable
from slave.engine.clock import REAL_CLOCK, Clock, VirtualClock
from slave.engine.layout import BACKEND_SCRIPTED, LOG_DTYPE, PEND_DTYPE, ROW, SCRIPT_DTYPE

LatencyFn = Callable[[np.random.Generator, int], npt.NDArray[np.int64]]

#: descriptors with a count of their own (others share them, modulo)
FDS = 1024
#: the words of ``struct ivy_script`` (read and written through memoryviews) and a row's (read
#: with ``item``), as plain ints: a numpy scalar per access cost more than the rest of a fake I/O
_S = {name: i for i, name in enumerate(SCRIPT_DTYPE.names or ())}
_PENDING, _COUNT, _CALLS, _CALL_MAX = _S["pending"], _S["count"], _S["calls"], _S["call_max"]
_ERROR_EVERY, _ERRNO, _SHORT_EVERY, _LOG_CAP = (_S["error_every"], _S["error_errno"],
                                                 _S["short_every"], _S["log_cap"])
_OPFD, _NBYTES, _OFFSET, _SCHED = ROW["opcode_fd"], ROW["nbytes"], ROW["offset"], ROW["sched_ns"]


def exponential_ns(mean_ns: float) -> LatencyFn:
    return lambda rng, n: rng.exponential(mean_ns, n).astype(np.int64)


def constant_ns(value_ns: int) -> LatencyFn:
    return lambda rng, n: np.full(n, value_ns, dtype=np.int64)


def script_ns(latency: LatencyFn, n: int, seed: int) -> npt.NDArray[np.int64]:
    """A script of ``n`` latencies drawn once from ``latency`` (each at least 1 ns)."""
    return np.maximum(latency(np.random.default_rng(seed), n), 1).astype(np.int64)


class FakeEngine:
    caps = EngineCaps.COMPILED
    open_flags = 0

    def __init__(
        self,
        table: SlotTable,
        latency: LatencyFn | None = None,
        *,
        error_every: int = 0,
        error_errno: int = 5,
        short_every: int = 0,
        seed: int = 0,
        keep_log: bool = False,
        script: npt.NDArray[np.int64] | None = None,
        clock: Clock = REAL_CLOCK,
        log_cap: int = 0,
    ) -> None:
        """``script``: the latency of a descriptor's i-th submission is ``script[i % len(script)]``,
        on ``clock`` (a ``VirtualClock``, whose next event this engine becomes), logging the
        first ``log_cap`` submissions; else ``latency`` (seeded by ``seed``) on the real clock."""
        if script is not None:
            if not isinstance(clock, VirtualClock) or latency is not None or not script.size:
                raise ValueError("a scripted fake engine takes a non-empty script and a "
                                 "VirtualClock, and no latency function")
            clock.next_due_ns = self._next_due
        elif clock.virtual:
            raise ValueError("a fake engine on a virtual clock needs a script")
        self._table = table
        self._clock = clock
        self._latency = latency or exponential_ns(100_000)
        self._rng = np.random.default_rng(seed)
        self.script = None if script is None else np.ascontiguousarray(script, dtype=np.int64)
        cap = table.capacity
        # what the compiled loop shares when scripted (``ivy_loop.h``, backend 2)
        self.state = np.zeros((), dtype=SCRIPT_DTYPE)
        self.state["fds"] = FDS
        self.state["error_every"] = error_every
        self.state["error_errno"] = error_errno
        self.state["short_every"] = short_every
        self.state["script_n"] = 0 if script is None else script.size
        self.state["log_cap"] = log_cap
        self.state["pend_cap"] = cap
        self.fd_counts = np.zeros(FDS, dtype=np.int64)  # submissions per descriptor (modulo)
        # pending completions in order of due time (ties: submission order)
        self.pend = np.zeros(cap, dtype=PEND_DTYPE)
        self._log_array = np.zeros(max(log_cap, 1), dtype=LOG_DTYPE)
        # libaio's event layout (slot, 0, result, 0): the compiled loop reaps into it
        self.events = np.zeros((cap, 4), dtype=np.int64)
        self.done_slot = self.events[:, 0]
        self.done_res = self.events[:, 2]
        self.max_in_flight = 0
        self.keep_log = keep_log
        # unscripted: blocks of ``LOG_DTYPE`` (scripted: ``_log_array``)
        self.log: list[npt.NDArray[np.void]] = []
        # the same memory as plain int64 words (``pend``: due_ns, slot, res per I/O)
        self._st = self.state.reshape(1).view(np.int64).data
        self._pend = self.pend.view(np.int64).data
        self._fdc = self.fd_counts.data
        self._script = None if self.script is None else self.script.data
        self._logw = self._log_array.view(np.int64).data

    @property
    def submitted(self) -> int:
        return int(self.state["count"])

    @property
    def submit_calls(self) -> tuple[int, int]:
        """How many submit calls came (the compiled loop's too), and the most I/Os one carried."""
        return int(self.state["calls"]), int(self.state["call_max"])

    def _next_due(self) -> int | None:
        return self._pend[0] if self._st[_PENDING] else None

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        n = int(slots.size)
        st = self._st
        p = st[_PENDING]
        if p + n > self.pend.shape[0]:
            raise IoEngineError(f"fake engine: {p + n} I/Os in flight, over its "
                                f"{self.pend.shape[0]} slots")
        now = self._clock.now_ns()
        # unscripted, the call's latencies drawn at once (a latency may depend on the moment)
        drawn = [0] * n if self.script is not None else self._latency(self._rng, n).tolist()
        for slot, lat in zip(slots.tolist(), drawn, strict=True):
            self._submit_one(slot, now, lat)
        st[_CALLS] += 1
        st[_CALL_MAX] = max(st[_CALL_MAX], n)
        self.max_in_flight = max(self.max_in_flight, p + n)

    def _submit_one(self, slot: int, now: int, drawn: int) -> None:
        """Slot ``slot`` submitted at ``now``: its number among its descriptor's submissions
        (from 1) picks its error, short transfer and, scripted, its latency (else ``drawn``);
        it is pending after every I/O due no later (ties keep submission order, as the
        compiled loop's insertion does)."""
        rows = self._table.rows
        word = rows.item(slot, _OPFD)
        opcode, fd = word & 0xFFFF, word >> 32
        nbytes, offset, sched = rows.item(slot, _NBYTES), rows.item(slot, _OFFSET), rows.item(
            slot, _SCHED)
        st = self._st
        first = st[_COUNT]
        k = fd % FDS
        serial = self._fdc[k] + 1
        self._fdc[k] = serial
        res = nbytes
        short_every, error_every = st[_SHORT_EVERY], st[_ERROR_EVERY]
        if short_every and serial % short_every == 0:
            res //= 2
        if error_every and serial % error_every == 0:
            res = -st[_ERRNO]
        script = self._script
        lat = drawn if script is None else script[(serial - 1) % len(script)]
        p = st[_PENDING]
        due = now + lat
        pend = self._pend
        at = 3 * bisect_right(pend[0 : 3 * p : 3], due)
        pend[at + 3 : 3 * p + 3] = pend[at : 3 * p]
        pend[at], pend[at + 1], pend[at + 2] = due, slot, res
        st[_PENDING] = p + 1
        st[_COUNT] = first + 1
        log = (offset, opcode, now, fd, sched if sched != 0 else now, nbytes)
        if script is not None:
            if first < st[_LOG_CAP]:
                w, b = self._logw, 6 * first
                w[b], w[b + 1], w[b + 2], w[b + 3], w[b + 4], w[b + 5] = log
        elif self.keep_log:
            self.log.append(np.array([log], dtype=LOG_DTYPE))

    def _take(self) -> int:
        """The completions due now into ``done_slot`` / ``done_res``, in due order."""
        st, pend = self._st, self._pend
        p = st[_PENDING]
        if not p:
            return 0
        now = self._clock.now_ns()
        if pend[0] > now:
            return 0
        n = min(bisect_right(pend[0 : 3 * p : 3], now), self.events.shape[0])
        self.events[:n, 0] = self.pend["slot"][:n]
        self.events[:n, 2] = self.pend["res"][:n]
        pend[0 : 3 * (p - n)] = pend[3 * n : 3 * p]
        st[_PENDING] = p - n
        return n

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        n = self._take()
        if n > 0 or timeout_ns == 0:  # never lose reaped slots by taking twice
            return n
        until = self._clock.now_ns() + timeout_ns
        p = self._st[_PENDING]
        if p:
            until = min(until, self._pend[3 * (min(min_nr, p) - 1)])
        self._clock.sleep_until(until)
        return self._take()

    def poll(self) -> int:
        return self._take()

    def loop_words(self) -> dict[str, int] | None:
        """The compiled loop's words for this engine (backend 2) when scripted, else None."""
        if self.script is None:
            return None
        assert isinstance(self._clock, VirtualClock)
        return {"backend": BACKEND_SCRIPTED, "events": int(self.events.ctypes.data),
                "events_cap": self._table.capacity,
                "vclock": int(self._clock.word.ctypes.data),
                "fake_state": int(self.state.ctypes.data),
                "fake_pend": int(self.pend.ctypes.data),
                "fake_script": int(self.script.ctypes.data),
                "fake_log": int(self._log_array.ctypes.data),
                "fake_fd_counts": int(self.fd_counts.ctypes.data)}

    def finish_submit(self, done: int, n: int) -> None:
        """The compiled loop's submission took ``done`` of ``n``: the script takes them all."""
        if done != n:
            raise IoEngineError(f"fake engine: a scripted submission took {done} of {n}")

    def close(self) -> None:
        self.state["pending"] = 0

    def offsets_log(self) -> npt.NDArray[np.int64]:
        """All logged submissions in order, a row each: its ``struct ivy_log`` as int64 words
        (offset, opcode, submit_ns, fd, sched_ns, nbytes: ``layout.LOG``'s columns)."""
        if self.script is not None:
            n = min(self.submitted, int(self.state["log_cap"]))
            log = self._log_array[:n]
        else:
            log = np.concatenate(self.log) if self.log else np.zeros(0, dtype=LOG_DTYPE)
        return log.view(np.int64).reshape(-1, len(LOG_DTYPE.names or ())).copy()
