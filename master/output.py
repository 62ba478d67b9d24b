"""The run folder: the only writer of result files.

Owns the folder layout (see DESIGN.md "Output folder"), CSV headers and row formatting. Rows are
appended and flushed as they come, so a crash keeps everything up to the last subinterval. A run
never overwrites an earlier one: the folder is created exclusively (a suffix is added when two
runs start in the same second). Must not compute metrics (``master.rollup`` does) or talk to
hosts.

Layout::

    <output_root>/<test>/<YYYYmmdd-HHMMSS>/
      test.yaml resolved.json run.log hosts.csv luns.csv events.csv summary.csv
      stepNNNN-<name>/
        <rollup type>/<instance>.csv           one row per subinterval
        <rollup type>/summary.csv              one row per instance, measurement period
        histograms/<rollup type>/<instance>.csv
        measure.csv dfc.csv cpu.csv interlock.csv
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def safe_name(text: str) -> str:
    """A file name for an instance or step: unsafe characters become ``_``."""
    cleaned = _UNSAFE.sub("_", text).strip("_.") or "_"
    return cleaned[:200]


def fmt(value: Any) -> str:
    """One CSV cell: empty for None/NaN, compact floats, plain text otherwise."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ""
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    return str(value)


class CsvAppender:
    """A CSV file with a fixed header; every row is flushed to the OS as it is written."""

    def __init__(self, path: Path, header: Sequence[str]) -> None:
        self.path = path
        self.header = list(header)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(path, "x", newline="", encoding="utf-8")  # noqa: SIM115
        self._writer = csv.writer(self._fh)
        self._writer.writerow(self.header)
        self._fh.flush()

    def write(self, row: Mapping[str, Any]) -> None:
        unknown = set(row) - set(self.header)
        if unknown:
            raise ValueError(f"{self.path.name}: columns {sorted(unknown)} not in the header")
        self._writer.writerow([fmt(row.get(col)) for col in self.header])
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def create_run_folder(output_root: Path, test: str, now: float | None = None) -> Path:
    """Create ``<root>/<test>/<YYYYmmdd-HHMMSS>`` exclusively; never reuse an existing one."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    parent = output_root / safe_name(test)
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        path = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free run folder under {parent} for {stamp}")


class RunOutput:
    """Every file of one run folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[Path, CsvAppender] = {}
        self._log_handler: logging.Handler | None = None

    # -------------------------------------------------------------- whole-run files
    def write_text(self, name: str, text: str) -> Path:
        path = self.folder / name
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def start_run_log(self, level: int = logging.INFO) -> logging.Handler:
        """Attach ``run.log`` to the root logger (every host's relayed stderr lands there)."""
        handler = logging.FileHandler(self.folder / "run.log", mode="x", encoding="utf-8")
        handler.setFormatter(
            logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                              "%Y-%m-%d %H:%M:%S")
        )
        handler.setLevel(level)
        root = logging.getLogger()
        root.addHandler(handler)
        if root.level > level or root.level == logging.NOTSET:
            root.setLevel(level)
        self._log_handler = handler
        return handler

    def table(self, relative: str, header: Sequence[str]) -> CsvAppender:
        """The appender for ``relative`` (created with ``header`` on first use)."""
        path = self.folder / relative
        f = self._files.get(path)
        if f is None:
            f = CsvAppender(path, header)
            self._files[path] = f
        elif f.header != list(header):
            raise ValueError(f"{relative}: header changed within a run")
        return f

    def write_rows(self, relative: str, header: Sequence[str],
                   rows: Iterable[Mapping[str, Any]]) -> None:
        t = self.table(relative, header)
        for row in rows:
            t.write(row)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    # -------------------------------------------------------------- helpers
    @staticmethod
    def step_dir(step_number: int, step_name: str) -> str:
        return f"step{step_number:04d}-{safe_name(step_name)}"

    def histogram_csv(self, relative: str, lower_ns: Sequence[int], upper_ns: Sequence[int],
                      columns: Mapping[str, Sequence[float]]) -> None:
        """A histogram file: one row per non-empty bucket, edges in ns and counts by column."""
        buf = io.StringIO()
        w = csv.writer(buf)
        names = list(columns)
        w.writerow(["bucket_lower_ns", "bucket_upper_ns", *names])
        for i, (lo, hi) in enumerate(zip(lower_ns, upper_ns, strict=True)):
            vals = [columns[n][i] for n in names]
            if any(vals):
                w.writerow([lo, hi, *[fmt(float(v)) if v % 1 else int(v) for v in vals]])
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8", newline="") as fh:
            fh.write(buf.getvalue())
