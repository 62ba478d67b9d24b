"""Discovery reads only the block devices a test can select: none for a test of file LUNs, the
ones its ``path`` globs match otherwise (``DiscoverLuns.devices``), witnessed by the kernel's
read counters of loop devices the test does not name. On in-memory hosts: the slave session's
discovery is real, its I/O synthetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.master.gatherhelp import loop_devices, run_to_end
from tests.master.runhelp import rows

# another run beside these, whose test selects LUNs by attributes, would read every device
pytestmark = pytest.mark.alone

STEP = """\
steps:
  - name: s
    workloads: [{name: r, iosequencer: random_independent, blocksize: 4KiB, iodepth: 1}]
    warmup_seconds: 0
    measure_seconds: 0.5
"""


def _reads(dev: str) -> int:
    """Reads the block layer completed on ``dev`` (field 1 of its sysfs stat)."""
    return int((Path("/sys/block") / Path(dev).name / "stat").read_text().split()[0])


def test_a_test_of_file_luns_reads_no_block_device(tmp_path: Path) -> None:
    with loop_devices(2, 4 << 20) as devs:
        before = [_reads(d) for d in devs]
        folder = run_to_end(tmp_path, "files", f"""\
test: files
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{file: {tmp_path / "lun"}, size: 4MiB, create: true}}
{STEP}""", in_memory=True)
        assert [_reads(d) for d in devs] == before
    listed = rows(folder / "luns.csv")
    assert [(r["lun"], r["kind"]) for r in listed] == [(str(tmp_path / "lun"), "file")]


def test_a_path_names_the_only_devices_read(tmp_path: Path) -> None:
    with loop_devices(2, 4 << 20) as (named, other):
        before = _reads(other)
        folder = run_to_end(tmp_path, "paths", f"""\
test: paths
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{path: "{named}"}}
{STEP}""", in_memory=True)
        assert _reads(other) == before
    listed = rows(folder / "luns.csv")
    assert [(r["lun"], r["selected"]) for r in listed] == [(named, "true")]
    assert int(float(rows(folder / "summary.csv")[0]["IOPS"])) > 0
