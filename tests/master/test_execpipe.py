"""The exec transport (``master.hosts.execpipe``) without root: a prefix (``env`` with a home
of its own) that reaches "the host": the zipapp goes down the pipe and the protocol follows; the
failures of the prefix and of the host's Python name the host and the command; the bootstrap
refuses a zipapp cut short or damaged. The test bed's namespaces through ``ip netns exec`` are
tests/master/test_run_exec.py's."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from master.hosts.execpipe import EXEC_BOOTSTRAP, open_exec
from master.hosts.zipapp import SlaveZipapp
from protocol.errors import HostError, SlaveStartError
from tests.master.test_transport import SLAVE_ARGS, SYSTEM_PYTHON, echo_roundtrip, run


def test_exec_sends_the_slave_over_its_pipe_and_the_protocol_follows(
        tmp_path: Path, echo_zipapp: SlaveZipapp) -> None:
    # a prefix that reaches "the host" (here: env, with a home of its own): the zipapp goes
    # down the pipe, is kept in that home's cache, runs with the slave's arguments, and what
    # is written after it reaches the slave
    seen: list[str] = []

    async def scenario() -> None:
        conn = await open_exec("exec-a", ("env", f"HOME={tmp_path}"), SYSTEM_PYTHON,
                               zipapp=echo_zipapp, on_stderr_line=seen.append,
                               slave_args=SLAVE_ARGS)
        assert await echo_roundtrip(conn, b"after the zipapp\n") > 0
        assert await conn.close() == 0

    run(scenario())
    assert any(x.endswith(f" argv {list(SLAVE_ARGS)!r}") for x in seen), seen
    kept = tmp_path / ".cache" / "ivypy" / echo_zipapp.file_name
    assert kept.read_bytes() == echo_zipapp.data


@pytest.mark.parametrize(("prefix", "python", "error", "says"), [
    (("/nonexistent/kubectl", "exec", "-i", "pod", "--"), SYSTEM_PYTHON, HostError,
     ["host exec-b: cannot run /nonexistent/kubectl exec -i pod --: No such file or directory"]),
    # the prefix itself fails (no such pod): its words and what it said
    (("sh", "-c", "echo 'Error from server (NotFound): pods \"pod\" not found' >&2; exit 1"),
     SYSTEM_PYTHON, HostError,
     ["host exec-b: sh -c ", " failed: Error from server (NotFound): pods \"pod\" not found"]),
    (("env",), "/nonexistent/python3", SlaveStartError,
     ["host exec-b: /nonexistent/python3 not found"]),
    (("env",), f"{SYSTEM_PYTHON} -S", SlaveStartError,
     ["host exec-b: /usr/bin/python3 -S lacks numpy"]),
])
def test_exec_failures_name_the_host_and_the_command(
        echo_zipapp: SlaveZipapp, prefix: tuple[str, ...], python: str,
        error: type[Exception], says: list[str]) -> None:
    with pytest.raises(error) as info:
        run(open_exec("exec-b", prefix, python, zipapp=echo_zipapp))
    text = str(info.value)
    assert text.startswith(says[0]) and all(x in text for x in says), text


@pytest.mark.parametrize(("sent", "sha", "says"), [
    (b"12345", hashlib.sha256(b"1234567890").hexdigest(),
     "ivypy: the slave zipapp was cut short after 5 of 10 bytes"),
    (b"1234567890", hashlib.sha256(b"0987654321").hexdigest(),
     "ivypy: the slave zipapp arrived damaged (its sha256 differs)"),
])
def test_the_exec_bootstrap_refuses_a_zipapp_cut_short_or_damaged(
        tmp_path: Path, sent: bytes, sha: str, says: str) -> None:
    done = subprocess.run([SYSTEM_PYTHON, "-c", EXEC_BOOTSTRAP, "10", sha], input=sent,
                          capture_output=True, env={**os.environ, "HOME": str(tmp_path)},
                          timeout=30)
    assert done.returncode == 1 and done.stderr.decode().strip() == says
    assert not (tmp_path / ".cache").exists() or not list((tmp_path / ".cache").rglob("*.pyz"))
