"""The master's writer threads: result files written on the controller's cores.

Owns how many threads write the master's files at once (``writer_threads``: the CPUs this
process may run on, at most ``MOST_THREADS``) and the pools of them, made once per process and
kept (``pool``; ``close_pools`` ends them): the compiled formatter keeps a buffer per thread,
which stays warm between subintervals. What runs on them is compiled code that releases the
GIL: the rows and files of ``master.results.csvkernels`` (``format_lines``, ``write_lines``,
``create_files``, ``create_headed``: a step's instance files, ``master.run.stepfiles``) and a
slice's histogram rows (``master.analysis.kernels``), each job on its own files: a file's bytes
do not depend on which thread wrote it, nor on how many there are. It does not decide what is
written, nor when (``master.run.recorder``, ``master.run.stepfiles``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from protocol.cpulist import usable_cpus

#: The most writer threads, whatever the CPUs (more only contend for the file system's locks).
MOST_THREADS = 8


def writer_threads() -> int:
    """The CPUs this process may run on now (its affinity), at most ``MOST_THREADS``."""
    return max(1, min(MOST_THREADS, len(usable_cpus())))


_pools: dict[int, ThreadPoolExecutor] = {}


def pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` writer threads (made at its first use, kept until
    ``close_pools``)."""
    if threads < 2:
        raise ValueError(f"a pool of {threads} writer threads: write on the caller's thread")
    made = _pools.get(threads)
    if made is None:
        made = _pools[threads] = ThreadPoolExecutor(threads,
                                                    thread_name_prefix=f"writer{threads}")
    return made


def close_pools() -> None:
    """End every pool's threads once their jobs are done; a later ``pool`` makes a new one.
    The tests call it after each test: a process that is to fork safely must run no other
    thread (``ivypy fio-pctiles`` forks its readers only then)."""
    while _pools:
        _pools.popitem()[1].shutdown(wait=True)


def finish(jobs: Iterable[Future[None]]) -> None:
    """Wait for every job, then raise the first one's error in the order given (after all
    have ended: no file is still being written when the caller takes a subinterval back)."""
    first: BaseException | None = None
    for job in jobs:
        try:
            job.result()
        except BaseException as exc:  # raised below, once the others have ended
            if first is None:
                first = exc
    if first is not None:
        raise first


def drain(jobs: Iterable[Future[None]]) -> None:
    """Cancel the jobs not started, wait for the others, their errors dropped: the caller is
    raising its own."""
    jobs = list(jobs)
    for job in jobs:
        job.cancel()
    for job in jobs:
        if not job.cancelled():
            with contextlib.suppress(BaseException):  # the caller's error is the one raised
                job.result()
