"""Device counters on the wire (``protocol.devstats``, ``SubintervalResult.devices``): a
``DeviceDelta`` makes the round trip through a framed ``SubintervalResult`` unchanged; every
bad field is refused on decode with a message naming it."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from protocol.codec import FrameDecoder, encode
from protocol.devstats import COUNTERS, DeviceDelta
from protocol.errors import RemoteProtocolError
from protocol.messages import SubintervalResult

DELTA = DeviceDelta("7:0", "loop0", ("/dev/loop0",), 41_000, 41_000 * 4096, 1_000_031_000,
                    52_000, 83_000,
                    (40_990, 3, 327_920, 24, 8_100, 2, 990, 8_150))


def _result(devices: list[Any]) -> SubintervalResult:
    return SubintervalResult(step=0, subinterval=3, start_ns=1, end_ns=2, workload_ids=[],
                             rollups=[], cpu={}, interlock=[], send_ns=3, devices=devices)


def test_round_trip_through_a_framed_result() -> None:
    (msg,) = FrameDecoder().feed(encode(_result([DELTA.to_wire()])))
    assert isinstance(msg, SubintervalResult)
    assert [DeviceDelta.from_wire(d) for d in msg.devices] == [DELTA]
    assert DELTA.counter("io_ticks_ms") == 990 and len(DELTA.counters) == len(COUNTERS)


def test_the_codec_refuses_devices_that_are_not_maps() -> None:
    fields = {k: getattr(_result([]), k) for k in (
        "step", "subinterval", "start_ns", "end_ns", "workload_ids", "rollups", "cpu",
        "interlock", "send_ns", "io_errors")}
    payload = msgpack.packb([SubintervalResult.CODE, {**fields, "devices": [7]}],
                            use_bin_type=True)
    with pytest.raises(RemoteProtocolError, match=r"SubintervalResult\.devices"):
        FrameDecoder().feed(b"IV" + len(payload).to_bytes(4, "little") + payload)


@pytest.mark.parametrize("change, text", [
    ({"extra": 1}, "unknown fields ['extra']"),
    ({"counters": None, "drop": "counters"}, "lacks ['counters']"),
    ({"device": "loop0"}, "'loop0' is not major:minor"),
    ({"device": "7:"}, "'7:' is not major:minor"),
    ({"device": 7}, "is not major:minor"),
    ({"name": ""}, "name '' is not a device name"),
    ({"luns": []}, "luns must be a non-empty list of paths"),
    ({"luns": ["/dev/loop0", 3]}, "luns must be a non-empty list of paths"),
    ({"ivypy_ops": -1}, "ivypy_ops must be an int >= 0"),
    ({"ivypy_ops": True}, "ivypy_ops must be an int >= 0"),
    ({"ivypy_bytes": -4096}, "ivypy_bytes must be an int >= 0"),
    ({"ivypy_bytes": 1.5}, "ivypy_bytes must be an int >= 0"),
    ({"interval_ns": 0}, "interval_ns must be > 0"),
    ({"interval_ns": 1.5}, "interval_ns must be an int >= 0"),
    ({"start_late_ns": -3}, "start_late_ns must be an int >= 0"),
    ({"end_late_ns": "0"}, "end_late_ns must be an int >= 0"),
    ({"counters": [1] * 7}, "counters must be 8 ints >= 0"),
    ({"counters": [1] * 7 + [-1]}, "counters must be 8 ints >= 0"),
    ({"counters": [1] * 7 + [2**63]}, "counters must be 8 ints >= 0"),
])
def test_a_bad_field_is_refused_naming_it(change: dict[str, Any], text: str) -> None:
    raw = {**DELTA.to_wire(), **change}
    if "drop" in change:
        del raw[change["drop"]], raw["drop"]
    with pytest.raises(RemoteProtocolError) as err:
        DeviceDelta.from_wire(raw)
    assert text in str(err.value)


def test_an_entry_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="device entry is a list, not a map"):
        DeviceDelta.from_wire([1, 2])  # type: ignore[arg-type]
