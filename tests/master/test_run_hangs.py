"""``ivypy run`` when a host hangs or the operator presses Ctrl-C at a stage that would not
end by itself soon: a stopped slave is reported at its deadline and the run is over within 3 s
of it, its processes gone (the real CLI as a subprocess and a local slave: SIGSTOP and the
processes are what is tested); Ctrl-C while connecting to a host that never speaks, in the
middle of a long subinterval, or while a host hangs, exits 130 within 3 s (on in-memory hosts:
the run's decision is tested; a real Ctrl-C to a real run is tests/master/test_run_killed.py's).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from master.config import HostConfig
from master.live.view import LiveView
from master.run.lifecycle import Run
from protocol.messages import Message, SubintervalResult
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import (
    all_gone,
    process_tree,
    rows,
    run_folder,
    slave_pids,
    start_run,
    wait_rows,
    write_config,
)

TEST = """\
test: {name}
subinterval_seconds: {sub}
hosts: [{hosts}]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun-{name}", size: 16MiB, create: true}}
steps:
  - name: rr
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 2, iops: 500,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {seconds}
"""


@contextlib.contextmanager
def _slave_stopped(proc: subprocess.Popen[str], out: Path, test: str, rows_first: int
                   ) -> Iterator[tuple[Path, list[psutil.Process]]]:
    """SIGSTOP the run's slave once its step has ``rows_first`` rows; yields the run folder and
    the slave's process tree. After: the run is killed and the slave let go (SIGCONT)."""
    slave: psutil.Process | None = None
    try:
        folder = run_folder(out, test)
        wait_rows(folder / "step0000-rr/all/all.csv", rows_first)
        slave = psutil.Process(slave_pids(folder)[0])
        tree = process_tree(slave.pid)
        slave.send_signal(signal.SIGSTOP)
        yield folder, tree
    finally:
        proc.kill()
        if slave is not None:
            with contextlib.suppress(psutil.Error):
                slave.send_signal(signal.SIGCONT)


def test_a_stopped_slave_is_reported_at_its_deadline_and_the_run_ends_within_3s(
        tmp_path: Path) -> None:
    """SIGSTOP the slave (its workers go on, the slave sends nothing): the master reports it
    when the result of the subinterval running is due (its end + 0.75 of a subinterval), not
    5 s later, and exits 3 within 3 s of that, leaving no process of the slave's behind."""
    sub = 1.0
    cfg = write_config(tmp_path, TEST.format(name="stop", sub=sub, hosts="localhost",
                                             seconds=30))
    proc = start_run(cfg, tmp_path)
    with _slave_stopped(proc, tmp_path, "stop", 2) as (folder, tree):
        t_stop = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t_stop
    assert proc.returncode == 3, err
    assert "localhost" in err and "not received within the deadline" in err
    # the deadline of the subinterval running at the stop is at most 1.75 subintervals later
    assert took < 1.75 * sub + 3.0, f"the run ended {took:.2f} s after the stop"
    assert all_gone(tree, 2.0), [p.pid for p in tree if p.is_running()]
    events = rows(folder / "events.csv")
    assert any("not received within the deadline" in e["message"] for e in events)


def _interrupt_at(box: dict[str, Any], delay_s: float) -> None:
    """Ctrl-C to the run (``Run._interrupt``, what its SIGINT handler calls) ``delay_s``
    from now; ``box["at"]``: when."""
    box["at"] = time.monotonic() + delay_s
    asyncio.get_running_loop().call_later(delay_s, box["run"]._interrupt)


def test_ctrl_c_while_connecting_to_a_host_that_never_speaks_exits_130_within_3s(
        tmp_path: Path) -> None:
    """A host whose connection never completes (an SSH server that accepts TCP and never
    sends its banner: that the transport's handshake is cancelled at once is
    tests/master/test_transport.py's)."""
    hosts = "localhost, {name: mute, address: 127.0.0.1, user: root}"
    cfg = memory_config(tmp_path, TEST.format(name="mute", sub=1, hosts=hosts, seconds=5))
    box: dict[str, Any] = {}
    memory = MemoryHosts()

    async def connect(host: HostConfig) -> Any:
        if host.name == "mute":
            _interrupt_at(box, 1.0)
            await asyncio.Event().wait()  # never
        return await memory.connect(host)

    run = box["run"] = Run(cfg, view=LiveView(rich_mode=False), connect=connect)
    result = execute(run, timeout_s=30)
    took = time.monotonic() - box["at"]
    assert result.exit_code == 130, result.message
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
    assert "interrupted while starting hosts" in result.message
    assert not list(Path(result.folder).glob("step*"))
    assert memory["localhost"].session.closed


def test_ctrl_c_in_a_long_subinterval_exits_130_within_3s_keeping_the_rows(
        tmp_path: Path) -> None:
    """With 6 s subintervals (Ctrl-C 1 s into the second: its end is 5 s away, past the 3 s
    allowed) the step does not wait for the one running: it ends at once, the rows written
    stay, and the host is closed."""
    cfg = memory_config(tmp_path, TEST.format(name="long", sub=6, hosts="localhost",
                                              seconds=60))
    box: dict[str, Any] = {}

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult) and m.subinterval == 0:
            _interrupt_at(box, 1.0)  # well inside the second subinterval
        return True

    hosts = MemoryHosts(watch)
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run, timeout_s=60)
    took = time.monotonic() - box["at"]
    assert result.exit_code == 130, result.message
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
    assert hosts["localhost"].session.closed
    folder = Path(result.folder)
    assert len(rows(folder / "step0000-rr/all/all.csv")) == 1
    (summary,) = [r for r in rows(folder / "summary.csv") if r["rollup_type"] == "all"]
    assert summary["valid"] == "false" and "interrupted" in summary["invalid_reason"]


def test_ctrl_c_while_a_host_hangs_exits_130_within_3s(tmp_path: Path) -> None:
    """The slave hangs after its first result (nothing more comes from it), then Ctrl-C before
    its deadline: the run does not wait for the hung host (its result, its Stopped, the
    measurement window) and exits 130 within 3 s. (A stopped slave's processes gone at the
    run's end: the test above.)"""
    cfg = memory_config(tmp_path, TEST.format(name="hung", sub=2, hosts="localhost",
                                              seconds=60))
    box: dict[str, Any] = {}

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult) and m.subinterval == 0:
            _interrupt_at(box, 0.3)
            return False
        return True

    run = box["run"] = memory_run(cfg, MemoryHosts(watch))
    result = execute(run, timeout_s=30)
    took = time.monotonic() - box["at"]
    assert result.exit_code == 130, result.message
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
