"""Every column of every CSV file the run folder holds, declared once.

Owns the names and order of the columns of the instance and summary rows (each rollup's files
and the run's summary.csv), cpu.csv, interlock.csv, devices.csv, the histogram files,
measure.csv, dfc.csv, events.csv and hosts.csv. The writers (``master.run``,
``master.gather``) and the readers (``master.results``) take them from here. Names carry
their units. Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from master.analysis import rollup as ru
from master.config.catalog import DEVICE_METRICS, VERIFY_METRICS

#: the ``device_*`` columns (``master.analysis.devstats``)
DEVICE_COLUMNS: Final = DEVICE_METRICS
#: a verified run's (``verify:``) ``verify_*`` columns, after the device and gathered ones:
#: counts of 4 KiB blocks in the subinterval, or in the window (``master.run.verifying``)
VERIFY_COLUMNS: Final = VERIFY_METRICS

#: The columns of an instance row and of a summary row; a step with ``gather:`` sources has
#: its joined metrics (``gather.<source>.<element_type>.<metric>``) after the device columns
#: (``instance_columns``, ``summary_columns``).
INSTANCE_COLUMNS = ["step_number", "step_name", "subinterval", "phase", "elapsed_s",
                    "rollup_type", "rollup_instance", *ru.METRIC_COLUMNS, *DEVICE_COLUMNS,
                    "cpu_busy_pct", "workloads", "iops_setting"]
SUMMARY_COLUMNS = ["step_number", "step_name", "rollup_type", "rollup_instance",
                   "first_subinterval", "last_subinterval", "measurement_seconds",
                   *ru.METRIC_COLUMNS, *DEVICE_COLUMNS, "cpu_busy_pct", "workloads",
                   "iops_setting", "valid", "invalid_reason"]


def instance_columns(gathered: Sequence[str] = ()) -> list[str]:
    """``INSTANCE_COLUMNS`` with the joined gathered columns after the device columns."""
    at = INSTANCE_COLUMNS.index("cpu_busy_pct")
    return [*INSTANCE_COLUMNS[:at], *gathered, *INSTANCE_COLUMNS[at:]]


def summary_columns(gathered: Sequence[str] = ()) -> list[str]:
    """``SUMMARY_COLUMNS`` with the joined gathered columns after the device columns."""
    at = SUMMARY_COLUMNS.index("cpu_busy_pct")
    return [*SUMMARY_COLUMNS[:at], *gathered, *SUMMARY_COLUMNS[at:]]


CPU_COLUMNS = ["subinterval", "phase", "host", "busy_pct", "per_core_busy_pct", "slave_user_s",
               "slave_system_s", "slave_cpu_us_per_io"]
#: ``boundary_skew_us``: the worker's buffer switch against the planned boundary, in master time
#: through the host's measured clock offset; ``switch_slave_ns``: the switch as the slave's own
#: clock read it; ``boundary_skew_bound_us``: the most the true skew can be, the offset's
#: uncertainty (half the best ping round trip) added to the measured skew's size. The
#: ``gather_*`` columns are a ``gather:`` source's row (``master.gather.gathering``; a host's
#: row leaves them empty): when its gather started and its sample was taken against the
#: subinterval's end boundary (negative: before), how long it took, and ``ok`` or why not.
INTERLOCK_COLUMNS = ["subinterval", "host", "worker", "switch_delay_us", "handover_delay_us",
                     "boundary_skew_us", "switch_slave_ns", "offset_uncertainty_us",
                     "boundary_skew_bound_us", "result_sent_after_boundary_us",
                     "result_received_after_boundary_us", "gather_source",
                     "gather_started_after_boundary_us", "gather_duration_us",
                     "gather_sample_after_boundary_us", "gather_status"]
#: a histogram file's columns, after the bucket's bounds
HISTOGRAM_COLUMNS = [f"{kind}_{view}_count" for view in ru.HISTOGRAM_VIEWS
                     for kind in ru.HISTOGRAM_KINDS]
#: ``<step>/devices.csv``: each device of each host, each subinterval.
DEVICE_FILE_COLUMNS: Final = ["subinterval", "phase", "host", "device", "device_name", "luns",
                              "ivypy_IOPS", "ivypy_MB_per_s", *DEVICE_COLUMNS, "sample_interval_s",
                              "start_sample_late_us", "end_sample_late_us"]

#: the columns a summary row has after the recorder's (``summary_columns``)
MEASURE_SUMMARY_COLUMNS = ["measure_criterion", "measure_values", "measure_attained"]
#: a summary row's columns in a run without ``gather:`` sources
RUN_SUMMARY_COLUMNS = [*SUMMARY_COLUMNS, *MEASURE_SUMMARY_COLUMNS]
MEASURE_COLUMNS = ["subinterval", "instance", "criterion", "metric", "limit", "window_first",
                   "window_last", "value", "passed", "attained"]
DFC_COLUMNS = ["subinterval", "phase", "instance", "metric", "measured", "target", "error",
               "rel_error", "p", "i", "d", "iops_in_force", "new_iops", "saturated", "limited",
               "held", "outlier", "elasticity", "settled"]
EVENT_COLUMNS = ["time", "elapsed_s", "level", "host", "kind", "step", "subinterval", "message"]
HOST_COLUMNS = ["host", "address", "transport", "hostname", "kernel", "python_version",
                "numpy_version", "ivypy_version", "cores", "slave_pid", "clock_offset_ns",
                "rtt_us", "offset_uncertainty_us", "clock_samples", "io_loop", "paced_loop"]
