"""The last line of ``ivypy run --json``: the run's outcome as one JSON object, for scripts and
CI (docs/run.md, "The JSON line").

Owns the line's layout (``run_line``): the format number, the exit status and its name, the run
folder, the last word, the steps found invalid, and per step written to summary.csv its ``all``
instance's headline figures. Reads summary.csv; writes nothing.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Final

#: the line's format: a change of its keys' meaning bumps it
FORMAT: Final = 1
#: each exit status's name in the line (``outcome``)
OUTCOMES: Final = {0: "ok", 1: "invalid", 2: "config", 3: "host", 4: "output", 5: "damaged",
                   130: "interrupted"}
#: the figures of each step's ``all`` row the line carries, as summary.csv names them
HEADLINE: Final = ("measurement_seconds", "IOPS", "MB_per_s", "service_time_p50_ms",
                   "service_time_p99_ms", "response_time_p50_ms", "response_time_p99_ms",
                   "errors")


def run_line(exit_code: int, folder: Path | None, message: str,
             invalid_steps: list[str]) -> dict[str, Any]:
    """The JSON line's object; ``folder`` None where no run folder was made."""
    return {"ivypy_run": FORMAT, "exit_code": exit_code,
            "outcome": OUTCOMES.get(exit_code, "other"),
            "run_dir": None if folder is None else str(folder), "message": message,
            "invalid_steps": list(invalid_steps),
            "steps": [] if folder is None else _steps(folder / "summary.csv")}


def _steps(summary: Path) -> list[dict[str, Any]]:
    """Each step's ``all`` row of ``summary`` (none where it cannot be read: a run that ended
    before its first summary)."""
    try:
        with open(summary, newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if r.get("rollup_type") == "all"]
    except (OSError, csv.Error, UnicodeDecodeError):
        return []
    out = []
    for r in rows:
        try:
            number = int(r.get("step_number") or "")
        except ValueError:
            continue  # a row a crash cut off
        out.append({"step": number, "name": r.get("step_name", ""),
                    "valid": r.get("valid") == "true",
                    "invalid_reason": r.get("invalid_reason") or "",
                    **{k: _number(r.get(k)) for k in HEADLINE}})
    return out


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None
