"""Live metrics for Prometheus (``master.live.metrics``): the bounds of the histograms (each a
bucket top of ivypy's ladder), a subinterval's groups added up per instance and op, and the
exposition; then a run on in-memory hosts served with ``--metrics``, scraped while it goes by a
client thread: the counters of a finished step equal its rows' I/Os, ``histogram_quantile``
over its service times (Prometheus's rule, computed here) lies in the coarse bucket of the
step's own p99, the gauges say the step and its validity; with a token, a scrape without it is
answered 401; a bad address or token file is a config error before any host. The same scraped
by a real Prometheus server is tests/master/test_live_metrics_prometheus.py's."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from master.live import metrics as live_metrics
from master.live.metrics import KEPT_FINISHED_STEPS, LE_NS, RunMetrics
from protocol.batch import StatsBatch
from protocol.buckets import UPPER_NS, bucket_index
from protocol.stats import WorkloadStats
from tests.master.memhosts import run_cli
from tests.master.runhelp import rows, write_config


def test_every_bound_is_a_ladder_buckets_top_from_1_us_to_10_s() -> None:
    tops = set((UPPER_NS - 1).tolist())
    assert all(int(b) in tops for b in LE_NS)
    assert 30 <= LE_NS.size <= 45 and LE_NS[0] < 1_100 and 9e9 < LE_NS[-1] < 1.1e10
    assert np.all(np.diff(LE_NS) > 0)


def _batch(latencies: dict[tuple[int, int], list[int]]) -> StatsBatch:
    """Workloads of one subinterval: (workload, category) → service times (ns); each I/O's
    response time is twice its service time, 4 KiB each."""
    n = 1 + max(w for w, _ in latencies)
    stats = [WorkloadStats() for _ in range(n)]
    for (w, cat), values in latencies.items():
        for v in values:
            stats[w].record_one(cat, v, 2 * v, 4096)
    return StatsBatch.from_stats(stats)


def _families(metrics: RunMetrics) -> dict[str, Any]:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(metrics)
    return {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}


def test_a_subintervals_groups_add_up_per_instance_and_op_exactly() -> None:
    # two groups of instance "a" (hosts h1 and h2) and one of "b"; categories: 0 random read,
    # 1 random write, 3 sequential write
    m = RunMetrics("t")
    batch = _batch({(0, 0): [5_000, 7_000], (1, 1): [3_000_000], (1, 0): [900],
                    (2, 3): [40_000] * 3})
    for _ in range(2):  # two subintervals: cumulative
        m.add(0, "s", "host", ["a", "b"], np.array([0, 0, 1]), batch,
              {"iops_setting": np.array([100.0, np.nan]), "cpu_busy_pct": np.array([50.0, 25.0])})
    fam = _families(m)
    ios = {(s.labels["instance"], s.labels["op"]): s.value
           for s in fam["ivypy_ios"].samples if s.name == "ivypy_ios_total"}
    assert ios == {("a", "read"): 6, ("a", "write"): 2, ("b", "read"): 0, ("b", "write"): 6}
    byts = {(s.labels["instance"], s.labels["op"]): s.value
            for s in fam["ivypy_bytes"].samples if s.name == "ivypy_bytes_total"}
    assert byts[("b", "write")] == 6 * 4096
    buckets = {float(s.labels["le"]): s.value for s in fam["ivypy_service_time_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["instance"] == "a"
               and s.labels["op"] == "read"}
    # cumulative and exact: each value below a bound is counted at and past it
    for le, count in buckets.items():
        expected = 2 * sum(v <= le * 1e9 + 0.5 for v in (5_000, 7_000, 900))
        assert count == expected, le
    total = [s.value for s in fam["ivypy_service_time_seconds"].samples
             if s.name.endswith("_sum") and s.labels["instance"] == "a"
             and s.labels["op"] == "read"]
    assert total == [pytest.approx(2 * (5_000 + 7_000 + 900) / 1e9)]
    setting = {s.labels["instance"]: s.value for s in fam["ivypy_iops_setting"].samples}
    assert setting == {"a": 100.0}  # b runs at max: no setting
    assert {s.labels["instance"]: s.value for s in fam["ivypy_host_cpu_busy_ratio"].samples} \
        == {"a": 0.5, "b": 0.25}
    assert bucket_index(np.array([5_000]))[0] >= 0  # the ladder the batch used


def test_a_finished_steps_series_are_dropped_once_two_later_steps_started() -> None:
    m = RunMetrics("t")
    batch = _batch({(0, 0): [5_000]})
    for step in range(5):
        m.start_step(step, f"s{step}")
        for rollup in ("all", "host"):
            m.add(step, f"s{step}", rollup, ["a"], np.array([0]), batch)
        m.set_dfc(step, f"s{step}", [{"instance": "a", "new_iops": 10, "measured": 1,
                                      "target": 2}])
        m.set_valid(step, f"s{step}", True)
        held = sorted({k[0] for k in m.series})
        assert held == list(range(max(0, step - KEPT_FINISHED_STEPS), step + 1))
        assert sorted({k[0] for k in m.dfc}) == held
    fam = _families(m)
    assert {s.labels["step"] for s in fam["ivypy_ios"].samples} == {"2:s2", "3:s3", "4:s4"}
    # every step's validity stays: one gauge a step
    assert len(fam["ivypy_step_valid"].samples) == 5


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's ``histogram_quantile``: the bucket where the rank falls, linearly
    interpolated between its bounds (the first bucket's lower bound 0)."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    return float("nan")


TEST = """\
test: live
subinterval_seconds: 0.5
hosts: [h1, h2]
{metrics}
luns:
  - {{hosts: [h1, h2], file: "${{output_root}}/lun-{{host}}", size: 16MiB, create: true}}
steps:
  - name: first
    workloads:
      - {{name: a, iosequencer: random_independent, iodepth: 4, iops: 400, read_fraction: 70%}}
    warmup_seconds: 0
    measure_seconds: 1.5
  - name: second
    workloads:
      - {{name: a, iops: 200}}
    warmup_seconds: 0
    measure_seconds: 3
"""


# the second step's validity is served once it has ended: a scrape after that is not "during"
_SECOND_ENDED = re.compile(r'ivypy_step_valid\{[^}]*step="1:second"')


class Scraper(threading.Thread):
    """Scrapes the run's ``/metrics`` every 0.2 s once events.csv names its address, keeping
    the last body, the last taken while the second step ran (before its validity is served),
    and the statuses it got. (A scrape is answered in the run's event loop:
    scraped every 50 ms by two of these beside a busy suite, an in-memory run of 0.2 s
    subintervals missed a result's deadline once.)"""

    def __init__(self, out: Path, token: str | None = None) -> None:
        super().__init__(daemon=True)
        self.out, self.token = out, token
        self.last = ""
        self.statuses: list[int] = []
        self.during_second = ""
        self.done = threading.Event()

    def _url(self) -> str | None:
        for events in self.out.glob("live/*/events.csv"):
            for r in rows(events):
                if r["kind"] == "metrics":
                    return r["message"].split()[2]
        return None

    def run(self) -> None:
        url = None
        while not self.done.is_set():
            url = url or self._url()
            if url is not None:
                req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"}
                                             if self.token else {})
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:
                        self.statuses.append(r.status)
                        self.last = r.read().decode()
                        if 'step="1:second"' in self.last and not _SECOND_ENDED.search(self.last):
                            self.during_second = self.last
                except urllib.error.HTTPError as exc:
                    self.statuses.append(exc.code)
                except OSError:
                    pass
            time.sleep(0.2)


def test_a_run_served_with_metrics_agrees_with_its_own_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_config(tmp_path, TEST.format(metrics=""))
    scraper = Scraper(tmp_path)
    scraper.start()
    try:
        status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain",
                          "--metrics", "127.0.0.1:0"], monkeypatch, warp=False)
    finally:
        scraper.done.set()
        scraper.join(10)
    assert status == 0
    assert scraper.during_second, "no scrape while the second step ran"
    (folder,) = (tmp_path / "live").iterdir()
    fam = {f.name: f for f in text_string_to_metric_families(scraper.during_second)}
    step0 = [r for r in rows(folder / "step0000-first" / "all" / "all.csv")]
    ios_rows = sum(round(float(r["IOPS"]) * 0.5) for r in step0)
    ios = sum(s.value for s in fam["ivypy_ios"].samples if s.name == "ivypy_ios_total"
              and s.labels["step"] == "0:first" and s.labels["rollup"] == "all")
    assert ios == ios_rows and ios > 0
    per_host = sum(s.value for s in fam["ivypy_ios"].samples if s.name == "ivypy_ios_total"
                   and s.labels["step"] == "0:first" and s.labels["rollup"] == "host")
    assert per_host == ios  # the hosts' series add up to the total, exactly
    # histogram_quantile(0.99) of the first step's service times (reads and writes summed,
    # as the summary's p99 is of all I/Os) lies within the coarse bucket holding its p99
    cum: dict[float, float] = {}
    for s in fam["ivypy_service_time_seconds"].samples:
        if (s.name.endswith("_bucket") and s.labels["step"] == "0:first"
                and s.labels["rollup"] == "all"):
            le = float(s.labels["le"])
            cum[le] = cum.get(le, 0.0) + s.value
    buckets = sorted(cum.items())
    q99 = _quantile(0.99, buckets)
    (summary,) = [r for r in rows(folder / "summary.csv")
                  if r["step_name"] == "first" and r["rollup_type"] == "all"]
    p99 = float(summary["service_time_p99_ms"]) / 1e3
    edges = [0.0, *[le for le, _ in buckets]]
    at = next(i for i in range(1, len(edges)) if p99 <= edges[i])
    assert edges[at - 1] <= q99 <= edges[at], (q99, p99, edges[at - 1], edges[at])
    step = {s.labels["step"]: s.value for s in fam["ivypy_step"].samples}
    assert step == {"1:second": 1.0}
    valid = {s.labels["step"]: s.value for s in fam["ivypy_step_valid"].samples}
    assert valid == {"0:first": 1.0}
    assert scraper.statuses and set(scraper.statuses) == {200}


def test_a_token_is_required_where_one_is_set_and_the_rollups_named_are_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cfg = write_config(tmp_path, TEST.format(
        metrics=f"metrics: {{listen: '127.0.0.1:0', token_file: {token}, rollups: [all]}}"))
    without, with_it = Scraper(tmp_path), Scraper(tmp_path, "s3cret")
    for s in (without, with_it):
        s.start()
    try:
        assert run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"],
                       monkeypatch, warp=False) == 0  # scraped by threads in real time
    finally:
        for s in (without, with_it):
            s.done.set()
            s.join(10)
    assert without.statuses and set(without.statuses) == {401}
    assert with_it.statuses and set(with_it.statuses) == {200}
    fam = {f.name: f for f in text_string_to_metric_families(with_it.last)}
    assert {s.labels["rollup"] for s in fam["ivypy_ios"].samples} == {"all"}
    assert {s.labels["rollup"] for s in fam["ivypy_iops_setting"].samples} == {"all"}
    (folder,) = (tmp_path / "live").iterdir()
    assert "s3cret" not in (folder / "resolved.json").read_text()


@pytest.mark.parametrize(("argv", "says"), [
    (["--metrics", "localhost"], "--metrics: 'localhost' is not ADDR:PORT"),
    (["--metrics", "127.0.0.1:99999"], "the port must be 0 to 65535"),
    (["--metrics", "127.0.0.1:0", "--metrics-token-file", "/nonexistent/token"],
     "metrics: cannot read the token file /nonexistent/token"),
    (["--metrics-token-file", "/tmp/x"], "--metrics-token-file needs --metrics"),
    (["--metrics-rollups", "all"], "--metrics-rollups needs --metrics"),
    (["--metrics", "127.0.0.1:0", "--metrics-rollups", "all,nope"],
     "--metrics-rollups: unknown rollup type 'nope' (the test's: all, host, lun, workload)"),
    (["--metrics", "127.0.0.1:0", "--metrics-rollups", ","],
     "--metrics-rollups: names no rollup type"),
    (["--metrics", "127.0.0.1:0", "--metrics-rollups", "host,all,host"],
     "--metrics-rollups: names host more than once"),
])
def test_a_bad_address_or_token_file_is_a_config_error_before_any_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], says: str) -> None:
    cfg = write_config(tmp_path, TEST.format(metrics=""))
    assert run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain", *argv],
                   monkeypatch) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("metrics", "says"), [
    ("{listen: '127.0.0.1:0', rollups: [all, nope]}",
     "metrics.rollups: unknown rollup type 'nope' (the test's: all, host, lun, workload)"),
    ("{listen: '127.0.0.1:0', rollups: all}", "metrics.rollups: must be a list of rollup types"),
    ("{listen: '127.0.0.1:0', rollups: []}", "metrics.rollups: names no rollup type"),
])
def test_bad_rollups_to_serve_are_a_config_error_naming_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        metrics: str, says: str) -> None:
    cfg = write_config(tmp_path, TEST.format(metrics=f"metrics: {metrics}"))
    assert run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain"],
                   monkeypatch) == 2
    assert says in capsys.readouterr().err


def test_a_run_serves_only_the_rollups_named() -> None:
    m = RunMetrics("t", rollups=frozenset({"all", "host"}))
    assert [m.serves(t) for t in ("all", "host", "lun", "workload")] == [True, True, False,
                                                                          False]
    assert all(RunMetrics("t").serves(t) for t in ("all", "workload", "vendor+model"))


def test_a_step_serving_too_many_instances_is_said_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``WARN_INSTANCES`` instances of one step a scrape is more than a Prometheus
    server takes from a target: said once, naming the count, the lines and the way out."""
    monkeypatch.setattr(live_metrics, "WARN_INSTANCES", 3)
    said: list[tuple[str, int]] = []
    m = RunMetrics("t", warn=lambda message, step: said.append((message, step)))
    batch = _batch({(0, 0): [5_000]})
    m.add(0, "s", "all", ["all"], np.array([0]), batch)
    m.add(0, "s", "host", ["h1", "h2"], np.array([0]), batch)
    assert said == []  # 3 instances: not past
    m.add(0, "s", "lun", ["h1:l"], np.array([0]), batch)
    m.add(0, "s", "lun", ["h1:l"], np.array([0]), batch)  # the next subinterval
    m.add(1, "t", "host", ["h1", "h2", "h3", "h4"], np.array([0]), batch)
    assert said == [(
        "live metrics: step s serves 4 rollup instances (every rollup type), about 720 lines "
        "a scrape for it alone: more than a Prometheus server is meant to take from one "
        "target; name fewer rollup types to serve (metrics: {listen: ..., rollups: [all, "
        "host]}, or --metrics-rollups all,host)", 0)]


def test_a_run_says_in_its_events_that_its_scrapes_are_too_large(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_metrics, "WARN_INSTANCES", 2)
    cfg = write_config(tmp_path, TEST.format(metrics=""))
    assert run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain",
                    "--metrics", "127.0.0.1:0"], monkeypatch) == 0
    (folder,) = (tmp_path / "live").iterdir()
    said = [r for r in rows(folder / "events.csv")
            if r["kind"] == "metrics" and r["level"] == "WARNING"]
    assert [(r["level"], r["step"]) for r in said] == [("WARNING", "0")]
    assert said[0]["message"].startswith("live metrics: step first serves ")


def test_the_grafana_dashboard_reads_only_series_ivypy_serves() -> None:
    doc = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-ivypy.json")
                     .read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in doc["annotations"]["list"]]
    used = {name for e in exprs for name in re.findall(r"\b(ivypy_[a-z_]+)", e)}
    m = RunMetrics("t")
    m.add(0, "s", "all", ["all"], np.array([0]), _batch({(0, 0): [1000]}),
          {"iops_setting": np.array([10.0]), "cpu_busy_pct": np.array([5.0])})
    m.set_dfc(0, "s", [{"instance": "all", "new_iops": 10, "measured": 0.001, "target": 0.002}])
    m.set_valid(0, "s", True)
    served = {s.name for f in _families(m).values() for s in f.samples}
    assert used and used <= served, used - served

