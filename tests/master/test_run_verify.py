"""Data verification through the CLI (``ivypy run``) on localhost and a loop device over a
fully written file in /dev/shm (docs/verify.md): the slave's process, its workers and the
device are what is tested, the master in this process but where its own process is what a
test kills or interrupts.

* A clean run: a writer step, then a reader step, ``verify: true``: exit 0, the map in the
  run folder holds every block the writer wrote (at the generation the device's stamps
  carry), no verify event, no damaged block kept.
* Damage made during the run: a block of the device overwritten with zeros while the reader
  step re-reads the LUN: the run's own reads find it, ``events.csv`` names host, LUN, offset,
  class and the expected generation, ``verify/damaged/`` keeps the block as read,
  ``on_error: stop`` ends the step early, and the run exits 5.
* Each class made during a run (a flipped bit, another block's data, an older write's, half of
  one, zeros) while the reader step runs: each block named with its class, exit 5.
* Ctrl-C in the reader step, a block zeroed, ``--resume``: the map reaches the new slave
  before its first read, which finds the block (exit 5).
* The master, the slave or a worker SIGKILLed in a mixed step, then ``--resume``: the writes
  no record holds are taken into the map, not called damage (exit 0).

Needs root (loop devices): skipped otherwise.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import numpy.typing as npt
import psutil
import pytest

from protocol import verify as pv
from tests.master.runhelp import (
    all_gone,
    ended,
    interrupt,
    ivypy_here,
    run_folder,
    run_until,
    slave_pids,
    wait_rows,
    write_config,
)
from tests.slave.conftest import LoopFactory

pytestmark = pytest.mark.root
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json")
                    .read_text())

BLOCK = pv.MAP_BLOCK_BYTES
N_BLOCKS = 256  # 1 MiB
#: a verified test on one loop device whose first step writes it whole four times over
#: (``{test}``, ``{verify}``, ``{lun}``; the steps after it follow)
HEAD = """\
test: {test}
subinterval_seconds: 0.5
# judged on the data it verifies, not on the rate a loaded machine keeps
iops_tolerance_pct: 100
hosts: [localhost]
verify: {verify}
thresholds: ["verify_errors < 1"]
luns:
  - {{hosts: localhost, path: {lun}, allow_write: true}}
steps:
  - name: write
    workloads:
      - {{name: w, iosequencer: sequential, blocksize: 4KiB, iodepth: 4, iops: 1000,
         read_fraction: 0%}}
    warmup_seconds: 0
    measure_seconds: 1
"""
TEST = HEAD.replace("{test}", "verified") + """\
  - name: read
    workloads:
      - {{name: w, delete: true}}
      - {{name: r, iosequencer: sequential, blocksize: 4KiB, iodepth: 4, iops: 1000,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {read_s}
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _events(folder: Path) -> list[dict[str, str]]:
    return _rows(folder / "events.csv")


def _run(tmp: Path, lun: str, verify: str, read_s: float,
         during: Callable[[Path], None] | None = None) -> tuple[int, Path]:
    cfg = write_config(tmp, TEST.format(verify=verify, lun=lun, read_s=read_s))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp), "--plain")
    if during is not None:
        during(tmp / "verified")
    code = ended(thread, box)
    (folder,) = (tmp / "verified").iterdir()
    return code, folder


def _said(folder: Path) -> str:
    """The run's last word (its end message, in events.csv)."""
    return [e for e in _events(folder) if e["kind"] == "run"][-1]["message"]


def test_a_clean_verified_run_keeps_its_map_and_finds_nothing(
        tmp_path: Path, loop_device: LoopFactory) -> None:
    dev = loop_device(N_BLOCKS * BLOCK)
    code, folder = _run(tmp_path, dev.path, "true", 1)
    assert code == 0, _events(folder)[-3:]
    assert not [e for e in _events(folder) if e["kind"] == "verify"]
    # the verify columns: the reader's blocks checked, nothing damaged; the threshold held
    summary = _rows(folder / "summary.csv")
    read = [r for r in summary if r["step_name"] == "read"]
    assert read and all(float(r["verify_blocks_checked"]) >= N_BLOCKS for r in read)
    assert all(float(r["verify_errors"]) == 0 for r in summary)
    assert all(r["thresholds"].startswith("passed") for r in summary if r["rollup_type"] == "all")
    doc = json.loads((folder / "summary.json").read_text())  # the columns within its schema
    assert not list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc))
    assert not (folder / "verify" / "damaged").exists()
    meta = json.loads((folder / "verify" / "map.json").read_text())
    assert [(x["host"], x["lun"]) for x in meta["luns"]] == [("localhost", dev.path)]
    assert sorted(w["workload"] for w in meta["writers"]) == [
        f"localhost:{dev.path}:r", f"localhost:{dev.path}:w"]
    snapshot = np.frombuffer((folder / "verify" / "lun0.map").read_bytes(), dtype=np.uint8)
    with open(dev.backing_file, "rb") as f:
        blocks = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK)
    # every block the writer wrote (a second at 1,000 IOPS: 1,000 writes, the LUN 3.9 times
    # over) carries the map's generation in each of its sectors' stamps
    written = np.flatnonzero(snapshot & pv.GEN_MASK)
    assert written.size == N_BLOCKS
    for b in written.tolist():
        heads = pv.decode(blocks[b].reshape(-1, 512))
        assert set(heads["gen"].tolist()) == {int(snapshot[b] & pv.GEN_MASK)}, b
        assert set(heads["run_key"].tolist()) == {meta["run_key"]}


def test_damage_made_during_the_run_is_found_by_its_reads_and_the_run_exits_5(
        tmp_path: Path, loop_device: LoopFactory) -> None:
    dev = loop_device(N_BLOCKS * BLOCK)

    def damage(runs: Path) -> None:
        # once the reader step's folder is there (the writer's step is over), block 77 zeroed
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(runs.glob("*/step0001-read")):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the reader step never started")
        _put(dev.backing_file, 77, np.zeros(BLOCK, dtype=np.uint8))

    code, folder = _run(tmp_path, dev.path, "{on_error: stop}", 6, during=damage)
    said = _said(folder)
    assert code == 5, said
    assert "data verification found" in said and "missing" in said
    found = [e for e in _events(folder) if e["kind"] == "verify" and e["level"] == "ERROR"]
    first = found[0]
    assert first["host"] == "localhost" and first["step"] == "1"
    assert first["message"].startswith(f"verify: missing block at offset {77 * BLOCK} of LUN "
                                       f"{dev.path} (workload localhost:{dev.path}:r): "
                                       "expected generation ")
    assert "found no stamp of this run" in first["message"]
    assert any("ends after subinterval" in e["message"] for e in found)  # on_error: stop
    (kept,) = sorted((folder / "verify" / "damaged").glob("*.json"))[:1]
    doc = json.loads(kept.read_text())
    assert (doc["host"], doc["lun"], doc["offset_bytes"], doc["class"]) == (
        "localhost", dev.path, 77 * BLOCK, "missing")
    assert (kept.parent / doc["found_bytes"]).read_bytes() == bytes(BLOCK)
    # the step stopped early (fewer rows than its 12 subintervals); its rows and summary count
    # the damaged blocks by class, in the subintervals the reads found them
    rows = _rows(folder / "step0001-read" / "all" / "all.csv")
    assert len(rows) < 12
    damaged = [r for r in rows if float(r["verify_errors"]) > 0]
    assert damaged and all(r["verify_errors"] == r["verify_missing"] for r in rows)
    assert all(float(r["verify_blocks_checked"]) > 0 for r in rows)
    (total,) = [r for r in _rows(folder / "summary.csv")
                if r["step_name"] == "read" and r["rollup_type"] == "all"]
    assert float(total["verify_missing"]) == sum(float(r["verify_missing"]) for r in rows
                                                 if r["phase"] == "measurement")
    assert total["thresholds"].startswith("FAILED")


def test_an_interrupted_verified_run_resumes_with_its_map_on_the_host(
        tmp_path: Path, loop_device: LoopFactory) -> None:
    # Ctrl-C in the reader step; a block of what the writer step wrote is zeroed; --resume runs
    # the reader step again on a new slave, given the map (LoadMap) before its first read: it
    # finds the block (without the map it would check nothing), attempt 1, exit 5
    dev = loop_device(N_BLOCKS * BLOCK)
    cfg = write_config(tmp_path, TEST.format(verify="true", lun=dev.path, read_s=20))
    proc, folder, err = run_until(cfg, tmp_path, "verified", "step0001-read/all/all.csv", 2,
                                  interrupt)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads((folder / "verify" / "map.json").read_text())["attempt"] == 0
    _put(dev.backing_file, 77, np.zeros(BLOCK, dtype=np.uint8))
    assert ended(*ivypy_here("run", "--resume", str(folder), "--plain")) == 5, _said(folder)
    assert json.loads((folder / "verify" / "map.json").read_text())["attempt"] == 1
    found = [e for e in _events(folder) if e["kind"] == "verify" and e["level"] == "ERROR"]
    assert found[0]["message"].startswith(f"verify: missing block at offset {77 * BLOCK} ")
    rows = _rows(folder / "step0001-read" / "all" / "all.csv")
    assert float(rows[0]["verify_blocks_checked"]) > 0  # checked from the resumed first read


MIX_TEST = HEAD.replace("{test}", "mixed").replace("{verify}", "true") + """\
  - name: mix
    workloads:
      - {{name: w, delete: true}}
      - {{name: m, iosequencer: random_independent, blocksize: 4KiB, iodepth: 8, iops: 2000,
         read_fraction: 50%}}
    warmup_seconds: 0
    measure_seconds: {mix_s}
"""


def _kill(what: str) -> Callable[[subprocess.Popen[str], Path], None]:
    def act(proc: subprocess.Popen[str], folder: Path) -> None:
        if what == "master":
            proc.kill()
            return
        slave = psutil.Process(slave_pids(folder)[0])
        (slave if what == "slave" else slave.children()[0]).kill()
    return act


@pytest.mark.parametrize(("what", "exit_code"), [("master", -9), ("slave", 3), ("worker", 3)])
def test_a_kill_mid_step_leaves_writes_never_heard_of_and_resume_takes_them(
        tmp_path: Path, loop_device: LoopFactory, what: str, exit_code: int) -> None:
    # SIGKILL to the master, the slave or its worker in the mixed step: writes complete that
    # no record holds (the killed master's slave writes on for about a second, until it sees
    # its master gone; a killed slave's or worker's last subinterval is never reported);
    # --resume runs the step again, and its reads of those blocks find stamps newer than the
    # map from the attempt that ended, above their writer's confirmed serial: taken into the
    # map, not damage (exit 0). The map's journal kept every record before the kill.
    dev = loop_device(N_BLOCKS * BLOCK)
    cfg = write_config(tmp_path, MIX_TEST.format(lun=dev.path, mix_s=4))
    if what == "master":  # the master's process is what is killed
        proc, folder, err = run_until(cfg, tmp_path, "mixed", "step0001-mix/all/all.csv", 3,
                                      _kill(what))
        assert proc.returncode == exit_code, err[-2000:]
    else:
        thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
        folder = run_folder(tmp_path, "mixed")
        wait_rows(folder / "step0001-mix" / "all" / "all.csv", 3)
        _kill(what)(None, folder)  # type: ignore[arg-type]
        assert ended(thread, box) == exit_code, _said(folder)
    pid = slave_pids(folder)[0]
    with contextlib.suppress(psutil.NoSuchProcess):  # its slave stops once it sees its master gone
        assert all_gone([psutil.Process(pid)], 30), "the slave outlived its master by 30 s"
    # ivypy verify first: every block the map holds read back, the writes never heard of
    # taken as written, nothing called damage; the run's files untouched
    assert ended(*ivypy_here("verify", str(folder), "--plain")) == 0
    (checked,) = folder.glob("verify-*")
    assert _rows(checked / "verify.csv") == []
    (lun,) = json.loads((checked / "verify.json").read_text())["luns"]
    assert lun["blocks_checked"] == N_BLOCKS and lun["damaged_blocks"] == 0
    assert json.loads((folder / "verify" / "map.json").read_text())["attempt"] == 0
    assert ended(*ivypy_here("run", "--resume", str(folder), "--plain")) == 0, _said(folder)
    assert not [e for e in _events(folder) if e["kind"] == "verify" and e["level"] == "ERROR"]
    assert json.loads((folder / "verify" / "map.json").read_text())["attempt"] == 1
    rows = _rows(folder / "step0001-mix" / "all" / "all.csv")
    assert sum(float(r["verify_blocks_checked"]) for r in rows) > N_BLOCKS
    # and ivypy verify once the resumed attempt has ended: the writes the first attempt's
    # master never heard of that the second never read are taken too (map.json keeps the
    # attempt that crashed), nothing is called damage
    assert ended(*ivypy_here("verify", str(folder), "--plain")) == 0
    assert json.loads((folder / "verify" / "map.json").read_text())["crashes"][0]["attempt"] == 0


CLASSES_TEST = HEAD.replace("{test}", "classes").replace(
    "{verify}", "{{on_error: continue}}") + """\
  - name: write2
    workloads:
      - {{name: w, delete: true}}
      - {{name: w2, iosequencer: sequential, blocksize: 4KiB, iodepth: 1, iops: 100,
         read_fraction: 0%}}
    warmup_seconds: 0
    measure_seconds: 3
  - name: read
    workloads:
      - {{name: w2, delete: true}}
      - {{name: r, iosequencer: sequential, blocksize: 4KiB, iodepth: 4, iops: 1000,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 3
"""
#: block -> the damage made to it while the reader step runs, and the class it must be found as
DURING = {10: "corrupt", 21: "misplaced", 250: "stale", 251: "torn", 50: "missing"}


def test_each_class_of_damage_made_during_a_run_is_found_by_its_reads(
        tmp_path: Path, loop_device: LoopFactory) -> None:
    # the first step leaves every block at one generation; as write2 starts (its first rows: it has
    # written blocks 0-50 at 100 IOPS, and blocks 250-251 come 2 s later) the test keeps the
    # device's bytes; write2 writes every block once more; while the reader step runs, the
    # test damages five blocks, one per class, the older data from what it kept. The reads
    # name each block with its class, in the subinterval that read it; exit 5
    dev = loop_device(N_BLOCKS * BLOCK)
    kept: dict[str, npt.NDArray[np.uint8]] = {}

    def during(runs: Path) -> None:
        deadline = time.monotonic() + 120
        while not any(runs.glob("*/step0001-write2/all/all.csv")):
            assert time.monotonic() < deadline, "write2 never started"
            time.sleep(0.02)
        with open(dev.backing_file, "rb") as f:
            kept["older"] = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK).copy()
        while not any(runs.glob("*/step0002-read")):
            assert time.monotonic() < deadline, "the reader step never started"
            time.sleep(0.02)
        with open(dev.backing_file, "rb") as f:
            now = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK).copy()
        flipped = now[10].copy()
        flipped[2 * 512 + 99] ^= 0x08
        older = kept["older"]
        for block, data in ((10, flipped), (21, now[22]), (250, older[250]),
                            (251, np.concatenate([older[251][:2048], now[251][2048:]])),
                            (50, np.zeros(BLOCK, dtype=np.uint8))):
            _put(dev.backing_file, block, data)

    cfg = write_config(tmp_path, CLASSES_TEST.format(lun=dev.path))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
    during(tmp_path / "classes")
    code = ended(thread, box)
    (folder,) = (tmp_path / "classes").iterdir()
    assert code == 5, _said(folder)
    found: dict[int, str] = {}
    for e in _events(folder):
        if e["kind"] == "verify" and e["message"].startswith("verify: "):
            words = e["message"].split()
            if words[2] == "block":  # "verify: CLASS block at offset N of LUN ..."
                found.setdefault(int(words[5]) // BLOCK, words[1])
    assert found == DURING
    rows = _rows(folder / "step0002-read" / "all" / "all.csv")
    for name in set(DURING.values()):  # each class counted in the rows that read it
        assert sum(float(r[f"verify_{name}"]) for r in rows) >= 1, name


#: the classes test without its reader step (its folder: classes)
OFFLINE_TEST = CLASSES_TEST[:CLASSES_TEST.index("  - name: read")]


def test_ivypy_verify_names_each_block_damaged_offline_with_its_class(
        tmp_path: Path, loop_device: LoopFactory) -> None:
    # a verified run writes the LUN whole, then again (write2); the test keeps the device's
    # bytes as write2 begins (the older data). ivypy verify after the run: nothing damaged
    # (exit 0, verify.csv's header alone); then five blocks are damaged offline, one per
    # class, and ivypy verify names exactly them, each with its class, generation and stamp
    # (exit 5), reading back every block on the host that wrote it
    dev = loop_device(N_BLOCKS * BLOCK)
    cfg = write_config(tmp_path, OFFLINE_TEST.format(lun=dev.path))
    thread, box = ivypy_here("run", str(cfg), "--output-root", str(tmp_path), "--plain")
    runs = tmp_path / "classes"
    deadline = time.monotonic() + 120
    while not any(runs.glob("*/step0001-write2/all/all.csv")):
        assert time.monotonic() < deadline, "write2 never started"
        time.sleep(0.02)
    with open(dev.backing_file, "rb") as f:
        older = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK).copy()
    code = ended(thread, box)
    (folder,) = runs.iterdir()
    assert code == 0, _said(folder)
    assert ended(*ivypy_here("verify", str(folder), "--plain")) == 0
    (clean,) = folder.glob("verify-*")
    assert _rows(clean / "verify.csv") == []
    with open(dev.backing_file, "rb") as f:
        now = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, BLOCK).copy()
    snapshot = np.frombuffer((folder / "verify" / "lun0.map").read_bytes(), dtype=np.uint8)
    flipped = now[10].copy()
    flipped[2 * 512 + 99] ^= 0x08
    for block, data in ((10, flipped), (21, now[22]), (250, older[250]),
                        (251, np.concatenate([older[251][:2048], now[251][2048:]])),
                        (50, np.zeros(BLOCK, dtype=np.uint8))):
        _put(dev.backing_file, block, data)
    assert ended(*ivypy_here("verify", str(folder), "--plain")) == 5
    (damaged,) = set(folder.glob("verify-*")) - {clean}
    rows = _rows(damaged / "verify.csv")
    assert {int(r["offset_bytes"]) // BLOCK: r["class"] for r in rows} == DURING
    assert all(r["host"] == "localhost" and r["lun"] == dev.path and
               r["length_bytes"] == str(BLOCK) for r in rows)
    by = {int(r["offset_bytes"]) // BLOCK: r for r in rows}
    for b in DURING:
        assert by[b]["expected_generation"] == str(int(snapshot[b]) & pv.GEN_MASK), b
    assert by[21]["found_offset_bytes"] == str(22 * BLOCK)
    assert by[250]["found_generation"] == str(int(pv.decode(older[250].reshape(-1, 512))[
        "gen"][0]))
    assert by[250]["writer"] == f"localhost:{dev.path}:w"
    assert by[50]["found_generation"] == "" and by[50]["writer"] == ""


def _put(path: str, block: int, data: npt.NDArray[np.uint8]) -> None:
    with open(path, "r+b") as f:
        f.seek(block * BLOCK)
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
