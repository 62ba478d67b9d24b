"""scripts/bench_run_end_impl: the run folder it makes is one the run-end code reads whole (a row
per instance a step, each step's folder), and a case timed in a process of its own reports its
wall time and its own peak memory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from master.results.summaryjson import write_summary_json
from scripts.bench_run_end_impl import make_folder, measure
from scripts.testbed_luns import ROOT


def test_the_folder_is_a_run_of_every_instance_a_step(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    # all, 3 vendor+model, 2 hosts, 2 x 3 LUNs, 2 x 4 workloads: 20 a step
    assert make_folder(folder, hosts=2, luns=3, workloads=4, steps=2) == 40
    doc = write_summary_json(folder)
    assert doc["problems"] == [] and doc["outcome"]["state"] == "complete"
    written = json.loads((folder / "summary.json").read_text())
    counts = [{t: len(of) for t, of in step["rollups"].items()} for step in written["steps"]]
    assert counts == [{"all": 1, "vendor+model": 3, "host": 2, "lun": 6, "workload": 8}] * 2


def test_a_case_in_a_process_of_its_own_reports_its_time_and_memory(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    make_folder(folder, hosts=2, luns=1, workloads=2, steps=2)
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    wall, rss_gb = measure("a resume's set-aside of summary.csv", folder, other, 1, ROOT)
    assert 0 < wall < 10 and 0.005 < rss_gb < 1  # its own peak: tens of MB
    kept = (other / "summary.csv").read_text().splitlines()
    assert len(kept) == 1 + 12 and all(line.startswith("0,") for line in kept[1:])
