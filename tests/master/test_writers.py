"""The master's writer threads (``master.results.writers``): one pool per thread count, kept
until ``close_pools``, which ends their threads once their jobs are done."""

from __future__ import annotations

import threading
import time

import pytest

from master.results import writers


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("writer")]


def test_a_pool_is_kept_until_close_pools_ends_its_threads_after_their_jobs() -> None:
    writers.close_pools()
    assert _writer_threads() == []
    first = writers.pool(2)
    assert writers.pool(2) is first
    done: list[int] = []
    jobs = [first.submit(lambda i=i: (time.sleep(0.05), done.append(i))) for i in range(4)]
    assert _writer_threads()
    writers.close_pools()
    assert sorted(done) == [0, 1, 2, 3] and all(j.done() for j in jobs)
    assert _writer_threads() == []
    again = writers.pool(2)
    assert again is not first
    assert again.submit(lambda: 7).result() == 7
    writers.close_pools()


@pytest.mark.parametrize("threads", [1, 0, -1])
def test_a_pool_of_fewer_than_two_threads_is_refused(threads: int) -> None:
    with pytest.raises(ValueError, match=f"a pool of {threads} writer threads"):
        writers.pool(threads)
