"""The live view: what the operator sees while a test runs, and the table at its end.

Owns presentation only. On a terminal (``rich``) a live region per step, refreshed every
subinterval: a title line that never wraps (cut with an ellipsis), a table with the total row
and the rows of the live rollup (IOPS, MB/s, service and response time p50/p99, host and
ivypy CPU %, every column labelled with its unit), DFC's moves when DFC runs, and a
progress bar. Run messages and log lines print above the region through the same console,
so no stale frame is left behind; the region goes when its step ends. Off a terminal, or
with ``--plain``, plain lines. At the end of the run, one table over all steps (the ``all``
rollup and the live rollup, with valid and reason), as a rich table or as plain lines.

It is told what happened (``master.liverows`` shapes); it never computes metrics.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from master.liverows import DfcLine, FinalRow, LiveRow, final_rows
from master.ttyecho import EchoOff

if TYPE_CHECKING:  # rich is imported where a frame is drawn: a bad test file never loads it
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.live import Live
    from rich.segment import Segment
    from rich.table import Table

__all__ = ["DfcLine", "FinalRow", "LiveRow", "LiveView", "ViewLogHandler", "final_table",
           "live_frame"]

#: rows of the live rollup shown in plain mode per subinterval
PLAIN_ROWS = 8
#: lines of the live region besides the instance rows: title, header (2) and its rule, total,
#: progress, and one to spare
FRAME_LINES = 7
#: rows of the live rollup per step in the end-of-run table (the ``all`` row always shows)
FINAL_ROWS_PER_STEP = 16
#: DFC controllers shown in the live region
DFC_LINES = 4
#: columns the live table's numbers take with their gaps (the instance names get the rest)
LIVE_NUMBERS_WIDTH = 68
#: the same for the end-of-run table
FINAL_NUMBERS_WIDTH = 60

LIVE_COLUMNS = ("instance", "IOPS", "MB/s", "service\np50 ms", "service\np99 ms",
                "response\np50 ms", "response\np99 ms", "host\nCPU %", "ivypy\nCPU %")
DFC_COLUMNS = ("DFC focus", "metric", "measured", "target", "IOPS in\nforce", "IOPS\nset")
FINAL_COLUMNS = ("step", "instance", "IOPS", "MB/s", "service\np50 ms", "service\np99 ms",
                 "response\np50 ms", "response\np99 ms", "valid", "reason")
#: the rich end-of-run table's columns: the reasons go under it
FINAL_TABLE_COLUMNS = ("step / instance", *FINAL_COLUMNS[2:-1])


def _nan(v: float | None) -> bool:
    return v is None or math.isnan(v)


def num(v: float | None, digits: int = 1) -> str:
    """``v`` with thousands separators and ``digits`` decimals; ``-`` when there is none."""
    return "-" if _nan(v) else f"{v:,.{digits}f}"


def ms(v: float | None) -> str:
    """A latency in ms, with as many decimals as keep it to about four digits."""
    if v is None or _nan(v):
        return "-"
    a = abs(v)
    return num(v, 3 if a < 10 else 2 if a < 100 else 1 if a < 1000 else 0)


def cut_left(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters, its end kept (LUN paths and workload ids
    differ at their end): ``…`` and the last ``width - 1``."""
    width = max(width, 2)
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _row_cells(r: LiveRow) -> list[str]:
    return [num(r.iops, 0), num(r.mb_per_s), ms(r.service_p50_ms), ms(r.service_p99_ms),
            ms(r.response_p50_ms), ms(r.response_p99_ms), num(r.host_cpu_pct),
            num(r.ivypy_cpu_pct)]


def _table(columns: Sequence[str]) -> Table:
    """A borderless table: the first column (a name) is cut with an ellipsis when the
    terminal is narrow, numbers never wrap."""
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
              collapse_padding=True)
    for i, col in enumerate(columns):
        if i == 0:
            # wrapable: rich narrows it first when the terminal is narrow; a name has no
            # spaces to wrap at, so it is cut with an ellipsis instead
            t.add_column(col, justify="left", overflow="ellipsis", min_width=5)
        else:
            t.add_column(col, justify="right", no_wrap=True)
    return t


def live_frame(title: str, rollup_type: str, total: LiveRow | None, rows: Sequence[LiveRow],
               dfc: Sequence[DfcLine], done: int, of: int, left_s: float,
               max_rows: int, width: int = 80, instances: int = 0) -> RenderableType:
    """The live region of one subinterval: title, table (total row first, then at most
    ``max_rows`` instances of ``rollup_type``, named in what ``width`` columns leave, and
    how many of its ``instances`` (at least ``len(rows)``) are not shown), DFC's moves,
    progress."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(title, no_wrap=True, overflow="ellipsis", style="bold")]
    table = _table((rollup_type if rollup_type != "all" else "instance", *LIVE_COLUMNS[1:]))
    name_width = width - LIVE_NUMBERS_WIDTH
    if total is not None:
        table.add_row("total", *_row_cells(total), style="bold")
    if rollup_type != "all":
        shown = rows[:max(1, max_rows)]
        for r in shown:
            table.add_row(cut_left(r.instance, name_width), *_row_cells(r))
        more = max(instances, len(rows)) - len(shown)
        if more > 0:
            table.add_row(f"+{more:,} more")
    parts.append(table)
    if dfc:
        d = _table(DFC_COLUMNS)
        for line in dfc[:DFC_LINES]:
            d.add_row(line.instance, line.metric, num(line.measured, 3), num(line.target, 3),
                      num(line.iops_in_force, 0), num(line.iops_set, 0))
        if len(dfc) > DFC_LINES:
            d.add_row(f"(+{len(dfc) - DFC_LINES} more)")
        parts.append(d)
    bar = Table.grid(padding=(0, 1))
    bar.add_column(ratio=1)
    bar.add_column(no_wrap=True)
    bar.add_row(ProgressBar(total=max(of, 1), completed=done),
                f"{done}/{of} subintervals, {left_s:,.0f} s left")
    parts.append(bar)
    return Group(*parts)


def final_table(rows: Sequence[FinalRow], left_out: int, width: int = 80) -> RenderableType:
    """The end-of-run table over all steps: a step's total row is named by the step, its
    live rollup's rows follow, indented; the reasons of invalid rows are listed under the
    table, a line per step and reason (a column of them would not fit 80 columns)."""
    from rich.console import Group
    from rich.text import Text

    t = _table(FINAL_TABLE_COLUMNS)
    t.title = "all steps"
    t.title_justify = "left"
    reasons: dict[tuple[str, str], None] = {}
    for r in rows:
        name = (f"step {r.step}" if r.rollup_type == "all"
                else "  " + cut_left(_final_instance(r), width - FINAL_NUMBERS_WIDTH))
        t.add_row(name, *_final_cells(r)[:-1], style="bold" if r.rollup_type == "all" else None)
        if r.reason:
            reasons.setdefault((r.step, r.reason), None)
    notes = [Text(f"step {step}: {reason}", overflow="fold") for step, reason in reasons]
    if left_out:
        notes.append(Text(f"({left_out} more rows in the steps' summary.csv)"))
    return Group(t, *notes)


def _final_instance(r: FinalRow) -> str:
    return "total" if r.rollup_type == "all" else f"{r.rollup_type}={r.instance}"


def _final_cells(r: FinalRow) -> list[str]:
    valid = "-" if r.valid is None else "yes" if r.valid else "NO"
    return [num(r.iops, 0), num(r.mb_per_s), ms(r.service_p50_ms), ms(r.service_p99_ms),
            ms(r.response_p50_ms), ms(r.response_p99_ms), valid, r.reason]


def final_lines(rows: Sequence[FinalRow], left_out: int) -> list[str]:
    """The end-of-run table as plain lines, columns aligned."""
    head = [c.replace("\n", " ") for c in FINAL_COLUMNS]
    body = [[r.step, _final_instance(r), *_final_cells(r)] for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head) - 1)]

    def line(cells: Sequence[str]) -> str:
        out = [c.ljust(w) if i < 2 else c.rjust(w)
               for i, (c, w) in enumerate(zip(cells, widths, strict=False))]
        return "  ".join([*out, cells[-1]]).rstrip()

    lines = ["== all steps", line(head), *(line(b) for b in body)]
    if left_out:
        lines.append(f"({left_out} more rows in the steps' summary.csv)")
    return lines


class Drawn:
    """A renderable laid out once: the live region is drawn again below every line printed
    above it, and a table's layout cost ~5-14 ms each time (on a loaded 2-core VM); these
    lines cost a fraction of that. Laid out again only when the terminal's width changed."""

    def __init__(self, console: Console, renderable: RenderableType) -> None:
        self.renderable = renderable
        self.width = console.options.max_width
        self.lines = console.render_lines(renderable, console.options, pad=False)

    def __rich_console__(self, console: Console, options: ConsoleOptions
                         ) -> Iterator[Segment]:
        from rich.segment import Segment

        if options.max_width != self.width:  # resized
            self.width = options.max_width
            self.lines = console.render_lines(self.renderable, options, pad=False)
        new_line = Segment.line()
        for line in self.lines:
            yield from line
            yield new_line


class LiveView:
    """Plain lines, or a rich live region when a terminal is there; see the module
    docstring. ``live_rollup``: the rollup type shown beside the total (None: the run picks
    ``master.liverows.default_live_rollup``)."""

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
        # a key typed meanwhile would move the cursor under the region (``master.ttyecho``)
        self._echo = EchoOff.on(self.console.file)

    def subinterval(self, k: int, phase: str, rollup_type: str, total: LiveRow | None,
                    rows: Sequence[LiveRow], dfc: Sequence[DfcLine] = (),
                    instances: int = 0) -> None:
        """Subinterval ``k`` recorded: the total row, the first rows of ``rollup_type`` (of
        its ``instances``; 0: ``rows`` are all of them), and DFC's moves after it (none: the
        last ones shown stay)."""
        instances = max(instances, len(rows))
        left_s = (self._total - k - 1) * self._sub_s
        if dfc:
            self._dfc = list(dfc)
        if self._live is None:
            self._plain_subinterval(k, phase, rollup_type, total, rows, dfc, left_s, instances)
            return
        title = f"{self._title} · subinterval {k} {phase} · by {rollup_type}"
        max_rows = self.console.height - FRAME_LINES - (len(self._dfc[:DFC_LINES]) + 3
                                                        if self._dfc else 0)
        frame = live_frame(title, rollup_type, total, rows, self._dfc, k + 1, self._total,
                           left_s, max_rows, self.console.width, instances)
        self._live.update(Drawn(self.console, frame), refresh=True)

    def _plain_subinterval(self, k: int, phase: str, rollup_type: str, total: LiveRow | None,
                           rows: Sequence[LiveRow], dfc: Sequence[DfcLine],
                           left_s: float, instances: int) -> None:
        head = f"  [{k + 1}/{self._total} {phase}, {left_s:.0f} s left]"
        lines = [f"{head} total: {_plain(total)}" if total is not None else head]
        if rollup_type != "all":
            lines += [f"    {rollup_type}={r.instance}: {_plain(r)}" for r in rows[:PLAIN_ROWS]]
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

    def run_finished(self) -> None:
        """The end-of-run table over every step summarised (nothing when none was)."""
        self._stop()
        if not self._final:
            return
        if self.rich_mode:
            self.console.print(final_table(self._final, self._final_left_out,
                                           self.console.width))
        else:
            for line in final_lines(self._final, self._final_left_out):
                self.message(line)
        self._final = []
        self._final_left_out = 0

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._echo is not None:
            self._echo.restore()
            self._echo = None

    def close(self) -> None:
        self._stop()


def _plain(r: LiveRow) -> str:
    return (f"{num(r.iops, 0)} IOPS {num(r.mb_per_s)} MB/s service p50 {ms(r.service_p50_ms)} "
            f"p99 {ms(r.service_p99_ms)} ms response p50 {ms(r.response_p50_ms)} p99 "
            f"{ms(r.response_p99_ms)} ms host CPU {num(r.host_cpu_pct)}% ivypy CPU "
            f"{num(r.ivypy_cpu_pct)}%")


class ViewLogHandler(logging.Handler):
    """A logging handler for the console: its lines print through ``view`` (above the live
    region while there is one, else on stderr)."""

    def __init__(self, view: LiveView, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.view.log_line(self.format(record))
        except Exception:  # logging's own rule: a handler never raises
            self.handleError(record)
