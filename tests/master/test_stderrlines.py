"""Slave stderr bytes to log lines (``master.hosts.stderrlines``): a table, and any split of the
bytes against a reference that sees the whole stream at once."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from master.hosts.stderrlines import MAX_LINE_BYTES, StderrLines


@pytest.mark.parametrize(("pieces", "lines", "last"), [
    ([b""], [], []),
    ([b"one\n"], ["one"], []),
    ([b"one\r\n", b"\n", b"two"], ["one", ""], ["two"]),
    ([b"o", b"n", b"e\ntw", b"o\nthr"], ["one", "two"], ["thr"]),
    ([b"caf\xc3", b"\xa9 \xff\n"], ["café \ufffd"], []),
    ([b"12345678\n"], ["12345678"], []),
    ([b"123456789\n"], ["12345678 ... [line truncated: 9 bytes]"], []),
    ([b"1234", b"56789", b"abc", b"\nok\n"],
     ["12345678 ... [line truncated: 12 bytes]", "ok"], []),
    ([b"x" * 20], [], ["xxxxxxxx ... [line truncated: 20 bytes]"]),
])
def test_lines(pieces: list[bytes], lines: list[str], last: list[str]) -> None:
    cut = StderrLines(max_line_bytes=8)
    assert [line for p in pieces for line in cut.feed(p)] == lines
    assert cut.close() == last
    assert cut.close() == []


def _reference(data: bytes, limit: int) -> list[str]:
    *whole, rest = data.split(b"\n")
    out = []
    for raw in [*whole, rest] if rest else whole:
        if len(raw) <= limit:
            out.append(raw.rstrip(b"\r").decode("utf-8", errors="replace"))
        else:
            out.append(f"{raw[:limit].decode('utf-8', errors='replace')} ... "
                       f"[line truncated: {len(raw)} bytes]")
    return out


@settings(max_examples=300)
@given(data=st.lists(st.sampled_from([b"\n", b"\r", b"ab", b"\xc3\xa9", b"x" * 9, b"\xff"]),
                     max_size=30).map(b"".join),
       cuts=st.lists(st.integers(0, 400), max_size=8))
def test_any_split_gives_the_lines_of_the_whole(data: bytes, cuts: list[int]) -> None:
    at = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    cut = StderrLines(max_line_bytes=8)
    got = [line for a, b in itertools.pairwise(at) for line in cut.feed(data[a:b])]
    assert got + cut.close() == _reference(data, 8)


def test_a_huge_line_holds_no_more_than_the_limit() -> None:
    cut = StderrLines()
    chunk = b"y" * (1 << 20)
    for _ in range(64):  # 64 MiB without a newline
        assert cut.feed(chunk) == []
        assert len(cut._head) == MAX_LINE_BYTES
    (line,) = cut.feed(b"\n")
    assert line == "y" * MAX_LINE_BYTES + f" ... [line truncated: {64 << 20} bytes]"


def test_the_limit_is_at_least_a_byte() -> None:
    with pytest.raises(ValueError, match="max_line_bytes must be >= 1"):
        StderrLines(0)
