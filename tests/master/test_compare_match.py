"""Reading a run's summary.csv for ``ivypy compare`` and matching two runs: steps by name,
instances by name, what only one run has, the metrics asked for, each metric's change (a base
of 0, empty cells), and the refusals that make the command exit 2."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from master.config.expr import parse_fail_if
from master.results.compare.changes import compare, metric_change
from master.results.compare.match import check_metrics, likely_metrics, match_runs
from master.results.compare.summary import (
    NOT_METRICS,
    RunSummary,
    _records,
    parse_summary,
    read_summary,
)
from protocol.errors import CompareError

HEADER = ("step_number,step_name,rollup_type,rollup_instance,measurement_seconds,IOPS,"
          "service_time_p99_ms,valid,invalid_reason,measure_criterion")


def summary(*rows: str, header: str = HEADER, name: str = "run") -> RunSummary:
    return parse_summary(Path(name) / "summary.csv", "\n".join([header, *rows]) + "\n")


BASE = summary("0,warm,all,all,10,1000,1.5,true,,",
               "0,warm,host,h1,10,600,1.4,true,,",
               "0,warm,host,h2,10,400,1.6,true,,",
               "1,read,all,all,10,2000,2.0,true,,",
               "1,read,host,h1,10,2000,2.0,true,,",
               "2,gone,all,all,10,5,,true,,", name="base")
NEW = summary("0,warm,all,all,10,500,3.0,false,IOPS 50 % below setting,",
              "0,warm,host,h1,10,500,3.0,true,,",
              "0,warm,host,h3,10,0,,true,,",
              "1,read,all,all,10,2000,2.0,true,,",
              "2,added,all,all,10,7,1.0,true,,", name="new")


def test_parse_reads_numbers_validity_and_metrics() -> None:
    row = NEW.rows[0]
    assert (row.step_number, row.step_name, row.rollup_type, row.rollup_instance) == (
        0, "warm", "all", "all")
    assert row.valid is False and row.invalid_reason == "IOPS 50 % below setting"
    assert row.values == {"measurement_seconds": 10.0, "IOPS": 500.0,
                          "service_time_p99_ms": 3.0} and row.line == 2
    assert NEW.rows[2].values["service_time_p99_ms"] is None  # an empty cell
    assert NEW.metrics == ("measurement_seconds", "IOPS", "service_time_p99_ms")
    assert "measure_criterion" not in NEW.metrics


def test_a_text_column_is_not_a_metric() -> None:
    run = summary("0,s,all,all,1,5,x,true,,", "0,s,host,h,1,5,1,true,,")
    assert run.metrics == ("measurement_seconds", "IOPS") and run.text_columns == {
        "service_time_p99_ms": 2}
    with pytest.raises(CompareError, match=r"metric 'service_time_p99_ms' is not a number in "
                       r"the base run \(run/summary.csv:2\)"):
        check_metrics(run, run, ["service_time_p99_ms"])


@pytest.mark.parametrize("cell, value", [("", None), (" ", None), ("nan", None), ("1e3", 1000.0),
                                         ("-0.5", -0.5)])
def test_cells(cell: str, value: float | None) -> None:
    assert summary(f"0,s,all,all,1,{cell},1,true,,").rows[0].values["IOPS"] == value


@pytest.mark.parametrize("cell", ["inf", "-inf", "1,000", "x"])
def test_a_cell_that_is_not_a_finite_number_makes_a_text_column(cell: str) -> None:
    run = summary(f'0,s,all,all,1,"{cell}",1,true,,')
    assert "IOPS" not in run.metrics and run.text_columns == {"IOPS": 2}


@pytest.mark.parametrize("text", [
    "a,b\n1,2\n3,4\n",
    "a,b\r\n1,2\r\n\r\n3,4\r\n",  # CRLF, a blank line
    "a,b\r1,2\r3,4",  # CR, no line end at the end
    "a,b\n\n\n1,2\n3,4\n\n",
    "a,b\n1,x\x0cy\n3,\u2028\n",  # a form feed and U+2028 inside cells: no line end
    'a,b\n1,"2,\n5"\n3,4\n',  # quoted: the csv module's reading
])
def test_a_summary_is_split_into_rows_as_the_csv_module_splits_it(text: str) -> None:
    """Each row not blank and the line it ends on: a file without quotes split at its
    commas, as the csv module reads it."""
    reader = csv.reader(io.StringIO(text, newline=""))
    expected = [(reader.line_num, cells) for cells in reader if cells]
    assert list(_records(Path("s.csv"), text)) == expected


def test_only_the_columns_asked_for_are_read() -> None:
    """``read``: the columns kept (a comparison's metrics); every column that may be a metric
    is still named, for a hint."""
    text = "\n".join([HEADER, "0,s,all,all,1,5,x,true,,", "1,t,all,all,1,7,x,true,,"]) + "\n"
    run = parse_summary(Path("run/summary.csv"), text, read=["IOPS"])
    assert run.columns == ("measurement_seconds", "IOPS", "service_time_p99_ms")
    assert run.read == ("IOPS",) and run.metrics == ("IOPS",) and run.text_columns == {}
    assert [r.values for r in run.rows] == [{"IOPS": 5.0}, {"IOPS": 7.0}]
    with pytest.raises(KeyError, match="was not read"):
        run.text_line("service_time_p99_ms")
    with pytest.raises(CompareError, match=r"no metric 'iops'.*did you mean 'IOPS'"):
        check_metrics(run, run, ["iops"])


def test_a_text_column_names_the_first_line_that_is_not_a_number() -> None:
    run = summary("0,s,all,all,1,5,1,true,,", "0,s,host,a,1,x,1,true,,",
                  "0,s,host,b,1,y,1,true,,", "0,s,host,c,1,x,1,true,,")
    assert run.text_columns == {"IOPS": 3} and run.text_line("IOPS") == 3
    assert run.metrics == ("measurement_seconds", "service_time_p99_ms")


def test_quoted_cells_and_line_numbers() -> None:
    run = summary('0,s,all,all,1,5,1,false,"two\nlines, quoted",', "1,t,all,all,1,5,1,true,,")
    assert run.rows[0].invalid_reason == "two\nlines, quoted"
    assert [r.line for r in run.rows] == [3, 4]  # the physical line a row ends on


@pytest.mark.parametrize("text, why", [
    ("", "run/summary.csv: empty file: no header row"),
    ("step_number,step_name,IOPS\n0,s,1\n",
     "run/summary.csv: not a run summary: no column rollup_type, rollup_instance, valid"),
    (f"{HEADER}\n0,s,all,all,1,5,1,maybe,,\n",
     "run/summary.csv:2: valid is 'maybe', not true or false"),
    (f"{HEADER}\nx,s,all,all,1,5,1,true,,\n",
     "run/summary.csv:2: step_number 'x' is not a whole number"),
    (f"{HEADER}\n0,s,all,all,1,5\n", "run/summary.csv:2: row does not have the header's"),
    (f"{HEADER}\n0,s,all,all,1,5,1,true,,,extra\n", "run/summary.csv:2: row does not have"),
    (f"{HEADER}\n0,s,all,all,1,5,1,true,,\n0,s,all,all,1,5,1,true,,\n",
     "run/summary.csv:3: step 's' all 'all' again (first at line 2)"),
    # a quote left open: the rest of the file one cell, beyond csv's field limit
    (f'{HEADER}\n0,s,all,all,1,5,1,true,,\n1,t,all,all,1,"5\n{"9," * 70000}\n',
     "run/summary.csv:3: a garbled row: field larger than field limit"),
    (f'"{"x" * 140000}",{HEADER}\n', "run/summary.csv:1: a garbled header row"),
])
def test_bad_summary_named(text: str, why: str) -> None:
    with pytest.raises(CompareError) as err:
        parse_summary(Path("run/summary.csv"), text)
    assert str(err.value).startswith(why), str(err.value)


def test_read_summary_from_folder_or_file(tmp_path: Path) -> None:
    (tmp_path / "summary.csv").write_text(f"{HEADER}\n0,s,all,all,1,5,1,true,,\n")
    assert read_summary(tmp_path).rows == read_summary(tmp_path / "summary.csv").rows
    with pytest.raises(CompareError, match="no such run folder"):
        read_summary(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match=r"empty: no summary.csv: not a run folder"):
        read_summary(tmp_path / "empty")


def test_read_summary_kept_under_another_name(tmp_path: Path) -> None:
    kept = tmp_path / "nightly-base.csv"
    kept.write_text(f"{HEADER}\n0,s,all,all,1,5,1,true,,\n")
    assert [r.step_name for r in read_summary(kept).rows] == ["s"]
    assert read_summary(kept).path == kept


def test_read_summary_with_a_bom(tmp_path: Path) -> None:
    bom = tmp_path / "saved" / "summary.csv"  # saved again by a spreadsheet: a BOM first
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + f"{HEADER}\n0,s,all,all,1,5,1,true,,\n".encode())
    assert read_summary(bom.parent).rows[0].step_number == 0


def test_iops_setting_max_is_an_empty_value() -> None:
    header = HEADER.replace(",valid", ",iops_setting,valid")
    run = summary("0,curve_max,all,all,10,9000,1.5,max,true,,",
                  "1,curve_50,all,all,10,4500,1.0,4500,true,,", header=header)
    assert "iops_setting" in run.metrics and run.text_columns == {}
    assert [r.values["iops_setting"] for r in run.rows] == [None, 4500.0]
    check_metrics(run, run, ["iops_setting"])
    other = summary("0,s,all,all,10,9000,1.5,most,true,,", header=header)
    assert other.text_columns == {"iops_setting": 2}  # only 'max' is no number


def test_a_run_without_rows_or_without_the_rollup_type_named() -> None:
    empty = summary(name="empty")
    with pytest.raises(CompareError) as err:
        match_runs(BASE, empty, "all")
    assert str(err.value) == ("empty/summary.csv: the new run has no step in its summary: its "
                              "run wrote none (a header only)")
    with pytest.raises(CompareError, match=r"^empty/summary\.csv: the base run has no step"):
        match_runs(empty, empty, "all")
    all_only = summary("0,warm,all,all,10,1,1,true,,", name="new")
    with pytest.raises(CompareError) as err:
        match_runs(BASE, all_only, "host")
    assert str(err.value) == ("no step and host instance is in both runs (base: steps warm, "
                              "read; new: no rollup type 'host', only all (new/summary.csv))")


def test_match_by_step_and_instance_name() -> None:
    m = match_runs(BASE, NEW, "host")
    assert [(p.step_name, p.rollup_instance) for p in m.pairs] == [("warm", "h1")]
    assert m.only_in_base == ("step warm: host h2", "step read: host h1")
    assert m.only_in_new == ("step warm: host h3",)
    m = match_runs(BASE, NEW, "all")
    assert [p.step_name for p in m.pairs] == ["warm", "read"]
    assert m.only_in_base == ("step gone",) and m.only_in_new == ("step added",)


def test_match_ignores_step_numbers() -> None:
    moved = summary("5,read,all,all,10,1000,2.0,true,,")
    assert [p.new.step_number for p in match_runs(BASE, moved, "all").pairs] == [5]


@pytest.mark.parametrize("rollup, why", [
    ("lun", "--rollup: neither run has rollup type 'lun' (they have: all, host)"),
])
def test_unknown_rollup_type(rollup: str, why: str) -> None:
    with pytest.raises(CompareError) as err:
        match_runs(BASE, NEW, rollup)
    assert str(err.value) == why


def test_nothing_in_common() -> None:
    other = summary("0,other,all,all,10,1,1,true,,")
    with pytest.raises(CompareError) as err:
        match_runs(BASE, other, "all")
    assert str(err.value) == ("no step and all instance is in both runs (base: steps warm, "
                              "read, gone; new: steps other)")
    only_base = summary("0,warm,host,h9,10,1,1,true,,")
    with pytest.raises(CompareError, match="no step and host instance is in both runs"):
        match_runs(only_base, summary("0,warm,all,all,10,1,1,true,,"), "host")


@pytest.mark.parametrize("metrics, why", [
    (["IOPS", "MB_per_s"], "the base run has no metric 'MB_per_s' (base/summary.csv)"),
    (["IOPs"], "the base run has no metric 'IOPs' (base/summary.csv); did you mean 'IOPS'?"),
    (["iops"], "the base run has no metric 'iops' (base/summary.csv); did you mean 'IOPS'?"),
    (["p99"], "the base run has no metric 'p99' (base/summary.csv); did you mean "
              "'service_time_p99_ms'?"),
    (["valid"], "the base run has no metric 'valid'"),
])
def test_missing_metric_named(metrics: list[str], why: str) -> None:
    with pytest.raises(CompareError) as err:
        check_metrics(BASE, NEW, metrics)
    assert str(err.value).startswith(why), str(err.value)


def test_metric_missing_in_new_run_only() -> None:
    fewer = summary("0,warm,all,all,10,1000,true,", name="new",
                    header="step_number,step_name,rollup_type,rollup_instance,"
                    "measurement_seconds,IOPS,valid,invalid_reason")
    check_metrics(BASE, fewer, ["IOPS"])
    with pytest.raises(CompareError, match=r"^the new run has no metric 'service_time_p99_ms'"):
        check_metrics(BASE, fewer, ["IOPS", "service_time_p99_ms"])


@pytest.mark.parametrize("base, new, change, pct, note", [
    (1000.0, 500.0, -500.0, -50.0, ""),
    (2.0, 2.0, 0.0, 0.0, ""),
    (0.0, 0.0, 0.0, 0.0, ""),
    (0.0, 7.0, 7.0, None, "base is 0"),
    (None, 7.0, None, None, "no base value"),
    (7.0, None, None, None, "no new value"),
    (None, None, None, None, "no values"),
])
def test_metric_change(base: float | None, new: float | None, change: float | None,
                       pct: float | None, note: str) -> None:
    c = metric_change("IOPS", base, new)
    assert (c.base, c.new, c.change, c.change_pct, c.note) == (base, new, change, pct, note)


def test_compare_marks_failed_and_untold_conditions() -> None:
    conds = [parse_fail_if("IOPS < -10%"), parse_fail_if("service_time_p99_ms > 2.5")]
    third = summary("0,warm,all,all,10,900,,true,,", "1,read,all,all,10,1000,2.6,true,,")
    cmp = compare(match_runs(BASE, third, "all"), ["IOPS"], conds)
    assert cmp.metrics == ("IOPS", "service_time_p99_ms")  # a condition's metric is shown
    warm, read = cmp.rows
    assert warm.failed == () and [c.text for c in warm.untold] == ["service_time_p99_ms > 2.5"]
    assert [c.text for c in read.failed] == ["IOPS < -10%", "service_time_p99_ms > 2.5"]
    assert [(r.pair.step_name, c.metric) for r, c in cmp.failures] == [
        ("read", "IOPS"), ("read", "service_time_p99_ms")]
    assert read.change_of("IOPS").change_pct == pytest.approx(-50.0)


def test_not_metrics_are_run_summary_columns() -> None:
    from master.cli.compare import DEFAULT_METRICS
    from master.results.schema import RUN_SUMMARY_COLUMNS
    assert set(RUN_SUMMARY_COLUMNS) >= NOT_METRICS
    assert set(DEFAULT_METRICS) <= set(RUN_SUMMARY_COLUMNS) - NOT_METRICS


@pytest.mark.parametrize("typed, want", [
    ("iops", ["IOPS"]),  # the case
    ("p99", ["service_time_p99_ms", "response_time_p99_ms"]),  # a part of each
    ("p99_9", ["service_time_p99_9_ms"]),
    ("IOPs", ["IOPS"]),  # the closest spelling
    ("zzz", []),
])
def test_likely_metrics(typed: str, want: list[str]) -> None:
    known = ["IOPS", "MB_per_s", "service_time_p99_ms", "service_time_p99_9_ms",
             "response_time_p99_ms"]
    assert likely_metrics(typed, known) == want
