"""I/O engines and the engine loop.

Owns choosing an engine per LUN (``choose_engine``): ``libaio`` (O_DIRECT) where O_DIRECT
works; ``threadpool`` (the page cache) with a warning the caller must record for a file whose
file system has no O_DIRECT (tmpfs); ``io_uring`` and ``fake`` (tests) only when asked for.
A LUN that O_DIRECT serves never leaves libaio silently, and an asked-for io_uring never
falls back: where native AIO, io_uring or a block device's O_DIRECT cannot be had, the choice
is refused with the reason before any I/O, unless the test allows a libaio LUN's fallback.
It must not import anything outside ``slave`` and ``protocol``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from protocol.errors import IoEngineError
from slave.engine import files, native

ENGINE_CHOICES = ("auto", "libaio", "io_uring", "threadpool", "fake")
#: what a test may name for a LUN (``luns[].engine``); ``fake`` is for tests, through
#: ``IVYPY_SLAVE_ENGINE``
LUN_ENGINE_CHOICES = ("auto", "libaio", "io_uring", "threadpool")
PAGE_CACHE_NOTE = "so its latencies are the page cache's, not the device's"


@dataclass(frozen=True)
class EngineDecision:
    kind: str  # libaio | io_uring | threadpool | fake
    warning: str | None


def fallback_warning(path: str, why: str) -> str:
    """The warning for a LUN that runs on the thread pool because its test allowed it."""
    return (f"LUN {path}: libaio unavailable ({why}); running on the thread-pool engine as "
            f"the test allows (allow_engine_fallback), {PAGE_CACHE_NOTE}")


def choose_engine(choice: str, path: str, logical_block_bytes: int, *,
                  fallback: bool = False) -> EngineDecision:
    """Which engine serves ``path`` for ``choice`` (``auto`` | ``libaio`` | ``io_uring`` |
    ``threadpool`` | ``fake[...]``). ``fallback``: with ``auto``, a LUN that cannot have
    libaio runs on the thread pool with a warning instead of being refused. Raises
    ``IoEngineError`` naming the LUN, the reason and the fix."""
    kind = choice.split(":", 1)[0]
    if kind not in ENGINE_CHOICES:
        raise IoEngineError(f"LUN {path}: unknown engine {choice!r} (one of {ENGINE_CHOICES})")
    if kind in ("fake", "threadpool"):  # asked for: said in luns.csv and the created event
        return EngineDecision(kind, None)
    denied = unreadable(path)
    if denied is not None:  # no engine reads it: a fallback would only fail again
        raise IoEngineError(denied)
    direct_why = files.direct_io_works(path, logical_block_bytes)
    if kind == "io_uring":
        why = direct_why or native.uring_available()
        if why is not None:
            raise IoEngineError(f"LUN {path}: the io_uring engine is unavailable: {why}")
        return EngineDecision("io_uring", None)
    if kind == "auto" and direct_why is not None and not _is_block_device(path):
        return EngineDecision(
            "threadpool",
            f"LUN {path}: its file system does not take O_DIRECT ({direct_why}); using the "
            f"thread-pool pread/pwrite engine, {PAGE_CACHE_NOTE}",
        )
    why = direct_why or native.aio_available()
    if why is None:
        return EngineDecision("libaio", None)
    if kind == "auto" and fallback:
        return EngineDecision("threadpool", fallback_warning(path, why))
    raise IoEngineError(refusal(path, why))


def unreadable(path: str) -> str | None:
    """Why this user may not open ``path`` at all (its owner, group and mode, and what to do),
    or None. A non-root user on a root's loop device was told libaio was unavailable, and
    that the thread pool would do: it would not."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    except PermissionError:
        pass
    except OSError:
        return None  # not there, or another fault: the engine's own open names it
    else:
        return None
    import grp
    import pwd

    st = os.stat(path)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    return (f"LUN {path}: permission denied: it is {owner}:{group}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}, and the slave runs as {user}: run it as a user "
            f"that may read and write it (one in group {group}, or root), or give {user} "
            "access; no engine can use it as it is")


def refusal(path: str, why: str) -> str:
    """Why ``path`` cannot run on libaio, and what the test can do about it."""
    return (f"LUN {path}: the libaio engine is unavailable: {why}. Fix the cause, or set "
            "allow_engine_fallback: true (or engine: threadpool) on this LUN to run it on "
            f"the thread-pool engine, {PAGE_CACHE_NOTE}")


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False
