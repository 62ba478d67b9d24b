"""The gathers of a run: when each source runs, and what its samples become in the run folder.

Owns, on the controller: the ``config_command`` of each source (once, at the start, written as
``gather/<source>/config/<element_type>.csv``); per step, a first gather of every source before
the step's files are made (``probe``: it times the source, and its metrics with the declared
ones fix the step's joined columns, ``gather.<source>.<element_type>.<metric>``), then one task
per source that gathers just before the step's start (the counters' first base) and just in
time before the end of each subinterval k (its recent duration and a margin ahead); and, when
the master records subinterval k (``record``), the rows of k: ``gather/<source>/<element_type>.csv``
(a row per element; ``-2``... when element types make the same file name),
``gather/<source>/non_participating.csv`` (the aggregate of the elements
under no LUN of the step), a row per source in interlock.csv, and the joined values per rollup
instance, which the recorder writes as columns of the rollup rows and summaries and measure
and DFC read. A gather that failed, or is not in when k is recorded, leaves k's cells empty
with an event: the run never waits for a gather.

This module must not talk to hosts, decide when a step ends, write rollup rows, or parse
outputs (``lines``, ``promtext``); the run calls it through ``probe``, ``start_step``,
``record``, ``end_step``, ``close``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from master.config.gather import GATHER_PREFIX, GatherSource
from master.gather.join import JoinPlan, aggregate, plan_join
from master.gather.lines import parse_lines
from master.gather.promtext import parse_exposition
from master.gather.rates import Key, Sample, values_of
from master.gather.runner import GatherFailed, http_get, run_command
from master.results.csvfiles import safe_name
from master.results.output import RunOutput
from master.results.schema import INTERLOCK_COLUMNS
from protocol.errors import PreflightError

__all__ = ["CONFIG_TIMEOUT_S", "Gathering", "Outcome", "declared_metrics", "lead_ns"]

log = logging.getLogger(__name__)

#: how long a ``config_command`` may run (once, before the first step)
CONFIG_TIMEOUT_S = 60.0
#: durations the lead looks back over
_RECENT = 5
_NON_PARTICIPATING = "non_participating"


def lead_ns(recent_ns: Sequence[int], sub_ns: int, timeout_ns: int) -> int:
    """How long before a boundary a gather starts: twice its longest recent duration and a
    margin (2 ms and 5 % of a subinterval), at most its timeout; its whole timeout before any
    (the first gather, at the step's start, may be a cold start of its program). The master
    records a subinterval a few ms after its end: a gather must be in by then, and a Python
    script's start-up (about 60 ms) took over 1.5 times as long now and then on a loaded
    2-core machine."""
    if not recent_ns:
        return timeout_ns
    return min(max(recent_ns) * 2 + 2_000_000 + sub_ns // 20, timeout_ns)


def declared_metrics(cfg: GatherSource, focus: Sequence[str] = ()) -> set[str]:
    """The metrics of ``cfg``'s joined element type known before any gather: a command's
    ``counters``, a Prometheus source's literal ``metrics`` (of that element type), and those
    ``focus`` names (``gather.<source>.<element_type>.<metric>``) that point at it."""
    if cfg.join is None:
        return set()
    out = set(cfg.counters)
    if cfg.kind == "prometheus" and cfg.element_type == cfg.join.element_type:
        out |= {p.text for p in cfg.metrics if not p.regex}
    prefix = f"{GATHER_PREFIX}{cfg.name}.{cfg.join.element_type}."
    out |= {f.removeprefix(prefix) for f in focus if f.startswith(prefix)}
    return out


class Recorder(Protocol):
    """What ``start_step`` reads of the step's ``master.run.recorder.StepRecorder``."""

    dir: str
    ids: list[str]
    number: int
    name: str

    @property
    def groupings(self) -> Mapping[str, Any]: ...

    @property
    def workloads(self) -> Mapping[str, Any]: ...


@dataclass
class Outcome:
    """One gather: when it ran (master ns), and its sample or why there is none."""

    started_ns: int
    ended_ns: int
    sample: Sample | None = None
    counters: frozenset[str] = frozenset()
    failure: str = ""


@dataclass
class _Source:
    cfg: GatherSource
    recent_ns: collections.deque[int] = field(default_factory=lambda: collections.deque(
        maxlen=_RECENT))
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    running: int | None = None  # the subinterval whose gather is running
    previous: Sample | None = None
    headers: dict[str, list[str]] = field(default_factory=dict)  # element type → metrics
    #: element type → its file's name in the step's ``gather/<source>/`` (``_file_of``)
    files: dict[str, str] = field(default_factory=dict)
    #: the joined metrics of the step (fixed by ``probe``): its columns in the rollup rows
    joined_header: list[str] = field(default_factory=list)
    plans: dict[frozenset[str], tuple[dict[str, JoinPlan], list[str]]] = field(
        default_factory=dict)
    warned: set[str] = field(default_factory=set)

    def column_names(self) -> list[str]:
        join = self.cfg.join
        if join is None:
            return []
        return [f"{GATHER_PREFIX}{self.cfg.name}.{join.element_type}.{m}"
                for m in self.joined_header]


@dataclass
class _Step:
    number: int
    name: str
    dir: str
    start_ns: int
    sub_ns: int
    groupings: dict[str, tuple[tuple[str, ...], Sequence[int]]]
    lun_values: dict[str, list[str | None]]  # lun_attribute → each workload's value
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Gathering:
    """The run's gather sources; see the module docstring."""

    def __init__(self, sources: Sequence[GatherSource], output: RunOutput,
                 event: Callable[..., None], clock: Callable[[], int]) -> None:
        self.sources = [_Source(s) for s in sources]
        self.output = output
        self.event = event
        self.clock = clock
        #: source → element type → element instance → attribute → value
        self.attributes: dict[str, dict[str, dict[str, dict[str, str]]]] = {}
        self.step: _Step | None = None

    # ------------------------------------------------------------------ config
    async def configure(self) -> None:
        """Run every ``config_command`` once (concurrently) and write its CSVs."""
        await asyncio.gather(*(self._configure(s.cfg) for s in self.sources
                               if s.cfg.config_argv))

    async def _configure(self, cfg: GatherSource) -> None:
        why = ""
        try:
            text = await run_command(cfg.config_argv, CONFIG_TIMEOUT_S)
            readings, problems = parse_lines(text, numeric=False)
        except GatherFailed as exc:
            why = exc.reason
        except Exception as exc:  # a bug here must not end the run: no attributes
            log.exception("gather %s: config_command failed unexpectedly", cfg.name)
            why = _unexpected(cfg.name, exc)
        if why:
            self.event("WARNING", f"gather {cfg.name}: config_command: {why}; its "
                       "elements have no attributes", kind="gather")
            return
        for problem in problems:
            self.event("WARNING", f"gather {cfg.name}: config_command: {problem}",
                       kind="gather")
        by_type: dict[str, dict[str, dict[str, str]]] = {}
        for r in readings:
            by_type.setdefault(r.element_type, {}).setdefault(r.element_instance, {})[
                r.metric] = str(r.value)
        self.attributes[cfg.name] = by_type
        taken: set[str] = set()
        for element_type in sorted(by_type, key=_plain_first):
            elements = by_type[element_type]
            name = _file_name(element_type, taken)
            taken.add(name)
            relative = f"gather/{safe_name(cfg.name)}/config/{name}"
            if self.output.resuming and (self.output.folder / relative).exists():
                continue  # a resumed run keeps the configuration its first start wrote
            column = _metric_columns(sorted({a for attrs in elements.values() for a in attrs}),
                                     ("element_instance",))
            moved = [f"{a} as {c}" for a, c in column.items() if a != c]
            if moved:
                self.event("WARNING", f"gather {cfg.name}: config_command: {element_type} "
                           f"attributes written {', '.join(moved)}: their names are columns "
                           "of the file's own", kind="gather")
            table = self.output.table(relative, ["element_instance", *column.values()])
            table.write_many([{"element_instance": e, **{column[a]: v for a, v in attrs.items()}}
                              for e, attrs in sorted(elements.items())])

    async def preflight(self) -> None:
        """Every source gathered once, together, before any I/O: a source whose sample fails
        (no answer, an error, nothing it could read) refuses the run (``PreflightError``, exit
        2) unless it is ``optional``, which is warned about and goes on (its cells empty
        where it keeps failing). A run that would steer or measure on a metric that never
        came would report numbers no one gathered."""
        outs = await asyncio.gather(*(self._one(s.cfg) for s in self.sources))
        refused = []
        for s, out in zip(self.sources, outs, strict=True):
            if out.sample is not None:
                continue
            why = (f"prometheus {s.cfg.url}: {out.failure}" if s.cfg.kind == "prometheus"
                   else out.failure)
            if s.cfg.optional:
                self.event("WARNING", f"gather {s.cfg.name}: its first sample failed ({why}); "
                           "optional, so the run goes on without it", kind="gather")
            else:
                refused.append(f"gather[{self.sources.index(s)}] {s.cfg.name} (line "
                               f"{s.cfg.line}): its first sample failed ({why})")
        if refused:
            raise PreflightError("; ".join(refused) + ": fix the source, or say optional: "
                                 "true on it to run without it")

    # ------------------------------------------------------------------ a step
    async def probe(self, focus: Sequence[str]) -> list[str]:
        """A step's first gather of every source, at once and together (a cold start of a
        script is slower: its duration sets how early the next starts). Fixes and returns the
        step's joined columns: per joined source, its declared metrics (``declared_metrics``)
        and those of its join's element type in this sample, sorted. Takes at most the
        longest timeout of the sources (and ``runner.REAP_GRACE_S`` for a killed command to
        go), whatever their programs leave running; before the step's files are made."""
        for s in self.sources:
            s.outcomes.clear()
            s.previous, s.running = None, None
            s.headers.clear()
            s.files.clear()
            s.plans.clear()
            s.warned.clear()
        outs = await asyncio.gather(*(self._one(s.cfg) for s in self.sources))
        for s, out in zip(self.sources, outs, strict=True):
            s.outcomes[-2] = out
            s.recent_ns.append(out.ended_ns - out.started_ns)
            metrics = declared_metrics(s.cfg, focus)
            if s.cfg.join is not None and out.sample is not None:
                metrics |= {m for (etype, _, m) in out.sample.values
                            if etype == s.cfg.join.element_type}
            s.joined_header = sorted(metrics)
        return self.columns()

    def columns(self) -> list[str]:
        """The step's joined columns (``probe``), source by source."""
        return [n for s in self.sources for n in s.column_names()]

    def start_lead_ns(self, sub_ns: int) -> int:
        """How long before a step's start its first gather (the counters' base) starts: the
        longest ``lead_ns`` of the sources (after ``probe``)."""
        return max((lead_ns(list(s.recent_ns), sub_ns, round(s.cfg.timeout_s * 1e9))
                    for s in self.sources), default=0)

    def start_step(self, number: int, recorder: Recorder, start_ns: int, sub_ns: int,
                   n_subintervals: int) -> None:
        """Start the step's gathers (after ``probe``): one just before ``start_ns`` (the
        counters' base), then one before the end of each subinterval."""
        groupings = {t: (tuple(g.names), g.of_workload.tolist())
                     for t, g in recorder.groupings.items()}
        lun_values: dict[str, list[str | None]] = {}
        for s in self.sources:
            if s.cfg.join is not None and s.cfg.join.lun_attribute not in lun_values:
                lun_values[s.cfg.join.lun_attribute] = [
                    _lun_value(recorder.workloads[w], s.cfg.join.lun_attribute)
                    for w in recorder.ids]
        step = _Step(number, recorder.name, recorder.dir, start_ns, sub_ns, groupings, lun_values)
        self.step = step
        for s in self.sources:
            step.tasks.append(asyncio.ensure_future(self._loop(s, step, n_subintervals)))

    async def _loop(self, s: _Source, step: _Step, n_subintervals: int) -> None:
        timeout_ns = round(s.cfg.timeout_s * 1e9)
        # -1: the counters' base, just before the step's first boundary (-2 was the probe)
        for k in range(-1, n_subintervals):
            boundary = step.start_ns + (k + 1) * step.sub_ns
            at = boundary - lead_ns(list(s.recent_ns), step.sub_ns, timeout_ns)
            delay_s = (at - self.clock()) / 1e9
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            s.running = k
            s.outcomes[k] = await self._one(s.cfg)
            s.running = None
            out = s.outcomes[k]
            s.recent_ns.append(out.ended_ns - out.started_ns)

    async def _one(self, cfg: GatherSource) -> Outcome:
        t0 = self.clock()
        try:
            if cfg.kind == "command":
                text = await run_command(cfg.argv, cfg.timeout_s)
                readings, problems = parse_lines(text)
                counters = frozenset(cfg.counters)
            else:
                text = await http_get(cfg.url, cfg.timeout_s)
                scrape = parse_exposition(text, cfg.metrics, cfg.element_type,
                                          cfg.instance_label)
                readings, problems = scrape.readings, scrape.problems
                counters = frozenset(scrape.counters)
        except GatherFailed as exc:
            return Outcome(t0, self.clock(), failure=exc.reason)
        except Exception as exc:  # a bug here must not end the run: this gather failed
            log.exception("gather %s failed unexpectedly", cfg.name)
            return Outcome(t0, self.clock(), failure=_unexpected(cfg.name, exc))
        t1 = self.clock()
        if not readings:
            why = "; ".join(problems) if problems else "nothing"
            return Outcome(t0, t1, failure=f"gave no readings ({why})")
        # a tool reads its counters, then prints them and exits: the end is when they were
        # read, within the printing (a scrape's few ms; a script's start-up goes before)
        out = Outcome(t0, t1, Sample.of(t1, readings), counters)
        if problems:
            out.failure = "; ".join(problems)  # readings kept; the problems are told
        return out

    def end_step(self) -> None:
        """Stop the step's gathers (a running command's process group is killed)."""
        if self.step is not None:
            for task in self.step.tasks:
                task.cancel()

    async def close(self) -> None:
        """Wait for the cancelled gathers to be gone (the run's end)."""
        self.end_step()
        if self.step is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self.step.tasks, return_exceptions=True)
            self.step = None

    # ------------------------------------------------------------------ subinterval k
    def record(self, k: int, phase: str) -> dict[str, dict[str, npt.NDArray[np.float64]]]:
        """Write every source's rows of subinterval ``k``; return the joined metrics per
        rollup type: column (``columns()``) → a value per instance, in the recorder's
        grouping order, NaN where empty."""
        step = self.step
        if step is None:
            return {}
        boundary = step.start_ns + (k + 1) * step.sub_ns
        interlock: list[dict[str, Any]] = []
        joined: dict[str, dict[str, npt.NDArray[np.float64]]] = {
            t: {} for t in step.groupings}
        for s in self.sources:
            for j in sorted(i for i in s.outcomes if i < k):  # late ones: a base for rates
                late = s.outcomes.pop(j)
                if late.sample is not None:
                    s.previous = late.sample
            out = s.outcomes.pop(k, None)
            values: dict[Key, float | None] | None = None
            if out is None:
                why = ("still running when the subinterval was recorded" if s.running == k
                       else "not started by the time the subinterval was recorded")
                status = "late"
            elif out.sample is None:
                why, status = out.failure, "failed"
            else:
                values = values_of(out.sample, s.previous, out.counters)
                s.previous = out.sample
                why, status = "", "ok"
                if out.failure:
                    self.event("WARNING", f"gather {s.cfg.name}: subinterval {k}: bad lines "
                               f"skipped: {out.failure}", kind="gather", step=step.number,
                               subinterval=k)
            if values is None:
                self.event("WARNING", f"gather {s.cfg.name}: subinterval {k} has no sample: "
                           f"{why}", kind="gather", step=step.number, subinterval=k)
            interlock.append(_interlock_row(k, s.cfg.name, boundary, out, status, why))
            self._element_rows(s, step, k, phase, values)
            if s.cfg.join is not None:
                for t, columns in self._joined(s, step, k, phase, values).items():
                    joined[t].update(columns)
        self.output.table(f"{step.dir}/interlock.csv", INTERLOCK_COLUMNS).write_many(interlock)
        return joined

    def _element_rows(self, s: _Source, step: _Step, k: int, phase: str,
                      values: Mapping[Key, float | None] | None) -> None:
        by_type: dict[str, dict[str, dict[str, float | None]]] = {}
        for (etype, inst, metric), v in (values or {}).items():
            by_type.setdefault(etype, {}).setdefault(inst, {})[metric] = v
        for etype in sorted(by_type.keys() | s.headers.keys(), key=_plain_first):
            elements = by_type.get(etype, {})
            header = s.headers.get(etype)
            if header is None:
                header = sorted({m for metrics in elements.values() for m in metrics})
                s.headers[etype] = header
            self._warn_new(s, step, k, etype, elements, header, "are not written")
            name = self._file_of(s, step, k, etype)
            column = _metric_columns(header, _ELEMENT_COLUMNS)
            self._warn_renamed(s, step, k, etype, column)
            table = self.output.table(f"{step.dir}/gather/{safe_name(s.cfg.name)}/{name}",
                                      [*_ELEMENT_COLUMNS, *column.values()])
            table.write_many([{"subinterval": k, "phase": phase, "element_instance": inst,
                               **{column[m]: v for m, v in metrics.items() if m in column}}
                              for inst, metrics in sorted(elements.items())])

    def _warn_renamed(self, s: _Source, step: _Step | None, k: int | None, etype: str,
                      column: Mapping[str, str]) -> None:
        """Say once per element type which metrics are written under another column name
        (theirs is one of the file's own columns)."""
        moved = [f"{m} as {c}" for m, c in column.items()
                 if m != c and f"renamed.{etype}.{m}" not in s.warned]
        if moved:
            s.warned.update(f"renamed.{etype}.{m}" for m, c in column.items() if m != c)
            self.event("WARNING", f"gather {s.cfg.name}: {etype} metrics written "
                       f"{', '.join(moved)}: their names are columns of the file's own",
                       kind="gather", step=None if step is None else step.number,
                       subinterval=k)

    def _file_of(self, s: _Source, step: _Step, k: int, etype: str) -> str:
        """The file of an element type in the step: ``<element_type>.csv`` made safe, or with
        ``-2``, ``-3``... when another element type (``a/b`` and ``a_b``) or the joined
        source's non-participating file has that name already (with an event)."""
        name = s.files.get(etype)
        if name is not None:
            return name
        taken = set(s.files.values())
        if s.cfg.join is not None:
            taken.add(f"{_NON_PARTICIPATING}.csv")
        name = s.files[etype] = _file_name(etype, taken)
        if name != f"{safe_name(etype)}.csv":
            self.event("WARNING", f"gather {s.cfg.name}: element type {etype!r} is written to "
                       f"{name}: {safe_name(etype)}.csv is another's", kind="gather",
                       step=step.number, subinterval=k)
        return name

    def _warn_new(self, s: _Source, step: _Step, k: int, etype: str,
                  elements: Mapping[str, Mapping[str, float | None]], header: list[str],
                  what: str) -> None:
        new = sorted({m for metrics in elements.values() for m in metrics} - set(header))
        fresh = [m for m in new if f"{what}.{etype}.{m}" not in s.warned]
        if fresh:
            s.warned.update(f"{what}.{etype}.{m}" for m in fresh)
            self.event("WARNING", f"gather {s.cfg.name}: {etype} metrics {', '.join(fresh)} "
                       f"appeared after the step's first sample and {what}",
                       kind="gather", step=step.number, subinterval=k)

    def _joined(self, s: _Source, step: _Step, k: int, phase: str,
                values: Mapping[Key, float | None] | None
                ) -> dict[str, dict[str, npt.NDArray[np.float64]]]:
        """The source's joined columns of ``k`` per rollup type; the non-participating
        elements' aggregate into ``gather/<source>/non_participating.csv``."""
        join = s.cfg.join
        assert join is not None
        per_element: dict[str, dict[str, float | None]] = {}
        for (etype, inst, metric), v in (values or {}).items():
            if etype == join.element_type:
                per_element.setdefault(inst, {})[metric] = v
        metrics = s.joined_header
        names = s.column_names()
        self._warn_new(s, step, k, join.element_type, per_element, metrics,
                       "are not in the rollup rows (until the next step)")
        elements = frozenset(per_element)
        if elements not in s.plans:
            plans, outside = plan_join(
                join, sorted(elements), self.attributes.get(s.cfg.name, {}).get(
                    join.element_type, {}), step.groupings, step.lun_values[join.lun_attribute])
            s.plans[elements] = plans, outside
            if outside:
                shown = ", ".join(outside[:20]) + (" ..." if len(outside) > 20 else "")
                self.event("INFO", f"gather {s.cfg.name}: {len(outside)} {join.element_type} "
                           f"elements under no rollup instance (non-participating): {shown}",
                           kind="gather", step=step.number, subinterval=k)
        plans, outside = s.plans[elements]
        out: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
        for rollup_type, plan in plans.items():
            columns = {n: np.full(len(plan.names), np.nan) for n in names}
            for i, members in enumerate(plan.members):
                for m, n in zip(metrics, names, strict=True):
                    v = aggregate([per_element[e].get(m) for e in members], join.aggregate)
                    if v is not None:
                        columns[n][i] = v
            out[rollup_type] = columns
        if names:
            row: dict[str, Any] = {"subinterval": k, "phase": phase, "elements": len(outside)}
            for m, n in zip(metrics, names, strict=True):
                row[n] = aggregate([per_element[e].get(m) for e in outside], join.aggregate)
            self.output.table(
                f"{step.dir}/gather/{safe_name(s.cfg.name)}/{_NON_PARTICIPATING}.csv",
                ["subinterval", "phase", "elements", *names]).write(row)
        return out


def _plain_first(element_type: str) -> tuple[bool, str]:
    """Sort key: element types whose names are safe file names first (they keep them)."""
    return safe_name(element_type) != element_type, element_type


def _file_name(element_type: str, taken: Collection[str]) -> str:
    """``<element_type>.csv`` made safe, or with ``-2``, ``-3``... when that is ``taken``
    (``a/b`` and ``a_b`` make the same safe name)."""
    stem = safe_name(element_type)
    name, n = f"{stem}.csv", 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}.csv"
    return name


def _unexpected(source: str, exc: Exception) -> str:
    """The one-line failure of a gather that raised something other than ``GatherFailed``
    (its traceback goes to the run log)."""
    text = " ".join(str(exc).split())[:200]
    return f"unexpected {type(exc).__name__} gathering source {source}" + (
        f": {text}" if text else "")


def _lun_value(workload: Any, attribute: str) -> str | None:
    """A workload's LUN's value of a join's ``lun_attribute``."""
    if attribute == "host":
        return str(workload.host)
    lun = workload.lun.lun
    if attribute == "lun":
        return str(lun.path)
    value = lun.attributes.get(attribute)
    return None if value is None else str(value)


#: the columns every element file of a source begins with
_ELEMENT_COLUMNS = ("subinterval", "phase", "element_instance")


def _metric_columns(metrics: Sequence[str], fixed: Sequence[str]) -> dict[str, str]:
    """Each metric's column: its name, or ``metric_<name>`` (``metric_metric_<name>``...)
    where its name is one of the file's ``fixed`` columns, or that is taken too."""
    taken = set(fixed) | set(metrics)
    out: dict[str, str] = {}
    for m in metrics:
        c = m
        if c in fixed:
            while c in taken:
                c = f"metric_{c}"
            taken.add(c)
        out[m] = c
    return out


def _interlock_row(k: int, source: str, boundary_ns: int, out: Outcome | None, status: str,
                   why: str) -> dict[str, Any]:
    row: dict[str, Any] = {"subinterval": k, "gather_source": source,
                           "gather_status": status + (f": {why}" if why and status != "ok"
                                                      else "")}
    if out is not None:
        row["gather_started_after_boundary_us"] = (out.started_ns - boundary_ns) / 1e3
        row["gather_duration_us"] = (out.ended_ns - out.started_ns) / 1e3
        if out.sample is not None:
            row["gather_sample_after_boundary_us"] = (out.sample.at_ns - boundary_ns) / 1e3
    return row

