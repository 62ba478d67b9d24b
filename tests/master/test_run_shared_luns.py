"""Two runs on one LUN at once, on in-memory hosts (``master.hosts.memory``: the slave sessions
are real, and so are their LUN locks, on a real file): the second is refused before any I/O,
naming the host, the LUN and the fix, unless both tests say ``shared: true``; then both run,
and both runs' luns.csv say the LUN was shared. (Two runs used to read one LUN at once, each
reporting valid numbers for half of it.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from master.live.view import LiveView
from master.run.lifecycle import Run
from protocol.messages import Message, SubintervalResult
from tests.master.memhosts import MemoryHosts, memory_config
from tests.master.runhelp import rows

TEST = """\
test: {name}
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "{lun}", size: 1MiB{shared}}}
steps:
  - name: reads
    workloads:
      - {{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 100,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {seconds}
"""


def _two_runs(tmp_path: Path, first_shared: bool, second_shared: bool) -> tuple[Any, Any]:
    """The first run reads the LUN (a file of 1 MiB) for 2 s; the second starts once the
    first has recorded a subinterval (its workload, and its lock, held)."""
    lun = tmp_path / "lun"
    lun.write_bytes(bytes(range(256)) * 4096)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    cfgs = [memory_config(tmp_path / name, TEST.format(
        name=name, lun=lun, seconds=seconds, shared=", shared: true" if shared else ""))
        for name, seconds, shared in (("one", 2, first_shared), ("two", 0.4, second_shared))]
    box: dict[str, Any] = {}

    async def both() -> tuple[Any, Any]:
        started = asyncio.Event()

        def watch(host: str, m: Message) -> bool:
            if isinstance(m, SubintervalResult):
                started.set()
            return True

        first = asyncio.ensure_future(Run(cfgs[0], view=LiveView(rich_mode=False),
                                          connect=MemoryHosts(watch).connect).execute())
        await asyncio.wait_for(started.wait(), 20)
        second = await Run(cfgs[1], view=LiveView(rich_mode=False),
                           connect=MemoryHosts().connect).execute()
        box["first_running"] = not first.done()
        return await first, second

    out = asyncio.run(asyncio.wait_for(both(), 60))
    assert box["first_running"], "the second run must have started while the first ran"
    return out


@pytest.mark.parametrize(("first_shared", "second_shared", "why"), [
    (False, False, "it holds it for itself"),
    (True, False, "it shares it, and this test does not say shared: true"),
    (False, True, "it holds it for itself"),
])
def test_a_lun_another_run_is_using_is_refused_before_any_io(
        tmp_path: Path, first_shared: bool, second_shared: bool, why: str) -> None:
    first, second = _two_runs(tmp_path, first_shared, second_shared)
    assert first.exit_code == 0, first.message
    assert second.exit_code == 2, second.message
    assert second.message == (
        f"host localhost: LUN {tmp_path / 'lun'} is in use by another ivypy run ({why}): run "
        "them one after the other, or say shared: true on the LUN's luns entry in both tests "
        "to let them use it together")
    assert not list(Path(second.folder).glob("step*")), "no I/O may have started"


def test_two_runs_that_both_share_the_lun_run_together_and_say_so(tmp_path: Path) -> None:
    first, second = _two_runs(tmp_path, True, True)
    assert first.exit_code == second.exit_code == 0, (first.message, second.message)
    for result in (first, second):
        (lun,) = [r for r in rows(Path(result.folder) / "luns.csv") if r["used_by"]]
        assert lun["lun"] == str(tmp_path / "lun") and lun["shared"] == "true", lun
        assert rows(Path(result.folder) / "step0000-reads" / "all" / "all.csv")
