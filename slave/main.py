"""The slave process: pumps protocol bytes between stdin/stdout and a ``SlaveSession``.

Owns file descriptors, signals and the process lifetime. Before anything else it moves the wire
to a private descriptor and points fd 1 at stderr, so that a stray ``print`` (here or in a
worker process) can never corrupt the protocol stream. When stdin reaches EOF (the master is
gone) or SIGTERM/SIGHUP arrives, all I/O stops and the process exits within a second, also
in the middle of a file LUN's layout (the session asks ``stopping`` between its pieces: a
look at the signals and at stdin without blocking, whose bytes are answered after); so it
does when the master says nothing for too long (the watchdog: ``WATCHDOG_MIN_S``, or three of
the longest subinterval). The watchdog counts only time the slave was free to read: a long
answer (a discovery probing a slow device, a layout) is not the master's silence.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from protocol import cpulist
from slave.devstats import DeviceSampler
from slave.session import Backend, SlaveSession, stderr_logging

log = logging.getLogger("slave")

READ_BYTES = 1 << 20
#: The watchdog's floor: a slave that hears nothing from its master for this long (or three of
#: the longest subinterval, when longer) stops its I/O, closes its LUNs and exits, over any
#: transport (a cut SSH link does not always close stdin: a stock sshd kept a slave 150 s and
#: more, its LUN open, so the next run's write preflight refused the LUN).
WATCHDOG_MIN_S = 30.0
#: The conversation ended with a fatal ``Error`` from the slave (a protocol or version error, a
#: setting this host cannot honour), or the slave failed; 128 + n after signal n; else 0.
EXIT_FAILED = 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _timeout_s(left_ns: int) -> float:
    """How long to wait for input with ``left_ns`` to the next boundary: the whole
    milliseconds before it, at most 0.2 s. ``select`` rounds a timeout up to whole milliseconds
    (epoll), which would wake the loop up to a millisecond after the boundary; the loop spins
    through the rest instead, so the boundary's work (the devices' counters) starts on time."""
    return max(0.0, min(0.2, (left_ns // 1_000_000) / 1e3))


def _describe_fd(fd: int) -> str:
    """What descriptor ``fd`` is, for a message: its path or kind."""
    try:
        return f"fd {fd}, {os.readlink(f'/proc/self/fd/{fd}')}"
    except OSError:
        return f"fd {fd}"


def default_backend(cpus: list[int | None] | None = None) -> Backend:
    from slave.worker_backend import WorkerBackend

    return WorkerBackend(cpus=cpus)


def _stop_io(session: SlaveSession) -> None:
    """After a failure, on the way out: stop all I/O. What goes wrong doing so is logged, not
    raised (the exit status already says the slave failed)."""
    try:
        session.shut_down()
    except Exception:
        log.exception("stopping all I/O")


def serve(
    backend_factory: Callable[[], Backend] = default_backend,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    startup_error: str | None = None,
    watchdog_min_s: float = WATCHDOG_MIN_S,
) -> int:
    """Run one conversation to its end; return the exit status (``EXIT_FAILED`` after a fatal
    ``Error``). ``startup_error``: a setting this host cannot honour, answered to ``Hello`` as
    a fatal error."""
    wire = os.dup(stdout_fd)
    os.dup2(2, stdout_fd)
    sys.stdout = sys.stderr
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    eof: list[bool] = []  # stdin reached EOF (the master is gone)
    early: list[bytes] = []  # read while a handler ran: answered after it

    def told_to_stop() -> bool:
        """For a long handler (a layout), between its pieces: a signal came, or stdin is at
        EOF. Reads what stdin holds without blocking, keeping it for after the handler."""
        if stopping or eof:
            return True
        try:
            data = os.read(stdin_fd, READ_BYTES)
        except BlockingIOError:
            return False
        if not data:
            eof.append(True)
            return True
        early.append(data)
        return False

    sel = selectors.DefaultSelector()
    try:  # before any worker is started: a slave that cannot hear its master runs nothing
        sel.register(stdin_fd, selectors.EVENT_READ)
    except OSError as exc:  # a regular file or /dev/null: epoll refuses them
        sel.close()
        log.error("stdin (%s) cannot be waited on: %s; the slave speaks with its master over "
                  "a pipe or a socket on stdin and stdout", _describe_fd(stdin_fd), exc)
        return EXIT_FAILED
    os.set_blocking(stdin_fd, False)
    backend: Backend | None = None
    try:  # the workers end with the backend, whatever fails from their start on
        backend = backend_factory()
        session = SlaveSession(backend, lambda b: _write_all(wire, b), time.monotonic_ns,
                               startup_error=startup_error, devices=DeviceSampler(),
                               stopping=told_to_stop)
    except BaseException as exc:
        if backend is not None:
            backend.close()
        sel.close()
        if not isinstance(exc, Exception):
            raise
        log.exception("slave failed to start")
        return EXIT_FAILED
    status = 0
    heard = time.monotonic()  # the workers' start (a build of the compiled loop) is not silence
    try:
        while not session.closed:
            if stopping:
                log.warning("signal %d: stopping all I/O", stopping[0])
                session.shut_down()
                status = 128 + stopping[0]
                break
            wake = session.next_wakeup_ns()
            timeout = 0.2 if wake is None else _timeout_s(wake - time.monotonic_ns())
            for _key, _ in sel.select(timeout):
                try:
                    data = os.read(stdin_fd, READ_BYTES)
                except BlockingIOError:
                    continue
                if not data:
                    eof.append(True)
                    break
                early.append(data)
            # answer what came, also what a long handler read meanwhile (unless a signal
            # came); the time spent answering is not the master's silence: heard after it
            while early and not stopping and not session.closed:
                session.on_bytes(early.pop(0))
                heard = time.monotonic()
            if eof and not session.closed:
                session.on_eof()
            if session.closed:
                break
            silent_s = time.monotonic() - heard
            if silent_s > session.watchdog_s(watchdog_min_s):
                log.error("no word from the master for %.1f s: taking it for gone, stopping all "
                          "I/O and exiting (watchdog)", silent_s)
                session.shut_down()  # no Error: nobody is listening, and a write could block
                status = EXIT_FAILED
                break
            session.on_tick()
    except BrokenPipeError:
        log.warning("the master closed our stdout: stopping all I/O")
        _stop_io(session)
        status = EXIT_FAILED
    except Exception:
        log.exception("slave failed")
        _stop_io(session)
        status = EXIT_FAILED
    finally:
        backend.close()
        sel.close()
    if session.failure is not None and status == 0:
        status = EXIT_FAILED
    return status


def main(argv: list[str] | None = None) -> int:
    stderr_logging(getattr(logging, os.environ.get("IVYPY_SLAVE_LOG", "INFO").upper(), 20))
    ap = argparse.ArgumentParser(prog="slave", description="The ivypy slave: speaks the "
                                 "protocol on stdin/stdout, logs to stderr.")
    ap.add_argument("--worker-cpus", default=cpulist.AUTO, metavar="SETTING",
                    help="auto (one worker per usable CPU, pinned to it; the default), "
                    "unpinned, or a CPU list like 0-3,8 (one pinned worker per CPU)")
    ap.add_argument("--watchdog-min-seconds", type=float, default=WATCHDOG_MIN_S,
                    metavar="S", help="the least time without a word from the master before "
                    f"the slave stops and exits (default {WATCHDOG_MIN_S:g}; three of the "
                    "longest subinterval, when longer)")
    ap.add_argument("--connect", metavar="HOST:PORT",
                    help="dial the master there (connect-back: a scheduler started this slave) "
                    "instead of speaking on stdin/stdout")
    ap.add_argument("--token-file", metavar="FILE",
                    help="with --connect: the file whose first line is the run's token")
    ap.add_argument("--name", metavar="NAME",
                    help="with --connect: the host's name in the test (default: this host's)")
    ap.add_argument("--build-compiled-loop", metavar="DIR",
                    help="build the compiled loop into DIR for shipping to other hosts "
                    "(the controller does this), print its file name and exit")
    args = ap.parse_args(argv)
    if args.build_compiled_loop is not None:
        from slave.engine import compiled_loop

        try:
            print(compiled_loop.build_for_shipping(args.build_compiled_loop))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.error("cannot build the compiled paced loop: %s", exc)
            return EXIT_FAILED
        return 0
    if not args.watchdog_min_seconds > 0:
        ap.error("--watchdog-min-seconds must be > 0")
    problem = None
    try:
        cpus = cpulist.worker_cpus(args.worker_cpus, cpulist.usable_cpus())
    except ValueError as exc:
        problem = f"worker_cpus {args.worker_cpus!r}: {exc}"
        cpus = [None]  # one idle worker: the handshake answers with the problem, then exits
    fds: dict[str, int] = {}
    if args.connect is not None:
        dialled = _dial(ap, args)
        if dialled is None:
            return EXIT_FAILED
        fds = {"stdin_fd": dialled.stdin_fd, "stdout_fd": dialled.stdout_fd}
    return serve(functools.partial(default_backend, cpus), startup_error=problem,
                 watchdog_min_s=args.watchdog_min_seconds, **fds)


def _dial(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """``--connect``: the master dialled and the handshake passed (``slave.connectback``), or
    None, the reason logged."""
    from slave.connectback import DialError, dial

    host, sep, port_text = str(args.connect).rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        ap.error(f"--connect {args.connect!r}: not HOST:PORT")
    if args.token_file is None:
        ap.error("--connect needs --token-file (the run's token)")
    try:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        log.error("cannot read the token file %s: %s", args.token_file, exc)
        return None
    if not token:
        log.error("the token file %s holds no token on its first line", args.token_file)
        return None
    name = args.name or socket.gethostname()
    try:
        dialled = dial(host.strip("[]"), int(port_text), token, name)
    except DialError as exc:
        log.error("connect-back to %s as %s: %s", args.connect, name, exc)
        return None
    log.info("connected back to %s as %s", args.connect, name)
    return dialled


if __name__ == "__main__":
    sys.exit(main())
