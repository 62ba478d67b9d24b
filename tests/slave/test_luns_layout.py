"""Laying a created file LUN out (``slave.luns.lay_out``): every byte written (no hole left for
the file system to answer reads from without I/O), random or zero, whole or not at all under
its name; holes in an existing file found (SEEK_HOLE); the file system type of a file LUN."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from protocol.errors import PreflightError
from slave import luns
from slave.luns import LAYOUT_CHUNK_BYTES, file_lun, lay_out

MIB = 1 << 20


def _refuse(reason: str) -> PreflightError:
    return PreflightError(f"file LUN x: {reason}", host="h1", lun="x")


def _holes(path: Path) -> bool:
    with open(path, "rb") as fh:
        return os.lseek(fh.fileno(), 0, os.SEEK_HOLE) < path.stat().st_size


@pytest.mark.parametrize("layout", ["random", "zero"])
@pytest.mark.parametrize("size", [512, 3 * MIB, LAYOUT_CHUNK_BYTES + 4096])
def test_every_byte_is_written(tmp_path: Path, layout: str, size: int) -> None:
    path = tmp_path / "lun"
    seen: list[tuple[int, int]] = []
    lay_out(str(path), size, layout, _refuse, lambda d, t: seen.append((d, t)))
    data = np.fromfile(path, dtype=np.uint8)
    assert data.size == size and not _holes(path)
    assert path.stat().st_blocks * 512 >= size  # allocated, not sparse
    if layout == "zero":
        assert not data.any()
    else:  # random bytes: each value about 1/256 of them
        counts = np.bincount(data, minlength=256)
        assert counts.max() < max(size / 128, 16)
        if size >= MIB:
            assert counts.min() > size / 512
    assert [d for d, _ in seen] == sorted({d for d, _ in seen}) and seen[-1] == (size, size)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lun"]  # no hidden part left


def test_a_long_layout_is_synced_as_it_goes_and_told_after_each_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``LAYOUT_SYNC_BYTES`` the part written so far is synced before its progress is
    told (the master hears bytes on the device; the sync at the end is of the rest alone)."""
    monkeypatch.setattr(luns, "LAYOUT_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(luns, "LAYOUT_SYNC_BYTES", 128 << 10)
    said: list[tuple[str, int]] = []
    path = tmp_path / "lun"
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        said.append(("sync", os.fstat(fd).st_size))
        real(fd)

    monkeypatch.setattr(luns.os, "fdatasync", fdatasync)
    lay_out(str(path), (5 << 16) + 100, "zero", _refuse, lambda d, t: said.append(("told", d)))
    k = 64 << 10
    assert said == [("told", k), ("sync", 2 * k), ("told", 2 * k), ("told", 3 * k),
                    ("sync", 4 * k), ("told", 4 * k), ("told", 5 * k),
                    ("told", 5 * k + 100)]  # the last part: the fsync at the end
    assert path.stat().st_size == 5 * k + 100


def test_a_file_made_meanwhile_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "lun"

    def someone(done: int, total: int) -> None:
        if not path.exists():
            path.write_text("someone's data")

    with pytest.raises(PreflightError, match="created by someone else while ivypy was laying"):
        lay_out(str(path), 2 * MIB, "random", _refuse, someone)
    assert path.read_text() == "someone's data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lun"]


def test_a_layout_cut_off_earlier_is_cleaned_up(tmp_path: Path) -> None:
    (tmp_path / ".lun.ivypy-layout").write_bytes(b"half")
    lay_out(str(tmp_path / "lun"), MIB, "zero", _refuse)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lun"]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_leaves_no_file(small_tmpfs: Path) -> None:
    path = small_tmpfs / "lun"
    with pytest.raises(PreflightError, match=r"cannot lay out \(\d+ of 4194304 bytes written\)"
                       r": No space left on device"):
        lay_out(str(path), 4 * MIB, "random", _refuse)
    assert list(small_tmpfs.iterdir()) == []  # a later run creates it anew


def test_file_lun_lays_out_what_it_creates_only(tmp_path: Path) -> None:
    made = file_lun(str(tmp_path / "new"), 2 * MIB, create=True, layout="random")
    assert made.created and not made.has_holes and made.file_size_bytes == 2 * MIB
    sparse = file_lun(str(tmp_path / "sparse"), 2 * MIB, create=True, layout="none")
    assert sparse.created and sparse.has_holes
    again = file_lun(str(tmp_path / "sparse"), 2 * MIB, create=True, layout="random")
    assert again.has_holes  # an existing file is never written here ...
    assert again.created and again.mark == "ok"  # ... though ivypy's mark makes it its own


def test_a_file_luns_file_system_type(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    path = shm / f"ivypy-fstype-{os.getpid()}"
    try:
        lun = file_lun(str(path), MIB, create=True, layout="zero")
        assert lun.fs_type == "tmpfs" and lun.attributes()["fs_type"] == "tmpfs"
    finally:
        path.unlink(missing_ok=True)


class _SpellingRng:
    """A generator whose bytes spell blkid's JMicron RAID member magic (``JM`` at the start of
    the last sector, which blkid 2.38 reads in files larger than 1,440 KiB) in a one-chunk layout,
    as one random layout in 65,536 does."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(7)
        self.drawn = b""

    def bytes(self, n: int) -> bytes:
        data = bytearray(self.rng.bytes(n))
        data[n - 512 : n - 510] = b"JM"
        self.drawn = bytes(data)
        return self.drawn

    def integers(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high))


def _blkid(path: Path) -> str:
    return subprocess.run(["blkid", "-p", "-o", "export", str(path)], capture_output=True,
                          text=True, timeout=60).stdout


@pytest.mark.skipif(subprocess.run(["which", "wipefs", "blkid"], capture_output=True)
                    .returncode != 0, reason="needs util-linux's wipefs and blkid")
def test_random_bytes_that_spell_a_signature_are_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random bytes that spell a RAID member's magic get one byte changed, so that a later run
    does not take ivypy's own file for one: blkid finds the member in the bytes drawn, and
    nothing in the file laid out, which differs from them in that byte alone."""
    rng = _SpellingRng()
    monkeypatch.setattr(np.random, "default_rng", lambda *a: rng)
    path = tmp_path / "lun"
    lay_out(str(path), 2 * MIB, "random", _refuse)
    drawn = tmp_path / "drawn"
    drawn.write_bytes(rng.drawn)
    assert "TYPE=jmicron_raid_member" in _blkid(drawn)
    assert "TYPE=" not in _blkid(path)
    data = np.fromfile(path, dtype=np.uint8)
    (changed,) = np.flatnonzero(data != np.frombuffer(rng.drawn, dtype=np.uint8))
    assert changed == 2 * MIB - 512
    monkeypatch.undo()
    lun = file_lun(str(path), 2 * MIB, create=True)  # a later run: its own file, nothing in it
    assert lun.created and lun.signature == ""


def test_a_wipefs_that_fails_leaves_the_layout_whole_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tmp_path / "wipefs"
    fake.write_text("#!/bin/sh\necho 'wipefs: probing initialization failed' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(luns.shutil, "which", lambda name: str(fake))
    path = tmp_path / "lun"
    with caplog.at_level(logging.WARNING, logger=luns.log.name):
        lay_out(str(path), 2 * MIB, "random", _refuse)
    assert path.stat().st_size == 2 * MIB and not _holes(path)
    assert (f"file LUN {path}: its random layout was not checked for signatures (wipefs: "
            "wipefs: probing initialization failed)") in caplog.text
