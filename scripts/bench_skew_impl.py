"""Boundary skew benchmark (run through scripts/bench_skew).

Brings the test bed up (``--hosts`` namespace hosts over OpenSSH, default 3) unless it is up
already with as many, gives each host its own loop device over a fully written file, runs
``ivypy run`` for ``--subintervals`` subintervals of ``--subinterval-s`` (1 s) at a light
load (``--iops`` per host, 1,000), and reads ``interlock.csv``: for every subinterval, each
host's buffer-switch time in the master's clock (slave clock minus the measured offset)
relative to the planned boundary. The measured skew of a boundary is the spread of those times
across hosts; its bound adds each host's clock offset uncertainty (half its best ping RTT),
which the measured skew cannot show: the latest switch plus its host's uncertainty less the
earliest switch less its host's. Prints median, p90 and max of both against the 1 ms goal,
with each host's clock offset, RTT, uncertainty and the engine its LUN ran on, and the start:
from ``ivypy run`` to its first step (every host connected, its clock measured, its LUN
found), and the master's CPU per subinterval and its RSS (how they grow with ``--hosts``).
Cleans up what it created.

The test bed's hosts share this machine's cores: with ``worker_cpus: auto`` (the default,
what a test gets) every slave pins a worker to each CPU and puts its one LUN on the first, so
every host's busy worker runs on CPU 0. Also printed: each host's first switch and each
worker's, median and max, after the planned boundary (docs/scaling.md has what they showed).
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

import psutil

from scripts.testbed_luns import ROOT, testbed_with_luns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--subintervals", type=int, default=20)
    ap.add_argument("--goal-ms", type=float, default=1.0)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--subinterval-s", type=float, default=1.0)
    ap.add_argument("--iops", type=float, default=1000.0,
                    help="each host's IOPS (64 hosts share this machine's cores)")
    ap.add_argument("--worker-cpus", default="auto",
                    help="each host's worker_cpus: a value every host takes ('auto', the "
                         "default: a worker pinned to each CPU, the LUN's on the first; "
                         "'unpinned'; a CPU list), or 'spread': host i's one worker on the "
                         "machine's CPU i mod its CPUs")
    args = ap.parse_args()
    with testbed_with_luns(args.hosts, "ivypy-skew-") as bed:
        hosts, tmp = bed.hosts, bed.tmp
        cpus = sorted(os.sched_getaffinity(0))
        host_lines = bed.host_lines_with(
            [f"worker_cpus: '{cpus[i % len(cpus)]}'" if args.worker_cpus == "spread"
             else f"worker_cpus: '{args.worker_cpus}'" for i in range(len(hosts))])
        lun_lines = bed.lun_lines
        cfg = tmp / "skew.yaml"
        cfg.write_text(f"""test: skew
subinterval_seconds: {args.subinterval_s:g}
hosts:
{host_lines}
luns:
{lun_lines}
steps:
  - name: light
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: {args.iops:g}}}
    warmup_seconds: 0
    measure_seconds: {args.subintervals * args.subinterval_s:g}
""")
        out = tmp / "out"
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "master", "run", str(cfg),
                                 "--output-root", str(out), "--plain"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None and proc.stderr is not None
        master = psutil.Process(proc.pid)
        lines, started_s, start_cpu_s = [], None, float("nan")
        marks: list[tuple[float, int]] = []  # the master's CPU (s) and RSS at each row
        for line in proc.stdout:  # the console's "== step 0" line: every host up, LUNs found
            lines.append(line)
            if started_s is None and line.startswith("== step 0"):
                started_s = time.perf_counter() - t0
                with contextlib.suppress(psutil.Error):
                    start_cpu = master.cpu_times()
                    start_cpu_s = start_cpu.user + start_cpu.system
            elif line.lstrip().startswith("[subinterval"):  # a subinterval recorded
                with contextlib.suppress(psutil.Error):
                    cpu = master.cpu_times()
                    marks.append((cpu.user + cpu.system, master.memory_info().rss))
        err = proc.stderr.read()
        print(f"start: {started_s or float('nan'):.2f} s from `ivypy run` to its first step "
              f"on {len(hosts)} hosts (SSH, slave up, clock, LUNs), {start_cpu_s:.2f} s of it "
              "the master's CPU")
        if proc.wait() != 0:
            print("".join(lines)[-2000:], err[-2000:], sep="\n")
            return 1
        if len(marks) > 1:  # from the first subinterval's row to the last's
            per_sub_ms = (marks[-1][0] - marks[0][0]) / (len(marks) - 1) * 1e3
            print(f"the master (`ivypy run`, its SSH clients in it) at {len(hosts)} hosts: "
                  f"{per_sub_ms:.1f} ms of CPU per subinterval over {len(marks) - 1}, "
                  f"RSS {marks[0][1] / 1e6:.1f} MB at the first subinterval, "
                  f"{marks[-1][1] / 1e6:.1f} MB at the last")
        (folder,) = (out / "skew").iterdir()
        engines: dict[str, str] = {}
        with open(folder / "luns.csv") as fh:
            for r in csv.DictReader(fh):
                if r["used_by"]:
                    engines[r["host"]] = r["engine"]
        uncertainty: dict[str, float] = {}
        with open(folder / "hosts.csv") as fh:
            for r in csv.DictReader(fh):
                uncertainty[r["host"]] = float(r["offset_uncertainty_us"])
                print(f"host {r['host']}: clock offset {int(r['clock_offset_ns']) / 1e3:+.1f} us, "
                      f"RTT {float(r['rtt_us']):.1f} us over {r['clock_samples']} pings, "
                      f"uncertainty ±{uncertainty[r['host']]:.1f} us, "
                      f"engine {engines.get(r['host'], '?')}")
        native = sum(e == "libaio" for e in engines.values())
        print(f"hosts on their native engine (libaio): {native} of {len(hosts)}")
        per_k: dict[int, dict[str, list[float]]] = {}
        by_worker: dict[str, list[float]] = {}
        with open(folder / "step0000-light/interlock.csv") as fh:
            for r in csv.DictReader(fh):
                if r["boundary_skew_us"]:
                    skew = float(r["boundary_skew_us"])
                    per_k.setdefault(int(r["subinterval"]), {}).setdefault(r["host"], []).append(
                        skew)
                    by_worker.setdefault(f"{r['host']}/{r['worker']}", []).append(skew)
        spreads: list[float] = []
        bounds: list[float] = []
        lags: list[float] = []
        by_host: dict[str, list[float]] = {}
        for hosts_k in per_k.values():
            firsts = {h: min(v) for h, v in hosts_k.items()}  # each host's first worker
            for h, t in firsts.items():
                by_host.setdefault(h, []).append(t)
            spreads.append(max(firsts.values()) - min(firsts.values()))
            bounds.append(max(t + uncertainty[h] for h, t in firsts.items())
                          - min(t - uncertainty[h] for h, t in firsts.items()))
            lags += firsts.values()
        print(f"boundaries: {len(spreads)}; switch after the planned boundary: median "
              f"{statistics.median(lags):.0f} us")
        print("each host's first switch after the boundary, median: " + ", ".join(
            f"{h} {statistics.median(v):.0f} us" for h, v in sorted(by_host.items())))
        print("each worker's switch after the boundary, median and max: " + ", ".join(
            f"{w} {statistics.median(v):.0f}/{max(v):.0f} us"
            for w, v in sorted(by_worker.items())))
        goal_us = args.goal_ms * 1000
        for what, values in (("measured skew between hosts", spreads),
                             ("skew bound (with offset uncertainty)", bounds)):
            values.sort()
            p90, worst = values[int(0.9 * (len(values) - 1))], values[-1]
            print(f"{what}: median {statistics.median(values):.0f} us, p90 {p90:.0f} us, "
                  f"max {worst:.0f} us (goal <= {goal_us:.0f} us: "
                  f"{'met' if p90 <= goal_us else 'MISSED'} at p90, "
                  f"{'met' if worst <= goal_us else 'MISSED'} at max)")
        return 0 if native == len(hosts) else 1


if __name__ == "__main__":
    sys.exit(main())
