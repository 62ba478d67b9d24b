"""Dynamic feedback control (DFC): hold a focus metric at a target by moving IOPS.

Owns the control law and nothing else: one :class:`PidController` per focus-rollup instance,
fed every subinterval with the instance's measured focus metric and the total IOPS that was in
force while it was measured, returning the next total IOPS as a :class:`Move` (what dfc.csv
records); :class:`DfcBank` runs one controller per instance. An operator's edit of an
instance's total is what its controller starts from next (``PidController.take_over``). The
total is split over the instance's workloads by ``master.run.settings.split_total``.

The controller works on relative quantities so that its default gains fit any storage system
without tuning: the error is ``ln(target / measured)`` and the plant is described by its
elasticity ``d ln(metric) / d ln(IOPS)``, estimated online from the controller's own moves
(docs/measure.md, "DFC"). It is a PID in velocity form anchored on the IOPS in force: the
integral state is the applied IOPS itself, always inside ``[low_iops, high_iops]``, so it
cannot wind up, and a one-subinterval actuation delay does not destabilise it.

It must not do I/O, read clocks, sleep, or know about hosts, workloads' sequencers or files.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from protocol.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PidGains:
    """Fixed gains on the relative error ``ln(target / measured)``; the output is the change of
    ``ln(IOPS)`` per subinterval. Setting them turns the adaptation off."""

    kp: float = 0.0
    ki: float = 0.5
    kd: float = 0.0

    def __post_init__(self) -> None:
        if min(self.kp, self.ki, self.kd) < 0 or not all(
                math.isfinite(g) for g in (self.kp, self.ki, self.kd)):
            raise ConfigError("DFC gains must be finite and >= 0")
        if self.kp == self.ki == self.kd == 0:
            raise ConfigError("DFC gains cannot all be 0")


@dataclass(frozen=True)
class Move:
    """One controller decision (one dfc.csv row).

    ``error`` is ``target - measured`` in the metric's unit; ``rel_error`` is
    ``ln(target / measured)``. ``p``/``i``/``d`` are the terms' contributions to the change of
    ``ln(IOPS)``; ``comp`` is the delay compensation (non-zero only when the measured
    subinterval ran at another IOPS than the controller's last command). ``saturated`` means
    ``new_iops`` was clamped to ``low_iops``/``high_iops``; ``limited`` means the
    per-subinterval step limit cut the move; ``held`` means no move: no usable measurement,
    or (``outlier``) a lone reading far outside the band once settled, held until the next
    reading confirms it. ``elasticity`` is the plant estimate the move used.
    """

    new_iops: float
    measured: float
    error: float
    rel_error: float
    p: float
    i: float
    d: float
    comp: float
    saturated: bool
    limited: bool
    held: bool
    elasticity: float
    gains: PidGains
    outlier: bool = False


class PidController:
    """PID on ``ln(IOPS)`` driving ``ln(metric)`` to ``ln(target)``.

    ``direction`` is +1 when the metric rises with IOPS (latency, MB/s, CPU busy) and -1 when it
    falls. With ``gains=None`` the gains adapt: ``ki = aggressiveness / elasticity`` (a damped
    Newton step on the estimated plant), ``kp = kd = 0``; ``aggressiveness`` itself shrinks
    when the error keeps changing sign outside the tolerance and grows when it keeps the same
    sign. ``max_step_ratio`` bounds one move to ``x``/``/`` that factor. ``outlier_factor``
    (or None): once the controller has settled, a lone reading further than ``outlier_factor *
    tolerance`` from the target (the reading before it was not) is held as a spike (a stall, a
    garbage collection) rather than acted on; a second such reading in a row is acted on, so
    a real change costs one subinterval of delay.
    """

    def __init__(self, target: float, low_iops: float, high_iops: float,
                 gains: PidGains | None = None, *, direction: int = 1,
                 tolerance: float = 0.10, settle_count: int = 3,
                 aggressiveness: float = 0.5, max_step_ratio: float = 2.0,
                 initial_elasticity: float = 1.0,
                 outlier_factor: float | None = 3.0) -> None:
        if not (math.isfinite(target) and target > 0):
            raise ConfigError("DFC target must be a positive number")
        if not (0 < low_iops <= high_iops):
            raise ConfigError("DFC needs 0 < low_iops <= high_iops")
        if direction not in (1, -1):
            raise ConfigError("DFC direction must be +1 or -1")
        if not 0 < tolerance < 1:
            raise ConfigError("DFC tolerance must be between 0 and 1")
        if settle_count < 1:
            raise ConfigError("DFC settle_count must be >= 1")
        if not 0 < aggressiveness <= 1:
            raise ConfigError("DFC aggressiveness must be in (0, 1]")
        if max_step_ratio <= 1:
            raise ConfigError("DFC max_step_ratio must be > 1")
        if outlier_factor is not None and not outlier_factor > 1:
            raise ConfigError("DFC outlier_factor must be > 1")
        self.outlier_tolerance = None if outlier_factor is None else outlier_factor * tolerance
        self.target = float(target)
        self.low_iops = float(low_iops)
        self.high_iops = float(high_iops)
        self.direction = direction
        self.tolerance = tolerance
        self.settle_count = settle_count
        self.max_log_step = math.log(max_step_ratio)
        self.fixed_gains = gains
        self.aggressiveness = aggressiveness
        self.base_aggressiveness = aggressiveness
        self._last_constrained = False
        self._last_cmd: float | None = None
        self.elasticity = float(initial_elasticity) * direction
        self._points: deque[tuple[float, float]] = deque(maxlen=6)  # (ln iops, ln metric)
        # the newest point, when its far reading steepened the estimate and the next secant
        # has yet to confirm it (see _update_elasticity)
        self._suspect: tuple[float, float] | None = None
        self._before_suspect = 0.0  # the elasticity before that steepening
        self._errors: deque[float] = deque(maxlen=3)  # recent rel errors (for P and D)
        self._signs: deque[tuple[int, bool]] = deque(maxlen=4)  # (error sign, far)
        self._in_band = 0
        self._has_settled = False  # settled at least once (the outlier rule applies from then)
        self._last_far = False  # the last reading was beyond the outlier tolerance

    # -- plant estimate ---------------------------------------------------------------------

    ELASTICITY_MIN = 0.02
    ELASTICITY_MAX = 50.0
    MIN_LOG_SPAN = 0.05  # |ln(IOPS) difference| a secant needs (5 %) to say anything
    SLOW_BLEND = 0.3  # weight of a new, smaller elasticity estimate

    def _secant(self, exclude: tuple[float, float] | None = None) -> float | None:
        """Slope in log-log space between the newest point and the newest earlier point at
        least MIN_LOG_SPAN away (not ``exclude``), or None when there is no such point."""
        lu, ly = self._points[-1]
        older = [pt for pt in self._points
                 if abs(lu - pt[0]) >= self.MIN_LOG_SPAN and pt is not exclude]
        if not older:
            return None
        lu0, ly0 = older[-1]
        return (ly - ly0) / (lu - lu0)

    def _update_elasticity(self, far: bool) -> None:
        """Secant estimate of the plant (``_secant``). A larger elasticity (a steeper plant: be
        careful) is adopted at once; a smaller one (be bolder) is blended in slowly. Bounded to
        x3 / /3 per update.

        A lone spike would steepen the estimate through two secants (to it, then from it) and
        every later move would crawl. So a steepening suggested by a reading far from the target
        (beyond the outlier tolerance) is provisional: the next secant, which does not use that
        point, must agree that the plant is steeper than before; if it does not, the point is
        dropped from the estimate and the elasticity goes back to what it was."""
        if len(self._points) < 2:
            return
        suspect, self._suspect = self._suspect, None
        if suspect is not None:
            confirm = self._secant(exclude=suspect)
            if confirm is None or confirm * self.direction <= self._before_suspect:
                self._points.remove(suspect)  # not confirmed: a spike, out of the estimate
                self.elasticity = self.direction * self._before_suspect
                if confirm is None or confirm * self.direction <= 0:
                    return
                self._set_elasticity(abs(confirm), self._before_suspect)
                return
        old = abs(self.elasticity)
        slope = self._secant()
        if slope is None or slope * self.direction <= 0:
            return  # flat or noisy: keep the estimate, the step limit protects us
        if abs(slope) > old and far:
            self._suspect = self._points[-1]
            self._before_suspect = old
        self._set_elasticity(abs(slope), old)

    def _set_elasticity(self, slope: float, old: float) -> None:
        new = min(max(slope, old / 3, self.ELASTICITY_MIN), old * 3, self.ELASTICITY_MAX)
        if new < old:
            new = old ** (1 - self.SLOW_BLEND) * new ** self.SLOW_BLEND
        self.elasticity = self.direction * new

    def _adapt_aggressiveness(self, rel_error: float, far: bool) -> None:
        """ivy-like gain adaptation on top of the plant estimate: the error changing sign three
        times running outside the tolerance means too aggressive (x0.7); four errors of the
        same sign outside it, with no step limit or bound in the way, means too timid (x1.25);
        inside the tolerance the aggressiveness relaxes back to its configured value.

        A lone far reading (``far``: beyond the outlier tolerance, with neither neighbour far)
        is taken out of that history once the next reading shows it was alone: a spike flips
        the sign twice, and would otherwise read as oscillation and cut the gain every time."""
        outside = abs(rel_error) > math.log1p(self.tolerance)
        if not outside:
            self._signs.clear()
            self.aggressiveness += 0.2 * (self.base_aggressiveness - self.aggressiveness)
            return
        s = self._signs
        if not far and s and s[-1][1] and (len(s) == 1 or not s[-2][1]):
            s.pop()
        s.append((1 if rel_error > 0 else -1, far))
        signs = [sign for sign, _ in s]
        if len(signs) >= 3 and signs[-1] != signs[-2] and signs[-2] != signs[-3]:
            self.aggressiveness = max(0.1, self.aggressiveness * 0.7)
            s.clear()
        elif len(signs) == 4 and len(set(signs)) == 1 and not self._last_constrained:
            self.aggressiveness = min(1.0, self.aggressiveness * 1.25)
            s.clear()

    def gains(self) -> PidGains:
        if self.fixed_gains is not None:
            return self.fixed_gains
        return PidGains(kp=0.0, ki=self.aggressiveness / abs(self.elasticity), kd=0.0)

    # -- the step -----------------------------------------------------------------------------

    def step(self, measured: float, current_iops: float) -> Move:
        """One subinterval: ``measured`` is the focus metric, ``current_iops`` the instance's
        total IOPS setting that was in force while it was measured. Returns the next setting.

        The move is anchored on the controller's last command (``current_iops`` at the first
        step): ``ln(new) = ln(anchor) + comp + p + i + d`` with the delay compensation
        ``comp = w * (ln(current) - ln(anchor))``, ``w = min(1, ki * elasticity)``, which makes a
        command that has not taken effect yet count as already applied (docs/measure.md).
        """
        base = min(max(float(current_iops), self.low_iops), self.high_iops)
        anchor = self._last_cmd if self._last_cmd is not None else base
        if not (math.isfinite(measured) and current_iops > 0):
            return self._hold(anchor, measured)
        gains = self.gains()
        far = False
        if measured <= 0:
            # the metric reads 0 (nothing measured as slow, idle): far below the target, so the
            # move is a full step (up for a rising metric, down for a falling one)
            rel_error = self.max_log_step / max(gains.ki, 1e-9)
        else:
            rel_error = math.log(self.target / measured)
            far = (self.outlier_tolerance is not None
                   and abs(measured - self.target) > self.outlier_tolerance * self.target)
            lone = far and self._has_settled and not self._last_far
            self._last_far = far
            if lone:
                move = self._hold(anchor, measured)
                return dataclasses.replace(move, error=self.target - measured,
                                           rel_error=rel_error, outlier=True)
            self._points.append((math.log(current_iops), math.log(measured)))
            if self.fixed_gains is None:
                self._update_elasticity(far)
                self._adapt_aggressiveness(rel_error, far)
                gains = self.gains()
        errs = list(self._errors)
        e1 = errs[-1] if errs else rel_error
        e2 = errs[-2] if len(errs) >= 2 else e1
        sign = self.direction
        p = sign * gains.kp * (rel_error - e1)
        i = sign * gains.ki * rel_error
        d = sign * gains.kd * (rel_error - 2 * e1 + e2)
        weight = min(1.0, gains.ki * abs(self.elasticity))
        comp = weight * (math.log(base) - math.log(anchor))
        self._errors.append(rel_error)
        step = comp + p + i + d
        limited = abs(step) > self.max_log_step
        step = max(-self.max_log_step, min(self.max_log_step, step))
        wanted = anchor * math.exp(step)
        new = min(max(wanted, self.low_iops), self.high_iops)
        saturated = new != wanted
        self._last_constrained = limited or saturated
        self._last_cmd = new
        in_band = abs(measured - self.target) <= self.tolerance * self.target
        self._in_band = self._in_band + 1 if in_band else 0
        self._has_settled |= self.settled()
        return Move(new_iops=new, measured=float(measured), error=self.target - measured,
                    rel_error=rel_error, p=p, i=i, d=d, comp=comp, saturated=saturated,
                    limited=limited, held=False, elasticity=self.elasticity, gains=gains)

    def take_over(self, iops: float) -> None:
        """An operator set the instance's total to ``iops`` (within the bounds): the next move
        starts from it, with the error history and the settle count started again; what was
        learnt of the plant (elasticity, gain) stays."""
        self._last_cmd = min(max(float(iops), self.low_iops), self.high_iops)
        self._restart()

    def _restart(self) -> None:
        """The error history and the settle count started again (an operator's edit)."""
        self._errors.clear()
        self._in_band = 0
        # the next reading far from the target is the edit's doing, not a lone spike
        self._last_far = self._has_settled = False

    def retune(self, target: float, low_iops: float, high_iops: float) -> None:
        """An operator changed the target or the bounds: the next move aims at them, from the
        total in force (within the new bounds), with the error history and the settle count
        started again; what was learnt of the plant stays."""
        if not (math.isfinite(target) and target > 0) or not 0 < low_iops < high_iops:
            raise ConfigError("DFC needs a target > 0 and 0 < low_iops < high_iops")
        self.target, self.low_iops, self.high_iops = float(target), low_iops, high_iops
        if self._last_cmd is not None:
            self.take_over(self._last_cmd)  # within the new bounds
        else:
            self._restart()

    def held(self, measured: float, iops: float) -> Move:
        """No move this subinterval (an operator's edit to ``iops`` is about to hold): the
        row of the subinterval, held, its new setting the edit's."""
        return self._hold(iops, measured)

    def _hold(self, base: float, measured: float) -> Move:
        self._in_band = 0
        nan = math.nan
        return Move(new_iops=base, measured=float(measured), error=nan, rel_error=nan, p=0.0,
                    i=0.0, d=0.0, comp=0.0, saturated=False, limited=False, held=True,
                    elasticity=self.elasticity, gains=self.gains())

    def settled(self) -> bool:
        """True when the last ``settle_count`` measurements were within ``tolerance`` (a
        fraction of the target) of the target."""
        return self._in_band >= self.settle_count


@dataclass(frozen=True)
class DfcRow:
    """One dfc.csv row: a move of one focus-rollup instance in one subinterval."""

    subinterval: int
    instance: str
    metric: str
    move: Move


class DfcBank:
    """One :class:`PidController` per focus-rollup instance, same target and bounds."""

    def __init__(self, instances: Sequence[str], metric: str, target: float, low_iops: float,
                 high_iops: float, gains: PidGains | None = None, *, direction: int = 1,
                 tolerance: float = 0.10, settle_count: int = 3) -> None:
        if not instances:
            raise ConfigError("DFC needs at least one focus-rollup instance")
        self.metric = metric
        self.controllers = {
            name: PidController(target, low_iops, high_iops, gains, direction=direction,
                                tolerance=tolerance, settle_count=settle_count)
            for name in instances
        }

    def step(self, subinterval: int, measured: Mapping[str, float],
             current_iops: Mapping[str, float],
             hold: Mapping[str, float] | None = None) -> list[DfcRow]:
        """One move per instance from its ``measured`` focus metric and the total
        ``current_iops`` in force; an instance in ``hold`` makes none (its row is held at the
        IOPS given there)."""
        rows = []
        for name, ctrl in self.controllers.items():
            value = measured.get(name, math.nan)
            if hold is not None and name in hold:
                move = ctrl.held(value, hold[name])
            else:
                move = ctrl.step(value, current_iops[name])
            rows.append(DfcRow(subinterval, name, self.metric, move))
        return rows

    def settled(self) -> bool:
        return all(c.settled() for c in self.controllers.values())
