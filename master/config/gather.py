"""The test file's ``gather:`` sources: external metrics the controller gathers every subinterval.

Owns the shape (frozen dataclasses) and the validation of ``gather:`` entries, of their ``join``,
and of the focus-metric names that point at them (``gather.<source>.<element_type>.<metric>``).
Every check happens here, before any host is contacted or any command run; an error names its
key path. This module must not run commands, open sockets or read files (``master.gather``
does that at run time).

A source is a ``command`` (stdout: ``element_type,element_instance,metric,value`` lines, or JSON
lines with those four keys) or a ``prometheus`` URL (the text exposition format; its host name
must be one the resolver takes). Metrics listed in ``counters`` (a command's) or counters by
the endpoint's ``# TYPE`` (a counter; a histogram's ``_count``, ``_sum``, ``_bucket``; a
summary's ``_count``, ``_sum``; or named ``*_total``: ``master.gather.promtext``) are turned
into rates per second.
``config_command`` runs once at the start and prints attribute 4-tuples. ``join`` maps
elements to LUNs, so rollup instances get the metrics of the elements under their LUNs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlsplit

from master.config.catalog import LUN_ATTRIBUTE_KEYS
from master.config.limits import duration_within
from master.config.yamlnodes import Cursor

__all__ = [
    "AGGREGATES",
    "ELEMENT_INSTANCE",
    "GATHER_JOIN_KEYS",
    "GATHER_KEYS",
    "GATHER_PREFIX",
    "MIN_GATHER_TIMEOUT_S",
    "GatherJoin",
    "GatherSource",
    "MetricPattern",
    "describe",
    "focus_metric_problem",
    "parse_gather",
]

GATHER_KEYS: tuple[str, ...] = (
    "name", "command", "prometheus", "timeout", "counters", "metrics", "element_type",
    "instance_label", "config_command", "join", "optional",
)
GATHER_JOIN_KEYS: tuple[str, ...] = ("element_type", "by", "lun_attribute", "aggregate")
AGGREGATES: tuple[str, ...] = ("sum", "mean", "max")
#: ``join.by`` naming the element instance itself (no ``config_command`` needed)
ELEMENT_INSTANCE = "element_instance"
#: a focus metric on a gathered, joined metric starts with this
GATHER_PREFIX = "gather."
#: the shortest timeout: a command takes milliseconds to start
MIN_GATHER_TIMEOUT_S = 0.01
#: the LUN attributes a join may match, beside the discovered ones: the LUN path and host
JOIN_LUN_ATTRIBUTES: tuple[str, ...] = (*LUN_ATTRIBUTE_KEYS, "lun", "host")

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_TOKEN = re.compile(r"^[A-Za-z_][A-Za-z0-9_:-]*$")


@dataclass(frozen=True)
class MetricPattern:
    """A Prometheus metric to take: an exact name, or a ``/regex/`` matched whole."""

    text: str
    regex: bool

    def matches(self, name: str) -> bool:
        if self.regex:
            return re.fullmatch(self.text, name) is not None
        return name == self.text


@dataclass(frozen=True)
class GatherJoin:
    """``join: {element_type, by, lun_attribute, aggregate}``: the elements of ``element_type``
    whose attribute ``by`` (from ``config_command``; ``element_instance``: the instance's own
    name) equals a LUN's ``lun_attribute`` are under that LUN; a rollup instance's value is
    ``aggregate`` (``sum`` | ``mean`` | ``max``, default ``sum``) over its distinct elements."""

    element_type: str
    by: str
    lun_attribute: str
    aggregate: Literal["sum", "mean", "max"] = "sum"


@dataclass(frozen=True)
class GatherSource:
    """One ``gather:`` entry. ``kind`` is ``command`` (``argv``) or ``prometheus`` (``url``,
    ``metrics``, ``element_type``, ``instance_label``). ``timeout_s``: a gather still running
    then is killed and its subinterval's cells stay empty (default half a subinterval, at most
    one). ``counters``: a command's metrics made rates per second from their deltas.
    ``optional``: the run goes on when the source's first sample fails (else that is a
    preflight error, before any I/O)."""

    name: str
    kind: Literal["command", "prometheus"]
    timeout_s: float
    argv: tuple[str, ...] = ()
    counters: tuple[str, ...] = ()
    url: str = ""
    metrics: tuple[MetricPattern, ...] = ()
    element_type: str = ""
    instance_label: str = ""
    config_argv: tuple[str, ...] = ()
    join: GatherJoin | None = None
    line: int = 0
    optional: bool = False


def describe(source: GatherSource) -> str:
    """One line for the plan (``--dry-run``)."""
    if source.kind == "command":
        what = "command " + " ".join(source.argv)
        if source.counters:
            what += f"; counters {', '.join(source.counters)}"
    else:
        what = (f"prometheus {source.url}; metrics "
                + ", ".join(f"/{p.text}/" if p.regex else p.text for p in source.metrics)
                + f"; {source.element_type} by label {source.instance_label}")
    what += f"; timeout {source.timeout_s:g}s"
    if source.config_argv:
        what += "; config " + " ".join(source.config_argv)
    if source.join is not None:
        j = source.join
        what += (f"; join {j.element_type}.{j.by} = LUN {j.lun_attribute} ({j.aggregate})")
    return f"{source.name}: {what}"


def _argv(cursor: Cursor) -> tuple[str, ...]:
    cursor.expect_seq("a list of strings: the program and its arguments")
    if len(cursor) == 0:
        raise cursor.error("must name a program")
    out = []
    for item in cursor:
        if not item.is_scalar or not isinstance(item.value, (str, int, float)) or isinstance(
                item.value, bool):
            raise item.error("must be a string")
        text = item.node.text if not isinstance(item.value, str) else item.value
        if "\0" in text:
            raise item.error("must not hold a NUL character")
        out.append(text)
    if not out[0]:
        raise cursor.error("the program name must not be empty")
    return tuple(out)


def _token(cursor: Cursor, what: str) -> str:
    text = cursor.string()
    if not _TOKEN.match(text):
        raise cursor.error(f"bad {what} {text!r}: use letters, digits, '_', ':' and '-', "
                           "not starting with a digit")
    return text


def _tokens(cursor: Cursor, what: str) -> tuple[str, ...]:
    cursor.expect_seq(f"a list of {what}s")
    return tuple(_token(item, what) for item in cursor)


def _metric_patterns(cursor: Cursor) -> tuple[MetricPattern, ...]:
    cursor.expect_seq("a list of metric names or /regex/")
    if len(cursor) == 0:
        raise cursor.error("must list at least one metric")
    out = []
    for item in cursor:
        text = item.string()
        if len(text) >= 2 and text.startswith("/") and text.endswith("/"):
            try:
                re.compile(text[1:-1])
            except re.error as exc:
                raise item.error(f"bad regular expression {text!r}: {exc}") from exc
            out.append(MetricPattern(text[1:-1], True))
        else:
            out.append(MetricPattern(_token(item, "metric name"), False))
    return tuple(out)


def _url(cursor: Cursor) -> str:
    text = cursor.string()
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname:
        raise cursor.error(f"must be an http:// URL with a host (got {text!r})")
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise cursor.error(f"bad port in {text!r}") from exc
    try:
        parts.hostname.encode("idna")  # as the resolver will: a bad name fails there
    except UnicodeError as exc:
        why = ("a dot-separated part is empty or longer than 63 characters"
               if "label empty or too long" in str(exc) else f"it does not IDNA-encode ({exc})")
        raise cursor.error(f"bad host name {parts.hostname!r} in {text!r}: {why}") from exc
    return text


def _join(cursor: Cursor, source: GatherSource) -> GatherJoin:
    cursor.expect_map("a mapping {element_type, by, lun_attribute, aggregate}")
    cursor.check_keys(GATHER_JOIN_KEYS)
    type_cursor = cursor.require("element_type")
    element_type = _token(type_cursor, "element type")
    if source.kind == "prometheus" and element_type != source.element_type:
        raise type_cursor.error(f"this source's elements are {source.element_type!r} "
                                f"(got {element_type!r})")
    by_cursor = cursor.require("by")
    by = _token(by_cursor, "attribute")
    if by != ELEMENT_INSTANCE and not source.config_argv:
        raise by_cursor.error(f"attribute {by!r} needs a config_command that prints it (or "
                              f"use by: {ELEMENT_INSTANCE})")
    lun_cursor = cursor.require("lun_attribute")
    lun_attribute = lun_cursor.string()
    if lun_attribute not in JOIN_LUN_ATTRIBUTES:
        raise lun_cursor.error(f"unknown LUN attribute {lun_attribute!r} (known: "
                               f"{', '.join(JOIN_LUN_ATTRIBUTES)})")
    aggregate_cursor = cursor.get("aggregate")
    aggregate = "sum" if aggregate_cursor is None else aggregate_cursor.string()
    if aggregate not in AGGREGATES:
        assert aggregate_cursor is not None
        raise aggregate_cursor.error(f"must be one of {', '.join(AGGREGATES)} "
                                     f"(got {aggregate!r})")
    return GatherJoin(element_type, by, lun_attribute, aggregate)  # type: ignore[arg-type]


_COMMAND_ONLY = ("counters",)
_PROMETHEUS_ONLY = ("metrics", "element_type", "instance_label")


def _source(entry: Cursor, subinterval_s: float, seen: dict[str, int]) -> GatherSource:
    entry.expect_map("a mapping with name and command or prometheus")
    entry.check_keys(GATHER_KEYS)
    name_cursor = entry.require("name")
    name = name_cursor.string()
    if not _NAME.match(name):
        raise name_cursor.error(f"bad source name {name!r}: use letters, digits, '_' and '-'")
    if name in seen:
        raise name_cursor.error(f"duplicate source name {name!r} (first at line {seen[name]})")
    seen[name] = entry.line
    kinds = [key for key in ("command", "prometheus") if entry.has(key)]
    if len(kinds) != 1:
        raise entry.error("needs exactly one of command or prometheus"
                          + (" (this entry has both)" if kinds else ""))
    kind = kinds[0]
    for key in _PROMETHEUS_ONLY if kind == "command" else _COMMAND_ONLY:
        child = entry.get(key)
        if child is not None:
            other = "prometheus" if kind == "command" else "command"
            raise child.error(f"only with {other} (this source is a {kind})")
    timeout_s = duration_within(
        entry.get("timeout"), subinterval_s / 2, MIN_GATHER_TIMEOUT_S, subinterval_s,
        f"at least 10ms and at most one subinterval ({subinterval_s:g}s)")
    config_cursor = entry.get("config_command")
    config_argv = () if config_cursor is None else _argv(config_cursor)
    if kind == "command":
        counters_cursor = entry.get("counters")
        source = GatherSource(
            name, "command", timeout_s, argv=_argv(entry.require("command")),
            counters=() if counters_cursor is None else _tokens(counters_cursor, "metric name"),
            config_argv=config_argv, line=entry.line)
    else:
        source = GatherSource(
            name, "prometheus", timeout_s, url=_url(entry.require("prometheus")),
            metrics=_metric_patterns(entry.require("metrics", " (needed with prometheus)")),
            element_type=_token(entry.require("element_type", " (needed with prometheus)"),
                                "element type"),
            instance_label=_token(entry.require("instance_label", " (needed with prometheus)"),
                                  "label"),
            config_argv=config_argv, line=entry.line)
    join_cursor = entry.get("join")
    if join_cursor is not None:
        source = replace(source, join=_join(join_cursor, source))
    optional_cursor = entry.get("optional")
    if optional_cursor is not None:
        source = replace(source, optional=optional_cursor.boolean())
    return source


def parse_gather(cursor: Cursor | None, subinterval_s: float) -> tuple[GatherSource, ...]:
    """The top-level ``gather:`` list (empty when absent)."""
    if cursor is None:
        return ()
    cursor.expect_seq("a list of gather sources")
    seen: dict[str, int] = {}
    return tuple(_source(entry, subinterval_s, seen) for entry in cursor)


def focus_metric_problem(name: str, sources: tuple[GatherSource, ...]) -> str | None:
    """Why ``gather.<source>.<element_type>.<metric>`` cannot be a focus metric of this test,
    or None when it can (its source exists and joins that element type to the LUNs; a
    Prometheus source's metric must be one it takes)."""
    parts = name.split(".")
    if len(parts) != 4 or parts[0] + "." != GATHER_PREFIX or not all(parts[1:]):
        return (f"bad gathered metric {name!r}: write "
                "gather.<source>.<element_type>.<metric>")
    _, source_name, element_type, metric = parts
    by_name = {s.name: s for s in sources}
    source = by_name.get(source_name)
    if source is None:
        known = ", ".join(by_name) or "none"
        return f"no gather source named {source_name!r} (sources: {known})"
    if source.join is None:
        return f"gather source {source_name!r} has no join: its metrics reach no rollup"
    if source.join.element_type != element_type:
        return (f"gather source {source_name!r} joins element type "
                f"{source.join.element_type!r}, not {element_type!r}")
    if source.kind == "prometheus" and not any(p.matches(metric) for p in source.metrics):
        return f"gather source {source_name!r} does not take metric {metric!r} (see its metrics)"
    return None
