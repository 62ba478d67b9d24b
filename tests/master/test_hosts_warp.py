"""The warped event loop (``master.hosts.warp``): an idle wait takes no time; a thread's job or
a process of the loop's own keeps the waits real until it is back; the clock a run is given
is the loop's."""

from __future__ import annotations

import asyncio
import time

import pytest

from master.hosts.warp import WarpLoop, loop_clock_ns, run_warped


def test_an_idle_hour_takes_no_time_and_timers_keep_their_order() -> None:
    fired: list[tuple[str, float]] = []

    async def main() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for name, delay in (("c", 3600.0), ("a", 0.5), ("b", 60.0)):
            loop.call_later(delay, lambda n=name: fired.append((n, loop.time() - t0)))
        await asyncio.sleep(3600.5)
        return loop.time() - t0

    real0 = time.monotonic()
    took = run_warped(main())
    assert time.monotonic() - real0 < 5  # the hour skipped (a busy machine's stalls aside)
    assert took >= 3600.5
    assert [n for n, _ in fired] == ["a", "b", "c"]
    for (_, at), want in zip(fired, (0.5, 60.0, 3600.0), strict=True):
        assert want <= at < want + 5


def test_the_clock_a_run_is_given_is_the_loops() -> None:
    assert abs(loop_clock_ns() - time.monotonic_ns()) < 50_000_000  # outside a loop

    async def main() -> tuple[int, int, float]:
        await asyncio.sleep(100)
        loop = asyncio.get_running_loop()
        return loop_clock_ns(), time.monotonic_ns(), loop.time()

    ns, real_ns, loop_s = run_warped(main())
    assert ns - real_ns > 99 * 10**9  # 100 s skipped, less the ns between the two reads
    assert ns / 1e9 == pytest.approx(loop_s, abs=0.05)

    async def plain() -> tuple[int, int]:
        return loop_clock_ns(), time.monotonic_ns()

    ns, real_ns = asyncio.run(plain())  # an ordinary loop's clock is the monotonic clock
    assert abs(ns - real_ns) < 50_000_000


def test_a_threads_job_keeps_the_waits_real_until_it_is_back() -> None:
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WarpLoop)
        job = asyncio.ensure_future(asyncio.to_thread(time.sleep, 0.4))
        real0 = time.monotonic()
        await asyncio.sleep(0.2)  # a real 0.2 s: the job is out
        during = loop.skipped_s
        slept = time.monotonic() - real0
        await job
        await asyncio.sleep(30)  # idle again: skipped
        return during, slept, loop.skipped_s

    during, slept, after = run_warped(main())
    assert during == 0.0
    assert slept >= 0.2
    assert after >= 29


def test_a_process_of_the_loops_keeps_the_waits_real_until_it_exits() -> None:
    """What a gather command sees: its timeout in real time while it runs."""
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, WarpLoop)
        proc = await asyncio.create_subprocess_exec("sleep", "0.5")
        real0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.2)
        timed_out_after = time.monotonic() - real0
        during = loop.skipped_s
        assert await proc.wait() == 0
        await asyncio.sleep(30)
        return timed_out_after, during, loop.skipped_s

    timed_out_after, during, after = run_warped(main())
    assert timed_out_after >= 0.2
    assert during == 0.0
    assert after >= 29


def test_a_process_that_cannot_start_leaves_the_loop_warping() -> None:
    async def main() -> float:
        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec("/nonexistent/ivypy-test-command")
        await asyncio.sleep(30)
        return asyncio.get_running_loop().skipped_s  # type: ignore[attr-defined,no-any-return]

    assert run_warped(main()) >= 29
