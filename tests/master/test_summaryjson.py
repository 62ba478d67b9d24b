"""summary.json's builder on hand-made run folders, and its schema: every document built, whole
or from a broken folder, validates against docs/summary.schema.json; the schema is a valid
draft 2020-12 schema that describes every field and every summary.csv and hosts.csv column;
cells are typed (numbers, booleans, null for empty); a missing or garbled file leaves its part
empty and is named in ``problems``; steps that never ran are told apart from incomplete ones."""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from master.results import summaryjson as sj
from master.results.csvfiles import fmt
from master.results.runstate import new_state, write_state
from master.results.schema import HOST_COLUMNS, RUN_SUMMARY_COLUMNS, summary_columns
from master.run.lifecycle import Run
from protocol.errors import OutputError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs/summary.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
STEPS = ("fill", "mix", "tail")


def _valid(doc: Mapping[str, Any]) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(doc)]
    assert errors == []


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            w.writerow([fmt(r.get(c)) for c in header])


def _summary_row(step: int, rtype: str, inst: str, **cells: Any) -> dict[str, Any]:
    return {"step_number": step, "step_name": STEPS[step], "rollup_type": rtype,
            "rollup_instance": inst, "first_subinterval": 1, "last_subinterval": 4,
            "measurement_seconds": 4.0, "IOPS": 2000.0, "MB_per_s": 8.192,
            "service_time_mean_ms": 0.25, "service_time_p99_ms": 1.5,
            "response_time_p99_ms": 2.0, "write_service_time_p99_ms": None, "workloads": 1,
            "iops_setting": 2000.0, "valid": True, "invalid_reason": "", **cells}


def _folder(tmp: Path, *, state: str = "complete", last_complete: int = 2,
            exit_code: int | None = 0, rows: Sequence[Mapping[str, Any]] | None = None,
            events: Sequence[Mapping[str, Any]] = (), step_dirs: Sequence[int] = (0, 1, 2),
            ) -> Path:
    """A run folder of a 3-step test as a run leaves it."""
    folder = tmp / "t" / "20261125-140000"
    folder.mkdir(parents=True)
    st = new_state("t", len(STEPS), "test: t\n", "0.1.0")
    st.state, st.last_complete_step, st.exit_code = state, last_complete, exit_code
    st.reason = "" if state == "complete" else f"the run {state}"
    write_state(folder, st)
    (folder / "resolved.json").write_text(json.dumps(
        {"test": "t", "description": "a hand-made run", "steps": [{"name": n} for n in STEPS]}))
    _write_csv(folder / "hosts.csv", HOST_COLUMNS, [{
        "host": "localhost", "address": "localhost", "transport": "local", "hostname": "vm",
        "kernel": "6.1.0", "python_version": "3.11", "numpy_version": "2.0",
        "ivypy_version": "0.1.0", "cores": 2, "slave_pid": 123, "clock_offset_ns": -42,
        "rtt_us": 80.5, "offset_uncertainty_us": 40.25, "clock_samples": 9,
        "io_loop": "compiled (shipped from the controller)",
        "paced_loop": "compiled (shipped from the controller)"}])
    _write_csv(folder / "luns.csv", ["host", "lun", "selected", "allow_write", "used_by",
                                     "in_use", "kind", "serial", "size_bytes", "rotational"],
               [{"host": "localhost", "lun": "/data/lun0", "selected": True,
                 "allow_write": False, "used_by": "rr mx", "in_use": "", "kind": "file",
                 "serial": "0123", "size_bytes": 1 << 26, "rotational": 0},
                {"host": "localhost", "lun": "/dev/vda", "selected": False,
                 "allow_write": False, "used_by": "", "in_use": "mounted at /; holders dm-0",
                 "kind": "block", "serial": "", "size_bytes": 1 << 30, "rotational": 1}])
    _write_csv(folder / "events.csv", ["time", "elapsed_s", "level", "host", "kind", "step",
                                       "subinterval", "message"], events)
    if rows is None:
        rows = [_summary_row(s, t, i) for s in range(3) for t, i in
                (("all", "all"), ("host", "localhost"))]
    _write_csv(folder / "summary.csv", RUN_SUMMARY_COLUMNS, rows)
    for n in step_dirs:
        (folder / f"step{n:04d}-{STEPS[n]}").mkdir()
    return folder


# ---------------------------------------------------------------------- the schema
def test_the_schema_is_a_valid_draft_2020_12_schema_with_id_title_and_description() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"] == sj.SCHEMA_ID and SCHEMA["title"] and SCHEMA["description"]
    assert SCHEMA["properties"]["schema_version"] == {
        "const": sj.SCHEMA_VERSION, "description": SCHEMA["properties"]["schema_version"][
            "description"]}


def _properties(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key in ("properties", "patternProperties", "$defs"):
            for name, sub in node.get(key, {}).items():
                yield f"{where}/{name}", sub
        for key, sub in node.items():
            yield from _properties(sub, f"{where}/{key}")


def test_every_property_of_the_schema_has_a_description() -> None:
    undocumented = [w for w, sub in _properties(SCHEMA) if not sub.get("description")]
    assert undocumented == []


def test_the_schema_names_every_summary_and_hosts_column() -> None:
    # a column added to summary.csv or hosts.csv validates anyway (additionalProperties), but
    # is documented only once the schema names it: this test asks for that line
    import re

    inst = SCHEMA["$defs"]["instance"]
    patterns = [re.compile(p) for p in inst["patternProperties"]]
    unnamed = [c for c in RUN_SUMMARY_COLUMNS if c not in sj.SUMMARY_KEYS
               and c not in inst["properties"] and not any(p.search(c) for p in patterns)]
    assert unnamed == []
    # a step with gather: sources adds its joined metrics (master.run.recorder.summary_columns)
    gathered = ["gather.arr.LDEV.busy_pct", "gather.node.disk.node_disk_reads_completed_total"]
    assert [c for c in summary_columns(gathered) if not any(p.search(c) for p in patterns)
            and c not in inst["properties"] and c not in sj.SUMMARY_KEYS] == []
    assert not any(p.search("gather.arr") for p in patterns)
    assert [c for c in HOST_COLUMNS if c not in SCHEMA["$defs"]["host"]["properties"]] == []


# ---------------------------------------------------------------------- pure parts
@pytest.mark.parametrize("cell, value", [
    ("", None), ("true", True), ("false", False), ("0", 0), ("-42", -42), ("57875", 57875),
    ("0.551482", 0.551482), ("1.23457e+06", 1234570.0), ("1e999", "1e999"), ("max", "max"),
    ("nan", "nan"), ("inf", "inf"), ("1.2.3", "1.2.3"), ("a=1.5", "a=1.5"), (".5", 0.5),
])
def test_typed_cell(cell: str, value: Any) -> None:
    got = sj.typed_cell(cell)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text, reasons", [
    ("", []),
    ("interrupted after subinterval 3", ["interrupted after subinterval 3"]),
    ("interrupted after subinterval 3; host: 1 instances, expected 2",
     ["interrupted after subinterval 3", "host: 1 instances, expected 2"]),
    ("measure: not steady (ivy 5% at 95%; iops 10%; best window 2-9); all: x",
     ["measure: not steady (ivy 5% at 95%; iops 10%; best window 2-9)", "all: x"]),
    ("a;b; c", ["a;b", "c"]),
    ("unbalanced) paren; next", ["unbalanced) paren", "next"]),
])
def test_split_reasons(text: str, reasons: list[str]) -> None:
    assert sj.split_reasons(text) == reasons


@pytest.mark.parametrize("local, utc", [
    ("2026-11-25T14:00:00+0100", "2026-11-25T13:00:00Z"),
    ("2026-11-25T13:00:00+0000", "2026-11-25T13:00:00Z"),
    ("2026-12-31T20:30:05-0500", "2027-01-01T01:30:05Z"),
    ("2026-11-25 14:00:00", None), ("", None),
])
def test_utc_text(local: str, utc: str | None) -> None:
    assert sj.utc_text(local) == utc


@pytest.mark.parametrize("value, text", [
    ({}, "{}"), ([], "[]"), (None, "null"), ({"a": 1, "b": None}, '{"a": 1, "b": null}'),
    ({"a": {"x": 1.5, "y": "z"}, "b": []},
     '{\n  "a": {"x": 1.5, "y": "z"},\n  "b": []\n}'),
    ([{"x": [1, 2]}, 3], '[\n  {\n    "x": [1, 2]\n  },\n  3\n]'),
])
def test_json_text_puts_an_object_of_scalars_on_one_line(value: Any, text: str) -> None:
    assert sj.json_text(value) == text
    assert json.loads(text) == value


@pytest.mark.parametrize("cell, own", [
    ("0", True), ("-0", False), ("42", True), ("-42", True), ("007", False),
    ("123456789012345678901234567890", True), ("true", True), ("false", True), ("", False),
    ("0.5", True), ("-0.5", True), ("0.0", True), ("-0.0", True), ("12.0", True),
    ("12.50", False), ("0.10", False), ("12.05", True), ("0.05", True),
    ("0.0001", True), ("-0.0001", True), ("0.00012", True), ("0.00001", False),  # 1e-05
    ("99999999999999.9", True), ("12345678901234.5", True),
    ("123456789012345.5", False),  # 16 digits: another decimal may be the same double
    ("1.23457e+06", False), (".5", False), ("5.", False), ("1e5", False), ("max", False),
    ("nan", False), ("inf", False), ("1.2.3", False), ("--1", False), ("1-2", False),
])
def test_a_cell_is_taken_as_its_own_json_text_only_where_it_is(cell: str, own: bool) -> None:
    """``_own_json``: the cells whose typed value the json module writes as the cell itself
    (the rest are typed and encoded)."""
    assert bool(sj._own_json(cell)) is own
    if own:
        assert sj._encode(sj.typed_cell(cell)) == cell


def test_a_number_taken_as_its_own_json_text_is_written_so_in_every_format() -> None:
    """Numbers of every size written in the formats a CSV cell may hold: wherever
    ``_own_json`` takes the text as it is, the typed value's JSON text is that text."""
    rng = random.Random(5)
    taken = 0
    for _ in range(100_000):
        x = rng.uniform(-1, 1) * 10 ** rng.uniform(-8, 17)
        cell = rng.choice(["%.6g", "%.15g", "%.17g", "%.3f", "%.10f", "%d", "%.1f", "%r"]) % x
        if sj._own_json(cell):
            taken += 1
            assert sj._encode(sj.typed_cell(cell)) == cell, cell
    assert taken > 30_000  # the check saw the case it is for


def test_an_instance_is_written_as_the_json_of_its_typed_cells_whatever_they_hold() -> None:
    """An instance's object made from its cells' texts (a row of number cells each its own
    JSON text taken whole, any other row cell by cell, each text once) is the JSON text of
    its typed cells, row after row."""
    header = ("step_number", "step_name", "rollup_type", "rollup_instance", "IOPS",
              "service_time_p99_ms", "errors", "valid", "invalid_reason", "measure_attained",
              "measure_values", "cpu_busy_pct")
    columns = sj._InstanceColumns(header)
    own = ["0", "42", "0.5", "537.778", "12.0", "-0.0", "0.0001", "true", ""]
    other = ["1.23457e+06", "-0", "0.00001", "007", "12.50", "max", "inf", "1e999"]
    texts = ["", "a \"quoted\" reason; µs", "fine", "true", "false", "x" * 40]
    rng = random.Random(9)
    for _ in range(3_000):
        numbers = [rng.choice(own + other if rng.random() < 0.3 else own) for _ in range(5)]
        cells = ("0", "a", "all", "all", numbers[0], numbers[1], numbers[2],
                 rng.choice(["true", "false", "", "maybe"]), rng.choice(texts),
                 rng.choice(["true", "false", ""]), rng.choice(texts), numbers[3])
        row = sj._InstanceRow(columns, columns.cells_of(cells))
        assert row.json() == sj.json_text(dict(row)), cells


def test_json_text_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        sj.json_text({"x": float("nan")})


# ---------------------------------------------------------------------- hand-made folders
def test_a_complete_run(tmp_path: Path) -> None:
    doc = sj.build(_folder(tmp_path))
    _valid(doc)
    assert doc["problems"] == [] and doc["schema_version"] == 1 and doc["test"] == "t"
    assert doc["outcome"] == {"state": "complete", "exit_code": 0, "reason": None,
                              "last_complete_step": 2}
    assert doc["started_utc"].endswith("Z") and doc["ended_utc"] >= doc["started_utc"]
    assert [(s["number"], s["name"], s["status"], s["valid"]) for s in doc["steps"]] == [
        (0, "fill", "complete", True), (1, "mix", "complete", True),
        (2, "tail", "complete", True)]
    inst = doc["steps"][1]["rollups"]["host"]["localhost"]
    assert inst["IOPS"] == 2000 and inst["MB_per_s"] == 8.192 and inst["valid"] is True
    assert inst["write_service_time_p99_ms"] is None and inst["invalid_reason"] is None
    assert inst["measure_criterion"] is None and inst["workloads"] == 1
    assert not set(sj.SUMMARY_KEYS) & set(inst)
    assert set(inst) == set(RUN_SUMMARY_COLUMNS) - set(sj.SUMMARY_KEYS)
    (host,) = doc["hosts"]
    assert host["cores"] == 2 and host["clock_offset_ns"] == -42 and host["rtt_us"] == 80.5
    # version texts stay text however they look
    assert host["python_version"] == "3.11" and host["numpy_version"] == "2.0"
    lun, other = doc["luns"]
    assert lun["used_by"] == ["rr", "mx"] and lun["in_use"] == [] and lun["selected"] is True
    assert lun["serial"] == "0123" and lun["size_bytes"] == 1 << 26 and lun["rotational"] == 0
    assert other["in_use"] == ["mounted at /", "holders dm-0"] and other["serial"] is None


def test_an_interrupted_run_tells_the_step_cut_short_from_those_never_run(
        tmp_path: Path) -> None:
    why = "interrupted after subinterval 2; measure: not steady (ivy 5%; best window 1-2)"
    rows = [_summary_row(0, "all", "all", valid=False, invalid_reason=why),
            _summary_row(0, "host", "localhost", valid=False, invalid_reason=why)]
    events = [{"level": "WARNING", "kind": "validation", "step": 0,
               "message": f"step fill invalid: {why}"},
              {"level": "ERROR", "kind": "run", "message": "interrupted"}]
    doc = sj.build(_folder(tmp_path, state="interrupted", last_complete=-1, exit_code=130,
                           rows=rows, events=events, step_dirs=(0,)))
    _valid(doc)
    assert doc["outcome"]["state"] == "interrupted" and doc["outcome"]["exit_code"] == 130
    first, second, third = doc["steps"]
    assert (first["status"], first["valid"], first["folder"]) == (
        "incomplete", False, "step0000-fill")
    assert first["invalid_reasons"] == ["interrupted after subinterval 2",
                                        "measure: not steady (ivy 5%; best window 1-2)"]
    assert first["events"] == {"info": 0, "warning": 1, "error": 0}
    assert doc["events"] == {"info": 0, "warning": 1, "error": 1}
    for s in (second, third):
        assert (s["status"], s["valid"], s["folder"], s["rollups"]) == (
            "not_run", None, None, {})


def test_a_step_with_no_rows_found_invalid_is_invalid_with_its_reason(tmp_path: Path) -> None:
    # a measure+dfc step whose measurement never started writes no summary row
    rows = [_summary_row(0, "all", "all"), _summary_row(2, "all", "all")]
    events = [{"level": "WARNING", "kind": "validation", "step": 1,
               "message": "step mix invalid: the measurement never started (the controller "
                          "did not settle)"}]
    doc = sj.build(_folder(tmp_path, exit_code=1, rows=rows, events=events))
    _valid(doc)
    mix = doc["steps"][1]
    assert (mix["status"], mix["valid"], mix["rollups"]) == ("complete", False, {})
    assert mix["invalid_reasons"] == ["the measurement never started (the controller did "
                                      "not settle)"]


def test_a_resumed_run_forgets_the_events_of_the_attempt_set_aside(tmp_path: Path) -> None:
    events = [{"level": "WARNING", "kind": "validation", "step": s,
               "message": f"step {STEPS[s]} invalid: interrupted after subinterval 1"}
              for s in (0, 1)]
    events += [{"level": "INFO", "kind": "resume", "step": 1,
                "message": "resumed at step 1 mix of 3"},
               {"level": "WARNING", "kind": "clock", "step": 1, "message": "skew"}]
    doc = sj.build(_folder(tmp_path, events=events))
    _valid(doc)
    fill, mix, _ = doc["steps"]
    # step 0 was not run again: what was found of it stands; step 1's first attempt is gone
    assert (fill["valid"], fill["invalid_reasons"]) == (False, [
        "interrupted after subinterval 1"])
    assert (mix["valid"], mix["invalid_reasons"]) == (True, [])
    assert mix["events"] == {"info": 1, "warning": 1, "error": 0}
    assert doc["events"] == {"info": 1, "warning": 3, "error": 0}


def test_a_failed_run_whose_step_left_no_summary(tmp_path: Path) -> None:
    rows = [_summary_row(0, "all", "all")]
    doc = sj.build(_folder(tmp_path, state="failed", last_complete=0, exit_code=3, rows=rows,
                           step_dirs=(0, 1)))
    _valid(doc)
    assert doc["outcome"]["reason"] == "the run failed"
    assert [(s["status"], s["valid"]) for s in doc["steps"]] == [
        ("complete", True), ("incomplete", None), ("not_run", None)]


def test_tables_a_run_that_ended_early_never_wrote_are_no_problem(tmp_path: Path) -> None:
    # failed in step 0 (no summary yet), then before any host started (no table at all)
    folder = _folder(tmp_path, state="failed", last_complete=-1, exit_code=3, step_dirs=(0,))
    (folder / "summary.csv").unlink()
    doc = sj.build(folder)
    _valid(doc)
    assert doc["problems"] == [] and doc["hosts"]
    (folder / "step0000-fill").rmdir()
    for name in ("events.csv", "hosts.csv", "luns.csv"):
        (folder / name).unlink()
    doc = sj.build(folder)
    _valid(doc)
    assert doc["problems"] == [] and doc["hosts"] == doc["luns"] == []
    assert [s["status"] for s in doc["steps"]] == ["not_run"] * 3


@pytest.mark.parametrize("content, problem", [
    (None, "summary.csv: missing"),
    (b"", "summary.csv: empty (no header)"),
    (b"\xff\xfe\x00garbage\n", "summary.csv: cannot be read"),
    (b"a,b,c\n1,2,3\n", "summary.csv: no column step_number, rollup_type, rollup_instance"),
])
def test_a_missing_or_garbled_summary_csv_leaves_the_steps_without_rollups(
        tmp_path: Path, content: bytes | None, problem: str) -> None:
    folder = _folder(tmp_path)
    if content is None:
        (folder / "summary.csv").unlink()
    else:
        (folder / "summary.csv").write_bytes(content)
    doc = sj.build(folder)
    _valid(doc)
    assert len(doc["problems"]) == 1 and doc["problems"][0].startswith(problem)
    assert [(s["status"], s["valid"], s["rollups"]) for s in doc["steps"]] == [
        ("complete", None, {})] * 3
    assert doc["hosts"] and doc["luns"]  # the rest is read as usual


def test_rows_cut_or_misnumbered_are_left_out_and_counted(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with open(folder / "summary.csv", "a", encoding="utf-8") as fh:
        fh.write("x,fill,all,odd," + ",".join("1" for _ in RUN_SUMMARY_COLUMNS[4:]) + "\r\n")
        fh.write("2,tail,all,al")  # the last row, cut by a crash
    doc = sj.build(folder)
    _valid(doc)
    assert doc["problems"] == [
        "summary.csv: 1 row(s) left out, their cells do not match the header's "
        f"{len(RUN_SUMMARY_COLUMNS)}",
        "summary.csv: 1 row(s) left out, their step_number is not a number"]
    assert set(doc["steps"][2]["rollups"]["all"]) == {"all"}


@pytest.mark.parametrize("resolved", [True, False])
def test_steps_made_one_at_a_time_from_rows_in_any_order_quoted_or_twice(
        tmp_path: Path, resolved: bool) -> None:
    """Each step is made from its own rows wherever they are in summary.csv (a later step's
    first, a row of an earlier step after them), a quoted cell across lines (a reason with a
    comma and a line end) read whole, an instance given twice kept once (the last) and said;
    the file written a step at a time is the text of the document built whole, with the step
    names from the rows where resolved.json is gone."""
    rows = [_summary_row(1, "all", "all"),
            _summary_row(0, "all", "all", valid=False, invalid_reason="a, b\non; c"),
            _summary_row(0, "host", "localhost", IOPS=1.0),
            _summary_row(2, "all", "all"),
            _summary_row(0, "host", "localhost", IOPS=7.0)]
    folder = _folder(tmp_path, rows=rows)
    if not resolved:
        (folder / "resolved.json").unlink()
    doc = sj.write_summary_json(folder)
    assert (folder / "summary.json").read_text() == sj.json_text(sj.build(folder)) + "\n"
    written = json.loads((folder / "summary.json").read_text())
    _valid(written)
    assert [s["name"] for s in written["steps"]] == list(STEPS)
    first = written["steps"][0]
    assert first["invalid_reasons"] == ["a, b\non", "c"] and first["valid"] is False
    assert first["rollups"]["all"]["all"]["invalid_reason"] == "a, b\non; c"
    assert first["rollups"]["host"]["localhost"]["IOPS"] == 7
    assert set(written["steps"][1]["rollups"]) == {"all"}
    assert (doc["problems"] == written["problems"]
            == ([] if resolved else ["resolved.json: missing"])
            + ["summary.csv: step 0 host=localhost twice; the last kept"])


def test_a_folder_without_state_or_resolved_json(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "state.json").unlink()
    (folder / "resolved.json").write_text("{not json")
    doc = sj.build(folder)
    _valid(doc)
    assert doc["outcome"] == {"state": "unknown", "exit_code": None, "reason": None,
                              "last_complete_step": None}
    assert doc["started_utc"] is None and doc["test"] is None
    assert [p.split(":")[0] for p in doc["problems"]] == ["state.json", "resolved.json"]
    # the steps the folder shows, named by their rows
    assert [(s["number"], s["name"], s["status"]) for s in doc["steps"]] == [
        (0, "fill", "unknown"), (1, "mix", "unknown"), (2, "tail", "unknown")]


def test_an_empty_folder_still_gives_a_valid_document(tmp_path: Path) -> None:
    doc = sj.build(tmp_path)
    _valid(doc)
    assert doc["steps"] == [] and [p.split(":")[0] for p in doc["problems"]] == [
        "state.json", "resolved.json"]


def test_a_run_whose_master_died_is_dead_without_an_end(tmp_path: Path) -> None:
    folder = _folder(tmp_path, state="running", last_complete=0, exit_code=None)
    st = json.loads((folder / "state.json").read_text())
    st["pid"] = 2**22 + 1  # above pid_max: no process
    (folder / "state.json").write_text(json.dumps(st))
    doc = sj.build(folder)
    _valid(doc)
    assert doc["outcome"]["state"] == "dead" and doc["ended_utc"] is None
    assert [s["status"] for s in doc["steps"]] == ["complete", "incomplete", "incomplete"]


# ---------------------------------------------------------------------- writing it
@pytest.mark.parametrize("chunk_chars", [1 << 20, 64])
def test_written_whole_in_place_of_the_last_one(tmp_path: Path, chunk_chars: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """... a piece at a time (``write_json``: one piece, or many of 64 characters)."""
    monkeypatch.setattr(sj, "_CHUNK_CHARS", chunk_chars)
    folder = _folder(tmp_path)
    (folder / "summary.json").write_text("old")
    doc = sj.write_summary_json(folder)
    written = json.loads((folder / "summary.json").read_text())
    assert written == sj.build(folder)
    # returned as written, each step without its rollups (made a step at a time)
    assert doc == {**written, "steps": [{k: v for k, v in step.items() if k != "rollups"}
                                        for step in written["steps"]]}
    # each instance written straight from its cells' texts: the text of the typed dicts
    assert (folder / "summary.json").read_text() == sj.json_text(sj.build(folder)) + "\n"
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_a_document_cut_short_leaves_the_last_one_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """summary.json is written a piece at a time: a failure part way (a full disk) leaves the
    last one as it was."""
    folder = _folder(tmp_path)
    (folder / "summary.json").write_text("old")
    monkeypatch.setattr(sj, "_CHUNK_CHARS", 64)
    written: list[int] = []

    def full(doc: Any, fh: Any) -> None:
        real_write = fh.write

        def write(data: bytes) -> int:
            if written:
                raise OSError(28, "No space left on device")
            written.append(len(data))
            return int(real_write(data))

        fh.write = write
        real(doc, fh)

    real = sj.write_json
    monkeypatch.setattr(sj, "write_json", full)
    with pytest.raises(OutputError, match="No space left"):
        sj.write_summary_json(folder)
    assert written  # a piece went out before the failure
    assert (folder / "summary.json").read_text() == "old"
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_a_folder_that_cannot_be_written_is_an_output_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    with pytest.raises(OutputError, match=r"cannot write .*gone/summary.json"):
        sj.write_summary_json(gone)


def test_the_runs_hook_turns_a_failure_into_a_warning_event(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = tmp_path / "file-not-folder"  # even root cannot make a file inside a file
        target.write_text("")
    else:
        target = tmp_path / "missing"
    told: list[tuple[str, str]] = []
    fake = SimpleNamespace(output=SimpleNamespace(folder=target),
                           event=lambda level, message, **_: told.append((level, message)))
    Run._summary_json(fake)  # type: ignore[arg-type]
    assert len(told) == 1 and told[0][0] == "WARNING"
    assert told[0][1].startswith("summary.json not written: cannot write")


def test_the_runs_hook_survives_a_bug_in_the_builder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import master.run.lifecycle

    def broken(folder: Path) -> dict[str, Any]:
        raise KeyError("a bug")

    monkeypatch.setattr(master.run.lifecycle, "write_summary_json", broken)
    told: list[tuple[str, str]] = []
    fake = SimpleNamespace(output=SimpleNamespace(folder=_folder(tmp_path)),
                           event=lambda level, message, **_: told.append((level, message)))
    with caplog.at_level("INFO"):
        Run._summary_json(fake)  # type: ignore[arg-type]
    assert told == [("WARNING", "summary.json not written: 'a bug'")]
    # the traceback goes to run.log (INFO), not to the console (WARNING and up)
    (rec,) = [r for r in caplog.records if r.name == "master.run.lifecycle"]
    assert rec.levelname == "INFO" and rec.exc_info is not None


# ---------------------------------------------------------------------- ivypy summary-json
def test_the_command_writes_each_folder_and_names_one_that_is_not_a_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from master.cli import main as cli

    folder = _folder(tmp_path)
    stray = tmp_path / "stray"
    stray.mkdir()
    assert cli.main(["summary-json", str(stray), str(folder)]) == 2
    out, err = capsys.readouterr()
    assert err == f"ivypy: {stray}: not a run folder (no state.json)\n"
    assert out == f"{folder / 'summary.json'}: complete, 3 steps\n"
    _valid(json.loads((folder / "summary.json").read_text()))
    (folder / "hosts.csv").write_bytes(b"\xff")
    assert cli.main(["summary-json", str(folder)]) == 0
    out, _ = capsys.readouterr()
    assert out.endswith("; 1 problem(s): hosts.csv: cannot be read ('utf-8' codec can't "
                        "decode byte 0xff in position 0: invalid start byte)\n"), out
