"""Reading a run folder back (for the report and for summary.json): every file the run
writes, as it is on disk.

Owns finding the folder's parts (its steps, each step's rollup types and instance files,
histograms, ``dfc.csv``, ``measure.csv``, ``cpu.csv``) and reading them into plain tables of
text cells, keeping only the columns asked for (a large run's instance files hold hundreds of
columns). A file that is missing, unreadable or cut short is not an error: a failed run's folder
is read as far as it goes, and what is missing is said so (``RunFolder.problems``; a
``TableError`` from ``load_table`` says why a table could not be read). A folder that is not a
run folder at all is a ``ReportError``. Must not compute what a page or document shows
(``master.results.report.content``, ``master.results.summaryjson``) or write anything.
"""

from __future__ import annotations

import csv
import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from master.analysis import thresholds
from master.analysis.thresholds import Judged
from protocol.errors import IvyError

_STEP_DIR = re.compile(r"^step(\d{4})-(.+)$")
#: A step folder a resume set aside (``master.results.runstate.set_aside_incomplete_steps``).
_SET_ASIDE = re.compile(r"\.incomplete(-\d+)?$")
#: Files and folders of which any one marks a run folder (``master.results.output``'s layout).
RUN_MARKERS = ("state.json", "test.yaml", "resolved.json", "events.csv", "summary.csv")
#: Folders in a step folder that are not rollup types.
NOT_ROLLUPS = frozenset({"histograms"})


class ReportError(IvyError):
    """The report cannot be made: the folder is not a run folder, or the page not written."""


class TableError(Exception):
    """A CSV file of the folder cannot be read as a table: the text says why (``missing``,
    ``cannot be read (...)``, ``empty (no header)``)."""


@dataclass(frozen=True)
class Table:
    """A CSV file's header and rows as text cells (only the columns read); ``cut``: the rows
    left out, their cells not matching the header's (a row cut by a crash)."""

    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    cut: int = 0

    def has(self, name: str) -> bool:
        return name in self.header

    def column(self, name: str) -> list[str]:
        """The cells of column ``name`` (empty strings when the file has no such column)."""
        if name not in self.header:
            return [""] * len(self.rows)
        i = self.header.index(name)
        return [row[i] for row in self.rows]

    def floats(self, name: str) -> npt.NDArray[np.float64]:
        """Column ``name`` as numbers; an empty or non-numeric cell is NaN."""
        cells = self.column(name)
        try:  # the common case, at numpy's speed: every cell a number or empty
            out = np.array([c or "nan" for c in cells], dtype=np.float64)
        except ValueError:
            return np.array([to_float(c) for c in cells], dtype=np.float64)
        out[~np.isfinite(out)] = np.nan
        return out

    def dicts(self, where: Mapping[str, str] | None = None) -> list[dict[str, str]]:
        """The rows as dicts; those whose every ``where`` column holds its text (none when
        the file has no such column), found before any dict is made (a run of 100,000
        workloads has 126,000 summary rows; a report wants its ``all`` rows)."""
        rows: Iterable[tuple[str, ...]] = self.rows
        for name, text in (where or {}).items():
            if name not in self.header:
                return []
            i = self.header.index(name)
            rows = [row for row in rows if row[i] == text]
        return [dict(zip(self.header, row, strict=True)) for row in rows]


def to_float(cell: str) -> float:
    """A cell as a number, NaN when it is empty or not one (``10%`` reads as 10)."""
    text = cell.strip().removesuffix("%")
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def leading_number(cell: str) -> float:
    """The number a cell starts with (``10% at 95%`` → 10), NaN when none."""
    m = re.match(r"\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", cell)
    return float(m.group(1)) if m else math.nan


def picker(keep: Sequence[int]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """A row's cells at ``keep``, as a tuple (``itemgetter``'s speed)."""
    if len(keep) == 1:
        one = keep[0]
        return lambda row: (row[one],)
    if not keep:
        return lambda row: ()
    return operator.itemgetter(*keep)


def read_table(path: Path, columns: Sequence[str] | None = None) -> Table | None:
    """``load_table``, None when the file cannot be read as a table."""
    try:
        return load_table(path, columns)
    except TableError:
        return None


def load_table(path: Path, columns: Sequence[str] | None = None) -> Table:
    """The CSV file at ``path`` (only ``columns`` of it, those it has, when given);
    ``TableError`` when it is missing, unreadable or has no header. A row of the wrong length,
    or a last row without its line end (a row cut by a crash), is left out (``Table.cut``)."""
    header, body, cut, quoted = _lines(path)
    width = len(header)
    wanted = set(columns) if columns is not None else set(header)
    keep = [i for i, name in enumerate(header) if name in wanted]
    pick = picker(keep)
    if quoted:  # quoted cells (commas, line ends inside): the csv module's reading
        try:
            parsed = list(csv.reader(body))
        except csv.Error as exc:
            raise TableError(f"cannot be read ({exc})") from exc
        rows = [pick(row) for row in parsed if len(row) == width]
        cut += len(parsed) - len(rows)
    else:  # plain cells: split each line only as far as the last column kept
        upto = (keep[-1] + 1) if keep else 0
        rows = [pick(line.rstrip("\r\n").split(",", upto)) for line in body
                if line.count(",") == width - 1]
        cut += len(body) - len(rows)
    return Table(tuple(header[i] for i in keep), rows, cut)


@dataclass(frozen=True)
class RowTexts:
    """A CSV file's header and each of its rows as its text (``load_row_texts``), its cells
    made when asked (``cells``): a file of millions of cells held as a string a row."""

    header: tuple[str, ...]
    texts: list[str]
    quoted: bool
    cut: int = 0

    def cells(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        """The cells of the rows ``texts`` (some of ``self.texts``)."""
        if self.quoted:
            return [tuple(row) for row in csv.reader(texts)]
        return [tuple(text.rstrip("\r\n").split(",")) for text in texts]


def load_row_texts(path: Path) -> RowTexts:
    """``load_table`` of every column, each row kept as its text (its lines, as read); the
    same rows left out, the same errors."""
    header, body, cut, quoted = _lines(path)
    width = len(header)
    if quoted:
        texts: list[str] = []
        reader = csv.reader(iter(body))
        start = 0
        try:
            for row in reader:  # a row may span lines: its text is those lines
                if len(row) == width:
                    texts.append("".join(body[start:reader.line_num]))
                else:
                    cut += 1
                start = reader.line_num
        except csv.Error as exc:
            raise TableError(f"cannot be read ({exc})") from exc
    else:
        texts = [line for line in body if line.count(",") == width - 1]
        cut += len(body) - len(texts)
    return RowTexts(tuple(header), texts, quoted, cut)


def _lines(path: Path) -> tuple[list[str], list[str], int, bool]:
    """A CSV file's header, the lines after it (less a last one without its line end, a row
    cut by a crash), how many were so cut, and whether any cell is quoted."""
    try:
        # split at line ends only (\n, \r\n, \r), as the file is read with newline="":
        # str.splitlines also splits at a form feed, U+2028 and the like, which a cell may
        # hold (an error text), and cut its row in two
        with open(path, encoding="utf-8", newline="") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        raise TableError("missing") from None
    except (OSError, UnicodeDecodeError) as exc:  # not text ivypy wrote
        raise TableError(f"cannot be read ({exc})") from exc
    if not lines:
        raise TableError("empty (no header)")
    try:
        header = next(csv.reader(lines[:1]))
    except (csv.Error, StopIteration) as exc:
        raise TableError(f"cannot be read ({exc})") from exc
    body = lines[1:]
    cut = 0
    if body and not body[-1].endswith(("\n", "\r")):
        body.pop()
        cut = 1
    return header, body, cut, any('"' in line for line in lines)


def read_header(path: Path) -> tuple[str, ...]:
    """The header of the CSV file at ``path``; empty when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            return tuple(next(csv.reader(fh), []))
    except (OSError, csv.Error):
        return ()


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, None when missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class StepFolder:
    """One ``stepNNNN-<name>`` folder and what it holds."""

    number: int
    name: str
    path: Path
    #: rollup type → its instance file names (without ``.csv``; ``summary`` left out), sorted
    instances: dict[str, list[str]]

    def instance_path(self, rollup_type: str, instance_file: str) -> Path:
        return self.path / rollup_type / f"{instance_file}.csv"

    def histogram_path(self, rollup_type: str, instance_file: str) -> Path:
        return self.path / "histograms" / rollup_type / f"{instance_file}.csv"


@dataclass
class RunFolder:
    """A run folder's whole-run files and its steps."""

    path: Path
    state: dict[str, Any] | None
    resolved: dict[str, Any] | None
    hosts: Table | None
    luns: Table | None
    events: Table | None
    summary: Table | None
    steps: list[StepFolder]
    #: the planned steps' names (from resolved.json), to tell a step that never ran
    planned_steps: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def test(self) -> str:
        for source in (self.state, self.resolved):
            if source and isinstance(source.get("test"), str):
                return str(source["test"])
        return self.path.parent.name


def step_folder_number(name: str) -> int | None:
    """The step number of a step folder's name (``step0003-<name>``); None for another name
    and for a step folder a resume set aside."""
    m = _STEP_DIR.match(name)
    return None if m is None or _SET_ASIDE.search(name) else int(m.group(1))


def _step_folders(path: Path) -> tuple[list[StepFolder], list[str]]:
    """The step folders, and the names of those a resume set aside (not shown)."""
    steps: list[StepFolder] = []
    aside: list[str] = []
    for d in sorted(path.iterdir()):
        m = _STEP_DIR.match(d.name)
        if not m or not d.is_dir():
            continue
        if _SET_ASIDE.search(d.name):
            aside.append(d.name)
            continue
        instances: dict[str, list[str]] = {}
        for sub in sorted(d.iterdir()):
            if sub.is_dir() and sub.name not in NOT_ROLLUPS:
                instances[sub.name] = sorted(
                    f.stem for f in sub.iterdir() if f.suffix == ".csv" and f.stem != "summary")
        steps.append(StepFolder(int(m.group(1)), m.group(2), d, instances))
    return steps, aside


def open_run_folder(path: Path) -> RunFolder:
    """The run folder at ``path``, read as far as it goes; ``ReportError`` when ``path`` is
    not a run folder."""
    if not path.is_dir():
        raise ReportError(f"{path}: not a run folder (no such directory)")
    try:
        steps, aside = _step_folders(path)
    except OSError as exc:
        raise ReportError(f"{path}: cannot read the folder: {exc.strerror or exc}") from exc
    if not steps and not any((path / name).exists() for name in RUN_MARKERS):
        runs = [d.name for d in sorted(path.iterdir())
                if d.is_dir() and (d / "state.json").exists()]
        hint = f"; it holds run folders, such as {runs[-1]}" if runs else ""
        raise ReportError(f"{path}: not a run folder (no state.json, test.yaml, summary.csv "
                          f"or step folders){hint}")
    run = RunFolder(
        path=path, state=read_json(path / "state.json"),
        resolved=read_json(path / "resolved.json"), hosts=read_table(path / "hosts.csv"),
        luns=read_table(path / "luns.csv"), events=read_table(path / "events.csv"),
        summary=read_table(path / "summary.csv"), steps=steps)
    if run.resolved and isinstance(run.resolved.get("steps"), list):
        run.planned_steps = [str(s.get("name", "")) for s in run.resolved["steps"]
                             if isinstance(s, dict)]
    for name, value in (("state.json", run.state), ("hosts.csv", run.hosts),
                        ("luns.csv", run.luns), ("events.csv", run.events),
                        ("summary.csv", run.summary)):
        if value is None:
            run.problems.append(f"{name} is missing or unreadable")
        elif isinstance(value, Table) and value.cut:
            run.problems.append(f"{name}: {value.cut} row{'s' * (value.cut != 1)} of the wrong "
                                "width left out (cut short by a crash, or edited)")
    run.problems += [f"{name}: set aside by a resume (not shown)" for name in aside]
    done = {s.number for s in steps}
    for number, name in enumerate(run.planned_steps):
        if number not in done:
            run.problems.append(f"step {number} {name}: no step folder (it did not run)")
    return run


def thresholds_judged(folder: Path) -> list[Judged]:
    """Every threshold result of the run at ``folder`` (``summary_judged`` of its
    summary.csv)."""
    return summary_judged(read_table(folder / "summary.csv", [
        "step_name", "rollup_type", "rollup_instance", thresholds.COLUMN]))


def summary_judged(table: Table | None) -> list[Judged]:
    """Every threshold result of a run's summary.csv: its ``thresholds`` cells read back in
    row order (none when the table or the column is missing)."""
    if table is None or not table.has(thresholds.COLUMN):
        return []
    at = table.header.index(thresholds.COLUMN)
    judged = Table(table.header, [row for row in table.rows if row[at]])  # the rows judged
    return [j for row in judged.dicts()
            for j in thresholds.parse_cell(row[thresholds.COLUMN], row.get("step_name", ""),
                                           row.get("rollup_type", ""),
                                           row.get("rollup_instance", ""))]
