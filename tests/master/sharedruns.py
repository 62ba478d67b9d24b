"""Real runs that several test files read: each ``ivypy run`` here runs once per session, on
first use, and every test that asks for it gets the same run folder (a real run costs seconds
of start-up and steps; the suite has dozens).

Owns: the session fixtures (re-exported by tests/master/conftest.py) and the configs they run.
Must not: be written to by a test. A test that would change a run folder (a resume, a file it
adds) runs its own run, or works on a copy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.master.runhelp import ROOT

QUICKSTART = ROOT / "configs" / "quickstart.yaml"


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/quickstart.yaml as it ships, run through the CLI to its end (exit 0); its run
    folder."""
    out = tmp_path_factory.mktemp("quickstart")
    proc = subprocess.run(
        [sys.executable, "-m", "master", "run", str(QUICKSTART), "--output-root", str(out),
         "--plain"],
        capture_output=True, text=True, timeout=180, cwd=out,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (out / "quickstart").iterdir()
    return folder
