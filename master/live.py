"""The live view: what the operator sees while a test runs.

Owns presentation only: a rich table per step refreshed every subinterval (IOPS, MB/s, p50 and
p99 service time, CPU % per instance of the shown rollup) with a progress bar (phase, time
left), or one plain line per subinterval when stdout is not a terminal. It is told what
happened; it never computes metrics.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any


@dataclass(frozen=True)
class LiveRow:
    instance: str
    iops: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_pct: float


def _num(v: float, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


class LiveView:
    """Plain lines, or a rich live table when ``rich`` and a terminal are there."""

    def __init__(self, stream: IO[str] | None = None, rich_mode: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        if rich_mode is None:
            rich_mode = self.stream.isatty()
        self.rich_mode = rich_mode
        self._live: Any = None
        self._progress: Any = None
        self._task: Any = None
        self._title = ""

    def message(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def step_started(self, number: int, name: str, total_subintervals: int,
                     subinterval_s: float) -> None:
        self._title = f"step {number} {name}"
        self._total = total_subintervals
        self._sub_s = subinterval_s
        if not self.rich_mode:
            self.message(f"== {self._title}: {total_subintervals} subintervals of "
                         f"{subinterval_s:g} s")
            return
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  TextColumn("{task.completed}/{task.total}"),
                                  TimeRemainingColumn())
        self._task = self._progress.add_task(self._title, total=total_subintervals)
        self._live = Live(self._progress, console=Console(file=self.stream),
                          refresh_per_second=4, transient=False)
        self._live.start()

    def subinterval(self, k: int, phase: str, rollup_type: str, rows: Sequence[LiveRow]) -> None:
        left_s = (self._total - k - 1) * self._sub_s
        if not self.rich_mode or self._live is None:
            parts = "; ".join(
                f"{r.instance}: {_num(r.iops, 0)} IOPS {_num(r.mb_per_s)} MB/s "
                f"p50 {_num(r.p50_ms, 3)} ms p99 {_num(r.p99_ms, 3)} ms cpu {_num(r.cpu_pct)}%"
                for r in rows[:8]
            )
            more = f" (+{len(rows) - 8} more)" if len(rows) > 8 else ""
            self.message(f"  [{k + 1}/{self._total} {phase}, {left_s:.0f} s left] "
                         f"{rollup_type} {parts}{more}")
            return
        from rich.console import Group
        from rich.table import Table

        table = Table(title=f"{self._title} - subinterval {k} ({phase}) - by {rollup_type}")
        for col in ("instance", "IOPS", "MB/s", "p50 ms", "p99 ms", "CPU %"):
            table.add_column(col, justify="left" if col == "instance" else "right")
        for r in rows[:40]:
            table.add_row(r.instance, _num(r.iops, 0), _num(r.mb_per_s), _num(r.p50_ms, 3),
                          _num(r.p99_ms, 3), _num(r.cpu_pct))
        self._progress.update(self._task, completed=k + 1,
                              description=f"{self._title} [{phase}]")
        self._live.update(Group(table, self._progress))

    def step_finished(self, text: str) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.message(text)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
