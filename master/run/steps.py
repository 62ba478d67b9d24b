"""A step of a run, from its workloads to its summary: the step loop.

Owns, for each step: the workloads the slaves must hold (created, edited, deleted, with the
write preflight), the IOPS curve's points and DFC's starting totals, the start lead and the
``Go``, the loop over subintervals (results by their deadline, rows, measure's and DFC's
decisions, DFC's moves, the grants and the stop of ``protocol.credit``), the measurement
window and the summary rows with the verdict. ``Run`` (``master.run.lifecycle``) is this class
with the run around it: hosts, discovery, the folder's state. Must not compute metrics
(``master.analysis``), format files (``master.results``) or speak bytes (``master.hosts``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from master.analysis import thresholds
from master.analysis.rollup import AnySample, WindowSample
from master.analysis.stepcontrol import Decision, StepControl
from master.analysis.thresholds import Judged
from master.analysis.verdicts import ended_early
from master.config import RollupSpec, StepConfig, TestConfig
from master.config.catalog import DEVICE_METRICS
from master.hosts.session import HostSession, window_timeout_s
from master.live.metrics import RunMetrics
from master.live.rows import default_live_rollup, dfc_lines, measure_lines
from master.live.view import THRESHOLD_LINES, LiveView
from master.results.output import RunOutput
from master.results.runfolder import read_header
from master.results.schema import (
    DFC_COLUMNS,
    MEASURE_COLUMNS,
    MEASURE_SUMMARY_COLUMNS,
    VERIFY_COLUMNS,
)
from master.results.summaryfiles import with_column, write_summaries
from master.run.fleet import INTERRUPT_WAIT_S, STOP_WAIT_S, Abandoned, Fleet
from master.run.hostrows import HostResult
from master.run.notices import OnceARun
from master.run.outcome import EXIT_INVALID, StepFailed, failure_text
from master.run.pauses import stepped
from master.run.recorder import Recorded, StepRecorder
from master.run.settings import Settings, Source, split_total
from master.run.startlead import GoConfirmed, start_lead_ns
from master.run.verifying import RunVerification
from master.run.workloads import (
    SelectedLun,
    WorkloadInstance,
    apply_rollup_edits,
    assign_total,
    expand_step,
    lun_split_by,
    rollup_key,
)
from protocol import credit
from protocol.errors import (
    ConfigError,
    HostError,
    IvyError,
    OutputError,
    PreflightError,
    ProtocolError,
)
from protocol.messages import MAX_WORKLOADS_PER_HOST, Ack, Error, SubintervalResult
from protocol.params import WorkloadParams, changed_fields
from protocol.verify import MAP_BLOCK_BYTES

if TYPE_CHECKING:
    from master.gather.gathering import Gathering

log = logging.getLogger(__name__)

def _placement(info: dict[str, Any] | None) -> str:
    """`` (engine libaio, worker 0 on CPU 1)`` from a create's ``Ack.info``, or ``""``."""
    if not info:
        return ""
    parts = [f"engine {info['engine']}"] if info.get("engine") else []
    if info.get("worker") is not None:
        cpu = info.get("cpu")
        parts.append(f"worker {info['worker']}"
                     + (f" on CPU {cpu}" if cpu is not None else " (not pinned)"))
    return f" ({', '.join(parts)})" if parts else ""


@dataclass
class StepState:
    number: int
    config: StepConfig
    recorder: StepRecorder
    control: StepControl
    start_ns: int = 0
    last_recorded: int = -1
    last_record: Recorded | None = None
    forced_last: int | None = None
    #: the workloads of each DFC focus instance (a step with ``dfc:``)
    dfc_members: dict[str, list[str]] = field(default_factory=dict)
    #: held while DFC's moves or an operator's edit are sent and taken into the settings:
    #: an edit acknowledged first holds its instances' moves back; one sent after a move wins
    edits: asyncio.Lock = field(default_factory=asyncio.Lock)


class StepLoop:
    """The steps of a run (see the module docstring); ``master.run.lifecycle.Run`` supplies
    the state declared here."""

    cfg: TestConfig
    output: RunOutput | None
    output_failed: OutputError | None
    view: LiveView
    clock: Callable[[], int]
    fleet: Fleet
    settings: Settings
    placed: dict[str, WorkloadInstance]
    selected: dict[str, list[SelectedLun]]
    rollups: list[RollupSpec]
    engines_in_use: dict[tuple[str, str], set[str]]
    step_state: StepState | None
    go_confirmed: GoConfirmed | None
    step_results: dict[str, dict[str, dict[str, float]]]
    curve_types: dict[str, set[str]]  # by step name, the types an iops_curve reads of it
    thresholds_judged: list[Judged]
    gathering: Gathering | None
    run_summary_header: list[str] | None
    sub_ns: int
    skew_limit_ns: int
    notices: OnceARun
    #: the step last run recorded every one of its subintervals (``_run_step``)
    step_whole: bool
    #: the run's data verification (``verify:``), or None; its live metrics (``--metrics``)
    verification: RunVerification | None
    metrics: RunMetrics | None
    #: the identities of LUNs two or more of the run's hosts reach (``lun_identities``)
    shared_in_run: set[str]
    _luns_csv_stale: bool

    @property
    def sessions(self) -> dict[str, HostSession]:
        """Every host's session, by name (the fleet's)."""
        return self.fleet.sessions

    @property
    def interrupted(self) -> asyncio.Event:
        """Set by SIGINT or SIGTERM (the fleet's)."""
        return self.fleet.interrupted

    def event(self, level: str, message: str, *, host: str = "", kind: str = "",
              step: int | None = None, subinterval: int | None = None,
              console: bool = True) -> None:
        raise NotImplementedError  # the run's

    def _write_luns_csv(self) -> None:
        raise NotImplementedError  # the run's

    # ------------------------------------------------------------------ workloads
    async def _apply_workloads(self, number: int, instances: list[WorkloadInstance]) -> None:
        """Create, edit and delete workloads so that the slaves run ``instances``: each is
        compared with what its slave holds (``Settings.latest``, once every edit the slaves
        took holds: ``Settings.settle``)."""
        self.settings.settle()
        if self.verification is not None:  # numbered and in the map before any create
            self.verification.prepare(instances)
            crashes = self.verification.crashes
            # each host's map of each LUN it runs on, as the master's (a resume's, another's)
            for host, lun, data in self.verification.to_load(instances):
                no = await self.sessions[host].load_map(lun, data, crashes)
                if no is not None:
                    raise ConfigError(no.message)
        want = {i.id: i for i in instances}
        jobs: list[tuple[str, Awaitable[Any], WorkloadInstance | None, str]] = []
        for wid, old in list(self.placed.items()):
            if wid not in want:
                jobs.append(("delete", self.sessions[old.host].delete(wid), None, wid))
        for wid, inst in want.items():
            hs = self.sessions[inst.host]
            if wid not in self.placed:
                jobs.append(("create", self._create(hs, inst), inst, wid))
                continue
            held = self.settings.latest(wid)
            if held != inst.params:
                if inst.params.writes and not held.writes:
                    # a workload that starts writing goes through the write preflight again
                    jobs.append(("delete", hs.delete(wid), None, wid))
                    jobs.append(("create", self._create(hs, inst), inst, wid))
                    continue
                jobs.append(("edit", hs.edit(wid, changed_fields(held, inst.params)), inst, wid))
            else:
                self.placed[wid] = inst
        replies = [await j[1] for j in jobs]  # in order: a delete before its re-create
        refused: list[Error] = []
        for (action, _, done, wid), reply in zip(jobs, replies, strict=True):
            if isinstance(reply, Error):
                refused.append(reply)
                continue
            if action == "delete":
                self.placed.pop(wid, None)
                self.settings.dropped(wid)
            else:
                assert done is not None
                self.placed[wid] = done
                if action == "edit":
                    self.settings.taken(wid, done.params, reply.effective_subinterval, "step")
                else:
                    self.settings.placed(wid, done.params)
                    self.event("INFO", f"workload {wid} created{_placement(reply.info)}",
                               host=done.host, kind="workload", step=number)
                    self._created(number, done, reply.info)
        if self._luns_csv_stale:
            self._write_luns_csv()
            self._luns_csv_stale = False
        if refused:
            pre = [r for r in refused if r.kind == "preflight"]
            text = "; ".join(r.message for r in (pre or refused))
            raise PreflightError(text) if pre else ConfigError(text)

    def _create(self, hs: HostSession, inst: WorkloadInstance) -> Awaitable[Ack | Error]:
        sl = inst.lun
        verify = self.verification.target(inst) if self.verification is not None else None
        # a LUN another host of this run reaches too (one kernel's device seen from two
        # namespaces) is locked shared, as by each of them: else the second is refused
        shared = sl.shared or str(sl.lun.info.get("identity") or "") in self.shared_in_run
        return hs.create(inst.id, sl.lun.path, inst.params, sl.allow_write, sl.engine,
                         sl.allow_engine_fallback, shared, verify)

    def _created(self, number: int, inst: WorkloadInstance, info: dict[str, Any]) -> None:
        """What a create answered: the workload's ``engine`` attribute (a rollup key) is the
        engine it runs on, and luns.csv follows when that is not the one it listed; the
        engine's warning (the thread pool) and a write preflight overridden go to the console
        and events.csv."""
        engine = str(info.get("engine") or "")
        if engine:
            inst.attributes["engine"] = engine
            key = (inst.host, inst.lun.lun.path)
            running = self.engines_in_use.setdefault(key, set())
            if engine not in running:
                running.add(engine)
                self._luns_csv_stale = (self._luns_csv_stale or running
                                        != {inst.lun.lun.attributes.get("engine")})
        if info.get("warning"):
            self.event("WARNING", str(info["warning"]), host=inst.host, kind="engine",
                       step=number)
        if info.get("preflight_warning"):
            self.event("WARNING", str(info["preflight_warning"]), host=inst.host,
                       kind="preflight", step=number)

    def _check_per_host(self, step: StepConfig, instances: list[WorkloadInstance]) -> None:
        """Refuse, before any workload is created, a step that gives a host more workloads
        than a slave runs."""
        per_host = collections.Counter(i.host for i in instances)
        over = {h: n for h, n in per_host.items() if n > MAX_WORKLOADS_PER_HOST}
        if over:
            hosts = ", ".join(f"{h} {n:,}" for h, n in sorted(over.items()))
            raise ConfigError(
                f"step {step.name} gives hosts more workloads than a slave runs "
                f"({MAX_WORKLOADS_PER_HOST:,}): {hosts}; spread them over more hosts",
                key_path=f"steps[{step.source_index}].workloads", file=self.cfg.source_file,
                line=step.line or None)

    def _rollup_edits(self, step: StepConfig, instances: list[WorkloadInstance]) -> list[str]:
        return apply_rollup_edits(step.edit_rollup, instances, self.rollups,
                                  key_path=f"steps[{step.source_index}].edit_rollup",
                                  file=self.cfg.source_file, line=step.line or None,
                                  step_name=step.name)

    # ------------------------------------------------------------------ one step
    async def _run_step(self, number: int, step: StepConfig) -> bool:
        assert self.output is not None
        instances = expand_step(step, self.selected, self.cfg.source_file,
                                MAP_BLOCK_BYTES if self.cfg.verify is not None else 512)
        for inst in instances:  # a workload carried over runs on the engine it was created on
            prev = self.placed.get(inst.id)
            if prev is not None and "engine" in prev.attributes:
                inst.attributes["engine"] = prev.attributes["engine"]
        self._check_per_host(step, instances)
        for text in self._rollup_edits(step, instances):
            self.event("INFO", f"edit_rollup {text}", kind="edit", step=number)
        self._apply_iops_curve(number, step, instances)
        focus = self._focus_instances(step, instances)
        control = StepControl(step, self.cfg.subinterval_seconds, focus)
        if step.dfc is not None:
            self._dfc_start(step, control, instances)
        await self.fleet.or_interrupted(self._apply_workloads(number, instances),
                                   f"creating the workloads of step {number} {step.name}")
        created = self._focus_instances(step, instances)
        if created != focus:
            # a create ran a workload on another engine than its LUN listed (the thread pool,
            # as allow_engine_fallback allows): its ``engine`` attribute, a rollup key, is the
            # one it runs on, so the focus instances are those its rows will have
            control = StepControl(step, self.cfg.subinterval_seconds, created)
        n_max = control.max_subintervals
        if n_max <= 0:
            self.event("WARNING", f"step {step.name} has no subintervals", step=number)
            return True
        show = self.view.live_rollup or default_live_rollup(len(self.sessions))
        # a DFC window adds its focus rollup's histograms up over subintervals
        dfc = control.dfc
        windowed = dfc is not None and dfc.window is not None and dfc.window.subintervals > 1
        gathered: list[str] = []
        if self.gathering is not None:  # its first sample fixes the step's gathered columns
            gathered = await self.fleet.or_interrupted(self.gathering.probe(
                [b.focus_metric for b in (step.measure, step.dfc) if b is not None]),
                f"the first gather of step {number} {step.name}")
        if self.verification is not None:  # counts: summed over the window
            gathered = [*gathered, *VERIFY_COLUMNS]
        max_rtt = max(hs.rtt_ns for hs in self.sessions.values())
        lead_ns = start_lead_ns(max_rtt, len(instances), self.go_confirmed,
                                self.gathering.start_lead_ns(self.sub_ns)
                                if self.gathering is not None else 0)
        # the instance files the lead and first subinterval leave time for: after the Go
        recorder = StepRecorder(self.output, number, step.name, self.rollups,
                                self.cfg.subinterval_seconds, self.placed, self.settings,
                                show,
                                hosts=list(self.sessions),
                                histogram_types=frozenset(  # live metrics: every type's
                                    {dfc.focus_rollup} if dfc is not None and windowed else ()
                                ) | {r.type for r in self.rollups
                                     if self.metrics is not None and self.metrics.serves(r.type)},
                                fold_measurement=control.fixed is not None, gathered=gathered,
                                summed=frozenset(VERIFY_COLUMNS), metrics=self.metrics,
                                files_budget_s=(lead_ns + self.sub_ns) / 1e9)
        st = StepState(number, step, recorder, control)
        if step.dfc is not None:
            st.dfc_members = {key: [m.id for m in members] for key, members in
                              self._by_instance(step.dfc.focus_rollup, instances).items()}
        self.step_state = st
        self.view.step_started(number, step.name, n_max, self.cfg.subinterval_seconds)
        st.start_ns = self.clock() + lead_ns
        if self.gathering is not None:
            self.gathering.start_step(number, recorder, st.start_ns, self.sub_ns, n_max)
        how = (f"{control.fixed} measurement" if control.fixed is not None
               else f"measure until steady (at most {control.timeout} measurement)")
        self.event("INFO", f"step {number} {step.name}: {control.warm} warmup, {how}, "
                   f"{control.cool} cooldown subintervals; starts {lead_ns / 1e6:.0f} ms "
                   "after its Go", kind="step", step=number)
        # the slaves keep the window's statistics: a fixed-length step adds its measurement
        # up as it goes; a measure step keeps each subinterval from the end of its warmup on
        fixed = control.fixed
        keep_to = control.warm + fixed - 1 if fixed is not None else -1
        go_sent_ns = self.clock()
        go_s = self.fleet.left_s(self._deadline_ns(st, 0))  # taken by the first result's deadline
        confirm: asyncio.Future[None] | None = None
        last_recorded = -1
        stop_sent = credit.stop_at_go(n_max)
        try:
            try:
                await self.fleet.to_hosts([(hs, hs.go(
                    number, st.start_ns, self.sub_ns, recorder.plan_for(hs.host),
                    keep_from=control.warm, keep_to=keep_to, fold=fixed is not None,
                    timeout_s=go_s)) for hs in self.sessions.values()],
                    f"read the Go of step {number}")
                confirm = asyncio.ensure_future(self._confirm_go(st, go_sent_ns, len(instances)))
                if stop_sent:
                    await self._stop_all(0, self._deadline_ns(st, 0))
                # the rest of the step's files once its Go is confirmed (its time unstretched)
                await asyncio.wait({confirm}, timeout=self.fleet.left_s(st.start_ns))
                await stepped(recorder.after_go_steps())
                k = 0
                while True:
                    results = await self.fleet.results(
                        st.number, k, self._deadline_ns(st, k),
                        self.cfg.deadline_fraction * self.sub_ns / 1e6)
                    if results is None:  # interrupted: the step ends without k
                        if not stop_sent:
                            await self._stop_all(k - 1)
                        break
                    self.settings.advance(k)  # the edits in force from k on
                    phase = control.phase_of(k)
                    with self.output.subinterval():  # every file's rows of k, or none
                        joined = (self.gathering.record(k, phase)
                                  if self.gathering is not None else None)
                        rec = self._record(st, k, phase, results, joined)
                        _device_focus(control, rec)
                        dec = control.after(k, rec.results, self._dfc_totals(st),
                                            rec.samples.get(control.dfc.focus_rollup)
                                            if control.dfc is not None else None)
                        self._write_control_rows(st, dec)
                    self.view.subinterval(k, phase, recorder.show_type, rec.live_total,
                                          rec.live, dfc_lines(dec.dfc_rows), rec.live_instances,
                                          measure_lines(dec.measure_rows), rec.live_spread)
                    last_recorded = k
                    if (self.verification is not None and self.verification.stop_wanted()
                            and st.forced_last is None and not stop_sent):  # on_error: stop
                        st.forced_last = k + 1
                        await self._stop_all(k + 1, self._deadline_ns(st, k + 1))
                        self.event("ERROR", f"verify: damaged data found: step {step.name} "
                                   f"ends after subinterval {k + 1} (on_error: stop)",
                                   kind="verify", step=number, subinterval=k)
                    if dec.new_totals:
                        await self._dfc_apply(st, dec)
                    st.last_recorded, st.last_record = k, rec
                    if self.interrupted.is_set():
                        if not stop_sent:
                            await self._stop_all(k)
                        break
                    if st.forced_last is not None:
                        stop_sent = True
                        if k >= st.forced_last:
                            break
                        k += 1
                        continue
                    last = dec.last
                    if not stop_sent:  # the credit rule's answer (``protocol.credit``)
                        kind, sub = credit.answer(k, last, n_max)
                        if kind == "stop" and sub == k:  # the step ends now
                            await self._stop_all(k)
                            break
                        # taken by the next result's deadline
                        send_by_s = self.fleet.left_s(self._deadline_ns(st, k + 1))
                        if kind == "stop":
                            await self._stop_all(sub, self._deadline_ns(st, k + 1))
                            stop_sent = True
                        else:
                            await self.fleet.to_hosts(
                                [(hs, hs.grant(sub, send_by_s)) for hs in self.sessions.values()],
                                f"read the Continue for subinterval {sub}")
                    elif last is not None and last <= k:
                        break
                    if stop_sent and credit.step_over(k, last, n_max):
                        break
                    k += 1
            except (HostError, ProtocolError) as exc:
                await self.fleet.abort_step()
                failed = last_recorded + 1
                self._summarise_failed(st, ended_early("host", failed, control.phase_of(failed),
                                                       failure_text(exc)))
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            finally:
                self.step_state = None
            try:
                stopped = await self.fleet.wait_stopped()
                if self.verification is not None:  # the writes and reads of the drain
                    self.verification.record(number, last_recorded + 1, list(stopped.items()))
            except HostError as exc:
                self._summarise_failed(st, ended_early(
                    "host", last_recorded, control.phase_of(max(last_recorded, 0)),
                    failure_text(exc), after=True))
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            window, reason, extra = control.verdict(last_recorded)
            # every subinterval of the step recorded before the interrupt (Ctrl-C between its
            # last row and its summary): it keeps its verdict, and once its window came and
            # it is summarised, counts as complete
            whole = control.last is not None and last_recorded >= control.last
            ended = ("interrupt" if self.interrupted.is_set() and not whole
                     else "stop" if st.forced_last is not None else "")
            # the step ran short of what it was to measure; a stop in the measurement of a
            # fixed-length step leaves a shorter window, which stays valid (the operator's call)
            if ended == "interrupt" or (ended == "stop" and (reason or not window)):
                reason = "; ".join(x for x in (ended_early(
                    ended, last_recorded, control.phase_of(max(last_recorded, 0))), reason) if x)
            try:
                total = await self._window(st, window)
            except (HostError, ProtocolError) as exc:
                self._summarise_failed(st, f"failed fetching the measurement window: "
                                       f"{failure_text(exc)}")
                raise StepFailed(f"step {number} {step.name} failed: {exc}") from exc
            except Abandoned:  # interrupted, and the window does not come in time
                if ended != "interrupt":
                    reason = "; ".join(x for x in (ended_early(
                        "interrupt", last_recorded, control.phase_of(max(last_recorded, 0))),
                        reason) if x)
                self._summarise_failed(st, f"{reason}; the measurement window did not come "
                                       f"within {INTERRUPT_WAIT_S:g} s of the interrupt")
                return False
            valid, text = await self._summarise(st, window, total, extra_invalid=reason,
                                                extra=extra)
            self.step_whole = whole
            self.notices.devices(number, recorder.devices.disagreements())  # at the run's end
            recorder.release_files()
            self.view.step_finished(text)
            return valid
        finally:
            if confirm is None or not confirm.done():  # unconfirmed: later steps take the
                if confirm is not None:                # longest lead again
                    confirm.cancel()
                self.go_confirmed = None
            recorder.close()  # its spilled measurement subintervals
            if self.verification is not None:
                self.verification.step_done()
            if self.gathering is not None:
                self.gathering.end_step()

    async def _confirm_go(self, st: StepState, sent_ns: int, workloads: int) -> None:
        """A ``Ping`` to every host behind the step's Go (sent at ``sent_ns``): its ``Pong``
        says the slave handled the Go, and passed the start on to its workers. Learns how long
        that took (``go_confirmed``: the lead of later steps) and warns of a host that may
        have started late. A host lost meanwhile is the step's to report."""
        async def one(hs: HostSession) -> int | None:
            try:
                await hs.ping()
            except IvyError:
                return None
            return self.clock()

        hosts = list(self.sessions.values())
        got = await asyncio.gather(*(one(hs) for hs in hosts))
        for hs, at in zip(hosts, got, strict=True):
            if at is not None and at > st.start_ns:
                self.event("WARNING", f"the Go of step {st.number} {st.config.name} was "
                           f"confirmed only {(at - st.start_ns) / 1e6:.0f} ms after the "
                           f"step's start ({(at - sent_ns) / 1e6:.0f} ms after it was sent): "
                           "this host may have started late; later steps start further ahead",
                           host=hs.host, kind="step", step=st.number)
        done = [at for at in got if at is not None]
        if len(done) < len(got):
            return
        longest = max(done) - sent_ns
        log.info("step %d: its Go confirmed by every host %.1f ms after it was sent",
                 st.number, longest / 1e6)
        prev = self.go_confirmed or GoConfirmed(0, 0)
        self.go_confirmed = GoConfirmed(max(workloads, prev.workloads),
                                        max(longest, prev.longest_ns))

    # ------------------------------------------------------------------ measure, DFC, curves
    def _focus_instances(self, step: StepConfig,
                         instances: Sequence[WorkloadInstance]) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for spec in self.rollups:
            names: dict[str, None] = {}
            for inst in instances:
                names.setdefault(rollup_key(spec, inst), None)
            out[spec.type] = tuple(names)
        # every focus rollup is a key of ``out``: the config accepts only the test's rollup
        # types, and ``self.rollups`` holds each of them (tests/master/test_rolluptypes.py)
        for block, key in ((step.measure, "measure"), (step.dfc, "dfc")):
            if block is not None and block.focus_metric in DEVICE_METRICS:
                split = lun_split_by(next(r for r in self.rollups if r.type == block.focus_rollup),
                                   instances)
                if split is not None:
                    raise ConfigError(
                        f"{block.focus_metric} needs a LUN-based focus rollup, but "
                        f"{block.focus_rollup} splits the workloads of LUN {split} between "
                        "instances (a device's I/O cannot be told apart by workload)",
                        key_path=f"steps[{step.source_index}].{key}.focus_rollup",
                        file=self.cfg.source_file, line=step.line or None)
        return out

    def _by_instance(self, rollup_type: str, instances: Iterable[WorkloadInstance]
                     ) -> dict[str, list[WorkloadInstance]]:
        """The workloads of each instance of ``rollup_type``, in one pass (a pass per
        instance cost DFC on a workload rollup of 512 workloads ~50 ms per subinterval)."""
        spec = next(r for r in self.rollups if r.type == rollup_type)
        out: dict[str, list[WorkloadInstance]] = {}
        for inst in instances:
            out.setdefault(rollup_key(spec, inst), []).append(inst)
        return out

    def _apply_iops_curve(self, number: int, step: StepConfig,
                          instances: Sequence[WorkloadInstance]) -> None:
        point = step.iops_curve
        if point is None:
            return
        if point.fraction is None:
            assign_total(instances, None)
            return
        measured = self.step_results.get(point.max_step, {}).get(point.rollup)
        if not measured:
            raise StepFailed(f"iops_curve step {step.name}: the max-IOPS step "
                             f"{point.max_step} has no result", EXIT_INVALID)
        for key, members in self._by_instance(point.rollup, instances).items():
            iops = measured.get(key)
            if iops is None or not iops > 0:
                raise StepFailed(f"iops_curve step {step.name}: {point.rollup}={key} measured "
                                 f"no IOPS in {point.max_step}", EXIT_INVALID)
            total = point.fraction * iops
            assign_total(members, total)
            self.event("INFO", f"iops_curve: {point.rollup}={key} total IOPS {total:.0f} "
                       f"({point.fraction:.0%} of {iops:.0f})", kind="edit", step=number)

    def _dfc_start(self, step: StepConfig, control: StepControl,
                   instances: Sequence[WorkloadInstance]) -> None:
        """Each focus instance's workloads set to the DFC's starting total."""
        assert step.dfc is not None
        for members in self._by_instance(step.dfc.focus_rollup, instances).values():
            iops = [m.params.iops for m in members]
            current = None if None in iops else float(sum(v for v in iops if v is not None))
            assign_total(members, control.initial_total(current))

    def _dfc_totals(self, st: StepState) -> dict[str, float]:
        """Each DFC focus instance's total IOPS in force (``master.run.settings``); an instance
        with a workload at max (none can be while DFC runs: ``RunControl.edit``) is left out."""
        out: dict[str, float] = {}
        for key, wids in st.dfc_members.items():
            total = self.settings.total_iops(wids)
            if total is not None:
                out[key] = total
        return out

    async def _dfc_apply(self, st: StepState, dec: Decision) -> None:
        """DFC's new totals, each split over its instance's workloads from what their slaves
        hold (an operator's edit included), sent to be taken by the next result's deadline."""
        async with st.edits:
            held = st.control.operator_held()  # an operator's edit acknowledged meanwhile
            changes: list[tuple[WorkloadInstance, WorkloadParams]] = []
            for key, total in dec.new_totals.items():
                if key in held:
                    continue
                members = [self.placed[w] for w in st.dfc_members.get(key, ())]
                split = split_total(total, [(m.lun_key, self.settings.latest(m.id))
                                            for m in members])
                changes += zip(members, split, strict=True)
            if changes:
                await self._send_edits(st, changes, source="dfc",
                                       send_by_ns=self._deadline_ns(st, dec.k + 1))

    async def _send_edits(self, st: StepState, changes: Sequence[tuple[WorkloadInstance,
                          WorkloadParams]], source: Source, send_by_ns: int | None = None
                          ) -> int:
        """Send new parameters (what differs from what the slave holds), one request per host
        (all of a host's edits hold, or none), each taken by ``send_by_ns`` when given; they
        take effect (``master.run.settings``, and so the rows) from the subinterval the slaves
        announce. Returns that subinterval (the latest over hosts). A refusal raises
        ``HostError`` naming the host and workload, after the other hosts' edits are noted."""
        by_host: dict[str, list[tuple[WorkloadInstance, WorkloadParams]]] = {}
        for inst, params in changes:
            by_host.setdefault(inst.host, []).append((inst, params))
        send_s = None if send_by_ns is None else self.fleet.left_s(send_by_ns)
        latest = self.settings.latest
        replies = await self.fleet.to_hosts([(self.sessions[host], self.sessions[host].edit_many(
            [(inst.id, changed_fields(latest(inst.id), params)) for inst, params in edits],
            send_timeout_s=send_s))
            for host, edits in by_host.items()], "answer its edit")
        effective = -1
        refused: tuple[str, Error] | None = None  # the first host that refused
        held: list[str] = []
        for (host, edits), reply in zip(by_host.items(), replies, strict=True):
            if isinstance(reply, Error):
                refused = refused or (host, reply)
                continue
            effective = max(effective, reply.effective_subinterval)
            # the other hosts' edits hold even when one host refused its own
            held.append(host)
            for inst, params in edits:
                self.settings.taken(inst.id, params, reply.effective_subinterval, source)
        if refused is not None:
            host, err = refused
            also = (f"; the edits on {', '.join(held)} were made and hold from subinterval "
                    f"{effective}" if held else "")
            reason = err.message.removeprefix(f"host {host}: ")  # HostError names it
            raise HostError(f"{source} edit of {err.workload_id} refused: {reason}{also}",
                            host=host)
        return effective

    def _write_control_rows(self, st: StepState, dec: Decision) -> None:
        assert self.output is not None
        for name, rows, columns in (("measure", dec.measure_rows, MEASURE_COLUMNS),
                                    ("dfc", dec.dfc_rows, DFC_COLUMNS)):
            if rows:
                self.output.table(f"{st.recorder.dir}/{name}.csv", columns).write_many(rows)
        if self.metrics is not None:  # DFC's gauges
            self.metrics.set_dfc(st.number, st.config.name, dec.dfc_rows)

    def _record(self, st: StepState, k: int, phase: str, results: Sequence[SubintervalResult],
                joined: dict[str, dict[str, npt.NDArray[np.float64]]] | None = None
                ) -> Recorded:
        now = self.clock()
        hosts = [HostResult(hs.host, r, hs.to_master_ns, now, hs.offset_uncertainty_ns)
                 for r, hs in zip(results, self.sessions.values(), strict=True)]
        if self.output_failed is not None:
            raise self.output_failed
        if self.verification is not None:
            counts = self.verification.record(st.number, k, [(h.host, h.result) for h in hosts])
            columns = self.verification.columns(counts, st.recorder.ids, st.recorder.groupings)
            joined = {t: {**(joined or {}).get(t, {}), **c} for t, c in columns.items()}
        rec = st.recorder.record(k, phase, hosts, st.start_ns + (k + 1) * self.sub_ns, joined)
        for host, bound in rec.skew_bound_ns.items():  # warned at the run's end
            self.notices.skew(host, bound, self.sessions[host].offset_uncertainty_ns,
                              st.number, k)
        for host, text in rec.io_errors:
            self.event("WARNING", f"I/O error: {text}", host=host, kind="io", step=st.number,
                       subinterval=k)
        return rec

    async def _window(self, st: StepState, window: Sequence[int]) -> WindowSample | None:
        """The measurement window's statistics of every workload, from the slaves (each adds
        up the subintervals it kept, within ``window_timeout_s``); None for an empty window.
        Once the run is interrupted (before the request or while it waits) the hosts get
        ``INTERRUPT_WAIT_S`` more: one that has not answered then is marked failed (it is not
        waited for again) and ``Abandoned`` is raised."""
        if not window:
            return None
        first, last = window[0], window[-1]
        if list(window) != list(range(first, last + 1)):
            raise ProtocolError(f"measurement window {list(window)[:5]}... is not contiguous")
        timeout_s = window_timeout_s(len(window), self.cfg.subinterval_seconds,
                                     folded=st.control.fixed is not None)
        sessions = list(self.sessions.values())
        try:
            replies = await self.fleet.to_hosts(
                [(hs, hs.window(st.number, first, last, timeout_s)) for hs in sessions],
                f"send the measurement window of step {st.number}")
        except HostError:
            if self.interrupted.is_set():  # the hosts still busy are marked failed
                raise Abandoned from None
            raise
        return await stepped(st.recorder.window_sample_steps(
            [(hs.host, r.workload_ids, r.stats) for hs, r in zip(sessions, replies, strict=True)]))

    def _summarise_failed(self, st: StepState, reason: str) -> None:
        """The summary rows of a step a failure ended: invalid with ``reason``, no metrics
        (the run still ends with the failure's exit code). A failure to write them is left
        to the run's end (the failure itself is what the run reports)."""
        try:
            self._write_summary(st, st.recorder.unmeasured_rows(reason), [reason],
                                valid=False)
        except OutputError as exc:
            if self.output_failed is None:
                self.output_failed = exc

    async def _summarise(self, st: StepState, window: Sequence[int], total: AnySample | None, *,
                         extra_invalid: str = "", extra: dict[str, Any] | None = None
                         ) -> tuple[bool, str]:
        valid, rows, messages = await stepped(st.recorder.summarise_steps(
            window, total, extra_invalid=extra_invalid, extra=extra,
            iops_tolerance_pct=st.config.iops_tolerance_pct))
        self._write_summary(st, rows, messages, valid=valid)
        alls = [r for r in rows if r["rollup_type"] == "all"]
        if not alls or alls[0]["IOPS"] is None:
            return valid, (f"step {st.number} {st.config.name}: no measurement"
                           + (f" ({messages[0]})" if messages else ""))
        a = alls[0]
        dur = a["measurement_seconds"]
        text = (f"step {st.number} {st.config.name}: {a['IOPS']:,.0f} IOPS, "
                f"{a['MB_per_s']:.1f} MB/s, service time mean {a['service_time_mean_ms']:.3f} ms "
                f"p99 {a['service_time_p99_ms']:.3f} ms over {dur:g} s"
                + ("" if valid else " (INVALID)"))
        return valid, text

    def _write_summary(self, st: StepState, rows: Sequence[Mapping[str, Any]],
                       messages: Sequence[str], *, valid: bool) -> None:
        """A step's summary rows into its per-rollup summary.csv files and the run's; each
        reason why it is invalid to events.csv; each measured instance's IOPS to the run's
        step results (``iops_curve`` points, state.json); the step's line of the end-of-run
        table to the view."""
        assert self.output is not None
        for m in messages:
            self.event("WARNING", f"step {st.config.name} invalid: {m}", kind="validation",
                       step=st.number)
        header = [*st.recorder.summary_columns, *MEASURE_SUMMARY_COLUMNS]
        if self.cfg.thresholds:  # each row's results in its thresholds cell
            header.append(thresholds.COLUMN)
            cells, judged = thresholds.row_cells(self.cfg.thresholds, st.config.name, rows)
            rows = with_column(rows, thresholds.COLUMN, cells)
            self.thresholds_judged += judged
            shown = {id(j) for j in thresholds.worst_first(judged)[:THRESHOLD_LINES]}
            for j in judged:  # on the console those that did not hold first, the first few
                self.event("INFO" if j.holds else "WARNING", f"threshold {j.line}",
                           kind="threshold", step=st.number, console=id(j) in shown)
        run_header = self._run_summary_header(header)
        left_out = [c for c in header if c not in set(run_header)]
        if left_out:
            self.event("WARNING", f"step {st.config.name}: gathered columns "
                       f"{', '.join(left_out)} are not in the run's summary.csv (the run's "
                       "first step fixed its columns); the step's summary.csv files have them",
                       kind="gather", step=st.number)
        with self.output.subinterval():  # a step's summary rows whole, or none
            write_summaries(self.output, st.recorder.dir, rows, header, run_header)
        kept = self.curve_types.get(st.config.name, set())
        for row in rows if kept else ():  # what iops_curve reads alone (not every instance)
            if row["rollup_type"] in kept and row["IOPS"] is not None:
                self.step_results.setdefault(st.config.name, {}).setdefault(
                    row["rollup_type"], {})[row["rollup_instance"]] = float(row["IOPS"])
        self.view.step_summary(f"{st.number} {st.config.name}", st.recorder.show_type, rows,
                               valid=valid, reasons=messages)

    def _run_summary_header(self, step_header: list[str]) -> list[str]:
        """The run's summary.csv columns: a resumed run's existing file's, else those of the
        first step that writes it (the gathered columns of a later step that are not among
        them stay in its own summary.csv files)."""
        if self.run_summary_header is None:
            assert self.output is not None
            had = read_header(self.output.folder / "summary.csv") if self.output.resuming else ()
            self.run_summary_header = list(had) or step_header
        return self.run_summary_header

    def _deadline_ns(self, st: StepState, k: int) -> int:
        """When every host's result of subinterval ``k`` must be in."""
        return st.start_ns + (k + 1) * self.sub_ns + round(
            self.cfg.deadline_fraction * self.sub_ns)

    async def _stop_all(self, after: int, deadline_ns: int | None = None) -> None:
        """``Stop`` after subinterval ``after`` to every host whose step runs, taken by
        ``deadline_ns`` (by default within ``STOP_WAIT_S``, as its ``Stopped`` is then)."""
        await self.fleet.stop_all(after, STOP_WAIT_S if deadline_ns is None
                                  else self.fleet.left_s(deadline_ns))


def _device_focus(control: StepControl, rec: Recorded) -> None:
    """A device focus metric's value per focus-rollup instance into ``rec.results``, where
    measure and DFC read it (NaN where the instance has no device value: not steady, hold)."""
    for block in (control.step.measure, control.step.dfc):
        if block is not None and block.focus_metric in DEVICE_METRICS:
            j = DEVICE_METRICS.index(block.focus_metric)
            rec.results[block.focus_rollup].columns[block.focus_metric] = (
                rec.devices[block.focus_rollup][:, j])
