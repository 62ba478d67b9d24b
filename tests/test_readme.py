"""The README opens with the two commands a fresh machine runs, and the scripts it names exist."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_opens_with_exactly_the_two_commands() -> None:
    title, rest = README.split("\n", 1)
    assert title == "# ivypy"
    block = re.match(r"\s*```sh\n(.*?)```", rest, re.DOTALL)
    assert block is not None, "the README's first lines after the title are not a sh block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["scripts/quickstart", "scripts/test"]


def test_every_script_the_readme_names_is_executable() -> None:
    named = set(re.findall(r"`(scripts/[A-Za-z_]+)", README))
    assert {"scripts/quickstart", "scripts/test", "scripts/check"} <= named
    for script in sorted(named):
        assert os.access(ROOT / script, os.X_OK), script
