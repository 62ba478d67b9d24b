"""A read-back of a verified LUN (``VerifyLun``, ``ivypy verify``): every block a run's map
holds, read once and checked in the compiled loop.

Owns ``read_back``: the LUN opened for reading (``O_DIRECT`` where the LUN takes it, else
through the page cache, said in the result), the map's written blocks read in windows of
``chunk_bytes`` (only windows that hold one; ``depth`` reads in flight, on threads that let
the GIL go), each window's blocks checked by the same compiled function a run's reads are
(``ivy_loop.c``'s ``verify_read_done``, through ``slave.engine.verify_state.VerifyState``:
the crash rule included), and what it found given out as it goes: the damaged blocks coalesced
into extents (``protocol.verify.extents``), the first ``kept_max`` with their bytes. It must
not write to the LUN, and it runs only while the host runs no workload (the session sees to
that).
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from protocol import verify
from slave.engine.verify_state import (
    Crash,
    VerifiedLun,
    VerifyState,
    WorkloadVerify,
    verify_report,
)

#: the largest read, and the window of the map one read covers
CHUNK_BYTES: Final = 1 << 20
#: reads in flight at once
DEPTH: Final = 4
#: the longest the master waits between two words of a read-back
PROGRESS_EVERY_NS: Final = 1_000_000_000
#: extents held before they are sent, whatever the time
EXTENTS_PER_MESSAGE: Final = 1 << 16


class ReadBackError(Exception):
    """The read-back cannot be done or cannot go on; ``kind`` is ``config`` (the LUN cannot
    be opened, is smaller than the map) or ``io`` (a read failed)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Found:
    """What a read-back found since it last said (``VerifyFound``'s fields)."""

    blocks_done: int
    blocks_total: int
    bytes_read: int
    extents: npt.NDArray[np.void]
    kept: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReadBack:
    """A read-back's totals (``Ack.info`` of ``VerifyLun``): blocks checked, each class's
    damaged blocks (``protocol.verify.COUNT_NAMES`` order), the blocks the crash rule took
    into the map (``adopted``), bytes read, seconds, and whether the reads bypassed the page
    cache (``direct``)."""

    counts: list[int]
    adopted: int
    bytes_read: int
    seconds: float
    direct: bool

    def info(self) -> dict[str, Any]:
        return {"blocks_checked": self.counts[0], "counts": self.counts,
                "damaged": sum(self.counts[1:]), "adopted": self.adopted,
                "bytes_read": self.bytes_read, "seconds": round(self.seconds, 3),
                "direct": self.direct}


def windows(map_: npt.NDArray[np.uint8], window_blocks: int) -> npt.NDArray[np.int64]:
    """The windows of ``window_blocks`` blocks (by index from the map's start) that hold a
    written block (a generation in its map byte), ascending."""
    written = (map_ & verify.GEN_MASK) != 0
    pad = (-written.size) % window_blocks
    if pad:
        written = np.concatenate([written, np.zeros(pad, dtype=bool)])
    return np.flatnonzero(written.reshape(-1, window_blocks).any(axis=1)).astype(np.int64)


def _open(path: str) -> tuple[int, bool]:
    """``path`` open for reading, with ``O_DIRECT`` unless the LUN refuses it (a file on
    tmpfs); whether it took it."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_DIRECT), True
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise ReadBackError("config", f"LUN {path} cannot be opened for reading: "
                                f"{exc.strerror or exc}") from exc
    try:
        return os.open(path, flags), False
    except OSError as exc:
        raise ReadBackError("config", f"LUN {path} cannot be opened for reading: "
                            f"{exc.strerror or exc}") from exc


def read_back(path: str, target: dict[str, int], map_: npt.NDArray[np.uint8], *,
              crashes: Sequence[Crash] = (), kept_max: int = 0,
              say: Callable[[Found], None], check: Callable[[int, int], None] | None = None,
              clock: Callable[[], int] = time.monotonic_ns, chunk_bytes: int = CHUNK_BYTES,
              depth: int = DEPTH) -> ReadBack:
    """Read back and check every block of ``path`` that ``map_`` (LUN ``target["lun"]``'s
    map over ``target``'s range) holds; ``say`` gets what was found at least every
    ``PROGRESS_EVERY_NS`` and at the end; ``check(done, total)`` between windows may raise to
    give up (the slave stopping). ``crashes``: the crashes the map must account for
    (``LoadMap``'s). Raises ``ReadBackError``."""
    verify.check_target(target)
    if chunk_bytes % verify.MAP_BLOCK_BYTES or chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes {chunk_bytes}: not whole map blocks")
    first, size = target["first_bytes"], target["size_bytes"]
    if map_.size != size // verify.MAP_BLOCK_BYTES:
        raise ValueError(f"a map of {map_.size} blocks for a range of {size} bytes")
    window_blocks = chunk_bytes // verify.MAP_BLOCK_BYTES
    state = VerifyState(blocks_in_flight=window_blocks, findings_kept=window_blocks)
    lun = VerifiedLun(target["lun"], first, size, target["run_key"], target["attempt"])
    state.add(0, WorkloadVerify(lun, target["writer"], initial=map_, crashes=crashes),
              chunk_bytes, 1, workload_id="verify")
    todo = windows(map_, window_blocks)
    total = int(np.count_nonzero(map_ & verify.GEN_MASK))
    fd, direct = _open(path)
    started = clock()
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        if first + size > end:
            raise ReadBackError("config", f"LUN {path} has {end} bytes, less than the map's "
                                f"range ({first} + {size})")
        return _read(fd, path, state, todo, total, first, size, chunk_bytes, depth,
                     kept_max, say, check, clock, started, direct)
    finally:
        os.close(fd)


def _read(fd: int, path: str, state: VerifyState, todo: npt.NDArray[np.int64],
          total: int, first: int, size: int, chunk_bytes: int, depth: int, kept_max: int,
          say: Callable[[Found], None], check: Callable[[int, int], None] | None,
          clock: Callable[[], int], started: int, direct: bool) -> ReadBack:
    buffers = [mmap.mmap(-1, chunk_bytes) for _ in range(max(1, depth))]  # page-aligned
    views = [np.frombuffer(b, dtype=np.uint8) for b in buffers]
    counts = np.zeros(len(verify.COUNT_NAMES), dtype=np.int64)
    adopted = bytes_read = kept = 0
    pending = np.zeros(0, dtype=verify.EXTENT_DTYPE)
    pending_kept: list[dict[str, Any]] = []
    told = started
    run_key = state.luns[0].run_key

    def window(i: int) -> tuple[int, int]:
        off = first + int(todo[i]) * chunk_bytes
        return off, min(chunk_bytes, first + size - off)

    def read(buf: mmap.mmap, off: int, n: int) -> int:
        return os.preadv(fd, [memoryview(buf)[:n]], off)

    in_flight: list[tuple[int, int, Future[int]]] = []  # (window, buffer, read)
    with ThreadPoolExecutor(max_workers=len(buffers), thread_name_prefix="readback") as pool:
        try:
            nxt = 0
            while nxt < min(len(buffers), todo.size):
                off, n = window(nxt)
                in_flight.append((nxt, nxt, pool.submit(read, buffers[nxt], off, n)))
                nxt += 1
            while in_flight:
                i, b, fut = in_flight.pop(0)
                off, n = window(i)
                try:
                    got = fut.result()
                except OSError as exc:
                    raise ReadBackError("io", f"LUN {path}: the read of {n} bytes at offset "
                                        f"{off} failed: {exc.strerror or exc}") from exc
                if got != n:
                    raise ReadBackError("io", f"LUN {path}: the read of {n} bytes at offset "
                                        f"{off} returned {got}")
                bytes_read += n
                state.read_done(0, off, n, n, int(views[b].ctypes.data), clock())
                taken = state.take()
                if nxt < todo.size:  # the buffer is free again: the next window into it
                    off2, n2 = window(nxt)
                    in_flight.append((nxt, b, pool.submit(read, buffers[b], off2, n2)))
                    nxt += 1
                counts += taken.counts[0, : counts.size]
                adopted += int(taken.blocks.size)
                f = taken.findings
                if f.size:
                    stamp = np.where(f["found_run_key"] != run_key, verify.STAMP_NONE,
                                     np.where(f["crc_ok"] != 0, verify.STAMP_VALID,
                                              verify.STAMP_BAD_CRC))
                    pending = verify.merge_extents(pending, verify.extents(
                        f["offset_bytes"], f["verdict"], f["expected"], stamp,
                        # the found block's start: its first sector out of line's less
                        # that sector's place in it
                        f["found_offset_bytes"].astype(np.int64)
                        - f["sector"] * verify.SECTOR_BYTES,
                        f["found_serial"].astype(np.int64), f["found_lun"], f["found_writer"],
                        f["found_gen"], f["found_attempt"]))
                    if kept < kept_max:
                        report = verify_report(taken, {0: "verify"})["findings"]
                        pending_kept += report[: kept_max - kept]
                        kept += len(report[: kept_max - kept])
                now = clock()
                if in_flight and (now - told >= PROGRESS_EVERY_NS
                                  or pending.size >= EXTENTS_PER_MESSAGE):
                    say(Found(int(counts[0]), total, bytes_read, pending, pending_kept))
                    pending, pending_kept, told = pending[:0], [], now
                if check is not None and in_flight:
                    check(int(counts[0]), total)
        finally:
            for _, _, fut in in_flight:
                fut.cancel()
    say(Found(int(counts[0]), total, bytes_read, pending, pending_kept))
    del views
    for buf in buffers:
        buf.close()
    return ReadBack([int(c) for c in counts], adopted, bytes_read,
                    (clock() - started) / 1e9, direct)

