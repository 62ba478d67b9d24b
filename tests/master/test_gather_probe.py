"""``Gathering``'s gather of one source never ends the run and never outlives its timeout: a
source whose output or URL breaks something, or whose program leaves a helper holding its
stdout, is a failed outcome naming it (the first gather of a step, ``probe``, included);
an interrupt or a cancellation still goes through. A ``config_command`` likewise: a failure
is an event, and element types whose names make the same file name get a file each."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from master.config.gather import GatherSource, MetricPattern
from master.gather import gathering as gathering_module
from master.gather.gathering import Gathering
from master.gather.runner import REAP_GRACE_S
from master.results.output import RunOutput

PRINT = GatherSource("arr", "command", 5.0, argv=(sys.executable, "-c", "print('a,b,c,1')"))


def _probe(tmp_path: Path, source: GatherSource) -> tuple[str, list[str]]:
    """The failure of ``source``'s probe outcome, and the events."""
    events: list[str] = []

    def event(level: str, message: str, **_: Any) -> None:
        events.append(message)

    gathering = Gathering([source], RunOutput(tmp_path), event, time.monotonic_ns)
    asyncio.run(gathering.probe([]))
    (src,) = gathering.sources
    assert src.outcomes[-2].sample is None
    return src.outcomes[-2].failure, events


@pytest.mark.parametrize(("source", "failure"), [
    # a CSV field over csv's 128 KiB limit
    (GatherSource("arr", "command", 5.0,
                  argv=(sys.executable, "-c", "print('[' + 'x' * 200000 + ']')")),
     "gave no readings (line 1: bad CSV (field larger than field limit (131072)))"),
    # a host name the config would refuse, given here as it is
    (GatherSource("node", "prometheus", 2.0, url="http://node..lab:9100/metrics",
                  metrics=(MetricPattern("x", False),), element_type="disk",
                  instance_label="device"),
     "cannot connect to node..lab:9100: bad host name"),
])
def test_a_source_that_breaks_a_gather_is_a_failed_outcome(tmp_path: Path, source: GatherSource,
                                                           failure: str) -> None:
    got, _ = _probe(tmp_path, source)
    assert got.startswith(failure)


def test_an_unexpected_exception_is_a_failed_outcome_naming_the_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, *, numeric: bool = True) -> Any:
        raise RuntimeError("parser bug\non two lines")

    monkeypatch.setattr(gathering_module, "parse_lines", broken)
    failure, _ = _probe(tmp_path, PRINT)
    assert failure == "unexpected RuntimeError gathering source arr: parser bug on two lines"


def test_an_unexpected_exception_in_config_command_is_an_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, *, numeric: bool = True) -> Any:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(gathering_module, "parse_lines", broken)
    events: list[str] = []
    source = GatherSource("arr", "command", 5.0, argv=("true",),
                          config_argv=(sys.executable, "-c", "print('a,b,c,d')"))
    gathering = Gathering([source], RunOutput(tmp_path),
                          lambda _l, m, **_k: events.append(m), time.monotonic_ns)
    asyncio.run(gathering.configure())
    assert events == ["gather arr: config_command: unexpected RuntimeError gathering source "
                      "arr: parser bug; its elements have no attributes"]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, asyncio.CancelledError])
def test_an_interrupt_is_not_a_failed_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              exc: type[BaseException]) -> None:
    async def interrupted(argv: Any, timeout_s: float) -> str:
        raise exc

    monkeypatch.setattr(gathering_module, "run_command", interrupted)
    gathering = Gathering([PRINT], RunOutput(tmp_path), lambda *a, **k: None, time.monotonic_ns)
    with pytest.raises(exc):
        asyncio.run(gathering.probe([]))


def test_probe_is_bounded_by_the_source_timeout(tmp_path: Path) -> None:
    # its program left a helper in its own session (a daemon) holding its stdout
    source = GatherSource("arr", "command", 0.3, argv=("sh", "-c", "setsid sleep 6 & sleep 6"))
    t0 = time.monotonic()
    failure, _ = _probe(tmp_path, source)
    took_s = time.monotonic() - t0
    assert failure.startswith("did not finish within its timeout of 0.3s")
    # the helper lives 6 s; 2 s of slack for a loaded 2-core machine
    assert took_s < 0.3 + REAP_GRACE_S + 2, f"a probe with a 0.3 s timeout took {took_s:.1f}s"


def test_config_element_types_that_share_a_file_name_get_their_own_files(tmp_path: Path
                                                                         ) -> None:
    script = "print('a_b,e1,serial,1'); print('a/b,e2,model,x')"
    source = GatherSource("arr", "command", 5.0, argv=("true",),
                          config_argv=(sys.executable, "-c", script))
    output = RunOutput(tmp_path)
    gathering = Gathering([source], output, lambda *a, **k: None, time.monotonic_ns)
    asyncio.run(gathering.configure())
    output.close()
    folder = tmp_path / "gather/arr/config"
    assert {p.name: p.read_text().splitlines() for p in folder.iterdir()} == {
        "a_b.csv": ["element_instance,serial", "e1,1"],
        "a_b-2.csv": ["element_instance,model", "e2,x"]}
    assert gathering.attributes["arr"] == {"a_b": {"e1": {"serial": "1"}},
                                           "a/b": {"e2": {"model": "x"}}}


def test_config_attributes_named_as_the_files_own_column_are_renamed(tmp_path: Path) -> None:
    # an attribute called element_instance would overwrite each row's instance name
    script = "print('port,p1,element_instance,x'); print('port,p1,speed,32')"
    source = GatherSource("arr", "command", 5.0, argv=("true",),
                          config_argv=(sys.executable, "-c", script))
    output = RunOutput(tmp_path)
    events: list[str] = []
    gathering = Gathering([source], output, lambda _l, m, **_k: events.append(m),
                          time.monotonic_ns)
    asyncio.run(gathering.configure())
    output.close()
    assert (tmp_path / "gather/arr/config/port.csv").read_text().splitlines() == [
        "element_instance,metric_element_instance,speed", "p1,x,32"]
    assert events == ["gather arr: config_command: port attributes written element_instance "
                      "as metric_element_instance: their names are columns of the file's own"]
    # the join still reads the attribute by its own name
    assert gathering.attributes["arr"] == {"port": {"p1": {"element_instance": "x",
                                                           "speed": "32"}}}
