"""The live view in both modes: plain lines off a terminal, a rich live region on one (drawn
on rich's recording console), log lines through the view, and the end-of-run table; the
frames and tables of ``master.live.frame`` at 80 columns."""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import sys

import pytest
from rich.console import Console

from master.live.frame import Drawn, cut_left, final_table, live_frame, ms
from master.live.rows import DfcLine, LiveRow, final_rows, spread_rows
from master.live.view import LiveView, ViewLogHandler

NAN = math.nan
TOTAL = LiveRow("all", 24691.2, 96.4, 0.123, 1.5, 0.25, 3.75, 42.0, 6.5)
ROWS = [LiveRow("/srv/luns/lun-a", 12345.6, 50.5, 0.121, 1.4, 0.24, 3.5, 42.0, 6.5),
        LiveRow("/srv/luns/lun-b", NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN)]
DFC = [DfcLine("all", "service_time_p99_ms", 1.0, 0.95, 12000.0, 12400.0)]
LABELS = ("IOPS", "MB/s", "service", "response", "p50 ms", "p99 ms", "host", "ivypy", "CPU %")


def _summary(rollup_type: str, inst: str, valid: bool, reason: str) -> dict[str, object]:
    return {"rollup_type": rollup_type, "rollup_instance": inst, "IOPS": 24691.2,
            "MB_per_s": 96.4, "service_time_p50_ms": 0.123, "service_time_p99_ms": 1.5,
            "response_time_p50_ms": 0.25, "response_time_p99_ms": 3.75, "valid": valid,
            "invalid_reason": reason}


SUMMARY = [_summary("all", "all", False, "host: 1 instances, expected 2"),
           _summary("host", "h1", False, "host: 1 instances, expected 2"),
           _summary("lun", "/srv/luns/lun-a", True, ""),
           _summary("lun", "/srv/luns/lun-b", True, "")]


@pytest.mark.parametrize(("v", "want"), [(0.01234, "0.012"), (1.5, "1.500"), (12.345, "12.35"),
                                         (123.45, "123.5"), (1234.5, "1,234"), (NAN, "-")])
def test_ms(v: float, want: str) -> None:
    assert ms(v) == want


@pytest.mark.parametrize(("name", "width", "want"), [
    ("/srv/luns/lun-a", 20, "/srv/luns/lun-a"), ("/srv/luns/lun-a", 8, "…s/lun-a"),
    ("h1", 2, "h1"), ("abc", 1, "…c")])
def test_cut_left_keeps_the_end(name: str, width: int, want: str) -> None:
    assert cut_left(name, width) == want


def _render(renderable: object, width: int = 80) -> list[str]:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_frame_at_80_columns_has_labels_total_rows_response_and_dfc() -> None:
    title = ("step 1 a-step-with-a-rather-long-name · subinterval 12 measurement · by lun, "
             "which would wrap")
    lines = _render(live_frame(title, "lun", TOTAL, ROWS, DFC, 13, 20, 35.0, 10))
    assert all(len(line) <= 80 for line in lines)
    # the title is one line, cut with an ellipsis: the next line is the table's header
    assert lines[0].startswith("step 1 a-step-with") and lines[0].endswith("…")
    header = "\n".join(lines[1:3])
    for label in LABELS:
        assert label in header, label
    assert lines[2].split()[0] == "lun"  # the rollup's name heads the instance column
    total = next(line for line in lines if line.startswith("total"))
    assert total.split() == ["total", "24,691", "96.4", "0.123", "1.500", "0.250", "3.750",
                             "42.0", "6.5"]
    a = next(line for line in lines if "lun-a" in line)
    assert a.split()[1:] == ["12,346", "50.5", "0.121", "1.400", "0.240", "3.500", "42.0", "6.5"]
    b = next(line for line in lines if "lun-b" in line)
    assert b.split()[1:] == ["-"] * 8
    assert any("service_time_p99_ms" in line and "12,400" in line and "1.000" in line
               for line in lines)
    assert "IOPS" in "".join(lines) and "subinterval 12 of 20, 35 s left" in lines[-1]


def test_frame_of_the_all_rollup_shows_the_total_once_and_cuts_many_rows() -> None:
    lines = _render(live_frame("t", "all", TOTAL, [TOTAL], [], 1, 2, 1.0, 5))
    assert sum(line.startswith("total") for line in lines) == 1
    many = [LiveRow(f"w{i}", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0) for i in range(12)]
    lines = _render(live_frame("t", "workload", TOTAL, many, [], 1, 2, 1.0, 5))
    assert [line.split()[0] for line in lines if line.startswith("w")][1:] == [
        "w0", "w1", "w2", "w3", "w4"]
    assert any(line.startswith("+7 more") for line in lines)
    # the recorder sends the first rows of 5,000 instances: the rest are counted
    lines = _render(live_frame("t", "workload", TOTAL, many, [], 1, 2, 1.0, 5, instances=5000))
    assert any(line.startswith("+4,995 more") for line in lines)


def test_plain_lines_count_the_instances_not_shown() -> None:
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "many", 2, 1.0)
    many = [LiveRow(f"w{i}", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0) for i in range(64)]
    view.subinterval(0, "warmup", "workload", TOTAL, many, instances=2048)
    lines = buf.getvalue().splitlines()
    assert [x.split(":")[0].strip() for x in lines[2:10]] == [f"workload=w{i}" for i in range(8)]
    assert lines[10] == "    (+2,040 more workload)"
    assert len(lines) == 11


def test_many_instances_are_summarised_by_their_highest_mean_and_lowest() -> None:
    """More instances than the plain lines show: each column's highest, mean and lowest of all
    of them come first (``spread_rows``), then the first rows; in a frame too, where the rows
    do not fit, and not where they do."""
    many = [LiveRow(f"h{i}", 100.0 * i, 1.0, 0.1, 1.0 + i, 0.2, 2.0, 50.0, 5.0)
            for i in range(12)]
    columns = {c: [getattr(r, f) for r in many] for c, f in (
        ("IOPS", "iops"), ("MB_per_s", "mb_per_s"), ("service_time_p50_ms", "service_p50_ms"),
        ("service_time_p99_ms", "service_p99_ms"), ("response_time_p50_ms", "response_p50_ms"),
        ("response_time_p99_ms", "response_p99_ms"))}
    spread = spread_rows(columns, [r.host_cpu_pct for r in many], [NAN] * 12)
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "many", 2, 1.0)
    view.subinterval(0, "warmup", "host", TOTAL, many, instances=12, spread=spread)
    lines = buf.getvalue().splitlines()
    assert lines[2] == ("    host highest of 12: 1,100 IOPS 1.0 MB/s service p50 0.100 p99 "
                        "12.00 ms response p50 0.200 p99 2.000 ms host CPU 50.0% ivypy CPU -%")
    assert lines[3].startswith("    host mean of 12: 550 IOPS 1.0 MB/s service p50 0.100 p99 "
                               "6.500 ms")
    assert lines[4].startswith("    host lowest of 12: 0 IOPS")
    assert [x.split(":")[0].strip() for x in lines[5:13]] == [f"host=h{i}" for i in range(8)]
    assert lines[13] == "    (+4 more host)"
    # a frame: the spread where the rows do not fit, above them, and not where they do
    lines = _render(live_frame("t", "host", TOTAL, many, [], 1, 2, 1.0, 8, instances=12,
                               spread=spread))
    named = [line.split()[0] for line in lines
             if line.startswith(("h", "+", "mean", "lowest"))]
    assert named == ["host", "highest", "mean", "lowest", "h0", "h1", "h2", "h3", "h4",
                     "+7"], lines
    lines = _render(live_frame("t", "host", TOTAL, many, [], 1, 2, 1.0, 20, instances=12,
                               spread=spread))
    assert not any(line.startswith(("highest", "mean", "lowest")) for line in lines)


def test_plain_lines() -> None:
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "randread", 10, 1.0)
    view.subinterval(3, "measurement", "lun", TOTAL, ROWS, DFC)
    view.step_summary("0 randread", "lun", SUMMARY)
    view.step_finished("step 0 randread: done")
    view.run_finished()
    lines = buf.getvalue().splitlines()
    assert lines[0] == "== step 0 randread: 10 subintervals of 1 s"
    assert lines[1] == ("  [subinterval 3 of 10, measurement, 6 s left] total: 24,691 IOPS "
                        "96.4 MB/s service "
                        "p50 0.123 p99 1.500 ms response p50 0.250 p99 3.750 ms host CPU 42.0% "
                        "ivypy CPU 6.5%")
    assert lines[2].startswith("    lun=/srv/luns/lun-a: 12,346 IOPS 50.5 MB/s service p50")
    assert lines[3].startswith("    lun=/srv/luns/lun-b: - IOPS - MB/s")
    assert lines[4] == ("    DFC all: service_time_p99_ms 0.950 (target 1.000) at 12,000 "
                        "IOPS, set 12,400 IOPS")
    assert lines[5] == "step 0 randread: done"
    # the end-of-run table as plain lines: all and the live rollup, valid and reason
    assert lines[6] == "== all steps"
    assert lines[7].split() == ["step", "instance", "IOPS", "MB/s", "service", "p50", "ms",
                                "service", "p99", "ms", "response", "p50", "ms", "response",
                                "p99", "ms", "valid", "reason"]
    assert lines[8].split() == ["0", "randread", "total", "24,691", "96.4", "0.123", "1.500",
                                "0.250", "3.750", "NO", "host:", "1", "instances,",
                                "expected", "2"]
    assert lines[9].split()[2:] == ["lun=/srv/luns/lun-a", "24,691", "96.4", "0.123", "1.500",
                                    "0.250", "3.750", "yes"]
    assert len(lines) == 11 and "lun-b" in lines[10]


def test_plain_is_the_default_off_a_terminal() -> None:
    assert LiveView(io.StringIO()).rich_mode is False


def test_final_table_at_80_columns() -> None:
    rows, left_out = final_rows("0 randread", SUMMARY, ("all", "lun"), 1)
    more, _ = final_rows("1 short", [], ("all", "lun"), 1)
    lines = _render(final_table(rows + more, left_out))
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("all steps")
    assert "valid" in lines[2] and "response" in lines[1]
    first = next(line for line in lines if line.startswith("step 0 randread"))
    assert first.split()[3:] == ["24,691", "96.4", "0.123", "1.500", "0.250", "3.750", "NO"]
    assert any(line.startswith("  lun=/srv/luns/lun-a") and line.endswith("yes")
               for line in lines)
    assert any(line.startswith("step 1 short") and line.endswith("-") for line in lines)
    # reasons under the table, once per step and reason
    assert lines.count("step 0 randread: host: 1 instances, expected 2") == 1
    assert "step 1 short: no measurement subintervals" in lines
    assert "(1 more rows in the steps' summary.csv)" in lines


class _TtyText(io.StringIO):
    """A stream that says it is a terminal (stderr on the same screen as the view)."""

    def isatty(self) -> bool:
        return True


def _terminal(width: int = 80, height: int = 30) -> Console:
    return Console(record=True, width=width, height=height, file=io.StringIO(),
                   force_terminal=True, color_system=None)


def test_rich_view_prints_log_lines_above_the_region_and_leaves_the_final_table() -> None:
    console = _terminal()
    err = _TtyText()
    view = LiveView(io.StringIO(), rich_mode=True, console=console, err_stream=err)
    log = logging.getLogger("tests.live.view")
    handler = ViewLogHandler(view)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    try:
        log.warning("before any step [host=h1]")  # no live region: stderr
        view.step_started(1, "mix", 5, 2.0)
        for k in range(5):
            view.subinterval(k, "warmup" if k < 2 else "measurement", "lun", TOTAL, ROWS)
            if k == 2:
                log.warning("a log line during the run [host=h1]")
                print("a stray line on stderr", file=sys.stderr)
        assert view.is_live
        view.step_summary("1 mix", "lun", SUMMARY)
        view.step_finished("step 1 mix: 24,691 IOPS")
        assert not view.is_live
        log.warning("after the step")
        view.run_finished()
    finally:
        log.removeHandler(handler)
        view.close()
    assert err.getvalue().splitlines() == [
        "WARNING tests.live.view: before any step [host=h1]",
        "WARNING tests.live.view: after the step"]
    text = console.export_text()
    # the line printed while live went through the console, markup-free, once
    assert text.count("WARNING tests.live.view: a log line during the run [host=h1]") == 1
    assert text.count("a stray line on stderr") == 1
    assert "step 1 mix · subinterval 4 measurement · by lun" in text
    assert "lun-a" in text and "response" in text and "ivypy" in text
    tail = text[text.index("step 1 mix: 24,691 IOPS"):]
    assert "all steps" in tail and "step 1 mix: host: 1 instances, expected 2" in tail
    assert "subinterval" not in tail  # no frame after the step ended


def test_a_drawn_frame_reads_as_the_frame() -> None:
    frame = live_frame("step 0 x · subinterval 1 warmup · by lun", "lun", TOTAL, ROWS, DFC, 2,
                       5, 3.0, 10)
    console = Console(record=True, width=80, file=io.StringIO())
    drawn = Drawn(console, frame)
    assert _render(drawn) == _render(frame)
    # a terminal made narrower gets the frame laid out for its width
    narrow = _render(drawn, width=60)
    assert narrow == _render(frame, width=60)
    assert max(len(line) for line in narrow) <= 60 < max(len(line) for line in _render(frame))


def test_log_lines_stay_on_stderr_sent_elsewhere() -> None:
    """``ivypy run t.yaml 2>err.log`` on a terminal: the log lines go to the file, also
    while the region is on (they cannot disturb it there)."""
    console = _terminal()
    err = io.StringIO()  # a file: no terminal
    view = LiveView(io.StringIO(), rich_mode=True, console=console, err_stream=err)
    view.step_started(0, "s", 3, 1.0)
    view.subinterval(0, "warmup", "lun", TOTAL, ROWS)
    assert view.is_live
    view.log_line("WARNING x: while live")
    view.close()
    assert err.getvalue() == "WARNING x: while live\n"
    assert "while live" not in console.export_text()


def test_a_rollup_of_one_instance_is_the_total_line_alone() -> None:
    """One host (or LUN) is the total to the digit: its row under the total doubled every
    line, live and in the end-of-run table; LUNs are named by their device or file."""
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "one", 4, 1.0)
    only = dataclasses.replace(TOTAL, instance="h1:/dev/sdb")
    view.subinterval(0, "warmup", "lun", TOTAL, [only], instances=1)
    view.subinterval(1, "warmup", "lun", TOTAL, [only, dataclasses.replace(
        TOTAL, instance="h1:/dev/sdc")], instances=2)
    lines = buf.getvalue().splitlines()
    assert lines[1].startswith("  [subinterval 0 of 4, warmup, 3 s left] total: ")
    assert lines[2].startswith("  [subinterval 1 of 4, warmup, 2 s left] total: ")
    assert len(lines) == 5
    assert lines[3].startswith("    lun=h1:sdb: ") and lines[4].startswith("    lun=h1:sdc: ")
    lines = _render(live_frame("t", "lun", TOTAL, [], [], 1, 4, 3.0, 5))
    assert sum(line.startswith("total") for line in lines) == 1


def test_a_measure_steps_progress_toward_its_criterion_is_shown() -> None:
    buf = io.StringIO()
    view = LiveView(buf, rich_mode=False)
    view.step_started(0, "steady", 600, 1.0)
    line = "measure accuracy of IOPS (limit 5% at 95%): 0 of 1 within; all at 7.31%"
    view.subinterval(12, "measurement", "all", TOTAL, [], measure=[line])
    assert buf.getvalue().splitlines()[-1] == f"    {line}"
    lines = _render(live_frame("t", "all", TOTAL, [], [], 13, 600, 587.0, 5, measure=[line]))
    assert line in lines and lines[-1].endswith("subinterval 12 of 600, 587 s left")
