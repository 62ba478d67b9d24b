"""A real Prometheus server (Debian's ``prometheus``, started here) scrapes a running test's
``/metrics`` (``--metrics``, with a bearer token) every second: once the first step has
ended, its ``ivypy_ios_total`` over the ``all`` rollup equals the I/Os of the step's rows, the
``host`` rollup's series add up to it exactly, and ``histogram_quantile(0.99, ...)`` over the
step's service-time buckets lies in the coarse bucket of the step's own p99 (summary.csv). The
run is on in-memory hosts (its numbers are the point, not the I/O); it is stopped once the
queries are answered (``ivypy stop``).

Skipped where ``prometheus`` is not installed (scripts/_env.sh installs it)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from master.cli.main import main
from tests.master.memhosts import run_cli
from tests.master.runhelp import rows, write_config
from tests.master.test_live_metrics import TEST, Scraper

PROMETHEUS = "prometheus"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(its config file, to write before it is read; its API's URL), once started."""
    if shutil.which(PROMETHEUS) is None:
        pytest.skip("prometheus is not installed (scripts/_env.sh installs it)")
    yield tmp_path / "prometheus.yml", f"http://127.0.0.1:{_free_port()}"


def _start(config: Path, url: str, tmp: Path) -> subprocess.Popen[bytes]:
    port = url.rsplit(":", 1)[1]
    with open(tmp / "prometheus.log", "wb") as log:  # the server keeps its own copy of the fd
        return subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log)


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}), timeout=5) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _value(url: str, expr: str) -> float | None:
    got = _query(url, expr)
    return float(got[0]["value"][1]) if got else None


def test_prometheus_scrapes_a_running_test_and_agrees_with_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        prometheus: tuple[Path, str]) -> None:
    config, url = prometheus
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cfg = write_config(tmp_path, TEST.replace("measure_seconds: 3\n", "measure_seconds: 120\n"
                                              ).format(metrics=""))
    box: dict[str, int] = {}
    run = threading.Thread(target=lambda: box.setdefault("status", run_cli(
        ["run", str(cfg), "--output-root", str(tmp_path), "--plain", "--metrics",
         "127.0.0.1:0", "--metrics-token-file", str(token)], monkeypatch, warp=False)),
        daemon=True)
    probe = Scraper(tmp_path, "s3cret")  # learns the address from events.csv
    probe.start()
    run.start()
    server = None
    try:
        deadline = time.monotonic() + 60
        while (target := probe._url()) is None:
            assert time.monotonic() < deadline and run.is_alive(), "no metrics address"
            time.sleep(0.05)
        host_port = target.split("/")[2]
        config.write_text(f"""\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: ivypy
    authorization: {{credentials: s3cret}}
    static_configs: [{{targets: ['{host_port}']}}]
""")
        server = _start(config, url, tmp_path)
        # once Prometheus holds a scrape of the second step, the first's series are final
        while _ready(url) is False or _value(url, 'ivypy_step{step="1:second"}') is None:
            assert time.monotonic() < deadline and server.poll() is None, (
                (tmp_path / "prometheus.log").read_text()[-2000:])
            time.sleep(0.25)
        first = 'step="0:first"'
        ios = _value(url, f'sum(ivypy_ios_total{{{first},rollup="all"}})')
        per_host = _value(url, f'sum(ivypy_ios_total{{{first},rollup="host"}})')
        q99 = _value(url, "histogram_quantile(0.99, sum by (le) "
                          f"(ivypy_service_time_seconds_bucket{{{first},rollup=\"all\"}}))")
        buckets = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in _query(
            url, f'sum by (le) (ivypy_service_time_seconds_bucket{{{first},rollup="all"}})'))
    finally:
        probe.done.set()
        (folder,) = (tmp_path / "live").iterdir()
        main(["stop", str(folder)])  # the second step ends: so does the run
        run.join(60)
        if server is not None:
            server.terminate()
            server.wait(10)
    assert box.get("status") == 0
    step0 = rows(folder / "step0000-first" / "all" / "all.csv")
    assert ios == sum(round(float(r["IOPS"]) * 0.5) for r in step0) and ios > 0
    assert per_host == ios  # the hosts' series add up to the total, exactly
    (summary,) = [r for r in rows(folder / "summary.csv")
                  if r["step_name"] == "first" and r["rollup_type"] == "all"]
    p99 = float(summary["service_time_p99_ms"]) / 1e3
    edges = [0.0, *[le for le, _ in buckets]]
    at = next(i for i in range(1, len(edges)) if p99 <= edges[i])
    assert q99 is not None and edges[at - 1] <= q99 <= edges[at], (q99, p99, edges[at])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False
