"""The Prometheus text exposition format (and OpenMetrics text) → readings (pure).

Owns the reading of a scraped page: ``# TYPE`` lines (which metrics are counters), sample lines
``name{label="value",...} value [timestamp]`` with escaped label values, and the choice of the
samples a ``gather:`` source takes (its ``metrics`` names or regexes). A sample's element
instance is its ``instance_label``'s value; samples of one metric that share it (other labels
differ) are added up; samples without the label are skipped. A metric is a counter when its
family is typed ``counter`` (``foo_total`` under ``# TYPE foo counter`` in OpenMetrics) or, with
no type given, when its name ends in ``_total``. This module must not open sockets.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from master.config.gather import MetricPattern
from master.gather.lines import MAX_PROBLEMS, Reading

__all__ = ["Scrape", "parse_exposition"]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})\s*(\{{.*\}})?\s*(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class Scrape:
    """What a page gave: readings, the metric names that are counters, and problems."""

    def __init__(self) -> None:
        self.readings: list[Reading] = []
        self.counters: set[str] = set()
        self.problems: list[str] = []


def _labels(text: str) -> dict[str, str] | None:
    inner = text[1:-1].strip()
    out: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if m is None:
            return None
        out[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


def _value(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _is_counter(name: str, types: dict[str, str]) -> bool:
    for family in (name, name.removesuffix("_total")):
        if family in types:
            return types[family] == "counter"
    return name.endswith("_total")


def parse_exposition(text: str, metrics: Sequence[MetricPattern], element_type: str,
                     instance_label: str) -> Scrape:
    """The samples of ``metrics`` on the page, as readings of ``element_type``."""
    out = Scrape()
    types: dict[str, str] = {}
    sums: dict[tuple[str, str], float] = {}
    bad = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        labels = None if m is None else _labels(m.group(2) or "{}")
        value = None if m is None else _value(m.group(3))
        if m is None or labels is None or (value is None and m.group(3) not in ("NaN",)):
            bad += 1
            if len(out.problems) < MAX_PROBLEMS:
                out.problems.append(f"line {number}: not a sample line")
            continue
        name = m.group(1)
        if value is None or not any(p.matches(name) for p in metrics):
            continue
        instance = labels.get(instance_label)
        if instance is None:
            continue
        sums[(instance, name)] = sums.get((instance, name), 0.0) + value
    if bad > len(out.problems):
        out.problems.append(f"{bad - len(out.problems)} more bad lines")
    for (instance, name), value in sums.items():
        out.readings.append(Reading(element_type, instance, name, value))
        if _is_counter(name, types):
            out.counters.add(name)
    return out
