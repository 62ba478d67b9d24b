"""master.results.csvkernels: the C kernels (csvkernels.c) against their Python references
(``_<name>_py``) and against ``fmt``, on many doubles and on real files."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from master.analysis import native
from master.results import csvkernels as ck
from master.results.csvfiles import CsvAppender, fmt, format_float_rows
from master.results.output import RunOutput
from protocol.errors import OutputError

SOURCE = Path(ck.__file__).with_suffix(".c")
needs_cc = pytest.mark.skipif(not native.compiler(), reason="no C compiler here")

Doubles = npt.NDArray[np.float64]


@needs_cc
def test_the_source_compiles_without_a_warning(tmp_path: Path) -> None:
    """With the build's own compiler and flags, alone (it must not need kernels.c)."""
    done = subprocess.run([*native.compiler(), *native.FLAGS, "-Wextra", "-Werror", "-o",
                           str(tmp_path / "csv.so"), str(SOURCE), *native.LIBS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_exported_names_are_prefixed_and_the_helpers_static() -> None:
    """Both C files are one object: csvkernels.c exports ivc_ names only."""
    src = SOURCE.read_text()
    defined = re.findall(r"^(?!static\b)[a-z][\w ]*?\b(\w+)\(", src, re.MULTILINE)
    assert defined and all(name.startswith("ivc_") for name in defined), defined


def test_the_c_powers_of_ten_are_pythons() -> None:
    """The decimal exponent's first guess reads the same table in both (hexadecimal
    literals in the C, ``10.0 ** k`` in Python)."""
    table = SOURCE.read_text().split("p10[2 * P10_BIAS + 1] = {", 1)[1].split("};", 1)[0]
    values = [float.fromhex(h) for h in re.findall(r"0x[0-9a-f.]+p[-+]\d+", table)]
    assert values == ck._P10.tolist()


# ----------------------------------------------------------------------------- the doubles
def _near(centres: list[float], rng: np.random.Generator, n: int) -> Doubles:
    """Each centre and its neighbours a few units in the last place away, both signs."""
    c = np.array(centres)[rng.integers(0, len(centres), n)]
    steps = rng.integers(-6, 7, n).astype(np.float64)
    out: Doubles = np.where(rng.random(n) < 0.5, -1.0, 1.0) * (c + steps * np.spacing(c))
    return out


def _ties(rng: np.random.Generator, n: int) -> Doubles:
    """Six digits and a half (ties at the sixth significant digit, in decimal), at decimal
    exponents from -36 to 15, and their binary neighbours."""
    x = (rng.integers(100_000, 1_000_000, n) + 0.5) * 10.0 ** rng.integers(-41, 10, n)
    nudged = rng.random(n) < 0.3
    x[nudged] = np.nextafter(x[nudged], np.where(rng.random(int(nudged.sum())) < 0.5,
                                                 np.inf, -np.inf))
    return x


def _next_exponent(rng: np.random.Generator, n: int) -> Doubles:
    """Seven digits ending in 5 that round up to the next power of ten, or not, by their
    binary value (99.99995 is 99.999949999..., so "99.9999"), and their neighbours."""
    d = rng.choice(np.array([9.999995, 9.9999949999, 9.9999950001, 1.999995, 9.99995]), n)
    x = d * 10.0 ** rng.integers(-35, 10, n)
    x = np.array([float(f"{v:.10g}") for v in x.tolist()])  # the decimal's nearest double
    away = np.where(rng.random(n) < 0.5, np.inf, -np.inf)
    return np.where(rng.random(n) < 0.5, x, np.nextafter(x, away))


DOUBLES: dict[str, Callable[[np.random.Generator, int], Doubles]] = {
    "random bits": lambda rng, n: rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64),
    "random bits, decided exponents": lambda rng, n: (
        (rng.integers(0, 2**52, n, dtype=np.uint64)
         | (rng.integers(1023 - 100, 1023 + 50, n).astype(np.uint64) << np.uint64(52))
         | (rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63))).view(np.float64)),
    "near 999,999.5": lambda rng, n: _near([999_999.5, 999_999.0, 1e6, 99_999.5], rng, n),
    "near 1e15": lambda rng, n: _near([1e15, 1e15 - 0.5, 1e15 - 1.5], rng, n),
    "near 1e-30": lambda rng, n: _near([1e-30, 1.000005e-30, 9.999995e-31], rng, n),
    "near powers of ten": lambda rng, n: _near(
        [10.0 ** k for k in range(-31, 16)], rng, n),
    "ties, decimal": _ties,
    "rounding to the next exponent": _next_exponent,
    "ties, short": lambda rng, n: np.array([0.1234565, 1.5, 2.5, 2.5e-7, 0.5, 123456.5,
                                            1234565.0, 999999.5, 1000000.5, 1000001.5,
                                            0.0001234565, 9.999995e-5, 99999.95, 1e-5,
                                            12345650.0, 2.5e-30, 5e15 + 0.5] * (n // 17)),
    "zeros and subnormals": lambda rng, n: np.concatenate([
        [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308],
        rng.integers(1, 2**52, n - 6, dtype=np.uint64).view(np.float64)
        * np.where(rng.random(n - 6) < 0.5, -1.0, 1.0)]),
    "integers to 2**53": lambda rng, n: np.concatenate([
        rng.integers(0, 2**53, n // 2).astype(np.float64),
        rng.integers(0, 10 ** rng.integers(1, 16, n - n // 2)).astype(np.float64)]),
    "halves to 2**52": lambda rng, n: rng.integers(0, 2**52, n).astype(np.float64) + 0.5,
    # a histogram file's counts: whole numbers below 1e6 take a path of their own in the C
    "whole numbers below 1e6": lambda rng, n: np.concatenate([
        rng.integers(-999_999, 1_000_000, n - 8).astype(np.float64),
        [999_999.0, -999_999.0, 1.0, -1.0, 999_998.0, 100_000.0, 10.0, 7.0]]),
    "metric-like": lambda rng, n: np.concatenate([
        rng.lognormal(0, 4, n // 2), rng.integers(0, 10**9, n - n // 2)
        / 10.0 ** rng.integers(0, 13, n - n // 2)]),
}


def _finite(x: Doubles) -> Doubles:
    return np.ascontiguousarray(x[np.isfinite(x)])


def _c_cells(x: Doubles) -> tuple[list[str], npt.NDArray[np.bool_]]:
    """Each double's cell as the C writes it alone on a line, and whether it left it."""
    data, ends, fallback = ck.format_lines(x.reshape(-1, 1))
    text = data.tobytes().decode("ascii")
    starts = np.concatenate([[0], ends[:-1]])
    return [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)], fallback


def _reference_lines(values: Doubles, head: bytes = b"", texts: bytes = b"",
                     text_ends: npt.NDArray[np.int64] | None = None,
                     word_last: npt.NDArray[np.bool_] | None = None, word: bytes = b"",
                     comma_first: bool = False, tail: bytes = b"",
                     repeats: npt.NDArray[np.int64] | None = None
                     ) -> tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``_format_lines_py`` called as ``format_lines`` calls the C."""
    n, m = values.shape
    values = np.ascontiguousarray(values)
    buf = np.zeros(n * (len(head) + len(tail) + len(word) + m * 17) + len(texts) + 32,
                   dtype=np.uint8)
    ends = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=np.bool_)
    ck._format_lines_py(
        values, values.view(np.int64), ck._POW_POS, ck._P10, as_u8(head), as_u8(texts),
        np.zeros(n, dtype=np.int64) if text_ends is None else text_ends,
        np.zeros(n, dtype=np.bool_) if word_last is None else word_last, as_u8(word),
        comma_first, as_u8(tail),
        np.zeros((0, 3), dtype=np.int64) if repeats is None else repeats, buf, ends, fallback)
    return buf[:int(ends[-1]) if n else 0].tobytes(), ends, fallback


def as_u8(data: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(data, dtype=np.uint8)


@pytest.mark.parametrize("kind", DOUBLES)
def test_cells_are_fmts_where_the_c_decides(kind: str) -> None:
    """Every cell the C writes is ``fmt``'s text; the cells it leaves are written by
    ``format_float_rows`` with ``fmt``, so every row is ``fmt``'s."""
    x = _finite(DOUBLES[kind](np.random.default_rng(len(kind)), 40_000))
    cells, fallback = _c_cells(x)
    want = [fmt(v) for v in x.tolist()]
    decided = ~fallback
    assert [c for c, d in zip(cells, decided.tolist(), strict=True) if d] == [
        w for w, d in zip(want, decided.tolist(), strict=True) if d]
    assert [c for c, d in zip(cells, decided.tolist(), strict=True) if not d] == [
        ""] * int(fallback.sum())  # a left cell is empty
    assert format_float_rows(x.reshape(-1, 1)) == want
    a = np.abs(x)
    assert fallback[(a >= 1e15) | ((a < 1e-30) & (a != 0))].all()  # never decided


@pytest.mark.parametrize("kind", DOUBLES)
def test_cells_and_the_cells_left_are_the_references(kind: str) -> None:
    """Byte for byte and cell for cell, the C is ``_put_cell_py``: the same text where it
    decides, and the same cells left to Python."""
    x = _finite(DOUBLES[kind](np.random.default_rng(len(kind) + 100), 1_500))
    rows = x.reshape(-1, 1)
    data, ends, fallback = ck.format_lines(rows)
    assert (data.tobytes(), ends.tolist(), fallback.tolist()) == tuple(
        (r if isinstance(r, bytes) else r.tolist()) for r in _reference_lines(rows))


@pytest.mark.parametrize(("value", "text"), [
    (99.99995, "99.9999"), (99999.95, "99999.9"), (9.999995e-8, "9.99999e-08"),
    (9.999995e-12, "9.99999e-12"), (0.9999995, "1"), (99999.5, "99999.5"),
    (999999.4999999999, "999999"), (9.9999951, "10"), (-0.0, "-0"), (0.1234565, "0.123456"),
    (2.5e-7, "2.5e-07"), (1.5, "1.5"), (9.999995e-26, ""),  # the last left to Python
])
def test_cells_at_the_edges(value: float, text: str) -> None:
    """A six-digit rounding up to the next power of ten is decided on the binary value
    (numba's kernel, which the C replaced, wrote "100" for 99.99995)."""
    cells, fallback = _c_cells(np.array([value]))
    assert (cells[0], bool(fallback[0])) == (text, text == "")
    assert text == "" or text == fmt(value)


def test_ordinary_values_are_all_decided() -> None:
    """Metric-like magnitudes, ties in decimal included, leave nothing to Python (the set the
    C leaves is the reference's: a binary rounding too close to call)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([DOUBLES["metric-like"](rng, 50_000), DOUBLES["ties, short"](rng, 1_700),
                        DOUBLES["integers to 2**53"](rng, 10_000)])
    x = x[np.abs(x) < 1e15]
    cells, fallback = _c_cells(x)
    assert not fallback.any()
    assert cells == [fmt(v) for v in x.tolist()]


@pytest.mark.parametrize("seed", range(6))
def test_lines_are_the_references(seed: int) -> None:
    """Heads, texts, the word in the last cell, the first comma, tails, NaN and infinities,
    and repeated blocks copied where their values are the same bit for bit (-0.0 is not
    0.0)."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 60)), 12
    values = rng.lognormal(0, 5, (n, m)) * np.where(rng.random((n, m)) < 0.2, -1, 1)
    values[rng.random((n, m)) < 0.1] = np.nan
    values[rng.random((n, m)) < 0.05] = np.inf
    values[rng.random((n, m)) < 0.05] = 1e20  # left to Python
    same = rng.random(n) < 0.6
    values[same, 6:9] = values[same, 1:4]
    values[same & (rng.random(n) < 0.3), 7] = -0.0
    values[same & (rng.random(n) < 0.3), 2] = 0.0
    texts = [bytes(rng.integers(97, 123, int(rng.integers(0, 8))).astype(np.uint8))
             for _ in range(n)]
    text_ends = np.cumsum([len(t) for t in texts]).astype(np.int64)
    word_last = rng.random(n) < 0.5
    repeats = [(6, 1, 3), (10, 4, 1)]
    args = (b"h,1," * int(rng.integers(0, 2)), b"".join(texts), text_ends, word_last,
            b"max" if seed % 2 else b"a-word-longer-than-a-cell", bool(seed % 3), b"\r\n")
    data, ends, fallback = ck.format_lines(values, *args, repeats)
    want = _reference_lines(values, *args, np.array(repeats, dtype=np.int64))
    assert data.tobytes() == want[0]
    assert ends.tolist() == want[1].tolist() and fallback.tolist() == want[2].tolist()
    plain = ck.format_lines(values, *args)
    assert (plain[0].tobytes(), plain[1].tolist()) == (want[0], want[1].tolist())


def test_format_lines_refuses_what_it_would_read_out_of_range() -> None:
    values = np.ones((3, 2))
    with pytest.raises(ValueError, match="rise from 0 to at most the 2 bytes"):
        ck.format_lines(values, texts=b"ab", text_ends=np.array([1, 3, 3]))
    with pytest.raises(ValueError, match="rise from 0"):
        ck.format_lines(values, texts=b"ab", text_ends=np.array([2, 1, 2]))
    with pytest.raises(ValueError, match="text ends of shape"):
        ck.format_lines(values, texts=b"ab", text_ends=np.array([1, 2]))
    with pytest.raises(ValueError, match="words of shape"):
        ck.format_lines(values, word_last=np.zeros(4, dtype=np.bool_), word=b"w")
    assert ck.format_lines(np.ones((0, 2)))[0].size == 0


@pytest.mark.parametrize("seed", range(4))
def test_gather_texts_is_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, int(rng.integers(1, 40)))
    data = bytes(rng.integers(0, 256, int(lengths.sum())).astype(np.uint8))
    ends = np.cumsum(lengths).astype(np.int64)
    which = rng.integers(0, ends.size, int(rng.integers(0, 80)))
    got, got_ends = ck.gather_texts(data, ends, which)
    out = np.zeros(len(got), dtype=np.uint8)
    out_ends = np.zeros(which.size, dtype=np.int64)
    ck._gather_texts_py(np.frombuffer(data, dtype=np.uint8), ends, which, out, out_ends)
    assert (got, got_ends.tolist()) == (out.tobytes(), out_ends.tolist())
    with pytest.raises(ValueError, match="rise from 0"):
        ck.gather_texts(data[:-1] if data else b"", ends + (0 if data else 1), which[:1])
    with pytest.raises(ValueError, match="rise from 0"):
        ck.gather_texts(b"abc", np.array([3, 1]), np.array([1]))


# ----------------------------------------------------------------------------- appending lines
def _paths(files: list[Path]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    encoded = [os.fsencode(f) + b"\0" for f in files]
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts


def _append_all(write: Callable[..., tuple[int, int, int]], folder: Path, dirfd: int | None = None
                ) -> tuple[list[tuple[int, int, int]], list[str | None]]:
    """Lines to files in ``folder``: held open, a held descriptor since closed, one open for
    reading only, appended by path (by their names from ``dirfd`` where given, ``folder``
    open), one removed, skipped; after each failure the rest from the next line on, as
    ``CsvAppender.append_block`` goes on. Returns every call's result and each file's text
    afterwards (None: no such file)."""
    names = [f"f{i}.csv" for i in range(8)]
    files = [folder / name for name in names]
    for f in files:
        f.write_text("h\n")
    (folder / "f5.csv").unlink()
    held = os.open(files[0], os.O_WRONLY | os.O_APPEND)
    closed = os.open(files[1], os.O_WRONLY | os.O_APPEND)
    read_only = os.open(files[2], os.O_RDONLY)
    os.close(closed)  # its number leads nowhere until a file is opened by path
    lines = [b"zero\n", b"one\n", b"two\n", b"three\n", b"", b"five\n", b"six\n",
             b"seven\n"]
    data = np.frombuffer(b"".join(lines), dtype=np.uint8)
    ends = np.cumsum([len(x) for x in lines]).astype(np.int64)
    by_path, skip = ck.BY_PATH, ck.SKIP
    fds = np.array([held, closed, read_only, by_path, by_path, by_path, skip, by_path],
                   dtype=np.int32)
    paths, path_at = _paths(files if dirfd is None else [Path(name) for name in names])
    where = () if dirfd is None else (dirfd,)
    results = []
    first = 0
    try:
        while True:
            got = write(fds, data, ends, first, int(ends[first - 1]) if first else 0, paths,
                        path_at, *where)
            results.append(got)
            if got[0] < 0:
                break
            first = got[0] + 1
    finally:
        os.close(held)
        os.close(read_only)
    return results, [f.read_text() if f.exists() else None for f in files]


def test_write_lines_is_the_reference(tmp_path: Path) -> None:
    """The same results and files as ``_write_lines_py``: a closed or read-only descriptor
    and a removed file (never created again) stop the call at their line with FAILED_WRITE,
    where the caller raises its error."""
    (tmp_path / "c").mkdir()
    (tmp_path / "py").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    got = _append_all(ck.write_lines, tmp_path / "c")
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor left behind
    want = _append_all(ck._write_lines_py, tmp_path / "py")
    assert got == want
    failed = ck.FAILED_WRITE
    assert got[0] == [(1, 5, failed), (2, 9, failed), (5, 19, failed), (-1, 0, failed)]
    assert got[1] == ["h\nzero\n", "h\n", "h\n", "h\nthree\n", "h\n", None, "h\n",
                      "h\nseven\n"]


def test_write_lines_opens_names_from_a_directory_as_the_reference_does(tmp_path: Path) -> None:
    """Paths relative to an open directory (``dirfd``, what ``AppenderGroup`` passes for a
    rollup type's folder): the same results and files as by full path and as
    ``_write_lines_py``; the working directory plays no part; an invalid ``dirfd`` fails each
    file's open like a removed file (the caller repeats it by its own path)."""
    for name in ("c", "py", "elsewhere"):
        (tmp_path / name).mkdir()
    got, want = [], []
    for write, folder, into in ((ck.write_lines, tmp_path / "c", got),
                                (ck._write_lines_py, tmp_path / "py", want)):
        dirfd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        cwd = os.getcwd()
        os.chdir(tmp_path / "elsewhere")
        try:
            into += _append_all(write, folder, dirfd)
        finally:
            os.chdir(cwd)
            os.close(dirfd)
    assert got == want == list(_append_all(ck.write_lines, tmp_path / "elsewhere"))
    assert sorted(os.listdir(tmp_path / "elsewhere")) == [f"f{i}.csv" for i in range(8) if i != 5]
    data = np.frombuffer(b"x\n", dtype=np.uint8)
    paths, path_at = _paths([Path("f0.csv")])
    for write in (ck.write_lines, ck._write_lines_py):
        assert write(np.array([ck.BY_PATH], dtype=np.int32), data, np.array([2]), 0, 0, paths,
                     path_at, -1) == (0, 0, ck.FAILED_WRITE)


def test_write_lines_refuses_what_it_would_read_out_of_range() -> None:
    data = np.frombuffer(b"x\ny\n", dtype=np.uint8)
    fds = np.array([ck.SKIP, ck.SKIP], dtype=np.int32)
    with pytest.raises(ValueError, match="1 line ends for 2 lines"):
        ck.write_lines(fds, data, np.array([2], dtype=np.int64))
    for ends in ([2, 5], [-1, 4]):
        with pytest.raises(ValueError, match="not all in the 4 bytes of data"):
            ck.write_lines(fds, data, np.array(ends, dtype=np.int64))
    for first, at in ((-1, None), (0, -1), (0, 5)):
        with pytest.raises(ValueError, match=f"lines from {first}, offset"):
            ck.write_lines(fds, data, np.array([2, 4]), first, at)
    skip3 = np.full(3, ck.SKIP, dtype=np.int32)  # ends before line first - 1 are not read
    assert ck.write_lines(skip3, data, np.array([9, 2, 4]), 2, 3) == (-1, 0, ck.FAILED_WRITE)
    assert ck.write_lines(fds, data, np.array([2, 4, 4]), 1) == (-1, 0, ck.FAILED_WRITE)


def test_append_block_names_the_file_whose_descriptor_fails(tmp_path: Path) -> None:
    """The C hands a failed write back; the appender repeats it and raises ``OutputError``
    naming its file (here a descriptor that was swapped for one open for reading only)."""
    out = RunOutput(tmp_path)
    tables = [out.table(f"t{i}.csv", ["a"]) for i in range(3)]
    fd = tables[1]._fd()
    read_only = os.open(tmp_path / "t1.csv", os.O_RDONLY)
    os.dup2(read_only, fd)
    os.close(read_only)
    data = np.frombuffer(b"0\r\n1\r\n2\r\n", dtype=np.uint8)
    with pytest.raises(OutputError, match=r"t1\.csv.*Bad file descriptor"):
        CsvAppender.append_block(tables, data, np.array([3, 6, 9], dtype=np.int64))
    out.close()
    assert [(tmp_path / f"t{i}.csv").read_text() for i in range(3)] == ["a\n0\n", "a\n", "a\n"]


def _made(paths: list[str]) -> list[bytes | None]:
    return [open(p, "rb").read() if os.path.exists(p) else None for p in paths]


def test_create_files_makes_each_file_as_the_reference_does(tmp_path: Path) -> None:
    """Files made new holding the header and their byte range, a path with a negative start
    left alone; the C and the Python reference make the same files and answer the same."""
    data = np.frombuffer(b"row one\r\nrow two\r\nrow three\r\n", dtype=np.uint8)
    starts, ends = np.array([0, 9, -1, 18, 0]), np.array([9, 18, 0, 29, 0])
    for how, make in (("c", ck.create_files), ("py", ck._create_files_py)):
        paths = [str(tmp_path / how / f"f{i}.csv") for i in range(5)]
        (tmp_path / how).mkdir()
        assert make(paths, b"h\r\n", data, starts, ends) == (-1, 0)
        assert _made(paths) == [b"h\r\nrow one\r\n", b"h\r\nrow two\r\n", None,
                                b"h\r\nrow three\r\n", b"h\r\n"]


@pytest.mark.parametrize("fault", ["exists", "no folder"])
def test_create_files_stops_at_the_first_file_it_cannot_make(tmp_path: Path, fault: str
                                                             ) -> None:
    """A file that exists is never overwritten, and one whose folder is missing is not made:
    the index of the first such path and its errno, the files before it made, none after."""
    data = np.frombuffer(b"abcdef", dtype=np.uint8)
    starts, ends = np.array([0, 2, 4]), np.array([2, 4, 6])
    for how, make in (("c", ck.create_files), ("py", ck._create_files_py)):
        (tmp_path / how).mkdir()
        paths = [str(tmp_path / how / n) for n in ("a", "b", "c")]
        if fault == "exists":
            Path(paths[1]).write_bytes(b"kept")
            want = (1, errno.EEXIST)
        else:
            paths[1] = str(tmp_path / how / "missing" / "b")
            want = (1, errno.ENOENT)
        assert make(paths, b"", data, starts, ends) == want
        assert _made(paths) == [b"ab", b"kept" if fault == "exists" else None, None]


def test_create_files_removes_a_file_it_could_write_only_in_part(tmp_path: Path) -> None:
    """A write that fails (here past the process's file size limit, EFBIG) leaves no part of
    the file: the C removes it and names it, as the reference does."""
    script = f"""
import errno, os, resource, signal, sys
import numpy as np
from master.results import csvkernels
csvkernels.create_files([], b"", np.zeros(0, np.uint8), np.zeros(0), np.zeros(0))  # loaded
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
data = np.zeros(1000, dtype=np.uint8)
for how, make in (("c", csvkernels.create_files), ("py", csvkernels._create_files_py)):
    path = os.path.join({str(tmp_path)!r}, how)
    got = make([path], b"head", data, np.array([0]), np.array([1000]))
    assert got == (0, errno.EFBIG), (how, got)
    assert not os.path.exists(path), how
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def _fd_state(fds: Any) -> list[tuple[bool, int]]:
    """Each descriptor: whether it is open, and its file's flags of interest (appending)."""
    out = []
    for fd in fds.tolist():
        if fd < 0:
            out.append((False, 0))
        else:
            out.append((True, fcntl.fcntl(fd, fcntl.F_GETFL) & (os.O_APPEND | os.O_ACCMODE)))
            os.close(fd)
    return out


@pytest.mark.parametrize("keep", [0, 2, 5])
def test_create_headed_makes_a_directorys_files_as_the_reference_does(tmp_path: Path,
                                                                      keep: int) -> None:
    """New files in a directory, each holding the header, the first ``keep`` left open for
    appending and the rest closed; the C and the Python reference make the same."""
    names = ["a.csv", "b b.csv", "c,d.csv", "é.csv"]
    for how, make in (("c", ck.create_headed), ("py", ck._create_headed_py)):
        (tmp_path / how).mkdir()
        dir_fd = os.open(tmp_path / how, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fds, failed, err = make(dir_fd, names, b"x,y\r\n", keep)
        finally:
            os.close(dir_fd)
        assert (failed, err) == (-1, 0), how
        assert _fd_state(fds) == [(True, os.O_WRONLY | os.O_APPEND) if i < keep else (False, 0)
                                  for i in range(len(names))], how
        assert _made([str(tmp_path / how / n) for n in names]) == [b"x,y\r\n"] * len(names)


@pytest.mark.parametrize("fault", ["exists", "a directory"])
def test_create_headed_stops_at_the_first_file_it_cannot_make(tmp_path: Path, fault: str
                                                              ) -> None:
    """A file that exists is never opened over (nor a directory of that name): the index of
    the first such name and its errno, the files before it made (and open as asked), none
    after."""
    for how, make in (("c", ck.create_headed), ("py", ck._create_headed_py)):
        (tmp_path / how).mkdir()
        if fault == "exists":
            (tmp_path / how / "b").write_bytes(b"kept")
        else:
            (tmp_path / how / "b").mkdir()
        dir_fd = os.open(tmp_path / how, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fds, failed, err = make(dir_fd, ["a", "b", "c"], b"h\r\n", 3)
        finally:
            os.close(dir_fd)
        assert (failed, err) == (1, errno.EEXIST), how
        assert [s[0] for s in _fd_state(fds)] == [True, False, False], how
        assert _made([str(tmp_path / how / n) for n in ("a", "c")]) == [b"h\r\n", None]
        if fault == "exists":
            assert (tmp_path / how / "b").read_bytes() == b"kept"


def test_create_headed_refuses_a_name_that_is_not_a_plain_file_name(tmp_path: Path) -> None:
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for bad in ("", "a/b", "a\0b"):
            with pytest.raises(ValueError, match="a name is empty"):
                ck.create_headed(dir_fd, ["ok", bad], b"h\r\n", 1)
    finally:
        os.close(dir_fd)
    assert list(tmp_path.iterdir()) == []


def test_create_headed_removes_a_file_whose_header_it_could_write_only_in_part(
        tmp_path: Path) -> None:
    """A header write that fails (past the process's file size limit, EFBIG) leaves no file:
    the C removes it and names it, as the reference does."""
    script = f"""
import errno, os, resource, signal
from master.results import csvkernels
csvkernels.create_files([], b"", __import__("numpy").zeros(0, "u1"), [], [])  # loaded
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
for how, make in (("c", csvkernels.create_headed), ("py", csvkernels._create_headed_py)):
    os.mkdir(os.path.join({str(tmp_path)!r}, how))
    dir_fd = os.open(os.path.join({str(tmp_path)!r}, how), os.O_RDONLY | os.O_DIRECTORY)
    fds, failed, err = make(dir_fd, ["ok", "big"], b"h" * 60 + b"\\r\\n", 2)
    assert (failed, err) == (-1, 0), (how, failed, err)
    fds, failed, err = make(dir_fd, ["big2"], b"h" * 200, 1)
    assert (failed, err) == (0, errno.EFBIG), (how, failed, err)
    assert sorted(os.listdir(dir_fd)) == ["big", "ok"], how
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
