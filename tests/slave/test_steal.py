"""The host's steal as a test's excuse (``tests.slave.steal``): a failed check skips only where
the host took more than ``LIMIT`` of the CPUs over the stretch; otherwise it fails."""

from __future__ import annotations

import os

import pytest

from tests.slave import steal as steal_mod
from tests.slave.steal import LIMIT, HostSteal, steal_s


@pytest.mark.parametrize(("taken_share", "skips"), [(0.0, False), (LIMIT / 2, False),
                                                     (LIMIT * 2, True), (0.5, True)])
def test_a_failed_check_skips_only_where_the_host_took_the_cpus(
        monkeypatch: pytest.MonkeyPatch, taken_share: float, skips: bool) -> None:
    clock = iter([99.0, 100.0, 102.0])  # made, then a stretch of 2 s
    stolen = iter([49.0, 50.0, 50.0 + taken_share * 2.0 * (os.cpu_count() or 1)])
    monkeypatch.setattr(steal_mod.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(steal_mod, "steal_s", lambda: next(stolen))
    with HostSteal() as steal:
        pass
    assert steal.share == pytest.approx(taken_share)
    outcome = pytest.skip.Exception if skips else AssertionError
    with pytest.raises(outcome, match=r"CV 1\.5 over"), steal.excused("gaps read 1.5"):
        raise AssertionError("CV 1.5 over 1.2")
    with steal.excused("a check that holds"):  # nothing to excuse
        pass


def test_the_machines_steal_is_read() -> None:
    assert steal_s() >= 0.0
