"""Reading processes forked from this one (``master.fiologs.forked``): the files claimed once
each, in order, across processes, and no further than a stop; a child's result, its exception
raised here (as a pool raises it, so that ``TooManyQuanta`` is still the user's error), its
death named, and children stopped and reaped; fio-pctiles reads through them where this
process runs no other thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from master.fiologs import forked, pipeline
from master.fiologs.align import TooManyQuanta
from master.fiologs.forked import ClaimQueue, ReaderFailed, fork_readers
from protocol.errors import ConfigError
from tests.master.test_fio_pctiles_jobs import csv_text, make_logs, run

pytestmark = pytest.mark.skipif(threading.active_count() > 1 or not hasattr(os, "fork"),
                                reason="forks: needs a process that runs no other thread")


def _claims(queue: ClaimQueue) -> list[int]:
    got = []
    while (i := queue.claim()) is not None:
        got.append(i)
        time.sleep(0.001)  # the processes take turns
    return got


def test_every_file_is_claimed_once_in_order_across_processes() -> None:
    queue = ClaimQueue(60)
    try:
        readers = fork_readers(2, lambda: _claims(queue))
        mine = _claims(queue)
        theirs = readers.results()
    finally:
        queue.close()
    every = [mine, *theirs]
    assert sorted(i for claims in every for i in claims) == list(range(60))
    assert all(claims == sorted(claims) for claims in every)


def test_no_file_at_or_past_a_stop_is_claimed() -> None:
    queue = ClaimQueue(10)
    assert queue.claim() == 0
    queue.stop_at(3)
    queue.stop_at(7)  # a later stop does not move it back
    assert [queue.claim(), queue.claim(), queue.claim()] == [1, 2, None]
    queue.close()


def test_results_come_in_the_order_the_children_were_started() -> None:
    readers = fork_readers(3, lambda: os.getpid())
    started = [pid for pid, _ in readers._children]
    assert readers.results() == started and os.getpid() not in started
    values = fork_readers(3, lambda: {"big": bytes(300_000)}).results()  # past a pipe's 64 KiB
    assert values == [{"big": bytes(300_000)}] * 3


def _too_many() -> None:
    raise TooManyQuanta(30_000, 100)


def test_a_childs_exception_is_raised_here_with_its_traceback() -> None:
    with pytest.raises(TooManyQuanta) as info:
        fork_readers(2, _too_many).results()
    assert info.value.args == (30_000, 100) and info.value.need == 30_000
    assert isinstance(info.value.__cause__, ReaderFailed)
    assert "Traceback" in str(info.value.__cause__) and "_too_many" in str(info.value.__cause__)


class _Odd(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")  # its args do not make it again


def _odd() -> None:
    raise _Odd(1, 2)


def test_an_exception_that_cannot_be_pickled_is_told_by_its_traceback() -> None:
    with pytest.raises(ReaderFailed, match=r"(?s)failed:.*_Odd: 1/2"):
        fork_readers(1, _odd).results()


def test_a_child_that_dies_is_named_with_its_signal() -> None:
    with pytest.raises(ReaderFailed, match=r"ended without its result \(killed by SIGKILL\)"):
        fork_readers(1, lambda: os.kill(os.getpid(), signal.SIGKILL)).results()


def test_a_child_killed_while_it_writes_its_result_is_named_with_its_signal() -> None:
    # a result past the pipe's 64 KiB: the child blocks writing it, and is killed there (or
    # before it began: the same answer)
    readers = fork_readers(1, lambda: bytes(4 << 20))
    time.sleep(0.3)
    os.kill(readers._children[0][0], signal.SIGKILL)
    with pytest.raises(ReaderFailed, match=r"ended without its result \(killed by SIGKILL\)"):
        readers.results()


def test_stop_kills_and_reaps_the_children() -> None:
    readers = fork_readers(2, lambda: time.sleep(60))
    pids = [pid for pid, _ in readers._children]
    t0 = time.monotonic()
    readers.stop()
    assert time.monotonic() - t0 < 5
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_fio_pctiles_reads_through_forked_children_and_a_childs_error_reaches_the_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = make_logs(tmp_path, 4, offsets_ms=[0, 500], rows=5)
    one = run(logs, jobs=1, time_quantum_s=1.0)
    started = []
    real = forked.fork_readers

    def spy(n: int, work: object) -> forked.Readers:
        started.append(n)
        return real(n, work)  # type: ignore[arg-type]

    monkeypatch.setattr(forked, "fork_readers", spy)
    assert csv_text(run(logs, jobs=3, time_quantum_s=1.0)) == csv_text(one)
    assert started == [2]
    # a child's TooManyQuanta is the same clear error as this process's
    monkeypatch.setattr(pipeline, "_read_outcome", lambda task, queue: _too_many())
    with pytest.raises(ConfigError, match="the logs span") as info:
        run(logs, jobs=2, time_quantum_s=1.0)
    assert info.value.key_path == "time_quantum"
