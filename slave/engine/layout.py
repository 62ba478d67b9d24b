"""The slot row and the precomputed I/O as the engine loop's parts and its C share them:
``ROW_DTYPE`` mirrors ``struct ivy_row`` and ``IO_DTYPE`` ``struct ivy_io`` (``ivy_loop.h``,
field for field; ``loop_args.layout_difference`` checks both against the compiled object), and
the column of each of their fields in an int64 view of their arrays (``ROW[name]``,
``IO[name]``), derived from the dtypes here and nowhere else. Layout only: no code but that
derivation, no state.
"""

from __future__ import annotations

from typing import Final

import numpy as np

# a far future (no scheduled time)
INF: Final = 1 << 62

#: ``struct ivy_row``: a slot's row, the kernel's ``struct iocb`` first (64 bytes, what
#: ``io_submit`` reads at the row's address; ``aio_abi.IOCB_DTYPE`` has its fields one by one:
#: here aio_key and aio_rw_flags, aio_lio_opcode, aio_reqprio and aio_fildes, and aio_flags and
#: aio_resfd are one word each), then the loop's bookkeeping; a record is a row copied whole at
#: completion, with its result and reap time
ROW_DTYPE: Final = np.dtype([
    ("data", "<u8"),  # aio_data: the slot's number, back in the completion's event
    ("key_rw_flags", "<u8"),
    ("opcode_fd", "<i8"),  # opcode | fd << 32 (``aio_abi.opcode_fd_word``)
    ("buf", "<u8"), ("nbytes", "<u8"), ("offset", "<i8"), ("reserved2", "<u8"),
    ("flags_resfd", "<u8"),
    ("owner", "<i8"),  # the workload's index
    ("cat", "<i8"),  # the I/O's category
    ("submit_ns", "<i8"), ("sched_ns", "<i8"),
    ("size_bytes", "<i8"),  # what it must transfer (less is a short transfer)
    ("buf_row", "<i8"),  # its buffer's row in the workload's buffers
    ("res", "<i8"), ("done_ns", "<i8"),  # a record's result and reap time
])
#: ``struct ivy_io``: a precomputed I/O in a workload's ring, the fields of its row it sets
IO_DTYPE: Final = np.dtype([
    ("opcode_fd", "<i8"), ("offset", "<i8"), ("cat", "<i8"), ("submit_ns", "<i8"),
    ("sched_ns", "<i8"),
])


def _columns(dtype: np.dtype[np.void]) -> dict[str, int]:
    """Each field's column in an int64 view of ``dtype``'s array (every field one word)."""
    fields = dtype.fields
    assert fields is not None
    out = {}
    for name in dtype.names or ():
        sub, offset = fields[name][0], fields[name][1]
        assert sub.itemsize == 8 and offset % 8 == 0, (dtype, name)
        out[name] = offset // 8
    return out


ROW: Final = _columns(ROW_DTYPE)
IO: Final = _columns(IO_DTYPE)
ROW_WORDS: Final = ROW_DTYPE.itemsize // 8
IO_WORDS: Final = IO_DTYPE.itemsize // 8
#: the row columns an I/O is scattered into, in one operation: its fields' namesakes
SCATTER: Final = np.array([ROW[name] for name in IO_DTYPE.names or ()], dtype=np.intp)

#: the scripted engine's (``fake.FakeEngine`` with a script; ``ivy_loop.h``'s backend 2) words,
#: shared by its Python and the compiled loop: its state (an int64 array: how many completions
#: are pending, how many I/Os were submitted, an error every N-th submission of a descriptor
#: and its errno, a short transfer every N-th, the script's length, the log's capacity in
#: submissions, how many descriptors have a count of their own, then each one's count of
#: submissions from FD_COUNTS on: descriptor fd's at FD_COUNTS + fd % FDS), a pending
#: completion's words and a logged submission's
SCRIPT_STATE: Final = {"PENDING": 0, "COUNT": 1, "ERROR_EVERY": 2, "ERRNO": 3,
                       "SHORT_EVERY": 4, "SCRIPT_N": 5, "LOG_CAP": 6, "FDS": 7,
                       "FD_COUNTS": 8}
PEND_COLUMNS: Final = {"DUE": 0, "SLOT": 1, "RES": 2}
LOG_COLUMNS: Final = {"OFFSET": 0, "OPCODE": 1, "SUBMIT": 2, "FD": 3, "SCHED": 4, "NBYTES": 5}
#: backend 2 of the compiled loop: the scripted engine
BACKEND_SCRIPTED: Final = 2
