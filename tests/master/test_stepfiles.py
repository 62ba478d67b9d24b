"""master.run.stepfiles: a step's instance files made a slice at a time, before the Go as many
as the step's lead and first subinterval leave no time for, the rest after it; and a run on
in-memory hosts whose files are partly made after its Go."""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from master.results.csvfiles import CsvAppender, LineTexts
from master.results.output import NewFiles, RunOutput
from master.run import stepfiles
from master.run.outcome import EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT
from master.run.stepfiles import StepFiles
from protocol.errors import OutputError
from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run

COLUMNS = ["step", "rollup_instance", "IOPS"]


def _names(n: int, prefix: str) -> list[str]:
    return [f"{prefix}{i:03d}.csv" for i in range(n)]


class _Clock:
    """A clock read by ``StepFiles``, moved on by the files it makes (``_files``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _files(out: RunOutput, sizes: dict[str, int], clock: _Clock | None = None,
           per_file_s: float = 0.0) -> StepFiles:
    files = StepFiles(out, {t: f"step0000-a/{t}" for t in sizes}, sizes,
                      lambda t: _names(sizes[t], t), COLUMNS, clock=clock or _Clock())
    if clock is not None:
        take_made = files.output.take_made

        def timed(new: NewFiles) -> list[CsvAppender]:
            clock.now += per_file_s * len(new.names)
            return take_made(new)

        files.output.take_made = timed  # type: ignore[method-assign]
    return files


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*.csv"))}


@pytest.fixture(autouse=True)
def _small_slices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Slices of 10 files; the runs' control sockets registered under tmp_path."""
    monkeypatch.setattr(stepfiles, "FILES_SLICE", 10)
    monkeypatch.setenv("IVYPY_STATE_DIR", str(tmp_path / "state"))


# budget_s, seconds a file, files before the Go: the rest (rest_s x MARGIN) within the budget
@pytest.mark.parametrize(("budget_s", "per_file_s", "before"), [
    (None, 1.0, 45),  # no budget: every file now
    (1000.0, 1.0, 10),  # one slice, then the 35 left (70 s with the margin) fit
    (60.0, 1.0, 20),  # 25 left: 50 s
    (50.0, 1.0, 20),  # exactly the budget
    (49.0, 1.0, 30),
    (0.0, 1.0, 45),  # no time after the Go: all before it
    (0.0, 0.0, 10),  # files that take no time: all but the first slice after
])
def test_files_are_made_before_the_go_until_the_rest_fit_the_budget(
        tmp_path: Path, budget_s: float | None, per_file_s: float, before: int) -> None:
    out = RunOutput(tmp_path)
    files = _files(out, {"workload": 30, "lun": 12, "all": 1, "host": 2}, _Clock(),
                   per_file_s)
    assert files.total == 45 and files.made == 0 and files.rest_s() == float("inf")
    if budget_s is not None:  # the rate is known from a whole slice's files on
        files.make(1e9)  # no more than that slice: 35 files' 70 s fit
        assert files.made == 10 and files.rest_s() == 35 * per_file_s
    files.make(budget_s)
    assert files.made == before
    assert files.done == (before == 45)
    assert len(list((tmp_path / "step0000-a").rglob("*.csv"))) == before
    out.close()


def test_the_rate_is_judged_only_once_a_slice_of_files_is_made(tmp_path: Path) -> None:
    """A first rollup type of one file (``all``) says nothing of the rate: files go on being
    made before the Go until ``FILES_SLICE`` of them are."""
    out = RunOutput(tmp_path)
    files = _files(out, {"all": 1, "host": 2, "workload": 30}, _Clock(), 1.0)
    files.make(1000.0)
    assert files.made == 13 and files.rest_s() == 20.0
    out.close()


def test_the_rest_are_made_after_a_slice_each_with_a_pause_and_the_same_files(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The files made in slices, most after the Go, are the files made at once: the same
    names and bytes, and the same ones held open within the open-file budget."""
    sizes = {"workload": 23, "lun": 7, "all": 1}
    outs = {}
    for how in ("at once", "in slices"):
        out = outs[how] = RunOutput(tmp_path / how, max_open_files=12)
        files = _files(out, sizes)
        if how == "at once":
            files.make()
        else:
            files.make(1000.0)
            assert files.made == 10
            with pytest.raises(RuntimeError, match="21 of the step's 31 instance files are not"):
                files.tables("workload")
            with caplog.at_level(logging.INFO, logger="master.run.stepfiles"):
                pauses = sum(1 for _ in files.rest_steps())
            # the workloads' 10 and 3; the LUNs' names, then files; all.csv's name, then file
            assert pauses == 6 and files.done
            assert [r.getMessage() for r in caplog.records] == [
                "the step: 21 of its 31 instance files made after its Go, in 0.00 s"]
        texts = {t: LineTexts([f"i{i}" for i in range(n)]) for t, n in sizes.items()}
        for t in sizes:
            assert [os.path.basename(a.path) for a in files.tables(t)] == _names(sizes[t], t)
            for a in files.tables(t):
                a.append_now("0,x,1\r\n")
        held = {t: [a.is_open for a in files.tables(t)] for t in sizes}
        assert sum(map(sum, held.values())) == 12
        slices = files.slices("workload", texts["workload"], 10)
        assert [(a, b, len(g)) for a, b, g, _ in slices] == [(0, 10, 10), (10, 20, 10),
                                                              (20, 23, 3)]
        outs[how + " held"] = held  # type: ignore[assignment]
        out.close()
    assert outs["at once held"] == outs["in slices held"]
    assert _tree(tmp_path / "at once") == _tree(tmp_path / "in slices")


def test_a_file_that_cannot_be_made_after_the_go_is_an_output_error(tmp_path: Path) -> None:
    out = RunOutput(tmp_path)
    files = _files(out, {"workload": 25})
    files.make(1000.0)
    (tmp_path / "step0000-a" / "workload" / "workload012.csv").write_text("not ours\n")
    steps: Iterator[None] = files.rest_steps()
    with pytest.raises(OutputError, match=r"workload012\.csv"):
        list(steps)
    assert (tmp_path / "step0000-a" / "workload" / "workload012.csv").read_text() == "not ours\n"
    out.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("budget_s", [None, 1000.0])
def test_files_made_on_writer_threads_are_the_files_made_on_one(
        tmp_path: Path, budget_s: float | None) -> None:
    """Slices made on three writer threads at once (before the Go, then after it) give the
    files one thread gives: the same names and bytes, the same ones held open within the
    open-file budget, and no descriptor left once the run's output is closed."""
    sizes = {"workload": 47, "lun": 12, "all": 1}
    trees, held = {}, {}
    fds = _open_fds()
    for threads in (1, 3):
        out = RunOutput(tmp_path / str(threads), max_open_files=25)
        files = StepFiles(out, {t: f"step0000-a/{t}" for t in sizes}, sizes,
                          lambda t: _names(sizes[t], t), COLUMNS, threads=threads)
        files.make(budget_s)
        if budget_s is not None:
            assert 10 <= files.made < 60 and not files.done
            with pytest.raises(RuntimeError, match="instance files are not made yet"):
                files.tables("lun")
            for _ in files.rest_steps():
                pass
        assert files.done and files.made == 60
        for t in sizes:
            assert [os.path.basename(a.path) for a in files.tables(t)] == _names(sizes[t], t)
            for a in files.tables(t):
                a.append_now(f"0,{os.path.basename(a.path)},1\r\n")
        held[threads] = {t: [a.is_open for a in files.tables(t)] for t in sizes}
        assert sum(map(sum, held[threads].values())) == 25
        out.close()
        trees[threads] = _tree(tmp_path / str(threads))
    assert len(trees[1]) == 60 and trees[3] == trees[1] and held[3] == held[1]
    assert _open_fds() == fds


@pytest.mark.parametrize("when", ["before the Go", "after the Go"])
def test_a_file_that_cannot_be_made_on_a_writer_thread_is_an_output_error(
        tmp_path: Path, when: str) -> None:
    """A slice whose file is there already (files are never overwritten), with slices on
    three writer threads: an ``OutputError`` naming that file, the other file left as it
    was, and every slice in flight taken in, so that closing the output leaves no
    descriptor open."""
    sizes = {"workload": 60}
    fds = _open_fds()
    out = RunOutput(tmp_path, max_open_files=100)
    files = StepFiles(out, {"workload": "step0000-a/workload"}, sizes,
                      lambda t: _names(60, t), COLUMNS, threads=3)
    theirs = tmp_path / "step0000-a" / "workload" / "workload033.csv"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("not ours\n")
    if when == "before the Go":
        with pytest.raises(OutputError, match=r"workload033\.csv"):
            files.make(None)
    else:
        files.make(1000.0)
        assert files.made == 10  # one slice until the rate is known, then the rest fit
        with pytest.raises(OutputError, match=r"workload033\.csv"):
            for _ in files.rest_steps():
                pass
    assert theirs.read_text() == "not ours\n"
    made = sorted(p.name for p in theirs.parent.iterdir())
    assert "workload032.csv" in made and files.made >= 30 and not files._flight
    out.close()
    assert _open_fds() == fds


def test_a_slice_whose_making_raised_gives_its_share_of_open_files_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice whose making raised before any file (here a ``ValueError`` of our own) on
    three writer threads: that error is raised, the slices in flight beside it are taken in,
    and the open-file budget counts just the files held open, so none leaks."""
    sizes = {"workload": 50}
    out = RunOutput(tmp_path, max_open_files=100)
    files = StepFiles(out, {"workload": "step0000-a/workload"}, sizes,
                      lambda t: _names(50, t), COLUMNS, threads=3)
    create = NewFiles.create

    def failing(self: NewFiles) -> None:
        if self.names[0] == "workload010.csv":
            self.close()
            raise ValueError("our own")
        create(self)

    monkeypatch.setattr(NewFiles, "create", failing)
    with pytest.raises(ValueError, match="our own"):
        files.make(None)
    held = [a.is_open for a in out._files.values()]
    assert len(held) == 30 and all(held) and out._n_open == 30 and not files._flight
    out.close()


RUN = """\
test: mem
subinterval_seconds: 0.3
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun", size: 1MiB, create: true}
steps:
  - name: a
    workloads:
""" + "".join(f"""      - {{name: w{i:02d}, iosequencer: random_steady, blocksize: 4KiB, iodepth: 1,
         iops: 20, read_fraction: 100%}}
""" for i in range(24)) + """    warmup_seconds: 0
    measure_seconds: 0.6
"""


def test_a_runs_files_made_after_its_go_get_every_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of 24 workloads whose instance files are made 10 at a time: the first slice
    before the Go, the rest after it (the lead and a subinterval leave time for them); the
    run ends well and every instance file has a row for each subinterval."""
    made_at_go: list[tuple[int, int]] = []
    make = StepFiles.make

    def noted(self: StepFiles, budget_s: float | None = None) -> None:
        make(self, budget_s)
        made_at_go.append((self.made, self.total))

    monkeypatch.setattr(StepFiles, "make", noted)
    result = execute(memory_run(memory_config(tmp_path, RUN), MemoryHosts()))
    assert result.exit_code == EXIT_OK, result.message
    made, total = made_at_go[0]
    assert total == 24 + 3  # workloads, the LUN, the host, all
    assert 10 <= made < total  # a slice's rate known, the rest after the Go
    step = next(tmp_path.rglob("step0000-a"))
    instance_files = [p for p in step.glob("*/*.csv") if p.name != "summary.csv"
                      and p.parent.name != "histograms"]
    assert len(instance_files) == total
    for path in instance_files:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert [r["subinterval"] for r in rows] == ["0", "1"], path


def test_an_interrupt_while_files_are_made_after_the_go_leaves_every_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the step's files are made after its Go: they are all made (the step's
    folder as complete as one whose files came before the Go), and the run ends interrupted."""
    run = memory_run(memory_config(tmp_path, RUN), MemoryHosts())
    take = StepFiles._take
    after_go: list[int] = []

    def slice_then_interrupt(self: StepFiles) -> None:
        take(self)
        if self.made > 13:  # a slice after the Go: 13 files before it, on any threads
            after_go.append(self.made)
            run.fleet.interrupt()

    monkeypatch.setattr(StepFiles, "_take", slice_then_interrupt)
    result = execute(run)
    assert result.exit_code == EXIT_INTERRUPTED, result.message
    assert after_go and after_go[-1] == 27
    step = next(tmp_path.rglob("step0000-a"))
    assert len([p for p in step.glob("*/*.csv") if p.name != "summary.csv"]) == 27


def test_a_file_that_cannot_be_made_after_the_go_ends_the_run_with_its_output_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's instance file that cannot be made after its Go, its hosts already running
    (its name taken, here by a file put there as the files after the Go begin: files are
    never overwritten): the run ends with the output's exit status naming the file, that file
    as it was, and every host stopped and let go."""
    hosts = MemoryHosts()
    run = memory_run(memory_config(tmp_path, RUN), hosts)
    rest_steps = StepFiles.rest_steps
    taken: list[Path] = []

    def taking_one(self: StepFiles) -> Generator[None, None, None]:
        assert self._todo, "every file was made before the Go"
        t, folder, _ = self._todo[-1]  # the last slice
        path = Path(self.output.folder, folder, self._names(t)[-1])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not ours\n")
        taken.append(path)
        yield from rest_steps(self)

    monkeypatch.setattr(StepFiles, "rest_steps", taking_one)
    result = execute(run)
    assert result.exit_code == EXIT_OUTPUT, result.message
    assert len(taken) == 1 and taken[0].name in result.message, result.message
    assert taken[0].read_text() == "not ours\n"
    assert all(h.session.closed and not h.backend.running for h in hosts.hosts.values())


def test_the_files_after_the_go_wait_for_its_confirmation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The files left for after the Go are made once every host confirmed it: the time the
    confirmation took, which sets later steps' leads, is not stretched by them."""
    order: list[str] = []
    take = StepFiles._take

    def noted(self: StepFiles) -> None:
        take(self)
        order.append(f"files {self.made}")

    monkeypatch.setattr(StepFiles, "_take", noted)
    loggers = [logging.getLogger(f"master.run.{m}") for m in ("steps", "stepfiles")]
    handler = logging.Handler()
    handler.emit = lambda r: order.append(r.getMessage())  # type: ignore[method-assign]
    for logger in loggers:
        caplog.set_level(logging.INFO, logger=logger.name)
        logger.addHandler(handler)
    try:
        result = execute(memory_run(memory_config(tmp_path, RUN), MemoryHosts()))
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert result.exit_code == EXIT_OK, result.message
    confirmed = next(i for i, m in enumerate(order) if "its Go confirmed by every host" in m)
    files = [int(m.split()[1]) for m in order if m.startswith("files ")]
    assert files == [1, 2, 3, 13, 23, 27]  # all, host, the LUN, workloads: 10 a slice
    # before the Go a slice at a time until the rate is known: the same files on any threads
    assert any("14 of its 27 instance files made after its Go" in m for m in order)
    assert order.index("files 13") < confirmed < order.index("files 23")
