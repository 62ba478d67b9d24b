"""The wheel's build hook (hatchling): the master's compiled kernels built into the wheel.

A wheel then ships ``ivypy/master/analysis/kernels-<machine>-<C library>-<sources' key>.so``
(``master.analysis.native.shipped_name``), so the first ``ivypy run`` after ``pip install``
loads it and compiles nothing; the wheel is tagged for this platform. The object is built in a
temporary folder, never in the checkout (which may be read-only). An editable install ships
none: its first run builds the object into ``~/.cache/ivypy`` (about a second).

A build machine without a C compiler cannot build the wheel: the error says what to install.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _native(root: str) -> Any:
    """``master/analysis/native.py`` loaded by its path (standard library only: the build's
    environment has no numpy, and importing ``master`` would need it)."""
    path = Path(root) / "master" / "analysis" / "native.py"
    spec = importlib.util.spec_from_file_location("_ivypy_build_native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look a module up by its name
    spec.loader.exec_module(module)
    return module


class KernelsHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        native = _native(self.root)
        cc = native.compiler()
        if not cc:
            raise RuntimeError("building ivypy's wheel needs a C compiler for the master's "
                               "kernels (cc, or IVYPY_CC): Debian: apt-get install gcc "
                               "libc6-dev")
        self._tmp = tempfile.mkdtemp(prefix="ivypy-kernels-")
        name = native.shipped_name()
        built = Path(self._tmp) / name
        native.compile_to(built, cc)
        build_data["force_include"][str(built)] = f"ivypy/master/analysis/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
