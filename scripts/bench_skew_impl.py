"""Boundary skew benchmark (run through scripts/bench_skew).

Brings the test bed up (3 namespace hosts over OpenSSH) unless it is up already, gives each host
its own loop device, runs ``ivypy run`` for ``--subintervals`` one-second subintervals at a light
load, and reads ``interlock.csv``: for every subinterval, each host's buffer-switch time in the
master's clock (slave clock minus the measured offset) relative to the planned boundary. The
skew of a boundary is the spread of those times across hosts. Prints median, p90 and max skew
against the 1 ms goal, with each host's clock offset and RTT. Cleans up what it created.
"""

from __future__ import annotations

import argparse
import csv
import json
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
    args = ap.parse_args()
    started = subprocess.run([str(TESTBED), "status"], capture_output=True).returncode != 0
    if started:
        subprocess.run([str(TESTBED), "up", "3"], check=True, capture_output=True)
    loops: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="ivypy-skew-", dir="/dev/shm"))
    try:
        hosts = json.loads((STATE / "hosts.json").read_text())[:3]
        for h in hosts:
            img = tmp / f"{h['name']}.img"
            subprocess.run(["truncate", "-s", "64M", str(img)], check=True)
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
        with open(folder / "hosts.csv") as fh:
            for r in csv.DictReader(fh):
                print(f"host {r['host']}: clock offset {int(r['clock_offset_ns']) / 1e3:+.1f} us, "
                      f"RTT {float(r['rtt_us']):.1f} us")
        per_k: dict[int, dict[str, list[float]]] = {}
        with open(folder / "step0000-light/interlock.csv") as fh:
            for r in csv.DictReader(fh):
                if r["boundary_skew_us"]:
                    per_k.setdefault(int(r["subinterval"]), {}).setdefault(r["host"], []).append(
                        float(r["boundary_skew_us"]))
        spreads = []
        lags = []
        for hosts_k in per_k.values():
            firsts = [min(v) for v in hosts_k.values()]  # the first worker's switch per host
            spreads.append(max(firsts) - min(firsts))
            lags += firsts
        spreads.sort()
        med = statistics.median(spreads)
        p90 = spreads[int(0.9 * (len(spreads) - 1))]
        worst = spreads[-1]
        print(f"boundaries: {len(spreads)}; switch after the planned boundary: median "
              f"{statistics.median(lags):.0f} us")
        print(f"skew between hosts: median {med:.0f} us, p90 {p90:.0f} us, max {worst:.0f} us "
              f"(goal <= {args.goal_ms * 1000:.0f} us: "
              f"{'met' if p90 <= args.goal_ms * 1000 else 'MISSED'} at p90, "
              f"{'met' if worst <= args.goal_ms * 1000 else 'MISSED'} at max)")
        return 0
    finally:
        for lp in loops:
            subprocess.run(["losetup", "-d", lp], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
        if started:
            subprocess.run([str(TESTBED), "down"], check=False, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
