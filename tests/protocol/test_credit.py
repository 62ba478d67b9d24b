"""The credit rule (``protocol.credit``), table-driven: the master's answer after each
subinterval, the slave's grants, stops and lateness, buffers and an edit's first subinterval;
and a whole step of both sides together, for every length and end."""

from __future__ import annotations

import pytest

from protocol import credit
from protocol.credit import SlaveCredit

ANSWERS = [
    # k recorded, last (None: not known yet), n_max -> the master's answer
    (0, None, 10, ("continue", 2)),
    (5, None, 10, ("continue", 7)),
    (7, None, 10, ("continue", 9)),
    (8, None, 10, ("stop", 9)),
    (3, 4, 10, ("stop", 4)),  # last known to be the running one
    (4, 4, 10, ("stop", 4)),  # last is the one just recorded: stop now
    (6, 4, 10, ("stop", 6)),  # past it (a measure criterion met late)
    (3, 9, 10, ("continue", 5)),
    (0, None, 2, ("stop", 1)),
    (0, 0, 1, ("stop", 0)),
    (0, None, 1, ("stop", 0)),  # never a Stop after a subinterval the step does not have
    (3, 7, 5, ("stop", 4)),
]


@pytest.mark.parametrize(("k", "last", "n_max", "want"), ANSWERS)
def test_the_masters_answer(k: int, last: int | None, n_max: int,
                            want: credit.Answer) -> None:
    assert credit.answer(k, last, n_max) == want


@pytest.mark.parametrize(("n_max", "want"), [(1, True), (2, False), (5, False)])
def test_a_one_subinterval_step_stops_with_its_go(n_max: int, want: bool) -> None:
    assert credit.stop_at_go(n_max) is want


@pytest.mark.parametrize(("k", "last", "n_max", "over"),
                         [(8, None, 10, False), (9, None, 10, True), (4, 5, 10, False),
                          (5, 5, 10, True), (5, 12, 6, True)])
def test_step_over_once_a_stop_is_sent(k: int, last: int | None, n_max: int,
                                       over: bool) -> None:
    assert credit.step_over(k, last, n_max) is over


SLAVE = [
    # (events in order), then may_follow(k) for k in 0..5
    pytest.param([], [True, False, False, False, False, False], id="Go grants 0 and 1"),
    pytest.param([("continue", 2)], [True, True, False, False, False, False],
                 id="Continue(2)"),
    pytest.param([("continue", 3), ("continue", 2)], [True, True, True, False, False, False],
                 id="an older Continue takes nothing back"),
    pytest.param([("stop", 0, 0)], [True, True, True, True, True, True],
                 id="Stop(0): the step ends with 0"),
    pytest.param([("continue", 2), ("stop", 2, 1)], [True, True, True, True, True, True],
                 id="Stop(2) while 1 runs"),
    pytest.param([("continue", 2), ("stop", 0, 2)], [True, True, True, True, True, True],
                 id="a Stop crossing result 1 ends with 1"),
]


@pytest.mark.parametrize(("events", "follow"), SLAVE)
def test_the_slaves_credit(events: list[tuple[object, ...]], follow: list[bool]) -> None:
    c = SlaveCredit()
    for kind, *args in events:
        if kind == "continue":
            c.grant(int(args[0]))  # type: ignore[call-overload]
        else:
            after, next_result = args
            last = c.stop(int(after), int(next_result))  # type: ignore[call-overload]
            assert last == max(int(after), int(next_result) - 1)  # type: ignore[call-overload]
    assert [c.may_follow(k) for k in range(6)] == follow


def test_grant_says_whether_it_granted_anything() -> None:
    c = SlaveCredit()
    assert c.grant(2) and not c.grant(2) and not c.grant(1) and c.grant(5)
    assert c.granted == 5


@pytest.mark.parametrize(("collected", "granted", "ok"),
                         [(0, 1, False), (0, 2, True), (3, 4, False), (3, 5, True)])
def test_a_buffer_is_readied_once_its_next_subinterval_is_granted(collected: int, granted: int,
                                                                  ok: bool) -> None:
    assert credit.reusable(collected, granted) is ok
    assert credit.buffer_of(collected) == credit.buffer_of(credit.freed_for(collected))


@pytest.mark.parametrize(("next_result", "want"), [(None, -1), (0, 1), (7, 8)])
def test_an_edit_holds_from_the_subinterval_after_the_running_one(next_result: int | None,
                                                                  want: int) -> None:
    assert credit.effective(next_result) == want


@pytest.mark.parametrize("n_max", range(1, 8))
@pytest.mark.parametrize("last_known_at", [None, 0, 1, 2, 3])
def test_both_sides_together_run_every_subinterval_and_never_one_more(
        n_max: int, last_known_at: int | None) -> None:
    """A step of ``n_max`` subintervals whose end the master learns after recording
    ``last_known_at`` (its last then the one after it, as a met ``measure`` criterion's
    cooldown of one gives): the slave is never late, runs exactly the subintervals up to the
    end, and the master's loop ends with the last one."""
    fixed = last_known_at is None
    c = SlaveCredit()
    stop_sent = credit.stop_at_go(n_max)
    if stop_sent:
        c.stop(0, 0)
    last: int | None = None
    ran = []
    k = 0
    while True:
        assert k <= n_max, "ran past the step"
        ran.append(k)
        # the slave, at the end of k
        assert c.may_follow(k), f"the slave found no grant at the end of {k}"
        slave_done = c.ends_with(k)
        # the master, having recorded k
        if last_known_at is not None and k == last_known_at:
            last = min(k + 1, n_max - 1)
        if fixed and last is None:
            last = n_max - 1
        if not stop_sent:
            kind, sub = credit.answer(k, last, n_max)
            if kind == "stop":
                c.stop(sub, k + 1)
                stop_sent = True
                if sub == k:
                    assert c.ends_with(k)
                    break
            else:
                c.grant(sub)
        elif last is not None and last <= k:
            break
        if stop_sent and credit.step_over(k, last, n_max):
            assert c.ends_with(k)
            break
        assert not slave_done
        k += 1
    end = n_max - 1 if last is None else min(last, n_max - 1)
    assert ran == list(range(end + 1))
