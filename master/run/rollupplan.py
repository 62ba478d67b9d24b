"""A step's rollup plan for one rollup type: which of each host's workloads its slave adds up
into one group, and the instance each group belongs to (``Go.rollups`` in ``protocol/SPEC.md``).

Owns ``TypePlan`` and ``type_plan``. The recorder (``master.run.recorder``) makes one per rollup
type at each step's start, before the Go: at 1,000 hosts x 100 workloads that is five passes
over 100,000 workloads, so each is a list comprehension over the workloads and one per host,
without a call per workload (0.48 -> 0.24 s for the five there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from master.analysis import rollup as ru
from master.config import RollupSpec
from master.run.workloads import WorkloadInstance, rollup_keys


@dataclass(frozen=True)
class TypePlan:
    """One rollup type's plan: its instances, and the host groups the slaves add up."""

    names: tuple[str, ...]  # instances, in order of first appearance over the plan's workloads
    groups: dict[str, list[list[str]]]  # host → its groups (workload ids)
    grouping: ru.Grouping  # host group (hosts in plan order) → instance
    inst_of_workload: npt.NDArray[np.intp]  # instance of each workload, in plan order
    histograms: bool  # the slaves send histograms (else percentile tables)


def type_plan(spec: RollupSpec, hosts: Sequence[str], ids_of_host: Mapping[str, list[str]],
              insts: Sequence[WorkloadInstance], histograms: bool) -> TypePlan:
    """The plan of rollup type ``spec`` over the workloads of ``hosts`` in that order
    (``ids_of_host``: each host's workload ids; ``insts``: every workload, host by host, in
    the same order). An instance whose workloads lie on more than one host has a group on
    each, whose histograms the slaves send; so does every instance where ``histograms``."""
    by_key = ru.Grouping.from_keys(spec.type, rollup_keys(spec, insts))
    inst_list = by_key.of_workload.tolist()
    n = by_key.n
    groups: dict[str, list[list[str]]] = {}
    hg_inst: list[int] = []
    at = 0
    for h in hosts:
        ws = ids_of_host.get(h, [])
        part = inst_list[at:at + len(ws)]
        at += len(ws)
        if n == len(inst_list):  # an instance a workload (``workload``)
            groups[h] = [[w] for w in ws]
            hg_inst += part
        elif n == 1:  # one instance (``all``)
            groups[h] = [list(ws)] if ws else []
            hg_inst += part[:1]
        else:  # the host's groups in order of first appearance
            local: dict[int, list[str]] = {}
            for w, i in zip(ws, part, strict=True):
                group = local.get(i)
                if group is None:
                    local[i] = [w]
                else:
                    group.append(w)
            groups[h] = list(local.values())
            hg_inst += list(local)
    names = by_key.names
    of_hg = np.array(hg_inst, dtype=np.intp)
    spread = bool(np.any(np.bincount(of_hg, minlength=n) > 1))
    return TypePlan(names, groups, ru.Grouping(spec.type, names, of_hg),
                    by_key.of_workload, spread or histograms)
