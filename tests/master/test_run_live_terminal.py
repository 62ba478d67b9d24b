"""The live view as a terminal shows it: ``ivypy run`` on localhost inside tmux (80 × 30),
read back with ``capture-pane`` during the run and at its end.

A host rollup that wants 2 instances of a 1-host test makes each step invalid; the run warns
so (a log line) while the step's live region is on the screen. Keys are typed during both
steps (Enter, x), as an operator does to see whether the run is alive. During the second step
the screen must hold that warning above exactly one frame (title, labelled header, total row,
a row per LUN); at the end, no frame at all and the table over both steps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.master.runhelp import ROOT, write_config

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (scripts/_env.sh installs it "
                                "as root)")

TEST = """\
test: liveterm
subinterval_seconds: 1
hosts: [localhost]
rollups:
  - {type: host, quantity: 2}
luns:
  - {hosts: localhost, file: "${output_root}/lun-a", size: 16MiB, create: true,
     allow_write: true}
  - {hosts: localhost, file: "${output_root}/lun-b", size: 16MiB, create: true,
     allow_write: true}
steps:
  - name: first
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 500,
         read_fraction: 100%}
    warmup_seconds: 1
    measure_seconds: 2
  - name: second
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 800,
         read_fraction: 100%}
    warmup_seconds: 1
    measure_seconds: 4
"""
WIDTH, HEIGHT = 80, 30
FRAME_TITLE = re.compile(r"^step \d+ \w+ · subinterval \d+ \w+ · by lun")
#: the run's warning that step ``first`` is invalid (matched loosely: its wording may grow)
WARNING = re.compile(r"^WARNING master\.run\.lifecycle: step first invalid: .*host")
#: the reason of a step under the end-of-run table
REASON = r"^step {} {}: .*host"
LABELS = ("IOPS", "MB/s", "service", "response", "p50 ms", "p99 ms", "host", "ivypy", "CPU %")


class Tmux:
    """A tmux server of its own (its own socket), one session running ``command``."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        # the server's environment is the run's: no COLUMNS or LINES to override the pane
        self.env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.env.update(PYTHONPATH=str(ROOT), LANG="C.UTF-8", TERM="xterm-256color")

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-u", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=True, timeout=10,
                              env=self.env).stdout

    def screen(self) -> list[str]:
        """The pane with its history, trailing blank lines dropped."""
        lines = self("capture-pane", "-p", "-t", "ivy", "-S", "-500").splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        return lines


@pytest.fixture()
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(f"ivypy-test-{os.getpid()}-{tmp_path.name}")
    try:
        yield t
    finally:
        subprocess.run(["tmux", "-L", t.socket, "kill-server"], capture_output=True,
                       timeout=10)


def _wait(tmux: Tmux, ok: Callable[[list[str]], bool], timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = tmux.screen()
        if ok(lines):
            return lines
        time.sleep(0.2)
    raise AssertionError("the screen never showed what was waited for:\n" + "\n".join(lines))


def _frame_of(step: int, name: str, k: str) -> Callable[[list[str]], bool]:
    """The screen shows the frame of ``step`` at a subinterval matching ``k``."""
    title = re.compile(rf"^step {step} {name} · subinterval {k} ")
    return lambda lines: any(title.match(x) for x in lines)


def _frame_at(lines: list[str]) -> int:
    titles = [i for i, line in enumerate(lines) if FRAME_TITLE.match(line)]
    assert len(titles) == 1, "expected exactly one live frame:\n" + "\n".join(lines)
    return titles[0]


def test_live_view_in_a_terminal(tmp_path: Path, tmux: Tmux) -> None:
    cfg = write_config(tmp_path, TEST)
    command = (f"{sys.executable} -m master run {cfg} --output-root {tmp_path / 'out'}; "
               "echo IVYPY-EXIT=$?; sleep 600")
    tmux("new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT), "-s", "ivy",
         "-c", str(tmp_path), command)

    # keys typed while a region is on: echoed, they would move the cursor under it
    _wait(tmux, _frame_of(0, "first", "[1-9]"), 120)
    tmux("send-keys", "-t", "ivy", "Enter")
    _wait(tmux, _frame_of(1, "second", "[1-9]"), 60)
    tmux("send-keys", "-t", "ivy", "Enter", "x", "Enter")
    # the second step's frame, redrawn since, below the first's warning
    during = _wait(tmux, _frame_of(1, "second", "[3-9]"), 60)
    at = _frame_at(during)
    assert [x for x in during[:at] if WARNING.match(x)], during
    assert not any(x.startswith("step 0 first ·") for x in during)  # its frame went
    frame = during[at:]
    assert frame[0].startswith("step 1 second · subinterval")  # the title, on one line
    header = "\n".join(frame[1:3])
    for label in LABELS:
        assert label in header, (label, frame)
    assert frame[2].split()[0] == "lun"
    assert set(frame[3]) == {"─"}  # the header's rule: no wrapped title line above it
    total = frame[4].split()
    assert total[0] == "total" and len(total) == 9, frame
    assert float(total[1].replace(",", "")) > 0 and float(total[5]) > 0  # IOPS; response p50
    luns = [x.split() for x in frame[5:7]]
    assert [x[0][-5:] for x in luns] == ["lun-a", "lun-b"], frame
    assert all(len(x) == 9 for x in luns), frame
    assert "subinterval " in frame[7] and " of " in frame[7] and "s left" in frame[7]
    assert all(len(x) <= WIDTH for x in during)

    end = _wait(tmux, lambda lines: any(x.startswith("IVYPY-EXIT=") for x in lines), 60)
    assert "IVYPY-EXIT=1" in end  # both steps are invalid
    assert not [x for x in end if FRAME_TITLE.match(x)], "a frame was left:\n" + "\n".join(end)
    top = end.index("all steps")
    table = end[top:]
    assert "response" in table[1] and "valid" in table[2] and set(table[3]) == {"─"}
    step0 = next(x for x in table if x.startswith("step 0 first"))
    step1 = next(x for x in table if x.startswith("step 1 second"))
    for row in (step0, step1):
        cells = row.split()[3:]
        assert len(cells) == 7 and cells[-1] == "NO", row
    assert sum(x.strip().endswith("yes") and "lun-" in x for x in table) == 4
    assert [x for x in table if re.match(REASON.format(0, "first"), x)], table
    assert [x for x in table if re.match(REASON.format(1, "second"), x)], table
    assert any(x.startswith("ivypy: results in ") for x in table)
    # the run's lines come once each: no frame or message printed twice
    assert len([x for x in end if WARNING.match(x)]) == 1
    assert sum(x.startswith("step 0 first: ") and "IOPS" in x for x in end) == 1
