"""The settings in force (``master.run.settings``): the splitter's table, and the owner's changes by
subinterval and source, table-driven."""

from __future__ import annotations

import pytest

from master.run.settings import Settings, split_total
from protocol.params import WorkloadParams

A, B = ("h1", "/dev/sda"), ("h1", "/dev/sdb")
C = ("h2", "/dev/sda")  # another host's LUN of the same path


def _p(iops: float | None = 100.0, skew: float = 1.0, **kw: object) -> WorkloadParams:
    return WorkloadParams(iops=iops, skew_weight=skew, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("total", "members", "expected"),
    [
        # equally over the LUNs, then by skew weight within a LUN (ivy's rule)
        pytest.param(900.0, [(A, 1.0), (A, 1.0), (B, 1.0)], [225.0, 225.0, 450.0],
                     id="two LUNs, one with two workloads"),
        pytest.param(1000.0, [(A, 1.0), (A, 3.0), (B, 2.0)], [125.0, 375.0, 500.0],
                     id="skew within a LUN"),
        pytest.param(300.0, [(A, 1.0), (B, 1.0), (C, 5.0)], [100.0, 100.0, 100.0],
                     id="a lone workload's skew changes nothing"),
        pytest.param(1200.0, [(A, 0.5), (A, 1.5)], [300.0, 900.0], id="fractional weights"),
        pytest.param(1000.0, [(A, 1.0)] * 3, [1000 / 3] * 3, id="thirds, unrounded"),
        pytest.param(100.0, [(A, 1.0), (C, 1.0)], [50.0, 50.0],
                     id="the same path on two hosts is two LUNs"),
        pytest.param(100.0, [], [], id="no workloads"),
        pytest.param(None, [(A, 1.0), (B, 2.0)], [None, None], id="max"),
    ],
)
def test_split_total_table(total: float | None, members: list[tuple[tuple[str, str], float]],
                           expected: list[float | None]) -> None:
    got = split_total(total, [(lun, _p(skew=skew, read_fraction=0.5)) for lun, skew in members])
    assert [p.iops for p in got] == pytest.approx(expected)
    if total is not None and members:
        assert sum(p.iops or 0.0 for p in got) == pytest.approx(total)
    # everything but the rate is kept
    assert all(p.read_fraction == 0.5 for p in got)


@pytest.mark.parametrize("total", [0.0, -1.0, float("nan")])
def test_split_total_refuses_a_total_that_is_not_positive(total: float) -> None:
    with pytest.raises(ValueError, match="total IOPS must be > 0"):
        split_total(total, [(A, _p())])


def test_skew_weight_must_be_positive() -> None:
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="skew_weight"):
            _p(skew=bad)


# (what happens, in order) and then what is in force / pending after advance(k) for each k
#   ("place", wid, iops)            created: in force at once
#   ("take", wid, iops, effective, source)
#   ("advance", k, {wid: source} changed, {wid: iops in force})
#   ("drop", wid)
#   ("settle", {wid: source}, {wid: iops in force})
SCRIPTS = [
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 200.0, 3, "dfc"),
        ("advance", 2, {}, {"w1": 100.0}),
        ("advance", 3, {"w1": "dfc"}, {"w1": 200.0}),
        ("advance", 4, {}, {"w1": 200.0}),
    ], id="a change holds from the subinterval the slave announced"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 200.0, 3, "dfc"),
        ("take", "w1", 500.0, 3, "live"),
        ("advance", 3, {"w1": "live"}, {"w1": 500.0}),
    ], id="of two for the same subinterval the later acknowledged holds"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 500.0, 3, "live"),
        ("take", "w1", 200.0, 3, "dfc"),
        ("advance", 3, {"w1": "dfc"}, {"w1": 200.0}),
    ], id="as the slave does: a DFC move read after the edit wins"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 500.0, 3, "live"),
        ("take", "w1", 200.0, 4, "dfc"),
        ("advance", 3, {"w1": "live"}, {"w1": 500.0}),
        ("advance", 4, {"w1": "dfc"}, {"w1": 200.0}),
    ], id="changes for later subintervals wait their turn"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 200.0, 3, "dfc"),
        ("take", "w1", 300.0, 4, "dfc"),
        ("advance", 5, {"w1": "dfc"}, {"w1": 300.0}),
    ], id="a subinterval skipped: the last change due holds"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 100.0, 3, "live"),
        ("advance", 3, {}, {"w1": 100.0}),
    ], id="a change to what runs already changes nothing"),
    pytest.param([
        ("place", "w1", 100.0),
        ("place", "w2", 50.0),
        ("take", "w1", 200.0, -1, "step"),
        ("advance", 0, {}, {"w1": 200.0, "w2": 50.0}),
    ], id="between steps a change holds at once"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 200.0, 9, "live"),
        ("settle", {"w1": "live"}, {"w1": 200.0}),
    ], id="an edit for a subinterval the step never ran holds in the next step"),
    pytest.param([
        ("place", "w1", 100.0),
        ("take", "w1", 200.0, 9, "live"),
        ("drop", "w1"),
        ("place", "w1", 70.0),
        ("advance", 9, {}, {"w1": 70.0}),
    ], id="a deleted workload's pending changes go with it"),
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_settings_by_subinterval_and_source(script: list[tuple[object, ...]]) -> None:
    s = Settings()
    for op, *args in script:
        if op == "place":
            wid, iops = args
            s.placed(str(wid), _p(iops))  # type: ignore[arg-type]
        elif op == "take":
            wid, iops, effective, source = args
            s.taken(str(wid), s.latest(str(wid)).with_rate(iops),  # type: ignore[arg-type]
                    effective, source)  # type: ignore[arg-type]
        elif op == "drop":
            s.dropped(str(args[0]))
        else:
            if op == "advance":
                k, changed, in_force = args
                assert s.advance(k) == changed  # type: ignore[arg-type]
            else:
                changed, in_force = args
                assert s.settle() == changed
            assert {w: s[w].iops for w in s.ids()} == in_force
            assert not s.pending() or op == "advance"


def test_latest_is_what_the_slave_holds_and_pending_says_from_when() -> None:
    s = Settings()
    s.placed("w1", _p(100.0))
    s.placed("w2", _p(None))
    assert s.latest("w1").iops == 100.0 and s.total_iops(["w1", "w2"]) is None
    s.taken("w1", _p(200.0), 4, "dfc")
    s.taken("w1", _p(300.0), 5, "live")
    assert s["w1"].iops == 100.0 and s.latest("w1").iops == 300.0
    assert s.pending() == {"w1": 4}
    assert s.pending("live") == {"w1": 5} and s.pending("step") == {}
    assert s.total_iops(["w1"]) == 100.0
    s.advance(5)
    assert s.total_iops(["w1"]) == 300.0 and s.pending() == {}
    with pytest.raises(KeyError, match="no workload w3"):
        s.taken("w3", _p(), 1, "live")


def test_the_iops_array_is_one_object_while_nothing_changes() -> None:
    """The recorder keeps each measurement subinterval's settings: a step without edits keeps
    one array, read-only, however many subintervals."""
    s = Settings()
    s.placed("a", _p(100.0))
    s.placed("b", _p(None))
    first = s.iops_array(["a", "b"])
    assert first.tolist()[0] == 100.0 and first[1] != first[1]  # NaN for max
    assert not first.flags.writeable
    s.advance(0)
    assert s.iops_array(["a", "b"]) is first
    assert s.iops_array(["b", "a"]) is not first  # another order
    s.taken("a", _p(50.0), 1, "dfc")
    assert s.iops_array(["a", "b"]).tolist()[0] == 100.0  # taken, not in force yet
    s.advance(1)
    assert s.iops_array(["a", "b"]).tolist()[0] == 50.0
