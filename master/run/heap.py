"""Keep large freed arrays in the process heap (glibc), so the next subinterval reuses them.

Each subinterval at 10,000 workloads allocates and frees arrays of tens to hundreds of MB.
glibc serves blocks above its mmap threshold (at most 32 MB by default) with fresh ``mmap``
pages and unmaps them when freed, so every subinterval pays a page fault for each 4 KiB of
them again (measured here: about 1 s for 480 MB). Raising the mmap and trim thresholds makes
those blocks come from, and return to, the heap, where the next subinterval finds them already
mapped. The price is that the master's resident size stays at its peak. Without glibc this
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

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
