"""``ivypy summary-json RUN_DIR...``: write a run folder's ``summary.json`` anew from its files.

A run writes it when it ends; this builds it for a folder whose master died (killed, a
reboot: nothing wrote it), one from before summary.json, or one whose file was lost. Thin:
folders → ``master.results.summaryjson.write_summary_json`` → a line per folder → exit code.

Exit codes: 0 every folder written; 2 a folder is not a run folder (no state.json); 4 a
summary.json could not be written. Each folder is tried whatever befell the ones before.
Must not: change any other file of the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from master.results.runstate import STATE_FILE
from master.results.summaryjson import SUMMARY_JSON, write_summary_json
from protocol.errors import OutputError

EXIT_OK, EXIT_NOT_A_RUN, EXIT_OUTPUT = 0, 2, 4


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "summary-json",
        help="write a run folder's summary.json anew from its files",
        description="Write RUN_DIR/summary.json anew from the folder's own files (state.json, "
        "resolved.json, hosts.csv, luns.csv, events.csv, summary.csv), as a run does when it "
        "ends: for a run whose master died, or a folder from before summary.json. The layout "
        "is docs/summary.schema.json. Exit codes: 0 written, 2 not a run folder, 4 not "
        "writable.",
    )
    p.add_argument("folders", metavar="RUN_DIR", nargs="+", help="a run folder")
    p.set_defaults(func=summary_json_command)


def summary_json_command(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for name in args.folders:
        folder = Path(name).expanduser().absolute()
        if not (folder / STATE_FILE).is_file():
            print(f"ivypy: {folder}: not a run folder (no {STATE_FILE})", file=sys.stderr)
            status = max(status, EXIT_NOT_A_RUN)
            continue
        try:
            doc = write_summary_json(folder)
        except OutputError as exc:
            print(f"ivypy: {exc}", file=sys.stderr)
            status = max(status, EXIT_OUTPUT)
            continue
        problems = doc["problems"]
        print(f"{folder / SUMMARY_JSON}: {doc['outcome']['state']}, {doc['steps_total']} steps"
              + (f"; {len(problems)} problem(s): {'; '.join(problems)}" if problems else ""))
    return status

