"""The slave process's start (``slave.main.serve``): a stdin it cannot wait on is named before
any worker starts, and a failure after the workers started ends them, with exit status 1. No
test here times anything: they run beside the others (``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.messages import Hello
from protocol.state import Conversation, Role
from protocol.version import PROTOCOL_VERSION
from slave.main import EXIT_FAILED

ROOT = Path(__file__).resolve().parents[2]
HELLO = Hello(PROTOCOL_VERSION, "test", "local", 0)


@pytest.mark.parametrize("stdin", ["/dev/null", "a regular file"])
def test_a_stdin_that_cannot_be_waited_on_is_named_and_starts_no_worker(
        tmp_path: Path, stdin: str) -> None:
    # epoll refuses /dev/null and regular files: the slave said so only after starting its
    # workers, with a traceback, and then hung at exit joining a worker that had missed the
    # SIGTERM meant to end it (6 of 6 runs by hand)
    path = Path(stdin) if stdin.startswith("/") else tmp_path / "stdin"
    if not path.exists():
        path.write_bytes(Conversation(Role.MASTER).send(HELLO))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVYPY_SLAVE_ENGINE": "fake"}
    with open(path, "rb") as fh:
        proc = subprocess.run([sys.executable, "-m", "slave", "--worker-cpus", "unpinned"],
                              stdin=fh, capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == EXIT_FAILED, proc.stderr
    assert f"stdin (fd 0, {path}) cannot be waited on" in proc.stderr, proc.stderr
    assert "a pipe or a socket" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


_FAILING_START = """
import sys
from slave.main import serve
from slave.session import SlaveSession
from tests.slave.test_session import FakeBackend

class Backend(FakeBackend):
    def close(self):
        print("backend closed", file=sys.stderr)

def refuse(self, *args, **kwargs):
    raise RuntimeError("a bug at start")
SlaveSession.__init__ = refuse
sys.exit(serve(Backend))
"""


def test_a_failure_after_the_workers_started_ends_them_and_the_exit_is_1() -> None:
    # the session's making failed after the backend (the workers) started: they ended with
    # it, where they once were left to the interpreter's exit, which could wait on them forever
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _FAILING_START], stdin=subprocess.PIPE,
                          capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == EXIT_FAILED, proc.stderr
    assert "slave failed to start" in proc.stderr and "a bug at start" in proc.stderr
    assert "backend closed" in proc.stderr, proc.stderr
