"""report.html in a real headless Chromium: it loads with no uncaught script error, draws every
chart it carries (counted in the DOM after load), fetches nothing from the network, and a run
of 100 instances x 1,000 subintervals stays within 3 MB; a chart that throws leaves the others
drawn. The witnesses are shown able to fail: a page that does fetch, and a page that does
throw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from master.results.report.build import build_report
from master.results.report.page import _asset
from tests.master.chromium import load, needs_chromium
from tests.master.reportgen import GenSpec, generate
from tests.master.test_report_page import NASTY_NAMES, _rename_instances, page_data

pytestmark = needs_chromium
SIZE_BUDGET_BYTES = 3 * 1024 * 1024


def test_the_witnesses_can_fail(tmp_path: Path) -> None:
    """The net log sees a page's requests, and the error recorder sees a throw and a
    rejection: so their silence on the report means something."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><script>" + _asset("errors.js") + "</script></head><body>"
        '<ol id="script-errors"></ol><img src="http://127.0.0.1:9/x.png">'
        '<script>fetch("https://example.invalid/y.js").catch(function () {});'
        'Promise.reject(new Error("rejected on purpose"));</script>'
        '<script>throw new Error("thrown on purpose");</script></body></html>')
    got = load(page, tmp_path)
    assert "http://127.0.0.1:9/x.png" in got.page_requests
    assert "https://example.invalid/y.js" in got.page_requests
    assert got.root_attr("data-script-errors") == "2"
    assert "thrown on purpose" in got.dom and "rejected on purpose" in got.dom


def _check_page(path: Path, tmp: Path) -> int:
    """The page loads, draws every chart of its data, records no error, fetches nothing;
    returns the number of charts."""
    want = page_data(path.read_text())["n_charts"]
    got = load(path, tmp)
    assert got.root_attr("data-report-ready") == "yes", got.dom[:2000]
    errors_at = got.dom.find('id="script-errors"')
    assert got.root_attr("data-script-errors") is None, got.dom[errors_at:errors_at + 2000]
    assert got.root_attr("data-charts-drawn") == str(want)
    assert got.dom.count('<div class="uplot') == want  # one uPlot root per chart
    assert got.dom.count("<canvas") >= want            # each with its canvas
    assert got.page_requests == []
    return int(want)


def test_a_generated_run(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(instances=5, subintervals=60))
    assert _check_page(build_report(folder).path, tmp_path) == 16
    # with the device's columns and a gathered one: a chart more of each a step
    folder = generate(tmp_path / "dev", GenSpec(instances=5, subintervals=60, device=True,
                                                gathered=("gather.array.ldev.busy_pct",)))
    assert _check_page(build_report(folder).path, tmp_path) == 20


def test_a_failed_run(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(not_run=("later",), cut_last_at=5))
    (folder / "events.csv").unlink()
    assert _check_page(build_report(folder).path, tmp_path) == 16


def test_a_chart_that_throws_says_so_and_the_others_are_drawn(tmp_path: Path) -> None:
    """One chart whose data makes the page's code throw (its series are not a list): its place
    says it could not be drawn and why, the error is recorded, and every chart after it, in its
    step and the next, is still drawn."""
    folder = generate(tmp_path / "run", GenSpec(instances=2, steps=("one", "two")))
    page = build_report(folder).path
    text = page.read_text()
    data = page_data(text)
    want = data["n_charts"]
    assert len(data["steps"]) == 2
    data["steps"][0]["charts"][1]["series"] = None
    broken = tmp_path / "broken.html"
    embedded = json.dumps(data).replace("</", "<\\/")
    head, rest = text.split('id="report-data">', 1)
    broken.write_text(head + 'id="report-data">' + embedded + "</script>"
                      + rest.split("</script>", 1)[1])
    got = load(broken, tmp_path)
    assert got.root_attr("data-report-ready") == "yes"
    assert got.root_attr("data-charts-failed") == "1"
    assert got.root_attr("data-charts-drawn") == str(want - 1)
    assert got.dom.count('<div class="uplot') == want - 1
    assert got.root_attr("data-script-errors") == "1"
    note = '<p class="note chart-failed">This chart could not be drawn: '
    assert got.dom.count(note) == 1
    title = data["steps"][0]["charts"][1]["title"]
    failed_figure = got.dom.split(note, 1)[0].rsplit('<figure class="chart">', 1)[1]
    assert title.split()[0] in failed_figure  # in the place of the chart that threw
    assert "null" in got.dom.split(note, 1)[1].split("</p>", 1)[0]  # and why


def test_names_that_need_escaping(tmp_path: Path) -> None:
    """Instance names with quotes, ``</script>``, ``<!--``, ``&`` and unicode: every chart is
    drawn and the names stay text (no element made of them)."""
    folder = generate(tmp_path / "run", GenSpec(instances=3, steps=("one",)))
    _rename_instances(folder / "step0000-one", NASTY_NAMES)
    page = build_report(folder).path
    assert _check_page(page, tmp_path) == 8
    got = load(page, tmp_path)
    body = got.dom.split('id="report-data"', 1)[0] + got.dom.split("</script>")[-1]
    assert "<b>x" not in body and "&lt;/script&gt;&lt;b&gt;x&amp;amp;" in got.dom


@pytest.mark.slow
def test_100_instances_x_1000_subintervals_within_3_mb(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(instances=100, subintervals=1000,
                                                steps=("big",)))
    made = build_report(folder)
    print(f"100 x 1,000: {made.size_bytes:,} bytes, bucket {made.bucket}, "
          f"{made.seconds:.2f} s to build")
    assert made.size_bytes <= SIZE_BUDGET_BYTES
    assert made.bucket > 1  # it had to downsample, and says so
    page = made.path.read_text()
    assert f"each point stands for {made.bucket} subintervals" in page
    iops = page_data(page)["steps"][0]["charts"][0]
    assert len(iops["series"]) == 100
    assert _check_page(made.path, tmp_path) == 8
    json.dumps(made.problems)  # nothing missing in a whole folder
    assert made.problems == ()


def _driven(tmp_path: Path, instances: int, probe: str) -> Any:
    """A generated run's report of ``instances`` (one step) with the script ``probe`` run
    after its charts, in the browser; what it left, with no script error."""
    folder = generate(tmp_path / "run", GenSpec(instances=instances, steps=("one",)))
    page = build_report(folder).path.read_text()
    driven = tmp_path / "driven.html"
    driven.write_text(page.replace("</body>", f"<script>(function () {{{probe}}})();</script>"
                                              "</body>"))
    got = load(driven, tmp_path)
    assert got.root_attr("data-script-errors") is None
    return got


def test_choosing_one_percentile_hides_the_others(tmp_path: Path) -> None:
    """The page's percentile choice, driven in the browser: on the first service-time chart of
    3 instances (12 lines), choosing p99 leaves 3 shown (uPlot marks a hidden series' legend
    row ``u-off``)."""
    got = _driven(tmp_path, 3, (
        'var s = document.querySelector("figure.chart select");'
        's.value = "1"; s.dispatchEvent(new Event("change"));'
        'var fig = s.closest("figure");'
        'document.documentElement.setAttribute("data-probe-off",'
        'String(fig.querySelectorAll("tr.u-series.u-off").length));'
        'document.documentElement.setAttribute("data-probe-rows",'
        'String(fig.querySelectorAll("tr.u-series").length));'))
    assert got.root_attr("data-probe-rows") == "13"  # the x row and 12 lines
    assert got.root_attr("data-probe-off") == "9"


def test_y_axes_start_at_zero_and_zoom_fits_them(tmp_path: Path) -> None:
    """The first IOPS chart's y axis starts at 0 (a dip does not read as a crash); its zoom
    box fits it to the values (its lowest above 0), and back."""
    # uPlot commits a new range after the event's task: each reading waits a turn
    got = _driven(tmp_path, 2, (
        'var fig = document.querySelector("figure.chart");'
        'var root = document.documentElement, u = fig.uplot;'
        'var box = fig.querySelector("label.zoom input");'
        'root.setAttribute("data-probe-min", String(u.scales.y.min));'
        'box.checked = true; box.dispatchEvent(new Event("change"));'
        'setTimeout(function () {'
        'root.setAttribute("data-probe-zoomed", String(u.scales.y.min));'
        'box.checked = false; box.dispatchEvent(new Event("change"));'
        'setTimeout(function () {'
        'root.setAttribute("data-probe-back", String(u.scales.y.min));}, 50);}, 50);'))
    assert got.root_attr("data-probe-min") == "0"
    assert float(got.root_attr("data-probe-zoomed") or "0") > 0
    assert got.root_attr("data-probe-back") == "0"
