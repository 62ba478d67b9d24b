"""Reading fio histogram logs and computing cluster-wide latency percentiles per time quantum
(``ivypy fio-pctiles``; see docs/fio-pctiles.md).

Modules, in the order data flows: ``columns`` (which ns range each logged column covers),
``parse`` (fast, bounded-memory reading), ``repair`` (fio client/server logs), ``align`` (row
windows, spreading over quanta), ``pctiles`` (vectorised percentiles, formatting),
``pipeline`` (the whole computation). ``synth`` writes logs from known latencies for tests and
benchmarks. This package belongs to the master side; nothing in ``slave/`` or ``protocol/`` may
import it.
"""

from master.fiologs.pipeline import PctileOptions, PctileResult, compute_pctiles

__all__ = ["PctileOptions", "PctileResult", "compute_pctiles"]
