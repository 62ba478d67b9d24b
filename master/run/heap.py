"""The master process's memory: large freed arrays kept in the heap (glibc), so the next
subinterval reuses them; and set-ups of many small objects made without the cyclic collector.

Each subinterval at 10,000 workloads allocates and frees arrays of tens to hundreds of MB.
glibc serves blocks above its mmap threshold (at most 32 MB by default) with fresh ``mmap``
pages and unmaps them when freed, so every subinterval pays a page fault for each 4 KiB of
them again (measured here: about 1 s for 480 MB). Raising the mmap and trim thresholds makes
those blocks come from, and return to, the heap, where the next subinterval finds them already
mapped. The price is that the master's resident size stays at its peak. Without glibc this
does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_R = TypeVar("_R")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc caps the setting at HEAP_MAX/2 on 64-bit,
#: 32 MB without this call).
THRESHOLD_BYTES = 1 << 30
_done = False


def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True when they were set."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None:
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, THRESHOLD_BYTES))
    if not ok:
        log.debug("mallopt refused the heap thresholds")
    _done = ok
    return ok


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block, as it was after it. For a
    set-up that makes millions of small objects and no cycles (a step's rollup plan at 100,000
    workloads: lists, dicts and strings): each 700 new objects start a collection, and every
    few of them one over every object the process holds. A step's start at 1,000 hosts x 100
    workloads spent 0.3-0.6 s of its 0.8-1.2 s in them (``scripts/bench_master``). What the
    block leaves that is garbage is collected after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def without_cycle_collection(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` run within ``no_cycle_collection``."""
    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with no_cycle_collection():
            return fn(*args, **kwargs)
    return run
