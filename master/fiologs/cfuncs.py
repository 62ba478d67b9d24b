"""The fio log reader's compiled functions: ``parse.c`` (reading a chunk written as fio writes)
and ``align.c`` (adding cells into the per-quantum sums), built into the master's object by
``master.analysis.native`` and called through ctypes, without the GIL.

Owns their signatures and finds them once per process; where there is no object and no
compiler to build one, ``function`` gives None and the callers (``parse``, ``align``) use their
numpy forms, which are also the C's references in the tests. It must hold no state but the
loaded functions, and import nothing heavy (fio-pctiles' start-up counts).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Final

from master.analysis import native

_P: Final = ctypes.c_void_p  # an array's data, as its address (``ndarray.ctypes.data``)
_I: Final = ctypes.c_int64
_SIGNATURES: Final[dict[str, tuple[Any, list[Any]]]] = {
    "ivf_parse_canonical": (_I, [_P, _I, _I, _P, _P, _I, _P, _P, _P, _I, _P]),
    "ivf_add_one_or_two": (None, [_P, _P, _P, _P, _I, _P, _P, _P, _P, _I, _I]),
}
_lock = threading.Lock()
#: name -> the C function with its types set, or None where the object is unavailable
_loaded: dict[str, Any] = {}


def function(name: str) -> Any:
    """The C function ``name``, or None (the same answer for the whole process) where the
    master's object is neither shipped nor buildable here."""
    try:
        return _loaded[name]
    except KeyError:
        pass
    with _lock:
        if name not in _loaded:
            try:
                fn = getattr(native.library(), name)
            except native.KernelsUnavailable:
                fn = None
            else:
                fn.restype, fn.argtypes = _SIGNATURES[name]
            _loaded[name] = fn
        return _loaded[name]


__all__ = ["function"]
