"""The step's histogram files on the writer threads (``StepRecorder.summarise``): a job per
slice of instances that makes the slice's rows and writes its files, the next rollup type's
summary worked out meanwhile; a failed file raised once no job is running."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from master.analysis import rollup
from master.results.output import RunOutput
from master.run import recorder as recorder_module
from protocol.errors import OutputError
from tests.master.test_recorder import _four_subintervals

#: what a test waits for another thread's step at most (a pass never waits this long)
WAIT_S = 30.0


def _histogram_files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes()
            for p in sorted((top / "histograms").rglob("*.csv"))}


def test_the_next_types_summary_is_worked_out_while_the_files_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first rollup type's last histogram job waits until the second type's summary has
    been worked out: it is, while the job waits (a recorder that waited for the first type's
    files before the next summary would never start it: the job gives up after ``WAIT_S`` and
    the test fails). The files are then the same as on one thread."""
    monkeypatch.setattr(recorder_module, "HISTOGRAM_SLICE", 2)
    out = RunOutput(tmp_path / "one")
    rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 7, threads=1)
    rec.summarise([0, 1, 2, 3], sim.window(0, 3))
    out.close()
    want = _histogram_files(tmp_path / "one" / "step0000-x")

    out = RunOutput(tmp_path / "three")
    rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 7, threads=3)
    first, second = rec.rollups[0].type, rec.rollups[1].type
    n_first = rec.groupings[first].n
    second_summarised = threading.Event()
    waited: list[bool] = []
    compute = rollup.compute

    def noting(total: Any, g: rollup.Grouping, dur: float) -> rollup.RollupResult:
        if g is rec.groupings[second]:
            second_summarised.set()
        return compute(total, g, dur)

    slices = recorder_module.ru.histogram_slices

    def held(total: Any, g: rollup.Grouping, size: int) -> Any:
        for part in slices(total, g, size):
            if g is rec.groupings[first] and part.first + part.n == n_first:
                rows = part.rows
                object.__setattr__(part, "rows", lambda rows=rows: (
                    waited.append(second_summarised.wait(WAIT_S)), rows())[1])
            yield part

    monkeypatch.setattr(recorder_module.ru, "compute", noting)
    monkeypatch.setattr(recorder_module.ru, "histogram_slices", held)
    rec.summarise([0, 1, 2, 3], sim.window(0, 3))
    out.close()
    assert waited == [True]
    assert _histogram_files(tmp_path / "three" / "step0000-x") == want


def test_a_failed_histogram_file_is_raised_once_every_job_has_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A histogram file that cannot be made (an instance's file already there: files are
    never overwritten), on three writer threads a slice of 2 instances at a time:
    ``summarise`` raises the error naming that file, and when it does, no job is writing."""
    monkeypatch.setattr(recorder_module, "HISTOGRAM_SLICE", 2)
    out = RunOutput(tmp_path)
    rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 3, threads=3)
    first = "lun"  # four instances: two slices, the second failing, types after it to write
    taken = tmp_path / "step0000-x" / "histograms" / first / rec.file_names(first)[2]
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"someone else's\n")
    writing = 0
    lock = threading.Lock()
    histogram_csvs = out.histogram_csvs

    def counted(*args: Any) -> None:
        nonlocal writing
        with lock:
            writing += 1
        try:
            histogram_csvs(*args)
        finally:
            with lock:
                writing -= 1

    monkeypatch.setattr(out, "histogram_csvs", counted)
    with pytest.raises(OutputError, match=rf"histograms/{first}/{taken.name}") as caught:
        rec.summarise([0, 1, 2, 3], sim.window(0, 3))
    assert writing == 0, caught.value
    assert taken.read_bytes() == b"someone else's\n"
    out.close()


def test_a_failed_histogram_file_comes_before_an_error_of_the_next_types_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A histogram file of the LUN rollup that cannot be made, then an error while the next
    type's summary is worked out: the file's ``OutputError`` is raised (its job came first),
    the summary's error kept as its context."""
    monkeypatch.setattr(recorder_module, "HISTOGRAM_SLICE", 2)
    out = RunOutput(tmp_path)
    rec, sim = _four_subintervals(out, 0, ["measurement"] * 4, 3, threads=3)
    taken = tmp_path / "step0000-x" / "histograms" / "lun" / rec.file_names("lun")[2]
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"someone else's\n")
    compute = rollup.compute

    def failing(total: Any, g: rollup.Grouping, dur: float) -> rollup.RollupResult:
        if g is rec.groupings["workload"]:
            raise RuntimeError("the workload summary failed")
        return compute(total, g, dur)

    monkeypatch.setattr(recorder_module.ru, "compute", failing)
    with pytest.raises(OutputError, match=rf"histograms/lun/{taken.name}") as caught:
        rec.summarise([0, 1, 2, 3], sim.window(0, 3))
    assert isinstance(caught.value.__context__, RuntimeError)
    out.close()
