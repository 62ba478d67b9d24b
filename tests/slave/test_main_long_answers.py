"""The slave process during a long answer (a discovery that probes a slow device, a file LUN's
layout): its watchdog does not take the time spent answering for the master's silence, and a
signal or stdin's EOF still stops it within a second, leaving no file at the layout's path.

The slave runs with small, slowed-down hooks (``SLOWED``): each piece of a layout waits
``IVYPY_TEST_PIECE_S`` and the block-device scan ``IVYPY_TEST_SCAN_S``, so that a few MiB
take seconds.

The long discoveries run beside the other tests (what they judge is that the slave stays: a
busy machine only makes the discovery longer, and the master's pings come twenty times within
the watchdog's bound); the stops within a second stay alone."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from protocol.messages import DiscoverLuns, Hello, HelloReply, LunList, Ping, Pong
from protocol.version import PROTOCOL_VERSION
from tests.slave.test_main import Slave

SLOWED = """\
import os, sys, time
import slave.luns as luns
import slave.session as session
from slave import main

luns.LAYOUT_CHUNK_BYTES = 64 << 10
piece_s = float(os.environ.get("IVYPY_TEST_PIECE_S", "0"))
scan_s = float(os.environ.get("IVYPY_TEST_SCAN_S", "0"))
told = session.SlaveSession._layout_progress

def slow_progress(self, path):
    tell = told(self, path)
    def progress(done, total):
        time.sleep(piece_s)
        tell(done, total)
    return progress

scan = luns.discover_block_devices

def slow_scan(*args, **kwargs):
    time.sleep(scan_s)  # a device that takes this long to answer its probe
    return scan(*args, **kwargs)

session.SlaveSession._layout_progress = slow_progress
luns.discover_block_devices = slow_scan
sys.exit(main.main())
"""

SIZE = 4 << 20  # 64 pieces of 64 KiB


def _slave(tmp: Path, watchdog_s: float, **env: str) -> Slave:
    s = Slave(tmp, argv=(sys.executable, "-c", SLOWED, "--watchdog-min-seconds",
                         str(watchdog_s)), extra_env=env)
    s.send(Hello(PROTOCOL_VERSION, "test", "h1", time.monotonic_ns()))
    assert isinstance(s.recv(), HelloReply)
    return s


def _stderr(s: Slave) -> str:
    s.proc.kill()
    s.proc.wait(10)
    return s.proc.stderr.read().decode() if s.proc.stderr else ""


@pytest.mark.beside
@pytest.mark.parametrize(("slow", "env"), [
    ("device", {"IVYPY_TEST_SCAN_S": "2.5"}),
    ("layout", {"IVYPY_TEST_PIECE_S": "0.04"}),  # 64 pieces: 2.6 s
])
def test_a_long_discovery_is_not_the_masters_silence(
        tmp_path: Path, slow: str, env: dict[str, str]) -> None:
    """Watchdog 2 s, a discovery of 2.5 s; the master pings every 0.1 s meanwhile (as
    ``master.hosts.session`` does every 2 s): only a master held off the CPU for 1.9 s
    would be silent that long. The slave answers the discovery, then the pings that waited,
    and stays for the next request. Before, it exited (watchdog) right after answering the
    discovery."""
    s = _slave(tmp_path, 2.0, **env)
    lun = tmp_path / "lun"
    files = [{"path": str(lun), "size_bytes": SIZE, "create": True, "layout": "random"}]
    done = threading.Event()

    def keepalive() -> None:
        seq = 100
        while not done.wait(0.1):
            seq += 1
            s.send(Ping(seq, time.monotonic_ns()))

    pinger = threading.Thread(target=keepalive)
    try:
        t0 = time.monotonic()
        s.send(DiscoverLuns(1, files if slow == "layout" else []))
        pinger.start()
        while not isinstance(s.recv(10), LunList):
            pass
        assert time.monotonic() - t0 > 2.0, "the discovery was not slow: nothing tested"
        done.set()
        pinger.join()
        s.send(Ping(999, time.monotonic_ns()))
        pongs: list[int] = []
        while not pongs or pongs[-1] != 999:
            msg = s.recv(5)
            if isinstance(msg, Pong):
                pongs.append(msg.seq)
        assert pongs[0] == 101 and len(pongs) >= 3, pongs  # the waiting pings, answered
        assert s.proc.poll() is None
    except EOFError as exc:
        pytest.fail(f"the slave exited: {str(exc)[-400:]}")
    finally:
        done.set()
        if pinger.is_alive():
            pinger.join()
        err = _stderr(s)
    assert "watchdog" not in err, err[-400:]


@pytest.mark.parametrize("how", ["sigterm", "eof"])
def test_a_signal_or_eof_stops_a_layout_within_a_second(tmp_path: Path, how: str) -> None:
    """A layout of 6.4 s is abandoned within a second of SIGTERM or of stdin's EOF (the
    master gone); no file is left at its path, nor its hidden part, so the next run lays
    it out again (test_session_stopping.py)."""
    s = _slave(tmp_path, 30.0, IVYPY_TEST_PIECE_S="0.1")
    lun = tmp_path / "lun"
    try:
        s.send(DiscoverLuns(1, [{"path": str(lun), "size_bytes": SIZE, "create": True,
                                 "layout": "zero"}]))
        time.sleep(0.5)
        assert [p.name for p in tmp_path.iterdir() if "ivypy-layout" in p.name], \
            "no layout under way"
        t0 = time.monotonic()
        if how == "sigterm":
            s.proc.send_signal(signal.SIGTERM)
        else:
            assert s.proc.stdin is not None
            s.proc.stdin.close()
        status = s.proc.wait(10)
        took = time.monotonic() - t0
    finally:
        err = _stderr(s)
    assert took < 1.0, f"{how} during a layout: the slave exited {took:.2f} s later"
    assert status == (128 + signal.SIGTERM if how == "sigterm" else 0), err[-400:]
    assert "DiscoverLuns left unanswered: layout of file LUN" in err, err[-400:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a file left at the path"
