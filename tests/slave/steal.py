"""The CPU time the hypervisor took from this machine over a test (steal, ``/proc/stat``), for
the tests of real time: a check that fails while the host took more than ``LIMIT`` of the
CPUs measured the host: tests/slave/conftest.py runs the test once more, and reports it as
skipped, with the check and the shares, only where the host took the CPUs that time too; with
the host quiet it fails.

On the 2-core VM the suite runs on, steal is nil for hours and then takes from a few to 37 %
of the CPUs for tens of minutes. In such phases 3-10 of the engine's real-time tests failed
per run, each while the host took 24-38 % (rates off by a third, a backlog not cleared in
time, Poisson gaps with a CV of 1.53, a SCHED_FIFO worker waiting 10-11 ms on a run queue in
2 s); the same tests passed with the host quiet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import TracebackType

#: the share of the CPUs' time the host may take before a failed check is taken for its
LIMIT = 0.01
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def steal_s() -> float:
    """Seconds of CPU time the host has taken from all of this machine's CPUs since boot."""
    with open("/proc/stat") as f:
        fields = f.readline().split()  # cpu user nice system idle iowait irq softirq steal
    return int(fields[8]) * _TICK_S if len(fields) > 8 else 0.0


class HostSteal:
    """``with HostSteal() as steal:`` around a stretch; then ``steal.share``. ``clock`` and
    ``stolen`` read the time and the steal (seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 stolen: Callable[[], float] | None = None) -> None:
        self._clock, self._stolen = clock, stolen or steal_s  # looked up now: a test's stand-in
        self._t0 = self._t1 = 0.0
        self._s0 = self._s1 = 0.0

    def __enter__(self) -> HostSteal:
        self._t0, self._s0 = self._clock(), self._stolen()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._t1, self._s1 = self._clock(), self._stolen()

    @property
    def share(self) -> float:
        """The share of the CPUs' time the host took over the stretch."""
        wall = max(self._t1 - self._t0, 1e-9) * (os.cpu_count() or 1)
        return (self._s1 - self._s0) / wall


def excuse(share: float, failure: str, virtual: bool = False) -> str | None:
    """Why a check that failed with ``failure`` while the host took ``share`` of the CPUs is
    not the test's subject (a skip's reason), or None: a failure. Never for a test that ran
    on virtual time (``virtual``: it made a ``VirtualClock``), whose results the host's
    share cannot move."""
    if share <= LIMIT or virtual:
        return None
    first = failure.strip().splitlines()[0] if failure.strip() else "?"
    return (f"the host took {share:.1%} of the CPUs (steal) while this test of real time ran, "
            f"and a check failed: {first}")
