"""The warnings a run gives once, with their worst figure (``master.run.notices``): the
boundary skew (never with one host) and each device whose I/O differed from ivypy's; and, on
in-memory hosts, a run's events.csv holding each once."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from master.analysis.devstats import Disagreement
from master.run.notices import Notice, OnceARun
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run

MS = 1_000_000

#: (hosts, each boundary's (host, bound ms, step, subinterval), the warning or None)
SKEWS = [
    (1, [("h1", 9.0, 0, 3), ("h1", 12.0, 1, 0)], None),  # one host: no other boundary
    (2, [("h1", 0.5, 0, 0), ("h2", 0.9, 0, 0)], None),  # within the limit
    (2, [("h1", 0.5, 0, 0), ("h2", 2.0, 0, 0), ("h1", 4.0, 1, 3), ("h2", 1.0, 1, 3)],
     Notice("boundary skew may be up to 4.000 ms (step 1, subinterval 3: measured skew plus "
            "the clock offset's uncertainty of ±0.250 ms), more than skew_limit_seconds "
            "(1 ms), at 2 of the run's 4 host boundaries; interlock.csv has every boundary "
            "(warned once a run)", "h1", "clock", 1, 3)),
]


@pytest.mark.parametrize(("hosts", "seen", "want"), SKEWS)
def test_the_boundary_skew_is_warned_once_at_its_worst(
        hosts: int, seen: list[tuple[str, float, int, int]], want: Notice | None) -> None:
    once = OnceARun(hosts, 1 * MS)
    for host, bound_ms, step, k in seen:
        once.skew(host, round(bound_ms * MS), MS // 4, step, k)
    assert once.warnings() == ([] if want is None else [want])


def _d(host: str, dev: str, off: float) -> Disagreement:
    return Disagreement(host, (host, dev), off, f"host {host} device {dev} off by {off:.0%}")


#: (each step's disagreements, the warnings)
DEVICES = [
    ([[], []], []),
    ([[_d("h1", "7:0", 0.3)], [], [_d("h1", "7:0", 0.6)], [_d("h1", "7:0", 0.2)]],
     [Notice("host h1 device 7:0 off by 60% (step 2; it differed in steps 0, 3 too; warned "
             "once a run, at its worst step)", "h1", "device", 2)]),
    ([[_d("h1", "7:0", 0.9), _d("h2", "7:0", 0.2)], [_d("h2", "7:0", 0.4)]],
     [Notice("host h1 device 7:0 off by 90% (step 0; warned once a run, at its worst step)",
             "h1", "device", 0),
      Notice("host h2 device 7:0 off by 40% (step 1; it differed in step 0 too; warned once a "
             "run, at its worst step)", "h2", "device", 1)]),
]


@pytest.mark.parametrize(("steps", "want"), DEVICES)
def test_a_device_that_differs_is_warned_once_at_its_worst_step(
        steps: list[list[Disagreement]], want: list[Notice]) -> None:
    once = OnceARun(2, MS)
    for number, found in enumerate(steps):
        once.devices(number, found)
    assert once.warnings() == want


TEST = """\
test: once
subinterval_seconds: 0.2
skew_limit_seconds: 1us
hosts: {hosts}
luns:
{luns}
steps:
  - name: a
    workloads: [{{name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 100}}]
    warmup_seconds: 0
    measure_seconds: 0.6
  - name: b
    measure_seconds: 0.6
"""


@pytest.mark.parametrize("hosts", [["localhost"], ["localhost", "h2"]])
def test_a_run_warns_of_the_skew_once_and_never_with_one_host(tmp_path: Path,
                                                              hosts: list[str]) -> None:
    """Every boundary is past a limit of 1 us: two steps, and one warning of it in the run
    of two hosts (it was one per host and step); none in the run of one."""
    luns = "\n".join(f'  - {{hosts: {h}, file: "${{output_root}}/lun-{h}", size: 1MiB, '
                     "create: true}" for h in hosts)
    text = TEST.format(hosts=f"[{', '.join(hosts)}]", luns=luns)
    result = execute(memory_run(memory_config(tmp_path, text), MemoryHosts()))
    assert result.exit_code == 0, result.message
    with open(Path(result.folder) / "events.csv", newline="") as fh:
        skews = [e for e in csv.DictReader(fh) if "boundary skew" in e["message"]]
    if len(hosts) == 1:
        assert skews == []
        return
    (skew,) = skews
    assert skew["level"] == "WARNING" and skew["kind"] == "clock"
    assert skew["host"] in hosts and skew["step"] in ("0", "1")
    assert "warned once a run" in skew["message"]
