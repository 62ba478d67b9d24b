"""``gather:`` in a good test file: the values and defaults each key becomes, the plan's line,
and focus metrics that name a joined gathered metric; a Prometheus URL the resolver would
refuse (a host name that does not IDNA-encode) is refused with its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import parse_config_text
from master.config.gather import GatherJoin, MetricPattern, describe
from master.config.resolved import format_plan
from protocol.errors import ConfigError

TEXT = """\
test: g
subinterval_seconds: 2
hosts: [localhost]
luns:
  - {file: /var/tmp/ivypy-lun, size: 1MiB, create: true}
gather:
  - {name: arr, command: [/opt/cli, perf, 7], counters: [reads],
     config_command: [/opt/cli, config],
     join: {element_type: LDEV, by: serial, lun_attribute: serial}}
  - name: node
    prometheus: "http://127.0.0.1:9100/metrics"
    metrics: [node_disk_reads_completed_total, /node_disk_.*_seconds_total/]
    element_type: disk
    instance_label: device
    timeout: 300ms
    join: {element_type: disk, by: element_instance, lun_attribute: name, aggregate: max}
steps:
  - name: s
    workloads:
      - {name: w, iosequencer: random_steady}
    dfc: {focus_rollup: lun, focus_metric: gather.arr.LDEV.busy_pct, target: 60,
          low_iops: 10, high_iops: 1000}
  - name: t
    measure: {focus_metric: gather.node.disk.node_disk_io_time_seconds_total}
"""


def test_sources_and_defaults(tmp_path: Path) -> None:
    cfg = parse_config_text(TEXT, "g.yaml", cwd=tmp_path)
    arr, node = cfg.gather
    assert (arr.kind, arr.argv, arr.counters, arr.config_argv, arr.timeout_s) == (
        "command", ("/opt/cli", "perf", "7"), ("reads",), ("/opt/cli", "config"), 1.0)
    assert arr.join == GatherJoin("LDEV", "serial", "serial", "sum")
    assert (node.kind, node.url, node.element_type, node.instance_label, node.timeout_s) == (
        "prometheus", "http://127.0.0.1:9100/metrics", "disk", "device", 0.3)
    assert node.metrics == (MetricPattern("node_disk_reads_completed_total", False),
                            MetricPattern("node_disk_.*_seconds_total", True))
    assert node.join == GatherJoin("disk", "element_instance", "name", "max")
    assert cfg.steps[0].dfc is not None
    assert cfg.steps[0].dfc.focus_metric == "gather.arr.LDEV.busy_pct"
    assert cfg.steps[1].measure is not None
    assert cfg.steps[1].measure.focus_metric == "gather.node.disk.node_disk_io_time_seconds_total"
    assert describe(arr) == ("arr: command /opt/cli perf 7; counters reads; timeout 1s; config "
                             "/opt/cli config; join LDEV.serial = LUN serial (sum)")
    assert "node: prometheus http://127.0.0.1:9100/metrics; metrics " \
           "node_disk_reads_completed_total, /node_disk_.*_seconds_total/; disk by label " \
           "device; timeout 0.3s; join disk.element_instance = LUN name (max)" in format_plan(cfg)


def test_no_gather_is_empty(tmp_path: Path) -> None:
    text = TEXT.split("gather:")[0] + "steps:\n  - name: s\n    workloads:\n" \
        "      - {name: w, iosequencer: random_steady}\n"
    assert parse_config_text(text, "g.yaml", cwd=tmp_path).gather == ()


@pytest.mark.parametrize(("url", "message"), [
    ("http://node..lab:9100/metrics", "bad host name 'node..lab' in "
     "'http://node..lab:9100/metrics': a dot-separated part is empty or longer than 63 "
     "characters"),
    (f"http://{'a' * 64}.lab/metrics", f"bad host name '{'a' * 64}.lab' in "
     f"'http://{'a' * 64}.lab/metrics': a dot-separated part is empty or longer than 63 "
     "characters"),
    ("http://.lab/metrics", "bad host name '.lab' in 'http://.lab/metrics': a dot-separated "
     "part is empty or longer than 63 characters"),
    ("https://h/metrics", "must be an http:// URL with a host (got 'https://h/metrics')"),
    ("http://h:99999/metrics", "bad port in 'http://h:99999/metrics'"),
])
def test_bad_prometheus_urls(tmp_path: Path, url: str, message: str) -> None:
    text = TEXT.replace('"http://127.0.0.1:9100/metrics"', f'"{url}"')
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "g.yaml", cwd=tmp_path)
    assert str(info.value) == f"g.yaml:11: gather[1].prometheus: {message}"


@pytest.mark.parametrize("host", ["node.lab.", "127.0.0.1", "[::1]", "ünï.example"])
def test_good_prometheus_hosts(tmp_path: Path, host: str) -> None:
    url = f"http://{host}:9100/metrics"
    text = TEXT.replace('"http://127.0.0.1:9100/metrics"', f'"{url}"')
    assert parse_config_text(text, "g.yaml", cwd=tmp_path).gather[1].url == url
