"""YAML text → a tree of values that remembers the line of every key and value.

Owns the only use of ``yaml`` in ivypy's config: the text is composed into PyYAML's node graph
(safe tags only) and walked into ``YNode`` values, so that every later error can name the line.
YAML syntax errors, duplicate keys, non-string keys and YAML 1.1's octal integers (a leading
0: ``010`` would be 8) become ``ConfigError`` here. ``Cursor`` pairs a node with its key path
(``steps[1].workloads[0].blocksize``) and offers the small typed readers the schema code uses.
This module must not know the test-file schema.

It also bounds what a text may expand to, before anything is built from it: aliases stay
aliases in the composed graph and are expanded here (merge keys ``<<: *anchor`` too). Composing
counts values and nesting; then the values and alias expansions the graph would expand to are
measured, each anchored node once, and only a graph within the limits is built. An "alias bomb"
(anchors that each refer to the one before several times) is short text that expands
exponentially; it is refused in the time its text takes to read, naming the line of the value
that crossed a limit.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import yaml

from protocol.errors import ConfigError, ConfigErrors

__all__ = [
    "MAX_ALIAS_EXPANSIONS",
    "MAX_DEPTH",
    "MAX_INTEGER_DIGITS",
    "MAX_VALUES",
    "SHOWN_CHARS",
    "Cursor",
    "YNode",
    "compose_text",
]

# Limits on the YAML of one test file. The example tests have a few hundred values and a few
# aliases (a workload template merged into several entries); a generated test of a thousand
# steps stays below these. Parsing (pure-Python PyYAML) and building cost ~40 us and ~1 KB a
# value on a busy 2-core machine, so a file at the limits loads in about 2 s and 60 MB; an alias
# bomb is refused in the time its text takes to parse, before anything is built.
#: values (scalars, mappings, lists) after expanding aliases and merge keys
MAX_VALUES = 50_000
#: aliases entered while expanding, those inside an expanded anchor included
MAX_ALIAS_EXPANSIONS = 10_000
#: nesting of mappings and lists (PyYAML's composer recurses: ~300 levels exhaust Python's stack)
MAX_DEPTH = 100
#: an integer literal longer than this is beyond every numeric key's range; refused here, since
#: Python cannot even print an integer of more than 4,300 digits (a hex literal makes one fast)
MAX_INTEGER_DIGITS = 100

#: the longest value text an error message quotes (``Cursor.shown``)
SHOWN_CHARS = 40

_SCALAR, _MAP, _SEQ = "scalar", "map", "seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
#: an integer YAML 1.1 reads as octal: a leading 0 (``010`` is 8); refused (``_Builder._scalar``)
_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")


def _too_many_values() -> str:
    return f"more than {MAX_VALUES:,} values after expanding aliases (a test file needs far fewer)"


def _too_many_aliases() -> str:
    return (
        f"more than {MAX_ALIAS_EXPANSIONS:,} alias expansions (aliases nested in anchors "
        "multiply; a test file needs far fewer)"
    )


def _too_deep() -> str:
    return f"nesting too deep (more than {MAX_DEPTH} levels)"


class _Refused(Exception):
    """A limit hit while composing; ``compose_text`` turns it into a ``ConfigError``."""

    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = mark.line + 1 if mark is not None else None


class _Alias(yaml.Node):
    """An alias (``*name``) as written, in place of the node it refers to (``value``), so that
    expanding it is counted, and errors about it can name the line of the alias."""

    id = "alias"


class _Loader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2 exponent floats: ``1e5`` is a number, not a string.

    Composing keeps aliases as ``_Alias`` nodes and refuses a document nested deeper than
    ``MAX_DEPTH``, or holding more than ``MAX_VALUES`` values or ``MAX_ALIAS_EXPANSIONS``
    aliases before expansion.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            self._aliases += 1  # each is at least one expansion
            if self._aliases > MAX_ALIAS_EXPANSIONS:
                raise _Refused(_too_many_aliases(), event.start_mark)
            target = super().compose_node(parent, index)  # refuses an undefined alias
            return _Alias("", target, event.start_mark, event.end_mark)
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        self._values += 1
        if self._values > MAX_VALUES:
            raise _Refused(_too_many_values(), mark)
        if self._depth >= MAX_DEPTH:
            raise _Refused(_too_deep(), mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


@dataclass(frozen=True, slots=True)
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


def _target(node: yaml.Node) -> yaml.Node:
    """The node an alias refers to (anchors are defined on nodes, never on aliases)."""
    return node.value if isinstance(node, _Alias) else node


def _built_children(node: yaml.Node) -> Iterator[yaml.Node]:
    """The nodes ``_Builder`` builds directly under ``node``: a list's items, a mapping's values
    and the mappings its merge keys name (not the keys, nor a merge key's list itself)."""
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            merged = _target(key_node).tag == _MERGE_TAG
            if merged and isinstance(_target(value_node), yaml.SequenceNode):
                yield from _target(value_node).value
            else:
                yield value_node


class _Expansion:
    """Measures what building a composed graph would make, without building it: the values and
    the alias expansions of every node's expanded subtree, remembered per node, so a node used
    through many aliases is measured once and an alias bomb costs the size of its text. The
    first subtree past a limit is refused at the line of the value (or alias) that crossed it.
    """

    def __init__(self, file: str) -> None:
        self._file = file
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, alias expansions)

    def check(self, root: yaml.Node) -> None:
        self._measure(root, 0)

    def _measure(self, node: yaml.Node, depth: int) -> tuple[int, int]:
        if isinstance(node, _Alias):
            values, expansions = self._measure(node.value, depth)
            return values, expansions + 1
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if depth > MAX_DEPTH:  # an alias inside its own anchor (&a [*a]) never ends
            raise ConfigError(_too_deep(), file=self._file, line=node.start_mark.line + 1)
        values, expansions = 1, 0
        for child in _built_children(node):
            child_values, child_expansions = self._measure(child, depth + 1)
            values += child_values
            expansions += child_expansions
            too_many = (
                _too_many_values() if values > MAX_VALUES
                else _too_many_aliases() if expansions > MAX_ALIAS_EXPANSIONS
                else None
            )
            if too_many is not None:
                raise ConfigError(too_many, file=self._file, line=child.start_mark.line + 1)
        self._sizes[id(node)] = (values, expansions)
        return values, expansions


class _Builder(yaml.constructor.SafeConstructor):
    """Turns a composed node graph into ``YNode``s; scalars use the safe constructors.

    Expands aliases and merge keys. ``_Expansion`` has checked the graph against the limits
    first; the depth check here only guards the builder's own recursion.
    """

    def __init__(self, file: str) -> None:
        super().__init__()
        self._file = file

    def _error(self, message: str, mark: yaml.Mark | None) -> ConfigError:
        return ConfigError(message, file=self._file, line=mark.line + 1 if mark else None)

    def build(self, node: yaml.Node, depth: int = 0) -> YNode:
        node = _target(node)
        line = node.start_mark.line + 1
        if depth > MAX_DEPTH:
            raise self._error(_too_deep(), node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            return YNode(_SCALAR, line, value=self._scalar(node), text=str(node.value))
        if isinstance(node, yaml.SequenceNode):
            return YNode(
                _SEQ, line, items=tuple(self.build(item, depth + 1) for item in node.value)
            )
        if isinstance(node, yaml.MappingNode):
            return self._build_mapping(node, line, depth)
        raise self._error(f"unsupported YAML node {type(node).__name__}", node.start_mark)

    def _scalar(self, node: yaml.ScalarNode) -> object:
        too_long = f"bad value: an integer of more than {MAX_INTEGER_DIGITS} digits"
        try:
            value = self.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self._error(f"bad value: {_problem(exc)}", node.start_mark) from exc
        except ValueError as exc:  # Python's limit on the digits of an int read from text
            raise self._error(too_long, node.start_mark) from exc
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and abs(value) >= 10**MAX_INTEGER_DIGITS
        ):
            raise self._error(too_long, node.start_mark)
        if node.tag == _INT_TAG and _OCTAL.match(node.value) and value != 0:
            # YAML 1.1 reads 010 as 8: an iops, iodepth or seed with a leading 0, or a serial
            # number, would silently be another number
            digits = node.value.replace("_", "")
            sign = digits[0] if digits[0] in "+-" else ""
            decimal = sign + digits.lstrip("+-").lstrip("0")
            raise self._error(
                f"bad value {node.value}: YAML reads a number with a leading 0 as octal "
                f"({value}); write {decimal} without the 0, or quote it (\"{node.value}\") "
                "for text",
                node.start_mark,
            )
        return value

    def _build_mapping(self, node: yaml.MappingNode, line: int, depth: int) -> YNode:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            key_node = _target(key_node)
            is_merge = key_node.tag == _MERGE_TAG  # "<<", checked for duplicates too
            if not is_merge and (
                not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR_TAG
            ):
                raise self._error(f"keys must be strings, not {_key_text(key_node)}",
                                  key_node.start_mark)
            if key_node.value in seen:
                raise self._error(
                    f"duplicate key {key_node.value!r} (first at line {seen[key_node.value]})",
                    key_node.start_mark,
                )
            seen[key_node.value] = key_node.start_mark.line + 1
        # The YAML merge key (<<: *anchor or <<: [*a, *b]), as the merge-key spec has it: an
        # explicit key overrides a merged one, and in a list an earlier mapping overrides a later
        # one. Merged keys come first, in the order they first appear, then the explicit ones.
        # (PyYAML 6.0.4 lets a later mapping win for keys longer than a character.) Each source
        # is built as a YNode, so merging one twice does not double its entries.
        entries: dict[str, tuple[int, YNode]] = {}
        for key_node, value_node in node.value:
            if _target(key_node).tag == _MERGE_TAG:
                for source in self._merge_sources(value_node, depth):
                    for key, entry in source.entries.items():
                        entries.setdefault(key, entry)
        for key_node, value_node in node.value:
            key_node = _target(key_node)
            if key_node.tag == _MERGE_TAG:
                continue
            entries.pop(key_node.value, None)  # a later (explicit) key overrides a merged one
            entries[key_node.value] = (
                key_node.start_mark.line + 1,
                self.build(value_node, depth + 1),
            )
        return YNode(_MAP, line, entries=entries)

    def _merge_sources(self, value_node: yaml.Node, depth: int) -> list[YNode]:
        """The mappings a merge key's value names, the one that wins a key first."""
        target = _target(value_node)
        if isinstance(target, yaml.MappingNode):
            sources = [value_node]
        elif isinstance(target, yaml.SequenceNode):
            sources = list(target.value)
            for source in sources:
                if not isinstance(_target(source), yaml.MappingNode):
                    raise self._error(
                        "bad merge key: expected a mapping for merging, but found "
                        f"{_kind(_target(source))}",
                        source.start_mark,
                    )
        else:
            raise self._error(
                "bad merge key: expected a mapping or list of mappings for merging, but found "
                f"{_kind(target)}",
                value_node.start_mark,
            )
        return [self.build(source, depth + 1) for source in sources]


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    return "a list" if isinstance(node, yaml.SequenceNode) else "a scalar"


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
    return str(exc)


def compose_text(text: str, file: str) -> YNode:
    """Parse one YAML document into a ``YNode`` tree; an empty document is a ``ConfigError``,
    and so is one past a limit (``MAX_VALUES``, ``MAX_ALIAS_EXPANSIONS``, ``MAX_DEPTH``)."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except _Refused as exc:
        raise ConfigError(exc.message, file=file, line=exc.line) from exc
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
    _Expansion(file).check(root)
    return _Builder(file).build(root)


#: fio's job options a fio user writes first → (the keys of the mappings it is hinted in: a
#: workload's is known by ``iosequencer``, a step's by ``measure_seconds``, a LUN's by
#: ``path``; what to write instead)
FIO_NAMES: dict[str, tuple[tuple[str, ...], str]] = {
    "bs": (("blocksize",), "blocksize (4KiB)"),
    "blocksize_range": (("blocksize",), "blocksize (one size a workload)"),
    "rw": (("iosequencer",), "iosequencer (random_steady, random_independent or sequential) "
           "with read_fraction (70% for randrw with rwmixread=70)"),
    "readwrite": (("iosequencer",), "iosequencer (random_steady, random_independent or "
                  "sequential) with read_fraction"),
    "rwmixread": (("read_fraction",), "read_fraction (70%)"),
    "rwmixwrite": (("read_fraction",), "read_fraction, the reads' share (30% writes: 70%)"),
    "rate_iops": (("iops",), "iops (a workload's, paced)"),
    "runtime": (("measure_seconds", "iosequencer"), "measure_seconds, a step's"),
    "time_based": (("measure_seconds", "iosequencer"),
                   "measure_seconds, a step's: a step always runs for its time"),
    "ramp_time": (("measure_seconds", "iosequencer"), "warmup_seconds, a step's"),
    "filename": (("iosequencer", "path"), "a luns entry with path: (a block device) or "
                 "file:"),
    "ioengine": (("iosequencer", "path"), "engine, a luns entry's (libaio, io_uring or "
                 "threadpool)"),
    "size": (("iosequencer",), "size, a file LUN's ({file: ..., size: 1GiB} in luns)"),
    "numjobs": (("iosequencer",), "a workload per LUN it names: more LUNs, or more workloads"),
    "randseed": (("seed",), "seed"),
    "direct": (("iosequencer", "path"), "none: ivypy opens a LUN with O_DIRECT where its "
               "engine takes it (luns.csv says which)"),
}


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
        """Unknown keys are errors, reported at the key's own line with a suggestion: fio's
        name for a setting says ivypy's (``FIO_NAMES``, where the mapping takes it), else the
        closest spelling."""
        for error in self.unknown_keys(allowed):
            raise error

    def unknown_keys(self, allowed: Collection[str]) -> list[ConfigError]:
        """``check_keys``' error for each unknown key of this mapping, in the file's order."""
        errors = []
        for key, (key_line, _) in self.node.entries.items():
            if key not in allowed:
                fio = FIO_NAMES.get(key)
                if fio is not None and any(k in allowed for k in fio[0]):
                    hint = f" (fio's {key}; ivypy's is {fio[1]})"
                else:
                    close = difflib.get_close_matches(key, list(allowed), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                errors.append(self.error(f"unknown key{hint}", line=key_line,
                                         path=self._join(key)))
        return errors

    def mappings(self, generic: str = "") -> Iterator[tuple[str, Cursor]]:
        """Every mapping at or below this node, with its key path as ``keys.section`` names
        it (``[]`` for a list's items: ``steps[].workloads[]``), in the file's order."""
        if self.is_map:
            yield generic, self
            for key in self.node.entries:
                child = self.get(key)
                assert child is not None
                yield from child.mappings(f"{generic}.{key}" if generic else key)
        elif self.is_seq:
            for item in self:
                yield from item.mappings(f"{generic}[]")

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
        if not self.is_scalar or not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error("must be a number")
        if not math.isfinite(value):
            raise self.error(f"must be a finite number (got {self.shown()})")
        return float(value)

    def shown(self) -> str:
        """The value as written, on one line and at most ``SHOWN_CHARS`` long, for messages."""
        text = self.node.text if self.is_scalar else str(self.value)
        text = " ".join(text.split())
        return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


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


class Collected:
    """The errors of a test file found so far, so that a user learns every one at once
    (``ConfigErrors``, at most ``ConfigErrors.MAX_REPORTED`` shown) rather than one per run.
    ``with errors.each():`` around a check that does not depend on the others' results keeps
    its error and goes on; ``raise_any()`` raises what was kept, in the file's order."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, exc: ConfigError) -> None:
        self.errors += exc.errors if isinstance(exc, ConfigErrors) else [exc]

    @contextlib.contextmanager
    def each(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as exc:
            self.add(exc)

    def raise_any(self) -> None:
        if len(self.errors) > 1:
            raise ConfigErrors(sorted(self.errors, key=lambda e: e.line or 0))
        if self.errors:
            raise self.errors[0]
