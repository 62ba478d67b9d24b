"""``Gathering.record`` on outcomes given by hand (no process runs): the joined columns per
rollup type and instance (NaN for a failed or late subinterval), counters as rates from the
last sample there was (a late one too), element files that start with their first sample, the
non-participating aggregate, an event for a joined metric first seen after the probe, and a
file of its own for each element type even where their names make the same file name;
``declared_metrics`` and ``probe`` (one real command), which fix a step's joined columns."""

from __future__ import annotations

import asyncio
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.config.gather import GatherJoin, GatherSource, MetricPattern
from master.gather.gathering import Gathering, Outcome, _Step, declared_metrics
from master.gather.rates import Sample
from master.results.output import RunOutput

S = 1_000_000_000
FOCUS = "gather.arr.LDEV.busy"
SOURCE = GatherSource("arr", "command", 0.5, argv=("x",), counters=("reads",),
                      join=GatherJoin("LDEV", "element_instance", "name", "sum"))


def _sample(at_s: float, busy: float, reads: float) -> Sample:
    return Sample(round(at_s * S), {("LDEV", e, m): v * n for n, e in ((1, "loop1"), (2, "loop2"))
                                    for m, v in (("busy", busy), ("reads", reads))})


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_record_gives_joined_columns(tmp_path: Path) -> None:
    events: list[str] = []

    def event(level: str, message: str, **_: Any) -> None:
        events.append(message)

    out = RunOutput(tmp_path)
    gathering = Gathering([SOURCE], out, event, lambda: 0)
    step = _Step(0, "s", "step0000-s", 0, S, {"lun": (("h:/dev/loop1", "h:/dev/loop2"), [0, 1]),
                                              "all": (("all",), [0, 0])},
                 {"name": ["loop1", "loop2"]})
    gathering.step = step
    (src,) = gathering.sources
    src.joined_header = ["busy", "reads"]  # as ``probe`` fixed them
    assert gathering.columns() == [FOCUS, "gather.arr.LDEV.reads"]
    plan: list[Outcome | None] = [
        Outcome(0, 1, failure="sh exited with status 1"),  # k=0 failed
        Outcome(0, 1, _sample(1.95, 10, 100), frozenset({"reads"})),  # k=1 first sample
        None,  # k=2 late: comes in after, as k=3's base
        Outcome(0, 1, _sample(3.95, 30, 400), frozenset({"reads"})),
    ]
    got = []
    for k, outcome in enumerate(plan):
        if outcome is not None:
            src.outcomes[k] = outcome
        if k == 3:  # the late sample of k=2 arrived before k=3 was recorded
            src.outcomes[2] = Outcome(0, 1, _sample(2.95, 20, 250), frozenset({"reads"}))
        with out.subinterval():
            got.append(gathering.record(k, "measurement"))
    out.close()
    cells = [(c["all"][FOCUS].tolist(), c["all"]["gather.arr.LDEV.reads"].tolist(),
              c["lun"][FOCUS].tolist()) for c in got]
    assert np.isnan(cells[0][0][0]) and np.isnan(cells[0][2]).all()
    assert cells[1][0] == [30.0] and cells[1][2] == [10.0, 20.0] and np.isnan(cells[1][1][0])
    assert np.isnan(cells[2][0][0])
    assert cells[3][:2] == ([90.0], [450.0])  # (400 - 250) + (800 - 500) over 1 s
    folder = tmp_path / "step0000-s/gather/arr"
    ldev = _rows(folder / "LDEV.csv")
    assert list(ldev[0]) == ["subinterval", "phase", "element_instance", "busy", "reads"]
    assert [r["subinterval"] for r in ldev] == ["1", "1", "3", "3"]
    outside = _rows(folder / "non_participating.csv")
    assert [(r["subinterval"], r["elements"], r[FOCUS]) for r in outside] == [
        ("0", "0", ""), ("1", "0", ""), ("2", "0", ""), ("3", "0", "")]
    assert not (folder / "joined").exists()
    assert any("subinterval 0 has no sample: sh exited with status 1" in e for e in events)
    assert any("subinterval 2 has no sample: not started" in e for e in events)
    interlock = _rows(tmp_path / "step0000-s/interlock.csv")
    assert [r["gather_status"].split(":")[0] for r in interlock] == [
        "failed", "ok", "late", "ok"]


def test_a_joined_metric_seen_after_the_probe_is_told_not_written(tmp_path: Path) -> None:
    events: list[str] = []
    out = RunOutput(tmp_path)
    gathering = Gathering([SOURCE], out, lambda _l, m, **_k: events.append(m), lambda: 0)
    gathering.step = _Step(0, "s", "step0000-s", 0, S, {"all": (("all",), [0, 0])},
                           {"name": ["loop1", "loop2"]})
    (src,) = gathering.sources
    src.joined_header = ["reads"]
    for k in range(2):
        src.outcomes[k] = Outcome(0, 1, _sample(k + 0.95, 10, 100), frozenset({"reads"}))
        with out.subinterval():
            cols = gathering.record(k, "warmup")
        assert list(cols["all"]) == ["gather.arr.LDEV.reads"]
    out.close()
    told = [e for e in events if "busy appeared after the step's first sample" in e]
    assert told == ["gather arr: LDEV metrics busy appeared after the step's first sample and "
                    "are not in the rollup rows (until the next step)"]


@pytest.mark.parametrize("source, focus, declared", [
    (SOURCE, (), {"reads"}),
    (SOURCE, (FOCUS, "gather.other.LDEV.x", "IOPS"), {"reads", "busy"}),
    (GatherSource("p", "prometheus", 0.5, url="http://h/m", element_type="disk",
                  instance_label="device",
                  metrics=(MetricPattern("node_reads_total", False),
                           MetricPattern("node_.*_seconds_total", True)),
                  join=GatherJoin("disk", "element_instance", "name", "sum")),
     (), {"node_reads_total"}),
    (GatherSource("n", "command", 0.5, argv=("x",), counters=("reads",)), (), set()),
])
def test_declared_metrics(source: GatherSource, focus: tuple[str, ...],
                          declared: set[str]) -> None:
    assert declared_metrics(source, focus) == declared


def test_probe_fixes_the_columns_from_the_first_sample_and_the_config(tmp_path: Path) -> None:
    script = ("print('LDEV,loop1,busy,5'); print('LDEV,loop1,queue,2'); "
              "print('port,p1,busy,9')")
    source = GatherSource("arr", "command", 5.0, argv=(sys.executable, "-c", script),
                          counters=("reads",),
                          join=GatherJoin("LDEV", "element_instance", "name", "sum"))
    clock = time.monotonic_ns
    gathering = Gathering([source], RunOutput(tmp_path), lambda *a, **k: None, clock)
    columns = asyncio.run(gathering.probe(["gather.arr.LDEV.resp_ms"]))
    assert columns == ["gather.arr.LDEV.busy", "gather.arr.LDEV.queue",
                       "gather.arr.LDEV.reads", "gather.arr.LDEV.resp_ms"]
    (src,) = gathering.sources
    assert -2 in src.outcomes and len(src.recent_ns) == 1


def _record_two(tmp_path: Path, values: dict[tuple[str, str, str], float]) -> list[str]:
    """Two subintervals of SOURCE (joined on LDEV loop1's busy) that gave ``values``,
    recorded in step 0's folder under ``tmp_path``; the events."""
    events: list[str] = []
    out = RunOutput(tmp_path)
    gathering = Gathering([SOURCE], out, lambda _l, m, **_k: events.append(m), lambda: 0)
    gathering.step = _Step(0, "s", "step0000-s", 0, S, {"all": (("all",), [0])},
                           {"name": ["loop1"]})
    (src,) = gathering.sources
    src.joined_header = ["busy"]
    for k in range(2):
        src.outcomes[k] = Outcome(0, 1, Sample(k * S, values))
        with out.subinterval():
            gathering.record(k, "warmup")
    out.close()
    return events


def test_element_types_that_share_a_file_name_get_their_own_files(tmp_path: Path) -> None:
    # a source's element types are its own text: "a/b" and "a_b" make the same safe file
    # name, "non_participating" a joined source's aggregate file
    events = _record_two(tmp_path, {
        ("LDEV", "loop1", "busy"): 1.0, ("non_participating", "e", "m"): 2.0,
        ("a/b", "e", "x"): 3.0, ("a_b", "e", "y"): 4.0})
    folder = tmp_path / "step0000-s/gather/arr"
    assert sorted(p.name for p in folder.iterdir()) == [
        "LDEV.csv", "a_b-2.csv", "a_b.csv", "non_participating-2.csv", "non_participating.csv"]
    assert [(r["element_instance"], r["y"]) for r in _rows(folder / "a_b.csv")] == [
        ("e", "4"), ("e", "4")]
    assert [r["x"] for r in _rows(folder / "a_b-2.csv")] == ["3", "3"]
    assert [r["m"] for r in _rows(folder / "non_participating-2.csv")] == ["2", "2"]
    assert [r["elements"] for r in _rows(folder / "non_participating.csv")] == ["0", "0"]
    assert [e for e in events if "is written to" in e] == [
        "gather arr: element type 'non_participating' is written to non_participating-2.csv: "
        "non_participating.csv is another's",
        "gather arr: element type 'a/b' is written to a_b-2.csv: a_b.csv is another's"]


def test_metrics_named_as_the_files_own_columns_are_written_under_other_names(
        tmp_path: Path) -> None:
    # a source's metrics called subinterval, phase or element_instance (or metric_phase, the
    # name one of them would take) never overwrite the file's own columns; said once a step
    events = _record_two(tmp_path, {
        ("LDEV", "loop1", "busy"): 1.0, ("pool", "p1", "phase"): 7.0,
        ("pool", "p1", "metric_phase"): 6.0, ("pool", "p1", "element_instance"): 8.0,
        ("pool", "p1", "subinterval"): 9.0, ("pool", "p1", "used"): 5.0})
    rows = _rows(tmp_path / "step0000-s/gather/arr/pool.csv")
    assert list(rows[0]) == ["subinterval", "phase", "element_instance",
                             "metric_element_instance", "metric_phase", "metric_metric_phase",
                             "metric_subinterval", "used"]  # in the metrics' order
    assert [(r["subinterval"], r["phase"], r["element_instance"]) for r in rows] == [
        ("0", "warmup", "p1"), ("1", "warmup", "p1")]
    assert [r["metric_metric_phase"] for r in rows] == ["7", "7"]
    assert [r["metric_phase"] for r in rows] == ["6", "6"]
    assert [r["metric_subinterval"] for r in rows] == ["9", "9"]
    assert [e for e in events if "written" in e] == [
        "gather arr: pool metrics written element_instance as metric_element_instance, phase "
        "as metric_metric_phase, subinterval as metric_subinterval: their names are columns "
        "of the file's own"]
