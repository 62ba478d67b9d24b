"""DFC's decisions through a whole run, on in-memory hosts (``master.hosts.memory``: a real
slave session, a synthetic device at 200 us whatever the IOPS): every move is recorded, reaches
the slave from the announced subinterval on (rows show the setting in force and the IOPS follow
it), the controller drives to its bounds when the target lies beyond what the device can show,
a window moves once per window, and the verdicts say why. DFC settling on a knee is
tests/master/test_hosts_memory.py's; on a real device's knee, scripts/bench_dfc (its figures
depend on the machine, so they are a benchmark, not a test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows

TEST = """\
test: dfc
subinterval_seconds: 0.25
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun-dfc", size: 64MiB, create: true,
     allow_write: true}}
rollups: [host]
steps:
  - name: up
    workloads:
      - {{name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 16, iops: 200}}
    dfc: {{focus_rollup: host, focus_metric: service_time_p99_ms, target: 10000,
           low_iops: 100, high_iops: 3000}}
    warmup_seconds: 0
    measure_seconds: 3
  - name: down
    dfc: {{focus_rollup: host, focus_metric: service_time_p99_ms, target: 0.000001,
           low_iops: 150, high_iops: 3000}}
    measure_seconds: 1
  - name: windowed
    dfc: {{focus_rollup: host, focus_metric: service_time_p99_ms, target: 10000,
           low_iops: 100, high_iops: 3000, window_seconds: 0.75}}
    warmup_seconds: 0
    measure_seconds: 3
  - name: unsettled
    dfc: {{focus_rollup: host, focus_metric: service_time_p99_ms, target: 0.000001,
           low_iops: 150, high_iops: 3000}}
    warmup_seconds: 0
    measure: {{focus_metric: IOPS, criterion: accuracy, accuracy: 50%,
               min_measure_seconds: 0.5, timeout_seconds: 1}}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dfc")
    result = execute(memory_run(memory_config(tmp, TEST.format()), MemoryHosts()), timeout_s=90)
    # 1: up and down ran pinned at a bound, windowed rose freely but never near its target,
    # unsettled never settled
    assert result.exit_code == 1, result.message
    assert result.message == "invalid steps: up, down, windowed, unsettled"
    return Path(result.folder)


def test_every_move_recorded_and_followed(folder: Path) -> None:
    moves = rows(folder / "step0000-up/dfc.csv")
    host_rows = {int(r["subinterval"]): r for r in rows(folder / "step0000-up/host/localhost.csv")}
    assert [int(m["subinterval"]) for m in moves] == sorted(host_rows)
    for m in moves:
        assert m["instance"] == "localhost" and m["metric"] == "service_time_p99_ms"
        assert float(m["new_iops"]) >= float(m["iops_in_force"])  # p99 far below target: up
    # the setting each row shows is the move made two subintervals earlier (one to measure,
    # one for the edit to reach the next boundary)
    for k, r in host_rows.items():
        assert float(r["iops_setting"]) == pytest.approx(float(moves[k]["iops_in_force"]))
        if k >= 2:
            assert float(r["iops_setting"]) == pytest.approx(float(moves[k - 2]["new_iops"]))
    # and the IOPS follow it: the synthetic device completes each setting, to the I/O
    for k, r in host_rows.items():
        assert float(r["IOPS"]) == pytest.approx(float(r["iops_setting"]), abs=4.0), (k, r)


def test_unreachable_targets_drive_to_the_bounds(folder: Path) -> None:
    up = rows(folder / "step0000-up/dfc.csv")
    assert float(up[-1]["new_iops"]) == 3000 and up[-1]["saturated"] == "true"
    down = rows(folder / "step0001-down/dfc.csv")
    assert float(down[-1]["new_iops"]) == 150 and down[-1]["saturated"] == "true"
    events = (folder / "events.csv").read_text()
    assert "step 1 down" in events


def test_a_window_moves_once_per_window_at_one_iops(folder: Path) -> None:
    """window_seconds: 0.75 is 3 subintervals of 0.25 s: the controller acts once 3 subintervals
    at one IOPS are in, on their merged p99. Its move holds from two subintervals later, so
    the subinterval in between (still at the old IOPS) starts no window: moves at 2, 6, 10."""
    moves = rows(folder / "step0002-windowed/dfc.csv")
    host = {int(r["subinterval"]): r for r in rows(folder / "step0002-windowed/host/localhost.csv")}
    assert [int(m["subinterval"]) for m in moves] == [2, 6, 10]
    for m in moves:
        k = int(m["subinterval"])
        window = [host[j] for j in (k - 2, k - 1, k)]
        settings = {float(r["iops_setting"]) for r in window}
        assert settings == {float(m["iops_in_force"])}  # the whole window at one IOPS
        # a percentile of merged histograms lies within the range of the parts' percentiles,
        # up to a bucket's width (1/64): each part interpolates inside a bucket narrowed to its
        # own max, the merge over the bucket narrowed to the largest max
        parts = [float(r["service_time_p99_ms"]) for r in window]
        assert min(parts) * (1 - 1 / 64) <= float(m["measured"]) <= max(parts) * (1 + 1 / 64)
        assert float(m["new_iops"]) > float(m["iops_in_force"])


def test_measuring_a_controller_that_never_settled_is_invalid(folder: Path) -> None:
    """With measure on, measuring starts once the controller settles, or at the settle
    deadline. A target the device cannot reach (p99 of 1 ns) never settles: the measurement
    that the deadline starts is reported, and marked invalid, naming the controller and why:
    it sat at low_iops, with its last reading against the target."""
    moves = rows(folder / "step0003-unsettled/dfc.csv")
    assert moves and all(m["settled"] == "false" for m in moves)
    summary = [r for r in rows(folder / "summary.csv") if r["step_name"] == "unsettled"]
    assert {r["rollup_type"] for r in summary} == {"all", "host", "lun", "workload"}
    for r in summary:
        assert r["valid"] == "false"
        reason = r["invalid_reason"]
        assert "dfc: service_time_p99_ms had not settled at its target 1e-06 when the settle " \
            "deadline started the measurement at subinterval 4 (localhost: pinned at " \
            "low_iops 150 for " in reason, reason
        assert re.search(r"for \d of 4 moves \(subintervals 0-3\); service_time_p99_ms last "
                         r"[0-9.]+ vs target 1e-06", reason), reason


def test_a_step_pinned_at_a_bound_is_invalid_with_the_count(folder: Path) -> None:
    """A fixed-length DFC step whose controller sat at a bound for most of its measurement
    did not hold its target: invalid, with the bound and how many of its moves were pinned
    there (counted from dfc.csv). A windowed step that rose freely, not pinned, is invalid
    too: its readings never came within the tolerance of its target (dfc.tolerance)."""
    for step, bound, name in (("step0000-up", 3000.0, "high_iops 3,000"),
                              ("step0001-down", 150.0, "low_iops 150")):
        moves = rows(folder / f"{step}/dfc.csv")
        pinned = sum(1 for m in moves if m["saturated"] == "true"
                     and float(m["new_iops"]) == bound)
        assert pinned * 2 > len(moves)
        summary = [r for r in rows(folder / "summary.csv")
                   if r["step_name"] == step.split("-")[1]]
        assert len(summary) == 4
        for r in summary:
            assert r["valid"] == "false"
            assert (f"localhost: pinned at {name} for {pinned} of {len(moves)} moves "
                    f"(subintervals 0-{len(moves) - 1})") in r["invalid_reason"], r
    for r in rows(folder / "summary.csv"):
        if r["step_name"] == "windowed":
            assert r["valid"] == "false", r
            assert r["invalid_reason"].startswith(
                "dfc: service_time_p99_ms over the measurement window not within ±10% of its "
                "target 10000: localhost "), r["invalid_reason"]
            assert "pinned" not in r["invalid_reason"]
