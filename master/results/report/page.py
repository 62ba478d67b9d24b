"""The report page: one self-contained HTML file, from a read run folder and its charts.

Owns the page's text and layout: the run header (test, times, state and verdicts, hosts, LUNs,
versions), the per-step summary table, one section per step for its charts, the events, and
what is missing or downsampled said in words. The chart library (uPlot, MIT, vendored in
``vendor/`` with its license), the page's own script and style are inlined, and the chart data
is JSON in the page: nothing is fetched. Must not read the run's CSV files
(``master.results.runfolder``) or choose what a chart shows (``master.results.report.content``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from master.analysis import thresholds
from master.config.units import format_bytes
from master.results.report.content import KINDS, PERCENTILES, Charts
from master.results.runfolder import RunFolder, Table, summary_judged
from protocol.version import __version__

#: At most this many events are shown (the rest are counted; events.csv holds them all).
MAX_EVENTS = 1000
#: threshold results the page lists, those that did not hold first (the rest: summary.csv)
MAX_THRESHOLD_ROWS = 1000
#: Tables longer than this are folded (``<details>``) until clicked.
FOLD_ROWS = 12
SUMMARY_METRICS = ("IOPS", "MB_per_s", *(f"{k}_{p}_ms" for k, _ in KINDS
                                        for p, _ in PERCENTILES))
HOST_COLUMNS = ("host", "hostname", "transport", "kernel", "python_version", "numpy_version",
                "ivypy_version", "cores", "rtt_us", "io_loop")
LUN_COLUMNS = ("host", "lun", "kind", "size_bytes", "engine", "fs_type", "vendor", "model",
               "used_by")


def _asset(name: str) -> str:
    return resources.files("master.results.report").joinpath(name).read_text(encoding="utf-8")


def _uplot() -> str:
    """The chart library with its license in a comment before it (MIT asks for the notice)."""
    notice = _asset("vendor/uPlot-LICENSE").replace("*/", "* /")
    return f"/* uPlot, vendored in ivypy (master/results/report/vendor). {notice}*/\n" + _asset(
        "vendor/uPlot.iife.min.js")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def shown(column: str, text: str) -> str:
    """A cell as the console shows its number (the CSV files keep every digit): IOPS and
    rates whole with thousands separators, MB/s to 0.1, times in ms to 0.001, bytes with
    their binary unit; anything else, or what is no number, as written."""
    try:
        value = float(text)
    except ValueError:
        return text
    if value != value or column in ("step_number", "cores", "clock_samples"):
        return text
    if column == "IOPS" or column.endswith("_IOPS") or column == "iops_setting":
        return f"{value:,.0f}"
    if column.endswith("MB_per_s"):
        return f"{value:,.1f}"
    if column.endswith("_ms"):
        return f"{value:,.3f}"
    if column.endswith("_bytes") and value == int(value) and value >= 0:
        return format_bytes(int(value))
    return text


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[str] = ()
           ) -> str:
    nums = set(numeric)
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{_e(c)}</td>' if h in nums else f"<td>{_e(c)}</td>"
            for h, c in zip(header, row, strict=True)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _picked(table: Table | None, columns: Sequence[str], what: str,
            keep: dict[str, str] | None = None) -> str:
    """Columns of ``table`` (those it has) as an HTML table; rows where every ``keep`` column
    holds its value."""
    if table is None:
        return f'<p class="missing">{_e(what)}: missing</p>'
    cols = [c for c in columns if table.has(c)]
    rows = table.dicts(keep)
    return _folded(f"{len(rows)} rows", _table(cols, ([shown(c, r[c]) for c in cols]
                                                      for r in rows)), len(rows))


def _folded(what: str, body: str, n_rows: int) -> str:
    """A long table folded away (a click shows it), so that the charts stay near the top."""
    if n_rows <= FOLD_ROWS:
        return body
    return f"<details><summary>{_e(what)} (click to show)</summary>{body}</details>"


def _verdict(run: RunFolder) -> str:
    st = run.state or {}
    state = str(st.get("state", "unknown (no state.json)"))
    code = st.get("exit_code")
    good = state == "complete" and code == 0
    reason = str(st.get("reason") or "")
    text = state + (f", exit {code}" if code is not None else "") + (
        f": {reason}" if reason else "")
    return f'<span class="{"ok" if good else "bad"}">{_e(text)}</span>'


def _header(run: RunFolder, charts: Charts) -> str:
    st = run.state or {}
    items = [("Test", run.test), ("Run folder", str(run.path)),
             ("Started", st.get("started", "")), ("Last update", st.get("updated", "")),
             ("Controller", st.get("controller", "")),
             ("ivypy", st.get("ivypy_version", "")),
             ("Steps", f"{len(run.steps)} of {st.get('steps_total', len(run.planned_steps))}"),
             ("Rollup plotted", charts.rollup)]
    if (run.resolved or {}).get("description"):
        items.insert(1, ("Description", str((run.resolved or {})["description"])))
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    return (f"<h1>ivypy run: {_e(run.test)}</h1>"
            f'<dl class="head">{dl}<dt>Outcome</dt><dd>{_verdict(run)}</dd></dl>')


def _summary(run: RunFolder) -> str:
    """A row per step (its ``all`` instance over the measurement window), a step that has no
    summary row said so."""
    header = ["step", "name", "valid", *(_short(m) for m in SUMMARY_METRICS), "measure attained",
              "invalid reason"]
    rows: list[list[str]] = []
    by_step = {}
    if run.summary is not None:
        by_step = {r.get("step_number", ""): r
                   for r in run.summary.dicts({"rollup_type": "all"})}
    names = run.planned_steps or [s.name for s in run.steps]
    for number, name in enumerate(names):
        r = by_step.get(str(number))
        if r is None:
            ran = any(s.number == number for s in run.steps)
            rows.append([str(number), name, "missing", *[""] * len(SUMMARY_METRICS), "",
                         "cut short: no summary row" if ran else "did not run"])
            continue
        rows.append([str(number), name, r.get("valid", ""),
                     *(shown(m, r.get(m, "")) for m in SUMMARY_METRICS),
                     r.get("measure_attained", ""), r.get("invalid_reason", "")])
    return _table(header, rows, [_short(m) for m in SUMMARY_METRICS])


def _rollup_choice(charts: Charts) -> str:
    """The page's rollup selector: every rollup type the run wrote, the plotted one chosen."""
    if len(charts.rollups) < 2:
        return ""
    options = "".join(f'<option value="{_e(t)}"{" selected" if t == charts.rollup else ""}>'
                      f"{_e(t)}</option>" for t in charts.rollups)
    return (f'<p class="note"><label>Rollup plotted in the steps\' charts: '
            f'<select id="rollup-choice">{options}</select></label></p>')


def _thresholds(run: RunFolder) -> str:
    """The test's thresholds as judged (summary.csv's ``thresholds`` cells): how many held,
    then a row each, those that did not hold first, at most ``MAX_THRESHOLD_ROWS``; nothing
    when the test has none."""
    if run.summary is None or not run.summary.has(thresholds.COLUMN):
        return ""
    judged = summary_judged(run.summary)
    held = sum(j.holds for j in judged)
    ordered = thresholds.worst_first(judged)
    shown, rest = ordered[:MAX_THRESHOLD_ROWS], ordered[MAX_THRESHOLD_ROWS:]
    rows = "".join(
        f'<tr><td>{_e(j.step)}</td><td>{_e(j.rollup)}</td><td>{_e(j.instance)}</td>'
        f'<td>{_e(j.text)}</td><td class="{"ok" if j.holds else "bad"}">{_e(j.outcome)}</td>'
        f'<td class="num">{_e(j.detail)}</td></tr>' for j in shown)
    head = "".join(f"<th>{h}</th>" for h in ("step", "rollup", "instance", "threshold",
                                             "result", "value"))
    verdict = "ok" if held == len(judged) else "bad"
    bad_rest = sum(not j.holds for j in rest)
    more = (f'<p class="note">{len(rest):,} more result{"s" if len(rest) > 1 else ""} ('
            + (f"{bad_rest:,} of them did not hold" if bad_rest else "passed")
            + ") in summary.csv's thresholds column.</p>" if rest else "")
    return (f'<h2>Thresholds</h2><p class="{verdict}">{held} of {len(judged)} held</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}")


def _short(column: str) -> str:
    """A summary column's header in few words (``service_time_p99_9_ms`` → ``svc p99.9 ms``)."""
    return (column.replace("service_time_", "svc ").replace("response_time_", "resp ")
            .replace("_ms", " ms").replace("p99_9", "p99.9").replace("MB_per_s", "MB/s"))


def _events(run: RunFolder) -> str:
    if run.events is None:
        return '<p class="missing">events.csv: missing</p>'
    cols = [c for c in ("time", "elapsed_s", "level", "host", "kind", "step", "subinterval",
                        "message") if run.events.has(c)]
    rows = run.events.dicts()
    more = len(rows) - MAX_EVENTS
    shown = rows[:MAX_EVENTS]
    text = _folded(f"{len(shown)} events", _table(cols, ([r[c] for c in cols] for r in shown)),
                   len(shown))
    if more > 0:
        text += f'<p class="note">{more} more events in events.csv.</p>'
    return text


def _notes(run: RunFolder, charts: Charts) -> str:
    notes = [f'<li class="missing">{_e(p)}</li>' for p in run.problems]
    if charts.bucket > 1:
        notes.append(
            f"<li>Downsampled to stay small: each point stands for {charts.bucket} "
            f"subintervals ({charts.total_points:,} numbers at full resolution). IOPS, MB/s "
            "and percentiles are the bucket's mean; a maximum is the bucket's largest.</li>")
    return f"<ul>{''.join(notes)}</ul>" if notes else ""


def _json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: every ``<`` (only ever inside a string) is
    written ``\\u003c``, so no ``</script`` can close the element and no ``<!--`` change how
    the browser reads it, and the text is still JSON for ``JSON.parse``."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c")


def _script(text: str) -> str:
    return "<script>" + text.replace("</script", "<\\/script") + "</script>"


def render(run: RunFolder, charts: Charts) -> str:
    """The whole page."""
    sections: list[str] = []
    data_steps: list[dict[str, Any]] = []
    for sc in charts.steps:
        sid = f"step{sc.step.number:04d}"
        sections.append(f"<h2>Step {sc.step.number}: {_e(sc.step.name)}</h2>")
        if not sc.charts:
            sections.append('<p class="missing">No rows in this step folder.</p>')
        if sc.note:
            sections.append(f'<p class="note">{_e(sc.note)}</p>')
        sections.append(f'<div class="charts" id="charts-{sid}"></div>')
        data_steps.append({"id": sid, "charts": sc.charts, "other": sc.other})
    curve = charts.overview
    data = {"steps": data_steps,
            "n_charts": sum(len(s.charts) for s in charts.steps) + (curve is not None),
            "rollup": charts.rollup, "overview": curve}
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>ivypy report: {_e(run.test)}</title>",
        "<style>", _asset("vendor/uPlot.min.css"), _asset("page.css"), "</style>",
        _script(_asset("errors.js")), _script(_uplot()),
        "</head><body>", _header(run, charts), '<ol id="script-errors"></ol>',
        _notes(run, charts),
        "<h2>Run overview</h2>", _summary(run),
        '<div class="charts" id="charts-overview"></div>' if curve is not None else "",
        _thresholds(run), _rollup_choice(charts),
        "<h2>Hosts</h2>", _picked(run.hosts, HOST_COLUMNS, "hosts.csv"),
        "<h2>LUNs used</h2>", _picked(run.luns, LUN_COLUMNS, "luns.csv", {"selected": "true"}),
        *sections,
        "<h2>Events</h2>", _events(run),
        f'<p class="note">Made by ivypy {_e(__version__)} (<code>ivypy report</code>); charts '
        "by uPlot (MIT license, Leon Sorokin), inlined.</p>",
        f'<script type="application/json" id="report-data">{_json(data)}</script>',
        _script(_asset("page.js")), "</body></html>\n"])
