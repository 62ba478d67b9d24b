"""A step's start on in-memory hosts (``tests/master/memhosts.py``): ``ivypy stop`` as the step
starts (its state set, its Go not yet sent) ends it cleanly after subinterval 0; a workload that
a create runs on another engine than its LUN listed (the thread pool, as allow_engine_fallback
allows) is in the focus instance its rows have, so DFC focused on ``engine`` moves it."""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from master.run.operator import RunControl
from master.run.outcome import EXIT_OK
from protocol.params import WorkloadParams
from slave.luns import LunInfo
from tests.master.memhosts import (
    MemoryHosts,
    SyntheticBackend,
    execute,
    memory_config,
    memory_run,
)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control socket's registry of active runs under tmp_path, not ~/.cache."""
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))


STEP = """\
test: mem
subinterval_seconds: {sub}
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun", size: 1MiB, create: true,
     allow_engine_fallback: true}}
rollups: [engine]
steps:
  - name: a
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 200,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {measure_s}
{extra}"""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_stop_as_the_step_starts_ends_it_after_subinterval_0(tmp_path: Path) -> None:
    """The stop comes once the step's state is set, before its Go is sent (the slaves still
    idle): the step ends after subinterval 0, which the slave runs alone, and the run ends
    cleanly (no host taken for late for want of a Stop)."""
    cfg = memory_config(tmp_path, STEP.format(sub=0.2, measure_s=2, extra=""))
    hosts = MemoryHosts()
    run = memory_run(cfg, hosts)
    box: dict[str, Any] = {}
    started = run.view.step_started

    def step_started(*args: Any, **kwargs: Any) -> None:
        started(*args, **kwargs)
        box["stop"] = asyncio.ensure_future(RunControl(run).stop_step())

    run.view.step_started = step_started  # type: ignore[method-assign]
    result = execute(run)
    assert result.exit_code == EXIT_OK, result.message
    assert box["stop"].result()["last_subinterval"] == 0
    assert [k for s, k, _ in hosts["localhost"].backend.ran if s == 0] == [0]


def test_dfc_on_engine_moves_a_workload_that_fell_back_to_the_thread_pool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery lists the LUN's engine as ``synthetic``; the create runs its workload on
    ``threadpool`` (libaio could not be had, the test allows the fallback). DFC focused on
    the ``engine`` rollup controls instance ``threadpool``, whose rows there are: it measures
    it and moves its IOPS from 200 towards the target of 1000, each move sent to the slave."""
    def create(self: SyntheticBackend, workload_id: str, lun: LunInfo, params: WorkloadParams,
               engine: str = "auto", fallback: bool = False,
               verify: dict[str, int] | None = None,
               verify_map: Any = None) -> dict[str, Any]:
        assert fallback
        self.workloads[workload_id] = params
        return {"engine": "threadpool", "warning": f"LUN {lun.path}: libaio unavailable"}

    edits: list[float | None] = []
    edit_many = SyntheticBackend.edit_many

    def edit_many_seen(self: SyntheticBackend, batch: Sequence[tuple[str, WorkloadParams]]
                       ) -> None:
        edits.extend(p.iops for _, p in batch)
        edit_many(self, batch)

    monkeypatch.setattr(SyntheticBackend, "create", create)
    monkeypatch.setattr(SyntheticBackend, "edit_many", edit_many_seen)
    cfg = memory_config(tmp_path, STEP.format(sub=0.1, measure_s=1, extra="""\
    dfc: {focus_rollup: engine, focus_metric: IOPS, target: 1000, low_iops: 100,
          high_iops: 3000}
"""))
    result = execute(memory_run(cfg, MemoryHosts()))
    assert result.exit_code in (0, 1), result.message
    rows = _rows(result.folder / "step0000-a" / "dfc.csv")
    assert {r["instance"] for r in rows} == {"threadpool"}
    assert rows[0]["measured"] == "200" and rows[0]["iops_in_force"] == "200", rows[0]
    # every move reached the slave (the synthetic backend keeps one staged edit per workload,
    # so moves a subinterval apart do not show in what it ran)
    moves = [float(r["new_iops"]) for r in rows]
    assert edits == pytest.approx(moves, rel=1e-5), (edits, moves)
    assert edits[0] == pytest.approx(400.0), edits
