"""The ``ivypy`` command line: parse arguments into an options object, call the command, map the
result to a named exit code. Thin on purpose: no logic lives here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from protocol.version import PROTOCOL_VERSION, __version__


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
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
