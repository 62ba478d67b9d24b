"""The pure parts of ``gather:``: command output lines, the Prometheus text format, counter
rates, the join and the just-in-time lead, each on a table of cases."""

from __future__ import annotations

import pytest

from master.config.gather import GatherJoin, MetricPattern
from master.gather.gathering import lead_ns
from master.gather.join import aggregate, plan_join
from master.gather.lines import MAX_PROBLEMS, Reading, parse_lines
from master.gather.promtext import parse_exposition
from master.gather.rates import Sample, values_of


@pytest.mark.parametrize(("text", "readings", "problems"), [
    ("LDEV,00:01,busy_pct,42\n", [Reading("LDEV", "00:01", "busy_pct", 42.0)], []),
    ('# c\n\n "LDEV" , "a,b" ,iops, 1e3 \n', [Reading("LDEV", "a,b", "iops", 1000.0)], []),
    ('{"element_type": "port", "element_instance": "1A", "metric": "mbps", "value": 2.5}',
     [Reading("port", "1A", "mbps", 2.5)], []),
    ('{"element_type": "port", "element_instance": 7, "metric": "m", "value": "3"}',
     [Reading("port", "7", "m", 3.0)], []),
    ("a,b,c\n", [], ["line 1: 3 fields, expected element_type,element_instance,metric,value"]),
    ("a,b,c,x\n", [], ["line 1: value 'x' is not a number"]),
    ("a,b,c,nan\n", [], ["line 1: value 'nan' is not finite"]),
    ("a,,c,1\n", [], ["line 1: empty element_type, element_instance or metric"]),
    ('{"element_type": "p"}', [], ["line 1: JSON line lacks element_instance, metric, value"]),
    ("[1]\n{x", [], ["line 1: 1 fields, expected element_type,element_instance,metric,value",
                     "line 2: bad JSON (Expecting property name enclosed in double quotes)"]),
    ("a,b,c,1\nbad\n", [Reading("a", "b", "c", 1.0)],
     ["line 2: 1 fields, expected element_type,element_instance,metric,value"]),
])
def test_lines(text: str, readings: list[Reading], problems: list[str]) -> None:
    assert parse_lines(text) == (readings, problems)


def test_lines_attributes_are_text_and_problems_are_bounded() -> None:
    assert parse_lines("LDEV,00:01,serial,0x1F\n", numeric=False) == (
        [Reading("LDEV", "00:01", "serial", "0x1F")], [])
    _, problems = parse_lines("bad\n" * 12)
    assert len(problems) == MAX_PROBLEMS + 1 and problems[-1] == "7 more bad lines"


PAGE = """\
# HELP node_disk_reads_completed_total The total number of reads completed successfully.
# TYPE node_disk_reads_completed_total counter
node_disk_reads_completed_total{device="loop0"} 1234
node_disk_reads_completed_total{device="sda"} 5.5e+06
# TYPE node_disk_io_now gauge
node_disk_io_now{device="loop0"} 3
node_cpu_seconds_total{cpu="0",mode="idle"} 10 1700000000000
node_cpu_seconds_total{cpu="0",mode="user"} 5
node_cpu_seconds_total{cpu="1",mode="idle"} 7
# TYPE requests counter
requests_total{device="x",path="a\\"b"} 2
no_device_label 1
"""


@pytest.mark.parametrize(("metrics", "label", "want", "counters"), [
    ([MetricPattern("node_disk_reads_completed_total", False)], "device",
     {("loop0", "node_disk_reads_completed_total"): 1234.0,
      ("sda", "node_disk_reads_completed_total"): 5.5e6},
     {"node_disk_reads_completed_total"}),
    ([MetricPattern("node_disk_.*", True)], "device",
     {("loop0", "node_disk_reads_completed_total"): 1234.0,
      ("sda", "node_disk_reads_completed_total"): 5.5e6, ("loop0", "node_disk_io_now"): 3.0},
     {"node_disk_reads_completed_total"}),
    # series that share the instance label are added; untyped *_total is a counter
    ([MetricPattern("node_cpu_seconds_total", False)], "cpu",
     {("0", "node_cpu_seconds_total"): 15.0, ("1", "node_cpu_seconds_total"): 7.0},
     {"node_cpu_seconds_total"}),
    # OpenMetrics: the family ``requests`` is typed counter; escaped label values
    ([MetricPattern("requests_total", False)], "path",
     {('a"b', "requests_total"): 2.0}, {"requests_total"}),
    ([MetricPattern("node_disk_io_now", False)], "device",
     {("loop0", "node_disk_io_now"): 3.0}, set()),
])
def test_prometheus(metrics: list[MetricPattern], label: str,
                    want: dict[tuple[str, str], float], counters: set[str]) -> None:
    scrape = parse_exposition(PAGE, metrics, "disk", label)
    assert {(r.element_instance, r.metric): r.value for r in scrape.readings} == want
    assert all(r.element_type == "disk" for r in scrape.readings)
    assert scrape.counters == counters and scrape.problems == []


def test_prometheus_bad_lines_are_problems() -> None:
    scrape = parse_exposition('ok{device="a"} 1\nbroken{device= 2\nx y z w v\n',
                              [MetricPattern("ok", False)], "disk", "device")
    assert [r.value for r in scrape.readings] == [1.0]
    assert scrape.problems == ["line 2: not a sample line", "line 3: not a sample line"]


S = 1_000_000_000


@pytest.mark.parametrize(("previous", "current", "want"), [
    (None, {"r": 100.0, "g": 5.0}, {"r": None, "g": 5.0}),  # first sample: no rate
    ({"r": 100.0}, {"r": 300.0, "g": 5.0}, {"r": 100.0, "g": 5.0}),  # 200 over 2 s
    ({"r": 300.0}, {"r": 100.0}, {"r": None}),  # went down: a reset
    ({"x": 1.0}, {"r": 100.0}, {"r": None}),  # new element or metric
])
def test_rates(previous: dict[str, float] | None, current: dict[str, float],
               want: dict[str, float | None]) -> None:
    prev = None if previous is None else Sample(1 * S, {("t", "e", m): v
                                                        for m, v in previous.items()})
    cur = Sample(3 * S, {("t", "e", m): v for m, v in current.items()})
    assert values_of(cur, prev, {"r"}) == {("t", "e", m): v for m, v in want.items()}


JOIN = GatherJoin("LDEV", "lun_name", "name", "sum")
ATTRS = {"00:01": {"lun_name": "loop1"}, "00:02": {"lun_name": "loop2"},
         "00:03": {"lun_name": "loop2"}, "00:09": {"lun_name": "sdz"}, "00:10": {}}


def test_join_members_and_non_participating() -> None:
    # workloads: w0 on loop1 (host h1), w1 and w2 on loop2 (h1, h2)
    groupings = {"lun": (("h1:/dev/loop1", "h1:/dev/loop2", "h2:/dev/loop2"), [0, 1, 2]),
                 "host": (("h1", "h2"), [0, 0, 1]), "all": (("all",), [0, 0, 0])}
    plans, outside = plan_join(JOIN, sorted(ATTRS), ATTRS, groupings, ["loop1", "loop2", "loop2"])
    assert plans["lun"].members == (("00:01",), ("00:02", "00:03"), ("00:02", "00:03"))
    assert plans["host"].members == (("00:01", "00:02", "00:03"), ("00:02", "00:03"))
    assert plans["all"].members == (("00:01", "00:02", "00:03"),)
    assert outside == ["00:09", "00:10"]
    by_name = GatherJoin("disk", "element_instance", "name")
    plans, outside = plan_join(by_name, ["loop1", "sda"], {}, {"all": (("all",), [0])},
                               ["loop1"])
    assert plans["all"].members == (("loop1",),) and outside == ["sda"]


@pytest.mark.parametrize(("how", "values", "want"), [
    ("sum", [1.0, 2.0, None], 3.0), ("mean", [1.0, 2.0, None], 1.5), ("max", [1.0, 2.0], 2.0),
    ("sum", [None, None], None), ("mean", [], None),
])
def test_aggregate(how: str, values: list[float | None], want: float | None) -> None:
    assert aggregate(values, how) == want


@pytest.mark.parametrize(("recent", "want_ms"), [
    ([], 250), ([10_000_000, 30_000_000], 45 + 2 + 50), ([900_000_000], 250),
])
def test_lead(recent: list[int], want_ms: float) -> None:
    # 1 s subintervals (5 % = 50 ms margin beside 2 ms), a 250 ms timeout caps it
    assert lead_ns(recent, S, 250_000_000) == pytest.approx(want_ms * 1e6)
