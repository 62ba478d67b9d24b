"""Codec and framing: round trips, arbitrary fragmentation, malformed and oversized input."""

from __future__ import annotations

import itertools
import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.batch import GroupStats, StatsBatch
from protocol.codec import (
    FRAME_HEADER_BYTES,
    MAGIC,
    FrameDecoder,
    decode_payload,
    encode,
    encode_payload,
)
from protocol.errors import LocalProtocolError, RemoteProtocolError, VersionMismatchError
from protocol.messages import (
    MESSAGE_TYPES,
    Ack,
    Hello,
    HelloReply,
    Message,
    Ping,
    SubintervalResult,
)
from protocol.stats import WorkloadStats
from protocol.version import PROTOCOL_VERSION
from tests.protocol.strategies import any_message, message_strategy


def _frame(payload: bytes) -> bytes:
    return MAGIC + struct.pack("<I", len(payload)) + payload


def _result_message() -> SubintervalResult:
    s = WorkloadStats()
    s.record(0, np.arange(1000, 2000), np.arange(1500, 2500), 4096)
    return SubintervalResult(
        step=0,
        subinterval=3,
        start_ns=10,
        end_ns=20,
        workload_ids=["h1:/dev/loop0:rr"],
        rollups=[GroupStats(StatsBatch.from_stats([s])).to_wire()],
        cpu={"busy_pct": 12.5, "per_core_busy_pct": [10.0, 15.0]},
        interlock=[{"switch_delay_ns": 1000, "handover_delay_ns": 5000}],
        send_ns=25,
    )


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls))
    if isinstance(msg, Hello | HelloReply):
        msg = type(msg)(**{**msg.__dict__, "protocol_version": PROTOCOL_VERSION})
    frame = encode(msg)
    assert FrameDecoder().feed(frame) == [msg]
    assert decode_payload(encode_payload(msg)) == msg


@settings(max_examples=60)
@given(msgs=st.lists(any_message, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 5000)))
def test_any_fragmentation_decodes_identically(msgs: list[Message], cuts: list[int]) -> None:
    msgs = [
        type(m)(**{**m.__dict__, "protocol_version": PROTOCOL_VERSION})
        if isinstance(m, Hello | HelloReply)
        else m
        for m in msgs
    ]
    stream = b"".join(encode(m) for m in msgs)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    dec = FrameDecoder()
    out: list[Message] = []
    for a, b in itertools.pairwise(points):
        out += dec.feed(stream[a:b])
    assert out == msgs
    assert dec.at_frame_boundary()


def test_one_byte_at_a_time() -> None:
    msgs: list[Message] = [_result_message(), Ping(seq=1, master_send_ns=2), Ack(seq=3)]
    stream = b"".join(encode(m) for m in msgs)
    dec = FrameDecoder()
    out: list[Message] = []
    for i in range(len(stream)):
        out += dec.feed(stream[i : i + 1])
    assert out == msgs
    back = out[0]
    assert isinstance(back, SubintervalResult)
    part = GroupStats.from_wire(back.rollups[0], histograms=True)
    assert part.pct is None and part.batch.workload(0).ops() == 1000


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_whole_frames_decode_in_place_and_only_the_piece_is_kept(kind: type) -> None:
    msgs: list[Message] = [_result_message(), Ping(seq=1, master_send_ns=2)]
    tail = encode(Ack(seq=3))
    stream = b"".join(encode(m) for m in msgs) + tail[:4]
    data = bytearray(stream)
    dec = FrameDecoder()
    fed = kind(data) if kind is not memoryview else memoryview(data)
    assert dec.feed(fed) == msgs
    assert dec.buffered_bytes == 4
    if kind is memoryview:
        fed.release()
    data.clear()  # the decoder holds no view of the caller's buffer
    assert dec.feed(tail[4:]) == [Ack(seq=3)]
    assert dec.at_frame_boundary()


def test_a_bad_frame_behind_a_buffered_piece_breaks_the_decoder_cleanly() -> None:
    good = encode(Ping(seq=1, master_send_ns=2))
    dec = FrameDecoder()
    assert dec.feed(good[:3]) == []
    with pytest.raises(RemoteProtocolError, match="undecodable payload"):
        dec.feed(good[3:] + _frame(b"\xc1"))  # 0xc1 is never valid msgpack
    assert dec.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError, match="already failed"):
        dec.feed(good)


@settings(max_examples=300)
@given(garbage=st.binary(min_size=1, max_size=300))
def test_random_bytes_raise_protocol_error_or_wait(garbage: bytes) -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    try:
        dec.feed(garbage)
    except RemoteProtocolError:
        return
    # Not an error yet: only possible if it is a prefix of a valid frame still incomplete.
    assert garbage[:2] == MAGIC[: len(garbage[:2])]
    assert dec.buffered_bytes <= 1024 + FRAME_HEADER_BYTES


@settings(max_examples=300)
@given(payload=st.binary(max_size=200))
def test_random_payload_in_valid_frame_is_protocol_error(payload: bytes) -> None:
    try:
        msgs = FrameDecoder().feed(_frame(payload))
    except RemoteProtocolError:
        return
    assert all(isinstance(m, Message) for m in msgs)


def test_truncated_frame_waits_then_eof_is_detectable() -> None:
    frame = encode(Ping(seq=1, master_send_ns=2))
    for cut in range(len(frame)):
        dec = FrameDecoder()
        assert dec.feed(frame[:cut]) == []
        assert dec.at_frame_boundary() == (cut == 0)


def test_oversized_frame_refused_at_header_without_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        dec.feed(MAGIC + struct.pack("<I", 10**9))
    assert dec.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError, match="already failed"):
        dec.feed(b"more")
    with pytest.raises(LocalProtocolError, match="maximum"):
        encode(_result_message(), max_frame_bytes=100)


def test_bad_magic_names_the_likely_cause() -> None:
    with pytest.raises(RemoteProtocolError, match="banner"):
        FrameDecoder().feed(b"Welcome to host\n")


@pytest.mark.parametrize(
    "obj, match",
    [
        ([999, {}], "unknown message code"),
        ([True, {}], "unknown message code"),
        (["Ping", {}], "unknown message code"),
        ([Ping.CODE, {"seq": 1}], "lacks fields"),
        ([Ping.CODE, {"seq": 1, "master_send_ns": 2, "x": 3}], "unknown fields"),
        ([Ping.CODE, {"seq": "1", "master_send_ns": 2}], r"Ping.seq"),
        ([Ping.CODE, {"seq": True, "master_send_ns": 2}], r"Ping.seq"),
        ([Ack.CODE, {"seq": 1, "info": {"a": b"x", "b": [1, {"c": None}]}, "x": 1}], "unknown"),
        ({"code": 1}, r"not \[code, fields\]"),
        ([1, 2, 3], r"not \[code, fields\]"),
        ([Hello.CODE, {"protocol_version": PROTOCOL_VERSION + 1}], "protocol version"),
    ],
)
def test_malformed_payloads(obj: object, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        FrameDecoder().feed(_frame(msgpack.packb(obj, use_bin_type=True)))


def test_version_mismatch_is_its_own_error() -> None:
    hello = Hello(PROTOCOL_VERSION + 1, "9.9", "h1", 0)
    with pytest.raises(VersionMismatchError, match="same ivypy version"):
        FrameDecoder().feed(encode(hello))


def test_extension_types_and_non_string_keys_refused() -> None:
    ext = msgpack.packb([Ping.CODE, {"seq": msgpack.ExtType(5, b"x"), "master_send_ns": 1}])
    with pytest.raises(RemoteProtocolError, match="extension"):
        FrameDecoder().feed(_frame(ext))
    intkey = msgpack.packb([Ping.CODE, {1: 2}], use_bin_type=True)
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(_frame(intkey))


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    deep: object = 1
    for _ in range(100_000):
        deep = [deep]
    payload = b"\x92\x0a" + b"\x91" * 100_000 + b"\x01"  # [10, [[[...]]]]
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(_frame(payload))


def test_encoding_a_bad_message_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError, match=r"Ping.seq"):
        encode(Ping(seq="x", master_send_ns=1))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="not a protocol message"):
        encode(Message())
    with pytest.raises(LocalProtocolError):
        encode(Ack(seq=1, info={"x": object()}))


@pytest.mark.parametrize(
    ("tp", "value", "ok"),
    [
        (list[str], ["a", "b"], True),
        (list[str], [], True),
        (list[str], ["a", 1], False),
        (list[str], ["a", b"b"], False),
        (list[str], ("a",), False),
        (list[int], [1, 2], True),
        (list[int], [1, True], False),
        (list[int], [1, 2.0], False),
        (list[float], [1, 2.5], True),
        (list[float], [1.5, False], False),
        (list[bool], [True, False], True),
        (list[bool], [True, 1], False),
        (list[bytes], [b"x"], True),
        (list[bytes], ["x"], False),
        (list[list[int]], [[1], [2, 3]], True),
        (list[list[int]], [[1], [True]], False),
    ],
)
def test_list_field_checks(tp: object, value: object, ok: bool) -> None:
    """Lists of scalars are checked by the exact types msgpack decodes to (one pass in C for
    thousands of workload ids), with the same verdicts as the item-by-item check."""
    from protocol.codec import _checker

    assert _checker(tp)(value) is ok
