"""Tests for scripts/blocktrace: pairing the block layer's arrival and completion events into
latencies (table-driven), parsing the trace text, and a real trace of a loop device (root)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import numpy as np
import pytest

from scripts import blocktrace
from scripts.blocktrace import BlockTrace, kernel_dev, pair, parse
from tests.slave.conftest import LoopFactory, loop_device, require_tools  # noqa: F401

Q, C = False, True

# (name, events as (dev, sector, time, is completion), latencies sorted, unpaired)
PAIR_CASES = [
    ("none", [], [], 0),
    ("one I/O", [(1, 8, 10.0, Q), (1, 8, 25.0, C)], [15.0], 0),
    ("events out of order", [(1, 8, 25.0, C), (1, 8, 10.0, Q)], [15.0], 0),
    ("same sector on two devices",
     [(1, 8, 10.0, Q), (2, 8, 11.0, Q), (2, 8, 14.0, C), (1, 8, 30.0, C)], [3.0, 20.0], 0),
    ("one sector read twice in turn",
     [(1, 8, 10.0, Q), (1, 8, 12.0, C), (1, 8, 20.0, Q), (1, 8, 27.0, C)], [2.0, 7.0], 0),
    ("two in flight on one sector: the later arrival pairs, the second completion is unpaired",
     [(1, 8, 10.0, Q), (1, 8, 11.0, Q), (1, 8, 15.0, C), (1, 8, 16.0, C)], [4.0], 1),
    ("completion whose arrival came before tracing", [(1, 8, 5.0, C)], [], 1),
    ("arrival still in flight at the end", [(1, 8, 5.0, Q), (1, 16, 6.0, Q), (1, 16, 9.0, C)],
     [3.0], 0),
    ("arrival and completion at one timestamp", [(1, 8, 7.0, C), (1, 8, 7.0, Q)], [0.0], 0),
    ("a completion on another sector does not pair",
     [(1, 8, 10.0, Q), (1, 16, 12.0, C)], [], 1),
]


@pytest.mark.parametrize(("events", "want", "unpaired"),
                         [c[1:] for c in PAIR_CASES], ids=[c[0] for c in PAIR_CASES])
def test_pair(events: list[tuple[int, int, float, bool]], want: list[float],
              unpaired: int) -> None:
    cols: list[tuple[object, ...]] = list(zip(*events, strict=True)) or [(), (), (), ()]
    lat = pair(np.array(cols[0], np.int64), np.array(cols[1], np.int64),
               np.array(cols[2], np.float64), np.array(cols[3], np.bool_))
    assert sorted(lat.ns.tolist()) == want
    assert lat.unpaired == unpaired
    # each latency ends at a completion's time and starts at an arrival's
    arrivals = {e[2] for e in events if not e[3]}
    completions = {e[2] for e in events if e[3]}
    assert all(d in completions and d - n in arrivals
               for d, n in zip(lat.done.tolist(), lat.ns.tolist(), strict=True))


TRACE = b"""# tracer: nop
#
#                                _-----=> irqs-off/BH-disabled
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
          python-1400    [000] ..... 1000000: tracing_mark_write: ivypy-blocktrace 5000000000
             fio-1314    [001] ..... 1000100: block_bio_queue: 7,0 R 586112 + 8 [fio]
             fio-1314    [001] ..... 1000150: block_bio_queue: 259,3 RS 16 + 8 [fio]
     ksoftirqd/0-14      [000] ..s.. 1000400: block_rq_complete: 7,0 R () 586112 + 8 be,0,4 [0]
    kworker/u8:2-99      [001] d..1. 1000250: block_rq_complete: 259,3 RS () 16 + 8 none,0,0 [0]
          python-1400    [000] ..... 1002000: tracing_mark_write: ivypy-blocktrace 5000001000
"""


def test_parse_reads_events_devices_and_markers() -> None:
    lat, marks = parse(TRACE)
    assert sorted(lat.ns.tolist()) == [100.0, 300.0]
    assert sorted(lat.done.tolist()) == [1000250.0, 1000400.0]
    assert lat.unpaired == 0
    assert marks == [(1000000.0, 5000000000), (1002000.0, 5000001000)]


def test_parse_bios_in_order_with_direction_and_size() -> None:
    text = TRACE + (b"  py-7 [001] ..... 1003000: block_bio_queue: 7,0 WS 64 + 128 [py]\n"
                    b"  py-7 [001] ..... 1003100: block_bio_queue: 7,0 RA 8 + 8 [py]\n")
    bios = blocktrace.parse_bios(text)
    assert bios.of(7 << 20).tolist() == [[0, 586112, 8], [1, 64, 128], [0, 8, 8]]
    assert bios.of((259 << 20) | 3).tolist() == [[0, 16, 8]]
    assert bios.of(1).shape == (0, 3)


def test_parse_mono_clock_seconds() -> None:
    text = (b"  fio-1 [000] ..... 12.000010: block_bio_queue: 7,1 R 8 + 8 [fio]\n"
            b"  fio-1 [000] ..... 12.000025: block_rq_complete: 7,1 R () 8 + 8 be,0,4 [0]\n")
    lat, marks = parse(text)
    assert lat.ns.tolist() == pytest.approx([15e-6])
    assert lat.done.tolist() == [12.000025]
    assert marks == []


def test_latencies_summaries() -> None:
    lat = blocktrace.Latencies(np.arange(1.0, 101.0), 0, np.arange(1000.0, 1100.0))
    assert lat.percentile(50) == pytest.approx(50.5)
    assert lat.mean == pytest.approx(50.5)
    empty = blocktrace.Latencies(np.empty(0), 3, np.empty(0))
    assert np.isnan(empty.percentile(99)) and np.isnan(empty.mean)


# (window [start, end), the latencies of the requests that completed in it)
WITHIN_CASES = [
    ((0.0, 1e9), [10.0, 20.0, 30.0, 40.0]),
    ((200.0, 400.0), [20.0, 30.0]),  # start inside, end outside
    ((100.0, 101.0), [10.0]),
    ((401.0, 500.0), []),
    ((-50.0, 100.0), []),  # ends where the first completed: not in it
]


@pytest.mark.parametrize(("window", "want"), WITHIN_CASES)
def test_within_keeps_the_requests_completed_in_the_window(window: tuple[float, float],
                                                           want: list[float]) -> None:
    lat = blocktrace.Latencies(np.array([10.0, 20.0, 30.0, 40.0]), 2,
                               np.array([100.0, 200.0, 300.0, 400.0]))
    part = lat.within(*window)
    assert part.ns.tolist() == want
    assert part.done.tolist() == [d for d, n in zip(lat.done, lat.ns, strict=True) if n in want]
    assert part.unpaired == 2


@pytest.mark.root
# counts every read of the device: beside the others, as a run's discovery reads only the
# devices its test names (when it read every one, a run beside this once added one: 201 of 200)
def test_traces_a_loop_device_only(loop_device: LoopFactory) -> None:  # noqa: F811
    """A real trace: each direct read of the traced device is one latency, between zero and
    the time the reads took in all; I/O on another device is not traced; the trace instance
    is gone afterwards."""
    require_tools("losetup", "dd")
    traced, other = loop_device(8 << 20), loop_device(8 << 20)
    with BlockTrace([traced.path], buffer_mib_per_cpu=4) as bt:
        instance = bt.dir
        assert instance.is_dir()
        bt.start()
        t0 = time.monotonic_ns()
        for dev in (traced.path, other.path):
            subprocess.run(["dd", f"if={dev}", "of=/dev/null", "bs=4k", "count=200",
                            "iflag=direct", "status=none"], check=True)
        took_ns = time.monotonic_ns() - t0
        bt.stop()
        subprocess.run(["dd", f"if={traced.path}", "of=/dev/null", "bs=4k", "count=50",
                        "iflag=direct", "status=none"], check=True)  # after stop: not traced
        lat = bt.latencies()
    assert not instance.exists()
    assert lat.ns.size == 200
    assert lat.unpaired == 0
    assert lat.ns.min() > 0
    assert lat.ns.sum() < took_ns
    # each completion on CLOCK_MONOTONIC, within the reads' time (the clock's conversion)
    assert t0 <= lat.done.min() and lat.done.max() <= t0 + took_ns
    with open(f"/sys/block/{traced.name}/dev") as f:
        major, minor = (int(x) for x in f.read().split(":"))
    assert kernel_dev(traced.path) == (major << 20) | minor


@pytest.mark.root
def test_a_task_filter_keeps_only_that_tasks_bios(loop_device: LoopFactory) -> None:  # noqa: F811
    """Traced for one task: another process's reads of the same device are left out."""
    require_tools("losetup", "dd")
    dev = loop_device(8 << 20)
    with (open(dev.path, "rb", buffering=0) as fh,
          BlockTrace([dev.path], buffer_mib_per_cpu=4, pid=threading.get_native_id()) as bt):
        bt.start()
        subprocess.run(["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", "count=30",
                        "skip=100", "iflag=direct", "status=none"], check=True)
        for block in (5, 9):
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            os.preadv(fh.fileno(), [bytearray(4096)], block * 4096)
        bt.stop()
        bios = bt.bios().of(kernel_dev(dev.path))
    assert bios[:, 0].tolist() == [0] * len(bios) and len(bios) >= 2
    assert not np.isin(bios[:, 1], np.arange(800, 1040)).any()  # none of dd's 30 reads
