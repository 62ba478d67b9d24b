"""ivypy fio-pctiles against real fio (Debian's ``fio``, installed by scripts/test).

* A short multi-job randrw run with ``write_hist_log``, ``log_hist_msec`` and
  ``--output-format=json+``: the logs' rows summed never exceed fio's json+ bins (fio never
  writes the last partial window, so the logs hold a little less), and the percentiles of all
  rows summed agree with the percentiles of the json+ bins within one bucket width, once the
  samples of the unlogged windows are allowed for (see ``check_against_json``).
* The same job through ``fio --server`` / ``fio --client`` on loopback: the logs the client
  writes are detected as client/server-shaped, and after ``--repair-client-logs`` they obey the
  same two checks; unrepaired, they hold far more samples than fio did I/Os.

About 6 s of wall clock (two 2 s runs with psync on a small file in /dev/shm).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.fiologs.columns import ColumnLayout, make_layout
from master.fiologs.parse import LogReader
from master.fiologs.pctiles import percentile_matrix
from master.fiologs.pipeline import PctileOptions, compute_pctiles
from master.fiologs.repair import ClientLogRepairer
from protocol.buckets import FIO_BUCKETS, bucket_index_scalar

FIO = shutil.which("fio")
pytestmark = pytest.mark.skipif(FIO is None, reason="fio is not installed (scripts/test installs "
                                "the Debian package when run as root)")

PS = (50.0, 90.0, 99.0, 99.9)
INTERVAL_MS = 50


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[Path]:
    """The job's data file, in /dev/shm (tmpfs) so latencies are steady."""
    shm = Path("/dev/shm")
    path = (shm if shm.is_dir() else tmp_path) / f"ivypy-fio-pctiles-{os.getpid()}.dat"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def job_file(tmp_path: Path, data: Path) -> Path:
    job = tmp_path / "job.fio"
    job.write_text(
        "[global]\n"
        "ioengine=psync\n"
        f"filename={data}\n"
        "size=4m\n"
        "rw=randrw\n"
        "bs=4k\n"
        "time_based=1\n"
        "runtime=2\n"
        "write_hist_log=h\n"
        f"log_hist_msec={INTERVAL_MS}\n"
        "[j]\n"
        "numjobs=2\n"
    )
    return job


def json_bins(doc: dict[str, Any]) -> np.ndarray:
    """fio 3 bucket counts of every job's reads and writes, from json+ ``bins``."""
    counts = np.zeros(FIO_BUCKETS, dtype=np.int64)
    jobs = doc.get("jobs") or [j for j in doc["client_stats"] if j["jobname"] != "All clients"]
    for job in jobs:
        for direction in ("read", "write"):
            for value, n in job[direction]["clat_ns"].get("bins", {}).items():
                counts[bucket_index_scalar(int(value))] += int(n)
    return counts


def check_against_json(logs: list[Path], doc: dict[str, Any], repair: bool) -> None:
    layout = make_layout(3, 0)
    want = json_bins(doc)
    result = compute_pctiles(logs, PctileOptions(percentiles=PS, unit="ns", summary=True,
                                                 repair_client_logs=repair))
    assert result.quantum_ms == INTERVAL_MS
    # the summary row is every log row summed (spreading moves counts, never adds any)
    logged = float(result.summary["merged"].samples[0]) if result.summary else 0.0
    total = float(want.sum())
    # fio drops the last partial window of each job: the logs hold most, never more
    assert 0.75 * total <= logged <= total
    ours = result.summary["merged"].pct_ns[0] if result.summary else None
    assert ours is not None
    # The logs miss M = total - logged samples (each job's last partial window), so the logs'
    # p-th value has between p% of `logged` and p% of `logged` + M json+ samples below it: it
    # lies between the json+ values at those two ranks, give or take one bucket width.
    ranks = np.array(PS) / 100.0 * logged
    lo_ps = 100.0 * ranks / total
    hi_ps = np.minimum(100.0 * (ranks + (total - logged)) / total, 100.0)
    json_counts = want[None, :].astype(np.float64)
    lo = percentile_matrix(json_counts, lo_ps, layout.lower_ns, layout.upper_ns).pct_ns[0]
    hi = percentile_matrix(json_counts, hi_ps, layout.lower_ns, layout.upper_ns).pct_ns[0]
    for p, a, low, high in zip(PS, ours, lo, hi, strict=True):
        w_lo = width_at(layout, low)
        w_hi = width_at(layout, high)
        assert low - w_lo <= a <= high + w_hi, (
            f"p{p}: logs {a} ns, json+ between {low} and {high} ns (bucket widths {w_lo}, "
            f"{w_hi}), {total - logged:.0f} of {total:.0f} samples not logged"
        )


def width_at(layout: ColumnLayout, value_ns: float) -> float:
    col = int(np.searchsorted(layout.lower_ns, value_ns, side="right") - 1)
    return float(layout.upper_ns[col] - layout.lower_ns[col] + 1)


def check_not_above_json(logs: list[Path], doc: dict[str, Any], repair: bool) -> None:
    want = json_bins(doc)
    got = np.zeros(FIO_BUCKETS, dtype=np.int64)
    for log in logs:
        fixer = ClientLogRepairer(str(log))
        for block in LogReader(log, FIO_BUCKETS).blocks():
            if repair:
                block = fixer.repair(block)
            np.add.at(got, block.entry_col, block.entry_count)
    assert bool(np.all(got <= want)), np.flatnonzero(got > want)


def test_logs_agree_with_json_plus(tmp_path: Path, data_file: Path) -> None:
    job = job_file(tmp_path, data_file)
    subprocess.run([str(FIO), "--output-format=json+", "--output=out.json", str(job)],
                   cwd=tmp_path, check=True, capture_output=True, timeout=60)
    logs = sorted(tmp_path.glob("h_clat_hist.*.log"))
    assert len(logs) == 2
    doc = json.loads((tmp_path / "out.json").read_text())
    check_not_above_json(logs, doc, repair=False)
    check_against_json(logs, doc, repair=False)
    warnings = compute_pctiles(logs, PctileOptions()).warnings
    assert not any("client/server" in w for w in warnings)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_client_server_logs_are_repaired(tmp_path: Path, data_file: Path) -> None:
    job = job_file(tmp_path, data_file)
    port = free_port()
    server = subprocess.Popen([str(FIO), f"--server=ip:127.0.0.1,{port}"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:  # wait until the server listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("fio --server did not start listening")
                time.sleep(0.05)
        # fio's client does not always receive every job's histogram log from its server
        # (axboe/fio#274; once here, beside the suite's parallel part, one of the two): the
        # job runs again, up to three times, until both came. What is tested is the repair
        # of the logs it writes, not fio's transfer of them
        for _ in range(3):
            for stale in tmp_path.glob("h_clat_hist.*.log*"):
                stale.unlink()
            subprocess.run([str(FIO), f"--client=ip:127.0.0.1,{port}",
                            "--output-format=json+", "--output=out.json", str(job)],
                           cwd=tmp_path, check=True, capture_output=True, timeout=60)
            if len(list(tmp_path.glob("h_clat_hist.*.log*"))) == 2:
                break
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    logs = sorted(tmp_path.glob("h_clat_hist.*.log*"))
    assert len(logs) == 2, logs
    doc = json.loads((tmp_path / "out.json").read_text())
    plain = compute_pctiles(logs, PctileOptions(summary=True))
    assert sum("client/server" in w for w in plain.warnings) == 2
    assert plain.summary is not None
    assert float(plain.summary["merged"].samples[0]) > 1.2 * float(json_bins(doc).sum())
    check_not_above_json(logs, doc, repair=True)
    check_against_json(logs, doc, repair=True)
