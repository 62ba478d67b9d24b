"""A slave session's LUN locks (``slave.lunlock``): two sessions (here two ``LunLocks``, each its
own open file descriptions, as two ivypy runs' slaves) on one LUN, each asking shared or not:
which is refused, naming the host, the LUN and why; a lock let go is the next one's."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import PreflightError
from slave.lunlock import LunLocks

#: (the first run's choice, the second's, the second's refusal or None: it runs too)
CASES = [
    (False, False, "(it holds it for itself)"),
    (False, True, "(it holds it for itself)"),
    (True, False, "(it shares it, and this test does not say shared: true)"),
    (True, True, None),
]


@pytest.mark.parametrize(("first", "second", "why"), CASES)
def test_a_lun_another_run_holds_is_refused_unless_both_share(
        tmp_path: Path, first: bool, second: bool, why: str | None) -> None:
    lun = tmp_path / "lun"
    lun.write_bytes(b"\0" * 4096)
    a, b = LunLocks(), LunLocks()
    a.take(str(lun), first, "h1")
    try:
        if why is None:
            b.take(str(lun), second, "h1")
            assert a.shared(str(lun)) is b.shared(str(lun)) is True
            return
        with pytest.raises(PreflightError) as info:
            b.take(str(lun), second, "h1")
        assert str(info.value) == (
            f"host h1: LUN {lun} is in use by another ivypy run {why}: run them one after the "
            "other, or say shared: true on the LUN's luns entry in both tests to let them use "
            "it together")
        assert b.shared(str(lun)) is None
    finally:
        a.release()
        b.release()


def test_a_released_lock_is_the_next_runs_and_a_session_asks_once(tmp_path: Path) -> None:
    lun = tmp_path / "lun"
    lun.write_bytes(b"\0" * 4096)
    link = tmp_path / "link"
    link.symlink_to(lun)
    a, b = LunLocks(), LunLocks()
    a.take(str(lun), False, "h1")
    a.take(str(lun), False, "h1")  # a second workload on it: the lock it holds
    with pytest.raises(PreflightError):
        b.take(str(link), False, "h1")  # the same inode by another name
    with pytest.raises(PreflightError, match="chosen both shared and not"):
        a.take(str(lun), True, "h1")
    a.release()
    b.take(str(link), False, "h1")
    b.release()


def test_a_lun_it_cannot_open_is_left_to_the_engine(tmp_path: Path) -> None:
    """No such LUN (or none this user reads): no lock, and no refusal here: the engine's own
    open names the problem."""
    locks = LunLocks()
    locks.take(str(tmp_path / "gone"), False, "h1")
    assert locks.shared(str(tmp_path / "gone")) is None


def test_a_character_device_is_not_locked() -> None:
    """``/dev/null`` (a test's LUN) holds no data: two sessions on it run, none locks it."""
    a, b = LunLocks(), LunLocks()
    a.take("/dev/null", False, "h1")
    b.take("/dev/null", False, "h1")
    assert a.shared("/dev/null") is b.shared("/dev/null") is None
