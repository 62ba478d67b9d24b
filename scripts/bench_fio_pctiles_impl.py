"""fio-pctiles benchmark (run through scripts/bench_fio_pctiles).

For each case (by default a small one, 16 files x 1,200 rows, where start-up weighs most, then
one at scale, 64 files x 3,600 rows; ``--files``/``--rows`` give a single case), generates a
set of fio 3 histogram logs (one-second rows, 1856 buckets, a few hundred non-zero buckets a
row, each job's stamps offset by a few ms, so every row straddles two quanta), then times
``ivypy fio-pctiles`` and fio's own ``fio-histo-log-pctiles.py`` (shipped gzipped by Debian's
fio package, found with ``dpkg -L fio``) on the same files, both as subprocesses with 1 s
quanta, one after the other, and ivypy once more. Prints the wall-clock times, each case's
ratio against the 50x target (met, or MISSED and exit status 1), each command's CPU time and
the load average around it (the machine may be shared), and ivypy's peak memory summed over
its processes (it reads with one process per CPU) beside the size of the logs.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from master.fiologs.synth import fio_counts

TARGET_RATIO = 50.0
POOL_ROWS = 256


def find_reference() -> Path | None:
    try:
        listing = subprocess.run(["dpkg", "-L", "fio"], capture_output=True, text=True,
                                 check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listing = []
    candidates = [p for p in listing if "fio-histo-log-pctiles" in p]
    candidates += ["/usr/share/doc/fio/fio-histo-log-pctiles.py.gz",
                   "/usr/share/doc/fio/fio-histo-log-pctiles.py"]
    for c in candidates:
        if Path(c).is_file():
            return Path(c)
    return None


def generate(workdir: Path, n_files: int, n_rows: int, seed: int) -> list[Path]:
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(POOL_ROWS):  # distinct row bodies: lognormal latencies around 200 us
        lat = rng.lognormal(np.log(rng.uniform(100_000, 400_000)), 0.5,
                            size=int(rng.integers(500, 5000))).astype(np.int64)
        pool.append(", ".join(map(str, fio_counts(lat).tolist())))
    paths = []
    for f in range(n_files):
        offset = int(rng.integers(0, 50))
        pick = rng.integers(0, POOL_ROWS, size=n_rows)
        direction = f % 2
        lines = [f"{1000 * (k + 1) + offset}, {direction}, 4096, {pool[pick[k]]}\n"
                 for k in range(n_rows)]
        path = workdir / f"job{f}_clat_hist.1.log"
        path.write_text("".join(lines), encoding="ascii")
        paths.append(path)
    return paths


@dataclass
class Timing:
    wall_s: float
    cpu_s: float  # user + system, the command and its child processes
    peak_rss_bytes: int  # largest sum of RSS over the command's process tree
    load_before: float
    load_after: float

    def describe(self) -> str:
        return (f"{self.wall_s:8.2f} s wall, {self.cpu_s:7.2f} s CPU, "
                f"load average {self.load_before:.2f} -> {self.load_after:.2f}")


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.Error):  # a process that just ended
            total += p.memory_info().rss
    return total


def run_timed(cmd: list[str], stdout: Path) -> Timing:
    """Run ``cmd``, sampling the RSS of its whole process tree every 20 ms."""
    load_before = os.getloadavg()[0]
    before = os.times()
    peak = 0
    with stdout.open("w") as out:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out)
        proc = psutil.Process(child.pid)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc))
                done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        status = child.wait()
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
    if status:
        raise subprocess.CalledProcessError(status, cmd)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system)
    return Timing(wall, cpu, peak, load_before, os.getloadavg()[0])


#: (files, rows) of the cases run by default: small, where start-up weighs most, and at scale
DEFAULT_CASES: tuple[tuple[int, int], ...] = ((16, 1200), (64, 3600))


def run_case(n_files: int, n_rows: int, args: argparse.Namespace, workdir: Path) -> bool:
    """Time one case; True when the target is met (or not judged: --skip-reference)."""
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    logs = generate(workdir, n_files, n_rows, args.seed)
    size = sum(p.stat().st_size for p in logs)
    os.sync()  # write the logs out now, not while a command is being timed
    print(f"logs: {n_files} files x {n_rows} rows, {size / 1e9:.2f} GB "
          f"(generated in {time.perf_counter() - t0:.1f} s) in {workdir}")

    ours_cmd = [sys.executable, "-m", "master.cli.main", "fio-pctiles", "--time-quantum", "1",
                *map(str, logs)]
    ours = run_timed(ours_cmd, workdir / "ivypy.csv")
    print(f"ivypy fio-pctiles:         {ours.describe()}")
    print(f"                           peak RSS {ours.peak_rss_bytes / 1e6:.0f} MB (all its "
          f"processes) for {size / 1e6:.0f} MB of logs")
    if args.skip_reference:
        return True

    ref = find_reference()
    if ref is None:
        print("fio-histo-log-pctiles.py not found (is the fio package installed?)")
        return False
    script = workdir / "fio-histo-log-pctiles.py"
    if ref.suffix == ".gz":
        with gzip.open(ref, "rb") as src, script.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(ref, script)
    ref_cmd = ["python3", str(script), "--time-quantum", "1", *map(str, logs)]
    theirs = run_timed(ref_cmd, workdir / "reference.out")
    print(f"fio-histo-log-pctiles.py:  {theirs.describe()}   ({ref})")
    # ivypy once more after the reference, so a load that came or went during the
    # reference's minutes does not favour either; the slower ivypy run counts
    again = run_timed(ours_cmd, workdir / "ivypy2.csv")
    print(f"ivypy fio-pctiles again:   {again.describe()}")
    slow = max(ours, again, key=lambda t: t.wall_s)
    ratio = theirs.wall_s / slow.wall_s
    verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
    print(f"speed-up, {n_files} x {n_rows}: {ratio:.1f}x wall-clock against the slower ivypy run "
          f"(target >= {TARGET_RATIO:.0f}x): {verdict}; {theirs.cpu_s / slow.cpu_s:.1f}x in CPU "
          "time")
    return ratio >= TARGET_RATIO


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--files", type=int, help="one case of this many files (default: the "
                    "small case, 16 x 1,200, then 64 x 3,600)")
    ap.add_argument("--rows", type=int, help="rows per file of that one case")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, help="where to put the logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    ap.add_argument("--skip-reference", action="store_true",
                    help="time ivypy only (no ratio)")
    args = ap.parse_args()
    if args.files is None and args.rows is None:
        cases = DEFAULT_CASES
    else:
        cases = ((args.files or DEFAULT_CASES[-1][0], args.rows or DEFAULT_CASES[-1][1]),)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ivypy-bench-fio-pctiles-"))
    met = []
    try:
        for n_files, n_rows in cases:
            case_dir = workdir / f"{n_files}x{n_rows}" if len(cases) > 1 else workdir
            met.append(run_case(n_files, n_rows, args, case_dir))
            if len(cases) > 1 and not args.keep:
                shutil.rmtree(case_dir, ignore_errors=True)  # the next case's room on disk
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
