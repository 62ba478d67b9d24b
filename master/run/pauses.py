"""A computation of seconds on the run's event loop, in steps with pauses between them.

Owns ``stepped``: it runs a generator of steps (each ``yield`` a pause: a step's end at
100,000 workloads takes seconds, ``StepRecorder.window_sample_steps`` and ``summarise_steps``)
and lets the event loop run at each pause, so that the hosts' conversations go on meanwhile
(their keepalive pings: a slave's watchdog stops one that hears nothing). One thread: the
steps and the loop's other work never run at once. ``master.analysis.rollup.finished`` runs
the same steps straight through where there is no loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TypeVar

_T = TypeVar("_T")


async def stepped(steps: Generator[None, None, _T]) -> _T:
    """What ``steps`` returns, the event loop let run at each of its pauses. Cancelled at a
    pause, the steps are closed there (their own cleanup runs)."""
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            await asyncio.sleep(0)
    finally:
        steps.close()
