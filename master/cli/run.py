"""``ivypy run TEST.yaml``: load and validate the test, then run it (or print the plan);
``ivypy run --resume RUN_DIR``: continue a run that died or was stopped, from its first
incomplete step, in its own folder with the test file kept there (``master.results.runstate``).

Thin: options → ``master.run.lifecycle.run_test`` → exit code. A config error is one line on
stderr (every unknown key of the file at once: a line each) and exit 2, before any host is
contacted, and before the run loop (numpy, asyncssh and the kernels: ~0.5 s and ~48 MB) is
imported: a bad test file costs a fraction of a second and ~20 MB.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from master.config import TestConfig, load_config, parse_config_text
from master.config.metrics import check_metric_rollups, parse_listen
from master.config.resolved import format_plan
from master.config.schema import MetricsConfig
from master.live.rows import check_live_rollup
from master.live.view import LiveView, ViewLogHandler
from protocol.errors import ConfigError

if TYPE_CHECKING:
    from master.results.runstate import Resume
    from master.run.outcome import RunResult

#: the exit status of a config error: ``master.run.outcome.EXIT_CONFIG`` (a test keeps them
#: equal), here so that refusing a test file does not import the run loop
EXIT_CONFIG = 2


def run_test(cfg: TestConfig, view: LiveView, resume: Resume | None = None) -> RunResult:
    """``master.run.lifecycle.run_test``, imported once the test file is valid."""
    from master.run.lifecycle import run_test as run

    return run(cfg, view=view, resume=resume)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a test",
        usage="ivypy run [-h] [--dry-run] [--output-root DIR] [--plain] [--live-rollup TYPE] "
        "[--json] [-v] (TEST.yaml | --resume RUN_DIR)",
        description="Run a test file: start a slave on every host, run its steps, write a "
        "folder of CSV files. Exit codes: 0 success, 1 a step invalid, 2 config or preflight "
        "error (or a run that cannot be resumed), 3 host failure, 4 the run folder could not "
        "be written or was removed, 5 data verification found damaged blocks, 130 "
        "interrupted.",
    )
    p.add_argument("test", metavar="TEST.yaml", nargs="?", help="the test file")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR (it died, failed or was interrupted) from "
                   "its first incomplete step, with the test file kept there")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved plan (hosts, LUN selectors, workloads, durations) "
                   "and exit without contacting any host")
    p.add_argument("--output-root", metavar="DIR", help="override the test's output_root")
    p.add_argument("--plain", action="store_true",
                   help="plain lines instead of the live table, even on a terminal")
    p.add_argument("--live-rollup", metavar="TYPE",
                   help="the rollup whose rows the live view and the end-of-run table show "
                   "beside the total (one of the test's rollup types; default: host when the "
                   "test has several hosts, else lun)")
    p.add_argument("--metrics", metavar="ADDR:PORT",
                   help="serve live metrics for Prometheus at http://ADDR:PORT/metrics while "
                   "the run goes (the test's metrics: listen; docs/metrics.md)")
    p.add_argument("--metrics-token-file", metavar="FILE",
                   help="with --metrics (or the test's metrics:), the file whose first line is "
                   "the bearer token a scrape must send")
    p.add_argument("--metrics-rollups", metavar="TYPES",
                   help="with --metrics (or the test's metrics:), the rollup types served, "
                   "comma-separated (the test's metrics: rollups; default: every type)")
    p.add_argument("--json", action="store_true",
                   help="end with one JSON line on stdout: the outcome, exit code, run folder "
                   "and each step's headline figures (docs/run.md, 'The JSON line')")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug lines to the console")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    view = LiveView(rich_mode=False if args.plain else None, live_rollup=args.live_rollup)
    # log lines print through the view: above its live region while there is one
    console = ViewLogHandler(view)
    console.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(console)
    level = root.level
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)  # run.log takes INFO
    try:
        code, folder, message, invalid = _run(args, view)
        if args.json and not args.dry_run:
            from master.results.runline import run_line

            print(json.dumps(run_line(code, folder, message, invalid)), flush=True)
        return code
    finally:  # called in-process (tests, a wrapper): leave no handler on a stream it may close
        root.removeHandler(console)
        root.setLevel(level)


def _run(args: argparse.Namespace, view: LiveView) -> tuple[int, Path | None, str, list[str]]:
    """The run's exit status, folder (None: none made), last word and invalid steps."""
    if (args.test is None) == (args.resume is None):
        message = "run: give a test file, or --resume RUN_DIR (not both)"
        print(f"ivypy: {message}", file=sys.stderr)
        return EXIT_CONFIG, None, message, []
    resume = None
    try:
        if args.resume is not None:
            if args.output_root is not None:
                raise ConfigError("--output-root does not go with --resume: the run keeps "
                                  "its folder")
            cfg, resume = _resumed(Path(args.resume))
        else:
            cfg = load_config(args.test, output_root_override=args.output_root)
        if args.live_rollup is not None:
            check_live_rollup(args.live_rollup, [r.type for r in cfg.rollups], cfg.source_file)
        cfg = _with_metrics(cfg, args.metrics, args.metrics_token_file, args.metrics_rollups)
    except ConfigError as exc:  # several at once: a line each
        for line in str(exc).splitlines():
            print(f"ivypy: {line}", file=sys.stderr)
        return EXIT_CONFIG, None, str(exc), []
    if args.dry_run:
        print(format_plan(cfg))
        return 0, None, "", []
    result = run_test(cfg, view=view, resume=resume)
    if result.folder is not None:
        print(f"ivypy: results in {result.folder}")
    if result.message:
        print(f"ivypy: {result.message}", file=sys.stderr if result.exit_code else sys.stdout)
    return result.exit_code, result.folder, result.message, result.invalid_steps


def _with_metrics(cfg: TestConfig, listen: str | None, token_file: str | None,
                  rollups: str | None = None) -> TestConfig:
    """``cfg`` with ``--metrics``, ``--metrics-token-file`` and ``--metrics-rollups`` over
    its ``metrics:``."""
    if listen is None and token_file is None and rollups is None:
        return cfg
    if listen is None and cfg.metrics is None:
        flag = "--metrics-token-file" if token_file is not None else "--metrics-rollups"
        raise ConfigError(f"{flag} needs --metrics ADDR:PORT (or the test's metrics: listen)")
    m = cfg.metrics or MetricsConfig("", 0)
    if listen is not None:
        try:
            host, port = parse_listen(listen)
        except ValueError as exc:
            raise ConfigError(f"--metrics: {exc}") from None
        m = dataclasses.replace(m, host=host, port=port)
    if token_file is not None:
        m = dataclasses.replace(m, token_file=str(Path(token_file).expanduser().resolve()))
    if rollups is not None:
        types = tuple(t.strip() for t in rollups.split(",") if t.strip())
        try:
            check_metric_rollups(types, [r.type for r in cfg.rollups])
        except ValueError as exc:
            raise ConfigError(f"--metrics-rollups: {exc}") from None
        m = dataclasses.replace(m, rollups=types)
    return dataclasses.replace(cfg, metrics=m)


def _resumed(folder: Path) -> tuple[TestConfig, Resume]:
    """The test kept in ``folder`` and where to resume it; ``ConfigError`` (exit 2) when the
    folder cannot be resumed (no state, complete, still running, its test file or ivypy's
    version changed)."""
    from master.results.runstate import (
        Resume,
        RunStateError,
        check_resumable,
        check_summary,
        read_state,
    )
    from protocol.version import __version__

    folder = folder.expanduser().resolve()  # the folder itself, not a symlink to it
    try:
        state = read_state(folder)
        test_file = folder / "test.yaml"
        try:
            text = test_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunStateError(f"cannot read {test_file}: {exc}") from exc
        first = check_resumable(state, folder, text, __version__)
        check_summary(folder, first)
        output_root = _recorded_output_root(folder)
    except RunStateError as exc:
        raise ConfigError(f"cannot resume: {exc}") from exc
    # paths resolve as in the run's first session: relative ones from its working directory,
    # ${output_root} (a file LUN's path) as the output root it resolved
    cfg = parse_config_text(text, str(test_file), output_root_override=output_root,
                            cwd=Path(state.cwd))
    if len(cfg.steps) != state.steps_total:
        raise ConfigError(f"cannot resume: {test_file} has {len(cfg.steps)} steps, the run "
                          f"{state.steps_total}")
    return cfg, Resume(folder, state, first)


def _recorded_output_root(folder: Path) -> str:
    """The output root the run's first session resolved, as ``resolved.json`` in ``folder``
    records it (written before its ``state.json``): a resumed run's ``${output_root}`` is
    that, whatever the folder is called now (a symlink to it, the output root reached by
    another path)."""
    import json

    from master.results.runstate import RunStateError

    path = folder / "resolved.json"
    try:
        root = json.loads(path.read_text(encoding="utf-8")).get("output_root")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise RunStateError(f"cannot read the run's output_root from {path}: {exc}") from exc
    if not isinstance(root, str) or not root:
        raise RunStateError(f"{path} records no output_root")
    return root
