"""The slave's compiled loop, built once on the controller and shipped in the slave zipapp.

Owns running the slave's own build on the controller (``python <zipapp> --build-compiled-loop
DIR`` in a child process: the master does not import ``slave``) and what it gives: the shared
object's archive name and bytes, packed into the zipapp every host runs
(``slave_zipapp``). It is built once per slave code: kept in ``~/.cache/ivypy/kernel-<the
code's key>/``, and a later run of the same code reads it from there (and the zipapp that
holds it, ``zipapp.cached_slave_zipapp``). A host whose machine and C library match loads the
shipped object; another builds its own or runs the Python loop (and has no libaio or
io_uring), and hosts.csv's ``io_loop`` says which. A controller without a compiler ships
none (a warning).
Must not: talk to hosts, or choose a loop for a host (the slave does, ``compiled_loop._load``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from master.hosts.zipapp import (
    DEFAULT_CACHE_DIR,
    SlaveZipapp,
    build_slave_zipapp,
    cached_slave_zipapp,
    inputs_key,
    source_files,
    write_atomically,
)

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 180.0
_lock = threading.Lock()
_shipped: dict[str, bytes] | None = None


def shipped_files() -> dict[str, bytes]:
    """``{"slave/engine/<shipped name>": object}`` built on this controller (once per
    process), or ``{}`` where it cannot be built here (logged as a warning)."""
    global _shipped
    with _lock:
        if _shipped is None:
            _shipped = _build()
        return dict(_shipped)


def _build(cache_dir: Path = DEFAULT_CACHE_DIR) -> dict[str, bytes]:
    """The object for this controller: from ``<cache>/kernel-<key>/`` when an earlier run
    built it for the same slave code (``kernel_key``), else built now and kept there."""
    kept = cache_dir.expanduser() / f"kernel-{kernel_key()}"
    found = sorted(kept.glob("compiled_loop-*.so")) if kept.is_dir() else []
    if len(found) == 1:
        return {f"slave/engine/{found[0].name}": found[0].read_bytes()}
    files = _built(build_slave_zipapp())
    for arcname, data in files.items():
        with contextlib.suppress(OSError):  # a cache that cannot be written costs a rebuild
            kept.mkdir(parents=True, exist_ok=True)
            write_atomically(kept / Path(arcname).name, data)
    return files


def kernel_key() -> str:
    """The slave code's key (16 hex digits of ``zipapp.inputs_key``), without packing it."""
    return inputs_key(source_files())[:16]


def _built(base: SlaveZipapp) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="ivypy-kernel-") as tmp:
        pyz = Path(tmp) / "slave.pyz"
        pyz.write_bytes(base.data)
        out = Path(tmp) / "out"
        out.mkdir()
        try:
            done = subprocess.run([sys.executable, str(pyz), "--build-compiled-loop", str(out)],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("the compiled paced loop was not built on this controller (%s): each "
                        "host builds its own, or runs the Python loop without libaio", exc)
            return {}
        name = done.stdout.strip()
        if done.returncode != 0 or not name or not (out / name).is_file():
            log.warning("the compiled paced loop was not built on this controller (exit %s: "
                        "%s): each host builds its own, or runs the Python loop without libaio",
                        done.returncode, done.stderr.strip()[-500:])
            return {}
        return {f"slave/engine/{name}": (out / name).read_bytes()}


async def slave_zipapp() -> SlaveZipapp:
    """The zipapp every host runs: the slave's code and the compiled loop built here."""
    files = await asyncio.to_thread(shipped_files)
    return await asyncio.to_thread(cached_slave_zipapp, files)
