"""The catalogue both sides name statistics by: I/O categories, latency kinds, the views a rollup
reports (each a set of categories) and the percentiles of every view.

Owns those names and their order; ``protocol.stats`` lays a workload's block out by category
and kind, ``protocol.grouping`` and the master's rollups compute each view's metrics. Pure
data: no I/O.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

CATEGORIES: Final = ("random_read", "random_write", "sequential_read", "sequential_write")
N_CATEGORIES: Final = 4
KINDS: Final = ("service", "response")
N_KINDS: Final = 2


def category_index(is_sequential: bool, is_write: bool) -> int:
    """The category of an I/O: ``2 * is_sequential + is_write``."""
    return 2 * int(is_sequential) + int(is_write)


#: Views: column prefix → categories (0 random_read, 1 random_write, 2 seq_read, 3 seq_write).
VIEWS: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("", (0, 1, 2, 3)),
    ("read_", (0, 2)),
    ("write_", (1, 3)),
    ("random_", (0, 1)),
    ("sequential_", (2, 3)),
)
N_VIEWS: Final = len(VIEWS)
PERCENTILES: Final[tuple[float, ...]] = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)


def _membership() -> npt.NDArray[np.int64]:
    m = np.zeros((N_VIEWS, N_CATEGORIES), dtype=np.int64)
    for v, (_, cats) in enumerate(VIEWS):
        m[v, list(cats)] = 1
    m.setflags(write=False)
    return m


#: (N_VIEWS, 4): 1 where the view adds that category up.
MEMBERSHIP: Final = _membership()
#: (4, 3): the views each category lands in (overall, read or write, random or sequential).
VIEWS_OF_CATEGORY: Final = np.array(
    [np.flatnonzero(MEMBERSHIP[:, c]) for c in range(N_CATEGORIES)], dtype=np.intp
)
VIEWS_OF_CATEGORY.setflags(write=False)
