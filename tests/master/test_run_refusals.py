"""What a run refuses before any I/O, and what it says when the test overrides: through the real
CLI (``ivypy run``) on localhost with a real slave and a real loop device where the engine is
what is refused, and on in-memory hosts (``master.hosts.memory``: the slave session's
discovery and write preflight real, its I/O synthetic) where a file LUN is.

- With the kernel's ``fs.aio-max-nr`` nearly reached, a block device's workload cannot have its
  AIO context: the run exits 2 with one line naming host, LUN, the limit and the value needed,
  before any subinterval; it never runs on the thread pool unasked (before, it did, and luns.csv
  said libaio). With ``allow_engine_fallback: true`` it runs on the thread pool and says so:
  luns.csv, events.csv, the console and the ``engine`` rollup name the thread pool.
- A write to an existing non-empty file that ivypy did not create is refused (exit 2, host,
  file, size and what it holds) and the file's bytes are unchanged; with ``allow_write: true``
  it goes ahead and the overridden reason is a warning on the console and in events.csv.

Needs root (a loop device, ``fs.aio-max-nr``): skipped otherwise.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows, run_folder, start_run, write_config
from tests.slave.test_engine_aio_room import _aio_limit

HOST = "localhost"
MiB = 1 << 20
TEST = """\
test: refusals
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{hosts: localhost, {lun}}}
rollups: [engine]
steps:
  - name: one
    workloads:
      - {{name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: {qd}, iops: 400,
         read_fraction: {reads}}}
    warmup_seconds: 0
    measure_seconds: 1
  - name: two
    workloads:
      - {{name: w, iops: 200}}
"""


@pytest.fixture
def loop_dev(tmp_path: Path) -> Iterator[str]:
    """A loop device over a fully written 32 MiB file in /dev/shm."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a loop device and fs.aio-max-nr")
    backing = Path("/dev/shm") / f"ivypy-test-refusals-{os.getpid()}.img"
    backing.write_bytes(os.urandom(32 * MiB))
    dev = subprocess.run(["losetup", "--find", "--show", str(backing)], capture_output=True,
                         text=True, check=True, timeout=60).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=60, check=False)
        backing.unlink(missing_ok=True)


def _run(tmp: Path, lun: str, qd: int = 4, reads: str = "100%") -> tuple[int, str, Path | None]:
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    cfg = write_config(tmp, TEST.format(lun=lun, qd=qd, reads=reads))
    proc = start_run(cfg, out)
    _, stderr = proc.communicate(timeout=120)
    test_dir = out / "refusals"
    folder = run_folder(out, "refusals") if test_dir.is_dir() else None
    return proc.returncode, stderr, folder


def _run_in_memory(tmp: Path, lun: str, reads: str = "100%",
                   caplog: pytest.LogCaptureFixture | None = None) -> tuple[int, str, Path]:
    """The test on in-memory hosts (``master.hosts.memory``): the slave session's discovery
    and write preflight are real, its I/O synthetic. The exit code, the message the CLI prints
    after ``ivypy:`` (with the run's log lines, where ``caplog`` is given) and the folder."""
    result = execute(memory_run(memory_config(tmp, TEST.format(lun=lun, qd=4, reads=reads)),
                                MemoryHosts()))
    logged = "\n".join(r.getMessage() for r in caplog.records) if caplog is not None else ""
    return result.exit_code, f"{logged}\nivypy: {result.message}", Path(result.folder)


def _subintervals_run(folder: Path) -> int:
    all_csv = folder / "step0000-one" / "all" / "all.csv"
    return len(rows(all_csv)) if all_csv.exists() else 0


@pytest.mark.alone  # lowers the machine's fs.aio-max-nr: another run beside it would fail
def test_a_block_device_without_its_aio_context_is_refused_before_any_io(
        tmp_path: Path, loop_dev: str) -> None:
    with _aio_limit(headroom=100):  # a first context of 64 events fits; QD100 needs 256
        code, stderr, folder = _run(tmp_path, f"path: {loop_dev}", qd=100)
    assert code == 2, stderr
    (line,) = [ln for ln in stderr.splitlines()
               if ln.startswith("ivypy:") and "libaio engine is unavailable" in ln]
    assert f"host {HOST}" in line and loop_dev in line
    assert sum(loop_dev in ln for ln in stderr.splitlines()) == 1  # ours alone, said once
    assert "fs.aio-max-nr is" in line and "sysctl -w fs.aio-max-nr=" in line
    assert "allow_engine_fallback: true" in line
    assert folder is not None and _subintervals_run(folder) == 0  # no I/O ran
    engines = {r["lun"]: r["engine"] for r in rows(folder / "luns.csv")}
    assert engines[loop_dev] == "libaio"  # what it was to run on; nothing ran elsewhere


@pytest.mark.alone  # lowers the machine's fs.aio-max-nr
def test_with_the_fallback_allowed_the_thread_pool_is_named_everywhere(
        tmp_path: Path, loop_dev: str) -> None:
    with _aio_limit(headroom=100):
        code, stderr, folder = _run(tmp_path, f"path: {loop_dev}, allow_engine_fallback: true",
                                    qd=100)
    assert code == 0, stderr
    assert folder is not None and _subintervals_run(folder) == 2
    (row,) = [r for r in rows(folder / "luns.csv") if r["lun"] == loop_dev]
    assert row["engine"] == "threadpool"
    warnings = [e for e in rows(folder / "events.csv")
                if e["level"] == "WARNING" and e["kind"] == "engine"]
    assert len(warnings) == 1 and loop_dev in warnings[0]["message"]
    assert "allow_engine_fallback" in warnings[0]["message"]
    assert "fs.aio-max-nr" in warnings[0]["message"]
    assert f"[host={HOST}] LUN {loop_dev}: libaio unavailable" in stderr  # on the console
    for step in ("step0000-one", "step0001-two"):  # the second step edits it: still there
        assert (folder / step / "engine" / "threadpool.csv").exists(), step
        assert not (folder / step / "engine" / "libaio.csv").exists(), step


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_write_to_an_existing_file_is_refused_and_its_bytes_are_unchanged(
        tmp_path: Path) -> None:
    """A typo in ``file:`` naming a database: refused, checksum before and after equal."""
    db = tmp_path / "orders.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + os.urandom(4 * MiB - 16))
    before = _sha256(db)
    code, stderr, folder = _run_in_memory(tmp_path, f'file: "{db}", size: 4MiB', reads="50%")
    assert code == 2, stderr
    (line,) = [ln for ln in stderr.splitlines()
               if ln.startswith("ivypy:") and "refusing to write" in ln]
    assert f"host {HOST}" in line and str(db) in line
    assert "an existing non-empty file of 4 MiB (4,194,304 bytes)" in line
    assert "holding a sqlite3 signature" in line
    assert _sha256(db) == before
    assert folder is None or _subintervals_run(folder) == 0


def test_an_allowed_write_to_an_existing_file_warns_on_the_console_and_in_events(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "scratch.img"
    data.write_bytes(os.urandom(4 * MiB))
    code, stderr, folder = _run_in_memory(
        tmp_path, f'file: "{data}", size: 4MiB, allow_write: true', reads="50%", caplog=caplog)
    assert code == 0, stderr
    assert folder is not None
    (warning,) = [e for e in rows(folder / "events.csv")
                  if e["level"] == "WARNING" and e["kind"] == "preflight"]
    assert "as the test allows" in warning["message"]
    assert "an existing non-empty file of 4 MiB" in warning["message"]
    assert f"[host={HOST}] host {HOST}: writing to LUN {data} as the test allows" in stderr


@pytest.mark.parametrize(("make", "reason"), [
    ("directory", "is a directory; name a file in it"),
    ("missing parent", "cannot create: its directory"),
])
def test_a_file_lun_that_cannot_be_a_file_is_a_config_error_of_its_entry(
        tmp_path: Path, make: str, reason: str) -> None:
    """Found by the slave, reported as the test's error (exit 2, the entry's key path and
    line), once (before: exit 3, as a host failure)."""
    if make == "directory":
        target = tmp_path / "luns"
        target.mkdir()
    else:
        target = tmp_path / "no" / "such" / "dir" / "lun.img"
    code, stderr, _ = _run_in_memory(tmp_path, f'file: "{target}", size: 4MiB, create: true')
    assert code == 2, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("ivypy:")]
    assert "test.yaml:5: luns[0].file:" in line and f"host {HOST}" in line
    assert reason in line and str(target) in line
    assert not (tmp_path / "no").exists()  # nothing made on the way
