"""The warnings a run gives once, at its end, with their worst figure: a warning repeated each
step (or each subinterval) teaches the operator to skip warnings.

Owns ``OnceARun``: what the step loop saw over the run of

* **boundary skew** past ``skew_limit_seconds``: only with more than one host (the skew is
  between hosts' boundaries; one host has none to be skewed against). One warning: the worst
  bound, its host, step and subinterval, and how many of the hosts' boundaries were over;
* **host versus device** (``master.analysis.devstats.Disagreement``): one warning per device,
  its worst step's figures, and the other steps where it differed too.

Must not: write anything itself (``warnings`` hands the run its events).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from master.analysis.devstats import DeviceKey, Disagreement


@dataclass(frozen=True)
class Notice:
    """One warning for the run's events."""

    message: str
    host: str
    kind: str
    step: int | None = None
    subinterval: int | None = None


@dataclass(frozen=True)
class _Skew:
    bound_ns: int
    uncertainty_ns: int
    host: str
    step: int
    subinterval: int


@dataclass
class OnceARun:
    """Feed ``skew`` each host's bound at each boundary and ``devices`` each step's
    disagreements; ``warnings`` at the run's end."""

    hosts: int
    skew_limit_ns: int
    skew_over: int = 0  # host boundaries whose bound was past the limit
    skew_seen: int = 0  # host boundaries checked
    _worst_skew: _Skew | None = None
    _devices: dict[DeviceKey, tuple[int, Disagreement, list[int]]] = field(
        default_factory=dict)

    def skew(self, host: str, bound_ns: int, uncertainty_ns: int, step: int,
             subinterval: int) -> None:
        if self.hosts < 2:
            return
        self.skew_seen += 1
        if bound_ns <= self.skew_limit_ns:
            return
        self.skew_over += 1
        if self._worst_skew is None or bound_ns > self._worst_skew.bound_ns:
            self._worst_skew = _Skew(bound_ns, uncertainty_ns, host, step, subinterval)

    def devices(self, step: int, found: Iterable[Disagreement]) -> None:
        for d in found:
            worst = self._devices.get(d.device)
            steps = [*worst[2], step] if worst else [step]
            if worst is None or d.off > worst[1].off:
                self._devices[d.device] = (step, d, steps)
            else:
                self._devices[d.device] = (worst[0], worst[1], steps)

    def warnings(self) -> list[Notice]:
        out = []
        w = self._worst_skew
        if w is not None:
            out.append(Notice(
                f"boundary skew may be up to {w.bound_ns / 1e6:.3f} ms (step {w.step}, "
                f"subinterval {w.subinterval}: measured skew plus the clock offset's "
                f"uncertainty of ±{w.uncertainty_ns / 1e6:.3f} ms), more than "
                f"skew_limit_seconds ({self.skew_limit_ns / 1e6:g} ms), at {self.skew_over:,} "
                f"of the run's {self.skew_seen:,} host boundaries; interlock.csv has every "
                "boundary (warned once a run)", w.host, "clock", w.step, w.subinterval))
        for step, d, steps in self._devices.values():
            others = [s for s in steps if s != step]
            also = (f"; it differed in step{'s' if len(others) > 1 else ''} "
                    f"{', '.join(map(str, others))} too" if others else "")
            out.append(Notice(f"{d.message} (step {step}{also}; warned once a run, at its "
                              "worst step)", d.host, "device", step))
        return out
