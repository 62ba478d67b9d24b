"""Every file in tests/master/bad_configs/ is a wrong test file whose first line says
``# expect: <line>: <key path>: <message>``; loading it must raise ConfigError whose one-line
text is exactly ``<file>:<expect>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import load_config
from protocol.errors import ConfigError

BAD_DIR = Path(__file__).parent / "bad_configs"
BAD_FILES = sorted(BAD_DIR.glob("*.yaml"))
PREFIX = "# expect: "


def test_there_are_many_bad_configs() -> None:
    assert len(BAD_FILES) >= 15


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda path: path.stem)
def test_bad_config_message(path: Path) -> None:
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith(PREFIX), f"{path.name} has no '{PREFIX}' line"
    expected = f"{path}:{first_line[len(PREFIX) :]}"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message == expected
    assert "\n" not in message
    assert info.value.file == str(path)
    assert info.value.line == int(first_line[len(PREFIX) :].split(":")[0])


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read the test file: No such file or directory"


def test_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"test: \xff\xfe\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: not UTF-8 text")
