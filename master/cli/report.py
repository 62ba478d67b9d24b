"""``ivypy report RUN_DIR [-o FILE] [--rollup TYPE]``: (re)build a run folder's report.html.
Parses arguments, calls ``master.results.report.build.build_report`` and prints where the page went;
no logic of its own. A folder that is not a run folder is a ``ReportError`` (one line, exit 2
through ``master.cli.main``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="write a run folder's report.html (a self-contained offline page)",
        description=(
            "Read a run folder (also one of a failed or interrupted run) and write one "
            "self-contained HTML page: the run header, a summary per step, IOPS, MB/s and "
            "latency over time for the instances of one rollup type with the measurement "
            "window marked, latency CDFs, DFC, measure and CPU charts, and the events. "
            "Nothing in it is fetched from the network."),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run folder")
    p.add_argument("--output", "-o", metavar="FILE", type=Path,
                   help="write the page here (default RUN_DIR/report.html)")
    p.add_argument("--rollup", metavar="TYPE",
                   help="the rollup type whose instances are plotted (default: host when the "
                   "run had several hosts, else lun; all when neither is there)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from master.results.report.build import build_report  # the page's modules load only for this

    made = build_report(args.run_dir, args.output, args.rollup)
    for problem in made.problems:
        print(f"ivypy report: note: {problem}", file=sys.stderr)
    print(f"ivypy: report written: {made.path} ({made.size_bytes:,} bytes, {made.charts} "
          f"charts of rollup {made.rollup}"
          + (f", each point {made.bucket} subintervals" if made.bucket > 1 else "") + ")")
    return EXIT_OK
