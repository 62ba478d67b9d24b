"""The randomized mixes of workloads that the differential tests run through the compiled loop
and the Python loop (``test_engine_differential``: on real loop devices;
``test_engine_differential_fake``: on the scripted fake engine): paced and max IOPS, queue
depths 1-256, read fractions, all three sequencers, every write-data kind, block sizes up to
64 KiB, and the edits at a boundary. Only the drawing of the mixes: running them is the tests'.
"""

from __future__ import annotations

import numpy as np

from protocol.params import IOSEQUENCERS, WRITE_DATA_KINDS, WorkloadParams

DEPTHS = (1, 2, 3, 4, 8, 16, 32, 64, 256)
BLOCKS = (4096, 8192, 16384, 65536)


def mix(case: int, lone: bool) -> list[WorkloadParams]:
    """Case ``case``'s workloads, each drawn at random (seeded by the case): two or three, or
    one of QD 1-2 at max IOPS (``lone``: the compiled loop's lone wait)."""
    rng = np.random.default_rng(1000 + case)
    out = []
    for i in range(1 if lone else int(rng.integers(2, 4))):
        paced = not lone and bool(rng.random() < 0.5)
        out.append(WorkloadParams(
            iosequencer=str(rng.choice(IOSEQUENCERS)),  # type: ignore[arg-type]
            blocksize_bytes=int(rng.choice(BLOCKS)),
            iodepth=int(rng.choice((1, 2) if lone else DEPTHS)),
            iops=float(rng.integers(500, 4000)) if paced else None,
            read_fraction=float(rng.choice([1.0, 0.7, 0.3, 0.0])),
            write_data=str(rng.choice(WRITE_DATA_KINDS)),  # type: ignore[arg-type]
            seed=int(rng.integers(1 << 30)) + i))
    return out


def edit(case: int, params: list[WorkloadParams], lone: bool) -> WorkloadParams | None:
    """The edit of workload 0 at the first boundary in the odd mixes (none in a lone one): a
    paced one to another rate (doubled) or to max IOPS, a max one to a rate (its stream goes on
    either way)."""
    if lone or case % 2 == 0:
        return None
    p = params[0]
    if p.iops is None:
        return p.replace(iops=1500.0)
    return p.replace(iops=None) if case % 4 == 1 else p.with_rate(p.iops * 2)
