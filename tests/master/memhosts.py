"""Test helpers for runs on in-memory hosts (``master.hosts.memory``): a test's config with a
file LUN under its output root, a ``Run`` on ``MemoryHosts``, and its execution bounded in
time. The hosts, the synthetic backend and its plant are the package's own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import master.cli.run
from master.cli.main import main
from master.config import TestConfig, parse_config_text
from master.hosts.memory import MemoryHost, MemoryHosts, Plant, SyntheticBackend
from master.hosts.warp import loop_clock_ns, run_warped
from master.live.view import LiveView
from master.run.lifecycle import Run

__all__ = ["MemoryHost", "MemoryHosts", "Plant", "SyntheticBackend", "execute",
           "memory_config", "memory_run", "run_cli"]


def memory_config(tmp: Path, text: str) -> TestConfig:
    """The test ``text`` (a ``${output_root}`` file LUN for the synthetic I/O), its output
    root ``tmp/out``; test.yaml is written into ``tmp`` as the run's source."""
    source = tmp / "test.yaml"
    source.write_text(text)
    return parse_config_text(text, str(source), output_root_override=str(tmp / "out"), cwd=tmp)


def memory_run(cfg: TestConfig, hosts: MemoryHosts, **kw: Any) -> Run:
    """A ``Run`` of ``cfg`` on ``hosts``, on its loop's clock (``loop_clock_ns``)."""
    return Run(cfg, view=LiveView(rich_mode=False), connect=hosts.connect, clock=loop_clock_ns,
               **kw)


def execute(run: Run, timeout_s: float = 30, warp: bool = True) -> Any:
    """``run.execute()`` to its end (its ``RunResult``), failing the test past ``timeout_s`` of
    the loop's time. ``warp``: on a ``WarpLoop``, its idle waits skipped (a run with a party
    outside the loop, a process or a thread that answers in real time, passes False)."""
    main = asyncio.wait_for(run.execute(), timeout_s)
    return run_warped(main) if warp else asyncio.run(main)


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch,
            hosts: MemoryHosts | None = None, warp: bool = True) -> int:
    """``ivypy ARGV`` in this process (``master.cli.main.main``: its parsing, refusals, console
    lines and exit status), a run's hosts in memory (``hosts``, else new ones): what the CLI
    decides, without the process, the zipapp and a slave. Its lines are the test's
    ``capsys``."""
    on = MemoryHosts() if hosts is None else hosts

    def run_test(cfg: TestConfig, view: LiveView, resume: Any = None) -> Any:
        main = Run(cfg, view=view, connect=on.connect, resume=resume,
                   clock=loop_clock_ns).execute()
        return run_warped(main) if warp else asyncio.run(main)

    monkeypatch.setattr(master.cli.run, "run_test", run_test)
    return main(argv)
