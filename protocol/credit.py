"""The credit rule: which subintervals of a step a slave may run, and what the master grants next.

All of it lives here (as h11 keeps every transition in one file); the master's step loop, the
slave session, its worker backend and worker processes, and the in-memory hosts apply it and
write none of it again. Pure: no I/O, clocks or threads; the legal order of the messages
themselves is ``protocol.state``'s.

The rule
    Every worker records into two buffers in turn: subinterval ``k`` into buffer
    ``buffer_of(k)``. ``Go`` grants subintervals 0 and 1 (``GO_GRANTS``). Once the master has
    recorded ``k`` it answers ``Continue(k + 2)``, which readies ``k``'s buffer, collected by
    then, for ``k + 2`` (``freed_for``), or ``Stop(after)``. At the end of ``k`` a slave may go
    on into ``k + 1`` only if ``k + 1`` is granted or the step ends with ``k``
    (``SlaveCredit.may_follow``); otherwise the master is late and the slave stops all I/O.
    An edit a slave takes while subinterval ``next_result`` runs holds from
    ``next_result + 1`` (``effective``): the running subinterval keeps the settings it started
    with; between steps it holds at once (``-1``).

The master's side (``answer``): after recording ``k`` of a step of at most ``n_max``
subintervals whose last is ``last`` once known (``last_of``), with no ``Stop`` sent yet: the
step ends now (``Stop(k)``) when its last is ``k`` or before; after the running subinterval
(``Stop(k + 1)``) when that is its last; else ``Continue(k + 2)``. A step of one subinterval
is stopped with its ``Go`` (``stop_at_go``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

#: ``Go`` grants subintervals ``0 .. GO_GRANTS``
GO_GRANTS: Final = 1
#: an edit taken between steps holds from the next step's start
BETWEEN_STEPS: Final = -1


def buffer_of(k: int) -> int:
    """The buffer (0 or 1) subinterval ``k`` records into."""
    return k & 1


def freed_for(collected: int) -> int:
    """The subinterval the buffer of ``collected`` runs next, once the master grants it."""
    return collected + 2


def reusable(collected: int, granted: int) -> bool:
    """Whether the buffer of ``collected`` may be readied: its next subinterval is granted."""
    return freed_for(collected) <= granted


def effective(next_result: int | None) -> int:
    """The first subinterval an edit taken now holds in, ``next_result`` being the subinterval
    running (the next whose result is due), or None between steps."""
    return BETWEEN_STEPS if next_result is None else next_result + 1


@dataclass
class SlaveCredit:
    """What a slave has been granted in one step."""

    granted: int = GO_GRANTS
    #: the step's last subinterval once a ``Stop`` came
    stop_after: int | None = None

    def grant(self, subinterval: int) -> bool:
        """``Continue(subinterval)``; whether it granted anything new."""
        if subinterval > self.granted:
            self.granted = subinterval
            return True
        return False

    def stop(self, after: int, next_result: int) -> int:
        """``Stop(after)`` while ``next_result`` runs: the step's last subinterval (never one
        whose result was sent already: a Stop that crossed a result ends with that result)."""
        self.stop_after = max(after, next_result - 1)
        return self.stop_after

    def ends_with(self, k: int) -> bool:
        """Whether the step ends with subinterval ``k`` (or did before it)."""
        return self.stop_after is not None and k >= self.stop_after

    def may_follow(self, k: int) -> bool:
        """At the end of ``k``: whether the slave may go on (``k + 1`` granted, or the step ends
        with ``k``); False means the master is late."""
        return k + 1 <= self.granted or self.ends_with(k)


Answer = tuple[Literal["continue", "stop"], int]


def last_of(last: int | None, n_max: int) -> int:
    """The step's last subinterval as known now: ``last`` once decided, never beyond the
    step's ``n_max`` subintervals."""
    return n_max - 1 if last is None else min(last, n_max - 1)


def answer(k: int, last: int | None, n_max: int) -> Answer:
    """The master's answer after recording ``k`` (see the module docstring)."""
    end = last_of(last, n_max)
    if end <= k:
        return ("stop", k)
    if end == k + 1:
        return ("stop", k + 1)
    return ("continue", freed_for(k))


def stop_at_go(n_max: int) -> bool:
    """Whether the ``Go`` of a step is followed at once by ``Stop(0)``: a step of one
    subinterval (the grant of 1 that ``Go`` makes would run one it does not have)."""
    return n_max == 1


def step_over(k: int, last: int | None, n_max: int) -> bool:
    """After recording ``k`` with a ``Stop`` sent: whether ``k`` was the step's last."""
    return k + 1 > last_of(last, n_max)
