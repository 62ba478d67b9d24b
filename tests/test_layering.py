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


# ---------------------------------------------------------------------- inside the master
#: Which of the master's packages each may import (besides itself, ``protocol`` and the outside
#: world): ``cli → run → {hosts, analysis, results, live, gather, verify} → config →
#: protocol``, with ``gather`` writing its files through ``results`` and ``results`` reading
#: ``analysis``'s kernels and columns. ``results`` never imports ``run``, ``hosts`` or ``live``.
MASTER_CONTRACT: dict[str, set[str]] = {
    "cli": {"run", "hosts", "analysis", "results", "live", "gather", "fiologs", "verify",
            "config"},
    "run": {"hosts", "analysis", "results", "live", "gather", "verify", "config"},
    "hosts": {"config"},
    "live": {"config"},
    "gather": {"results", "analysis", "config"},
    "results": {"analysis", "config"},
    "analysis": {"config"},
    "fiologs": {"analysis", "config"},  # analysis.native: the compiled object its C is in
    "verify": {"config"},
    "config": set(),
}
#: At most this many modules at master/'s top level, and lines in any module of master/.
MAX_TOP_LEVEL_MODULES, MAX_MODULE_LINES = 4, 800


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The project's modules ``path`` imports when it runs (at its top or in a function; not
    under ``if TYPE_CHECKING:``): ``from a import b`` is ``a.b`` where that is a module, else
    ``a``."""
    found: set[str] = set()

    class Walker(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names if a.name in modules)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level or not node.module:
                return
            subs = [f"{node.module}.{a.name}" for a in node.names]
            found.update(s for s in subs if s in modules)
            if node.module in modules and any(s not in modules for s in subs):
                found.add(node.module)

    Walker().visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_of(p): p for top in ("master", "protocol", "slave")
             for p in (ROOT / top).rglob("*.py")}
    names = set(paths)
    return {m: _runtime_imports(p, names) - {m} for m, p in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circle_in_master_protocol_or_slave() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_master_packages_import_in_one_direction() -> None:
    bad = []
    for module, imported in _graph().items():
        parts = module.split(".")
        if parts[0] != "master" or len(parts) < 3:
            continue
        for target in imported:
            t = target.split(".")
            if t[0] != "master" or len(t) < 2 or t[1] == parts[1]:
                continue
            if t[1] not in MASTER_CONTRACT.get(parts[1], set()):
                bad.append(f"{module} imports {target}")
    assert not bad, "master's import contract broken:\n" + "\n".join(sorted(bad))


def test_every_master_package_is_in_the_contract() -> None:
    packages = {p.name for p in (ROOT / "master").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(MASTER_CONTRACT)


def test_the_master_is_packages_by_concept() -> None:
    top = sorted(p.name for p in (ROOT / "master").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "master").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_only_the_in_memory_hosts_import_the_slave() -> None:
    """``master → protocol ← slave``: the master reaches a slave through a connection. The one
    exception is the in-memory hosts, whose slave is a real ``SlaveSession`` in the master's
    process (``master.hosts.memory``)."""
    importers = sorted(m for m, imported in _graph().items() if m.startswith("master.")
                       and any(t.split(".")[0] == "slave" for t in imported))
    assert importers == ["master.hosts.memory"]
