"""Reading processes forked from this one (``fio-pctiles --jobs``, where this process runs no
other thread), without multiprocessing's pool: importing it and setting the pool up took 13
to 35 ms of a 0.26 s run over 16 logs, a tenth of it.

Owns ``ClaimQueue``: the files' order shared by the processes (which file each takes next, and
where a malformed line stopped the run), two counters in an anonymous file (``memfd``) locked
with a POSIX record lock, which each process holds alone and which the kernel lets go of if a
process dies holding it; and ``fork_readers`` / ``Readers.results``: each child runs its work
and hands back the pickled result through a pipe, or the exception that ended it (raised in
the parent, as a pool raises it) with its traceback. A child
never returns into the parent's code: it leaves with ``os._exit`` (no atexit handler, no
flush of the parent's buffers). What a process reads is ``master.fiologs.pipeline``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal
import struct
import traceback
from collections.abc import Callable
from typing import Any

_COUNTERS = struct.Struct("qq")  # the next file to claim, the first file not to read


class ClaimQueue:
    """The files ``0 .. n_files - 1`` handed out in order to the processes that share this
    queue (made before they are forked); ``stop_at`` keeps every file from ``index`` on from
    being claimed (a malformed line there)."""

    def __init__(self, n_files: int) -> None:
        self._fd = os.memfd_create("ivypy-fio-pctiles-claims", os.MFD_CLOEXEC)
        os.pwrite(self._fd, _COUNTERS.pack(0, n_files), 0)

    def claim(self) -> int | None:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            index, stop = _COUNTERS.unpack(os.pread(self._fd, _COUNTERS.size, 0))
            if index >= stop:
                return None
            os.pwrite(self._fd, _COUNTERS.pack(index + 1, stop), 0)
            return int(index)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def stop_at(self, index: int) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            nxt, stop = _COUNTERS.unpack(os.pread(self._fd, _COUNTERS.size, 0))
            os.pwrite(self._fd, _COUNTERS.pack(nxt, min(stop, index)), 0)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ReaderFailed(RuntimeError):
    """A forked reading process failed (its traceback), died, or sent no result."""


class Readers:
    """The children ``fork_readers`` started: their results once they are done
    (``results``); ``stop`` kills and reaps those not collected yet."""

    def __init__(self) -> None:
        self._children: list[tuple[int, int]] = []  # (pid, read end of its result pipe)

    def results(self) -> list[Any]:
        """Each child's result, in the order they were started; ``ReaderFailed`` for the first
        child that failed (the others are stopped)."""
        out = []
        try:
            while self._children:
                pid, fd = self._children[0]
                self._children[0] = (pid, -1)  # the file below owns the descriptor now
                with open(fd, "rb") as pipe:
                    data = pipe.read()
                self._children.pop(0)  # reaped below: never killed again
                _, status = os.waitpid(pid, 0)
                try:
                    kind, value, told = pickle.loads(data)
                except Exception:  # nothing, or cut short: the child died writing it
                    raise ReaderFailed(f"a reading process (pid {pid}) ended without its "
                                       f"result ({_ended(status)})") from None
                if kind != "done":
                    failed = ReaderFailed(f"a reading process (pid {pid}) failed:\n{told}")
                    if isinstance(value, BaseException):  # raised here, as a pool would
                        raise value from failed
                    raise failed
                out.append(value)
        finally:
            self.stop()
        return out

    def stop(self) -> None:
        """Kill the children not collected yet and reap them (an interrupt, a failure)."""
        for pid, fd in self._children:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self._children.clear()


def fork_readers(n: int, work: Callable[[], Any]) -> Readers:
    """``n`` children forked from this process (which must run no other thread: a lock
    another thread holds would be copied held), each running ``work()``."""
    readers = Readers()
    try:
        for _ in range(n):
            r, w = os.pipe2(os.O_CLOEXEC)
            try:
                pid = os.fork()
            except BaseException:
                os.close(r)
                os.close(w)
                raise
            if pid == 0:  # the child: never back into the parent's code
                status = 1
                try:
                    os.close(r)
                    try:
                        payload = pickle.dumps(("done", work(), ""), pickle.HIGHEST_PROTOCOL)
                        status = 0
                    except BaseException as exc:  # any: told to the parent
                        payload = _failure(exc)
                    with open(w, "wb") as pipe:
                        pipe.write(payload)
                finally:
                    os._exit(status)
            os.close(w)
            readers._children.append((pid, r))
    except BaseException:
        readers.stop()
        raise
    return readers


def _failure(exc: BaseException) -> bytes:
    """What a child that ``exc`` ended sends: the exception itself where it can be pickled
    (the parent raises it: a ``TooManyQuanta`` becomes the user's error there), and its
    traceback."""
    told = "".join(traceback.format_exception(exc))
    try:
        data = pickle.dumps(("failed", exc, told), pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # an exception whose arguments do not make it again fails here
        return data
    except Exception:  # one that cannot go through a pickle: its traceback alone
        return pickle.dumps(("failed", None, told), pickle.HIGHEST_PROTOCOL)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
