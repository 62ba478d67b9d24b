"""The ``hosts:`` list: host-name range expansion and host entries → ``HostConfig``.

Owns the range syntax (``cb[08-11]`` → cb08 cb09 cb10 cb11; ``h[1-3]``; lists ``n[1,4,7-9]``;
several ranges multiply: ``r[1-2]n[1-2]`` → r1n1 r1n2 r2n1 r2n2). A number is zero-padded to the
width of the range's first number as written (``[08-11]`` → 2 digits, ``[1-10]`` → none).
This module must not contact hosts; it only reads the test file.
"""

from __future__ import annotations

import itertools
import re
import shlex
from typing import Literal

from master.config.limits import duration_within
from master.config.schema import HostConfig
from master.config.yamlnodes import Cursor
from protocol import cpulist

__all__ = ["HOST_KEYS", "expand_ranges", "parse_hosts"]

HOST_KEYS: tuple[str, ...] = (
    "name",
    "address",
    "user",
    "port",
    "python",
    "ssh_config",
    "identity_file",
    "known_hosts",
    "transport",
    "exec",
    "connect_back",
    "worker_cpus",
    "watchdog_seconds",
)
#: The bounds of a host's ``watchdog_seconds``: a second (tests, labs that want a cut-off slave
#: gone fast) to an hour.
WATCHDOG_SECONDS_RANGE: tuple[float, float] = (1.0, 3600.0)
DEFAULT_WATCHDOG_S = 30.0

_MAX_EXPANSION = 10_000
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RANGE_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_bracket(body: str, text: str) -> list[str]:
    values: list[str] = []
    if not body:
        raise ValueError(f"empty range [] in {text!r}")
    for item in body.split(","):
        match = _RANGE_ITEM.match(item.strip())
        if match is None:
            raise ValueError(
                f"bad range [{body}] in {text!r}: expected numbers like [08-11] or [1,3,5-7]"
            )
        first_text, last_text = match.group(1), match.group(2)
        first = int(first_text)
        last = first if last_text is None else int(last_text)
        if last < first:
            raise ValueError(f"bad range [{body}] in {text!r}: {first_text} > {last_text}")
        if len(values) + last - first + 1 > _MAX_EXPANSION:
            raise ValueError(
                f"range [{body}] in {text!r} expands to more than {_MAX_EXPANSION} names"
            )
        width = len(first_text)
        values.extend(str(number).zfill(width) for number in range(first, last + 1))
    return values


def expand_ranges(text: str) -> list[str]:
    """``"cb[08-11]" -> ["cb08", "cb09", "cb10", "cb11"]``; no brackets → ``[text]``.

    Raises ``ValueError`` for an unclosed or empty bracket, a non-numeric range, or a range whose
    end is below its start.
    """
    pieces: list[list[str]] = []
    position = 0
    while position < len(text):
        open_at = text.find("[", position)
        close_at = text.find("]", position)
        if open_at < 0:
            if close_at >= 0:
                raise ValueError(f"unmatched ']' in {text!r}")
            pieces.append([text[position:]])
            break
        if 0 <= close_at < open_at:
            raise ValueError(f"unmatched ']' in {text!r}")
        close_at = text.find("]", open_at)
        if close_at < 0:
            raise ValueError(f"unclosed '[' in {text!r}")
        pieces.append([text[position:open_at]])
        pieces.append(_expand_bracket(text[open_at + 1 : close_at], text))
        position = close_at + 1
    total = 1
    for piece in pieces:
        total *= len(piece)
    if total > _MAX_EXPANSION:
        raise ValueError(f"{text!r} expands to more than {_MAX_EXPANSION} names")
    return ["".join(parts) for parts in itertools.product(*pieces)]


def _expand(cursor: Cursor) -> list[str]:
    text = cursor.string()
    try:
        names = expand_ranges(text)
    except ValueError as exc:
        raise cursor.error(str(exc)) from exc
    return names


def _check_name(cursor: Cursor, name: str) -> None:
    if not _HOST_NAME.match(name):
        raise cursor.error(f"bad host name {name!r}: use letters, digits, '.', '_' and '-'")
    if name == "all":
        raise cursor.error("the host name 'all' is reserved")


def _optional_string(entry: Cursor, key: str) -> str | None:
    child = entry.get(key)
    if child is None:
        return None
    value = child.string()
    if not value:
        raise child.error("must not be empty")
    return value


def _worker_cpus(entry: Cursor) -> str:
    """``worker_cpus``: ``auto`` (default), ``unpinned`` or a CPU list (``0-3,8``; a lone CPU
    may be written as a number), normalised."""
    child = entry.get("worker_cpus")
    if child is None:
        return cpulist.AUTO
    value = child.value
    if isinstance(value, int) and not isinstance(value, bool) and child.is_scalar:
        text = str(value)
    elif child.is_scalar and isinstance(value, str):
        text = value
    else:
        raise child.error("must be auto, unpinned or a CPU list like 0-3,8")
    try:
        return cpulist.check_setting(text)
    except ValueError as exc:
        raise child.error(f"{exc} (expected auto, unpinned or a CPU list like 0-3,8)") from exc


def _exec_prefix(entry: Cursor) -> tuple[str, ...]:
    """``exec``: a command prefix, as a list of words or a string split as a shell would
    (no shell runs it); () where absent. ``{name}`` in a word stands for each host's name."""
    child = entry.get("exec")
    if child is None:
        return ()
    if child.is_seq:
        words = []
        for item in child:
            if not (item.is_scalar and isinstance(item.value, str)) or not item.value:
                raise item.error("must be a word of the command (non-empty text)")
            words.append(item.value)
    elif child.is_scalar and isinstance(child.value, str):
        try:
            words = shlex.split(child.value)
        except ValueError as exc:
            raise child.error(f"cannot be split into words: {exc}") from None
    else:
        raise child.error("must be a command: a list of words or a string")
    if not words:
        raise child.error("must not be empty: the command that reaches the host")
    return tuple(words)


def _parse_mapping(entry: Cursor) -> list[HostConfig]:
    entry.check_keys(HOST_KEYS)
    name_cursor = entry.require("name")
    names = _expand(name_cursor)
    address_cursor = entry.get("address")
    if address_cursor is None:
        addresses = list(names)
    else:
        addresses = _expand(address_cursor)
        if len(addresses) != len(names):
            raise address_cursor.error(
                f"expands to {len(addresses)} addresses but name expands to {len(names)} names"
            )
    user = _optional_string(entry, "user")
    port_cursor = entry.get("port")
    port = None if port_cursor is None else port_cursor.integer(1, 65535)
    python_cursor = entry.get("python")
    python = "python3" if python_cursor is None else python_cursor.string()
    if not python:
        raise entry.error("must not be empty", path=f"{entry.path}.python")
    transport_cursor = entry.get("transport")
    transport: str | None = None
    if transport_cursor is not None:
        transport = transport_cursor.string()
        if transport not in ("local", "ssh", "exec", "connect_back"):
            raise transport_cursor.error("must be 'local', 'ssh', 'exec' or 'connect_back'")
    prefix = _exec_prefix(entry)
    back_cursor = entry.get("connect_back")
    back = False
    if back_cursor is not None:
        if not (back_cursor.is_scalar and isinstance(back_cursor.value, bool)):
            raise back_cursor.error("must be true or false")
        back = bool(back_cursor.value)
    if back and (prefix or transport not in (None, "connect_back")):
        raise entry.error("connect_back: true is its own transport: not with exec or "
                          "another transport", path=f"{entry.path}.connect_back")
    if transport == "connect_back" and not back:
        back = True
    if back:
        for key in ("address", "user", "port", "ssh_config", "identity_file", "known_hosts"):
            if entry.get(key) is not None:
                raise entry.error(f"{key} makes no sense for a host that dials the master "
                                  "(connect_back)", path=f"{entry.path}.{key}")
    if prefix and transport not in (None, "exec"):
        raise entry.error(f"exec gives the exec transport, not {transport}",
                          path=f"{entry.path}.transport")
    if transport == "exec" and not prefix:
        raise entry.error("the exec transport needs exec: the command that reaches the host "
                          "(kubectl exec -i POD --, ip netns exec NS, docker exec -i NAME ...)",
                          path=f"{entry.path}.exec")
    if prefix:
        for key in ("address", "user", "port", "ssh_config", "identity_file", "known_hosts"):
            if entry.get(key) is not None:
                raise entry.error(f"{key} makes no sense with the exec transport (exec "
                                  "reaches the host)", path=f"{entry.path}.{key}")
    worker_cpus = _worker_cpus(entry)
    watchdog_s = _watchdog_seconds(entry)
    hosts = []
    chosen: Literal["local", "ssh", "exec", "connect_back"]
    for name, address in zip(names, addresses, strict=True):
        _check_name(name_cursor, name)
        if back:
            chosen = "connect_back"
        elif prefix:
            chosen = "exec"
        elif transport is None:
            is_local = (
                name == "localhost"
                and address_cursor is None
                and user is None
                and port_cursor is None
            )
            chosen = "local" if is_local else "ssh"
        else:
            chosen = "local" if transport == "local" else "ssh"
        if chosen == "local" and (user is not None or port_cursor is not None):
            raise entry.error("user and port make no sense with the local transport")
        hosts.append(
            HostConfig(
                name=name,
                address=address,
                transport=chosen,
                user=user,
                port=port,
                python=python,
                ssh_config=_optional_string(entry, "ssh_config"),
                identity_file=_optional_string(entry, "identity_file"),
                known_hosts=_optional_string(entry, "known_hosts"),
                exec=tuple(word.replace("{name}", name) for word in prefix),
                worker_cpus=worker_cpus,
                watchdog_seconds=watchdog_s,
                line=entry.line,
            )
        )
    return hosts


def _watchdog_seconds(entry: Cursor) -> float:
    """``watchdog_seconds``: the least time the host's slave waits for a word from the master
    before it stops its I/O and exits (a duration; default 30 s)."""
    return duration_within(entry.get("watchdog_seconds"), DEFAULT_WATCHDOG_S,
                           *WATCHDOG_SECONDS_RANGE, "at least 1s and at most 1h")


def parse_hosts(cursor: Cursor) -> tuple[HostConfig, ...]:
    """``hosts:`` → hosts in order; duplicate names (after expansion) are errors."""
    cursor.expect_seq("a list of hosts")
    if len(cursor) == 0:
        raise cursor.error("must list at least one host")
    hosts: list[HostConfig] = []
    first_line: dict[str, int] = {}
    for entry in cursor:
        if entry.is_map:
            expanded = _parse_mapping(entry)
        elif entry.is_scalar and isinstance(entry.value, str):
            expanded = []
            for name in _expand(entry):
                _check_name(entry, name)
                expanded.append(
                    HostConfig(
                        name=name,
                        address=name,
                        transport="local" if name == "localhost" else "ssh",
                        line=entry.line,
                    )
                )
        else:
            raise entry.error("must be a host name or a mapping with 'name'")
        for host in expanded:
            if host.name in first_line:
                raise entry.error(
                    f"duplicate host {host.name!r} (first at line {first_line[host.name]})"
                )
            first_line[host.name] = entry.line
            hosts.append(host)
    return tuple(hosts)
