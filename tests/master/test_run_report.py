"""report.html at the end of real runs of ``ivypy run`` on this machine (a local slave, a file
LUN, real I/O): a run that completes, and one stopped by Ctrl-C (the run shared with other test
files, tests/master/sharedruns.py). Each page loads in headless Chromium with its charts drawn,
no script error and no request."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.master.chromium import CHROMIUM, load
from tests.master.runhelp import rows, run_folder, start_run, write_config
from tests.master.sharedruns import FaultRun
from tests.master.test_report_chromium import _check_page
from tests.master.test_report_page import page_data, titles

TWO_STEPS = """\
test: {name}
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun-{name}", size: 64MiB, create: true,
     allow_write: true}}
rollups: [lun]
steps:
  - name: paced
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 2000}}
    warmup_seconds: 0.5
    measure_seconds: {seconds}
  - name: mixed
    workloads:
      - {{name: rr, iops: 1000, read_fraction: 70%}}
"""


def test_a_real_run_writes_its_report(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, TWO_STEPS.format(name="rep", seconds=1.5))
    proc = start_run(cfg, tmp_path)
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    folder = run_folder(tmp_path, "rep")
    page = (folder / "report.html").read_text()
    assert "report.html written" in (folder / "run.log").read_text()
    data = page_data(page)
    assert [s["id"] for s in data["steps"]] == ["step0000", "step0001"]
    for step in data["steps"]:
        assert [t.split(" ")[0] for t in titles(step)] == [
            "IOPS", "MB/s", "Service", "Response", "Latency", "Device", "CPU"]
        iops = step["charts"][0]
        assert iops["window"] == [0.5, 2]  # warmup 0.5 s, then 1.5 s measured
        # the chart's values are the run's rows, warmup first; a paced workload held its rate
        # over the step (a subinterval may catch up on one before: 2,448 read once, beside
        # 1,988 and 2,012, on a loaded machine)
        (sub_rows,) = [rows(f) for f in folder.glob(f"{step['id']}-*/all/all.csv")]
        plotted = [v for v in iops["series"][0]["values"] if v is not None]
        assert plotted == [float(r["IOPS"]) for r in sub_rows], (plotted, sub_rows)
        want = 2000 if step["id"] == "step0000" else 1000
        assert len(plotted) == 4 and abs(sum(plotted) / 4 - want) < 0.1 * want, plotted
    summary = rows(folder / "summary.csv")
    assert f'{float(summary[0]["IOPS"]):.6g}' in page or summary[0]["IOPS"] in page
    if CHROMIUM is None:  # no browser here: the page's content is checked above
        return
    assert _check_page(folder / "report.html", tmp_path) == 14  # 2 steps x 7 (the device chart too)
    shot = tmp_path / "report.png"
    load(folder / "report.html", tmp_path, screenshot=shot)
    assert shot.stat().st_size > 10_000


def test_ctrl_c_still_writes_the_report(interrupted_run: FaultRun, tmp_path: Path) -> None:
    run = interrupted_run
    assert run.returncode == 130, run.stderr
    page = (run.folder / "report.html").read_text()
    assert "interrupted, exit 130" in page and "did not run" in page  # steps 1, 2 never ran
    (step,) = page_data(page)["steps"]
    assert len(step["charts"][0]["x"]) >= run.rows_before
    if CHROMIUM is not None:
        _check_page(run.folder / "report.html", tmp_path)


def test_a_run_that_fails_before_any_step_still_has_a_report(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port no one listens on: the SSH host is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = write_config(tmp_path, TWO_STEPS.format(name="unreach", seconds=1.5).replace(
        "hosts: [localhost]",
        f"hosts: [localhost, {{name: far, address: 127.0.0.1, port: {port}, user: root}}]"))
    proc = start_run(cfg, tmp_path)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3, err
    folder = run_folder(tmp_path, "unreach")
    page = (folder / "report.html").read_text()
    assert "failed, exit 3" in page and "far" in page
    assert page.count("<td>did not run</td>") == 2 and page_data(page)["steps"] == []
    if CHROMIUM is not None:
        assert _check_page(folder / "report.html", tmp_path) == 0


TWO_HOSTS = """\
test: twohosts
subinterval_seconds: 0.5
hosts:
  - localhost
  - {name: h2, transport: local}
luns:
  - {hosts: localhost, file: "${output_root}/two-a", size: 32MiB, create: true, allow_write: true}
  - {hosts: h2, file: "${output_root}/two-b", size: 32MiB, create: true, allow_write: true}
rollups: [host, lun]
steps:
  - name: paced
    workloads:
      - {name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 1000}
    warmup_seconds: 0.5
    measure_seconds: 1.5
"""


def test_two_hosts_plot_the_host_rollup(tmp_path: Path) -> None:
    """Two slaves on this machine (local transport, each its own file LUN): the report plots
    the host rollup by default, a line per host, and CPU busy per host."""
    proc = start_run(write_config(tmp_path, TWO_HOSTS), tmp_path)
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    folder = run_folder(tmp_path, "twohosts")
    page = (folder / "report.html").read_text()
    assert "<dt>Rollup plotted</dt><dd>host</dd>" in page
    (step,) = page_data(page)["steps"]
    iops, _, service, *_ = step["charts"]
    assert iops["title"] == "IOPS (host instances)"
    # each host's line, and its device's (the file LUN's file system's) dashed
    assert [(s["label"], s["dash"]) for s in iops["series"]] == [
        ("h2", 0), ("h2 device", 1), ("localhost", 0), ("localhost device", 1)]
    assert service["percentiles"] == ["p50", "p99", "p99.9", "max"]
    cpu = next(c for c in step["charts"] if c["title"].startswith("CPU"))
    assert sorted(s["label"] for s in cpu["series"]) == ["h2", "localhost"]
    if CHROMIUM is not None:
        assert _check_page(folder / "report.html", tmp_path) == 7
