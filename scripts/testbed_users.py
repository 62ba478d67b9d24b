"""Holding the OpenSSH test bed while running on it (the benchmarks on it, the tests' fixture).

Owns the shared lock on ``/run/ivypy-testbed.lock`` that ``scripts/testbed up`` and ``down``
take exclusively: they refuse while anyone holds it, naming the users from their lines in
``/run/ivypy-testbed.users/<pid>.<n>``, which this module writes and removes. A user that
brings the test bed up or down itself lets go of it around that call (``TestbedUse.let_go``,
``hold``). The lock goes with the process: a user killed holds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = Path("/run/ivypy-testbed.lock")
USERS_DIR = Path("/run/ivypy-testbed.users")
_numbers = itertools.count()


class TestbedUse:
    """One user's hold on the test bed, named ``what`` in the refusals."""

    __test__ = False  # not a pytest class

    def __init__(self, what: str) -> None:
        self.what = what
        self._fd = -1
        self._line = USERS_DIR / f"{os.getpid()}.{next(_numbers)}"

    def hold(self) -> None:
        """Take the shared lock (after an ``up`` or ``down`` under way ends) and say who."""
        if self._fd >= 0:
            return
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            USERS_DIR.mkdir(exist_ok=True)
            _forget_the_dead()
            self._line.write_text(self.what + "\n")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    @contextlib.contextmanager
    def let_go_while(self) -> Iterator[None]:
        """Not held for the block (this user's own ``up`` or ``down``), held again after."""
        self.let_go()
        try:
            yield
        finally:
            self.hold()

    def let_go(self) -> None:
        """Release the lock and remove the line (nothing when not held)."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            self._line.unlink()
        os.close(self._fd)
        self._fd = -1


def _forget_the_dead() -> None:
    """Remove the lines of users that died (killed, they could not remove their own)."""
    for line in USERS_DIR.iterdir():
        pid = line.name.split(".", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                line.unlink()


@contextlib.contextmanager
def using_testbed(what: str) -> Iterator[TestbedUse]:
    """Hold the test bed for the block, named ``what``."""
    use = TestbedUse(what)
    use.hold()
    try:
        yield use
    finally:
        use.let_go()
