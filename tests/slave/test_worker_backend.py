"""The backend the session drives: the engine it names for a LUN at discovery is the one a
workload created there gets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.params import WorkloadParams
from slave import engine as engine_mod
from slave.luns import KIND_FILE, LunInfo
from slave.worker_backend import WorkerBackend


@pytest.fixture
def one_worker() -> Iterator[WorkerBackend]:
    backend = WorkerBackend(1)
    try:
        yield backend
    finally:
        backend.close()


def _lun(path: str) -> LunInfo:
    return LunInfo(path=path, kind=KIND_FILE, name=path.rsplit("/", 1)[-1],
                   size_bytes=16 << 20, logical_block_bytes=512, file_size_bytes=16 << 20)


@pytest.mark.parametrize(
    ("forced", "aio", "want"),
    [
        ("auto", True, "libaio"),
        ("auto", False, "unavailable"),  # create refuses it, saying why: no silent fallback
        ("threadpool", True, "threadpool"),
        ("libaio", False, "unavailable"),  # likewise
        ("fake:const=100us", True, "fake"),
    ],
)
def test_the_engine_named_for_a_lun_is_the_one_its_workloads_get(
    one_worker: WorkerBackend, lun_file: str, forced: str, aio: bool, want: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not aio:
        monkeypatch.setattr(engine_mod.native, "aio_available", lambda: "no AIO on this test host")
    elif (why := engine_mod.native.aio_available()) is not None:
        if os.geteuid() == 0:
            pytest.fail(f"no native AIO here, and as root that is a failure, not a skip: {why}")
        pytest.skip(f"no native AIO here ({why}); not root, so skipped (as root this fails)")
    one_worker.forced = None if forced == "auto" else forced
    lun = _lun(lun_file)
    assert one_worker.engine_for(lun) == want
    if want != "unavailable" and aio:  # the worker forked before the patch: real AIO only
        info = one_worker.create("h:lun:w", lun, WorkloadParams(iodepth=1, iops=100.0))
        assert info["engine"] == want


@pytest.mark.parametrize(("engine", "want"), [("auto", "libaio"), ("libaio", "libaio"),
                                              ("threadpool", "threadpool")])
def test_a_workload_runs_on_the_engine_its_lun_asks_for(
        one_worker: WorkerBackend, lun_file: str, engine: str, want: str) -> None:
    one_worker.forced = None
    info = one_worker.create("h:lun:w", _lun(lun_file), WorkloadParams(iodepth=1, iops=100.0),
                             engine=engine)
    assert info["engine"] == want
    assert "warning" not in info  # the engine asked for, or the native one


def test_a_lun_no_engine_can_open_is_named_unavailable(one_worker: WorkerBackend,
                                                       tmp_path: Path) -> None:
    """Not the thread-pool fallback: that engine could not open it either."""
    missing = str(tmp_path / "gone.img")
    for forced in (None, "threadpool"):
        one_worker.forced = forced
        assert one_worker.engine_for(_lun(missing)) == "unavailable"
