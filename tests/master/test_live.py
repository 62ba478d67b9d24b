"""The live view in both modes: plain lines when not a terminal, a rich table when asked."""

from __future__ import annotations

import io
import math

from master.live import LiveRow, LiveView

ROWS = [LiveRow("h1", 12345.6, 50.5, 0.123, 1.5, 42.0),
        LiveRow("h2", math.nan, math.nan, math.nan, math.nan, math.nan)]


def test_plain_lines() -> None:
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "randread", 10, 1.0)
    view.subinterval(3, "measurement", "host", ROWS)
    view.step_finished("step 0 randread: done")
    text = buf.getvalue()
    assert "== step 0 randread: 10 subintervals of 1 s" in text
    assert "[4/10 measurement, 6 s left] host h1: 12,346 IOPS 50.5 MB/s p50 0.123 ms" in text
    assert "h2: - IOPS - MB/s" in text
    assert text.rstrip().endswith("step 0 randread: done")


def test_plain_is_the_default_off_a_terminal() -> None:
    assert LiveView(io.StringIO()).rich_mode is False


def test_rich_table_renders() -> None:
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=True)
    view.step_started(1, "mix", 5, 2.0)
    for k in range(5):
        view.subinterval(k, "warmup" if k < 2 else "measurement", "host", ROWS)
    view.step_finished("finished")
    view.close()
    text = buf.getvalue()
    assert "mix" in text and "h1" in text and "12,346" in text and "finished" in text
