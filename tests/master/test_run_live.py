"""Live control of a running test through the real CLI: status, edit (and refused edits), stop."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.master.runhelp import ROOT, rows, run_folder, start_run, wait_rows, write_config

TEST = """\
test: live
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun-live", size: 64MiB, create: true,
     allow_write: true}
steps:
  - name: paced
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 8, iops: 1000,
         read_fraction: 100%}
    warmup_seconds: 1
    measure_seconds: 30
"""


def _ivypy(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env)


@pytest.fixture()
def state_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "IVYPY_STATE_DIR": str(tmp_path / "state"),
            "PYTHONPATH": str(ROOT)}


def test_status_edit_refusals_and_stop(tmp_path: Path, state_env: dict[str, str]) -> None:
    cfg = write_config(tmp_path, TEST)
    env_backup = dict(os.environ)
    os.environ.update(state_env)
    try:
        proc = start_run(cfg, tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    try:
        folder = run_folder(tmp_path, "live")
        table = folder / "step0000-paced/host/localhost.csv"
        wait_rows(table, 2)
        st = _ivypy("status", str(folder), env=state_env)
        assert st.returncode == 0, st.stderr
        assert "paced" in st.stdout

        # refused edits change nothing
        for args, text in ((["host=nope", "iops=5"], "nope"),
                           (["host=localhost", "read_fraction=1.5"], "read_fraction"),
                           (["host=localhost", "blocksize=1000"], "blocksize")):
            bad = _ivypy("edit", str(folder), *args, env=state_env)
            assert bad.returncode == 2, bad.stdout + bad.stderr
            assert text in bad.stderr

        # without RUN_DIR the newest active run is found
        ok = _ivypy("edit", "host=localhost", "iops=3000", env=state_env)
        assert ok.returncode == 0, ok.stderr
        m = re.search(r"from subinterval (\d+)", ok.stdout)
        assert m, ok.stdout
        k_edit = int(m.group(1))
        got = wait_rows(table, k_edit + 3)
        for r in got:
            k = int(r["subinterval"])
            if k < k_edit:
                assert float(r["iops_setting"]) == 1000
                assert float(r["IOPS"]) == pytest.approx(1000, rel=0.03)
            elif k <= k_edit + 2:
                assert float(r["iops_setting"]) == 3000
                assert float(r["IOPS"]) == pytest.approx(3000, rel=0.03), (k, k_edit)

        stop = _ivypy("stop", str(folder), env=state_env)
        assert stop.returncode == 0, stop.stderr
        last = int(re.search(r"after subinterval (\d+)", stop.stdout).group(1))  # type: ignore[union-attr]
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    final = rows(table)
    assert int(final[-1]["subinterval"]) == last
    events = (folder / "events.csv").read_text()
    assert "live edit host=localhost iops=3000" in events
    assert "stop requested" in events
    assert not (folder / "control.sock").exists()
    summary = rows(folder / "summary.csv")
    assert summary and summary[0]["last_subinterval"] == str(last)
