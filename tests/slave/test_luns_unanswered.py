"""A device that does not answer its probe holds up neither discovery nor the other devices
(slave/signatures.py ``probe_paths``, through slave/luns.py): it is reported as not probed
within ``PROBE_TIMEOUT_S`` ("did not answer a read within N s", a reason to refuse a write),
its stuck probe is left behind in a daemon thread and not started again while it waits.
Probes that block are stood in for by a patched ``probe_path`` (and a fake blkid); the real
thing is a loop device over scripts/kneedev_impl's FUSE file at 4 s a request (root).

The tests that time the bound (discovery back within it, a second look at once) stay alone;
those judged on what was answered (a target named twice, the exit) run beside the others."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from protocol.errors import PreflightError
from slave import signatures
from slave.luns import describe_block_device, discover_block_devices
from slave.preflight import check_lun, require_ok
from slave.signatures import Probe, ProbeTarget, probe_paths

if TYPE_CHECKING:
    from tests.slave.conftest import LoopFactory

T = TypeVar("T")
BOUND_S = 0.3


def _target(path: str) -> ProbeTarget:
    return ProbeTarget(path, 1 << 20, 512, exclusive=False, key=f"block {path}")


def _probe_threads(path: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"ivypy probe {path}"]


def _until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        time.sleep(0.005)


@dataclass
class Blocking:
    """``probe_path`` standing in for devices: the ``stuck`` ones wait for ``release``
    (a device that does not answer), the others answer ``xfs`` at once; ``calls`` per path."""

    stuck: set[str]
    release: threading.Event = field(default_factory=threading.Event)
    calls: dict[str, int] = field(default_factory=dict)

    def probe_path(self, path: str, size_bytes: int, logical_block_bytes: int, *,
                   exclusive: bool) -> tuple[str, str, bool]:
        self.calls[path] = self.calls.get(path, 0) + 1
        if path in self.stuck:
            self.release.wait()
        return "xfs", "", False


@pytest.fixture
def blocking(monkeypatch: pytest.MonkeyPatch) -> Iterator[Blocking]:
    fake = Blocking({"/dev/stuckA", "/dev/stuckB"})
    monkeypatch.setattr(signatures, "probe_path", fake.probe_path)
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT_S", BOUND_S)
    yield fake
    fake.release.set()  # no probe of this test outlives it
    _until(lambda: not any(_probe_threads(p) for p in fake.stuck), 2, "stuck probes to end")


def test_a_device_that_does_not_answer_is_left_behind_and_not_probed_again(
        blocking: Blocking, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signatures, "PROBES_AT_ONCE", 2)  # stuck ones give their places up
    paths = ["/dev/stuckA", "/dev/fine1", "/dev/stuckB", "/dev/fine2", "/dev/fine3"]
    t0 = time.monotonic()
    found = probe_paths([_target(p) for p in paths], use_blkid=False)
    took_s = time.monotonic() - t0
    unanswered = Probe(error=f"did not answer a read within {BOUND_S:g} s", unanswered=True)
    assert found == [unanswered, Probe("xfs"), unanswered, Probe("xfs"), Probe("xfs")]
    assert BOUND_S <= took_s < BOUND_S + 1.0, took_s
    assert [t.daemon for t in _probe_threads("/dev/stuckA")] == [True]

    # asked again (the create of a write re-checks the LUN): answered at once, not probed again
    t0 = time.monotonic()
    again = probe_paths([_target("/dev/stuckA"), _target("/dev/fine1")], use_blkid=False)
    assert time.monotonic() - t0 < BOUND_S
    assert again[0].unanswered and again[0].error.startswith(
        f"did not answer a read within {BOUND_S:g} s (ivypy's probe of it, started ")
    assert again[0].error.endswith(" s ago, still waits)")
    assert again[1] == Probe("xfs")
    assert blocking.calls == {p: 1 for p in paths} | {"/dev/fine1": 2}
    assert len(_probe_threads("/dev/stuckA")) == 1

    # once the device answers, its probe is over and the next one reads it afresh
    blocking.release.set()
    _until(lambda: not _probe_threads("/dev/stuckA"), 2, "the stuck probe to end")
    assert probe_paths([_target("/dev/stuckA")], use_blkid=False) == [Probe("xfs")]
    assert blocking.calls["/dev/stuckA"] == 2


@pytest.mark.beside
def test_a_target_named_twice_is_probed_once(
        blocking: Blocking, monkeypatch: pytest.MonkeyPatch) -> None:
    # a bound of seconds, not BOUND_S: a busy machine must not make the late answer too late
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT_S", 10.0)
    threading.Timer(0.05, blocking.release.set).start()  # answers, late but within the bound
    assert probe_paths([_target("/dev/stuckA"), _target("/dev/stuckA")], use_blkid=False) == [
        Probe("xfs"), Probe("xfs")]
    assert blocking.calls == {"/dev/stuckA": 1}


@pytest.mark.beside
def test_a_probe_stuck_for_good_does_not_hold_up_the_exit() -> None:
    code = textwrap.dedent("""
        import threading
        from slave import signatures
        signatures.PROBE_TIMEOUT_S = 0.2
        signatures.probe_path = lambda *a, **k: threading.Event().wait()
        print(signatures.probe_paths(
            [signatures.ProbeTarget("/dev/stuck", 1, 512, False, "block 1:1")],
            use_blkid=False)[0].unanswered, flush=True)
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr


def test_a_blkid_stuck_on_one_device_leaves_the_others_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one blkid per device: the one that hangs (on slow.img) speaks for that device only; one
    # blkid over all of them left every blank device "could not be checked"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "blkid").write_text('#!/bin/sh\ncase "$*" in *slow.img*) exec sleep 30;; esac\n'
                                "exit 2\n")
    (fake / "blkid").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setattr(signatures, "PROBE_TIMEOUT_S", BOUND_S)
    paths = []
    for name in ("slow.img", "fine.img"):
        paths.append(str(tmp_path / name))
        with open(paths[-1], "wb") as fh:
            fh.truncate(1 << 20)
    t0 = time.monotonic()
    slow, fine = probe_paths(
        [ProbeTarget(p, 1 << 20, 512, exclusive=False, key=f"file {p}") for p in paths],
        use_blkid=True)
    assert time.monotonic() - t0 < BOUND_S + 1.0
    assert fine == Probe()
    assert slow == Probe(error=f"blkid gave no answer within {BOUND_S:g} s, and our own probe, "
                               "which knows fewer signatures, found none")
    # the blkid killed at the deadline is waited for (and the probe over) once it died
    _until(lambda: not signatures.probing_pids() and not _probe_threads(paths[0]), 2,
           "the killed blkid to be reaped")


# ------------------------------------------------------------------------------------------------
# A real device that does not answer (root)
# ------------------------------------------------------------------------------------------------

KNEE_REQUEST_US = 4_000_000  # 4 s a request: the first read of the probe is far past the bound
KNEE_BOUND_S = 0.5


def _within(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()``, failing the test (not hanging it) when it does not return in ``timeout_s``."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not out:
        pytest.fail(f"{what} did not come back within {timeout_s:g} s")
    return out[0]


def _abort_knee(dev: str) -> None:
    """Fail every request waiting on the knee device's FUSE file at once (our probe's, blkid's),
    so that its teardown does not wait for them: a forced unmount makes FUSE abort the
    connection before the kernel finds the mount busy (which it is: knee_device unmounts it)."""
    backing = Path(f"/sys/block/{os.path.basename(dev)}/loop/backing_file").read_text().strip()
    subprocess.run(["umount", "-f", os.path.dirname(backing)], capture_output=True, timeout=10,
                   check=False)


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse on this machine")
def test_discovery_comes_back_within_the_bound_and_a_write_to_the_device_is_refused(
        loop_device: LoopFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from scripts.kneedev_impl import knee_device

    monkeypatch.setattr(signatures, "PROBE_TIMEOUT_S", KNEE_BOUND_S)
    healthy = loop_device(1 << 20)  # blank, next to it: checked, whatever the slow one does
    with knee_device(64 << 20, KNEE_REQUEST_US) as dev:
        try:
            t0 = time.monotonic()
            found = _within(discover_block_devices, KNEE_BOUND_S + 3, "discovery")
            took_s = time.monotonic() - t0
            luns = {lun.path: lun for lun in found}
            slow = luns[dev]
            assert (slow.unanswered, slow.probe_error, slow.signature) == (
                True, f"did not answer a read within {KNEE_BOUND_S:g} s", "")
            assert took_s < KNEE_BOUND_S + 1.5, took_s
            assert (luns[healthy.path].probe_error, luns[healthy.path].unanswered) == ("", False)

            # unknown contents are not "unused": a write is refused unless the test allows it
            refused = check_lun(slow, writes=True, allow_write=False, host="h1")
            assert not refused.ok
            assert refused.reasons == (
                f"contents could not be checked: did not answer a read within {KNEE_BOUND_S:g} s",)
            assert check_lun(slow, writes=True, allow_write=True, host="h1").overridden
            assert check_lun(slow, writes=False, allow_write=False, host="h1").ok

            # the create of a write looks again: at once, without a second probe of the device
            t0 = time.monotonic()
            now = _within(lambda: describe_block_device(dev), KNEE_BOUND_S + 3, "describe")
            assert time.monotonic() - t0 < KNEE_BOUND_S
            assert now.unanswered and "still waits" in now.probe_error
            assert len(_probe_threads(dev)) == 1
            with pytest.raises(PreflightError, match=(
                    f"host h1: refusing to write to LUN {dev}: contents could not be checked: "
                    "did not answer a read within")):
                require_ok(now, writes=True, allow_write=False, host="h1")
        finally:
            _abort_knee(dev)
            _until(lambda: not _probe_threads(dev), 5, "the probe to end once the device fails")
