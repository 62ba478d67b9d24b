"""``ivypy compare BASE_RUN NEW_RUN``: two runs' summaries side by side, each metric's change,
and ``--fail-if`` conditions for a CI gate. Parses the arguments, calls
``master.results.compare`` and maps the result to an exit code; no logic of its own.

Exit codes: 0 no condition holds, 1 a condition holds (each named on stderr), 2 a wrong
argument or runs that cannot be matched (argparse's own usage errors are 2 too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from master.config.expr import FailIf, parse_fail_if
from master.results.compare.changes import compare, shown_metrics
from master.results.compare.match import check_metrics, match_runs
from master.results.compare.report import FORMATS, failure_line, write_csv, write_json, write_text
from master.results.compare.summary import read_summary
from protocol.errors import CompareError

EXIT_OK = 0
EXIT_CONDITION_HOLDS = 1
EXIT_CANNOT_COMPARE = 2

DEFAULT_METRICS = ("IOPS", "MB_per_s", "service_time_p50_ms", "service_time_p99_ms",
                   "response_time_p99_ms")

_EPILOG = """\
EXPR is METRIC OP LIMIT with OP one of < <= > >=. LIMIT is a signed change in percent of
the base value, or an absolute value in the metric's unit, held against the NEW value:
  "IOPS < -10%"                 new IOPS more than 10 % below the base's
  "service_time_p99_ms > +5%"   new p99 more than 5 % above the base's
  "service_time_p99_ms > 2"     new p99 above 2 ms, whatever the base's
Steps are matched by name and rollup instances by name. Exit 0: no condition holds;
1: one holds (each named on stderr: metric, step, instance); 2: wrong arguments, or the
runs cannot be matched. See docs/compare.md."""


def _fail_if(text: str) -> FailIf:
    try:
        return parse_fail_if(text)
    except CompareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _metric_list(text: str) -> list[str]:
    metrics = [m.strip() for m in text.split(",") if m.strip()]
    if not metrics:
        raise argparse.ArgumentTypeError(f"no metric named in {text!r}")
    return metrics


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare two runs' summaries; fail on conditions (a CI gate)",
        description=(
            "Set two run folders' summary.csv side by side: for each step and rollup instance "
            "in both, each metric's base value, new value and change (absolute and %)."),
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("base_run", type=Path, metavar="BASE_RUN", help="the run folder to compare "
                   "against (or its summary.csv)")
    p.add_argument("new_run", type=Path, metavar="NEW_RUN", help="the run folder to judge")
    p.add_argument("--rollup", default="all", metavar="TYPE",
                   help="rollup type whose instances are compared (default all; e.g. host, "
                   "lun, workload, or an attribute rollup)")
    p.add_argument("--metric", action="append", type=_metric_list, metavar="M",
                   help="a summary.csv column to compare (repeat, or comma-separated; default "
                   f"{', '.join(DEFAULT_METRICS)}); a metric a --fail-if names is added")
    p.add_argument("--fail-if", action="append", type=_fail_if, default=[], metavar="EXPR",
                   help="exit 1 when EXPR holds for any step and instance (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (an aligned table, default), csv or json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    metrics = ([m for group in args.metric for m in group] if args.metric
               else list(DEFAULT_METRICS))
    conditions: list[FailIf] = args.fail_if
    shown = shown_metrics(metrics, conditions)
    base, new = read_summary(args.base_run, shown), read_summary(args.new_run, shown)
    matching = match_runs(base, new, args.rollup)
    check_metrics(base, new, shown)
    result = compare(matching, metrics, conditions)
    if args.format == "csv":
        sys.stdout.write(write_csv(result))
    elif args.format == "json":
        sys.stdout.write(write_json(result, args.base_run, args.new_run))
    else:
        sys.stdout.write(write_text(result, args.base_run, args.new_run))
    sys.stdout.flush()
    for row, cond in result.failures:
        print(f"ivypy compare: {failure_line(row, cond)}", file=sys.stderr)
    return EXIT_CONDITION_HOLDS if result.failures else EXIT_OK
