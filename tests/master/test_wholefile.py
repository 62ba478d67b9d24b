"""``replace_whole`` and ``whole_file``: the new bytes whole, or the old file untouched and no
temporary file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from master.results.wholefile import replace_whole, whole_file
from tests.master.filelimit import file_size_limit


@pytest.fixture
def small_file_limit() -> Iterator[int]:
    """Writes past 64 KiB fail with EFBIG (SIGXFSZ ignored), as a full disk fails them."""
    limit = 64 * 1024
    with file_size_limit(limit):
        yield limit


@pytest.mark.parametrize("old, new", [(None, b"new"), (b"old", b"new"), (b"old" * 1000, b""),
                                      (b"x", bytes(range(256)) * 1000)])
def test_the_new_bytes_replace_the_old_whole(tmp_path: Path, old: bytes | None,
                                             new: bytes) -> None:
    path = tmp_path / "state.json"
    if old is not None:
        path.write_bytes(old)
    replace_whole(path, new)
    assert path.read_bytes() == new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path,
                                                             small_file_limit: int) -> None:
    path = tmp_path / "summary.json"
    path.write_bytes(b"the old summary")
    with pytest.raises(OSError):
        replace_whole(path, b"x" * (2 * small_file_limit))
    assert path.read_bytes() == b"the old summary"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_missing_directory_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        replace_whole(tmp_path / "gone" / "report.html", b"page")


def test_bytes_written_a_piece_at_a_time_replace_the_old_whole(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_bytes(b"old")
    with whole_file(path) as fh:
        for i in range(1000):
            fh.write(b"%d," % i)
        assert path.read_bytes() == b"old"  # not before the block ends
    assert path.read_bytes() == b"".join(b"%d," % i for i in range(1000))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_block_that_fails_part_way_leaves_the_old_file_and_no_temporary(
        tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_bytes(b"the old summary")
    with pytest.raises(ValueError, match="the builder's bug"), whole_file(path) as fh:
        fh.write(b"x" * 3_000_000)  # past the buffer: some of it reached the file
        raise ValueError("the builder's bug")
    assert path.read_bytes() == b"the old summary"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
