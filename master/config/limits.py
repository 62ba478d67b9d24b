"""The numeric bounds of a test file, each defined once with its reason, and the one check.

Owns the smallest and largest value the config accepts for each kind of number (bytes on a LUN,
blocksize, I/O rates, weights, ratios, DFC gains and targets, steady-state limits, rollup
quantities, damaged blocks kept) and the wording of a refusal: ``must be at most 100,000,000 (got
1e308)``, with the value as the operator wrote it. Every bound is finite, so what passes validation
is neither infinite nor NaN and fits the slave's int64 offsets and ns times. The parsers in
``loader``, ``workloads`` and ``steps`` apply the bounds and raise with the key path; this module
must not know the schema. Durations keep their bounds beside their readers (``steps.MAX_PHASE_S``,
``loader.MIN_SUBINTERVAL_S`` / ``MAX_SUBINTERVAL_S``), as do counts that limit an expansion (host
ranges, ``for:`` steps) and the YAML itself (``yamlnodes``).
"""

from __future__ import annotations

from collections.abc import Callable

from master.config.units import format_bytes, parse_duration_s
from master.config.yamlnodes import Cursor

__all__ = [
    "MAX_AUTOCORRELATION",
    "MAX_BLOCKSIZE_BYTES",
    "MAX_DEVICE_QUEUE_DEPTH",
    "MAX_DFC_GAIN",
    "MAX_FINDINGS_KEPT",
    "MAX_GATHERED_VALUE",
    "MAX_IODEPTH",
    "MAX_IOPS",
    "MAX_IOPS_TOLERANCE_PCT",
    "MAX_LATENCY_MS",
    "MAX_LIMIT_PERCENT",
    "MAX_LUN_BYTES",
    "MAX_MB_PER_S",
    "MAX_ROLLUP_QUANTITY",
    "MAX_SKEW_WEIGHT",
    "MAX_TOTAL_IOPS",
    "MAX_WRITE_DATA_RATIO",
    "MIN_IOPS",
    "MIN_SKEW_WEIGHT",
    "bounded",
    "duration_within",
    "format_number",
    "metric_max",
    "percent_within",
    "show_bytes",
]

#: The largest LUN, and so the largest byte size, offset or length in a test (file LUN ``size``,
#: ``range_start``, ``range_end``, ``seq_start``, ``hot_zone_size``): 1 EiB = 1024 PiB = 2**60.
#: The largest LUNs today are a few PiB; Linux caps a file at 8 EiB (a signed 64-bit offset) and
#: the slave keeps offsets in int64, so 1 EiB refuses typos (``99999999PiB``) with room to spare.
MAX_LUN_BYTES = 2**60
#: The largest blocksize: 64 MiB. The kernel splits any I/O above the device's max_sectors (a
#: few MiB), fio and ivy tests stay at or below 16 MiB, and the slave allocates ``iodepth``
#: buffers of this size for the workload.
MAX_BLOCKSIZE_BYTES = 64 * 1024**2
#: The deepest queue of one workload: the slave's own bound (``protocol.params.MAX_IODEPTH``; the
#: master does not import the slave).
MAX_IODEPTH = 4096
#: The deepest average device queue (``device_queue_depth``) a target or limit may name: a
#: host's 1,024 workloads each at ``MAX_IODEPTH`` on one device.
MAX_DEVICE_QUEUE_DEPTH = 1024 * MAX_IODEPTH
#: The fastest rate of one workload (``iops``): 10**8 I/Os per second, far beyond what one
#: workload's engine loop submits or one LUN serves (a few million).
MAX_IOPS = 10**8
#: The slowest rate of one workload, and the smallest total or DFC bound: one I/O every 1,000 s.
#: Slower, no subinterval (at most an hour) sees a rate, and the gap between scheduled I/Os
#: (``1 / iops`` in ns on the slave) grows past anything a clock can hold.
MIN_IOPS = 0.001
#: The fastest rate of a rollup instance (``edit_rollup`` ``total_iops``, DFC ``low_iops`` /
#: ``high_iops``, an IOPS target or limit): a hundred workloads at ``MAX_IOPS``.
MAX_TOTAL_IOPS = 10**10
#: The largest throughput a DFC target or steady-state limit in MB/s may name: 10**9 MB/s
#: (1 PB/s), beyond any storage system's bandwidth.
MAX_MB_PER_S = 10**9
#: The largest latency a DFC target or steady-state limit in ms may name: an hour, the longest
#: subinterval (a target no subinterval can show is a typo).
MAX_LATENCY_MS = 3_600_000
#: The largest DFC target or steady-state limit on a gathered metric (``gather.*``, in its
#: source's own unit): 10**15, beyond any counter rate or percentage a storage system reports.
MAX_GATHERED_VALUE = 10**15
#: ``skew_weight`` is relative (a workload's share of its LUN's ``total_iops``): 10**-6 .. 10**6
#: spans any useful split. Outside it a sum of weights overflows to infinity, or a share rounds
#: to 0 IOPS, which the slave refuses.
MIN_SKEW_WEIGHT = 1e-6
MAX_SKEW_WEIGHT = 1e6
#: The largest ``write_data`` compression or dedup ratio: 1000. ``compressible`` keeps at least
#: 16 random bytes a block (a 4 KiB block compresses at most 256:1), and data-reduction ratios
#: of real data stop near 100:1.
MAX_WRITE_DATA_RATIO = 1000.0
#: The largest fixed ``autocorrelation`` factor (it multiplies the confidence interval's
#: half-width; ivy uses 2): at 100 no measurement of sane length is ever steady.
MAX_AUTOCORRELATION = 100.0
#: The largest DFC gain: a gain multiplies ``ln(target / measured)`` into a change of
#: ``ln(IOPS)``; the defaults are below 1, and at 100 an error of 1 % moves IOPS by a factor e.
MAX_DFC_GAIN = 100.0
#: The largest steady-state limit in percent (of the window mean): above 100 % a window whose
#: values swing by more than their own mean counts as steady; ivy and fio use a few percent.
MAX_LIMIT_PERCENT = 100.0
#: The largest ``iops_tolerance_pct`` (how far a paced workload's IOPS may fall short of its
#: setting before its step is invalid): 100 % lets any shortfall pass, which turns the check off.
MAX_IOPS_TOLERANCE_PCT = 100.0
#: The most instances a rollup ``quantity`` may demand: a rollup has at most one instance per
#: workload, a host runs at most 1,024 workloads; a million is a thousand full hosts.
MAX_ROLLUP_QUANTITY = 1_000_000
#: The most damaged blocks a verified run keeps whole (``verify.findings_kept``: each one's
#: 4 KiB as read and the stamp found, in the run's ``verify/`` folder): 4,096 are 16 MiB. A run
#: that finds more has shown the pattern of its damage; the counts take every block.
MAX_FINDINGS_KEPT = 4096

def format_number(value: float) -> str:
    """A bound as a reader wants it: ``100000000 -> "100,000,000"``, ``0.001 -> "0.001"``."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:g}"


def bounded(
    cursor: Cursor,
    value: float,
    *,
    low: float | None = None,
    high: float | None = None,
    show: Callable[[float], str] = format_number,
) -> float:
    """``value`` (read from ``cursor``) if ``low <= value <= high``; otherwise a ``ConfigError``
    at the cursor: ``must be at least <low> (got <text>)`` or ``must be at most <high> (got
    <text>)``. NaN fails either bound. ``show`` formats the bound (``format_bytes`` for sizes).
    """
    if low is not None and not value >= low:
        raise cursor.error(f"must be at least {show(low)} (got {cursor.shown()})")
    if high is not None and not value <= high:
        raise cursor.error(f"must be at most {show(high)} (got {cursor.shown()})")
    return value


def duration_within(cursor: Cursor | None, default: float, low_s: float, high_s: float,
                    words: str) -> float:
    """A duration key's seconds (``default`` when ``cursor`` is None), refused at the cursor
    when it is not a duration, or outside ``[low_s, high_s]``: ``must be <words> (got <text>)``
    (``words``: the bounds as the operator writes them, ``at least 1s and at most 1h``)."""
    if cursor is None:
        return default
    try:
        seconds = parse_duration_s(cursor.value if cursor.is_scalar else None)
    except ValueError as exc:
        raise cursor.error(str(exc)) from exc
    if not low_s <= seconds <= high_s:
        raise cursor.error(f"must be {words} (got {cursor.node.text})")
    return seconds


def percent_within(cursor: Cursor | None, default: float, high: float) -> float:
    """A percentage key (``5``, ``2.5`` or ``"5%"``, all in percent) from 0 to ``high``;
    ``default`` when ``cursor`` is None. Refused at the cursor when it is not a number or out
    of range: ``must be at most 100% (got 150)``."""
    if cursor is None:
        return default
    value = cursor.value if cursor.is_scalar else None
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1])
        except ValueError as exc:
            raise cursor.error(f"must be a percentage like 5 or 5% (got {value!r})") from exc
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise cursor.error("must be a percentage like 5 or 5%")
    return bounded(cursor, number, low=0.0, high=high, show=lambda bound: f"{bound:g}%")


def show_bytes(size_bytes: float) -> str:
    """A byte bound with its unit: ``2**60 -> "1024PiB"``, ``64 MiB -> "64MiB"``."""
    return format_bytes(int(size_bytes))


def metric_max(metric: str) -> tuple[float, str]:
    """The largest value of a focus metric (``catalog.FOCUS_METRICS``, ``DEVICE_METRICS`` or
    a gathered one) and its unit, for a DFC target or a plain steady-state limit: latencies
    (ms), ``MB_per_s`` (MB/s), the device's busy % and queue depth, else ``IOPS``."""
    if metric.startswith("gather."):  # an external metric, in its source's own unit
        return MAX_GATHERED_VALUE, "(the source's unit)"
    if metric == "device_util_pct":  # time with I/O in flight per elapsed time
        return MAX_LIMIT_PERCENT, "%"
    if metric == "device_queue_depth":
        return MAX_DEVICE_QUEUE_DEPTH, "I/Os in flight"
    if metric.endswith("_ms"):
        return MAX_LATENCY_MS, "ms"
    if metric.endswith("MB_per_s"):
        return MAX_MB_PER_S, "MB/s"
    return MAX_TOTAL_IOPS, "IOPS"
