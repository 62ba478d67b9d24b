"""The ``worker_cpus`` setting: the kernel's cpulist format, both ways, and the choice of CPUs
per worker against the CPUs a slave may use."""

from __future__ import annotations

import os

import pytest

from protocol import cpulist
from protocol.cpulist import check_setting, format_cpu_list, parse_cpu_list, worker_cpus


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0", [0]),
        ("3", [3]),
        ("0-3", [0, 1, 2, 3]),
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("8,0-1", [0, 1, 8]),
        ("1,1,0-1", [0, 1]),
        (" 2 , 4-5 ", [2, 4, 5]),
        ("7-7", [7]),
        ("10-11,12", [10, 11, 12]),
    ],
)
def test_parse_cpu_list(text: str, cpus: list[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty CPU list"),
        ("  ", "empty CPU list"),
        ("a", "'a' is not a CPU number"),
        ("0,,1", "'' is not a CPU number"),
        ("0-", "'0-' is not a CPU number"),
        ("-1", "'-1' is not a CPU number"),
        ("1_0", "'1_0' is not a CPU number"),
        ("+1", "'+1' is not a CPU number"),
        ("0 - 3", "'0 - 3' is not a CPU number"),
        ("١", "'١' is not a CPU number"),  # an Arabic-Indic one: int() would take it
        ("3-1", "range '3-1' runs backwards"),
        ("0-70000", "CPU 70000 is out of range"),
    ],
)
def test_parse_cpu_list_refuses(text: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_cpu_list(text)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([0], "0"),
        ([0, 1, 2, 3], "0-3"),
        ([0, 1, 2, 3, 8], "0-3,8"),
        ([8, 0, 1, 1], "0-1,8"),
        ([1, 3, 5], "1,3,5"),
        ([], ""),
    ],
)
def test_format_cpu_list(cpus: list[int], text: str) -> None:
    assert format_cpu_list(cpus) == text
    if cpus:
        assert parse_cpu_list(text) == sorted(set(cpus))


@pytest.mark.parametrize(
    ("setting", "normal"),
    [("auto", "auto"), ("AUTO", "auto"), (" unpinned ", "unpinned"), ("3,0-2", "0-3"),
     ("5", "5")],
)
def test_check_setting(setting: str, normal: str) -> None:
    assert check_setting(setting) == normal


@pytest.mark.parametrize("setting", ["pinned", "all", "none", "0-3;8", ""])
def test_check_setting_refuses(setting: str) -> None:
    with pytest.raises(ValueError):
        check_setting(setting)


@pytest.mark.parametrize(
    ("setting", "usable", "cpus"),
    [
        ("auto", [0, 1], [0, 1]),
        ("auto", [2, 5, 7], [2, 5, 7]),
        ("unpinned", [0, 1, 2], [None, None, None]),
        ("1", [0, 1], [1]),
        ("5,2", [2, 5, 7], [2, 5]),
    ],
)
def test_worker_cpus(setting: str, usable: list[int], cpus: list[int | None]) -> None:
    assert worker_cpus(setting, usable) == cpus


def test_worker_cpus_names_the_cpus_the_slave_may_not_use() -> None:
    with pytest.raises(ValueError) as err:
        worker_cpus("0-3,9", [0, 1, 4])
    assert str(err.value) == (
        "CPU 2-3,9 is not available to the slave on this host (it may use 0-1,4)"
    )


def test_usable_cpus_follow_the_affinity_mask() -> None:
    whole = os.sched_getaffinity(0)
    assert cpulist.usable_cpus() == sorted(whole)
    last = max(whole)
    os.sched_setaffinity(0, {last})
    try:
        assert cpulist.usable_cpus() == [last]
    finally:
        os.sched_setaffinity(0, whole)
