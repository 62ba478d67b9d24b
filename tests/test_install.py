"""ivypy as a user installs it: the wheel built from this checkout, installed non-editable into a
fresh virtualenv (its dependencies from the package index, or pip's cache), runs a paced
workload from outside the checkout on the compiled loop, built on the controller and shipped
in the slave zipapp. A normal install once lost ``ivy_loop.c`` (not package data), and every
host then ran the Python loop without a word.

The wheel's one top-level import name is ``ivypy`` (``master``, ``protocol`` and ``slave`` are
beneath it, and not importable outside the ivypy process), and the checkout it is built from
may be read-only: setuptools once wrote ``ivypy.egg-info`` and ``build/`` into it, so a user
could not install a checkout root owned. As root the copy is a read-only bind mount: the wheel
is built from it, and pipx installs it as a user who owns nothing of it (nobody), offline from
the wheels the first build gathered; the tree is then as it was, file by file.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from master.analysis import native

ROOT = Path(__file__).resolve().parents[1]
NOBODY_UID = NOBODY_GID = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--"]
#: Bytecode a checkout that has run holds (.gitignore'd): the wheel must not carry it.
STRAY_BYTECODE = "master/__pycache__/stray.cpython-311.pyc"

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


def _run(argv: list[str], cwd: Path, timeout: float,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if env is None:
        env = {k: v for k, v in os.environ.items()  # a user's: bytecode beside the modules
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "IVYPY_SLAVE_CC", "PYTHONPYCACHEPREFIX")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env)
    assert done.returncode == 0, f"{argv[:4]}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def _source_copy(to: Path) -> list[str]:
    """Copy the checkout's files (tracked, and new ones git does not ignore) to ``to``, without a
    build directory a checkout may hold from an earlier build: what a fresh clone builds from.
    Returns their names."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True, timeout=60)
    names = [n for n in filter(None, listed.stdout.decode().split("\0")) if (ROOT / n).is_file()]
    for name in names:
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, to / name)
    return names


def _tree(top: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every file and folder under ``top``: mode, size, mtime (ns) and the file's sha256."""
    seen: dict[str, tuple[int, int, int, str]] = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if name in files else ""
            seen[str(path.relative_to(top))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return seen


@dataclass(frozen=True)
class Checkout:
    """The copy pip builds from, and the wheels the first build gathered."""

    path: Path  # the read-only bind mount of the copy (as root), else the copy
    files: list[str]  # its files, as git lists them (without STRAY_BYTECODE)
    read_only: bool
    before: dict[str, tuple[int, int, int, str]]  # ``_tree`` of the copy before any build
    area: Path  # a folder others may read (``tmp_path`` is its owner's alone)
    wheels: Path  # ivypy's wheel, built from ``path``, and those of everything it installs


@pytest.fixture(scope="module")
def checkout() -> Iterator[Checkout]:
    """The checkout's copy, read-only as root, and its wheel built from it with the wheels of
    its dependencies, of its build backend and of pipx's own libraries (pip, setuptools, wheel):
    what the installs here take, offline, from one resolve against the index (or pip's cache)."""
    area = Path(tempfile.mkdtemp(prefix="ivypy-install-"))
    area.chmod(0o755)
    copy, mount, wheels = area / "src", area / "checkout", area / "wheels"
    files = _source_copy(copy)
    (copy / STRAY_BYTECODE).parent.mkdir(exist_ok=True)
    (copy / STRAY_BYTECODE).write_bytes(b"not for the wheel")
    before = _tree(copy)
    read_only = os.geteuid() == 0
    mounted = False
    try:
        if read_only:  # root writes through a file's modes; not through a read-only mount
            mount.mkdir()
            _run(["mount", "--bind", str(copy), str(mount)], area, 30)
            mounted = True
            _run(["mount", "-o", "remount,bind,ro", str(mount)], area, 30)
            with pytest.raises(OSError) as refused:
                (mount / "probe").write_text("")
            assert refused.value.errno == errno.EROFS
        source = mount if read_only else copy
        _run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), str(source),
              "hatchling", "pip", "setuptools", "wheel"], area, 300)
        yield Checkout(source, files, read_only, before, area, wheels)
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=True, timeout=60)
        shutil.rmtree(area)


def test_a_wheel_installed_in_a_fresh_virtualenv_runs_the_compiled_loop(
        checkout: Checkout, tmp_path: Path) -> None:
    (wheel,) = checkout.wheels.glob("ivypy-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # one import name: master/, protocol/ and slave/ whole beneath ivypy/ (their modules and
    # data: the compiled loop's C, the report's assets, the examples), and no tests or bytecode
    (info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert {n.split("/")[0] for n in names} == {"ivypy", info}
    # and the master's kernels, compiled by the wheel's build (hatch_build.py) for this platform
    kernels = f"ivypy/master/analysis/{native.shipped_name()}"
    assert {n for n in names if not n.startswith(info)} == {
        n if n.startswith("ivypy/") else f"ivypy/{n}" for n in checkout.files
        if n.startswith(("ivypy/", "master/", "protocol/", "slave/"))} | {kernels}
    assert wheel.name.endswith(f"-linux_{platform.machine()}.whl"), wheel.name
    assert {"ivypy/slave/engine/ivy_loop.c", "ivypy/slave/engine/ivy_loop.h"} <= names
    for asset in ("page.js", "errors.js", "page.css", "vendor/uPlot.iife.min.js",
                  "vendor/uPlot.min.css", "vendor/uPlot-LICENSE"):  # report.html's parts
        assert f"ivypy/master/results/report/{asset}" in names, asset
    assert {f"ivypy/master/examples/{n}.yaml" for n in ("quickstart", "dfc", "sweep", "gather")
            } <= names
    # the virtualenv without a pip of its own, filled by this interpreter's pip (``--python``):
    # the same install, without 4 s of copying pip in; no byte-compiling of the dependencies
    # (6 s), which Python does for the modules the run imports
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, 120)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
          "--no-compile", "--no-index", "--find-links", str(checkout.wheels), "ivypy"],
         tmp_path, 600)
    work = tmp_path / "work"  # away from the checkout: only the install can be imported
    work.mkdir()
    # outside the ivypy process its packages are ivypy's alone: none by the generic names
    found = _run([str(venv / "bin" / "python"), "-c", "import importlib.util as u, ivypy\n"
                  "print(*(u.find_spec(n) for n in ('master', 'protocol', 'slave')))"], work, 60)
    assert found.stdout.split() == ["None", "None", "None"]
    version = _run([str(venv / "bin" / "python"), "-m", "ivypy", "--version"], work, 60).stdout
    assert version.startswith(f"ivypy {wheel.name.split('-')[1]} (protocol ")
    (work / "test.yaml").write_text(TEST)
    cache = tmp_path / "cache"  # the user's cache, empty: what the run builds lands here
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "IVYPY_SLAVE_CC", "PYTHONPYCACHEPREFIX")}
    done = _run([str(venv / "bin" / "ivypy"), "run", "test.yaml", "--output-root", "out",
                 "--plain"], work, 300, {**env, "XDG_CACHE_HOME": str(cache)})
    (folder,) = (work / "out" / "installed").iterdir()
    assert str(folder) in done.stdout
    # the first run after an install loads the master's kernels the wheel ships: it builds
    # none (the slave's loop, built on the controller for the hosts, is the cache's only object)
    assert "building the master's kernels" not in done.stdout
    assert not list(cache.rglob("master-kernels-*")), sorted(cache.rglob("*.so"))
    with open(folder / "hosts.csv", newline="") as fh:
        (host,) = list(csv.DictReader(fh))
    assert host["io_loop"] == "compiled (shipped from the controller)", host["io_loop"]
    with open(folder / "summary.csv", newline="") as fh:
        (total,) = [r for r in csv.DictReader(fh) if r["rollup_type"] == "all"]
    assert total["valid"] == "true" and abs(float(total["IOPS"]) - 500) < 25
    page = (folder / "report.html").read_text()  # the report's assets came with the install
    assert "uPlot" in page and "data-charts-drawn" in page and len(page) > 60_000
    # so did the example tests: ``ivypy example`` writes one, as the checkout has it
    _run([str(venv / "bin" / "ivypy"), "example", "quickstart"], work, 60)
    assert (work / "quickstart.yaml").read_text() == (ROOT / "configs/quickstart.yaml").read_text()


def test_pipx_installs_a_read_only_checkout_as_a_user_who_owns_none_of_it(
        checkout: Checkout) -> None:
    if not checkout.read_only:
        pytest.skip("not root: no read-only bind mount of the checkout (root ignores file "
                    "modes), and no other user to install it as")
    pipx = shutil.which("pipx")
    assert pipx, "pipx is not installed: scripts/_env.sh installs Debian's (ivypy_install_debs)"
    home = checkout.area / "nobody"  # HOME, caches, pipx's venvs: the user's own
    home.mkdir()
    os.chown(home, NOBODY_UID, NOBODY_GID)
    # pipx's Python is the system's (Debian's python3): the wheels gathered with this one's fit
    # it while both are the same CPython (3.11 here); pip reads the index settings from the
    # environment, for pipx's shared pip, setuptools and wheel too
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_CACHE_HOME": str(home / "cache"), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CONFIG_HOME": str(home / "config"), "PIPX_HOME": str(home / "pipx"),
           "PIPX_BIN_DIR": str(home / "bin"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(checkout.wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    _run([*AS_NOBODY, pipx, "install", "--pip-args=--no-compile", str(checkout.path)], home, 600,
         env)
    ivypy = home / "bin" / "ivypy"
    assert "example" in _run([*AS_NOBODY, str(ivypy), "--help"], home, 60, env).stdout
    shown = _run([*AS_NOBODY, str(ivypy), "example", "quickstart", "-o", "-"], home, 60, env)
    assert shown.stdout == (ROOT / "configs/quickstart.yaml").read_text()
    # the wheel built as root (the fixture) and pipx's build wrote nothing into the checkout
    assert _tree(checkout.path) == checkout.before
