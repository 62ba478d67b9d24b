"""What each engine declares it can do (``slave.engine.base.EngineCaps``), the calls that come
with each capability, and the check a loop makes once when it takes an engine: a table of the
engines, and an engine that declares a capability without its calls refused."""

from __future__ import annotations

import numpy as np
import pytest

from slave.engine.base import (
    EngineCaps,
    SlotTable,
    check_caps,
    compiled,
    registering,
    sized,
)
from slave.engine.fake import FakeEngine
from slave.engine.native import LibaioEngine, NativeEngine, UringEngine
from slave.engine.threadpool import ThreadPoolEngine


@pytest.mark.parametrize(("engine", "caps"), [
    (LibaioEngine, EngineCaps.COMPILED | EngineCaps.SIZED),
    (UringEngine, EngineCaps.COMPILED | EngineCaps.REGISTERS),
    (NativeEngine, EngineCaps.COMPILED),
    (FakeEngine, EngineCaps.COMPILED),
    (ThreadPoolEngine, EngineCaps.NONE),
])
def test_each_engine_declares_what_it_can_do_and_has_the_calls(engine: type,
                                                                caps: EngineCaps) -> None:
    assert engine.caps == caps
    for cap, calls in ((EngineCaps.SIZED, ("grow", "release_old")),
                       (EngineCaps.REGISTERS, ("prepare_slots", "forget_file")),
                       (EngineCaps.COMPILED, ("loop_words", "finish_submit"))):
        assert all(callable(getattr(engine, c, None)) for c in calls) == bool(caps & cap), cap


def test_a_thread_pool_engine_passes_the_check_and_is_none_of_the_kinds() -> None:
    eng = ThreadPoolEngine(SlotTable(4), max_threads=1)
    try:
        check_caps(eng)
        assert sized(eng) is None and registering(eng) is None and compiled(eng) is None
    finally:
        eng.close()


class _Liar:
    """Says it is sized and registers files, with the calls of neither."""

    caps = EngineCaps.SIZED | EngineCaps.REGISTERS
    open_flags = 0
    done_slot = np.zeros(1, dtype=np.int64)
    done_res = np.zeros(1, dtype=np.int64)


def test_an_engine_declaring_a_capability_without_its_calls_is_refused() -> None:
    with pytest.raises(TypeError, match="_Liar declares SIZED without its calls"):
        check_caps(_Liar())  # type: ignore[arg-type]
