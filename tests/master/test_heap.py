"""master.run.heap: the cyclic collector paused for a set-up of many small objects, and as it
was after it (also after an exception); the decorator's form."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pytest

from master.run.heap import no_cycle_collection, without_cycle_collection


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("fails", [False, True])
def test_the_collector_is_paused_in_the_block_and_as_it_was_after(
        collector: None, enabled: bool, fails: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(KeyError) if fails else contextlib.nullcontext(), \
            no_cycle_collection():
        assert not gc.isenabled()
        if fails:
            raise KeyError("in the block")
    assert gc.isenabled() == enabled


def test_a_function_runs_without_the_collector_and_returns_its_result(collector: None) -> None:
    gc.enable()

    @without_cycle_collection
    def made(n: int, *, name: str) -> tuple[bool, list[str]]:
        """made's own docstring"""
        return gc.isenabled(), [name] * n

    assert made(2, name="x") == (False, ["x", "x"])
    assert gc.isenabled()
    assert made.__doc__ == "made's own docstring"
