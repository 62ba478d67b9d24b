"""From discovered LUNs and the test's selectors to concrete workloads with resolved parameters.

Owns: which discovered LUNs a test uses on each host (``luns:`` selectors), which of those each
workload runs on, each workload instance's id (``host:lun:name``) and its parameters in bytes
for its LUN, rollup instance keys, and the edits ``edit_rollup`` makes. Pure: no I/O, no hosts.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from master.config import LunExtent, LunSelector, RollupEdit, RollupSpec, StepConfig, TestConfig
from master.config.schema import WorkloadEdit, WorkloadSpec
from master.live.editparse import unknown_instance_text
from master.run.settings import split_total
from protocol.errors import ConfigError
from protocol.params import WorkloadParams


@dataclass(frozen=True)
class Lun:
    """A discovered LUN on a host, as the master sees it."""

    host: str
    path: str
    size_bytes: int
    logical_block_bytes: int
    attributes: dict[str, str]
    in_use: tuple[str, ...]
    info: dict[str, Any]

    @classmethod
    def from_wire(cls, host: str, entry: Mapping[str, Any]) -> Lun:
        info = dict(entry["info"])
        return cls(
            host=host,
            path=str(info["path"]),
            size_bytes=int(info["size_bytes"]),
            logical_block_bytes=int(info.get("logical_block_bytes") or 512),
            attributes={str(k): str(v) for k, v in dict(entry.get("attributes", {})).items()},
            in_use=tuple(str(r) for r in entry.get("in_use", ())),
            info=info,
        )

    def match_attributes(self) -> dict[str, object]:
        return {**self.attributes, "host": self.host, "lun": self.path}


@dataclass(frozen=True)
class SelectedLun:
    """A LUN the test uses, with what its ``luns:`` entries (``selectors``, their indices)
    allow and ask for. ``lun.attributes["engine"]`` is the engine it is to run on: the
    entries' ``engine`` where one names it, else what discovery found ``auto`` gives."""

    lun: Lun
    allow_write: bool
    selectors: tuple[int, ...]
    engine: str = "auto"
    allow_engine_fallback: bool = False
    #: every entry that chose it says ``shared: true``: another run may use it too
    shared: bool = False


def selector_applies(sel: LunSelector, host: str) -> bool:
    return "all" in sel.hosts or host in sel.hosts


def file_requests(cfg: TestConfig, host: str) -> list[dict[str, Any]]:
    """The file LUNs host ``host`` must describe (and create) during discovery."""
    out: list[dict[str, Any]] = []
    for sel in cfg.luns:
        if sel.kind == "file" and selector_applies(sel, host) and sel.file:
            out.append({"path": sel.file, "size_bytes": sel.size_bytes, "create": sel.create,
                        "layout": sel.layout})
    return out


def device_globs(cfg: TestConfig, host: str) -> list[str]:
    """The block devices host ``host`` must describe during discovery, as path globs:
    ``["*"]`` (every one) when a selector by attributes applies to it, else the globs of its
    ``path`` selectors (none for a test of file LUNs alone: no device is read that the test
    does not name)."""
    globs: list[str] = []
    for sel in cfg.luns:
        if not selector_applies(sel, host):
            continue
        if sel.kind == "attributes":
            return ["*"]
        if sel.kind == "path" and sel.path and sel.path not in globs:
            globs.append(sel.path)
    return globs


def select_luns(
    cfg: TestConfig, discovered: Mapping[str, Sequence[Lun]]
) -> dict[str, list[SelectedLun]]:
    """The LUNs the test uses, per host, in discovery order. A selector that matches nothing
    on a host it names is a ``ConfigError`` naming the selector, its line and the host."""
    out: dict[str, list[SelectedLun]] = {}
    for host, luns in discovered.items():
        chosen: dict[str, tuple[bool, list[int]]] = {}
        for i, sel in enumerate(cfg.luns):
            if not selector_applies(sel, host):
                continue
            hits = [lun for lun in luns if _selector_matches(sel, lun)]
            if not hits:
                raise ConfigError(
                    f"{sel.describe()} matches no LUN on host {host}",
                    key_path=f"luns[{i}]",
                    file=cfg.source_file,
                    line=sel.line or None,
                )
            for lun in hits:
                allow, idx = chosen.get(lun.path, (False, []))
                chosen[lun.path] = (allow or sel.allow_write, [*idx, i])
        out[host] = [
            _selected(cfg, host, lun, chosen[lun.path][0], tuple(chosen[lun.path][1]))
            for lun in luns
            if lun.path in chosen
        ]
    return out


def _selected(cfg: TestConfig, host: str, lun: Lun, allow_write: bool,
              selectors: tuple[int, ...]) -> SelectedLun:
    """``lun`` as its entries ``selectors`` choose it: the engine one of them names (two that
    name different engines are an error) and whether any allows the fallback."""
    engine, named_by = "auto", -1
    for i in selectors:
        sel = cfg.luns[i]
        if sel.engine == "auto" or sel.engine == engine:
            continue
        if engine != "auto":
            raise ConfigError(
                f"LUN {lun.path} on host {host} is chosen by luns[{named_by}] with engine "
                f"{engine} and by this entry with engine {sel.engine}: name one engine",
                key_path=f"luns[{i}].engine", file=cfg.source_file, line=sel.line or None)
        engine, named_by = sel.engine, i
    fallback = any(cfg.luns[i].allow_engine_fallback for i in selectors) and engine == "auto"
    if engine != "auto":
        lun = replace(lun, attributes={**lun.attributes, "engine": engine})
    shared = all(cfg.luns[i].shared for i in selectors)
    return SelectedLun(lun, allow_write, selectors, engine, fallback, shared)


def _selector_matches(sel: LunSelector, lun: Lun) -> bool:
    if sel.kind == "path":
        return sel.path is not None and fnmatch.fnmatchcase(lun.path, sel.path)
    if sel.kind == "file":
        return sel.file is not None and lun.path == sel.file
    attrs = lun.match_attributes()
    return all(m.matches(attrs.get(m.key)) for m in sel.attributes)


# --------------------------------------------------------------------------- workloads
@dataclass
class WorkloadInstance:
    """One workload on one LUN of one host, with its parameters resolved for that LUN."""

    id: str
    name: str
    host: str
    lun: SelectedLun
    spec: WorkloadSpec
    #: what the step asks it to run with (its ``edit_rollup``, IOPS curve point and DFC
    #: start applied); once the slave holds it, ``master.run.settings`` owns what is in force
    params: WorkloadParams
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def lun_key(self) -> tuple[str, str]:
        """The LUN it runs on: ``(host, path)``."""
        return (self.host, self.lun.lun.path)


def _extent_bytes(ext: LunExtent | None, size: int, align: int, default: int) -> int:
    if ext is None:
        return default
    raw = ext.value * size if ext.unit == "fraction" else ext.value
    return int(raw) // align * align


def resolve_params(spec: WorkloadSpec, lun: Lun, seed: int, align_bytes: int = 512
                   ) -> WorkloadParams:
    """``WorkloadParams`` fields (as the slave takes them) for ``spec`` on ``lun``; a range,
    sequential start or hot zone given as a fraction of the LUN is rounded down onto
    ``align_bytes`` (at least the LUN's logical block: a verified test's 4 KiB map block)."""
    size, align = lun.size_bytes, max(align_bytes, lun.logical_block_bytes)
    start = _extent_bytes(spec.range_start, size, align, 0)
    end = _extent_bytes(spec.range_end, size, align, size)
    where = f"workload {spec.name} on {lun.host}:{lun.path}"
    if end > size:
        raise ConfigError(f"{where}: range_end {end} is beyond the LUN's {size} bytes")
    if start >= size:
        raise ConfigError(f"{where}: range_start {start} is at or beyond the LUN's end "
                          f"({size} bytes)")
    if end - start < spec.blocksize_bytes:
        raise ConfigError(
            f"{where}: the range [{start}, {end}) is smaller than one block of "
            f"{spec.blocksize_bytes} bytes"
        )
    if spec.blocksize_bytes % lun.logical_block_bytes:
        raise ConfigError(
            f"{where}: blocksize {spec.blocksize_bytes} is not a multiple of the LUN's logical "
            f"block size {lun.logical_block_bytes}"
        )
    # seq_start is a place on the LUN, as range_start and range_end are (the config check
    # holds it inside them where their kinds agree; here, in bytes, always)
    seq_start = _extent_bytes(spec.seq_start, size, align, start)
    if not start <= seq_start < end:
        raise ConfigError(
            f"{where}: seq_start {seq_start} is outside the range [{start}, {end})"
        )
    # the hot zone is a size: a fraction of it is of the workload's range
    hot = _extent_bytes(spec.hot_zone_size, end - start, align, 0)
    if spec.hot_zone_size is not None and hot < spec.blocksize_bytes:
        raise ConfigError(
            f"{where}: hot_zone_size {hot} bytes is less than one block of "
            f"{spec.blocksize_bytes} bytes (hot_zone_share would have no blocks to go to)"
        )
    return WorkloadParams(
        iosequencer=spec.iosequencer,  # type: ignore[arg-type]  # the config checked it
        blocksize_bytes=spec.blocksize_bytes,
        iodepth=spec.iodepth,
        iops=None if spec.iops == "max" else float(spec.iops),
        read_fraction=spec.read_fraction,
        range_start_bytes=start,
        range_end_bytes=end,
        seq_start_bytes=seq_start,
        hot_zone_bytes=hot,
        hot_zone_fraction=spec.hot_zone_share or 0.0,
        skew_weight=spec.skew_weight,
        write_data=spec.write_data.kind,
        write_data_ratio=spec.write_data.ratio,
        busy_poll=spec.busy_poll,
        seed=seed if spec.seed is None else spec.seed,
    )


def workload_attributes(inst_name: str, spec: WorkloadSpec, lun: Lun) -> dict[str, str]:
    attrs = dict(lun.attributes)
    attrs.update(
        host=lun.host,
        lun=lun.path,
        workload=inst_name,
        iosequencer=spec.iosequencer,
        blocksize_bytes=str(spec.blocksize_bytes),
        iodepth=str(spec.iodepth),
    )
    return attrs


def shared_identities(selected: Mapping[str, Sequence[SelectedLun]]) -> set[str]:
    """The identities (the slaves': ``LunInfo.identity``) of the LUNs that two or more hosts
    chose: one LUN several of the run's hosts reach."""
    hosts: dict[str, set[str]] = {}
    for host, luns in selected.items():
        for sl in luns:
            identity = str(sl.lun.info.get("identity") or "")
            if identity:
                hosts.setdefault(identity, set()).add(host)
    return {i for i, h in hosts.items() if len(h) > 1}


def expand_step(
    step: StepConfig, selected: Mapping[str, Sequence[SelectedLun]], file: str | None = None,
    align_bytes: int = 512,
) -> list[WorkloadInstance]:
    """Every workload instance in force during ``step``, in a stable order (its places on
    each LUN rounded onto ``align_bytes``: ``resolve_params``). A workload that does not fit
    a LUN (or fits none) is refused naming the step's ``workloads`` (its key path, and its
    line in ``file``, the test file), the workload, host and LUN."""
    out: list[WorkloadInstance] = []
    seed = 0

    def refused(reason: str) -> ConfigError:
        return ConfigError(reason, key_path=f"steps[{step.source_index}].workloads", file=file,
                           line=step.line or None)

    for spec in step.workloads:
        matched = 0
        for host, luns in selected.items():
            for sl in luns:
                if not spec.luns.matches(sl.lun.match_attributes()):
                    continue
                matched += 1
                seed += 1
                wid = f"{host}:{sl.lun.path}:{spec.name}"
                try:
                    params = resolve_params(spec, sl.lun, seed, align_bytes)
                except ConfigError as exc:  # it knows the workload and LUN, not the step
                    raise refused(exc.reason) from None
                out.append(
                    WorkloadInstance(
                        id=wid,
                        name=spec.name,
                        host=host,
                        lun=sl,
                        spec=spec,
                        params=params,
                        attributes=workload_attributes(spec.name, spec, sl.lun),
                    )
                )
        if not matched:
            raise refused(
                f"workload {spec.name} (luns: {spec.luns}) matches none of the test's LUNs")
    return out


def rollup_key(spec: RollupSpec, inst: WorkloadInstance) -> str:
    """The instance of rollup type ``spec`` that workload ``inst`` is in."""
    return rollup_keys(spec, [inst])[0]


def rollup_keys(spec: RollupSpec, insts: Sequence[WorkloadInstance]) -> list[str]:
    """``rollup_key`` of each of ``insts`` (one pass, no call per workload: a step's plan at
    100,000 workloads)."""
    if spec.type == "all":
        return ["all"] * len(insts)
    if spec.type == "workload":
        return [i.id for i in insts]
    if spec.type == "lun":
        return [f"{i.host}:{i.lun.lun.path}" for i in insts]
    if spec.type == "host":
        return [i.host for i in insts]
    attributes = spec.attributes
    return ["+".join([i.attributes.get(a, "") for a in attributes]) for i in insts]


def check_rollup_keys(rollups: Sequence[RollupSpec], instances: Sequence[WorkloadInstance], *,
                      file: str | None = None) -> None:
    """Refuse a rollup on several attributes whose ``+``-joined instance names stand for more
    than one combination of values (a value holding ``+``, as ``a+b`` and ``c`` against ``a``
    and ``b+c``): its workloads' results would be summed as one instance. A ``ConfigError`` at
    ``rollups`` (with ``file``, the test file) naming the rollup and both workloads."""
    for spec in rollups:
        if len(spec.attributes) < 2:
            continue
        seen: dict[str, tuple[tuple[str, ...], WorkloadInstance]] = {}
        for inst in instances:
            values = tuple(inst.attributes.get(a, "") for a in spec.attributes)
            key = rollup_key(spec, inst)
            first_values, first = seen.setdefault(key, (values, inst))
            if first_values == values:
                continue
            raise ConfigError(
                f"rollup {spec.type}: its instance {key!r} would stand for both "
                f"{_values_of(spec, first_values, first)} and "
                f"{_values_of(spec, values, inst)}, as a value holds '+'; roll up on fewer "
                "attributes, or give the attribute values without '+'",
                key_path="rollups", file=file)


def _values_of(spec: RollupSpec, values: tuple[str, ...], inst: WorkloadInstance) -> str:
    pairs = ", ".join(f"{a}={v!r}" for a, v in zip(spec.attributes, values, strict=True))
    return f"{pairs} (workload {inst.name} on {inst.host}:{inst.lun.lun.path})"


def apply_rollup_edits(
    edits: Iterable[RollupEdit],
    instances: Sequence[WorkloadInstance],
    rollups: Sequence[RollupSpec],
    *,
    key_path: str = "edit_rollup",
    file: str | None = None,
    line: int | None = None,
    step_name: str = "",
) -> list[str]:
    """Apply ``edit_rollup`` entries to ``instances`` in place; return a description of each.

    An entry whose instance has no workloads among ``instances``, or whose settings leave a
    workload with a block size its LUN cannot take, is a ``ConfigError`` at
    ``<key_path>[j]`` (with ``file`` and ``line``) naming the instance, or the workload and
    its LUN."""
    done: list[str] = []
    by_type = {r.type: r for r in rollups}
    for j, edit in enumerate(edits):
        spec = by_type.get(edit.rollup) or RollupSpec(type=edit.rollup,
                                                      attributes=tuple(edit.rollup.split("+")))
        want = "all" if edit.rollup == "all" else "+".join(edit.value)
        members = [i for i in instances if rollup_key(spec, i) == want]
        if not members:
            raise ConfigError(
                unknown_instance_text(edit.rollup, want, step_name,
                                      [rollup_key(spec, i) for i in instances]),
                key_path=f"{key_path}[{j}].instance", file=file, line=line)
        changes = edit_to_params(edit.settings)
        for m in members:
            params = m.params.replace(**changes)
            misfit = blocksize_misfit(m, params)
            if misfit:
                raise ConfigError(misfit, key_path=f"{key_path}[{j}].blocksize", file=file,
                                  line=line)
            m.params = params
        if edit.total_iops is not None:
            assign_total(members, None if edit.total_iops == "max" else float(edit.total_iops))
        what = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in changes.items()]
        if edit.total_iops is not None:
            what.append(f"total_iops={edit.total_iops:g}" if isinstance(edit.total_iops, float)
                        else f"total_iops={edit.total_iops}")
        done.append(f"{edit.instance}: {' '.join(what)}")
    return done


def blocksize_misfit(inst: WorkloadInstance, params: WorkloadParams) -> str | None:
    """Why the block size of ``params`` (``inst``'s after an edit) does not fit its LUN, or
    None: it must be a multiple of the LUN's logical block size and no larger than the
    workload's range."""
    bs = params.blocksize_bytes
    lun = inst.lun.lun
    span = params.range_end_bytes - params.range_start_bytes
    if bs % lun.logical_block_bytes or bs > span:
        return (f"blocksize {bs} does not fit workload {inst.id} (logical block "
                f"{lun.logical_block_bytes} bytes, range {span} bytes)")
    return None


def edit_to_params(edit: WorkloadEdit) -> dict[str, Any]:
    """The parameter changes of a ``WorkloadEdit`` that need no LUN size."""
    out: dict[str, Any] = {}
    for key in ("iosequencer", "blocksize_bytes", "iodepth", "read_fraction", "skew_weight",
                "busy_poll"):
        value = getattr(edit, key)
        if value is not None:
            out[key] = value
    if edit.iops is not None:
        out["iops"] = None if edit.iops == "max" else float(edit.iops)
    if edit.write_data is not None:
        out["write_data"] = edit.write_data.kind
        out["write_data_ratio"] = edit.write_data.ratio
    return out


def assign_total(members: Sequence[WorkloadInstance], total: float | None) -> None:
    """Give the step's plan of ``members`` a total IOPS (None: max), split by
    ``master.run.settings.split_total``."""
    split = split_total(total, [(m.lun_key, m.params) for m in members])
    for m, params in zip(members, split, strict=True):
        m.params = params


def lun_split_by(spec: RollupSpec, instances: Sequence[WorkloadInstance]) -> str | None:
    """The first LUN (``host:path``) whose workloads lie in more than one instance of
    ``spec`` (None: the rollup is LUN-based and has device columns,
    ``master.analysis.devstats``)."""
    seen: dict[tuple[str, str], str] = {}
    for inst in instances:
        lun = (inst.host, str(inst.lun.lun.path))
        key = rollup_key(spec, inst)
        if seen.setdefault(lun, key) != key:
            return f"{lun[0]}:{lun[1]}"
    return None
