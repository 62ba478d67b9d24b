"""ivypy fio-pctiles end to end on synthetic logs made from known latencies, where the exact
answer is known: alignment and proportional spreading, epoch stamps, jobs starting at different
times, coarseness 1-3, both directions, empty quanta, fio's open last bucket, fio 2.x logs,
client/server repair, summary, CSV shape and errors."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from master.cli.main import main
from master.fiologs.columns import make_layout
from master.fiologs.pipeline import PctileOptions, PctileResult, compute_pctiles
from master.fiologs.synth import fio_counts, write_log
from protocol.buckets import LOWER_NS, UPPER_NS, bucket_index_scalar
from protocol.errors import ConfigError, LogFormatError

EPOCH = 1_700_000_000_000


def const(latency_ns: int, n: int, **kw: int) -> np.ndarray:
    return fio_counts(np.full(n, latency_ns), **kw)


def bucket_range(latency_ns: int) -> tuple[float, float]:
    """Inclusive value range of the fio 3 bucket holding a latency."""
    i = bucket_index_scalar(latency_ns)
    return float(LOWER_NS[i]), float(UPPER_NS[i] - 1)


def table(result: PctileResult) -> list[dict[str, str]]:
    out = io.StringIO()
    result.write_csv(out)
    return list(csv.DictReader(io.StringIO(out.getvalue())))


def run(paths: list[Path], **kw: object) -> PctileResult:
    return compute_pctiles(paths, PctileOptions(**kw))  # type: ignore[arg-type]


def test_rows_on_quanta_give_each_row_its_own_quantum(tmp_path: Path) -> None:
    lat = [1000, 20_000, 300_000]
    log = write_log(tmp_path / "a.log", [(1000 * (k + 1), 0, const(v, 100)) for k, v in
                                         enumerate(lat)])
    result = run([log], percentiles=(50.0,), unit="ns")
    rows = table(result)
    assert [(r["start_ms"], r["end_ms"]) for r in rows] == [
        ("0", "1000"), ("1000", "2000"), ("2000", "3000")]
    assert result.quantum_ms == 1000.0  # detected from the stamps
    for r, v in zip(rows, lat, strict=True):
        lo, hi = bucket_range(v)
        assert r["samples"] == "100"
        assert float(r["min_ns"]) == lo and float(r["max_ns"]) == hi
        assert float(r["p50_ns"]) == pytest.approx(lo + 0.5 * (hi - lo))


def test_proportional_spreading_over_offset_and_finer_quanta(tmp_path: Path) -> None:
    # rows end at 1500, 2500, 3500: with 1 s quanta each quantum holds half of two rows
    lo_lat, hi_lat = 1000, 1_000_000
    rows = [(1500, 0, const(lo_lat, 400)), (2500, 0, const(hi_lat, 400)),
            (3500, 0, const(lo_lat, 400))]
    log = write_log(tmp_path / "a.log", rows)
    result = run([log], time_quantum_s=1.0, percentiles=(25.0, 75.0), unit="ns")
    got = table(result)
    # first row covers (0, 1500]: 2/3 in [0,1000), 1/3 in [1000,2000)
    assert [r["samples"] for r in got] == ["266.667", "333.333", "400", "200"]
    # quantum [2000,3000): 200 at 1 us + 200 at 1 ms -> p25 inside the 1 us bucket, p75 in 1 ms
    q = got[2]
    lo1, hi1 = bucket_range(lo_lat)
    lo2, hi2 = bucket_range(hi_lat)
    assert float(q["p25_ns"]) == pytest.approx(lo1 + 0.5 * (hi1 - lo1))
    assert float(q["p75_ns"]) == pytest.approx(lo2 + 0.5 * (hi2 - lo2), abs=1e-3)
    # quanta of 250 ms: each 1000 ms row puts a quarter in each
    fine = table(run([log], time_quantum_s=0.25))
    assert fine[6]["samples"] == "100"  # [1500, 1750) is a quarter of (1500, 2500]
    assert sum(float(r["samples"]) for r in fine) == pytest.approx(1200, abs=0.01)


def test_epoch_stamps_and_jobs_starting_at_different_times(tmp_path: Path) -> None:
    # job A logs every second from EPOCH+250; job B starts three seconds later
    a = [(EPOCH + 250 + 1000 * k, 1, const(2000, 100)) for k in range(6)]
    b = [(EPOCH + 3250 + 1000 * k, 1, const(2000, 100)) for k in range(6)]
    pa = write_log(tmp_path / "a.log", a)
    pb = write_log(tmp_path / "b.log", b, gz=True)
    result = run([pa, pb])
    assert result.absolute
    got = table(result)
    # A's first row covers (EPOCH-750, EPOCH+250]: quanta sit on whole epoch seconds
    assert got[0]["start_ms"] == str(EPOCH - 1000)
    # A: 75 before EPOCH, then 100 per second, 25 in its last; B the same three seconds later
    assert [r["samples"] for r in got] == ["75", "100", "100", "175", "200", "200", "125",
                                           "100", "100", "25"]
    assert all(r["end_ms"] == str(int(r["start_ms"]) + 1000) for r in got)


def test_coarseness_one_to_three(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    lat = rng.lognormal(np.log(200_000), 0.6, size=20_000).astype(np.int64)
    chunks = np.array_split(lat, 4)
    fine_rows = table(run([write_log(tmp_path / "c0.log", [
        (1000 * (k + 1), 0, fio_counts(c)) for k, c in enumerate(chunks)])]))
    for coarse in (1, 2, 3):
        layout = make_layout(3, coarse)
        log = write_log(tmp_path / f"c{coarse}.log", [
            (1000 * (k + 1), 0, fio_counts(c, coarseness=coarse)) for k, c in enumerate(chunks)])
        got = table(run([log], unit="ns"))
        for r, f in zip(got, fine_rows, strict=True):
            assert r["samples"] == f["samples"]
            for key in ("p50", "p90", "p99", "p99.9"):
                fine_ns = float(f[f"{key}_us"]) * 1000
                col = np.searchsorted(layout.lower_ns, fine_ns, side="right") - 1
                # the coarse answer lies in the coarse column that holds the fine answer
                assert layout.lower_ns[col] <= float(r[f"{key}_ns"]) <= layout.upper_ns[col] + 1


def test_constant_latency_in_a_coarse_column_is_its_midpoint(tmp_path: Path) -> None:
    layout = make_layout(3, 3)  # 8 fine buckets per column
    log = write_log(tmp_path / "a.log", [(1000, 0, const(10_000, 64, coarseness=3))])
    got = table(run([log], unit="ns", log_hist_msec=1000.0))
    col = int(np.searchsorted(layout.lower_ns, 10_000, side="right") - 1)
    lo, hi = layout.lower_ns[col], layout.upper_ns[col]
    assert float(got[0]["p50_ns"]) == pytest.approx(lo + 0.5 * (hi - lo))
    assert float(got[0]["min_ns"]) == lo and float(got[0]["max_ns"]) == hi


def test_both_directions_separately_and_merged(tmp_path: Path) -> None:
    rows = []
    for k in range(3):
        rows.append((1000 * (k + 1), 1, const(1_000_000, 50)))  # writes: 1 ms
        rows.append((1000 * (k + 1), 0, const(1_000, 50)))  # reads: 1 us
    log = write_log(tmp_path / "rw.log", rows)
    result = run([log], directions=("read", "write", "merged"), unit="ns",
                 percentiles=(50.0, 90.0), summary=True)
    header = result.header()
    assert header[:4] == ["start_ms", "end_ms", "read_samples", "read_min_ns"]
    assert "write_p90_ns" in header and "p90_ns" in header and "merged_p90_ns" not in header
    got = table(result)
    lo_r, hi_r = bucket_range(1_000)
    lo_w, hi_w = bucket_range(1_000_000)
    for r in got:
        assert float(r["read_p50_ns"]) == pytest.approx((lo_r + hi_r) / 2)
        assert float(r["write_p50_ns"]) == pytest.approx((lo_w + hi_w) / 2)
        assert float(r["p50_ns"]) == hi_r  # rank 50 ends exactly at the last read
        assert float(r["p90_ns"]) == pytest.approx(lo_w + 0.8 * (hi_w - lo_w))
        assert float(r["min_ns"]) == lo_r and float(r["max_ns"]) == hi_w
    assert len(got) == 4  # three quanta and the summary
    assert got[-1]["samples"] == "300" and got[-1]["start_ms"] == "0"
    assert got[-1]["end_ms"] == "3000"


def test_empty_quanta_have_zero_samples_and_empty_cells(tmp_path: Path) -> None:
    rows = [(1000, 0, const(5000, 10)), (2000, 0, np.zeros(1856, dtype=np.int64)),
            (3000, 0, const(5000, 10))]
    got = table(run([write_log(tmp_path / "a.log", rows)]))
    assert got[1]["samples"] == "0"
    assert all(got[1][k] == "" for k in ("min_us", "p50_us", "p99.9_us", "max_us"))
    assert got[2]["samples"] == "10"


def test_trim_is_a_third_direction(tmp_path: Path) -> None:
    rows = [(1000, 2, const(7000, 10)), (1000, 0, const(5000, 10))]
    result = run([write_log(tmp_path / "t.log", rows)], directions=("trim", "merged"),
                 log_hist_msec=1000.0)
    got = table(result)
    assert got[0]["trim_samples"] == "10" and got[0]["samples"] == "20"


def test_fio_last_bucket_is_reported_as_its_lower_edge_with_a_warning(tmp_path: Path) -> None:
    rows = [(1000, 0, fio_counts(np.array([1000] * 90 + [30_000_000_000] * 10)))]
    result = run([write_log(tmp_path / "a.log", rows)], unit="ns",
                 percentiles=(50.0, 95.0), log_hist_msec=1000.0)
    got = table(result)[0]
    edge = float(LOWER_NS[1855])
    assert float(got["p95_ns"]) == edge and float(got["max_ns"]) == edge
    assert any("last histogram bucket" in w and "17179.869" not in w for w in result.warnings)
    assert any(f"{edge / 1e6:.3f} ms" in w for w in result.warnings)


def test_fio2_logs_in_microseconds(tmp_path: Path) -> None:
    rows = [(1000, 0, const(1_500_000, 10, fio_version=2))]  # 1500 us
    log = write_log(tmp_path / "v2.log", rows)
    got = table(run([log], unit="ns", fio_version=2, log_hist_msec=1000.0))[0]
    # 1500 us is in the us bucket [1488, 1503] -> ns values [1488000, 1503999]
    assert float(got["min_ns"]) == 1_488_000 and float(got["max_ns"]) == 1_503_999
    assert float(got["p50_ns"]) == pytest.approx(1_488_000 + 0.5 * 15_999)
    with pytest.raises(LogFormatError, match="not a fio 3"):
        run([log], fio_version=3, log_hist_msec=1000.0)


def _client_shape(true_rows: list[tuple[int, int, np.ndarray]]) -> list[tuple[int, int,
                                                                              np.ndarray]]:
    logged: list[tuple[int, int, np.ndarray]] = []
    per_dir: dict[int, list[np.ndarray]] = {}
    for t, d, c in true_rows:
        seen = per_dir.setdefault(d, [])
        row = c + seen[-2] if len(seen) >= 2 else c.copy()
        seen.append(row)
        logged.append((t, d, row))
    return logged


def test_client_server_logs_are_detected_and_repaired(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    true_rows = []
    for k in range(8):
        for d in (0, 1):
            lat = rng.lognormal(np.log(50_000), 0.5, size=500).astype(np.int64)
            true_rows.append((1000 * (k + 1), d, fio_counts(lat)))
    honest = write_log(tmp_path / "honest.log", true_rows)
    broken = write_log(tmp_path / "h_clat_hist.1.log.127.0.0.1", _client_shape(true_rows))
    want = table(run([honest]))
    plain = run([broken])
    assert any("client/server" in w and "--repair-client-logs" in w for w in plain.warnings)
    assert table(plain) != want
    repaired = run([broken], repair_client_logs=True)
    assert table(repaired) == want
    assert not any("looks like" in w for w in repaired.warnings)
    not_shaped = run([honest], repair_client_logs=True)
    assert table(not_shaped) == want
    assert any("not in the client/server shape" in w for w in not_shaped.warnings)
    assert not any("client/server" in w for w in run([honest]).warnings)


def test_repair_is_streamed_across_chunks(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    true_rows = [(1000 * (k + 1), 0, fio_counts(rng.integers(1000, 90_000, size=300),
                                                coarseness=2)) for k in range(40)]
    honest = write_log(tmp_path / "a.log", true_rows)
    broken = write_log(tmp_path / "b.log", _client_shape(true_rows))
    want = table(run([honest]))
    got = table(run([broken], repair_client_logs=True, chunk_bytes=5000))
    assert got == want


def test_mismatched_layouts_and_time_bases_are_errors(tmp_path: Path) -> None:
    a = write_log(tmp_path / "a.log", [(1000, 0, const(1000, 1))])
    b = write_log(tmp_path / "b.log", [(1000, 0, const(1000, 1, coarseness=1))])
    with pytest.raises(LogFormatError, match="928 histogram columns") as info:
        run([a, b], log_hist_msec=1000.0)
    assert info.value.file == str(b)
    c = write_log(tmp_path / "c.log", [(EPOCH, 0, const(1000, 1))])
    with pytest.raises(LogFormatError, match="Unix-epoch"):
        run([a, c], log_hist_msec=1000.0)
    with pytest.raises(LogFormatError, match="interval"):
        run([a])
    with pytest.raises(ConfigError, match=r"within 0\.\.100"):
        run([a], percentiles=(101.0,))


def test_cli_writes_csv_and_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    log = write_log(tmp_path / "a.log", [(1000 * (k + 1), 0, const(3000, 10)) for k in range(3)])
    out = tmp_path / "out.csv"
    assert main(["fio-pctiles", "--output", str(out), "--unit", "ms",
                 "--percentiles", "50,99.99", "--summary", str(log)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "start_ms,end_ms,samples,min_ms,p50_ms,p99.99_ms,max_ms"
    assert len(lines) == 5
    assert main(["fio-pctiles", str(log)]) == 0
    assert capsys.readouterr().out.startswith("start_ms,end_ms,samples,min_us,p50_us,p90_us,"
                                              "p95_us,p99_us,p99.9_us,max_us\n")
    bad = tmp_path / "bad.log"
    bad.write_text(log.read_text() + "4000, 0, 4096, oops\n")
    assert main(["fio-pctiles", str(bad)]) == 2
    assert f"{bad}:4:" in capsys.readouterr().err
    assert main(["fio-pctiles", "--skip-bad-lines", str(bad)]) == 0
    assert "skipped" in capsys.readouterr().err
