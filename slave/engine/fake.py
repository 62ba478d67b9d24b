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

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.base import SlotTable
from slave.engine.clock import REAL_CLOCK, Clock, VirtualClock
from slave.engine.layout import BACKEND_SCRIPTED, LOG_DTYPE, PEND_DTYPE, ROW, SCRIPT_DTYPE

LatencyFn = Callable[[np.random.Generator, int], npt.NDArray[np.int64]]

#: descriptors with a count of their own (others share them, modulo)
FDS = 1024


def exponential_ns(mean_ns: float) -> LatencyFn:
    return lambda rng, n: rng.exponential(mean_ns, n).astype(np.int64)


def constant_ns(value_ns: int) -> LatencyFn:
    return lambda rng, n: np.full(n, value_ns, dtype=np.int64)


def script_ns(latency: LatencyFn, n: int, seed: int) -> npt.NDArray[np.int64]:
    """A script of ``n`` latencies drawn once from ``latency`` (each at least 1 ns)."""
    return np.maximum(latency(np.random.default_rng(seed), n), 1).astype(np.int64)


class FakeEngine:
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

    @property
    def submitted(self) -> int:
        return int(self.state["count"])

    @property
    def submit_calls(self) -> tuple[int, int]:
        """How many submit calls came (the compiled loop's too), and the most I/Os one carried."""
        return int(self.state["calls"]), int(self.state["call_max"])

    def _next_due(self) -> int | None:
        return int(self.pend[0]["due_ns"]) if self.state["pending"] else None

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        n = int(slots.size)
        st = self.state
        p = int(st["pending"])
        if p + n > self.pend.shape[0]:
            raise IoEngineError(f"fake engine: {p + n} I/Os in flight, over its "
                                f"{self.pend.shape[0]} slots")
        now = self._clock.now_ns()
        # unscripted, the call's latencies drawn at once (a latency may depend on the moment)
        drawn = [0] * n if self.script is not None else self._latency(self._rng, n).tolist()
        for slot, lat in zip(slots.tolist(), drawn, strict=True):  # plain ints: several times
            self._submit_one(slot, now, lat)  # faster than arrays for the usual one slot
        st["calls"] += 1
        st["call_max"] = max(int(st["call_max"]), n)
        self.max_in_flight = max(self.max_in_flight, p + n)

    def _submit_one(self, slot: int, now: int, drawn: int) -> None:
        """Slot ``slot`` submitted at ``now``: its number among its descriptor's submissions
        (from 1) picks its error, short transfer and, scripted, its latency (else ``drawn``);
        it is pending after every I/O due no later (ties keep submission order, as the
        compiled loop's insertion does)."""
        row = self._table.rows[slot]
        word = int(row[ROW["opcode_fd"]])
        opcode, fd = word & 0xFFFF, word >> 32
        nbytes, offset, sched = (int(row[ROW["nbytes"]]), int(row[ROW["offset"]]),
                                 int(row[ROW["sched_ns"]]))
        st = self.state
        first = int(st["count"])
        k = fd % FDS
        self.fd_counts[k] += 1
        serial = int(self.fd_counts[k])
        res = nbytes
        short_every, error_every = int(st["short_every"]), int(st["error_every"])
        if short_every and serial % short_every == 0:
            res //= 2
        if error_every and serial % error_every == 0:
            res = -int(st["error_errno"])
        lat = drawn if self.script is None else int(self.script[(serial - 1) % self.script.size])
        p = int(st["pending"])
        due = now + lat
        at = int(np.searchsorted(self.pend["due_ns"][:p], due, "right"))
        self.pend[at + 1 : p + 1] = self.pend[at:p].copy()
        self.pend[at] = (due, slot, res)
        st["pending"] = p + 1
        st["count"] = first + 1
        log = (offset, opcode, now, fd, sched if sched != 0 else now, nbytes)
        if self.script is not None:
            if first < int(st["log_cap"]):
                self._log_array[first] = log
        elif self.keep_log:
            self.log.append(np.array([log], dtype=LOG_DTYPE))

    def _take(self) -> int:
        """The completions due now into ``done_slot`` / ``done_res``, in due order."""
        now = self._clock.now_ns()
        p = int(self.state["pending"])
        n = int(np.searchsorted(self.pend["due_ns"][:p], now, "right"))
        n = min(n, self.events.shape[0])
        if n == 0:
            return 0
        self.events[:n, 0] = self.pend["slot"][:n]
        self.events[:n, 2] = self.pend["res"][:n]
        self.pend[: p - n] = self.pend[n:p].copy()
        self.state["pending"] = p - n
        return n

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        n = self._take()
        if n > 0 or timeout_ns == 0:  # never lose reaped slots by taking twice
            return n
        until = self._clock.now_ns() + timeout_ns
        p = int(self.state["pending"])
        if p:
            until = min(until, int(self.pend[min(min_nr, p) - 1]["due_ns"]))
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
