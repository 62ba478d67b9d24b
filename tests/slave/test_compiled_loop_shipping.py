"""The compiled loop as a host gets it (``compiled_loop``): the object the controller shipped in
the zipapp is loaded where it fits, also on a host without a compiler; one that does not load
is built anew on the host; with neither, the Python loop runs and says why. Each case is a
fresh process running the slave code from a real zipapp, with a cache of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from master.hosts.zipapp import build_slave_zipapp
from slave.engine import compiled_loop as pk

needs_cc = pytest.mark.skipif(pk._compiler() in (None, []), reason="no C compiler here")

PROBE = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from slave.engine import compiled_loop as pk
print(json.dumps([pk.available(), pk.origin(), pk.why_not(), pk.__file__]))
"""


def _probe(tmp: Path, shipped: bytes | None, cc: str | None) -> tuple[bool, str, str, Path]:
    name = pk.shipped_name()
    extra = {f"slave/engine/{name}": shipped} if shipped is not None else {}
    pyz = tmp / "slave.pyz"
    pyz.write_bytes(build_slave_zipapp(extra_files=extra).data)
    env = {k: v for k, v in os.environ.items() if k != "IVYPY_SLAVE_CC"}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    if cc is not None:
        env["IVYPY_SLAVE_CC"] = cc
    done = subprocess.run([sys.executable, "-c", PROBE, str(pyz)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp)
    assert done.returncode == 0, done.stderr
    available, origin, why, module = json.loads(done.stdout)
    assert str(pyz) in module  # the zipapp's code, not this checkout's
    return available, origin or "", why or "", tmp / "cache" / "ivypy"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The object as the controller builds it (``slave --build-compiled-loop``)."""
    out = tmp_path_factory.mktemp("shipped")
    name = pk.build_for_shipping(str(out))
    assert name == pk.shipped_name() and name.startswith(f"compiled_loop-{pk.platform_tag()}-")
    return (out / name).read_bytes()


@needs_cc
def test_the_shipped_object_is_loaded_and_nothing_is_built(tmp_path: Path,
                                                            shipped: bytes) -> None:
    available, origin, why, cache = _probe(tmp_path, shipped, None)
    assert available and origin == "shipped from the controller" and not why
    assert [p.name for p in cache.iterdir()] == [f"shipped-{pk.shipped_name()}"]


@needs_cc
def test_a_host_without_a_compiler_runs_the_shipped_object(tmp_path: Path,
                                                           shipped: bytes) -> None:
    available, origin, _, _ = _probe(tmp_path, shipped, "no-such-cc")
    assert available and origin == "shipped from the controller"


@needs_cc
def test_a_shipped_object_that_does_not_load_is_built_on_the_host(tmp_path: Path) -> None:
    available, origin, _, cache = _probe(tmp_path, b"not an ELF object", None)
    assert available
    assert origin.startswith("built on this host (the one shipped from the controller would "
                             "not load:"), origin
    assert any(p.name.startswith("compiled_loop-") for p in cache.iterdir())


@pytest.mark.parametrize("shipped_bytes", [None, b"not an ELF object"], ids=["none", "broken"])
def test_with_neither_the_python_loop_runs_and_says_why(tmp_path: Path,
                                                        shipped_bytes: bytes | None) -> None:
    available, origin, why, _ = _probe(tmp_path, shipped_bytes, "no-such-cc")
    assert not available and not origin
    assert why.startswith("no C compiler 'no-such-cc' on this host to build the compiled paced "
                          f"loop, and none shipped for {pk.platform_tag()}"), why
    assert ("would not load" in why) == (shipped_bytes is not None)
