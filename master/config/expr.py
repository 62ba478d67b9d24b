"""``METRIC OP LIMIT`` expressions, parsed and evaluated: ``ivypy compare --fail-if`` (a change
against a base run, or an absolute limit) and the test's ``thresholds:`` (absolute limits that
must hold: ``master.config.thresholds``). Pure.

``OP`` is one of ``<``, ``<=``, ``>``, ``>=``. ``LIMIT`` is either a signed relative change in
percent of the base value (``-10%``, ``+5%``: the sign is required, so that ``IOPS < -10%`` is
never misread), or an absolute value in the metric's own unit (``2``), which the NEW value is
held against. So ``IOPS < -10%`` holds when the new IOPS is more than 10 % below the base's,
``service_time_p99_ms > +5%`` when the new p99 is more than 5 % above the base's, and
``service_time_p99_ms > 2`` when the new p99 is above 2 ms, whatever the base's was.

A relative condition over a base of 0 reads the change as infinite in the direction the value
moved (0 to anything above 0 is more than any rise), and as no change when both are 0. A
condition whose values are missing (an empty cell: no I/O, so no percentile) cannot be told:
``evaluate`` returns None and the caller reports it. A bad expression is a ``CompareError``
naming what is wrong. Must not read files or know the report's formats.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from master.config.units import format_exact
from protocol.errors import CompareError

#: The comparisons a condition may use.
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
#: An operator-like token, longest first, so that ``<=`` is not read as ``<`` then ``=``.
_OP_TOKEN = re.compile(r"<=|>=|==|!=|=<|=>|<|>|=")
#: A summary.csv column: a plain name, or a joined gathered metric
#: ``gather.<source>.<element_type>.<metric>`` (docs/gather.md).
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|gather\.[A-Za-z0-9_-]+\.[^\s.<>=!]+\.[^\s<>=!]+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: Decimals a relative change is rounded to before it is compared: summary.csv values carry
#: six significant digits, far coarser than this, and float noise far finer.
PCT_DIGITS = 9
_EXAMPLE = "write METRIC OP LIMIT, e.g. 'IOPS < -10%' or 'service_time_p99_ms > 2'"


@dataclass(frozen=True)
class FailIf:
    """One condition: ``metric op limit``; ``relative``: ``limit`` is a change in % of base."""

    metric: str
    op: str
    limit: float
    relative: bool

    @property
    def text(self) -> str:
        """The condition written back, normalised (``IOPS < -10%``), its limit to every digit
        (``IOPS < 1234567``, not the ``1.23457e+06`` of six significant digits)."""
        limit = format_exact(self.limit)
        if self.relative:
            return f"{self.metric} {self.op} {'' if limit.startswith('-') else '+'}{limit}%"
        return f"{self.metric} {self.op} {limit}"


def parse_fail_if(text: str, example: str = _EXAMPLE) -> FailIf:
    """``text`` as a condition; a ``CompareError`` naming what is wrong otherwise (saying
    ``example`` where the text is not one)."""
    def bad(why: str) -> CompareError:
        return CompareError(f"{text!r}: {why}", what="--fail-if")

    if not text.strip():
        raise bad(f"empty expression: {example}")
    found = _OP_TOKEN.search(text)
    if found is None:
        raise bad(f"no comparison (<, <=, > or >=): {example}")
    op = found.group()
    if op not in OPERATORS:
        raise bad(f"{op!r} is not a comparison here: use <, <=, > or >=")
    metric, rest = text[:found.start()].strip(), text[found.end():].strip()
    if not metric:
        raise bad(f"no metric before {op!r}: {example}")
    if not _METRIC.fullmatch(metric):
        raise bad(f"{metric!r} is not a metric name (a summary.csv column such as IOPS)")
    if _OP_TOKEN.search(rest):
        raise bad("more than one comparison")
    relative = rest.endswith("%")
    number = rest[:-1].strip() if relative else rest
    if not number:
        raise bad(f"no limit after {op!r}: {example}")
    if not _NUMBER.fullmatch(number):
        raise bad(f"{rest!r} is not a number (absolute, in the metric's unit) or a signed "
                  "change in % (-10%, +5%)")
    if relative and number[0] not in "+-":
        # a metric in percent (cpu_busy_pct > 80%) is most likely meant as an absolute limit
        absolute = (f"; {metric} is in percent already: '{metric} {op} {number}' holds the "
                    f"new value against {number} %" if metric.endswith("_pct") else "")
        raise bad(f"a relative change needs its sign: '+{number}%' for a rise, "
                  f"'-{number}%' for a fall{absolute}")
    if not relative and number[0] in "+-":
        # every metric compared is at least 0: 'IOPS < -10' (the % left out) never holds,
        # so the check would pass whatever the runs did
        raise bad(f"a signed limit reads as a change: write '{metric} {op} {number}%' for a "
                  f"change of {number}% of the base run, or '{metric} {op} "
                  f"{number.lstrip('+-')}' for an absolute limit (a metric is never negative)")
    limit = float(number)
    if not math.isfinite(limit):
        raise bad(f"{number!r} is out of range")
    return FailIf(metric=metric, op=op, limit=limit, relative=relative)


def relative_change_pct(base: float, new: float) -> float:
    """``100 (new - base) / base``, rounded to ``PCT_DIGITS`` decimals so that a change of
    exactly a limit is that limit (0.5 to 0.55 is +10 %, not +10.000000000000009 %); over a
    base of 0, 0 when ``new`` is 0 too, else infinite with the sign of ``new``. A negative
    base divides by its size, so that a rise is always positive."""
    if base == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return round(100.0 * (new - base) / abs(base), PCT_DIGITS)


def evaluate(cond: FailIf, base: float | None, new: float | None) -> bool | None:
    """Whether ``cond`` holds for this base and new value; None when a value it needs is
    missing (an absolute condition needs only the new value)."""
    if new is None or (cond.relative and base is None):
        return None
    if cond.relative:
        assert base is not None
        return OPERATORS[cond.op](relative_change_pct(base, new), cond.limit)
    return OPERATORS[cond.op](new, cond.limit)
