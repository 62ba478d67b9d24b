"""master.fiologs.parse: the fast path agrees with a plain reading, malformed lines are named
by file and line (or skipped), gzip and chunk boundaries are transparent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from master.fiologs.columns import layout_for_columns, make_layout
from master.fiologs.parse import LogReader, Scratch, _parse_canonical, read_all
from master.fiologs.synth import fio_counts, format_row, write_log
from protocol.errors import LogFormatError


def _rows(n: int, n_cols: int, seed: int = 0) -> list[tuple[int, int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        c = np.zeros(n_cols, dtype=np.int64)
        hot = rng.integers(0, n_cols, size=12)
        c[hot] = rng.integers(1, 10**rng.integers(1, 12, size=12), size=12)
        out.append(((k // 2 + 1) * 1000, k % 2, c))
    return out


def _plain(path: Path) -> np.ndarray:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    return np.array([[int(x) for x in ln.split(",")] for ln in lines], dtype=np.int64)


@pytest.mark.parametrize("n_cols", [1856, 928, 232, 29, 1216, 19])
@pytest.mark.parametrize("gz", [False, True])
def test_fast_path_matches_plain_reading(tmp_path: Path, n_cols: int, gz: bool) -> None:
    rows = _rows(40, n_cols)
    path = write_log(tmp_path / "a.log", rows, gz=gz)
    block = read_all(path, n_cols)
    expected = np.array([[t, d, 4096, *c] for t, d, c in rows], dtype=np.int64)
    assert np.array_equal(block.times_ms, expected[:, 0])
    assert np.array_equal(block.dirs, expected[:, 1])
    assert np.array_equal(block.dense(), expected[:, 3:])
    assert np.array_equal(block.line_no, np.arange(1, 41))


def test_chunk_boundaries_do_not_matter(tmp_path: Path) -> None:
    rows = _rows(50, 232, seed=3)
    path = write_log(tmp_path / "a.log", rows)
    whole = read_all(path, 232)
    for chunk in (4096, 5000, 65536):
        parts = list(LogReader(path, 232, chunk_bytes=chunk).blocks())
        assert len(parts) > 1 or chunk == 65536
        dense = np.concatenate([p.dense() for p in parts])
        assert np.array_equal(dense, whole.dense())
        assert np.array_equal(np.concatenate([p.line_no for p in parts]), whole.line_no)


def test_canonical_parser_refuses_non_canonical_text() -> None:
    good = format_row(1000, 0, np.array([0, 12, 0, 7], dtype=np.int64))
    scratch = Scratch()
    assert _parse_canonical(good.encode(), 7, 0, scratch) is not None
    for text in (
        good.replace(", 12", ",12"),  # missing space
        good.replace("\n", "\r\n"),  # CR LF
        good + "\n",  # blank line
        good.replace(", 0,", ", 00,"),  # leading zero
        good.replace("12", "1.5"),
        good.replace(", 7", ""),  # a field short
        good.replace("1000, 0", "1000, , 0"),  # empty field
    ):
        assert _parse_canonical(text.encode(), 7, 0, scratch) is None, text


def test_general_path_reads_blank_lines_crlf_and_other_spacing(tmp_path: Path) -> None:
    path = tmp_path / "odd.log"
    path.write_bytes(b"\n1000,0,4096,0,5,0,0\r\n\n  2000 , 1, 4096, 3, 0, 0, 0\n")
    block = read_all(path, 4)
    assert np.array_equal(block.times_ms, [1000, 2000])
    assert np.array_equal(block.line_no, [2, 4])
    assert np.array_equal(block.dense(), [[0, 5, 0, 0], [3, 0, 0, 0]])


#: a line fio's format does not allow, between good ones, and what the error says of it
BAD_LINES = [
    ("3000, 0, 4096, 1, 2, 3\n", "expected 7 fields"),
    ("3000, 0, 4096, 1, x, 3, 4\n", "not an integer"),
    ("3000, 0, 4096, 1, -2, 3, 4\n", "negative"),
    ("3000, 5, 4096, 1, 2, 3, 4\n", "direction 5"),
    ("500, 0, 4096, 1, 2, 3, 4\n", "earlier than the previous read row"),
    ("3000, 0, 4096, 1, 99999999999999999999, 3, 4\n", "too large"),
]


@pytest.mark.parametrize(("bad_line", "message"), BAD_LINES)
def test_malformed_line_is_named_or_skipped(tmp_path: Path, bad_line: str, message: str) -> None:
    good = [format_row(1000 * k, 0, np.array([k, 0, 1, 0])) for k in (1, 2)]
    tail = format_row(4000, 0, np.array([0, 0, 0, 9]))
    path = tmp_path / "bad.log"
    path.write_text("".join([*good, bad_line, tail]))
    with pytest.raises(LogFormatError, match=message) as info:
        read_all(path, 4)
    assert info.value.file == str(path)
    assert info.value.line == 3
    reader = LogReader(path, 4, skip_bad_lines=True)
    blocks = list(reader.blocks())
    assert reader.skipped_lines == 1
    assert f"{path}:3: skipped" in reader.warnings[0]
    assert np.array_equal(np.concatenate([b.times_ms for b in blocks]), [1000, 2000, 4000])


def test_missing_file_is_a_log_format_error(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match="cannot open"):
        read_all(tmp_path / "nope.log", 4)


def test_fio_counts_and_layouts_agree() -> None:
    lat = np.array([5, 100, 1000, 1_000_000, 40_000_000_000])
    for c in range(4):
        counts = fio_counts(lat, coarseness=c)
        assert counts.size == 1856 >> c
        assert counts.sum() == lat.size
        layout = layout_for_columns(counts.size)
        assert layout is not None and layout.coarseness == c and layout.fio_version == 3
        for v in lat[:-1]:
            col = np.searchsorted(layout.lower_ns, v, side="right") - 1
            assert layout.lower_ns[col] <= v <= layout.upper_ns[col]
        assert counts[-1] == 1  # 40 s lands in fio's last (open) bucket
    two = fio_counts(lat, fio_version=2)
    assert two.size == 1216
    assert layout_for_columns(1216) == make_layout(2, 0)
    assert layout_for_columns(1216, fio_version=3) is None
    assert layout_for_columns(1000) is None
