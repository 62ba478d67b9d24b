"""The libaio engine: O_DIRECT I/O through native AIO (``io_submit`` / ``io_getevents``).

Owns turning slot batches into ``io_submit`` calls (a preallocated pointer array filled with one
numpy gather, the ctypes call inlined) and reaping events (syscall, or straight from the mapped
ring when polling). It must not touch offsets or statistics.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol.errors import IoEngineError
from slave.engine.aio_abi import SYS_IO_SUBMIT, AioContext
from slave.engine.base import KernelHandles, SlotTable, SubmitError, submit_backoff

#: The smallest AIO context an engine sets up (events): the kernel counts every context's
#: events against the system-wide ``fs.aio-max-nr``, so a context starts small and the loop
#: grows it (docs/engine.md).
MIN_AIO_EVENTS: Final = 64


def aio_events_for(slots_in_use: int, capacity: int) -> int:
    """The size of context that ``slots_in_use`` I/O slots need: twice as many (an edit
    retires a workload's slots with their I/Os in flight and takes as many anew before they
    complete), as a power of two, at least ``MIN_AIO_EVENTS`` and at most ``capacity`` (a
    loop never has more slots, so never more I/Os in flight)."""
    want = max(MIN_AIO_EVENTS, 2 * slots_in_use)
    return min(capacity, 1 << (want - 1).bit_length())


class LibaioEngine:
    open_flags = os.O_DIRECT

    def __init__(self, table: SlotTable) -> None:
        self._table = table
        self._ctx = AioContext(aio_events_for(0, table.capacity))  # the loop grows it
        self._old: list[AioContext] = []
        self._bind_context()
        self._ptrs = np.zeros(table.capacity, dtype=np.uint64)
        self._ptrs_addr = self._ptrs.ctypes.data
        self._c_ptrs = ctypes.c_void_p(self._ptrs_addr)
        self._addr = table.addr

    @property
    def room(self) -> int:
        """I/Os the context can hold in flight."""
        return self._ctx.nr_events

    def grow(self, slots_in_use: int, *, keep_old: bool = False) -> None:
        """A context for ``slots_in_use`` slots in place of the present one, which must have
        nothing in flight (the loop reaps everything first); with ``keep_old`` the present one
        is closed by ``release_old``. Raises ``IoEngineError`` with the kernel's reason and the
        fix, keeping the present context, when it cannot be had."""
        size = aio_events_for(slots_in_use, self._table.capacity)
        if size <= self._ctx.nr_events:
            return
        ctx = AioContext(size)
        # io_destroy waits for the kernel (tens of ms): inside a run the old context is
        # closed after it (``release_old``), not at the boundary where it was replaced
        self._old.append(self._ctx)
        self._ctx = ctx
        self._bind_context()
        if not keep_old:
            self.release_old()

    def release_old(self) -> None:
        """Close the contexts ``grow`` replaced (each with nothing in flight)."""
        old, self._old = self._old, []
        for ctx in old:
            ctx.close()

    def _bind_context(self) -> None:
        """The context's arrays and calls, held where the hot paths look for them."""
        self.done_slot = self._ctx.events["data"].view(np.int64)  # slot numbers fit a word
        self.done_res = self._ctx.events["res"]
        #: completions in the ring now, reaped without a system call: the context's own
        #: method, so the hot loop's call has no frame of ours in between
        self.poll: Callable[[], int] = self._ctx.poll_ring

    def submit(self, slots: npt.NDArray[np.intp]) -> None:
        n = int(slots.size)
        # "clip": the slots are the caller's own; the default "raise" copies ``out`` first
        self._addr.take(slots, out=self._ptrs[:n], mode="clip")
        ctx = self._ctx
        # the call inlined; a failure (-1) is repeated by ``finish_submit``, which learns why
        done = ctx.syscall_held(SYS_IO_SUBMIT, ctx.c_ctx, n, self._c_ptrs)
        if done < n:
            self.finish_submit(done, n)

    def finish_submit(self, done: int, n: int) -> None:
        """An ``io_submit`` of the first ``n`` pointers of ``_ptrs`` (ours, or compiled
        code's) took only ``done`` (-1: failed, nothing taken): submit the rest, at once and
        then after short sleeps while the kernel takes a prefix (EAGAIN under memory
        pressure); a refusal raises ``SubmitError`` with its errno and how many of the ``n``
        went out."""
        done = max(done, 0)
        base = self._ptrs_addr
        tries = 0
        try:
            while done < n:
                if not submit_backoff(tries):
                    raise IoEngineError(f"io_submit took {done} of {n} iocbs and then no more")
                tries += 1
                done += self._ctx.submit(base + 8 * done, n - done)
        except IoEngineError as exc:
            raise SubmitError(str(exc), done) from exc

    def kernel_handles(self) -> KernelHandles | None:
        """What compiled code needs to submit and reap on this engine itself
        (``slave.engine.paced_kernel``): None when the completion ring cannot be read."""
        ring = self._ctx.ring_arrays()
        if ring is None:
            return None
        ev = self._ctx.events.view(np.int64).reshape(-1)
        return KernelHandles(self._ctx.ctx_id, ring[0], ring[1], ev, self._ctx.nr_events,
                             self._addr, self._ptrs, self.finish_submit)

    def reap(self, min_nr: int, timeout_ns: int) -> int:
        if timeout_ns == 0:
            return self._ctx.poll_ring()
        return self._ctx.getevents(min_nr, timeout_ns)

    def close(self) -> None:
        self.release_old()
        self._ctx.close()
