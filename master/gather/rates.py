"""Samples of a source → the values written for a subinterval: gauges as read, counters as
rates per second over the true time between two samples (pure).

Owns the rule for counters: ``(value - previous) / (t - t_previous)`` with the times at which
each sample was taken (the end of its gather), so a gather that ran early or late still
gives the right rate. A counter has no rate in a subinterval with no previous sample of it
(the first of a step), or when it went down (a reset or a wrapped counter): its cell stays
empty. This module must not run anything or read clocks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from master.gather.lines import Reading

__all__ = ["Key", "Sample", "values_of"]

#: (element_type, element_instance, metric)
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Sample:
    """One gather's readings, taken at ``at_ns`` (master clock)."""

    at_ns: int
    values: Mapping[Key, float]

    @classmethod
    def of(cls, at_ns: int, readings: Collection[Reading]) -> Sample:
        values: dict[Key, float] = {}
        for r in readings:
            if isinstance(r.value, float):
                values[(r.element_type, r.element_instance, r.metric)] = r.value
        return cls(at_ns, values)


def values_of(sample: Sample, previous: Sample | None, counters: Collection[str]
              ) -> dict[Key, float | None]:
    """Every key of ``sample``: its value, or for a counter (its metric in ``counters``) its
    rate per second since ``previous`` (None where there is none)."""
    out: dict[Key, float | None] = {}
    dt_s = None if previous is None else (sample.at_ns - previous.at_ns) / 1e9
    for key, value in sample.values.items():
        if key[2] not in counters:
            out[key] = value
            continue
        before = None if previous is None else previous.values.get(key)
        if before is None or dt_s is None or dt_s <= 0 or value < before:
            out[key] = None
        else:
            out[key] = (value - before) / dt_s
    return out
