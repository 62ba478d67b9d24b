"""Compiled inner loops of the CSV writers: numbers as ``fmt`` text, rows of them, and lines
appended to many files at once.

At 10,000 workloads a subinterval writes tens of thousands of rows of a few hundred cells;
Python's ``%`` formatting and a write per file cost hundreds of milliseconds. These loops hold no
state; the callers in ``master.results.output`` own the files and the meaning, and the tests
compare every kernel with Python's own formatting and writes.

Each loop is C (``csvkernels.c``, its functions named ``ivc_``), built and loaded by
``master.analysis.native`` and called through ctypes (without the GIL); this module owns their
signatures, checks what they would otherwise index out of range, and keeps each one's
reference in Python (``_<name>_py``, pure Python and numpy), which the tests compare with the
C bit for bit. It must not keep any state but the loaded functions and one output buffer.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from master.analysis import native

# ----------------------------------------------------------------------------- CSV numbers
#: Longest text of one cell (``master.results.csvfiles.fmt``): sign and 15 digits of a whole number
#: below 1e15; ``%.6g``'s forms are shorter ("-1.23457e-308" is 13). The kernels may write a few
#: bytes past a cell's end (fixed-length stores the next cell overwrites), never past this.
_CELL_MAX = 16
#: Powers of ten 10**k, k = 0..22 (exact in binary64).
_POW_POS = np.array([10.0 ** k for k in range(23)])
#: 10**k for k = -_P10_BIAS.._P10_BIAS (rounded where inexact; the C holds the same values
#: as hexadecimal literals), enough for the magnitudes
#: ``_put_cell_py`` decides (1e-30 to 1e15): the decimal exponent's first guess is checked
#: against it; the mantissa check corrects a guess it got wrong.
_P10_BIAS = 40
_P10 = np.array([10.0 ** k for k in range(-_P10_BIAS, _P10_BIAS + 1)])
#: ``master.results.csvfiles.fmt`` writes whole numbers from here on (``%.6g`` would take an
#: exponent).
_WHOLE_FROM = 999_999.5


def _two_prod_py(a: float, b: float) -> tuple[float, float]:
    """``a * b`` as the rounded product and its exact error (Dekker; no FMA needed)."""
    p = a * b
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _put_uint_py(buf: Any, at: int, v: Any) -> int:
    """Decimal digits of ``v`` (uint64) at ``buf[at:]``; returns the new end."""
    n = 1
    t = v // np.uint64(10)
    while t > 0:
        t //= np.uint64(10)
        n += 1
    for k in range(n - 1, -1, -1):
        buf[at + k] = np.uint8(48 + v % np.uint64(10))
        v //= np.uint64(10)
    return at + n


def _put_cell_py(buf: Any, at: int, x: float, bits: int, pow_pos: Any, p10: Any,
                 digits: Any) -> int:
    """The finite ``x`` as ``master.results.csvfiles.fmt`` writes it, at ``buf[at:]``; returns the
    new end, or -1 for a cell it cannot decide (a ``%.6g`` rounding too close to call in binary,
    magnitudes of 1e15 or more or below 1e-30), which the caller formats in Python.

    Below 999,999.5 that is ``%.6g``: rounding is decided on the exact binary value, ties to
    even, as C's ``printf`` does. From there to 1e15, the whole number (``%.0f``, ties to
    even). ``bits``: ``x``'s IEEE 754 bits (its binary exponent gives the decimal one's first
    guess). The digits are written with fixed-length stores and selects rather than loops of
    data-dependent length: a mispredicted branch costs more than the few bytes written past
    the cell's end, which the next cell overwrites."""
    neg = x < 0 or (x == 0 and np.signbit(x))
    a = -x if neg else x
    if a >= 1e15 or (a < 1e-30 and a != 0.0):
        return -1
    if neg:
        buf[at] = 45
        at += 1
    if a == 0.0:
        buf[at] = 48
        return at + 1
    if a >= 999999.5:  # whole number, ties to even (exact: a < 2**53)
        fl = np.floor(a)
        w = np.int64(fl)
        frac = a - fl
        if frac > 0.5 or (frac == 0.5 and (w & 1) == 1):
            w += 1
        at = _put_uint_py(buf, at, np.uint64(w))
        return at
    # decimal exponent: floor(e2 * log10(2)) from the binary exponent, then one comparison
    e2 = ((bits >> 52) & 0x7FF) - 1023
    e = (e2 * 78913) >> 18
    if a >= p10[e + 1 + _P10_BIAS]:
        e += 1
    ok = False
    r = np.int64(0)  # the six significant digits (int64: float-to-int conversions are cheaper)
    for _ in range(4):
        k = 5 - e
        if k >= 0:
            mant = a * pow_pos[k] if k <= 22 else a * 1e22 * pow_pos[k - 22]
        elif -k <= 22:
            mant = a / pow_pos[-k]
        else:
            mant = a / 1e22 / pow_pos[-k - 22]
        # from 999,999.5 to 1e6 the six digits round to 1000000 (the next exponent) or not:
        # the rounding below decides, exactly where it must (mant rounded up to 999999.5
        # from below, as 99.99995 * 1e4 is, is 999999 and "99.9999")
        if mant >= 1000000.0:
            e += 1
            continue
        if mant < 99999.5:
            e -= 1
            continue
        fl = np.floor(mant)
        frac = mant - fl
        up = frac > 0.5
        if abs(frac - 0.5) < 1e-6:
            # too close to call from the rounded product: compare the exact value with the
            # midpoint (fl + 0.5) * 10**(e - 5) by error-free products
            half = fl + 0.5
            if 0 <= k <= 22:
                hi, lo = _two_prod_py(a, pow_pos[k])
                side = (hi - half) + lo
            elif -22 <= k < 0:
                hi, lo = _two_prod_py(half, pow_pos[-k])
                side = (a - hi) - lo
            else:
                break
            up = side > 0 or (side == 0 and np.floor(fl / 2) * 2 != fl)  # ties to even
        r = np.int64(fl) + (1 if up else 0)
        if r >= 1000000:
            r = np.int64(100000)
            e += 1
        ok = True
        break
    if not ok:
        return -1
    # the digits, each from r directly (r // 10**j as (r * ceil(2**40 / 10**j)) >> 40, exact
    # for r < 2**20): no chain of divisions, each waiting for the one before
    q1 = (r * 109951162778) >> 40
    q2 = (r * 10995116278) >> 40
    q3 = (r * 1099511628) >> 40
    q4 = (r * 109951163) >> 40
    q5 = (r * 10995117) >> 40
    d1 = q4 - q5 * 10
    d2 = q3 - q4 * 10
    d3 = q2 - q3 * 10
    d4 = q1 - q2 * 10
    d5 = r - q1 * 10
    digits[0] = 48 + q5
    digits[1] = 48 + d1
    digits[2] = 48 + d2
    digits[3] = 48 + d3
    digits[4] = 48 + d4
    digits[5] = 48 + d5
    last = 0  # the last significant digit (no trailing zeros are written)
    if d1 != 0:
        last = 1
    if d2 != 0:
        last = 2
    if d3 != 0:
        last = 3
    if d4 != 0:
        last = 4
    if d5 != 0:
        last = 5
    if 0 <= e < 6:  # digits[0..e] '.' digits[e+1..last]: seven stores, then the length
        for j in range(7):
            buf[at + j] = digits[j] if j <= e else (46 if j == e + 1 else digits[j - 1])
        return at + (last + 2 if last > e else e + 1)
    if -4 <= e < 0:  # "0.", -e-1 zeros, digits[0..last]
        for j in range(5):
            buf[at + j] = 46 if j == 1 else 48
        at += 1 - e
        for j in range(6):
            buf[at + j] = digits[j]
        return at + last + 1
    buf[at] = digits[0]
    at += 1
    if last > 0:
        buf[at] = 46
        at += 1
        for d in range(1, last + 1):
            buf[at] = digits[d]
            at += 1
    buf[at] = 101
    buf[at + 1] = 45 if e < 0 else 43
    at += 2
    ex = -e if e < 0 else e
    if ex < 10:
        buf[at] = 48
        at += 1
    at = _put_uint_py(buf, at, np.uint64(ex))
    return at


def _format_lines_py(values: Any, bits: Any, pow_pos: Any, p10: Any, head: Any, texts: Any,
                     text_ends: Any, word_last: Any, word: Any, comma_first: bool, tail: Any,
                     repeats: Any, buf: Any, ends: Any, fallback: Any) -> None:
    """Row ``i`` of ``values`` as one line in ``buf`` (ending at ``ends[i]``): ``head``, the
    row's own text (``texts[text_ends[i-1]:text_ends[i]]``), the cells as ``_put_cell_py``
    writes them joined by commas (one before the first cell too when ``comma_first``), then
    ``tail``. NaN and infinities are empty cells; where ``word_last[i]``, the last cell is
    ``word`` instead of its number. A cell ``_put_cell_py`` cannot decide is left empty and
    sets ``fallback[i]``: the caller writes that row itself.

    ``repeats``: (R, 3) blocks of columns (start, source start, length; the source block
    before the block, neither holding the last column) whose text is copied from the source
    block's where a row's values are the same in both, bit for bit (the same numbers make the
    same text): a workload that does only random I/O has the same metrics in its overall and
    random views."""
    n, m = values.shape
    digits = np.empty(6, dtype=np.uint8)
    rep_of = np.full(m, -1, dtype=np.int64)
    for r in range(repeats.shape[0]):
        rep_of[repeats[r, 0]] = r
    cell_at = np.zeros(m, dtype=np.int64)  # where each cell's text starts and ends in the row
    cell_end = np.zeros(m, dtype=np.int64)
    at = 0
    t0 = 0
    for i in range(n):
        for j in range(head.size):
            buf[at + j] = head[j]
        at += head.size
        t1 = text_ends[i]
        for j in range(t0, t1):
            buf[at] = texts[j]
            at += 1
        t0 = t1
        col = 0
        while col < m:
            if col or comma_first:
                buf[at] = 44
                at += 1
            r = rep_of[col]
            if r >= 0:
                src, length = repeats[r, 1], repeats[r, 2]
                same = True
                for j in range(length):
                    if bits[i, src + j] != bits[i, col + j]:
                        same = False
                        break
                if same:
                    a0, a1 = cell_at[src], cell_end[src + length - 1]
                    for j in range(a1 - a0):  # earlier in the line: no overlap
                        buf[at + j] = buf[a0 + j]
                    for j in range(length):
                        cell_at[col + j] = cell_at[src + j] + at - a0
                        cell_end[col + j] = cell_end[src + j] + at - a0
                    at += a1 - a0
                    col += length
                    continue
            cell_at[col] = at
            if col == m - 1 and word_last[i]:
                for j in range(word.size):
                    buf[at + j] = word[j]
                at += word.size
            else:
                x = values[i, col]
                if np.isfinite(x):
                    end = _put_cell_py(buf, at, x, bits[i, col], pow_pos, p10, digits)
                    if end < 0:
                        fallback[i] = True
                    else:
                        at = end
            cell_end[col] = at
            col += 1
        for j in range(tail.size):
            buf[at + j] = tail[j]
        at += tail.size
        ends[i] = at


# ----------------------------------------------------------------------------- the C functions
_P = ctypes.c_void_p  # an array's data, as its address (``ndarray.ctypes.data``)
_I = ctypes.c_int64
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "ivc_format_lines": (_I, [_P, _I, _I, ctypes.c_char_p, _I, ctypes.c_char_p, _I, _P, _P,
                              ctypes.c_char_p, _I, _I, ctypes.c_char_p, _I, _P, _I, _P, _P,
                              _P]),
    "ivc_gather_texts": (_I, [ctypes.c_char_p, _I, _P, _I, _P, _I, _P, _P]),
    "ivc_write_lines": (_I, [_P, _I, _P, _I, _P, _I, _I, _P, _P, _I, _P]),
    "ivc_create_files": (_I, [ctypes.c_char_p, _P, _I, ctypes.c_char_p, _I, _P, _P, _P, _P]),
    "ivc_create_headed": (_I, [_I, ctypes.c_char_p, _P, _I, ctypes.c_char_p, _I, _I, _P, _P]),
}
_functions: dict[str, Any] = {}


def _c(name: str) -> Any:
    """The C function ``name`` of ``native.library()``, its types set on first use."""
    fn = _functions.get(name)
    if fn is None:
        fn = getattr(native.library(), name)
        fn.restype, fn.argtypes = _SIGNATURES[name]
        _functions[name] = fn
    return fn


def _address(a: npt.NDArray[Any]) -> int:
    """The address of a C-contiguous array's data (about 1 us: the arrays a call takes are few)."""
    return a.ctypes.data


class _Buffer:
    """An output buffer kept between calls (no page faults per call), and its address."""

    def __init__(self) -> None:
        self.array = np.empty(0, dtype=np.uint8)
        self.address = _address(self.array)
        self.size = 0

    def resize(self, size: int) -> None:
        self.array = np.empty(size, dtype=np.uint8)
        self.address, self.size = _address(self.array), size


_local = threading.local()  # each thread's format_lines buffer (``_rows``)


def _rows() -> _Buffer:
    """This thread's ``format_lines`` buffer: threads that format at once (the step's
    histogram files) each write their own."""
    buffer: _Buffer | None = getattr(_local, "rows", None)
    if buffer is None:
        buffer = _local.rows = _Buffer()
    return buffer


_NO_BLOCKS = np.zeros((0, 3), dtype=np.int64)


def format_lines(values: npt.NDArray[np.float64], head: bytes = b"", texts: bytes = b"",
                 text_ends: npt.NDArray[np.int64] | None = None,
                 word_last: npt.NDArray[np.bool_] | None = None, word: bytes = b"",
                 comma_first: bool = False, tail: bytes = b"",
                 repeats: Sequence[tuple[int, int, int]] = ()
                 ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Rows of ``values`` as lines of ``fmt`` cells (see ``_format_lines_py``): the bytes
    (ASCII), where each line ends in them, and which rows the caller must write itself. The
    bytes are a view of this thread's buffer, kept between calls (no page faults per call):
    valid until the thread's next call. ``repeats``: blocks of columns (start, source start,
    length) that take their source block's text where their values are the same.
    ``text_ends`` and ``word_last`` have a value per row; ``text_ends`` rises to at most
    ``len(texts)``."""
    n, m = values.shape
    blocks = np.array(repeats, dtype=np.int64).reshape(-1, 3) if len(repeats) else _NO_BLOCKS
    taken = np.zeros(m, dtype=np.bool_)
    for start, src, length in blocks.tolist():
        if not (length > 0 and src >= 0 and src + length <= start and start + length < m
                and not taken[start:start + length].any()):
            raise ValueError(f"repeated block {start, src, length} must follow its source, "
                             f"not overlap another, and leave the last of {m} columns")
        taken[start:start + length] = True
    if text_ends is not None:
        text_ends = np.ascontiguousarray(text_ends, dtype=np.int64)
        if text_ends.shape != (n,):
            raise ValueError(f"{n} rows but text ends of shape {text_ends.shape}")
    if word_last is not None:
        word_last = np.ascontiguousarray(word_last, dtype=np.bool_)
        if word_last.shape != (n,):
            raise ValueError(f"{n} rows but words of shape {word_last.shape}")
    head, texts, word, tail = bytes(head), bytes(texts), bytes(word), bytes(tail)
    need = (n * (len(head) + len(tail) + m * (_CELL_MAX + 1) + max(len(word) - _CELL_MAX, 0))
            + len(texts) + 2 * _CELL_MAX)
    rows = _rows()
    if rows.size < need:
        rows.resize(need)
    ends = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=np.bool_)
    values = np.ascontiguousarray(values, dtype=np.float64)
    done = _c("ivc_format_lines")(
        _address(values), n, m, head, len(head), texts, len(texts),
        None if text_ends is None else _address(text_ends),
        None if word_last is None else _address(word_last), word, len(word),
        1 if comma_first else 0, tail, len(tail), _address(blocks) if blocks.size else None,
        blocks.shape[0], rows.address, _address(ends), _address(fallback))
    if done == -1:
        raise ValueError(f"text ends must rise from 0 to at most the {len(texts)} bytes of "
                         "texts")
    if done != 0:
        raise MemoryError("format_lines: no memory for a row's cell offsets")
    return rows.array[:int(ends[-1]) if n else 0], ends, fallback


def _gather_texts_py(data: Any, ends: Any, which: Any, out: Any, out_ends: Any) -> None:
    """Texts ``which[0], which[1], ...`` of ``data`` (text i is ``data[ends[i-1]:ends[i]]``)
    one after another into ``out``, each ending at ``out_ends[j]``."""
    at = 0
    for j in range(which.size):
        i = which[j]
        a = ends[i - 1] if i else 0
        for k in range(a, ends[i]):
            out[at] = data[k]
            at += 1
        out_ends[j] = at


def gather_texts(data: bytes, ends: npt.NDArray[np.int64], which: npt.NDArray[np.intp]
                 ) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The texts ``which[0], which[1], ...`` (repeats allowed) of ``data`` (text i ends at
    ``ends[i]``), one after another, and where each ends. ``ends`` rises to at most
    ``len(data)``."""
    if which.size and (int(which.min()) < 0 or int(which.max()) >= ends.size):
        raise ValueError(f"texts {int(which.min())}..{int(which.max())} of {ends.size}")
    data = bytes(data)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    which = np.ascontiguousarray(which, dtype=np.int64)
    lengths = np.diff(ends, prepend=0)
    out = np.empty(max(int(lengths[which].sum()), 0), dtype=np.uint8)  # < 0: refused
    out_ends = np.empty(which.size, dtype=np.int64)
    if _c("ivc_gather_texts")(data, len(data), _address(ends), ends.size, _address(which),
                              which.size, _address(out), _address(out_ends)) != 0:
        raise ValueError(f"text ends must rise from 0 to at most the {len(data)} bytes of data")
    return out.tobytes(), out_ends


# ----------------------------------------------------------------------------- appending lines
#: ``write_lines``' fd for a line it appends by its file's path (open, write, close).
BY_PATH = -1
#: ``write_lines``' fd for a line it leaves alone (the caller writes it).
SKIP = -2
#: ``write_lines``' failure kinds: ``open`` or ``write`` failed (the caller repeats the rest of
#: the line to raise its error), or ``close`` failed after the whole line was written.
FAILED_WRITE, FAILED_CLOSE = 0, 1
#: open(path, flags): no O_CREAT (a removed file is not made again)
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
#: ``write_lines``' directory for paths when none is open: the process's working directory
#: (Linux's ``AT_FDCWD``)
AT_FDCWD = -100


def _write_lines_py(fds: Any, data: Any, ends: Any, first: int, at: int, paths: Any,
                    path_at: Any, dirfd: int = AT_FDCWD) -> tuple[int, int, int]:
    """Append line ``i`` (``data[ends[i-1]:ends[i]]``) to its file, for ``i`` from ``first``
    on; line ``first`` from offset ``at`` of ``data`` (its start, or where an earlier call
    stopped). The file is open as ``fds[i]``, or, where ``fds[i]`` is ``BY_PATH``, opened for
    appending by its path (``paths[path_at[i]:]``, NUL-terminated; a relative one from the
    directory open as ``dirfd``), written and closed. A line
    whose fd is ``SKIP`` is left alone. A short write goes on with the rest. Returns
    ``(-1, 0, 0)`` when all are written, else the line that failed, the offset it stopped at
    and ``FAILED_WRITE`` (``open`` or ``write`` failed: the caller repeats them to raise their
    error; the error itself is not kept here) or ``FAILED_CLOSE``."""
    raw = np.ascontiguousarray(data, dtype=np.uint8).data
    names = bytes(paths)
    for i in range(first, fds.size):
        end = int(ends[i])
        if i > first:
            at = int(ends[i - 1])
        fd = int(fds[i])
        if fd == SKIP:
            continue
        by_path = fd == BY_PATH
        if by_path:
            p = int(path_at[i])
            try:
                fd = os.open(names[p:names.index(b"\0", p)], _APPEND_FLAGS,
                             dir_fd=None if dirfd == AT_FDCWD else dirfd)
            except OSError:
                return i, at, FAILED_WRITE
        while at < end:
            try:
                n = os.write(fd, raw[at:end])
            except OSError:
                n = -1
            if n <= 0:
                if by_path:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                return i, at, FAILED_WRITE
            at += n
        if by_path:
            try:
                os.close(fd)
            except OSError:
                return i, at, FAILED_CLOSE
    return -1, 0, FAILED_WRITE


_Stop = ctypes.c_int64 * 2  # where ivc_write_lines stopped, and why
_NO_PATHS = "lines to append by path, but no paths"


def write_lines(fds: npt.NDArray[np.int32], data: npt.NDArray[np.uint8],
                ends: npt.NDArray[np.int64], first: int = 0, at: int | None = None,
                paths: npt.NDArray[np.uint8] | None = None,
                path_at: npt.NDArray[np.int64] | None = None, dirfd: int = AT_FDCWD
                ) -> tuple[int, int, int]:
    """``_write_lines_py``: one ``write`` call per line, from compiled code (12,604 instance
    files per subinterval cost about 18 ms of system calls on tmpfs, and as much again in
    Python's per-call work), and for the files kept closed one ``open`` and one ``close``
    more (about 5 us of system calls per file on tmpfs, and as much again in Python).
    ``at``: where in ``data`` to start (default: line ``first``'s start). ``paths`` and
    ``path_at`` are needed when some fd is ``BY_PATH``; a relative path is from the directory
    open as ``dirfd`` (its walk from ``/`` on each open costs about 0.5 us on tmpfs, 50 ms a
    subinterval at 100,000 files kept closed). ``ends``: a line's end in ``data`` per fd."""
    if data.size == 0 or fds.size <= first:
        return -1, 0, FAILED_WRITE
    fds = np.ascontiguousarray(fds, dtype=np.int32)
    if fds.size and int(fds.min()) < SKIP:
        raise ValueError(f"fd {int(fds.min())}: neither a descriptor, BY_PATH nor SKIP")
    path_address: int | None = None  # none: the C refuses a BY_PATH fd (-3)
    path_at_address: int | None = None
    if paths is not None and path_at is not None:
        if (path_at.shape != fds.shape or paths[-1:].tobytes() != b"\0" or (
                path_at.size and not 0 <= int(path_at.min()) <= int(path_at.max()) < paths.size)):
            raise ValueError(f"{path_at.size} path offsets for {fds.size} lines, not all in the "
                             f"{paths.size} bytes of paths, or paths not NUL-terminated")
        paths = np.ascontiguousarray(paths, dtype=np.uint8)  # held until the call returns
        path_at = np.ascontiguousarray(path_at, dtype=np.int64)
        path_address, path_at_address = _address(paths), _address(path_at)
    data = np.ascontiguousarray(data, dtype=np.uint8)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if ends.size < fds.size:
        if path_address is None and (fds == BY_PATH).any():
            raise ValueError(_NO_PATHS)
        raise ValueError(f"{ends.size} line ends for {fds.size} lines")
    if at is None:
        at = int(ends[first - 1]) if first > 0 else 0
    stop = _Stop()
    i = _c("ivc_write_lines")(_address(fds), fds.size, _address(data), data.size,
                              _address(ends), first, at, path_address, path_at_address, dirfd,
                              stop)
    if i == -3:
        raise ValueError(_NO_PATHS)
    if i == -2:
        raise ValueError(f"lines from {first}, offset {at}: not all in the {data.size} bytes "
                         "of data")
    return int(i), int(stop[0]), int(stop[1])


def format_rows(values: npt.NDArray[np.float64]
                ) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Rows of ``values`` as comma-joined ``fmt`` cells: the text (ASCII, so offsets in it are
    byte offsets), where each row ends in it, and which rows the caller must format itself."""
    data, ends, fallback = format_lines(values)
    return data.tobytes().decode("ascii"), ends, fallback


# ----------------------------------------------------------------------------- new files
def _create_files_py(paths: Sequence[str], head: bytes, data: Any, starts: Any, ends: Any
                     ) -> tuple[int, int]:
    """File ``i`` made new at ``paths[i]`` (``O_EXCL``) holding ``head`` then
    ``data[starts[i]:ends[i]]``, for each ``i`` whose ``starts[i]`` is not negative, in order;
    (-1, 0) once all are written, else (the ``i`` that failed, its errno), a file made in part
    removed."""
    for i, path in enumerate(paths):
        if starts[i] < 0:
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            return i, exc.errno or 0
        try:
            try:
                for part in (head, bytes(data[starts[i]:ends[i]])):
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return i, exc.errno or 0
    return -1, 0


def create_files(paths: Sequence[str], head: bytes, data: npt.NDArray[np.uint8],
                 starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> tuple[int, int]:
    """``_create_files_py`` in C, in one call (the GIL released): (-1, 0), or the file that
    failed and its errno. ``starts`` and ``ends`` hold a byte range of ``data`` per path
    (``starts[i]`` negative: path ``i`` is the caller's to write)."""
    n = len(paths)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if starts.shape != (n,) or ends.shape != (n,):
        raise ValueError(f"{n} paths but byte ranges of shapes {starts.shape}, {ends.shape}")
    used = starts >= 0
    if used.any() and (int(ends[used].max()) > data.size
                       or bool((ends[used] < starts[used]).any())):
        raise ValueError(f"byte ranges outside the {data.size} bytes of data")
    encoded = [os.fsencode(p) for p in paths]
    if any(b"\0" in p for p in encoded):
        raise ValueError("a path holds a NUL byte")
    buffer = b"\0".join(encoded) + b"\0"
    path_at = np.zeros(n, dtype=np.int64)
    if n > 1:
        path_at[1:] = np.cumsum([len(p) + 1 for p in encoded[:-1]])
    err = np.zeros(1, dtype=np.int64)
    i = _c("ivc_create_files")(buffer, _address(path_at), n, bytes(head), len(head),
                               _address(data) if data.size else None, _address(starts),
                               _address(ends), _address(err))
    return int(i), int(err[0])



#: how ``create_headed`` makes each file: new (never over one that exists), for appending
HEADED_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC


def _create_headed_py(dir_fd: int, names: Sequence[str], head: bytes, keep: int
                      ) -> tuple[npt.NDArray[np.int32], int, int]:
    """File ``names[i]`` made new in the directory ``dir_fd`` for appending, holding ``head``,
    its descriptor kept open for ``i < keep`` and closed otherwise (-1). (The descriptors, -1,
    0) once all are made; else (the descriptors, the ``i`` that failed, its errno): that file
    removed if it was made, the files before it standing, as the descriptors say."""
    fds = np.full(len(names), -1, dtype=np.int32)
    for i, name in enumerate(names):
        try:
            fd = os.open(name, HEADED_FLAGS, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            return fds, i, exc.errno or 0
        try:
            view = memoryview(head)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            return fds, i, exc.errno or 0
        if i < keep:
            fds[i] = fd
            continue
        try:
            os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            return fds, i, exc.errno or 0
    return fds, -1, 0


def create_headed(dir_fd: int, names: Sequence[str], head: bytes, keep: int
                  ) -> tuple[npt.NDArray[np.int32], int, int]:
    """``_create_headed_py`` in C, in one call (the GIL released): a directory's new result
    files, tens of thousands at a step's start."""
    n = len(names)
    encoded = [os.fsencode(name) for name in names]
    if any(b"\0" in e or b"/" in e or not e for e in encoded):
        raise ValueError("a name is empty, or holds a / or a NUL byte")
    buffer = b"\0".join(encoded) + b"\0"
    name_at = np.zeros(n, dtype=np.int64)
    if n > 1:
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        np.cumsum(lengths[:-1] + 1, out=name_at[1:])
    fds = np.full(n, -1, dtype=np.int32)
    err = np.zeros(1, dtype=np.int64)
    i = _c("ivc_create_headed")(dir_fd, buffer, _address(name_at), n, bytes(head), len(head),
                                max(0, keep), _address(fds), _address(err))
    return fds, int(i), int(err[0])
