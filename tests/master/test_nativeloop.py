"""The compiled loop built once on the controller for the zipapp (``master.hosts.slaveloop``): one
object named for this machine and source, kept by the slave code's key and read back by a later
run without building; a controller without a compiler ships none, with a warning."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from master.hosts import slaveloop as nativeloop


def test_built_once_then_read_from_the_cache(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    first = nativeloop._build(tmp_path)
    if not first:
        pytest.skip("no C compiler on this controller")
    ((arcname, data),) = first.items()
    assert arcname.startswith("slave/engine/compiled_loop-") and arcname.endswith(".so")
    assert data[:4] == b"\x7fELF"
    kept = tmp_path / f"kernel-{nativeloop.kernel_key()}"
    assert [p.name for p in kept.iterdir()] == [arcname.rsplit("/", 1)[1]]

    def no_build(*args: object, **kwargs: object) -> object:
        raise AssertionError("built again")

    monkeypatch.setattr(subprocess, "run", no_build)
    assert nativeloop._build(tmp_path) == first


def test_a_controller_without_a_compiler_ships_none(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("IVYPY_SLAVE_CC", "no-such-cc")
    with caplog.at_level(logging.WARNING, logger="master.hosts.slaveloop"):
        assert nativeloop._build(tmp_path) == {}
    assert "was not built on this controller" in caplog.text and "no-such-cc" in caplog.text
    assert not list(tmp_path.iterdir())  # nothing kept: the next run tries again
