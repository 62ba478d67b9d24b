"""Tests for slave/luns.py and the evidence of use it gathers (slave/lun_usage.py): a fake sysfs
tree (table), file LUNs, real loop devices (root); LunInfo's wire form is in test_lun_info.py,
signatures in test_signatures.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from protocol.errors import PreflightError
from slave.lun_mark import MARK_XATTR
from slave.lun_usage import read_mounts
from slave.luns import (
    LunInfo,
    describe_block_device,
    discover_block_devices,
    file_lun,
    lun_for_path,
    scan_open_files,
)
from tests.slave.sigimages import MBR_MAGIC, Poke, ext_pokes, image_bytes, mbr_entry

if TYPE_CHECKING:
    from tests.slave.conftest import LoopDevice, LoopFactory, MountedLoop

MIB = 1024 * 1024


@contextlib.contextmanager
def _held_open(path: str | Path) -> Iterator[int]:
    """``path`` held open (read-only) by another process for the block: yields its pid."""
    with open(path, "rb") as fh, subprocess.Popen(["sleep", "30"], stdin=fh) as proc:
        try:
            yield proc.pid
        finally:
            proc.kill()

# ------------------------------------------------------------------------------------------------
# A fake sysfs / proc / dev tree
# ------------------------------------------------------------------------------------------------


class FakeHost:
    """Builds a sysfs, proc and dev tree under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.dev = root / "dev"
        for d in (self.sys / "block", self.proc / "self", self.dev):
            d.mkdir(parents=True)
        self.mountinfo: list[str] = []
        self.swaps = ["Filename\tType\tSize\tUsed\tPriority"]

    def disk(self, name: str, sectors: int | str | None, dev: str, **attrs: str | bytes) -> Path:
        return self._node(self.sys / "block" / name, sectors, dev, attrs)

    def part(self, disk: str, name: str, sectors: int | str, dev: str,
             **attrs: str | bytes) -> Path:
        d = self._node(self.sys / "block" / disk / name, sectors, dev, attrs)
        (d / "partition").write_text("1\n")
        return d

    def _node(self, d: Path, sectors: int | str | None, dev: str,
              attrs: dict[str, str | bytes]) -> Path:
        (d / "holders").mkdir(parents=True)
        if sectors is not None:
            (d / "size").write_text(f"{sectors}\n")
        (d / "dev").write_text(dev + "\n")
        (d / "ro").write_text("0\n")
        for key, value in attrs.items():
            path = d / key.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value + "\n")
        return d

    def image(self, name: str, pokes: list[Poke], size_bytes: int = 128 * 1024) -> str:
        path = self.dev / name
        path.write_bytes(bytes(image_bytes(pokes, size_bytes)))
        return str(path)

    def mount(self, dev: str, mount_point: str, source: str) -> None:
        n = len(self.mountinfo) + 20
        self.mountinfo.append(
            f"{n} 1 {dev} / {mount_point.replace(' ', chr(92) + '040')} rw - ext4 {source} rw")

    def process(self, pid: int, comm: str, targets: list[str]) -> None:
        fd_dir = self.proc / str(pid) / "fd"
        fd_dir.mkdir(parents=True)
        (self.proc / str(pid) / "comm").write_text(comm + "\n")
        for i, target in enumerate(targets):
            os.symlink(target, fd_dir / str(i))

    def finish(self) -> None:
        (self.proc / "self" / "mountinfo").write_text("\n".join(self.mountinfo) + "\n")
        (self.proc / "swaps").write_text("\n".join(self.swaps) + "\n")

    def discover(self) -> dict[str, LunInfo]:
        self.finish()
        luns = discover_block_devices(str(self.sys), str(self.proc), dev_root=str(self.dev),
                                      use_blkid=False)
        return {lun.name: lun for lun in luns}


def _queue(lbs: int, pbs: int, rotational: str) -> dict[str, str]:
    return {"queue__logical_block_size": str(lbs), "queue__physical_block_size": str(pbs),
            "queue__rotational": rotational}


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    h = FakeHost(tmp_path)
    vpd = bytes([0, 0x80, 0, 8]) + b"ZA1234  "
    h.disk("sda", 2 * MIB, "8:0", device__vendor="ATA     ", device__model="ST1000DM003 ",
           device__vpd_pg80=vpd, device__wwid="naa.5000c500a1b2c3d4", **_queue(512, 4096, "1"))
    h.part("sda", "sda1", 2048, "8:1")
    h.part("sda", "sda3", "vanished", "8:3")  # a partition that cannot be read is skipped
    sda2 = h.part("sda", "sda2", 4096, "8:2")
    (sda2 / "holders" / "dm-0").mkdir()
    h.image("sda", [mbr_entry(0, 0, 0x83, 2048, 2048), mbr_entry(1, 0, 0x8E, 4096, 4096),
                    MBR_MAGIC])
    h.image("sda1", ext_pokes(compat=0x4, incompat=0x40))
    h.image("sda2", [(512, b"LABELONE"), (536, b"LVM2 001")])
    h.mount("8:1", "/boot efi", str(h.dev / "sda1"))

    h.disk("nvme0n1", 4 * MIB, "259:0", device__model="Samsung SSD 980", device__serial="S64D",
           wwid="eui.002538", **_queue(4096, 4096, "0"))
    h.image("nvme0n1", [])
    h.disk("nvme0c0n1", 4 * MIB, "259:9", hidden="1", **_queue(4096, 4096, "0"))

    h.disk("dm-0", 4096, "253:0", dm__uuid="LVM-abcdef", dm__name="vg-lv", **_queue(512, 4096, "1"))
    h.image("dm-0", [(0, b"XFSB")])
    (h.dev / "mapper").mkdir()
    os.symlink("../dm-0", h.dev / "mapper" / "vg-lv")
    h.mount("0:42", "/data", str(h.dev / "mapper" / "vg-lv"))  # btrfs-like anonymous dev

    h.disk("md0", 8192, "9:0", **_queue(512, 512, "0"))
    h.image("md0", [(4086, b"SWAPSPACE2")])
    h.swaps.append(f"{h.dev / 'md0'}\tpartition\t4096\t0\t-2")

    h.disk("loop0", 2048, "7:0", loop__backing_file="/srv/images/lun 0.img",
           **_queue(512, 512, "0"))
    h.image("loop0", [])
    h.disk("loop1", 0, "7:1", **_queue(512, 512, "0"))  # unattached: skipped
    h.disk("sr0", 0, "11:0", **_queue(2048, 2048, "1"))  # no medium: skipped
    h.disk("vdb", 1024, "252:16", serial="virtio-serial-7", **_queue(512, 512, "1"))
    # no /dev/vdb node: contents unknown
    h.disk("vdc", None, "252:32")  # vanished mid-scan: no size
    h.disk("vdd", "garbage", "252:48")  # unreadable size

    # a multipath leg with a partition node: the partition is not held, its disk is
    h.disk("sdb", 8192, "8:16", **_queue(512, 512, "1"))
    (h.sys / "block" / "sdb" / "holders" / "dm-1").mkdir()
    h.part("sdb", "sdb1", 4096, "8:17")
    h.image("sdb", [mbr_entry(0, 0, 0x83, 2048, 4096), MBR_MAGIC])
    h.image("sdb1", [])

    h.process(4242, "fio", [str(h.dev / "loop0"), "/dev/null"])
    h.process(4244, "qemu", [str(h.dev / "sdb")])
    h.process(4243, "dd", [str(h.dev / "dm-0")])  # the kernel shows the resolved node
    h.process(os.getpid(), "self", [str(h.dev / "nvme0n1")])  # ourselves: ignored
    return h


FAKE_EXPECTED: dict[str, dict[str, Any]] = {
    "sda": dict(size_bytes=2 * MIB * 512, logical_block_bytes=512, physical_block_bytes=4096,
                rotational=True, vendor="ATA", model="ST1000DM003", serial="ZA1234",
                wwid="naa.5000c500a1b2c3d4", dev="8:0", parent="",
                partitions=("sda1", "sda2", "sda3"),
                holders=(), mount_points=(), signature="dos", open_by=(), probe_error=""),
    "sda1": dict(size_bytes=2048 * 512, physical_block_bytes=4096, rotational=True, vendor="ATA",
                 serial="ZA1234", parent="sda", partitions=(), mount_points=("/boot efi",),
                 signature="ext4"),
    "sda2": dict(parent="sda", holders=("dm-0",), signature="LVM2_member", mount_points=()),
    "nvme0n1": dict(size_bytes=4 * MIB * 512, logical_block_bytes=4096, rotational=False,
                    vendor="", model="Samsung SSD 980", serial="S64D", wwid="eui.002538",
                    signature="", open_by=(), mount_points=()),
    "dm-0": dict(wwid="LVM-abcdef", signature="xfs", mount_points=("/data",),
                 open_by=("4243:dd",)),
    "md0": dict(signature="swap", mount_points=("[swap]",)),
    "loop0": dict(backing_file="/srv/images/lun 0.img", signature="", open_by=("4242:fio",),
                  size_bytes=2048 * 512),
    "vdb": dict(serial="virtio-serial-7", signature="", probe_error_prefix="cannot open"),
    "sdb": dict(holders=("dm-1",), partitions=("sdb1",), open_by=("4244:qemu",),
                disk_holders=(), disk_open_by=()),
    "sdb1": dict(parent="sdb", holders=(), open_by=(), signature="", disk_holders=("dm-1",),
                 disk_open_by=("4244:qemu",)),
}


def test_fake_tree_finds_exactly_the_usable_devices(fake_host: FakeHost) -> None:
    found = fake_host.discover()
    assert sorted(found) == sorted(FAKE_EXPECTED)
    names = list(found)
    assert names.index("sda") < names.index("sda1") < names.index("sda2")


@pytest.mark.parametrize("name", sorted(FAKE_EXPECTED))
def test_fake_tree_attributes(fake_host: FakeHost, name: str) -> None:
    lun = fake_host.discover()[name]
    assert lun.kind == "block"
    assert lun.path == str(fake_host.dev / name)
    for key, expected in FAKE_EXPECTED[name].items():
        if key == "probe_error_prefix":
            assert lun.probe_error.startswith(expected), lun.probe_error
        else:
            assert getattr(lun, key) == expected, key


@pytest.mark.parametrize(("globs", "expected"), [
    (["*"], sorted(FAKE_EXPECTED)),
    ([], []),
    (["{dev}/sda"], ["sda"]),  # the disk, not its partitions
    (["{dev}/sda?"], ["sda1", "sda2"]),  # its partitions, not the disk
    (["{dev}/nvme*", "{dev}/loop0", "{dev}/loop0"], ["loop0", "nvme0n1"]),
    (["{dev}/nvme0c0n1", "{dev}/loop1", "{dev}/nonesuch"], []),  # skipped as with "*"
    (["/dev/sda"], []),  # a path, not a name: this tree's nodes are elsewhere
])
def test_fake_tree_only_the_devices_the_globs_match_are_read(
        fake_host: FakeHost, monkeypatch: pytest.MonkeyPatch, globs: list[str],
        expected: list[str]) -> None:
    import slave.lun_usage as usage

    probed: list[str] = []
    real = usage.probe_paths

    def probe_paths(targets: list[Any], **kwargs: Any) -> Any:
        probed.extend(t.path for t in targets)
        return real(targets, **kwargs)

    monkeypatch.setattr(usage, "probe_paths", probe_paths)
    fake_host.finish()
    paths = [g.format(dev=fake_host.dev) for g in globs]
    luns = discover_block_devices(str(fake_host.sys), str(fake_host.proc),
                                  dev_root=str(fake_host.dev), use_blkid=False, paths=paths)
    assert sorted(lun.name for lun in luns) == expected
    assert sorted(probed) == sorted(str(fake_host.dev / name) for name in expected)
    for lun in luns:  # described as in the whole tree
        for key, value in FAKE_EXPECTED[lun.name].items():
            if key != "probe_error_prefix":
                assert getattr(lun, key) == value, (lun.name, key)


def test_fake_tree_unreadable_sysfs_and_proc(tmp_path: Path) -> None:
    """Missing sysfs, proc or dev roots give an empty or partial answer, not a crash."""
    assert discover_block_devices(str(tmp_path / "nosys"), str(tmp_path / "noproc"),
                                  use_blkid=False) == []
    h = FakeHost(tmp_path / "h")
    h.disk("sdz", 100, "8:240", **_queue(512, 512, "1"))
    # no mountinfo, no swaps, no dev node
    luns = discover_block_devices(str(h.sys), str(h.proc), dev_root=str(h.dev), use_blkid=False)
    assert [lun.name for lun in luns] == ["sdz"]
    assert luns[0].probe_error


# ------------------------------------------------------------------------------------------------
# File LUNs
# ------------------------------------------------------------------------------------------------


def test_file_lun_created_sparse_at_requested_size(tmp_path: Path) -> None:
    path = tmp_path / "lun.dat"
    lun = file_lun(str(path), 64 * MIB, create=True)
    assert path.stat().st_size == 64 * MIB
    assert path.stat().st_blocks * 512 < MIB  # sparse
    assert (lun.kind, lun.name, lun.path, lun.size_bytes) == ("file", "lun.dat", str(path),
                                                              64 * MIB)
    assert 512 <= lun.logical_block_bytes <= 4096
    assert lun.logical_block_bytes & (lun.logical_block_bytes - 1) == 0
    assert (lun.signature, lun.partitions, lun.holders, lun.open_by) == ("", (), (), ())
    assert lun.attributes()["kind"] == "file"


def test_a_resumed_runs_file_is_its_own_while_it_is_the_same_file(tmp_path: Path) -> None:
    """``created_as`` (the ``file_id`` a resumed run recorded when it made the file) makes an
    existing non-empty file without ivypy's mark (its file system keeps none) the run's own;
    another file put at the same path is not, nor the same file with a mark saying it was
    resized since."""
    path = tmp_path / "lun.dat"
    made = file_lun(str(path), MIB, create=True)
    assert made.created and made.file_id == f"{path.stat().st_dev}:{path.stat().st_ino}"
    with open(path, "r+b") as fh:  # the first session wrote it
        fh.write(b"x" * MIB)
    marked = os.getxattr(path, MARK_XATTR)
    os.removexattr(path, MARK_XATTR)  # as on a file system without user extended attributes
    assert not file_lun(str(path), MIB).created  # a later describe without the claim
    assert file_lun(str(path), MIB, created_as=made.file_id).created
    os.setxattr(path, MARK_XATTR, marked)
    os.truncate(path, 2 * MIB)  # someone resized it: the mark says so, and it outweighs the claim
    resized = file_lun(str(path), MIB, created_as=made.file_id)
    assert not resized.created and resized.mark == "resized"
    other = tmp_path / "other.dat"
    other.write_bytes(b"y" * MIB)
    os.replace(other, path)  # someone's file now stands at the path
    again = file_lun(str(path), MIB, created_as=made.file_id)
    assert not again.created and again.file_id != made.file_id


def test_file_lun_missing_without_create_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.dat"
    with pytest.raises(PreflightError, match=str(path)) as info:
        file_lun(str(path), MIB, create=False, host="h1")
    assert info.value.lun == str(path)
    assert info.value.host == "h1"
    assert "does not exist" in str(info.value)
    assert not path.exists()


def test_file_lun_create_needs_a_size(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match="needs a size"):
        file_lun(str(tmp_path / "x"), None, create=True)


def test_file_lun_extends_but_never_truncates(tmp_path: Path) -> None:
    """A file of ivypy's own (its mark holds) is extended on request, keeping its data; no
    file is ever truncated. (Someone else's file is never grown: test_luns_growth.py.)"""
    path = tmp_path / "lun.dat"
    assert file_lun(str(path), 4096, create=True, layout="zero").created
    with open(path, "r+b") as fh:  # a run wrote to it: same inode and size, still ivypy's
        fh.write(b"keep me")
    lun = file_lun(str(path), 2 * MIB, create=True)
    assert lun.created
    assert lun.size_bytes == 2 * MIB
    assert path.read_bytes()[:7] == b"keep me"
    lun = file_lun(str(path), 4096, create=True)  # smaller request: keep the file and its data
    assert path.stat().st_size == 2 * MIB
    assert path.read_bytes()[:7] == b"keep me"
    assert lun.size_bytes == 4096  # ... and the LUN is the requested size (fio's size=)
    # the file's own size is reported beside it (luns.csv shows both)
    assert (lun.file_size_bytes, lun.attributes()["file_size_bytes"]) == (2 * MIB, str(2 * MIB))
    whole = file_lun(str(path), None)
    assert (whole.size_bytes, whole.file_size_bytes) == (2 * MIB, 2 * MIB)  # no size: the file


def test_file_lun_smaller_than_requested_without_create_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lun.dat"
    path.write_bytes(bytes(4096))
    with pytest.raises(PreflightError, match="smaller than the requested"):
        file_lun(str(path), MIB, create=False)
    assert path.stat().st_size == 4096


@pytest.mark.parametrize("kind", ["directory", "empty", "no parent"])
def test_file_lun_refusals(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        path, size, create = tmp_path, None, False
    elif kind == "empty":
        path = tmp_path / "empty"
        path.write_bytes(b"")
        size, create = None, False
    else:
        path, size, create = tmp_path / "no" / "such" / "dir" / "f", MIB, True
    with pytest.raises(PreflightError, match=str(path)):
        file_lun(str(path), size, create=create)


def test_file_lun_reports_signature_and_open_by(tmp_path: Path) -> None:
    path = tmp_path / "img"
    path.write_bytes(bytes(image_bytes([(0, b"XFSB")], MIB)))
    with _held_open(path) as pid:
        lun = file_lun(str(path))
        assert lun.signature == "xfs"
        assert f"{pid}:sleep" in lun.open_by
        ignored = file_lun(str(path), ignore_pids=[pid])
        assert ignored.open_by == ()


def test_lun_for_path_routes_files(tmp_path: Path) -> None:
    lun = lun_for_path(str(tmp_path / "f"), MIB, create=True)
    assert (lun.kind, lun.size_bytes) == ("file", MIB)
    with pytest.raises(PreflightError, match="not a block device"):
        describe_block_device(str(tmp_path / "f"))


# ------------------------------------------------------------------------------------------------
# Real loop devices (root)
# ------------------------------------------------------------------------------------------------


def _settled(probe: Callable[[], LunInfo]) -> LunInfo:
    """``probe()`` again while other processes have the device open: a discovery running in a
    concurrent test process (another slave, another test run) opens every device for a moment."""
    deadline = time.monotonic() + 3
    lun = probe()
    while lun.open_by and time.monotonic() < deadline:
        time.sleep(0.05)
        lun = probe()
    return lun


def _discovered(device: LoopDevice, **kwargs: Any) -> LunInfo:
    for lun in discover_block_devices(**kwargs):
        if lun.path == device.path:
            return lun
    raise AssertionError(f"{device.path} not discovered")


@pytest.mark.root
def test_loop_device_attributes(loop_device: LoopFactory) -> None:
    device = loop_device(16 * MIB)
    lun = _settled(lambda: _discovered(device))
    assert lun.kind == "block"
    assert lun.name == device.name
    assert lun.size_bytes == 16 * MIB
    assert lun.backing_file == os.path.realpath(device.backing_file)
    assert lun.logical_block_bytes == 512
    assert lun.physical_block_bytes >= 512
    assert lun.dev == f"7:{os.minor(os.stat(device.path).st_rdev)}"
    assert (lun.partitions, lun.holders, lun.mount_points, lun.open_by) == ((), (), (), ())
    assert (lun.signature, lun.probe_error, lun.read_only) == ("", "", False)
    assert lun.rotational in (True, False)
    assert lun.attributes()["lun"] == device.path
    described = _settled(lambda: describe_block_device(device.path))
    assert described == lun  # O_EXCL probe: nobody else claims it
    assert _settled(lambda: lun_for_path(device.path)) == lun


@pytest.mark.root
def test_file_behind_a_loop_device_is_held(loop_device: LoopFactory) -> None:
    device = loop_device(4 * MIB)
    assert file_lun(device.backing_file).holders == (device.name,)


@pytest.mark.root
def test_ext4_loop_device_signature(ext4_loop_device: LoopDevice) -> None:
    assert _discovered(ext4_loop_device, use_blkid=False).signature == "ext4"
    assert _discovered(ext4_loop_device).signature == "ext4"


@pytest.mark.root
def test_mounted_loop_device(mounted_loop_device: MountedLoop) -> None:
    lun = _discovered(mounted_loop_device.device)
    assert lun.mount_points == (mounted_loop_device.mount_point,)
    described = describe_block_device(mounted_loop_device.device.path)
    assert described.exclusive_busy
    assert described.mount_points == (mounted_loop_device.mount_point,)


@pytest.mark.root
def test_loop_device_open_by_another_process(loop_device: LoopFactory) -> None:
    device = loop_device(4 * MIB)
    with _held_open(device.path) as pid:
        lun = _discovered(device)
        assert f"{pid}:sleep" in lun.open_by


def _write_mbr(path: str) -> None:
    with open(path, "r+b") as fh:
        offset, data = mbr_entry(0, 0, 0x83, 2048, 4096)
        fh.seek(offset)
        fh.write(data)
        fh.seek(510)
        fh.write(b"\x55\xaa")


@pytest.mark.root
def test_partitioned_loop_device(loop_device: LoopFactory) -> None:
    device = loop_device(8 * MIB, prepare=_write_mbr, partscan=True)
    part_name = f"{device.name}p1"
    part_dir = Path("/sys/block") / device.name / part_name
    deadline = time.monotonic() + 5
    while not part_dir.exists():  # some kernels need an explicit rescan
        if shutil.which("partx"):
            subprocess.run(["partx", "-a", device.path], capture_output=True, check=False)
        if time.monotonic() > deadline:
            pytest.fail(f"{part_name} never appeared in sysfs")
        time.sleep(0.05)
    found = discover_block_devices(paths=[device.path, f"/dev/{part_name}"])
    luns = {lun.name: lun for lun in found}
    disk = luns[device.name]
    assert disk.partitions == (part_name,)
    assert disk.signature == "dos"
    part = luns[part_name]
    assert part.parent == device.name
    assert part.size_bytes == 4096 * 512
    assert part.path == f"/dev/{part_name}"


# ------------------------------------------------------------------------------------------------
# The same device or file reached by another name (root where a loop device or mount is needed)
# ------------------------------------------------------------------------------------------------


def _device_node(tmp_path: Path, device: LoopDevice) -> str:
    """A second node for ``device`` outside /dev (as a container or kubelet has), or skip."""
    node = tmp_path / "node"
    os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(device.path).st_rdev)
    try:
        os.close(os.open(node, os.O_RDONLY))
    except PermissionError:
        pytest.skip(f"{tmp_path} is mounted nodev: cannot open a device node there")
    return str(node)


@pytest.mark.root
def test_device_open_through_a_node_outside_dev(loop_device: LoopFactory, tmp_path: Path) -> None:
    device = loop_device(4 * MIB)
    node = _device_node(tmp_path, device)
    with _held_open(node) as pid:
        assert f"{pid}:sleep" in describe_block_device(device.path).open_by
        assert f"{pid}:sleep" in _discovered(device).open_by


def test_file_open_through_a_hard_link(tmp_path: Path) -> None:
    path = tmp_path / "lun.dat"
    path.write_bytes(bytes(MIB))
    link = tmp_path / "other-name.dat"
    os.link(path, link)
    with _held_open(link) as pid:
        assert f"{pid}:sleep" in file_lun(str(path)).open_by


def test_file_open_on_a_network_file_system_is_matched_by_name_only(tmp_path: Path) -> None:
    """A stat there could hang on a dead server: the scan then trusts names alone."""
    path = tmp_path / "lun.dat"
    path.write_bytes(bytes(MIB))
    link = tmp_path / "other-name.dat"
    os.link(path, link)
    st = path.stat()
    with _held_open(link) as pid:
        found = scan_open_files("/proc", [str(path)], inodes=[(st.st_dev, st.st_ino)])
        assert f"{pid}:sleep" in found[f"ino:{st.st_dev}:{st.st_ino}"]
        assert scan_open_files("/proc", [str(path)], inodes=[(st.st_dev, st.st_ino)],
                               may_hang=lambda _: True) == {}


MOUNTINFO_NETWORK = [
    # (file system type, mount point, path asked about, may hang)
    ("nfs4", "/mnt/nfs", "/mnt/nfs/lun.img", True),
    ("nfs4", "/mnt/nfs", "/mnt/nfs", True),
    ("nfs4", "/mnt/nfs", "/mnt/nfsother/lun.img", False),
    ("fuse.sshfs", "/home/u/remote", "/home/u/remote/a", True),
    ("cifs", "/", "/anything", True),
    ("ext4", "/data", "/data/lun.img", False),
]


@pytest.mark.parametrize(("fstype", "point", "path", "hangs"), MOUNTINFO_NETWORK)
def test_network_file_systems_are_known(
    tmp_path: Path, fstype: str, point: str, path: str, hangs: bool
) -> None:
    h = FakeHost(tmp_path)
    h.mountinfo.append(f"30 1 0:55 / {point} rw - {fstype} server:/export rw")
    h.finish()
    assert read_mounts(str(h.proc)).may_hang(path) is hangs


@pytest.mark.root
@pytest.mark.parametrize("via", ["hard link", "deleted first name", "bind mount"])
def test_file_behind_a_loop_device_is_held_by_any_name(
    loop_device: LoopFactory, tmp_path: Path, via: str
) -> None:
    device = loop_device(4 * MIB)
    if via in ("hard link", "deleted first name"):
        other = os.path.join(os.path.dirname(device.backing_file), "hard-link.img")
        os.link(device.backing_file, other)
        if via == "deleted first name":
            os.unlink(device.backing_file)
        assert file_lun(other).holders == (device.name,)
        return
    if shutil.which("mount") is None:
        pytest.skip("needs mount")
    view = tmp_path / "view"
    view.mkdir()
    subprocess.run(["mount", "--bind", os.path.dirname(device.backing_file), str(view)],
                   check=True, capture_output=True)
    try:
        other = str(view / os.path.basename(device.backing_file))
        assert file_lun(other).holders == (device.name,)
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False, capture_output=True)


@pytest.mark.root
@pytest.mark.parametrize("use", ["open by a process", "attached twice", "attached twice, deleted"])
def test_loop_device_whose_backing_file_is_in_use(loop_device: LoopFactory, use: str) -> None:
    """Writing to the loop device writes that file: whoever else uses the file is a user."""
    device = loop_device(4 * MIB)
    if use == "open by a process":
        with open(device.backing_file, "rb") as fh, \
                subprocess.Popen(["sleep", "30"], stdin=fh) as proc:
            try:
                for lun in (describe_block_device(device.path), _discovered(device)):
                    assert f"{proc.pid}:sleep" in lun.backing_open_by
                    assert lun.open_by == ()
            finally:
                proc.kill()
        return
    second = subprocess.run(["losetup", "--find", "--show", device.backing_file], check=True,
                            capture_output=True, text=True).stdout.strip()
    try:
        if use == "attached twice, deleted":
            os.unlink(device.backing_file)
        name = os.path.basename(second)
        assert describe_block_device(device.path).backing_shared_with == (name,)
        assert _discovered(device).backing_shared_with == (name,)
        assert describe_block_device(second).backing_shared_with == (device.name,)
    finally:
        subprocess.run(["losetup", "-d", second], check=False, capture_output=True)


def _partitioned(loop_device: LoopFactory) -> tuple[LoopDevice, str]:
    """A loop device with one MBR partition, and the partition's node (skips without partx)."""
    if shutil.which("partx") is None:
        pytest.skip("needs partx")
    # partscan: detaching then drops the partitions (without it they outlive the loop device)
    device = loop_device(8 * MIB, prepare=_write_mbr, partscan=True)
    part = f"{device.path}p1"
    deadline = time.monotonic() + 5
    while not os.path.exists(part):  # some kernels need an explicit rescan
        subprocess.run(["partx", "-a", device.path], check=False, capture_output=True)
        if time.monotonic() > deadline:
            pytest.fail(f"{part} never appeared")
        time.sleep(0.05)
    return device, part


@pytest.mark.root
def test_partition_whose_disk_is_open_elsewhere(loop_device: LoopFactory) -> None:
    """Writing to a partition writes the disk another process has open (a VM's, say)."""
    device, part = _partitioned(loop_device)
    try:
        with open(device.path, "rb") as fh, \
                subprocess.Popen(["sleep", "30"], stdin=fh) as proc:
            try:
                for lun in (describe_block_device(part),
                            next(x for x in discover_block_devices(paths=[part])
                                 if x.path == part)):
                    assert lun.parent == device.name
                    assert f"{proc.pid}:sleep" in lun.disk_open_by
                    assert lun.open_by == ()
            finally:
                proc.kill()
    finally:
        subprocess.run(["partx", "-d", device.path], check=False, capture_output=True)


@pytest.mark.root
def test_partition_of_a_loop_device_whose_backing_file_is_in_use(
        loop_device: LoopFactory) -> None:
    """A partition of a loop device is written into the loop device's file: another opener of
    that file, or another loop device over it, is a user of the partition too."""
    from slave.preflight import in_use_reasons

    device, part = _partitioned(loop_device)
    second = ""
    try:
        def described() -> list[LunInfo]:
            return [describe_block_device(part),
                    next(x for x in discover_block_devices(paths=[part]) if x.path == part)]

        for lun in described():  # nobody else: the file is the partition's, and no more
            assert lun.backing_file == device.backing_file
            assert (lun.backing_open_by, lun.backing_shared_with) == ((), ())
        with open(device.backing_file, "rb") as fh, \
                subprocess.Popen(["sleep", "30"], stdin=fh) as proc:
            try:
                for lun in described():
                    assert f"{proc.pid}:sleep" in lun.backing_open_by
                    assert any("backing file" in r and "sleep" in r for r in in_use_reasons(lun))
            finally:
                proc.kill()
        second = subprocess.run(["losetup", "--find", "--show", device.backing_file],
                                check=True, capture_output=True, text=True).stdout.strip()
        for lun in described():
            assert lun.backing_shared_with == (os.path.basename(second),)
    finally:
        if second:
            subprocess.run(["losetup", "-d", second], check=False, capture_output=True)
        subprocess.run(["partx", "-d", device.path], check=False, capture_output=True)


@pytest.mark.parametrize("ext4", [False, True])
def test_a_blkid_that_hangs_leaves_blank_luns_unchecked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ext4: bool) -> None:
    # our own probe knows fewer signatures than blkid: when blkid gives no answer, a LUN our
    # probe finds blank is "could not be checked" (writes refused), one it recognises keeps
    # its signature
    from slave import signatures
    from slave.preflight import in_use_reasons

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "blkid").write_text("#!/bin/sh\nexec sleep 30\n")
    (fake / "blkid").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT_S", 0.3)
    path = tmp_path / "lun.dat"
    with open(path, "wb") as fh:
        fh.truncate(4 * MIB)
        if ext4:
            for off, data in ext_pokes(compat=0x4, incompat=0x2 | 0x40 | 0x200):
                fh.seek(off)
                fh.write(data)
    lun = file_lun(str(path), None, create=False)
    if ext4:
        assert lun.signature == "ext4" and not lun.probe_error
    else:
        assert lun.signature == "" and lun.probe_error.startswith(
            "blkid gave no answer within 0.3 s")
        reasons = in_use_reasons(lun)
        assert reasons[0].startswith("contents could not be checked: blkid gave no answer")
