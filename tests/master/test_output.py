"""master.results.output: CSV cell formatting (``fmt``, ``format_float_rows``, ``format_lines``),
appending lines to many files (``CsvAppender.append_block``) and histogram files
(``RunOutput.histogram_csvs``)."""

from __future__ import annotations

import csv
import errno
import io
import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from master.results.csvfiles import (
    AppenderGroup,
    CsvAppender,
    LineTexts,
    csv_text,
    fmt,
    format_float_rows,
    format_lines,
    histogram_count_text,
    joined_utf8,
)
from master.results.output import RunOutput
from protocol.errors import OutputError
from tests.master.filelimit import file_size_limit


@pytest.mark.parametrize(("value", "text"), [
    (123456.0, "123456"),
    (114805.33, "114805"),
    (999999.4, "999999"),
    (999999.5, "1000000"),      # %.6g would write 1e+06
    (1234567.0, "1234567"),     # a cluster's IOPS: every digit, no exponent
    (1234567.6, "1234568"),
    (-25000000.0, "-25000000"),
    (123456789012345.0, "123456789012345"),
    (0.000123, "0.000123"),
    (1.5e-7, "1.5e-07"),        # small values keep %.6g
    (float("nan"), ""),
    (None, ""),
])
def test_fmt_writes_large_numbers_without_exponent(value: float | None, text: str) -> None:
    assert fmt(value) == text


def test_large_values_parse_back_to_their_integer_part() -> None:
    """A row's IOPS of 1,234,567 reads back as 1,234,567 (not 1,234,570), so instance rows
    add up to the ``all`` row exactly."""
    parts = [123456.0 + i for i in range(10)]
    total = sum(parts)
    assert total >= 1e6
    assert float(fmt(total)) == total
    assert sum(float(fmt(p)) for p in parts) == float(fmt(total))


def test_format_float_rows_matches_fmt_for_large_values() -> None:
    vals = np.array([[1234567.0, 0.5, 12.25], [3.0, 999999.5, np.nan], [1.0, 2.0, 3.0],
                     [-7654321.0, 1e-7, 5e14]])
    assert format_float_rows(vals) == [",".join(fmt(float(v)) for v in row) for row in vals]
    assert format_float_rows(vals)[0] == "1234567,0.5,12.25"


# ---------------------------------------------------------------- instance lines, many files
def _csv_line(cells: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    return buf.getvalue()


def test_format_lines_are_the_csv_writer_rows_of_fmt_cells() -> None:
    """Head, the instance's own text, the ``fmt`` cells (the last one a word where asked),
    CRLF: what ``CsvAppender.write`` writes. Rows holding a cell the compiled formatter cannot
    decide (1e15 and up, below 1e-30) come back as text made by ``fmt``."""
    rng = np.random.default_rng(5)
    n = 200
    vals = rng.lognormal(0, 4, (n, 12))
    vals[rng.random(vals.shape) < 0.2] = np.nan
    vals[3, 2], vals[7, 0], vals[9, 11] = 2e15, 1e-31, 5e16
    names = [f"host{i:03d}:/dev/sd{i}" for i in range(n)]
    names[1], names[2] = 'a,"quoted"', "größe"  # quoted; not ASCII
    word_last = rng.random(n) < 0.3
    word_last[9] = True  # the undecidable cell is the one the word replaces
    head_cells = ["1", "step one", "4", "measurement", "20", "workload"]
    texts = LineTexts([csv_text(t) for t in names])
    data, ends, own = format_lines(vals, _csv_line(head_cells)[:-2] + ",", texts, word_last,
                                   "max")
    assert sorted(own) == [3, 7]
    starts = np.concatenate([[0], ends[:-1]])
    got = [own.get(i) or data[a:b].tobytes().decode("utf-8")
           for i, (a, b) in enumerate(zip(starts, ends, strict=True))]
    expect = []
    for i in range(n):
        cells = [fmt(float(v)) for v in vals[i]]
        if word_last[i]:
            cells[-1] = "max"
        expect.append(_csv_line([*head_cells, names[i], *cells]))
    assert got == expect
    with pytest.raises(ValueError, match="rows but"):
        format_lines(vals, "", LineTexts(names[:5]), word_last, "max")


def test_repeated_blocks_are_the_same_lines() -> None:
    """Blocks of columns copied from an earlier block where the numbers are the same give
    the lines the cells would have made: equal blocks, different ones, empty ones, -0.0
    against 0.0, a source block holding a cell only ``fmt`` can write."""
    rng = np.random.default_rng(8)
    n = 300
    vals = rng.lognormal(0, 4, (n, 13))
    vals[rng.random(vals.shape) < 0.1] = np.nan
    pick = rng.random(n)
    vals[pick < 0.4, 4:8] = vals[pick < 0.4, 0:4]  # block 1 the same as block 0
    vals[pick < 0.2, 8:12] = vals[pick < 0.2, 0:4]  # block 2 too
    vals[(pick >= 0.4) & (pick < 0.5), 4:8] = np.nan
    vals[(pick >= 0.4) & (pick < 0.5), 0:4] = np.nan
    vals[0, 0:4], vals[0, 4:8] = [0.0, 1.0, 2.0, 3.0], [-0.0, 1.0, 2.0, 3.0]
    vals[1, 0:4] = vals[1, 4:8] = [2e15, 1.0, 2.0, 3.0]
    names = [f"w{i}" for i in range(n)]
    word_last = rng.random(n) < 0.3
    texts = LineTexts(names)
    blocks = [(4, 0, 4), (8, 0, 4)]
    plain = format_lines(vals, "h,", texts, word_last, "max")
    copied = format_lines(vals.copy(), "h,", texts, word_last, "max", blocks)
    assert plain[2] == copied[2] and 1 in copied[2]
    assert np.array_equal(plain[1], copied[1])
    assert plain[0].tobytes() == copied[0].tobytes()
    assert copied[0].tobytes().split(b"\r\n")[0] == b"h,w0,0,1,2,3,-0,1,2,3," + b",".join(
        fmt(float(v)).encode() for v in vals[0, 8:12]) + (
        b",max" if word_last[0] else b"," + fmt(float(vals[0, 12])).encode())
    for bad in ([(0, 4, 4)], [(4, 0, 4), (6, 0, 2)], [(9, 0, 4)], [(4, 2, 4)]):
        with pytest.raises(ValueError, match="repeated block"):
            format_lines(vals, "h,", texts, word_last, "max", bad)


def _block(lines: list[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    data, ends = joined_utf8(lines)
    return np.frombuffer(data, dtype=np.uint8), ends


def test_append_block_writes_open_closed_and_own_lines(tmp_path: Path) -> None:
    out = RunOutput(tmp_path, max_open_files=3)
    tables = [out.table(f"t{i}.csv", ["a"]) for i in range(6)]
    assert [t.is_open for t in tables] == [True] * 3 + [False] * 3
    for rnd in range(2):
        data, ends = _block([f"{rnd}{i}\r\n" for i in range(6)])
        CsvAppender.append_block(tables, data, ends, {1: f"own{rnd}\r\n", 4: f"own{rnd}\r\n"})
    out.close()
    for i in range(6):
        rows = [f"own{r}" if i in (1, 4) else f"{r}{i}" for r in range(2)]
        assert (tmp_path / f"t{i}.csv").read_text() == "a\n" + "".join(f"{r}\n" for r in rows)
    with pytest.raises(ValueError, match="6 files but 2 lines"):
        CsvAppender.append_block(tables, *_block(["x\n", "y\n"]))


def test_a_released_folder_gives_its_descriptors_to_the_next_and_is_forgotten(
        tmp_path: Path) -> None:
    out = RunOutput(tmp_path, max_open_files=3)
    run_file = out.table("events.csv", ["a"])
    first = [out.table(f"step0/t{i}.csv", ["a"]) for i in range(2)]
    closed = out.table("step00/t.csv", ["a"])  # not under step0/: a name that starts alike
    assert [t.is_open for t in [run_file, *first, closed]] == [True, True, True, False]
    kept_group = AppenderGroup(first)  # as a step's recorder keeps its files
    survivors = AppenderGroup([run_file, closed])  # made before the slots are numbered anew
    with out.subinterval():
        CsvAppender.append_many([*first, closed], ["1\n", "2\n", "3\n"])
    out.release_folder("step0")
    assert [t.is_open for t in [run_file, *first, closed]] == [True, False, False, False]
    # the ledger holds the others alone, their sizes kept; forgetting them again is nothing
    assert out.ledger.appenders == [run_file, closed]
    out.ledger.forget(first)
    assert out.ledger.appenders == [run_file, closed] and [run_file.slot, closed.slot] == [0, 1]
    assert [run_file.size, closed.size] == [len("a\r\n"), len("a\r\n3\n")]
    with out.subinterval():  # the group kept from before reads their new slots
        CsvAppender.append_block(survivors, *_block(["r\n", "s\n"]))
    assert [run_file.size, closed.size] == [len("a\r\nr\n"), len("a\r\n3\ns\n")]
    later = [out.table(f"step1/t{i}.csv", ["a"]) for i in range(3)]
    assert [t.is_open for t in later] == [True, True, False]  # the two given back, no more
    with pytest.raises(ValueError, match="step's files were let go"):
        out.table("step0/t0.csv", ["a"])
    with pytest.raises(ValueError, match="step's files were let go"):
        out.tables("step0/gather", ["x.csv"], ["a"])
    with pytest.raises(ValueError, match="a row for a file whose step has ended"):
        first[0].append_now("late\n")
    with pytest.raises(ValueError, match="a row for a file whose step has ended"):
        CsvAppender.append_many([closed, first[1]], ["late\n", "late\n"])
    with pytest.raises(ValueError, match="a row for a file whose step has ended"):
        CsvAppender.append_block(kept_group, *_block(["late\n", "late\n"]))
    # a failed subinterval after it: the undo cuts the files the ledger holds, by their slots
    with pytest.raises(OutputError), out.subinterval():
        CsvAppender.append_many([closed, *later], ["4\n", "5\n", "6\n", "7\n"])
        raise OutputError("x", OSError(errno.ENOSPC, "full"))
    out.close()
    assert (tmp_path / "step0" / "t0.csv").read_text() == "a\n1\n"
    assert (tmp_path / "step00" / "t.csv").read_text() == "a\n3\ns\n"
    assert [(tmp_path / "step1" / f"t{i}.csv").read_text() for i in range(3)] == ["a\n"] * 3


def test_append_block_names_the_file_whose_write_fails(tmp_path: Path) -> None:
    """A file that reaches its size limit: the write stops short, then fails with EFBIG; the
    error names that file, which is cut back to its last whole row; the files before it
    have their lines (the subinterval's undo takes them back: ``RunOutput.subinterval``)."""
    out = RunOutput(tmp_path)
    tables = [out.table(f"t{i}.csv", ["a"]) for i in range(3)]
    header = len("a\r\n")
    lines = ["first\r\n", "x" * 40 + "\r\n", "third\r\n"]
    with file_size_limit(header + 10), pytest.raises(OutputError, match=r"t1\.csv") as err:
        CsvAppender.append_block(tables, *_block(lines))
    assert "File too large" in str(err.value)
    out.close()
    assert (tmp_path / "t0.csv").read_text() == "a\nfirst\n"
    assert (tmp_path / "t1.csv").read_text() == "a\n"  # the short write's part cut off
    assert (tmp_path / "t2.csv").read_text() == "a\n"


def test_appender_group_reads_descriptors_again_after_a_close(tmp_path: Path) -> None:
    """A group keeps its files' descriptors; once one of them is closed, its number may be
    another file's: the group's next block must not land there."""
    out = RunOutput(tmp_path)
    group = AppenderGroup(out.table(f"t{i}.csv", ["a"]) for i in range(3))
    CsvAppender.append_block(group, *_block(["1\r\n", "2\r\n", "3\r\n"]))
    fd0 = group.fds()[0]
    group[0].close()
    opened = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    intruder = int(fd0)  # another file under the closed file's number
    if opened != intruder:
        os.dup2(opened, intruder)
        os.close(opened)
    try:
        CsvAppender.append_block(group, *_block(["4\r\n", "5\r\n", "6\r\n"]))
    finally:
        os.close(intruder)
    out.close()
    assert (tmp_path / "other").read_text() == ""
    assert [(tmp_path / f"t{i}.csv").read_text() for i in range(3)] == [
        "a\n1\n4\n", "a\n2\n5\n", "a\n3\n6\n"]
    assert len(group) == 3 and not group.fds().flags.writeable


def test_run_log_on_a_full_disk_reports_once_and_closes_without_raising(
        capsys: pytest.CaptureFixture[str]) -> None:
    """run.log's lines that cannot be written (here /dev/full: every write fails with
    ENOSPC) are reported once on stderr; closing it does not raise either (a full disk is the
    run's own error, exit 4, not a crash at close)."""
    from master.results.output import _RunLogHandler

    handler = _RunLogHandler("/dev/full")  # appended to, as a file that exists
    log = logging.getLogger("test_run_log_full")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("first line")
        log.warning("second line")
    finally:
        log.removeHandler(handler)
    handler.close()
    assert not handler.is_open
    err = capsys.readouterr().err
    assert err.count("cannot write /dev/full") == 1, err
    assert "Traceback" not in err


def test_run_log_never_ends_in_a_cut_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A record that fits only in part (a file size limit, as a full disk) is cut back: the
    log ends on its last whole line, and the next record that fits follows it."""
    from master.results.output import _RunLogHandler

    path = tmp_path / "run.log"
    handler = _RunLogHandler(path, mode="x")
    log = logging.getLogger("test_run_log_cut")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("first")
        with file_size_limit(len("first\n") + 10):
            log.warning("x" * 100)
        log.warning("third")
    finally:
        log.removeHandler(handler)
        handler.close()
    assert path.read_text() == "first\nthird\n"
    assert capsys.readouterr().err.count("cannot write") == 1


def _histogram_reference(lower: list[int], upper: list[int], names: list[str],
                         counts: np.ndarray) -> str:
    """One histogram file as csv.writer writes it: a row per bucket with a count."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["bucket_lower_ns", "bucket_upper_ns", *names])
    for b in np.flatnonzero(counts.any(axis=0)).tolist():
        w.writerow([lower[b], upper[b],
                    *[fmt(v) if v % 1 else int(v) for v in counts[:, b].tolist()]])
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["whole", "fractions", "huge"])
def test_histogram_files_are_the_csv_writer_rows(tmp_path: Path, kind: str) -> None:
    """Each file: the header, then one row per bucket with any count (edges, counts; whole
    counts as integers) - the text csv.writer makes; an instance without counts gets its header
    only; whole counts of 1e15 and more (the compiled formatter leaves them to Python) keep
    every digit."""
    rng = np.random.default_rng(len(kind))
    n_buckets, names = 40, ["a_count", "b count", "c,count"]
    lower = [0, *(2 ** np.arange(1, n_buckets)).tolist()]
    upper = [*lower[1:], 2 ** 63 - 1]
    counts = rng.integers(0, 4, (5, 3, n_buckets)).astype(np.float64) * (
        rng.random((5, 3, n_buckets)) < 0.3)
    counts[2] = 0  # no I/O
    if kind == "fractions":
        counts[counts > 2] = 2.5
    if kind == "huge":
        counts[1, 0, 7] = 2.0 ** 60
        counts[3, 2, 39] = 1e15
    inst, bucket = np.nonzero(counts.any(axis=1))
    out = RunOutput(tmp_path / "run")
    rels = [f"h/t/i{i}.csv" for i in range(5)]
    edges = LineTexts([f"{lo},{hi}" for lo, hi in zip(lower, upper, strict=True)])
    out.histogram_csvs(rels, edges, names, inst, bucket, counts[inst, :, bucket])
    for i, rel in enumerate(rels):
        text = (tmp_path / "run" / rel).read_bytes().decode()
        assert text == _histogram_reference(lower, upper, names, counts[i]), (kind, i)
    assert (tmp_path / "run" / rels[2]).read_text().count("\n") == 1
    # never overwritten: the same files again are refused, naming the file
    with pytest.raises(OutputError, match=r"i0\.csv"):
        out.histogram_csvs(rels, edges, names, inst, bucket, counts[inst, :, bucket])
    out.close()


def test_histogram_files_refuse_rows_that_do_not_fit() -> None:
    out = RunOutput.__new__(RunOutput)
    edges = LineTexts(["0,1", "1,2"])
    one = np.zeros(1, dtype=np.intp)
    for inst, bucket, counts, why in (
        (one + 2, one, np.ones((1, 1)), "below 2"),  # an instance past the files
        (np.array([1, 0]), np.array([0, 0]), np.ones((2, 1)), "ascending"),
        (one, one, np.ones((1, 2)), "1 columns"),
    ):
        with pytest.raises(ValueError, match=why):
            out.histogram_csvs(["a.csv", "b.csv"], edges, ["c"], inst, bucket, counts)


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (7.0, "7"), (2.5, "2.5"), (1e15, "1000000000000000"),
    (2.0 ** 60, "1152921504606846976"), (1 / 3, "0.333333"),
])
def test_histogram_counts_are_integers_when_whole(value: float, text: str) -> None:
    assert histogram_count_text(value) == text


@pytest.mark.parametrize("which", [[], [1], [2, 0, 2]])
def test_line_texts_take_gathers_texts_in_order(which: list[int]) -> None:
    texts = LineTexts(["a,b", "", "\u00e9t\u00e9"])
    got = texts.take(np.array(which, dtype=np.intp))
    assert [got.text(i) for i in range(len(got))] == [texts.text(i) for i in which]


def test_append_block_names_a_closed_file_it_cannot_open(tmp_path: Path) -> None:
    """Files beyond the open-file budget are appended by path; one that has gone (removed
    under the run) is named, and is not created again."""
    out = RunOutput(tmp_path, max_open_files=1)
    tables = [out.table(f"t{i}.csv", ["a"]) for i in range(3)]
    (tmp_path / "t1.csv").unlink()
    with pytest.raises(OutputError, match=r"t1\.csv.*No such file"):
        CsvAppender.append_block(tables, *_block(["0\r\n", "1\r\n", "2\r\n"]))
    out.close()
    assert (tmp_path / "t0.csv").read_text() == "a\n0\n"
    assert not (tmp_path / "t1.csv").exists()
    assert (tmp_path / "t2.csv").read_text() == "a\n"


def test_a_closed_file_whose_write_fails_is_cut_back_and_takes_the_next_line(
        tmp_path: Path) -> None:
    """A file kept closed whose line could not be written (file size limit) ends on its last
    whole row; a later block appends after it."""
    out = RunOutput(tmp_path, max_open_files=1)
    tables = [out.table(f"t{i}.csv", ["a"]) for i in range(3)]
    with file_size_limit(len("a\r\near")), pytest.raises(OutputError, match=r"t2\.csv"):
        tables[2].append_now("early\r\n")
    assert (tmp_path / "t2.csv").read_text() == "a\n"
    CsvAppender.append_block(tables, *_block(["0\r\n", "1\r\n", "2\r\n"]))
    out.close()
    assert [(tmp_path / f"t{i}.csv").read_text() for i in range(3)] == [
        "a\n0\n", "a\n1\n", "a\n2\n"]


@pytest.mark.parametrize("open_files", [1, 100])
def test_a_failed_subinterval_is_taken_back_from_every_file(tmp_path: Path,
                                                             open_files: int) -> None:
    """Disk full in the middle of a subinterval's rows (here a file size limit on the third
    of four files, and a file made in that subinterval): every file ends where the last whole
    subinterval ended, events.csv keeps its rows, and the next subinterval's rows follow."""
    out = RunOutput(tmp_path, max_open_files=open_files)
    tables = AppenderGroup(out.table(f"i{i}.csv", ["a"]) for i in range(4))
    events = out.table("events.csv", ["e"])
    with out.subinterval():
        CsvAppender.append_block(tables, *_block([(f"0-{i}" + "x" * 30 * (i == 2)) + "\r\n"
                                                  for i in range(4)]))
        out.table("cpu.csv", ["c"]).write({"c": 0})
    whole = {p.name: p.read_bytes() for p in tmp_path.glob("*.csv")}
    # the limit is set part way through the subinterval, and still in force for its undo
    with (file_size_limit() as limit, pytest.raises(OutputError, match=r"i2\.csv"),
          out.subinterval()):
        out.table("cpu.csv", ["c"]).write({"c": 1})
        events.write({"e": "told"})
        out.table("new.csv", ["n"]).write({"n": 1})
        limit(len(whole["i2.csv"]) + 2)
        CsvAppender.append_block(tables, *_block([f"1-{i}\r\n" for i in range(4)]))
    for name, data in whole.items():
        want = data + b"told\r\n" if name == "events.csv" else data
        assert (tmp_path / name).read_bytes() == want, name
    assert (tmp_path / "new.csv").read_text() == "n\n"  # made in the undone subinterval
    with out.subinterval():
        CsvAppender.append_block(tables, *_block([f"2-{i}\r\n" for i in range(4)]))
    out.close()
    assert [(tmp_path / f"i{i}.csv").read_text() for i in range(4)] == [
        f"a\n0-{i}{'x' * 30 * (i == 2)}\n2-{i}\n" for i in range(4)]


@pytest.mark.parametrize("what", ["folder", "open file", "closed file"])
def test_a_removed_run_folder_or_file_is_noticed(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    out = RunOutput(folder, max_open_files=1)
    tables = [out.table(f"step/all/i{i}.csv", ["a"]) for i in range(2)]
    with out.subinterval():
        CsvAppender.append_block(tables, *_block(["1\r\n", "2\r\n"]))
    if what == "folder":
        shutil.rmtree(folder)
        match = "the run folder was removed during the run"
    else:
        (folder / "step" / "all" / ("i0.csv" if what == "open file" else "i1.csv")).unlink()
        match = "removed during the run"
    with pytest.raises(OutputError, match=match), out.subinterval():
        raise AssertionError("not reached: the check comes first")
    out.close()


def test_tables_makes_a_directory_of_files_at_once(tmp_path: Path) -> None:
    """``tables``: the files of one directory created together (made on first use, given
    back after), each with its header; the open-file budget counts across calls; a name
    that is not a plain file name, a changed header, and an existing file are refused."""
    out = RunOutput(tmp_path, max_open_files=3)
    made = out.tables("step/lun", ["a.csv", "b.csv"], ["x", "y"])
    again = out.tables("step/lun", ["b.csv", "c.csv", "d.csv"], ["x", "y"])
    assert again[0] is made[1]
    assert out.table("step/lun/c.csv", ["x", "y"]) is again[1]
    assert [t.is_open for t in [*made, *again[1:]]] == [True, True, True, False]
    assert made[0].path == tmp_path / "step" / "lun" / "a.csv"
    with pytest.raises(ValueError, match="header changed"):
        out.tables("step/lun", ["a.csv"], ["x"])
    for bad in ("", "e/f.csv"):
        with pytest.raises(ValueError, match="not a file name"):
            out.tables("step/lun", [bad], ["x", "y"])
    (tmp_path / "step" / "lun" / "old.csv").write_text("earlier\n")
    with pytest.raises(OutputError, match=r"old\.csv"):
        out.tables("step/lun", ["old.csv"], ["x", "y"])
    CsvAppender.append_many(out.tables("step/lun", ["a.csv", "b.csv", "c.csv", "d.csv"],
                                       ["x", "y"]), ["1,2\r\n"] * 4)
    out.close()
    assert sorted(p.name for p in (tmp_path / "step" / "lun").iterdir()) == [
        "a.csv", "b.csv", "c.csv", "d.csv", "old.csv"]
    assert (tmp_path / "step" / "lun" / "old.csv").read_text() == "earlier\n"
    for name in ("a", "b", "c", "d"):
        assert (tmp_path / "step" / "lun" / f"{name}.csv").read_text() == "x,y\n1,2\n"


def test_tables_makes_many_files_in_one_call_as_one_at_a_time_does(tmp_path: Path) -> None:
    """From ``RunOutput.MADE_TOGETHER`` new files on, ``tables`` makes them in one compiled
    call: the same files, headers and appenders as one at a time (a few, or a resumed run's),
    the open-file budget kept across calls, and a file that exists is refused by name with
    the files before it made and given back by the next call."""
    n = RunOutput.MADE_TOGETHER
    names = [f"i{k:03d}.csv" for k in range(2 * n)]
    together = RunOutput(tmp_path / "together", max_open_files=n + 3)
    one = RunOutput(tmp_path / "one", max_open_files=n + 3)
    made = together.tables("step/w", names[:n + 1], ["x", "y"])
    singly = [one.tables("step/w", [name], ["x", "y"])[0] for name in names[:n + 1]]
    assert [a.is_open for a in made] == [a.is_open for a in singly] == [True] * (n + 1)
    more = together.tables("step/w", names, ["x", "y"])  # two more open, the rest closed
    assert more[:n + 1] == made
    assert [a.is_open for a in more[n + 1:]] == [True, True] + [False] * (n - 3)
    assert [a.path for a in made] == [tmp_path / "together" / "step" / "w" / m
                                      for m in names[:n + 1]]
    assert [a.size for a in more] == [len(b"x,y\r\n")] * (2 * n)
    CsvAppender.append_many(more, [f"{k},1\r\n" for k in range(2 * n)])
    with pytest.raises(ValueError, match="header changed"):
        together.tables("step/w", names, ["x"])
    # a file in the way: refused by its name, those before it made
    (tmp_path / "together" / "step" / "v").mkdir(parents=True)
    (tmp_path / "together" / "step" / "v" / names[5]).write_text("earlier\n")
    with pytest.raises(OutputError, match=re.escape(names[5])):
        together.tables("step/v", names, ["x", "y"])
    assert together.table(f"step/v/{names[4]}", ["x", "y"]).size == len(b"x,y\r\n")
    together.close()
    one.close()
    for k, name in enumerate(names):
        assert (tmp_path / "together" / "step" / "w" / name).read_text() == f"x,y\n{k},1\n"
    assert (tmp_path / "together" / "step" / "v" / names[5]).read_text() == "earlier\n"
    assert sorted(p.name for p in (tmp_path / "together" / "step" / "v").iterdir()) == names[:6]
