"""File LUNs whose numbers would not be the device's, through ``ivypy run``: a file the run
creates is laid out (written whole) before its first step, with its progress told; one left
sparse (``layout: none``), an existing file with holes and a file on tmpfs are each a warning
naming host and file; luns.csv names every file LUN's file system."""

from __future__ import annotations

import os
from pathlib import Path

from tests.master.runhelp import rows, run_folder, start_run, write_config

MIB = 1 << 20


def test_file_luns_laid_out_or_warned_about(tmp_path: Path) -> None:
    shm = Path("/dev/shm") / f"ivypy-holes-{os.getpid()}"
    with open(shm, "wb") as fh:  # someone's sparse file: 8 MiB, one block written
        fh.truncate(8 * MIB)
        fh.write(b"x" * 4096)
    laid, sparse = tmp_path / "laid", tmp_path / "sparse"
    cfg = write_config(tmp_path, f"""\
test: filelun
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, file: {laid}, size: 8MiB, create: true}}
  - {{hosts: localhost, file: {sparse}, size: 8MiB, create: true, layout: none}}
  - {{hosts: localhost, file: {shm}}}
steps:
  - name: r
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 100,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 0.5
""")
    try:
        proc = start_run(cfg, tmp_path)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        folder = run_folder(tmp_path, "filelun")
    finally:
        shm.unlink(missing_ok=True)
    # laid out whole before the step, and told on the console and in events.csv
    with open(laid, "rb") as fh:
        assert os.lseek(fh.fileno(), 0, os.SEEK_HOLE) == 8 * MIB
    assert f"[localhost] layout of file LUN {laid}: 100 % (0.01 of 0.01 GiB" in out
    events = rows(folder / "events.csv")
    assert [e["message"].split(":")[0] for e in events if e["kind"] == "layout"] == [
        f"layout of file LUN {laid}"]
    warned = {e["message"] for e in events if e["level"] == "WARNING" and e["kind"] == "lun"}
    assert all(e["host"] == "localhost" for e in events if e["kind"] == "lun")
    assert any(m.startswith(f"file LUN {sparse} was created sparse (layout: none)")
               for m in warned), warned
    assert any(m.startswith(f"file LUN {shm} has unwritten ranges (holes") for m in warned)
    assert f"file LUN {shm} is on tmpfs: memory, not a storage device" in warned
    assert not any(str(laid) in m for m in warned)
    assert "WARNING" in err and f"{sparse} was created sparse" in err  # on the console too
    fs_types = {r["lun"]: r["fs_type"] for r in rows(folder / "luns.csv") if r["kind"] == "file"}
    assert fs_types[str(shm)] == "tmpfs" and fs_types[str(laid)] != ""
