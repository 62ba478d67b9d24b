"""The fixed vocabularies of a test file, defined in exactly one place.

Owns the lists the config validates against and that later stages (rollups, measure, DFC, output
columns) must agree with: focus metric names, LUN attribute keys, built-in rollup types, I/O
sequencer names, fio-style steady-state criteria. Data only: no parsing, no I/O.

Focus metrics are the rollup columns ``measure`` and ``dfc`` can look at. Their names are the CSV
column headers (units in names). A percentile ``pNN`` with a fractional part is written with an
underscore: p99.9 → ``p99_9``. Every metric also has ``read_``, ``write_``, ``random_`` and
``sequential_`` variants (the rollup's views).
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_ROLLUPS",
    "DEVICE_METRICS",
    "FIO_CRITERIA",
    "FOCUS_METRICS",
    "FOCUS_VIEW_PREFIXES",
    "IOSEQUENCERS",
    "LATENCY_STATS",
    "LUN_ATTRIBUTE_KEYS",
    "LUN_ENGINES",
    "RANDOM_IOSEQUENCERS",
    "ROLLUP_ATTRIBUTES",
    "VERIFY_METRICS",
]

#: I/O sequencers a workload may use.
IOSEQUENCERS: tuple[str, ...] = ("random_steady", "random_independent", "sequential")
#: The sequencers that pick random offsets (hot zones apply to these only).
RANDOM_IOSEQUENCERS: frozenset[str] = frozenset({"random_steady", "random_independent"})

#: Rollup types that always exist; ``all`` has exactly one instance.
BUILTIN_ROLLUPS: tuple[str, ...] = ("all", "host", "lun", "workload")

#: LUN attributes a LUN selector may match on (reported by slave LUN discovery).
#: Names as in ``slave.luns.LunInfo.attributes()`` (where ``lun`` is the path; selectors use
#: ``path`` / ``file`` for it). Discovery reports them as strings; ``rotational`` is "1" / "0".
LUN_ATTRIBUTE_KEYS: tuple[str, ...] = (
    "vendor",
    "model",
    "serial",
    "wwid",
    "kind",
    "name",
    "size_bytes",
    "rotational",
    "logical_block_bytes",
    "physical_block_bytes",
    "parent",
    "backing_file",
    "file_size_bytes",
)

#: The attribute names a rollup type joins with ``+``: a LUN's attributes (those above, and
#: ``fs_type``), ``host``, ``lun`` (its path) and ``engine``, and a workload's ``workload`` (its
#: id), ``iosequencer``, ``blocksize_bytes`` and ``iodepth`` (``master.run.workloads``'s
#: ``workload_attributes``; a test checks they agree). No workload has any other: a rollup on
#: one would have a single instance, named "", holding every workload.
ROLLUP_ATTRIBUTES: tuple[str, ...] = (
    *LUN_ATTRIBUTE_KEYS,
    "fs_type",
    "host",
    "lun",
    "engine",
    "workload",
    "iosequencer",
    "blocksize_bytes",
    "iodepth",
)

#: The I/O engines a ``luns:`` entry may ask for (``engine:``); the slave's
#: ``slave.engine.LUN_ENGINE_CHOICES`` (a test checks they agree).
LUN_ENGINES: tuple[str, ...] = ("auto", "libaio", "io_uring", "threadpool")

#: Latency statistics, each in milliseconds: ``<time>_<stat>_ms``.
LATENCY_STATS: tuple[str, ...] = (
    "mean",
    "min",
    "p50",
    "p90",
    "p95",
    "p99",
    "p99_9",
    "p99_99",
    "max",
)


#: Views of a rollup: all I/Os, reads, writes, random, sequential (column-name prefixes).
FOCUS_VIEW_PREFIXES: tuple[str, ...] = ("", "read_", "write_", "random_", "sequential_")


def _focus_metrics() -> frozenset[str]:
    bases = ["IOPS", "MB_per_s"]
    for time_kind in ("service_time", "response_time"):
        bases.extend(f"{time_kind}_{stat}_ms" for stat in LATENCY_STATS)
    names = set(bases)
    for prefix in FOCUS_VIEW_PREFIXES[1:]:
        names.update(prefix + base for base in bases)
    return frozenset(names)


#: Every rollup metric name ``measure.focus_metric`` and ``dfc.focus_metric`` accept.
FOCUS_METRICS: frozenset[str] = _focus_metrics()

#: The device-side columns (``master.analysis.devstats``): the kernel's counters of the block
#: devices under a LUN-based instance's LUNs. A focus metric too, of a LUN-based focus rollup.
DEVICE_METRICS: tuple[str, ...] = ("device_IOPS", "device_read_IOPS", "device_write_IOPS",
                                   "device_MB_per_s", "device_service_time_ms",
                                   "device_util_pct", "device_queue_depth")

#: Data verification's columns (``verify:``, docs/verify.md): per subinterval and over the
#: window, the 4 KiB blocks read back and checked, those found damaged, and those of each
#: class (``protocol.verify.CLASSES``). A threshold's metric too (``verify_errors < 1``).
VERIFY_METRICS: tuple[str, ...] = ("verify_blocks_checked", "verify_errors", "verify_corrupt",
                                   "verify_misplaced", "verify_stale", "verify_torn",
                                   "verify_missing")

#: fio-style steady-state criteria and the metric each one watches (``None``: the focus metric).
#: ``*_slope`` criteria limit the least-squares slope over the window; the others limit the
#: largest deviation of a subinterval's value from the window mean.
FIO_CRITERIA: dict[str, tuple[str | None, str]] = {
    "iops": ("IOPS", "deviation"),
    "iops_slope": ("IOPS", "slope"),
    "bw": ("MB_per_s", "deviation"),
    "bw_slope": ("MB_per_s", "slope"),
    "deviation": (None, "deviation"),
    "slope": (None, "slope"),
}
