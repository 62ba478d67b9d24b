"""CPU busy of the host and of the slave itself, sampled at subinterval boundaries (psutil).

Owns the arithmetic from two ``cpu_times`` snapshots to busy percentages. It must not sleep or
start threads: the caller takes a snapshot at each boundary and asks for the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class CpuSnapshot:
    per_core: tuple[tuple[float, float], ...]  # (busy_s, total_s) per core
    slave_user_s: float
    slave_system_s: float


def _busy_total(t: Any) -> tuple[float, float]:
    """(busy, total) seconds of one ``psutil.cpu_times`` entry. Linux counts guest time in
    ``user`` and ``guest_nice`` in ``nice`` as well (as psutil's own percentages know), so
    they are taken out of the sum once; iowait is idle."""
    total = float(sum(t)) - float(getattr(t, "guest", 0.0)) - float(getattr(t, "guest_nice", 0.0))
    idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
    return total - idle, total


class CpuSampler:
    """Snapshots of host CPU (per core) and of this process with its worker children."""

    def __init__(self) -> None:
        self._proc = psutil.Process()

    def snapshot(self) -> CpuSnapshot:
        cores = tuple(_busy_total(t) for t in psutil.cpu_times(percpu=True))
        own = self._proc.cpu_times()
        user = own.user + own.children_user
        system = own.system + own.children_system
        for child in self._proc.children(recursive=True):
            try:
                ct = child.cpu_times()
            except psutil.Error:
                continue
            user += ct.user
            system += ct.system
        return CpuSnapshot(cores, user, system)

    @staticmethod
    def difference(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
        """Busy percentages between two snapshots, as the ``cpu`` dict of a result."""
        per_core: list[float] = []
        busy_sum = total_sum = 0.0
        for (b0, t0), (b1, t1) in zip(before.per_core, after.per_core, strict=False):
            db, dt = b1 - b0, t1 - t0
            busy_sum += db
            total_sum += dt
            per_core.append(round(100.0 * db / dt, 3) if dt > 0 else 0.0)
        return {
            "busy_pct": round(100.0 * busy_sum / total_sum, 3) if total_sum > 0 else 0.0,
            "per_core_busy_pct": per_core,
            "slave_user_s": round(max(0.0, after.slave_user_s - before.slave_user_s), 6),
            "slave_system_s": round(max(0.0, after.slave_system_s - before.slave_system_s), 6),
        }
