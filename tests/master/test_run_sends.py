"""What the master sends to a slave that stopped reading (SIGSTOP, its main loop stuck on a hung
device), on in-memory hosts (``tests/master/memhosts.py``): once the pipe to it is full the
master's write waits, and is bounded by the deadline of what it is part of. A step's Go, a DFC
move (``EditWorkloads``), a Continue: the host is failed naming it ("did not read what the
master sent for N s") and the run ends as for any lost host (exit 3); Ctrl-C ends it within
3 s meanwhile. At the end, closing a failed host does not wait on its Bye."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import time
from pathlib import Path
from typing import Any

import pytest

from master.config import HostConfig
from master.run.outcome import EXIT_HOST, EXIT_INTERRUPTED
from protocol.messages import Ack, Message, SubintervalResult
from tests.master.memhosts import MemoryHost, execute, memory_config, memory_run


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control socket's registry of active runs under tmp_path, not ~/.cache."""
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))


#: The longest a write to a slave that stopped reading waits here (then it returns, as if the
#: slave had been continued): a master that would wait forever fails its test, not hangs it.
WRITE_LIMIT_S = 10.0


class StoppedReader(MemoryHost):
    """A ``MemoryHost`` whose slave stops reading when ``stop_reading()`` is called: it sends
    nothing more and the pipe to it is full, so each write from then on waits until the host
    is closed (as a write to a SIGSTOPped slave waits once its pipe or SSH window is full), or
    ``WRITE_LIMIT_S``."""

    def __init__(self, name: str, watch: Any) -> None:
        super().__init__(name, watch)
        self.stalled = False
        self.waited: list[int] = []  # the size of each write that waited
        self._closed = asyncio.Event()

    def stop_reading(self) -> None:
        self.stalled = self.hung = True

    async def write(self, data: bytes) -> None:
        if self.stalled:
            self.waited.append(len(data))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), WRITE_LIMIT_S)
            return
        await super().write(data)

    async def close(self, grace_s: float = 2.0) -> int | None:
        self._closed.set()
        return await super().close(grace_s)


class StoppedReaders:
    """The connector: a ``StoppedReader`` per host; ``when(host, message)`` true makes that
    host stop reading right after it sent the message (which the master gets)."""

    def __init__(self, when: Any) -> None:
        self.when = when
        self.hosts: dict[str, StoppedReader] = {}

    async def connect(self, host: HostConfig) -> StoppedReader:
        def watch(m: Message) -> bool:
            if self.when(host.name, m):
                asyncio.get_running_loop().call_soon(self.hosts[host.name].stop_reading)
            return True

        self.hosts[host.name] = StoppedReader(host.name, watch)
        return self.hosts[host.name]


STEP = """\
test: mem
subinterval_seconds: {sub}
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun", size: 1MiB, create: true}}
rollups: [host]
steps:
  - name: a
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 200,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {measure_s}
{extra}"""

DFC = """\
    dfc: {focus_rollup: host, focus_metric: IOPS, target: 1000, low_iops: 100,
          high_iops: 3000}
"""


def _summary_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "summary.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _first(kind: type[Message], k: int | None = None) -> Any:
    """True for the first message of ``kind`` (of subinterval ``k``) only."""
    seen: list[bool] = []

    def when(host: str, m: Message) -> bool:
        if seen or not isinstance(m, kind) or (
                k is not None and getattr(m, "subinterval", None) != k):
            return False
        seen.append(True)
        return True
    return when


@pytest.mark.parametrize(("what", "kind", "k", "extra", "message"), [
    # the slave answered the create, then stopped reading: the Go waits
    ("Go", Ack, None, "", "(Go)"),
    # it sent subinterval 0's result, then stopped reading: the DFC's move waits
    ("DFC move", SubintervalResult, 0, DFC, "(EditWorkloads)"),
])
def test_a_send_the_slave_does_not_read_fails_the_host_by_its_deadline(
        tmp_path: Path, what: str, kind: type[Message], k: int | None, extra: str,
        message: str) -> None:
    """The write is given until the deadline of the result it precedes (the Go: subinterval
    0's; the DFC's move after subinterval 0: subinterval 1's, 0.3 s later here); then the host
    is failed, naming it, and the run ends with exit 3 and the step's rows invalid."""
    cfg = memory_config(tmp_path, STEP.format(sub=0.2, measure_s=2, extra=extra))
    hosts = StoppedReaders(_first(kind, k))
    t0 = time.monotonic()
    result = execute(memory_run(cfg, hosts))
    took = time.monotonic() - t0
    assert hosts.hosts["localhost"].waited, f"no {what} waited on the slave"
    assert result.exit_code == EXIT_HOST, result.message
    assert "host localhost: did not read what the master sent for" in result.message
    assert message in result.message, result.message
    assert took < 8, took
    rows = [r for r in _summary_rows(result.folder) if r["rollup_type"] == "all"]
    assert [r["valid"] for r in rows] == ["false"]
    assert "did not read what the master sent" in rows[0]["invalid_reason"]


def test_ctrl_c_while_a_go_waits_on_a_slave_that_does_not_read_exits_130_within_3s(
        tmp_path: Path) -> None:
    """With 30 s subintervals the Go could wait half a minute; Ctrl-C 0.2 s into that wait
    ends the run with 130 within 3 s, the host named as not having read the Go."""
    cfg = memory_config(tmp_path, STEP.format(sub=30, measure_s=30, extra=""))
    box: dict[str, Any] = {}

    def when(host: str, m: Message) -> bool:
        if isinstance(m, Ack) and "at" not in box:
            box["at"] = time.monotonic() + 0.2
            asyncio.get_running_loop().call_later(0.2, box["run"]._interrupt)
            return True
        return False

    hosts = StoppedReaders(when)
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run)
    took = time.monotonic() - box["at"]
    assert hosts.hosts["localhost"].waited
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    assert took < 3.0, f"the run ended {took:.2f} s after the interrupt"
    assert "host localhost: did not read the Go of step 0 within 1 s of the interrupt" in (
        result.message)
