"""The master's compiled kernels: one C object built from the kernels' C sources.

Owns the sources' list (``SOURCES``: the rollup kernels, ``kernels.c``, the CSV writers',
``master/results/csvkernels.c``, and fio-pctiles' log reader's, ``master/fiologs/parse.c`` and
``align.c``), their build (``cc``, or ``IVYPY_CC``, with the flags that keep the arithmetic
IEEE 754 to the bit: no contraction into fused multiply-adds, no fast math) and where a
process finds the object (``library``), in this order:

1. shipped in the package, beside this module, under its ``shipped_name`` (an installed wheel:
   the wheel's build compiled it, ``hatch_build.py``), so a first run after an install
   compiles nothing;
2. in the cache (``~/.cache/ivypy``, ``XDG_CACHE_HOME``) under the sources', flags' and
   compiler's key: built there by the first process that needed it (a checkout, an editable
   install), about a second, then loaded by every later one.

A controller with neither raises ``KernelsUnavailable``, which says what to install. The
Python modules that call the kernels (``master.analysis.kernels``, ``master.results.csvkernels``,
``master.fiologs.cfuncs``) own their functions' signatures; this module only builds and loads.
Standard library only: the wheel's build hook loads it by its path, where numpy is not
installed.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import threading
from pathlib import Path
from typing import Final

# subprocess, tempfile and platform are imported where a build needs them: a process that
# finds the object (every run of an install, fio-pctiles' start-up) does without them

_HERE: Final = Path(__file__).resolve().parent
#: the C sources, compiled together into one object (each file is self-contained)
SOURCES: Final = (_HERE / "kernels.c", _HERE.parent / "results" / "csvkernels.c",
                  _HERE.parent / "fiologs" / "parse.c", _HERE.parent / "fiologs" / "align.c")
#: -ffp-contract=off: a * b + c stays two roundings (the kernels' results are compared with
#: numpy's bit for bit, and the CSV formatter's exact products rely on it)
FLAGS: Final = ("-O2", "-std=gnu11", "-shared", "-fPIC", "-Wall", "-ffp-contract=off")
LIBS: Final = ("-lm",)
BUILD_TIMEOUT_S: Final = 120.0


class KernelsUnavailable(RuntimeError):
    """Neither a shipped object nor a compiler to build one (or the build failed)."""


def source_key() -> str:
    """The sources' and flags' key, 16 hex digits of a SHA-256: names the shipped object."""
    h = hashlib.sha256("\0".join(FLAGS + LIBS).encode())
    for path in SOURCES:
        h.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def platform_tag() -> str:
    """The machine and C library family an object is for (``x86_64-glibc``): what
    ``platform.machine`` and ``platform.libc_ver`` say, read without importing ``platform``
    where the C library answers for itself."""
    try:
        libc = (os.confstr("CS_GNU_LIBC_VERSION") or "").split(maxsplit=1)[0]
    except (OSError, ValueError, AttributeError, IndexError):
        libc = ""
    if not libc:
        import platform

        libc = platform.libc_ver()[0]
    return f"{os.uname().machine or 'unknown'}-{libc or 'libc'}"


def shipped_name(key: str | None = None) -> str:
    """``kernels-<platform_tag>-<source_key>.so``: the object a wheel ships beside this module."""
    return f"kernels-{platform_tag()}-{key or source_key()}.so"


def compiler() -> list[str]:
    """The compiler's command (``IVYPY_CC``, else ``cc``), split into words, the first as
    found on ``PATH``; [] when absent."""
    words = (os.environ.get("IVYPY_CC", "").strip() or "cc").split()
    found = _which(words[0])
    return [found, *words[1:]] if found else []


def _which(name: str) -> str | None:
    """``name`` as ``shutil.which`` finds it (an executable file), without importing it."""
    paths = [name] if os.sep in name else [
        os.path.join(d, name) for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    return next((p for p in paths if os.path.isfile(p) and os.access(p, os.X_OK)), None)


def _identity(cc: list[str]) -> str:
    """The compiler as the cache's key knows it: its file (symbolic links followed), size and
    time; a compiler upgraded or another chosen is another key (no process started)."""
    real = os.path.realpath(cc[0])
    st = os.stat(real)
    return "\0".join([real, str(st.st_size), str(st.st_mtime_ns), *cc[1:]])


def compile_to(out: Path, cc: list[str]) -> None:
    """Compile ``SOURCES`` with ``cc`` into ``out`` (written whole: built beside it, renamed).
    Raises ``KernelsUnavailable`` naming the compiler and its last error lines."""
    import subprocess
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".kernels-", dir=out.parent) as tmp:
        part = Path(tmp) / "kernels.so"
        try:
            done = subprocess.run([*cc, *FLAGS, "-o", str(part), *map(str, SOURCES), *LIBS],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise KernelsUnavailable(f"{' '.join(cc)} could not build the master's kernels: "
                                     f"{exc}") from None
        if done.returncode != 0:
            raise KernelsUnavailable(f"{' '.join(cc)} failed to build the master's kernels "
                                     f"(exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        os.replace(part, out)  # another process may build the same file: each renames its own


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ivypy"


def _cached(key: str) -> Path:
    """The object in the cache for ``key`` and this compiler, built now when missing."""
    cc = compiler()
    if not cc:
        name = os.environ.get("IVYPY_CC", "").strip() or "cc"
        raise KernelsUnavailable(
            f"the master's compiled kernels are not in this install ({shipped_name(key)}) and "
            f"there is no C compiler {name!r} to build them: install gcc (Debian: apt-get "
            "install gcc libc6-dev), set IVYPY_CC, or install ivypy from a wheel built on a "
            "machine of this kind")
    try:
        identity = _identity(cc)
    except OSError as exc:
        raise KernelsUnavailable(f"{cc[0]}: {exc.strerror or exc}") from None
    full = hashlib.sha256("\0".join([key, identity]).encode()).hexdigest()[:16]
    path = _cache_dir() / f"master-kernels-{full}.so"
    if not path.exists():
        compile_to(path, cc)
    return path


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_origin = ""


def library() -> ctypes.CDLL:
    """The loaded kernels (once per process): shipped with the package, else from the cache,
    built there first when missing. ctypes releases the GIL for each call."""
    global _lib, _origin
    with _lock:
        if _lib is not None:
            return _lib
        key = source_key()
        shipped = _HERE / shipped_name(key)
        if shipped.is_file():
            with contextlib.suppress(OSError):  # another C library: build our own
                _lib, _origin = ctypes.CDLL(str(shipped)), "shipped"
        if _lib is None:
            path = _cached(key)
            try:
                _lib, _origin = ctypes.CDLL(str(path)), f"built in {path.parent}"
            except OSError as exc:
                raise KernelsUnavailable(f"the master's kernels at {path} do not load: "
                                         f"{exc}") from None
        return _lib


def origin() -> str:
    """Where the loaded object came from (``shipped``, ``built in <cache>``); '' before."""
    return _origin
