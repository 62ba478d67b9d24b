"""master.lunselect: ``edit_rollup`` entries applied to a step's workloads, good and bad
(table-driven, on LUNs as discovery describes them; no hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config.loader import parse_config_text
from master.config.schema import TestConfig
from master.lunselect import Lun, apply_rollup_edits, expand_step, select_luns
from protocol.errors import ConfigError

TEST = """\
test: edits
hosts: [h1, h2]
luns:
  - {{hosts: all, path: "/dev/sd*"}}
rollups: [vendor]
steps:
  - name: s
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100}}
      - {{name: small, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100,
         range_end: 16KiB}}
    edit_rollup: [{edit}]
"""


def _lun(host: str, path: str, vendor: str, logical: int = 512) -> Lun:
    return Lun(host, path, 1 << 30, logical, {"vendor": vendor}, (), {})


DISCOVERED = {
    "h1": [_lun("h1", "/dev/sda", "ACME"), _lun("h1", "/dev/sdb", "OTHER", logical=4096)],
    "h2": [_lun("h2", "/dev/sda", "ACME")],
}


def _setup(edit: str) -> tuple[TestConfig, list[object]]:
    cfg = parse_config_text(TEST.format(edit=edit), "edits.yaml", cwd=Path("/"))
    instances = expand_step(cfg.steps[0], select_luns(cfg, DISCOVERED))
    return cfg, instances  # type: ignore[return-value]


GOOD = [
    # edit, {workload id: (iops, iodepth)} for those changed
    ("{instance: all, iodepth: 8}",
     {f"{h}:{p}:{w}": (100.0, 8) for h, p in (("h1", "/dev/sda"), ("h1", "/dev/sdb"),
                                               ("h2", "/dev/sda")) for w in ("rr", "small")}),
    ("{instance: host=h2, iops: 250}", {"h2:/dev/sda:rr": (250.0, 4),
                                         "h2:/dev/sda:small": (250.0, 4)}),
    ("{instance: vendor=OTHER, total_iops: 1000}", {"h1:/dev/sdb:rr": (500.0, 4),
                                                     "h1:/dev/sdb:small": (500.0, 4)}),
    ("{instance: \"workload=h1:/dev/sda:rr\", iops: 7}", {"h1:/dev/sda:rr": (7.0, 4)}),
]


@pytest.mark.parametrize("edit, changed", GOOD)
def test_edit_rollup_changes_exactly_its_instances_workloads(
        edit: str, changed: dict[str, tuple[float, int]]) -> None:
    cfg, instances = _setup(edit)
    apply_rollup_edits(cfg.steps[0].edit_rollup, instances, cfg.rollups)  # type: ignore[arg-type]
    for inst in instances:
        want = changed.get(inst.id, (100.0, 4))  # type: ignore[attr-defined]
        assert (inst.params["iops"], inst.params["iodepth"]) == want, inst.id  # type: ignore[attr-defined]


BAD = [
    # edit, key path, words the message must contain
    ("{instance: host=h9, iops: 5}", "steps[0].edit_rollup[0].instance",
     ["host=h9 has no workloads", "h1, h2"]),
    ("{instance: vendor=ACMEE, iops: 5}", "steps[0].edit_rollup[0].instance",
     ["vendor=ACMEE", "ACME, OTHER"]),
    ("{instance: \"lun=h1:/dev/sdc\", iops: 5}", "steps[0].edit_rollup[0].instance",
     ["h1:/dev/sda, h1:/dev/sdb, h2:/dev/sda"]),
    # 512 bytes on the 4 KiB-sector LUN
    ("{instance: vendor=OTHER, blocksize: 512}", "steps[0].edit_rollup[0].blocksize",
     ["blocksize 512", "h1:/dev/sdb:rr", "logical block 4096"]),
    # larger than the small workload's 16 KiB range
    ("{instance: host=h2, blocksize: 64KiB}", "steps[0].edit_rollup[0].blocksize",
     ["blocksize 65536", "h2:/dev/sda:small", "range 16384"]),
]


@pytest.mark.parametrize("edit, key_path, words", BAD)
def test_edit_rollup_refusals_name_the_key_and_instance(edit: str, key_path: str,
                                                        words: list[str]) -> None:
    cfg, instances = _setup(edit)
    step = cfg.steps[0]
    with pytest.raises(ConfigError) as err:
        apply_rollup_edits(step.edit_rollup, instances, cfg.rollups,  # type: ignore[arg-type]
                           key_path="steps[0].edit_rollup", file="edits.yaml", line=step.line)
    text = str(err.value)
    assert text.startswith(f"edits.yaml:{step.line}: {key_path}: "), text
    for w in words:
        assert w in text, (w, text)
    assert "\n" not in text
