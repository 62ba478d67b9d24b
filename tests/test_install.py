"""ivypy as a user installs it: the wheel built from this checkout, installed non-editable into a
fresh virtualenv (its dependencies from the package index, or pip's cache), runs a paced
workload from outside the checkout on the compiled loop, built on the controller and shipped
in the slave zipapp. A normal install once lost ``ivy_loop.c`` (not package data), and every
host then ran the Python loop without a word."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEST = """\
test: installed
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun", size: 16MiB, create: true}
steps:
  - name: paced
    workloads:
      - {name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 500,
         read_fraction: 100%}
    warmup_seconds: 0.5
    measure_seconds: 1
"""


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()  # a user's: bytecode beside the installed modules
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "IVYPY_SLAVE_CC", "PYTHONPYCACHEPREFIX")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env)
    assert done.returncode == 0, f"{argv[:4]}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def _source_copy(to: Path) -> Path:
    """The checkout's files (tracked, and new ones git does not ignore), without a build
    directory a checkout may hold from an earlier build: what a fresh clone builds from."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True, timeout=60)
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to / name)
    return to


def test_a_wheel_installed_in_a_fresh_virtualenv_runs_the_compiled_loop(tmp_path: Path) -> None:
    source = _source_copy(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
          str(source)], tmp_path, 300)
    (wheel,) = (tmp_path / "dist").glob("ivypy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"slave/engine/ivy_loop.c", "slave/engine/ivy_loop.h"} <= set(names)
    for asset in ("page.js", "errors.js", "page.css", "vendor/uPlot.iife.min.js",
                  "vendor/uPlot.min.css", "vendor/uPlot-LICENSE"):  # report.html's parts
        assert f"master/results/report/{asset}" in names, asset
    # the virtualenv without a pip of its own, filled by this interpreter's pip (``--python``):
    # the same install, without 4 s of copying pip in; no byte-compiling of the dependencies
    # (6 s), which Python does for the modules the run imports
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, 120)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
          "--no-compile", str(wheel)], tmp_path, 600)
    work = tmp_path / "work"  # away from the checkout: only the install can be imported
    work.mkdir()
    (work / "test.yaml").write_text(TEST)
    done = _run([str(venv / "bin" / "ivypy"), "run", "test.yaml", "--output-root", "out",
                 "--plain"], work, 300)
    (folder,) = (work / "out" / "installed").iterdir()
    assert str(folder) in done.stdout
    # the first run after an install compiles the master's kernels, and says what it waits for
    assert "ivypy: loading the master's rollup kernels (compiled once" in done.stdout
    with open(folder / "hosts.csv", newline="") as fh:
        (host,) = list(csv.DictReader(fh))
    assert host["io_loop"] == "compiled (shipped from the controller)", host["io_loop"]
    with open(folder / "summary.csv", newline="") as fh:
        (total,) = [r for r in csv.DictReader(fh) if r["rollup_type"] == "all"]
    assert total["valid"] == "true" and abs(float(total["IOPS"]) - 500) < 25
    page = (folder / "report.html").read_text()  # the report's assets came with the install
    assert "uPlot" in page and "data-charts-drawn" in page and len(page) > 60_000
    # so did the example tests: ``ivypy example`` writes one, as the checkout has it
    assert {f"master/examples/{n}.yaml" for n in ("quickstart", "dfc", "sweep", "gather")} <= \
        set(names)
    _run([str(venv / "bin" / "ivypy"), "example", "quickstart"], work, 60)
    assert (work / "quickstart.yaml").read_text() == (ROOT / "configs/quickstart.yaml").read_text()
