"""Which I/O engine serves each LUN, end to end through the real CLI (``ivypy run``) on localhost.

One run reads four file LUNs at once: on a ramfs (no direct I/O on any kernel: the slave must
fall back to the thread-pool engine and say so), on an ext4 loop device (O_DIRECT works:
libaio), on tmpfs in /dev/shm (libaio exactly where this kernel takes O_DIRECT there, since
Linux 6.6; else the fallback) and on the ext4 loop device again with ``engine: io_uring``
(the engine rollup has an instance of it). While the run does I/O, the open flags of each
LUN's fd in the slave's workers (``/proc/<pid>/fdinfo``) show whether the engine really opened
it with ``O_DIRECT``.
The engine of each LUN is in luns.csv (the slave's discovery names the engine its workloads
would run on: an attribute, so a selection and rollup key too), the engine of each workload in
events.csv (``workload ... created (engine ...)``) and run.log; the fallback's warning, naming
host and LUN, in both and on the console too.

Needs root (mounting the ramfs and the loop device): skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.master.runhelp import (
    process_tree,
    rows,
    run_folder,
    slave_pids,
    start_run,
    takes_o_direct,
    wait_rows,
    write_config,
)
from tests.slave.test_engine_odirect import fd_flags

HOST = "localhost"
SUB_S = 0.5
IOPS = 500
TEST = """\
test: engines
subinterval_seconds: {sub}
hosts: [localhost]
rollups: [lun, engine]
luns:
  - {{hosts: localhost, file: "{ramfs}", size: 16MiB, create: true}}
  - {{hosts: localhost, file: "{ext4}", size: 16MiB, create: true}}
  - {{hosts: localhost, file: "{tmpfs}", size: 16MiB, create: true}}
  - {{hosts: localhost, file: "{uring}", size: 16MiB, create: true, engine: io_uring}}
steps:
  - name: read
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: {iops},
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 2
"""


@dataclass(frozen=True)
class EngineRun:
    folder: Path
    luns: dict[str, str]  # ramfs | ext4 | tmpfs -> the LUN's path
    flags: dict[str, list[int]]  # LUN path -> open flags of every fd on it in the slave's tree
    tmpfs_takes_o_direct: bool
    stderr: str  # the console's log lines (WARNING and up)


def _sh(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")


def _unmount(mount_point: Path) -> None:
    if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=60).returncode:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineRun]:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a ramfs and an ext4 loop device")
    tmp = tmp_path_factory.mktemp("engines")
    out = tmp / "out"
    out.mkdir()
    ramfs, ext4, image = tmp / "ramfs", tmp / "ext4", tmp / "ext4.img"
    tmpfs = Path("/dev/shm") / f"ivypy-test-engines-{os.getpid()}"
    mounted: list[Path] = []
    proc: subprocess.Popen[str] | None = None
    try:
        ramfs.mkdir()
        _sh("mount", "-t", "ramfs", "ramfs", str(ramfs))
        mounted.append(ramfs)
        with open(image, "wb") as fh:
            fh.truncate(64 << 20)
        _sh("mkfs.ext4", "-q", "-F", str(image))
        ext4.mkdir()
        _sh("mount", "-o", "loop", str(image), str(ext4))  # the loop device goes at umount
        mounted.append(ext4)
        tmpfs.mkdir()
        direct = takes_o_direct(tmpfs)
        luns = {"ramfs": str(ramfs / "lun-ramfs"), "ext4": str(ext4 / "lun-ext4"),
                "tmpfs": str(tmpfs / "lun-tmpfs"), "uring": str(ext4 / "lun-uring")}
        cfg = write_config(tmp, TEST.format(sub=SUB_S, iops=IOPS, **luns))
        proc = start_run(cfg, out)
        folder = run_folder(out, "engines")
        # the first subinterval is in: I/O is running on every LUN, look at the workers' fds
        wait_rows(folder / "step0000-read" / "all" / "all.csv", 1, timeout_s=30)
        (slave,) = slave_pids(folder)
        flags: dict[str, list[int]] = {path: [] for path in luns.values()}
        for p in process_tree(slave):
            for path in luns.values():
                flags[path] += fd_flags(p.pid, os.path.realpath(path))
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stdout + stderr
        yield EngineRun(folder, luns, flags, direct, stderr)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        for mount_point in reversed(mounted):
            _unmount(mount_point)
        shutil.rmtree(tmpfs, ignore_errors=True)


def _events(run: EngineRun) -> list[dict[str, str]]:
    return rows(run.folder / "events.csv")


def _created(run: EngineRun, path: str) -> str:
    """The message of the event that says which engine serves ``path``'s workload."""
    msgs = [e["message"] for e in _events(run)
            if e["kind"] == "workload" and e["host"] == HOST
            and e["message"].startswith(f"workload {HOST}:{path}:r created")]
    assert len(msgs) == 1, msgs
    return msgs[0]


def _engine_warnings(run: EngineRun, path: str) -> list[dict[str, str]]:
    """The engine's warnings about ``path`` (a file LUN's other warnings, such as ramfs being
    memory, are of kind ``lun``)."""
    return [e for e in _events(run) if e["level"] == "WARNING" and e["kind"] == "engine"
            and path in e["message"]]


def test_ramfs_lun_falls_back_to_threadpool_and_says_so(engine_run: EngineRun) -> None:
    path = engine_run.luns["ramfs"]
    assert "(engine threadpool," in _created(engine_run, path)
    (warning,) = _engine_warnings(engine_run, path)
    assert warning["host"] == HOST and warning["step"] == "0"
    memory, unmarked = (
        [e for e in _events(engine_run) if e["kind"] == "lun" and path in e["message"]
         and what in e["message"]] for what in ("is on ramfs", "cannot mark it as its own"))
    assert [e["level"] for e in memory + unmarked] == ["WARNING", "WARNING"]
    assert memory[0]["message"].endswith("is on ramfs: memory, not a storage device")
    assert "no user extended attributes" in unmarked[0]["message"]  # ivypy's mark: none
    assert warning["message"].startswith(f"LUN {path}: its file system does not take O_DIRECT (")
    assert "thread-pool" in warning["message"]
    log = (engine_run.folder / "run.log").read_text()
    assert (f"WARNING master.run.lifecycle: [host={HOST}] LUN {path}: its file system does not "
            "take O_DIRECT") in log
    assert f"[host={HOST}] workload {HOST}:{path}:r created (engine threadpool," in log
    # and on the console, once from the master
    assert engine_run.stderr.count(
        f"WARNING master.run.lifecycle: [host={HOST}] LUN {path}: its file system does not take "
        "O_DIRECT") == 1


def test_ext4_lun_uses_libaio_without_a_warning(engine_run: EngineRun) -> None:
    path = engine_run.luns["ext4"]
    assert "(engine libaio," in _created(engine_run, path)
    assert _engine_warnings(engine_run, path) == []
    assert path not in engine_run.stderr
    log = (engine_run.folder / "run.log").read_text()
    assert f"[host={HOST}] workload {HOST}:{path}:r created (engine libaio," in log


def test_tmpfs_lun_engine_follows_the_kernel(engine_run: EngineRun) -> None:
    path = engine_run.luns["tmpfs"]
    direct = engine_run.tmpfs_takes_o_direct
    engine = "libaio" if direct else "threadpool"
    assert f"(engine {engine}," in _created(engine_run, path)
    assert len(_engine_warnings(engine_run, path)) == (0 if direct else 1)


def test_an_ext4_lun_asked_for_io_uring_runs_on_it(engine_run: EngineRun) -> None:
    path = engine_run.luns["uring"]
    assert "(engine io_uring," in _created(engine_run, path)
    assert _engine_warnings(engine_run, path) == []
    instances = {r["rollup_instance"]
                 for r in rows(engine_run.folder / "step0000-read" / "engine" / "summary.csv")}
    assert "io_uring" in instances  # the rollup key


def test_engines_open_luns_with_o_direct_exactly_for_libaio(engine_run: EngineRun) -> None:
    """Each LUN is open once for its I/O in the slave's process tree during the run; O_DIRECT
    on it is set for libaio and io_uring (ext4, tmpfs where the kernel takes it) and clear for
    the thread-pool engine. Beside it, the slave's lock on the LUN (``slave.lunlock``: read
    only, non-blocking, no I/O through it)."""
    want = {"ramfs": False, "ext4": True, "tmpfs": engine_run.tmpfs_takes_o_direct,
            "uring": True}
    for kind, path in engine_run.luns.items():
        locks = [f for f in engine_run.flags[path] if f & os.O_NONBLOCK]
        assert len(locks) == 1 and locks[0] & os.O_ACCMODE == os.O_RDONLY, (kind, locks)
        flags = [f for f in engine_run.flags[path] if not f & os.O_NONBLOCK]
        assert len(flags) == 1, (kind, [oct(f) for f in flags])
        assert bool(flags[0] & os.O_DIRECT) == want[kind], (kind, oct(flags[0]))
        assert flags[0] & os.O_ACCMODE == os.O_RDONLY, (kind, oct(flags[0]))


def test_luns_listed_and_every_engine_did_its_io(engine_run: EngineRun) -> None:
    listed = {r["lun"]: r for r in rows(engine_run.folder / "luns.csv")}
    summary = {r["rollup_instance"]: r
               for r in rows(engine_run.folder / "step0000-read" / "lun" / "summary.csv")}
    engine = {"ramfs": "threadpool", "ext4": "libaio",
              "tmpfs": "libaio" if engine_run.tmpfs_takes_o_direct else "threadpool",
              "uring": "io_uring"}
    for kind, path in engine_run.luns.items():
        assert listed[path]["selected"] == "true" and listed[path]["used_by"] == "r", kind
        assert listed[path]["kind"] == "file" and listed[path]["size_bytes"] == str(16 << 20)
        # the engine per LUN, as discovery named it: the one its workload was created on
        assert listed[path]["engine"] == engine[kind], kind
        assert f"(engine {engine[kind]}," in _created(engine_run, path)
        lun = summary[f"{HOST}:{path}"]
        assert float(lun["IOPS"]) == pytest.approx(IOPS, rel=0.05), kind
        assert lun["valid"] == "true", kind


def test_cpu_rows_of_the_run(engine_run: EngineRun) -> None:
    """cpu.csv: one row per subinterval, one busy % per CPU within 0..100, and the slave's CPU
    per I/O is its CPU seconds over the host's I/Os of that subinterval (all.csv's IOPS)."""
    step = engine_run.folder / "step0000-read"
    cpu = rows(step / "cpu.csv")
    ops = {r["subinterval"]: float(r["IOPS"]) * SUB_S for r in rows(step / "all" / "all.csv")}
    assert [r["subinterval"] for r in cpu] == ["0", "1", "2", "3"] == list(ops)
    spent = 0.0
    for r in cpu:
        assert r["host"] == HOST
        per_core = [float(v) for v in r["per_core_busy_pct"].split()]
        assert len(per_core) == os.cpu_count()
        assert all(0 <= v <= 100 for v in per_core) and 0 <= float(r["busy_pct"]) <= 100
        own_s = float(r["slave_user_s"]) + float(r["slave_system_s"])
        assert 0 <= own_s <= (os.cpu_count() or 1) * SUB_S * 2, r
        spent += own_s
        n = round(ops[r["subinterval"]])
        assert n > 0
        assert float(r["slave_cpu_us_per_io"]) == pytest.approx(own_s * 1e6 / n, rel=1e-5)
    assert spent > 0  # three workloads doing I/O for 2 s cost the slave some CPU
