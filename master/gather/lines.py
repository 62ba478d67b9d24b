"""A command source's stdout → readings: ivy's 4-tuples or JSON lines (pure).

Owns the line format of ``gather:`` command output and of ``config_command`` output: each
non-blank line is ``element_type,element_instance,metric,value`` (CSV quoting allowed; ``#``
starts a comment line) or a JSON object with the keys ``element_type``, ``element_instance``,
``metric`` and ``value``. A metric value must be a finite number; an attribute value (config
output) is any text. A bad line (whatever is wrong with it: a field too long for CSV, JSON
nested too deeply) is a problem, reported with its line number; the good lines still count.
This module must not run commands or read files.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass

__all__ = ["KEYS", "MAX_PROBLEMS", "Reading", "parse_lines"]

KEYS: tuple[str, ...] = ("element_type", "element_instance", "metric", "value")
#: problems kept per output (a source printing garbage must not flood events.csv)
MAX_PROBLEMS = 5


@dataclass(frozen=True)
class Reading:
    """One value of one metric (or attribute) of one element."""

    element_type: str
    element_instance: str
    metric: str
    value: float | str


def _fields(line: str) -> list[str] | str:
    """The four fields of a line, or why it has none."""
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            return f"bad JSON ({exc.msg})"
        except ValueError as exc:  # an integer of more digits than int() takes
            return f"bad JSON ({str(exc).split(':', 1)[0]})"
        except RecursionError:
            return "bad JSON (nested too deeply)"
        if not isinstance(obj, dict):
            return "a JSON line must be an object"
        missing = [k for k in KEYS if k not in obj]
        if missing:
            return f"JSON line lacks {', '.join(missing)}"
        return ["" if obj[k] is None else str(obj[k]) if not isinstance(obj[k], float)
                else repr(obj[k]) for k in KEYS]
    try:
        cells = next(csv.reader([line], skipinitialspace=True))
    except csv.Error as exc:  # a field over csv's limit (128 KiB)
        return f"bad CSV ({exc})"
    if len(cells) != 4:
        return f"{len(cells)} fields, expected element_type,element_instance,metric,value"
    return [c.strip() for c in cells]


def parse_lines(text: str, *, numeric: bool = True
                ) -> tuple[list[Reading], list[str]]:
    """Readings of every good line, and the problems (at most ``MAX_PROBLEMS``, then a count)
    of the bad ones. ``numeric``: values must be finite numbers (metrics); else text
    (attributes)."""
    readings: list[Reading] = []
    problems: list[str] = []
    bad = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = _fields(line)
        why = fields if isinstance(fields, str) else None
        value: float | str = ""
        if isinstance(fields, list):
            if not all(fields[:3]):
                why = "empty element_type, element_instance or metric"
            elif numeric:
                try:
                    value = float(fields[3])
                except ValueError:
                    why = f"value {fields[3][:40]!r} is not a number"
                else:
                    if not math.isfinite(value):
                        why = f"value {fields[3]!r} is not finite"
            else:
                value = fields[3]
        if why is not None:
            bad += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {number}: {why}")
            continue
        assert isinstance(fields, list)
        readings.append(Reading(fields[0], fields[1], fields[2], value))
    if bad > len(problems):
        problems.append(f"{bad - len(problems)} more bad lines")
    return readings, problems
