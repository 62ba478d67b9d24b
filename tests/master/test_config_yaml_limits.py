"""What a test file's text may expand to: aliases and merge keys, values, nesting, integer
literals and the file's length are bounded before anything is built (issue 40, "bounded
input"). An alias bomb is refused in the time its text takes to parse.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from master.config import load_config, loader, yamlnodes
from master.config.yamlnodes import YNode, compose_text
from protocol.errors import ConfigError


def _plain(node: YNode) -> object:
    if node.kind == "map":
        return {key: _plain(value) for key, (_, value) in node.entries.items()}
    if node.kind == "seq":
        return [_plain(item) for item in node.items]
    return node.value


# (YAML, what b is, in order, whether PyYAML 6.0.4 loads the same values)
MERGES: list[tuple[str, object, bool]] = [
    ("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\n", [("x", 1), ("y", 3)], True),
    ("a: &a {x: 1, y: 2}\nb: {y: 3, <<: *a}\n", [("x", 1), ("y", 3)], True),
    ("b: {<<: {k: v}, m: [1, 2]}\n", [("k", "v"), ("m", [1, 2])], True),
    # in a list, the earlier mapping wins (PyYAML lets the later win for keys of 2+ characters)
    ("a: &a {xx: 1}\nc: &c {xx: 2, z: 4}\nb: {<<: [*a, *c], w: 5}\n",
     [("xx", 1), ("z", 4), ("w", 5)], False),
    ("a: &a {x: 1}\nc: &c {x: 2, z: 4}\nb: {<<: [*a, *c], w: 5}\n",
     [("x", 1), ("z", 4), ("w", 5)], True),
    # merges nest; an explicit key moves to its own place
    ("a: &a {x: 1}\nc: &c {<<: *a, z: 4}\nb: {<<: [*c], x: 9}\n", [("z", 4), ("x", 9)], True),
    ("a: &a [1, {p: q}]\nb: [*a, *a]\n", [[1, {"p": "q"}], [1, {"p": "q"}]], True),
]


@pytest.mark.parametrize(("text", "b", "as_pyyaml"), MERGES)
def test_aliases_and_merge_keys(text: str, b: object, as_pyyaml: bool) -> None:
    built = _plain(compose_text(text, "t.yaml"))
    assert isinstance(built, dict)
    assert (list(built["b"].items()) if isinstance(b, list) and isinstance(b[0], tuple)
            else built["b"]) == b
    assert (built == yaml.safe_load(text)) is as_pyyaml


@pytest.mark.parametrize(("text", "message"), [
    ("a: &a {x: 1}\nb: {<<: *a,\n    <<: {x: 2}}\n",
     "t.yaml:3: duplicate key '<<' (first at line 2)"),
    ("b: {<<: [{x: 1}, 7]}\n", "t.yaml:1: bad merge key: expected a mapping for merging, but "
                               "found a scalar"),
    ("b: {<<: 7}\n", "t.yaml:1: bad merge key: expected a mapping or list of mappings for "
                     "merging, but found a scalar"),
])
def test_bad_merge_keys(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        compose_text(text, "t.yaml")
    assert str(info.value) == message


def _bomb(levels: int, fan_out: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan_out)}]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*l{level - 1}"] * fan_out)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [9, 40])
def test_an_alias_bomb_is_refused_before_it_is_built(levels: int) -> None:
    """9**40 values are refused as fast as 9**9: only the text is read."""
    started = time.process_time()
    with pytest.raises(ConfigError) as info:
        compose_text(_bomb(levels), "bomb.yaml")
    assert time.process_time() - started < 0.5
    assert str(info.value) == (
        "bomb.yaml:5: more than 50,000 values after expanding aliases (a test file needs far "
        "fewer)"
    )  # l4, at line 5, expands to 66,430 values


def test_the_limits_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlnodes, "MAX_VALUES", 32)
    monkeypatch.setattr(yamlnodes, "MAX_ALIAS_EXPANSIONS", 6)
    # the root; a and its 2 items; b and 3 copies of a: 1 + 3 + 10 = 14 values, 3 aliases
    three = "a: &a [1, 2]\nb: [*a, *a, *a]\n"
    assert _plain(compose_text(three, "t.yaml")) == {"a": [1, 2], "b": [[1, 2]] * 3}
    six = "a: &a [1, 2]\nb: [*a, *a, *a]\nc: [*a, *a, *a]\n"  # 24 values, 6 aliases: the limit
    compose_text(six, "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:4: more than 6 alias expansions"):
        compose_text(six + "d: [*a]\n", "t.yaml")  # the 7th alias, at line 4
    # 4 aliases in the text; expanded, b's 2 and c's 1 + 2 + 1
    nested = "a: &a [1, 2]\nb: &b [*a, *a]\nc: [*b, *a]\n"
    compose_text(nested, "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:3: more than 6 alias expansions"):
        compose_text(nested.replace("[*b, *a]", "[*b, *a, *a]"), "t.yaml")
    ten = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a]\n"  # 1 + 10 + 21 = 32: the limit
    compose_text(ten, "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:3: more than 32 values"):
        compose_text(ten + "c: 1\n", "t.yaml")


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    depth = yamlnodes.MAX_DEPTH
    compose_text("[" * depth + "]" * depth + "\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:1: nesting too deep"):
        compose_text("[" * (depth + 1) + "]" * (depth + 1) + "\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:1: nesting too deep"):  # not a stack overflow
        compose_text("[" * 5000 + "]" * 5000 + "\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"^t\.yaml:2: nesting too deep"):
        compose_text("x: 1\na: &a [*a]\n", "t.yaml")  # an alias inside its own anchor


@pytest.mark.parametrize(("literal", "ok"), [("9" * 100, True), ("9" * 101, False),
                                             ("0x" + "f" * 83, True), ("0x" + "f" * 84, False),
                                             ("9" * 5000, False)])
def test_an_integer_literal_of_more_than_100_digits_is_refused(literal: str, ok: bool) -> None:
    text = f"x: {literal}\n"
    if ok:
        assert compose_text(text, "t.yaml").entries["x"][1].value == int(literal, 0)
    else:
        with pytest.raises(ConfigError, match=r"^t\.yaml:1: bad value: an integer of more"):
            compose_text(text, "t.yaml")


def test_a_test_file_longer_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("#" * loader.MAX_FILE_CHARS)
    with pytest.raises(ConfigError, match="the test file is empty"):  # read whole: a comment
        load_config(path)
    path.write_text("#" * (loader.MAX_FILE_CHARS + 1))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: the test file is longer than 1,048,576 characters"
    with pytest.raises(ConfigError, match="longer than 1,048,576 characters"):
        load_config("/dev/zero")  # never ends: read no further than the limit
