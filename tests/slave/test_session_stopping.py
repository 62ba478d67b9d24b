"""A long handler (a file LUN's layout, during discovery) gives up as soon as the slave is to
stop (``SlaveSession.stopping``: a signal, or the master gone): nothing more is answered,
and no file is left at the layout's path, so the next discovery lays it out again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from protocol.messages import DiscoverLuns, Hello, HelloReply, Log, LunList, Message, Ping
from protocol.state import Conversation, Role
from protocol.version import PROTOCOL_VERSION
from slave import luns as lunmod
from slave.lun_mark import MARK_OK
from slave.session import SlaveSession
from tests.slave.test_session import FakeBackend

CHUNK = 64 << 10
SIZE = 4 << 20  # 64 pieces


def _session(out: bytearray, asked: list[int], stop_at: int | None) -> SlaveSession:
    def stopping() -> bool:
        asked.append(1)
        return stop_at is not None and len(asked) >= stop_at

    return SlaveSession(FakeBackend(), out.extend, lambda: 0, stopping=stopping)


def _said(master: Conversation, out: bytearray) -> list[Message]:
    msgs = master.receive_data(bytes(out))
    out.clear()
    return msgs


def test_a_layout_is_abandoned_when_the_slave_is_to_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lunmod, "LAYOUT_CHUNK_BYTES", CHUNK)
    path = tmp_path / "lun"
    discover = DiscoverLuns(1, files=[{"path": str(path), "size_bytes": SIZE, "create": True,
                                       "layout": "random"}])
    out, asked = bytearray(), []
    session = _session(out, asked, stop_at=5)
    master = Conversation(Role.MASTER, host="h1")
    session.on_bytes(master.send(Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0)))
    assert [type(m) for m in _said(master, out)] == [HelloReply]
    # a Ping in the same read as the discovery: not answered either, the slave is stopping
    session.on_bytes(master.send(discover) + master.send(Ping(2, 0)))
    assert len(asked) == 5, "asked once per file LUN, then after each piece of the layout"
    said = _said(master, out)
    assert not [m for m in said if not isinstance(m, Log)], said  # progress, if anything
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no file, no hidden part left"

    # the next slave lays it out again, whole and marked
    again = _session(out, [], stop_at=None)
    master = Conversation(Role.MASTER, host="h1")
    again.on_bytes(master.send(Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0)))
    _said(master, out)
    again.on_bytes(master.send(discover))
    (found,) = [m for m in _said(master, out) if isinstance(m, LunList)]
    (entry,) = [e for e in found.luns if e["info"]["path"] == str(path)]
    assert entry["info"]["created"] and entry["info"]["mark"] == MARK_OK
    assert path.stat().st_size == SIZE and np.fromfile(path, dtype=np.uint8).any()
