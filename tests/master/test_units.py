"""Table-driven tests for master/config/units.py: byte sizes, durations, fractions, and
formatting."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from master.config.units import (
    format_bytes,
    format_duration_s,
    format_fraction,
    parse_bytes,
    parse_duration_s,
    parse_fraction,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (4096, 4096),
        (4096.0, 4096),
        ("512", 512),
        ("512B", 512),
        ("4KiB", 4096),
        ("4kib", 4096),
        ("4 KiB", 4096),
        ("1.5KiB", 1536),
        ("0.5KiB", 512),
        ("1MiB", 1024**2),
        ("256MiB", 256 * 1024**2),
        ("1GiB", 1024**3),
        ("2TiB", 2 * 1024**4),
        ("1PiB", 1024**5),
        ("4KB", 4000),
        ("1MB", 10**6),
        ("1GB", 10**9),
        ("1TB", 10**12),
        ("1e3B", 1000),
        ("  8KiB  ", 8192),
    ],
)
def test_parse_bytes(text: object, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4k", "ambiguous unit 'k' in '4k': write KiB (powers of 1024) or KB (powers of 1000)"),
        ("4K", "ambiguous unit 'K' in '4K': write KiB (powers of 1024) or KB (powers of 1000)"),
        ("1g", "ambiguous unit 'g'"),
        ("4XiB", "unknown byte unit 'XiB' in '4XiB' (use B, KiB, MiB, GiB, TiB, PiB, KB, MB"),
        ("1.3B", "not a whole number of bytes: '1.3B'"),
        (1.5, "not a whole number of bytes: 1.5"),
        (-1, "must not be negative (got -1)"),
        ("-4KiB", "must not be negative (got -4KiB)"),
        ("KiB", "not a byte size: 'KiB'"),
        ("", "not a byte size: ''"),
        ("4 K i B", "not a byte size: '4 K i B'"),
        (True, "not a byte size: True"),
        (None, "not a byte size: None"),
        ([4], "not a byte size: [4]"),
    ],
)
def test_parse_bytes_rejects(text: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_bytes(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (5, 5.0),
        (0, 0.0),
        (2.5, 2.5),
        ("5", 5.0),
        ("5s", 5.0),
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("100ns", 1e-7),
        ("2m", 120.0),
        ("2min", 120.0),
        ("1.5m", 90.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1H", 3600.0),
        (" 10 s ", 10.0),
        ("1h30m", 5400.0),
        ("1m 30s", 90.0),
        ("1h1m1s", 3661.0),
        ("2m500ms", 120.5),
    ],
)
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration_s(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (-5, "must not be negative (got -5)"),
        ("-1s", "must not be negative (got -1s)"),
        ("5 fortnights", "unknown duration unit 'fortnights' in '5 fortnights' (use ns, us, ms"),
        ("5x", "unknown duration unit 'x'"),
        ("soon", "not a duration: 'soon'"),
        ("1h30", "not a duration: '1h30'"),
        ("1h-30m", "not a duration: '1h-30m'"),
        ("1h 30x", "unknown duration unit 'x' in '1h 30x'"),
        (float("inf"), "not a duration: inf"),
        (float("nan"), "not a duration: nan"),
        (True, "not a duration: True"),
        (None, "not a duration: None"),
    ],
)
def test_parse_duration_rejects(text: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration_s(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0.05, 0.05),
        ("5%", 0.05),
        ("99.9%", 0.999),
        ("100%", 1.0),
        (1, 1.0),
        (0, 0.0),
        ("0.7", 0.7),
        ("150%", 1.5),
        (" 50 % ", 0.5),
    ],
)
def test_parse_fraction(text: object, expected: float) -> None:
    assert parse_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["5%%", "five", "5 percent", True, None, float("nan"), "%"])
def test_parse_fraction_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_fraction(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0B"),
        (512, "512B"),
        (1000, "1000B"),
        (4096, "4KiB"),
        (6144, "6KiB"),
        (1024**2, "1MiB"),
        (256 * 1024**2, "256MiB"),
        (4 * 1024**3, "4GiB"),
        (1024**4 + 1024**3, "1025GiB"),
        (3 * 1024**5, "3PiB"),
    ],
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text
    assert parse_bytes(text) == size


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (0.25, "250ms"),
        (1, "1s"),
        (2.5, "2.5s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (600, "10m"),
        (3600, "1h"),
        (3661, "1h1m1s"),
        (90.5, "90.5s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration_s(seconds) == text


@pytest.mark.parametrize(
    ("fraction", "text"), [(0.05, "5%"), (0.999, "99.9%"), (1.0, "100%"), (0.0, "0%"), (0.7, "70%")]
)
def test_format_fraction(fraction: float, text: str) -> None:
    assert format_fraction(fraction) == text


@given(st.integers(min_value=0, max_value=1 << 62))
def test_bytes_round_trip(size: int) -> None:
    assert parse_bytes(format_bytes(size)) == size


@given(st.integers(min_value=0, max_value=10 * 86400))
def test_duration_round_trip_whole_seconds(seconds: int) -> None:
    assert parse_duration_s(format_duration_s(seconds)) == seconds


@given(st.integers(min_value=1, max_value=999))
def test_percent_equals_fraction(numerator: int) -> None:
    text = f"{numerator / 10:g}%"
    assert parse_fraction(text) == pytest.approx(numerator / 1000)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_bytes, "1e50B", 10**50),  # at the bounds: read exactly
        (parse_bytes, "1" + "0" * 49 + "B", 10**49),
        (parse_duration_s, "1e-50s", 1e-50),
        (parse_fraction, "1e50%", 1e48),
    ],
)
def test_numbers_in_strings_at_the_bounds(parse: Callable[[object], float], text: str,
                                          expected: float) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_bytes, "1e51B"),
        (parse_bytes, "1" + "0" * 50 + "B"),  # 51 characters
        (parse_bytes, "1e999999999B"),  # a billion-digit integer, were it read
        (parse_duration_s, "1e-51s"),
        (parse_duration_s, "1e999999999s"),
        (parse_duration_s, "1h " + "9" * 60 + "s"),  # a part of a compound duration
        (parse_fraction, "1e999999999%"),
    ],
)
def test_numbers_in_strings_beyond_the_bounds_are_refused_at_once(
        parse: Callable[[object], float], text: str) -> None:
    with pytest.raises(ValueError, match="number out of range in"):
        parse(text)
