"""Workload keys: one parser per key, and the create / edit / delete rules across steps.

Owns the meaning of a step's ``workloads:`` entries: an entry naming a new workload creates it
(``iosequencer`` required, other keys default), an entry naming an existing one edits only the
keys given, ``delete: true`` removes it (it must exist). Workloads persist into later steps.
The resolved workload is checked as a whole (range_start < range_end, hot zone keys together,
...) and errors name the key of the entry that made it wrong. This module must not know about
steps' timing, measure or DFC.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from master.config.catalog import IOSEQUENCERS, LUN_ATTRIBUTE_KEYS, RANDOM_IOSEQUENCERS
from master.config.limits import (
    MAX_BLOCKSIZE_BYTES,
    MAX_IODEPTH,
    MAX_IOPS,
    MAX_LUN_BYTES,
    MAX_SKEW_WEIGHT,
    MAX_WRITE_DATA_RATIO,
    MIN_IOPS,
    MIN_SKEW_WEIGHT,
    bounded,
    format_number,
    show_bytes,
)
from master.config.schema import (
    AttributeMatch,
    LunChoice,
    LunExtent,
    LunSelector,
    WorkloadChange,
    WorkloadEdit,
    WorkloadSpec,
    WriteData,
)
from master.config.units import format_bytes, parse_bytes, parse_fraction
from master.config.yamlnodes import Collected, Cursor

__all__ = [
    "EDITABLE_KEYS",
    "WORKLOAD_KEYS",
    "WorkloadContext",
    "WorkloadTable",
    "parse_attribute_value",
    "parse_iops",
    "parse_settings",
    "substitute",
]

WORKLOAD_KEYS: tuple[str, ...] = (
    "name",
    "luns",
    "iosequencer",
    "blocksize",
    "iodepth",
    "iops",
    "read_fraction",
    "range_start",
    "range_end",
    "seq_start",
    "hot_zone_size",
    "hot_zone_share",
    "skew_weight",
    "write_data",
    "busy_poll",
    "delete",
    "seed",
)
#: Keys that ``for:`` and ``edit_rollup`` may change on existing workloads.
EDITABLE_KEYS: tuple[str, ...] = tuple(
    key for key in WORKLOAD_KEYS if key not in ("name", "luns", "delete", "seed")
)
#: YAML key → dataclass field, where they differ (units in names).
_FIELD: dict[str, str] = {"blocksize": "blocksize_bytes"}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class WorkloadContext:
    """What workload parsing needs to know about the rest of the test."""

    host_names: tuple[str, ...]
    luns: tuple[LunSelector, ...]
    output_root: Path


def substitute(cursor: Cursor, text: str, values: Mapping[str, str]) -> str:
    """Replace ``${name}`` placeholders by ``values[name]``; any other ``${...}`` is an error."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            known = ", ".join(f"${{{name}}}" for name in values)
            raise cursor.error(f"unknown placeholder ${{{match.group(1)}}} (known: {known})")
        return values[match.group(1)]

    return _PLACEHOLDER.sub(replace, text)


# ---------------------------------------------------------------- per-key parsers


def _fraction(cursor: Cursor, low: float = 0.0, high: float = 1.0) -> float:
    try:
        value = parse_fraction(cursor.value if cursor.is_scalar else None)
    except ValueError as exc:
        raise cursor.error(f"must be a fraction {low:g}..{high:g} or a percentage") from exc
    if not low <= value <= high:
        hint = ""
        # a whole number of percent, its sign left out (fio's rwmixread=70)
        if (high == 1.0 and 1.0 < value <= 100.0 and value == int(value)
                and not str(cursor.node.text).endswith("%")):
            hint = f": did you mean {cursor.node.text}%?"
        raise cursor.error(f"must be between {low:g} and {high:g} (got "
                           f"{cursor.node.text}){hint}")
    return value


def _extent(cursor: Cursor) -> LunExtent:
    value = cursor.value if cursor.is_scalar else None
    message = "must be a fraction 0..1 (like 0.5 or 50%) or a size with a unit (like 1GiB)"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return LunExtent(_fraction(cursor), "fraction")
    if isinstance(value, str):
        if value.strip().endswith("%"):
            return LunExtent(_fraction(cursor), "fraction")
        if any(char.isalpha() for char in value):
            try:
                size = float(parse_bytes(value))
            except ValueError as exc:
                raise cursor.error(str(exc)) from exc
            return LunExtent(bounded(cursor, size, high=MAX_LUN_BYTES, show=show_bytes), "bytes")
    raise cursor.error(message)


def _iosequencer(cursor: Cursor) -> str:
    value = cursor.string()
    if value not in IOSEQUENCERS:
        raise cursor.error(f"unknown iosequencer {value!r} (one of {', '.join(IOSEQUENCERS)})")
    return value


def _blocksize(cursor: Cursor) -> int:
    try:
        size = parse_bytes(cursor.value if cursor.is_scalar else None)
    except ValueError as exc:
        raise cursor.error(str(exc)) from exc
    if size <= 0 or size % 512:
        raise cursor.error(f"must be a positive multiple of 512 (got {size}){_si_hint(cursor)}")
    bounded(cursor, size, high=MAX_BLOCKSIZE_BYTES, show=show_bytes)
    return size


_SI_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT])[bB]?\s*$")


def _si_hint(cursor: Cursor) -> str:
    """A size written with a decimal unit (``4kb``, ``64K``: powers of 1000) that fio users
    mean as a binary one: what to write."""
    match = _SI_SIZE.match(cursor.node.text) if cursor.is_scalar else None
    if match is None:
        return ""
    number, unit = match.groups()
    return (f": {cursor.node.text.strip()} is {format_number(parse_bytes(cursor.node.text))} "
            f"bytes (powers of 1000); did you mean {number}{unit.upper()}iB?")


def _iodepth(cursor: Cursor) -> int:
    return cursor.integer(1, MAX_IODEPTH)


def parse_iops(cursor: Cursor, high: float = MAX_IOPS) -> float | Literal["max"]:
    """``iops`` (``MIN_IOPS`` .. ``high``, by default one workload's ``MAX_IOPS``) or ``max``."""
    if cursor.value == "max":
        return "max"
    value = cursor.value
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        got = cursor.shown()
        if isinstance(value, str) and _is_number_text(value):
            got = f"the string {value!r}: write the number without quotes"
        raise cursor.error(f"must be a number > 0 or 'max' (got {got})")
    return bounded(cursor, float(value), low=MIN_IOPS, high=high)


def _is_number_text(text: str) -> bool:
    try:
        float(text.strip())
    except ValueError:
        return False
    return True


def _hot_zone_size(cursor: Cursor) -> LunExtent:
    extent = _extent(cursor)
    if extent.value <= 0:
        raise cursor.error("must be greater than 0")
    return extent


def _skew_weight(cursor: Cursor) -> float:
    value = cursor.number()
    if value <= 0:
        raise cursor.error(f"must be greater than 0 (got {cursor.node.text})")
    return bounded(cursor, value, low=MIN_SKEW_WEIGHT, high=MAX_SKEW_WEIGHT)


def _ratio(cursor: Cursor, text: str | float) -> float:
    try:
        ratio = float(text)
    except ValueError as exc:
        raise cursor.error(f"bad ratio {text!r}: must be a number >= 1") from exc
    if not ratio >= 1.0 or ratio == float("inf"):
        raise cursor.error(f"bad ratio {text!r}: must be a number >= 1")
    if ratio > MAX_WRITE_DATA_RATIO:
        raise cursor.error(
            f"bad ratio {text!r}: must be at most {format_number(MAX_WRITE_DATA_RATIO)}"
        )
    return ratio


def _write_data(cursor: Cursor) -> WriteData:
    usage = "must be random, zeros, 'compressible:<ratio>', 'dedupable:<ratio>' or a mapping"
    if cursor.is_map:
        cursor.check_keys(("compressible", "dedupable"))
        keys = cursor.mapping_keys()
        if len(keys) != 1:
            raise cursor.error("give exactly one of compressible or dedupable")
        child = cursor.require(keys[0])
        kind: Literal["compressible", "dedupable"] = (
            "compressible" if keys[0] == "compressible" else "dedupable"
        )
        return WriteData(kind, _ratio(child, child.number()))
    if not cursor.is_scalar or not isinstance(cursor.value, str):
        raise cursor.error(usage)
    text = cursor.value.strip()
    if text == "random":
        return WriteData()
    if text == "zeros":
        return WriteData("zeros")
    kind_text, _, ratio_text = text.partition(":")
    if kind_text == "compressible" and ratio_text:
        return WriteData("compressible", _ratio(cursor, ratio_text.strip()))
    if kind_text == "dedupable" and ratio_text:
        return WriteData("dedupable", _ratio(cursor, ratio_text.strip()))
    raise cursor.error(usage)


def _busy_poll(cursor: Cursor) -> bool:
    return cursor.boolean()


def _seed(cursor: Cursor) -> int:
    return cursor.integer(0, 2**64 - 1)


_PARSERS: dict[str, Callable[[Cursor], object]] = {
    "iosequencer": _iosequencer,
    "blocksize": _blocksize,
    "iodepth": _iodepth,
    "iops": parse_iops,
    "read_fraction": _fraction,
    "range_start": _extent,
    "range_end": _extent,
    "seq_start": _extent,
    "hot_zone_size": _hot_zone_size,
    "hot_zone_share": _fraction,
    "skew_weight": _skew_weight,
    "write_data": _write_data,
    "busy_poll": _busy_poll,
    "seed": _seed,
}


def parse_setting(key: str, cursor: Cursor) -> object:
    """One workload key's value (``key`` must be in ``_PARSERS``)."""
    return _PARSERS[key](cursor)


def parse_settings(cursor: Cursor, keys: Collection[str]) -> dict[str, tuple[object, Cursor]]:
    """The given ``keys`` of a mapping → {YAML key: (typed value, cursor)}."""
    settings: dict[str, tuple[object, Cursor]] = {}
    errors = Collected()  # each key's error, all at once
    for key in keys:
        child = cursor.get(key)
        if child is not None:
            with errors.each():
                settings[key] = (parse_setting(key, child), child)
    errors.raise_any()
    return settings


def settings_to_edit(settings: dict[str, tuple[object, Cursor]]) -> WorkloadEdit:
    return WorkloadEdit(**{_FIELD.get(key, key): value for key, (value, _) in settings.items()})  # type: ignore[arg-type]


#: a pattern for a LUN attribute in bytes (``size_bytes`` ...) can match its decimal digits
#: only with these characters
_BYTES_PATTERN = re.compile(r"^[0-9*?\[\]!-]+$")


def parse_attribute_value(cursor: Cursor, key: str = "") -> str | int | bool:
    """A LUN attribute's pattern: a glob, an integer or true/false. For an attribute in bytes
    (``key`` ending ``_bytes``, compared as its decimal digits) a pattern that could never match
    them (``1GiB``) is refused, saying the number to write."""
    value = cursor.value
    if not cursor.is_scalar or not isinstance(value, (str, int, bool)) or value == "":
        raise cursor.error("must be a string (glob), an integer or true/false")
    if key.endswith("_bytes") and isinstance(value, str) and not _BYTES_PATTERN.match(value):
        try:
            size = parse_bytes(value)
        except ValueError:
            raise cursor.error(f"{key} is a number of bytes, matched as its digits: {value!r} "
                               "matches no LUN (use digits and the glob characters * ? [ ])"
                               ) from None
        raise cursor.error(f"{key} is a number of bytes, matched as its digits: {value!r} "
                           f"matches no LUN; write {size}") from None
    return value


def _lun_choice(cursor: Cursor, context: WorkloadContext) -> LunChoice:
    if cursor.is_scalar and cursor.value == "all":
        return LunChoice()
    if cursor.is_seq or (cursor.is_scalar and isinstance(cursor.value, str)):
        if len(cursor) == 0 and cursor.is_seq:
            raise cursor.error("must not be empty")
        paths = []
        for item in cursor if cursor.is_seq else [cursor]:
            values = {"output_root": str(context.output_root)}
            path = substitute(item, item.string(), values)
            if not path.startswith("/"):
                raise item.error(f"must be an absolute LUN path (got {path!r})")
            _check_path_selected(item, path, context.luns)
            paths.append(path)
        return LunChoice(every=False, paths=tuple(paths))
    if cursor.is_map:
        allowed = ("host", "lun", *LUN_ATTRIBUTE_KEYS)
        cursor.check_keys(allowed)
        if not cursor.mapping_keys():
            raise cursor.error("must name at least one attribute")
        matches = []
        for key in cursor.mapping_keys():
            child = cursor.require(key)
            pattern = parse_attribute_value(child, key)
            if key == "host":
                if not isinstance(pattern, str):
                    raise child.error("must be a host name or glob")
                match = AttributeMatch(key, pattern)
                if not any(match.matches(name) for name in context.host_names):
                    raise child.error(f"matches no host in hosts (got {pattern!r})")
            matches.append(AttributeMatch(key, pattern))
        return LunChoice(every=False, attributes=tuple(matches))
    raise cursor.error("must be 'all', a mapping of attributes or a list of LUN paths")


def _check_path_selected(cursor: Cursor, path: str, luns: tuple[LunSelector, ...]) -> None:
    if _GLOB_CHARS & set(path) or any(lun.kind == "attributes" for lun in luns):
        return  # decided against discovered LUNs at run time
    for lun in luns:
        if lun.kind == "file" and lun.file == path:
            return
        if (
            lun.kind == "path"
            and lun.path is not None
            and AttributeMatch("lun", lun.path).matches(path)
        ):
            return
    raise cursor.error(f"{path!r} is not selected by any entry of luns")


# ---------------------------------------------------------------- create / edit / delete


def _where(entry: Cursor, given: dict[str, tuple[object, Cursor]], *keys: str) -> Cursor:
    for key in keys:
        if key in given:
            return given[key][1]
    return entry


def _check_spec(spec: WorkloadSpec, entry: Cursor, given: dict[str, tuple[object, Cursor]]) -> None:
    start, end = spec.range_start, spec.range_end
    if start.unit == end.unit and start.value >= end.value:
        if "range_start" in given:
            raise given["range_start"][1].error(f"must be less than range_end ({start} >= {end})")
        if "range_end" in given:
            raise given["range_end"][1].error(
                f"must be greater than range_start ({end} <= {start})"
            )
        raise entry.error(f"range_start must be less than range_end ({start} >= {end})")
    if start.unit == end.unit == "bytes" and end.value - start.value < spec.blocksize_bytes:
        raise _where(entry, given, "range_end", "range_start", "blocksize").error(
            f"range {start}..{end} is smaller than blocksize {spec.blocksize_bytes}"
        )
    if spec.seq_start is not None:
        if spec.iosequencer != "sequential":
            raise _where(entry, given, "seq_start", "iosequencer").error(
                f"seq_start applies to the sequential iosequencer only (this is {spec.iosequencer})"
            )
        seq = spec.seq_start
        if (seq.unit == start.unit and seq.value < start.value) or (
            seq.unit == end.unit and seq.value >= end.value
        ):
            raise _where(entry, given, "seq_start").error(
                f"seq_start must lie in range_start..range_end ({seq} not in {start}..{end})"
            )
    has_size, has_share = spec.hot_zone_size is not None, spec.hot_zone_share is not None
    if has_size != has_share:
        raise _where(entry, given, "hot_zone_size", "hot_zone_share").error(
            "hot_zone_size and hot_zone_share go together"
        )
    if has_size and spec.iosequencer not in RANDOM_IOSEQUENCERS:
        raise _where(entry, given, "hot_zone_size", "hot_zone_share", "iosequencer").error(
            f"hot zones apply to random iosequencers only (this is {spec.iosequencer})"
        )
    hot = spec.hot_zone_size
    if hot is not None and hot.unit == "bytes" and hot.value < spec.blocksize_bytes:
        raise _where(entry, given, "hot_zone_size", "blocksize").error(
            f"hot_zone_size {hot} is less than one block of {format_bytes(spec.blocksize_bytes)} "
            "(hot_zone_share would have no blocks to go to)"
        )


class WorkloadTable:
    """The workloads in force, in creation order, updated step after step."""

    def __init__(self, context: WorkloadContext) -> None:
        self.context = context
        self._specs: dict[str, WorkloadSpec] = {}

    def snapshot(self) -> tuple[WorkloadSpec, ...]:
        return tuple(self._specs.values())

    def names(self) -> list[str]:
        return list(self._specs)

    def apply_entry(self, entry: Cursor, *, allow_empty_edit: bool) -> WorkloadChange:
        """One ``workloads:`` entry of a step."""
        entry.expect_map("a mapping with 'name'")
        entry.check_keys(WORKLOAD_KEYS)
        name_cursor = entry.require("name")
        name = name_cursor.string()
        if not _NAME.match(name):
            raise name_cursor.error(
                f"bad workload name {name!r}: use letters, digits, '.', '_' and '-'"
            )
        delete_cursor = entry.get("delete")
        if delete_cursor is not None and delete_cursor.boolean():
            others = [key for key in entry.mapping_keys() if key not in ("name", "delete")]
            if others:
                raise delete_cursor.error(
                    f"delete cannot be combined with other keys ({', '.join(others)})"
                )
            if name not in self._specs:
                raise name_cursor.error(
                    f"cannot delete workload {name!r}: it does not exist at this step"
                )
            del self._specs[name]
            return WorkloadChange("delete", name)
        given = parse_settings(entry, _PARSERS)
        if name in self._specs:
            for fixed in ("luns", "seed"):
                child = entry.get(fixed)
                if child is not None:
                    raise child.error(
                        f"cannot change {fixed} of existing workload {name!r}; "
                        "delete it and create it again"
                    )
            if not given and not allow_empty_edit:
                raise entry.error(
                    f"workload {name!r} already exists and this entry changes nothing"
                )
            self.edit(name, given, entry)
            return WorkloadChange("edit", name, tuple(given))
        if "iosequencer" not in given:
            raise entry.error(f"missing key 'iosequencer' (needed to create workload {name!r})")
        luns_cursor = entry.get("luns")
        luns = LunChoice() if luns_cursor is None else _lun_choice(luns_cursor, self.context)
        fields = {_FIELD.get(key, key): value for key, (value, _) in given.items()}
        spec = WorkloadSpec(name=name, luns=luns, **fields)  # type: ignore[arg-type]
        _check_spec(spec, entry, given)
        self._specs[name] = spec
        keys = tuple(key for key in entry.mapping_keys() if key != "name")
        return WorkloadChange("create", name, keys)

    def edit(self, name: str, given: dict[str, tuple[object, Cursor]], where: Cursor) -> None:
        """Change the ``given`` keys of an existing workload and check the result."""
        fields = {_FIELD.get(key, key): value for key, (value, _) in given.items()}
        spec = dataclasses.replace(self._specs[name], **fields)  # type: ignore[arg-type]
        _check_spec(spec, where, given)
        self._specs[name] = spec
