"""Tests for master/hosts/zipapp.py: deterministic bytes (in any process), contents, entry point,
local cache, the bytecode beside each module (used where the Python is the controller's, else the
source is), and that the zipapp runs under the system python3 (which has no msgpack) with
msgpack's pure-Python code."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from master.hosts import zipapp
from master.hosts.zipapp import (
    DEFAULT_ENTRY,
    SlaveZipapp,
    build_slave_zipapp,
    cached_slave_zipapp,
    main_module_source,
    write_cached,
)

SYSTEM_PYTHON = "/usr/bin/python3"


def _names(app: SlaveZipapp) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(app.data)).namelist()


def test_two_builds_give_the_same_bytes_and_hash() -> None:
    first, second = build_slave_zipapp(), build_slave_zipapp()
    assert first.data == second.data
    assert first.sha256 == hashlib.sha256(first.data).hexdigest()
    assert first.hash16 == first.sha256[:16]
    assert first.file_name == f"slave-{first.sha256[:16]}.pyz"
    assert first.entry == DEFAULT_ENTRY


def test_a_different_entry_or_extra_file_changes_the_hash() -> None:
    base = build_slave_zipapp()
    assert build_slave_zipapp("slave.other:main").sha256 != base.sha256
    assert build_slave_zipapp(extra_files={"x.py": b"pass\n"}).sha256 != base.sha256


def test_contents_are_sorted_with_fixed_times_and_no_caches_or_binaries() -> None:
    app = build_slave_zipapp()
    archive = zipfile.ZipFile(io.BytesIO(app.data))
    names = archive.namelist()
    assert names == sorted(names)
    for required in (
        "__main__.py",
        "slave/__init__.py",
        "protocol/__init__.py",
        "protocol/errors.py",
        "msgpack/__init__.py",
        "msgpack/fallback.py",
    ):
        assert required in names
    for name in names:
        assert "__pycache__" not in name
        assert "/tests/" not in name
        assert not name.endswith(".so")
        assert name.split("/")[0] in {"__main__.py", "__main__.pyc", "slave", "protocol",
                                       "msgpack"}
        if name.endswith(".pyc"):  # bytecode only beside its source
            assert name[:-1] in names
    assert {n + "c" for n in names if n.endswith(".py")} <= set(names)
    msgpack_names = [n for n in names if n.startswith("msgpack/")]
    assert all(n.endswith((".py", ".pyc")) for n in msgpack_names)
    for info in archive.infolist():
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.external_attr >> 16 == 0o100644


def test_main_runs_the_entry_point() -> None:
    source = main_module_source("slave.main:main")
    assert "from slave.main import main as _entry" in source
    assert "raise SystemExit(_entry())" in source


@pytest.mark.parametrize(
    "entry", ["slave.main", "slave.main:", ":main", "slave main:main", "slave.main:ma-in", ""]
)
def test_malformed_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="entry"):
        build_slave_zipapp(entry)


@pytest.mark.parametrize("name", ["__main__.py", "protocol/errors.py"])
def test_extra_files_cannot_replace_packed_files(name: str) -> None:
    with pytest.raises(ValueError, match="replace"):
        build_slave_zipapp(extra_files={name: b""})


def test_write_cached_writes_once_and_replaces_a_corrupt_copy(tmp_path: Path) -> None:
    app = build_slave_zipapp()
    path = write_cached(app, tmp_path / "cache")
    assert path == tmp_path / "cache" / app.file_name
    assert path.read_bytes() == app.data
    inode = path.stat().st_ino
    assert write_cached(app, tmp_path / "cache").stat().st_ino == inode  # cached: not rewritten
    path.write_bytes(app.data[:100])  # truncated by someone
    assert write_cached(app, tmp_path / "cache").read_bytes() == app.data
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [app.file_name]


def test_zipapp_runs_under_system_python_with_packed_pure_python_msgpack(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is not installed")
    path = write_cached(echo_zipapp, tmp_path)
    result = subprocess.run(
        [SYSTEM_PYTHON, str(path)], input=b"hello\nworld\n", capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stderr.decode()
    pid_line, rest = result.stdout.split(b"\n", 1)
    assert int(pid_line) > 0
    assert rest == b"hello\nworld\n"
    stderr = result.stderr.decode()
    assert "impl msgpack.fallback" in stderr  # no C extension travels in the zip
    assert f"file {path}/msgpack/__init__.py" in stderr  # the packed copy, not a host install
    assert "roundtrip {'ok': [1, 2]}" in stderr


def test_exit_status_of_the_entry_becomes_the_process_status(
    tmp_path: Path, echo_zipapp: SlaveZipapp
) -> None:
    path = write_cached(echo_zipapp, tmp_path)
    result = subprocess.run(
        [SYSTEM_PYTHON, str(path)], input=b"EXIT 7\n", capture_output=True, timeout=30
    )
    assert result.returncode == 7


ROOT = Path(__file__).resolve().parents[2]
_BUILD = "import sys; from master.hosts.zipapp import build_slave_zipapp; " \
         "sys.stdout.write(build_slave_zipapp().sha256)"


def test_the_same_bytes_from_a_process_that_imported_more_under_another_hash_seed() -> None:
    """The bytecode's marshalling leaves no trace of the process (reference counts, string
    hashes): a master that imported numpy and asyncio first packs the same bytes."""
    shas = set()
    for seed, first in (("1", ""), ("2", "import numpy, asyncio, msgpack; ")):
        done = subprocess.run([sys.executable, "-c", first + _BUILD], capture_output=True,
                              text=True, timeout=60, cwd=ROOT,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr
        shas.add(done.stdout)
    assert shas == {build_slave_zipapp().sha256}


def _imported_from(pyz: Path, module: str) -> str:
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(pyz)!r}); "
         f"import {module} as m; print(m.__file__)"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_bytecode_is_used_where_its_python_runs_and_the_source_elsewhere(tmp_path: Path) -> None:
    app = build_slave_zipapp()
    pyz = tmp_path / "slave.pyz"
    pyz.write_bytes(app.data)
    assert _imported_from(pyz, "protocol.errors") == f"{pyz}/protocol/errors.pyc"
    # the same zip as a host of another Python sees it: each .pyc's magic number not its own
    other = tmp_path / "other.pyz"
    with zipfile.ZipFile(io.BytesIO(app.data)) as src, zipfile.ZipFile(other, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".pyc"):
                assert data[:4] == importlib.util.MAGIC_NUMBER
                data = b"\x00\x00" + data[2:]
            out.writestr(info, data)
    assert _imported_from(other, "protocol.errors") == f"{other}/protocol/errors.py"
    # nor where its source was changed after it was built
    edited = tmp_path / "edited.pyz"
    with zipfile.ZipFile(io.BytesIO(app.data)) as src, zipfile.ZipFile(edited, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info, data + b"\n" if info.filename == "protocol/errors.py" else data)
    assert _imported_from(edited, "protocol.errors") == f"{edited}/protocol/errors.py"


def test_cached_zipapp_is_built_once_and_rebuilt_when_its_file_is_damaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"slave/engine/extra.bin": b"\x7fELF..."}
    first = cached_slave_zipapp(extra, tmp_path)
    assert first == build_slave_zipapp(extra_files=extra)
    assert (tmp_path / first.file_name).read_bytes() == first.data
    packed: list[int] = []
    pack = zipapp.pack
    monkeypatch.setattr(zipapp, "pack", lambda *a: packed.append(1) or pack(*a))
    assert cached_slave_zipapp(extra, tmp_path) == first and not packed  # read back
    assert cached_slave_zipapp({}, tmp_path) != first and packed == [1]  # other files
    (tmp_path / first.file_name).write_bytes(first.data[:100])  # truncated by someone
    assert cached_slave_zipapp(extra, tmp_path) == first and packed == [1, 1]
    assert (tmp_path / first.file_name).read_bytes() == first.data
