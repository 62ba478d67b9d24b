"""Drawing the live view: a step's live region, the end-of-run table, their plain lines.

Owns layout and number formatting: the columns and their labels (units in every label), the
title cut to one line, instance names cut at their start, rows cut to the terminal's height,
and the text of plain lines. Pure functions of what they are given (``master.live.rows``
shapes) returning rich renderables or strings; nothing here writes to a terminal, keeps
state or computes a metric (``master.live.view`` shows what these draw).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from master.live.rows import SPREAD_FROM, DfcLine, FinalRow, LiveRow

if TYPE_CHECKING:  # rich is imported where a frame is drawn: a bad test file never loads it
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.segment import Segment
    from rich.table import Table

#: rows of the live rollup shown in plain mode per subinterval (beyond them, its highest, mean
#: and lowest are shown too)
PLAIN_ROWS = SPREAD_FROM
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
               max_rows: int, width: int = 80, instances: int = 0,
               measure: Sequence[str] = (), spread: Sequence[LiveRow] = ()) -> RenderableType:
    """The live region of one subinterval: title, table (total row first; where not every
    instance of ``rollup_type`` fits, the ``spread`` rows of all of them; then at most
    ``max_rows`` instances, named in what ``width`` columns leave, and how many of its
    ``instances`` (at least ``len(rows)``) are not shown), DFC's moves, a ``measure:``
    step's progress toward its criterion (``measure``), progress in time."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(title, no_wrap=True, overflow="ellipsis", style="bold")]
    table = _table((rollup_type if rollup_type != "all" else "instance", *LIVE_COLUMNS[1:]))
    name_width = width - LIVE_NUMBERS_WIDTH
    if total is not None:
        table.add_row("total", *_row_cells(total), style="bold")
    if rows:  # none for all, or a rollup of one instance (the total)
        instances = max(instances, len(rows))
        if spread and instances > max(1, max_rows):
            for r in spread:
                table.add_row(f"{r.instance} of {instances:,}", *_row_cells(r), style="italic")
            max_rows -= len(spread)
        shown = rows[:max(1, max_rows)]
        for r in shown:
            table.add_row(cut_left(r.instance, name_width), *_row_cells(r))
        more = instances - len(shown)
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
    parts += [Text(line, no_wrap=True, overflow="ellipsis") for line in measure]
    bar = Table.grid(padding=(0, 1))
    bar.add_column(ratio=1)
    bar.add_column(no_wrap=True)
    bar.add_row(ProgressBar(total=max(of, 1), completed=done),
                f"subinterval {done - 1} of {of}, {left_s:,.0f} s left")
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


def plain_row(r: LiveRow) -> str:
    return (f"{num(r.iops, 0)} IOPS {num(r.mb_per_s)} MB/s service p50 {ms(r.service_p50_ms)} "
            f"p99 {ms(r.service_p99_ms)} ms response p50 {ms(r.response_p50_ms)} p99 "
            f"{ms(r.response_p99_ms)} ms host CPU {num(r.host_cpu_pct)}% ivypy CPU "
            f"{num(r.ivypy_cpu_pct)}%")


