"""The words the engine loop's parts share: the bookkeeping words of a slot row (after the
eight words of its iocb, ``slave.engine.aio_abi``) and the words of a precomputed I/O in a
workload's ring. Layout only: no code, no state. ``paced_kernel.c`` reads the same words (its
defines are made from these names).
"""

from __future__ import annotations

from typing import Final

import numpy as np

# a far future (no scheduled time)
INF: Final = 1 << 62
# bookkeeping words of a slot row (after the 8 iocb words); pending records copy whole rows
C_OWNER, C_CAT, C_SUBMIT, C_SCHED, C_NBYTES, C_ROW, C_RES, C_DONE = 8, 9, 10, 11, 12, 13, 14, 15
# a precomputed I/O: (opcode|fd word, offset, category, submit time, scheduled time), scattered
# into these row words in one operation
SCATTER: Final = np.array([2, 5, C_CAT, C_SUBMIT, C_SCHED], dtype=np.intp)
R_OPFD, R_OFF, R_CAT, R_SUBMIT, R_SCHED = 0, 1, 2, 3, 4
