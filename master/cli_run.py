"""``ivypy run TEST.yaml``: load and validate the test, then run it (or print the plan).

Thin: options → ``master.run.run_test`` → exit code. A config error is one line on stderr and
exit 2, before any host is contacted, and before the run loop (numpy, numba, asyncssh: ~0.7 s
and ~85 MB) is imported: a bad test file costs a fraction of a second and ~20 MB.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from master.config import TestConfig, load_config
from master.live import LiveView
from master.plan import format_plan
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from master.run import RunResult

#: the exit status of a config error: ``master.run.EXIT_CONFIG`` (a test keeps them equal),
#: here so that refusing a test file does not import the run loop
EXIT_CONFIG = 2


def run_test(cfg: TestConfig, view: LiveView) -> RunResult:
    """``master.run.run_test``, imported once the test file is valid."""
    from master.run import run_test as run

    return run(cfg, view=view)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a test",
        description="Run a test file: start a slave on every host, run its steps, write a "
        "folder of CSV files. Exit codes: 0 success, 1 a step invalid, 2 config or preflight "
        "error, 3 host failure, 4 the run folder could not be written, 130 interrupted.",
    )
    p.add_argument("test", metavar="TEST.yaml", help="the test file")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved plan (hosts, LUN selectors, workloads, durations) "
                   "and exit without contacting any host")
    p.add_argument("--output-root", metavar="DIR", help="override the test's output_root")
    p.add_argument("--plain", action="store_true",
                   help="plain lines instead of the live table, even on a terminal")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug lines to the console")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(console)
    level = root.level
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)  # run.log takes INFO
    try:
        return _run(args)
    finally:  # called in-process (tests, a wrapper): leave no handler on a stream it may close
        root.removeHandler(console)
        root.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.test, output_root_override=args.output_root)
    except ConfigError as exc:
        print(f"ivypy: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.dry_run:
        print(format_plan(cfg))
        return 0
    view = LiveView(rich_mode=False if args.plain else None)
    result = run_test(cfg, view=view)
    if result.folder is not None:
        print(f"ivypy: results in {result.folder}")
    if result.message:
        print(f"ivypy: {result.message}", file=sys.stderr if result.exit_code else sys.stdout)
    return result.exit_code
