"""ivypy fio-pctiles read by several processes gives what one process gives: the same CSV, the
same warnings in the same order, and the same error (the first malformed line in file order)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np
import pytest

from master.cli.main import main
from master.fiologs import pipeline
from master.fiologs.parse import open_log
from master.fiologs.pipeline import PctileOptions, PctileResult, _start_method, compute_pctiles
from master.fiologs.synth import fio_counts, write_log
from protocol.errors import ConfigError, LogFormatError


def csv_text(result: PctileResult) -> str:
    out = io.StringIO()
    result.write_csv(out)
    return out.getvalue()


def make_logs(tmp_path: Path, n_files: int, *, offsets_ms: list[int], seed: int = 0,
              rows: int = 30) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(n_files):
        body = []
        for k in range(rows):
            for d in (0, 1):
                lat = rng.lognormal(np.log(rng.uniform(50_000, 400_000)), 0.5,
                                    size=int(rng.integers(50, 400))).astype(np.int64)
                body.append((1000 * (k + 1) + offsets_ms[f % len(offsets_ms)], d,
                             fio_counts(lat, coarseness=2)))
        paths.append(write_log(tmp_path / f"j{f}_clat_hist.1.log", body, gz=f % 3 == 2))
    return paths


def text_of(path: Path) -> str:
    with open_log(path) as f:
        return f.read().decode()


def run(paths: list[Path], **kw: object) -> PctileResult:
    return compute_pctiles(paths, PctileOptions(**kw))  # type: ignore[arg-type]


def test_aligned_rows_give_the_same_csv_byte_for_byte(tmp_path: Path) -> None:
    # rows on whole seconds and halves: every spread weight is exact, so sums are too
    logs = make_logs(tmp_path, 5, offsets_ms=[0, 500])
    kw = {"directions": ("read", "write", "merged"), "summary": True, "time_quantum_s": 1.0}
    one = run(logs, jobs=1, **kw)
    for jobs in (2, 3, 8):
        many = run(logs, jobs=jobs, **kw)
        assert csv_text(many) == csv_text(one)
        assert many.warnings == one.warnings


def test_straddling_rows_agree_to_rounding(tmp_path: Path) -> None:
    # stamps a few ms off the quanta: weights like 0.993 make float sums depend on the order
    # of addition, so the processes' partial sums may differ from one pass in the last bits
    logs = make_logs(tmp_path, 4, offsets_ms=[7, 13, 29, 41], seed=1)
    kw = {"time_quantum_s": 1.0, "unit": "ns", "summary": True}
    one = run(logs, jobs=1, **kw)
    two = run(logs, jobs=2, **kw)
    assert np.array_equal(two.quanta, one.quanta)
    a, b = one.groups["merged"], two.groups["merged"]
    assert np.allclose(a.samples, b.samples, rtol=1e-12)
    assert np.allclose(a.pct_ns, b.pct_ns, rtol=1e-9, equal_nan=True)
    assert np.array_equal(a.min_ns, b.min_ns, equal_nan=True)
    assert np.array_equal(a.max_ns, b.max_ns, equal_nan=True)


def test_warnings_keep_file_order_across_processes(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 4, offsets_ms=[0])
    # a malformed line in the second and the fourth file, skipped
    for i in (1, 3):
        plain = tmp_path / f"bad{i}.log"
        plain.write_text(text_of(logs[i]) + f"99000, 7, 4096, {', '.join(['0'] * 464)}\n")
        logs[i] = plain
    empty = tmp_path / "empty.log"
    empty.write_text("")
    logs.insert(2, empty)
    one = run(logs, jobs=1, skip_bad_lines=True, time_quantum_s=1.0)
    two = run(logs, jobs=2, skip_bad_lines=True, time_quantum_s=1.0)
    assert csv_text(two) == csv_text(one)
    assert two.warnings == one.warnings
    skipped = [w for w in one.warnings if "skipped: direction 7" in w]
    assert [w.split(":")[0] for w in skipped] == [str(logs[1]), str(logs[4])]
    assert one.warnings[0] == f"{empty}: no histogram rows; skipped"


def test_the_first_malformed_line_in_file_order_is_the_error(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 4, offsets_ms=[0])
    for i, line in ((1, "oops"), (2, "-3"), (3, "x")):
        plain = tmp_path / f"bad{i}.log"
        plain.write_text(text_of(logs[i]) + f"99000, 0, 4096, {line}\n")
        logs[i] = plain
    errors = []
    for jobs in (1, 2, 4):
        with pytest.raises(LogFormatError) as info:
            run(logs, jobs=jobs, time_quantum_s=1.0)
        errors.append((str(info.value), info.value.file, info.value.line))
    assert errors[0][1] == str(logs[1]) and errors[0][2] == 61
    assert "expected 467 fields" in errors[0][0]
    assert errors[1] == errors[0] and errors[2] == errors[0]


def test_jobs_must_be_positive_and_the_cli_takes_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    logs = make_logs(tmp_path, 2, offsets_ms=[0], rows=3)
    with pytest.raises(ConfigError, match="jobs"):
        run(logs, jobs=0)
    assert main(["fio-pctiles", "--jobs", "2", *map(str, logs)]) == 0
    two = capsys.readouterr().out
    assert main(["fio-pctiles", "--jobs", "1", *map(str, logs)]) == 0
    assert capsys.readouterr().out == two
    assert two.startswith("start_ms,end_ms,samples,")


def test_with_other_threads_running_readers_start_as_fresh_interpreters(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 2, offsets_ms=[0, 500], rows=5)
    one = run(logs, jobs=1, time_quantum_s=1.0)
    if threading.active_count() == 1:
        assert _start_method() == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _start_method() in ("forkserver", "spawn")
        two = run(logs, jobs=2, time_quantum_s=1.0)
    finally:
        release.set()
        other.join()
    assert csv_text(two) == csv_text(one)


@pytest.mark.parametrize("jobs", [1, 3])
def test_logs_spanning_more_quanta_than_memory_allows_are_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    # 30 s of logs at a 1 ms quantum: 30,000 quanta of 1,856 float64 columns (445 MB), over
    # the 40 MB the reading processes are given here: an error naming the option, the span and
    # the shortest quantum that fits, before anything that large is made (in every reading
    # process); that quantum then works
    monkeypatch.setattr(pipeline, "_sums_bytes", lambda n: 40_000_000 // n)
    logs = make_logs(tmp_path, 3, offsets_ms=[0], rows=30)
    with pytest.raises(ConfigError) as info:
        run(logs, jobs=jobs, time_quantum_s=0.001)
    text = str(info.value)
    assert info.value.key_path == "time_quantum"
    assert "the logs span 30 s, 30,00" in text and "quanta of 0.001 s" in text
    shortest = float(text.split("--time-quantum of at least ")[1].split(" s")[0])
    assert 0.001 < shortest <= 0.05
    assert len(run(logs, jobs=jobs, time_quantum_s=shortest).quanta) > 1000


def test_epoch_logs_days_apart_at_their_own_interval_are_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # two hosts' logs stamped in Unix-epoch ms, taken three days apart: at the logs' own
    # interval (1 s) the quanta span the whole gap (259,000 of them, 3.8 GB)
    monkeypatch.setattr(pipeline, "_sums_bytes", lambda n: 400_000_000 // n)
    day0 = 1_780_000_000_000
    rng = np.random.default_rng(3)
    logs = [write_log(tmp_path / f"h{h}_clat_hist.1.log",
                      [(day0 + h * 3 * 86_400_000 + 1000 * k, 0,
                        fio_counts(rng.integers(100_000, 200_000, 50))) for k in range(1, 20)])
            for h in (0, 1)]
    with pytest.raises(ConfigError, match=r"time_quantum: the logs span 259,2\d\d s"):
        run(logs, jobs=1)


def test_the_cli_says_a_quantum_too_fine_in_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # 10 s at 1 us: 10 million quanta, 138 GiB, refused whatever this host's memory
    logs = make_logs(tmp_path, 1, offsets_ms=[0], rows=10)
    assert main(["fio-pctiles", "--time-quantum", "0.000001", str(logs[0])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ivypy: error: time_quantum: the logs span 10 s")
