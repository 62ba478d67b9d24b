"""The structs the engine loop's parts and its C share, as ``ivy_loop.h`` declares them (read
from the header, which ships beside this module: ``header_fields``, ``header_dtype``): the slot
row (``ROW_DTYPE``, ``struct ivy_row``) and the precomputed I/O (``IO_DTYPE``, ``struct
ivy_io``), and the column of each of their fields in an int64 view of their arrays
(``ROW[name]``, ``IO[name]``); the scripted fake engine's state, pending completions and log
(``SCRIPT_DTYPE``, ``PEND_DTYPE``, ``LOG_DTYPE``). ``loop_args.layout_difference`` checks
them against the compiled object. Layout only: no code but that derivation, no state.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Final

import numpy as np

# a far future (no scheduled time)
INF: Final = 1 << 62

#: ``ivy_loop.h``'s C types of the fields that are not pointers, as numpy's (a pointer is an
#: address, "<u8")
C_TYPES: Final = {"int64_t": "<i8", "uint64_t": "<u8", "double": "<f8"}


@functools.cache
def header_text() -> str:
    """``ivy_loop.h`` as shipped beside this module (read once a process)."""
    return resources.files("slave.engine").joinpath("ivy_loop.h").read_text("utf-8")


def header_fields(struct: str, text: str | None = None) -> list[tuple[str, str]]:
    """``struct ivy_<struct>``'s fields as ``ivy_loop.h`` (or ``text``) declares them
    (``IVY_<STRUCT>_FIELDS``, comments left out): (name, C type) in order; raises
    ``ValueError`` for a struct or a type it does not know."""
    if text is None:
        text = header_text()
    found = re.search(rf"#define IVY_{struct.upper()}_FIELDS\(X\)((?:[^\n]*\\\n)*[^\n]*)",
                      text)
    if found is None:
        raise ValueError(f"ivy_loop.h declares no IVY_{struct.upper()}_FIELDS")
    body = re.sub(r"/\*.*?\*/", " ", found.group(1), flags=re.S)
    fields = [(name, ctype.strip()) for ctype, name in re.findall(r"\bX\(([^,]+),\s*(\w+)\)",
                                                                  body)]
    for name, ctype in fields:
        if "*" not in ctype and ctype not in C_TYPES:
            raise ValueError(f"ivy_loop.h: struct ivy_{struct} field {name}: type {ctype!r} "
                             f"(the Python mirrors know {', '.join(C_TYPES)} and pointers)")
    return fields


def header_dtype(struct: str) -> np.dtype[np.void]:
    """``struct ivy_<struct>`` as a numpy dtype, field for field (``header_fields``)."""
    return np.dtype([(name, "<u8" if "*" in ctype else C_TYPES[ctype])
                     for name, ctype in header_fields(struct)])


#: ``struct ivy_row``: a slot's row, the kernel's ``struct iocb`` first (what ``io_submit``
#: reads at the row's address), then the loop's bookkeeping; a record is a row copied whole at
#: completion, with its result and reap time (``ivy_loop.h`` says what each field is)
ROW_DTYPE: Final = header_dtype("row")
#: ``struct ivy_io``: a precomputed I/O in a workload's ring, the fields of its row it sets
IO_DTYPE: Final = header_dtype("io")


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
#: a row's ``opcode_fd`` word: the iocb's opcode (``aio_lio_opcode``) and, above it,
#: ``aio_reqprio`` (0) and the descriptor (``aio_fildes``) (linux/aio_abi.h)
IOCB_CMD_PREAD: Final = 0
IOCB_CMD_PWRITE: Final = 1


def opcode_fd_word(opcode: int, fd: int) -> int:
    """The row's ``opcode_fd`` word for ``opcode`` on ``fd``."""
    return opcode | (fd << 32)


IO_WORDS: Final = IO_DTYPE.itemsize // 8
#: the row columns an I/O is scattered into, in one operation: its fields' namesakes
SCATTER: Final = np.array([ROW[name] for name in IO_DTYPE.names or ()], dtype=np.intp)

#: the scripted engine's (``fake.FakeEngine`` with a script; ``ivy_loop.h``'s backend 2)
#: structs, shared by its Python and the compiled loop: its state (``struct ivy_script``), a
#: pending completion (``struct ivy_pend``) and a logged submission (``struct ivy_log``); and
#: each log field's column in an int64 view of the log
SCRIPT_DTYPE: Final = header_dtype("script")
PEND_DTYPE: Final = header_dtype("pend")
LOG_DTYPE: Final = header_dtype("log")
LOG: Final = _columns(LOG_DTYPE)
#: backend 2 of the compiled loop: the scripted engine
BACKEND_SCRIPTED: Final = 2
