"""``ivypy status | edit | stop [RUN_DIR]``: talk to a running test through its control socket.

Thin: arguments → ``master.live.editparse`` (edits are checked before connecting) →
``master.live.control_socket.request`` → printed reply → exit code. Without RUN_DIR the one
active run started from the current directory (or writing its folder under it) is used; with
none such or several, the command refuses (exit 2) and lists the active runs. For ``edit`` the
first positional is RUN_DIR when it is an existing directory that is no instance (``all`` in a
step folder, which has an ``all`` folder, is the instance), or when it is no instance but the
next word is one (a run folder that is not there: exit 3, naming it); otherwise it is the
instance. ``stop --run`` ends the whole run once its running step has (resumable).

Exit codes: 0 done; 2 the edit or stop was refused (bad instance, key or value, or refused by the
run; or no RUN_DIR and not exactly one run of this directory), with the reason on stderr and
nothing changed; 3 no run could be reached (none active, the
folder has no socket, the run ended). ``status`` of a run folder that no master serves prints
what its ``state.json`` records (complete, failed, interrupted, or dead: its master gone, with
the command that resumes it), and exits 3.

Must not: decide anything about the run (the run loop answers every request).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from master.config.units import format_duration_s
from master.live.control_socket import (
    ControlError,
    RunNotChosen,
    find_run_dir,
    remove_stale_socket,
    request,
)
from master.live.editparse import (
    EDITABLE_KEYS,
    EditRefused,
    parse_instance,
    parse_params,
    split_edit_args,
)

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_NO_RUN = 3

#: status keys printed in the header, in this order; other keys are printed after them.
_HEADER_KEYS = ("test", "run_dir", "step", "step_name", "phase", "subinterval",
                "subintervals_total", "time_left_s", "rollups", "ok")
_ROLLUP_COLUMNS = (("instance", "instance"), ("IOPS", "IOPS"),
                   ("service_time_p99_ms", "p99 ms"), ("iops_setting", "IOPS setting"))


def register(subparsers: Any) -> None:
    run_dir_help = ("the run folder (default: the one active run started from this directory "
                    "or writing under it; with several, name it)")
    p = subparsers.add_parser(
        "status", help="show the live state of a running test",
        description="Show the step, subinterval, phase and per-instance IOPS and p99 of a "
        "running test. Exit 0, or 3 when no run can be reached.")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help=run_dir_help)
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout instead of the text (docs/run.md: `ivypy "
                   "status --json`)")
    p.set_defaults(func=status_command)

    p = subparsers.add_parser(
        "edit", help="change workloads of a running test from the next subinterval",
        usage="ivypy edit [-h] [RUN_DIR] INSTANCE KEY=VALUE [KEY=VALUE ...]",
        description="Change the workloads of one rollup instance of a running test; the "
        "change holds from the next subinterval boundary, which is printed. INSTANCE is all, "
        "host=h1, lun=h1:/dev/sdb, workload=h1:/dev/sdb:name or vendor+model=ACME+X1. Keys: "
        "iops (number or max), total_iops (split over the instance's LUNs, then by skew "
        "weight), read_fraction (0..1 or 70%), blocksize (8KiB), iodepth (1..4096), "
        "iosequencer, skew_weight, busy_poll (true/false), write_data (zeros, random, "
        "compressible:R, dedupable:R); and, for all, dfc.target, dfc.low_iops, dfc.high_iops "
        "(the running DFC step's, from its next move). Exit 0 applied, 2 refused (nothing "
        "changed), 3 no run.")
    p.add_argument("words", nargs="+", metavar="WORD",
                   help="an optional run folder, the rollup instance, then one or more "
                   "KEY=VALUE settings")
    p.set_defaults(func=edit_command)

    p = subparsers.add_parser(
        "stop", help="end the current step (or, with --run, the whole run) gracefully",
        description="End the current step after the subinterval in progress; the run goes on "
        "with its next step. With --run the run ends too, once that step has: its state is "
        "interrupted, and `ivypy run --resume RUN_DIR` continues it from the next step. Exit "
        "0, 2 refused, 3 no run.")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help=run_dir_help)
    p.add_argument("--run", action="store_true", dest="whole_run",
                   help="end the whole run after the subinterval in progress (resumable)")
    p.set_defaults(func=stop_command)


def _fail(message: str, code: int) -> int:
    print(f"ivypy: {message}", file=sys.stderr)
    return code


def _unreached(exc: ControlError) -> int:
    """No run reached: exit 2 where the command would not guess which (``RunNotChosen``),
    else 3."""
    return _fail(str(exc), EXIT_REFUSED if isinstance(exc, RunNotChosen) else EXIT_NO_RUN)


def _call(run_dir_arg: str | None, obj: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    run_dir = find_run_dir(run_dir_arg)
    return run_dir, request(run_dir, obj)


def _chosen(run_dir_arg: str | None, run_dir: Path) -> str:
    """`` (run <folder>)`` where the command chose the run (none named, the one of this
    directory; a test folder, its live run): with several runs active the operator sees which it
    reached. Nothing where the run folder itself was named."""
    if run_dir_arg is not None and Path(run_dir_arg).expanduser().resolve() == run_dir.resolve():
        return ""
    return f" (run {run_dir})"


def _step_text(reply: dict[str, Any]) -> str:
    step = reply.get("step", "?")
    name = reply.get("step_name")
    return f"{step} ({name})" if name else f"{step}"


# ---------------------------------------------------------------- status


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def format_status(reply: dict[str, Any]) -> str:
    """The status reply as text: a header, a table per rollup type, then any other keys."""
    lines = []
    if "test" in reply or "run_dir" in reply:
        lines.append(f"test {reply.get('test', '?')}  ({reply.get('run_dir', '?')})")
    if "step" in reply:
        where = f"step {_step_text(reply)}"
        if "phase" in reply:
            where += f", {reply['phase']}"
        if "subinterval" in reply:
            total = reply.get("subintervals_total")
            where += f", subinterval {reply['subinterval']}"
            where += f" of {total}" if total is not None else ""
        time_left = reply.get("time_left_s")
        if isinstance(time_left, (int, float)) and not isinstance(time_left, bool):
            where += f", about {format_duration_s(round(float(time_left)))} left"
        lines.append(where)
    rollups = reply.get("rollups")
    if isinstance(rollups, dict):
        for rollup_type, rows in rollups.items():
            lines.append("")
            lines.append(f"{rollup_type}:")
            lines.extend(_table(rows if isinstance(rows, list) else []))
    extra = [key for key in reply if key not in _HEADER_KEYS]
    if extra:
        lines.append("")
        lines.extend(f"{key}: {_cell(reply[key])}" for key in extra)
    return "\n".join(lines)


def _table(rows: list[Any]) -> list[str]:
    dict_rows = [row for row in rows if isinstance(row, dict)]
    if not dict_rows:
        return ["  (no instances)"]
    known = [key for key, _ in _ROLLUP_COLUMNS]
    extra = [key for row in dict_rows for key in row if key not in known]
    columns = [(key, title) for key, title in _ROLLUP_COLUMNS] + \
        [(key, key) for key in dict.fromkeys(extra)]
    cells = [[title for _, title in columns]] + \
        [[_cell(row.get(key)) for key, _ in columns] for row in dict_rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in cells]


def status_command(args: argparse.Namespace) -> int:
    folder = args.run_dir
    try:
        run_dir = find_run_dir(args.run_dir)
        if args.run_dir is not None:  # a test folder: the run found in it
            folder = str(run_dir)
        reply = request(run_dir, {"op": "status"})
    except ControlError as exc:
        recorded = _recorded_state(folder, args.json)
        if recorded is None:
            return _unreached(exc)
        if folder is not None:  # a socket its killed master left: no later command trips on it
            remove_stale_socket(Path(folder).expanduser())
        print(recorded)  # a run no master serves: what its folder says of it
        return EXIT_NO_RUN
    if not reply["ok"]:
        return _fail(f"status refused: {reply.get('error', 'no reason given')}", EXIT_REFUSED)
    if args.json:
        print(json.dumps(_finite({"ivypy_status": 1, "live": True,
                                  **{k: v for k, v in reply.items() if k != "ok"}})))
    else:
        print(format_status(reply))
    return EXIT_OK


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite (a p99 of no I/O: NaN) as None, so that
    the JSON is JSON (``json.dumps`` would write NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _recorded_state(run_dir: str | None, as_json: bool = False) -> str | None:
    """The state a run folder's ``state.json`` records (a run that ended, failed, was
    interrupted or died), as text (or JSON); None when ``run_dir`` is not given or holds
    none."""
    from master.results.runstate import RunStateError, describe, describe_json, read_state

    if run_dir is None:
        return None
    folder = Path(run_dir).expanduser()
    try:
        state = read_state(folder)
    except RunStateError:
        return None
    return json.dumps(describe_json(state, folder)) if as_json else describe(state, folder)


# ---------------------------------------------------------------- edit


def split_edit_words(words: Sequence[str]) -> tuple[str | None, str, list[str]]:
    """``[RUN_DIR] INSTANCE KEY=VALUE...`` → (run dir or None, instance, settings)."""
    rest = list(words)
    run_dir = None
    if rest and not _is_instance(rest[0]) and (
            Path(rest[0]).is_dir() or (len(rest) >= 3 and _is_instance(rest[1]))):
        run_dir = rest.pop(0)
    if not rest:
        raise EditRefused("give the instance to edit (all, host=h1, ...) and key=value settings")
    instance = rest.pop(0)
    if not rest:
        raise EditRefused(f"give one or more key=value settings to apply to {instance}")
    return run_dir, instance, rest


def _is_instance(word: str) -> bool:
    """Whether ``word`` is spelt as an instance (``all``, ``host=h1``), not a setting."""
    try:
        rollup_type, _ = parse_instance(word)
    except EditRefused:
        return False
    return rollup_type not in EDITABLE_KEYS


def edit_command(args: argparse.Namespace) -> int:
    try:
        run_dir_arg, instance, settings = split_edit_words(args.words)
        parse_instance(instance)
        raw = split_edit_args(settings)
        parse_params(raw)
    except EditRefused as exc:
        return _fail(f"edit refused: {exc}", EXIT_REFUSED)
    try:
        run_dir, reply = _call(run_dir_arg, {"op": "edit", "instance": instance, "params": raw})
    except ControlError as exc:
        return _unreached(exc)
    if not reply["ok"]:
        return _fail(f"edit refused: {reply.get('error', 'no reason given')}", EXIT_REFUSED)
    chosen = _chosen(run_dir_arg, run_dir)
    dfc = reply.get("dfc")
    if isinstance(dfc, dict):
        print(f"DFC of step {_step_text(reply)} holds {dfc.get('focus_metric', '?')} at "
              f"{_cell(dfc.get('target'))} with IOPS in [{_cell(dfc.get('low_iops'))}, "
              f"{_cell(dfc.get('high_iops'))}] from its move after subinterval "
              f"{reply.get('effective_subinterval', '?')}{chosen}")
        return EXIT_OK
    workloads = reply.get("workloads")
    count = len(workloads) if isinstance(workloads, list) else "?"
    print(f"applied to {count} workloads of {reply.get('instance', instance)} from subinterval "
          f"{reply.get('effective_subinterval', '?')} of step {_step_text(reply)}{chosen}")
    steered = reply.get("dfc_steered")
    if isinstance(steered, list) and steered:
        print(f"ivypy: warning: DFC steers the IOPS of {', '.join(map(str, steered))} in this "
              "step: it starts from the total you set and keeps moving it (ivypy edit all "
              "dfc.target=... changes what it aims at)", file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------- stop


def stop_command(args: argparse.Namespace) -> int:
    op = "stop_run" if args.whole_run else "stop"
    try:
        run_dir, reply = _call(args.run_dir, {"op": op})
    except ControlError as exc:
        return _unreached(exc)
    if not reply["ok"]:
        return _fail(f"stop refused: {reply.get('error', 'no reason given')}", EXIT_REFUSED)
    chosen = _chosen(args.run_dir, run_dir)
    if reply.get("step") is None:  # stop_run between steps
        print(f"the run will end before its next step{chosen}")
    elif args.whole_run:
        print(f"step {_step_text(reply)} will end after subinterval "
              f"{reply.get('last_subinterval', '?')}, then the run{chosen}")
    else:
        print(f"step {_step_text(reply)} will end after subinterval "
              f"{reply.get('last_subinterval', '?')}{chosen}")
    return EXIT_OK
