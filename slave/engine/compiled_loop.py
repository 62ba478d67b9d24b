"""The compiled loop (``ivy_loop.c``, ``paced_run``): the Python loop's turn of paced and
max-iops workloads in C, without Python per I/O, on libaio, io_uring or the scripted fake
engine (the C file's opening comment says the turn). Why C, and what each part bought:
docs/engine.md.

Owns the C source (``ivy_loop.c`` with ``ivy_loop.h`` in place of its ``#include``: one
``struct ivy_loop``, which ``layout.LoopArgs`` mirrors; an object whose layout differs is not
used), its build and load, its result codes (``R_*``) and each workload's generator
(``generator``): where a ``Sequencer`` can be continued in C, the kernel makes the workload's
next I/Os itself, bit for bit as the sequencer would; DFC's edit of the rates alone is made in
the kernel's arrays too (``retime``). The same object adds the slave's rollup up
(``ivy_group_pass``, whose call is ``compiled_group``'s): it ships to every host already.

Built once on the controller and shipped in the slave zipapp (``build_for_shipping``), copied
into ``~/.cache/ivypy`` (``XDG_CACHE_HOME``) and loaded; where none ships for the host or it
does not load, the host compiles the source with its own ``cc`` (or ``IVYPY_SLAVE_CC``;
``none`` turns it off), once per source and compiler. A host with neither has no libaio or
io_uring and says why (``origin``, ``why_not``: hosts.csv's ``io_loop``). It must not touch
a workload object, count errors or allocate on the hot path: the kernel returns to the engine
loop for those.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from typing import Final

import numpy as np
import numpy.typing as npt

from protocol import verify
from protocol.buckets import N_BUCKETS, OVERFLOW_INDEX, OVERFLOW_LOWER_NS, PLAT_BITS, PLAT_VAL
from protocol.histogram import PCT_SCALE
from protocol.views import N_CATEGORIES, N_KINDS, N_VIEWS, PERCENTILES
from slave.datapattern import KIND_CODES, SECTOR_BYTES
from slave.engine import layout
from slave.engine.layout import GEN_DTYPE, IOCB_CMD_PWRITE, LoopArgs
from slave.sequencer import GeneratorState

_U64: Final = (1 << 64) - 1


# what a run returned for (its state in ``LoopArgs``' fields): ``wake_ns`` came (the
# boundary, or a control poll: one every ``poll_ns`` that finds ``control_fd`` readable, or
# the first when it is -1); a completion reaped past ``boundary_ns`` (``n`` of them in the
# engine's events, at ``t_ns``: left there, the next run records them first); the records
# reached ``flush_at``; a record to bin failed (at ``binned``); io_submit took ``sub_done``
# (-1: none) of ``sub_n``; a completion came for slot ``n``, which no workload of the set
# owns (a broken invariant: nothing of that batch is recorded); a wait for completions
# failed with errno ``n``
R_WAKE, R_LATE, R_FLUSH, R_ERROR, R_SUBMIT, R_STRAY, R_WAIT = range(7)

# a rollup entry's role in a pass of the rollup's grouping over a batch (``struct ivy_grp``;
# ``compiled_group`` chooses them): its groups gone through in turn, its groups held all
# along, each workload its own group; and the most entries one pass holds
GRP_DRIVER, GRP_HELD, GRP_SINGLE = range(3)
GRP_HELD_MAX: Final = 8


# a workload's stats block (``protocol.stats``): counters[4, 3], lat[4, 2, 3], hist[4, 2, N]
_STATS_LAYOUT: Final = {
    "N_COUNTERS": N_CATEGORIES * 3, "N_LAT": N_CATEGORIES * N_KINDS * 3, "N_KINDS": N_KINDS,
    "N_BUCKETS": N_BUCKETS, "OVERFLOW_INDEX": OVERFLOW_INDEX,
    "OVERFLOW_LOWER_NS": OVERFLOW_LOWER_NS, "PLAT_BITS": PLAT_BITS,
    "ONE_PER_VALUE": 2 * PLAT_VAL, "PLAT_SHIFT": PLAT_BITS + 1, "PLAT_MASK": PLAT_VAL - 1,
    # the rollup's grouping (``compiled_group``): views, percentiles, their ranks' scale
    "N_CATEGORIES": N_CATEGORIES, "N_VIEWS": N_VIEWS, "N_PCT": len(PERCENTILES),
    "RANK_SCALE": 100 * PCT_SCALE,
}


_INCLUDE: Final = '#include "ivy_loop.h"\n'


def source() -> str:
    """The C source as compiled: the ``#define``s of the layouts, then ``ivy_loop.c``
    with ``ivy_loop.h`` in place of its ``#include`` (one file: the build and the source's
    hash, which names the cached and the shipped object, cover both)."""
    defines = {f"DATA_{kind.upper()}": code for kind, code in KIND_CODES.items()}
    defines.update(IOCB_CMD_PWRITE=IOCB_CMD_PWRITE, SECTOR_BYTES=SECTOR_BYTES)
    defines.update(_STATS_LAYOUT)
    defines.update(V_MAP_BLOCK=verify.MAP_BLOCK_BYTES, V_STAMP=verify.STAMP_BYTES,
                   V_GEN_MASK=verify.GEN_MASK, V_GEN_MAX=verify.GEN_MAX,
                   V_UNSETTLED=verify.UNSETTLED)
    defines.update({f"V_{name.upper()}": code for name, code in verify.CODES.items()})
    defines["INF_NS"] = layout.INF
    defines["BACKEND_SCRIPTED"] = layout.BACKEND_SCRIPTED  # slave.engine.fake's script
    defines.update({k: v for k, v in globals().items()  # result codes, the grouping's roles
                    if k.startswith(("R_", "GRP_")) and isinstance(v, int)})
    head = "".join(f"#define {k} {v}LL\n" for k, v in defines.items())
    package = resources.files("slave.engine")
    body = package.joinpath("ivy_loop.c").read_text("utf-8")
    header = layout.header_text()
    if body.count(_INCLUDE) != 1:
        raise OSError(f"ivy_loop.c must include ivy_loop.h once ({_INCLUDE.strip()})")
    return "#define _GNU_SOURCE\n" + head + body.replace(_INCLUDE, header)


# no -Werror here: a host's other compiler may warn of what this one does not, and a warning
# must not cost the host its compiled loop (the tests compile the source with -Werror);
# -ffp-contract=off: no fused multiply-add, so the grouping's percentiles are numpy's bit for
# bit on every machine (x86-64's baseline has no FMA; aarch64's compilers fuse by default)
_FLAGS: Final = ("-O2", "-std=gnu11", "-shared", "-fPIC", "-Wall", "-ffp-contract=off")
_LIBS: Final = ("-lm",)
_fn: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
_lib: ctypes.CDLL | None = None  # the loaded object (``_fn`` is its ``paced_run``)
_why_not: str | None = None
_origin: str | None = None  # where the loaded object came from


def platform_tag() -> str:
    """The machine and C library family a shipped object is for (``x86_64-glibc``); a host
    of the same tag with an older C library fails to load it, and builds its own."""
    return f"{platform.machine() or 'unknown'}-{platform.libc_ver()[0] or 'libc'}"


def shipped_name(src: str | None = None) -> str:
    """The file name of the object shipped for this host and ``src`` (this source):
    ``compiled_loop-<platform_tag>-<sha256 of the source, 16 hex>.so``."""
    key = hashlib.sha256((src if src is not None else source()).encode()).hexdigest()[:16]
    return f"compiled_loop-{platform_tag()}-{key}.so"


def build_for_shipping(out_dir: str) -> str:
    """Build the object here (the controller) into ``out_dir`` under its ``shipped_name``;
    returns that name. Raises ``RuntimeError`` when there is no compiler or the build fails."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("the compiled paced loop is turned off (IVYPY_SLAVE_CC=none)")
    if not cc:
        raise RuntimeError(f"no C compiler {os.environ.get('IVYPY_SLAVE_CC', 'cc')!r} here")
    src = source()
    name = shipped_name(src)
    shutil.copyfile(_build(cc, src), os.path.join(out_dir, name))
    return name


def _shipped(src: str) -> str | None:
    """The object shipped for this host and source, copied into the cache (once, whole); None
    when the package holds none for them."""
    name = shipped_name(src)
    item = resources.files("slave.engine").joinpath(name)
    if not item.is_file():
        return None
    cache = _cache_dir()
    path = os.path.join(cache, f"shipped-{name}")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        fd, part = tempfile.mkstemp(prefix=".shipped-", dir=cache)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(item.read_bytes())
            os.replace(part, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
    return path


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ivypy")


def _compiler() -> list[str] | None:
    cc = os.environ.get("IVYPY_SLAVE_CC", "cc").strip()
    if cc.lower() in ("", "none", "0", "off"):
        return None
    words = cc.split()
    return words if shutil.which(words[0]) else []


def _build(cc: list[str], src: str) -> str:
    """The cached shared object for ``src`` compiled by ``cc`` (built now when missing)."""
    version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
    key = hashlib.sha256("\0".join([src, version.stdout, *cc, *_FLAGS, *_LIBS]).encode()
                         ).hexdigest()
    cache = _cache_dir()
    path = os.path.join(cache, f"compiled_loop-{key[:16]}.so")
    if os.path.exists(path):
        return path
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".compiled_loop-", dir=cache) as tmp:
        c_path = os.path.join(tmp, "ivy_loop.c")
        with open(c_path, "w", encoding="utf-8") as f:
            f.write(src)
        part = os.path.join(tmp, "compiled_loop.so")
        done = subprocess.run([*cc, *_FLAGS, "-o", part, c_path, *_LIBS], capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cc)} failed (exit {done.returncode}): "
                               f"{done.stderr.strip()[-2000:]}")
        # another slave on this host may build the same file: each renames its own, whole
        # (the build directory is in the cache, so the rename stays on one filesystem)
        os.replace(part, path)
    return path


def _load() -> None:
    """Load the kernel once per process: the object shipped for this host, else one built
    here (or found in the cache); on failure note why (``why_not``)."""
    global _fn, _lib, _why_not, _origin
    if _fn is not None or _why_not is not None:
        return
    cc = _compiler()
    if cc is None:
        _why_not = "the compiled paced loop is turned off (IVYPY_SLAVE_CC=none)"
        return
    try:
        src = source()
    except OSError as exc:  # an install that lost the package's data
        _why_not = f"the compiled paced loop's source is not in this install: {exc}"
        return
    lib, shipped_failed = None, ""
    try:
        shipped = _shipped(src)
        if shipped is not None:
            lib, _origin = ctypes.CDLL(shipped), "shipped from the controller"
    except OSError as exc:  # another C library than the controller's, a full cache ...
        shipped_failed = f" (the one shipped from the controller would not load: {exc})"
    if lib is None:
        if not cc:
            _why_not = (f"no C compiler {os.environ.get('IVYPY_SLAVE_CC', 'cc')!r} on this "
                        "host to build the compiled paced loop, and none shipped for "
                        f"{platform_tag()}{shipped_failed}")
            return
        try:
            lib = ctypes.CDLL(_build(cc, src))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _why_not = f"the compiled paced loop could not be built: {exc}{shipped_failed}"
            return
        _origin = f"built on this host{shipped_failed}"
    differs = layout.layout_difference(lib)
    if differs is not None:  # an object of another source under this one's name
        _why_not = f"the compiled paced loop does not match this slave: {differs}"
        return
    fn = lib.paced_run
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int64
    lib.paced_retime.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                 ctypes.c_int64, ctypes.c_int64]
    lib.paced_retime.restype = None
    for name in ("paced_generate", "paced_extend"):
        f = getattr(lib, name)
        f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64], None
    p, i = ctypes.c_void_p, ctypes.c_int64
    for name, args in (("ivy_aio_setup", [p, i]), ("ivy_aio_destroy", [i]),
                       ("ivy_uring_setup", [p, i, i, i, p, p]),
                       ("ivy_uring_register", [p, i, i, p, i]), ("ivy_submit", [p, p, i]),
                       ("ivy_submit_rest", [p, i, i]), ("ivy_reap", [p, i])):
        f = getattr(lib, name)
        f.argtypes, f.restype = args, i
    for name, args, res in (("ivy_verify_crc", [p, i, p, i], i),
                            ("ivy_verify_write", [p, i, i, i, i, p], None),
                            ("ivy_verify_write_done", [p, i, i, i, i], None),
                            ("ivy_verify_read", [p, i, i, i], None),
                            ("ivy_verify_read_done", [p, i, i, i, i, i, p, i], i)):
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    lib.ivy_group_bounds.argtypes, lib.ivy_group_bounds.restype = [p, i, i, p], i
    lib.ivy_group_pass.argtypes = [p, p, p, p, p, i, p, i, p, p, p]
    lib.ivy_group_pass.restype = i
    lib.ivy_uring_close.argtypes, lib.ivy_uring_close.restype = [p, p], None
    lib.ivy_uring_unqueue.argtypes, lib.ivy_uring_unqueue.restype = [p], None
    _fn, _lib = fn, lib


def available() -> bool:
    """Whether the compiled loop can run here (built and loaded, or loaded from the cache)."""
    _load()
    return _fn is not None


def library() -> ctypes.CDLL | None:
    """The loaded compiled object (its ``ivy_*`` calls serve ``native``), or None (``why_not``)."""
    _load()
    return _lib


def _loaded() -> ctypes.CDLL:
    """The loaded compiled object, for a caller that runs only where it is available."""
    _load()
    assert _lib is not None, _why_not
    return _lib


def why_not() -> str | None:
    """Why the compiled loop is not available, or None."""
    _load()
    return _why_not


def origin() -> str | None:
    """Where the loaded compiled loop came from (shipped, or built on this host), or None."""
    _load()
    return _origin


def run(args: LoopArgs) -> int:
    """One run of the kernel (``available()`` must be True); returns an ``R_*`` code."""
    fn = _fn
    if fn is None:
        _load()
        fn = _fn
        assert fn is not None, _why_not
    return int(fn(args.address))


def retime(args: LoopArgs, gen: npt.NDArray[np.void], at_ns: int, ks: npt.NDArray[np.int64],
           period_ns: npt.NDArray[np.float64], base_ns: npt.NDArray[np.int64],
           cap: int = layout.INF) -> None:
    """Workloads ``ks`` (elements of ``gen``, the loop's generators) take new schedules from
    ``at_ns`` in place, each its period and first time (``Sequencer.retime``'s): the first
    ``cap`` I/Os of its ring due before ``at_ns`` and not issued keep their times, the rest
    are retimed, and its generator (schedule, stream) goes on from there, marked ``resync``
    for its sequencer to take back."""
    lib = _loaded()
    ks = np.ascontiguousarray(ks, dtype=np.int64)
    gen["period_ns"][ks] = period_ns
    gen["sched_base_ns"][ks] = base_ns
    gen["sched_k"][ks] = 0
    gen["sched_last_ns"][ks] = float(at_ns)
    gen["first_due"][ks] = gen["poisson"][ks]
    lib.paced_retime(args.address, at_ns, ks.ctypes.data, ks.shape[0], cap)


def generate(args: LoopArgs, k: int, m: int) -> None:
    """Workload ``k``'s next ``m`` I/Os into its ring from the top, as the kernel makes them
    when a ring runs out (every I/O of the old ring issued)."""
    _loaded().paced_generate(args.address, k, m)


def extend(args: LoopArgs, k: int, m: int) -> None:
    """Workload ``k``'s next ``m`` I/Os after the rows of its ring, which has room for them."""
    _loaded().paced_extend(args.address, k, m)


def generator(gs: GeneratorState, op_read: int, op_write: int) -> npt.NDArray[np.void]:
    """A workload's generator (``GEN_DTYPE``, 0-d): ``gs`` and its read and write words.
    ``gs``'s fields are ``struct ivy_gen``'s in its order, the four 128-bit states first,
    which the struct holds as two words each."""
    words = dataclasses.astuple(gs)
    halves = [half for wide in words[:4] for half in (wide >> 64, wide & _U64)]
    return np.array((*halves, *words[4:], op_read, op_write, 0, 0), dtype=GEN_DTYPE)


def generator_progress(g: npt.NDArray[np.void] | np.void
                       ) -> tuple[int, int, int, int, int, float, bool]:
    """Where the loop left a generator: the arguments of ``Sequencer.resume`` (the two bit
    generators' states, sequential position, schedule start and index, last Poisson arrival,
    whether the first arrival is still due)."""
    state = (int(g["state_hi"]) << 64) | int(g["state_lo"])
    sched = (int(g["sched_state_hi"]) << 64) | int(g["sched_state_lo"])
    return (state, sched, int(g["seq_next"]), int(g["sched_base_ns"]), int(g["sched_k"]),
            float(g["sched_last_ns"]), bool(g["first_due"]))
