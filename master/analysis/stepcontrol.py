"""How long a step runs and what happens in it: phases, ``measure:``, ``dfc:``.

Owns the decisions made after each subinterval's rollups are known: the phase of each
subinterval, when the step ends, which measurement window its summary covers (and whether it is
valid), and the IOPS the DFC controller sets for each focus-rollup instance. Pure: it is fed
rollup results and the settings in force, and returns decisions; ``master.run.lifecycle`` carries
them out on the hosts and ``master.run.recorder`` writes the rows.

Phases: ``warmup`` (the fixed warmup, then, with ``dfc`` and ``measure`` together, until the
controller has settled), ``measurement`` (fixed length, or until the ``measure`` criterion is
met or times out), ``cooldown`` (fixed length).
"""

from __future__ import annotations

import array
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from master.analysis import measure as ms
from master.analysis.dfc import DfcBank, PidGains
from master.analysis.rollup import RollupResult, Sample, compute
from master.analysis.verdicts import DfcReading, dfc_cause, measure_cause, pinned_bound
from master.config import AccuracyCriterion, DfcConfig, FioCriteria, StepConfig

DECREASING_METRICS = ("IOPS", "MB_per_s")  # metrics that do not rise with IOPS are rare; see doc


@dataclass
class Decision:
    """What to do after subinterval ``k``: ``last`` is the step's last subinterval once known
    (``k`` itself means: stop now), ``new_totals`` the DFC's IOPS per focus instance."""

    k: int
    phase: str
    last: int | None
    new_totals: dict[str, float] = field(default_factory=dict)
    measure_rows: list[dict[str, Any]] = field(default_factory=list)
    dfc_rows: list[dict[str, Any]] = field(default_factory=list)


class MoveLog:
    """One focus instance's DFC moves, as the verdict reads them (``DfcReading``), kept as
    typed columns: 25 bytes a move, where a ``DfcReading`` each took ~200 (a day-long DFC
    step of 1 s subintervals keeps 2 MB an instance; dfc.csv has every move in full)."""

    def __init__(self) -> None:
        self._k = array.array("q")
        self._measured = array.array("d")
        self._new_iops = array.array("d")
        self._flags = bytearray()  # 1: saturated, 2: held

    def __len__(self) -> int:
        return len(self._k)

    def append(self, k: int, measured: float, new_iops: float, saturated: bool,
               held: bool) -> None:
        self._k.append(k)
        self._measured.append(measured)
        self._new_iops.append(new_iops)
        self._flags.append(int(saturated) | 2 * int(held))

    def between(self, first: int, last: int) -> list[DfcReading]:
        """The moves made after subintervals ``first`` to ``last``, in order."""
        return [DfcReading(k, self._measured[i], self._new_iops[i], bool(self._flags[i] & 1),
                           bool(self._flags[i] & 2))
                for i, k in enumerate(self._k) if first <= k <= last]


def metric_direction(metric: str) -> int:
    """+1 when the metric rises with IOPS (latency, MB/s, IOPS), -1 when it falls."""
    return 1


def _criterion(cfg: AccuracyCriterion | FioCriteria) -> list[tuple[str, str, ms.Criterion]]:
    """(key, metric or '' for the focus metric, criterion) per check."""
    if isinstance(cfg, AccuracyCriterion):
        return [("accuracy", "", ms.AccuracyCriterion(
            accuracy=cfg.accuracy, confidence=cfg.confidence,
            min_window_s=cfg.min_measure.rounded_s, ramp_s=cfg.ramp.rounded_s,
            autocorrelation=cfg.autocorrelation))]
    out: list[tuple[str, str, ms.Criterion]] = []
    for i, c in enumerate(cfg.criteria):
        crit = ms.FioCriterion(c.type, ms.FioLimit(c.limit.value, c.limit.percent),
                               cfg.window.rounded_s, cfg.ramp.rounded_s)
        out.append((f"{i}:{c.type}", c.metric, crit))
    return out


class StepControl:
    """Feed ``after(k, results, settings)`` in order; see the module docstring."""

    def __init__(self, step: StepConfig, subinterval_s: float,
                 focus_instances: Mapping[str, tuple[str, ...]]) -> None:
        self.step = step
        self.subinterval_s = subinterval_s
        self.warm = step.warmup.subintervals
        self.cool = step.cooldown.subintervals
        self.fixed = step.measure_time.subintervals if step.measure_time else None
        self.measure = step.measure
        self.dfc = step.dfc
        # the measurement starts after the fixed warmup, but with DFC and measure together
        # once the controller has settled (or at the settle deadline): ``after`` decides
        self.meas_start: int | None = (
            None if self.measure is not None and self.dfc is not None else self.warm)
        self.meas_end: int | None = None  # last measurement subinterval, once known
        self.last: int | None = None
        self.timeout = step.measure.timeout.subintervals if step.measure else None
        self.tracker: ms.MeasureTracker | ms.MeasureGroup | None = None
        self.checks: list[tuple[str, str, ms.Criterion]] = []
        self.result: dict[str, ms.MeasureResult] = {}
        self.bank: DfcBank | None = None
        self.focus_measure: tuple[str, ...] = ()
        if self.measure is not None:
            self.focus_measure = focus_instances[self.measure.focus_rollup]
            self.checks = _criterion(self.measure.criterion)
        if self.dfc is not None:
            d = self.dfc
            gains = None
            if any(g is not None for g in (d.gains.kp, d.gains.ki, d.gains.kd)):
                gains = PidGains(kp=d.gains.kp or 0.0, ki=0.5 if d.gains.ki is None else d.gains.ki,
                                 kd=d.gains.kd or 0.0)
            self.bank = DfcBank(focus_instances[d.focus_rollup], d.focus_metric, d.target,
                                d.low_iops, d.high_iops, gains,
                                direction=metric_direction(d.focus_metric),
                                tolerance=d.tolerance)
        self.settle_deadline = self.warm + (self.timeout or 0)
        #: with DFC and measure: the controller had not settled when the deadline started the
        #: measurement (what was measured is not the target's operating point)
        self.started_unsettled = False
        #: the focus instances whose controller had not settled then, in the bank's order
        self.unsettled_at_start: tuple[str, ...] = ()
        self._window: list[Sample] = []  # a DFC window's subintervals so far
        #: every DFC move of each focus instance, for the verdict's reasons
        self.dfc_moves: dict[str, MoveLog] = {}
        self._window_key: tuple[tuple[str, float], ...] = ()  # the IOPS they ran at
        #: focus instances an operator's edit takes over: the first subinterval it holds in
        #: and the instance's total from then on (``operator_edit``)
        self._taken_over: dict[str, tuple[int, float]] = {}
        #: the ``measure:`` focus instances with a value of its metric so far
        self._measure_read: set[str] = set()
        #: the first subinterval whose reading the DFC in force (an operator's ``retune``)
        #: judges
        self._retuned_from = 0

    @property
    def max_subintervals(self) -> int:
        if self.fixed is not None:
            return self.warm + self.fixed + self.cool
        extra = self.timeout or 0
        if self.dfc is not None and self.measure is not None:
            extra *= 2
        return self.warm + extra + self.cool

    def initial_total(self, current: float | None) -> float:
        """The DFC's starting IOPS for an instance whose workloads now add up to ``current``
        (None when any runs at max): the current value within the bounds, else the
        geometric middle of the bounds."""
        assert self.dfc is not None
        lo, hi = self.dfc.low_iops, self.dfc.high_iops
        if current is None or not current > 0:
            return math.sqrt(lo * hi)
        return min(max(current, lo), hi)

    def operator_edit(self, instance: str, effective: int, total: float) -> None:
        """An operator's edit sets DFC focus instance ``instance``'s workloads (its total to
        ``total``) from subinterval ``effective`` on. Until then its controller makes no move
        (one made from what ran before would undo the edit); from then it starts from the
        total in force, its settle count and the DFC window starting again."""
        if self.bank is not None and instance in self.bank.controllers:
            self._taken_over[instance] = (effective, total)

    def retune(self, after: int, *, target: float | None = None,
               low_iops: float | None = None, high_iops: float | None = None) -> DfcConfig:
        """An operator's ``ivypy edit all dfc.target=... dfc.low_iops=... dfc.high_iops=...``:
        every controller aims at the new values from its next move (made after subinterval
        ``after``), its settle count started again; the verdict judges the readings from
        ``after + 1`` on (those before were made at the old target). The DFC in force now;
        ``ValueError`` (nothing changed) when the bounds would cross."""
        if self.dfc is None or self.bank is None:
            raise ValueError("the step has no dfc")
        new = dataclasses.replace(
            self.dfc, target=self.dfc.target if target is None else target,
            low_iops=self.dfc.low_iops if low_iops is None else low_iops,
            high_iops=self.dfc.high_iops if high_iops is None else high_iops)
        if not new.low_iops < new.high_iops:
            raise ValueError(f"low_iops {new.low_iops:g} must be less than high_iops "
                             f"{new.high_iops:g}")
        for ctrl in self.bank.controllers.values():
            ctrl.retune(new.target, new.low_iops, new.high_iops)
        self.dfc = new
        self._retuned_from = after + 1
        self._window, self._window_key = [], ()
        return new

    def operator_held(self) -> frozenset[str]:
        """The focus instances an operator's edit holds back from DFC's moves now."""
        return frozenset(self._taken_over)

    def phase_of(self, k: int) -> str:
        if self.meas_start is None or k < self.meas_start:
            return "warmup"
        if self.meas_end is None or k <= self.meas_end:
            return "measurement"
        return "cooldown"

    def after(self, k: int, results: Mapping[str, RollupResult],
              settings: Mapping[str, float], sample: Sample | None = None) -> Decision:
        """Decide after subinterval ``k``. ``settings``: the DFC focus instances' total IOPS in
        force during ``k``; ``sample``: its statistics (needed with a DFC window)."""
        phase = self.phase_of(k)
        dec = Decision(k, phase, self.last)
        hold = self._operator_holds(k, settings)
        measured = self._dfc_measurement(results, settings, sample)
        if self.bank is not None and self.dfc is not None and measured is not None:
            for row in self.bank.step(k, measured, settings, hold):
                mv = row.move
                if row.instance not in hold:
                    dec.new_totals[row.instance] = mv.new_iops
                self.dfc_moves.setdefault(row.instance, MoveLog()).append(
                    k, mv.measured, mv.new_iops, mv.saturated, mv.held)
                dec.dfc_rows.append({
                    "subinterval": k, "phase": phase, "instance": row.instance,
                    "metric": row.metric, "measured": mv.measured, "target": self.dfc.target,
                    "error": mv.error, "rel_error": mv.rel_error, "p": mv.p, "i": mv.i,
                    "d": mv.d, "iops_in_force": settings.get(row.instance),
                    "new_iops": mv.new_iops, "saturated": mv.saturated, "limited": mv.limited,
                    "held": mv.held, "outlier": mv.outlier, "elasticity": mv.elasticity,
                    "settled": self.bank.controllers[row.instance].settled()})
        if self.fixed is not None:
            n = self.warm + self.fixed + self.cool
            self.meas_start = self.warm
            self.meas_end = self.warm + self.fixed - 1
            self.last = dec.last = n - 1
            return dec
        assert self.measure is not None
        if self.meas_start is None:
            settled = self.bank is None or self.bank.settled()
            if k + 1 >= self.warm and (settled or k + 1 >= self.settle_deadline):
                self.meas_start = k + 1
                self.started_unsettled = not settled
                if self.bank is not None:
                    self.unsettled_at_start = tuple(
                        i for i, c in self.bank.controllers.items() if not c.settled())
            return dec
        if phase == "measurement" and self.meas_end is None:
            dec.measure_rows = self._feed(k, results)
            if self._tracker_done():
                self.meas_end = k
                self.last = dec.last = k + self.cool
        return dec

    def _operator_holds(self, k: int, settings: Mapping[str, float]) -> dict[str, float]:
        """The focus instances whose controller makes no move after ``k``, each with the
        total it holds at: those an operator's edit takes over from a later subinterval, and
        those with no total in force (a workload at max). An edit in force from ``k`` on
        hands its instance's total to the controller (``PidController.take_over``) and starts
        the DFC window again."""
        hold: dict[str, float] = {}
        if self.bank is None:
            return hold
        for inst, (effective, total) in list(self._taken_over.items()):
            if effective > k:
                hold[inst] = total
                continue
            del self._taken_over[inst]
            if inst in settings:
                self.bank.controllers[inst].take_over(settings[inst])
            self._window, self._window_key = [], ()
        for inst in self.bank.controllers:
            if inst not in settings and inst not in hold:
                hold[inst] = math.nan
        return hold

    def _dfc_measurement(self, results: Mapping[str, RollupResult],
                         settings: Mapping[str, float], sample: Sample | None
                         ) -> dict[str, float] | None:
        """The focus metric per instance for the controller, or None when it does not act
        now: every subinterval by default; with ``dfc.window_seconds``, once the subintervals
        run at the same IOPS add up to a window (their histograms merged, so a percentile is
        exact over the window). A change of IOPS (the controller's own move taking effect, or
        an operator's edit) starts a new window."""
        if self.dfc is None:
            return None
        res = results[self.dfc.focus_rollup]
        n = 1 if self.dfc.window is None else self.dfc.window.subintervals
        if n > 1:
            if sample is None:
                raise ValueError("a DFC window needs each subinterval's sample")
            key = tuple(sorted(settings.items()))
            if key != self._window_key:
                self._window, self._window_key = [], key
            self._window.append(sample)
            if len(self._window) < n:
                return None
            total = Sample.add(self._window)
            self._window = []
            res = compute(total, res.grouping, n * self.subinterval_s)
        col = res.columns[self.dfc.focus_metric]
        return {name: float(col[i]) for i, name in enumerate(res.grouping.names)}

    def _feed(self, k: int, results: Mapping[str, RollupResult]) -> list[dict[str, Any]]:
        assert self.measure is not None
        res = results[self.measure.focus_rollup]
        names = res.grouping.names
        if self.tracker is None:
            self.focus_measure = tuple(names)
            timeout_s = (self.timeout or 1) * self.subinterval_s
            if len(self.checks) == 1:
                self.tracker = ms.MeasureTracker(self.checks[0][2], names, self.subinterval_s,
                                                 timeout_s)
            else:
                self.tracker = ms.MeasureGroup(
                    [(key, c) for key, _, c in self.checks if isinstance(c, ms.FioCriterion)],
                    names, self.subinterval_s, timeout_s)

        def series(metric: str) -> list[float]:
            col = res.columns[metric or self.measure.focus_metric]  # type: ignore[union-attr]
            return [float(v) for v in col]

        out: list[dict[str, Any]] = []
        assert self.meas_start is not None
        focus = series(self.measure.focus_metric)
        self._measure_read.update(n for n, v in zip(names, focus, strict=True)
                                  if math.isfinite(v))
        if isinstance(self.tracker, ms.MeasureTracker):
            key, metric, crit = self.checks[0]
            rows = {key: self.tracker.feed(series(metric))}
        else:
            rows = self.tracker.feed({key: series(metric) for key, metric, _ in self.checks})
        for key, metric, crit in self.checks:
            row = rows[key]
            for i, inst in enumerate(names):
                out.append({
                    "subinterval": k, "instance": inst, "criterion": crit.name,
                    "metric": metric or self.measure.focus_metric, "limit": crit.limit_text,
                    "window_first": None if row.window is None else row.window[0] + self.meas_start,
                    "window_last": None if row.window is None
                    else row.window[1] - 1 + self.meas_start,
                    "value": _reported(crit.name, row.values[i]), "passed": row.passed[i],
                    "attained": row.attained})
        return out

    def _tracker_done(self) -> bool:
        return self.tracker is not None and self.tracker.done

    # ------------------------------------------------------------------ the verdict
    def verdict(self, last_recorded: int) -> tuple[list[int], str, dict[str, Any]]:
        """(window subintervals, invalid reason or '', extra summary columns). The reasons
        carry their figures (``master.analysis.verdicts``): no measurement subinterval; a DFC
        controller pinned at a bound over the window, or not settled when the deadline
        started the measurement (why, per instance); a criterion's values against its limit."""
        if self.fixed is not None or self.measure is None:
            start = self.meas_start if self.meas_start is not None else self.warm
            end = self.meas_end if self.meas_end is not None else last_recorded
            window = list(range(start, min(end, last_recorded) + 1))
            if not window:
                return [], "no measurement subinterval", {}
            return window, "; ".join(x for x in (self._pinned_reason(window),
                                                 self._held_reason(window)) if x), {}
        assert self.meas_start is not None or self.tracker is None
        crit = "; ".join(f"{c.name} {c.limit_text}" for _, _, c in self.checks)
        if self.tracker is None or self.meas_start is None:
            named = {"measure_criterion": crit}
            if self.bank is not None and not self.bank.settled():
                unsettled = tuple(i for i, c in self.bank.controllers.items() if not c.settled())
                return [], self._unsettled_reason(
                    "the step ended before the settle deadline", last_recorded, unsettled), named
            return [], "no measurement subinterval", named
        res = self.tracker.result()
        results = {"only": res} if isinstance(res, ms.MeasureResult) else res
        first = next(iter(results.values()))
        values = "; ".join(" ".join(f"{name}={_reported(r.criterion, v):.6g}"
                                    for name, v in zip(self.focus_measure, r.values,
                                                       strict=False))
                           for r in results.values())
        extra = {"measure_criterion": crit, "measure_values": values,
                 "measure_attained": first.valid}
        reasons = []
        if self.started_unsettled:
            reasons.append(self._unsettled_reason(
                f"the settle deadline started the measurement at subinterval {self.meas_start}",
                self.meas_start - 1, self.unsettled_at_start))
        if not first.valid:
            timeout_s = None if self.timeout is None else self.timeout * self.subinterval_s
            # of several criteria, those every instance met on the window are not the cause
            failed = [r for r in results.values() if not all(r.passed)] or list(results.values())
            causes = "; ".join(measure_cause(
                r.criterion, r.limit, self.focus_measure,
                [_reported(r.criterion, v) for v in r.values], r.passed, r.reason, timeout_s,
                window=r.window is not None)
                for r in failed)
            reasons.append(f"measure: {causes}"
                           + ("" if first.window is None else " (best window reported)"))
        unread = self._unread_reason()
        if unread:
            reasons.append(unread)
        if first.window is None:
            return [], "; ".join(reasons), extra
        lo, hi = first.window
        start = self.meas_start
        window = [start + j for j in range(lo, hi) if start + j <= last_recorded]
        held = self._held_reason(window)
        if held:
            reasons.append(held)
        return window, "; ".join(reasons), extra

    def _held_reason(self, window: Sequence[int]) -> str:
        """Why DFC did not hold its target over the measurement ``window``, or '': a focus
        instance with no reading of its metric there held IOPS it could not steer by; one
        whose readings there average outside target ± ``dfc.tolerance`` did not hold it (how
        far, why and what to change: its controller's cause). The readings are the metric as
        DFC reads and holds it (a subinterval's, or a ``window_seconds`` window's): the
        window's own p99 of a p99 held at its target lies above it by the readings' spread.
        A fixed-length step's instance pinned at a bound is ``_pinned_reason``'s."""
        if self.dfc is None or self.bank is None or not window:
            return ""
        d, first, last = self.dfc, max(window[0], self._retuned_from), window[-1]
        if first > last:  # retuned in the window's last subinterval: nothing to judge yet
            return ""
        reasons, off = [], []
        missing = []
        for inst in self.bank.controllers:
            moves = self._moves(inst, first, last)
            read = [m.measured for m in moves if math.isfinite(m.measured)]
            if not read:
                missing.append(inst)
                continue
            if self.fixed is not None and pinned_bound(moves, d.low_iops, d.high_iops):
                continue
            mean = math.fsum(read) / len(read)
            if abs(mean - d.target) > d.tolerance * d.target:
                off.append((inst, mean, len(read)))
        if missing:
            reasons.append(f"dfc: {d.focus_metric} had no samples in the measurement window "
                           f"({', '.join(missing)}), so DFC held IOPS it could not steer by "
                           "(see dfc.csv)")
        if off:
            reasons.append(
                f"dfc: {d.focus_metric} over the measurement window not within "
                f"±{d.tolerance:.0%} of its target {d.target:g}: " + "; ".join(
                    f"{i} {v:.4g} on average of {n} readings ({100 * (v / d.target - 1):+.1f}%; "
                    f"{self._off_cause(i, first, last)})" for i, v, n in off) + " (see dfc.csv)")
        return "; ".join(reasons)

    def _off_cause(self, inst: str, first: int, last: int) -> str:
        """Why ``inst``'s readings over ``first..last`` averaged off its target: it came
        within the tolerance only late in the window (the measurement took in its approach:
        a warmup lets it settle first), else its controller's cause."""
        assert self.dfc is not None and self.bank is not None
        d = self.dfc
        band = d.tolerance * d.target
        moves = [m for m in self._moves(inst, first, last) if math.isfinite(m.measured)]
        k = len(moves)
        while k and abs(moves[k - 1].measured - d.target) <= band:
            k -= 1
        if 0 < k < len(moves) and len(moves) - k >= self.bank.controllers[inst].settle_count:
            return (f"it came within the tolerance only from subinterval "
                    f"{moves[k].subinterval}, and the measurement took in its approach: "
                    "warmup_seconds lets DFC settle before the measurement")
        return self._dfc_cause(inst, 0, last)

    def _unread_reason(self) -> str:
        """A ``measure:`` focus instance with no sample of its metric was never steady."""
        if self.measure is None or self.tracker is None:
            return ""
        unread = [i for i in self.focus_measure if i not in self._measure_read]
        if not unread:
            return ""
        return (f"measure: {self.measure.focus_metric} had no samples ({', '.join(unread)}), "
                "so it was never steady")

    def _moves(self, inst: str, first: int, last: int) -> list[DfcReading]:
        log = self.dfc_moves.get(inst)
        return [] if log is None else log.between(first, last)

    def _dfc_cause(self, inst: str, first: int, last: int) -> str:
        """Why ``inst``'s controller did not hold the target over its moves in
        ``first..last``, and what to change."""
        assert self.dfc is not None and self.bank is not None
        d, ctrl = self.dfc, self.bank.controllers[inst]
        return dfc_cause(self._moves(inst, first, last), d.focus_metric, d.target, d.low_iops,
                         d.high_iops, ctrl.tolerance, ctrl.settle_count)

    def _dfc_causes(self, first: int, last: int, instances: Sequence[str]) -> list[str]:
        """``<instance>: <cause>`` of each controller of ``instances`` over its moves in
        ``first..last``."""
        return [f"{inst}: {self._dfc_cause(inst, first, last)}" for inst in instances]

    def _unsettled_reason(self, when: str, last: int, unsettled: Sequence[str]) -> str:
        """The DFC had not settled when ``when``: why, per instance of ``unsettled`` (those
        not settled then), over its moves up to subinterval ``last``."""
        assert self.dfc is not None and self.bank is not None
        causes = "; ".join(self._dfc_causes(0, last, unsettled))
        return (f"dfc: {self.dfc.focus_metric} had not settled at its target "
                f"{self.dfc.target:g} when {when} ({causes}; see dfc.csv)")

    def _pinned_reason(self, window: list[int]) -> str:
        """A fixed-length DFC step whose controller was pinned at a bound for most of its
        moves in the measurement window did not hold its target there: why, per instance."""
        if self.bank is None or self.dfc is None:
            return ""
        d = self.dfc
        pinned = [inst for inst in self.bank.controllers if pinned_bound(
            self._moves(inst, window[0], window[-1]), d.low_iops, d.high_iops) is not None]
        if not pinned:
            return ""
        causes = self._dfc_causes(window[0], window[-1], pinned)
        return (f"dfc: {d.focus_metric} not held at its target {d.target:g} in the "
                f"measurement window ({'; '.join(causes)}; see dfc.csv)")


def _reported(criterion: str, value: float) -> float:
    """A criterion value as measure.csv and summary.csv report it, in its limit's unit: the
    accuracy criterion's relative half-width in percent (its limit reads "5% at 95%"); fio's
    criteria are already in percent or absolute, as their limit."""
    return value * 100.0 if criterion == "accuracy" else value
