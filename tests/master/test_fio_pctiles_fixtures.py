"""ivypy fio-pctiles on small logs made by real fio 3.33 (tests/master/fixtures/fiologs; each
folder's job.fio says how): Unix-epoch stamps at log_hist_coarseness=3, gzipped, and logs
written in client/server mode at coarseness 2. Checked against the json+ bins of the same runs
(kept in bins.json), so these run without fio installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from master.fiologs.columns import ColumnLayout
from master.fiologs.parse import LogReader
from master.fiologs.pipeline import PctileOptions, compute_pctiles
from master.fiologs.repair import ClientLogRepairer
from protocol.buckets import FIO_BUCKETS, bucket_index_scalar

FIXTURES = Path(__file__).parent / "fixtures" / "fiologs"


def coarse_bins(folder: Path, coarseness: int) -> np.ndarray:
    fine = np.zeros(FIO_BUCKETS, dtype=np.int64)
    for job in json.loads((folder / "bins.json").read_text())["jobs"]:
        for direction in ("read", "write"):
            for value, n in job[direction]["clat_ns"]["bins"].items():
                fine[bucket_index_scalar(int(value))] += int(n)
    return fine.reshape(-1, 1 << coarseness).sum(axis=1)


def sums(logs: list[Path], n_columns: int, repair: bool) -> np.ndarray:
    out = np.zeros(n_columns, dtype=np.int64)
    for log in logs:
        fixer = ClientLogRepairer(str(log))
        for block in LogReader(log, n_columns).blocks():
            if repair:
                block = fixer.repair(block)
            np.add.at(out, block.entry_col, block.entry_count)
    return out


def test_epoch_coarse_gzip_logs() -> None:
    folder = FIXTURES / "epoch_c3"
    logs = sorted(folder.glob("h_clat_hist.*.log.gz"))
    result = compute_pctiles(logs, PctileOptions(summary=True))
    layout: ColumnLayout = result.layout
    assert (layout.fio_version, layout.coarseness, layout.n_columns) == (3, 3, 232)
    assert result.absolute and result.quantum_ms == 200
    assert all(int(q) * 200 > 1_600_000_000_000 for q in result.quanta)
    assert not result.warnings
    want = coarse_bins(folder, 3)
    got = sums(logs, 232, repair=False)
    assert bool(np.all(got <= want))  # fio's last partial windows are not in the logs
    assert result.summary is not None
    assert 0.6 * want.sum() <= result.summary["merged"].samples[0] <= want.sum()
    assert result.summary["merged"].samples[0] == got.sum()


def test_client_server_logs_from_real_fio() -> None:
    folder = FIXTURES / "client_c2"
    logs = sorted(folder.glob("h_clat_hist.*.log.*"))
    plain = compute_pctiles(logs, PctileOptions(summary=True))
    assert plain.layout.coarseness == 2
    assert sum("looks like a log written by fio in client/server mode" in w
               for w in plain.warnings) == 2
    want = coarse_bins(folder, 2)
    assert not bool(np.all(sums(logs, 464, repair=False) <= want))
    repaired = sums(logs, 464, repair=True)
    assert bool(np.all(repaired <= want))
    assert repaired.sum() >= 0.6 * want.sum()
    fixed = compute_pctiles(logs, PctileOptions(summary=True, repair_client_logs=True))
    assert fixed.summary is not None
    assert fixed.summary["merged"].samples[0] == repaired.sum()
    assert not fixed.warnings
