"""The run's lifecycle at a step's edges, on in-memory hosts (``tests/master/memhosts.py``: a
real ``SlaveSession`` in this process with synthetic I/O): an edit that its step never ran is
what the next step starts from; ``--resume`` through a symlink keeps the run's output root; an
exception the run does not handle leaves it failed and resumable; Ctrl-C while a hung host
holds the measurement window ends the run within 3 s, and without one the window's wait has a
deadline sized to the window; an output error mid-step stops the slaves' I/O before
summary.json and the report are built."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import errno
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from master.cli import run as cli_run
from master.config.schema import TestConfig
from master.hosts import session as hostsession
from master.hosts.warp import loop_clock_ns
from master.live import control_socket as control
from master.live.control_socket import ControlError, ControlServer
from master.live.editparse import parse_params
from master.results.runstate import check_resumable, read_state
from master.run import lifecycle as runmod
from master.run.lifecycle import Run
from master.run.operator import RunControl
from master.run.outcome import EXIT_HOST, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT
from protocol.errors import ConfigError, OutputError
from protocol.messages import Message, SubintervalResult, WindowResult
from protocol.version import __version__
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run

MS = 1_000_000

TWO_STEPS = """\
test: mem
subinterval_seconds: 0.2
hosts: [localhost]
luns:
  - {{hosts: localhost, file: "${{output_root}}/lun", size: 1MiB, create: true}}
steps:
  - name: a
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1, iops: 200,
         read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: {a_s}
  - name: b
    measure_seconds: 0.6
"""


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control socket's registry of active runs under tmp_path, not ~/.cache."""
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _summary(folder: Path, step: int, rollup: str = "workload") -> list[dict[str, str]]:
    return [r for r in _rows(folder / "summary.csv")
            if r["step_number"] == str(step) and r["rollup_type"] == rollup]


def _luns_used(folder: Path) -> list[str]:
    return [r["lun"] for r in _rows(folder / "luns.csv") if r["used_by"]]


def _on(kind: type[Message], step: int, k: int | None = None
        ) -> Callable[[Message], bool]:
    """A message of ``kind`` of ``step`` (and subinterval ``k``)."""
    def match(m: Message) -> bool:
        return isinstance(m, kind) and getattr(m, "step", None) == step and (
            k is None or getattr(m, "subinterval", None) == k)
    return match


def _soon(fn: Callable[[], Any], delay_s: float = 0.0) -> None:
    asyncio.get_running_loop().call_later(delay_s, fn)


# ---------------------------------------------------------------- 1. edits the step never ran
@pytest.mark.parametrize("how", ["in the last subinterval", "then stop"])
def test_an_edit_its_step_never_ran_is_undone_by_the_next_step(tmp_path: Path, how: str
                                                               ) -> None:
    """``ivypy edit all iops=1000`` holds from the subinterval after the one running; made in
    the step's last subinterval, or just before ``ivypy stop``, it never runs in its step, yet
    the slave keeps it. Step b carries the workload at its configured 200 IOPS: the master
    must send that (it differs from what the slave holds), so step b runs at 200, as its rows
    say."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(
        a_s=0.4 if how == "in the last subinterval" else 4))
    box: dict[str, Any] = {}
    after_first = _on(SubintervalResult, 0, 0)

    async def operator() -> None:
        run: Run = box["run"]
        while run.step_state is None or run.step_state.last_recorded < 0:
            await asyncio.sleep(0.005)
        control = RunControl(run)
        box["edit"] = await control.edit("all", "all", parse_params({"iops": 1000}))
        if how == "then stop":
            box["stop"] = await control.stop_step()

    def watch(host: str, m: Message) -> bool:
        if after_first(m):
            box["task"] = asyncio.ensure_future(operator())
        return True

    hosts = MemoryHosts(watch)
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run)
    assert result.exit_code == EXIT_OK, result.message
    assert box["task"].exception() is None
    # the edit was taken, from a subinterval step a did not run (-1: from the next step, had
    # the step ended before the edit came)
    last_a = max(k for s, k, _ in hosts["localhost"].backend.ran if s == 0)
    assert box["edit"]["effective_subinterval"] not in range(last_a + 1)
    assert all(set(i.values()) == {200.0} for i in hosts["localhost"].backend.iops_in_step(0))
    # the slave ran step b at the test's setting, and the rows say so
    ran_b = hosts["localhost"].backend.iops_in_step(1)
    assert ran_b and all(set(i.values()) == {200.0} for i in ran_b), ran_b
    (row,) = _summary(result.folder, 1)
    assert (row["iops_setting"], row["IOPS"], row["valid"]) == ("200", "200", "true"), row


# ---------------------------------------------------------------- 2. --resume through a symlink
def _interrupted_in_step_b(tmp_path: Path) -> tuple[TestConfig, Path]:
    """The two-step test run until its first subinterval of step b, then interrupted: its
    config and its folder."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    box: dict[str, Run] = {}
    in_b = _on(SubintervalResult, 1, 0)

    def watch(host: str, m: Message) -> bool:
        if in_b(m):
            _soon(box["run"]._interrupt)
        return True

    run = box["run"] = memory_run(cfg, MemoryHosts(watch))
    first = execute(run)
    assert first.exit_code == EXIT_INTERRUPTED, first.message
    return cfg, first.folder


def test_resume_through_a_symlink_runs_against_the_runs_own_file_lun(tmp_path: Path) -> None:
    """A run interrupted in step b, resumed as ``--resume links/last`` (a symlink to its
    folder): ``${output_root}`` is the output root the run recorded, so the resumed step runs
    on the same file LUN, not on one made beside the symlink's folder."""
    cfg, folder = _interrupted_in_step_b(tmp_path)
    lun = tmp_path / "out" / "lun"
    assert _luns_used(folder) == [str(lun)]

    links = tmp_path / "links"
    links.mkdir()
    (links / "last").symlink_to(folder)
    cfg2, resume = cli_run._resumed(links / "last")
    second = execute(memory_run(cfg2, MemoryHosts(), resume=resume))
    assert second.exit_code == EXIT_OK, second.message
    assert not (tmp_path / "lun").exists(), "a second file LUN beside the symlink's folder"
    assert _luns_used(folder) == [str(lun)]
    (row,) = _summary(folder, 1)
    assert row["rollup_instance"] == f"localhost:{lun}:rr" and row["valid"] == "true"
    assert cfg2.output_root == cfg.output_root
    # the run goes on in its folder, named as it is (not through the symlink)
    assert resume.folder == second.folder == folder and resume.first_step == 1


def test_resume_refuses_a_folder_whose_output_root_is_not_recorded(tmp_path: Path) -> None:
    _, folder = _interrupted_in_step_b(tmp_path)
    (folder / "resolved.json").write_text("{}\n")
    with pytest.raises(ConfigError) as exc:
        cli_run._resumed(folder)
    assert str(exc.value) == (f"cannot resume: {folder / 'resolved.json'} records no "
                              "output_root")


# ---------------------------------------------------------------- 3. an exception not handled
def _fail_in_step_1(monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    real = Run._write_control_rows

    def bug(self: Run, st: Any, dec: Any) -> None:
        if st.number == 1:
            raise RuntimeError("boom")
        real(self, st, dec)

    monkeypatch.setattr(Run, "_write_control_rows", bug)
    return RuntimeError


def _fail_at_the_control_socket(monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    async def served(self: ControlServer) -> None:  # as by a second --resume of the run
        raise ControlError(f"another process is serving {self.socket_path}")

    monkeypatch.setattr(ControlServer, "start", served)
    return ControlError


@pytest.mark.parametrize(("inject", "reason", "resume_at"), [
    (_fail_in_step_1, "internal error: RuntimeError: boom (a bug; its traceback is in run.log)",
     1),
    (_fail_at_the_control_socket, "another process is serving", 0),
])
def test_an_exception_the_run_does_not_handle_leaves_it_failed_and_resumable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        inject: Callable[[pytest.MonkeyPatch], type[BaseException]], reason: str,
        resume_at: int) -> None:
    """The exception still reaches the caller (the CLI prints it), but state.json says the
    run failed and why (no exit status of its own), not that it is complete: ``ivypy status``
    tells it, and ``--resume`` continues it from its first incomplete step. Its slaves are
    stopped and closed."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    kind = inject(monkeypatch)
    hosts = MemoryHosts()
    run = memory_run(cfg, hosts)
    with pytest.raises(kind):
        execute(run)
    assert run.output is not None
    folder = run.output.folder
    state = read_state(folder)
    assert state.state == "failed" and state.exit_code is None
    assert reason in state.reason
    assert state.last_complete_step == resume_at - 1
    text = (folder / "test.yaml").read_text()
    assert check_resumable(state, folder, text, __version__) == resume_at
    events = [e for e in _rows(folder / "events.csv") if e["kind"] == "run"]
    assert events and reason in events[-1]["message"] and events[-1]["level"] == "ERROR"
    for host in hosts.hosts.values():
        assert host.session.closed and not host.backend.running


def test_a_run_folder_that_cannot_hold_the_control_socket_runs_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the socket cannot be bound (an output root on a file system without Unix
    sockets; here its address is in a folder that is not there), the run goes on, warning
    that ``ivypy status``, ``edit`` and ``stop`` cannot reach it; once a crash of the run."""
    @contextlib.contextmanager
    def nowhere(path: Path) -> Iterator[str]:
        yield str(tmp_path / "not-there" / path.name)

    monkeypatch.setattr(control, "_sun_path", nowhere)
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    result = execute(memory_run(cfg, MemoryHosts()))
    assert result.exit_code == EXIT_OK, result.message
    warned = [e for e in _rows(result.folder / "events.csv") if e["kind"] == "control"]
    assert [e["level"] for e in warned] == ["WARNING"], warned
    assert "cannot open the control socket" in warned[0]["message"]
    assert "ivypy status, edit and stop cannot reach this run" in warned[0]["message"]
    assert not (result.folder / "control.sock").exists()
    assert read_state(result.folder).state == "complete"


# ---------------------------------------------------------------- 3b. ivypy stop --run
@pytest.mark.parametrize("when", ["in step a", "before any step"])
def test_stop_run_ends_the_run_once_its_step_has_and_it_resumes_from_the_next(
        tmp_path: Path, when: str) -> None:
    """``ivypy stop --run`` in step a: the step ends after the subinterval in progress (as
    ``ivypy stop``), keeps its verdict, and the run ends there: exit 130, state interrupted,
    resumable from step b. Asked before any step: the run ends before step a."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=4.0))
    box: dict[str, Any] = {}

    async def operator() -> None:
        run: Run = box["run"]
        if when == "in step a":
            while run.step_state is None or run.step_state.last_recorded < 1:
                await asyncio.sleep(0.005)
        box["reply"] = await RunControl(run).stop_run()
        box["again"] = await RunControl(run).stop_run()  # a second ask changes nothing

    def watch(host: str, m: Message) -> bool:
        if "task" not in box:
            box["task"] = asyncio.ensure_future(operator())
        return True

    hosts = MemoryHosts(watch)
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run, timeout_s=30)
    box["task"].result()
    folder = result.folder
    next_step = "1 b" if when == "in step a" else "0 a"
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    assert result.message == (f"stopped by ivypy stop --run before step {next_step}; "
                              f"continue it with: ivypy run --resume {folder}")
    state = read_state(folder)
    assert state.state == "interrupted"
    text = (folder / "test.yaml").read_text()
    stops = [e["message"] for e in _rows(folder / "events.csv") if e["kind"] == "stop"]
    if when == "before any step":
        assert box["reply"] == box["again"] == {"step": None}
        assert state.last_complete_step == -1 and not list(folder.glob("step*"))
        assert check_resumable(state, folder, text, __version__) == 0
        assert stops == ["stop of the run requested: it ends before its next step"]
        return
    last = box["reply"]["last_subinterval"]
    assert box["again"]["last_subinterval"] == last
    assert state.last_complete_step == 0
    assert check_resumable(state, folder, text, __version__) == 1
    (row,) = _summary(folder, 0)
    assert row["last_subinterval"] == str(last) and row["valid"] == "true", row
    assert not _summary(folder, 1) and not (folder / "step0001-b").exists()
    assert stops == [f"stop requested: step a ends after subinterval {last}",
                     "stop of the run requested: it ends after step a"]


# ---------------------------------------------------------------- 3c. Ctrl-C at the edges
def test_ctrl_c_while_the_final_files_are_written_exits_130_with_them_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT to this process while the report is written (synchronously: the run's
    handler waits for the loop): the run still ends interrupted, 130, every step having run,
    summary.json and report.html whole. It used to end complete, exit 0."""
    import json
    import os
    import signal

    write = runmod.report_after_run

    def report_interrupted(folder: Path) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the run's handler is installed: no KeyboardInterrupt
        write(folder)

    monkeypatch.setattr(runmod, "report_after_run", report_interrupted)
    result = execute(memory_run(memory_config(tmp_path, TWO_STEPS.format(a_s=0.4)),
                                MemoryHosts()))
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    assert result.message == ("interrupted at the run's end: every step ran, and summary.json "
                              "and report.html are whole")
    doc = json.loads((result.folder / "summary.json").read_text())
    assert [s["status"] for s in doc["steps"]] == ["complete", "complete"]
    assert (result.folder / "report.html").read_text().rstrip().endswith("</html>")
    assert read_state(result.folder).state == "complete"  # every step ran


def test_ctrl_c_between_a_steps_last_row_and_its_summary_keeps_its_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every subinterval of step a recorded, then Ctrl-C before its summary: step a keeps its
    verdict (valid, no 'interrupted' reason) and counts as complete, so a resume starts at b
    (it used to be invalid, and run again)."""
    from master.analysis.stepcontrol import StepControl

    box: dict[str, Any] = {}
    verdict = StepControl.verdict

    def interrupted_first(control: StepControl, last_recorded: int) -> Any:
        if "done" not in box:
            box["done"] = True
            box["run"]._interrupt()
        return verdict(control, last_recorded)

    monkeypatch.setattr(StepControl, "verdict", interrupted_first)
    run = box["run"] = memory_run(memory_config(tmp_path, TWO_STEPS.format(a_s=0.4)),
                                  MemoryHosts())
    result = execute(run)
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    (row,) = _summary(result.folder, 0)
    assert row["valid"] == "true" and row["invalid_reason"] == "", row
    state = read_state(result.folder)
    assert state.state == "interrupted" and state.last_complete_step == 0
    text = (result.folder / "test.yaml").read_text()
    assert check_resumable(state, result.folder, text, __version__) == 1
    assert not (result.folder / "step0001-b").exists()


# ---------------------------------------------------------------- 4. the measurement window
def test_ctrl_c_while_a_hung_host_holds_the_window_exits_130_within_3s(tmp_path: Path) -> None:
    """The slave hangs as it would answer the window request; Ctrl-C 0.2 s later ends the run
    with 130 within 3 s (not after the window's deadline); the step's summary says it was
    interrupted waiting for the window."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    box: dict[str, Any] = {}

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, WindowResult):
            box["at"] = time.monotonic() + 0.2
            _soon(box["run"]._interrupt, 0.2)
            return False  # the slave hangs: nothing more comes from it
        return True

    run = box["run"] = memory_run(cfg, MemoryHosts(watch))
    result = execute(run, timeout_s=20)
    took = time.monotonic() - box["at"]
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    assert took < 3.0, f"the run ended {took:.2f} s after the interrupt"
    rows = _summary(result.folder, 0)
    assert [r["valid"] for r in rows] == ["false"]
    why = rows[0]["invalid_reason"]
    assert why.startswith("interrupted after subinterval 1 (measurement)"), why
    assert "the measurement window did not come within 1 s of the interrupt" in why
    assert not (result.folder / "step0001-b").exists()
    state = read_state(result.folder)
    assert state.state == "interrupted" and state.last_complete_step == -1


def test_a_window_that_never_comes_fails_the_step_at_its_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an interrupt a hung host fails the step when the window's deadline passes
    (``window_timeout_s``: here the request timeout made 1 s), not after a flat 300 s."""
    monkeypatch.setattr(hostsession, "REQUEST_TIMEOUT_S", 1.0)
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    box: dict[str, float] = {}

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, WindowResult):
            box["at"] = time.monotonic()
            return False
        return True

    result = execute(memory_run(cfg, MemoryHosts(watch)), timeout_s=20)
    took = time.monotonic() - box["at"]
    assert result.exit_code == EXIT_HOST, result.message
    assert "no answer to WindowRequest within 1 s" in result.message
    assert took < 4.0, took
    (row,) = _summary(result.folder, 0)
    assert row["valid"] == "false"
    assert row["invalid_reason"].startswith("failed fetching the measurement window: host "
                                            "localhost"), row["invalid_reason"]


@pytest.mark.parametrize(("subintervals", "subinterval_s", "folded", "more_s"), [
    (1, 1.0, True, 0.0),
    (3600, 1.0, True, 0.0),  # a folded window was added up as it came
    (1, 1.0, False, 1.0),
    (120, 0.5, False, 60.0),
    (600, 10.0, False, 6000.0),
])
def test_the_window_deadline_grows_with_the_subintervals_read_back(
        subintervals: int, subinterval_s: float, folded: bool, more_s: float) -> None:
    """Any request's timeout, plus a subinterval's time per subinterval the slave reads
    back and adds (none for a folded window)."""
    got = hostsession.window_timeout_s(subintervals, subinterval_s, folded)
    assert got == pytest.approx(hostsession.REQUEST_TIMEOUT_S + more_s)


# ---------------------------------------------------------------- a finished step's files
def _open_under(folder: Path) -> dict[str, int]:
    """This process's open descriptors on files in step folders under ``folder``, by step
    folder."""
    seen: dict[str, int] = {}
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = Path(fd.readlink())
            steps = [p for p in target.parts if p.startswith("step")]
            if folder in target.parents and steps:
                seen[steps[0]] = seen.get(steps[0], 0) + 1
    return seen


def test_a_finished_steps_instance_files_are_closed_for_the_steps_after_it(
        tmp_path: Path) -> None:
    """Step b's subintervals find none of step a's files open (their descriptors went back
    to the open-file budget when a was summarised), and b's own instance files open."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=0.4))
    during_b: list[dict[str, int]] = []

    def watch(host: str, m: Message) -> bool:
        if isinstance(m, SubintervalResult):
            opened = _open_under(tmp_path / "out")
            if any(step.endswith("-b") for step in opened):
                during_b.append(opened)
        return True

    result = execute(memory_run(cfg, MemoryHosts(watch)))
    assert result.exit_code == EXIT_OK, result.message
    assert during_b
    for opened in during_b:
        (step_b,) = [k for k in opened if k.endswith("-b")]
        assert not [k for k in opened if k.endswith("-a")], opened
        assert opened[step_b] >= 4  # its all, host, lun and workload files at least


# ---------------------------------------------------------------- an output error mid-step
def test_an_output_error_mid_step_stops_the_io_before_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails mid-step (an events.csv row, raised by the run loop at the next
    subinterval) ends the run with exit 4; every slave's I/O has stopped before summary.json
    and the report are built (they take a while on a large run)."""
    cfg = memory_config(tmp_path, TWO_STEPS.format(a_s=4))
    box: dict[str, Any] = {}
    at_1 = _on(SubintervalResult, 0, 1)

    def watch(host: str, m: Message) -> bool:
        if at_1(m):
            box["run"].output_failed = OutputError(
                str(tmp_path / "events.csv"), OSError(errno.ENOSPC, "No space left on device"))
        return True

    hosts = MemoryHosts(watch)
    seen: dict[str, list[tuple[bool, bool]]] = {"summary": [], "report": []}

    def probe(what: str, real: Callable[[Path], Any]) -> Callable[[Path], Any]:
        def call(folder: Path) -> Any:
            seen[what] += [(h.backend.running, h.session.closed) for h in hosts.hosts.values()]
            return real(folder)
        return call

    monkeypatch.setattr(runmod, "write_summary_json",
                        probe("summary", runmod.write_summary_json))
    monkeypatch.setattr(runmod, "report_after_run", probe("report", runmod.report_after_run))
    run = box["run"] = memory_run(cfg, hosts)
    result = execute(run)
    assert result.exit_code == EXIT_OUTPUT, result.message
    assert "No space left on device" in result.message
    # (I/O running, slave closed) of every host when each was built
    assert seen == {"summary": [(False, True)], "report": [(False, True)]}, seen
    assert max(k for s, k, _ in hosts["localhost"].backend.ran) <= 2


def test_default_connect_hands_the_transport_every_setting_of_the_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the SSH transport does with them (a changed host key refused, a closed port) is
    tests/master/test_transport.py's; here, that each host setting of the test reaches it,
    and a local host's reaches the local transport."""
    import master.hosts.transport as transport
    from master.config import parse_config_text

    got: dict[str, Any] = {}

    async def open_ssh(spec: Any, **kw: Any) -> str:
        got["ssh"] = spec
        return "ssh"

    async def open_local(name: str, **kw: Any) -> str:
        got["local"] = (name, kw)
        return "local"

    monkeypatch.setattr(transport, "open_ssh", open_ssh)
    monkeypatch.setattr(transport, "open_local", open_local)
    cfg = parse_config_text(
        "test: t\nhosts:\n"
        "  - {name: h1, address: 10.77.0.11, user: lab, port: 2222, python: /opt/py3,\n"
        "     identity_file: /run/key, known_hosts: /run/known_hosts,\n"
        "     ssh_config: /run/ssh_config, worker_cpus: '1', watchdog_seconds: 90}\n"
        "  - {name: lab1, transport: local}\n"
        "luns: [{path: /dev/loop0}]\n"
        "steps: [{name: s, workloads: [{name: w, iosequencer: sequential}]}]\n", "t.yaml")
    assert asyncio.run(runmod.default_connect(cfg.host("h1"))) == "ssh"
    spec = got["ssh"]
    assert (spec.name, spec.address, spec.user, spec.port, spec.python) == (
        "h1", "10.77.0.11", "lab", 2222, "/opt/py3")
    assert (spec.identity_file, spec.known_hosts, spec.ssh_config) == (
        "/run/key", "/run/known_hosts", "/run/ssh_config")
    assert spec.slave_args == ("--worker-cpus", "1", "--watchdog-min-seconds", "90")
    assert asyncio.run(runmod.default_connect(cfg.host("lab1"))) == "local"
    name, kw = got["local"]
    assert name == "lab1" and kw["slave_args"][:2] == ("--worker-cpus", "auto")


MANY_HOSTS = """\
test: many
subinterval_seconds: 0.2
hosts: [{hosts}]
luns:
  - {{hosts: all, file: "${{output_root}}/lun", size: 1MiB, create: true}}
steps:
  - name: a
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iops: 100, read_fraction: 100%}}
    warmup_seconds: 0
    measure_seconds: 0.4
    cooldown_seconds: 0
"""


def test_hosts_connect_and_measure_their_clocks_a_bounded_number_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven hosts, at most two connecting at once (``CONNECT_PARALLEL``) and at most three
    pinging for their clock offset at once (``CLOCK_PARALLEL``); every host still runs, and
    each one's clock is measured once, with its pings."""
    monkeypatch.setattr(runmod, "CONNECT_PARALLEL", 2)
    monkeypatch.setattr(runmod, "CLOCK_PARALLEL", 3)
    names = [f"h{i}" for i in range(7)]
    hosts = MemoryHosts()
    now = {"connect": 0, "clock": 0}
    most = {"connect": 0, "clock": 0}
    clocked: list[str] = []

    def enter(what: str) -> None:
        now[what] += 1
        most[what] = max(most[what], now[what])

    async def connect(host: Any) -> Any:
        enter("connect")
        try:
            await asyncio.sleep(0.02)  # a handshake's time: the others would start meanwhile
            return await MemoryHosts.connect(hosts, host)
        finally:
            now["connect"] -= 1

    measure = hostsession.HostSession.measure_clock

    async def measure_clock(self: Any, *args: Any, **kw: Any) -> None:
        enter("clock")
        try:
            await asyncio.sleep(0.02)
            await measure(self, *args, **kw)
            clocked.append(self.host)
        finally:
            now["clock"] -= 1

    monkeypatch.setattr(hosts, "connect", connect)
    monkeypatch.setattr(hostsession.HostSession, "measure_clock", measure_clock)
    cfg = memory_config(tmp_path, MANY_HOSTS.format(hosts=", ".join(names)))
    result = execute(memory_run(cfg, hosts))
    assert result.exit_code == EXIT_OK, result.message
    assert most == {"connect": 2, "clock": 3}
    assert sorted(clocked) == names
    with open(result.folder / "hosts.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["host"] for r in rows] == names
    assert all(int(r["clock_samples"]) >= hostsession.PINGS for r in rows)


QUIET_STEP = """\
test: quiet
subinterval_seconds: 20
hosts: [{name: brief, watchdog_seconds: 4}, patient]
luns:
  - {hosts: all, file: "${output_root}/lun", size: 1MiB, create: true}
steps:
  - name: a
    workloads:
      - {name: rr, iosequencer: random_steady, blocksize: 4KiB, iops: 100, read_fraction: 100%}
    warmup_seconds: 0
    measure_seconds: 60
    cooldown_seconds: 0
"""


def test_each_slave_hears_its_master_within_a_quarter_of_its_watchdog(tmp_path: Path) -> None:
    """The master pings a slave it has said nothing to for a quarter of the host's
    ``watchdog_seconds``: between 20 s subintervals' grants, a host of 4 s hears a Ping every
    second, one of the default 30 s every 7.5 s (twice a subinterval, where a fixed 2 s would
    ping nine times)."""
    heard: dict[str, list[tuple[int, str]]] = {"brief": [], "patient": []}

    def watch(host: str, msg: Message) -> bool:
        heard[host].append((loop_clock_ns(), type(msg).__name__))
        return True

    cfg = memory_config(tmp_path, QUIET_STEP)
    result = execute(memory_run(cfg, MemoryHosts(watch=watch)), timeout_s=600)
    assert result.exit_code == EXIT_OK, result.message
    for host, pings_between in (("brief", range(36, 41)), ("patient", range(4, 5))):
        said = heard[host]
        results = [i for i, (_, kind) in enumerate(said) if kind == "SubintervalResult"]
        assert len(results) == 3, said
        within = said[results[0]:results[-1] + 1]
        pongs = [t for t, kind in within if kind == "Pong"]
        assert len(pongs) in pings_between, (host, len(pongs))
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(within)]
        assert max(gaps) <= cfg.host(host).watchdog_seconds / 4 * 1e9 + 50 * MS, (host, gaps)


def test_a_controller_that_cannot_build_the_kernels_is_told_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kernels shipped (a checkout), none in the user's cache and no C compiler: the run
    ends before its first step with exit 2, naming the compiler and the packages."""
    from master.analysis import kernels, native
    from master.results import csvkernels

    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(kernels, "_lib", None)
    monkeypatch.setattr(csvkernels, "_functions", {})
    monkeypatch.setenv("IVYPY_CC", "no-such-cc")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = memory_config(tmp_path, MANY_HOSTS.format(hosts="h0"))
    result = execute(memory_run(cfg, MemoryHosts()))
    assert result.exit_code == 2, result.message
    assert "no C compiler 'no-such-cc'" in result.message
    assert "apt-get install gcc libc6-dev" in result.message
    assert not list((tmp_path / "out" / "many").glob("*/step0000-*"))
