"""Run-end benchmark (run through scripts/bench_run_end): what reads or writes a large run's
summary.csv, timed on a run folder of the size #64 asks for.

Makes a run folder as a run of ``--hosts`` (1,000) x ``--workloads`` (100) leaves it after
``--steps`` (1) steps: state.json, resolved.json, hosts.csv, luns.csv, events.csv, a folder a
step, and summary.csv with a row per rollup instance a step (``all``, each host, each of
``--luns`` (25) LUNs a host, each workload, and 3 instances of an attribute rollup: 126,004
rows a step at the defaults). Its numbers are drawn at random over six decades and written as
a run writes them (``master.results.csvfiles.fmt``). Then, each in a process of its own (so
its peak RSS is its own), the folder's:

- summary.json written (``master.results.summaryjson.write_summary_json``, as a run's end);
- ``ivypy report``;
- ``ivypy compare`` of the folder against a copy of it (its default metrics, ``all``);
- a resume from the last step: summary.csv checked and its rows of that step set aside
  (``master.results.runstate``), on a copy.

Prints each one's wall time (the call alone, not the process's start) and peak RSS, and the
same for the code of each ``--code`` checkout on the same folder (an earlier commit's
worktree: before and after, interleaved). No goal of its own: these are the figures
docs/scaling.md quotes for a run's end at 100,000 workloads, to be measured again after a
change. The folder is made under /dev/shm (``--dir``) and removed.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from master.results.csvfiles import fmt
from master.results.runstate import new_state, write_state
from master.results.schema import EVENT_COLUMNS, HOST_COLUMNS, RUN_SUMMARY_COLUMNS
from master.results.summaryjson import SUMMARY_BOOLEAN, SUMMARY_KEYS, SUMMARY_TEXT
from scripts.testbed_luns import ROOT

#: Run in a process of its own: the call's wall time and the process's peak RSS (kB).
CHILD = """\
import contextlib, io, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
folder, other = Path({folder!r}), Path({other!r})
{imports}
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    {call}
wall = time.perf_counter() - t
# the peak of this process's own memory (VmHWM: ru_maxrss carries its parent's over exec)
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(wall, peak)
"""
CASES = {
    "summary.json written": (
        "from master.results.summaryjson import write_summary_json",
        "write_summary_json(folder)"),
    "ivypy report": ("from master.cli.main import main",
                     "assert main(['report', str(folder)]) == 0"),
    "ivypy compare": ("from master.cli.main import main",
                      "assert main(['compare', str(folder), str(other)]) == 0"),
    "a resume's set-aside of summary.csv": (
        "from master.results.runstate import check_summary, set_aside_incomplete_steps\n"
        "last = int(sys.argv[1])",
        "check_summary(other, last); set_aside_incomplete_steps(other, [], last)"),
}


def make_folder(folder: Path, hosts: int, luns: int, workloads: int, steps: int,
                seed: int = 7) -> int:
    """The run folder (see the module docstring); returns its summary rows."""
    folder.mkdir(parents=True)
    names = [f"step{n}" for n in range(steps)]
    st = new_state("bench", steps, "test: bench\n", "0.1.0")
    st.state, st.last_complete_step, st.exit_code = "complete", steps - 1, 0
    write_state(folder, st)
    (folder / "resolved.json").write_text(json.dumps(
        {"test": "bench", "steps": [{"name": n} for n in names]}))
    host_names = [f"h{h:04d}" for h in range(hosts)]
    _write(folder / "hosts.csv", HOST_COLUMNS,
           [[h if c == "host" else "" for c in HOST_COLUMNS] for h in host_names])
    _write(folder / "luns.csv", ["host", "lun", "selected", "used_by"],
           [[h, f"/dev/sd{chr(97 + lun % 26)}{lun // 26 or ''}", "true", ""]
            for h in host_names for lun in range(luns)])
    _write(folder / "events.csv", EVENT_COLUMNS, [])
    instances = [("all", "all"), *(("vendor+model", f"v{v}") for v in range(3)),
                 *(("host", h) for h in host_names),
                 *(("lun", f"{h}:/dev/l{lun}") for h in host_names for lun in range(luns)),
                 *(("workload", f"{h}:/dev/l{w % luns}:w{w}")
                   for h in host_names for w in range(workloads))]
    numeric = [j for j, c in enumerate(RUN_SUMMARY_COLUMNS)
               if c not in (*SUMMARY_KEYS, *SUMMARY_TEXT, *SUMMARY_BOOLEAN)]
    rng = np.random.default_rng(seed)
    values = 10 ** rng.uniform(-3, 3, size=(len(instances), len(numeric)))
    step_rows = []
    for (rtype, inst), row_values in zip(instances, values.tolist(), strict=True):
        cells = [""] * len(RUN_SUMMARY_COLUMNS)
        cells[RUN_SUMMARY_COLUMNS.index("rollup_type")] = rtype
        cells[RUN_SUMMARY_COLUMNS.index("rollup_instance")] = inst
        cells[RUN_SUMMARY_COLUMNS.index("valid")] = "true"
        for j, v in zip(numeric, row_values, strict=True):
            cells[j] = fmt(v)
        step_rows.append(cells)
    at_number = RUN_SUMMARY_COLUMNS.index("step_number")
    at_name = RUN_SUMMARY_COLUMNS.index("step_name")
    with open(folder / "summary.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(RUN_SUMMARY_COLUMNS)
        for n, name in enumerate(names):
            for cells in step_rows:
                cells[at_number], cells[at_name] = str(n), name
                out.writerow(cells)
            (folder / f"step{n:04d}-{name}").mkdir()
    return len(step_rows) * steps


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])


def measure(case: str, folder: Path, other: Path, last: int, code_root: Path
            ) -> tuple[float, float]:
    """``case`` in a process of its own, on the code at ``code_root``: its wall time (s) and
    peak RSS (GB)."""
    imports, call = CASES[case]
    code = CHILD.format(root=str(code_root), folder=str(folder), other=str(other),
                        imports=imports, call=call)
    done = subprocess.run([sys.executable, "-c", code, str(last)], capture_output=True,
                          text=True, cwd=code_root, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{case} failed:\n{done.stderr[-3000:]}")
    wall, rss_kb = done.stdout.split()[-2:]
    return float(wall), float(rss_kb) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--luns", type=int, default=25, help="LUNs a host")
    ap.add_argument("--workloads", type=int, default=100, help="workloads a host")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--dir", type=Path,
                    default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    ap.add_argument("--code", type=Path, action="append", default=[],
                    help="a checkout whose code to time too (e.g. a git worktree of an "
                         "earlier commit), after this one's, on the same folder")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-run-end-", dir=args.dir))
    try:
        folder = root / "run"
        t0 = time.perf_counter()
        rows = make_folder(folder, args.hosts, args.luns, args.workloads, args.steps)
        size_mb = (folder / "summary.csv").stat().st_size / 1e6
        print(f"a run folder of {args.hosts:,} hosts x {args.workloads} workloads, "
              f"{args.steps} step(s): {rows:,} summary rows ({size_mb:,.0f} MB), made in "
              f"{time.perf_counter() - t0:.1f} s")
        for case in CASES:
            for code_root in (ROOT, *args.code):
                other = root / "other"
                if case != "summary.json written":
                    shutil.copytree(folder, other)
                wall, rss_gb = measure(case, folder, other, args.steps - 1, code_root)
                shutil.rmtree(other, ignore_errors=True)
                print(f"  {case}: {wall:.2f} s, peak RSS {rss_gb:.2f} GB"
                      + (f" (the code at {code_root})" if code_root != ROOT else ""))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
