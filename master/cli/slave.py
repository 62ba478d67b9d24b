"""``ivypy slave --connect HOST:PORT --token-file FILE [--name NAME] [...]``: run a slave that
dials its master (connect-back: for hosts a scheduler starts, docs/transports.md).

Thin: the master's code does not import the slave's (tests/test_layering.py), so this command
replaces itself with the installed slave (``python -m slave`` from where this ivypy keeps it,
found without importing it) and its arguments. Exit status: the slave's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

#: run by the interpreter this command replaces itself with: the slave, its root first on the
#: path, with the arguments after the root
_BOOT = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); "
         "sys.argv = ['slave', *sys.argv[2:]]; "
         "runpy.run_module('slave', run_name='__main__', alter_sys=True)")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "slave", help="run a slave that dials its master (connect-back)",
        usage="ivypy slave --connect HOST:PORT --token-file FILE [--name NAME] "
              "[--worker-cpus SETTING] [--watchdog-min-seconds S]",
        description="Run an ivypy slave on this host that dials the master at HOST:PORT (a "
        "test whose hosts say connect_back: true listens there), proves the run's token in "
        "FILE and is proven the master's, then takes the master's requests as over SSH. For "
        "hosts a scheduler starts: a DaemonSet's pods, a Job, srun, systemd. NAME is the "
        "host's name in the test (default: this host's name). Exits when the master closes "
        "the connection or goes silent.")
    p.add_argument("--connect", metavar="HOST:PORT", required=True,
                   help="the master's connect_back: listen address")
    p.add_argument("--token-file", metavar="FILE", required=True,
                   help="the file whose first line is the run's token")
    p.add_argument("--name", metavar="NAME", help="this host's name in the test")
    p.add_argument("--worker-cpus", metavar="SETTING",
                   help="auto (default), unpinned, or a CPU list like 0-3,8")
    p.add_argument("--watchdog-min-seconds", metavar="S",
                   help="the least time without a word from the master before the slave "
                   "stops and exits")
    p.set_defaults(func=slave_command)


def slave_command(args: argparse.Namespace) -> int:
    spec = importlib.util.find_spec("slave")
    if spec is None or not spec.submodule_search_locations:
        print("ivypy: slave: the slave's code is not installed beside this ivypy",
              file=sys.stderr)
        return 2
    root = str(Path(next(iter(spec.submodule_search_locations))).parent)
    sys.stdout.flush()
    sys.stderr.flush()
    passed = [word for flag, value in (("--connect", args.connect),
                                       ("--token-file", args.token_file),
                                       ("--name", args.name),
                                       ("--worker-cpus", args.worker_cpus),
                                       ("--watchdog-min-seconds", args.watchdog_min_seconds))
              if value is not None for word in (flag, str(value))]
    os.execv(sys.executable, [sys.executable, "-c", _BOOT, root, *passed])
    return 0  # not reached
