"""The io_uring engine: O_DIRECT I/O through io_uring, with registered files and buffers.

Owns one ring per engine (``io_uring_setup`` / ``io_uring_enter`` / ``io_uring_register`` by
raw system call, x86_64 numbers: no liburing), its mapped submission and completion rings as
numpy views, the registration of each LUN's descriptor (at the index of its number, so a slot
row's descriptor is its fixed-file index) and of each slot's buffer (at the index of its slot
number), and ``available``: whether io_uring can be had here, or why not. A submission is
made of the slot rows' iocb words (``READ_FIXED`` / ``WRITE_FIXED``); completions are
copied into an array laid out as libaio's events (``aio_abi.IO_EVENT_DTYPE``), so the engine
loop, Python's or the compiled one (``kernel_handles``: ``backend`` 1 of ``ivy_loop.h``),
reads them as it reads libaio's. It must not decide what to submit: the loop fills the rows.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import resource
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.aio_abi import IO_EVENT_DTYPE, IOCB_CMD_PWRITE, libc_syscall, read_proc_int
from slave.engine.base import AlignedBuffers, KernelHandles, SlotTable, SubmitError, submit_backoff
from slave.engine.layout import ROW

_SYS_SETUP, _SYS_ENTER, _SYS_REGISTER = 425, 426, 427
_FEAT_SINGLE_MMAP, _FEAT_NODROP, _FEAT_EXT_ARG = 1 << 0, 1 << 1, 1 << 8
_OFF_SQ_RING, _OFF_SQES = 0, 0x10000000
_ENTER_GETEVENTS, _ENTER_EXT_ARG = 1 << 0, 1 << 3
_REGISTER_FILES2, _REGISTER_FILES_UPDATE2 = 13, 14
_REGISTER_BUFFERS2, _REGISTER_BUFFERS_UPDATE = 15, 16
_RSRC_REGISTER_SPARSE = 1
_OP_READ_FIXED, _OP_WRITE_FIXED = 4, 5
_SQE_FIXED_FILE = 1
_SQ_TASKRUN = 1 << 1
#: the ring's set-up flags, the first the kernel takes: completions are posted when this task
#: next enters the kernel, not by interrupting it (``COOP_TASKRUN``, 5.19; the ring's flags say
#: when some wait: ``TASKRUN_FLAG``), which the loop's look in the ring without a system call
#: needs; not ``DEFER_TASKRUN`` (posted only in ``io_uring_enter``), nor ``SINGLE_ISSUER``
#: (6.0), which would refuse a ring used from another thread than its maker's (docs/engine.md)
_SETUP_FLAGS: Final = ((1 << 8) | (1 << 9), 0)
_MAX_FIXED_FILES: Final = 1 << 15  # the oldest kernels' limit of registered files
_MAX_REG_BUFFERS: Final = 1 << 14  # the kernel's limit of registered buffers
_EINTR, _EAGAIN, _EBUSY, _EINVAL, _ETIME = 4, 11, 16, 22, 62
#: who may set up a ring (``kernel.io_uring_disabled``: 0 all, 1 CAP_SYS_ADMIN or the
#: ``io_uring_group``, 2 none)
IO_URING_DISABLED_PATH: Final = "/proc/sys/kernel/io_uring_disabled"

_PARAMS = np.dtype([
    ("sq_entries", "<u4"), ("cq_entries", "<u4"), ("flags", "<u4"), ("sq_thread_cpu", "<u4"),
    ("sq_thread_idle", "<u4"), ("features", "<u4"), ("wq_fd", "<u4"), ("resv", "<u4", 3),
    ("sq_off", "<u4", 10), ("cq_off", "<u4", 10)])  # head, tail, ring_mask, entries, ...
SQE_DTYPE: Final = np.dtype([
    ("opcode", "u1"), ("flags", "u1"), ("ioprio", "<u2"), ("fd", "<i4"), ("off", "<u8"),
    ("addr", "<u8"), ("len", "<u4"), ("rw_flags", "<u4"), ("user_data", "<u8"),
    ("buf_index", "<u2"), ("personality", "<u2"), ("file_index", "<i4"), ("pad", "<u8", 2)])
CQE_DTYPE: Final = np.dtype([("user_data", "<u8"), ("res", "<i4"), ("flags", "<u4")])
#: struct io_uring_rsrc_register and struct io_uring_rsrc_update2
_RSRC = np.dtype([("a", "<u4"), ("b", "<u4"), ("c", "<u8"), ("d", "<u8"), ("e", "<u8")])
assert _PARAMS.itemsize == 120 and SQE_DTYPE.itemsize == 64 and CQE_DTYPE.itemsize == 16

_syscall = libc_syscall()  # io_uring_enter may wait: drop the GIL


def _fail(what: str) -> IoEngineError:
    err = ctypes.get_errno()
    return IoEngineError(f"{what} failed: {os.strerror(err)} (errno {err})")


_AVAILABLE: list[bool] = []  # [True] once a ring was set up in this process


def available(disabled_path: str = IO_URING_DISABLED_PATH) -> str | None:
    """``None`` when io_uring, as this engine uses it, can be had here, else the reason: a
    ring set up, sparse files and buffers registered (Linux 5.19), the timed wait
    (``EXT_ARG``); a kernel without them, ``kernel.io_uring_disabled`` or a seccomp filter
    refuse. The switch is read every time (a ring set up earlier does not say it is still
    allowed); a ring is set up once per process."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"io_uring is wired for Linux x86_64 only, not {platform.platform()}"
    mode = read_proc_int(disabled_path) or 0  # 0 too where the kernel has no such switch
    if mode == 2:
        return "io_uring is disabled on this host (kernel.io_uring_disabled = 2)"
    if _AVAILABLE:
        return None
    try:
        UringRing(8, 8).close()
    except IoEngineError as exc:
        if mode == 1:
            return (f"{exc}; kernel.io_uring_disabled = 1 on this host limits io_uring to "
                    "CAP_SYS_ADMIN and the io_uring_group")
        return str(exc)
    _AVAILABLE.append(True)
    return None


class UringRing:
    """One io_uring of ``entries`` submission entries (twice as many completions), its rings
    mapped, with ``n_buffers`` sparse registered buffers and sparse registered files (as many
    as this process may have descriptors, up to 32,768). Raises ``IoEngineError`` with the
    kernel's reason when it cannot be had."""

    def __init__(self, entries: int, n_buffers: int) -> None:
        p = np.zeros(1, dtype=_PARAMS)
        for flags in _SETUP_FLAGS:  # the newest the kernel takes
            p["flags"] = flags
            fd = _syscall(_SYS_SETUP, entries, ctypes.c_void_p(p.ctypes.data))
            if fd >= 0 or ctypes.get_errno() != _EINVAL:
                break
        if fd < 0:
            raise _fail(f"io_uring_setup({entries})")
        self.fd = int(fd)
        self._maps: list[mmap.mmap] = []
        try:
            self._map(p[0])
            self._register_sparse(n_buffers)
        except BaseException:
            self.close()
            raise

    def _map(self, p: np.void) -> None:
        need = _FEAT_SINGLE_MMAP | _FEAT_NODROP | _FEAT_EXT_ARG
        if int(p["features"]) & need != need:
            raise IoEngineError("io_uring lacks the single mapping, no-drop completions or the "
                                "timed wait (IORING_FEAT_EXT_ARG, Linux 5.11)")
        sq, cq = p["sq_off"], p["cq_off"]
        self.sq_entries, self.cq_entries = int(p["sq_entries"]), int(p["cq_entries"])
        size = max(int(sq[6]) + 4 * self.sq_entries, int(cq[5]) + 16 * self.cq_entries)
        flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
        rings = mmap.mmap(self.fd, size, flags, offset=_OFF_SQ_RING)
        sqes = mmap.mmap(self.fd, 64 * self.sq_entries, flags, offset=_OFF_SQES)
        self._maps = [rings, sqes]
        self.words = np.frombuffer(rings, dtype=np.uint32)  # the rings' header words
        self.rings_addr = int(self.words.ctypes.data)
        self.sq_tail, self.sq_flags = int(sq[1]) // 4, int(sq[4]) // 4
        self.cq_head, self.cq_tail = int(cq[0]) // 4, int(cq[1]) // 4
        self.sq_mask = int(self.words[int(sq[2]) // 4])
        self.cq_mask = int(self.words[int(cq[2]) // 4])
        array = self.words[int(sq[6]) // 4 : int(sq[6]) // 4 + self.sq_entries]
        array[:] = np.arange(self.sq_entries)  # entry i is the ring's i, for good
        self.sqes = np.frombuffer(sqes, dtype=SQE_DTYPE)
        self.cqes = np.frombuffer(rings, dtype=CQE_DTYPE, count=self.cq_entries,
                                  offset=int(cq[5]))

    def _register_sparse(self, n_buffers: int) -> None:
        n_files = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], _MAX_FIXED_FILES)
        self.n_files = n_files
        for op, n, what in ((_REGISTER_FILES2, n_files, "files"),
                            (_REGISTER_BUFFERS2, n_buffers, "buffers")):
            r = np.zeros(1, dtype=_RSRC)
            r["a"], r["b"] = n, _RSRC_REGISTER_SPARSE
            if _syscall(_SYS_REGISTER, self.fd, op, ctypes.c_void_p(r.ctypes.data),
                        _RSRC.itemsize) < 0:
                raise _fail(f"io_uring registration of {n} sparse {what}")

    def update(self, files: bool, offset: int, data: npt.NDArray[np.generic], n: int) -> None:
        """Register ``n`` files (int32 descriptors) or buffers (iovecs) from index ``offset``."""
        r = np.zeros(1, dtype=_RSRC)
        r["a"], r["c"], r["e"] = offset, data.ctypes.data, n
        op = _REGISTER_FILES_UPDATE2 if files else _REGISTER_BUFFERS_UPDATE
        if _syscall(_SYS_REGISTER, self.fd, op, ctypes.c_void_p(r.ctypes.data),
                    _RSRC.itemsize) < 0:
            raise _fail(f"io_uring registration of {'file' if files else 'buffer'} {offset}")

    def enter(self, to_submit: int, min_complete: int, timeout_ns: int, *,
              getevents: bool = False) -> int:
        """``io_uring_enter``: submit ``to_submit`` entries, and with ``min_complete`` wait for
        that many completions, ``timeout_ns`` at most; ``getevents`` alone posts the
        completions waiting for this task. How many entries it took; -errno when it failed
        (EINTR and ETIME: 0)."""
        flags, size = _ENTER_GETEVENTS if getevents else 0, 0
        arg: ctypes.c_void_p | None = None
        if min_complete:
            ts = np.array([timeout_ns // 1_000_000_000, timeout_ns % 1_000_000_000])
            ext = np.array([0, 8, ts.ctypes.data], dtype=np.uint64)  # sigmask, size, ts
            flags = _ENTER_GETEVENTS | _ENTER_EXT_ARG
            arg, size = ctypes.c_void_p(ext.ctypes.data), 24
        # the seventh argument goes on the stack, where a C int would leave the upper half
        rc = int(_syscall(_SYS_ENTER, self.fd, to_submit, min_complete, flags, arg,
                          ctypes.c_long(size)))
        if rc >= 0:
            return rc
        err = ctypes.get_errno()
        return 0 if err in (_EINTR, _ETIME) else -err

    def close(self) -> None:
        """Close the ring (which drops its registrations); its mappings go with the last
        view of them (numpy's views hold them: an ``mmap`` with views cannot be closed)."""
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class UringEngine:
    """The engine interface (``slave.engine.base.IoEngine``) on one ``UringRing`` of as many
    entries as the table has slots (a submission never finds its ring full)."""

    open_flags = os.O_DIRECT

    def __init__(self, table: SlotTable) -> None:
        if table.capacity > _MAX_REG_BUFFERS:
            raise IoEngineError(f"io_uring registers at most {_MAX_REG_BUFFERS} buffers, one a "
                                f"slot; this loop has {table.capacity} slots")
        self._table = table
        self._ring = r = UringRing(1 << (table.capacity - 1).bit_length(), table.capacity)
        self.events = np.zeros(table.capacity, dtype=IO_EVENT_DTYPE)
        self.done_slot = self.events["data"].view(np.int64)
        self.done_res = self.events["res"]
        self._w = r.words

    def prepare_slots(self, slots: npt.NDArray[np.intp], fd: int,
                      buffers: AlignedBuffers) -> None:
        """Register ``fd`` (at its number's index) and each slot's buffer of ``buffers`` (at
        its slot's index), before the slots' first I/O. The file is registered anew each
        time: a descriptor's number, closed, may come back for another LUN."""
        if fd >= self._ring.n_files:
            raise IoEngineError(f"io_uring: descriptor {fd} is past the {self._ring.n_files} "
                                "files registered (RLIMIT_NOFILE)")
        self._ring.update(True, fd, np.array([fd], dtype=np.int32), 1)
        iov = np.zeros((slots.size, 2), dtype=np.uint64)
        iov[:, 0] = buffers.addr[: slots.size]
        iov[:, 1] = buffers.slot_bytes
        order = np.argsort(slots)
        s, iov = slots[order], iov[order]
        cuts = np.flatnonzero(np.diff(s) != 1) + 1  # runs of consecutive slots: one call each
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), s.size], strict=True):
            run = np.ascontiguousarray(iov[a:b])
            self._ring.update(False, int(s[a]), run, b - a)

    def forget_file(self, fd: int) -> None:
        """Unregister ``fd``, which its last workload let go of: the ring holds the file open
        until then (nothing of it is in flight: the loop releases a LUN after its last I/O)."""
        if 0 <= fd < self._ring.n_files:
            self._ring.update(True, fd, np.array([-1], dtype=np.int32), 1)

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        n = int(slots.size)
        if not n:
            return
        rows = self._table.rows[slots]
        w, ring = self._w, self._ring
        tail = int(w[ring.sq_tail])
        at = (tail + np.arange(n)) & ring.sq_mask
        e = np.zeros(n, dtype=SQE_DTYPE)
        word = rows[:, ROW["opcode_fd"]]
        e["opcode"] = np.where(word & 0xFFFF == IOCB_CMD_PWRITE, _OP_WRITE_FIXED, _OP_READ_FIXED)
        e["flags"] = _SQE_FIXED_FILE
        e["fd"] = word >> 32
        e["off"] = rows[:, ROW["offset"]]
        e["addr"] = rows[:, ROW["buf"]]
        e["len"] = rows[:, ROW["nbytes"]]
        e["user_data"] = slots
        e["buf_index"] = slots
        ring.sqes[at] = e
        w[ring.sq_tail] = (tail + n) & 0xFFFFFFFF  # the entries first (x86: stores in order)
        self.finish_submit(0, n)

    def finish_submit(self, done: int, n: int) -> None:
        """``done`` of the ``n`` entries put in the ring were taken (-1: none): submit the rest,
        which stay in the ring until the kernel takes them, offered again after short sleeps
        while it takes none (``submit_backoff``); a refusal raises ``SubmitError``."""
        done = max(done, 0)
        tries = 0
        while done < n:
            if not submit_backoff(tries):
                raise SubmitError(f"io_uring took {done} of {n} entries and then no more", done)
            tries += 1
            rc = self._ring.enter(n - done, 0, 0)
            if rc < 0 and -rc not in (_EAGAIN, _EBUSY):
                raise SubmitError(f"io_uring_enter of {n - done} entries failed: "
                                  f"{os.strerror(-rc)} (errno {-rc})", done)
            done += max(rc, 0)

    def poll(self) -> int:
        """The completions in the ring, moved into ``events`` without a system call (but where
        some wait for this task to post them: ``_SETUP_FLAGS``)."""
        w, r = self._w, self._ring
        head = int(w[r.cq_head])
        if head == int(w[r.cq_tail]) and int(w[r.sq_flags]) & _SQ_TASKRUN:
            r.enter(0, 0, 0, getevents=True)
        n = min((int(w[r.cq_tail]) - head) & 0xFFFFFFFF, self.events.size)
        if n:
            at = head & r.cq_mask
            first = min(n, r.cq_entries - at)
            for dst, src in ((slice(0, first), slice(at, at + first)),
                             (slice(first, n), slice(0, n - first))):
                self.events["data"][dst] = r.cqes["user_data"][src]
                self.events["res"][dst] = r.cqes["res"][src]
            w[r.cq_head] = (head + n) & 0xFFFFFFFF
        return n

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        """What is in the ring at once, else a wait for ``min_nr`` (``timeout_ns`` at most)."""
        n = self.poll()
        if n or timeout_ns == 0:
            return n
        rc = self._ring.enter(0, min_nr, timeout_ns)
        if rc < 0:
            raise IoEngineError(f"io_uring_enter's wait failed: {os.strerror(-rc)} (errno {-rc})")
        return self.poll()

    def kernel_handles(self) -> KernelHandles:
        """The compiled loop's words for this ring (``ivy_loop.h``'s backend 1)."""
        r = self._ring
        base = r.rings_addr
        ev = self.events.view(np.int64).reshape(-1)
        words = {"backend": 1, "uring_fd": r.fd, "sq_tail": base + 4 * r.sq_tail,
                 "sq_flags": base + 4 * r.sq_flags,
                 "sq_mask": r.sq_mask, "sqes": int(r.sqes.ctypes.data),
                 "cq_head": base + 4 * r.cq_head, "cq_tail": base + 4 * r.cq_tail,
                 "cq_mask": r.cq_mask, "cqes": int(r.cqes.ctypes.data)}
        none = np.zeros(8, dtype=np.uint32)
        ptrs = np.zeros(self._table.capacity, dtype=np.uint64)  # filled, read by libaio only
        return KernelHandles(0, none, none.view(np.int64), ev, self.events.size,
                             self._table.addr, ptrs, self.finish_submit, words)

    def close(self) -> None:
        self._ring.close()
