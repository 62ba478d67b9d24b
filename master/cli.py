"""The ``ivypy`` command line: parse arguments into an options object, call the command, map the
result to a named exit code. Thin on purpose: no logic lives here.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds an
``argparse`` subparser and sets ``func`` (taking the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from protocol.errors import IvyError
from protocol.version import PROTOCOL_VERSION, __version__

#: Modules that each register one or more subcommands.
COMMAND_MODULES: tuple[str, ...] = (
    "master.cli_run",
    "master.fio_pctiles_cli",
    "master.cli_control",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ivypy",
        description="Distributed storage load generator in the style of Hitachi's ivy.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"ivypy {__version__} (protocol {PROTOCOL_VERSION})",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        status: int = func(args)
    except IvyError as exc:
        print(f"ivypy: error: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
