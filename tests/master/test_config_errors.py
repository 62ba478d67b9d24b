"""Every file in tests/master/bad_configs/ is a wrong test file whose first line says
``# expect: <line>: <key path>: <message>``; loading it must raise ConfigError whose one-line
text is exactly ``<file>:<expect>``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from master.config import load_config, parse_config_text
from protocol.errors import ConfigError, ConfigErrors

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
    assert str(info.value) == f"{path}:1: not UTF-8 text (byte 0xff: invalid start byte)"


# ---- robustness: any mutation of a valid test is either valid or one ConfigError, never a crash

_ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        ["", "all", "max", "4KiB", "-1", "1e5", "50%", "[", "h[1-", "${x}", "a+b", "=", "/dev/x"]
    ),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["name", "x", "type"]), st.integers(), max_size=2),
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replace(value: object, path: tuple[object, ...], new: object) -> object:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {
            key: _replace(item, rest, new) if key == head else item for key, item in value.items()
        }
    assert isinstance(value, list)
    return [
        _replace(item, rest, new) if index == head else item for index, item in enumerate(value)
    ]


_EXAMPLE = yaml.safe_load((Path(__file__).parents[2] / "configs" / "sweep.yaml").read_text())
_EXAMPLE_PATHS = _paths(_EXAMPLE)


@pytest.mark.parametrize("value", ["\n", "a\r\nb", "x\u2028y", "\x0c"])
@pytest.mark.parametrize("path", [("steps", 2, "edit_rollup", 0, "total_iops"),
                                  ("subinterval_seconds",), ("steps", 0, "name")])
def test_a_value_with_a_line_break_is_quoted_on_one_line(path: tuple[object, ...],
                                                          value: str) -> None:
    # found by the fuzz test below: "must be a number > 0 or 'max' (got <the value>)" broke the
    # one-line error when the value held a newline
    text = yaml.safe_dump(_replace(_EXAMPLE, path, value))
    with pytest.raises(ConfigError) as err:
        parse_config_text(text, "fuzz.yaml", cwd=Path("/x"))
    message = str(err.value)
    assert message.startswith("fuzz.yaml:") and len(message.splitlines()) == 1, message
    assert len(err.value.reason.splitlines()) == 1


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_EXAMPLE_PATHS), _ODD_VALUES)
def test_mutated_config_never_crashes(path: tuple[object, ...], new: object) -> None:
    text = yaml.safe_dump(_replace(_EXAMPLE, path, new))
    try:
        parse_config_text(text, "fuzz.yaml", cwd=Path("/x"))
    except ConfigError as exc:
        message = str(exc)
        lines = message.splitlines()
        # one line, or several unknown keys at once (``ConfigErrors``): a line each
        assert len(lines) == 1 or isinstance(exc, ConfigErrors), message
        assert all(line.startswith("fuzz.yaml:") for line in lines[:20]), message
