"""How each engine really opens a LUN, seen from outside: the open file's flags in
``/proc/<worker pid>/fdinfo`` while a ``WorkerPool`` worker does I/O on it.

``libaio`` must open with ``O_DIRECT``; ``threadpool`` (asked for, or the automatic fallback on
a filesystem that refuses ``O_DIRECT``: ramfs) must not. On tmpfs (/dev/shm) the choice follows
the kernel: since Linux 6.6 tmpfs takes ``O_DIRECT`` and the LUN gets ``libaio``; before, the
fallback. Mounting the ramfs needs root: those tests skip when not root.

They run beside the others (``beside``): the flags are the open file's whenever they are read,
and the I/O that shows the workload ran is collected subinterval by subinterval until there is
some, so that a worker held off the CPU does it later.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.params import WorkloadParams
from protocol.stats import OPS
from slave.worker import WorkerPool, WorkloadInfo

pytestmark = pytest.mark.beside

SUB_NS = 300_000_000
#: subintervals collected at most, waiting for the worker's first I/O (6 s)
MOST_SUBINTERVALS = 20
LUN_BYTES = 16 << 20
PARAMS = WorkloadParams(iosequencer="random_steady", blocksize_bytes=4096, iodepth=2,
                        iops=400.0, read_fraction=1.0)


def fd_flags(pid: int, path: str) -> list[int]:
    """The ``flags`` of every fd of ``pid`` that is open on ``path``."""
    real = os.path.realpath(path)
    found = []
    fd_dir = f"/proc/{pid}/fd"
    # a process that has exited meanwhile has none
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(FileNotFoundError):
                if os.readlink(f"{fd_dir}/{fd}") != real:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                    fields = dict(line.split(":", 1) for line in fh if ":" in line)
                found.append(int(fields["flags"].strip(), 8))
    return found


def kernel_takes_o_direct(path: str) -> bool:
    """Whether an O_DIRECT open and a 4 KiB aligned read of ``path`` work (checked here, not
    with the slave's own probe)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, 4096)
        try:
            os.preadv(fd, [buf], 0)
        except OSError:
            return False
        finally:
            buf.close()
    finally:
        os.close(fd)
    return True


@pytest.fixture
def ramfs_dir(tmp_path: Path) -> Iterator[Path]:
    """A ramfs mounted on a temporary directory (ramfs has no direct I/O: an O_DIRECT open
    fails with EINVAL on every kernel); unmounted at teardown."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounting a ramfs (a filesystem that refuses O_DIRECT)")
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mnt)], check=True, timeout=60,
                   capture_output=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], timeout=60, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], timeout=60, capture_output=True)


def _lun(directory: Path | str, name: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as fh:
        fh.truncate(LUN_BYTES)
    return path


def _run_and_look(path: str, engine_choice: str) -> tuple[WorkloadInfo, list[int], int]:
    """Create one reading workload on ``path``, start I/O, read the worker's open flags of
    ``path`` in the middle of subinterval 0: (info, flags per fd, I/Os of the subintervals
    collected: subinterval 0, and the next ones until some I/O was done, at most
    ``MOST_SUBINTERVALS``)."""
    wid = f"h:{path}:r"
    with WorkerPool(1) as pool:
        info = pool.create_workload(wid, path, engine_choice, PARAMS, logical_block_bytes=512,
                                    lun_size_bytes=LUN_BYTES)
        t0 = time.monotonic_ns() + 50_000_000
        pool.go(t0, SUB_NS)
        time.sleep(max(0.0, (t0 + SUB_NS // 2 - time.monotonic_ns()) / 1e9))
        flags = fd_flags(pool.pids[info.worker], path)
        ops = 0
        for k in range(MOST_SUBINTERVALS):
            res = pool.collect(k, t0 + (k + 1) * SUB_NS + 2_000_000_000)
            ops += int(res.stats[wid].counters[:, OPS].sum())
            if ops:
                break
            pool.keep_going()
        pool.stop()
    return info, flags, ops


def test_libaio_opens_the_lun_with_o_direct(lun_file: str) -> None:
    info, flags, ops = _run_and_look(lun_file, "auto")
    assert (info.engine, info.warning) == ("libaio", None)
    assert ops > 0
    assert len(flags) == 1, flags  # one fd per LUN and engine in the worker
    assert flags[0] & os.O_DIRECT, oct(flags[0])
    assert flags[0] & os.O_ACCMODE == os.O_RDONLY  # a reading workload opens read-only
    assert flags[0] & os.O_CLOEXEC, oct(flags[0])


def test_threadpool_asked_for_opens_without_o_direct(lun_file: str) -> None:
    """Where O_DIRECT would work, the thread-pool engine still goes through the page cache."""
    info, flags, ops = _run_and_look(lun_file, "threadpool")
    assert (info.engine, info.warning) == ("threadpool", None)
    assert ops > 0
    assert len(flags) == 1 and not flags[0] & os.O_DIRECT, [oct(f) for f in flags]


def test_fallback_on_ramfs_is_threadpool_without_o_direct(ramfs_dir: Path) -> None:
    path = _lun(ramfs_dir, "lun.img")
    assert not kernel_takes_o_direct(path)
    info, flags, ops = _run_and_look(path, "auto")
    assert info.engine == "threadpool"
    assert info.warning is not None and f"LUN {path}:" in info.warning
    assert "O_DIRECT open failed" in info.warning and "thread-pool" in info.warning
    assert ops > 0
    assert len(flags) == 1 and not flags[0] & os.O_DIRECT, [oct(f) for f in flags]


def test_tmpfs_gets_libaio_exactly_where_the_kernel_takes_o_direct() -> None:
    work = Path("/dev/shm") / f"ivypy-odirect-{os.getpid()}"
    work.mkdir()
    try:
        path = _lun(work, "lun.img")
        direct = kernel_takes_o_direct(path)
        info, flags, ops = _run_and_look(path, "auto")
        assert ops > 0 and len(flags) == 1
        assert info.engine == ("libaio" if direct else "threadpool"), (direct, info)
        assert (info.warning is None) == direct, info.warning
        assert bool(flags[0] & os.O_DIRECT) == direct, oct(flags[0])
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(work / "lun.img")
        work.rmdir()
