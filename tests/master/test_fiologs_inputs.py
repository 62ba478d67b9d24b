"""ivypy fio-pctiles on inputs a lab hits by accident: a damaged gzip log, a quantum that is not
a binary fraction of a ms, absurd option values, a stamp years off, ``-o`` naming a log, and
warnings printed once on the command line."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from master.cli.main import main
from master.fiologs import pipeline
from master.fiologs.align import Spread, spread_rows
from master.fiologs.pipeline import PctileOptions, PctileResult, compute_pctiles
from master.fiologs.synth import fio_counts, format_row, write_log
from protocol.errors import ConfigError, LogFormatError

ROOT = Path(__file__).resolve().parents[2]


def run(paths: list[Path], **kw: object) -> PctileResult:
    return compute_pctiles(paths, PctileOptions(**kw))  # type: ignore[arg-type]


def _csv(result: PctileResult) -> str:
    out = io.StringIO()
    result.write_csv(out)
    return out.getvalue()


def steady_log(path: Path, rows: int, step_ms: int = 1000, *, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    return write_log(path, [(step_ms * (k + 1), k % 2,
                             fio_counts(rng.integers(50_000, 900_000, 300)))
                            for k in range(rows)])


@pytest.mark.parametrize("good_rows", [0, 300])
def test_damaged_gzip_log_is_an_error_naming_the_file(tmp_path: Path, good_rows: int) -> None:
    # damaged deflate data makes zlib raise zlib.error, which is not an OSError: a traceback
    # unless caught (at the start it is met by the first-line probe, later by the reader)
    lines = steady_log(tmp_path / "plain.log", 400).read_bytes().splitlines(keepends=True)
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # a gzip stream
    packed = packer.compress(b"".join(lines[:good_rows])) + packer.flush(zlib.Z_FULL_FLUSH)
    damaged = tmp_path / "h_clat_hist.1.log.gz"
    damaged.write_bytes(packed + b"\x07" + bytes(32))  # a deflate block of reserved type 3
    with pytest.raises(LogFormatError, match=r"cannot read: .*invalid block type") as info:
        run([damaged, tmp_path / "plain.log"])
    assert info.value.file == str(damaged)


def test_a_quantum_that_is_no_binary_fraction_of_a_ms_adds_no_sliver() -> None:
    # 4.02 s is 4019.9999999999995 ms in floating point: rows on 4020 ms boundaries must still
    # fall wholly in their own quantum, with weight 1 and no sliver in the next one
    q_ms = 4.02 * 1000.0
    assert q_ms != 4020.0
    start = np.array([0.0, 4020.0, 8040.0])
    end = np.array([4020.0, 8040.0, 12060.0])
    s: Spread = spread_rows(start, end, q_ms)
    assert s.pair_quantum.tolist() == [0, 1, 2]
    assert s.pair_weight.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("quantum_s", [4.02, 2.01, 0.07])
def test_rows_on_the_quanta_of_such_a_quantum_fill_them_exactly(tmp_path: Path,
                                                                 quantum_s: float) -> None:
    step = round(quantum_s * 1000)
    log = write_log(tmp_path / "a.log", [(step * (k + 1), 0, fio_counts(np.full(100, 5000)))
                                         for k in range(3)])
    result = run([log], time_quantum_s=quantum_s)
    assert result.quanta.tolist() == [0, 1, 2]  # no empty quantum after the last row
    assert result.groups["merged"].samples.tolist() == [100.0, 100.0, 100.0]
    rows = [r.split(",")[:2] for r in _csv(result).splitlines()[1:]]
    assert rows == [[str(step * k), str(step * (k + 1))] for k in range(3)]


@pytest.mark.parametrize(("option", "value", "key"), [
    ("time_quantum_s", math.inf, "time_quantum"),
    ("time_quantum_s", 1e-12, "time_quantum"),
    ("log_hist_msec", math.inf, "log_hist_msec"),
])
def test_infinite_or_vanishing_quantum_and_interval_are_refused(
        tmp_path: Path, option: str, value: float, key: str) -> None:
    # --time-quantum inf printed a row "nan,inf"; --log-hist-msec inf was an OverflowError
    log = write_log(tmp_path / "a.log", [(1000 * (k + 1), 0, fio_counts(np.full(10, 5000)))
                                         for k in range(3)])
    with pytest.raises(ConfigError) as info:
        run([log], **{option: value})
    assert info.value.key_path == key


@pytest.mark.parametrize(("percentiles", "twice"), [
    ((50.0, 50.0), "50 given twice"),
    ((99.0, 50.0, 99.0, 50.0), "50, 99 given twice"),
])
def test_a_percentile_named_twice_is_refused(tmp_path: Path, percentiles: tuple[float, ...],
                                             twice: str) -> None:
    # it made two CSV columns of one name
    log = write_log(tmp_path / "a.log", [(1000 * (k + 1), 0, fio_counts(np.full(10, 5000)))
                                         for k in range(3)])
    with pytest.raises(ConfigError) as info:
        run([log], percentiles=percentiles)
    assert info.value.key_path == "percentiles" and twice in str(info.value), info.value


def test_a_stamp_far_off_is_refused_before_its_row_is_spread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a job-relative stamp 2.8 years on (a damaged line): at 1 s quanta the row would reach
    # 90 million quanta; spreading it first took 5 GB and 10 s (a MemoryError on a small host)
    monkeypatch.setattr(pipeline, "_sums_bytes", lambda n: 400_000_000 // n)
    real_spread = spread_rows  # what pipeline calls

    def bounded_spread(start: np.ndarray, end: np.ndarray, quantum_ms: float) -> Spread:
        reach = math.ceil(float(end.max()) / quantum_ms) - math.floor(float(start.min())
                                                                      / quantum_ms)
        assert reach <= 1_000_000, f"rows spread over {reach:,} quanta"
        return real_spread(start, end, quantum_ms)

    monkeypatch.setattr(pipeline, "spread_rows", bounded_spread)
    counts = fio_counts(np.full(20, 5000))
    log = write_log(tmp_path / "jump.log", [(1000, 0, counts), (2000, 0, counts),
                                            (90_000_000_000, 0, counts)])
    with pytest.raises(ConfigError, match=r"time_quantum: the logs span 90,000,000 s"):
        run([log], time_quantum_s=1.0)


def test_output_naming_a_log_is_refused_and_the_log_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "-o *_clat_hist.*.log": the shell makes the first log the output file
    first = steady_log(tmp_path / "h_clat_hist.1.log", 4)
    second = steady_log(tmp_path / "h_clat_hist.2.log", 4, seed=1)
    before = first.read_bytes()
    assert main(["fio-pctiles", "-o", str(first), str(second)]) == 2
    err = capsys.readouterr().err
    assert f"--output: {first}: exists and is not a CSV written by ivypy fio-pctiles" in err
    assert first.read_bytes() == before
    out = tmp_path / "out.csv"
    out.write_text("")  # an empty file, or a CSV this command wrote, is replaced
    assert main(["fio-pctiles", "-o", str(out), str(first)]) == 0
    assert main(["fio-pctiles", "-o", str(out), str(second)]) == 0
    assert out.read_text().startswith("start_ms,end_ms,samples,")
    assert len(out.read_text().splitlines()) == 3  # header, two 2 s quanta


def test_the_cli_prints_each_warning_once(tmp_path: Path) -> None:
    # the warnings were printed by the CLI and a second time by logging's last-resort handler
    # (a process that configured no logging); those met before an error are printed too
    empty = tmp_path / "empty.log"
    empty.write_text("")
    good = steady_log(tmp_path / "good.log", 4)
    bad = tmp_path / "bad.log"
    bad.write_text(good.read_text() + format_row(9000, 7, fio_counts(np.full(3, 5000))))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "master", "fio-pctiles", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, check=False)

    done = cli(str(empty), str(good))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"ivypy fio-pctiles: warning: {empty}: no histogram rows; skipped"]
    done = cli(str(empty), str(bad))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"ivypy fio-pctiles: warning: {empty}: no histogram rows; skipped",
        f"ivypy: error: {bad}:5: direction 7 is not 0, 1 or 2"]
