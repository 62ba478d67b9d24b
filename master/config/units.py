"""Units in test files: byte sizes, durations and fractions, parsed and formatted.

Owns the one definition of what ``4KiB``, ``1GB``, ``500ms``, ``2m`` and ``5%`` mean. Pure
functions: no I/O, no knowledge of the test-file schema. Parsers raise ``ValueError`` with a
short reason; ``master.config`` turns that into a ``ConfigError`` carrying file, line and key
path.

Byte sizes (``parse_bytes``)
    A non-negative integer is a number of bytes. A string is a number followed by a unit:
    ``B``; binary ``KiB MiB GiB TiB PiB`` (powers of 1024); decimal ``KB MB GB TB PB`` (powers of
    1000). Units are case-insensitive (``kib`` = ``KiB``). The number may have a fraction
    (``1.5GiB``) as long as the result is a whole number of bytes. The one-letter shorthands
    ``k m g t p`` are refused as ambiguous (fio reads ``4k`` as 4096, most storage vendors as
    4000): write ``4KiB`` or ``4KB``.
Durations (``parse_duration_s``)
    A non-negative number is seconds. A string is a number with an optional unit:
    ``ns us ms s m min h d`` (``m`` is minutes; ``ms`` is milliseconds), or several numbers
    each with a unit, added up (``1h30m``, ``1m 30s``), as ``format_duration_s`` writes them.
Fractions (``parse_fraction``)
    A number (``0.05``) or a percentage string (``5%``). Range checks belong to the caller.

A number inside a string is read exactly (as a ``Fraction``), so its size is bounded first: at
most ``MAX_NUMBER_CHARS`` characters and an exponent within ±``MAX_EXPONENT`` (``"1e999999999B"``
would otherwise be a billion-digit integer). Both lie far beyond any value a test could mean.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "BYTE_UNITS",
    "DURATION_UNITS_S",
    "format_bytes",
    "format_duration_s",
    "format_fraction",
    "parse_bytes",
    "parse_duration_s",
    "parse_fraction",
]

#: Byte units (lower-cased) and their size in bytes.
BYTE_UNITS: dict[str, int] = {
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "pib": 1024**5,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
}
_BYTE_UNIT_NAMES = "B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB"
_AMBIGUOUS_BYTE_UNITS = frozenset({"k", "m", "g", "t", "p"})

#: Duration units (lower-cased) and their length in seconds, as exact fractions.
DURATION_UNITS_S: dict[str, Fraction] = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "min": Fraction(60),
    "h": Fraction(3600),
    "d": Fraction(86400),
}
_DURATION_UNIT_NAMES = "ns, us, ms, s, m, min, h, d"

#: the longest number inside a string (``"1.5GiB"``), in characters
MAX_NUMBER_CHARS = 50
#: the largest exponent of a number inside a string (``"1e6us"``), either sign
MAX_EXPONENT = 50

_NUMBER_UNIT = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z%]*)\s*$")


def _is_plain_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _exact(number: str, text: str) -> Fraction:
    """The number text (as matched by ``_NUMBER_UNIT``) as a ``Fraction``, if it is bounded."""
    _, _, exponent = number.lower().partition("e")
    if len(number) > MAX_NUMBER_CHARS or (
        exponent and abs(int(exponent)) > MAX_EXPONENT
    ):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"number out of range in {shown!r}")
    return Fraction(number)


def _split(text: str, what: str) -> tuple[Fraction, str]:
    match = _NUMBER_UNIT.match(text)
    if match is None:
        raise ValueError(f"not a {what}: {text!r}")
    return _exact(match.group(1), text), match.group(2)


def parse_bytes(value: object) -> int:
    """``4096 -> 4096``, ``"4KiB" -> 4096``, ``"1GB" -> 10**9``, ``"1.5KiB" -> 1536``."""
    if _is_plain_number(value):
        assert isinstance(value, (int, float))
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"not a whole number of bytes: {value!r}")
        number, unit = Fraction(value), ""
    elif isinstance(value, str):
        number, unit = _split(value, "byte size")
    else:
        raise ValueError(f"not a byte size: {value!r}")
    if unit == "":
        scale = 1
    else:
        lower = unit.lower()
        if lower in _AMBIGUOUS_BYTE_UNITS:
            raise ValueError(
                f"ambiguous unit {unit!r} in {value!r}: write {unit.upper()}iB (powers of 1024) "
                f"or {unit.upper()}B (powers of 1000)"
            )
        if lower not in BYTE_UNITS:
            raise ValueError(f"unknown byte unit {unit!r} in {value!r} (use {_BYTE_UNIT_NAMES})")
        scale = BYTE_UNITS[lower]
    if number < 0:
        raise ValueError(f"must not be negative (got {value})")
    total = number * scale
    if total.denominator != 1:
        raise ValueError(f"not a whole number of bytes: {value!r}")
    return int(total)


_COMPOUND_PART = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+))\s*([A-Za-z]+)")


def _duration_parts(text: str) -> list[tuple[Fraction, str]]:
    """``"500ms"`` → one part; ``"1h30m"`` / ``"1m 30s"`` → several, each with a unit."""
    if _NUMBER_UNIT.match(text):
        return [_split(text, "duration")]
    parts, position = [], 0
    stripped = text.rstrip()
    while position < len(stripped):
        match = _COMPOUND_PART.match(stripped, position)
        if match is None:
            raise ValueError(f"not a duration: {text!r}")
        parts.append((_exact(match.group(1), text), match.group(2)))
        position = match.end()
    if not parts:
        raise ValueError(f"not a duration: {text!r}")
    return parts


def parse_duration_s(value: object) -> float:
    """``5 -> 5.0``, ``"500ms" -> 0.5``, ``"2m" -> 120.0``, ``"1h30m" -> 5400.0``."""
    if _is_plain_number(value):
        assert isinstance(value, (int, float))
        if not math.isfinite(value):
            raise ValueError(f"not a duration: {value!r}")
        seconds = Fraction(value)
    elif isinstance(value, str):
        parts = _duration_parts(value)
        seconds = Fraction(0)
        for number, unit in parts:
            if unit == "":
                scale = Fraction(1)
            else:
                if unit.lower() not in DURATION_UNITS_S:
                    raise ValueError(
                        f"unknown duration unit {unit!r} in {value!r} (use {_DURATION_UNIT_NAMES})"
                    )
                scale = DURATION_UNITS_S[unit.lower()]
            seconds += number * scale
    else:
        raise ValueError(f"not a duration: {value!r}")
    if seconds < 0:
        raise ValueError(f"must not be negative (got {value})")
    return float(seconds)


def parse_fraction(value: object) -> float:
    """``0.05 -> 0.05``, ``"5%" -> 0.05``, ``1 -> 1.0``. No range check."""
    if _is_plain_number(value):
        assert isinstance(value, (int, float))
        if not math.isfinite(value):
            raise ValueError(f"not a number: {value!r}")
        return float(value)
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match is not None and match.group(2) in ("", "%"):
            number = _exact(match.group(1), value)
            return float(number / 100 if match.group(2) == "%" else number)
    raise ValueError(f"not a fraction or percentage: {value!r}")


def format_bytes(size_bytes: int) -> str:
    """The largest binary unit that divides exactly: ``4096 -> "4KiB"``, ``1000 -> "1000B"``."""
    for name, scale in (
        ("PiB", 1024**5),
        ("TiB", 1024**4),
        ("GiB", 1024**3),
        ("MiB", 1024**2),
        ("KiB", 1024),
    ):
        if size_bytes and size_bytes % scale == 0:
            return f"{size_bytes // scale}{name}"
    return f"{size_bytes}B"


def format_duration_s(seconds: float) -> str:
    """``0.5 -> "500ms"``, ``5 -> "5s"``, ``90 -> "1m30s"``, ``3600 -> "1h"``."""
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:g}ms"
    if seconds < 60 or not float(seconds).is_integer():
        return f"{seconds:g}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


def format_fraction(fraction: float) -> str:
    """``0.05 -> "5%"``, ``0.999 -> "99.9%"``."""
    return f"{fraction * 100:.6g}%"


def format_exact(number: float) -> str:
    """``number`` short where that reads back as it (``5000``, ``1.5e+06``, ``0.52``), else
    with every digit it needs (``1234567``, ``0.1234567``): ``:g`` alone keeps 6 significant
    digits, and a limit or an edit written back must be the one given."""
    short = f"{number:g}"
    if float(short) == number:
        return short
    return repr(float(number)).removesuffix(".0")
