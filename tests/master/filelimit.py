"""A file size limit for tests of writes that fail as on a full disk.

Owns ``file_size_limit``: the process's soft RLIMIT_FSIZE set and SIGXFSZ ignored for a block,
so that a write past the limit stops short or fails with EFBIG instead of killing the process;
both restored after it. Must not leave either changed once the block ends.
"""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def file_size_limit(n_bytes: int | None = None) -> Iterator[Callable[[int], None]]:
    """Writes past ``n_bytes`` fail with EFBIG (SIGXFSZ ignored) in the block, as a full disk
    fails them; the limit and SIGXFSZ's handler in force before are restored after it, however
    it ends. The block gets a function that sets another limit in bytes (``None``: SIGXFSZ
    ignored and no limit set until the block sets one)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def limit(n: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, old_limit[1]))

    try:
        if n_bytes is not None:
            limit(n_bytes)
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
