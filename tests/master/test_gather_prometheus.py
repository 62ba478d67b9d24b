"""A real Prometheus node_exporter (Debian ``prometheus-node-exporter``, started here on
127.0.0.1 with only its diskstats collector) as a ``gather:`` source: the read-completion
counter of the test's loop device, gathered as a rate and joined to the LUN by the device's
kernel name, agrees with ivypy's IOPS within 10 % in every subinterval."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.master.gatherhelp import free_port, loop_devices, run_to_end
from tests.master.runhelp import rows

# a scrape of node_exporter at each boundary against ivypy's IOPS of the same subinterval, within
# 10 %: a scrape that comes late moves reads between subintervals (test_run_gather_dfc.py's
# boundary samples came late beside the parallel part's runs; not beside one paced run like it:
# ``pair``)
pytestmark = [pytest.mark.alone, pytest.mark.pair]

EXPORTER = "/usr/bin/prometheus-node-exporter"
N = 5  # measurement subintervals of 1 s
METRIC = "gather.node.disk.node_disk_reads_completed_total"


@pytest.fixture
def exporter(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(loop device, metrics URL) with node_exporter serving that device's diskstats."""
    if shutil.which(EXPORTER) is None:
        pytest.skip("prometheus-node-exporter is not installed (scripts/_env.sh installs it)")
    with loop_devices(1) as (dev,):
        name = Path(dev).name
        port = free_port()
        proc = subprocess.Popen(
            [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
             # the default excludes loop devices; ``device-include`` with it is refused
             "--collector.diskstats", r"--collector.diskstats.device-exclude=^(ram|fd)\d+$"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=2) as page:
                        if f'device="{name}"' in page.read().decode():
                            break
                except OSError:
                    pass
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "node_exporter did not serve the device"
                time.sleep(0.1)
            yield dev, url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_node_exporter_read_rate_agrees_with_ivypy_iops(exporter: tuple[str, str],
                                                          tmp_path: Path) -> None:
    dev, url = exporter
    name = Path(dev).name
    folder = run_to_end(tmp_path, "gprom", f"""\
test: gprom
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {{path: {dev}}}
gather:
  - {{name: node, prometheus: "{url}", metrics: [node_disk_reads_completed_total,
      /node_disk_read_bytes_total/], element_type: disk, instance_label: device,
     timeout: 0.5s, join: {{element_type: disk, by: element_instance, lun_attribute: name}}}}
steps:
  - name: s
    workloads:
      - {{name: w, iosequencer: random_independent, iops: 500}}
    warmup_seconds: 0
    measure_seconds: {N}
""")
    step = folder / "step0000-s"
    every = rows(step / "gather/node/disk.csv")  # every block device of the machine
    assert sorted({int(r["subinterval"]) for r in every}) == list(range(N))
    disk = [r for r in every if r["element_instance"] == name]
    assert [int(r["subinterval"]) for r in disk] == list(range(N))
    assert list(disk[0])[3:] == ["node_disk_read_bytes_total", "node_disk_reads_completed_total"]
    (lun_file,) = [p for p in (step / "lun").glob("*.csv") if p.name != "summary.csv"]
    iops = {int(r["subinterval"]): float(r["IOPS"]) for r in rows(lun_file)}
    joined = {int(r["subinterval"]): r for r in rows(lun_file)}  # the gathered columns
    assert sorted(joined) == sorted(iops) == list(range(N))
    for k in range(N):
        rate = float(disk[k]["node_disk_reads_completed_total"])
        assert rate == pytest.approx(iops[k], rel=0.10), (k, rate, iops[k])
        assert float(joined[k][METRIC]) == rate
        assert joined[k]["rollup_instance"] == f"localhost:{dev}"
        assert joined[k]["gather.node.disk.node_disk_read_bytes_total"] != ""
        # 4 KiB reads, and a few larger ones of udev's probe of the new device
        assert float(disk[k]["node_disk_read_bytes_total"]) >= rate * 4096 * 0.9
    outside = rows(step / "gather/node/non_participating.csv")
    assert len(outside) == N and all(int(r["elements"]) == len(every) // N - 1 for r in outside)
    il = [r for r in rows(step / "interlock.csv") if r["gather_source"] == "node"]
    assert [r["gather_status"] for r in il] == ["ok"] * N
    print("per subinterval: IOPS", [round(iops[k]) for k in range(N)], "node_exporter",
          [round(float(disk[k]["node_disk_reads_completed_total"])) for k in range(N)],
          "scrape ms", [round(float(r["gather_duration_us"]) / 1e3, 1) for r in il])
