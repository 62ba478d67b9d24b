"""Tests for slave/lun_info.py: LunInfo's wire form (a plain dict, checked field by field when
it comes back) and the attributes the master keys rollups on."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from protocol.errors import RemoteProtocolError
from slave.lun_info import LunInfo

SAMPLE = LunInfo(
    path="/dev/sda1", kind="block", name="sda1", size_bytes=1 << 30, logical_block_bytes=512,
    physical_block_bytes=4096, rotational=True, vendor="ATA", model="ST1000", serial="ZA1",
    wwid="naa.5", dev="8:1", parent="sda", partitions=(), holders=("dm-0",),
    mount_points=("/boot",), signature="ext4", open_by=("12:fio",), exclusive_busy=True,
)


def test_lun_info_round_trips_through_msgpack() -> None:
    wire = msgpack.packb(SAMPLE.to_dict())
    assert LunInfo.from_dict(msgpack.unpackb(wire)) == SAMPLE
    assert LunInfo.from_dict(LunInfo(path="/f", kind="file", name="f", size_bytes=1).to_dict()) \
        == LunInfo(path="/f", kind="file", name="f", size_bytes=1)
    marked = LunInfo(path="/f", kind="file", name="f", size_bytes=1, created=True, mark="ok",
                     mark_created="2026-11-25T16:54:19Z", mark_size_bytes=1)
    assert LunInfo.from_dict(msgpack.unpackb(msgpack.packb(marked.to_dict()))) == marked


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"size_bytes": "1"}, "size_bytes"),
        ({"size_bytes": True}, "size_bytes"),
        ({"size_bytes": -1}, "size_bytes"),
        ({"rotational": 1}, "rotational"),
        ({"holders": "dm-0"}, "holders"),
        ({"holders": [1]}, "holders"),
        ({"exclusive_busy": 0}, "exclusive_busy"),
        ({"vendor": None}, "vendor"),
        ({"kind": "tape"}, "kind"),
        ({"mark": "mine"}, "mark must be one of"),
        ({"mark": None}, "mark"),
        ({"mark_size_bytes": -1}, "mark_size_bytes"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_lun_info_from_dict_rejects(change: dict[str, Any], complaint: str) -> None:
    data = SAMPLE.to_dict()
    data.update(change)
    with pytest.raises(RemoteProtocolError, match=complaint):
        LunInfo.from_dict(data)


def test_lun_info_from_dict_requires_path() -> None:
    data = SAMPLE.to_dict()
    del data["path"]
    with pytest.raises(RemoteProtocolError, match="path"):
        LunInfo.from_dict(data)


def test_attributes() -> None:
    attrs = SAMPLE.attributes()
    assert attrs["lun"] == "/dev/sda1"
    assert attrs["kind"] == "block"
    assert attrs["name"] == "sda1"
    assert attrs["size_bytes"] == str(1 << 30)
    assert (attrs["vendor"], attrs["model"], attrs["serial"]) == ("ATA", "ST1000", "ZA1")
    assert attrs["rotational"] == "1"
    assert attrs["logical_block_bytes"] == "512"
    assert attrs["physical_block_bytes"] == "4096"
    assert attrs["parent"] == "sda"
    assert all(isinstance(v, str) for v in attrs.values())
    assert "mount_points" not in attrs  # state, not identity
    assert attrs["file_size_bytes"] == ""  # a block device has no file size
    unknown = LunInfo(path="/f", kind="file", name="f", size_bytes=1).attributes()
    assert unknown["rotational"] == ""
