"""``--fail-if`` expressions: what parses to what, what is refused and why, and when each
condition holds (relative against the base, absolute against the new value, base 0, missing
values)."""

from __future__ import annotations

import math

import pytest

from master.config.expr import FailIf, evaluate, parse_fail_if, relative_change_pct
from protocol.errors import CompareError


@pytest.mark.parametrize("text, want", [
    ("IOPS < -10%", FailIf("IOPS", "<", -10.0, True)),
    ("IOPS<-10%", FailIf("IOPS", "<", -10.0, True)),
    ("  service_time_p99_ms > +5%  ", FailIf("service_time_p99_ms", ">", 5.0, True)),
    ("service_time_p99_ms > 2", FailIf("service_time_p99_ms", ">", 2.0, False)),
    ("service_time_p99_ms >= 2.5", FailIf("service_time_p99_ms", ">=", 2.5, False)),
    ("MB_per_s <= -0.5 %", FailIf("MB_per_s", "<=", -0.5, True)),
    ("response_time_p99_9_ms > 1e1", FailIf("response_time_p99_9_ms", ">", 10.0, False)),
    ("IOPS < .5", FailIf("IOPS", "<", 0.5, False)),
    ("gather.arr.LDEV.busy_pct > 80", FailIf("gather.arr.LDEV.busy_pct", ">", 80.0, False)),
    ("gather.node.disk.node_disk_reads_completed_total<-5%",
     FailIf("gather.node.disk.node_disk_reads_completed_total", "<", -5.0, True)),
])
def test_parses(text: str, want: FailIf) -> None:
    assert parse_fail_if(text) == want


@pytest.mark.parametrize("text, why", [
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("IOPS -10%", "no comparison (<, <=, > or >=)"),
    ("IOPS == 5", "'==' is not a comparison here"),
    ("IOPS = 5", "'=' is not a comparison here"),
    ("IOPS != 5", "'!=' is not a comparison here"),
    ("IOPS =< 5", "'=<' is not a comparison here"),
    ("< 5", "no metric before '<'"),
    ("service time > 2", "'service time' is not a metric name"),
    ("2IOPS > 2", "'2IOPS' is not a metric name"),
    ("gather.arr.busy > 2", "'gather.arr.busy' is not a metric name"),
    ("gather.a b.LDEV.busy > 2", "'gather.a b.LDEV.busy' is not a metric name"),
    ("IOPS <", "no limit after '<'"),
    ("IOPS < %", "no limit after '<'"),
    ("IOPS < 10%", "a relative change needs its sign: '+10%' for a rise, '-10%' for a fall"),
    # a metric in percent: the absolute limit is offered too, not only a relative change
    ("cpu_busy_pct > 80%", "a relative change needs its sign: '+80%' for a rise, '-80%' for a "
     "fall; cpu_busy_pct is in percent already: 'cpu_busy_pct > 80' holds the new value "
     "against 80 %"),
    ("IOPS < ten", "'ten' is not a number"),
    ("IOPS < -10%%", "'-10%%' is not a number"),
    ("IOPS < 5 ms", "'5 ms' is not a number"),
    ("IOPS < nan", "'nan' is not a number"),
    ("IOPS < inf", "'inf' is not a number"),
    ("IOPS < 1e999", "'1e999' is out of range"),
    ("IOPS < 1 < 2", "more than one comparison"),
    # the % left out: 'IOPS < -10' can never hold (and '> -3' always does), so it was a
    # check that passed whatever the runs did
    ("IOPS<-10", "a signed limit reads as a change: write 'IOPS < -10%' for a change of -10% "
     "of the base run, or 'IOPS < 10' for an absolute limit (a metric is never negative)"),
    ("IOPS > -3", "write 'IOPS > -3%' for a change of -3% of the base run"),
    ("service_time_p99_ms > +5", "write 'service_time_p99_ms > +5%'"),
])
def test_refused_naming_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(CompareError) as err:
        parse_fail_if(text)
    message = str(err.value)
    assert message.startswith(f"--fail-if: {text!r}: ") and why in message, message
    assert "\n" not in message


@pytest.mark.parametrize("cond, text", [
    (FailIf("IOPS", "<", -10.0, True), "IOPS < -10%"),
    (FailIf("IOPS", ">=", 2.5, True), "IOPS >= +2.5%"),
    (FailIf("service_time_p99_ms", ">", 2.0, False), "service_time_p99_ms > 2"),
    # every digit of the limit, not six significant ones: the limit named is the one held
    (FailIf("IOPS", "<", 1234567.0, False), "IOPS < 1234567"),
    (FailIf("service_time_p99_ms", ">", 0.1234567, False), "service_time_p99_ms > 0.1234567"),
    (FailIf("MB_per_s", "<", -12.345678, True), "MB_per_s < -12.345678%"),
])
def test_text_round_trips(cond: FailIf, text: str) -> None:
    assert cond.text == text and parse_fail_if(text) == cond


@pytest.mark.parametrize("base, new, pct", [
    (100.0, 90.0, -10.0), (100.0, 105.0, 5.0), (2.0, 2.0, 0.0), (0.0, 0.0, 0.0),
    (0.0, 5.0, math.inf), (0.0, -5.0, -math.inf), (-4.0, -2.0, 50.0),
])
def test_relative_change(base: float, new: float, pct: float) -> None:
    assert relative_change_pct(base, new) == pytest.approx(pct)


@pytest.mark.parametrize("expr, base, new, holds", [
    # relative: the change from base to new in % of base
    ("IOPS < -10%", 1000.0, 500.0, True),
    ("IOPS < -10%", 1000.0, 900.0, False),  # exactly -10 %: not below it
    ("IOPS <= -10%", 1000.0, 900.0, True),
    ("IOPS < -10%", 1000.0, 899.0, True),
    ("IOPS < -10%", 500.0, 1000.0, False),
    ("service_time_p99_ms > +5%", 1.0, 1.06, True),
    ("service_time_p99_ms > +5%", 1.0, 1.04, False),
    ("service_time_p99_ms > +5%", 1.0, 0.5, False),
    ("service_time_p99_ms >= +0%", 1.0, 1.0, True),
    # a base of 0: any rise is infinite, none is 0 %
    ("IOPS > +5%", 0.0, 1.0, True),
    ("IOPS < -10%", 0.0, 1.0, False),
    ("IOPS < -10%", 0.0, 0.0, False),
    ("IOPS <= +0%", 0.0, 0.0, True),
    # absolute: the new value against the limit, the base does not count
    ("service_time_p99_ms > 2", 1.0, 2.5, True),
    ("service_time_p99_ms > 2", 9.0, 1.5, False),
    ("service_time_p99_ms > 2", None, 2.5, True),
    ("service_time_p99_ms > 2", 3.0, 2.0, False),
    ("service_time_p99_ms >= 2", 3.0, 2.0, True),
    ("IOPS < 100", 50.0, 99.0, True),
    # missing values: cannot be told
    ("IOPS < -10%", None, 5.0, None),
    ("IOPS < -10%", 5.0, None, None),
    ("service_time_p99_ms > 2", 1.0, None, None),
])
def test_evaluate(expr: str, base: float | None, new: float | None, holds: bool | None) -> None:
    assert evaluate(parse_fail_if(expr), base, new) is holds
