"""Soak benchmark (run through scripts/bench_soak): is the memory flat over a long run?

Brings the test bed up (``--hosts`` namespace hosts over OpenSSH, default 4) unless it is up
already with as many, gives each host its own loop device over a fully written 16 MiB file in
/dev/shm, and runs ``ivypy run`` with one fixed-length step of ``--minutes`` (default 10) at
``--subinterval-s`` (default 1 s): ``--workloads`` (default 16) paced random 4 KiB reads per
host on its loop device, a light load, so that what grows is what a run keeps, not what it
does. Every ``--sample-s`` (default 5 s) it reads the RSS of the master process and of each
host's slave (its session process, and its workers together).

Prints, per process, the memory growth per hour: the least-squares slope of RSS over time
after the first ``--skip-minutes`` (default: a fifth of the run, at most 3 minutes: imports,
caches, the allocator's pools and the files' buffers fill first), against the goal for the
master (<= 1 MB/h at 64 workloads, scaled to the run's workloads); how late each
subinterval's results came in (interlock.csv: the last host's result after the boundary,
against the deadline, ``deadline_fraction`` of a subinterval); and the output rate, the run
folder's bytes per hour. A missed goal prints MISSED and the exit status is 1. Cleans up what
it created.

The figures depend on the machine and on what else runs on it: a benchmark, not a test (the
test of the master's per-subinterval memory is tests/master/test_run_long.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from scripts.testbed_luns import ROOT, testbed_with_luns

#: the master's growth goal: 1 MB an hour at 64 workloads (#64 item 6)
GOAL_MB_PER_H_AT_64 = 1.0
DEADLINE_FRACTION = 0.75  # the config's default: results due 0.75 of a subinterval late


def slope_per_h(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes) samples, in MB per hour."""
    if len(samples) < 3:
        return float("nan")
    ts = [t for t, _ in samples]
    ys = [y for _, y in samples]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return float("nan")
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den * 3600 / 1e6


def slave_processes(sshd_pid: int) -> tuple[psutil.Process | None, list[psutil.Process]]:
    """A host's slave: its session process (the python under the host's sshd) and its
    workers (that process's python children)."""
    try:
        under = psutil.Process(sshd_pid).children(recursive=True)
    except psutil.Error:
        return None, []
    pythons = [p for p in under if _is_python(p)]
    pids = {p.pid for p in pythons}
    sessions = [p for p in pythons if _ppid(p) not in pids]
    if not sessions:
        return None, []
    session = max(sessions, key=lambda p: len(_children(p)))
    return session, [p for p in _children(session) if _is_python(p)]


def _is_python(p: psutil.Process) -> bool:
    try:
        return "python" in p.name()
    except psutil.Error:
        return False


def _ppid(p: psutil.Process) -> int:
    try:
        return p.ppid()
    except psutil.Error:
        return -1


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def rss(procs: list[psutil.Process]) -> int | None:
    total = 0
    try:
        for p in procs:
            total += p.memory_info().rss
    except psutil.Error:
        return None
    return total


def folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # a file replaced meanwhile
                total += os.stat(os.path.join(dirpath, f)).st_size
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--workloads", type=int, default=16, help="workloads per host")
    ap.add_argument("--subinterval-s", type=float, default=1.0)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--skip-minutes", type=float, default=None)
    ap.add_argument("--iops", type=float, default=50.0, help="each workload's IOPS")
    args = ap.parse_args()
    skip_s = 60 * (args.skip_minutes if args.skip_minutes is not None
                   else min(3.0, args.minutes / 5))
    proc: subprocess.Popen[str] | None = None
    with testbed_with_luns(args.hosts, "ivypy-soak-") as bed:
        try:
            hosts, tmp = bed.hosts, bed.tmp
            host_lines, lun_lines = bed.host_lines, bed.lun_lines
            workload_lines = "\n".join(
                f"      - {{name: w{j:02d}, iosequencer: random_steady, blocksize: 4KiB, "
                f"iodepth: 1, iops: {args.iops:g}, read_fraction: 100%}}"
                for j in range(args.workloads))
            seconds = round(args.minutes * 60)
            cfg = tmp / "soak.yaml"
            cfg.write_text(f"""test: soak
subinterval_seconds: {args.subinterval_s:g}
hosts:
{host_lines}
luns:
{lun_lines}
steps:
  - name: soak
    workloads:
{workload_lines}
    warmup_seconds: 0
    measure_seconds: {seconds}
""")
            out = tmp / "out"
            log = open(tmp / "master.out", "w")  # noqa: SIM115 - closed below
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "master", "run", str(cfg),
                                     "--output-root", str(out), "--plain"], stdout=log,
                                    stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            master = psutil.Process(proc.pid)
            series: dict[str, list[tuple[float, float]]] = {"master": []}
            written: list[tuple[float, float]] = []
            print(f"soak: {len(hosts)} hosts x {args.workloads} workloads, {args.minutes:g} min of "
                  f"{args.subinterval_s:g} s subintervals; RSS every {args.sample_s:g} s",
                  flush=True)
            next_print = 60.0
            while proc.poll() is None:
                time.sleep(args.sample_s)
                t = time.monotonic() - t0
                runs = list((out / "soak").glob("*")) if (out / "soak").exists() else []
                if runs and (runs[0] / "summary.csv").exists():
                    # the step is over: the run's end (window, summaries, report) is not it
                    continue
                m = rss([master])
                if m:  # 0: exited, not yet reaped
                    series["master"].append((t, m))
                for h in hosts:
                    session, workers = slave_processes(int(h["pid"]))
                    if session is None:
                        continue
                    for name, procs in ((f"slave {h['name']}", [session]),
                                        (f"workers {h['name']}", workers)):
                        v = rss(procs) if procs else None
                        if v:
                            series.setdefault(name, []).append((t, v))
                if runs:
                    written.append((t, folder_bytes(runs[0])))
                if t >= next_print:
                    next_print += 60.0
                    shown = m / 1e6 if m else float("nan")
                    print(f"  {t / 60:4.1f} min: master RSS {shown:.1f} MB", flush=True)
            sampled_s = max((t for t, _ in series["master"]), default=0.0)
            elapsed = time.monotonic() - t0
            log.close()
            code = proc.returncode
            proc = None
            ok = code == 0
            if not ok:  # what was measured until then is still printed
                text = (tmp / "master.out").read_text()
                ended = [ln for ln in text.splitlines() if ln.startswith("ivypy: ")]
                print(f"ivypy run exited {code}: MISSED ({ended[-1] if ended else text[-500:]})")
            (folder,) = (out / "soak").iterdir()
            workloads = len(hosts) * args.workloads
            goal = GOAL_MB_PER_H_AT_64 * workloads / 64
            print(f"run: {elapsed / 60:.1f} min, {workloads} workloads; memory growth per hour "
                  f"(RSS slope from {skip_s / 60:g} min to the step's end at "
                  f"{sampled_s / 60:.1f} min):")
            for name, samples in series.items():
                after = [(t, v) for t, v in samples if t >= skip_s]
                per_h = slope_per_h(after)
                first, last = (samples[0][1], samples[-1][1]) if samples else (0, 0)
                line = (f"  {name}: {per_h:+.2f} MB/h over {len(after)} samples "
                        f"(RSS {first / 1e6:.1f} -> {last / 1e6:.1f} MB)")
                if name == "master":
                    met = per_h <= goal
                    ok &= met
                    line += f" (goal <= {goal:.2g} MB/h: {'met' if met else 'MISSED'})"
                print(line)
            # lateness: each subinterval's last result after its boundary
            latest: dict[int, float] = {}
            with open(folder / "step0000-soak" / "interlock.csv") as fh:
                for r in csv.DictReader(fh):
                    cell = r["result_received_after_boundary_us"]
                    if cell:
                        k = int(r["subinterval"])
                        latest[k] = max(latest.get(k, 0.0), float(cell))
            lates = sorted(latest.values())
            deadline_us = DEADLINE_FRACTION * args.subinterval_s * 1e6
            if lates:
                p50 = lates[len(lates) // 2]
                p99 = lates[min(len(lates) - 1, int(0.99 * len(lates)))]
                met = lates[-1] <= deadline_us
                ok &= met
                print(f"subinterval lateness (the last host's result after the boundary, "
                      f"{len(lates)} subintervals): median {p50 / 1e3:.1f} ms, p99 {p99 / 1e3:.1f} "
                      f"ms, max {lates[-1] / 1e3:.1f} ms (goal <= the deadline "
                      f"{deadline_us / 1e3:.0f} ms: {'met' if met else 'MISSED'})")
            total = folder_bytes(folder)
            after = [(t, v) for t, v in written if t >= skip_s]
            print(f"output: {total / 1e6:.1f} MB in {elapsed / 60:.1f} min, "
                  f"{slope_per_h(after):.1f} MB/h written ({total / 1e6 / (elapsed / 3600):.1f} "
                  "MB/h over the whole run)")
            return 0 if ok else 1
        finally:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())
