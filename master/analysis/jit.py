"""The master's one way to compile a kernel (numba): cached, without the GIL.

Owns the decorators every compiled kernel of the master goes through (``master.analysis.kernels``,
``master.results.csvkernels``). Compiled code is cached beside each kernel's module
(``__pycache__``), so only the first process after an install pays the compile time
(``master.run.warmup``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["jit", "jit_inline", "numba"]

try:  # pragma: no cover - exercised by every test run
    import numba

    def jit(fn: Any) -> Any:
        return numba.njit(cache=True, nogil=True)(fn)

    def jit_inline(fn: Any) -> Any:
        """A helper inlined into its callers by numba itself: a call that passes arrays
        otherwise pays their reference counting (atomic operations), per call."""
        return numba.njit(cache=True, nogil=True, inline="always")(fn)
except ImportError as exc:  # pragma: no cover
    raise ImportError(f"the master needs numba for its rollup kernels: {exc}") from exc
