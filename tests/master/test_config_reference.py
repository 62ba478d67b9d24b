"""The test-file reference (docs/config.md) against the loader: the file is what
``python -m master.config.reference`` writes, every mapping the loader reads lists exactly the
keys it accepts, and the defaults the reference states are the ones a test file gets."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path

import pytest

from master.config import AccuracyCriterion, MeasureConfig, TestConfig, parse_config_text
from master.config.keys import SECTIONS, editable_workload_keys, section
from master.config.reference import DEFAULT_PATH, render
from master.config.units import parse_bytes, parse_duration_s, parse_fraction
from master.config.workloads import EDITABLE_KEYS
from master.config.yamlnodes import Cursor

REPO_ROOT = Path(__file__).resolve().parents[2]

#: a test that reaches every mapping the loader checks the keys of
EVERY_MAPPING = """\
test: every_mapping
hosts:
  - {name: localhost, worker_cpus: auto}
  - {name: far, connect_back: true}
luns:
  - {hosts: localhost, file: "${output_root}/lun0", size: 16MiB, create: true}
rollups:
  - host
  - {type: lun, quantity: 1}
gather:
  - {name: arr, command: [/bin/true], timeout: 1s, counters: [reads],
     config_command: [/bin/true],
     join: {element_type: LDEV, by: serial, lun_attribute: serial, aggregate: max}}
steps:
  - name: steady
    workloads:
      - {name: w, iosequencer: random_steady, luns: {host: localhost},
         write_data: {compressible: 2}, read_fraction: 50%}
    measure:
      criterion: fio
      criteria: [{type: iops, limit: 10%}]
      window_seconds: 10
  - name: held
    dfc: {focus_metric: service_time_p99_ms, target: 1, low_iops: 10, high_iops: 1000,
          gains: {kp: 0.1}}
  - name: edited
    edit_rollup:
      - {instance: all, total_iops: 100}
thresholds:
  - "service_time_p99_ms < 2"
  - {expr: "IOPS > 10", step: held, rollup: host, instance: localhost}
verify: {on_error: continue, findings_kept: 16}
metrics: {listen: "127.0.0.1:9464", token_file: /run/token}
connect_back: {listen: "0.0.0.0:9470", token_file: /run/token, timeout_seconds: 30s}
"""

#: a test with every optional key left out, to read the defaults from
DEFAULTS = """\
test: defaults
hosts: [localhost]
luns:
  - {file: /var/tmp/lun0}
steps:
  - name: first
    workloads:
      - {name: w, iosequencer: random_steady}
  - name: steady
    measure: {}
"""


def _accepted_keys(text: str, monkeypatch: pytest.MonkeyPatch,
                   tmp_path: Path) -> dict[str, set[str]]:
    """Each mapping's path (list indexes as ``[]``) → the keys the loader accepts there."""
    seen: dict[str, set[str]] = {}
    original = Cursor.check_keys

    def recording(self: Cursor, allowed: Collection[str]) -> None:
        seen.setdefault(re.sub(r"\[\d+\]", "[]", self.path), set()).update(allowed)
        original(self, allowed)

    monkeypatch.setattr(Cursor, "check_keys", recording)
    parse_config_text(text, "every_mapping.yaml", str(tmp_path))
    return seen


def test_docs_config_md_is_what_the_generator_writes() -> None:
    assert DEFAULT_PATH == REPO_ROOT / "docs" / "config.md"
    current = DEFAULT_PATH.read_text(encoding="utf-8") if DEFAULT_PATH.exists() else ""
    assert current == render(), (
        "docs/config.md is out of step with master/config/keys.py: regenerate it with "
        "`.venv/bin/python -m master.config.reference` and commit it"
    )


def test_the_generator_writes_and_checks_the_file(tmp_path: Path) -> None:
    target = tmp_path / "config.md"
    argv = [sys.executable, "-m", "master.config.reference", "-o", str(target)]
    check = subprocess.run([*argv, "--check"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 1 and "out of step" in check.stderr
    subprocess.run(argv, cwd=REPO_ROOT, check=True, capture_output=True, timeout=60)
    assert target.read_text(encoding="utf-8") == render()
    check = subprocess.run([*argv, "--check"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stderr


def test_every_mapping_lists_exactly_the_keys_the_loader_accepts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    accepted = _accepted_keys(EVERY_MAPPING, monkeypatch, tmp_path)
    for path, keys in sorted(accepted.items()):
        try:
            listed = section(path).names()
        except KeyError:
            pytest.fail(f"the loader checks the keys of {path or 'the top level'!r}, which "
                        "master/config/keys.py has no section for")
        missing, extra = sorted(keys - listed), sorted(listed - keys)
        assert not missing, (f"{path or 'top level'}: the loader accepts {missing}, which "
                             "master/config/keys.py does not list: add a Key for each, then "
                             "run python -m master.config.reference")
        assert not extra, f"{path or 'top level'}: keys.py lists {extra}, which the loader refuses"
    # ``for:`` is checked against the editable keys (a sweep), not by check_keys
    unreached = {s.path for s in SECTIONS} - set(accepted) - {"steps[].for"}
    assert not unreached, f"EVERY_MAPPING does not reach {sorted(unreached)}"


def test_the_sweepable_keys_are_the_editable_ones() -> None:
    assert set(editable_workload_keys()) == set(EDITABLE_KEYS)
    assert section("steps[].for").names() == frozenset(EDITABLE_KEYS)
    assert section("steps[].edit_rollup[]").names() >= frozenset(EDITABLE_KEYS)


def _default_text(path: str, key: str) -> str:
    (row,) = [row for row in section(path).keys if key in row.names]
    return row.default.strip("`")


def _plain(text: str) -> str:
    return text.split(";")[-1].replace("first", "").strip()


def _measure(cfg: TestConfig) -> MeasureConfig:
    measure = cfg.steps[1].measure
    assert measure is not None
    return measure


def _accuracy(cfg: TestConfig) -> AccuracyCriterion:
    criterion = _measure(cfg).criterion
    assert isinstance(criterion, AccuracyCriterion)
    return criterion


_W = "steps[].workloads[]"
_M = "steps[].measure"
#: (section, key, how the reference's default text reads, the value the loaded test has)
DEFAULT_CASES: list[tuple[str, str, Callable[[str], object], Callable[[TestConfig], object]]] = [
    ("", "subinterval_seconds", parse_duration_s, lambda c: c.subinterval_seconds),
    ("", "deadline_fraction", parse_fraction, lambda c: c.deadline_fraction),
    ("", "skew_limit_seconds", parse_duration_s, lambda c: c.skew_limit_seconds),
    ("", "output_root", lambda t: Path(t).name, lambda c: c.output_root.name),
    ("hosts[]", "python", str, lambda c: c.hosts[0].python),
    ("hosts[]", "worker_cpus", str, lambda c: c.hosts[0].worker_cpus),
    ("hosts[]", "watchdog_seconds", parse_duration_s, lambda c: c.hosts[0].watchdog_seconds),
    ("luns[]", "allow_write", lambda t: t == "true", lambda c: c.luns[0].allow_write),
    ("luns[]", "engine", str, lambda c: c.luns[0].engine),
    ("steps[]", "warmup_seconds", lambda t: parse_duration_s(_plain(t)),
     lambda c: c.steps[0].warmup.requested_s),
    ("steps[]", "measure_seconds", lambda t: parse_duration_s(_plain(t)),
     lambda c: c.steps[0].measure_time and c.steps[0].measure_time.requested_s),
    ("steps[]", "cooldown_seconds", lambda t: parse_duration_s(_plain(t)),
     lambda c: c.steps[0].cooldown.requested_s),
    (_W, "blocksize", parse_bytes, lambda c: c.steps[0].workloads[0].blocksize_bytes),
    (_W, "iodepth", int, lambda c: c.steps[0].workloads[0].iodepth),
    (_W, "iops", str, lambda c: c.steps[0].workloads[0].iops),
    (_W, "read_fraction", parse_fraction, lambda c: c.steps[0].workloads[0].read_fraction),
    (_W, "skew_weight", float, lambda c: c.steps[0].workloads[0].skew_weight),
    (_W, "write_data", str, lambda c: str(c.steps[0].workloads[0].write_data)),
    (_W, "busy_poll", lambda t: t == "true", lambda c: c.steps[0].workloads[0].busy_poll),
    (_W, "range_start", parse_fraction,
     lambda c: c.steps[0].workloads[0].range_start.value),
    (_W, "range_end", parse_fraction, lambda c: c.steps[0].workloads[0].range_end.value),
    (_M, "focus_rollup", str, lambda c: _measure(c).focus_rollup),
    (_M, "focus_metric", str, lambda c: _measure(c).focus_metric),
    (_M, "accuracy", parse_fraction, lambda c: _accuracy(c).accuracy),
    (_M, "confidence", parse_fraction, lambda c: _accuracy(c).confidence),
    (_M, "min_measure_seconds", parse_duration_s,
     lambda c: _accuracy(c).min_measure.requested_s),
    (_M, "autocorrelation", str, lambda c: _accuracy(c).autocorrelation),
    (_M, "ramp_seconds", parse_duration_s, lambda c: _accuracy(c).ramp.requested_s),
    (_M, "timeout_seconds", parse_duration_s, lambda c: _measure(c).timeout.requested_s),
]


@pytest.mark.parametrize(("path", "key", "read", "loaded"), DEFAULT_CASES,
                         ids=[f"{case[0]}.{case[1]}" for case in DEFAULT_CASES])
def test_the_stated_default_is_the_loaded_one(
    path: str, key: str, read: Callable[[str], object], loaded: Callable[[TestConfig], object],
    tmp_path: Path,
) -> None:
    cfg = parse_config_text(DEFAULTS, "defaults.yaml", cwd=tmp_path)
    value = loaded(cfg)
    stated = read(_default_text(path, key))
    if isinstance(value, float):
        assert stated == pytest.approx(value), f"{path}.{key}"
    else:
        assert stated == value, f"{path}.{key}"
