"""The run folder's own state: ``state.json``, and what ``ivypy run --resume`` needs from it.

Owns the file's fields, writing it atomically (a temporary file beside it, synced, renamed
over the last one), reading it back with every field checked, telling a live run from a dead
one, and the checks that refuse a resume. It does not run anything (``master.run.lifecycle``) or
print (``master.cli.run``, ``master.cli.operator``).

States: ``running`` (written when the run starts, and again after each step completes with
that step as the last complete one), ``complete`` (every step ran; the exit status says whether
all were valid), ``failed`` (a config, preflight, host or output error ended it, or an
exception the run does not handle: then without an exit status), and
``interrupted`` (Ctrl-C, SIGTERM). A folder that says ``running`` while no master holds it
(its process is gone from this controller) is a run that died: ``ivypy status`` says so, and
``ivypy run --resume`` continues it from its first incomplete step.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from master.results.wholefile import replace_whole
from protocol.errors import IvyError

STATE_FILE = "state.json"
#: the version of the file's layout; a folder written by another layout is not resumed
STATE_SCHEMA = 1
STATES = ("running", "complete", "failed", "interrupted")


class RunStateError(IvyError):
    """The run folder's state cannot be read, or forbids what was asked (a resume)."""


@dataclass
class CreatedFile:
    """A file LUN that was ivypy's own when the run first saw it (made by the run, or carrying
    ivypy's mark): a resumed run may write it again only while it is the same file
    (``file_id``: the slave's ``dev:inode`` of it). Where the file system keeps the mark the
    slave also goes by the mark; this is what a file system without user extended attributes
    has."""

    host: str
    path: str
    file_id: str


@dataclass
class RunState:
    """The fields of ``state.json`` (see the module docstring for ``state``)."""

    state: str
    test: str
    steps_total: int
    test_sha256: str
    ivypy_version: str
    controller: str
    pid: int
    cwd: str
    started: str
    updated: str = ""
    reason: str = ""
    exit_code: int | None = None
    #: the last step whose summary is written (-1: none yet) and its name
    last_complete_step: int = -1
    last_complete_step_name: str = ""
    #: each complete step's measured IOPS per rollup type and instance (``iops_curve``'s
    #: reference), at full precision: a resumed run's curve is the one the run would have had
    step_results: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    created_files: list[CreatedFile] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)
    schema: int = STATE_SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> RunState:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise RunStateError(f"{where}: not JSON ({exc})") from exc
        if not isinstance(raw, dict):
            raise RunStateError(f"{where}: not a JSON object")
        if raw.get("schema") != STATE_SCHEMA:
            raise RunStateError(f"{where}: state schema {raw.get('schema')!r}, this ivypy "
                                f"reads {STATE_SCHEMA}")
        known = {f.name for f in fields(cls)}
        missing = sorted(n for n in ("state", "test", "steps_total", "test_sha256",
                                     "ivypy_version", "controller", "pid", "cwd", "started")
                         if n not in raw)
        unknown = sorted(set(raw) - known)
        if missing or unknown:
            raise RunStateError(f"{where}: missing {missing}, unknown {unknown}")
        if raw["state"] not in STATES:
            raise RunStateError(f"{where}: state {raw['state']!r} is not one of {STATES}")
        try:
            created = [CreatedFile(**c) for c in raw.get("created_files", [])]
            out = cls(**{**raw, "created_files": created})
        except TypeError as exc:
            raise RunStateError(f"{where}: {exc}") from exc
        for name, kind in (("steps_total", int), ("pid", int), ("last_complete_step", int)):
            if not isinstance(getattr(out, name), kind) or isinstance(getattr(out, name), bool):
                raise RunStateError(f"{where}: {name} must be an integer")
        return out


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def new_state(test: str, steps_total: int, source_text: str, version: str) -> RunState:
    return RunState(state="running", test=test, steps_total=steps_total,
                    test_sha256=text_sha256(source_text), ivypy_version=version,
                    controller=socket.gethostname(), pid=os.getpid(), cwd=os.getcwd(),
                    started=now_text())


def write_state(folder: Path, state: RunState) -> None:
    """Replace ``state.json`` whole: a reader (or a crash) sees the old state or the new."""
    state.updated = now_text()
    replace_whole(folder / STATE_FILE, state.to_json().encode("utf-8"))


def read_state(folder: Path) -> RunState:
    path = folder / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunStateError(f"{folder}: not a run folder of this ivypy (no {STATE_FILE})"
                            ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunStateError(f"cannot read {path}: {exc}") from exc
    return RunState.from_json(text, str(path))


def master_alive(state: RunState) -> bool:
    """Whether the master that wrote ``state`` still runs: same controller, its process is
    there and is an ivypy (a reused pid of another program is not). On another controller
    nothing can be told: taken as alive."""
    if state.state != "running":
        return False
    if state.controller != socket.gethostname():
        return True
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes()
    except OSError:
        return False
    words = [w.decode("utf-8", "replace") for w in cmdline.split(b"\0") if w]
    return any(os.path.basename(w) == "ivypy" for w in words) or any(
        a == "-m" and b == "master" for a, b in itertools.pairwise(words))


def describe(state: RunState, folder: Path) -> str:
    """The state in a few lines, for ``ivypy status`` on a run that is not live."""
    shown = "dead (its master is gone)" if state.state == "running" and not master_alive(
        state) else state.state
    last = (f"step {state.last_complete_step} ({state.last_complete_step_name})"
            if state.last_complete_step >= 0 else "none")
    lines = [f"test {state.test}  ({folder})",
             f"state: {shown}" + (f": {state.reason}" if state.reason else ""),
             f"last complete step: {last} of {state.steps_total} steps",
             f"started {state.started}, last written {state.updated}"
             + (f", resumed {len(state.resumes)} time(s)" if state.resumes else "")]
    if state.exit_code is not None:
        lines.append(f"exit status: {state.exit_code}")
    resumable = shown.startswith("dead") or state.state in ("failed", "interrupted")
    if resumable and state.last_complete_step + 1 < state.steps_total:
        lines.append(f"continue it with: ivypy run --resume {folder}")
    return "\n".join(lines)


def describe_json(state: RunState, folder: Path) -> dict[str, Any]:
    """``describe`` for scripts (``ivypy status --json`` on a run that is not live): the
    state as shown (``dead`` where its master is gone), with what ``state.json`` records."""
    dead = state.state == "running" and not master_alive(state)
    resumable = (dead or state.state in ("failed", "interrupted")) and \
        state.last_complete_step + 1 < state.steps_total
    return {"ivypy_status": 1, "live": False, "run_dir": str(folder), "test": state.test,
            "state": "dead" if dead else state.state, "reason": state.reason,
            "exit_code": state.exit_code, "steps_total": state.steps_total,
            "last_complete_step": state.last_complete_step,
            "last_complete_step_name": state.last_complete_step_name,
            "started": state.started, "updated": state.updated, "resumes": len(state.resumes),
            "resume_command": f"ivypy run --resume {folder}" if resumable else None}


def check_resumable(state: RunState, folder: Path, source_text: str, version: str) -> int:
    """The first step to run, or ``RunStateError`` saying why the folder cannot be resumed."""
    if state.state == "complete":
        raise RunStateError(f"{folder}: the run is complete ({state.steps_total} steps); "
                            "nothing to resume")
    if state.state == "running" and master_alive(state):
        raise RunStateError(f"{folder}: the run is still running (master pid {state.pid} on "
                            f"{state.controller})")
    if text_sha256(source_text) != state.test_sha256:
        raise RunStateError(f"{folder / 'test.yaml'}: the test file changed since the run "
                            "started; a resumed run must run the test it began")
    if version != state.ivypy_version:
        raise RunStateError(f"{folder}: written by ivypy {state.ivypy_version}, this is "
                            f"{version}; resume it with that version")
    first = state.last_complete_step + 1
    if first >= state.steps_total:
        raise RunStateError(f"{folder}: every step is complete; nothing to resume")
    return first


def step_results_from(raw: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    return {str(s): {str(t): {str(i): float(v) for i, v in inst.items()}
                     for t, inst in types.items()} for s, types in raw.items()}


@dataclass(frozen=True)
class Resume:
    """A run to continue: its folder, its state as read, and the first step to run."""

    folder: Path
    state: RunState
    first_step: int


def set_aside_incomplete_steps(folder: Path, step_dirs: Sequence[str],
                               first_step: int) -> list[str]:
    """Before a resume: the folders ``step_dirs`` (those of the steps from ``first_step`` on;
    a step cut off by the crash) are renamed ``<name>.incomplete`` (``-2``, ``-3`` ... when
    taken), and summary.csv loses the rows of those steps (their folder keeps its own
    summaries): the resumed run writes them anew, once. A last row the crash cut off (fewer
    cells than the header, or no step number) goes too. Returns what was set aside. A
    summary.csv that cannot be read so (no header with ``step_number``, a row that is not
    whole before its last) is a ``RunStateError`` naming its line, with nothing changed."""
    summary = folder / "summary.csv"
    dropped, cut = _summary_rows(summary, first_step)  # garbled: raised, nothing changed
    moved = []
    for name in step_dirs:
        child = folder / name
        if not child.is_dir():
            continue
        target = folder / f"{child.name}.incomplete"
        n = 1
        while target.exists():
            n += 1
            target = folder / f"{child.name}.incomplete-{n}"
        child.rename(target)
        moved.append(target.name)
    if dropped or cut:
        tmp = folder / ".summary.csv.tmp"
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            _summary_rows(summary, first_step, csv.writer(fh))
        os.replace(tmp, summary)
    if cut:
        moved.append(f"summary.csv's last row, cut off at the crash (line {cut})")
    return moved


def check_summary(folder: Path, first_step: int) -> None:
    """Whether a resume from ``first_step`` can set summary.csv's rows aside (as
    ``set_aside_incomplete_steps`` will): a ``RunStateError`` naming the line if not."""
    _summary_rows(folder / "summary.csv", first_step)


def _summary_rows(summary: Path, first_step: int, keep: Any = None) -> tuple[int, int]:
    """How many of summary.csv's rows go (those of the steps from ``first_step`` on), and the
    line of a last row the crash cut off (0: none); its header and the rows that stay written
    to ``keep`` (a ``csv.writer``) when given. Read a row at a time: a run of 1,000 hosts x
    100 workloads has 126,000 rows a step."""
    if not summary.exists():
        return 0, 0
    try:
        with open(summary, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next((row for row in reader if row), None)
            if header is None:
                return 0, 0
            if "step_number" not in header:
                raise RunStateError(
                    f"{summary}: line 1 is not its header (no step_number column)")
            if keep is not None:
                keep.writerow(header)
            col = header.index("step_number")
            dropped = cut = 0
            held: tuple[int, list[str]] | None = None  # a row is judged once the next comes

            def judge(line: int, row: list[str], last: bool) -> None:
                nonlocal dropped, cut
                if not (len(row) == len(header) and row[col].isdigit()):
                    if last:  # written when the crash came
                        cut = line
                        return
                    raise RunStateError(
                        f"{summary}: line {line}: not a whole row ({len(row)} cells of "
                        f"{len(header)}, step_number "
                        f"{row[col] if col < len(row) else 'missing'!r}); the run cannot be "
                        "resumed from it as it is")
                if int(row[col]) >= first_step:
                    dropped += 1
                elif keep is not None:
                    keep.writerow(row)

            for row in reader:
                if row:
                    if held is not None:
                        judge(*held, last=False)
                    held = (reader.line_num, row)
            if held is not None:
                judge(*held, last=True)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RunStateError(f"cannot read {summary}: {exc}") from exc
    return dropped, cut
