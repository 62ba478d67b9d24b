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
    # a field over csv's 128 KiB limit, JSON nested past the recursion limit, an integer of
    # more digits than int() takes: problems of their lines, not exceptions
    (f"a,{'x' * 200_000},c,1\na,b,c,2\n", [Reading("a", "b", "c", 2.0)],
     ["line 1: bad CSV (field larger than field limit (131072))"]),
    ('{"a":' * 100_000 + "\n", [], ["line 1: bad JSON (nested too deeply)"]),
    ('{"element_type": "p", "element_instance": "1", "metric": "m", "value": '
     + "1" * 5000 + "}", [],
     ["line 1: bad JSON (Exceeds the limit (4300 digits) for integer string conversion)"]),
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


# every line legal in the Prometheus text format or OpenMetrics text: none is a problem
LEGAL = """\
# HELP x_total Reads, with \\\\ and \\n in its help text.
# TYPE x counter
x_total{device="sda"} 10 1700000000000
x_total{device="sda",} 1 # {trace_id="KOO5S4vxi0o"} 0.67 1600000000.500
x_total { device = "sd}b" , path="a\\\\b\\"c\\nd#e" } 3

x_total{device="sdc"} +Inf
x_total{device="sdd"} -Inf
x_total{device="sde"} Inf
x_total{device="sdf"} NaN
\tx_total{device="sdg"}   4.5e1\t
{"x_total",device="sdh"} 7
# TYPE "x.dotted" gauge
{"x.dotted", device="sda"} 2
# UNIT x seconds
# EOF
"""


def test_prometheus_legal_lines_are_read_and_never_problems() -> None:
    scrape = parse_exposition(LEGAL, [MetricPattern("x.*", True)], "disk", "device")
    assert scrape.problems == []
    assert {(r.element_instance, r.metric): r.value for r in scrape.readings} == {
        ("sda", "x_total"): 11.0, ("sd}b", "x_total"): 3.0, ("sdg", "x_total"): 45.0,
        ("sdh", "x_total"): 7.0, ("sda", "x.dotted"): 2.0}  # not finite: skipped
    scrape = parse_exposition(LEGAL, [MetricPattern("x_total", False)], "disk", "path")
    assert [(r.element_instance, r.value) for r in scrape.readings] == [('a\\b"c\nd#e', 3.0)]


@pytest.mark.parametrize(("line", "problem"), [
    ('ok{device= 2', "line 2: bad sample of ok"),  # label value not quoted
    ('ok{device="b" 2', "line 2: bad sample of ok"),  # braces not closed
    ('ok{device="b" path="c"} 2', "line 2: bad sample of ok"),  # no comma
    ('ok{device="b"} two', "line 2: bad sample of ok"),
    ('ok{device="b"} 2 3 4', "line 2: bad sample of ok"),
    ('ok{device="b"} 2 yesterday', "line 2: bad sample of ok"),  # not a timestamp
    ('ok{device="b"}', "line 2: bad sample of ok"),  # no value
    ("<html><body>Error</body></html>", "line 2: not a sample line"),  # no metric name
    ('other{device= 2', None),  # a metric the source does not take: skipped at its name
    ("other x y z w", None),
])
def test_prometheus_bad_lines_of_taken_metrics_are_problems(line: str, problem: str | None
                                                            ) -> None:
    scrape = parse_exposition(f'ok{{device="a"}} 1\n{line}\n', [MetricPattern("ok", False)],
                              "disk", "device")
    assert [r.value for r in scrape.readings] == [1.0]
    assert scrape.problems == ([] if problem is None else [problem])


@pytest.mark.parametrize(("types", "metric", "counter"), [
    ("histogram", "lat_seconds_count", True),
    ("histogram", "lat_seconds_sum", True),
    ("histogram", "lat_seconds_bucket", True),
    ("summary", "lat_seconds_count", True),
    ("summary", "lat_seconds_sum", True),
    ("summary", "lat_seconds", False),  # a quantile: a gauge
    ("gaugehistogram", "lat_seconds_bucket", False),
    ("gauge", "lat_seconds_count", False),
    ("counter", "lat_seconds_total", True),  # OpenMetrics: the family without _total
    ("counter", "lat_seconds_created", False),  # OpenMetrics: a time, not a count
    ("untyped", "lat_seconds_sum", False),
])
def test_prometheus_counters_by_family_type(types: str, metric: str, counter: bool) -> None:
    page = (f"# TYPE lat_seconds {types}\n"
            f'{metric}{{dev="sda",le="+Inf",quantile="0.5"}} 10\n')
    scrape = parse_exposition(page, [MetricPattern(metric, False)], "disk", "dev")
    assert [r.value for r in scrape.readings] == [10.0]
    assert scrape.counters == ({metric} if counter else set())


def test_histogram_count_and_sum_become_rates() -> None:
    # the CSV's cells of a histogram's _count and _sum: per second, as other counters'
    def scrape_at(count: float, sum_s: float) -> Sample:
        page = ("# TYPE io_seconds histogram\n"
                f'io_seconds_bucket{{dev="sda",le="+Inf"}} {count}\n'
                f'io_seconds_sum{{dev="sda"}} {sum_s}\nio_seconds_count{{dev="sda"}} {count}\n')
        scrape = parse_exposition(page, [MetricPattern("io_seconds_(count|sum)", True)],
                                  "disk", "dev")
        assert scrape.counters == {"io_seconds_count", "io_seconds_sum"}
        return Sample.of(0, scrape.readings)

    first, second = scrape_at(100, 0.5), scrape_at(300, 1.5)
    rates = values_of(Sample(2 * S, second.values), Sample(0, first.values),
                      {"io_seconds_count", "io_seconds_sum"})
    assert rates == {("disk", "sda", "io_seconds_count"): 100.0,
                     ("disk", "sda", "io_seconds_sum"): 0.5}


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
    ([], 250), ([10_000_000, 30_000_000], 60 + 2 + 50), ([900_000_000], 250),
])
def test_lead(recent: list[int], want_ms: float) -> None:
    # 1 s subintervals (5 % = 50 ms margin beside 2 ms), a 250 ms timeout caps it
    assert lead_ns(recent, S, 250_000_000) == pytest.approx(want_ms * 1e6)
