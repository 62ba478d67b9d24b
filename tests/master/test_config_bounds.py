"""Every number in a test file is range-checked with its key path (issue 40, "bounded input").

Table-driven: each bound is accepted at its edge and refused just past it, so moving a bound
(or losing its check) fails here. The fixtures in bad_configs/ cover the same through
``ivypy run``; test_config_bounds_process.py runs some as a real process.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from master.config import TestConfig, limits, parse_config_text
from protocol.errors import ConfigError

TEMPLATE = """\
test: t
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {{file: /x/lun0, create: true, size: {size}}}
rollups: [{{type: host, quantity: {quantity}}}]
steps:
  - name: s
    workloads:
      - {{name: w, iosequencer: {seq}, {workload}}}
{step}"""


def _config(workload: str = "iodepth: 1", *, size: str = "1MiB", quantity: str = "1",
            seq: str = "random_steady", step: str = "") -> str:
    return TEMPLATE.format(size=size, quantity=quantity, seq=seq, workload=workload,
                           step=textwrap.indent(textwrap.dedent(step), "    "))


def _parse(text: str) -> TestConfig:
    return parse_config_text(text, "t.yaml", cwd=Path("/x"))


def _dfc(focus_metric: str = "service_time_p99_ms", target: str = "2", low: str = "100",
         high: str = "1000", gains: str = "") -> str:
    extra = f"\n  gains: {gains}" if gains else ""
    return (f"measure_seconds: 10\ndfc:\n  focus_metric: {focus_metric}\n  target: {target}\n"
            f"  low_iops: {low}\n  high_iops: {high}{extra}\n")


def _fio(limit: str) -> str:
    return f"measure:\n  criterion: fio\n  criteria: [{limit}]\n  window_seconds: 10\n"


W = "steps[0].workloads[0]"

# (id, config text, what the config holds, the value it must be)
ACCEPTED: list[tuple[str, str, Callable[[TestConfig], object], object]] = [
    ("lun size 1024PiB", _config(size="1024PiB"), lambda c: c.luns[0].size_bytes, 2**60),
    ("blocksize 64MiB", _config("blocksize: 64MiB"), lambda c: c.steps[0].workloads[0]
     .blocksize_bytes, 64 * 2**20),
    ("range_end 1024PiB", _config("range_end: 1024PiB"),
     lambda c: c.steps[0].workloads[0].range_end.value, 2.0**60),
    ("iodepth 4096", _config("iodepth: 4096"), lambda c: c.steps[0].workloads[0].iodepth, 4096),
    ("iops 1e8", _config("iops: 1e8"), lambda c: c.steps[0].workloads[0].iops, 1e8),
    ("iops 0.001", _config("iops: 0.001"), lambda c: c.steps[0].workloads[0].iops, 0.001),
    ("skew_weight 1e6", _config("skew_weight: 1e6"),
     lambda c: c.steps[0].workloads[0].skew_weight, 1e6),
    ("skew_weight 1e-6", _config("skew_weight: 1e-6"),
     lambda c: c.steps[0].workloads[0].skew_weight, 1e-6),
    ("write_data 1000", _config('write_data: "dedupable:1000"'),
     lambda c: c.steps[0].workloads[0].write_data.ratio, 1000.0),
    ("total_iops 1e10", _config(step="edit_rollup: [{instance: all, total_iops: 1e10}]"),
     lambda c: c.steps[0].edit_rollup[0].total_iops, 1e10),
    ("dfc high_iops 1e10", _config(step=_dfc(high="1e10")),
     lambda c: c.steps[0].dfc.high_iops, 1e10),
    ("dfc low_iops 0.001", _config(step=_dfc(low="0.001")),
     lambda c: c.steps[0].dfc.low_iops, 0.001),
    ("dfc target 1h of ms", _config(step=_dfc(target="3600000")),
     lambda c: c.steps[0].dfc.target, 3.6e6),
    ("dfc target 1e9 MB/s", _config(step=_dfc("MB_per_s", target="1e9")),
     lambda c: c.steps[0].dfc.target, 1e9),
    ("dfc target 1e10 IOPS", _config(step=_dfc("write_IOPS", target="1e10")),
     lambda c: c.steps[0].dfc.target, 1e10),
    ("dfc gain 100", _config(step=_dfc(gains="{ki: 100}")),
     lambda c: c.steps[0].dfc.gains.ki, 100.0),
    ("dfc ki 0 with kp", _config(step=_dfc(gains="{kp: 0.5, ki: 0}")),
     lambda c: c.steps[0].dfc.gains.kp, 0.5),
    ("autocorrelation 100", _config(step="measure: {autocorrelation: 100}"),
     lambda c: c.steps[0].measure.criterion.autocorrelation, 100.0),
    ("fio limit 100%", _config(step=_fio('"iops:100%"')),
     lambda c: c.steps[0].measure.criterion.criteria[0].limit.value, 100.0),
    ("fio limit 1e10 IOPS/s", _config(step=_fio("{type: iops_slope, limit: 1e10}")),
     lambda c: c.steps[0].measure.criterion.criteria[0].limit.value, 1e10),
    ("rollup quantity 1e6", _config(quantity="1000000"), lambda c: c.rollup("host").quantity,
     1_000_000),
    ("iops_tolerance_pct 100", "iops_tolerance_pct: 100\n" + _config(),
     lambda c: (c.iops_tolerance_pct, c.steps[0].iops_tolerance_pct), (100.0, 100.0)),
    ("iops_tolerance_pct 0", "iops_tolerance_pct: 0\n" + _config(),
     lambda c: c.steps[0].iops_tolerance_pct, 0.0),
    ("iops_tolerance_pct 2.5%", 'iops_tolerance_pct: "2.5%"\n' + _config(),
     lambda c: c.steps[0].iops_tolerance_pct, 2.5),
    ("iops_tolerance_pct default 5", _config(),
     lambda c: (c.iops_tolerance_pct, c.steps[0].iops_tolerance_pct), (5.0, 5.0)),
    ("a step's iops_tolerance_pct 20", _config(step="iops_tolerance_pct: 20"),
     lambda c: (c.iops_tolerance_pct, c.steps[0].iops_tolerance_pct), (5.0, 20.0)),
    ("100-digit integer reaches the range check", _config("seed: " + "9" * 100),
     None, "must be between 0 and"),  # refused by the key's check, with its path
]


@pytest.mark.parametrize(("text", "get", "expected"), [case[1:] for case in ACCEPTED],
                         ids=[case[0] for case in ACCEPTED])
def test_a_value_at_its_bound_is_accepted(text: str, get: Callable[[TestConfig], object] | None,
                                          expected: object) -> None:
    if get is None:  # the YAML layer lets it through; the key's own check names it
        with pytest.raises(ConfigError) as info:
            _parse(text)
        assert f"{W}.seed: {expected}" in str(info.value)
        return
    assert get(_parse(text)) == expected


# (id, config text, "key.path: message" the error must end with)
REFUSED: list[tuple[str, str, str]] = [
    ("lun size 99999999PiB", _config(size="99999999PiB"),
     "luns[0].size: must be at most 1024PiB (got 99999999PiB)"),
    ("lun size past 1EiB", _config(size="1048577TiB"),
     "luns[0].size: must be at most 1024PiB (got 1048577TiB)"),
    ("blocksize past 64MiB", _config("blocksize: 65MiB"),
     f"{W}.blocksize: must be at most 64MiB (got 65MiB)"),
    ("range_start past 1EiB", _config("range_start: 1025PiB"),
     f"{W}.range_start: must be at most 1024PiB (got 1025PiB)"),
    ("seq_start past 1EiB", _config("seq_start: 1025PiB", seq="sequential"),
     f"{W}.seq_start: must be at most 1024PiB (got 1025PiB)"),
    ("hot_zone_size past 1EiB", _config("hot_zone_size: 1025PiB, hot_zone_share: 0.5"),
     f"{W}.hot_zone_size: must be at most 1024PiB (got 1025PiB)"),
    ("iodepth 4097", _config("iodepth: 4097"),
     f"{W}.iodepth: must be between 1 and 4096 (got 4097)"),
    ("iops 1e308", _config("iops: 1e308"), f"{W}.iops: must be at most 100,000,000 (got 1e308)"),
    ("iops just past 1e8", _config("iops: 100000001"),
     f"{W}.iops: must be at most 100,000,000 (got 100000001)"),
    ("iops inf", _config("iops: .inf"), f"{W}.iops: must be at most 100,000,000 (got .inf)"),
    ("iops nan", _config("iops: .nan"), f"{W}.iops: must be a number > 0 or 'max' (got .nan)"),
    ("iops negative", _config("iops: -1"), f"{W}.iops: must be a number > 0 or 'max' (got -1)"),
    ("iops below 0.001", _config("iops: 0.0009"), f"{W}.iops: must be at least 0.001 (got 0.0009)"),
    ("skew_weight past 1e6", _config("skew_weight: 1000001"),
     f"{W}.skew_weight: must be at most 1,000,000 (got 1000001)"),
    ("skew_weight below 1e-6", _config("skew_weight: 9e-7"),
     f"{W}.skew_weight: must be at least 1e-06 (got 9e-7)"),
    ("skew_weight inf", _config("skew_weight: .inf"),
     f"{W}.skew_weight: must be a finite number (got .inf)"),
    ("write_data ratio past 1000", _config('write_data: "compressible:1000.5"'),
     f"{W}.write_data: bad ratio '1000.5': must be at most 1,000"),
    ("total_iops past 1e10", _config(step="edit_rollup: [{instance: all, total_iops: 1.1e10}]"),
     "steps[0].edit_rollup[0].total_iops: must be at most 10,000,000,000 (got 1.1e10)"),
    ("total_iops below 0.001", _config(step="edit_rollup: [{instance: all, total_iops: 1e-4}]"),
     "steps[0].edit_rollup[0].total_iops: must be at least 0.001 (got 1e-4)"),
    ("dfc high_iops past 1e10", _config(step=_dfc(high="2e10")),
     "steps[0].dfc.high_iops: must be at most 10,000,000,000 (got 2e10)"),
    ("dfc low_iops below 0.001", _config(step=_dfc(low="1e-9")),
     "steps[0].dfc.low_iops: must be at least 0.001 (got 1e-9)"),
    ("dfc latency target past 1h", _config(step=_dfc(target="3600001")),
     "steps[0].dfc.target: must be at most 3,600,000 ms (got 3600001)"),
    ("dfc MB/s target past 1e9", _config(step=_dfc("MB_per_s", target="2e9")),
     "steps[0].dfc.target: must be at most 1,000,000,000 MB/s (got 2e9)"),
    ("dfc IOPS target past 1e10", _config(step=_dfc("IOPS", target="2e10")),
     "steps[0].dfc.target: must be at most 10,000,000,000 IOPS (got 2e10)"),
    ("dfc target nan", _config(step=_dfc(target=".nan")),
     "steps[0].dfc.target: must be a finite number (got .nan)"),
    ("dfc gain past 100", _config(step=_dfc(gains="{kd: 101}")),
     "steps[0].dfc.gains.kd: must be at most 100 (got 101)"),
    ("dfc gains all 0", _config(step=_dfc(gains="{kp: 0, ki: 0, kd: 0}")),
     "steps[0].dfc.gains: kp, ki and kd cannot all be 0"),
    ("dfc ki 0 alone", _config(step=_dfc(gains="{ki: 0}")),
     "steps[0].dfc.gains: kp, ki and kd cannot all be 0"),
    # once the adaptive controller, where the docs say a gain left out takes its default
    ("dfc gains empty", _config(step=_dfc(gains="{}")),
     "steps[0].dfc.gains: gives no gain: give kp, ki or kd"),
    ("autocorrelation past 100", _config(step="measure: {autocorrelation: 101}"),
     "steps[0].measure.autocorrelation: must be at most 100 (got 101)"),
    ("autocorrelation inf", _config(step="measure: {autocorrelation: .inf}"),
     "steps[0].measure.autocorrelation: must be at most 100 (got .inf)"),
    ("fio limit past 100%", _config(step=_fio('"iops:101%"')),
     "steps[0].measure.criteria[0]: must be at most 100% (got 101%)"),
    ("fio slope limit past 1e10 IOPS/s", _config(step=_fio("{type: iops_slope, limit: 2e10}")),
     "steps[0].measure.criteria[0].limit: must be at most 10,000,000,000 IOPS/s (got 2e10)"),
    ("fio bw limit past 1e9 MB/s", _config(step=_fio('"bw:2e9"')),
     "steps[0].measure.criteria[0]: must be at most 1,000,000,000 MB/s (got 2e9)"),
    ("fio limit inf", _config(step=_fio("{type: iops, limit: .inf}")),
     "steps[0].measure.criteria[0].limit: must be at most 10,000,000,000 IOPS (got .inf)"),
    ("iops_tolerance_pct past 100", "iops_tolerance_pct: 100.5\n" + _config(),
     "iops_tolerance_pct: must be at most 100% (got 100.5)"),
    ("iops_tolerance_pct negative", "iops_tolerance_pct: -1\n" + _config(),
     "iops_tolerance_pct: must be at least 0% (got -1)"),
    ("iops_tolerance_pct nan", "iops_tolerance_pct: .nan\n" + _config(),
     "iops_tolerance_pct: must be at least 0% (got .nan)"),
    ("iops_tolerance_pct a word", "iops_tolerance_pct: five\n" + _config(),
     "iops_tolerance_pct: must be a percentage like 5 or 5%"),
    ("iops_tolerance_pct bad percent", 'iops_tolerance_pct: "x%"\n' + _config(),
     "iops_tolerance_pct: must be a percentage like 5 or 5% (got 'x%')"),
    ("a step's iops_tolerance_pct past 100", _config(step="iops_tolerance_pct: 101%"),
     "steps[0].iops_tolerance_pct: must be at most 100% (got 101%)"),
    ("rollup quantity past 1e6", _config(quantity="1000001"),
     "rollups[0].quantity: must be at most 1,000,000 (got 1000001)"),
    ("size as a string with a huge exponent", _config(size='"1e999999999B"'),
     "luns[0].size: number out of range in '1e999999999B'"),
    ("a long value is quoted short", _config("iops: " + "9" * 60),
     f"{W}.iops: must be at most 100,000,000 (got {'9' * 37}...)"),
]


@pytest.mark.parametrize(("text", "message"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_a_value_past_its_bound_is_refused_with_its_key_path(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert str(info.value).split(": ", 1)[1].startswith(message), str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_every_bound_is_finite_and_ordered() -> None:
    assert 0 < limits.MIN_IOPS < limits.MAX_IOPS < limits.MAX_TOTAL_IOPS
    assert 0 < limits.MIN_SKEW_WEIGHT < 1 < limits.MAX_SKEW_WEIGHT
    assert limits.MAX_BLOCKSIZE_BYTES < limits.MAX_LUN_BYTES < 2**63  # int64 offsets
    assert limits.MAX_LUN_BYTES % 512 == 0 and limits.MAX_BLOCKSIZE_BYTES % 512 == 0
    for metric, unit in (("IOPS", "IOPS"), ("read_MB_per_s", "MB/s"),
                         ("response_time_p99_9_ms", "ms"), ("device_IOPS", "IOPS"),
                         ("device_MB_per_s", "MB/s"), ("device_service_time_ms", "ms"),
                         ("device_util_pct", "%"), ("device_queue_depth", "I/Os in flight")):
        assert limits.metric_max(metric)[1] == unit
    assert limits.metric_max("device_util_pct")[0] == 100
