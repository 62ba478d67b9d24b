"""The tutorial (docs/tutorial.md) can be followed: every YAML block in it is a test file that
loads and plans, each is run by a command of the page under the name the page saves it as, and
the file its loop device is made from is the one the page writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from master.config import parse_config_text
from master.config.resolved import format_plan

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[tuple[int, str]]:
    """(line of the block's first line, text) of every fenced block in ``language``."""
    text = TUTORIAL.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(2)) + 1, match.group(2))
            for match in _FENCE.finditer(text) if match.group(1) == language]


YAML_BLOCKS = _blocks("yaml")


def test_the_tutorial_has_its_test_files() -> None:
    assert len(YAML_BLOCKS) >= 2


@pytest.mark.parametrize(("line", "text"), YAML_BLOCKS, ids=[f"line{b[0]}" for b in YAML_BLOCKS])
def test_a_tutorial_test_file_loads_and_plans(line: int, text: str, tmp_path: Path) -> None:
    cfg = parse_config_text(text, f"docs/tutorial.md:{line}", str(tmp_path))
    plan = format_plan(cfg)
    assert all(f"step {step.index:04d} {step.name}" in plan for step in cfg.steps)
    shell = "\n".join(block for _, block in _blocks("sh"))
    saved_as = f"`{cfg.test}.yaml`"
    page = TUTORIAL.read_text(encoding="utf-8")
    assert f"Save this as {saved_as}" in page or f"Save as {saved_as}" in page, saved_as
    assert re.search(rf"^ivypy run {re.escape(cfg.test)}\.yaml\b", shell, re.MULTILINE), (
        f"no command in docs/tutorial.md runs {cfg.test}.yaml"
    )


def test_the_loop_device_is_made_from_the_file_the_tests_select(tmp_path: Path) -> None:
    shell = "\n".join(block for _, block in _blocks("sh"))
    written = set(re.findall(r"dd if=/dev/urandom of=(\S+)", shell))
    attached = set(re.findall(r"losetup --find --show --direct-io=on (\S+)", shell))
    assert written and written == attached
    selected = set()
    for line, text in YAML_BLOCKS:
        cfg = parse_config_text(text, f"docs/tutorial.md:{line}", str(tmp_path))
        selected.update(str(match.pattern) for lun in cfg.luns for match in lun.attributes
                        if match.key == "backing_file")
    assert selected == written
