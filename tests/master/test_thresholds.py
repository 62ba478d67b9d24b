"""``master.analysis.thresholds``: the test's thresholds judged on a step's summary rows, each
row's ``thresholds`` cell, and the cell read back; ``master.config.thresholds``'s shape (its
errors are tests/master/bad_configs/threshold_*.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from master.analysis.thresholds import cell, judge, parse_cell, row_cells
from master.config import parse_config_text
from master.config.expr import parse_fail_if
from master.config.thresholds import Threshold
from master.results.summaryfiles import with_column

ROWS: list[dict[str, Any]] = [
    {"rollup_type": "all", "rollup_instance": "all", "IOPS": 61204.25,
     "service_time_p99_ms": 2.31, "valid": True, "invalid_reason": ""},
    {"rollup_type": "host", "rollup_instance": "h1", "IOPS": 30000.0,
     "service_time_p99_ms": 1.5, "valid": True, "invalid_reason": ""},
    {"rollup_type": "host", "rollup_instance": "h2", "IOPS": 31204.25,
     "service_time_p99_ms": None, "valid": True, "invalid_reason": ""},
]


def t(expr: str, **kw: Any) -> Threshold:
    if "step" in kw:
        kw.setdefault("steps", (kw["step"],))
    return Threshold(cond=parse_fail_if(expr), **kw)


@pytest.mark.parametrize(("threshold", "step", "want"), [
    # every step's all instance
    (t("IOPS > 50000"), "s1", {0: [("passed", "61204.2")]}),
    (t("service_time_p99_ms < 2"), "s1", {0: [("FAILED", "2.31")]}),
    (t("service_time_p99_ms <= 2.31"), "s1", {0: [("passed", "2.31")]}),
    # narrowed to another step: not judged here
    (t("IOPS > 50000", step="s2"), "s1", {}),
    (t("IOPS > 50000", step="s1"), "s1", {0: [("passed", "61204.2")]}),
    # each instance of a rollup; one without a value is untold
    (t("service_time_p99_ms < 2", rollup="host"), "s1",
     {1: [("passed", "1.5")], 2: [("UNTOLD", "no value of service_time_p99_ms")]}),
    (t("IOPS >= 31000", rollup="host", instance="h2"), "s1", {2: [("passed", "31204.2")]}),
    # an instance the step did not have: untold, on the all row, naming those it had
    (t("IOPS > 1", rollup="host", instance="h9"), "s1",
     {0: [("UNTOLD", "no instance 'h9' in rollup host (instances: h1, h2)")]}),
    (t("IOPS > 1", rollup="lun"), "s1", {0: [("UNTOLD", "no summary of rollup lun")]}),
])
def test_judge(threshold: Threshold, step: str, want: dict[int, list[tuple[str, str]]]) -> None:
    got = judge([threshold], step, ROWS)
    assert {i: [(j.outcome, j.detail) for j in js] for i, js in got.items()} == want


def test_a_step_that_failed_is_untold_with_its_reason() -> None:
    rows = [{"rollup_type": "all", "rollup_instance": "all", "IOPS": None, "valid": False,
             "invalid_reason": "failed in subinterval 2: host h1: connection lost"}]
    (judged,) = judge([t("IOPS > 1")], "s1", rows)[0]
    assert (judged.outcome, judged.detail) == (
        "UNTOLD", "no value of IOPS: failed in subinterval 2: host h1: connection lost")
    assert not judged.holds


def test_cells_read_back_as_they_were_judged() -> None:
    thresholds = [t("IOPS > 50000"), t("service_time_p99_ms < 2"),
                  t("service_time_p99_ms < 2", rollup="host", step="s1"),
                  t("IOPS > 1", rollup="host", instance="h9")]
    cells, judged = row_cells(thresholds, "s1", ROWS)
    rows = with_column(ROWS, "thresholds", cells)
    assert rows[0]["thresholds"] == (
        "passed: IOPS > 50000 (61204.2); FAILED: service_time_p99_ms < 2 (2.31); "
        "UNTOLD: IOPS > 1 [host h9] (no instance 'h9' in rollup host (instances: h1, h2))")
    assert rows[1]["thresholds"] == "passed: service_time_p99_ms < 2 [step s1, every host] (1.5)"
    assert [j.line for j in judged][1] == "FAILED step s1 all all: service_time_p99_ms < 2 (2.31)"
    back = [j for row in rows for j in parse_cell(row["thresholds"], "s1", row["rollup_type"],
                                                    row["rollup_instance"])]
    assert len(back) == len(judged) == 5
    assert sorted((j.text, j.outcome, j.detail, j.rollup) for j in back) == sorted(
        (j.text, j.outcome, j.detail, j.rollup) for j in judged)
    assert rows[2]["thresholds"].startswith("UNTOLD: service_time_p99_ms < 2 [step s1, every host]")


@pytest.mark.parametrize(("text", "want"), [
    ("", []),
    ("passed: IOPS > 5 (61)", [("IOPS > 5", "passed", "61")]),
    # a detail with parentheses of its own; a gathered metric's name with a semicolon
    ("UNTOLD: IOPS > 5 (no value of IOPS: failed (host h1)); FAILED: gather.a;b.T.m < 1 (3)",
     [("IOPS > 5", "UNTOLD", "no value of IOPS: failed (host h1)"),
      ("gather.a;b.T.m < 1", "FAILED", "3")]),
    # a cell edited by hand into something else does not hold
    ("held, surely", [("held, surely", "UNTOLD", "unreadable result")]),
])
def test_parse_cell(text: str, want: list[tuple[str, str, str]]) -> None:
    assert [(j.text, j.outcome, j.detail) for j in parse_cell(text, "s", "all", "all")] == want


def test_a_row_without_results_has_an_empty_cell() -> None:
    assert cell([]) == ""


SWEEP = """\
test: t
hosts: [localhost]
luns: [{path: /dev/null}]
steps:
  - {name: base, workloads: [{name: w, iosequencer: random_steady, iops: 100}]}
  - {name: sw, for: {blocksize: [4KiB, 1MiB]}}
thresholds:
  - {expr: "IOPS > 50", step: sw}
  - {expr: "IOPS > 60", step: sw-blocksize=1MiB}
"""


def test_a_sweeps_name_means_every_step_it_made() -> None:
    cfg = parse_config_text(SWEEP, "sweep.yaml", cwd=Path("/x"))
    assert [s.name for s in cfg.steps] == ["base", "sw-blocksize=4KiB", "sw-blocksize=1MiB"]
    swept, one = cfg.thresholds
    assert swept.steps == ("sw-blocksize=4KiB", "sw-blocksize=1MiB")
    assert one.steps == ("sw-blocksize=1MiB",)
    row = [{"rollup_type": "all", "rollup_instance": "all", "IOPS": 55.0}]
    assert [len(judge(cfg.thresholds, s.name, row).get(0, [])) for s in cfg.steps] == [0, 1, 2]
    assert [j.outcome for j in judge(cfg.thresholds, "sw-blocksize=1MiB", row)[0]] == [
        "passed", "FAILED"]
