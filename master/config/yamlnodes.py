"""YAML text → a tree of values that remembers the line of every key and value.

Owns the only use of ``yaml`` in ivypy's config: the text is composed into PyYAML's node graph
(safe tags only) and walked into ``YNode`` values, so that every later error can name the line.
YAML syntax errors, duplicate keys and non-string keys become ``ConfigError`` here. ``Cursor``
pairs a node with its key path (``steps[1].workloads[0].blocksize``) and offers the small typed
readers the schema code uses. This module must not know the test-file schema.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import yaml

from protocol.errors import ConfigError

__all__ = ["Cursor", "YNode", "compose_text"]

_SCALAR, _MAP, _SEQ = "scalar", "map", "seq"


class _Loader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2 exponent floats: ``1e5`` is a number, not a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


@dataclass(frozen=True)
class YNode:
    """One YAML node: a scalar (``value``, with its source ``text``), a mapping or a sequence.

    ``line`` is 1-based. For mappings ``entries`` maps each key to (line of the key, value node)
    in document order.
    """

    kind: str
    line: int
    value: object = None
    text: str = ""
    entries: dict[str, tuple[int, YNode]] = field(default_factory=dict)
    items: tuple[YNode, ...] = ()


class _Builder(yaml.constructor.SafeConstructor):
    """Turns a composed node graph into ``YNode``s; scalars use the safe constructors."""

    def __init__(self, file: str) -> None:
        super().__init__()
        self._file = file

    def _error(self, message: str, mark: yaml.Mark | None) -> ConfigError:
        return ConfigError(message, file=self._file, line=mark.line + 1 if mark else None)

    def build(self, node: yaml.Node, depth: int = 0) -> YNode:
        line = node.start_mark.line + 1
        if depth > 100:
            raise self._error("nesting too deep", node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            try:
                value = self.construct_object(node, deep=True)
            except yaml.YAMLError as exc:
                raise self._error(f"bad value: {_problem(exc)}", node.start_mark) from exc
            return YNode(_SCALAR, line, value=value, text=str(node.value))
        if isinstance(node, yaml.SequenceNode):
            return YNode(
                _SEQ, line, items=tuple(self.build(item, depth + 1) for item in node.value)
            )
        if isinstance(node, yaml.MappingNode):
            return self._build_mapping(node, line, depth)
        raise self._error(f"unsupported YAML node {type(node).__name__}", node.start_mark)

    def _build_mapping(self, node: yaml.MappingNode, line: int, depth: int) -> YNode:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise self._error(f"keys must be strings, not {_key_text(key_node)}",
                                  key_node.start_mark)
            if key_node.value in seen:
                raise self._error(
                    f"duplicate key {key_node.value!r} (first at line {seen[key_node.value]})",
                    key_node.start_mark,
                )
            seen[key_node.value] = key_node.start_mark.line + 1
        try:
            self.flatten_mapping(node)  # resolves YAML merge keys (<<: *anchor)
        except yaml.YAMLError as exc:
            raise self._error(f"bad merge key: {_problem(exc)}", node.start_mark) from exc
        entries: dict[str, tuple[int, YNode]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise self._error(f"keys must be strings, not {_key_text(key_node)}",
                                  key_node.start_mark)
            entries.pop(key_node.value, None)  # a later (explicit) key overrides a merged one
            entries[key_node.value] = (
                key_node.start_mark.line + 1,
                self.build(value_node, depth + 1),
            )
        return YNode(_MAP, line, entries=entries)


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
    return str(exc)


def compose_text(text: str, file: str) -> YNode:
    """Parse one YAML document into a ``YNode`` tree; an empty document is a ``ConfigError``."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ConfigError(
            f"YAML syntax error: {_problem(exc)}",
            file=file,
            line=mark.line + 1 if mark else None,
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML syntax error: {exc}", file=file) from exc
    if root is None:
        raise ConfigError("the test file is empty", file=file, line=1)
    return _Builder(file).build(root)


class Cursor:
    """A node together with its key path and file, for reading values and raising errors."""

    def __init__(self, node: YNode, path: str, file: str, key_line: int | None = None) -> None:
        self.node = node
        self.path = path
        self.file = file
        self.key_line = key_line

    # ---- basics
    @property
    def line(self) -> int:
        """Where errors about this value point: the value's line for a scalar, the line of its
        key for a mapping or list under a key (a block mapping starts on the next line)."""
        if self.node.kind != _SCALAR and self.key_line is not None:
            return self.key_line
        return self.node.line

    @property
    def value(self) -> object:
        return self.node.value

    @property
    def is_map(self) -> bool:
        return self.node.kind == _MAP

    @property
    def is_seq(self) -> bool:
        return self.node.kind == _SEQ

    @property
    def is_scalar(self) -> bool:
        return self.node.kind == _SCALAR

    def error(
        self, message: str, *, line: int | None = None, path: str | None = None
    ) -> ConfigError:
        return ConfigError(
            message,
            key_path=self.path if path is None else path,
            file=self.file,
            line=self.line if line is None else line,
        )

    def _join(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    # ---- mappings
    def mapping_keys(self) -> list[str]:
        return list(self.node.entries)

    def has(self, key: str) -> bool:
        return key in self.node.entries

    def get(self, key: str) -> Cursor | None:
        entry = self.node.entries.get(key)
        if entry is None:
            return None
        return Cursor(entry[1], self._join(key), self.file, key_line=entry[0])

    def require(self, key: str, hint: str = "") -> Cursor:
        child = self.get(key)
        if child is None:
            raise self.error(f"missing key {key!r}{hint}")
        return child

    def expect_map(self, what: str = "a mapping") -> Cursor:
        if not self.is_map:
            raise self.error(f"must be {what}")
        return self

    def check_keys(self, allowed: Collection[str]) -> None:
        """Unknown keys are errors, reported at the key's own line with a suggestion."""
        for key, (key_line, _) in self.node.entries.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.error(f"unknown key{hint}", line=key_line, path=self._join(key))

    # ---- sequences
    def expect_seq(self, what: str = "a list") -> Cursor:
        if not self.is_seq:
            raise self.error(f"must be {what}")
        return self

    def __iter__(self) -> Iterator[Cursor]:
        for index, item in enumerate(self.node.items):
            yield Cursor(item, f"{self.path}[{index}]", self.file)

    def __len__(self) -> int:
        return len(self.node.items)

    def __bool__(self) -> bool:  # a cursor is always truthy, even on an empty list
        return True

    # ---- typed scalars
    def string(self) -> str:
        if not self.is_scalar or not isinstance(self.value, str):
            raise self.error("must be a string")
        return self.value

    def boolean(self) -> bool:
        if not self.is_scalar or not isinstance(self.value, bool):
            raise self.error("must be true or false")
        return self.value

    def integer(self, low: int | None = None, high: int | None = None) -> int:
        value = self.value
        if not self.is_scalar or not isinstance(value, int) or isinstance(value, bool):
            raise self.error("must be an integer")
        if low is not None and high is not None and not low <= value <= high:
            raise self.error(f"must be between {low} and {high} (got {value})")
        if low is not None and value < low:
            raise self.error(f"must be at least {low} (got {value})")
        if high is not None and value > high:
            raise self.error(f"must be at most {high} (got {value})")
        return value

    def number(self) -> float:
        value = self.value
        if (
            not self.is_scalar
            or not isinstance(value, (int, float))
            or isinstance(value, bool)
            or value != value  # NaN
            or value in (float("inf"), float("-inf"))
        ):
            raise self.error("must be a number")
        return float(value)


def _key_text(node: yaml.Node) -> str:
    """A non-string mapping key as the operator wrote it: a scalar's value, or what kind of
    collection it is with its source text (``{{...}}`` in a flow mapping makes a mapping the
    key of a mapping)."""
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value)
    kind = "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
    buf = node.start_mark.buffer
    if buf is None:
        return kind
    text = " ".join(str(buf[node.start_mark.index:node.end_mark.index]).split())
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{kind}, {text}"
