"""``ivypy fio-pctiles``: cluster-wide latency percentiles per time quantum from fio histogram
logs. Parses arguments into ``PctileOptions``, runs ``master.fiologs.pipeline`` (printing its
warnings on stderr as they come) and writes the CSV, replacing no file but one of its own CSVs;
no logic of its own."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from master.fiologs.pipeline import DIRECTION_GROUPS, PctileOptions, compute_pctiles
from master.results.wholefile import foreign_file
from protocol.errors import ConfigError

EXIT_OK = 0
_CSV_START = b"start_ms,end_ms,"  # how every CSV this command writes begins


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of numbers: {text!r}"
        ) from exc


def _name_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    for name in names:
        if name not in DIRECTION_GROUPS:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not one of {', '.join(DIRECTION_GROUPS)}"
            )
    return names


@contextlib.contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Print each warning of the computation once, as it is reported (also those reported
    before an error stops it), on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("ivypy fio-pctiles: warning: %(message)s"))
    package = logging.getLogger("master.fiologs")
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)


def _refuse_other_file(path: str) -> None:
    """``ConfigError`` when ``--output`` names a file that is not a CSV of this command (a
    log: ``-o *_clat_hist.*.log`` takes the first log for the output): only such a CSV is
    replaced. Checked before the logs are read."""
    try:
        foreign = foreign_file(path, _CSV_START, len(_CSV_START))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}",
                          key_path="--output") from exc
    if foreign:
        raise ConfigError(f"{path}: exists and is not a CSV written by ivypy fio-pctiles; not "
                          "overwritten (remove it, or name another file)", key_path="--output")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fio-pctiles",
        help="cluster-wide latency percentiles per time quantum from fio histogram logs",
        description=(
            "Read fio histogram logs (*_clat_hist.N.log, plain or .gz; fio 3.x at any "
            "log_hist_coarseness, or fio 2.x), spread every row over common time quanta in "
            "proportion to overlap, add all logs up per quantum and print the percentiles of "
            "that cluster-wide histogram as CSV. See docs/fio-pctiles.md."
        ),
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="fio histogram log files")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write the CSV here (default stdout); an existing file must be empty "
                   "or a CSV of this command")
    p.add_argument("--time-quantum", type=float, metavar="SECONDS",
                   help="quantum length (default: the logs' own interval, detected)")
    p.add_argument("--percentiles", type=_float_list, default=(50.0, 90.0, 95.0, 99.0, 99.9),
                   metavar="LIST", help="comma-separated percentiles (default 50,90,95,99,99.9)")
    p.add_argument("--unit", choices=("ns", "us", "ms"), default="us",
                   help="unit of latencies in the output (default us)")
    p.add_argument("--directions", type=_name_list, default=("merged",), metavar="LIST",
                   help="column groups among read,write,trim,merged (default merged)")
    p.add_argument("--summary", action="store_true", help="add a last row over the whole run")
    p.add_argument("--fio-version", type=int, choices=(2, 3),
                   help="insist on fio 2.x (1216 buckets, us) or 3.x (1856, ns) logs "
                   "(default: told by the column count)")
    p.add_argument("--log-hist-msec", type=float, metavar="MS",
                   help="the logs' log_hist_msec (default: detected from the stamps)")
    p.add_argument("--time-base", choices=("auto", "relative", "absolute"), default="auto",
                   help="stamps are job-relative ms or absolute (log_unix_epoch) ms "
                   "(default: detected)")
    p.add_argument("--repair-client-logs", action="store_true",
                   help="repair logs written by fio --client (rows accumulate)")
    p.add_argument("--skip-bad-lines", action="store_true",
                   help="skip malformed lines with a warning instead of failing")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes reading logs (default: one per CPU, up to 4, for inputs "
                   "of 64 MB or more); each keeps its own per-quantum sums")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = PctileOptions(
        percentiles=args.percentiles,
        unit=args.unit,
        directions=args.directions,
        time_quantum_s=args.time_quantum,
        log_hist_msec=args.log_hist_msec,
        fio_version=args.fio_version,
        time_base=args.time_base,
        summary=args.summary,
        repair_client_logs=args.repair_client_logs,
        skip_bad_lines=args.skip_bad_lines,
        jobs=args.jobs,
    )
    if args.output:
        _refuse_other_file(args.output)
    with _warnings_to_stderr():
        result = compute_pctiles(args.logs, options)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                result.write_csv(out)
        except OSError as exc:
            raise ConfigError(f"cannot write: {exc}", key_path="--output") from exc
    else:
        result.write_csv(sys.stdout)
    return EXIT_OK
