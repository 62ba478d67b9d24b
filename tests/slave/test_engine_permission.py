"""A LUN the slave's user may not open (a root's loop device, to a slave run as another user):
refused with who owns it, its mode, who the slave runs as and what to do, whatever the engine
asked for; it used to say libaio was unavailable and that the thread pool would do. Run as
the user ``nobody`` (``setpriv``), on a file of root's, mode 0600, in /dev/shm."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv: to run a check as nobody")


@pytest.fixture
def roots_lun() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="ivypy-test-perm-", dir="/dev/shm"))
    folder.chmod(0o755)
    lun = folder / "lun"
    lun.write_bytes(b"\0" * 65536)
    lun.chmod(0o600)
    try:
        yield lun
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("choice", ["auto", "libaio", "io_uring"])
def test_a_lun_the_slave_may_not_open_names_owner_mode_and_user(roots_lun: Path,
                                                                choice: str) -> None:
    code = ("import sys\nfrom slave.engine import choose_engine\n"
            "from protocol.errors import IoEngineError\n"
            "try:\n"
            f"    choose_engine({choice!r}, {str(roots_lun)!r}, 512, fallback=True)\n"
            "except IoEngineError as exc:\n    print(exc)\nelse:\n    print('chosen')\n")
    done = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"LUN {roots_lun}: permission denied: it is root:root, mode 0600, and the slave runs "
        "as nobody: run it as a user that may read and write it (one in group root, or root), "
        "or give nobody access; no engine can use it as it is")


def test_a_lun_it_may_open_is_not_refused_so(roots_lun: Path) -> None:
    from slave.engine import unreadable

    assert unreadable(str(roots_lun)) is None  # root may
    assert unreadable(str(roots_lun.parent / "gone")) is None  # the engine's open says that
