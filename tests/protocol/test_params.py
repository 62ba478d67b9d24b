"""The slave's workload parameters."""

from __future__ import annotations

from dataclasses import fields

import pytest

from protocol.params import WorkloadParams

BASE = WorkloadParams(iops=1000.0)
# a different valid value for every field
OTHER = {"iosequencer": "sequential", "blocksize_bytes": 8192, "iodepth": 2, "iops": 2000.0,
         "read_fraction": 0.5, "range_start_bytes": 4096, "range_end_bytes": 1 << 20,
         "seq_start_bytes": 8192, "hot_zone_bytes": 4096, "hot_zone_fraction": 0.5,
         "skew_weight": 2.0, "write_data": "zeros", "write_data_ratio": 2.0, "busy_poll": True,
         "seed": 7}


def test_every_field_has_a_case() -> None:
    assert set(OTHER) == {f.name for f in fields(WorkloadParams)}


@pytest.mark.parametrize("field", sorted(OTHER))
def test_same_but_rate_sees_every_field_but_the_rate(field: str) -> None:
    changed = BASE.replace(**{field: OTHER[field]})
    assert changed.same_but_rate(BASE) == (field == "iops")
    assert BASE.same_but_rate(changed) == (field == "iops")


@pytest.mark.parametrize("iops", [None, 1000.0, 5.5])
def test_same_but_rate_of_a_rate_alone(iops: float | None) -> None:
    assert BASE.replace(iops=iops).same_but_rate(BASE)


@pytest.mark.parametrize("params", [
    WorkloadParams(iops=100.0),
    WorkloadParams(iops=None, iodepth=7, read_fraction=0.3, blocksize_bytes=8192, seed=4),
    WorkloadParams(iops=5.0, iosequencer="sequential", hot_zone_bytes=4096,
                   hot_zone_fraction=0.5, write_data="compressible", write_data_ratio=2.0),
])
def test_with_rate_is_replace_of_iops(params: WorkloadParams) -> None:
    got = params.with_rate(250)
    assert got == params.replace(iops=250.0) and isinstance(got.iops, float)
    assert got.same_but_rate(params) and got is not params
    assert params.iops != 250.0  # the original stands


@pytest.mark.parametrize("iops", [0.0, -1.0, float("nan")])
def test_with_rate_refuses_a_rate_that_is_not_positive(iops: float) -> None:
    with pytest.raises(ValueError, match="iops"):
        WorkloadParams(iops=10.0).with_rate(iops)
