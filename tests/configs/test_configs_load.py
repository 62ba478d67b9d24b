"""Every file in configs/ loads, validates and has a plan (DESIGN: "every file in configs/ is
loaded by a test"), plus the promises the quick start and test bed configs make."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import VerifyConfig, load_config
from master.config.resolved import format_plan

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.yaml")) + sorted(CONFIG_DIR.glob("*.yml"))


def test_configs_exist() -> None:
    names = {path.name for path in CONFIGS}
    assert {"quickstart.yaml", "testbed.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.name)
def test_config_loads_and_plans(path: Path, tmp_path: Path) -> None:
    cfg = load_config(path, output_root_override=str(tmp_path))
    assert cfg.test == path.stem
    assert cfg.output_root == tmp_path
    plan = format_plan(cfg)
    assert plan.startswith(f"test {cfg.test}  (from {path})\n")
    assert all(f"step {step.index:04d} {step.name}" in plan for step in cfg.steps)


def test_quickstart_promises(tmp_path: Path) -> None:
    cfg = load_config(CONFIG_DIR / "quickstart.yaml", output_root_override=str(tmp_path))
    assert [host.transport for host in cfg.hosts] == ["local"]
    assert cfg.subinterval_seconds == 1.0
    (lun,) = cfg.luns
    # the file it makes is ivypy's own in a later run too (its mark): no allow_write needed
    assert lun.kind == "file" and lun.create and not lun.allow_write
    assert lun.file is not None and Path(lun.file).parent == tmp_path
    assert lun.size_bytes == 256 * 1024**2
    total_s = sum(
        step.warmup.rounded_s + step.cooldown.rounded_s
        + (step.measure_time.rounded_s if step.measure_time else 0.0)
        for step in cfg.steps
    )  # fmt: skip
    assert 20 <= total_s <= 40
    assert 2 <= len(cfg.steps) <= 3
    first = cfg.steps[0].workloads[0]
    assert (first.iosequencer, first.iodepth, first.iops, first.read_fraction) == (
        "random_independent", 32, "max", 1.0,
    )  # fmt: skip
    mix = cfg.steps[1].workloads[0]
    assert mix.read_fraction == pytest.approx(0.7) and mix.iops != "max"
    seq = cfg.steps[2].workloads[0]
    assert (seq.iosequencer, seq.blocksize_bytes, seq.read_fraction) == ("sequential", 131072, 1.0)


def test_testbed_matches_the_testbed_script() -> None:
    cfg = load_config(CONFIG_DIR / "testbed.yaml")
    assert [(h.name, h.address, h.user, h.transport) for h in cfg.hosts] == [
        (f"ivy-h{i}", f"10.77.0.{10 + i}", "root", "ssh") for i in (1, 2, 3)
    ]
    for host in cfg.hosts:
        assert host.identity_file == "/run/ivypy-testbed/id_ed25519"
        assert host.known_hosts == "/run/ivypy-testbed/known_hosts"
        assert host.python == "/usr/bin/python3"
    # one LUN per host, none shared
    files = [(lun.hosts, lun.file) for lun in cfg.luns]
    assert files == [((h.name,), f"/dev/shm/ivypy-testbed-{h.name}.lun") for h in cfg.hosts]


def test_verify_writes_then_reads_verified(tmp_path: Path) -> None:
    cfg = load_config(CONFIG_DIR / "verify.yaml", output_root_override=str(tmp_path))
    assert cfg.verify == VerifyConfig()
    write, read = cfg.steps
    assert [(w.name, w.read_fraction) for w in write.workloads] == [("writer", 0.0)]
    assert [(w.name, w.read_fraction, w.blocksize_bytes) for w in read.workloads] == [
        ("reader", 1.0, 4096)]
    assert "data verification: on (on_error stop, 64 findings kept)" in format_plan(cfg)
