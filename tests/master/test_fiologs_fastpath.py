"""master.fiologs fast paths against their plain counterparts: the vectorised chunk parser
against the line-by-line parser on random valid and mutated text, and the accumulator's
one-or-two-quanta path against spreading every cell pair by pair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from master.fiologs.align import ExportedSums, QuantumAccumulator, TooManyQuanta, spread_rows
from master.fiologs.parse import HistBlock, LogReader, Scratch, _parse_canonical
from master.fiologs.synth import format_row

HEADER = 3
SCRATCH = Scratch()


def general(text: bytes, n_fields: int) -> tuple[HistBlock, int]:
    """The line-by-line reading of ``text`` and how many lines it refused."""
    reader = LogReader("mem.log", n_fields - HEADER, skip_bad_lines=True)
    return reader._parse_general(text, 0), reader.skipped_lines


def same_block(a: HistBlock, b: HistBlock) -> bool:
    return (
        a.n_columns == b.n_columns
        and np.array_equal(a.times_ms, b.times_ms)
        and np.array_equal(a.dirs, b.dirs)
        and np.array_equal(a.line_no, b.line_no)
        and np.array_equal(a.dense(), b.dense())
    )


def _value(draw: st.DrawFn) -> int:
    kind = draw(st.integers(0, 9))
    if kind < 6:
        return 0
    if kind < 8:
        return draw(st.integers(1, 99))
    return draw(st.integers(1, 10**18 - 1))  # up to the fast path's 18 digits


@st.composite
def canonical_text(draw: st.DrawFn) -> tuple[bytes, int]:
    n_fields = draw(st.sampled_from([4, 7, 19, 32]))
    n_rows = draw(st.integers(1, 12))
    lines = []
    for _ in range(n_rows):
        cells = np.array([_value(draw) for _ in range(n_fields - HEADER)], dtype=np.int64)
        lines.append(format_row(_value(draw), draw(st.integers(0, 2)), cells,
                                block_size=_value(draw)))
    return "".join(lines).encode(), n_fields


MUTATIONS = [b"0", b"1", b"9", b",", b" ", b"\n", b"\r", b"\t", b"-", b"+", b".", b"x", b"00",
             b", ", b"", b"\x00", b"\xff", b"12345678901234567890"]


@st.composite
def mutated_text(draw: st.DrawFn,
                 texts: st.SearchStrategy[tuple[bytes, int]] | None = None,
                 mutations: list[bytes] = MUTATIONS,
                 whole_lines: bool = True) -> tuple[bytes, int]:
    """A text of ``texts`` (``canonical_text()``) with one to three cuts replaced by one of
    ``mutations``; ending in a newline (the reader hands over whole lines), but for one in
    ten draws where not ``whole_lines`` (a reader that must not trust it)."""
    text, n_fields = draw(canonical_text() if texts is None else texts)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text) - 1))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.sampled_from(mutations)) + text[at + cut:]
    if (whole_lines or draw(st.integers(0, 9))) and not text.endswith(b"\n"):
        text += b"\n"
    return text, n_fields


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canonical_text())
def test_fast_path_reads_what_fio_writes_as_the_general_path_does(case: tuple[bytes, int]
                                                                  ) -> None:
    text, n_fields = case
    fast = _parse_canonical(text, n_fields, 0, SCRATCH)
    assert fast is not None  # fio's own format must take the fast path
    slow, refused = general(text, n_fields)
    assert refused == 0
    assert same_block(fast, slow)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_text())
def test_fast_path_declines_or_agrees_on_mutated_text(case: tuple[bytes, int]) -> None:
    text, n_fields = case
    fast = _parse_canonical(text, n_fields, 0, SCRATCH)
    if fast is None:
        return  # the general path will read it and name what is wrong
    slow, refused = general(text, n_fields)
    assert refused == 0, text
    assert same_block(fast, slow), text


@pytest.mark.parametrize(
    "text",
    [
        b"1000, 0, 4096, 05, 0, 0, 7\n",  # a leading zero before other digits
        b"1000, 0, 4096, 00, 0, 0, 7\n",
        b"1000, 0, 4096, 7, 0, 0, 05\n",  # ... after the last number that starts with 1-9
        b"1000, 0, 4096, 7, 0, 0, 00\n",
        b"1000, 0, 4096, 0000, 0, 7\n",  # a field short, made up for by three leading zeros
        b"1000, 0, 4096, 00, , 0, 7\n",  # an empty field, made up for by a leading zero
        b"1000, 0, 4096, 1234567890123456789, 0, 0, 7\n",  # 19 digits
        b"1000, 0, 4096, 0, 0, 0, 7, \n",  # trailing separator
        b"1000, 0, 4096, 0, 0, 0,7\n",
        b"1000, 0 ,4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, 7\n1000, 0, 4096, 0, 0, 0\n",  # a line a field short
        b"1000, 0, 4096, 0, 0, 0, 7\n1000, 0, 4096, 0, 0, 0, 7, 0\n",  # and a field more
        b"1000, 0, 4096, 0, 0, 0, 7\t\n",
        b"1000, 0, 4096, 0, 0, 0, 7",  # no final newline
        b" 1000, 0, 4096, 0, 0, 0, 7\n",
        b"1000, 0, 4096, 0, 0, 0, :\n",  # ':' is the byte after '9'
    ],
)
def test_fast_path_declines_what_fio_does_not_write(text: bytes) -> None:
    assert _parse_canonical(text, 7, 0, SCRATCH) is None


def test_fast_path_accepts_a_line_of_zeros_and_18_digit_values() -> None:
    text = b"0, 0, 0, 0, 0, 0, 0\n1, 2, 3, 999999999999999999, 0, 10, 0\n"
    block = _parse_canonical(text, 7, 10, SCRATCH)
    assert block is not None
    assert list(block.times_ms) == [0, 1] and list(block.dirs) == [0, 2]
    assert list(block.line_no) == [11, 12]
    assert block.dense().tolist() == [[0, 0, 0, 0], [999999999999999999, 0, 10, 0]]


def _naive_sums(starts: np.ndarray, ends: np.ndarray, q_ms: float, dense: np.ndarray,
                slots: np.ndarray, n_slots: int) -> dict[tuple[int, int], np.ndarray]:
    """Row by row, quantum by quantum, with the overlap rule written out."""
    out: dict[tuple[int, int], np.ndarray] = {}
    for r in range(dense.shape[0]):
        s, e = float(starts[r]), float(ends[r])
        if e <= s:
            q = int(np.ceil(e / q_ms)) - 1
            parts = {q: 1.0}
        else:
            parts = {}
            for q in range(int(np.floor(s / q_ms)), int(np.ceil(e / q_ms))):
                overlap = min(e, (q + 1) * q_ms) - max(s, q * q_ms)
                parts[q] = max(overlap, 0.0) / (e - s)
        for q, w in parts.items():
            key = (int(slots[r]), q)
            out[key] = out.get(key, np.zeros(dense.shape[1])) + w * dense[r]
    return out


@pytest.mark.parametrize("q_ms", [1000.0, 250.0, 3000.0, 700.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accumulator_matches_row_by_row_spreading(q_ms: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_rows, n_cols = 40, 6
    ends = np.cumsum(rng.choice([0, 1, 999, 1000, 1001, 2500], size=n_rows)).astype(float)
    ends += float(rng.integers(0, 5000))
    starts = np.concatenate(([ends[0] - 1000.0], ends[:-1]))
    dense = rng.integers(0, 4, size=(n_rows, n_cols)) * rng.integers(0, 2, size=(n_rows, 1))
    slots = rng.integers(0, 2, size=n_rows)
    block = HistBlock.from_dense(ends.astype(np.int64), slots, np.arange(1, n_rows + 1),
                                 dense.astype(np.int64))
    acc = QuantumAccumulator(2, n_cols)
    half = n_rows // 2  # two blocks, as the reader hands them over
    for rows in (np.arange(half), np.arange(half, n_rows)):
        keep = np.zeros(n_rows, dtype=bool)
        keep[rows] = True
        part = block.take(keep)
        acc.add(part, part.dirs, spread_rows(starts[rows], ends[rows], q_ms))
    want = _naive_sums(starts, ends, q_ms, dense.astype(float), slots, 2)
    assert acc.first_quantum == min(q for _, q in want)
    assert acc.last_quantum == max(q for _, q in want)
    for slot in (0, 1):
        got = acc.counts(slot, acc.first_quantum, acc.last_quantum + 1)
        for i, q in enumerate(range(acc.first_quantum, acc.last_quantum + 1)):
            expect = want.get((slot, q), np.zeros(n_cols))
            assert np.allclose(got[i], expect, rtol=1e-12, atol=1e-9), (slot, q)
    assert acc.column_total(2) == pytest.approx(float(dense[:, 2].sum()))


def test_accumulator_export_and_merge_add_up() -> None:
    a = QuantumAccumulator(1, 2)
    b = QuantumAccumulator(1, 2)
    one = HistBlock.from_dense(np.array([1000]), np.array([0]), np.array([1]),
                               np.array([[3, 0]]))
    a.add(one, np.zeros(1, dtype=np.int64), spread_rows(np.array([0.0]), np.array([1000.0]),
                                                        1000.0))
    b.add(one, np.zeros(1, dtype=np.int64), spread_rows(np.array([5000.0]),
                                                        np.array([6000.0]), 1000.0))
    part = b.export()
    assert (part.first_quantum, part.last_quantum, part.first_column) == (5, 5, 0)
    assert part.counts.shape == (1, 1, 1)  # only the columns anything was added to
    a.merge(part)
    a.merge(QuantumAccumulator(1, 2).export())  # an empty one adds nothing
    assert (a.first_quantum, a.last_quantum) == (0, 5)
    assert a.counts(0, 0, 6)[:, 0].tolist() == [3.0, 0.0, 0.0, 0.0, 0.0, 3.0]
    assert a.counts(0, 0, 6)[:, 1].tolist() == [0.0] * 6
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(ExportedSums(0, 0, 0, np.zeros((2, 1, 2))))
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(ExportedSums(0, 0, 1, np.zeros((1, 1, 2))))  # beyond the last column


def test_exported_sums_hold_the_columns_added_to_and_merge_to_the_same_sums() -> None:
    """A middle run of columns travels; the sums merged are those of one accumulator fed
    everything, to the bit (quanta that a row reached without cells travel too)."""
    rng = np.random.default_rng(7)
    dense = np.zeros((6, 9), dtype=np.int64)
    dense[:, 3:6] = rng.integers(0, 50, size=(6, 3))
    times = np.array([900, 1900, 2500, 3100, 4700, 5300])
    blocks = [HistBlock.from_dense(times[:3], np.zeros(3, np.int64), np.arange(1, 4), dense[:3]),
              HistBlock.from_dense(times[3:], np.zeros(3, np.int64), np.arange(4, 7), dense[3:]),
              HistBlock.from_dense(np.array([9000]), np.zeros(1, np.int64), np.array([7]),
                                   np.zeros((1, 9), np.int64))]
    whole, a, b = (QuantumAccumulator(1, 9) for _ in range(3))
    for k, block in enumerate(blocks):
        start = block.times_ms.astype(np.float64) - 700.0
        spread = spread_rows(start, block.times_ms.astype(np.float64), 1000.0)
        slots = np.zeros(block.n_rows, dtype=np.int64)
        whole.add(block, slots, spread)
        (a if k == 0 else b).add(block, slots, spread)
    part = b.export()
    assert part.first_column == 3 and part.counts.shape[2] == 3
    a.merge(part)
    assert (a.first_quantum, a.last_quantum) == (whole.first_quantum, whole.last_quantum)
    q0, q1 = whole.first_quantum, whole.last_quantum + 1
    assert a.counts(0, q0, q1).tobytes() == whole.counts(0, q0, q1).tobytes()


def test_an_accumulator_grows_up_to_its_limit_and_no_further() -> None:
    # room for 10 quanta of 1 slot x 2 columns: counts added at quanta 5, then 0 (growing
    # downwards, where the margin it adds is cut to the limit), then 9 all stay; an 11th
    # quantum is refused, naming how many were needed; a reservation over the limit is skipped
    acc = QuantumAccumulator(1, 2, max_bytes=10 * 2 * 8)
    assert acc.max_quanta == 10
    acc.reserve(0, 1000)

    def add(q: int) -> None:
        block = HistBlock.from_dense(np.array([1000 * q + 1000]), np.array([0]),
                                     np.array([1]), np.array([[q + 1, 0]]))
        acc.add(block, np.zeros(1, dtype=np.int64),
                spread_rows(np.array([1000.0 * q]), np.array([1000.0 * q + 1000]), 1000.0))

    for q in (5, 0, 9):
        add(q)
    assert acc.counts(0, 0, 10)[:, 0].tolist() == [1, 0, 0, 0, 0, 6, 0, 0, 0, 10]
    with pytest.raises(TooManyQuanta) as info:
        add(10)
    assert (info.value.need, info.value.limit) == (11, 10)
    with pytest.raises(TooManyQuanta):
        add(-1)
