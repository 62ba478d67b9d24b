"""Writing fio histogram logs from known latencies, exactly as fio formats them.

Owns turning latencies into fio's bucket counts (fio 3: ns buckets; fio 2: µs buckets) at a
coarseness, and writing rows as fio's ``iolog.c`` does (``"%lu, %u, %llu, "`` then the columns
separated by ``", "``), plain or gzip. Used by the tests and ``scripts/bench_fio_pctiles``; it
must not be used to read logs.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from master.fiologs.columns import FIO2_BUCKETS, NS_PER_US
from protocol.buckets import FIO_BUCKETS, bucket_index

IntArray = npt.NDArray[np.int64]


def fio_counts(latencies_ns: npt.ArrayLike, *, fio_version: int = 3,
               coarseness: int = 0) -> IntArray:
    """Bucket counts fio would log for these latencies (values beyond fio's range go to its
    last bucket, as fio does)."""
    v = np.asarray(latencies_ns, dtype=np.int64).reshape(-1)
    fine = FIO_BUCKETS if fio_version == 3 else FIO2_BUCKETS
    if fio_version == 2:
        v = v // NS_PER_US  # fio 2 measured whole microseconds
    idx = np.minimum(bucket_index(v), fine - 1)
    counts: IntArray = np.bincount(idx, minlength=fine).astype(np.int64)
    coarse: IntArray = counts.reshape(-1, 1 << coarseness).sum(axis=1)
    return coarse


def format_row(time_ms: int, direction: int, counts: IntArray, block_size: int = 4096) -> str:
    cells = ", ".join(map(str, counts.tolist()))
    return f"{time_ms}, {direction}, {block_size}, {cells}\n"


def write_log(
    path: str | Path,
    rows: Iterable[tuple[int, int, IntArray]],
    *,
    gz: bool = False,
    block_size: int = 4096,
) -> Path:
    """Write ``(time_ms, direction, counts)`` rows as a fio histogram log."""
    p = Path(path)
    text = "".join(format_row(t, d, c, block_size) for t, d, c in rows)
    if gz:
        with gzip.open(p, "wt", encoding="ascii") as f:
            f.write(text)
    else:
        p.write_text(text, encoding="ascii")
    return p
