"""The compiled loop's state and arguments in Python: ``LoopArgs``, the ``ctypes.Structure``
that mirrors ``struct ivy_loop`` (``slave/engine/ivy_loop.h``) field for field, in order;
``GEN_DTYPE`` and ``DATA_DTYPE``, the numpy dtypes that mirror each workload's ``struct ivy_gen``
and ``struct ivy_data`` (all read from the header: ``layout.header_fields``); and the check of
these and of ``layout``'s dtypes (``struct ivy_row``, ``struct ivy_io``, the scripted engine's
``struct ivy_script``, ``ivy_pend`` and ``ivy_log``) against the layouts the
compiled object reports of itself (one built from another header is refused).

Owns the Python side of the structs: keeping alive the arrays whose addresses ``LoopArgs``
holds, and the comparison with the compiled layouts. It must not build or load the compiled
object (``paced_kernel``), or know what the loop does with a field.
"""

from __future__ import annotations

import ctypes
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from slave.engine.layout import (
    IO_DTYPE,
    LOG_DTYPE,
    PEND_DTYPE,
    ROW_DTYPE,
    SCRIPT_DTYPE,
    header_dtype,
    header_fields,
)

_P: Final = ctypes.c_void_p  # every pointer field: an array's address
_I: Final = ctypes.c_int64
_A = TypeVar("_A", bound=npt.NDArray[Any])

#: ``struct ivy_loop``'s fields in the header's order (``IVY_LOOP_FIELDS``), as ctypes types
#: (every field that is not a pointer is an int64_t)
FIELDS: Final[tuple[tuple[str, Any], ...]] = tuple(
    (name, _P if "*" in ctype else {"int64_t": _I}[ctype])
    for name, ctype in header_fields("loop"))
#: ``struct ivy_gen``: a workload's generator, one element of the array ``LoopArgs.gen`` points
#: at
GEN_DTYPE: Final = header_dtype("gen")
#: ``struct ivy_data``: a workload's write data, one element of the array ``LoopArgs.data``
#: points at (``pool`` and ``dups`` are addresses)
DATA_DTYPE: Final = header_dtype("data")

#: a layout: the struct's size, then (name, offset, size) of each field in order
Layout = tuple[int, tuple[tuple[str, int, int], ...]]


class LoopArgs(ctypes.Structure):
    """``struct ivy_loop``: the compiled loop's arguments (set before a run) and its state
    across runs (``p``, ``binned``, ``in_flight``, ``heap_n``, ``n``, ``t_ns``, ``sub_done``,
    ``sub_n``, ``refill``, ``mean_ns``), read and written as attributes. A pointer field is
    set with ``array``, which keeps the array alive and in place as long as this object."""

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


#: each struct's Python mirror as a numpy dtype (``ivy_loop``'s: ``LoopArgs`` as ctypes lays
#: it out)
DTYPES: Final = {"ivy_loop": np.dtype(LoopArgs), "ivy_gen": GEN_DTYPE, "ivy_data": DATA_DTYPE,
                 "ivy_row": ROW_DTYPE, "ivy_io": IO_DTYPE, "ivy_script": SCRIPT_DTYPE,
                 "ivy_pend": PEND_DTYPE, "ivy_log": LOG_DTYPE}


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
