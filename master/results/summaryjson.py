"""``summary.json``: a run folder's results as one machine-readable document.

Owns the document's fields (``docs/summary.schema.json``, ``SCHEMA_VERSION``), building it from
what the run folder holds (``state.json``, ``resolved.json``, ``hosts.csv``, ``luns.csv``,
``events.csv``, ``summary.csv`` and the step folders), and writing it whole (a piece at a
time into a temporary file beside it, synced, renamed over the last one). Built from the
folder alone, it is the same whatever ended the run (complete, failed, interrupted, a master
that died) and can be built again from the folder at any time.

It never raises for what the folder holds: a file missing, unreadable or garbled leaves its
part empty and says so in ``problems``. It must not run anything, change any other file of
the folder, or compute metrics (every number is a cell of the run's own CSV files).
"""

from __future__ import annotations

import contextlib
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from master.analysis import thresholds
from master.results.output import RunOutput
from master.results.runfolder import (
    RowTexts,
    Table,
    TableError,
    load_row_texts,
    load_table,
    step_folder_number,
)
from master.results.runstate import RunState, RunStateError, master_alive, read_state
from master.results.wholefile import whole_file
from protocol.errors import OutputError
from protocol.version import PROTOCOL_VERSION, __version__

SUMMARY_JSON = "summary.json"
_T = TypeVar("_T", Table, RowTexts)
#: The document's layout. Raised when a field is removed or renamed or changes its type or
#: meaning; fields (and summary.csv columns) are added without raising it (docs/summary-json.md).
SCHEMA_VERSION = 1
SCHEMA_ID = f"urn:ivypy:schema:summary:{SCHEMA_VERSION}"

Scalar = str | int | float | bool | None

#: summary.csv columns that hold text whatever they look like; ``valid`` and
#: ``measure_attained`` are booleans; every other cell is typed by what it holds
SUMMARY_TEXT = frozenset({"step_name", "rollup_type", "rollup_instance", "invalid_reason",
                          "measure_criterion", "measure_values", thresholds.COLUMN})
SUMMARY_BOOLEAN = frozenset({"valid", "measure_attained"})
#: summary.csv columns said once per step, or as the keys of its rollups, not per instance
SUMMARY_KEYS = ("step_number", "step_name", "rollup_type", "rollup_instance")
#: hosts.csv and luns.csv: numbers where the column name carries a unit, and these
UNIT_SUFFIXES = ("_ns", "_us", "_ms", "_s", "_bytes", "_per_s", "_pct", "_KiB")
NUMERIC_NAMES = frozenset({"cores", "slave_pid", "clock_samples", "rotational"})
LUN_BOOLEAN = frozenset({"selected", "allow_write", "shared"})

_INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
#: the cell texts whose ``typed_cell`` value's JSON text is the cell's own: a boolean; an
#: integer without leading zeros (not ``-0``); a decimal point with no trailing zeros but
#: ``.0``, at most 15 digits (so no other decimal of 15 digits or fewer is the same double, and
#: ``float.__repr__``, the shortest text that reads back, is this one), and at least 1e-4
#: (``repr`` writes smaller ones with an exponent, as it does from 1e16 up, past 15 digits). A
#: run's cells are nearly all such texts, written by its own formatter.
_OWN = (r"-?(?=[\d.]{3,16}(?:\x1f|\Z))(?:[1-9]\d*\.(?:\d*[1-9]|0)|0\.0{0,3}[1-9](?:\d*[1-9])?"
        r"|0\.0)|-?[1-9]\d*|0|true|false")
_own_json = re.compile(_OWN).fullmatch
#: cells joined by ``\x1f`` (which no cell of a number column holds), each its own JSON text
#: or empty
_OWN_OR_EMPTY_CELLS = re.compile(f"(?:{_OWN})?(?:\x1f(?:{_OWN})?)*").fullmatch


# ---------------------------------------------------------------------- cells and texts
def typed_cell(cell: str) -> Scalar:
    """A CSV cell as JSON: empty → null, ``true``/``false`` → boolean, a decimal number →
    number (an integer when written as one), anything else the text itself."""
    if cell == "":
        return None
    if cell in ("true", "false"):
        return cell == "true"
    if _INTEGER.fullmatch(cell):
        return int(cell)
    if _NUMBER.fullmatch(cell):
        value = float(cell)
        return value if value - value == 0 else cell  # inf (an overflow) stays text
    return cell


def text_cell(cell: str) -> str | None:
    return cell if cell != "" else None


def boolean_cell(cell: str) -> Scalar:
    return True if cell == "true" else False if cell == "false" else text_cell(cell)


def unit_column(name: str) -> bool:
    """Whether a hosts.csv or luns.csv column holds numbers: its name carries a unit."""
    return name.endswith(UNIT_SUFFIXES) or name in NUMERIC_NAMES


def split_reasons(text: str) -> list[str]:
    """``invalid_reason`` cut into its reasons: joined by ``"; "`` outside parentheses (a
    reason may hold ``"; "`` inside its own, as the measure criteria it lists)."""
    out: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    out.append(text[start:])
    return [r.strip() for r in out if r.strip()]


def utc_text(local: str) -> str | None:
    """``2026-11-25T14:00:00+0100`` (state.json's times) as UTC ISO 8601
    ``2026-11-25T13:00:00Z``; None for a text that is not such a time."""
    try:
        when = datetime.strptime(local, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------------- reading the folder
@dataclass
class _Folder:
    """What the builder read, and what it could not."""

    path: Path
    problems: list[str] = field(default_factory=list)

    def table(self, name: str, required: Sequence[str] = (), expected: bool = True
              ) -> list[dict[str, str]]:
        """The rows of a CSV file of the folder as dicts (``tuples``)."""
        table = self.tuples(name, required, expected)
        return table.dicts() if table is not None else []

    def tuples(self, name: str, required: Sequence[str] = (), expected: bool = True
               ) -> Table | None:
        """A CSV file of the folder, its rows as tuples; None when it is missing (a problem
        when it is ``expected``: a run that ended early never wrote some), unreadable, or
        lacks a ``required`` column. A row whose cells do not match the header (a row cut by
        a crash) is left out and counted as a problem."""
        return self._loaded(name, load_table, required, expected)

    def row_texts(self, name: str, required: Sequence[str] = (), expected: bool = True
                  ) -> RowTexts | None:
        """``tuples``, each row kept as its text (``load_row_texts``)."""
        return self._loaded(name, load_row_texts, required, expected)

    def _loaded(self, name: str, load: Callable[[Path], _T], required: Sequence[str],
                expected: bool) -> _T | None:
        try:
            table = load(self.path / name)
        except TableError as exc:
            if str(exc) != "missing" or expected:
                self.problems.append(f"{name}: {exc}")
            return None
        missing = [c for c in required if c not in table.header]
        if missing:
            self.problems.append(f"{name}: no column {', '.join(missing)} in its header")
            return None
        if table.cut:
            self.problems.append(f"{name}: {table.cut} row(s) left out, their cells do not "
                                 f"match the header's {len(table.header)}")
        return table

    def json_object(self, name: str) -> dict[str, Any] | None:
        path = self.path / name
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.problems.append(f"{name}: missing")
            return None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.problems.append(f"{name}: cannot be read ({exc})")
            return None
        if not isinstance(raw, dict):
            self.problems.append(f"{name}: not a JSON object")
            return None
        return raw

    def state(self) -> RunState | None:
        try:
            return read_state(self.path)
        except RunStateError as exc:
            self.problems.append(f"state.json: {exc}")
            return None


def _typed_rows(rows: Iterable[Mapping[str, str]],
                kind_of: Callable[[str], Callable[[str], Any]]) -> list[dict[str, Any]]:
    """The rows with their cells typed by their columns' kinds. A kind's answer for a cell
    text is kept (a run's cells repeat: zeros, empty cells, percentiles at bucket bounds), up
    to ``_MEMO_CELLS`` texts a kind (a run of 10,000 workloads: 3.7 million cells)."""
    kinds: dict[str, tuple[Callable[[str], Any], dict[str, Any]]] = {}
    memos: dict[Callable[[str], Any], dict[str, Any]] = {}
    out = []
    for row in rows:
        typed = {}
        for name, cell in row.items():
            got = kinds.get(name)
            if got is None:
                kind = kind_of(name)
                got = kinds[name] = (kind, memos.setdefault(kind, {}))
            kind, memo = got
            try:
                typed[name] = memo[cell]
            except KeyError:
                value = typed[name] = kind(cell)
                if len(memo) < _MEMO_CELLS and not isinstance(value, list):
                    memo[cell] = value
        out.append(typed)
    return out


_MEMO_CELLS = 1 << 18


def _summary_kind(name: str) -> Callable[[str], Any]:
    return (text_cell if name in SUMMARY_TEXT else boolean_cell if name in SUMMARY_BOOLEAN
            else typed_cell)


def _host_kind(name: str) -> Callable[[str], Any]:
    return typed_cell if unit_column(name) else text_cell


def _lun_kind(name: str) -> Callable[[str], Any]:
    if name in LUN_BOOLEAN:
        return boolean_cell
    if name == "used_by":
        return lambda cell: cell.split()
    if name == "in_use":
        return lambda cell: [r for r in cell.split("; ") if r]
    return _host_kind(name)


def _event_counts(rows: Iterable[Mapping[str, str]]) -> dict[str, int]:
    counts = {"info": 0, "warning": 0, "error": 0}
    for r in rows:
        level = r.get("level", "").lower()
        if level in counts:
            counts[level] += 1
    return counts


# ---------------------------------------------------------------------- the document
def build(folder: Path, lazy: bool = False) -> dict[str, Any]:
    """The summary document of the run folder ``folder`` (see the module docstring). With
    ``lazy``, its steps are made one at a time as they are read (``_Steps``: a run of 1,000
    hosts x 100 workloads has 126,000 summary rows a step), the thresholds' count once they
    were (``_Later``), and each rollup instance's metrics are a mapping that types its cells
    when read and that ``json_text`` writes straight from their texts, not a dict: the
    document ``write_json`` writes, not one to read twice."""
    f = _Folder(folder)
    state = f.state()
    resolved = f.json_object("resolved.json")
    # what the run must have written: every table once a step started its I/O, summary.csv
    # once a step completed (a run that failed before has none of them)
    ran = _steps_with_folders(folder)
    done = state is not None and any(n <= state.last_complete_step for n in ran)
    events = f.table("events.csv", ("level",), expected=bool(ran))
    summary = f.row_texts("summary.csv", ("step_number", "rollup_type", "rollup_instance"),
                          expected=done) or RowTexts(SUMMARY_KEYS, [], False)
    hosts = _typed_rows(f.table("hosts.csv", ("host",), expected=bool(ran)), _host_kind)
    luns = _typed_rows(f.table("luns.csv", ("host", "lun"), expected=bool(ran)), _lun_kind)
    names = _step_names(resolved, f)
    steps = _Steps(f, state, names, summary, events, lazy)
    test = state.test if state is not None else str((resolved or {}).get("test") or "")
    description = (resolved or {}).get("description")
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": {"ivypy_version": __version__, "protocol_version": PROTOCOL_VERSION},
        "test": test or None,
        "description": description if isinstance(description, str) and description else None,
        "run_folder": str(folder.absolute()),
        "test_sha256": state.test_sha256 if state is not None else None,
        "ivypy_version": state.ivypy_version if state is not None else None,
        "controller": state.controller if state is not None else None,
        "started_utc": _time(state.started, "started", f) if state is not None else None,
        "ended_utc": (_time(state.updated, "updated", f)
                      if state is not None and state.state != "running" else None),
        "resumed_utc": [t for t in (_time(r, "resumes", f) for r in state.resumes) if t]
        if state is not None and isinstance(state.resumes, list) else [],
        "outcome": _outcome(state),
        "steps_total": len(steps),
        "hosts": hosts,
        "luns": luns,
        "events": _event_counts(events),
        "steps": steps if lazy else list(steps),
        "thresholds": _Later(steps.threshold_counts) if lazy else steps.threshold_counts(),
        "problems": f.problems,
    }


def _steps_with_folders(folder: Path) -> set[int]:
    """The numbers of the steps whose folder is there (not those a resume set aside)."""
    try:
        names = [p.name for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return set()
    return {n for n in map(step_folder_number, names) if n is not None}


def _time(text: Any, name: str, f: _Folder) -> str | None:
    out = utc_text(text) if isinstance(text, str) else None
    if out is None:
        f.problems.append(f"state.json: {name} {text!r} is not a time")
    return out


def _outcome(state: RunState | None) -> dict[str, Any]:
    if state is None:
        return {"state": "unknown", "exit_code": None, "reason": None,
                "last_complete_step": None}
    shown = "dead" if state.state == "running" and not master_alive(state) else state.state
    return {"state": shown, "exit_code": state.exit_code, "reason": state.reason or None,
            "last_complete_step": state.last_complete_step}


def _step_names(resolved: Mapping[str, Any] | None, f: _Folder) -> list[str] | None:
    if resolved is None:
        return None
    steps = resolved.get("steps")
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in steps):
        f.problems.append("resolved.json: no list of steps with their names")
        return None
    return [s["name"] for s in steps]


class _Steps:
    """The document's steps, each made from its rows of summary.csv when it is read (and not
    kept: a run of many steps at 100,000 workloads would hold millions of rows), in order;
    the outcomes of their threshold results counted as they are, and a brief of each (the
    step less its rollups) kept."""

    def __init__(self, f: _Folder, state: RunState | None, names: list[str] | None,
                 summary: RowTexts, events: Sequence[Mapping[str, str]], lazy: bool) -> None:
        self.f, self.state, self.summary, self.lazy = f, state, summary, lazy
        self.rows_of: dict[int, list[str]] = {}
        bad = 0
        j = summary.header.index("step_number")
        for text in summary.texts:
            head = text.rstrip("\r\n").split(",", j + 1)[:j + 1]
            cell = head[j] if '"' not in ",".join(head) else summary.cells([text])[0][j]
            try:
                self.rows_of.setdefault(int(cell), []).append(text)
            except ValueError:
                bad += 1
        if bad:
            f.problems.append(f"summary.csv: {bad} row(s) left out, their step_number is not "
                              "a number")
        self.events_of = _events_by_step(events)
        if names is None:  # the test's steps unknown: those the folder shows
            name_of = _column(summary.header, "step_name")
            known = {n: name_of(summary.cells(texts[:1])[0])
                     for n, texts in self.rows_of.items() if n >= 0}
            total = max([*known, (state.steps_total - 1) if state is not None else -1],
                        default=-1)
            names = [known.get(n, "") for n in range(total + 1)]
        self.names = names
        self.outcomes: list[str] = []
        self.briefs: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.outcomes.clear()
        self.briefs.clear()
        for n, name in enumerate(self.names):
            rows = self.summary.cells(self.rows_of.get(n, []))
            step = _step(self.f, self.state, n, name, self.summary.header, rows,
                         self.events_of.get(str(n), []), self.lazy)
            del rows
            self.outcomes += [j["outcome"] for j in step["thresholds"]]
            self.briefs.append({k: v for k, v in step.items() if k != "rollups"})
            yield step
            del step  # not held while the next one is made

    def threshold_counts(self) -> dict[str, int]:
        """How many threshold results the steps read so far have, and how many of them
        passed, failed or could not be told."""
        return {"judged": len(self.outcomes), **{k: self.outcomes.count(k)
                                                 for k in ("passed", "failed", "untold")}}


class _Later:
    """A value of the document worked out when it is written (``_Steps.threshold_counts``,
    once the steps before it were)."""

    def __init__(self, value: Callable[[], Any]) -> None:
        self.value = value


def _column(header: Sequence[str], name: str) -> Callable[[Sequence[str]], str]:
    """A row's cell of column ``name``; "" when the header has no such column."""
    if name not in header:
        return lambda row: ""
    return operator.itemgetter(list(header).index(name))


def _events_by_step(events: Iterable[Mapping[str, str]]) -> dict[str, list[Mapping[str, str]]]:
    """events.csv's rows by their ``step`` cell; a resume at step N (its ``resume`` row names
    N) drops the rows of steps N on before it: they belong to the attempt set aside."""
    out: dict[str, list[Mapping[str, str]]] = {}
    for e in events:
        if e.get("kind") == "resume" and e.get("step", "").isdigit():
            first = int(e["step"])
            out = {s: rs for s, rs in out.items() if not (s.isdigit() and int(s) >= first)}
        out.setdefault(e.get("step", ""), []).append(e)
    return out


def _step(f: _Folder, state: RunState | None, number: int, name: str, header: Sequence[str],
          rows: Sequence[tuple[str, ...]], events: Sequence[Mapping[str, str]],
          lazy: bool) -> dict[str, Any]:
    folder = RunOutput.step_dir(number, name)
    ran = (f.path / folder).is_dir()
    if state is not None and number <= state.last_complete_step:
        status = "complete"
    elif not ran and not rows:
        status = "not_run"
    else:
        status = "incomplete" if state is not None else "unknown"
    prefix = f"step {name} invalid: "
    flagged = [e.get("message", "").removeprefix(prefix) for e in events
               if e.get("kind") == "validation" and e.get("message", "").startswith(prefix)]
    rollups: dict[str, dict[str, Mapping[str, Any]]] = {}
    columns = _InstanceColumns(header)
    type_of, instance_of = _column(header, "rollup_type"), _column(header, "rollup_instance")
    for r in rows:
        rtype, inst = type_of(r), instance_of(r)
        of_type = rollups.setdefault(rtype, {})
        if inst in of_type:
            f.problems.append(f"summary.csv: step {number} {rtype}={inst} twice; the last kept")
        row = _InstanceRow(columns, columns.cells_of(r))
        of_type[inst] = row if lazy else dict(row)
    verdicts = [inst.get("valid") for of_type in rollups.values() for inst in of_type.values()]
    reason_of = _column(header, "invalid_reason")
    reasons = _unique([*(x for r in rows for x in split_reasons(reason_of(r))),
                       *(x for m in flagged for x in split_reasons(m))])
    if flagged or False in verdicts:
        valid: bool | None = False
    elif verdicts and all(v is True for v in verdicts):
        valid = True
    else:
        valid = None
    judged_of = _column(header, thresholds.COLUMN)
    judged = [{"expr": j.text, "rollup_type": j.rollup, "rollup_instance": j.instance,
               "outcome": j.outcome.lower(), "detail": j.detail}
              for r in rows for j in thresholds.parse_cell(
                  judged_of(r), name, type_of(r), instance_of(r))]
    return {"number": number, "name": name, "folder": folder if ran else None,
            "status": status, "valid": valid, "invalid_reasons": reasons,
            "events": _event_counts(events), "thresholds": judged, "rollups": rollups}


class _InstanceColumns:
    """The columns of a step's summary rows said per instance (``SUMMARY_KEYS`` left out),
    each typed by its kind (``_summary_kind``), and each cell text's JSON text, worked out once
    (a run of 100,000 workloads has 17 million cells; the same texts recur)."""

    def __init__(self, header: Sequence[str]) -> None:
        self.names = tuple(n for n in header if n not in SUMMARY_KEYS)
        self.at = {n: j for j, n in enumerate(self.names)}
        self.kinds = [_summary_kind(n) for n in self.names]
        self.numbers = [kind is typed_cell for kind in self.kinds]
        self.prefixes = [_encode(n) + ": " for n in self.names]
        memos: dict[Callable[[str], Any], dict[str, str]] = {typed_cell: {"": "null"}}
        self.memos = [memos.setdefault(kind, {}) for kind in self.kinds]
        kept = [j for j, n in enumerate(header) if n not in SUMMARY_KEYS]
        #: a summary.csv row's cells of these columns
        self.cells_of: Callable[[Sequence[str]], tuple[str, ...]] = (
            operator.itemgetter(*kept) if len(kept) > 1
            else lambda row: tuple(row[j] for j in kept))
        numbers = [j for j, number in enumerate(self.numbers) if number]
        #: a row's cells of number columns (a tuple), and the other columns' places
        self.number_cells = (operator.itemgetter(*numbers) if len(numbers) > 1
                             else lambda cells: tuple(cells[j] for j in numbers))
        self.others = [j for j, number in enumerate(self.numbers) if not number]

    def json(self, cells: tuple[str, ...]) -> str:
        """One instance's object, as ``json_text`` writes a dict of its typed cells (the
        texts looked up and joined by C loops: ``map``). A row whose number cells are each
        empty or their own JSON text (``_OWN_OR_EMPTY_CELLS``, one match over the row) takes
        them as they are; its other cells, and every cell of another row, are typed and
        encoded once per text (``_MEMO_CELLS`` a kind)."""
        texts: list[str | None]
        if _OWN_OR_EMPTY_CELLS("\x1f".join(self.number_cells(cells))):
            texts = list(map(dict.get, self.memos, cells, cells))
            for j in self.others:
                text = self.memos[j].get(cells[j])
                texts[j] = text if text is not None else self._text(j, cells[j])
        else:
            texts = list(map(dict.get, self.memos, cells))
            j = 0
            with contextlib.suppress(ValueError):  # none left
                while True:  # the cell texts not seen before, found by a C search
                    j = texts.index(None, j)
                    texts[j] = self._text(j, cells[j])
                    j += 1
        return "{" + ", ".join(map(operator.add, self.prefixes, texts)) + "}"

    def _text(self, j: int, cell: str) -> str:
        """Column ``j``'s ``cell`` as JSON text, kept for its next time."""
        text = cell if self.numbers[j] and _own_json(cell) else _encode(self.kinds[j](cell))
        if len(self.memos[j]) < _MEMO_CELLS:
            self.memos[j][cell] = text
        return text


class _InstanceRow(Mapping[str, Any]):
    """A step's summary row of one instance: its cells typed when read, and written as JSON
    straight from their texts (``_InstanceColumns.json``)."""

    __slots__ = ("_cells", "_columns")

    def __init__(self, columns: _InstanceColumns, cells: tuple[str, ...]) -> None:
        self._columns, self._cells = columns, cells

    def __getitem__(self, key: str) -> Any:
        j = self._columns.at[key]
        return self._columns.kinds[j](self._cells[j])

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns.names)

    def __len__(self) -> int:
        return len(self._columns.names)

    def json(self) -> str:
        return self._columns.json(self._cells)


# ---------------------------------------------------------------------- writing it
def json_text(value: Any, indent: str = "") -> str:
    """``value`` as JSON text, objects and arrays indented two spaces a level, but one whose
    members are all scalars on one line (a rollup instance's metrics, a host, the outcome):
    readable, and written by the json module's C encoder, which ``indent=`` would turn off
    (a run of 10,000 workloads has 10,000 instances a step). Made as pieces joined once
    (``write_json`` writes them to a file as they come)."""
    out: list[str] = []
    _json_pieces(value, indent, out.append)
    return "".join(out)


def write_json(value: Any, fh: BinaryIO) -> None:
    """``json_text(value)`` and a newline into ``fh`` as UTF-8, a piece at a time: a document
    of 100,000 workloads is 557 MB of text, which made whole, joined and encoded was held
    three times over."""
    pieces: list[str] = []
    size = 0

    def add(piece: str) -> None:
        nonlocal size
        pieces.append(piece)
        size += len(piece)
        if size >= _CHUNK_CHARS:
            fh.write("".join(pieces).encode("utf-8"))
            pieces.clear()
            size = 0

    _json_pieces(value, "", add)
    add("\n")
    fh.write("".join(pieces).encode("utf-8"))


#: how much of the document ``write_json`` puts together before it writes it
_CHUNK_CHARS = 1 << 20


def _json_pieces(value: Any, indent: str, out: Callable[[str], object]) -> None:
    if isinstance(value, _InstanceRow):
        out(value.json())
    elif isinstance(value, _Later):
        _json_pieces(value.value(), indent, out)
    elif isinstance(value, _Steps):  # each step made as it is written
        _json_array(iter(value), len(value), indent, out)
    elif isinstance(value, dict) and not _flat(value.values()):
        inner = indent + "  "
        out("{\n")
        for i, (k, v) in enumerate(value.items()):
            out(f",\n{inner}{_encode(str(k))}: " if i else f"{inner}{_encode(str(k))}: ")
            _json_pieces(v, inner, out)
        out(f"\n{indent}}}")
    elif isinstance(value, list) and not _flat(value):
        _json_array(iter(value), len(value), indent, out)
    else:
        out(_encode(value))


def _json_array(items: Iterator[Any], n: int, indent: str, out: Callable[[str], object]
                ) -> None:
    """The ``n`` values ``items`` gives as a JSON array, one a line, each held only while it
    is written (a step of ``_Steps`` is made when it is taken)."""
    if not n:
        out("[]")
        return
    inner = indent + "  "
    out("[\n")
    for i in range(n):
        out(f",\n{inner}" if i else inner)
        _json_pieces(next(items), inner, out)
    out(f"\n{indent}]")


#: one encoder for every value (``json.dumps`` with an argument makes an encoder a call)
_encode = json.JSONEncoder(allow_nan=False).encode
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat(values: Iterable[Any]) -> bool:
    return set(map(type, values)) <= _SCALARS


def write_summary_json(folder: Path) -> dict[str, Any]:
    """Build the folder's summary document, replace ``summary.json`` with it whole (a reader
    sees the old one or the new), and return it, each step without its ``rollups`` (they
    were made one step at a time as they were written). ``OutputError`` when it cannot be
    written."""
    path = folder / SUMMARY_JSON
    doc = build(folder, lazy=True)
    try:
        with whole_file(path) as fh:
            write_json(doc, fh)
    except OSError as exc:
        raise OutputError(str(path), exc) from exc
    steps: _Steps = doc["steps"]
    return {**doc, "steps": steps.briefs, "thresholds": steps.threshold_counts()}
