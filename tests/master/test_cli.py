"""The top-level CLI: --help/--version, and each subcommand loading only its own module."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from master.cli import main as cli
from protocol.version import PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_command_table_matches_the_modules() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(cli.COMMAND_OF)
    assert set(cli.COMMAND_OF.values()) == set(cli.COMMAND_MODULES)
    for name, module in cli.COMMAND_OF.items():
        only = cli.build_parser(module)
        only_sub = next(a for a in only._actions if isinstance(a, argparse._SubParsersAction))
        assert name in only_sub.choices


@pytest.mark.parametrize("args, status, stdout, stderr", [
    (["--version"], 0, f"ivypy 0.1.0 (protocol {PROTOCOL_VERSION})", ""),
    (["--help"], 0, "fio-pctiles", ""),
    ([], 2, "", "COMMAND"),  # ``ivypy`` alone: the usage, as a usage error
])
def test_help_and_version(args: list[str], status: int, stdout: str, stderr: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == status, proc.stderr
    assert stdout in proc.stdout and stderr in proc.stderr
    if not stdout:
        assert proc.stdout == ""


def test_fio_pctiles_does_not_load_the_run_loop() -> None:
    code2 = ("import sys\nfrom master.cli import main as cli\n"
             "try:\n    cli.main(['fio-pctiles', '--help'])"
             "\nexcept SystemExit:\n    pass\nprint('asyncssh' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stdout + proc.stderr


def test_a_reader_that_goes_away_is_no_traceback(tmp_path: Path) -> None:
    """``ivypy run X --dry-run | head -c 10``: the plan's later lines meet a closed pipe; the
    command ends quietly with the shell's SIGPIPE status (it printed a BrokenPipeError
    traceback, twice). The plan (a sweep of 400 steps) is far larger than a pipe's buffer, so
    its writes meet the closed pipe whatever the timing."""
    iops = ", ".join(str(100 + i) for i in range(400))
    test = tmp_path / "big.yaml"
    test.write_text(
        "test: big\nhosts: [localhost]\n"
        "luns: [{hosts: localhost, file: /tmp/ivypy-never-made, size: 1MiB}]\n"
        "steps:\n  - name: s\n"
        "    workloads: [{name: r, iosequencer: random_steady, read_fraction: 100%}]\n"
        f"    for: {{iops: [{iops}]}}\n    measure_seconds: 1\n")
    proc = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m master run {test} --dry-run | head -c 10 >/dev/null;"
         " echo ${PIPESTATUS[0]}"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == str(cli.EXIT_BROKEN_PIPE)


def test_the_process_exits_with_mains_status_without_a_last_collection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``console_main`` (the ``ivypy`` script, ``python -m master``) exits with ``main``'s
    status, its objects frozen first: the interpreter's exit then skips collecting them."""
    frozen: list[int] = []
    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(cli.gc.get_count()[0]))
    with pytest.raises(SystemExit) as done:
        cli.console_main()
    assert done.value.code == 3 and len(frozen) == 1
