"""The session's refusals of workload requests name the host (``host h1: ...``), as the
preflight's own do, and a LUN that vanished or shrank between discovery and a writing
create is refused saying so, not as a file the test did not ask to create."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import PreflightError
from protocol.messages import (
    Ack,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    LoadMap,
    LunList,
    Message,
    VerifyLun,
)
from slave.engine import compiled_loop
from slave.luns import KIND_BLOCK, KIND_FILE, lun_for_path
from tests.slave.test_session import Harness

MIB = 1 << 20
WRITES = {"iodepth": 1, "iops": 10.0, "read_fraction": 0.5}


def _discovered(h: Harness, path: Path) -> None:
    *_progress, found = h.send(DiscoverLuns(1, files=[{"path": str(path), "size_bytes": MIB,
                                                       "create": True, "layout": "zero"}]))
    assert isinstance(found, LunList), found


def _create(h: Harness, seq: int, path: Path) -> Message:
    (reply,) = h.send(CreateWorkload(seq, f"h1:{path}:w{seq}", str(path), dict(WRITES), False))
    return reply


@pytest.mark.parametrize(("change", "says"), [
    ("removed", "no longer exists (it did at discovery)"),
    ("shrunk", "is now 4,096 bytes, smaller than the 1,048,576 bytes it had as a LUN at "
               "discovery"),
])
def test_a_file_lun_changed_since_discovery_is_refused_naming_host_and_why(
        tmp_path: Path, change: str, says: str) -> None:
    path = tmp_path / "lun"
    h = Harness(describe=lun_for_path)
    h.hello()
    _discovered(h, path)
    if change == "removed":
        path.unlink()  # a clean-up between steps
    else:
        os.truncate(path, 4096)
    err = _create(h, 2, path)
    assert isinstance(err, Error) and err.kind == "preflight" and err.lun == str(path), err
    assert err.message == f"host h1: file LUN {path}: {says}", err.message
    assert "does not ask to create" not in err.message
    assert not path.exists() or path.stat().st_size == 4096  # nothing made or grown


def test_a_block_device_gone_since_discovery_is_refused_saying_so(tmp_path: Path) -> None:
    gone = str(tmp_path / "sdz")
    with pytest.raises(PreflightError) as info:
        lun_for_path(gone, host="h1", discovered_as=KIND_BLOCK)
    assert str(info.value) == f"LUN {gone}: no longer exists (it did at discovery, a block " \
        "device)"
    assert (info.value.host, info.value.lun) == ("h1", gone)
    plain = tmp_path / "plain"
    plain.write_bytes(bytes(4096))
    with pytest.raises(PreflightError, match="was a block device at discovery and is not one"):
        lun_for_path(str(plain), host="h1", discovered_as=KIND_BLOCK)
    # a file LUN the test did not discover is still "not asked to create"
    with pytest.raises(PreflightError, match="does not exist and the test does not ask"):
        lun_for_path(gone, MIB, host="h1")
    with pytest.raises(PreflightError, match="no longer exists"):
        lun_for_path(gone, MIB, host="h1", discovered_as=KIND_FILE)


def test_every_refusal_of_a_workload_request_names_the_host() -> None:
    h = Harness()
    h.hello()
    (ack,) = h.send(CreateWorkload(1, "h1:/dev/fake0:a", "/dev/fake0", dict(WRITES), True))
    assert isinstance(ack, Ack), ack
    refusals = [
        h.send(CreateWorkload(2, "h1:/dev/fake0:a", "/dev/fake0", dict(WRITES), True)),
        h.send(CreateWorkload(3, "h1:/dev/fake0:b", "/dev/fake0", {"nonsense": 1}, True)),
        h.send(CreateWorkload(4, "h1:/dev/busy0:c", "/dev/busy0", dict(WRITES), False)),
        h.send(EditWorkload(5, "h1:/dev/fake0:zz", {"iops": 5.0})),
        h.send(EditWorkloads(6, [["h1:/dev/fake0:zz", {"iops": 5.0}]])),
        h.send(DeleteWorkload(7, "h1:/dev/fake0:zz")),
    ]
    for (err,) in refusals:
        assert isinstance(err, Error) and not err.fatal, err
        assert err.message.startswith("host h1: "), err.message
        assert not err.message.startswith("host h1: host h1"), err.message  # named once


# --------------------------------------------------------------------- data verification
TARGET = {"lun": 2, "first_bytes": 0, "size_bytes": 1 << 20, "run_key": 9, "attempt": 0,
          "writer": 4}


def _verified(h: Harness, seq: int, target: dict[str, int], **params: object) -> Message:
    (reply,) = h.send(CreateWorkload(seq, f"h1:/dev/fake0:v{seq}", "/dev/fake0",
                                     {"iodepth": 1, "iops": 10.0, **params}, False,
                                     verify=target))
    return reply


def test_a_verified_create_hands_its_target_to_the_backend(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    assert isinstance(_verified(h, 1, TARGET), Ack)
    assert h.backend.verify == {"h1:/dev/fake0:v1": TARGET}
    (ack,) = h.send(CreateWorkload(2, "h1:/dev/fake0:p", "/dev/fake0", {"iodepth": 1}, False))
    assert isinstance(ack, Ack) and h.backend.verify["h1:/dev/fake0:p"] is None


@pytest.mark.parametrize(("target", "params", "kind", "says"), [
    ({**TARGET, "writer": 1 << 16}, {}, "config", "verify.writer: 65536 is not an integer"),
    ({k: x for k, x in TARGET.items() if k != "run_key"}, {}, "config",
     "verify: keys ['attempt', 'first_bytes', 'lun', 'size_bytes', 'writer']"),
    ({**TARGET, "first_bytes": 512}, {}, "config",
     "verify.first_bytes: 512 is not a multiple of 4096"),
    ({**TARGET, "size_bytes": 2 << 30}, {}, "config",
     "verify: the map's range 0 + 2147483648 passes the LUN's 1073741824 bytes"),
    (TARGET, {"blocksize_bytes": 2048}, "config",
     "a verified workload's blocksize must be a multiple of 4096 bytes, not 2048"),
    (TARGET, {}, "preflight", "host h1: LUN /dev/fake0: data verification needs the compiled "
                              "loop, which this host cannot run: no C compiler here"),
])
def test_a_verified_create_the_host_cannot_serve_is_refused_saying_why(
        monkeypatch: pytest.MonkeyPatch, target: dict[str, int], params: dict[str, object],
        kind: str, says: str) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: kind != "preflight")
    monkeypatch.setattr(compiled_loop, "why_not", lambda: "no C compiler here")
    h = Harness()
    h.hello()
    err = _verified(h, 1, target, **params)
    assert isinstance(err, Error) and err.kind == kind, err
    assert says in err.message, err.message
    assert h.backend.verify == {}  # nothing created


def test_a_verified_range_off_the_map_grid_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    err = _verified(h, 1, TARGET, range_start_bytes=512)
    assert isinstance(err, Error) and err.kind == "config", err
    assert "range must start on a 4096-byte boundary, not at 512" in err.message


def test_loaded_map_parts_go_to_the_luns_first_verified_create(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    (a,) = h.send(LoadMap(1, lun=2, first_block=0, data=bytes([1, 2, 3, 4])))
    (b,) = h.send(LoadMap(2, lun=2, first_block=10, data=bytes([5 | 0x80, 6])))
    assert isinstance(a, Ack) and isinstance(b, Ack) and b.info == {"blocks": 12}
    assert isinstance(_verified(h, 3, TARGET), Ack)
    given = h.backend.verify_maps["h1:/dev/fake0:v3"]
    got = given.map
    assert list(given.crashes) == []
    assert got.size == (1 << 20) // 4096 and got[:4].tolist() == [1, 2, 3, 4]
    assert got[10:12].tolist() == [5 | 0x80, 6] and not got[12:].any()
    # taken: a later create on the LUN starts from the host's own map, not from these
    assert isinstance(_verified(h, 4, TARGET), Ack)
    assert h.backend.verify_maps["h1:/dev/fake0:v4"] is None


def test_a_loaded_map_that_does_not_fit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    (err,) = h.send(LoadMap(1, lun=70000, first_block=0, data=b"\x01"))
    assert isinstance(err, Error) and err.kind == "config" and "out of range" in err.message
    (err,) = h.send(LoadMap(2, lun=2, first_block=-1, data=b"\x01"))
    assert isinstance(err, Error) and "first block -1" in err.message
    (ack,) = h.send(LoadMap(3, lun=2, first_block=256, data=b"\x01"))  # past 1 MiB's 256
    assert isinstance(ack, Ack)
    err = _verified(h, 4, TARGET)
    assert isinstance(err, Error) and err.kind == "config"
    assert "LoadMap: LUN 2's map has 257 blocks, past its 256" in err.message


def test_a_loaded_maps_crash_facts_go_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    (ack,) = h.send(LoadMap(1, lun=2, first_block=0, data=bytes([3]),
                            crashes=[[0, -1, 40, 7], [1, 3]]))
    assert isinstance(ack, Ack)
    assert isinstance(_verified(h, 2, TARGET), Ack)
    given = h.backend.verify_maps["h1:/dev/fake0:v2"]
    assert [(a, list(c)) for a, c in given.crashes] == [(0, [-1, 40, 7]), (1, [3])]
    for bad in ([[]], [[256, 1]], [[0, -2]]):  # no attempt, one out of range, a bad serial
        (err,) = h.send(LoadMap(3, lun=2, first_block=0, data=bytes([3]), crashes=bad))
        assert isinstance(err, Error) and err.kind == "config" and "crash" in err.message


def test_a_read_back_is_refused_without_a_map_beside_a_workload_or_with_a_bad_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    lun = str(tmp_path / "lun")
    (err,) = h.send(VerifyLun(1, lun, dict(TARGET), 0))
    assert isinstance(err, Error) and err.kind == "config" and err.lun == lun
    assert err.message == f"host h1: read-back of {lun}: no map of LUN 2 was given (LoadMap)"
    (err,) = h.send(VerifyLun(2, lun, {**TARGET, "run_key": -5}, 0))
    assert isinstance(err, Error) and "verify.run_key: -5 is not an integer" in err.message
    (ack,) = h.send(LoadMap(3, lun=2, first_block=0, data=b"\x01"))
    assert isinstance(ack, Ack) and isinstance(_verified(h, 4, TARGET), Ack)
    (err,) = h.send(VerifyLun(5, lun, dict(TARGET), 0))
    assert isinstance(err, Error) and err.kind == "config"
    assert "runs with no workload on the host, and it has 1" in err.message


def test_a_map_a_worker_holds_already_is_replaced_there_part_by_part(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # between steps, a LUN another host wrote: the master's map goes to the worker that holds
    # the LUN's (not kept for a create that will not come); a part past its end is refused
    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    h = Harness()
    h.hello()
    assert isinstance(_verified(h, 1, TARGET), Ack)
    (ack,) = h.send(LoadMap(2, lun=2, first_block=8, data=bytes([3, 4])))
    assert isinstance(ack, Ack) and ack.info == {"replaced": True}
    assert ("load_map", (2, 8, bytes([3, 4]))) in h.backend.calls
    (err,) = h.send(LoadMap(3, lun=2, first_block=255, data=bytes([3, 4])))
    assert isinstance(err, Error) and err.kind == "config" and "past its 256" in err.message
    (ack,) = h.send(LoadMap(4, lun=7, first_block=0, data=bytes([1])))  # no worker holds 7
    assert isinstance(ack, Ack) and ack.info == {"blocks": 1}


def test_a_read_back_of_a_lun_another_run_holds_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    monkeypatch.setattr(compiled_loop, "available", lambda: True)
    lun = tmp_path / "lun"
    lun.write_bytes(bytes(MIB))
    h = Harness()
    h.hello()
    (ack,) = h.send(LoadMap(1, lun=2, first_block=0, data=b"\x01"))
    assert isinstance(ack, Ack)
    with open(lun, "rb") as other:  # another run's session: its exclusive lock
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        (err,) = h.send(VerifyLun(2, str(lun), dict(TARGET), 0))
    assert isinstance(err, Error) and err.kind == "preflight" and err.lun == str(lun)
    assert err.message == (f"host h1: read-back of {lun}: another ivypy run holds the LUN for "
                           "itself (its writes would read as damage): verify once that run "
                           "has ended")
