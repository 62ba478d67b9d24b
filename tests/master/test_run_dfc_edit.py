"""An operator's edit during a DFC step, on in-memory hosts (``tests/master/memhosts.py``): the
edit is what DFC starts from next. DFC holds the ``all`` instance's IOPS at 1,000 (the
synthetic I/O completes exactly its setting); ``ivypy edit all total_iops=400`` mid-step is in
force from the subinterval the slave announced (dfc.csv ``iops_in_force``, what the slave
ran); until then DFC makes no move that would undo it (its rows held at 400); from then its
first move starts from 400, and its window and settle count start again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from master.live.editparse import parse_params
from master.run.lifecycle import Run
from master.run.operator import RunControl
from master.run.outcome import EXIT_INVALID, EXIT_OK
from protocol.messages import Message, SubintervalResult
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows as read_rows

DFC_STEP = """\
test: mem
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun", size: 1MiB, create: true}}
steps:
  - name: d
    workloads:
      - {{name: a, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 500}}
      - {{name: b, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 500,
         skew_weight: 3}}
    warmup_seconds: 0
    measure_seconds: 3.6
    dfc: {{focus_rollup: all, focus_metric: IOPS, target: 1000, low_iops: 100,
          high_iops: 5000{window}}}
"""


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control socket's registry of active runs under tmp_path, not ~/.cache."""
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))


def _edit_mid_step(tmp_path: Path, edit: dict[str, Any], after_k: int = 6, window: str = "",
                   instance: tuple[str, str] = ("all", "all"), text: str = DFC_STEP
                   ) -> tuple[Any, dict[str, Any], MemoryHosts]:
    """The DFC step run with the operator's ``edit`` of ``all`` made once subinterval
    ``after_k`` is recorded (DFC's move after it already taken by the slave)."""
    cfg = memory_config(tmp_path, text.format(window=window))
    box: dict[str, Any] = {}

    async def operator() -> None:
        run: Run = box["run"]
        while run.step_state is None or run.step_state.last_recorded < after_k:
            await asyncio.sleep(0.002)
        try:
            box["edit"] = await RunControl(run).edit(*instance, parse_params(edit))
            # the last subinterval recorded when the edit was acknowledged: DFC's moves after
            # later ones are held (one computed before could still be made; the slave then
            # takes the edit after it, as the master's settings do)
            box["recorded_at_ack"] = run.step_state.last_recorded
        except Exception as exc:  # the test reads it
            box["refused"] = exc

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult) and m.subinterval == after_k:
            box["task"] = asyncio.ensure_future(operator())
        return True

    hosts = MemoryHosts(watch)
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run)
    assert box["task"].done()
    return result, box, hosts


def test_an_operators_edit_is_what_dfc_starts_from_next(tmp_path: Path) -> None:
    result, box, hosts = _edit_mid_step(tmp_path, {"total_iops": 400})
    assert result.exit_code in (EXIT_OK, EXIT_INVALID), result.message
    assert "refused" not in box, box.get("refused")
    assert box["edit"]["dfc_steered"] == ["all"]  # the CLI warns that DFC keeps moving it
    e = box["edit"]["effective_subinterval"]
    assert e > 6
    rows = {int(r["subinterval"]): r for r in
            read_rows(result.folder / "step0000-d" / "dfc.csv")}
    # before the edit DFC steered towards its target, by its own moves
    assert float(rows[5]["iops_in_force"]) == pytest.approx(1000.0, rel=0.05)
    # between the edit and the subinterval it holds in, DFC makes no move (one from what ran
    # before would undo the edit a subinterval later): held at the operator's total
    assert e >= box["recorded_at_ack"] + 2  # the slave ran at least one more meanwhile
    for k in range(box["recorded_at_ack"] + 1, e):
        assert rows[k]["held"] == "true" and float(rows[k]["new_iops"]) == 400.0, rows[k]
    # in force from e, as the slave ran it: 400 split by skew weight (1:3)
    assert float(rows[e]["iops_in_force"]) == pytest.approx(400.0)
    ran = {k: iops for s, k, iops in hosts["localhost"].backend.ran if s == 0}
    assert sorted(ran[e].values()) == pytest.approx([100.0, 300.0]), ran[e]
    assert sorted(ran[e + 1].values()) == pytest.approx([100.0, 300.0]), ran[e + 1]
    # its first move starts from the edit: 400 read against a target of 1000 moves up from
    # 400, by at most its largest step (x2); a move from its own last command would have
    # stayed at 1000 (the delay compensation counting the 400 as its own move not yet run)
    assert rows[e]["held"] == "false" and rows[e]["outlier"] == "false", rows[e]
    first = float(rows[e]["new_iops"])
    assert 400.0 < first <= 800.0, rows[e]
    assert float(rows[e + 2]["iops_in_force"]) == pytest.approx(first), rows[e + 2]
    assert sum(ran[e + 2].values()) == pytest.approx(first), ran[e + 2]
    # and it settles at its target again
    last = max(rows)
    assert float(rows[last]["iops_in_force"]) == pytest.approx(1000.0, rel=0.05), rows[last]
    events = (result.folder / "events.csv").read_text()
    assert "DFC starts from it for all" in events


def test_an_edit_restarts_the_dfc_window(tmp_path: Path) -> None:
    """With ``window_seconds``, DFC moves once the subintervals run at one setting add up to
    a window: the operator's edit starts a new one at the subinterval it holds in, so the
    first move after it reads only subintervals run at the operator's total."""
    result, box, _ = _edit_mid_step(tmp_path, {"total_iops": 400}, after_k=5,
                                    window=", window_seconds: 0.4")
    assert result.exit_code in (EXIT_OK, EXIT_INVALID), result.message
    e = box["edit"]["effective_subinterval"]
    moves = [r for r in read_rows(result.folder / "step0000-d" / "dfc.csv")
             if r["held"] == "false" and int(r["subinterval"]) >= e]
    first = moves[0]
    # the window of two subintervals at 400 ends at e + 1: its IOPS read exactly 400
    assert int(first["subinterval"]) == e + 1, moves[:3]
    assert float(first["measured"]) == pytest.approx(400.0)
    assert 400.0 < float(first["new_iops"]) <= 800.0, first


def test_max_is_refused_on_workloads_dfc_steers(tmp_path: Path) -> None:
    """``iops=max`` on a DFC focus instance's workloads would leave DFC no total to start
    from: refused, naming the instance, and nothing changes."""
    result, box, hosts = _edit_mid_step(tmp_path, {"iops": "max"})
    assert result.exit_code in (EXIT_OK, EXIT_INVALID), result.message
    assert "DFC steers the IOPS of all" in str(box["refused"])
    assert all(None not in iops.values() for _, _, iops in hosts["localhost"].backend.ran)


def test_an_edit_of_the_dfc_target_is_what_dfc_aims_at_from_its_next_move(
        tmp_path: Path) -> None:
    """``ivypy edit all dfc.target=600 dfc.high_iops=700`` mid-step: DFC's rows after the
    edit aim at 600 within the new bounds, and it settles there; the reply names the DFC in
    force, the edit's event says it, and the verdict judges the readings from the edit on."""
    result, box, _ = _edit_mid_step(tmp_path, {"dfc.target": 600, "dfc.high_iops": 700})
    assert "refused" not in box, box.get("refused")
    reply = box["edit"]
    assert reply["dfc"] == {"focus_metric": "IOPS", "target": 600.0, "low_iops": 100.0,
                            "high_iops": 700.0}
    assert reply["workloads"] == []
    k = reply["effective_subinterval"]  # the first move made for the new target: after k
    rows = {int(r["subinterval"]): r for r in
            read_rows(result.folder / "step0000-d" / "dfc.csv")}
    assert all(float(rows[j]["target"]) == 1000.0 for j in rows if j < k)
    assert all(float(rows[j]["target"]) == 600.0 for j in rows if j >= k)
    assert all(float(rows[j]["new_iops"]) <= 700.0 for j in rows if j >= k)
    last = max(rows)
    assert float(rows[last]["iops_in_force"]) == pytest.approx(600.0, rel=0.05), rows[last]
    # the readings before the edit (1,000) are not judged against 600: valid
    assert result.exit_code == EXIT_OK, result.message
    (told,) = [e for e in read_rows(result.folder / "events.csv") if e["kind"] == "edit"]
    assert told["message"] == (
        f"live edit all dfc.target=600 dfc.high_iops=700: DFC holds IOPS at 600 with IOPS in "
        f"[100, 700] from its move after subinterval {k}")


@pytest.mark.parametrize(("edit", "instance", "text", "why"), [
    ({"dfc.low_iops": 6000}, ("all", "all"), DFC_STEP,
     "the edit cannot apply: low_iops 6000 must be less than high_iops 5000"),
    ({"dfc.target": 600}, ("workload", "localhost:*"), DFC_STEP,
     "dfc.target, dfc.low_iops and dfc.high_iops change the step's DFC as a whole: edit all"),
    ({"dfc.target": 600}, ("all", "all"), DFC_STEP[:DFC_STEP.index("    dfc:")],
     "step d has no dfc: dfc.target, dfc.low_iops and dfc.high_iops change a running DFC "
     "step"),
])
def test_an_edit_of_the_dfc_that_cannot_apply_is_refused(
        tmp_path: Path, edit: dict[str, Any], instance: tuple[str, str], text: str,
        why: str) -> None:
    result, box, _ = _edit_mid_step(tmp_path, edit, instance=instance, text=text)
    assert str(box["refused"]) == why
    rows = read_rows(result.folder / "step0000-d" / "dfc.csv")
    assert {float(r["target"]) for r in rows} == ({1000.0} if "dfc:" in text else set())
    assert not [e for e in read_rows(result.folder / "events.csv") if e["kind"] == "edit"]
