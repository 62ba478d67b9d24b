"""Growing a file LUN (``create: true`` with a ``size`` larger than the file): only an empty
file or one of ivypy's own is grown; anyone else's file is refused, unchanged, before any
byte of it (or its size) is touched. Growing it would be a write the test did not ask for,
made before the preflight looked at who uses the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.errors import PreflightError
from protocol.messages import DiscoverLuns, Error, LunList
from slave import luns as lunmod
from slave.lun_mark import MARK_OK, MARK_XATTR
from slave.luns import file_lun
from tests.slave.test_session import Harness

MIB = 1 << 20
THEIRS = b"SQLite format 3\x00" + bytes(range(256)) * 400  # 102,416 bytes of someone's data


def test_someone_elses_smaller_file_is_refused_not_grown(tmp_path: Path) -> None:
    """A database, open by another process, named with a size larger than it: refused naming
    host, file, its real size and the size asked; its size, bytes and attributes unchanged."""
    db = tmp_path / "orders.db"
    db.write_bytes(THEIRS)
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(db)!r}, 'r+b'); "
                               "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with pytest.raises(PreflightError) as info:
            file_lun(str(db), 64 * MIB, create=True, host="h1")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    text = str(info.value)
    assert (info.value.host, info.value.lun) == ("h1", str(db))
    assert text.startswith(f"file LUN {db}: is 102,416 bytes, smaller than the requested size "
                           "(67,108,864 bytes) and not ivypy's: ivypy grows only files it "
                           "created"), text
    assert db.read_bytes() == THEIRS
    assert MARK_XATTR not in os.listxattr(db)


def test_ivypys_file_resized_by_someone_is_not_grown(tmp_path: Path) -> None:
    """ivypy's mark for another size (someone truncated the file): not ivypy's any more."""
    path = tmp_path / "lun"
    file_lun(str(path), 2 * MIB, create=True, layout="zero")
    os.truncate(path, MIB)
    with pytest.raises(PreflightError, match="not ivypy's: ivypy grows only files it created"):
        file_lun(str(path), 2 * MIB, create=True)
    assert path.stat().st_size == MIB


def test_an_empty_file_and_ivypys_own_are_grown(tmp_path: Path) -> None:
    empty, own = tmp_path / "empty", tmp_path / "own"
    empty.touch()
    grown = file_lun(str(empty), MIB, create=True)
    assert grown.created and grown.mark == MARK_OK and empty.stat().st_size == MIB
    file_lun(str(own), MIB, create=True, layout="random")
    head = own.read_bytes()[:4096]
    grown = file_lun(str(own), 2 * MIB, create=True)
    assert grown.created and grown.mark == MARK_OK and grown.mark_size_bytes == 2 * MIB
    assert own.read_bytes()[:4096] == head


def test_a_file_changed_while_ivypy_looked_is_not_grown(tmp_path: Path) -> None:
    """Between the look that found the file empty and the open that grows it, someone wrote
    to it: refused, the file as they left it."""
    path = tmp_path / "lun"
    path.touch()
    seen = os.stat(path)
    path.write_bytes(b"someone's data")

    def refuse(reason: str) -> PreflightError:
        return PreflightError(f"file LUN {path}: {reason}", host="h1", lun=str(path))

    with pytest.raises(PreflightError, match=r"changed .* while ivypy was looking at it"):
        lunmod._create_or_extend(str(path), MIB, refuse, seen=seen, mark_layout="none")
    assert path.read_bytes() == b"someone's data"


def test_discovery_refuses_someone_elses_smaller_file(tmp_path: Path) -> None:
    """Through the session: the refusal is the discovery's answer (the master adds the host
    and names the test's ``luns:`` entry), naming the file once, and the file is unchanged."""
    db = tmp_path / "orders.db"
    db.write_bytes(THEIRS)
    h = Harness()
    h.hello()
    (reply,) = h.send(DiscoverLuns(3, files=[{"path": str(db), "size_bytes": 64 * MIB,
                                              "create": True, "layout": "none"}]))
    assert not isinstance(reply, LunList)
    assert isinstance(reply, Error) and reply.kind == "config" and reply.lun == str(db)
    assert reply.message.count(str(db)) == 1, reply.message
    assert "102,416 bytes, smaller than the requested size (67,108,864 bytes)" in reply.message
    assert db.read_bytes() == THEIRS
