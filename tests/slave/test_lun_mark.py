"""The mark ivypy leaves on a file LUN it made (``slave.lun_mark``, used by ``slave.luns.file_lun``
and worded by ``slave.preflight``): its value and judgement as tables, then real files. A file
ivypy made is its own in a later describe (a later run) and takes writes without
``allow_write``; a file without the mark, with the mark but another size, replaced at the path,
copied (``cp``, ``cp -a``), with a damaged mark, or on a file system without user extended
attributes (ramfs) is refused, the preflight saying which case it is; a layout cut off leaves
no marked file."""

from __future__ import annotations

import calendar
import errno
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol.errors import PreflightError
from slave.lun_mark import (
    MARK_COPIED,
    MARK_DAMAGED,
    MARK_NONE,
    MARK_OK,
    MARK_RESIZED,
    MARK_UNSUPPORTED,
    MARK_XATTR,
    Mark,
    decode_mark,
    encode_mark,
    judge,
)
from slave.luns import file_lun, lay_out
from slave.preflight import in_use_reasons, own_file_note, require_ok

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]

SAMPLE = Mark(layout="random", size_bytes=8 * MIB, inode=4242, created="2026-11-25T16:54:19Z",
              version="0.1.0")
SAMPLE_JSON = (b'{"by":"ivypy","created":"2026-11-25T16:54:19Z","inode":4242,"layout":"random",'
               b'"size_bytes":8388608,"version":"0.1.0"}')


def test_the_value_is_compact_json_and_reads_back() -> None:
    assert encode_mark(SAMPLE) == SAMPLE_JSON
    assert decode_mark(SAMPLE_JSON) == SAMPLE


DECODE_CASES: list[tuple[str, bytes, Mark | None]] = [
    ("a later version's extra key", SAMPLE_JSON[:-1] + b',"colour":"red"}', SAMPLE),
    ("not JSON", b"ivypy made this", None),
    ("not UTF-8", b"\xff\xfe", None),
    ("a list", b'["ivypy"]', None),
    ("someone else's", SAMPLE_JSON.replace(b'"ivypy"', b'"fio"'), None),
    ("no by", SAMPLE_JSON.replace(b'"by":"ivypy",', b""), None),
    ("size a string", SAMPLE_JSON.replace(b"8388608", b'"8388608"'), None),
    ("size a bool", SAMPLE_JSON.replace(b"8388608", b"true"), None),
    ("size negative", SAMPLE_JSON.replace(b"8388608", b"-1"), None),
    ("inode missing", SAMPLE_JSON.replace(b'"inode":4242,', b""), None),
    ("created a number", SAMPLE_JSON.replace(b'"2026-11-25T16:54:19Z"', b"1"), None),
    ("layout missing", SAMPLE_JSON.replace(b'"layout":"random",', b""), None),
]


@pytest.mark.parametrize(("raw", "mark"), [c[1:] for c in DECODE_CASES],
                         ids=[c[0] for c in DECODE_CASES])
def test_decode_mark(raw: bytes, mark: Mark | None) -> None:
    assert decode_mark(raw) == mark


JUDGE_CASES: list[tuple[str, bytes | None, int, int, str]] = [
    # (case, attribute, the file's inode, the file's size, state)
    ("no attribute", None, 4242, 8 * MIB, MARK_NONE),
    ("the file it was set on", SAMPLE_JSON, 4242, 8 * MIB, MARK_OK),
    ("truncated since", SAMPLE_JSON, 4242, 4 * MIB, MARK_RESIZED),
    ("extended since", SAMPLE_JSON, 4242, 8 * MIB + 512, MARK_RESIZED),
    ("a copy (another inode)", SAMPLE_JSON, 77, 8 * MIB, MARK_COPIED),
    ("a copy, resized too", SAMPLE_JSON, 77, MIB, MARK_COPIED),
    ("not ivypy's value", b"junk", 4242, 8 * MIB, MARK_DAMAGED),
]


@pytest.mark.parametrize(("raw", "st_ino", "st_size", "state"), [c[1:] for c in JUDGE_CASES],
                         ids=[c[0] for c in JUDGE_CASES])
def test_judge(raw: bytes | None, st_ino: int, st_size: int, state: str) -> None:
    found, mark = judge(raw, st_ino, st_size)
    assert found == state
    assert mark == (SAMPLE if state in (MARK_OK, MARK_RESIZED, MARK_COPIED) else None)


# --------------------------------------------------------------------------------------------
# Real files
# --------------------------------------------------------------------------------------------


@pytest.fixture(params=["tmp", "shm"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A directory on the disk's file system (ext4 here) or on tmpfs (/dev/shm)."""
    if request.param == "tmp":
        yield tmp_path
        return
    folder = Path("/dev/shm") / f"ivypy-mark-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    try:
        yield folder
    finally:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


def _written_by_a_run(path: Path) -> None:
    """What a first run's writing step leaves: other bytes in place, the same size."""
    with open(path, "r+b") as fh:
        fh.write(b"\x5a" * 65536)


def _refused(path: Path, size: int | None = None) -> str:
    """The one reason a writing workload on the file is refused for; reads still go."""
    lun = file_lun(str(path), size)
    assert not lun.created
    with pytest.raises(PreflightError, match="refusing to write") as info:
        require_ok(lun, writes=True, allow_write=False, host="h1")
    assert require_ok(lun, writes=True, allow_write=True, host="h1").overridden
    assert require_ok(lun, writes=False, allow_write=False, host="h1").ok
    (reason,) = in_use_reasons(lun)
    assert reason in str(info.value) and "host h1" in str(info.value)
    return reason


@pytest.mark.parametrize("layout", ["random", "zero", "none"])
def test_a_file_ivypy_made_is_its_own_in_a_later_run(where: Path, layout: str) -> None:
    path = where / "lun"
    before = time.time()
    made = file_lun(str(path), 2 * MIB, create=True, layout=layout)
    assert made.created and made.mark == MARK_OK
    _written_by_a_run(path)
    later = file_lun(str(path), 2 * MIB, create=True, layout=layout)  # the same test again
    assert later.created and later.mark == MARK_OK and later.file_id == made.file_id
    assert later.mark_size_bytes == 2 * MIB
    made_s = calendar.timegm(time.strptime(later.mark_created, "%Y-%m-%dT%H:%M:%SZ"))
    assert before - 1 <= made_s <= time.time() + 1
    assert in_use_reasons(later) == ()
    assert require_ok(later, writes=True, allow_write=False, host="h1").ok
    day = later.mark_created[:10]
    assert own_file_note(later).startswith(f"file LUN {path}: created by ivypy on {day} ")
    mark = decode_mark(os.getxattr(path, MARK_XATTR))
    assert mark is not None and (mark.layout, mark.inode) == (layout, path.stat().st_ino)
    assert sorted(p.name for p in where.iterdir()) == ["lun"]  # the mark is the only trace
    smaller = file_lun(str(path), MIB)  # a smaller LUN over it: still the file ivypy made
    assert smaller.created and smaller.size_bytes == MIB


def _someone_made_a_file(path: Path, tmp: Path) -> None:
    path.unlink()
    path.write_bytes(b"someone's data" * 10000)


def _overwritten_in_place(path: Path, tmp: Path) -> None:
    path.write_bytes(b"someone's data" * 10000)  # O_TRUNC: the same inode, its mark kept


def _truncated(path: Path, tmp: Path) -> None:
    os.truncate(path, MIB)


def _extended(path: Path, tmp: Path) -> None:
    os.truncate(path, 3 * MIB)


def _replaced(path: Path, tmp: Path) -> None:
    new = path.with_name("new")
    new.write_bytes(bytes(2 * MIB))
    os.replace(new, path)  # a new inode at the path, without the mark


def _cp_over_it_from_another_ivypy_file(path: Path, tmp: Path) -> None:
    other = path.with_name("other")
    file_lun(str(other), 2 * MIB, create=True, layout="zero")
    subprocess.run(["cp", "-a", str(other), str(path)], check=True)  # in place: its mark too
    other.unlink()


def _damaged(path: Path, tmp: Path) -> None:
    os.setxattr(path, MARK_XATTR, b"hand-written")


NOT_IVYPYS: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("no mark: someone's file", _someone_made_a_file, ", which ivypy did not create"),
    ("overwritten in place at another size", _overwritten_in_place,
     r"of 136.7 KiB \(140,000 bytes\) holding data, created by ivypy on .* but resized since"),
    ("truncated since", _truncated,
     r", created by ivypy on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC at 2 MiB \(2,097,152 bytes\) "
     "but resized since, so no longer ivypy's"),
    ("extended since", _extended, "at 2 MiB .* but resized since"),
    ("replaced at the path", _replaced, ", which ivypy did not create"),
    ("cp -a over it from another file ivypy made", _cp_over_it_from_another_ivypy_file,
     r", a copy of a file created by ivypy on \d{4}-\S+ \S+ UTC \(its mark names another "
     r"inode: copied with its extended attributes, e.g. cp -a or rsync -X\), so not ivypy's"),
    ("a damaged mark", _damaged,
     r", which ivypy did not create \(its user.ivypy.lun attribute is not ivypy's mark\)"),
]


@pytest.mark.parametrize(("change", "says"), [c[1:] for c in NOT_IVYPYS],
                         ids=[c[0] for c in NOT_IVYPYS])
def test_a_file_that_is_not_ivypys_is_refused_saying_why(
        where: Path, tmp_path: Path, change: Callable[[Path, Path], None], says: str) -> None:
    path = where / "lun"
    file_lun(str(path), 2 * MIB, create=True, layout="random")
    change(path, tmp_path)
    reason = _refused(path)
    assert reason.startswith("an existing non-empty file of ")
    assert re.search(says, reason), reason


def test_a_file_written_over_in_place_at_its_size_is_caught_by_its_signature(
        tmp_path: Path) -> None:
    """What the mark cannot see: someone's data written into ivypy's file at the same size.
    The signature probe still refuses a format it knows."""
    path = tmp_path / "lun"
    file_lun(str(path), MIB, create=True, layout="zero")
    with open(path, "r+b") as fh:
        fh.write(b"SQLite format 3\x00")
    lun = file_lun(str(path))
    assert lun.created and lun.mark == MARK_OK
    with pytest.raises(PreflightError, match="carries a sqlite3 signature"):
        require_ok(lun, writes=True, allow_write=False, host="h1")


@pytest.mark.parametrize("how", [["cp"], ["cp", "-a"], ["cp", "--preserve=xattr"]])
def test_a_copy_of_a_file_ivypy_made_is_not_its_own(where: Path, how: list[str]) -> None:
    """A plain ``cp`` carries no mark; ``cp -a`` and ``--preserve=xattr`` carry one that names
    the original's inode."""
    path, copy = where / "lun", where / "copy"
    file_lun(str(path), 2 * MIB, create=True, layout="random")
    subprocess.run([*how, str(path), str(copy)], check=True)
    lun = file_lun(str(copy))
    assert lun.mark == (MARK_NONE if how == ["cp"] else MARK_COPIED)
    reason = _refused(copy)
    assert ("which ivypy did not create" if how == ["cp"] else "a copy of a file created by "
            "ivypy on") in reason
    assert file_lun(str(path)).created  # the original stays ivypy's


def test_ivypy_extending_its_own_file_keeps_it_its_own(tmp_path: Path) -> None:
    """``create: true`` with a larger size extends a file (sparse); one ivypy made stays its
    own, marked at the new size with its first date. Someone's file is refused, neither grown
    nor marked; an empty file sized is ivypy's."""
    path = tmp_path / "lun"
    made = file_lun(str(path), MIB, create=True, layout="random")
    grown = file_lun(str(path), 2 * MIB, create=True)
    assert grown.created and grown.mark == MARK_OK and grown.mark_size_bytes == 2 * MIB
    assert grown.mark_created == made.mark_created and grown.has_holes
    mark = decode_mark(os.getxattr(path, MARK_XATTR))
    assert mark is not None and mark.layout == "random"
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"their data" * 1000)
    with pytest.raises(PreflightError, match="not ivypy's: ivypy grows only files it created"):
        file_lun(str(theirs), MIB, create=True)
    assert theirs.read_bytes() == b"their data" * 1000
    with pytest.raises(OSError) as info:
        os.getxattr(theirs, MARK_XATTR)
    assert info.value.errno == errno.ENODATA
    empty = tmp_path / "empty"
    empty.touch()
    assert file_lun(str(empty), MIB, create=True).created
    _written_by_a_run(empty)
    again = file_lun(str(empty), MIB)
    assert again.created and again.mark == MARK_OK


CUT_OFF = """\
import sys
from protocol.errors import PreflightError
from slave.luns import lay_out

def progress(done, total):
    print(done, flush=True)
    sys.stdin.readline()  # stays here, midway, until it is killed

lay_out(sys.argv[1], 64 << 20, "random", lambda r: PreflightError(r), progress)
"""


def test_a_layout_cut_off_leaves_no_marked_file(tmp_path: Path) -> None:
    """The mark goes on when every byte is written, before the file gets its name: a layout
    killed midway leaves only the hidden file, unmarked, and that file (had someone moved it
    into place) is not ivypy's."""
    path = tmp_path / "lun"
    part = tmp_path / ".lun.ivypy-layout"
    with subprocess.Popen([sys.executable, "-c", CUT_OFF, str(path)], cwd=ROOT,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and int(proc.stdout.readline()) > 0
            with pytest.raises(OSError) as info:  # being written: no mark yet
                os.getxattr(part, MARK_XATTR)
            assert info.value.errno == errno.ENODATA
        finally:
            proc.send_signal(signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists() and part.exists()
    with pytest.raises(OSError) as info:
        os.getxattr(part, MARK_XATTR)
    assert info.value.errno == errno.ENODATA
    os.rename(part, path)
    assert file_lun(str(path)).mark == MARK_NONE
    assert "which ivypy did not create" in _refused(path)


def test_a_layout_interrupted_in_process_leaves_nothing(tmp_path: Path) -> None:
    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lay_out(str(tmp_path / "lun"), 8 * MIB, "zero",
                lambda r: PreflightError(r), stop)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["random", "none"])
def test_without_user_xattrs_a_file_works_as_before_with_one_warning(
        ramfs: Path, layout: str) -> None:
    path = ramfs / "lun"
    told: list[str] = []
    made = file_lun(str(path), MIB, create=True, layout=layout, warn=told.append)
    assert made.created and made.mark == MARK_UNSUPPORTED
    (warning,) = told
    assert warning.startswith(f"file LUN {path}: ivypy cannot mark it as its own (its file "
                              "system keeps no user extended attributes)")
    assert "refuse to write it unless its luns: entry sets allow_write: true" in warning
    _written_by_a_run(path)
    later = file_lun(str(path), MIB, create=True, layout=layout, warn=told.append)
    assert len(told) == 1  # said once, when the file was made
    assert not later.created and later.mark == MARK_UNSUPPORTED
    assert _refused(path).endswith(
        ", which this run did not create (its file system keeps no user extended attributes, "
        "so a file ivypy made in an earlier run carries no mark)")
    # a resumed run still knows its own file there by dev:inode
    assert file_lun(str(path), MIB, created_as=made.file_id).created
