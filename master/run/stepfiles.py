"""A step's instance files: made before its Go, or at scale partly while the step starts.

Owns ``StepFiles``: every rollup type's ``<rollup type>/<instance>.csv`` of one step, made a
slice of ``FILES_SLICE`` at a time (a slice on each writer thread at once), and the appenders
its rows go to (per rollup type, and in the slices the writer threads take). At 1,000 hosts x
100 workloads a step has 126,004 of them, about 2 s of the kernel's work on a 2-core
controller: made before the Go, the hosts wait for them. ``make(budget_s)`` makes them until
the rest, at the rate of those made so far and with a margin of ``MARGIN``, take no more than
``budget_s`` (the step's lead and first subinterval: the run makes the rest after the Go,
``rest_steps``, pausing for its event loop, and they are made before the first subinterval's
results come). Every file is made before any row is written: the appenders are asked for only
then (a ``RuntimeError`` before).

``write_rows`` appends a slice of rows to them (on the writer threads). It does not decide the
files' names or columns, nor the rows (``master.run.recorder``), nor how a file is made
(``master.results.output``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future
from typing import Final

import numpy as np
import numpy.typing as npt

from master.analysis.rollup import VIEW_BLOCKS
from master.results import writers
from master.results.csvfiles import AppenderGroup, CsvAppender, LineTexts, format_lines
from master.results.output import NewFiles, RunOutput
from master.run.heap import without_cycle_collection

log = logging.getLogger(__name__)

#: Files made in one call: 12-20 ms on the 2-core development VM, how long a slice after the
#: Go holds the run's event loop.
FILES_SLICE: Final = 1024
#: The files left for after the Go, at the rate those made before it were made, take at most
#: 1 / MARGIN of the time until the first results (the names of a large rollup type's files,
#: made with its first slice, are not in that rate: 0.1 s for 100,000).
MARGIN: Final = 2.0


class StepFiles:
    """The instance files of one step's rollup types, made in slices (module docstring)."""

    def __init__(self, output: RunOutput, folders: Mapping[str, str],
                 counts: Mapping[str, int], names: Callable[[str], list[str]],
                 columns: Sequence[str], *, name: str = "the step", threads: int = 1,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """``folders``: each rollup type's folder in the run folder; ``counts``: how many
        files it has; ``names``: its files' names, in its instances' order (asked for when
        its first file is made); ``columns``: every file's header; ``name``: the step's, in
        the log; ``threads``: above 1, the slices' files are made on the writer threads, a
        slice each at once (``master.results.writers``), and taken in here (a resumed run's
        files, which are there already, are adopted on this thread). Nothing is made yet."""
        self.output = output
        self.name = name
        self.columns = list(columns)
        self._clock = clock
        self._names = names
        self._named: set[str] = set()  # the rollup types whose names were made
        self._todo = [(t, folders[t], a) for t in folders
                      for a in range(0, counts[t], FILES_SLICE)]
        self.total = sum(counts.values())
        self.made = 0
        #: the seconds the files made so far took
        self.took_s = 0.0
        self._made: dict[str, list[CsvAppender]] = {t: [] for t in folders}
        self._groups: dict[str, AppenderGroup] = {}
        #: the writer threads that make slices at once (1: on the caller's thread)
        self._threads = threads if threads > 1 and not output.resuming else 1
        #: slices started and not yet taken in, in order: (rollup type, files, job)
        self._flight: deque[tuple[str, NewFiles | list[CsvAppender], Future[None] | None]] = (
            deque())

    @property
    def done(self) -> bool:
        return not self._todo and not self._flight

    @without_cycle_collection  # the slice's names
    def _start(self) -> None:
        """The next slice: made at once on this thread, or started on a writer thread."""
        t, folder, first = self._todo[0]
        self._named.add(t)
        names = self._names(t)[first:first + FILES_SLICE]
        if self.output.resuming:  # a resumed run's files are there: adopted, one at a time
            self._flight.append((t, self.output.tables(folder, names, self.columns), None))
            self._todo.pop(0)
            return
        new = self.output.new_files(folder, names, self.columns)
        try:
            if self._threads <= 1:
                job = None
                new.create()
            else:
                job = writers.pool(self._threads).submit(new.create)
        except BaseException:
            self.output.drop_new(new)
            raise
        self._flight.append((t, new, job))
        self._todo.pop(0)

    @without_cycle_collection  # 1,024 appenders
    def _take(self) -> None:
        """The oldest slice started, its files made, taken in (``OutputError`` naming a file
        that could not be made)."""
        t, new, job = self._flight[0]
        if job is not None:
            try:
                job.result()
            except Exception:
                self._flight.popleft()  # it made no file
                if isinstance(new, NewFiles):
                    self.output.drop_new(new)
                raise
        self._flight.popleft()
        made = new if isinstance(new, list) else self.output.take_made(new)
        self._made[t] += made
        self.made += len(made)

    def _settle(self) -> BaseException | None:
        """Making files failed: each slice in flight waited for and taken in (their files
        closed with the run); the first of their own errors, if any."""
        first: BaseException | None = None
        while self._flight:
            try:
                self._take()
            except Exception as err:
                first = first or err
        return first

    def _start_more(self, budget_s: float | None, before_go: bool) -> None:
        """Slices started while there is a thread for one (before the Go, one at a time
        until the rate is known: the files before the Go are then the same whatever the
        threads) and, before the Go, while the rest would not fit ``budget_s``."""
        room = self._threads if self.made >= FILES_SLICE or not before_go else 1
        while self._todo and len(self._flight) < room and (
                not before_go or budget_s is None or self.rest_s() * MARGIN > budget_s):
            if not before_go and self._todo[0][0] not in self._named:
                return  # its names first, a pause of their own
            try:
                self._start()
            except BaseException as exc:  # the slices in flight came first: theirs first
                raise (self._settle() or exc) from None

    def _in_flight(self) -> int:
        return sum(len(new.names) for _, new, _ in self._flight if isinstance(new, NewFiles))

    def rest_s(self) -> float:
        """How long the files not made yet would take at the rate of those made so far
        (infinite before ``FILES_SLICE`` of them: a rollup type of one instance, ``all``,
        says little of the rate); files being made count as made."""
        left = self.total - self.made - self._in_flight()
        if left <= 0:
            return 0.0
        if self.made < FILES_SLICE:
            return float("inf")
        return left * self.took_s / self.made

    def make(self, budget_s: float | None = None) -> None:
        """Make files until those left would take (``rest_s``) no more than ``budget_s`` /
        ``MARGIN``; every one when ``budget_s`` is None. A file that cannot be made is an
        ``OutputError`` naming it (``RunOutput.take_made``)."""
        t0, took_s = self._clock(), self.took_s
        while True:
            self._start_more(budget_s, before_go=True)
            if not self._flight:
                return
            self._take_or_settle()
            self.took_s = took_s + self._clock() - t0

    def _take_or_settle(self) -> None:
        try:
            self._take()
        except BaseException:  # the oldest slice's: it stands
            self._settle()
            raise

    def rest_steps(self) -> Generator[None, None, None]:
        """The files not made yet, a slice at a time, a pause (``yield``) after each
        (``master.run.pauses``). Made whole even when the run is interrupted meanwhile: an
        interrupted step's folder has every instance file, as one whose files came before its
        Go (at 100,000 workloads this adds at most about 2 s to an interrupt)."""
        left, took_s = self.total - self.made, self.took_s
        try:
            while self._todo or self._flight:
                t0 = self._clock()
                self._start_more(None, before_go=False)
                if self._flight:
                    self._take_or_settle()
                else:  # the next rollup type's names: a pause of their own
                    t = self._todo[0][0]
                    self._named.add(t)
                    self._names(t)
                self.took_s += self._clock() - t0
                yield
        except GeneratorExit:
            self._settle()
            raise
        if left:
            log.info("%s: %d of its %d instance files made after its Go, in %.2f s",
                     self.name, left, self.total, self.took_s - took_s)

    def tables(self, rollup_type: str) -> AppenderGroup:
        """The appenders of ``rollup_type``'s files, in its instances' order."""
        group = self._groups.get(rollup_type)
        if group is None:
            if not self.done:
                raise RuntimeError(f"{self.total - self.made} of the step's "
                                   f"{self.total} instance files are not made yet")
            group = self._groups[rollup_type] = AppenderGroup(self._made[rollup_type])
        return group

    def slices(self, rollup_type: str, texts: LineTexts, size: int
               ) -> list[tuple[int, int, AppenderGroup, LineTexts]]:
        """``rollup_type``'s files in slices of ``size`` instances (those the writer threads
        take), each with its instances' texts of ``texts``: (first, end, files, texts)."""
        tables = self.tables(rollup_type)
        n = len(tables)
        return [(a, min(a + size, n), AppenderGroup(tables.appenders[a:a + size]),
                 texts.part(a, min(a + size, n))) for a in range(0, n, size)]


def write_rows(values: npt.NDArray[np.float64], head: str, texts: LineTexts,
               is_max: npt.NDArray[np.bool_], tables: AppenderGroup) -> None:
    """Row ``i`` of ``values`` (``head``, ``texts``' text ``i``, the cells, ``max`` as the
    IOPS setting where ``is_max[i]``) appended to ``tables[i]``: formatted into this thread's
    buffer and written by compiled code (on the writer threads, ``master.results.writers``)."""
    data, ends, own = format_lines(values, head, texts, is_max, "max", VIEW_BLOCKS)
    CsvAppender.append_block(tables, data, ends, own)
