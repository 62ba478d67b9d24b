"""Runs of subinterval numbers (``[first, last]`` each, in order): how a long step keeps the
subintervals of a phase, of a folded window or of a device's disagreement without a number
each, and how a message names them (``0-3, 7``). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Runs = list[list[int]]


def add(runs: Runs, k: int) -> None:
    """``k``, the next number after every one in ``runs``, added: the last run goes on, or a
    new one starts."""
    if runs and runs[-1][1] + 1 == k:
        runs[-1][1] = k
    else:
        runs.append([k, k])


def of(ks: Iterable[int]) -> Runs:
    """The runs of ``ks`` (in the order given)."""
    runs: Runs = []
    for k in ks:
        add(runs, k)
    return runs


def text(runs: Sequence[Sequence[int]]) -> str:
    """``0-3, 7``."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
