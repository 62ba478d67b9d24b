"""The Prometheus text exposition format (and OpenMetrics text) → readings (pure).

Owns the reading of a scraped page: ``# TYPE`` lines (which metrics are counters), sample lines
``name{label="value",...} value [timestamp] [# exemplar]`` with escaped label values (``\\\\``,
``\\"``, ``\\n``), a trailing comma in the labels, a UTF-8 name quoted inside the braces
(``{"my.metric",label="value"}``), and the choice of the samples a ``gather:`` source takes (its
``metrics`` names or regexes). A sample's element instance is its ``instance_label``'s value;
samples of one metric that share it (other labels differ) are added up; samples without the
label are skipped, and so are values that are not finite (``NaN``, ``+Inf``, ``-Inf``: no rate
or sum can be made of them). Timestamps and exemplars are read past, not used.

Only the lines of the metrics a source takes are parsed whole: a bad one is a problem, told
with its line number; a line of another metric is skipped at its name, so one odd series
elsewhere on a page (Prometheus would refuse the whole scrape) does not warn every
subinterval. A line that does not even start with a metric name is a problem too (an HTML
error page served with status 200 says so).

A metric is a counter when its family is typed ``counter`` (``foo_total`` under ``# TYPE foo
counter`` in OpenMetrics), when it is the ``_count``, ``_sum`` or ``_bucket`` of a family typed
``histogram`` or the ``_count`` or ``_sum`` of one typed ``summary`` (cumulative since the
process started, as counters are), or, with no type given, when its name ends in ``_total``.
This module must not open sockets.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from master.config.gather import MetricPattern
from master.gather.lines import MAX_PROBLEMS, Reading

__all__ = ["Scrape", "parse_exposition"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_QUOTED = r'"((?:[^"\\]|\\.)*)"'
#: ``{"name"`` : a UTF-8 metric name, quoted first inside the braces
_QUOTED_NAME = re.compile(rf"\{{\s*{_QUOTED}")
_LABEL = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*|{_QUOTED})\s*=\s*{_QUOTED}")
_TYPE = re.compile(rf"#\s*TYPE\s+(?:({_NAME.pattern})|{_QUOTED})\s+(\S+)\s*$")
_ESCAPE = re.compile(r'\\[\\"n]')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
#: the parts of a family that count up, by the family's type
_COUNTER_PARTS: dict[str, tuple[str, ...]] = {
    "counter": ("_total",),
    "histogram": ("_count", "_sum", "_bucket"),
    "summary": ("_count", "_sum"),
}
_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


class Scrape:
    """What a page gave: readings, the metric names that are counters, and problems."""

    def __init__(self) -> None:
        self.readings: list[Reading] = []
        self.counters: set[str] = set()
        self.problems: list[str] = []


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda e: _UNESCAPE[e.group(0)], text)


def _skip_blanks(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _metric(line: str) -> tuple[str, int, bool] | None:
    """A sample line's metric name, where its labels (or value) start, and whether that is
    inside the braces (after a quoted name); None when the line starts with no name."""
    m = _NAME.match(line)
    if m is not None:
        return m.group(0), m.end(), False
    m = _QUOTED_NAME.match(line)
    if m is not None:
        return _unescape(m.group(1)), m.end(), True
    return None


def _labels(line: str, pos: int, inside: bool) -> tuple[dict[str, str], int] | None:
    """The labels from ``pos`` to just past their ``}`` (none without braces), and where the
    value starts; None when they are malformed."""
    out: dict[str, str] = {}
    pos = _skip_blanks(line, pos)
    if not inside:
        if not line.startswith("{", pos):
            return out, pos
        pos += 1
    want_label = not inside  # right after "{", or after a ",": a label (or the "}")
    while True:
        pos = _skip_blanks(line, pos)
        if line.startswith("}", pos):
            return out, pos + 1
        if not want_label:
            if not line.startswith(",", pos):
                return None
            pos, want_label = pos + 1, True
            continue
        m = _LABEL.match(line, pos)
        if m is None:
            return None
        name = m.group(1) if m.group(2) is None else _unescape(m.group(2))
        out[name] = _unescape(m.group(3))
        pos, want_label = m.end(), False


def _sample(line: str, pos: int, inside: bool) -> tuple[dict[str, str], float] | None:
    """The labels and value of a sample line whose name ends at ``pos``; None when the rest
    is malformed. A timestamp must be a number; an exemplar (`` # {...} value``) is cut off."""
    labelled = _labels(line, pos, inside)
    if labelled is None:
        return None
    labels, pos = labelled
    tokens = line[pos:].split("#", 1)[0].split()
    if not 1 <= len(tokens) <= 2:
        return None
    try:
        value = float(tokens[0])
        if len(tokens) == 2:
            float(tokens[1])
    except ValueError:
        return None
    return labels, value


def _is_counter(name: str, types: dict[str, str]) -> bool:
    if name in types:
        return types[name] == "counter"
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[:-len(suffix)] in types:
            return suffix in _COUNTER_PARTS.get(types[name[:-len(suffix)]], ())
    return name.endswith("_total")


def parse_exposition(text: str, metrics: Sequence[MetricPattern], element_type: str,
                     instance_label: str) -> Scrape:
    """The samples of ``metrics`` on the page, as readings of ``element_type``."""
    out = Scrape()
    types: dict[str, str] = {}
    sums: dict[tuple[str, str], float] = {}
    taken: dict[str, bool] = {}  # metric name → whether ``metrics`` take it
    bad = 0
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _TYPE.match(line)
            if m is not None:
                types[m.group(1) or _unescape(m.group(2))] = m.group(3)
            continue
        head = _metric(line)
        why = "not a sample line"
        if head is not None:
            name, pos, inside = head
            take = taken.get(name)
            if take is None:
                take = taken[name] = any(p.matches(name) for p in metrics)
            if not take:
                continue
            sample = _sample(line, pos, inside)
            if sample is not None:
                labels, value = sample
                instance = labels.get(instance_label)
                if instance is not None and math.isfinite(value):
                    sums[(instance, name)] = sums.get((instance, name), 0.0) + value
                continue
            why = f"bad sample of {name}"
        bad += 1
        if len(out.problems) < MAX_PROBLEMS:
            out.problems.append(f"line {number}: {why}")
    if bad > len(out.problems):
        out.problems.append(f"{bad - len(out.problems)} more bad lines")
    for (instance, name), value in sums.items():
        out.readings.append(Reading(element_type, instance, name, value))
        if _is_counter(name, types):
            out.counters.add(name)
    return out
