"""Which CPUs a host's worker processes run on: the ``worker_cpus`` setting.

Owns the setting's text form, shared by the master (which checks it in the test file) and the
slave (which gets it on its command line and checks it against the CPUs it may use). Pure but for
``usable_cpus``.

Forms: ``auto`` (the default: one worker per CPU the slave may use, each pinned to its CPU),
``unpinned`` (as many workers, left to the kernel's scheduler), or a CPU list in the kernel's
``cpulist`` format (``0-3,8,10-11``: one worker per listed CPU, pinned to it).

``usable_cpus`` is the one place anything of ivypy asks the kernel which CPUs it may use (the
slave's workers, the master's writer threads, ``fio-pctiles``'s readers).
"""

from __future__ import annotations

import os
import re
from typing import Final

AUTO: Final = "auto"
UNPINNED: Final = "unpinned"
MAX_CPU: Final = 65535  # far above any machine's CPU count: a typo, not a CPU
_ITEM: Final = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - Linux has it
        return list(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]`` (sorted, each CPU once). ``ValueError`` names the
    part that is wrong."""
    cpus: set[int] = set()
    if not text.strip():
        raise ValueError("empty CPU list")
    for part in text.split(","):
        item = part.strip()
        m = _ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"{item!r} is not a CPU number or a range like 0-3")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range {item!r} runs backwards")
        if hi > MAX_CPU:
            raise ValueError(f"CPU {hi} is out of range (0-{MAX_CPU})")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (the inverse of ``parse_cpu_list``)."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def check_setting(text: str) -> str:
    """The setting normalised (``auto``, ``unpinned`` or a canonical CPU list); ``ValueError``
    when it is none of these."""
    word = text.strip().lower()
    if word in (AUTO, UNPINNED):
        return word
    return format_cpu_list(parse_cpu_list(text))


def worker_cpus(setting: str, usable: list[int]) -> list[int | None]:
    """One entry per worker: the CPU it is pinned to, or ``None`` (not pinned). ``usable``: the
    CPUs the slave may run on. ``ValueError`` when the setting names a CPU outside ``usable``."""
    word = check_setting(setting)
    if word == AUTO:
        return list(usable)
    if word == UNPINNED:
        return [None] * len(usable)
    listed = parse_cpu_list(word)
    missing = sorted(set(listed) - set(usable))
    if missing:
        raise ValueError(
            f"CPU {format_cpu_list(missing)} is not available to the slave on this host "
            f"(it may use {format_cpu_list(usable) or 'none'})"
        )
    return list(listed)
