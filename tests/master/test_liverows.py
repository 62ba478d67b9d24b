"""Building what the live view is told: CPU figures, rows, DFC lines, end-of-run rows."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pytest

from master.live.rows import (
    LIVE_METRICS,
    LIVE_ROWS_MAX,
    DfcLine,
    FinalRow,
    LiveRow,
    check_live_rollup,
    default_live_rollup,
    dfc_lines,
    final_rows,
    instance_rows,
    ivypy_cpu_pct,
    live_rows,
    measure_lines,
    short_names,
    spread_rows,
    step_verdict,
)
from protocol.errors import ConfigError

NAN = math.nan


@pytest.mark.parametrize(("cpu", "subinterval_s", "want"), [
    # 0.3 s of the slave's CPU over 1 s on 2 cores: 15 % of the host
    ({"per_core_busy_pct": [40, 41], "slave_user_s": 0.2, "slave_system_s": 0.1}, 1.0, 15.0),
    # 4 s of CPU over 5 s on 8 cores: 10 %
    ({"per_core_busy_pct": [0] * 8, "slave_user_s": 3.0, "slave_system_s": 1.0}, 5.0, 10.0),
    # a whole core of a 4-core host: 25 %
    ({"per_core_busy_pct": [1] * 4, "slave_user_s": 0.5, "slave_system_s": 0.0}, 0.5, 25.0),
    ({"per_core_busy_pct": [], "slave_user_s": 0.2, "slave_system_s": 0.1}, 1.0, NAN),
    ({"per_core_busy_pct": [1, 2]}, 1.0, NAN),  # no seconds reported
    ({"per_core_busy_pct": [1, 2], "slave_user_s": 0.1, "slave_system_s": 0.1}, 0.0, NAN),
    ({}, 1.0, NAN),
])
def test_ivypy_cpu_pct(cpu: dict[str, Any], subinterval_s: float, want: float) -> None:
    got = ivypy_cpu_pct(cpu, subinterval_s)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want)


@pytest.mark.parametrize(("hosts", "want"), [(1, "lun"), (2, "host"), (16, "host")])
def test_default_live_rollup(hosts: int, want: str) -> None:
    assert default_live_rollup(hosts) == want


def test_check_live_rollup() -> None:
    check_live_rollup("vendor+model", ["all", "host", "lun", "workload", "vendor+model"], "t.yaml")
    with pytest.raises(ConfigError) as err:
        check_live_rollup("nope", ["all", "host", "lun", "workload"], "t.yaml")
    assert str(err.value) == ("t.yaml: --live-rollup: unknown rollup type 'nope' (the test's: "
                              "all, host, lun, workload)")


def test_live_rows_pick_every_labelled_column() -> None:
    columns = {"IOPS": [100.0, 200.0], "MB_per_s": [0.4, 0.8],
               "service_time_p50_ms": [0.1, 0.2], "service_time_p99_ms": [1.0, 2.0],
               "response_time_p50_ms": [0.15, 0.25], "response_time_p99_ms": [1.5, NAN],
               "service_time_mean_ms": [9.0, 9.0]}
    got = live_rows(["a", "b"], columns, [40.0, 60.0], [5.0, 7.5])
    assert got[0] == LiveRow("a", 100.0, 0.4, 0.1, 1.0, 0.15, 1.5, 40.0, 5.0)
    assert got[1].instance == "b" and got[1].response_p50_ms == 0.25
    assert math.isnan(got[1].response_p99_ms)
    assert (got[1].host_cpu_pct, got[1].ivypy_cpu_pct) == (60.0, 7.5)


def test_dfc_lines() -> None:
    rows = [{"subinterval": 3, "instance": "host=h1", "metric": "service_time_p99_ms",
             "measured": 0.9, "target": 1.0, "iops_in_force": 1000.0, "new_iops": 1100.0},
            {"instance": "h2", "metric": "IOPS", "measured": None, "target": 5000,
             "iops_in_force": None, "new_iops": 4000}]
    got = dfc_lines(rows)
    assert got[0] == DfcLine("host=h1", "service_time_p99_ms", 1.0, 0.9, 1000.0, 1100.0)
    assert got[1].instance == "h2" and got[1].iops_set == 4000.0
    assert math.isnan(got[1].measured) and math.isnan(got[1].iops_in_force)
    assert dfc_lines([]) == []


def _summary(rollup_type: str, inst: str, iops: float, valid: Any = True,
             reason: str = "") -> dict[str, Any]:
    return {"rollup_type": rollup_type, "rollup_instance": inst, "IOPS": iops,
            "MB_per_s": iops / 256, "service_time_p50_ms": 0.1, "service_time_p99_ms": 0.9,
            "response_time_p50_ms": 0.2, "response_time_p99_ms": "", "valid": valid,
            "invalid_reason": reason}


SUMMARY = [_summary("all", "all", 3000.0, False, "host: 1 instances, expected 2"),
           _summary("host", "h1", 3000.0, False, "host: 1 instances, expected 2"),
           _summary("lun", "l1", 1000.0), _summary("lun", "l2", 1000.0),
           _summary("lun", "l3", 1000.0), _summary("workload", "w", 3000.0)]


@pytest.mark.parametrize(("types", "limit", "want", "left_out"), [
    (("all", "lun"), 10, [("all", "all"), ("lun", "l1"), ("lun", "l2"), ("lun", "l3")], 0),
    (("all", "lun"), 2, [("all", "all"), ("lun", "l1"), ("lun", "l2")], 1),
    # one host: its row is the total's, to the digit (shown, it doubled every line)
    (("all", "host"), 2, [("all", "all")], 0),
    (("all", "all"), 0, [("all", "all")], 0),  # the live rollup is all: no second copy
    (("all", "vendor"), 5, [("all", "all")], 0),  # a type with no rows
])
def test_final_rows_pick_all_and_the_live_rollup(types: tuple[str, ...], limit: int,
                                                 want: list[tuple[str, str]],
                                                 left_out: int) -> None:
    rows, n_left = final_rows("0 s", SUMMARY, types, limit)
    assert [(r.rollup_type, r.instance) for r in rows] == want
    assert n_left == left_out
    assert all(r.step == "0 s" for r in rows)


def test_final_rows_carry_numbers_valid_and_reason() -> None:
    rows, _ = final_rows("1 mix", SUMMARY, ("all", "lun"), 5)
    first = rows[0]
    assert math.isnan(first.response_p99_ms)  # an empty cell: no number
    assert first == FinalRow("1 mix", "all", "all", 3000.0, 3000.0 / 256, 0.1, 0.9, 0.2,
                             first.response_p99_ms, False, "host: 1 instances, expected 2")
    assert rows[1].valid is True and rows[1].reason == ""
    # summary.csv's text cells read the same
    text, _ = final_rows("1 mix", [_summary("all", "all", 5.0, "False", "why")], ("all",), 5)
    assert (text[0].valid, text[0].reason) == (False, "why")
    unknown, _ = final_rows("1 mix", [_summary("all", "all", 5.0, "")], ("all",), 5)
    assert unknown[0].valid is None


def test_final_rows_of_a_step_without_summary() -> None:
    rows, left_out = final_rows("2 short", [], ("all", "lun"), 5)
    assert left_out == 0
    assert len(rows) == 1
    assert (rows[0].step, rows[0].rollup_type, rows[0].valid) == ("2 short", "all", None)
    assert rows[0].reason == "no measurement subintervals"
    assert math.isnan(rows[0].iops)
    # an interrupted step: its verdict and reason as the run had them
    rows, _ = final_rows("2 short", [], ("all",), 5, valid=False,
                         reasons=["interrupted after subinterval 0"])
    assert (rows[0].valid, rows[0].reason) == (
        False, "no measurement subintervals; interrupted after subinterval 0")
    # the verdict given is for a step without rows only
    rows, _ = final_rows("0 s", SUMMARY, ("all",), 5, valid=True, reasons=["ignored"])
    assert (rows[0].valid, rows[0].reason) == (False, "host: 1 instances, expected 2")


@pytest.mark.parametrize(("marks", "reasons", "want"), [
    ([True, True], ["", ""], (True, "")),
    # the host rollup's quantity failed: the step is invalid though its all row is valid
    ([True, False], ["", "host: 1 instances, expected 2"],
     (False, "host: 1 instances, expected 2")),
    # a step-wide reason in every row, a rollup's own in one: each part once, in order
    ([False, False, False], ["timed out", "timed out; host: 1 instances, expected 2",
                             "timed out"], (False, "timed out; host: 1 instances, expected 2")),
    (["True", "False"], ["", "droop"], (False, "droop")),  # CSV text
    ([True, ""], ["", ""], (None, "")),  # a row that does not say
    ([], [], (None, "")),
])
def test_step_verdict(marks: list[Any], reasons: list[str],
                      want: tuple[bool | None, str]) -> None:
    rows = [{"valid": m, "invalid_reason": r} for m, r in zip(marks, reasons, strict=True)]
    assert step_verdict(rows) == want


def test_the_all_row_carries_the_step_verdict() -> None:
    summary = [_summary("all", "all", 3000.0), _summary("lun", "l1", 3000.0),
               _summary("lun", "l2", 0.0),
               _summary("host", "h1", 3000.0, False, "host: 1 instances, expected 2")]
    rows, _ = final_rows("0 s", summary, ("all", "lun"), 5)
    assert [(r.rollup_type, r.valid, r.reason) for r in rows] == [
        ("all", False, "host: 1 instances, expected 2"), ("lun", True, ""), ("lun", True, "")]


def test_live_rows_stop_at_the_limit() -> None:
    n = 1000
    columns = {c: [float(i) for i in range(n)] for c in
               ("IOPS", "MB_per_s", "service_time_p50_ms", "service_time_p99_ms",
                "response_time_p50_ms", "response_time_p99_ms")}
    names = [f"w{i}" for i in range(n)]
    got = live_rows(names, columns, [1.0] * n, [2.0] * n)
    assert len(got) == LIVE_ROWS_MAX and got[-1].instance == f"w{LIVE_ROWS_MAX - 1}"
    assert got[-1].response_p99_ms == LIVE_ROWS_MAX - 1
    assert [r.instance for r in live_rows(names[:3], columns, [1.0] * 3, [2.0] * 3, 5)] == [
        "w0", "w1", "w2"]


@pytest.mark.parametrize(("names", "want"), [
    (["h1:/dev/sdb", "h1:/dev/sdc", "h2:/dev/sdb"], ["h1:sdb", "h1:sdc", "h2:sdb"]),
    # two files of one name on a host: those two stay whole
    (["h1:/data/a/lun0:rr", "h1:/data/b/lun0:rr", "h1:/data/a/lun1:rr"],
     ["h1:/data/a/lun0:rr", "h1:/data/b/lun0:rr", "h1:lun1:rr"]),
    (["localhost", "ACME+X1", "all"], ["localhost", "ACME+X1", "all"]),  # no path: as it is
])
def test_short_names(names: list[str], want: list[str]) -> None:
    assert short_names(names) == want


def test_instance_rows_are_none_for_one_instance_and_short_otherwise() -> None:
    row = LiveRow("h1:/dev/sdb", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    other = dataclasses.replace(row, instance="h1:/dev/sdc")
    assert instance_rows("lun", 1, [row]) == []  # the total, to the digit
    assert instance_rows("all", 5, [row, other]) == []
    assert [r.instance for r in instance_rows("lun", 2, [row, other])] == ["h1:sdb", "h1:sdc"]
    # one row shown of more: still rows
    assert [r.instance for r in instance_rows("lun", 9, [row])] == ["h1:sdb"]


def _mrow(inst: str, value: float, passed: bool, first: int | None = 3,
          attained: bool = False, criterion: str = "accuracy") -> dict[str, Any]:
    return {"instance": inst, "criterion": criterion, "metric": "IOPS",
            "limit": "5% at 95%" if criterion == "accuracy" else "2%", "window_first": first,
            "value": value, "passed": passed, "attained": attained}


@pytest.mark.parametrize(("rows", "want"), [
    ([], []),
    ([_mrow("h1", math.nan, False, first=None), _mrow("h2", math.nan, False, first=None)],
     ["measure accuracy of IOPS (limit 5% at 95%): no full window yet"]),
    ([_mrow("h1", 3.2, True), _mrow("h2", 7.31, False), _mrow("h3", 6.0, False)],
     ["measure accuracy of IOPS (limit 5% at 95%): 1 of 3 within; h2 at 7.31%"]),
    ([_mrow("h1", 3.2, True, attained=True), _mrow("h2", 4.0, True, attained=True)],
     ["measure accuracy of IOPS (limit 5% at 95%): 2 of 2 within; steady"]),
    ([_mrow("h1", 1.0, True, criterion="iops"), _mrow("h1", 6.25, False, criterion="iops_slope")],
     ["measure iops of IOPS (limit 2%): 1 of 1 within",
      "measure iops_slope of IOPS (limit 2%): 0 of 1 within; h1 at 6.25"]),
])
def test_measure_lines_say_how_near_the_criterion_is(rows: list[dict[str, Any]],
                                                     want: list[str]) -> None:
    assert measure_lines(rows) == want


@pytest.mark.parametrize(("iops", "p99", "want_iops", "want_p99"), [
    ([1.0, 5.0, 3.0], [2.0, 1.0, 9.0], (5.0, 3.0, 1.0), (9.0, 4.0, 1.0)),
    # an instance without I/O: its NaN left out of each
    ([4.0, NAN, 2.0], [NAN, NAN, 6.0], (4.0, 3.0, 2.0), (6.0, 6.0, 6.0)),
    # no instance with a value: NaN, no warning
    ([NAN, NAN], [NAN, NAN], (NAN, NAN, NAN), (NAN, NAN, NAN)),
])
def test_spread_rows_are_each_columns_highest_mean_and_lowest(
        iops: list[float], p99: list[float], want_iops: tuple[float, ...],
        want_p99: tuple[float, ...]) -> None:
    n = len(iops)
    columns = {c: [NAN] * n for c in LIVE_METRICS}
    columns["IOPS"], columns["service_time_p99_ms"] = iops, p99
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = spread_rows(columns, [10.0 * (i + 1) for i in range(n)], [NAN] * n)
    assert [r.instance for r in rows] == ["highest", "mean", "lowest"]
    np.testing.assert_array_equal([r.iops for r in rows], want_iops)
    np.testing.assert_array_equal([r.service_p99_ms for r in rows], want_p99)
    np.testing.assert_array_equal([r.host_cpu_pct for r in rows],
                                  [10.0 * n, 5.0 * (n + 1), 10.0])
