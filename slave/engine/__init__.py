"""I/O engines and the engine loop.

Owns choosing an engine per LUN (``choose_engine``): ``libaio`` (native AIO, O_DIRECT) when the
kernel interface and O_DIRECT both work on the LUN, else ``threadpool`` (pread/pwrite) with a
warning that the caller must record; ``fake`` only when asked for (tests). It must not import
anything outside ``slave`` and ``protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import IoEngineError
from slave.engine import aio_abi, files

ENGINE_CHOICES = ("auto", "libaio", "threadpool", "fake")


@dataclass(frozen=True)
class EngineDecision:
    kind: str  # libaio | threadpool | fake
    warning: str | None


def choose_engine(choice: str, path: str, logical_block_bytes: int) -> EngineDecision:
    """Which engine serves ``path``. ``auto`` falls back to ``threadpool`` with a warning."""
    kind = choice.split(":", 1)[0]
    if kind not in ENGINE_CHOICES:
        raise IoEngineError(f"LUN {path}: unknown engine {choice!r} (one of {ENGINE_CHOICES})")
    if kind in ("threadpool", "fake"):
        return EngineDecision(kind, None)
    why = aio_abi.available() or files.direct_io_works(path, logical_block_bytes)
    if why is None:
        return EngineDecision("libaio", None)
    if kind == "libaio":
        raise IoEngineError(f"LUN {path}: libaio engine unavailable: {why}")
    return EngineDecision(
        "threadpool",
        f"LUN {path}: libaio/O_DIRECT unavailable ({why}); using the thread-pool pread/pwrite "
        "engine through the page cache, so latencies are not device latencies",
    )
