"""A run's data verification on the master (``master.run.verifying.RunVerification``), its
logic alone: the numbers of LUNs and writers and the targets the creates carry, the map
extended step by step, each subinterval's reports into the map, the counts and the columns per
rollup instance, the damaged blocks told in events and kept in ``verify/damaged/``,
``on_error``, and what a run with ``verify:`` may not be (in-memory hosts: none verifies, and
``--resume``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from master.analysis.rollup import Grouping
from master.config.schema import VerifyConfig
from master.run.verifying import EVENTS_MAX, RunVerification, shared_overlap, verify_misfit
from master.verify.mapstore import VerifyMap
from protocol import verify as pv
from protocol.messages import Stopped, SubintervalResult
from protocol.params import WorkloadParams
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run, run_cli

KEY = 0xABCDEF


def _inst(host: str, lun: str, name: str, size: int = 64 * 4096 + 100, identity: str = "",
          params: WorkloadParams | None = None) -> Any:
    """A stand-in of a ``WorkloadInstance``: what ``RunVerification`` reads of one."""
    return SimpleNamespace(id=f"{host}:{lun}:{name}", host=host, name=name, lun_key=(host, lun),
                           params=params or WorkloadParams(),
                           lun=SimpleNamespace(lun=SimpleNamespace(
                               size_bytes=size, path=lun, info={"identity": identity})))


def _report(luns: list[int], blocks: list[int], bytes_: list[int],
            counts: dict[str, list[int]] | None = None,
            findings: list[dict[str, Any]] | None = None,
            confirmed: dict[str, int] | None = None) -> dict[str, Any]:
    return {"journal": pv.journal_to_wire(np.array(luns), np.array(blocks),
                                          np.array(bytes_, dtype=np.uint8)),
            "counts": counts or {}, "found": len(findings or []),
            "findings": findings or [], "confirmed": confirmed or {}}


def _result(k: int, verify: dict[str, Any] | None) -> SubintervalResult:
    return SubintervalResult(step=0, subinterval=k, start_ns=0, end_ns=1, workload_ids=[],
                             rollups=[], cpu={}, interlock=[], send_ns=0, verify=verify)


def _finding(wid: str, lun: int, offset: int, cls: str, expected: int,
             run_key: int = KEY) -> dict[str, Any]:
    return {"workload_id": wid, "lun": lun, "offset_bytes": offset, "class": cls,
            "expected": expected, "sector": 2,
            "found": {"offset_bytes": offset + 8192, "serial": 9, "run_key": run_key, "lun": lun,
                      "writer": 0, "gen": 3, "attempt": 0, "crc_ok": True},
            "done_ns": 5, "data": bytes([7]) * 4096}


@pytest.fixture
def events() -> list[tuple[str, str, dict[str, Any]]]:
    return []


def _verification(tmp_path: Path, events: list[tuple[str, str, dict[str, Any]]],
                  **config: Any) -> RunVerification:
    def event(level: str, message: str, **kw: Any) -> None:
        events.append((level, message, kw))
    return RunVerification(VerifyConfig(**config), tmp_path, event, run_key=KEY)


def test_luns_and_writers_are_numbered_in_order_and_the_map_grows_step_by_step(
        tmp_path: Path, events: list[Any]) -> None:
    v = _verification(tmp_path, events)
    a, b = _inst("h1", "/dev/a", "w"), _inst("h2", "/dev/a", "w")
    v.prepare([a, b])
    assert v.lun_numbers == {("h1", "/dev/a"): 0, ("h2", "/dev/a"): 1}  # by host and path
    assert v.target(b) == {"lun": 1, "first_bytes": 0, "size_bytes": 64 * 4096,
                           "run_key": KEY, "attempt": 0, "writer": 1}  # whole map blocks
    c = _inst("h1", "/dev/c", "r", size=8 * 4096)
    v.prepare([a, c, _inst("h1", "/dev/a", "r")])  # a later step: one LUN and two writers new
    assert v.target(c)["lun"] == 2 and v.writers == {a.id: 0, b.id: 1, c.id: 2,
                                                     "h1:/dev/a:r": 3}
    v.close()
    back = VerifyMap.load(tmp_path)
    assert [(x.host, x.lun, x.size_bytes) for x in back.luns] == [
        ("h1", "/dev/a", 64 * 4096), ("h2", "/dev/a", 64 * 4096), ("h1", "/dev/c", 8 * 4096)]
    assert back.run_key == KEY and len(back.writers) == 4
    back.close()


def test_reports_go_into_the_map_counts_and_columns(tmp_path: Path, events: list[Any]) -> None:
    v = _verification(tmp_path, events)
    w, r = _inst("h1", "/dev/a", "w"), _inst("h2", "/dev/b", "r")
    v.prepare([w, r])
    now = v.record(0, 4, [
        ("h1", _result(4, _report([0, 0], [3, 3], [1, 2], {w.id: [0, 0, 0, 0, 0, 0]},
                                  confirmed={"0": 40}))),
        ("h2", _result(4, _report([1], [5], [1], {r.id: [10, 0, 0, 1, 0, 2]},
                                  [_finding(r.id, 1, 5 * 4096, "missing", 4)] * 3))),
        ("h3", _result(4, None))])
    assert set(now) == {w.id, r.id} and v.found == 3
    assert v.map is not None and v.map.map_of(0)[3] == 2 and v.map.map_of(1)[5] == 1
    assert v.map.confirmed == {0: 40}
    # a rollup of two instances: the writer's and the reader's
    g = Grouping.from_keys("host", ["h1", "h2"])
    cols = v.columns(now, [w.id, r.id], {"host": g})["host"]
    assert cols["verify_blocks_checked"].tolist() == [0, 10]
    assert cols["verify_errors"].tolist() == [0, 3]
    assert cols["verify_stale"].tolist() == [0, 1] and cols["verify_missing"].tolist() == [0, 2]
    # the drain's report (Stopped.verify) counts too; the run's totals
    v.record(0, 5, [("h2", Stopped(step=0, last_subinterval=4, verify=_report(
        [1], [6], [1], {r.id: [2, 0, 0, 0, 0, 0]})))])
    assert v.summary() == {"blocks_checked": 12, "damaged_blocks": 3, "corrupt": 0,
                           "misplaced": 0, "stale": 1, "torn": 0, "missing": 2}
    v.close()


def test_damaged_blocks_are_told_and_kept_up_to_their_limits(tmp_path: Path,
                                                            events: list[Any]) -> None:
    v = _verification(tmp_path, events, findings_kept=2)
    r = _inst("h2", "/dev/b", "r")
    v.prepare([r])
    found = [_finding(r.id, 0, b * 4096, "stale", 5 | pv.UNSETTLED) for b in range(EVENTS_MAX)]
    found.append(_finding(r.id, 0, 99 * 4096, "missing", 5, run_key=1))
    found.append(_finding(r.id, 0, 98 * 4096, "corrupt", 5))
    v.record(1, 7, [("h2", _result(7, _report([], [], [], findings=found)))])
    told = [e for e in events if e[2]["kind"] == "verify"]
    assert len(told) == EVENTS_MAX + 1  # the first 20, then one line for the rest
    level, text, kw = told[0]
    assert level == "ERROR" and kw == {"host": "h2", "kind": "verify", "step": 1,
                                       "subinterval": 7}
    assert text == (f"verify: stale block at offset 0 of LUN /dev/b (workload {r.id}): "
                    "expected generation 5 or the one before, found a stamp of this run: "
                    f"generation 3, writer {r.id} (serial 9, attempt 0), LUN h2:/dev/b offset "
                    "8192 (sector 2)")
    assert "more damaged blocks than 20" in told[-1][1]
    kept = sorted((tmp_path / "verify" / "damaged").glob("*.json"))
    assert [p.name for p in kept] == ["0001-step0001-sub0007.json",
                                      "0002-step0001-sub0007.json"]
    doc = json.loads(kept[0].read_text())
    assert doc["expected"] == {"generation": 5, "unsettled": True, "run_key": KEY,
                               "lun": "/dev/b", "first_sector_offset_bytes": 0}
    assert doc["found"]["writer"] == r.id and doc["class"] == "stale"
    assert (kept[0].parent / doc["found_bytes"]).read_bytes() == bytes([7]) * 4096
    v.close()


@pytest.mark.parametrize(("on_error", "stops"), [("stop", True), ("continue", False)])
def test_on_error_stop_wants_the_step_ended_after_damage_in_it(
        tmp_path: Path, events: list[Any], on_error: str, stops: bool) -> None:
    v = _verification(tmp_path, events, on_error=on_error)
    r = _inst("h2", "/dev/b", "r")
    v.prepare([r])
    v.record(0, 0, [("h2", _result(0, _report([], [], [])))])
    assert not v.stop_wanted()
    v.record(0, 1, [("h2", _result(1, _report([], [], [], findings=[
        _finding(r.id, 0, 0, "torn", 2)])))])
    assert v.stop_wanted() is stops
    v.prepare([r])  # the next step: its own damage decides
    assert not v.stop_wanted()
    v.close()


VERIFIED = """\
test: verified
subinterval_seconds: 0.2
hosts: [localhost]
verify: true
luns:
  - {hosts: localhost, file: "${output_root}/lun", size: 1MiB, create: true}
steps:
  - name: s
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 100}
    measure_seconds: 0.4
"""


def test_a_host_that_cannot_verify_refuses_the_create_also_when_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # in-memory hosts have no data to verify: the create is refused (exit 2, before I/O); the
    # failed run's --resume takes its map on (one more attempt) and is refused the same way
    result = execute(memory_run(memory_config(tmp_path, VERIFIED), MemoryHosts()))
    assert result.exit_code == 2, result.message
    assert "an in-memory host has no data to verify" in result.message
    folder = result.folder
    meta = folder / "verify" / "map.json"
    assert json.loads(meta.read_text())["attempt"] == 0
    capsys.readouterr()
    assert run_cli(["run", "--resume", str(folder), "--plain"], monkeypatch) == 2
    said = capsys.readouterr()
    assert "an in-memory host has no data to verify" in said.out + said.err
    assert json.loads(meta.read_text())["attempt"] == 1


def test_a_resumed_verification_keeps_its_numbers_and_gives_each_map_to_its_host_once(
        tmp_path: Path, events: list[Any]) -> None:
    v = _verification(tmp_path, events)
    w = _inst("h1", "/dev/a", "w")
    v.prepare([w])
    v.record(0, 0, [("h1", _result(0, _report([0], [7], [3])))])
    v.step_done()
    v.close()
    again = RunVerification.resumed(VerifyConfig(), tmp_path, lambda *a, **k: None)
    assert again.run_key == KEY and again.lun_numbers == {("h1", "/dev/a"): 0}
    assert again.crashes == [[0, -1]]  # attempt 0's writer 0 confirmed nothing
    assert again.map is not None and again.map.attempt == 1
    assert again.target(w)["attempt"] == 1 and again.target(w)["writer"] == 0
    new = _inst("h2", "/dev/b", "r")
    again.prepare([w, new])  # a LUN and a writer the first attempt did not have
    assert again.lun_numbers[("h2", "/dev/b")] == 1 and again.writers[new.id] == 1
    (load,) = again.to_load([w, new])
    assert load[:2] == ("h1", 0) and load[2][7] == 3 and len(load[2]) == 64
    assert again.to_load([w]) == []  # once
    again.close()
    assert json.loads((tmp_path / "verify" / "map.json").read_text())["attempt"] == 1


@pytest.mark.parametrize(("params", "why"), [
    ({"blocksize_bytes": 8192}, None),
    ({"blocksize_bytes": 512}, "blocksize must be a multiple of 4096 bytes (the map's block): "
                               "h1:/dev/a:w would take 512"),
    ({"write_data": "dedupable", "write_data_ratio": 2.0, "read_fraction": 0.5},
     "dedupable data cannot be verified"),
    ({"write_data": "dedupable", "write_data_ratio": 2.0}, None),  # it reads only
])
def test_a_live_edit_a_verified_run_cannot_verify_is_refused(params: dict[str, Any],
                                                             why: str | None) -> None:
    got = verify_misfit(_inst("h1", "/dev/a", "w"), WorkloadParams(**params))
    assert got is None if why is None else why in (got or ""), got


def test_a_lun_two_hosts_reach_is_one_lun_of_the_map_and_each_host_is_given_its_map(
        tmp_path: Path, events: list[Any]) -> None:
    # h1 and h2 reach one device (one identity) by different paths: one number, one map; h1
    # writes it in the first step; h2, given the master's map before the second, reads it;
    # h1's own map is behind once h2 wrote in the third, and is given the master's again
    v = _verification(tmp_path, events)
    a = _inst("h1", "/dev/loop4", "w", identity="dev:boot:7:4")
    b = _inst("h2", "/dev/sdq", "r", identity="dev:boot:7:4")
    c = _inst("h2", "/dev/loop5", "w", identity="dev:boot:7:5")
    v.prepare([a])
    assert v.to_load([a]) == []  # its first host starts from the empty map, as the master's
    v.record(0, 0, [("h1", _result(0, _report([0], [3], [1])))])
    v.step_done()
    v.prepare([b, c])
    assert v.lun_numbers == {("h1", "/dev/loop4"): 0, ("h2", "/dev/sdq"): 0,
                             ("h2", "/dev/loop5"): 1}
    assert v.target(b)["lun"] == 0 and v.target(c)["lun"] == 1
    (load,) = v.to_load([b, c])
    assert load[:2] == ("h2", 0) and load[2][3] == 1
    assert v.to_load([b]) == []  # once
    meta = json.loads((tmp_path / "verify" / "map.json").read_text())
    assert [(x["number"], x["host"], x["lun"], x["identity"], x["also"]) for x in meta["luns"]] \
        == [(0, "h1", "/dev/loop4", "dev:boot:7:4", [["h2", "/dev/sdq"]]),
            (1, "h2", "/dev/loop5", "dev:boot:7:5", [])]
    v.record(1, 0, [("h2", _result(0, _report([0], [9], [1])))])  # h2 writes LUN 0
    v.step_done()
    v.prepare([a, b])
    assert [(h, n) for h, n, _ in v.to_load([a, b])] == [("h1", 0)]  # h2 holds its own
    v.close()
    again = RunVerification.resumed(VerifyConfig(), tmp_path, lambda *x, **k: None)
    assert again.lun_numbers[("h2", "/dev/sdq")] == 0
    again.prepare([a, b])
    assert [(h, n) for h, n, _ in again.to_load([a, b])] == [("h1", 0), ("h2", 0)]
    again.close()


W, R = WorkloadParams(read_fraction=0.0), WorkloadParams(read_fraction=1.0)
HALF = 32 * 4096


@pytest.mark.parametrize(("a", "b", "clash"), [
    ((W, 0, 0), (R, 0, 0), True),  # one writes all, the other reads all
    ((W, 0, HALF), (R, HALF, 0), False),  # separate halves
    ((W, 0, HALF + 4096), (W, HALF, 0), True),  # one block shared
    ((R, 0, 0), (R, 0, 0), False),  # both read
    ((W, 0, 0), (W, 0, 0), False),  # other LUNs (no identity in common)
])
def test_two_hosts_on_one_verified_lun_keep_to_separate_ranges_where_one_writes(
        a: tuple[WorkloadParams, int, int], b: tuple[WorkloadParams, int, int],
        clash: bool) -> None:
    same = a != b or a[0] is R
    insts = [
        _inst("h1", "/dev/x", "a", 64 * 4096, "wwid:1", a[0].replace(
            range_start_bytes=a[1], range_end_bytes=a[2])),
        _inst("h2", "/dev/y", "b", 64 * 4096, "wwid:1" if same else "wwid:2", b[0].replace(
            range_start_bytes=b[1], range_end_bytes=b[2])),
        _inst("h1", "/dev/x", "c", 64 * 4096, "wwid:1", R.replace(  # same host: never
            range_start_bytes=0, range_end_bytes=0)),
    ]
    got = shared_overlap(insts)
    assert (got is not None) == clash, got
    if clash:
        assert got is not None and "h1:/dev/x:a and h2:/dev/y:b reach one LUN from two hosts" \
            in got and "wwid:1" in got
    # a live edit of the reader into the writer's half is judged with the edit's parameters
    if not clash and a[0] is W and b[0] is R:
        moved = {insts[1].id: insts[1].params.replace(range_start_bytes=0)}
        assert shared_overlap(insts, moved) is not None
