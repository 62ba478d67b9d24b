"""The kernel's native AIO interface (linux/aio_abi.h) through ctypes, no Python object per I/O.

Owns the numpy layout of ``struct io_event`` (32 bytes; an iocb is a slot row's first 64
bytes: ``layout.ROW_DTYPE``), the raw ``io_setup`` / ``io_destroy`` / ``io_getevents`` /
``io_submit`` system calls (x86_64 numbers, called through libc's ``syscall``, which ``uring``
uses too), and ``AioContext``, which also
reaps completions from the AIO ring the kernel maps into our address space (as fio's
``userspace_reap``) so a busy-polling loop needs no system call per check. It must not decide
what to submit: callers fill the iocb array and hand slot numbers in.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError

IOCB_CMD_PREAD: Final = 0
IOCB_CMD_PWRITE: Final = 1

#: struct io_event; 32 bytes.
IO_EVENT_DTYPE: Final = np.dtype([("data", "<u8"), ("obj", "<u8"), ("res", "<i8"), ("res2", "<i8")])
assert IO_EVENT_DTYPE.itemsize == 32

_SYS_IO_SETUP: Final = 206
_SYS_IO_DESTROY: Final = 207
_SYS_IO_GETEVENTS: Final = 208
SYS_IO_SUBMIT: Final = 209
_AIO_RING_MAGIC: Final = 0xA10A10A1
_AIO_RING_HEADER_BYTES: Final = 32


def opcode_fd_word(opcode: int, fd: int) -> int:
    """The iocb's third 64-bit word for ``opcode`` on ``fd`` (reqprio 0)."""
    return opcode | (fd << 32)


def libc_syscall(*, release_gil: bool = True) -> Any:
    """libc's ``syscall``, its errno kept for ``ctypes.get_errno``. It has no argument types
    (they cost much of a call: docs/engine.md): an argument is a ctypes object (``c_ulong``,
    ``c_void_p``; ``None`` for NULL) or, among the first six (in registers, sign-extended), a
    Python int that fits a C ``int``. Calls that never block need not release the GIL
    (``PyDLL``), which saves a little per call."""
    libc = (ctypes.CDLL if release_gil else ctypes.PyDLL)(None, use_errno=True)
    fn = libc["syscall"]
    fn.restype = ctypes.c_long
    return fn


#: the kernel's system-wide AIO limit and use (events of all contexts, ``io_setup``'s count)
AIO_MAX_NR_PATH: Final = "/proc/sys/fs/aio-max-nr"
AIO_NR_PATH: Final = "/proc/sys/fs/aio-nr"
_EINTR, _EAGAIN = 4, 11


def read_proc_int(path: str) -> int | None:
    """The integer a /proc file holds; None where there is none (or no such file)."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def setup_failure(nr_events: int, err: int, *, max_nr_path: str = AIO_MAX_NR_PATH,
                  nr_path: str = AIO_NR_PATH) -> str:
    """Why ``io_setup(nr_events)`` failed with ``err``, and the fix: for EAGAIN (the system-wide
    limit ``fs.aio-max-nr`` reached) the limit, the events in use and the value needed."""
    text = f"io_setup({nr_events}) failed: {os.strerror(err)} (errno {err})"
    if err != _EAGAIN:
        return text
    limit, used = read_proc_int(max_nr_path), read_proc_int(nr_path)
    if limit is None or used is None:
        return f"{text}: the kernel's AIO limit fs.aio-max-nr is reached; raise it"
    need = used + nr_events
    suggest = max(need, 2 * limit)
    return (f"{text}: the kernel's AIO limit fs.aio-max-nr is {limit:,} events and "
            f"{used:,} are in use (fs.aio-nr), so this context of {nr_events:,} needs at "
            f"least {need:,}: raise it, e.g. sysctl -w fs.aio-max-nr={suggest}")


_AVAILABLE: list[bool] = []  # [True] once a context was set up in this process


def available() -> str | None:
    """``None`` when native AIO can be used here, else the reason it cannot.

    A test context is set up once per process; a failure (which may be passing, such as
    aio-max-nr reached) is asked again next time. The test's io_destroy waits for the kernel:
    asked for every workload, it made creating many workloads slow (docs/engine.md)."""
    if _AVAILABLE:
        return None
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"native AIO is wired for Linux x86_64 only, not {platform.platform()}"
    try:
        ctx = AioContext(1)
    except IoEngineError as exc:
        return str(exc)
    ctx.close()
    _AVAILABLE.append(True)
    return None


class AioContext:
    """One kernel AIO context and its completion-event buffer.

    ``submit(ptrs_addr, n)`` submits the first ``n`` iocb addresses of the uint64 array at
    ``ptrs_addr``; ``getevents(min_nr, timeout_ns)`` and ``poll_ring()`` put completions into
    ``events`` and return how many there are. The engine calls ``syscall_held`` (io_submit:
    it does not wait, so keeps the GIL) itself with ``c_ctx``: no frame in between.
    """

    def __init__(self, nr_events: int) -> None:
        self._syscall = libc_syscall()
        self.syscall_held = libc_syscall(release_gil=False)
        ctx = ctypes.c_ulong(0)
        if self._syscall(_SYS_IO_SETUP, nr_events, ctypes.byref(ctx)) < 0:
            raise IoEngineError(setup_failure(nr_events, ctypes.get_errno()))
        self.ctx_id = int(ctx.value)
        self.c_ctx = ctx
        self.nr_events = nr_events
        self.events = np.zeros(nr_events, dtype=IO_EVENT_DTYPE)
        #: the events as int64 words, 4 per event (data, obj, res, res2), for ``poll_ring``
        self.events_mv = self.events.view(np.int64).data.cast("B").cast("q")
        self._c_events = ctypes.c_void_p(self.events.ctypes.data)
        self._ts = np.zeros(2, dtype=np.int64)  # struct timespec
        self._ts_mv = self._ts.data.cast("B").cast("q")
        self._c_ts = ctypes.c_void_p(self._ts.ctypes.data)
        self._ring_hdr: memoryview | None = None  # uint32 words: id, nr, head, tail, ...
        self._ring_words: memoryview | None = None  # the ring's events as int64 words
        self._ring_nr = 0
        self._map_ring()

    def _map_ring(self) -> None:
        hdr = memoryview((ctypes.c_char * 32).from_address(self.ctx_id)).cast("B").cast("I")
        # id, nr, head, tail, magic, compat_features, incompat_features, header_length
        magic, incompat, header = hdr[4], hdr[6], hdr[7]
        if magic != _AIO_RING_MAGIC or incompat != 0 or header != _AIO_RING_HEADER_BYTES:
            return  # unknown ring layout: fall back to io_getevents for polling
        nr = hdr[1]
        raw = (ctypes.c_char * (nr * IO_EVENT_DTYPE.itemsize)).from_address(
            self.ctx_id + _AIO_RING_HEADER_BYTES
        )
        self._ring_hdr = hdr
        self._ring_words = memoryview(raw).cast("B").cast("q")
        self._ring_nr = nr

    def ring_arrays(self) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]] | None:
        """The mapped ring as numpy arrays over the kernel's memory: its header words (id, nr,
        head, tail, ...) and its events as int64 words (4 per event), for compiled code that
        polls it (``slave.engine.paced_kernel``); None when the ring cannot be read."""
        if self._ring_hdr is None or self._ring_words is None:
            return None
        return (np.frombuffer(self._ring_hdr, dtype=np.uint32),
                np.frombuffer(self._ring_words, dtype=np.int64))

    def submit(self, ptrs_addr: int, n: int) -> int:
        """Submit ``n`` iocbs whose addresses are the uint64s at ``ptrs_addr``; returns how
        many the kernel took (it may take fewer; none for EAGAIN and EINTR)."""
        rc: int = self.syscall_held(SYS_IO_SUBMIT, self.c_ctx, n, ctypes.c_void_p(ptrs_addr))
        if rc >= 0:
            return rc
        err = ctypes.get_errno()
        if err in (_EAGAIN, _EINTR):  # nothing taken, caller retries
            return 0
        raise IoEngineError(f"io_submit of {n} iocbs failed: {os.strerror(err)} (errno {err})")

    def getevents(self, min_nr: int, timeout_ns: int) -> int:
        """Reap at least ``min_nr`` completions (or fewer at the timeout) into ``events``."""
        self._ts_mv[0], self._ts_mv[1] = divmod(timeout_ns, 1_000_000_000)
        rc: int = self._syscall(_SYS_IO_GETEVENTS, self.c_ctx, min_nr, self.nr_events,
                                self._c_events, self._c_ts)
        if rc >= 0:
            return rc
        err = ctypes.get_errno()
        if err == _EINTR:
            return 0
        raise IoEngineError(f"io_getevents failed: {os.strerror(err)} (errno {err})")

    def poll_ring(self) -> int:
        """Reap whatever completions are in the ring without a system call."""
        hdr = self._ring_hdr
        if hdr is None:
            return self.getevents(0, 0)
        head = hdr[2]
        tail = hdr[3]
        if head == tail:
            return 0
        ring = self._ring_words
        assert ring is not None
        ev = self.events_mv
        cap = self.nr_events
        nr = self._ring_nr
        if tail > head:
            n = min(tail - head, cap)
            ev[: 4 * n] = ring[4 * head : 4 * (head + n)]
        else:
            first = min(nr - head, cap)
            ev[: 4 * first] = ring[4 * head : 4 * (head + first)]
            n = first + min(tail, cap - first)
            ev[4 * first : 4 * n] = ring[: 4 * (n - first)]
        hdr[2] = (head + n) % nr
        return n

    def close(self) -> None:
        if self.ctx_id:
            self._syscall(_SYS_IO_DESTROY, self.c_ctx)
            self.ctx_id = 0
            self._ring_hdr = None
            self._ring_words = None
