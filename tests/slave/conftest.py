"""Fixtures for tests on real loop devices over files in /dev/shm.

- ``loop_device(size_bytes, *, prepare=None, partscan=False, fill=None) -> LoopDevice``: a
  factory. Creates a backing file of zeros, every byte written (or, given ``fill``, the file
  ``fill(backing_path)`` writes whole in their place), in a private /dev/shm directory, lets
  ``prepare(backing_path)`` write into it before attaching (a partition table, a signature ...),
  attaches it with ``losetup``. At teardown, always: unmounts whatever is still mounted from the
  device or its partitions, detaches it and removes the backing file, even when the test failed.
- ``ext4_loop_device``: a 32 MiB loop device formatted with ``mkfs.ext4 -q``.
- ``mounted_loop_device``: that ext4 device mounted on a temporary directory (unmounted at
  teardown before the device is detached).
- ``lun_file``: a 16 MiB file LUN, every byte written, on a filesystem that takes O_DIRECT: as
  root, ext4 on a loop device over a written file in /dev/shm (one for the session,
  ``shm_ext4``); else the temporary directory's file system.

- A test marked ``alone`` (the real-time ones) whose check fails while the hypervisor took
  more than 1 % of the machine's CPUs over its call measured the host (``tests.slave.steal``):
  it runs once more, its fixtures made anew, and that run is its result; where the host took
  the CPUs that time too, it is reported as skipped, with the check and both shares. Quiet,
  it fails; and so does one that made a ``VirtualClock`` (virtual time: the host cannot move
  its results). The summary at the end lists every test run twice so, with its result.

- ``_collector_quiet`` (every test here): before each test, Python's garbage collector
  collects what the tests before left, then freezes every object there is (``gc.freeze``), so
  that a collection during the test looks only at the test's own objects. The engine's tests
  run its loops in the pytest process, where a full collection over the session's objects held
  the process 44-232 ms, 26 times in one run of tests/slave: a loop held up over a boundary
  issued a tenth of a second of I/Os fewer (or caught up in the next subinterval), and a test of
  its rate failed.

Tests that use these skip with a clear reason when not root. As root, missing tools (losetup,
mkfs.ext4, mount), missing loop device support or a failure to attach fail the test. Other test
directories can reuse them with ``pytest_plugins = ["tests.slave.conftest"]`` style imports or
by moving this file up.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from slave.engine import compiled_loop as pk
from slave.engine.clock import VirtualClock
from slave.engine.files import direct_io_works
from slave.engine.layout import LoopArgs
from slave.engine.loop_native import NativeLoop
from tests.slave.steal import HostSteal, excuse

MIB = 1024 * 1024


@dataclass(frozen=True)
class LoopDevice:
    """A loop device attached for a test."""

    path: str
    name: str
    backing_file: str
    size_bytes: int


@dataclass(frozen=True)
class MountedLoop:
    """A loop device with a file system mounted at ``mount_point``."""

    device: LoopDevice
    mount_point: str


LoopFactory = Callable[..., LoopDevice]


def count_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, how many times the compiled loop ran (``compiled_loop.run``): one word,
    counted until ``monkeypatch`` undoes it."""
    runs = [0]
    run = pk.run

    def counting(args: LoopArgs) -> int:
        runs[0] += 1
        return run(args)

    monkeypatch.setattr(pk, "run", counting)
    return runs


def require_here(why: str | None) -> None:
    """What a test needs is here (``why`` None), else: as root (CI), a failure naming ``why``;
    not root, a skip."""
    if why is None:
        return
    if os.geteuid() == 0:
        pytest.fail(f"as root this is a failure, not a skip: {why}")
    pytest.skip(f"{why}; not root, so skipped (as root this fails)")


_STEAL = pytest.StashKey[float]()
_VIRTUAL = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The share of the CPUs the host took while the test ran, and whether it made a
    ``VirtualClock`` (then it ran on virtual time)."""
    made: list[VirtualClock] = []
    init = VirtualClock.__init__

    def watched(clock: VirtualClock, *args: Any, **kwargs: Any) -> None:
        made.append(clock)
        init(clock, *args, **kwargs)

    VirtualClock.__init__ = watched  # type: ignore[method-assign]
    try:
        with HostSteal() as steal:
            yield
    finally:
        VirtualClock.__init__ = init  # type: ignore[method-assign]
    item.stash[_STEAL] = steal.share
    item.stash[_VIRTUAL] = bool(made)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A real-time test's failed check while the host took the CPUs: a skip that says so
    (``pytest_runtest_protocol`` runs the test again first)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (report.when == "call" and report.failed and item.get_closest_marker("alone")
            and call.excinfo is not None and call.excinfo.errisinstance(AssertionError)):
        share = item.stash.get(_STEAL, 0.0)
        why = excuse(share, call.excinfo.exconly(), item.stash.get(_VIRTUAL, False))
        if why is not None:
            first = item.stash.get(_FIRST_SHARE, None)
            if first is not None:
                why = f"run twice (the first time the host took {first:.1%}); {why}"
            item.stash[_EXCUSED] = share
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {why}")


_EXCUSED = pytest.StashKey[float]()  # the host's share in a run whose failed check it excused
_FIRST_SHARE = pytest.StashKey[float]()  # the same, of the first of two runs
_RUN_TWICE = pytest.StashKey[list[tuple[str, float, str]]]()  # (test, first share, result)


def _excusable(item: pytest.Item) -> bool:
    """Whether ``pytest_runtest_makereport`` above may excuse ``item``: a test of real time in
    its reach (``config.hook`` calls ``pytest_runtest_protocol`` for every test)."""
    return item.get_closest_marker("alone") is not None and any(
        impl.function is pytest_runtest_makereport
        for impl in item.ihook.pytest_runtest_makereport.get_hookimpls())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A real-time test whose failed check the host's steal excused runs once more, set up
    anew (as pytest-rerunfailures runs a test again); the second run's reports are its result,
    the first run's are not logged (its captured output stays, before the second run's). Every
    other test runs as pytest runs it."""
    if not _excusable(item):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    first = item.stash.get(_EXCUSED, None)
    if first is not None and not any(r.failed for r in reports):  # set up and torn down
        del item.stash[_EXCUSED]
        item.stash[_FIRST_SHARE] = first
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        result = "failed" if any(r.failed for r in reports) else next(
            (r.outcome for r in reports if r.when == "call"), reports[0].outcome)
        item.config.stash.setdefault(_RUN_TWICE, []).append((item.nodeid, first, result))
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The tests of real time run twice because the host took the CPUs in their first run."""
    runs = terminalreporter.config.stash.get(_RUN_TWICE, [])
    if runs:
        terminalreporter.section("run twice: a check failed while the host took the CPUs")
        for nodeid, share, result in runs:
            terminalreporter.line(f"{nodeid}: {share:.1%} the first time; then {result}")


@pytest.fixture(autouse=True)
def _collector_quiet() -> None:
    gc.collect()
    gc.freeze()


@pytest.fixture
def retimes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the loop retimed workloads in the kernel (``compiled_loop.retime``)."""
    n = [0]
    retime = pk.retime

    def counting(*a: object) -> None:
        n[0] += 1
        retime(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(pk, "retime", counting)
    return n


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many I/Os the kernel generated, counted as the loop takes them back (one word)."""
    made = [0]
    take_back = NativeLoop.take_back

    def counting(cp: NativeLoop, i: int) -> None:
        made[0] += int(cp.gen["made"][i])
        take_back(cp, i)

    monkeypatch.setattr(NativeLoop, "take_back", counting)
    return made


def require_tools(*tools: str) -> None:
    """Skip the calling test when not root; as root (CI), fail it unless every tool is installed
    (``scripts/test`` installs them) and the kernel has loop devices."""
    if os.geteuid() != 0:
        pytest.skip("not root: loop devices can only be attached by root")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"needs {', '.join(missing)} (not installed; scripts/test installs it), "
                    "and as root that is a failure, not a skip")
    if not os.path.exists("/dev/loop-control") and not os.path.exists("/dev/loop0"):
        pytest.fail("no loop device support (/dev/loop-control missing), and as root that is "
                    "a failure, not a skip")


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def write_zeros(path: str, size_bytes: int) -> None:
    """A file of ``size_bytes`` zeros, every byte written: a hole in a tmpfs file reads as the
    shared zero page without touching memory of its own, which flatters every number measured
    on it (the loop device over it then answers reads faster than a written device would)."""
    chunk = bytes(min(size_bytes, 1 << 20))
    with open(path, "wb") as fh:
        left = size_bytes
        while left > 0:
            left -= fh.write(chunk[:left])


def settle() -> None:
    """Wait for udev (where it runs) to finish probing, so its workers do not show in open_by."""
    if shutil.which("udevadm"):
        subprocess.run(["udevadm", "settle", "--timeout=10"], capture_output=True, timeout=30,
                       check=False)


def _mounted_from(name: str) -> list[str]:
    """Mount points whose source is /dev/<name> or one of its partitions, innermost first."""
    devs = set()
    sys_dir = Path("/sys/block") / name
    for entry in [sys_dir, *sys_dir.glob(f"{name}*")]:
        with contextlib.suppress(OSError):
            devs.add((entry / "dev").read_text().strip())
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            sep = fields.index("-")
            source = fields[sep + 2]
            if fields[2] in devs or source == f"/dev/{name}" or source.startswith(f"/dev/{name}p"):
                found.append(fields[4].replace("\\040", " "))
    return list(reversed(found))


def unmount(mount_point: str) -> None:
    """Unmount, falling back to a lazy unmount so teardown never leaves the device busy."""
    proc = subprocess.run(["umount", mount_point], capture_output=True, timeout=60, check=False)
    if proc.returncode != 0:
        subprocess.run(["umount", "-l", mount_point], capture_output=True, timeout=60, check=False)


@pytest.fixture
def loop_device() -> Iterator[LoopFactory]:
    """Factory: ``loop_device(size_bytes, *, prepare=None, partscan=False, fill=None) ->
    LoopDevice``, over a file in /dev/shm written whole with zeros (or by ``fill(path)``, which
    must write every byte of ``size_bytes``; the size is checked) before ``prepare`` (if any)
    runs on it."""
    require_tools("losetup")
    work_dir = tempfile.mkdtemp(prefix="ivypy-test-", dir="/dev/shm")
    attached: list[LoopDevice] = []

    def make(
        size_bytes: int,
        *,
        prepare: Callable[[str], None] | None = None,
        partscan: bool = False,
        fill: Callable[[str], None] | None = None,
    ) -> LoopDevice:
        backing = os.path.join(work_dir, f"lun{len(attached)}.img")
        if fill is None:
            write_zeros(backing, size_bytes)
        else:
            fill(backing)
            assert os.path.getsize(backing) == size_bytes, f"{fill} wrote another size"
        if prepare is not None:
            prepare(backing)
        argv = ["losetup", "--find", "--show", *(["--partscan"] if partscan else []), backing]
        path = _run(*argv).strip()
        device = LoopDevice(path, os.path.basename(path), backing, size_bytes)
        attached.append(device)
        settle()
        return device

    try:
        yield make
    finally:
        for device in reversed(attached):
            for mount_point in _mounted_from(device.name):
                unmount(mount_point)
            # state the kernel keeps on the loop device after a detach, which would trip the
            # next test that gets the same device: read-only flag, partitions added by partx
            for argv in (["blockdev", "--setrw", device.path], ["partx", "-d", device.path]):
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(argv, capture_output=True, timeout=60, check=False)
            subprocess.run(["losetup", "-d", device.path], capture_output=True, timeout=60,
                           check=False)
        shutil.rmtree(work_dir, ignore_errors=True)


@pytest.fixture
def ext4_loop_device(loop_device: LoopFactory) -> LoopDevice:
    """A 32 MiB loop device carrying an ext4 file system."""
    require_tools("losetup", "mkfs.ext4")
    device = loop_device(32 * MIB)
    _run("mkfs.ext4", "-q", "-F", device.path)
    settle()
    return device


@pytest.fixture
def mounted_loop_device(ext4_loop_device: LoopDevice, tmp_path: Path) -> Iterator[MountedLoop]:
    """The ext4 loop device mounted on a temporary directory; unmounted at teardown."""
    require_tools("losetup", "mkfs.ext4", "mount", "umount")
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    _run("mount", ext4_loop_device.path, str(mount_point))
    settle()
    try:
        yield MountedLoop(ext4_loop_device, str(mount_point))
    finally:
        unmount(str(mount_point))


@pytest.fixture(scope="session")
def shm_ext4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """As root: an ext4 file system on a loop device over a 256 MiB file in /dev/shm, every
    byte written, mounted for the session (on the host's own disk every figure measured on a
    file LUN would be the virtual disk's, and a sparse file's holes answer reads without
    I/O). Not root: None (``lun_file`` then uses the temporary directory's file system)."""
    if os.geteuid() != 0:
        yield None
        return
    require_tools("losetup", "mkfs.ext4", "mount", "umount")
    image = f"/dev/shm/ivypy-test-ext4-{os.getpid()}.img"
    mount_point = tmp_path_factory.mktemp("shm-ext4")
    write_zeros(image, 256 * MIB)
    try:
        _run("mkfs.ext4", "-q", "-F", image)
        _run("mount", "-o", "loop", image, str(mount_point))  # the loop device goes at umount
        try:
            yield str(mount_point)
        finally:
            unmount(str(mount_point))
    finally:
        os.unlink(image)


@pytest.fixture
def lun_file(tmp_path_factory: pytest.TempPathFactory, shm_ext4: str | None) -> Iterator[str]:
    """A 16 MiB file, every byte written (``write_zeros``), on a filesystem that takes
    O_DIRECT (``shm_ext4`` as root, else tmp, /var/tmp or /dev/shm). Where none does: skipped
    when not root, a failure naming each one's reason as root."""
    why_not: list[str] = []
    dirs = [shm_ext4] if shm_ext4 is not None else [
        str(tmp_path_factory.mktemp("lun")), "/var/tmp", "/dev/shm"]
    for d in dirs:
        path = os.path.join(d, f"ivypy-test-lun-{os.getpid()}.img")
        write_zeros(path, 16 * MIB)
        why = direct_io_works(path, 512)
        if why is None:
            yield path
            os.unlink(path)
            return
        why_not.append(f"{d}: {why}")
        os.unlink(path)
    reason = f"no filesystem here takes O_DIRECT ({'; '.join(why_not)})"
    if os.geteuid() == 0:
        pytest.fail(f"{reason}; as root that is a failure, not a skip")
    pytest.skip(f"{reason}; not root, so skipped (as root this fails)")


@pytest.fixture
def ramfs(tmp_path: Path) -> Iterator[Path]:
    """A ramfs mount: a real file system without user extended attributes (ivypy's mark on a
    file LUN cannot be set there)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a ramfs")
    mount = tmp_path / "ramfs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
