"""The structs the engine loop's parts and its C share, as ``ivy_loop.h`` declares them (read
from the header, which ships beside this module), and their Python mirrors: ``LoopArgs`` (the
``ctypes.Structure`` of ``struct ivy_loop``) and the ``*_DTYPE``s, with each field's column in
an int64 view of their arrays (``ROW[name]``, ``IO[name]``, ``LOG[name]``).
``layout_difference`` checks every mirror against the layouts the compiled object reports of
itself. Layout only: no state, and nothing of what the loop does with a field; building and
loading the object is ``compiled_loop``'s.
"""

from __future__ import annotations

import ctypes
import functools
import re
from importlib import resources
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

INF: Final = 1 << 62  # a far future (no scheduled time)

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
#: ``struct ivy_io``: a precomputed I/O in a workload's ring (the fields of its row it sets)
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

#: the scripted fake engine's structs, shared by its Python and the compiled loop (its
#: backend, ``BACKEND_SCRIPTED``): its state, a pending completion and a logged submission
SCRIPT_DTYPE: Final = header_dtype("script")
PEND_DTYPE: Final = header_dtype("pend")
LOG_DTYPE: Final = header_dtype("log")
LOG: Final = _columns(LOG_DTYPE)
BACKEND_SCRIPTED: Final = 2

_P: Final = ctypes.c_void_p  # every pointer field: an array's address
_I: Final = ctypes.c_int64
_A = TypeVar("_A", bound=npt.NDArray[Any])

#: ``struct ivy_loop``'s fields in the header's order (``IVY_LOOP_FIELDS``), as ctypes types
#: (every field that is not a pointer is an int64_t)
FIELDS: Final[tuple[tuple[str, Any], ...]] = tuple(
    (name, _P if "*" in ctype else {"int64_t": _I}[ctype])
    for name, ctype in header_fields("loop"))
#: ``struct ivy_gen``: a workload's generator, an element of the array ``LoopArgs.gen``
GEN_DTYPE: Final = header_dtype("gen")
#: ``struct ivy_data``: a workload's write data, an element of the array ``LoopArgs.data``
DATA_DTYPE: Final = header_dtype("data")

#: ``struct ivy_vlun``: a LUN's data verification (its map and what its stamps carry), pointed to
#: by its workloads' ``ivy_data.vlun``
VLUN_DTYPE: Final = header_dtype("vlun")
#: ``struct ivy_vfind``: a damaged block the loop found (``LoopArgs.vfind``)
VFIND_DTYPE: Final = header_dtype("vfind")

#: a layout: the struct's size, then (name, offset, size) of each field in order
Layout = tuple[int, tuple[tuple[str, int, int], ...]]


class LoopArgs(ctypes.Structure):
    """``struct ivy_loop``: the compiled loop's arguments (set before a run) and its state
    across runs (``ivy_loop.h``), read and written as attributes. A pointer field is set with
    ``array``, which keeps the array alive and in place as long as this object."""

    _fields_ = FIELDS
    address: int  # the struct's address, the compiled functions' argument

    def __init__(self) -> None:
        super().__init__()
        self._keep: dict[str, npt.NDArray[np.generic]] = {}
        self.address = ctypes.addressof(self)

    def array(self, name: str, a: _A) -> _A:
        """Point field ``name`` at ``a`` (C-contiguous), keep ``a`` and return it."""
        if not a.flags.c_contiguous:
            raise ValueError(f"compiled loop field {name} must be C-contiguous")
        if dict(FIELDS).get(name) is not _P:
            raise ValueError(f"compiled loop field {name} is not a pointer")
        self._keep[name] = a
        setattr(self, name, a.ctypes.data)
        return a


#: each struct's Python mirror as a numpy dtype (``ivy_loop``'s as ctypes lays out ``LoopArgs``)
DTYPES: Final = {"ivy_loop": np.dtype(LoopArgs), "ivy_gen": GEN_DTYPE, "ivy_data": DATA_DTYPE,
                 "ivy_row": ROW_DTYPE, "ivy_io": IO_DTYPE, "ivy_script": SCRIPT_DTYPE,
                 "ivy_pend": PEND_DTYPE, "ivy_log": LOG_DTYPE, "ivy_vlun": VLUN_DTYPE,
                 "ivy_vfind": VFIND_DTYPE}


def python_layout(struct: str = "ivy_loop") -> Layout:
    """The Python mirror's layout of ``struct`` (its dtype in ``DTYPES``)."""
    dtype = DTYPES[struct]
    fields_of = dtype.fields
    assert fields_of is not None
    return dtype.itemsize, tuple((name, int(fields_of[name][1]), fields_of[name][0].itemsize)
                                 for name in dtype.names or ())


def compiled_layout(lib: ctypes.CDLL, struct: str = "ivy_loop") -> Layout:
    """``struct``'s layout as the compiled object ``lib`` reports it (``<struct>_layout``;
    ``<struct>_names``: the names, a space after each)."""
    start = ctypes.addressof(ctypes.c_char.in_dll(lib, f"{struct}_names"))
    names = ctypes.string_at(start).decode("ascii").split()
    words = (ctypes.c_int64 * (1 + 2 * len(names))).in_dll(lib, f"{struct}_layout")
    return int(words[0]), tuple((name, int(words[1 + 2 * i]), int(words[2 + 2 * i]))
                                for i, name in enumerate(names))


def layout_difference(lib: ctypes.CDLL) -> str | None:
    """How a Python mirror differs from its compiled struct (each in ``DTYPES``, ``ivy_loop``
    first: the first field that differs, or the size), or None when all agree."""
    for struct in DTYPES:
        py_size, py_fields = python_layout(struct)
        c_size, c_fields = compiled_layout(lib, struct)
        for i in range(max(len(py_fields), len(c_fields))):
            py = py_fields[i] if i < len(py_fields) else None
            c = c_fields[i] if i < len(c_fields) else None
            if py != c:
                return (f"struct {struct} field {i}: compiled (name, offset, size) {c}, "
                        f"the Python mirror's {py}")
        if py_size != c_size:
            return f"struct {struct} is {c_size} bytes compiled, {py_size} in the Python mirror"
    return None
