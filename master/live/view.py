"""The live view: what the operator sees while a test runs, and the table at its end.

Owns presentation state and where things are printed. On a terminal (``rich``) a live
region per step, redrawn each subinterval (``master.live.frame`` lays it out: title, the
total row and the live rollup's rows, DFC's moves, progress); run messages and log lines
print above it through the same console, and the terminal's echo is off while it is on
(``master.live.ttyecho``), so no stale frame is left behind; the region goes when its step ends.
Off a terminal, or with ``--plain``, plain lines. At the end of the run, one table over all
steps (the ``all`` rollup and the live rollup, with valid and reason), drawn or as lines.

It is told what happened (``master.live.rows`` shapes); it never computes metrics.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from master.live.frame import (
    DFC_LINES,
    FINAL_ROWS_PER_STEP,
    FRAME_LINES,
    PLAIN_ROWS,
    Drawn,
    final_lines,
    final_table,
    live_frame,
    num,
    plain_row,
)
from master.live.rows import DfcLine, FinalRow, LiveRow, final_rows, instance_rows
from master.live.ttyecho import EchoOff

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

__all__ = ["DfcLine", "FinalRow", "LiveRow", "LiveView", "ViewLogHandler"]


class LiveView:
    """Plain lines, or a rich live region when a terminal is there; see the module
    docstring. ``live_rollup``: the rollup type shown beside the total (None: the run picks
    ``master.live.rows.default_live_rollup``)."""

    def __init__(self, stream: IO[str] | None = None, rich_mode: bool | None = None, *,
                 live_rollup: str | None = None, console: Console | None = None,
                 err_stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.err_stream = err_stream
        if rich_mode is None:
            rich_mode = self.stream.isatty()
        self.rich_mode = rich_mode
        self.live_rollup = live_rollup
        self._console = console
        self._live: Live | None = None
        self._echo: EchoOff | None = None
        self._title = ""
        self._total = 0
        self._sub_s = 0.0
        self._dfc: list[DfcLine] = []
        self._final: list[FinalRow] = []
        self._final_left_out = 0
        self._thresholds: list[str] = []
        self._thresholds_held = 0

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream)
        return self._console

    @property
    def is_live(self) -> bool:
        return self._live is not None

    def _print(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(text), markup=False, highlight=False, soft_wrap=True)

    def message(self, text: str) -> None:
        """A run message (stdout), above the live region while there is one."""
        if self.rich_mode:
            self._print(text)
        else:
            print(text, file=self.stream, flush=True)

    def log_line(self, text: str) -> None:
        """A log line: on stderr, but above the live region while there is one and stderr
        is a terminal (the region's; stderr sent to a file stays the file's)."""
        if self._live is not None and self._err_on_screen():
            self._print(text)
            return
        print(text, file=self._err(), flush=True)

    def _err(self) -> IO[str]:
        return self.err_stream or sys.stderr

    def _err_on_screen(self) -> bool:
        try:
            return self._err().isatty()
        except (AttributeError, ValueError):  # closed, or no stream at all
            return False

    def step_started(self, number: int, name: str, total_subintervals: int,
                     subinterval_s: float) -> None:
        self._title = f"step {number} {name}"
        self._total = total_subintervals
        self._sub_s = subinterval_s
        self._dfc = []
        if not self.rich_mode:
            self.message(f"== {self._title}: {total_subintervals} subintervals of "
                         f"{subinterval_s:g} s")
            return
        from rich.live import Live
        from rich.text import Text

        # a stray write to sys.stdout or sys.stderr (a Python warning, say) prints above the
        # region too while it is on (rich's redirection)
        # drawn when told (each subinterval, each line printed above), never by a timer
        self._live = Live(Text(f"{self._title}: starting", no_wrap=True, overflow="ellipsis"),
                          console=self.console, auto_refresh=False, transient=True,
                          redirect_stdout=True, redirect_stderr=self._err_on_screen())
        self._live.start()
        # a key typed meanwhile would move the cursor under the region (``master.live.ttyecho``)
        self._echo = EchoOff.on(self.console.file)

    def subinterval(self, k: int, phase: str, rollup_type: str, total: LiveRow | None,
                    rows: Sequence[LiveRow], dfc: Sequence[DfcLine] = (),
                    instances: int = 0, measure: Sequence[str] = (),
                    spread: Sequence[LiveRow] = ()) -> None:
        """Subinterval ``k`` recorded: the total row, the first rows of ``rollup_type`` (of
        its ``instances``; 0: ``rows`` are all of them) and, where they are not all shown,
        the ``spread`` rows of all of them (``spread_rows``), DFC's moves after it (none: the
        last ones shown stay), and a ``measure:`` step's progress toward its criterion
        (``measure_lines``)."""
        instances = max(instances, len(rows))
        left_s = (self._total - k - 1) * self._sub_s
        rows = instance_rows(rollup_type, instances, rows)  # short names; none for one
        if dfc:
            self._dfc = list(dfc)
        if self._live is None:
            self._plain_subinterval(k, phase, rollup_type, total, rows, dfc, left_s, instances,
                                    spread)
            for line in measure:
                self.message(f"    {line}")
            return
        title = f"{self._title} · subinterval {k} {phase} · by {rollup_type}"
        max_rows = self.console.height - FRAME_LINES - (len(self._dfc[:DFC_LINES]) + 3
                                                        if self._dfc else 0)
        frame = live_frame(title, rollup_type, total, rows, self._dfc, k + 1, self._total,
                           left_s, max_rows - len(measure), self.console.width, instances,
                           measure, spread if rows else ())
        self._live.update(Drawn(self.console, frame), refresh=True)

    def _plain_subinterval(self, k: int, phase: str, rollup_type: str, total: LiveRow | None,
                           rows: Sequence[LiveRow], dfc: Sequence[DfcLine],
                           left_s: float, instances: int, spread: Sequence[LiveRow]) -> None:
        # subinterval k as the CSV files number it, of the step's all
        head = f"  [subinterval {k} of {self._total}, {phase}, {left_s:.0f} s left]"
        lines = [f"{head} total: {plain_row(total)}" if total is not None else head]
        if rows:
            if instances > PLAIN_ROWS:  # not every one shown: all of them summarised first
                lines += [f"    {rollup_type} {r.instance} of {instances:,}: {plain_row(r)}"
                          for r in spread]
            lines += [f"    {rollup_type}={r.instance}: {plain_row(r)}" for r in rows[:PLAIN_ROWS]]
            shown = min(len(rows), PLAIN_ROWS)
            if instances > shown:
                lines.append(f"    (+{instances - shown:,} more {rollup_type})")
        lines += [f"    DFC {d.instance}: {d.metric} {num(d.measured, 3)} (target "
                  f"{num(d.target, 3)}) at {num(d.iops_in_force, 0)} IOPS, set "
                  f"{num(d.iops_set, 0)} IOPS" for d in dfc]
        for line in lines:
            self.message(line)

    def step_summary(self, step: str, rollup_type: str,
                     summary_rows: Sequence[Mapping[str, Any]], *, valid: bool | None = None,
                     reasons: Sequence[str] = ()) -> None:
        """A step's summary rows (as in summary.csv), for the end-of-run table: those of
        ``all`` and of ``rollup_type`` (the step's live rollup). ``valid`` and ``reasons``:
        the step's verdict, shown when it has no rows."""
        rows, left_out = final_rows(step, summary_rows, ("all", rollup_type),
                                    FINAL_ROWS_PER_STEP, valid=valid, reasons=reasons)
        self._final += rows
        self._final_left_out += left_out

    def step_finished(self, text: str) -> None:
        """The step's region goes (it is transient); ``text`` stays."""
        self._stop()
        self.message(text)

    def thresholds(self, lines: Sequence[str], held: int) -> None:
        """The test's threshold results (``Judged.line``; those that did not hold first),
        ``held`` of them passed: under the end-of-run table, the first ``THRESHOLD_LINES``."""
        self._thresholds, self._thresholds_held = list(lines), held

    def run_finished(self) -> None:
        """The end-of-run table over every step summarised (nothing when none was), and
        under it the thresholds' results with how many held."""
        self._stop()
        if self._final:
            if self.rich_mode:
                self.console.print(final_table(self._final, self._final_left_out,
                                               self.console.width))
            else:
                for line in final_lines(self._final, self._final_left_out):
                    self.message(line)
        if self._thresholds:
            self.message(f"thresholds: {self._thresholds_held} of {len(self._thresholds)} "
                         "held")
            for line in self._thresholds[:THRESHOLD_LINES]:
                self.message(f"  {line}")
            if len(self._thresholds) > THRESHOLD_LINES:
                self.message(f"  (and {len(self._thresholds) - THRESHOLD_LINES:,} more: each "
                             "in its summary row's thresholds cell and in events.csv)")
        self._final = []
        self._final_left_out = 0
        self._thresholds = []

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._echo is not None:
            self._echo.restore()
            self._echo = None

    def close(self) -> None:
        self._stop()


#: threshold results the console lists, those that did not hold first (a threshold on every
#: workload of 1,000 hosts x 100 has 100,000): the rest are in summary.csv and events.csv
THRESHOLD_LINES = 20
#: a log record's attribute (``extra={CONSOLE: False}``): not for the console, which says it
#: otherwise (the run's end: the CLI's ``ivypy:`` line), only for run.log
CONSOLE = "ivypy_console"


class ViewLogHandler(logging.Handler):
    """A logging handler for the console: its lines print through ``view`` (above the live
    region while there is one, else on stderr); a record marked ``CONSOLE`` False is left to
    run.log."""

    def __init__(self, view: LiveView, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, CONSOLE, True) is False:
            return
        try:
            self.view.log_line(self.format(record))
        except Exception:  # logging's own rule: a handler never raises
            self.handleError(record)
