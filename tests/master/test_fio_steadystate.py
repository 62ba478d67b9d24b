"""fio equality: master.analysis.measure.fio_criterion on fio's own per-second samples gives fio's
answer.

Each job in fixtures/fio_ss/steadystate.fio has its own ``steadystate=`` option. For every job
we take the ``data`` arrays from fio's JSON ``steadystate`` section (``iops`` or ``bw``, oldest
first), run fio_criterion on them, and compare with what fio printed: ``attained``,
``criterion`` (fio prints it as a C float with ``%f``, plus ``%`` for percent limits),
``slope`` and ``max_deviation`` (``%f``).

The fixtures were produced with the Debian fio package by running this file as a script::

    .venv/bin/python tests/master/test_fio_steadystate.py tests/master/fixtures/fio_ss/NAME.json

and the live test runs fio the same way when it is installed (about 9 s, little CPU: the null
engine at a few thousand IOPS per job).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.analysis.measure import fio_criterion

FIXTURES = Path(__file__).parent / "fixtures" / "fio_ss"
JOB_FILE = FIXTURES / "steadystate.fio"


def trim_fio_output(doc: dict[str, Any]) -> dict[str, Any]:
    """Keep what the comparison needs from fio's JSON output, verbatim."""
    keep = ("jobname", "groupid", "job options", "job_runtime", "steadystate")
    return {
        "fio version": doc["fio version"],
        "global options": doc.get("global options", {}),
        "jobs": [{k: job[k] for k in keep if k in job} for job in doc["jobs"]],
    }


def run_fio(job_file: Path) -> dict[str, Any]:
    proc = subprocess.run(
        ["fio", "--output-format=json", str(job_file)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"fio failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return trim_fio_output(json.loads(proc.stdout))


def fio_float_text(value: float) -> str:
    """How fio prints ``criterion``: ``snprintf("%f", (float) value)``."""
    return f"{float(np.float32(value)):f}"


def check_job(job: dict[str, Any]) -> tuple[str, bool]:
    """Compare one job; returns (criterion name, attained) after asserting equality."""
    ss = job["steadystate"]
    name, limit = ss["ss"].split(":", 1)
    key = "iops" if name.startswith("iops") else "bw"
    samples = np.array(ss["data"][key], dtype=np.int64)
    assert samples.size == ss["duration"], "window not full: fio never evaluated it"
    ours = fio_criterion(samples, name, limit)
    percent = limit.endswith("%")
    where = f"job {job['jobname']} ({ss['ss']}, data {samples.tolist()})"
    assert ours.attained == bool(ss["attained"]), where
    assert fio_float_text(ours.criterion) + ("%" if percent else "") == ss["criterion"], where
    assert f"{ours.slope:f}" == f"{ss['slope']:f}", where
    assert f"{ours.max_deviation:f}" == f"{ss['max_deviation']:f}", where
    assert int(samples.sum()) // samples.size == ss["data"][f"{key}_mean"], where
    return name, bool(ss["attained"])


FIXTURE_FILES = sorted(FIXTURES.glob("fio-*.json"))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_fio_fixture_equality(path: Path) -> None:
    doc = json.loads(path.read_text())
    seen = {check_job(job) for job in doc["jobs"]}
    names = {name for name, _ in seen}
    assert names == {"iops", "iops_slope", "bw", "bw_slope"}
    assert {attained for _, attained in seen} == {True, False}


def test_fixtures_exist() -> None:
    assert len(FIXTURE_FILES) >= 2, "fixtures produced with real fio must be kept in the repo"


def test_fio_blog_example_bw_slope() -> None:
    """The bw_slope:4096 JSON example in fio's steady-state write-up (fio 3.30)."""
    bw = [34637645, 35135488, 35094528, 34973853, 34938880, 35141957, 34539243, 34836480,
          34936952, 34850850, 34697216, 34768848, 35049472, 34772948, 34861056, 34883651,
          34766848, 34608944, 34715547, 34762752, 34723747, 35018954, 34809849, 34621245,
          34801649, 34563843, 35035355, 35020800, 34895951, 34900052]
    ours = fio_criterion(np.array(bw), "bw_slope", "4096")
    assert ours.attained
    assert fio_float_text(ours.criterion) == "-3325.282471"
    assert f"{ours.slope:f}" == "-3325.282536"
    assert int(ours.mean) == 34845486


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt install fio)")
def test_fio_live_equality() -> None:
    doc = run_fio(JOB_FILE)
    seen = {check_job(job) for job in doc["jobs"]}
    assert {name for name, _ in seen} == {"iops", "iops_slope", "bw", "bw_slope"}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.write_text(json.dumps(run_fio(JOB_FILE), indent=1) + "\n")
    print(f"wrote {out}")
