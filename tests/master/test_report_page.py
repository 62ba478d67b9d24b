"""report.html from generated run folders: what the page holds, a failed run's folder read as
far as it goes, the rollup chosen, the downsampling said, and ``ivypy report``'s exit codes."""

from __future__ import annotations

import csv
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.results.report.build import REPORT_FILE, build_report, report_after_run
from master.results.report.content import CPU_HOSTS_DRAWN, default_rollup
from master.results.report.page import shown
from master.results.runfolder import ReportError, open_run_folder
from tests.master.reportgen import GenSpec, generate

ROOT = Path(__file__).resolve().parents[2]
#: a complete step's charts: IOPS, MB/s, service, response, CDF, DFC, measure, CPU
FULL_STEP = ["IOPS", "MB/s", "Service time", "Response time", "Latency CDF", "DFC", "Measure",
             "CPU busy"]


def page_data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page,
                  re.S)
    assert m, "no chart data in the page"
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def titles(step: dict[str, Any]) -> list[str]:
    return [c["title"] for c in step["charts"]]


def test_a_complete_run(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(instances=3, subintervals=20, warmup=4))
    made = build_report(folder)
    assert made.path == folder / REPORT_FILE and made.rollup == "lun" and made.bucket == 1
    page = made.path.read_text()
    assert made.size_bytes == len(page.encode())
    data = page_data(page)
    assert [s["id"] for s in data["steps"]] == ["step0000", "step0001"]
    for step in data["steps"]:
        assert [t.split(" ")[0].rstrip(":") for t in titles(step)] == [
            t.split(" ")[0].rstrip(":") for t in FULL_STEP]
        iops = step["charts"][0]
        assert [s["label"] for s in iops["series"]] == [
            f"localhost:/dev/lun{i:03d}" for i in range(3)]
        assert iops["x"] == list(range(1, 21)) and len(iops["series"][0]["values"]) == 20
        assert iops["window"] == [4, 20]  # subintervals 4..19 of 1 s, from summary.csv
        service = step["charts"][2]
        assert len(service["series"]) == 3 * 4  # p50, p99, p99.9, max per instance
        cdf = step["charts"][4]
        assert cdf["log_x"] and all(s["values"][-1] == 1.0 for s in cdf["series"])
    assert data["n_charts"] == made.charts == 17  # the IOPS curve too
    for text in ("ivypy run: generated", "complete, exit 0", "Hosts", "LUNs used", "Events",
                 "/dev/lun002", "Permission is hereby granted"):  # uPlot's license too
        assert text in page, text
    assert "Downsampled" not in page
    # self-contained: nothing names another file or address to load
    assert not re.search(r"""\b(src|href)\s*=""", page)
    assert "@import" not in page and "url(" not in page


def test_device_and_gathered_columns_are_charted(tmp_path: Path) -> None:
    # the device's IOPS and MB/s dashed beside each instance's, its service time, utilisation
    # and queue depth in a chart of their own, and a chart per gathered column
    gathered = ("gather.array.ldev.read_IOPS", "gather.array.port.busy_pct")
    folder = generate(tmp_path / "run", GenSpec(instances=2, subintervals=12, device=True,
                                                gathered=gathered))
    made = build_report(folder)
    step = page_data(made.path.read_text())["steps"][0]
    charts = {c["title"].split(" (")[0]: c for c in step["charts"]}
    lun = [f"localhost:/dev/lun{i:03d}" for i in range(2)]
    assert [s["label"] for s in charts["IOPS"]["series"]] == [
        lun[0], f"{lun[0]} device", lun[1], f"{lun[1]} device"]
    assert [s["dash"] for s in charts["MB/s"]["series"]] == [0, 1, 0, 1]
    device = charts["Device service time, utilisation and queue depth"]
    assert [(s["label"].removeprefix(f"{lun[0]} "), s["axis"]) for s in device["series"][:3]
            ] == [("service time", "y"), ("% busy", "y2"), ("queue depth", "y2")]
    assert len(device["series"]) == 6 and device["y2_label"]
    for column in gathered:
        chart = charts[f"Gathered: {column.removeprefix('gather.')}"]
        assert [s["label"] for s in chart["series"]] == lun
        assert all(v is not None for s in chart["series"] for v in s["values"])
    # without device numbers (empty cells, as where no device was found) no device series
    plain = generate(tmp_path / "plain", GenSpec(instances=2, subintervals=12))
    step = page_data(build_report(plain).path.read_text())["steps"][0]
    assert titles(step)[:4] == [f"{t} (lun instances)" for t in (
        "IOPS", "MB/s", "Service time", "Response time")]
    assert not any("Device" in t or "Gathered" in t for t in titles(step))
    assert len(step["charts"][0]["series"]) == 2


def test_downsampled_to_the_budget_and_said(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(instances=4, subintervals=100))
    made = build_report(folder, budget_points=2_000)
    assert made.bucket > 1
    page = made.path.read_text()
    assert f"each point stands for {made.bucket} subintervals" in page
    iops = page_data(page)["steps"][0]["charts"][0]
    assert len(iops["x"]) == len(iops["series"][0]["values"]) == -(-100 // made.bucket)


def test_a_failed_run_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one", "two"), not_run=("three",),
                                                cut_last_at=7, subintervals=20))
    (folder / "hosts.csv").unlink()
    (folder / "step0001-two" / "dfc.csv").unlink()
    (folder / "step0001-two" / "histograms" / "all" / "all.csv").unlink()
    with open(folder / "step0001-two" / "lun" / "localhost_dev_lun000.csv", "a") as fh:
        fh.write("1,two,7,measurement,8,lun,localhost:/dev/lun000,123")  # cut by a crash
    made = build_report(folder)
    page = made.path.read_text()
    assert "hosts.csv: missing" in page and "failed, exit 3" in page
    assert "did not run" in page and "cut short: no summary row" in page
    assert "step 2 three: no step folder (it did not run)" in made.problems
    one, two = page_data(page)["steps"]
    assert len(one["charts"]) == 8
    assert [t.split(" ")[0] for t in titles(two)] == ["IOPS", "MB/s", "Service", "Response",
                                                      "Measure:", "CPU"]
    assert len(two["charts"][0]["series"][0]["values"]) == 7  # the cut row left out
    assert two["charts"][0]["window"] == [2, 7]  # no summary: the measurement phase so far


def test_an_empty_step_folder_and_no_state(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    (folder / "state.json").unlink()
    (folder / "step0001-two").mkdir()
    page = build_report(folder).path.read_text()
    assert "unknown (no state.json)" in page and "No rows in this step folder" in page


def test_event_text_stays_text(tmp_path: Path) -> None:
    nasty = '</script><script>alert(1)</script> & "quotes"'
    folder = generate(tmp_path / "run", GenSpec(event_text=nasty, events=2))
    page = build_report(folder).path.read_text()
    assert "alert(1)" in page and "<script>alert" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page


@pytest.mark.parametrize("hosts, have, want", [
    (1, {"all", "lun", "host"}, "lun"),
    (2, {"all", "lun", "host"}, "host"),
    (2, {"all", "lun"}, "all"),
    (1, {"all"}, "all"),
])
def test_default_rollup(tmp_path: Path, hosts: int, have: set[str], want: str) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    step = folder / "step0000-one"
    for t in have - {"all", "lun"}:
        (step / t).mkdir()
        (step / t / "localhost.csv").write_text((step / "all" / "all.csv").read_text())
    if "lun" not in have:
        for f in (step / "lun").iterdir():
            f.unlink()
        (step / "lun").rmdir()
    if hosts > 1:
        with open(folder / "hosts.csv", "a") as fh:
            fh.write("h2,h2,ssh,h2,6.1,3.11,2.0,0.1.0,2,1,0,100,50,9,compiled,compiled\n")
    assert default_rollup(open_run_folder(folder)) == want


def test_not_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="not a run folder"):
        build_report(tmp_path / "empty")
    with pytest.raises(ReportError, match="no such directory"):
        build_report(tmp_path / "nothing")


def test_an_unknown_rollup_is_refused(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run")
    with pytest.raises(ReportError, match=r"'vendor' is in none of its steps .*all, lun"):
        build_report(folder, rollup="vendor")


def test_after_a_run_a_failure_is_logged_not_raised(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert report_after_run(tmp_path / "gone") is None
    assert "report.html not written" in caplog.text
    folder = generate(tmp_path / "run")
    assert report_after_run(folder) == folder / REPORT_FILE


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "master", "report", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run")
    out = tmp_path / "elsewhere.html"
    proc = _cli(str(folder), "-o", str(out), "--rollup", "all")
    assert proc.returncode == 0, proc.stderr
    assert f"report written: {out}" in proc.stdout and "charts of rollup all" in proc.stdout
    assert out.is_file() and not (folder / REPORT_FILE).exists()
    first = _cli(str(folder))
    assert first.returncode == 0 and (folder / REPORT_FILE).is_file()
    again = _cli(str(folder))  # rebuilt over the last one
    assert again.returncode == 0, again.stderr
    for args, text in (([str(tmp_path)], "not a run folder"),
                       ([str(folder), "--rollup", "engine"], "'engine' is in none")):
        proc = _cli(*args)
        assert proc.returncode == 2 and text in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(("instances", "spread_max"), [(5, 100), (5, 4)])
def test_instances_beyond_the_cap_are_their_highest_mean_and_lowest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instances: int, spread_max: int
) -> None:
    from master.results.report import content
    monkeypatch.setattr(content, "MAX_INSTANCES", 2)
    monkeypatch.setattr(content, "SPREAD_INSTANCES", spread_max)
    folder = generate(tmp_path / "run", GenSpec(instances=instances, steps=("one",)))
    page = build_report(folder).path.read_text()
    said = (f"{instances} lun instances: each chart shows their highest, mean and lowest each "
            "subinterval")
    assert said + (f" (of the first {spread_max} by name)" if instances > spread_max
                   else ";") in page
    read = min(instances, spread_max)
    charts = page_data(page)["steps"][0]["charts"]
    iops, _, service = charts[:3]
    assert iops["title"] == f"IOPS (lun: the highest, mean and lowest of {read} instances)"
    files = sorted((folder / "step0000-one" / "lun").glob("*.csv"))[:read]
    per = np.array([[float(r["IOPS"]) for r in csv.DictReader(f.read_text().splitlines())]
                    for f in files])  # instance x subinterval
    assert [s["label"] for s in iops["series"]] == ["highest", "mean", "lowest"]
    for line, want in zip(iops["series"], (per.max(0), per.mean(0), per.min(0)), strict=True):
        assert line["values"] == pytest.approx(want.tolist(), rel=1e-3)  # 4 digits kept
    # a latency chart still offers one percentile at a time: each percentile's three lines
    assert service["percentiles"] == ["p50", "p99", "p99.9", "max"]
    assert [(s["label"], s["dash"]) for s in service["series"]][:3] == [
        ("p50 highest", 0), ("p50 mean", 0), ("p50 lowest", 0)]
    assert [s["dash"] for s in service["series"]] == [d for d in range(4) for _ in range(3)]


def test_latency_charts_of_several_instances_offer_one_percentile(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(instances=2, steps=("one",)))
    charts = page_data(build_report(folder).path.read_text())["steps"][0]["charts"]
    assert [c["percentiles"] for c in charts[:4]] == [
        [], [], ["p50", "p99", "p99.9", "max"], ["p50", "p99", "p99.9", "max"]]
    assert [s["dash"] for s in charts[2]["series"]] == [0, 1, 2, 3] * 2
    one = generate(tmp_path / "one", GenSpec(instances=1, steps=("one",)))
    charts = page_data(build_report(one).path.read_text())["steps"][0]["charts"]
    assert charts[2]["percentiles"] == []  # one instance: four lines, no need to choose


def test_report_does_not_load_the_run_loop(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    code = ("import sys\nfrom master.cli import main as cli\n"
            f"assert cli.main(['report', {str(folder)!r}]) == 0\n"
            "print('asyncssh' in sys.modules, 'master.run.lifecycle' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.stdout.strip().splitlines()[-1] == "False False", proc.stdout + proc.stderr


def test_a_resumed_runs_set_aside_step_is_not_shown(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one", "two")))
    (folder / "step0001-two").rename(folder / "step0001-two.incomplete")
    generate(tmp_path / "again", GenSpec(steps=("one", "two")))
    (tmp_path / "again" / "step0001-two").rename(folder / "step0001-two")
    made = build_report(folder)
    assert "step0001-two.incomplete: set aside by a resume (not shown)" in made.problems
    assert [s["id"] for s in page_data(made.path.read_text())["steps"]] == [
        "step0000", "step0001"]


def test_a_test_folder_names_a_run_folder_in_it(tmp_path: Path) -> None:
    generate(tmp_path / "quick" / "20260101-000000")
    with pytest.raises(ReportError, match="it holds run folders, such as 20260101-000000"):
        build_report(tmp_path / "quick")


def _rename_instances(step: Path, names: list[str]) -> None:
    """Give the step's LUN instances these names (``rollup_instance`` of every row)."""
    for f, name in zip(sorted((step / "lun").iterdir()), names, strict=True):
        with open(f, newline="") as fh:
            rows = list(csv.reader(fh))
        at = rows[0].index("rollup_instance")
        for r in rows[1:]:
            r[at] = name
        with open(f, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)


#: instance names (a file LUN's path can hold any of these) that must stay text in the page
NASTY_NAMES = ['h:/tmp/a"b</script><b>x&amp;', "h:/tmp/ü 'q' é→", "h:/tmp/<!--c"]


def test_names_that_need_escaping_keep_the_chart_data_json(tmp_path: Path) -> None:
    # "<!--" in a name was written "<\!--": not JSON, so the page drew no chart at all
    folder = generate(tmp_path / "run", GenSpec(instances=3, steps=("one",)))
    _rename_instances(folder / "step0000-one", NASTY_NAMES)
    page = build_report(folder).path.read_text()
    iops = page_data(page)["steps"][0]["charts"][0]
    assert [s["label"] for s in iops["series"]] == NASTY_NAMES
    script = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "</" not in script and "<!--" not in script  # nothing for the HTML parser


def test_a_resumed_single_host_run_still_plots_luns(tmp_path: Path) -> None:
    # a resume adds a row per host to hosts.csv: one host twice is still one host
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    step = folder / "step0000-one"
    (step / "host").mkdir()
    (step / "host" / "localhost.csv").write_text((step / "all" / "all.csv").read_text())
    with open(folder / "hosts.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    with open(folder / "hosts.csv", "a", newline="") as fh:
        csv.writer(fh).writerow(rows[1])
    assert default_rollup(open_run_folder(folder)) == "lun"
    assert build_report(folder).rollup == "lun"


def test_the_time_axis_is_exact_hours_into_a_step(tmp_path: Path) -> None:
    # 2,100 subintervals of 0.5 s: x was rounded to 4 digits (1000.5 s drawn at 1000 s, and
    # 10,001 .. 10,004 s all at 10,000 s in a longer step)
    folder = generate(tmp_path / "run", GenSpec(instances=1, subintervals=2100,
                                                steps=("long",), dfc=False))
    resolved = json.loads((folder / "resolved.json").read_text())
    resolved["subinterval_seconds"] = 0.5
    (folder / "resolved.json").write_text(json.dumps(resolved))
    made = build_report(folder)
    assert made.bucket == 1
    for chart in page_data(made.path.read_text())["steps"][0]["charts"]:
        if not chart["log_x"]:
            assert chart["x"] == [(k + 1) * 0.5 for k in range(2100)], chart["title"]


def test_a_page_is_not_written_over_another_file(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    summary = (folder / "summary.csv").read_bytes()
    with pytest.raises(ReportError, match=r"summary\.csv: exists and is not an ivypy report "
                       "page; not overwritten"):
        build_report(folder, folder / "summary.csv")
    assert (folder / "summary.csv").read_bytes() == summary
    proc = _cli(str(folder), "-o", str(folder / "events.csv"))
    assert proc.returncode == 2 and "not an ivypy report page" in proc.stderr
    assert (folder / "events.csv").read_text().startswith("time,")
    # a page, or an empty file, is replaced
    other = tmp_path / "other.html"
    other.write_bytes(b"")
    build_report(folder, other)
    assert build_report(folder, other).size_bytes == other.stat().st_size


@pytest.mark.parametrize(("column", "text", "want"), [
    ("IOPS", "7492.38", "7,492"),
    ("device_IOPS", "512.6", "513"),
    ("MB_per_s", "29.2671", "29.3"),
    ("service_time_p99_ms", "0.0705157", "0.071"),
    ("size_bytes", "268435456", "256MiB"),
    ("size_bytes", "1000", "1000B"),
    ("IOPS", "", ""),  # no value: as written
    ("valid", "true", "true"),
    ("cores", "2", "2"),
])
def test_numbers_are_shown_as_the_console_shows_them(column: str, text: str,
                                                     want: str) -> None:
    assert shown(column, text) == want


def test_the_steps_table_reads_at_a_glance(tmp_path: Path) -> None:
    """The steps table and the LUN table hold the console's numbers, not the CSV's digits
    (7492.38, 0.0705157, 268435456)."""
    folder = generate(tmp_path / "run", GenSpec(instances=2, subintervals=8, warmup=2))
    page = build_report(folder).path.read_text()
    steps = page[page.index("<table>"):page.index("</table>")]
    cells = re.findall(r'<td class="num">([^<]*)</td>', steps)
    assert cells and all(re.fullmatch(r"[\d,]+(\.\d{1,3})?|", c) for c in cells), cells
    assert all("." not in c or len(c.split(".")[1]) in (1, 3) for c in cells), cells


def test_rows_of_the_wrong_width_are_said_left_out(tmp_path: Path) -> None:
    # a hosts.csv row with a cell too many (edited by hand) is not shown, and the page says so
    folder = generate(tmp_path / "run", GenSpec(steps=("one",)))
    with open(folder / "hosts.csv", "a") as fh:
        fh.write("h2,h2,ssh,vm,6.1,3.11,2.0,0.1.0,2,1,0,100,50,9,compiled,compiled,extra\n")
    made = build_report(folder)
    assert "hosts.csv: 1 row of the wrong width left out (cut short by a crash, or edited)" \
        in made.problems
    page = made.path.read_text()
    assert "hosts.csv: 1 row of the wrong width left out" in page and ">h2<" not in page


@pytest.mark.parametrize("hosts", [16, 17, 40])
def test_many_hosts_cpu_is_the_busiest_median_and_least_busy(tmp_path: Path, hosts: int
                                                             ) -> None:
    folder = generate(tmp_path / "run", GenSpec(cpu_hosts=hosts, steps=("one",)))
    (step,) = page_data(build_report(folder).path.read_text())["steps"]
    (cpu,) = [c for c in step["charts"] if c["title"].startswith("CPU busy")]
    if hosts <= CPU_HOSTS_DRAWN:  # a line each
        assert cpu["title"] == "CPU busy per host"
        assert [s["label"] for s in cpu["series"]] == [f"h{h:02d}" for h in range(hosts)]
        return
    assert cpu["title"] == f"CPU busy over {hosts} hosts"
    rows = list(csv.DictReader((folder / "step0000-one" / "cpu.csv").read_text().splitlines()))
    busy = np.array([float(r["busy_pct"]) for r in rows]).reshape(-1, hosts)  # k x host
    top = max(rows, key=lambda r: float(r["busy_pct"]))
    high, mid, low = cpu["series"]
    assert high["label"] == (f"busiest host (of all: {top['host']}, "
                             f"{float(top['busy_pct']):.3g} % in subinterval "
                             f"{top['subinterval']})")
    assert (mid["label"], low["label"]) == ("median host", "least busy host")
    for line, want in ((high, busy.max(axis=1)), (mid, np.median(busy, axis=1)),
                       (low, busy.min(axis=1))):
        assert line["values"] == pytest.approx(want.tolist(), rel=1e-3)  # 4 digits kept


@pytest.mark.parametrize(("cap", "note"), [
    (1, "4 more results (1 of them did not hold) in summary.csv's thresholds column."),
    (2, "3 more results (passed) in summary.csv's thresholds column."),
    (4, "1 more result (passed) in summary.csv's thresholds column."),
    (5, None),
])
def test_threshold_results_beyond_the_cap_are_counted_those_not_held_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: int, note: str | None) -> None:
    from master.results.report import page as page_module
    monkeypatch.setattr(page_module, "MAX_THRESHOLD_ROWS", cap)
    folder = generate(tmp_path / "run", GenSpec(steps=("one", "two")))
    summary = list(csv.reader((folder / "summary.csv").read_text().splitlines()))
    cells = ["passed: IOPS > 1 (20000); FAILED: IOPS > 1e6 (20000)",
             "passed: IOPS > 2 (25000); FAILED: IOPS > 2e6 (25000); passed: IOPS > 3 (25000)"]
    with open(folder / "summary.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([[*summary[0], "thresholds"],
                                  *([*r, c] for r, c in zip(summary[1:], cells, strict=True))])
    text = build_report(folder).path.read_text()
    table = text[text.index("<h2>Thresholds</h2>"):]
    assert '<p class="bad">3 of 5 held</p>' in table
    results = re.findall(r'<td class="(?:ok|bad)">(\w+)</td>', table)
    assert results == ["FAILED", "FAILED", "passed", "passed", "passed"][:cap]
    if note is None:
        assert "more result" not in table
    else:
        assert f'<p class="note">{note}</p>' in table
