"""What went wrong at the end of a step is that step's: I/Os still in flight past a worker's
drain limit, a worker that does not stop, a worker that died. Each is an ``Error`` naming the
host, the worker, the workload and its LUN, before the step's ``Stopped`` (or the ``Bye``),
never a silent ``Stopped`` whose error surfaces at the next create or go, nor an exception
out of the session (``slave.main``'s "slave failed": a dead slave and no word).

The first tests drive a session over real worker processes (fake engines: a latency of 3 s
holds an I/O in flight without a device) on the real clock; the rest a fake backend. All run
beside the other tests: they are judged on the errors said, and where the real clock decides
which error comes (an I/O submitted by the Stop, a worker killed before its first hand-over,
a worker that stops within the bound), the step's subintervals and the bounds are seconds
longer than the work takes, so that a busy machine cannot turn one error into another."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.errors import IvyError
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    Error,
    Go,
    Hello,
    Message,
    Stop,
    Stopped,
    SubintervalResult,
)
from protocol.state import Conversation, Role
from protocol.version import PROTOCOL_VERSION
from slave import worker as worker_mod
from slave.luns import LunInfo
from slave.session import SlaveSession
from slave.worker import StopError, WorkerError
from slave.worker_backend import WorkerBackend
from tests.slave.test_session import SUB, FakeBackend, Harness, _create, _go

pytestmark = pytest.mark.beside

FAST = "fake:const:100000"
SLOW = "fake:const:3000000000"  # each I/O 3 s: one outlives the 1 s drain
LUNS = {p: LunInfo(path=p, kind="block", name=p[5:], size_bytes=1 << 30,
                   logical_block_bytes=512) for p in ("/dev/null", "/dev/zero")}
SUB_NS = 300_000_000


class Live:
    """A session over a real ``WorkerBackend`` on the real clock, speaking to a master
    ``Conversation``."""

    def __init__(self, backend: WorkerBackend) -> None:
        self.backend = backend
        self.out = bytearray()
        self.session = SlaveSession(backend, self.out.extend, time.monotonic_ns,
                                    describe=lambda path, *_a, **_k: LUNS[path])
        self.master = Conversation(Role.MASTER, host="h1")
        self.send(Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0))
        self.session.luns.update(LUNS)

    def send(self, msg: Message) -> list[Message]:
        self.session.on_bytes(self.master.send(msg))
        return self._take()

    def _take(self) -> list[Message]:
        msgs = self.master.receive_data(bytes(self.out))
        self.out.clear()
        return msgs

    def create(self, seq: int, wid: str, lun: str, **params: Any) -> None:
        (ack,) = self.send(CreateWorkload(seq, wid, lun, {"read_fraction": 1.0, **params}))
        assert isinstance(ack, Ack), ack

    def go(self, step: int, subinterval_ns: int = SUB_NS) -> int:
        start = time.monotonic_ns() + 50_000_000
        plan = [{"type": "all", "groups": [sorted(self.session.params)], "histograms": False}]
        assert self.send(Go(step, start, subinterval_ns, plan)) == []
        return start

    def until_stopped(self, timeout_s: float = 5.0) -> list[Message]:
        """What the slave says (results left out) until its ``Stopped``."""
        said: list[Message] = []
        end = time.monotonic() + timeout_s
        while not any(isinstance(m, Stopped) for m in said):
            assert time.monotonic() < end, f"no Stopped within {timeout_s} s: {said}"
            self.session.on_tick()
            said += [m for m in self._take() if not isinstance(m, SubintervalResult)]
            time.sleep(0.005)
        return said


@pytest.fixture
def two_workers() -> Iterator[WorkerBackend]:
    backend = WorkerBackend(2)
    try:
        yield backend
    finally:
        backend.close()


def test_io_in_flight_past_the_drain_is_an_error_of_the_step_it_ended(
        two_workers: WorkerBackend) -> None:
    live = Live(two_workers)
    two_workers.forced = SLOW
    live.create(1, "h1:/dev/null:slow", "/dev/null", iodepth=1)
    two_workers.forced = FAST
    live.create(2, "h1:/dev/zero:fast", "/dev/zero", iodepth=1)
    slow = two_workers.pool.workloads["h1:/dev/null:slow"].worker
    assert two_workers.pool.workloads["h1:/dev/zero:fast"].worker != slow
    # a subinterval of 10 s: no boundary (where the master would be late) comes before the
    # Stop, which comes once the slow I/O is submitted (at the start: a worker held off the
    # CPU half a second then would be late), and its drain of 1 s ends 1.5 s before that
    # I/O's 3 s do
    start = live.go(0, 10_000_000_000)
    time.sleep((start - time.monotonic_ns()) / 1e9 + 0.5)  # its one I/O submitted
    err, stopped = live.send(Stop(-1))
    assert isinstance(err, Error) and err.kind == "io" and not err.fatal, err
    assert err.message.startswith("host h1: at the end of step 0: "), err.message
    assert f"worker {slow} (workloads h1:/dev/null:slow; LUNs /dev/null)" in err.message
    assert "1 I/Os still in flight 1 s after the loop stopped submitting" in err.message
    assert "in flight, by workload: h1:/dev/null:slow 1 (LUN /dev/null)" in err.message
    assert "fast" not in err.message  # the other worker drained
    assert (err.workload_id, err.lun) == ("h1:/dev/null:slow", "/dev/null")
    assert stopped == Stopped(0, -1)
    # nothing of it is left for the next request to take as its own
    assert isinstance(live.send(CreateWorkload(3, "h1:/dev/zero:next", "/dev/zero",
                                               {"iodepth": 1}))[0], Ack)


def test_a_worker_that_dies_mid_step_names_its_workload_and_lun_once(
        two_workers: WorkerBackend) -> None:
    live = Live(two_workers)
    two_workers.forced = FAST
    live.create(1, "h1:/dev/null:a", "/dev/null", iodepth=1, iops=100.0)
    live.create(2, "h1:/dev/zero:b", "/dev/zero", iodepth=1, iops=100.0)
    dead = two_workers.pool.workloads["h1:/dev/null:a"].worker
    # subintervals of 1 s: the worker dies long before it could hand subinterval 0 over (it
    # would then die "after subinterval 0"), however busy the machine
    live.go(0, 1_000_000_000)
    live.send(Continue(5))
    os.kill(two_workers.pool.pids[dead], signal.SIGKILL)
    err, stopped = live.until_stopped()  # one Error: the halt does not say it again
    assert isinstance(err, Error) and err.kind == "io", err
    assert err.message.startswith("host h1: subinterval 0: "), err.message
    assert f"worker {dead} (workloads h1:/dev/null:a; LUNs /dev/null): worker process died " \
           "(exit code -9)" in err.message
    assert (err.workload_id, err.lun) == ("h1:/dev/null:a", "/dev/null")
    assert isinstance(stopped, Stopped)


def test_a_worker_that_does_not_stop_is_an_error_of_the_step_not_a_dead_slave(
        monkeypatch: pytest.MonkeyPatch) -> None:
    usual_s = worker_mod.STOP_TIMEOUT_S
    monkeypatch.setattr(worker_mod, "STOP_TIMEOUT_S", 0.3)  # the stopped worker's bound
    backend = WorkerBackend(1, engine=FAST)
    pid = backend.pool.pids[0]
    try:
        live = Live(backend)
        live.create(1, "h1:/dev/null:a", "/dev/null", iodepth=1, iops=100.0)
        live.go(0)
        os.kill(pid, signal.SIGSTOP)  # as one blocked in io_submit on a full queue
        err, stopped = live.send(Stop(-1))
        assert isinstance(err, Error) and err.kind == "io", err
        assert err.message == (
            "host h1: at the end of step 0: worker 0 (workloads h1:/dev/null:a; LUNs "
            "/dev/null): did not stop within 0.3 s of the end of the step (blocked in the "
            "kernel, e.g. submitting to a LUN whose queue is full, or stopped): its I/O may "
            "still be running")
        assert (err.workload_id, err.lun) == ("h1:/dev/null:a", "/dev/null")
        assert stopped == Stopped(0, -1)
        # no step starts on a worker still running the last one's I/O
        plan = [{"type": "all", "groups": [["h1:/dev/null:a"]], "histograms": False}]
        err, stopped = live.send(Go(1, time.monotonic_ns(), SUB_NS, plan))
        assert isinstance(err, Error) and "could not start step 1: worker 0 " in err.message
        assert "has still not stopped since the end of the last step" in err.message
        assert stopped == Stopped(1, -1)
        os.kill(pid, signal.SIGCONT)
        # the running worker's last stop has the usual bound: 0.3 s is not one a busy machine
        # always keeps
        monkeypatch.setattr(worker_mod, "STOP_TIMEOUT_S", usual_s)
        end = time.monotonic() + 3
        while True:  # once it has stopped, the next step starts
            said = live.send(Go(2, time.monotonic_ns() + 50_000_000, SUB_NS, plan))
            if not said:
                break
            assert time.monotonic() < end, said
            time.sleep(0.05)
        assert live.send(Stop(-1)) == [Stopped(2, -1)]
    finally:
        os.kill(pid, signal.SIGCONT)
        backend.close()


# ---------------------------------------------------------------------- a fake backend
class HaltFails(FakeBackend):
    """``halt`` raises ``problem`` (once)."""

    def __init__(self, problem: IvyError) -> None:
        super().__init__()
        self.problem: IvyError | None = problem

    def halt(self) -> None:
        super().halt()
        problem, self.problem = self.problem, None
        if problem is not None:
            raise problem


TWO = StopError([
    WorkerError("1 I/Os still in flight", worker=0, workloads=("h1:/dev/fake0:a",),
                luns=("/dev/fake0",)),
    WorkerError("did not stop within 2 s", worker=1, workloads=("h1:/dev/busy0:b",),
                luns=("/dev/busy0",)),
])


def _harness(problem: IvyError) -> Harness:
    h = Harness()
    h.backend = HaltFails(problem)
    h.session.backend = h.backend
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _create(h, 2, "h1:/dev/busy0:b", lun="/dev/busy0")
    return h


def _said_of(errors: list[Message]) -> list[tuple[str, str, str]]:
    return [(e.message, e.workload_id, e.lun) for e in errors if isinstance(e, Error)]


WANT = [
    ("host h1: at the end of step 0: worker 0 (workloads h1:/dev/fake0:a; LUNs /dev/fake0): "
     "1 I/Os still in flight", "h1:/dev/fake0:a", "/dev/fake0"),
    ("host h1: at the end of step 0: worker 1 (workloads h1:/dev/busy0:b; LUNs /dev/busy0): "
     "did not stop within 2 s", "h1:/dev/busy0:b", "/dev/busy0"),
]


def test_each_problem_stopping_the_io_is_an_error_before_stopped() -> None:
    h = _harness(TWO)
    _go(h, 0, 0, SUB)
    *errors, stopped = h.send(Stop(-1))
    assert _said_of(errors) == WANT
    assert all(isinstance(e, Error) and e.kind == "io" for e in errors)
    assert stopped == Stopped(0, -1)


def test_a_step_ended_by_an_error_tells_its_own_then_the_halts() -> None:
    h = _harness(TWO)
    _go(h, 0, 0, SUB)
    h.tick(SUB)
    late, *errors, stopped = h.tick(2 * SUB)  # no Continue for subinterval 2
    assert isinstance(late, Error) and late.kind == "late"
    assert late.message.startswith("host h1: master late: no Continue for subinterval 2")
    assert _said_of(errors) == WANT and stopped == Stopped(0, 0)


def test_problems_stopping_the_io_at_bye_come_before_the_bye() -> None:
    h = _harness(TWO)
    _go(h, 0, 0, SUB)
    *errors, bye = h.send(Bye())
    assert _said_of(errors) == WANT and bye == Bye(reason="master said bye")


def test_a_fatal_error_carries_the_problems_stopping_the_io() -> None:
    h = _harness(TWO)
    _go(h, 0, 0, SUB)
    h.session.on_bytes(b"\xff" * 64)  # garbage: a fatal protocol error
    (fatal,) = h.take()
    assert isinstance(fatal, Error) and fatal.fatal and fatal.kind == "protocol"
    assert "(and stopping all I/O: worker 0 (workloads h1:/dev/fake0:a; LUNs /dev/fake0): " \
           "1 I/Os still in flight; worker 1 (" in fatal.message


class CollectFails(FakeBackend):
    def __init__(self, problem: IvyError) -> None:
        super().__init__()
        self.problem = problem

    def collect(self, subinterval: int, deadline_ns: int) -> Any:
        raise self.problem


def test_an_error_naming_workloads_alone_gets_the_lun_of_the_first() -> None:
    h = Harness()
    h.backend = CollectFails(WorkerError("worker process died (exit code -9)", worker=1,
                                         workloads=("h1:/dev/busy0:b", "h1:/dev/fake0:a")))
    h.session.backend = h.backend
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _create(h, 2, "h1:/dev/busy0:b", lun="/dev/busy0")
    _go(h, 0, 0, SUB)
    err, stopped = h.tick(SUB)
    assert isinstance(err, Error) and err.kind == "io"
    assert (err.workload_id, err.lun) == ("h1:/dev/busy0:b", "/dev/busy0")
    assert err.message == ("host h1: subinterval 0: worker 1 (workloads h1:/dev/busy0:b, "
                           "h1:/dev/fake0:a): worker process died (exit code -9)")
    assert stopped == Stopped(0, -1)
