"""Boundary skew benchmark (run through scripts/bench_skew).

Brings the test bed up (``--hosts`` namespace hosts over OpenSSH, default 3) unless it is up
already with as many, gives each host its own loop device over a fully written file, runs
``ivypy run`` for ``--subintervals`` one-second subintervals at a light load, and reads
``interlock.csv``: for every subinterval, each host's buffer-switch time in the master's clock
(slave clock minus the measured offset) relative to the planned boundary. The measured skew of a
boundary is the spread of those times across hosts; its bound adds each host's clock offset
uncertainty (half its best ping RTT), which the measured skew cannot show: the latest switch
plus its host's uncertainty less the earliest switch less its host's. Prints median, p90 and max
of both against the 1 ms goal, with each host's clock offset, RTT, uncertainty and the engine
its LUN ran on. Cleans up what it created.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTBED = ROOT / "scripts" / "testbed"
STATE = Path("/run/ivypy-testbed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--subintervals", type=int, default=20)
    ap.add_argument("--goal-ms", type=float, default=1.0)
    ap.add_argument("--hosts", type=int, default=3)
    args = ap.parse_args()
    up = subprocess.run([str(TESTBED), "status"], capture_output=True).returncode == 0
    if up and len(json.loads((STATE / "hosts.json").read_text())) < args.hosts:
        subprocess.run([str(TESTBED), "down"], check=True, capture_output=True)
        up = False
    started = not up
    if started:
        subprocess.run([str(TESTBED), "up", str(args.hosts)], check=True, capture_output=True)
    loops: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="ivypy-skew-", dir="/dev/shm"))
    try:
        hosts = json.loads((STATE / "hosts.json").read_text())[:args.hosts]
        for h in hosts:
            img = tmp / f"{h['name']}.img"
            with open(img, "wb") as fh:  # written whole: a sparse file's holes read as no I/O
                for _ in range(16):
                    fh.write(os.urandom(1 << 20))
            loops.append(subprocess.run(["losetup", "--find", "--show", str(img)], check=True,
                                        capture_output=True, text=True).stdout.strip())
        host_lines = "\n".join(
            f"  - {{name: {h['name']}, address: {h['address']}, user: root, "
            f"python: /usr/bin/python3, identity_file: {STATE}/id_ed25519, "
            f"known_hosts: {STATE}/known_hosts}}" for h in hosts)
        lun_lines = "\n".join(f"  - {{hosts: [{h['name']}], path: {lp}}}"
                              for h, lp in zip(hosts, loops, strict=True))
        cfg = tmp / "skew.yaml"
        cfg.write_text(f"""test: skew
subinterval_seconds: 1
hosts:
{host_lines}
luns:
{lun_lines}
steps:
  - name: light
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 1000}}
    warmup_seconds: 0
    measure_seconds: {args.subintervals}
""")
        out = tmp / "out"
        proc = subprocess.run([sys.executable, "-m", "master", "run", str(cfg), "--output-root",
                               str(out), "--plain"], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
            return 1
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
        with open(folder / "step0000-light/interlock.csv") as fh:
            for r in csv.DictReader(fh):
                if r["boundary_skew_us"]:
                    per_k.setdefault(int(r["subinterval"]), {}).setdefault(r["host"], []).append(
                        float(r["boundary_skew_us"]))
        spreads, bounds, lags = [], [], []
        for hosts_k in per_k.values():
            firsts = {h: min(v) for h, v in hosts_k.items()}  # each host's first worker
            spreads.append(max(firsts.values()) - min(firsts.values()))
            bounds.append(max(t + uncertainty[h] for h, t in firsts.items())
                          - min(t - uncertainty[h] for h, t in firsts.items()))
            lags += firsts.values()
        print(f"boundaries: {len(spreads)}; switch after the planned boundary: median "
              f"{statistics.median(lags):.0f} us")
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
    finally:
        for lp in loops:
            subprocess.run(["losetup", "-d", lp], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
        if started:
            subprocess.run([str(TESTBED), "down"], check=False, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
