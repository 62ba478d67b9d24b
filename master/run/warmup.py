"""Loading (or, first in a checkout, building) the master's compiled kernels.

Owns ``warm_up``: the kernels' object loaded (``master.analysis.native``: shipped with a wheel,
else built once into the user's cache, about a second) and each kernel called once on tiny
inputs of the real types, so that the first subinterval of a run pays for neither, and a
broken object fails the run before its first step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from master.analysis import native
from master.analysis.kernels import (
    Coords,
    check_group_stats,
    histogram_rows,
    instance_metrics,
    merge_sorted,
    validate_batch,
    view_percentiles,
)
from master.results.csvkernels import SKIP, format_lines, gather_texts, write_lines
from protocol.batch import GroupStats, StatsBatch
from protocol.errors import PreflightError
from protocol.views import N_VIEWS

if TYPE_CHECKING:
    from master.live.view import LiveView

log = logging.getLogger(__name__)

#: A warm-up of the kernels longer than this is a build, which the console names.
KERNELS_NOTICE_S = 3.0


async def warm_up_kernels(view: LiveView) -> None:
    """Load (or, first in a checkout, build) the master's kernels while the hosts start, so
    the first subinterval is not late. Where that takes more than ``KERNELS_NOTICE_S`` (a
    slow compiler), the console says what the run waits for."""
    from master.run.heap import keep_freed_memory

    keep_freed_memory()
    job = asyncio.ensure_future(asyncio.to_thread(warm_up))
    try:
        done, _ = await asyncio.wait({job}, timeout=KERNELS_NOTICE_S)
        if not done:
            view.message("ivypy: building the master's kernels (C, once, then cached in "
                         "~/.cache/ivypy) ...")
        took = await job
    except native.KernelsUnavailable as exc:  # the run cannot add anything up: before a step
        raise PreflightError(f"the controller cannot run ivypy's master: {exc}") from None
    finally:
        job.cancel()  # the run stopped meanwhile: the thread ends on its own
    log.info("the master's kernels (%s) ready in %.2f s", native.origin(), took)


def warm_up() -> float:
    """Load (or build, first in a checkout) the kernels' object and call every kernel on tiny
    inputs of the real types; returns the seconds it took. ``master.run.lifecycle`` calls it while
    the hosts start, so that the first subinterval does not pay for it (a compile takes seconds,
    longer than a short subinterval)."""
    t0 = time.perf_counter()
    # two workloads: instance 0 has both (dense path), instance 1 has one (sparse walk)
    bounds = np.array([0, 1, 2] + [2] * 6 + [3] * 8, dtype=np.int64)
    coords = Coords.flat(bounds, np.array([10, 12, 11], dtype=np.int64),
                         np.ones(3, dtype=np.int64))
    row_tot = np.zeros(16, dtype=np.int64)
    row_tot[[0, 1, 8]] = 1
    cats = np.array([[True] * 4, [True, False, True, False]])
    mins = np.zeros((2, 2, 2))
    for order, ptr in (([0, 1], [0, 2]), ([0, 1], [0, 1, 2])):
        view_percentiles(coords, row_tot, np.array(order), np.array(ptr), cats,
                         np.array([50.0, 99.0]), mins[: len(ptr) - 1], mins[: len(ptr) - 1] + 1e6)
    for pct in (None, np.zeros((2, 2, 2, 2))):
        instance_metrics(np.ones((2, 4, 3), dtype=np.int64), np.ones((2, 4, 2, 3), dtype=np.int64),
                         np.arange(2), np.arange(3), cats, 1.0, pct, 14)
    one = np.ones(1, dtype=np.int64)
    merge_sorted((one, one, one), (one, one + 1, one))
    histogram_rows(np.zeros(2, dtype=np.int64), np.arange(2), coords, 0, 1)
    gather_texts(b"ab", np.array([1, 2]), np.array([1, 0]))
    validate_batch(StatsBatch(  # the wire's types: rows uint32, buckets uint16, counts int64
        counters=np.array([[[1, 4096, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]], dtype=np.int64),
        lat=np.array([[[[5, 5, 5]] * 2] * 4], dtype=np.int64),
        rows=np.array([0, 1], dtype=np.uint32), buckets=np.array([5, 5], dtype=np.uint16),
        counts=np.ones(2, dtype=np.int64)))
    check_group_stats(GroupStats(StatsBatch.empty(1), np.full((1, N_VIEWS, 2, 6), np.nan)))
    format_lines(np.array([[1.5, np.nan, 1234567.0, 0.0, 1e-5, 1e-20]]), b"h,", b"t",
                 np.array([1]), np.array([True]), b"max", True, b"\r\n")
    write_lines(np.array([SKIP], dtype=np.int32), np.array([49], dtype=np.uint8),
                np.array([1], dtype=np.int64))
    return time.perf_counter() - t0
