"""The dependency direction master → protocol ← slave, checked by walking every import.

``protocol/`` may import only the standard library, numpy and msgpack; ``slave/`` additionally
psutil and ``protocol`` — never asyncssh, yaml, rich or ``master``: slave+protocol is what ships
to test hosts, which have only Python 3, numpy and psutil (msgpack travels inside the zipapp).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "protocol": {"numpy", "msgpack", "protocol"},
    "slave": {"numpy", "msgpack", "psutil", "protocol", "slave"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_ships(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no modules"
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _imports(path)
        if name not in stdlib and name not in ALLOWED[package]
    }
    assert not bad, "layering broken:\n" + "\n".join(sorted(bad))


def test_walker_sees_forbidden_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import asyncssh\nfrom yaml import safe_load\nfrom . import sibling\n")
    assert _imports(probe) == {"asyncssh", "yaml"}
