"""``ivypy verify RUN_DIR``: read back every block a verified run wrote, on its hosts, and name
every damaged one (``master.run.readback``).

Thin: the folder checked (a run of ``verify:`` whose master is not running), its test read as
the run read it (its hosts), its map loaded (read only), the read-back run, its last word
printed, its exit status returned: 0 nothing damaged, 5 damaged blocks, 2 a folder that cannot
be verified, 3 a host lost, 4 the output not written, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from master.cli.run import EXIT_CONFIG, _recorded_output_root
from master.config import parse_config_text
from protocol.errors import ConfigError, IvyError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify",
        help="read back and check every block a verified run wrote",
        usage="ivypy verify [-h] [--plain] [-v] RUN_DIR",
        description="Reconnect to the hosts of a run made with verify: true, read back every "
        "block its map holds (once, on the host that wrote it) and check it; write "
        "RUN_DIR/verify-YYYYmmdd-HHMMSS/verify.csv, a row per damaged extent (the header "
        "alone when nothing is damaged), verify.json and damaged/. Works on a run that "
        "completed, failed, was interrupted or whose master was killed; touches neither the "
        "run's files nor its LUNs' data. Exit codes: 0 nothing damaged, 5 damaged blocks, 2 "
        "a folder that cannot be verified, 3 host failure, 4 the output could not be "
        "written, 130 interrupted.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's folder")
    p.add_argument("--plain", action="store_true",
                   help="a progress line every few seconds per LUN, even on a terminal")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug lines to the console")
    p.set_defaults(func=verify_command)


def verify_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    folder = Path(args.run_dir).expanduser().resolve()
    try:
        cfg, vm = _verifiable(folder)
    except (ConfigError, IvyError) as exc:
        for line in str(exc).splitlines():
            print(f"ivypy: verify: {line}", file=sys.stderr)
        return EXIT_CONFIG
    from master.run.lifecycle import default_connect
    from master.run.readback import run_read_back

    try:
        code, message = run_read_back(folder, cfg, vm, connect=default_connect,
                                      plain=args.plain)
    finally:
        vm.close()
    print(f"ivypy: verify: {message}", file=sys.stderr if code not in (0, 5) else sys.stdout)
    return code


def _verifiable(folder: Path) -> tuple[Any, Any]:
    """The run's test (as its first session read it) and its map; ``ConfigError`` saying why
    the folder cannot be verified."""
    from master.results.runstate import RunStateError, master_alive, read_state
    from master.verify.mapstore import VerifyMap, VerifyMapError

    try:
        state = read_state(folder)
        if state.state == "running" and master_alive(state):
            raise RunStateError(f"{folder}: the run is still running (master pid {state.pid} "
                                f"on {state.controller}); verify it once it has ended")
        if not (folder / "verify" / "map.json").exists():
            raise RunStateError(f"{folder}: the run was not verified (no verify/map.json): "
                                "only a run with verify: true can be read back")
        test_file = folder / "test.yaml"
        try:
            text = test_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunStateError(f"cannot read {test_file}: {exc}") from exc
        output_root = _recorded_output_root(folder)
    except RunStateError as exc:
        raise ConfigError(f"cannot verify: {exc}") from exc
    cfg = parse_config_text(text, str(test_file), output_root_override=output_root,
                            cwd=Path(state.cwd))
    try:
        vm = VerifyMap.load(folder)
    except VerifyMapError as exc:
        raise ConfigError(f"cannot verify: the run's map: {exc}") from exc
    return cfg, vm
