"""The host's steal as a real-time test's excuse (``tests.slave.steal``, used by
tests/slave/conftest.py): a failed check is a skip only where the host took more than
``LIMIT`` of the CPUs over the test; otherwise it fails."""

from __future__ import annotations

import os

import pytest

from tests.slave.steal import LIMIT, HostSteal, excuse, steal_s


@pytest.mark.parametrize(("share", "skips"), [(0.0, False), (LIMIT, False), (LIMIT * 1.5, True),
                                              (0.37, True)])
def test_a_failed_check_is_excused_only_where_the_host_took_the_cpus(share: float,
                                                                     skips: bool) -> None:
    why = excuse(share, "AssertionError: (1, 1050)\nassert 250 <= 26")
    if skips:
        assert why is not None and f"{share:.1%} of the CPUs" in why
        assert why.endswith("a check failed: AssertionError: (1, 1050)")
    else:
        assert why is None


def test_the_share_is_the_steal_over_the_stretch_per_cpu() -> None:
    cpus = os.cpu_count() or 1
    clock = iter([100.0, 102.0])  # a stretch of 2 s
    stolen = iter([50.0, 50.0 + 0.25 * 2.0 * cpus])
    with HostSteal(lambda: next(clock), lambda: next(stolen)) as steal:
        pass
    assert steal.share == pytest.approx(0.25)


def test_the_machines_steal_is_read() -> None:
    assert steal_s() >= 0.0


def test_a_test_on_virtual_time_is_never_excused() -> None:
    assert excuse(0.37, "AssertionError: logs differ", virtual=True) is None
    assert excuse(0.37, "AssertionError: logs differ") is not None
