"""The I/O engine interface and the slot table that engines and the engine loop share.

Owns ``SlotTable`` (libaio submits its rows as they are, the other engines read their words)
and the ``IoEngine`` protocol, with what an engine can do beyond it declared as data
(``EngineCaps``, as fio's ``ioengine_ops`` flags) and checked once, when a loop takes the
engine (``check_caps``). It must not decide offsets, pacing or statistics: that is the
engine loop's. An engine takes batches of slot numbers (``submit``) and hands back completed
slots with their results (``reap`` / ``poll`` fill ``done_slot[:n]`` and ``done_res[:n]``; a
result is the byte count transferred or ``-errno``). Engines never allocate a Python object
per I/O on the hot path (the thread-pool fallback, which must, is the documented exception).
"""

from __future__ import annotations

import enum
import mmap
import time
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.layout import ROW, ROW_WORDS

PAGE_BYTES = mmap.PAGESIZE
#: how many times an engine offers the kernel the rest of a batch it took only part of (EAGAIN,
#: as under memory pressure) before it calls that a refusal: about 1 s with ``submit_backoff``
SUBMIT_TRIES = 1000


def submit_backoff(tries: int) -> bool:
    """Before try ``tries`` (from 0) of the rest of a batch: sleep a little (none before the
    first; 0.1 ms more each time, up to 1 ms), so that the kernel can free what it lacked;
    False when the ``SUBMIT_TRIES`` are used up."""
    if tries >= SUBMIT_TRIES:
        return False
    if tries:
        time.sleep(0.0001 * min(tries, 10))
    return True


class SubmitError(IoEngineError):
    """A submission the kernel refused after it took ``submitted`` of the batch: those are in
    flight, and the engine loop's stop waits for them alone."""

    def __init__(self, message: str, submitted: int) -> None:
        super().__init__(message)
        self.submitted = submitted


class SlotTable:
    """``capacity`` I/O slots, one row each (``layout.ROW_DTYPE``: 16 int64 words, the slot's
    ``struct iocb`` first, whose ``aio_data`` is the slot number, which its completion brings
    back), page aligned, held as an int64 view with ``layout.ROW``'s columns."""

    ROW_WORDS = ROW_WORDS

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        row_bytes = self.ROW_WORDS * 8
        self._mem = mmap.mmap(-1, max(capacity * row_bytes, PAGE_BYTES))
        self.rows: npt.NDArray[np.int64] = np.frombuffer(
            self._mem, dtype=np.int64, count=capacity * self.ROW_WORDS
        ).reshape(capacity, self.ROW_WORDS)
        base = self.rows.ctypes.data
        self.addr = base + np.arange(capacity, dtype=np.uint64) * np.uint64(row_bytes)
        self.rows[:, ROW["data"]] = np.arange(capacity)


class AlignedBuffers:
    """``n`` page-aligned buffers of ``slot_bytes`` each (anonymous mmap), as a uint8 matrix."""

    def __init__(self, n: int, slot_bytes: int) -> None:
        slot_bytes = -(-slot_bytes // PAGE_BYTES) * PAGE_BYTES
        self._mem = mmap.mmap(-1, max(n * slot_bytes, PAGE_BYTES))
        self.array: npt.NDArray[np.uint8] = np.frombuffer(
            self._mem, dtype=np.uint8, count=n * slot_bytes
        ).reshape(n, slot_bytes)
        self.slot_bytes = slot_bytes
        self.addr = self.array.ctypes.data + np.arange(n, dtype=np.uint64) * np.uint64(slot_bytes)


class EngineCaps(enum.Flag):
    """What an engine can do beyond ``IoEngine``'s calls, each with the calls it brings."""

    NONE = 0
    #: a context sized to the I/Os in flight, grown within a run: ``room``, ``grow``,
    #: ``release_old`` (libaio)
    SIZED = enum.auto()
    #: files and buffers registered before their first I/O: ``prepare_slots``,
    #: ``forget_file`` (io_uring)
    REGISTERS = enum.auto()
    #: completions the compiled loop reads itself: ``loop_words``, ``finish_submit`` (the
    #: native engines; the fake one when scripted)
    COMPILED = enum.auto()


class IoEngine(Protocol):
    """What the engine loop needs from an engine."""

    #: what it can do beyond these calls (``EngineCaps``)
    caps: EngineCaps
    #: extra ``os.open`` flags for LUNs served by this engine (``O_DIRECT`` for libaio)
    open_flags: int
    #: the slot of each completion, as signed words (the loop indexes with them directly)
    done_slot: npt.NDArray[np.int64]
    done_res: npt.NDArray[np.int64]

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        """Start the I/Os described by ``table.rows[slots]``; all of them, or raise."""

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        """Wait up to ``timeout_ns`` for ``min_nr`` completions; returns how many are in
        ``done_slot`` / ``done_res`` (at most ``capacity``). ``timeout_ns`` 0 does not wait."""

    def poll(self) -> int:
        """Completions available now, without waiting (and, for libaio, without a syscall)."""

    def close(self) -> None:
        """Cancel or finish in-flight I/O and release kernel resources."""


@runtime_checkable
class SizedEngine(Protocol):
    """``EngineCaps.SIZED``: the I/Os its context holds in flight, and its growth."""

    room: int

    def grow(self, slots_in_use: int, *, keep_old: bool = False) -> None:
        """A context for ``slots_in_use`` in flight; ``keep_old``: the one replaced stays open
        (I/Os of a run may still complete on it) until ``release_old``."""

    def release_old(self) -> None:
        """Close the contexts a run's growth replaced (nothing is in flight on them)."""


@runtime_checkable
class RegisteringEngine(Protocol):
    """``EngineCaps.REGISTERS``: files and buffers registered with the kernel."""

    def prepare_slots(self, slots: npt.NDArray[np.intp], fd: int,
                      buffers: AlignedBuffers) -> None:
        """Register ``fd`` and each slot's buffer before the slots' first I/O."""

    def forget_file(self, fd: int) -> None:
        """Unregister ``fd``, which its last workload let go of."""


@runtime_checkable
class CompiledEngine(Protocol):
    """``EngineCaps.COMPILED``: the compiled loop's words for it, and its submission's end."""

    def loop_words(self) -> dict[str, int] | None:
        """The engine's fields of ``struct ivy_loop`` (None: not this time)."""

    def finish_submit(self, done: int, n: int) -> None:
        """The compiled loop's submission took ``done`` of ``n``."""


_CAP_PROTOCOLS: dict[EngineCaps, type] = {EngineCaps.SIZED: SizedEngine,
                                          EngineCaps.REGISTERS: RegisteringEngine,
                                          EngineCaps.COMPILED: CompiledEngine}


def check_caps(engine: IoEngine) -> None:
    """Refuse an engine that declares a capability without its calls (a bug: ``TypeError``)."""
    for cap, proto in _CAP_PROTOCOLS.items():
        if engine.caps & cap and not isinstance(engine, proto):
            raise TypeError(f"{type(engine).__name__} declares {cap.name} without its calls")


def sized(engine: IoEngine) -> SizedEngine | None:
    """``engine`` as a sized engine, or None where it is not one."""
    return cast(SizedEngine, engine) if engine.caps & EngineCaps.SIZED else None


def registering(engine: IoEngine) -> RegisteringEngine | None:
    """``engine`` as one that registers files and buffers, or None."""
    return cast(RegisteringEngine, engine) if engine.caps & EngineCaps.REGISTERS else None


def compiled(engine: IoEngine) -> CompiledEngine | None:
    """``engine`` as one the compiled loop reads, or None."""
    return cast(CompiledEngine, engine) if engine.caps & EngineCaps.COMPILED else None
