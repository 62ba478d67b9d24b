"""The in-memory hosts (``master.hosts.memory``): the plant's curve (table), the synthetic
backend's subintervals, and whole runs on them where DFC and ``measure:`` meet a device with a
known knee: DFC settles where the plant's latency is its target, and measure then finds the
step steady, every time."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from master.hosts import memory
from master.hosts.memory import MemoryHosts, Plant, SyntheticBackend
from protocol.batch import StatsBatch
from protocol.messages import Message, SubintervalResult
from protocol.params import WorkloadParams
from protocol.stats import BYTES, OPS
from tests.master.memhosts import execute, memory_config, memory_run
from tests.master.runhelp import rows as read_rows

KNEE = Plant(base_latency_ns=200_000, knee_iops=2000.0, knee_exponent=4.0, max_iops=5000.0)


@pytest.mark.parametrize(("plant", "total", "latency_ns"), [
    (Plant(), 0.0, 200_000),
    (Plant(), 1e6, 200_000),  # no knee: flat
    (KNEE, 0.0, 200_000),
    (KNEE, 1000.0, 212_500),  # (1/2)^4 = 1/16 above the base
    (KNEE, 2000.0, 400_000),  # at the knee: twice the base
    (KNEE, 4000.0, 3_400_000),  # 1 + 16
])
def test_the_plants_latency_rises_past_its_knee(plant: Plant, total: float,
                                                latency_ns: int) -> None:
    assert plant.latency_ns(total) == latency_ns
    if plant.knee_iops is not None and total > 0:
        assert plant.iops_at(latency_ns) == pytest.approx(total)


def test_a_subinterval_completes_each_setting_split_by_direction() -> None:
    """Each workload completes its setting (``max_iops`` at max), its writes by
    ``read_fraction``, every I/O at the plant's latency at the host's total."""
    backend = SyntheticBackend(KNEE)
    backend.create("r", None, WorkloadParams(iops=1000.0), "auto")  # type: ignore[arg-type]
    backend.create("w", None, WorkloadParams(iops=500.0, read_fraction=0.5,  # type: ignore[arg-type]
                                             blocksize_bytes=8192, iosequencer="sequential"))
    backend.go(0, 200_000_000, 1)
    got = backend.collect(0, 0)
    assert got.workload_ids == ["r", "w"]
    batch = StatsBatch.from_stats(got.stats)  # type: ignore[arg-type]
    # r: 200 random reads; w: 50 sequential reads and 50 sequential writes of 8 KiB
    assert batch.counters[0, :, OPS].tolist() == [200, 0, 0, 0]
    assert batch.counters[1, :, OPS].tolist() == [0, 0, 50, 50]
    assert batch.counters[1, 3, BYTES] == 50 * 8192
    latency = KNEE.latency_ns(1500.0)
    assert batch.lat[0, 0, 0, 1] == latency and batch.lat[1, 3, 1, 2] == latency
    assert list(backend.ran) == [(0, 0, {"r": 1000.0, "w": 500.0})]


def test_the_record_of_what_ran_keeps_the_latest_subintervals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``ran`` keeps the last ``RAN_KEPT`` subintervals collected, so that a day-long run on
    in-memory hosts does not grow with it."""
    monkeypatch.setattr(memory, "RAN_KEPT", 3)
    backend = SyntheticBackend(KNEE)
    backend.create("r", None, WorkloadParams(iops=1000.0), "auto")  # type: ignore[arg-type]
    backend.go(0, 200_000_000, 1)
    for k in range(5):
        backend.collect(k, 0)
    assert [k for _, k, _ in backend.ran] == [2, 3, 4]
    assert backend.iops_in_step(0) == [{"r": 1000.0}] * 3


DFC_ON_THE_KNEE = """\
test: knee
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun", size: 1MiB, create: true}}
steps:
  - name: hold
    workloads:
      - {{name: a, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 500}}
    warmup_seconds: {warmup_s}
    dfc: {{focus_rollup: all, focus_metric: service_time_p99_ms, target: {target_ms},
          low_iops: 100, high_iops: 20000}}
{how}
"""


@pytest.mark.parametrize("target_ms", [0.6, 1.0])
def test_dfc_settles_where_the_plants_latency_is_its_target(tmp_path: Path,
                                                            target_ms: float) -> None:
    cfg = memory_config(tmp_path, DFC_ON_THE_KNEE.format(
        target_ms=target_ms, warmup_s=3, how="    measure_seconds: 3"))
    result = execute(memory_run(cfg, MemoryHosts(plant=KNEE)))
    assert result.exit_code == 0, result.message
    rows = read_rows(result.folder / "step0000-hold" / "dfc.csv")
    settled = [r for r in rows if r["settled"] == "true"]
    assert settled, rows[-1]
    want = KNEE.iops_at(target_ms * 1e6)
    last = float(rows[-1]["iops_in_force"])
    # the ladder's bucket around 0.6-1 ms is about 1.6 % wide; within DFC's 10 % tolerance
    # the latency is at most 10 % off, so the IOPS (a fourth root) at most ~2.5 %
    assert last == pytest.approx(want, rel=0.04), (last, want)
    # measured after a warmup of 3 s, by when it had settled (from 500 IOPS, 13 moves)
    (summary,) = [r for r in read_rows(result.folder / "summary.csv") if r["rollup_type"] == "all"]
    assert summary["valid"] == "true"
    assert float(summary["service_time_p99_ms"]) == pytest.approx(target_ms, rel=0.1)


def test_measure_finds_a_dfc_step_steady_once_it_has_settled(tmp_path: Path) -> None:
    """DFC and measure together: the measurement starts once the controller settled, and the
    p99 it holds is steady to 5 % at once (the plant has no noise)."""
    cfg = memory_config(tmp_path, DFC_ON_THE_KNEE.format(target_ms=1.0, warmup_s=0, how="""\
    measure: {focus_metric: service_time_p99_ms, accuracy: 5%, min_measure_seconds: 1,
              timeout_seconds: 6}
    cooldown_seconds: 0"""))
    result = execute(memory_run(cfg, MemoryHosts(plant=KNEE)), timeout_s=60)
    assert result.exit_code == 0, result.message
    (summary,) = [r for r in read_rows(result.folder / "summary.csv") if r["rollup_type"] == "all"]
    assert summary["valid"] == "true" and summary["measure_attained"] == "true", summary
    assert float(summary["IOPS"]) == pytest.approx(KNEE.iops_at(1e6), rel=0.04)
    first = int(summary["first_subinterval"])
    dfc = {int(r["subinterval"]): r for r in
           read_rows(result.folder / "step0000-hold" / "dfc.csv")}
    assert dfc[first - 1]["settled"] == "true"
    assert math.isclose(float(summary["measurement_seconds"]),
                        (int(summary["last_subinterval"]) - first + 1) * 0.2)


STALL_TEST = """\
test: stall
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun", size: 1MiB, create: true}
steps:
  - name: fixed
    workloads:
      - {name: a, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 500}
    warmup_seconds: 0
    measure_seconds: 2
"""


def test_a_stall_of_the_whole_process_past_a_boundary_is_not_the_masters_lateness(
        tmp_path: Path) -> None:
    # the process stops for 0.25 s (more than a subinterval) as the slave sends result 3: in
    # one process, master and slave stall alike, so the slave does not cross boundary 4
    # before the master had its turn (it answers result 3 with the grant that boundary needs)
    stalled: list[int] = []

    def stall(host: str, msg: Message) -> bool:
        if isinstance(msg, SubintervalResult) and msg.subinterval == 3 and not stalled:
            stalled.append(msg.subinterval)
            time.sleep(0.25)
        return True

    cfg = memory_config(tmp_path, STALL_TEST)
    result = execute(memory_run(cfg, MemoryHosts(watch=stall)))
    assert stalled == [3]
    assert result.exit_code == 0, result.message
    rows = read_rows(result.folder / "step0000-fixed" / "all" / "all.csv")
    assert [int(r["subinterval"]) for r in rows] == list(range(10))
