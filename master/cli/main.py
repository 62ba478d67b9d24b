"""The ``ivypy`` command line: parse arguments into an options object, call the command, map the
result to a named exit code. Thin on purpose: no logic lives here.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds an
``argparse`` subparser and sets ``func`` (taking the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from protocol.errors import IvyError
from protocol.version import PROTOCOL_VERSION, __version__

#: the exit status when stdout's reader goes away, as a shell reports a process killed by SIGPIPE
EXIT_BROKEN_PIPE = 128 + 13

#: Modules that each register one or more subcommands.
COMMAND_MODULES: tuple[str, ...] = (
    "master.cli.run",
    "master.cli.fio_pctiles",
    "master.cli.operator",
    "master.cli.compare",
    "master.cli.summaryjson",
    "master.cli.report",
    "master.cli.example",
    "master.cli.verify",
    "master.cli.slave",
    "master.cli.k8s",
)
#: Which module registers which subcommand, so that a command imports only its own module
#: (``ivypy fio-pctiles`` need not load asyncssh and the run loop). A test keeps it in step.
COMMAND_OF: dict[str, str] = {
    "run": "master.cli.run",
    "fio-pctiles": "master.cli.fio_pctiles",
    "status": "master.cli.operator",
    "edit": "master.cli.operator",
    "stop": "master.cli.operator",
    "compare": "master.cli.compare",
    "summary-json": "master.cli.summaryjson",
    "report": "master.cli.report",
    "example": "master.cli.example",
    "verify": "master.cli.verify",
    "slave": "master.cli.slave",
    "k8s": "master.cli.k8s",
}


def _chosen_module(argv: Sequence[str]) -> str | None:
    """The module of the subcommand named in ``argv`` (the first word not starting with -)."""
    for word in argv:
        if not word.startswith("-"):
            return COMMAND_OF.get(word)
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
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
    for name in (only,) if only else COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen_module(words))
    args = parser.parse_args(words)
    func = getattr(args, "func", None)
    if func is None:  # ``ivypy`` alone: which commands there are, and a usage error's status
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = func(args)
    except IvyError as exc:
        print(f"ivypy: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``ivypy run X --dry-run | head``): no traceback, and no second
        # error when the interpreter flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return status


def console_main() -> NoReturn:
    """``ivypy`` as a process (the console script, ``python -m master``): ``main``'s status is
    its exit status. What is left is freed by the process's end, without the interpreter's
    last garbage collection over every object first (0.2 s after a run when the kernels were
    numba's, whose objects were most of them)."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    console_main()
