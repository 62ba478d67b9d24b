"""The slave's conversation, on an in-memory pair with a fake backend and a fake clock."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from protocol.batch import GroupStats, StatsBatch
from protocol.codec import FrameDecoder
from protocol.errors import MasterLateError
from protocol.grouping import group_batch, view_percentiles
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    Go,
    Hello,
    HelloReply,
    Log,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    Stopped,
    SubintervalResult,
    WindowRequest,
    WindowResult,
)
from protocol.params import WorkloadParams
from protocol.state import Conversation, Role, State
from protocol.stats import WorkloadStats
from protocol.version import PROTOCOL_VERSION
from slave import luns as lunmod
from slave.luns import LunInfo, describe_block_device, file_lun, lun_for_path
from slave.session import Collected, SlaveSession
from tests.slave.conftest import require_tools

SUB = 1_000_000_000
MIB = 1 << 20


class FakeBackend:
    def __init__(self) -> None:
        self.workloads: dict[str, WorkloadParams] = {}
        self.luns: dict[str, LunInfo] = {}  # the LUN each workload was created on
        self.calls: list[tuple[str, Any]] = []
        self.engines: dict[str, tuple[str, bool]] = {}  # what each create asked for
        self.late_at: int | None = None
        self.verify: dict[str, dict[str, int] | None] = {}  # each create's verify target
        self.verify_maps: dict[str, Any] = {}  # and the LUN's map LoadMap gave

    def create(self, workload_id: str, lun: LunInfo, params: WorkloadParams,
               engine: str = "auto", fallback: bool = False,
               verify: dict[str, int] | None = None,
               verify_map: Any = None) -> dict[str, Any]:
        self.workloads[workload_id] = params
        self.luns[workload_id] = lun
        self.calls.append(("create", workload_id))
        self.engines[workload_id] = (engine, fallback)
        self.verify[workload_id] = verify
        self.verify_maps[workload_id] = verify_map
        return {"engine": "fake"}

    def engine_for(self, lun: LunInfo) -> str:
        return "fake"

    def final_verify(self) -> dict[str, Any] | None:
        return None

    def load_map_part(self, lun: int, first_block: int, data: bytes) -> bool:
        """A LUN a verified create made holds its map here: parts replace it (recorded)."""
        if not any(t is not None and t["lun"] == lun for t in self.verify.values()):
            return False
        if first_block + len(data) > 256:  # the tests' LUNs: 1 MiB
            raise ValueError(f"LoadMap: LUN {lun}: past its 256 blocks")
        self.calls.append(("load_map", (lun, first_block, bytes(data))))
        return True

    def edit(self, workload_id: str, params: WorkloadParams) -> None:
        self.workloads[workload_id] = params
        self.calls.append(("edit", params.iops))

    def edit_many(self, edits: Sequence[tuple[str, WorkloadParams]]) -> None:
        for wid, params in edits:
            self.edit(wid, params)

    def delete(self, workload_id: str) -> None:
        del self.workloads[workload_id]
        self.calls.append(("delete", workload_id))

    def go(self, start_ns: int, subinterval_ns: int, granted: int) -> None:
        self.calls.append(("go", granted))

    def grant(self, subinterval: int) -> None:
        self.calls.append(("grant", subinterval))

    def stop_after(self, subinterval: int) -> None:
        self.calls.append(("stop_after", subinterval))

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        if self.late_at == subinterval:
            raise MasterLateError(f"buffer for subinterval {subinterval + 2} not ready")
        ids = sorted(self.workloads)
        stats = []
        for i, wid in enumerate(ids):
            s = WorkloadStats()
            iops = self.workloads[wid].iops or 1000.0
            n = int(iops)
            s.record(0, np.full(n, 100_000 + i), np.full(n, 150_000 + i), 4096)
            stats.append(s)
        return Collected(ids, stats, [0] * 2, [{"switch_delay_ns": 10}] * 2)

    def release(self, subinterval: int) -> None:
        self.calls.append(("release", subinterval))

    def halt(self) -> None:
        self.calls.append(("halt", None))

    def close(self) -> None:
        pass


class Harness:
    def __init__(self, describe: Callable[..., LunInfo] | None = None) -> None:
        self.now = 0
        self.backend = FakeBackend()
        self.out = bytearray()
        self.session = SlaveSession(self.backend, self.out.extend, lambda: self.now,
                                    describe=describe or self.describe_error)
        self.master = Conversation(Role.MASTER, host="h1")
        self.now_luns: dict[str, LunInfo] = {}  # the LUNs as they are now (default: as found)
        self.described: list[str] = []
        self.session.luns["/dev/fake0"] = LunInfo(
            path="/dev/fake0",
            kind="block",
            name="fake0",
            size_bytes=1 << 30,
            logical_block_bytes=512,
            physical_block_bytes=4096,
        )
        self.session.luns["/dev/busy0"] = LunInfo(
            path="/dev/busy0",
            kind="block",
            name="busy0",
            size_bytes=1 << 30,
            logical_block_bytes=512,
            physical_block_bytes=4096,
            signature="ext4",
            mount_points=("/mnt/data",),
        )
        self.found = dict(self.session.luns)  # as discovery described them

    def describe_error(self, path: str, size_bytes: int | None = None, **_: Any) -> LunInfo:
        self.described.append(path)
        return self.now_luns.get(path) or self.found[path]

    def send(self, msg: Message) -> list[Message]:
        self.session.on_bytes(self.master.send(msg))
        return self.take()

    def take(self) -> list[Message]:
        msgs = self.master.receive_data(bytes(self.out))
        self.out.clear()
        return msgs

    def tick(self, to_ns: int) -> list[Message]:
        self.now = to_ns
        self.session.on_tick()
        return self.take()

    def hello(self) -> None:
        (reply,) = self.send(Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0))
        assert isinstance(reply, HelloReply) and reply.cores >= 1


def _create(
    h: Harness, seq: int, wid: str, lun: str = "/dev/fake0", **params: Any
) -> list[Message]:
    base = {"iodepth": 4, "iops": 100.0, "read_fraction": 1.0}
    return h.send(CreateWorkload(seq, wid, lun, {**base, **params}))


def _plan(h: Harness, histograms: bool = True) -> list[dict[str, Any]]:
    """A rollup plan of one entry: every workload its own group."""
    return [{"type": "workload", "groups": [[w] for w in h.session.params],
             "histograms": histograms}]


def _go(h: Harness, step: int, start_ns: int, sub_ns: int, **keep: Any) -> list[Message]:
    return h.send(Go(step, start_ns, sub_ns, _plan(h), **keep))


def _batch(r: Message, entry: int = 0) -> StatsBatch:
    assert isinstance(r, SubintervalResult)
    return GroupStats.from_wire(r.rollups[entry], histograms=True).batch


def test_handshake_ping_and_create() -> None:
    h = Harness()
    h.hello()
    h.now = 42
    assert h.send(Ping(1, 7)) == [Pong(1, 7, 42)]
    assert _create(h, 2, "h1:/dev/fake0:rr") == [Ack(2, -1, {"engine": "fake"})]


@pytest.mark.parametrize(
    "lun, params, kind, text",
    [
        ("/dev/busy0", {"read_fraction": 0.5}, "preflight", "/mnt/data"),
        ("/dev/fake0", {"blocksize_bytes": 1000}, "config", "blocksize_bytes"),
        ("/dev/fake0", {"nonsense": 1}, "config", "nonsense"),
        ("/dev/fake0", {"iodepth": 0}, "config", "iodepth"),
    ],
)
def test_refused_creates_name_the_reason(
    lun: str, params: dict[str, Any], kind: str, text: str
) -> None:
    h = Harness()
    h.hello()
    (err,) = _create(h, 5, f"h1:{lun}:w", lun, **params)
    assert isinstance(err, Error) and err.kind == kind and err.seq == 5 and text in err.message
    assert err.workload_id == f"h1:{lun}:w"
    assert not h.backend.workloads


@pytest.mark.parametrize(
    "wid, params, text",
    [
        ("h1:/dev/fake0:w", {"blocksize_bytes": 1000}, "1000 is not a multiple of 512"),
        ("h1:/dev/fake0:w", {"range_start_bytes": 1 << 40}, "no whole 4096-byte block"),
        ("h1:/dev/fake0:w", {"read_fraction": 0.5}, "read-only workload into one that writes"),
        ("h1:/dev/fake0:w", {"nonsense": 1}, "nonsense"),
        ("h1:/dev/fake0:w", {"iops": -5}, "iops"),
        ("h1:/dev/fake0:w", {"iops": 0}, "iops: 0.0 must be > 0"),
        ("h1:/dev/fake0:w", {"iops": "fast"}, "could not convert string to float: 'fast'"),
        ("h1:/dev/fake0:other", {"iops": 5}, "no workload h1:/dev/fake0:other"),
    ],
)
def test_refused_edits_name_the_reason_and_change_nothing(
    wid: str, params: dict[str, Any], text: str
) -> None:
    h = Harness()
    h.hello()
    _create(h, 2, "h1:/dev/fake0:w")
    before = h.session.params["h1:/dev/fake0:w"]
    (err,) = h.send(EditWorkload(3, wid, params))
    assert isinstance(err, Error) and err.kind == "config" and err.seq == 3, err
    assert text in err.message and f"edit of {wid}" in err.message and err.workload_id == wid
    assert h.session.params["h1:/dev/fake0:w"] is before
    assert [c for c in h.backend.calls if c[0] == "edit"] == []


def test_edits_of_many_workloads_in_one_request() -> None:
    h = Harness()
    h.hello()
    for i, wid in enumerate("abc"):
        _create(h, 1 + i, f"h1:/dev/fake0:{wid}")
    _go(h, 0, 10 * SUB, SUB)
    assert [type(m) for m in h.tick(11 * SUB)] == [SubintervalResult]
    assert h.send(Continue(2)) == []
    edits = [["h1:/dev/fake0:a", {"iops": 300}], ["h1:/dev/fake0:c", {"iops": 50.5}]]
    (ack,) = h.send(EditWorkloads(4, edits))
    assert ack == Ack(4, 2, {"edited": 2})
    assert [c for c in h.backend.calls if c[0] == "edit"] == [("edit", 300.0), ("edit", 50.5)]
    assert [h.session.params[f"h1:/dev/fake0:{w}"].iops for w in "abc"] == [300.0, 100.0, 50.5]
    # an edit of the rate alone is the workload's parameters with that rate, as a float
    a = h.session.params["h1:/dev/fake0:a"]
    assert a == h.session.params["h1:/dev/fake0:b"].replace(iops=300.0)
    assert isinstance(a.iops, float)


@pytest.mark.parametrize(
    "bad, named, text",
    [
        (["h1:/dev/fake0:b", {"iops": -5}], "h1:/dev/fake0:b", "iops"),
        (["h1:/dev/fake0:zz", {"iops": 5}], "h1:/dev/fake0:zz", "no workload h1:/dev/fake0:zz"),
        (["h1:/dev/fake0:b", {"read_fraction": 0.5}], "h1:/dev/fake0:b", "one that writes"),
        (["h1:/dev/fake0:a", {"iops": 7}], "h1:/dev/fake0:a", "named twice in one request"),
        (["h1:/dev/fake0:b"], "h1:/dev/fake0:b", "an edit is [workload_id, params]"),
        ([7, {"iops": 7}], "7", "an edit is [workload_id, params]"),
    ],
)
def test_a_request_of_edits_with_one_refused_changes_nothing(
    bad: Any, named: str, text: str
) -> None:
    h = Harness()
    h.hello()
    for i, wid in enumerate("ab"):
        _create(h, 1 + i, f"h1:/dev/fake0:{wid}")
    before = dict(h.session.params)
    (err,) = h.send(EditWorkloads(5, [["h1:/dev/fake0:a", {"iops": 300}], bad]))
    assert isinstance(err, Error) and err.kind == "config" and err.seq == 5, err
    assert err.workload_id == named and f"edit of {named}: " in err.message
    assert text in err.message and "no edit of the 2 in this request was made" in err.message
    assert h.session.params == before
    assert [c for c in h.backend.calls if c[0] == "edit"] == []


def test_a_write_is_checked_against_the_lun_as_it_is_at_create() -> None:
    # discovery found /dev/fake0 unused; it was mounted since: a writing workload is refused
    # (reads and an explicit allow_write still go), with one look per LUN per batch of creates
    h = Harness()
    h.hello()
    h.now_luns["/dev/fake0"] = dataclasses.replace(
        h.session.luns["/dev/fake0"], signature="xfs", mount_points=("/srv/late",))
    (err,) = _create(h, 1, "h1:/dev/fake0:w", read_fraction=0.5)
    assert isinstance(err, Error) and err.kind == "preflight" and "/srv/late" in err.message
    (err2,) = _create(h, 2, "h1:/dev/fake0:w2", read_fraction=0.0)
    assert isinstance(err2, Error) and "/srv/late" in err2.message
    assert h.described == ["/dev/fake0"]
    (ack,) = _create(h, 3, "h1:/dev/fake0:r", read_fraction=1.0)
    assert isinstance(ack, Ack)
    (ack2,) = h.send(CreateWorkload(4, "h1:/dev/fake0:forced",
                                    "/dev/fake0", {"iodepth": 4, "read_fraction": 0.5}, True))
    assert isinstance(ack2, Ack)
    assert h.described == ["/dev/fake0"] and set(h.backend.workloads) == {
        "h1:/dev/fake0:r", "h1:/dev/fake0:forced"}
    # unmounted again, and a new step: the next batch looks afresh
    _go(h, 0, 10 * SUB, SUB)
    del h.now_luns["/dev/fake0"]
    h.send(Stop(0))
    (ack3,) = _create(h, 5, "h1:/dev/fake0:w", read_fraction=0.5)
    assert isinstance(ack3, Ack) and h.described == ["/dev/fake0"] * 2


def test_a_file_lun_keeps_its_requested_size_when_a_write_looks_afresh(tmp_path: Path) -> None:
    # a 4 MiB file named with size 1 MiB: discovery gives a 1 MiB LUN, and the fresh look a
    # writing workload takes at create (the real one here) must not widen it to the whole file
    path = tmp_path / "lun.img"
    path.write_bytes(bytes(4 * MIB))
    h = Harness(describe=lun_for_path)
    h.hello()
    h.session.luns[str(path)] = file_lun(str(path), MIB)
    (ack,) = h.send(CreateWorkload(1, f"h1:{path}:w", str(path),
                                   {"iodepth": 4, "iops": 100.0, "read_fraction": 0.0},
                                   allow_write=True))
    assert isinstance(ack, Ack), ack
    assert h.backend.luns[f"h1:{path}:w"].size_bytes == MIB
    assert h.session.luns[str(path)].size_bytes == MIB
    assert path.stat().st_size == 4 * MIB


def _discover_file(h: Harness, path: Path, size: int, create: bool) -> list[Message]:
    return h.send(DiscoverLuns(9, files=[{"path": str(path), "size_bytes": size,
                                          "create": create}]))


@pytest.mark.parametrize(("content", "holds"), [
    (b"SQLite format 3\x00" + bytes(4080), "holding a sqlite3 signature"),
    (b"QFI\xfb\x00\x00\x00\x03" + bytes(4088), "holding a qcow2 signature"),
    ((b"line of text\n" * 700)[:8192], "holding data"),
])
def test_a_write_to_an_existing_file_the_run_did_not_create_is_refused(
        tmp_path: Path, content: bytes, holds: str) -> None:
    """A typo in ``file:`` must not overwrite someone's data: refused naming host, file, size
    and what it holds, unless the test allows writes; reads stay allowed."""
    path = tmp_path / "precious.db"
    path.write_bytes(content)
    h = Harness(describe=lun_for_path)
    h.hello()
    assert isinstance(_discover_file(h, path, len(content), create=True)[0], LunList)
    (err,) = _create(h, 1, f"h1:{path}:w", str(path), read_fraction=0.5, iodepth=1)
    assert isinstance(err, Error) and err.kind == "preflight", err
    assert "host h1" in err.message and str(path) in err.message
    assert "an existing non-empty file of" in err.message
    assert f"({len(content):,} bytes)" in err.message
    assert holds in err.message
    assert f"h1:{path}:w" not in h.backend.workloads
    (ack,) = _create(h, 2, f"h1:{path}:r", str(path), read_fraction=1.0, iodepth=1)
    assert isinstance(ack, Ack)
    (ack,) = h.send(CreateWorkload(3, f"h1:{path}:w2", str(path),
                                   {"iodepth": 1, "iops": 100.0, "read_fraction": 0.5},
                                   allow_write=True))
    assert isinstance(ack, Ack), ack
    warning = ack.info["preflight_warning"]
    assert "as the test allows" in warning and "an existing non-empty file" in warning
    assert path.read_bytes() == content  # nothing here writes; the backend is a fake


def test_a_file_the_run_created_takes_writes_in_every_step(tmp_path: Path) -> None:
    """Created by this run's discovery: ivypy's own data, so writes need no allow_write, also
    when a later create describes the (now non-empty) file afresh. An empty file extended is
    the run's too."""
    h = Harness(describe=lun_for_path)
    h.hello()
    new, empty = tmp_path / "new.img", tmp_path / "empty.img"
    empty.write_bytes(b"")
    for i, path in enumerate((new, empty)):
        (reply,) = _discover_file(h, path, MIB, create=True)
        assert isinstance(reply, LunList)
        (entry,) = [e for e in reply.luns if e["info"]["path"] == str(path)]
        assert entry["info"]["created"] is True
        with open(path, "r+b") as fh:  # the first step wrote to it
            fh.write(b"x" * 4096)
        for seq in (1, 2):
            (ack,) = _create(h, 10 * i + seq, f"h1:{path}:w{seq}", str(path),
                             read_fraction=0.0, iodepth=1)
            assert isinstance(ack, Ack) and "preflight_warning" not in ack.info, ack
            h.session._write_checked.clear()  # as at the next Go: described afresh


def test_a_file_an_earlier_run_created_takes_writes_in_a_later_one(tmp_path: Path) -> None:
    """A second run (a new session) of the same test finds the file the first one made: ivypy's
    own by its mark, so writes need no allow_write, and the run says why once (an event). A
    file someone else put there instead is refused, saying ivypy did not create it."""
    path = tmp_path / "lun.img"
    first = Harness(describe=lun_for_path)
    first.hello()
    *told, reply = first.send(DiscoverLuns(9, files=[{"path": str(path), "size_bytes": MIB,
                                                      "create": True, "layout": "random"}]))
    assert isinstance(reply, LunList)
    assert told and all(isinstance(m, Log) and m.context["kind"] == "layout" for m in told)
    (ack,) = _create(first, 1, f"h1:{path}:w", str(path), read_fraction=0.0, iodepth=1)
    assert isinstance(ack, Ack) and "preflight_warning" not in ack.info, ack
    with open(path, "r+b") as fh:  # the first run wrote to it
        fh.write(b"x" * 4096)
    first.session.shut_down()  # the first run ended (its lock on the LUN with it)

    second = Harness(describe=lun_for_path)
    second.hello()
    note, reply = _discover_file(second, path, MIB, create=True)
    assert isinstance(reply, LunList)
    (entry,) = [e for e in reply.luns if e["info"]["path"] == str(path)]
    assert entry["info"]["created"] is True and entry["info"]["mark"] == "ok"
    assert entry["in_use"] == []
    assert isinstance(note, Log) and note.level == "INFO" and note.context["kind"] == "lun"
    assert note.message.startswith(f"file LUN {path}: created by ivypy on ")
    assert note.message.endswith("ivypy's own, its writes need no allow_write")
    (ack,) = _create(second, 1, f"h1:{path}:w", str(path), read_fraction=0.0, iodepth=1)
    assert isinstance(ack, Ack) and "preflight_warning" not in ack.info, ack
    (again,) = _discover_file(second, path, MIB, create=True)  # said once per session
    assert isinstance(again, LunList)

    path.unlink()
    path.write_bytes(b"y" * MIB)  # someone's file at the path now
    third = Harness(describe=lun_for_path)
    third.hello()
    (reply,) = _discover_file(third, path, MIB, create=True)
    assert isinstance(reply, LunList)
    (err,) = _create(third, 1, f"h1:{path}:w", str(path), read_fraction=0.0, iodepth=1)
    assert isinstance(err, Error) and err.kind == "preflight", err
    assert "holding data, which ivypy did not create" in err.message


def test_a_file_that_cannot_carry_the_mark_is_a_warning_when_made(ramfs: Path) -> None:
    """On a file system without user extended attributes: one warning for the master's console
    and events.csv naming the file when the run makes it; the file is this session's own all
    the same, and a later session's describe finds it someone's."""
    path = ramfs / "lun.img"
    h = Harness(describe=lun_for_path)
    h.hello()
    warning, reply = _discover_file(h, path, MIB, create=True)
    assert isinstance(reply, LunList)
    assert isinstance(warning, Log) and warning.level == "WARNING", warning
    assert warning.context == {"kind": "lun", "lun": str(path)}
    assert warning.message.startswith(f"file LUN {path}: ivypy cannot mark it as its own (its "
                                      "file system keeps no user extended attributes)")
    (ack,) = _create(h, 1, f"h1:{path}:w", str(path), read_fraction=0.0, iodepth=1)
    assert isinstance(ack, Ack) and "preflight_warning" not in ack.info, ack
    (again,) = _discover_file(h, path, MIB, create=True)  # made already: nothing to say
    assert isinstance(again, LunList)
    later = Harness(describe=lun_for_path)
    later.hello()
    (reply,) = _discover_file(later, path, MIB, create=True)
    assert isinstance(reply, LunList)
    (err,) = _create(later, 1, f"h1:{path}:w", str(path), read_fraction=0.0, iodepth=1)
    assert isinstance(err, Error) and "keeps no user extended attributes" in err.message, err


def test_reads_allowed_on_a_busy_lun() -> None:
    h = Harness()
    h.hello()
    (ack,) = _create(h, 1, "h1:/dev/busy0:r", "/dev/busy0", read_fraction=1.0)
    assert isinstance(ack, Ack)


def test_step_results_continue_edit_and_stop() -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _create(h, 2, "h1:/dev/fake0:b", iops=200.0)
    assert _go(h, 0, 10 * SUB, SUB) == []
    assert h.tick(10 * SUB + SUB - 1) == []
    (r0,) = h.tick(11 * SUB)
    assert isinstance(r0, SubintervalResult) and r0.subinterval == 0
    assert (r0.start_ns, r0.end_ns) == (10 * SUB, 11 * SUB)
    batch = _batch(r0)
    assert r0.workload_ids == ["h1:/dev/fake0:a", "h1:/dev/fake0:b"]
    assert [batch.workload(i).ops() for i in range(2)] == [100, 200]
    assert h.send(Continue(2)) == []
    (ack,) = h.send(EditWorkload(3, "h1:/dev/fake0:a", {"iops": 300}))
    assert isinstance(ack, Ack) and ack.effective_subinterval == 2
    (r1,) = h.tick(12 * SUB)
    assert r1.subinterval == 1  # type: ignore[attr-defined]
    assert h.send(Stop(2)) == []
    r2, stopped = h.tick(13 * SUB)
    assert isinstance(r2, SubintervalResult) and r2.subinterval == 2
    assert _batch(r2).workload(0).ops() == 300
    assert stopped == Stopped(0, 2)
    assert ("grant", 2) in h.backend.calls and ("stop_after", 2) in h.backend.calls
    (ack,) = h.send(DeleteWorkload(4, "h1:/dev/fake0:b"))
    assert isinstance(ack, Ack) and ack.effective_subinterval == -1
    assert h.send(Bye()) == [Bye(reason="master said bye")]
    assert h.session.closed


def test_results_are_added_up_by_the_rollup_plan() -> None:
    """Each plan entry's groups come added up: as merged histograms, or as the percentile
    table read from them (equal to reading the merged histograms)."""
    h = Harness()
    h.hello()
    a, b, c = "h1:/dev/fake0:a", "h1:/dev/fake0:b", "h1:/dev/fake0:c"
    for seq, (wid, iops) in enumerate(((a, 100.0), (b, 200.0), (c, 50.0)), start=1):
        _create(h, seq, wid, iops=iops)
    plan = [{"type": "workload", "groups": [[a], [b], [c]], "histograms": True},
            {"type": "all", "groups": [[c, a, b]], "histograms": True},
            {"type": "pair", "groups": [[b, a], [c]], "histograms": False}]
    assert h.send(Go(0, 0, SUB, plan)) == []
    (r0,) = h.tick(SUB)
    assert isinstance(r0, SubintervalResult) and r0.workload_ids == [a, b, c]
    each = _batch(r0, 0)
    assert [each.workload(i).ops() for i in range(3)] == [100, 200, 50]
    assert _batch(r0, 1).workload(0).ops() == 350
    pair = GroupStats.from_wire(r0.rollups[2], histograms=False)
    assert pair.batch.rows.size == 0 and pair.pct is not None
    assert pair.batch.counters[:, 0, 0].tolist() == [300, 50]
    want = view_percentiles(group_batch(each, np.array([0, 0, 1]), 2))
    assert np.array_equal(pair.pct, want, equal_nan=True)
    assert not np.isnan(pair.pct[:, 0]).any()  # the overall view had reads


@pytest.mark.parametrize(("plan", "text"), [
    ([{"type": "lun", "groups": [["h1:/dev/fake0:a"]], "histograms": False}],
     "does not put each of the host's 2 workloads in exactly one group"),
    ([{"type": "lun", "groups": [["h1:/dev/fake0:a", "h1:/dev/fake0:b"],
                                 ["h1:/dev/fake0:b"]], "histograms": False}],
     "exactly one group"),
    ([{"type": "lun", "groups": [["h1:/dev/fake0:a", "h1:/dev/fake0:b"]]}], "lacks"),
    ([{"type": "lun", "groups": "all", "histograms": True}], "malformed"),
])
def test_a_rollup_plan_that_does_not_fit_the_workloads_is_fatal(plan: list[dict[str, Any]],
                                                                text: str) -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _create(h, 2, "h1:/dev/fake0:b")
    (err,) = h.send(Go(3, 0, SUB, plan))
    assert isinstance(err, Error) and err.fatal and err.kind == "protocol"
    assert "Go of step 3" in err.message and text in err.message
    assert not [c for c in h.backend.calls if c[0] == "go"]  # no I/O was started
    assert h.session.closed


@pytest.mark.parametrize("fold", [False, True])
def test_window_after_the_step_adds_the_kept_subintervals_up(fold: bool) -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a", iops=100.0)
    _create(h, 2, "h1:/dev/fake0:b", iops=200.0)
    assert _go(h, 0, 0, SUB, keep_from=1, keep_to=3, fold=fold) == []
    h.send(Continue(2))
    h.send(Continue(3))
    h.send(Continue(4))
    h.send(Stop(4))
    for k in range(4):
        h.tick((k + 1) * SUB)
    (edit_ack,) = h.send(EditWorkload(3, "h1:/dev/fake0:a", {"iops": 400.0}))  # from 4 on
    assert isinstance(edit_ack, Ack)
    *_, stopped = h.tick(5 * SUB)
    assert stopped == Stopped(0, 4)
    (win,) = h.send(WindowRequest(7, 0, 1, 3))
    assert isinstance(win, WindowResult) and (win.seq, win.first, win.last) == (7, 1, 3)
    batch = StatsBatch.from_wire(win.stats)
    assert win.workload_ids == ["h1:/dev/fake0:a", "h1:/dev/fake0:b"]
    assert [batch.workload(i).ops() for i in range(2)] == [300, 600]
    (short,) = h.send(WindowRequest(8, 0, 1, 2))  # a Stop that crossed a result
    assert isinstance(short, WindowResult)
    assert StatsBatch.from_wire(short.stats).workload(1).ops() == 400
    for seq, first, last, text in ((9, 0, 3, "not kept"), (10, 1, 4, "not kept"),
                                   (11, 3, 3, "added its subintervals up" if fold else "")):
        (got,) = h.send(WindowRequest(seq, 0, first, last))
        if not text:
            assert isinstance(got, WindowResult)
            continue
        assert isinstance(got, Error) and got.seq == seq and got.kind == "config"
        assert text in got.message and not got.fatal
    (other,) = h.send(WindowRequest(12, 5, 1, 3))
    assert isinstance(other, Error) and "step 5's subintervals are not kept" in other.message
    # the next Go drops what was kept
    _go(h, 1, 10 * SUB, SUB)
    assert h.session.window_store is not None and h.session.window_store.step == 1


def test_missing_continue_is_master_late() -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _go(h, 0, 0, SUB)
    h.tick(SUB)
    msgs = h.tick(2 * SUB)  # subinterval 2 started without a Continue
    err, stopped = msgs
    assert isinstance(err, Error) and err.kind == "late" and "subinterval 2" in err.message
    assert stopped == Stopped(0, 0)
    assert ("halt", None) in h.backend.calls
    # the master's crossing Continue is tolerated, and the host is usable again
    assert h.send(Continue(3)) == []
    assert h.send(Ping(9, 0))[0] == Pong(9, 0, 2 * SUB)


def test_backend_detected_late_buffer() -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    h.backend.late_at = 1
    _go(h, 0, 0, SUB)
    h.send(Continue(2))
    h.tick(SUB)
    err, stopped = h.tick(2 * SUB)
    assert isinstance(err, Error) and err.kind == "late" and "not ready" in err.message
    assert isinstance(stopped, Stopped)


def test_stop_in_the_past_ends_at_once() -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _go(h, 0, 0, SUB)
    h.tick(SUB)
    msgs = h.send(Stop(-1))
    assert msgs == [Stopped(0, 0)]


def test_hello_and_bye_in_one_read_are_answered_hello_reply_then_bye() -> None:
    h = Harness()
    h.session.on_bytes(h.master.send(Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0))
                       + h.master.send(Bye("changed my mind")))
    assert [type(m) for m in h.take()] == [HelloReply, Bye]
    assert h.session.closed and h.master.state is State.CLOSED


def test_messages_in_one_read_are_answered_each_in_the_state_it_left() -> None:
    """A WindowRequest and the next Go in one read: the WindowResult is answered in IDLE,
    before the Go moves to RUNNING (where a WindowResult may not be sent)."""
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    _go(h, 0, 0, SUB, keep_from=0, keep_to=0, fold=True)
    h.send(Stop(0))
    assert h.tick(SUB)[-1] == Stopped(0, 0)
    h.session.on_bytes(h.master.send(WindowRequest(5, 0, 0, 0))
                       + h.master.send(Go(1, 10 * SUB, SUB, _plan(h))))
    (win,) = FrameDecoder().feed(bytes(h.out))
    assert isinstance(win, WindowResult) and win.seq == 5
    assert h.session.conv.state is State.RUNNING and not h.session.closed


def test_eof_halts() -> None:
    h = Harness()
    h.hello()
    h.session.on_eof()
    assert h.session.closed and ("halt", None) in h.backend.calls
    assert h.session.failure is None and not h.out  # the master is gone: no error of ours


@pytest.mark.parametrize("cut", [1, 5, 6, 12])
def test_eof_inside_a_frame_is_a_fatal_protocol_error(cut: int) -> None:
    h = Harness()
    h.hello()
    h.session.on_bytes(h.master.send(Ping(1, 2))[:cut])
    assert h.take() == [] and not h.session.closed  # a partial frame waits for the rest
    h.session.on_eof()
    (err,) = h.take()
    assert isinstance(err, Error) and err.fatal and err.kind == "protocol"
    assert err.message == (f"the master's stream ended inside a frame ({cut} bytes of it "
                           "received)")
    assert h.session.closed and h.session.failure == f"protocol: {err.message}"
    assert ("halt", None) in h.backend.calls


def test_garbage_is_a_fatal_protocol_error() -> None:
    h = Harness()
    h.session.on_bytes(b"hello there\n")
    assert h.session.closed
    assert b"protocol" in bytes(h.out)
    assert h.session.failure is not None and h.session.failure.startswith("protocol: bad frame")


def test_an_error_from_the_master_is_a_fatal_protocol_error() -> None:
    """Error is the slave's message: a master's, fatal or not, is out of order (a fatal one
    used to close the conversation silently, leaving the session open)."""
    from protocol.codec import encode

    h = Harness()
    h.hello()
    h.session.on_bytes(encode(Error(kind="io", message="from the master", fatal=True)))
    (err,) = FrameDecoder().feed(bytes(h.out))
    assert isinstance(err, Error) and err.fatal and err.kind == "protocol"
    assert err.message == "master sent Error in state IDLE"
    assert h.session.closed


def test_version_mismatch_answered_with_fatal_error() -> None:
    h = Harness()
    from protocol.codec import encode

    h.session.on_bytes(encode(Hello(PROTOCOL_VERSION + 1, "9", "h1", 0)))
    assert h.session.closed
    from protocol.codec import FrameDecoder

    (err,) = FrameDecoder().feed(bytes(h.out))
    assert isinstance(err, Error) and err.kind == "version" and err.fatal


def test_events_travel_as_log_messages() -> None:
    h = Harness()
    h.hello()
    h.session.event("WARNING", "engine fallback to threadpool", lun="/dev/fake0")
    (msg,) = h.take()
    assert isinstance(msg, Log) and msg.context == {"lun": "/dev/fake0"}


def test_a_lun_formatted_after_discovery_is_refused_for_writes(loop_device: Any) -> None:
    # the real describe: discovery saw a blank device, then somebody made a file system on it
    require_tools("mkfs.ext4")
    dev = loop_device(32 << 20)
    h = Harness()
    h.session.describe = lunmod.lun_for_path
    h.hello()
    h.session.luns[dev.path] = describe_block_device(dev.path)
    subprocess.run(["mkfs.ext4", "-q", "-F", dev.path], check=True, capture_output=True)
    (err,) = _create(h, 1, f"h1:{dev.path}:w", dev.path, read_fraction=0.5)
    assert isinstance(err, Error) and err.kind == "preflight", err
    assert dev.path in err.message and "ext4" in err.message
    (ack,) = _create(h, 2, f"h1:{dev.path}:r", dev.path, read_fraction=1.0)
    assert isinstance(ack, Ack)


def test_a_lun_that_did_not_answer_its_probe_is_not_read_for_its_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's check reads the LUN (O_DIRECT): a device discovery found unanswering
    (stuck) would hold it for good. It is listed with no engine, and never asked; a device
    that answered is."""
    def lun(name: str, unanswered: bool) -> LunInfo:
        return LunInfo(path=f"/dev/{name}", kind="block", name=name, size_bytes=1 << 30,
                       logical_block_bytes=512, physical_block_bytes=4096,
                       unanswered=unanswered)

    monkeypatch.setattr(lunmod, "discover_block_devices",
                        lambda **_: [lun("stuck0", True), lun("good0", False)])
    h = Harness()
    asked: list[str] = []

    def engine_for(lun: LunInfo) -> str:
        asked.append(lun.path)
        return "fake"

    monkeypatch.setattr(h.backend, "engine_for", engine_for)
    h.hello()
    *_, reply = h.send(DiscoverLuns(9, files=[]))
    assert isinstance(reply, LunList)
    engines = {e["info"]["path"]: e["attributes"]["engine"] for e in reply.luns}
    assert engines == {"/dev/stuck0": "unavailable", "/dev/good0": "fake"}
    assert asked == ["/dev/good0"]
