"""``Gathering.record`` on outcomes given by hand (no process runs): a source whose first
gathers failed starts its files with its first sample and keeps one header, a failed
subinterval leaves empty cells and NaN in the focus column, counters are rates from the last
sample there was (a late one too), and the summary means skip empty cells."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from master.config.gather import GatherJoin, GatherSource
from master.gather.gathering import Gathering, Outcome, _Step
from master.gather.rates import Sample
from master.output import RunOutput
from master.rollup import Grouping, RollupResult

S = 1_000_000_000
FOCUS = "gather.arr.LDEV.busy"
SOURCE = GatherSource("arr", "command", 0.5, argv=("x",), counters=("reads",),
                      join=GatherJoin("LDEV", "element_instance", "name", "sum"))


def _results() -> dict[str, RollupResult]:
    def one(t: str, names: tuple[str, ...]) -> RollupResult:
        g = Grouping(t, names, np.arange(len(names)) % len(names))
        return RollupResult(g, 1.0, {}, np.zeros((len(names), 1), dtype=np.int64),
                            np.zeros((len(names), 0)))
    return {"lun": one("lun", ("h:/dev/loop1", "h:/dev/loop2")), "all": one("all", ("all",))}


def _sample(at_s: float, busy: float, reads: float) -> Sample:
    return Sample(round(at_s * S), {("LDEV", e, m): v * n for n, e in ((1, "loop1"), (2, "loop2"))
                                    for m, v in (("busy", busy), ("reads", reads))})


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_record_and_summary(tmp_path: Path) -> None:
    events: list[str] = []

    def event(level: str, message: str, **_: Any) -> None:
        events.append(message)

    out = RunOutput(tmp_path)
    gathering = Gathering([SOURCE], out, event, lambda: 0)
    step = _Step(0, "s", "step0000-s", 0, S, {"lun": (("h:/dev/loop1", "h:/dev/loop2"), [0, 1]),
                                              "all": (("all",), [0, 0])},
                 {"name": ["loop1", "loop2"]}, (FOCUS,))
    gathering.step = step
    (src,) = gathering.sources
    plan: list[Outcome | None] = [
        Outcome(0, 1, failure="sh exited with status 1"),  # k=0 failed
        Outcome(0, 1, _sample(1.95, 10, 100), frozenset({"reads"})),  # k=1 first sample
        None,  # k=2 late: comes in after, as k=3's base
        Outcome(0, 1, _sample(3.95, 30, 400), frozenset({"reads"})),
    ]
    focus = []
    for k, outcome in enumerate(plan):
        if outcome is not None:
            src.outcomes[k] = outcome
        if k == 3:  # the late sample of k=2 arrived before k=3 was recorded
            src.outcomes[2] = Outcome(0, 1, _sample(2.95, 20, 250), frozenset({"reads"}))
        results = _results()
        with out.subinterval():
            gathering.record(k, "measurement", results)
        focus.append(results["all"].columns[FOCUS].tolist())
    gathering.summarise([0, 1, 2, 3])
    out.close()
    assert np.isnan(focus[0][0])
    assert focus[1] == [30.0] and np.isnan(focus[2][0]) and focus[3] == [90.0]
    folder = tmp_path / "step0000-s/gather/arr"
    joined = _rows(folder / "joined/all.csv")
    assert [(r["subinterval"], r[FOCUS], r["gather.arr.LDEV.reads"]) for r in joined] == [
        ("1", "30", ""), ("2", "", ""), ("3", "90", "450")]  # (400 - 250) + (800 - 500) over 1 s
    ldev = _rows(folder / "LDEV.csv")
    assert list(ldev[0]) == ["subinterval", "phase", "element_instance", "busy", "reads"]
    assert [r["subinterval"] for r in ldev] == ["1", "1", "3", "3"]
    (summary,) = [r for r in _rows(folder / "joined/summary.csv") if r["rollup_type"] == "all"]
    assert (summary["subintervals"], summary[FOCUS]) == ("3", "60")
    assert any("subinterval 0 has no sample: sh exited with status 1" in e for e in events)
    assert any("subinterval 2 has no sample: not started" in e for e in events)
    interlock = _rows(tmp_path / "step0000-s/interlock.csv")
    assert [r["gather_status"].split(":")[0] for r in interlock] == [
        "failed", "ok", "late", "ok"]
