"""A block device with a designed knee, for the DFC benchmark: a loop device over a file on a
FUSE filesystem served by this module, one request at a time, each taking a set service time.

Why: a loop device over /dev/shm on a 2-core VM has a knee, but its latency curve wanders
with the host, and is not even monotonic with 4 KiB reads. This device is one FIFO server with a
fixed service time: with Poisson arrivals (``random_independent``) it is an M/D/1 queue, whose
latency rises smoothly and monotonically as the offered IOPS approaches 1 / service time, so a
target picked on its curve has one IOPS that meets it. Its p99 over a few seconds still varies
a lot at a fixed IOPS (a queue's tail comes from a few long busy periods; docs/measure.md has
the figures), which is a property of queues, not of this device.

The path to this server (loop worker, FUSE, a Python thread) costs 0.2-2 ms per request on a
2-core VM and is not part of the schedule, so keep the service time well above it: at 1 ms a
queue of 16 gives exactly 1,000 IOPS; at 250 us it gave 1,600-4,000 depending on the queue depth.

What it is not: storage. Reads return zeros and writes are discarded (like null_blk). It speaks
the kernel's FUSE protocol on /dev/fuse directly (no libfuse), only the operations a loop device
and ``losetup`` need; anything else is answered ENOSYS. Needs root.

    python -m scripts.kneedev_impl --service-us 1000   # prints the loop device; Ctrl-C or
                                                       # kill removes it
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import errno
import os
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Final

# opcodes (linux/fuse.h)
LOOKUP, FORGET, GETATTR, SETATTR, OPEN, READ, WRITE, STATFS, RELEASE, FSYNC = (
    1, 2, 3, 4, 14, 15, 16, 17, 18, 20)
GETXATTR, LISTXATTR, FLUSH, INIT, OPENDIR, RELEASEDIR, ACCESS = 22, 23, 25, 26, 27, 29, 34
INTERRUPT, DESTROY, BATCH_FORGET = 36, 38, 42
NO_REPLY: Final = {FORGET, BATCH_FORGET, INTERRUPT}
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len opcode unique nodeid uid gid pid extlen pad
OUT_HEADER = struct.Struct("<IiQ")  # len error unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime nsecs mode nlink uid
#                                            gid rdev blksize flags
READ_IN = struct.Struct("<QQII")  # fh offset size flags (lock_owner etc. follow)
WRITE_IN = struct.Struct("<QQIIQII")  # fh offset size write_flags lock_owner flags padding
FOPEN_DIRECT_IO: Final = 1 << 0
FUSE_ASYNC_READ, FUSE_ASYNC_DIO, FUSE_MAX_PAGES = 1 << 0, 1 << 15, 1 << 22
# without ASYNC_DIO the kernel waits for each direct I/O in turn: the loop device's requests
# would reach this server one at a time, and no queue would form
INIT_FLAGS: Final = FUSE_ASYNC_READ | FUSE_ASYNC_DIO | FUSE_MAX_PAGES
ROOT_ID, FILE_ID = 1, 2
FILE_NAME: Final = b"disk"
MAX_PAGES: Final = 256  # 1 MiB requests
BUFFER_BYTES: Final = MAX_PAGES * 4096 + 8192
MS_NOSUID, MS_NODEV = 2, 4


class KneeServer:
    """The FUSE daemon, one thread. It takes every request off /dev/fuse as soon as it arrives
    (non-blocking reads), so it knows each request's arrival time, and completes READ and WRITE
    requests on a virtual one-server FIFO schedule: a request starts when it arrived or when the
    one before it completed, whichever is later, and completes ``service_ns`` after it started.
    The reply is written at that time (or as soon after as the thread wakes: a late wake-up
    delays that reply but not the schedule of the ones behind it)."""

    def __init__(self, fuse_fd: int, size_bytes: int, service_ns: int) -> None:
        self.fd = fuse_fd
        self.size_bytes = size_bytes
        self.service_ns = service_ns
        self.served = 0
        self._zeros = bytes(MAX_PAGES * 4096)
        self._busy_until = 0
        self._due: collections.deque[tuple[int, bytes]] = collections.deque()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kneedev", daemon=True)

    def _attr(self, node: int) -> bytes:
        now = int(time.time())
        if node == ROOT_ID:
            return ATTR.pack(ROOT_ID, 0, 0, now, now, now, 0, 0, 0, 0o040755, 2, 0, 0, 0, 4096, 0)
        blocks = self.size_bytes // 512
        return ATTR.pack(FILE_ID, self.size_bytes, blocks, now, now, now, 0, 0, 0, 0o100600, 1,
                         0, 0, 0, 4096, 0)

    @staticmethod
    def _message(unique: int, payload: bytes = b"", error: int = 0) -> bytes:
        return OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload

    def _write(self, message: bytes) -> None:
        with contextlib.suppress(FileNotFoundError):  # the request was interrupted
            os.write(self.fd, message)

    def _reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        self._write(self._message(unique, payload, error))

    def _schedule(self, arrived_ns: int, message: bytes) -> None:
        done = max(arrived_ns, self._busy_until) + self.service_ns
        self._busy_until = done
        self._due.append((done, message))

    def _handle(self, op: int, unique: int, node: int, body: memoryview, now_ns: int) -> None:
        if op == INIT:
            _major, minor = struct.unpack_from("<II", body)
            minor = min(minor, 38)
            out = struct.pack("<IIIIHHIIHHII24x", 7, minor, 0, INIT_FLAGS, 64, 48,
                              MAX_PAGES * 4096, 1, MAX_PAGES, 0, 0, 0)
            self._reply(unique, out)
        elif op == LOOKUP:
            if node == ROOT_ID and bytes(body).rstrip(b"\0") == FILE_NAME:
                self._reply(unique, struct.pack("<QQQQII", FILE_ID, 0, 3600, 3600, 0, 0)
                            + self._attr(FILE_ID))
            else:
                self._reply(unique, error=errno.ENOENT)
        elif op in (GETATTR, SETATTR):
            self._reply(unique, struct.pack("<QII", 3600, 0, 0) + self._attr(node))
        elif op in (OPEN, OPENDIR):
            self._reply(unique, struct.pack("<QIi", 0, FOPEN_DIRECT_IO if op == OPEN else 0, 0))
        elif op == READ:
            _, offset, size, _ = READ_IN.unpack_from(body)
            size = max(0, min(size, self.size_bytes - offset, len(self._zeros)))
            self._schedule(now_ns, self._message(unique, self._zeros[:size]))
        elif op == WRITE:
            size = WRITE_IN.unpack_from(body)[2]
            self._schedule(now_ns, self._message(unique, struct.pack("<II", size, 0)))
        elif op == STATFS:
            blocks = self.size_bytes // 4096
            self._reply(unique, struct.pack("<QQQQQIIII24x", blocks, 0, 0, 2, 0, 4096, 255,
                                            4096, 0))
        elif op in (RELEASE, RELEASEDIR, FLUSH, FSYNC, ACCESS):
            self._reply(unique)
        elif op == DESTROY:
            self._reply(unique)
            raise EOFError
        elif op not in NO_REPLY:
            self._reply(unique, error=errno.ENOSYS)

    def _read_all(self, buf: bytearray, view: memoryview) -> bool:
        """Take every request waiting in the kernel; False once the filesystem is gone."""
        while True:
            try:
                n = os.readv(self.fd, [buf])
            except BlockingIOError:
                return True
            except OSError as e:
                if e.errno in (errno.EINTR, errno.ENOENT):
                    continue
                if e.errno == errno.ENODEV:  # unmounted
                    return False
                raise
            if n == 0:
                return False
            _, op, unique, node, *_ = IN_HEADER.unpack_from(buf)
            self._handle(op, unique, node, view[IN_HEADER.size:n], time.monotonic_ns())

    def _run(self) -> None:
        # the stop signals are the main thread's: one delivered here would leave the main
        # thread waiting for it forever (main's sigwait)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        buf = bytearray(BUFFER_BYTES)
        view = memoryview(buf)
        due = self._due
        os.set_blocking(self.fd, False)
        try:
            while True:
                now = time.monotonic_ns()
                while due and due[0][0] <= now:
                    _, message = due.popleft()
                    self._write(message)
                    self.served += 1
                wait_s = (due[0][0] - now) / 1e9 if due else None
                readable, _, _ = select.select([self.fd], [], [], wait_s)
                if readable and not self._read_all(buf, view):
                    return
        except EOFError:
            return
        except BaseException as e:  # reported by knee_device on exit
            self.error = e


#: What stops ``python -m scripts.kneedev_impl`` (cleaning up as it goes).
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _mount(fuse_fd: int, mountpoint: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fuse_fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"ivypy-knee", mountpoint.encode(), b"fuse.ivypy-knee",
                  MS_NOSUID | MS_NODEV, opts) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount fuse on {mountpoint}: {os.strerror(e)}")


@contextlib.contextmanager
def knee_device(size_bytes: int, service_us: float) -> Iterator[str]:
    """A loop device (direct I/O) over a FUSE file whose every request takes ``service_us``;
    yields its path, and removes loop device, mount and server on exit."""
    mnt = tempfile.mkdtemp(prefix="ivypy-knee-")
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    server = KneeServer(fd, size_bytes, int(service_us * 1000))
    loop = ""
    mounted = False
    try:
        _mount(fd, mnt)
        mounted = True
        server.thread.start()
        path = os.path.join(mnt, FILE_NAME.decode())
        loop = subprocess.run(["losetup", "--direct-io=on", "--find", "--show", path],
                              check=True, capture_output=True, text=True).stdout.strip()
        yield loop
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
            # the loop device lets go of its file asynchronously
            for _ in range(100):
                if not subprocess.run(["losetup", "-j", os.path.join(mnt, "disk")],
                                      capture_output=True, text=True).stdout.strip():
                    break
                time.sleep(0.02)
        if mounted:
            subprocess.run(["umount", "-l", mnt], check=False)
        server.thread.join(timeout=2)
        os.close(fd)
        os.rmdir(mnt)
    if server.error is not None:
        raise RuntimeError(f"kneedev server failed: {server.error!r}") from server.error


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--service-us", type=float, default=1000.0,
                    help="service time of every request (the knee is at 1e6 / this IOPS); keep "
                         "it well above the path's own 0.2-2 ms per request")
    ap.add_argument("--size-mib", type=int, default=1024)
    args = ap.parse_args()

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # kill and a closed terminal clean up as Ctrl-C does (a background job started from a
    # script ignores SIGINT, so `kill` is how it is stopped)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    with contextlib.suppress(KeyboardInterrupt), knee_device(args.size_mib << 20,
                                                             args.service_us) as dev:
        # from here a stop signal waits, pending, for sigwait: none can slip in between the
        # print and the wait, or go to the server thread (which blocks them too)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        print(dev, flush=True)
        signal.sigwait(STOP_SIGNALS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
