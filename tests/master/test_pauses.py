"""``master.run.pauses.stepped``: a computation in steps on the event loop, the loop's other
work run at each pause; and a step's end (``StepRecorder.summarise_steps``,
``window_sample_steps``) pausing often, with the same result as run straight through."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.analysis import rollup as ru
from master.analysis.rollup import finished
from master.results.output import RunOutput
from master.run import recorder as recorder_module
from master.run.pauses import stepped
from tests.master.test_recorder import ROLLUPS, _four_subintervals


def _steps(log: list[str], n: int) -> Generator[None, None, int]:
    for i in range(n):
        log.append(f"step {i}")
        yield
    return n


def test_the_loop_runs_its_other_work_at_every_pause() -> None:
    log: list[str] = []

    async def other() -> None:
        while True:
            log.append("tick")
            await asyncio.sleep(0)

    async def main() -> int:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        try:
            return await stepped(_steps(log, 3))
        finally:
            task.cancel()

    assert asyncio.run(main()) == 3
    steps = [i for i, what in enumerate(log) if what.startswith("step")]
    assert len(steps) == 3
    assert all("tick" in log[a + 1:b] for a, b in itertools.pairwise(steps))
    assert finished(_steps([], 4)) == 4


def test_cancelled_at_a_pause_the_steps_clean_up_there() -> None:
    cleaned: list[str] = []

    def steps() -> Generator[None, None, None]:
        try:
            while True:
                yield
        finally:
            cleaned.append("closed")

    async def main() -> None:
        task = asyncio.create_task(stepped(steps()))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cleaned == ["closed"]


def _counted(steps: Generator[None, None, Any], pauses: list[None]
             ) -> Generator[None, None, Any]:
    """``steps``, each of its pauses noted in ``pauses``; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        pauses.append(None)
        yield


def _on_a_busy_loop(steps: Generator[None, None, Any]) -> tuple[Any, int, int]:
    """``steps`` driven by ``stepped`` on an event loop that has other work: its result, its
    pauses, and how often the other work ran meanwhile."""
    pauses: list[None] = []
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def main() -> Any:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        try:
            return await stepped(_counted(steps, pauses))
        finally:
            task.cancel()

    return asyncio.run(main()), len(pauses), ticks


def test_a_steps_end_pauses_per_rollup_type_and_histogram_slice_with_the_same_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's statistics and the summary in steps, on an event loop with other work: a
    pause per host's window (every host here), at least per rollup type and per slice of
    histogram files (slices of 2 here), the
    other work run at the pauses, and the same window and every file the same as the
    computation run straight through gives."""
    monkeypatch.setattr(recorder_module, "HISTOGRAM_SLICE", 2)
    monkeypatch.setattr(ru, "PAUSE_EVERY", 1)  # a pause per host's window
    files = {}
    pauses = ticks = 0
    windows = {}
    for how in ("steps", "straight"):
        out = RunOutput(tmp_path / how)
        rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 4, threads=1)
        parts = []
        for h, store in sim.stores.items():
            ids, batch = store.window(0, 3)
            parts.append((h, ids, dict(batch.to_wire())))
        if how == "straight":
            windows[how] = rec.window_sample(parts)
            rec.summarise([0, 1, 2, 3], windows[how])
        else:
            windows[how], window_pauses, window_ticks = _on_a_busy_loop(
                rec.window_sample_steps(parts))
            _, pauses, ticks = _on_a_busy_loop(rec.summarise_steps([0, 1, 2, 3],
                                                                   windows[how]))
            assert window_ticks >= window_pauses >= 4  # a pause per host at least
        out.close()
        top = tmp_path / how / "step0000-x"
        files[how] = {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*.csv"))}
    instances = 8 + 4 + 2 + 2 + 1  # workloads, LUNs, hosts, vendor+model, all
    slices = 4 + 2 + 1 + 1 + 1
    assert pauses >= len(ROLLUPS) + slices
    assert ticks >= pauses  # the loop's other work ran at every pause
    for name in ("counters", "lat"):
        assert np.array_equal(getattr(windows["steps"], name),
                              getattr(windows["straight"], name))
    assert np.array_equal(windows["steps"].coords.bounds, windows["straight"].coords.bounds)
    assert sum(name.startswith("histograms/") for name in files["steps"]) == instances
    assert files["steps"] == files["straight"]
