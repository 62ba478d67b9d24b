"""``Run._send_edits``: one ``EditWorkloads`` request per host; a host's refusal names host and
workload, and says which hosts' edits were made (those are taken into the settings in force
from the subinterval each host announced, and only those)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from master.run.fleet import Fleet
from master.run.lifecycle import Run
from master.run.settings import Settings
from protocol.errors import HostError
from protocol.messages import Ack, Error
from protocol.params import WorkloadParams


class Session:
    def __init__(self, reply: Ack | Error) -> None:
        self.reply = reply
        self.requests: list[list[tuple[str, dict[str, Any]]]] = []

    async def edit_many(self, edits: list[tuple[str, dict[str, Any]]],
                        send_timeout_s: float | None = None) -> Ack | Error:
        self.requests.append(list(edits))
        return self.reply


def _send(replies: dict[str, Ack | Error]) -> tuple[Any, SimpleNamespace, list[Any]]:
    fleet = Fleet(time.monotonic_ns)
    fleet.sessions = {h: Session(r) for h, r in replies.items()}  # type: ignore[misc]  # fakes
    run = SimpleNamespace(sessions=fleet.sessions, settings=Settings(), fleet=fleet)
    changes = [(SimpleNamespace(host=h, id=f"{h}:/dev/x:w{i}"),
                WorkloadParams(iops=10.0 * i + 5, read_fraction=0.5))
               for i in range(3) for h in replies]
    for inst, _ in changes:
        run.settings.placed(inst.id, WorkloadParams(iops=1.0, read_fraction=0.5))
    try:
        out: Any = asyncio.run(Run._send_edits(run, None, changes, source="dfc"))  # type: ignore[arg-type]
    except HostError as exc:
        out = exc
    return out, run, changes


def test_one_request_per_host_and_the_latest_subinterval() -> None:
    got, run, changes = _send({"h1": Ack(1, 7), "h2": Ack(1, 8)})
    assert got == 8
    for host in ("h1", "h2"):
        (request,) = run.sessions[host].requests
        # what differs from what the slave holds: the rate alone
        assert request == [(inst.id, {"iops": p.iops}) for inst, p in changes
                           if inst.host == host]
    assert run.settings.pending() == {inst.id: {"h1": 7, "h2": 8}[inst.host]
                                      for inst, _ in changes}
    run.settings.advance(8)
    assert all(run.settings[inst.id] == p for inst, p in changes)


@pytest.mark.parametrize(("replies", "held"), [
    ({"h1": Error("config", "edit of h2:/dev/x:w1: no", 1, "h2:/dev/x:w1"), "h2": Ack(1, 5)},
     ["h2"]),
    ({"h1": Error("config", "edit of h1:/dev/x:w0: no", 1, "h1:/dev/x:w0")}, []),
    # as a slave words it: naming its host, which the error then names once
    ({"h1": Error("config", "host h1: edit of h1:/dev/x:w0: no", 1, "h1:/dev/x:w0")}, []),
])
def test_a_refusal_names_host_and_workload_and_what_was_made(
    replies: dict[str, Ack | Error], held: list[str]
) -> None:
    got, run, changes = _send(replies)
    assert isinstance(got, HostError) and got.host == "h1"
    err = replies["h1"]
    assert isinstance(err, Error)
    reason = err.message.removeprefix("host h1: ")
    assert f"dfc edit of {err.workload_id} refused: {reason}" in str(got)
    assert str(got).startswith("host h1: ") and str(got).count("host h1") == 1
    if held:
        assert "the edits on h2 were made and hold from subinterval 5" in str(got)
    else:
        assert "were made" not in str(got)
    # the rows show what holds: the hosts that took their edits, and only them
    assert run.settings.pending() == {inst.id: 5 for inst, _ in changes if inst.host in held}
