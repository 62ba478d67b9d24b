"""The test's ``verify:``: data verification's settings, and what a verified test may not hold.

Data verification (docs/verify.md) stamps every sector a write puts down and checks every read
of a written block against the run's map, which keeps one byte per 4 KiB block. ``verify:`` is
``false`` (the default), ``true``, or a mapping ``{on_error: stop | continue, findings_kept:
N}`` (``schema.VerifyConfig``; ``{}`` is ``true``).

Owns the parsing of ``verify:`` and the checks a verified test must pass, every one at once,
each at the key that breaks it: every blocksize a workload can take (a ``workloads:`` entry's,
each value of a ``for:`` sweep, an ``edit_rollup`` entry's) is whole map blocks; a
``range_start`` given in bytes lies on a map block's boundary (the I/Os lie on a grid of
blocksize steps from it: ``slave/sequencer.py``); no ``write_data`` is ``dedupable`` (each
stamp carries its block's offset, so no block repeats). ``range_end``, ``seq_start`` and
``hot_zone_size`` cannot put an I/O off that grid (the sequencer takes whole blocks of the
range and of the hot zone, and rounds ``seq_start`` down onto the grid), so they are not
checked; nor is a ``range_start`` given as a fraction, which only the LUN's size makes bytes,
once the LUN is known. A value that does not parse is left to the steps' own checks, which
name it. This module must not run anything: what verification does is the run's and the
engine's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from master.config.limits import MAX_FINDINGS_KEPT
from master.config.schema import LunExtent, VerifyConfig, WriteData
from master.config.workloads import parse_setting
from master.config.yamlnodes import Collected, Cursor
from protocol.errors import ConfigError

__all__ = [
    "DEDUPABLE",
    "ON_ERROR",
    "VERIFY_BLOCK_BYTES",
    "VERIFY_KEYS",
    "check_verifiable",
    "describe",
    "parse_verify",
]

VERIFY_KEYS: tuple[str, ...] = ("on_error", "findings_kept")
ON_ERROR: tuple[Literal["stop", "continue"], ...] = ("stop", "continue")
#: the map's block, ``protocol.verify.MAP_BLOCK_BYTES`` (not imported: a test file is read and
#: refused before numpy is; tests/master/test_config_verify.py keeps the two equal)
VERIFY_BLOCK_BYTES = 4096
#: the keys of a workload's settings a verified test restricts
_CHECKED: tuple[str, ...] = ("blocksize", "range_start", "write_data")
DEDUPABLE = ("dedupable data cannot be verified: each verified block carries its own offset, "
             "so no block repeats (docs/verify.md)")


def parse_verify(cursor: Cursor | None) -> VerifyConfig | None:
    """The top level's ``verify:`` (``None`` when absent or ``false``); every wrong key of the
    mapping at once."""
    if cursor is None:
        return None
    if cursor.is_scalar and isinstance(cursor.value, bool):
        return VerifyConfig() if cursor.value else None
    if not cursor.is_map:
        raise cursor.error("must be true, false or a mapping {on_error, findings_kept} "
                           f"(got {cursor.shown()})")
    cursor.check_keys(VERIFY_KEYS)
    default = VerifyConfig()
    on_error, findings_kept = default.on_error, default.findings_kept
    errors = Collected()
    with errors.each():
        on_error = _on_error(cursor.get("on_error"), on_error)
    with errors.each():
        kept_cursor = cursor.get("findings_kept")
        if kept_cursor is not None:
            findings_kept = kept_cursor.integer(0, MAX_FINDINGS_KEPT)
    errors.raise_any()
    return VerifyConfig(on_error=on_error, findings_kept=findings_kept)


def _on_error(cursor: Cursor | None,
              default: Literal["stop", "continue"]) -> Literal["stop", "continue"]:
    if cursor is None:
        return default
    for choice in ON_ERROR:
        if cursor.is_scalar and cursor.value == choice:
            return choice
    raise cursor.error(f"must be stop or continue (got {cursor.shown()})")


def check_verifiable(steps: Cursor | None, verify: Cursor, luns: Cursor | None = None) -> None:
    """Every value under ``steps:`` that a test with ``verify`` on cannot hold, each at its own
    key and line (``ConfigErrors`` when several), and every ``luns:`` entry ``shared: true``
    (another run may write the LUN: its blocks would read as damage). ``verify`` is the key's
    cursor, for its line."""
    errors = Collected()
    for entry in luns if luns is not None and luns.is_seq else ():
        shared = entry.get("shared") if entry.is_map else None
        if shared is not None and shared.is_scalar and shared.value is True:
            with errors.each():
                raise shared.error(f"verify (line {verify.line}) cannot check a LUN another run "
                                   "may write too (shared: true): its writes would read as "
                                   "damage; verify a LUN this run has alone")
    for step in steps if steps is not None and steps.is_seq else ():
        for key, cursor in _written(step):
            with errors.each():
                _check(key, cursor, verify.line)
    errors.raise_any()


def _written(step: Cursor) -> Iterator[tuple[str, Cursor]]:
    """Each value of a restricted key a step writes: in its ``workloads:`` and
    ``edit_rollup:`` entries, and in its ``for:`` lists, in the file's order per key."""
    if not step.is_map:
        return
    for list_key in ("workloads", "edit_rollup"):
        entries = step.get(list_key)
        if entries is None or not entries.is_seq:
            continue
        for entry in entries:
            if not entry.is_map:
                continue
            for key in _CHECKED:
                child = entry.get(key)
                if child is not None:
                    yield key, child
    sweep = step.get("for")
    if sweep is not None and sweep.is_map:
        for key in _CHECKED:
            values = sweep.get(key)
            if values is not None and values.is_seq:
                for item in values:
                    yield key, item


def _check(key: str, cursor: Cursor, verify_line: int) -> None:
    try:
        value = parse_setting(key, cursor)
    except ConfigError:
        return  # not a value at all: the steps' own checks name it
    block = VERIFY_BLOCK_BYTES
    if key == "blocksize" and isinstance(value, int) and value % block:
        raise cursor.error(f"verify (line {verify_line}) needs every workload's blocksize to be "
                           f"a multiple of {block} bytes (the map's block), not "
                           f"{_as_written(cursor, value)}")
    if (key == "range_start" and isinstance(value, LunExtent) and value.unit == "bytes"
            and int(value.value) % block):
        raise cursor.error(f"verify (line {verify_line}) needs range_start on a {block}-byte "
                           "boundary (the map's block: the I/Os lie on a grid of blocksize "
                           f"steps from it), not {_as_written(cursor, int(value.value))}")
    if key == "write_data" and isinstance(value, WriteData) and value.kind == "dedupable":
        raise cursor.error(DEDUPABLE)


def _as_written(cursor: Cursor, size: int) -> str:
    """A size in bytes, and as the test file writes it when that differs: ``6144 (6KiB)``."""
    text = cursor.shown()
    return str(size) if text == str(size) else f"{size} ({text})"


def describe(verify: VerifyConfig) -> str:
    """The plan's words for it: ``data verification: on (on_error stop, 64 findings kept)``."""
    return (f"data verification: on (on_error {verify.on_error}, {verify.findings_kept} "
            "findings kept)")
