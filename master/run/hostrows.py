"""A host's part of a subinterval: its result as the master received it, and its rows.

Owns ``HostResult`` (a host's ``SubintervalResult`` with what places it in master time) and
what is read from one host alone: its device counters (``device_deltas``, every field
checked) and its rows of cpu.csv and interlock.csv (``host_rows``: CPU, each worker's
switch at the boundary and its skew with the bound). Must not roll anything up across hosts
or write files (``master.run.recorder``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.devstats import DeviceDelta
from protocol.errors import HostError, ProtocolError
from protocol.messages import SubintervalResult


@dataclass(frozen=True)
class HostResult:
    """A host's result of one subinterval, with what is needed to place it in master time."""

    host: str
    result: SubintervalResult
    to_master_ns: Callable[[int], int]
    received_ns: int
    #: the host's clock offset is right to within this (``HostSession.offset_uncertainty_ns``)
    offset_uncertainty_ns: int = 0


def host_rows(k: int, phase: str, h: HostResult, ops: int, planned: int,
              cpu_rows: list[dict[str, Any]], interlock_rows: list[dict[str, Any]]
              ) -> int | None:
    """A host's rows of cpu.csv and interlock.csv for subinterval ``k``; returns the
    largest skew bound of its workers (ns), None when none switched."""
    r = h.result
    user_s = float(r.cpu.get("slave_user_s", 0.0))
    sys_s = float(r.cpu.get("slave_system_s", 0.0))
    cpu_rows.append({
        "subinterval": k, "phase": phase, "host": h.host, "busy_pct": r.cpu.get("busy_pct"),
        "per_core_busy_pct": " ".join(f"{c:g}" for c in r.cpu.get("per_core_busy_pct", [])),
        "slave_user_s": user_s, "slave_system_s": sys_s,
        "slave_cpu_us_per_io": (user_s + sys_s) * 1e6 / ops if ops else None,
    })
    worst: int | None = None
    for w, il in enumerate(r.interlock):
        switch = il.get("switch_ns")
        skew = bound = None
        if isinstance(switch, int) and switch:
            skew = h.to_master_ns(switch) - planned
            bound = abs(skew) + h.offset_uncertainty_ns
            worst = bound if worst is None else max(worst, bound)
        interlock_rows.append({
            "subinterval": k, "host": h.host, "worker": il.get("worker", w),
            "switch_delay_us": _us(il.get("switch_delay_ns")),
            "handover_delay_us": _us(il.get("handover_delay_ns")),
            "boundary_skew_us": _us(skew), "switch_slave_ns": switch if skew is not None
            else None, "offset_uncertainty_us": _us(h.offset_uncertainty_ns),
            "boundary_skew_bound_us": _us(bound),
            "result_sent_after_boundary_us": _us(h.to_master_ns(r.send_ns) - planned),
            "result_received_after_boundary_us": _us(h.received_ns - planned),
        })
    return worst


def device_deltas(h: HostResult) -> list[DeviceDelta]:
    """A host's device counters of a subinterval, every field checked."""
    try:
        return [DeviceDelta.from_wire(d) for d in h.result.devices]
    except ProtocolError as exc:
        raise HostError(f"bad device counters: {exc}", host=h.host) from exc


def _us(ns: Any) -> float | None:
    return None if ns is None else round(float(ns) / 1e3, 3)
