"""report.html at the end of runs: real runs of ``ivypy run`` on this machine (local slaves,
file LUNs, real I/O), one of two hosts that completes and one stopped by Ctrl-C (the run shared
with other test files, tests/master/sharedruns.py); on in-memory hosts, a run whose host is
refused (the page is the master's). Each page loads in headless Chromium with its charts
drawn, no script error and no request."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.results.report.page import shown
from tests.master.chromium import CHROMIUM, load
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows, run_folder, start_run, write_config
from tests.master.sharedruns import FaultRun
from tests.master.test_report_chromium import _check_page
from tests.master.test_report_page import page_data, titles

#: two slaves on this machine (local transport), each its own file LUN, two steps
TWO_HOSTS = """\
test: rep
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
  - name: mixed
    workloads:
      - {name: rr, iops: 500, read_fraction: 70%}
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TWO_HOSTS run to its end by ``ivypy run``: its run folder. Its LUNs are files on the
    VM's disk (a device to draw: tmpfs has none), which the suite's parallel part shares: one
    such run read 927 of its 1,000 IOPS there. A step held short is still drawn, and said
    invalid: exit 1 for that is taken too (the report is the subject here)."""
    tmp = tmp_path_factory.mktemp("report")
    proc = start_run(write_config(tmp, TWO_HOSTS), tmp)
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0 or (
        proc.returncode == 1 and "IOPS short of the setting" in err), err
    return run_folder(tmp, "rep")


def test_a_real_run_writes_its_report(real_run: Path, tmp_path: Path) -> None:
    folder = real_run
    page = (folder / "report.html").read_text()
    assert "report.html written" in (folder / "run.log").read_text()
    data = page_data(page)
    assert [s["id"] for s in data["steps"]] == ["step0000", "step0001"]
    for step in data["steps"]:
        assert [t.split(" ")[0] for t in titles(step)] == [
            "IOPS", "MB/s", "Service", "Response", "Latency", "Device", "CPU"]
        iops = step["charts"][0]
        assert iops["window"] == [0.5, 2]  # warmup 0.5 s, then 1.5 s measured
        # the chart's values are each host's rows, warmup first (the rows' own values are the
        # subject: the rate is only near the setting, the load the suite puts on the VM's disk
        # held one run's step 7 % short)
        want = 1000 if step["id"] == "step0000" else 500
        for series in iops["series"]:
            if series["label"].endswith(" device"):
                continue
            (sub_rows,) = [rows(f) for f in folder.glob(
                f"{step['id']}-*/host/{series['label']}.csv")]
            plotted = [v for v in series["values"] if v is not None]
            assert plotted == [float(r["IOPS"]) for r in sub_rows], (plotted, sub_rows)
            assert len(plotted) == 4 and abs(sum(plotted) / 4 - want) < 0.25 * want, plotted
    summary = rows(folder / "summary.csv")
    # the steps table's IOPS as the console shows them (2,000: not the CSV's digits)
    assert f'<td class="num">{shown("IOPS", summary[0]["IOPS"])}</td>' in page
    if CHROMIUM is None:  # no browser here: the page's content is checked above
        return
    # the IOPS curve; 2 steps x 7 (the device chart too)
    assert _check_page(folder / "report.html", tmp_path) == 15
    shot = tmp_path / "report.png"
    load(folder / "report.html", tmp_path, screenshot=shot)
    assert shot.stat().st_size > 10_000


def test_two_hosts_plot_the_host_rollup(real_run: Path) -> None:
    """The report plots the host rollup by default (the test has two hosts), a line per host
    and one per host's device, and CPU busy per host."""
    page = (real_run / "report.html").read_text()
    assert "<dt>Rollup plotted</dt><dd>host</dd>" in page
    step = page_data(page)["steps"][0]
    iops, _, service, *_ = step["charts"]
    assert iops["title"] == "IOPS (host instances)"
    # each host's line, and its device's (the file LUN's file system's) dashed
    assert [(s["label"], s["dash"]) for s in iops["series"]] == [
        ("h2", 0), ("h2 device", 1), ("localhost", 0), ("localhost device", 1)]
    assert service["percentiles"] == ["p50", "p99", "p99.9", "max"]
    cpu = next(c for c in step["charts"] if c["title"].startswith("CPU"))
    assert sorted(s["label"] for s in cpu["series"]) == ["h2", "localhost"]


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
    """A host refused at the start (on in-memory hosts: the report is the master's)."""
    cfg = memory_config(tmp_path, TWO_HOSTS.replace("test: rep", "test: unreach").replace(
        "{name: h2, transport: local}", "{name: far, address: 127.0.0.1, user: root}").replace(
        "{hosts: h2,", "{hosts: far,"))
    result = execute(memory_run(cfg, MemoryHosts(
        unreachable={"far": "unreachable: connection refused"})))
    assert result.exit_code == 3, result.message
    assert "host far: unreachable: connection refused" in result.message
    page = (Path(result.folder) / "report.html").read_text()
    assert "failed, exit 3" in page and "far" in page
    assert page.count("<td>did not run</td>") == 2 and page_data(page)["steps"] == []
    if CHROMIUM is not None:
        assert _check_page(Path(result.folder) / "report.html", tmp_path) == 0
