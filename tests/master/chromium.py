"""A real headless Chromium for the report's tests: load a page from a file, dump its DOM after
the page's scripts ran, and list the network requests the page made (from Chromium's own net
log), apart from the browser's own background traffic (update checks and the like, which no
page starts). Tests that use it skip, saying so, where Debian's ``chromium`` is not installed
(``scripts/test`` installs it as root)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (scripts/test installs it when root)")


@dataclass(frozen=True)
class Loaded:
    dom: str
    page_requests: list[str]  # URLs the page asked for (a file:// load itself is not one)

    def root_attr(self, name: str) -> str | None:
        """An attribute of the dumped ``<html>`` element."""
        m = re.search(r"<html\b([^>]*)>", self.dom)
        if not m:
            return None
        a = re.search(rf'\b{re.escape(name)}="([^"]*)"', m.group(1))
        return a.group(1) if a else None


def _net_log(path: Path) -> dict[str, Any]:
    """The net log (an unfinished one, of a browser that stopped hard, is closed here)."""
    text = path.read_text()
    if not text.rstrip().endswith("}"):
        text = text.rstrip().rstrip(",") + "]}"
    data: dict[str, Any] = json.loads(text)
    return data


def page_requests(log_path: Path) -> list[str]:
    """URLs of every request a page started: the browser's own have no initiator origin and a
    network isolation key outside the page's file:// site."""
    data = _net_log(log_path)
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls: list[str] = []
    for ev in data["events"]:
        p = ev.get("params") or {}
        if ev["type"] != start or "url" not in p:
            continue
        if p.get("initiator") != "not an origin" or "file://" in str(
                p.get("network_isolation_key", "")):
            urls.append(str(p["url"]))
    return urls


def load(page: Path, tmp: Path, budget_ms: int = 10_000, screenshot: Path | None = None
         ) -> Loaded:
    """``page`` loaded in headless Chromium (its own profile under ``tmp``), its DOM after
    ``budget_ms`` of virtual time, and the requests it made."""
    assert CHROMIUM is not None
    log = tmp / "netlog.json"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}", f"--log-net-log={log}",
            f"--virtual-time-budget={budget_ms}"]
    if screenshot is not None:
        subprocess.run([*args, "--hide-scrollbars", "--window-size=1280,2400",
                        f"--screenshot={screenshot}", page.resolve().as_uri()],
                       capture_output=True, timeout=120, check=True)
    proc = subprocess.run([*args, "--dump-dom", page.resolve().as_uri()], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Loaded(proc.stdout, page_requests(log))
