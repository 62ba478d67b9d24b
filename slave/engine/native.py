"""The native engines, O_DIRECT I/O through libaio (``LibaioEngine``) or io_uring
(``UringEngine``), driven through the compiled object's calls (``ivy_loop.c``'s ``ivy_*``)
on a ``struct ivy_loop`` that holds only the engine's fields: the compiled loop's set copies
them (``loop_words``), the general loop submits and reaps through the same calls. Completions
come back as libaio's events (slot, 0, result, 0) whichever the backend. ``aio_available`` and
``uring_available`` say whether each can be had here, or why not. It must not decide what to
submit: the loop fills the rows.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
from collections.abc import Callable
from typing import Final, NoReturn

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine import compiled_loop as pk
from slave.engine.base import (
    AlignedBuffers,
    EngineCaps,
    SlotTable,
    SubmitError,
    submit_backoff,
)
from slave.engine.layout import LoopArgs

#: the fields of ``struct ivy_loop`` that are the engine's (the compiled set copies them)
ENGINE_FIELDS: Final = ("ring_header", "ring_events", "events", "events_cap", "ctx", "backend",
                        "uring_fd", "sq_tail", "sq_head", "sq_flags", "sq_mask", "sqes",
                        "cq_head", "cq_tail", "cq_mask", "cqes", "ptrs")
#: the smallest AIO context an engine sets up (events); the loop grows it (docs/engine.md)
MIN_AIO_EVENTS: Final = 64
#: the kernel's system-wide AIO limit and use (events of all contexts)
AIO_MAX_NR_PATH: Final = "/proc/sys/fs/aio-max-nr"
AIO_NR_PATH: Final = "/proc/sys/fs/aio-nr"
#: who may set up an io_uring (``kernel.io_uring_disabled``: 0 all, 1 CAP_SYS_ADMIN or the
#: ``io_uring_group``, 2 none)
IO_URING_DISABLED_PATH: Final = "/proc/sys/kernel/io_uring_disabled"
MAX_FIXED_FILES: Final = 1 << 15  # the oldest kernels' limit of registered files
MAX_REG_BUFFERS: Final = 1 << 14  # the kernel's limit of registered buffers
_EINTR, _EAGAIN, _EBUSY, _EPROTO = 4, 11, 16, 71
_URING_FEATURES: Final = ("io_uring lacks the single mapping, no-drop completions or the timed "
                          "wait (IORING_FEAT_EXT_ARG, Linux 5.11)")


def read_proc_int(path: str) -> int | None:
    """The integer a /proc file holds; None where there is none (or no such file)."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def aio_events_for(slots_in_use: int, capacity: int) -> int:
    """The size of context that ``slots_in_use`` I/O slots need: twice as many (an edit
    retires a workload's slots with their I/Os in flight and takes as many anew before they
    complete), as a power of two, at least ``MIN_AIO_EVENTS`` and at most ``capacity``."""
    want = max(MIN_AIO_EVENTS, 2 * slots_in_use)
    return min(capacity, 1 << (want - 1).bit_length())


def setup_failure(nr_events: int, err: int, *, max_nr_path: str = AIO_MAX_NR_PATH,
                  nr_path: str = AIO_NR_PATH) -> str:
    """Why ``io_setup(nr_events)`` failed with ``err``, and the fix: for EAGAIN (the system-wide
    limit ``fs.aio-max-nr`` reached) the limit, the events in use and the value needed."""
    if err == _EPROTO:
        return "the kernel's AIO completion ring has a layout this engine does not read"
    text = f"io_setup({nr_events}) failed: {os.strerror(err)} (errno {err})"
    if err != _EAGAIN:
        return text
    limit, used = read_proc_int(max_nr_path), read_proc_int(nr_path)
    if limit is None or used is None:
        return f"{text}: the kernel's AIO limit fs.aio-max-nr is reached; raise it"
    need = used + nr_events
    return (f"{text}: the kernel's AIO limit fs.aio-max-nr is {limit:,} events and "
            f"{used:,} are in use (fs.aio-nr), so this context of {nr_events:,} needs at "
            f"least {need:,}: raise it, e.g. sysctl -w fs.aio-max-nr={max(need, 2 * limit)}")


def _library() -> ctypes.CDLL:
    lib = pk.library()
    if lib is None:
        raise IoEngineError("libaio and io_uring run through the compiled loop, which this "
                            f"host does not have: {pk.why_not()}")
    return lib


_AVAILABLE: set[str] = set()  # the engines set up once in this process


def _probe(kind: str, make: Callable[[], LibaioEngine | UringEngine]) -> str | None:
    """``None`` when an engine of ``kind`` (``make``) could be set up in this process, once
    (a success is kept: a test context's io_destroy waits for the kernel), else why not (a
    failure, which may pass, such as aio-max-nr reached, is asked again next time)."""
    if kind not in _AVAILABLE:
        try:
            make().close()
        except IoEngineError as exc:
            return str(exc)
        _AVAILABLE.add(kind)
    return None


def aio_available() -> str | None:
    """``None`` when libaio can be used here, else the reason it cannot."""
    return _probe("libaio", lambda: LibaioEngine(SlotTable(1)))


def uring_available(disabled_path: str = IO_URING_DISABLED_PATH) -> str | None:
    """``None`` when io_uring, as this engine uses it, can be had here, else the reason (a
    kernel before 5.19 or without ``EXT_ARG``, ``kernel.io_uring_disabled``, a seccomp
    filter). The switch is read every time."""
    mode = read_proc_int(disabled_path) or 0  # 0 too where the kernel has no such switch
    if mode == 2:
        return "io_uring is disabled on this host (kernel.io_uring_disabled = 2)"
    why = _probe("io_uring", lambda: UringEngine(SlotTable(8)))
    if why is not None and mode == 1:
        return (f"{why}; kernel.io_uring_disabled = 1 on this host limits io_uring to "
                "CAP_SYS_ADMIN and the io_uring_group")
    return why


class NativeEngine:
    """The engine interface (``slave.engine.base.IoEngine``) on the compiled calls; a
    subclass sets its backend up (``backend``: 0 libaio, 1 io_uring)."""

    caps = EngineCaps.COMPILED
    open_flags = os.O_DIRECT
    backend = 0

    def __init__(self, table: SlotTable) -> None:
        self._lib = lib = _library()
        self._table = table
        a = self.args = LoopArgs()
        a.backend = self.backend
        a.array("rows", table.rows)
        a.array("iocb_addr", table.addr)
        a.array("ptrs", np.zeros(table.capacity, dtype=np.int64))
        self._addr = a.address
        self._submit, self._reap = lib.ivy_submit, lib.ivy_reap
        #: the completions there now, without a system call (io_uring: but where some wait
        #: for this task to post them): the compiled call itself, no frame of ours between
        self.poll: Callable[[], int] = functools.partial(lib.ivy_reap, self._addr, 0)

    def _events(self, cap: int) -> None:
        """The events a reap fills: ``cap`` of them (the subclass sizes them)."""
        ev = self.args.array("events", np.zeros((cap, 4), dtype=np.int64))
        self.args.events_cap = cap
        self.done_slot = ev[:, 0]
        self.done_res = ev[:, 2]

    def loop_words(self) -> dict[str, int]:
        """The engine's fields of ``struct ivy_loop``, for the compiled set's copy."""
        return {name: int(getattr(self.args, name) or 0) for name in ENGINE_FIELDS}

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        n = int(slots.size)
        if n:
            s = np.ascontiguousarray(slots, dtype=np.int64)
            done = self._submit(self._addr, s.ctypes.data, n)
            if done < n:
                self.finish_submit(done, n)

    def finish_submit(self, done: int, n: int) -> None:
        """A submission of ``n`` (either loop's) that the kernel took ``done`` of (negative: a
        refusal): the rest offered again (``submit_backoff``) while the kernel takes none; a
        refusal raises ``SubmitError`` with its errno and how many went out (io_uring's
        entries not taken are dropped from its ring then: none goes out later)."""
        done = max(done, 0)
        tries = 0
        while done < n:
            if not submit_backoff(tries):
                self._give_up(f"the kernel took {done} of {n} I/Os and then no more", done)
            tries += 1
            rc = int(self._lib.ivy_submit_rest(self._addr, done, n))
            if rc < 0 and -rc not in (_EAGAIN, _EBUSY, _EINTR):
                self._give_up(f"{'io_uring_enter' if self.backend else 'io_submit'} of "
                              f"{n - done} I/Os failed: {os.strerror(-rc)} (errno {-rc})", done)
            done += max(rc, 0)

    def _give_up(self, message: str, done: int) -> NoReturn:
        if self.backend == 1:  # io_uring: the rest are still in its submission ring
            self._lib.ivy_uring_unqueue(self._addr)
        raise SubmitError(message, done)

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        """What is there now, else a wait of ``timeout_ns`` at most for one."""
        n = int(self._reap(self._addr, timeout_ns))
        if n < 0:
            raise IoEngineError(f"the wait for completions failed: {os.strerror(-n)} "
                                f"(errno {-n})")
        return n


class LibaioEngine(NativeEngine):
    """libaio: one AIO context, as large as the slots in use need (``grow``: the kernel counts
    every context's events against ``fs.aio-max-nr``), its completion ring read where the
    kernel maps it."""

    backend = 0

    caps = EngineCaps.COMPILED | EngineCaps.SIZED

    def __init__(self, table: SlotTable) -> None:
        super().__init__(table)
        self.room = 0  # I/Os the context can hold in flight
        self._old: list[int] = []  # contexts ``grow`` replaced, closed by ``release_old``
        self._setup(aio_events_for(0, table.capacity))

    def _setup(self, nr: int) -> None:
        rc = int(self._lib.ivy_aio_setup(self._addr, nr))
        if rc < 0:
            raise IoEngineError(setup_failure(nr, -rc))
        self.room = nr
        self._events(nr)

    def grow(self, slots_in_use: int, *, keep_old: bool = False) -> None:
        """A context for ``slots_in_use`` slots in place of the present one, which must have
        nothing in flight; with ``keep_old`` the present one is closed by ``release_old``
        (io_destroy waits for the kernel: tens of ms). Raises ``IoEngineError`` with the
        kernel's reason and the fix, keeping the present context, when it cannot be had."""
        size = aio_events_for(slots_in_use, self._table.capacity)
        if size <= self.room:
            return
        old = int(self.args.ctx)
        self._setup(size)
        self._old.append(old)
        if not keep_old:
            self.release_old()

    def release_old(self) -> None:
        """Close the contexts ``grow`` replaced (each with nothing in flight)."""
        old, self._old = self._old, []
        for ctx in old:
            self._lib.ivy_aio_destroy(ctx)

    def close(self) -> None:
        self.release_old()
        if self.args.ctx:
            self._lib.ivy_aio_destroy(self.args.ctx)
            self.args.ctx = 0


class UringEngine(NativeEngine):
    """io_uring: one ring of as many entries as the table has slots (a submission never finds
    it full), with sparse registered files and buffers (``prepare_slots``)."""

    backend = 1

    caps = EngineCaps.COMPILED | EngineCaps.REGISTERS

    def __init__(self, table: SlotTable) -> None:
        if table.capacity > MAX_REG_BUFFERS:
            raise IoEngineError(f"io_uring registers at most {MAX_REG_BUFFERS} buffers, one a "
                                f"slot; this loop has {table.capacity} slots")
        super().__init__(table)
        self._events(table.capacity)
        self.n_files = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], MAX_FIXED_FILES)
        self._maps = np.zeros(4, dtype=np.int64)
        stage = ctypes.c_int64(0)
        entries = 1 << (table.capacity - 1).bit_length()
        rc = int(self._lib.ivy_uring_setup(self._addr, entries, self.n_files, table.capacity,
                                           self._maps.ctypes.data, ctypes.byref(stage)))
        if rc < 0:
            if stage.value == 2:
                raise IoEngineError(_URING_FEATURES)
            what = {1: f"io_uring_setup({entries})",
                    3: f"the mapping of io_uring's rings ({entries} entries)",
                    4: f"io_uring's registration of {self.n_files:,} sparse files",
                    5: f"io_uring's registration of {table.capacity:,} sparse buffers",
                    }[stage.value]
            raise IoEngineError(f"{what} failed: {os.strerror(-rc)} (errno {-rc})")

    def _register(self, files: bool, offset: int, data: npt.NDArray[np.generic], n: int
                  ) -> None:
        rc = int(self._lib.ivy_uring_register(self._addr, int(files), offset, data.ctypes.data,
                                              n))
        if rc < 0:
            raise IoEngineError(f"io_uring registration of {'file' if files else 'buffer'} "
                                f"{offset} failed: {os.strerror(-rc)} (errno {-rc})")

    def prepare_slots(self, slots: npt.NDArray[np.intp], fd: int,
                      buffers: AlignedBuffers) -> None:
        """Register ``fd`` (at its number's index) and each slot's buffer of ``buffers`` (at
        its slot's index), before the slots' first I/O. The file is registered anew each
        time: a descriptor's number, closed, may come back for another LUN."""
        if fd >= self.n_files:
            raise IoEngineError(f"io_uring: descriptor {fd} is past the {self.n_files} files "
                                "registered (RLIMIT_NOFILE)")
        self._register(True, fd, np.array([fd], dtype=np.int32), 1)
        iov = np.zeros((slots.size, 2), dtype=np.uint64)
        iov[:, 0] = buffers.addr[: slots.size]
        iov[:, 1] = buffers.slot_bytes
        order = np.argsort(slots)
        s, iov = slots[order], iov[order]
        cuts = np.flatnonzero(np.diff(s) != 1) + 1  # runs of consecutive slots: one call each
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), s.size], strict=True):
            self._register(False, int(s[a]), np.ascontiguousarray(iov[a:b]), b - a)

    def forget_file(self, fd: int) -> None:
        """Unregister ``fd``, which its last workload let go of: the ring holds the file open
        until then (nothing of it is in flight: the loop releases a LUN after its last I/O)."""
        if 0 <= fd < self.n_files:
            self._register(True, fd, np.array([-1], dtype=np.int32), 1)

    def close(self) -> None:
        """Close the ring (which drops its registrations) and its mappings."""
        if self.args.uring_fd >= 0 and self.args.sqes:
            self._lib.ivy_uring_close(self._addr, self._maps.ctypes.data)
