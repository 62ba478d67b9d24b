"""Opening LUNs for the engines: size and logical block size probes, O_DIRECT opens.

Owns the translation of ``OSError`` from ``open`` / ``ioctl`` into ``IoEngineError`` naming the
LUN. It must not decide which workloads may write (that is the preflight's job, done before a
workload reaches the engine).
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass

from protocol.errors import IoEngineError

_BLKSSZGET = 0x1268
_BLKGETSIZE64 = 0x80081272


@dataclass(frozen=True)
class LunGeometry:
    size_bytes: int
    logical_block_bytes: int
    is_block_device: bool


def probe(path: str) -> LunGeometry:
    """Size and logical block size of a block device or regular file."""
    try:
        st = os.stat(path)
        if stat.S_ISBLK(st.st_mode):
            fd = os.open(path, os.O_RDONLY)
            try:
                size = struct.unpack("Q", fcntl.ioctl(fd, _BLKGETSIZE64, b"\0" * 8))[0]
                lbs = struct.unpack("i", fcntl.ioctl(fd, _BLKSSZGET, b"\0" * 4))[0]
            finally:
                os.close(fd)
            return LunGeometry(int(size), int(lbs), True)
        if stat.S_ISREG(st.st_mode):
            return LunGeometry(int(st.st_size), 512, False)
    except OSError as exc:
        raise IoEngineError(f"LUN {path}: {exc.strerror} (errno {exc.errno})") from exc
    raise IoEngineError(f"LUN {path} is neither a block device nor a regular file")


def open_lun(path: str, *, writable: bool, extra_flags: int) -> int:
    """Open ``path`` for the engine; raises ``IoEngineError`` with the reason."""
    flags = (os.O_RDWR if writable else os.O_RDONLY) | extra_flags | os.O_CLOEXEC
    try:
        return os.open(path, flags)
    except OSError as exc:
        direct = " with O_DIRECT" if extra_flags & os.O_DIRECT else ""
        raise IoEngineError(
            f"LUN {path}: cannot open {'read-write' if writable else 'read-only'}{direct}: "
            f"{exc.strerror} (errno {exc.errno})"
        ) from exc


def direct_io_works(path: str, logical_block_bytes: int) -> str | None:
    """``None`` when an O_DIRECT read of the first block of ``path`` works, else why not."""
    import mmap

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as exc:
        return f"O_DIRECT open failed: {exc.strerror} (errno {exc.errno})"
    try:
        buf = mmap.mmap(-1, max(mmap.PAGESIZE, logical_block_bytes))
        try:
            os.preadv(fd, [memoryview(buf)[:logical_block_bytes]], 0)
        except OSError as exc:
            return f"O_DIRECT read failed: {exc.strerror} (errno {exc.errno})"
        finally:
            buf.close()
    finally:
        os.close(fd)
    return None
