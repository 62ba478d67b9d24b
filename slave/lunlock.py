"""The locks a slave session holds on its LUNs, so that two ivypy runs never use one LUN
unknowingly (two runs reading one LUN both reported valid numbers: each took half of it).

Owns ``LunLocks``: one advisory ``flock`` per LUN a session creates a workload on, on the
LUN's inode (a block device node or a file; a path through a symlink is its target's; a
character device such as ``/dev/null`` holds no data and is not locked), held
until the session ends: exclusive, or shared where the test says ``shared: true``. ``flock``
locks belong to an open file description, so two sessions conflict even in one process (the
in-memory hosts). A lock another session holds the other way refuses the create
(``PreflightError``): another run of this host holds it exclusively, or holds it shared while
this one would not share.

Must not: lock anything but its own open file descriptions, or keep a lock past ``release``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat

from protocol.errors import PreflightError

__all__ = ["LunLocks"]


class LunLocks:
    """The LUN locks of one slave session."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, bool]] = {}  # path → (fd, shared)

    def take(self, path: str, shared: bool, host: str) -> None:
        """Hold ``path``'s lock for the session (again: nothing to do); ``PreflightError``
        naming the host, the LUN and the fix when another session holds it the other way."""
        held = self._held.get(path)
        if held is not None:
            if held[1] == shared:
                return
            raise PreflightError(
                f"host {host}: LUN {path} is chosen both shared and not by this test's "
                "luns entries: say shared: true on all of them, or on none")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:  # no such LUN, or none this user reads: the engine's open says so
            return
        mode = os.fstat(fd).st_mode
        if not stat.S_ISBLK(mode) and not stat.S_ISREG(mode):
            os.close(fd)  # a character device (/dev/null, a test's): no data to share
            return
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            how = "holds it for itself" if shared or not _shared_by_others(path) else (
                "shares it, and this test does not say shared: true")
            raise PreflightError(
                f"host {host}: LUN {path} is in use by another ivypy run (it {how}): "
                "run them one after the other, or say shared: true on the LUN's luns entry in "
                "both tests to let them use it together") from None
        self._held[path] = (fd, shared)

    def shared(self, path: str) -> bool | None:
        """Whether the session holds ``path`` shared (None: it holds no lock on it)."""
        held = self._held.get(path)
        return None if held is None else held[1]

    def release(self) -> None:
        """Every lock let go (the session ends)."""
        for fd, _ in self._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()


def _shared_by_others(path: str) -> bool:
    """Whether the lock others hold on ``path`` is shared (a shared lock of ours would be
    granted beside it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # the probe's lock goes with it
    return True
