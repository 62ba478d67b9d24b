"""Tests for master/config/resolved.py: the --dry-run plan text and the resolved JSON."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from master.config import parse_config_text
from master.config.resolved import format_plan, resolved_dict

TEST = """\
test: plan_demo
description: a demo of every plan line
subinterval_seconds: 2
output_root: out
hosts:
  - localhost
  - {name: "h[1-2]", address: "10.0.0.[1-2]", user: root, identity_file: /k,
     python: /usr/bin/python3}
luns:
  - {hosts: localhost, file: "${output_root}/lun0", size: 64MiB, create: true, allow_write: true}
  - {hosts: "h[1-2]", vendor: "ACME*", rotational: false}
rollups: [{type: host, quantity: 3, max_droop: 10%}, vendor+model]
steps:
  - name: warm
    workloads:
      - {name: a, iosequencer: random_steady, blocksize: 8KiB, iodepth: 4, iops: 100,
         write_data: "dedupable:3", hot_zone_size: 1GiB, hot_zone_share: 80%}
    warmup_seconds: 3
    measure_seconds: 10
    cooldown_seconds: 500ms
  - name: steady
    workloads: [{name: a, delete: true}, {name: b, iosequencer: sequential, luns: {host: "h*"}}]
    measure:
      criterion: fio
      focus_metric: service_time_p99_ms
      criteria: ["slope:1%"]
      window_seconds: 10
      timeout_seconds: 1m
  - name: dfc
    measure_seconds: 4
    dfc: {focus_rollup: host, focus_metric: IOPS, target: 500, low_iops: 10, high_iops: 1000,
          window_seconds: 5}
    edit_rollup: [{instance: "vendor+model=ACME+X", total_iops: 300, iodepth: 2}]
    iops_tolerance_pct: 10%
  - name: curve
    iops_curve: [25%]
  - name: sw
    for: {blocksize: [4KiB, 1MiB]}
thresholds:
  - "service_time_p99_ms < 2"
  - {expr: "IOPS >= 100", step: warm, rollup: host, instance: h1}
"""

EXPECTED = """\
test plan_demo  (from demo.yaml)
  a demo of every plan line
output       /run/here/out/plan_demo/<YYYYmmdd-HHMMSS>/
subinterval  2s; results awaited up to 75% of a subinterval (1.5s) after each boundary
validity     a step is invalid when a paced workload's IOPS falls more than 5% short of its setting (iops_tolerance_pct)

hosts (3)
  localhost  local
  h1         ssh root@10.0.0.1 python=/usr/bin/python3 identity_file=/k
  h2         ssh root@10.0.0.2 python=/usr/bin/python3 identity_file=/k

luns (2 selectors)
  hosts=localhost  file /run/here/out/lun0 size 64MiB create allow_write  (line 10)
  hosts=h1,h2  attributes vendor=ACME* rotational=False  (line 11)

rollups: all, host, lun, workload, vendor+model
  host: quantity 3, max_droop 10%

steps (7)
step 0000 warm  (steps[0], line 14)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 10s = 5 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  changes: + a
  workloads in force (1):
    a  luns=all  random_steady  blocksize=8KiB iodepth=4 iops=100 read_fraction=100% hot_zone_size=1GiB hot_zone_share=80% write_data=dedupable:3
step 0001 steady  (steps[1], line 21)
  warmup 3s = 2 × 2s (rounded up to 4s); cooldown 500ms = 1 × 2s (rounded up to 2s)
  measure until service_time_p99_ms of the whole test (rollup all) meets fio criteria slope(service_time_p99_ms) < 1% over a 10s window after 0s ramp; timeout 1m
  changes: - a, + b
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=4KiB iodepth=1 iops=max read_fraction=100%
step 0002 dfc  (steps[2], line 29)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 4s = 2 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  dfc holds IOPS of every host instance at 500 (±10%) with IOPS in [10, 1000]; acts once per 6s window (3 subintervals at one IOPS, histograms merged)
  iops_tolerance_pct 10% (the test's: 5%)
  edit_rollup vendor+model=ACME+X: total_iops=300 iodepth=2
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=4KiB iodepth=1 iops=max read_fraction=100%
step 0003 curve-iops=max  (steps[3], line 35)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 4s = 2 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  iops_curve: the max-IOPS point (every workload at iops=max)
  changes: ~ b (iops) [by iops_curve]
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=4KiB iodepth=1 iops=max read_fraction=100%
step 0004 curve-iops=25%  (steps[3], line 35)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 4s = 2 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  iops_curve: the whole test (rollup all) at 25% of its IOPS in step curve-iops=max
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=4KiB iodepth=1 iops=(set by iops_curve) read_fraction=100%
step 0005 sw-blocksize=4KiB  (steps[4], line 37)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 4s = 2 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  for blocksize=4KiB
  changes: ~ b (blocksize) [by for]
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=4KiB iodepth=1 iops=max read_fraction=100%
step 0006 sw-blocksize=1MiB  (steps[4], line 37)
  warmup 3s = 2 × 2s (rounded up to 4s); measure 4s = 2 × 2s; cooldown 500ms = 1 × 2s (rounded up to 2s)
  for blocksize=1MiB
  changes: ~ b (blocksize) [by for]
  workloads in force (1):
    b  luns={host=h*}  sequential  blocksize=1MiB iodepth=1 iops=max read_fraction=100%

thresholds (2: the run exits 1 when one does not hold)
  service_time_p99_ms < 2  (line 40)
  IOPS >= 100 [step warm, host h1]  (line 41)

total: 1m12s of fixed-length phases, plus up to 1m measuring until steady
"""  # noqa: E501


def test_format_plan_golden() -> None:
    cfg = parse_config_text(TEST, "demo.yaml", cwd=Path("/run/here"))
    assert format_plan(cfg) == EXPECTED


def test_plan_of_minimal_test_has_no_optional_lines() -> None:
    text = textwrap.dedent(
        """\
        test: t
        hosts: [localhost]
        luns: [{path: /dev/loop0}]
        steps: [{name: s, workloads: [{name: w, iosequencer: sequential}]}]
        """
    )
    plan = format_plan(parse_config_text(text, "t.yaml", cwd=Path("/x")))
    for absent in ("measure until", "dfc", "edit_rollup", "iops_curve", "for ", "quantity"):
        assert absent not in plan
    assert "luns (1 selector)" in plan
    assert "  warmup 0; measure 1m = 12 × 5s; cooldown 0" in plan
    assert plan.endswith("total: 1m of fixed-length phases\n")


def test_resolved_dict_is_json() -> None:
    cfg = parse_config_text(TEST, "demo.yaml", cwd=Path("/run/here"))
    data = resolved_dict(cfg)
    round_trip = json.loads(json.dumps(data))
    assert round_trip == data
    assert "source_text" not in data
    assert data["output_root"] == "/run/here/out"
    steps = data["steps"]
    assert isinstance(steps, list) and len(steps) == 7
    assert steps[0]["workloads"][0]["write_data"] == {"kind": "dedupable", "ratio": 3.0}
    assert steps[1]["measure"]["criterion"]["criteria"][0]["limit"] == {
        "value": 1.0,
        "percent": True,
    }


def test_plan_accuracy_measure_line() -> None:
    text = textwrap.dedent(
        """\
        test: t
        subinterval_seconds: 2
        hosts: [localhost]
        luns: [{path: /dev/loop0}]
        steps:
          - name: s
            workloads: [{name: w, iosequencer: sequential}]
            measure: {focus_rollup: lun, accuracy: 2%, confidence: 99%, min_measure_seconds: 9,
                      ramp_seconds: 3, autocorrelation: 2, timeout_seconds: 2m}
        """
    )
    plan = format_plan(parse_config_text(text, "t.yaml", cwd=Path("/x")))
    assert (
        "  measure until IOPS of every lun instance is within ±2% at 99% confidence "
        "(at least 10s after 4s ramp; autocorrelation factor 2); timeout 2m\n"
    ) in plan
    assert plan.endswith("total: 0s of fixed-length phases, plus up to 2m measuring until steady\n")
