"""Rollup validation over a measurement: ``quantity`` and ``max_droop`` (table-driven)."""

from __future__ import annotations

import numpy as np
import pytest

from master.analysis.rollup import Grouping, Sample, compute
from master.analysis.verdicts import rollup_validity as validate
from master.config import RollupSpec
from protocol.batch import StatsBatch
from protocol.stats import WorkloadStats


def _result(iops: list[int]) -> object:
    stats = []
    for n in iops:
        s = WorkloadStats()
        if n:
            s.record(0, np.full(n, 100_000), np.full(n, 100_000), 4096)
        stats.append(s)
    sample = Sample.from_batch(StatsBatch.from_stats(stats))
    return compute(sample, Grouping.from_keys("host", [f"h{i}" for i in range(len(iops))]), 1.0)


@pytest.mark.parametrize(
    "quantity, droop, iops, valid, text",
    [
        (None, None, [100, 10], True, ""),
        (2, None, [100, 100], True, ""),
        (3, None, [100, 100], False, "2 instances, expected 3"),
        (None, 0.1, [100, 95, 105], True, ""),
        (None, 0.1, [100, 80, 120], False, "instance h1 IOPS 80 is 20.0% below the mean 100"),
        (None, 0.5, [100, 0], False, "instance h1 IOPS 0 is 100.0% below"),
        (None, 0.2, [0, 0], True, ""),  # no I/O anywhere: nothing droops
        (1, 0.1, [100], True, ""),
    ],
)
def test_validate(quantity: int | None, droop: float | None, iops: list[int], valid: bool,
                  text: str) -> None:
    spec = RollupSpec(type="host", attributes=("host",), quantity=quantity, max_droop=droop)
    ok, why = validate(spec, _result(iops))  # type: ignore[arg-type]
    assert ok is valid
    assert text in why
    assert (why == "") is valid
