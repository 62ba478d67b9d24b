"""Making a run folder's ``report.html``: read the folder, choose the charts, write the page.

Owns where the page goes (``report.html`` in the run folder unless told otherwise), writing it
whole (a temporary file beside it, renamed over the last one: a reader never sees half a page)
and never over a file that is not a report page, and the one call ``Run.execute`` makes at
the end of every run, which logs a failure and never raises. Must not talk to hosts or change
any other file of the run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from master.results.report.content import BUDGET_POINTS, build_charts, default_rollup
from master.results.report.page import render
from master.results.runfolder import ReportError, open_run_folder
from master.results.wholefile import foreign_file, replace_whole

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
#: What every report page holds near its start (``master.results.report.page.render``'s title)
_PAGE_MARK = b"<title>ivypy report: "
_PAGE_MARK_WITHIN = 1024


@dataclass(frozen=True)
class Report:
    """A page written: where, how big, what it plots and what it cost."""

    path: Path
    size_bytes: int
    rollup: str
    charts: int
    bucket: int
    seconds: float
    problems: tuple[str, ...]


def build_report(folder: Path, output: Path | None = None, rollup: str | None = None,
                 budget_points: int = BUDGET_POINTS) -> Report:
    """Write the report of the run folder ``folder`` to ``output`` (default
    ``folder/report.html``); ``rollup``: the rollup type whose instances are plotted (default:
    ``default_rollup``). ``ReportError`` when the folder is not a run folder, the rollup type
    is in none of its steps, or the page cannot be written."""
    t0 = time.monotonic()
    run = open_run_folder(folder)
    if rollup is not None:
        have = sorted({t for s in run.steps for t in s.instances})
        if rollup not in have:
            raise ReportError(f"{folder}: rollup type {rollup!r} is in none of its steps "
                              f"(it has: {', '.join(have) or 'none'})")
    chosen = rollup or default_rollup(run)
    charts = build_charts(run, chosen, budget_points)
    text = render(run, charts).encode("utf-8")
    path = output if output is not None else folder / REPORT_FILE
    _write_whole(path, text)
    n_charts = sum(len(s.charts) for s in charts.steps) + (charts.overview is not None)
    return Report(path, len(text), chosen, n_charts,
                  charts.bucket, time.monotonic() - t0, tuple(run.problems))


def _write_whole(path: Path, data: bytes) -> None:
    _refuse_other_file(path)
    try:
        replace_whole(path, data)
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the report: {exc.strerror or exc}") from exc


def _refuse_other_file(path: Path) -> None:
    """``ReportError`` when ``path`` is a file that is not a report page (``-o`` naming the
    run's summary.csv, say): a page replaces only a page."""
    try:
        foreign = foreign_file(path, _PAGE_MARK, _PAGE_MARK_WITHIN)
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the report: {exc.strerror or exc}") from exc
    if foreign:
        raise ReportError(f"{path}: exists and is not an ivypy report page; not overwritten "
                          "(remove it, or name another file with -o)")


def report_after_run(folder: Path) -> Path | None:
    """``report.html`` at the end of a run (also a failed or interrupted one). Never raises: a
    report that cannot be made is a warning in run.log (``ivypy report`` can make it later)."""
    try:
        made = build_report(folder)
    except Exception as exc:  # the run's own outcome must stand whatever happens here
        log.warning("report.html not written: %s (ivypy report %s makes it later)", exc, folder)
        return None
    log.info("report.html written (%d bytes, %d charts) in %.2f s", made.size_bytes,
             made.charts, made.seconds)
    return made.path
