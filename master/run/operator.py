"""The operator's requests to a running test: ``ivypy status``, ``ivypy edit``, ``ivypy stop``.

Owns what each request may do to the step running and what it answers (the control socket,
``master.live.control_socket``, carries them): the status of the step and its rollups with
the settings in force; an edit of a rollup instance's workloads, checked, sent to their hosts
and, on a DFC step, handed to the DFC as its next start (``StepControl.operator_edit``); a
stop after the running subinterval. Must not change the settings in force itself
(``master.run.settings`` takes what the slaves acknowledged) or write files other than
events.csv through the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from master.config import RollupSpec
from master.live.editparse import EditChanges, EditRefused, unknown_instance
from master.run.settings import split_total
from master.run.verifying import shared_overlap, verify_misfit
from master.run.workloads import blocksize_misfit, rollup_key
from protocol.errors import HostError

if TYPE_CHECKING:
    from master.run.lifecycle import Run
    from master.run.steps import StepState


class RunControl:
    """The run's side of the control socket: ``ivypy status``, ``ivypy edit``, ``ivypy stop``
    (``--run``: ``stop_run``)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def _step(self) -> StepState:
        st = self.run.step_state
        if st is None:
            raise EditRefused("no step is running right now; try again when a step has started")
        return st

    async def status(self) -> dict[str, Any]:
        run = self.run
        out: dict[str, Any] = {"test": run.cfg.test,
                               "run_dir": str(run.output.folder) if run.output else "",
                               "subinterval_s": run.cfg.subinterval_seconds}
        st = run.step_state
        if st is None:
            out["phase"] = "between steps"
            return out
        k = st.last_recorded
        total = st.control.max_subintervals
        out.update(step=st.number, step_name=st.config.name, subinterval=k,
                   phase=st.control.phase_of(max(k, 0)), subintervals_total=total,
                   time_left_s=max(0, total - k - 1) * run.cfg.subinterval_seconds)
        rec = st.last_record
        if rec is not None:
            rollups: dict[str, list[dict[str, Any]]] = {}
            specs = {r.type: r for r in run.rollups}
            for rtype, res in rec.results.items():
                if res.grouping.n > 50:
                    continue
                setting: dict[str, float | str] = {}
                for inst in run.placed.values():
                    key = rollup_key(specs[rtype], inst)
                    iops = run.settings[inst.id].iops
                    old = setting.get(key, 0.0)
                    setting[key] = "max" if iops is None or old == "max" else float(old) + iops
                rollups[rtype] = [
                    {"instance": name, "IOPS": float(res.columns["IOPS"][i]),
                     "service_time_p99_ms": float(res.columns["service_time_p99_ms"][i]),
                     "iops_setting": setting.get(name, "")}
                    for i, name in enumerate(res.grouping.names)]
            out["rollups"] = rollups
        return out

    async def edit(self, rollup_type: str, instance: str, changes: EditChanges) -> dict[str, Any]:
        run = self.run
        st = self._step()
        if changes.dfc:
            return self._retune(st, rollup_type, changes)
        spec = next((r for r in run.rollups if r.type == rollup_type), None) or RollupSpec(
            type=rollup_type, attributes=tuple(rollup_type.split("+")))
        members = [i for i in run.placed.values() if rollup_key(spec, i) == instance]
        if not members:
            known = sorted({rollup_key(spec, i) for i in run.placed.values()})
            raise unknown_instance(rollup_type, instance, st.config.name, known)
        held = [run.settings.latest(m.id) for m in members]
        try:
            wanted = [p.replace(**changes.params) for p in held]
        except ValueError as exc:
            raise EditRefused(f"the edit cannot apply: {exc}") from None
        if changes.total_iops is not None:
            total = None if changes.total_iops == "max" else float(changes.total_iops)
            wanted = split_total(total, [(m.lun_key, p)
                                         for m, p in zip(members, wanted, strict=True)])
        for m, p in zip(members, wanted, strict=True):
            misfit = blocksize_misfit(m, p) or (
                verify_misfit(m, p) if run.verification is not None else None)
            if misfit:
                raise EditRefused(misfit)
        clash = None if run.verification is None else shared_overlap(
            list(run.placed.values()), {m.id: p for m, p in zip(members, wanted, strict=True)})
        if clash:
            raise EditRefused(clash)
        edits = [(m, p) for m, p, old in zip(members, wanted, held, strict=True) if p != old]
        if not edits:
            raise EditRefused("the edit changes nothing: the workloads already run like that")
        steered = _steered(st, {m.id for m, _ in edits})
        if steered and any(p.iops is None for _, p in edits):
            raise EditRefused(
                f"DFC steers the IOPS of {', '.join(sorted(steered))} in step "
                f"{st.config.name}: give a number of IOPS, not max (its next move starts from "
                "the total you set)")
        async with st.edits:
            try:
                effective = await run._send_edits(st, edits, source="live")
            except HostError as exc:
                run.event("WARNING", f"live edit {rollup_type}={instance} {changes.describe()} "
                          f"refused: {exc}", kind="edit", step=st.number)
                raise EditRefused(str(exc)) from exc
            for key in steered:  # DFC starts from the edit once it holds
                total = sum(p.iops or 0.0
                            for p in map(run.settings.latest, st.dfc_members[key]))
                st.control.operator_edit(key, effective, total)
        run.event("INFO", f"live edit {rollup_type}={instance} {changes.describe()}: "
                  f"{len(edits)} workloads from subinterval {effective}"
                  + (f"; DFC starts from it for {', '.join(sorted(steered))}"
                     if steered else ""), kind="edit", step=st.number, subinterval=effective)
        return {"effective_subinterval": effective, "step": st.number,
                "step_name": st.config.name, "workloads": [m.id for m, _ in edits],
                "dfc_steered": sorted(steered)}

    def _retune(self, st: StepState, rollup_type: str, changes: EditChanges) -> dict[str, Any]:
        """``dfc.target``, ``dfc.low_iops``, ``dfc.high_iops``: the running step's DFC aims at
        them from its next move (``StepControl.retune``)."""
        run, control = self.run, st.control
        if control.dfc is None:
            raise EditRefused(f"step {st.config.name} has no dfc: dfc.target, dfc.low_iops "
                              "and dfc.high_iops change a running DFC step")
        if rollup_type != "all":
            raise EditRefused("dfc.target, dfc.low_iops and dfc.high_iops change the step's "
                              "DFC as a whole: edit all")
        after = st.last_recorded
        try:
            new = control.retune(after, **changes.dfc)
        except ValueError as exc:
            raise EditRefused(f"the edit cannot apply: {exc}") from None
        run.event("INFO", f"live edit all {changes.describe()}: DFC holds "
                  f"{new.focus_metric} at {new.target:g} with IOPS in [{new.low_iops:g}, "
                  f"{new.high_iops:g}] from its move after subinterval {after + 1}",
                  kind="edit", step=st.number, subinterval=after + 1)
        return {"effective_subinterval": after + 1, "step": st.number,
                "step_name": st.config.name, "workloads": [],
                "dfc": {"focus_metric": new.focus_metric, "target": new.target,
                        "low_iops": new.low_iops, "high_iops": new.high_iops}}

    async def stop_step(self) -> dict[str, Any]:
        run = self.run
        st = self._step()
        if st.forced_last is None:
            st.forced_last = st.last_recorded + 1
            await run._stop_all(st.forced_last, run._deadline_ns(st, st.forced_last))
            run.event("INFO", f"stop requested: step {st.config.name} ends after subinterval "
                      f"{st.forced_last}", kind="stop", step=st.number)
        return {"step": st.number, "step_name": st.config.name,
                "last_subinterval": st.forced_last}


    async def stop_run(self) -> dict[str, Any]:
        """``ivypy stop --run``: the step running ends after the subinterval in progress (as
        ``stop_step``), and the run once it has; between steps, before the next one."""
        run = self.run
        first = not run.stop_run_requested
        run.stop_run_requested = True
        st = run.step_state
        if st is None:
            if first:
                run.event("INFO", "stop of the run requested: it ends before its next step",
                          kind="stop")
            return {"step": None}
        reply = await self.stop_step()
        if first:
            run.event("INFO", f"stop of the run requested: it ends after step "
                      f"{st.config.name}", kind="stop", step=st.number)
        return reply


def _steered(st: StepState, workload_ids: set[str]) -> set[str]:
    """The DFC focus instances of the running step with a workload among ``workload_ids``."""
    return {key for key, wids in st.dfc_members.items() if workload_ids.intersection(wids)}
