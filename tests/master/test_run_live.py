"""Live control of a running test through the real CLI: ``ivypy status``, ``edit`` (and refused
edits), ``stop`` as processes over the run's control socket; the run itself is in this process,
on in-memory hosts (what is tested is the operator's requests and what the run does with
them)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.messages import Message, SubintervalResult
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import ROOT, rows

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


async def _ivypy(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``ivypy ARGS`` as a process (the operator's), without blocking the run's loop."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "master", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _rows(path: Path, n: int) -> list[dict[str, str]]:
    for _ in range(600):
        got = rows(path)
        if len(got) >= n:
            return got
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{path} did not reach {n} rows")


@pytest.fixture()
def state_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_status_edit_refusals_and_stop(tmp_path: Path, state_env: dict[str, str]) -> None:
    box: dict[str, Any] = {}

    async def operator() -> None:
        folder = run.output.folder
        table = folder / "step0000-paced/host/localhost.csv"
        box["table"], box["folder"] = table, folder
        await _rows(table, 2)
        code, out, err = await _ivypy("status", str(folder), env=state_env)
        assert code == 0, err
        assert "paced" in out

        # refused edits change nothing
        for args, text in ((["host=nope", "iops=5"], "nope"),
                           (["host=localhost", "read_fraction=1.5"], "read_fraction"),
                           (["host=localhost", "blocksize=1000"], "blocksize")):
            code, out, err = await _ivypy("edit", str(folder), *args, env=state_env)
            assert code == 2, out + err
            assert text in err

        # without RUN_DIR: the one run started from this directory (the test run's, in the
        # repository root, as the edit process is)
        code, out, err = await _ivypy("edit", "host=localhost", "iops=3000", env=state_env)
        assert code == 0, err
        m = re.search(r"from subinterval (\d+)", out)
        assert m, out
        k_edit = box["k_edit"] = int(m.group(1))
        await _rows(table, k_edit + 3)

        code, out, err = await _ivypy("stop", str(folder), env=state_env)
        assert code == 0, err
        box["last"] = int(re.search(r"after subinterval (\d+)", out).group(1))  # type: ignore[union-attr]

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult) and m.subinterval == 0 and "task" not in box:
            box["task"] = asyncio.ensure_future(operator())
        return True

    run = memory_run(memory_config(tmp_path, TEST), MemoryHosts(watch))
    result = execute(run, timeout_s=120, warp=False)  # the operator's commands are real time
    box["task"].result()  # the operator's checks
    assert result.exit_code == 0, result.message
    table, folder, last, k_edit = box["table"], box["folder"], box["last"], box["k_edit"]
    final = rows(table)
    for r in final[:k_edit + 3]:
        k = int(r["subinterval"])
        want = 1000 if k < k_edit else 3000
        assert float(r["iops_setting"]) == want, (k, k_edit)
        assert float(r["IOPS"]) == pytest.approx(want, rel=0.03), (k, k_edit)
    assert int(final[-1]["subinterval"]) == last
    events = (folder / "events.csv").read_text()
    assert "live edit host=localhost iops=3000" in events
    assert "stop requested" in events
    assert not (folder / "control.sock").exists()
    summary = rows(folder / "summary.csv")
    assert summary and summary[0]["last_subinterval"] == str(last)
