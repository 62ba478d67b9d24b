"""master.fiologs: the compiled chunk reader (parse.c) against the numpy one
(``_parse_canonical``, its reference) and the line-by-line reader, on random valid and
mutated text, large random logs, the fixtures of real fio, and whole fio-pctiles runs, whose
CSV must be the same bytes either way."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from master.analysis import native
from master.fiologs import cfuncs, parse
from master.fiologs.align import QuantumAccumulator, spread_rows
from master.fiologs.columns import make_layout
from master.fiologs.parse import HistBlock, LogReader, Scratch, _parse_canonical, parse_canonical
from master.fiologs.pctiles import percentile_matrix
from master.fiologs.pipeline import PctileOptions, _stats_columns, compute_pctiles
from master.fiologs.synth import fio_counts, format_row, write_log
from protocol.errors import LogFormatError
from tests.master import test_fiologs_fastpath as fastpath
from tests.master.test_fiologs_fastpath import general
from tests.master.test_fiologs_parse import BAD_LINES

SOURCES = [Path(parse.__file__).with_suffix(".c"), Path(parse.__file__).with_name("align.c")]
FIXTURES = Path(__file__).parent / "fixtures" / "fiologs"
HEADER = 3
SCRATCH = Scratch()
needs_cc = pytest.mark.skipif(not native.compiler(), reason="no C compiler here")
needs_c = pytest.mark.skipif(cfuncs.function("ivf_parse_canonical") is None,
                             reason="no compiled kernels here")


@contextlib.contextmanager
def numpy_forms() -> Iterator[None]:
    """Read and add with the numpy forms, as where the object is unavailable."""
    saved = dict(cfuncs._loaded)
    cfuncs._loaded.update(dict.fromkeys(cfuncs._SIGNATURES))
    try:
        yield
    finally:
        cfuncs._loaded.clear()
        cfuncs._loaded.update(saved)


@pytest.fixture
def numpy_only() -> Iterator[None]:
    with numpy_forms():
        yield


def same_block(a: HistBlock | None, b: HistBlock | None) -> bool:
    if a is None or b is None:
        return a is b
    return (
        a.n_columns == b.n_columns
        and all(
            np.array_equal(x, y) and x.dtype == y.dtype
            for x, y in (
                (a.times_ms, b.times_ms), (a.dirs, b.dirs), (a.line_no, b.line_no),
                (a.entry_row, b.entry_row), (a.entry_col, b.entry_col),
                (a.entry_count, b.entry_count),
            )
        )
    )


# ----------------------------------------------------------------------------- the source
@needs_cc
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_source_compiles_without_a_warning(tmp_path: Path, source: Path) -> None:
    """With the build's own compiler and flags, alone (it needs none of the other files)."""
    done = subprocess.run([*native.compiler(), *native.FLAGS, "-Wextra", "-Werror", "-o",
                           str(tmp_path / "fiolog.so"), str(source), *native.LIBS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_exported_names_are_prefixed_and_the_helpers_static(source: Path) -> None:
    src = source.read_text()
    defined = re.findall(r"^(?!static\b)[a-z][\w ]*?\b(\w+)\(", src, re.MULTILINE)
    assert defined and all(name.startswith("ivf_") for name in defined), defined
    assert set(defined) <= set(cfuncs._SIGNATURES)


def test_the_sources_are_in_the_object() -> None:
    assert {p.resolve() for p in SOURCES} <= {p.resolve() for p in native.SOURCES}


# ----------------------------------------------------------------------------- random text
def _value(draw: st.DrawFn) -> int:
    kind = draw(st.integers(0, 11))
    if kind < 7:
        return 0
    if kind < 9:
        return draw(st.integers(1, 99))
    if kind < 10:
        return draw(st.sampled_from([10**17, 10**18 - 1, 999_999_999, 100]))
    return draw(st.integers(1, 10**18 - 1))


@st.composite
def canonical_text(draw: st.DrawFn) -> tuple[bytes, int]:
    n_fields = draw(st.sampled_from([4, 5, 7, 11, 12, 19, 32, 35, 60]))
    n_rows = draw(st.integers(1, 12))
    lines = []
    for _ in range(n_rows):
        if draw(st.booleans()):
            cells = np.array([_value(draw) for _ in range(n_fields - HEADER)], dtype=np.int64)
        else:  # long runs of zeros, at every offset, and a few values
            cells = np.zeros(n_fields - HEADER, dtype=np.int64)
            for _ in range(draw(st.integers(0, 3))):
                cells[draw(st.integers(0, n_fields - HEADER - 1))] = _value(draw)
        lines.append(format_row(_value(draw), draw(st.integers(0, 3)), cells,
                                block_size=_value(draw)))
    return "".join(lines).encode(), n_fields


#: the fast path's mutations, and digits and separators at the C's own limits
MUTATIONS = [*fastpath.MUTATIONS, b":", b"/", b"123456789012345678", b"1234567890123456789",
             b"0, 0, 0, 0, 0, 0, 0, 0, ", b", 0, 0, 0, 0, 0, 0, 0, 0"]


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canonical_text(), st.integers(0, 10**6))
def test_the_c_reads_what_fio_writes_as_numpy_and_the_general_path_do(
        case: tuple[bytes, int], line_base: int) -> None:
    text, n_fields = case
    fast = parse_canonical(text, n_fields, line_base, SCRATCH)
    assert fast is not None
    assert same_block(fast, _parse_canonical(text, n_fields, line_base, SCRATCH))
    slow, refused = general(text, n_fields)
    assert refused == 0
    slow.line_no += line_base
    assert same_block(fast, slow)


@needs_c
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fastpath.mutated_text(canonical_text(), MUTATIONS, whole_lines=False))
def test_the_c_declines_what_numpy_declines_and_agrees_on_the_rest(
        case: tuple[bytes, int]) -> None:
    text, n_fields = case
    fast = parse_canonical(text, n_fields, 0, SCRATCH)
    if text.endswith(b"\n"):
        assert same_block(fast, _parse_canonical(text, n_fields, 0, SCRATCH)), text
    else:
        assert fast is None
    if fast is not None:
        slow, refused = general(text, n_fields)
        assert refused == 0, text
        assert same_block(fast, slow), text


@needs_c
@pytest.mark.parametrize(
    "text",
    [
        b"1000, 0, 4096, 05, 0, 0, 7\n",
        b"1000, 0, 4096, 7, 0, 0, 05\n",
        b"1000, 0, 4096, 7, 0, 0, 00\n",
        b"1000, 0, 4096, 0000, 0, 7\n",
        b"1000, 0, 4096, 00, , 0, 7\n",
        b"1000, 0, 4096, 1234567890123456789, 0, 0, 7\n",  # 19 digits
        b"1000, 0, 4096, 0, 0, 0, 1234567890123456789\n",
        b"1234567890123456789, 0, 4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, 7, \n",
        b"1000, 0, 4096, 0, 0, 0,7\n",
        b"1000, 0 ,4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, 7\n1000, 0, 4096, 0, 0, 0\n",
        b"1000, 0, 4096, 0, 0, 0, 7\n1000, 0, 4096, 0, 0, 0, 7, 0\n",
        b"1000, 0, 4096, 0, 0, 0, 7\t\n",
        b"1000, 0, 4096, 0, 0, 0, 7",
        b"1000, 0, 4096, 0, 0, 0, 7\n\n",
        b"\n1000, 0, 4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, 7\r\n",
        b" 1000, 0, 4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, :\n",
        b"1000, -1, 4096, 0, 0, 0, 7\n",
        b"\n",
        b"",
    ],
)
def test_the_c_declines_what_fio_does_not_write(text: bytes) -> None:
    assert parse_canonical(text, 7, 0, SCRATCH) is None


@needs_c
def test_runs_of_zeros_at_every_offset_and_length() -> None:
    """The 24-byte skip of eight zero cells must stop exactly at the last field and at any
    value, wherever the run starts."""
    for n_cols in (1, 2, 7, 8, 9, 15, 16, 17, 25, 64):
        for hot in range(n_cols):
            rows = []
            for k, value in enumerate((0, 1, 10**18 - 1)):
                c = np.zeros(n_cols, dtype=np.int64)
                c[hot] = value
                rows.append(format_row(k, k % 3, c))
            text = "".join(rows).encode()
            fast = parse_canonical(text, n_cols + HEADER, 0, SCRATCH)
            assert fast is not None
            assert same_block(fast, _parse_canonical(text, n_cols + HEADER, 0, SCRATCH))
            # and one field more or less in the last line: declined
            assert parse_canonical(text[:-1] + b", 0\n", n_cols + HEADER, 0, SCRATCH) is None
            short = text.rsplit(b", ", 1)[0] + b"\n"
            assert parse_canonical(short, n_cols + HEADER, 0, SCRATCH) is None


@needs_c
def test_a_chunk_of_nothing_but_non_zero_cells_fits_the_room() -> None:
    for n_cols in (1, 5, 1856):
        line = ", ".join(["1"] * (n_cols + HEADER)) + "\n"
        text = (line * 7).encode()
        fast = parse_canonical(text, n_cols + HEADER, 0, Scratch())
        assert fast is not None and fast.entry_count.size == 7 * n_cols


# ----------------------------------------------------------------------------- whole logs
def _random_log(rng: np.random.Generator, n_rows: int, n_cols: int) -> list[
        tuple[int, int, np.ndarray]]:
    rows = []
    t = [0, 0, 0]
    for _ in range(n_rows):
        d = int(rng.integers(0, 3))
        t[d] += int(rng.integers(0, 2000))
        lat = rng.lognormal(np.log(rng.uniform(1e4, 1e7)), rng.uniform(0.1, 2.0),
                            size=int(rng.integers(0, 3000))).astype(np.int64)
        c = fio_counts(lat, coarseness={1856: 0, 928: 1, 232: 3}.get(n_cols, 0))[:n_cols]
        if rng.random() < 0.05:
            c[rng.integers(0, n_cols)] = int(rng.integers(1, 10**18))
        rows.append((t[d], d, c))
    return rows


@needs_c
@pytest.mark.parametrize(("n_cols", "chunk"), [(1856, 1 << 12), (1856, 1 << 20), (232, 5000),
                                               (928, 65536)])
def test_random_logs_read_the_same_through_c_and_numpy(tmp_path: Path, n_cols: int,
                                                       chunk: int) -> None:
    rng = np.random.default_rng(n_cols + chunk)
    path = write_log(tmp_path / "r.log", _random_log(rng, 300, n_cols))
    c_blocks = list(LogReader(path, n_cols, chunk_bytes=chunk).blocks())
    with numpy_forms():
        np_blocks = list(LogReader(path, n_cols, chunk_bytes=chunk).blocks())
    assert len(c_blocks) == len(np_blocks)
    assert all(same_block(a, b) for a, b in zip(c_blocks, np_blocks, strict=True))


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        *BAD_LINES,
        ("3000, 0, 4096, 1, 2, 3, 4\r\n", "1000 2000 3000 4000"),  # read as it is
        ("\n", "1000 2000 4000"),
    ],
)
@pytest.mark.parametrize("compiled", [True, False])
def test_malformed_lines_are_named_alike_either_way(tmp_path: Path, bad_line: str,
                                                    message: str, compiled: bool,
                                                    request: pytest.FixtureRequest) -> None:
    if compiled and cfuncs.function("ivf_parse_canonical") is None:
        pytest.skip("no compiled kernels here")
    if not compiled:
        request.getfixturevalue("numpy_only")
    good = [format_row(1000 * k, 0, np.array([k, 0, 1, 0])) for k in (1, 2)]
    tail = format_row(4000, 0, np.array([0, 0, 0, 9]))
    path = tmp_path / "bad.log"
    path.write_text("".join([*good, bad_line, tail]))
    if message[0].isdigit():  # not fio's shape but well formed: read as it is
        block = parse.read_all(path, 4)
        assert block.times_ms.tolist() == [int(t) for t in message.split()]
        return
    with pytest.raises(LogFormatError, match=message) as info:
        parse.read_all(path, 4)
    assert (info.value.file, info.value.line) == (str(path), 3)


def _csv(paths: list[Path], options: PctileOptions) -> str:
    out = io.StringIO()
    compute_pctiles(paths, options).write_csv(out)
    return out.getvalue()


def _both_ways(paths: list[Path], options: PctileOptions) -> tuple[str, str]:
    c = _csv(paths, options)
    with numpy_forms():
        return c, _csv(paths, options)


@needs_c
@pytest.mark.parametrize("folder", ["epoch_c3", "client_c2"])
def test_fio_pctiles_of_real_fio_logs_are_the_same_bytes(folder: str) -> None:
    logs = sorted((FIXTURES / folder).glob("*.log*"))
    assert logs
    for options in (PctileOptions(summary=True),
                    PctileOptions(directions=("read", "write", "merged"), time_quantum_s=0.3,
                                  repair_client_logs=folder == "client_c2")):
        c, numpy_csv = _both_ways(logs, options)
        assert c == numpy_csv


@needs_c
def test_fio_pctiles_of_straddling_random_logs_are_the_same_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    logs = []
    for f in range(4):
        rows = [(1000 * (k + 1) + 7 * f, f % 2, c) for k, (_, _, c) in
                enumerate(_random_log(rng, 60, 1856))]
        logs.append(write_log(tmp_path / f"job{f}_clat_hist.1.log", rows, gz=f == 3))
    for options in (PctileOptions(time_quantum_s=1.0, summary=True, chunk_bytes=1 << 14),
                    PctileOptions(time_quantum_s=0.25, directions=("read", "write"))):
        c, numpy_csv = _both_ways(logs, options)
        assert c == numpy_csv


# ----------------------------------------------------------------------------- adding
def _accumulate(block: HistBlock, starts: np.ndarray, ends: np.ndarray, q_ms: float,
                n_cols: int) -> np.ndarray:
    acc = QuantumAccumulator(3, n_cols)
    half = block.n_rows // 2  # two blocks, as the reader hands them over
    for rows in (np.arange(half), np.arange(half, block.n_rows)):
        keep = np.zeros(block.n_rows, dtype=bool)
        keep[rows] = True
        part = block.take(keep)
        acc.add(part, part.dirs, spread_rows(starts[rows], ends[rows], q_ms))
    assert acc.first_quantum is not None and acc.last_quantum is not None
    return np.stack([acc.counts(s, acc.first_quantum, acc.last_quantum + 1) for s in range(3)])


@needs_c
@pytest.mark.parametrize("steps", [(1000, 1001, 999), (0, 1, 999, 1000, 1001, 2500), (1000,),
                                   (0,), (333, 1000)])
@pytest.mark.parametrize("q_ms", [1000.0, 250.0, 700.0, 4020.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_c_adds_the_same_sums_to_the_bit(steps: tuple[int, ...], q_ms: float,
                                             seed: int) -> None:
    """Rows reaching one quantum, two (all of them, or some) and more, in both blocks."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = 300, 64
    ends = np.cumsum(rng.choice(steps, size=n_rows)).astype(float)
    ends += float(rng.integers(1, 5000)) + rng.integers(0, 3, size=n_rows).cumsum() * 0.37
    starts = np.concatenate(([ends[0] - 1000.0], ends[:-1]))
    dense = rng.integers(0, 10**rng.integers(1, 15, size=(n_rows, 1)), size=(n_rows, n_cols))
    dense *= rng.random(size=(n_rows, n_cols)) < 0.3
    block = HistBlock.from_dense(ends.astype(np.int64), rng.integers(0, 3, size=n_rows),
                                 np.arange(1, n_rows + 1), dense.astype(np.int64))
    c = _accumulate(block, starts, ends, q_ms, n_cols)
    with numpy_forms():
        reference = _accumulate(block, starts, ends, q_ms, n_cols)
    assert c.tobytes() == reference.tobytes()


# ----------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("seed", range(6))
def test_statistics_over_the_used_columns_are_those_over_all(seed: int) -> None:
    """The per-quantum statistics read only the columns anything was added to (and the last):
    the same numbers to the bit, percentiles 0 and 100 too, with and without counts in fio's
    last column, for spread (fractional) counts."""
    rng = np.random.default_rng(seed)
    layout = make_layout(3, int(rng.integers(0, 3)))
    n_cols = layout.n_columns
    acc = QuantumAccumulator(1, n_cols)
    first = int(rng.integers(0, n_cols // 2))
    last = n_cols - 1 if seed % 2 else int(rng.integers(first, n_cols - 1))
    n_rows = 50
    dense = rng.integers(0, 50, size=(n_rows, last - first + 1)) * (
        rng.random(size=(n_rows, last - first + 1)) < 0.4)
    dense[:, 0] += 1  # the first column is used
    dense[:, -1] += 1
    full = np.zeros((n_rows, n_cols), dtype=np.int64)
    full[:, first:last + 1] = dense
    full[rng.random(n_rows) < 0.2] = 0  # quanta without I/O
    ends = np.arange(1, n_rows + 1, dtype=np.float64) * 1000.0 + 337.0
    block = HistBlock.from_dense(ends.astype(np.int64), np.zeros(n_rows, dtype=np.int64),
                                 np.arange(1, n_rows + 1), full)
    acc.add(block, block.dirs, spread_rows(ends - 1000.0, ends, 1000.0))
    assert acc.first_quantum is not None and acc.last_quantum is not None
    counts = acc.counts(0, acc.first_quantum, acc.last_quantum + 1)
    cols = _stats_columns(acc)
    ps = (0.0, 1.0, 50.0, 99.0, 99.99, 100.0)
    whole = percentile_matrix(counts, ps, layout.lower_ns, layout.upper_ns)
    some = percentile_matrix(counts[:, cols], ps, layout.lower_ns[cols], layout.upper_ns[cols])
    for a, b in zip(astuple(whole), astuple(some), strict=True):
        assert a.tobytes() == b.tobytes()
