"""Many-hosts benchmark (run through scripts/bench_hosts): one master, 10, 100 and 1,000 hosts.

Runs the whole ``ivypy run`` path (``master.run.lifecycle.Run``: connect, handshake and clock,
discovery, the step's plan, ``Go``, every subinterval's results, the grants, the measurement
window, the summaries and files) against in-memory hosts (``master.hosts.memory``: a real
``SlaveSession`` per host, its I/O synthetic), so that only the master's control plane and
rollups are measured, and a thousand hosts fit on one machine. Each host runs
``--workloads`` (default 1) paced random reads of 100 IOPS on a file LUN; one step of
``--subintervals`` (default 5) of ``--subinterval-s`` (default 5 s: the in-memory slaves
share the master's one thread, and a thousand of them take seconds of it at each boundary).

The in-memory slaves run in the master's process and thread, so their CPU is counted apart:
every call into a slave session (bytes in, clock ticks) and the harness's framing of what it
sends is timed (``time.thread_time``), and the master's CPU is the process's less that.
Prints, per host count:

- start: from the run's start to its first subinterval's results recorded, less that
  subinterval's length (the hosts' connections, handshakes, clock pings, discovery, the step's
  plan and ``Go``), and the slaves' CPU in it (on a real host it is the host's, spent
  meanwhile: here each in-memory host's discovery scans this machine's /proc);
- the master's CPU per subinterval (mean over the step's subintervals after the first);
- the process's RSS after each subinterval, and its growth per subinterval (the process's:
  the master's and the in-memory slaves' together; the harness's own record of what each
  slave ran is cleared each subinterval);
- the step's end (window, summaries, files) as the time from the last subinterval's results
  to the run's end.

No goal of its own (the issue asks how it grows): the ratio per host of each figure against
the 10-host case is printed, so a figure that grows faster than the host count shows. A run
that fails prints its message and the exit status is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from master.config import parse_config_text
from master.hosts.memory import MemoryHost, MemoryHosts
from master.live.view import LiveView
from master.run import recorder as recorder_module
from master.run.lifecycle import Run
from slave.session import SlaveSession

TEST = """\
test: many-hosts
subinterval_seconds: {sub_s}
hosts: [{hosts}]
luns:
  - {{hosts: all, file: "${{output_root}}/lun", size: 1MiB, create: true}}
steps:
  - name: fixed
    workloads:
{workloads}
    warmup_seconds: 0
    measure_seconds: {measure_s}
    cooldown_seconds: 0
"""
WORKLOAD = ("      - {{name: w{i}, iosequencer: random_independent, blocksize: 4KiB, iops: 100, "
            "read_fraction: 100%}}")


@dataclass
class Meter:
    """The slaves' CPU (every call into their sessions and the harness's framing), and what
    each recorded subinterval cost."""

    slave_cpu_s: float = 0.0
    t0: float = 0.0
    first_recorded_s: float | None = None
    first_slave_cpu_s: float = 0.0
    last_recorded_wall: float = 0.0
    marks: list[tuple[float, float, int]] = field(default_factory=list)  # (cpu, slave, rss)
    hosts: MemoryHosts = field(default_factory=MemoryHosts)

    def timed(self, fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            c0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                self.slave_cpu_s += time.thread_time() - c0
        return call


def _patch(meter: Meter) -> list[tuple[Any, str, Any]]:
    """Time the slaves' side; note each recorded subinterval. Returns what to put back."""
    undo = []
    for owner, name in ((SlaveSession, "on_bytes"), (SlaveSession, "on_tick"),
                        (MemoryHost, "_from_slave")):
        orig = getattr(owner, name)
        undo.append((owner, name, orig))
        setattr(owner, name, meter.timed(orig))
    orig_record = recorder_module.StepRecorder.record
    proc = psutil.Process()

    def record(self: Any, *args: Any, **kw: Any) -> Any:
        out = orig_record(self, *args, **kw)
        now = time.perf_counter()
        if meter.first_recorded_s is None:
            meter.first_recorded_s = now - meter.t0
            meter.first_slave_cpu_s = meter.slave_cpu_s
        meter.last_recorded_wall = now
        for host in meter.hosts.hosts.values():  # what the harness keeps for tests' asserts
            host.backend.ran.clear()
        meter.marks.append((time.process_time(), meter.slave_cpu_s, proc.memory_info().rss))
        return out

    undo.append((recorder_module.StepRecorder, "record", orig_record))
    recorder_module.StepRecorder.record = record  # type: ignore[method-assign]
    return undo


@dataclass(frozen=True)
class Figures:
    hosts: int
    start_s: float
    start_slave_cpu_s: float
    master_cpu_ms: float
    rss_mb: float
    rss_growth_kb: float
    end_s: float


def one(n_hosts: int, workloads: int, subintervals: int, sub_s: float, root: Path) -> Figures:
    folder = root / f"hosts{n_hosts}"
    folder.mkdir()
    text = TEST.format(sub_s=sub_s, measure_s=subintervals * sub_s,
                       hosts=", ".join(f"h{i:04d}" for i in range(n_hosts)),
                       workloads="\n".join(WORKLOAD.format(i=i) for i in range(workloads)))
    (folder / "test.yaml").write_text(text)
    cfg = parse_config_text(text, str(folder / "test.yaml"),
                            output_root_override=str(folder / "out"), cwd=folder)
    meter = Meter()
    undo = _patch(meter)
    try:
        meter.t0 = time.perf_counter()
        with open(os.devnull, "w") as console:
            result = asyncio.run(Run(cfg, view=LiveView(console, rich_mode=False),
                                     connect=meter.hosts.connect).execute())
        ended = time.perf_counter()
    finally:
        for owner, name, orig in undo:
            setattr(owner, name, orig)
    if result.exit_code != 0:
        raise SystemExit(f"{n_hosts} hosts: the run failed (exit {result.exit_code}): "
                         f"{result.message}")
    marks = meter.marks
    steady = [((c1 - s1) - (c0 - s0)) for (c0, s0, _), (c1, s1, _) in
              itertools.pairwise(marks)]
    rss = [r for _, _, r in marks]
    growth = (rss[-1] - rss[1]) / max(1, len(rss) - 2) if len(rss) > 2 else 0.0
    assert meter.first_recorded_s is not None
    return Figures(n_hosts, meter.first_recorded_s - sub_s, meter.first_slave_cpu_s,
                   1e3 * sum(steady) / max(1, len(steady)), rss[-1] / 2**20, growth / 1024,
                   ended - meter.last_recorded_wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="10,100,1000", help="host counts, comma-separated")
    ap.add_argument("--workloads", type=int, default=1, help="workloads per host")
    ap.add_argument("--subintervals", type=int, default=5)
    ap.add_argument("--subinterval-s", type=float, default=5.0)
    args = ap.parse_args()
    counts = [int(x) for x in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="ivypy-bench-hosts-", dir="/dev/shm"
                                 if Path("/dev/shm").is_dir() else None))
    rows: list[Figures] = []
    try:
        for n in counts:
            f = one(n, args.workloads, args.subintervals, args.subinterval_s, root)
            rows.append(f)
            print(f"{n:>5} hosts: start {f.start_s:6.2f} s (slaves' CPU in it "
                  f"{f.start_slave_cpu_s:5.2f} s), master CPU {f.master_cpu_ms:7.1f} ms per "
                  f"subinterval, RSS {f.rss_mb:6.1f} MB (+{f.rss_growth_kb:6.1f} kB per "
                  f"subinterval), step's end {f.end_s:5.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = rows[0]
    print(f"\nper host, against {base.hosts} hosts (1.00 = linear in hosts):")
    for f in rows[1:]:
        scale = f.hosts / base.hosts
        print(f"{f.hosts:>5} hosts: start x{f.start_s / base.start_s / scale:.2f}, "
              f"master CPU per subinterval x{f.master_cpu_ms / base.master_cpu_ms / scale:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
