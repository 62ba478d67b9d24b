"""master.run.rollupplan: each rollup type's plan (the host groups the slaves add up, the
instance of each group and of each workload, whether the groups' histograms are sent) against a
plain reference: a key per workload, the instances in order of first appearance, each host's
groups in order of first appearance."""

from __future__ import annotations

import numpy as np
import pytest

from master.config.schema import LunChoice, RollupSpec, WorkloadSpec
from master.run.rollupplan import type_plan
from master.run.workloads import Lun, SelectedLun, WorkloadInstance, rollup_key, rollup_keys
from protocol.params import WorkloadParams

SPECS = [RollupSpec("all", (), builtin=True), RollupSpec("host", (), builtin=True),
         RollupSpec("lun", (), builtin=True), RollupSpec("workload", (), builtin=True),
         RollupSpec("vendor", ("vendor",)), RollupSpec("vendor+model", ("vendor", "model")),
         RollupSpec("pool", ("pool",))]


def _fleet(rng: np.random.Generator, n_hosts: int) -> tuple[list[str], dict[str, list[str]],
                                                             list[WorkloadInstance]]:
    """Hosts (some with no workloads), each host's workload ids, every workload host by host:
    LUNs of random vendors and models (a ``pool`` attribute on some only), workloads of
    random names in random order."""
    hosts = [f"h{i}" for i in range(n_hosts)]
    ids_of_host: dict[str, list[str]] = {}
    insts: list[WorkloadInstance] = []
    for h in hosts:
        if rng.random() < 0.2:
            continue
        luns = []
        for li in range(int(rng.integers(1, 5))):
            attrs = {"vendor": str(rng.choice(["ACME", "Hitachi"])),
                     "model": str(rng.choice(["F9", "F7", "X1"]))}
            if rng.random() < 0.5:
                attrs["pool"] = str(rng.integers(0, 3))
            luns.append(SelectedLun(Lun(h, f"/dev/sd{li}", 1 << 30, 512, attrs, (), {}), True,
                                    (0,)))
        ids = []
        for j in rng.permutation(int(rng.integers(1, 9))).tolist():
            sl = luns[int(rng.integers(0, len(luns)))]
            wid = f"{h}:{sl.lun.path}:w{j}"
            if wid in ids:
                continue
            spec = WorkloadSpec(name=f"w{j}", luns=LunChoice(), iosequencer="random_steady")
            insts.append(WorkloadInstance(wid, f"w{j}", h, sl, spec, WorkloadParams(),
                                          dict(sl.lun.attributes)))
            ids.append(wid)
        ids_of_host[h] = ids
    return hosts, ids_of_host, insts


def _key(spec: RollupSpec, inst: WorkloadInstance) -> str:
    """The instance a workload is in, spelled out (the reference)."""
    if spec.type == "all":
        return "all"
    if spec.type == "workload":
        return inst.id
    if spec.type == "lun":
        return f"{inst.host}:{inst.lun.lun.path}"
    if spec.type == "host":
        return inst.host
    return "+".join(inst.attributes.get(a, "") for a in spec.attributes)


def _reference(spec: RollupSpec, hosts: list[str], ids_of_host: dict[str, list[str]],
               insts: list[WorkloadInstance]) -> tuple[tuple[str, ...], list[int],
                                                       dict[str, list[list[str]]], list[int]]:
    keys = [_key(spec, i) for i in insts]
    index: dict[str, int] = {}
    inst_of = [index.setdefault(k, len(index)) for k in keys]
    groups: dict[str, list[list[str]]] = {}
    hg_inst: list[int] = []
    at = 0
    for h in hosts:
        local: dict[str, list[str]] = {}
        for w in ids_of_host.get(h, []):
            local.setdefault(keys[at], []).append(w)
            at += 1
        groups[h] = list(local.values())
        hg_inst += [index[k] for k in local]
    return tuple(index), inst_of, groups, hg_inst


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_hosts", [1, 3, 20])
def test_every_types_plan_is_the_references(seed: int, n_hosts: int) -> None:
    hosts, ids_of_host, insts = _fleet(np.random.default_rng([seed, n_hosts]), n_hosts)
    for spec in SPECS:
        for histograms in (False, True):
            plan = type_plan(spec, hosts, ids_of_host, insts, histograms)
            names, inst_of, groups, hg_inst = _reference(spec, hosts, ids_of_host, insts)
            assert plan.names == names, spec.type
            assert plan.inst_of_workload.tolist() == inst_of, spec.type
            assert plan.groups == groups, spec.type
            assert plan.grouping.of_workload.tolist() == hg_inst, spec.type
            assert plan.grouping.names == names
            spread = len(set(hg_inst)) < len(hg_inst)  # an instance with groups on two hosts
            assert plan.histograms == (spread or histograms), spec.type


def test_keys_of_many_workloads_are_each_workloads_key() -> None:
    _, _, insts = _fleet(np.random.default_rng(9), 10)
    for spec in SPECS:
        assert rollup_keys(spec, insts) == [_key(spec, i) for i in insts]
        assert [rollup_key(spec, i) for i in insts] == [_key(spec, i) for i in insts]
    assert rollup_keys(SPECS[0], []) == []
    assert rollup_key(SPECS[5], insts[0]) == (
        f"{insts[0].attributes['vendor']}+{insts[0].attributes['model']}")
    assert rollup_key(SPECS[6], insts[0]) == insts[0].attributes.get("pool", "")
