"""The kernel's native AIO interface (linux/aio_abi.h) through ctypes, no Python object per I/O.

Owns the numpy layouts of ``struct iocb`` (64 bytes) and ``struct io_event`` (32 bytes), the raw
``io_setup`` / ``io_destroy`` / ``io_getevents`` / ``io_submit`` system calls (x86_64 numbers,
called through libc's ``syscall``), and ``AioContext``, which also reaps completions from the
AIO ring the kernel maps into our address space (as fio's ``userspace_reap``) so a busy-polling
loop needs no system call per check. It must not decide what to submit: callers fill the iocb
array and hand slot numbers in.
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

#: struct iocb, little-endian x86_64 layout; 64 bytes.
IOCB_DTYPE: Final = np.dtype(
    [
        ("aio_data", "<u8"),
        ("aio_key", "<u4"),
        ("aio_rw_flags", "<i4"),
        ("aio_lio_opcode", "<u2"),
        ("aio_reqprio", "<i2"),
        ("aio_fildes", "<u4"),
        ("aio_buf", "<u8"),
        ("aio_nbytes", "<u8"),
        ("aio_offset", "<i8"),
        ("aio_reserved2", "<u8"),
        ("aio_flags", "<u4"),
        ("aio_resfd", "<u4"),
    ]
)
#: struct io_event; 32 bytes.
IO_EVENT_DTYPE: Final = np.dtype([("data", "<u8"), ("obj", "<u8"), ("res", "<i8"), ("res2", "<i8")])
assert IOCB_DTYPE.itemsize == 64 and IO_EVENT_DTYPE.itemsize == 32

# iocb as 8 uint64 words per slot: word 2 packs opcode (16 bits), reqprio (16), fildes (32)
W_DATA, W_OPCODE_FD, W_BUF, W_NBYTES, W_OFFSET = 0, 2, 3, 4, 5

_SYS_IO_SETUP: Final = 206
_SYS_IO_DESTROY: Final = 207
_SYS_IO_GETEVENTS: Final = 208
_SYS_IO_SUBMIT: Final = 209
_AIO_RING_MAGIC: Final = 0xA10A10A1
_AIO_RING_HEADER_BYTES: Final = 32


def opcode_fd_word(opcode: int, fd: int) -> int:
    """The iocb's third 64-bit word for ``opcode`` on ``fd`` (reqprio 0)."""
    return opcode | (fd << 32)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc_syscall(nargs: int, *, release_gil: bool = True) -> Any:
    """libc's ``syscall`` with ``nargs`` long arguments. Calls that never block need not
    release the GIL (``PyDLL``), which saves a little per call."""
    libc = (ctypes.CDLL if release_gil else ctypes.PyDLL)(None, use_errno=True)
    fn = libc["syscall"]
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long] * (nargs + 1)
    return fn


def available() -> str | None:
    """``None`` when native AIO can be used here, else the reason it cannot."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"native AIO is wired for Linux x86_64 only, not {platform.platform()}"
    try:
        ctx = AioContext(1)
    except IoEngineError as exc:
        return str(exc)
    ctx.close()
    return None


class AioContext:
    """One kernel AIO context and its completion-event buffer.

    ``submit(ptrs, n)`` submits the first ``n`` iocb addresses of the uint64 array ``ptrs``;
    ``getevents(min_nr, timeout_ns)`` and ``poll_ring()`` put completions into ``events`` and
    return how many there are. ``timeout_ns`` < 0 waits without limit.
    """

    def __init__(self, nr_events: int) -> None:
        self._setup = _libc_syscall(2)
        self._destroy = _libc_syscall(1)
        self._getevents = _libc_syscall(5)
        self._submit = _libc_syscall(3, release_gil=False)  # io_submit does not wait
        ctx = ctypes.c_ulong(0)
        rc = self._setup(_SYS_IO_SETUP, nr_events, ctypes.addressof(ctx))
        if rc < 0:
            err = ctypes.get_errno()
            raise IoEngineError(
                f"io_setup({nr_events}) failed: {os.strerror(err)} (errno {err}); "
                "check /proc/sys/fs/aio-max-nr"
            )
        self.ctx_id = int(ctx.value)
        self.nr_events = nr_events
        self.events = np.zeros(nr_events, dtype=IO_EVENT_DTYPE)
        self.ev_data = self.events["data"]
        self.ev_res = self.events["res"]
        self._events_addr = self.events.ctypes.data
        self._ts = _Timespec(0, 0)
        self._ts_addr = ctypes.addressof(self._ts)
        self._ring_hdr: npt.NDArray[np.uint32] | None = None
        self._ring_events: npt.NDArray[np.void] | None = None
        self._map_ring()

    def _map_ring(self) -> None:
        hdr: npt.NDArray[np.uint32] = np.frombuffer(
            (ctypes.c_uint32 * 8).from_address(self.ctx_id),  # type: ignore[call-overload]
            dtype=np.uint32,
        )
        # id, nr, head, tail, magic, compat_features, incompat_features, header_length
        magic, incompat, header = int(hdr[4]), int(hdr[6]), int(hdr[7])
        if magic != _AIO_RING_MAGIC or incompat != 0 or header != _AIO_RING_HEADER_BYTES:
            return  # unknown ring layout: fall back to io_getevents for polling
        nr = int(hdr[1])
        raw = (ctypes.c_char * (nr * IO_EVENT_DTYPE.itemsize)).from_address(
            self.ctx_id + _AIO_RING_HEADER_BYTES
        )
        self._ring_hdr = hdr
        self._ring_events = np.frombuffer(raw, dtype=IO_EVENT_DTYPE)  # type: ignore[call-overload]

    @property
    def userspace_reap(self) -> bool:
        return self._ring_hdr is not None

    def submit(self, ptrs_addr: int, n: int) -> int:
        """Submit ``n`` iocbs whose addresses are the uint64s at ``ptrs_addr``; returns how
        many the kernel took (it may take fewer)."""
        rc: int = self._submit(_SYS_IO_SUBMIT, self.ctx_id, n, ptrs_addr)
        if rc < 0:
            err = ctypes.get_errno()
            if err in (11, 4):  # EAGAIN, EINTR: nothing taken, caller retries
                return 0
            raise IoEngineError(f"io_submit of {n} iocbs failed: {os.strerror(err)} (errno {err})")
        return rc

    def getevents(self, min_nr: int, timeout_ns: int) -> int:
        """Reap at least ``min_nr`` completions (or fewer at the timeout) into ``events``."""
        if timeout_ns < 0:
            ts = 0
        else:
            self._ts.tv_sec, self._ts.tv_nsec = divmod(timeout_ns, 1_000_000_000)
            ts = self._ts_addr
        rc = int(
            self._getevents(
                _SYS_IO_GETEVENTS, self.ctx_id, min_nr, self.nr_events, self._events_addr, ts
            )
        )
        if rc < 0:
            err = ctypes.get_errno()
            if err == 4:  # EINTR
                return 0
            raise IoEngineError(f"io_getevents failed: {os.strerror(err)} (errno {err})")
        return rc

    def poll_ring(self) -> int:
        """Reap whatever completions are in the ring without a system call."""
        hdr = self._ring_hdr
        if hdr is None:
            return self.getevents(0, 0)
        head = int(hdr[2])
        tail = int(hdr[3])
        if head == tail:
            return 0
        ring = self._ring_events
        assert ring is not None
        nr = ring.size
        if tail > head:
            n = min(tail - head, self.nr_events)
            self.events[:n] = ring[head : head + n]
        else:
            first = min(nr - head, self.nr_events)
            self.events[:first] = ring[head : head + first]
            n = first + min(tail, self.nr_events - first)
            self.events[first:n] = ring[: n - first]
        hdr[2] = (head + n) % nr
        return n

    def close(self) -> None:
        if self.ctx_id:
            self._destroy(_SYS_IO_DESTROY, self.ctx_id)
            self.ctx_id = 0
            self._ring_hdr = None
            self._ring_events = None
