"""A worker's error names its workloads, then their LUNs; a ``StopError`` (the end of a step
gone wrong on several workers) says every problem and keeps each, for the session to tell the
master one ``Error`` each."""

from __future__ import annotations

from slave.worker import StopError, WorkerError


def test_a_worker_error_names_its_luns_after_its_workloads() -> None:
    exc = WorkerError("did not stop", worker=2, workloads=("w0", "w1"),
                      luns=tuple(f"/dev/sd{c}" for c in "abcdefghij"))
    assert str(exc) == ("worker 2 (workloads w0, w1; LUNs /dev/sda, /dev/sdb, /dev/sdc, "
                        "/dev/sdd, /dev/sde, /dev/sdf, /dev/sdg, /dev/sdh and 2 more): "
                        "did not stop")
    assert len(exc.luns) == 10 and exc.reason == "did not stop"
    assert str(WorkerError("gone", worker=1, luns=("/dev/sda",))) == \
        "worker 1 (LUNs /dev/sda): gone"


def test_a_stop_error_says_every_problem_and_keeps_each() -> None:
    one = WorkerError("1 I/Os still in flight", worker=0, workloads=("a",), luns=("/dev/x",))
    two = WorkerError("did not stop within 2 s", worker=1, workloads=("b",), luns=("/dev/y",))
    exc = StopError([one, two])
    assert exc.errors == (one, two)
    assert str(exc) == f"{one}; {two}"
    assert (exc.worker, exc.workloads, exc.luns) == (0, ("a",), ("/dev/x",))
    assert isinstance(exc, WorkerError)  # a caller that knows only WorkerError catches it
