"""report.html in a real headless Chromium: it loads with no uncaught script error, draws every
chart it carries (counted in the DOM after load), fetches nothing from the network, and a run
of 100 instances x 1,000 subintervals stays within 3 MB; a chart that throws leaves the others
drawn. The witnesses are shown able to fail: a page that does fetch, and a page that does
throw."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from master.results.report.build import build_report
from master.results.report.page import _asset
from tests.master.chromium import Loaded, load, needs_chromium
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
    return _check_loaded(path, load(path, tmp))


def _check_loaded(path: Path, got: Loaded) -> int:
    """``_check_page`` of the page at ``path`` as the browser left it (``got``)."""
    want = page_data(path.read_text())["n_charts"]
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
    assert _check_page(build_report(folder).path, tmp_path) == 17  # the IOPS curve and 2 steps x 8
    # with the device's columns and a gathered one: a chart more of each a step
    folder = generate(tmp_path / "dev", GenSpec(instances=5, subintervals=60, device=True,
                                                gathered=("gather.array.ldev.busy_pct",)))
    assert _check_page(build_report(folder).path, tmp_path) == 21


def test_a_failed_run(tmp_path: Path) -> None:
    folder = generate(tmp_path / "run", GenSpec(not_run=("later",), cut_last_at=5))
    (folder / "events.csv").unlink()
    assert _check_page(build_report(folder).path, tmp_path) == 17


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


def test_many_instances_and_hosts_draw_as_their_spread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the cap every instance chart is three lines a series (device and gathered ones
    too), and over 16 hosts the CPU chart is: the page draws them all."""
    from master.results.report import content
    monkeypatch.setattr(content, "MAX_INSTANCES", 3)
    folder = generate(tmp_path / "run", GenSpec(
        instances=6, subintervals=60, device=True, cpu_hosts=20,
        gathered=("gather.array.ldev.busy_pct",)))
    assert _check_page(build_report(folder).path, tmp_path) == 21


def test_names_that_need_escaping(tmp_path: Path) -> None:
    """Instance names with quotes, ``</script>``, ``<!--``, ``&`` and unicode: every chart is
    drawn and the names stay text (no element made of them)."""
    folder = generate(tmp_path / "run", GenSpec(instances=3, steps=("one",)))
    _rename_instances(folder / "step0000-one", NASTY_NAMES)
    page = build_report(folder).path
    got = load(page, tmp_path)
    assert _check_loaded(page, got) == 9
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
    assert _check_page(made.path, tmp_path) == 9
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
        'var fig = document.querySelector("#charts-step0000 figure.chart");'
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


#: run in the page after its charts: per chart, the pixels its canvas holds in a colour
#: (the lines and points: opaque and saturated; the grid is grey, the shaded window faint),
#: the room each y axis leaves beyond its longest tick label (px; below 0 the label overlaps
#: the ticks) and its legend's values as shown without hovering
MEASURE = """
var out = [];
document.querySelectorAll("figure.chart").forEach(function (fig) {
  var u = fig.uplot;
  if (!u) { return; }
  var c = u.ctx.canvas, px = u.ctx.getImageData(0, 0, c.width, c.height).data, n = 0;
  for (var i = 0; i < px.length; i += 4) {
    var hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1], px[i + 2]);
    if (px[i + 3] > 200 && hi - lo > 60) { n++; }
  }
  var room = [];
  u.axes.forEach(function (a, j) {
    if (j === 0 || !a.show) { return; }
    u.ctx.font = a.font[0];
    var w = (a._values || []).reduce(function (m, v) {
      return Math.max(m, u.ctx.measureText(String(v)).width / (window.devicePixelRatio || 1));
    }, 0);
    room.push(a._size - (w + a.ticks.size + a.gap));
  });
  var legend = Array.prototype.map.call(
    fig.querySelectorAll(".u-legend .u-series:not(:first-child) .u-value"),
    function (e) { return e.textContent; });
  out.push({title: fig.querySelector("figcaption").textContent, coloured: n, room: room,
            legend: legend, points: u.series.slice(1).map(function (s) {
              return s.points.show === true || typeof s.points.show === "function"; })});
});
document.documentElement.setAttribute("data-probe", JSON.stringify(out));
"""


def _measured(tmp_path: Path, folder: Path, probe: str = MEASURE,
              change: tuple[str, str] | None = None) -> tuple[Any, Any]:
    """The report of ``folder`` in the browser with ``probe`` run after its charts (page.js
    changed by ``change``, old for new, where given): what the probe left in data-probe, and
    the load."""
    page = build_report(folder).path.read_text()
    if change is not None:
        assert change[0] in page
        page = page.replace(change[0], change[1])
    tmp_path.mkdir(exist_ok=True)
    driven = tmp_path / "measured.html"
    driven.write_text(page.replace("</body>", f"<script>(function () {{{probe}}})();</script>"
                                              "</body>"))
    got = load(driven, tmp_path)
    assert got.root_attr("data-script-errors") is None
    return json.loads(html.unescape(got.root_attr("data-probe") or "null")), got


def test_every_chart_draws_and_no_axis_label_overlaps_its_ticks(tmp_path: Path) -> None:
    """Each chart's canvas holds its lines (pixels in colour), each y axis is wider than its
    longest tick label (IOPS near 20,000 overran uPlot's fixed 50 px into the axis label),
    and every legend shows a value without hovering (the last point's); the witness fails on
    the fixed width."""
    folder = generate(tmp_path / "run", GenSpec(instances=3, subintervals=30))
    charts, _ = _measured(tmp_path, folder)
    assert len(charts) == 17  # the IOPS curve and 2 steps x 8
    for c in charts:
        assert c["coloured"] >= 100, c["title"]
        assert min(c["room"]) >= 0, (c["title"], c["room"])
        assert c["legend"] and all(v not in ("", "--") for v in c["legend"]), c
    # the witness: uPlot's own 50 px, and IOPS's tick labels run into its axis label
    fixed, _ = _measured(tmp_path / "fixed", folder, change=(
        "if (cycleNum > 1) { return axis._size; }", "return 50;"))
    iops = [c for c in fixed if c["title"].startswith("IOPS (lun")]
    assert iops and min(iops[0]["room"]) < 0, iops


def test_dfc_decisions_with_a_window_are_marked_and_joined(tmp_path: Path) -> None:
    """DFC's rows every third subinterval (its window_seconds): its chart marks each point
    and joins them, where lines between neighbours alone drew nothing."""
    folder = generate(tmp_path / "run", GenSpec(instances=1, subintervals=30, dfc_every=3,
                                                steps=("held",)))
    charts, _ = _measured(tmp_path, folder)
    (dfc,) = [c for c in charts if c["title"].startswith("DFC:")]
    assert "(a point per decision)" in dfc["title"] and all(dfc["points"])
    assert dfc["coloured"] >= 300
    # the witness: the same chart drawn as a chart of every subinterval (no points, no spans)
    plain, _ = _measured(tmp_path / "plain", folder, change=('"sparse":true', '"sparse":false'))
    (before,) = [c for c in plain if c["title"].startswith("DFC:")]
    assert before["coloured"] < dfc["coloured"] / 4, (before["coloured"], dfc["coloured"])


def test_the_rollup_selector_redraws_the_steps_charts_for_another_rollup(
        tmp_path: Path) -> None:
    """The page offers every rollup type the run wrote (all, lun); choosing all redraws each
    step's instance charts of the all instance, keeping its own (CDF, DFC, measure, CPU), with
    no rebuild and no error."""
    folder = generate(tmp_path / "run", GenSpec(instances=3, subintervals=20))
    probe = """
    var root = document.documentElement, s = document.getElementById("rollup-choice");
    root.setAttribute("data-probe-options", Array.prototype.map.call(
      s.options, function (o) { return o.value; }).join(" "));
    s.value = "all"; s.dispatchEvent(new Event("change"));
    root.setAttribute("data-probe", JSON.stringify(Array.prototype.map.call(
      document.querySelectorAll("#charts-step0000 figcaption"),
      function (e) { return e.textContent; })));
    """
    titles, got = _measured(tmp_path, folder, probe)
    assert got.root_attr("data-probe-options") == "all lun"
    assert got.root_attr("data-rollup-shown") == "all"
    assert titles[0].startswith("IOPS (all all)") and titles[1].startswith("MB/s (all all)")
    assert any(t.startswith("DFC:") for t in titles)
    assert any(t.startswith("Latency CDF") for t in titles)
    assert not any("(lun" in t for t in titles)
    assert got.root_attr("data-charts-drawn") == str(17 + 16)  # the first draw, then 2 x 8
