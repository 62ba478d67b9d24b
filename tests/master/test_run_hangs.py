"""``ivypy run`` when a host hangs or the operator presses Ctrl-C at a stage that would not
end by itself soon: a stopped slave is reported at its deadline and the run is over within 3 s
of it; SIGINT while connecting to a host that accepts TCP and never speaks, or in the middle of
a long subinterval, exits 130 within 3 s. Each runs the real CLI as a subprocess (the process
boundary, its signals and its exit status are what is tested) against a local slave or a silent
TCP listener on 127.0.0.1."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

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


@pytest.fixture
def silent_host() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        done.set()
        thread.join(5)
        for c in held:
            c.close()
        server.close()


def test_ctrl_c_while_connecting_to_a_host_that_never_speaks_exits_130_within_3s(
        tmp_path: Path, silent_host: int) -> None:
    hosts = f"localhost, {{name: mute, address: 127.0.0.1, port: {silent_host}, user: root}}"
    cfg = write_config(tmp_path, TEST.format(name="mute", sub=1, hosts=hosts, seconds=5))
    proc = start_run(cfg, tmp_path)
    try:
        folder = run_folder(tmp_path, "mute")
        time.sleep(1.5)  # the SSH handshake is waiting for the server's banner
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        t_int = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t_int
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
    assert "interrupted while starting hosts" in err
    assert not list(folder.glob("step*"))


def test_ctrl_c_in_a_long_subinterval_exits_130_within_3s_keeping_the_rows(
        tmp_path: Path) -> None:
    """With 6 s subintervals (Ctrl-C 1 s into the second: its end is 5 s away, past the 3 s
    allowed) the step does not wait for the one running: it ends at once, the rows written
    stay, and the slave is gone."""
    cfg = write_config(tmp_path, TEST.format(name="long", sub=6, hosts="localhost",
                                             seconds=60))
    proc = start_run(cfg, tmp_path)
    try:
        folder = run_folder(tmp_path, "long")
        wait_rows(folder / "step0000-rr/all/all.csv", 1, timeout_s=60)
        tree = process_tree(slave_pids(folder)[0])
        time.sleep(1.0)  # well inside the second subinterval
        proc.send_signal(signal.SIGINT)
        t_int = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t_int
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
    assert all_gone(tree, 2.0)
    assert len(rows(folder / "step0000-rr/all/all.csv")) == 1
    (summary,) = [r for r in rows(folder / "summary.csv") if r["rollup_type"] == "all"]
    assert summary["valid"] == "false" and "interrupted" in summary["invalid_reason"]


def test_ctrl_c_while_a_host_hangs_exits_130_within_3s(tmp_path: Path) -> None:
    """SIGSTOP the slave, then Ctrl-C before its deadline: the run does not wait for the
    stopped host (its result, its Stopped, the measurement window) and exits 130 within 3 s,
    the slave's processes gone."""
    cfg = write_config(tmp_path, TEST.format(name="hung", sub=2, hosts="localhost",
                                             seconds=60))
    proc = start_run(cfg, tmp_path)
    with _slave_stopped(proc, tmp_path, "hung", 1) as (_, tree):
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        t_int = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t_int
    assert proc.returncode == 130, err
    assert took < 3.0, f"exited {took:.2f} s after Ctrl-C"
    assert all_gone(tree, 2.0), [p.pid for p in tree if p.is_running()]
