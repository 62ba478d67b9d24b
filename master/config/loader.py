"""Test file → ``TestConfig``: the top level, ``luns:`` and ``rollups:``; the public entry points.

Owns the order of validation (test name, output root, timing, ``verify``, hosts, LUN selectors,
rollups, steps with what ``verify`` forbids in them) and the resolution of paths: ``output_root``
relative to the current directory (ivy's habit; ``--output-root`` overrides it), ``${output_root}``
in file LUNs. Everything is checked here, once, before any host is contacted; the first problem
raises ``ConfigError`` whose text is one line ``file:line: key.path: message``. This module must not
contact hosts or create files.
"""

from __future__ import annotations

import codecs
import difflib
import logging
import os
import re
from pathlib import Path

from master.config.catalog import (
    BUILTIN_ROLLUPS,
    LUN_ATTRIBUTE_KEYS,
    LUN_ENGINES,
    ROLLUP_ATTRIBUTES,
)
from master.config.gather import GATHER_JOIN_KEYS, GATHER_KEYS, parse_gather
from master.config.hosts import HOST_KEYS, expand_ranges, parse_hosts
from master.config.limits import (
    MAX_IOPS_TOLERANCE_PCT,
    MAX_LUN_BYTES,
    MAX_ROLLUP_QUANTITY,
    bounded,
    duration_within,
    percent_within,
    show_bytes,
)
from master.config.metrics import (
    CONNECT_BACK_KEYS,
    METRICS_KEYS,
    parse_connect_back,
    parse_metrics,
)
from master.config.schema import (
    AttributeMatch,
    ConnectBackConfig,
    HostConfig,
    LunSelector,
    RollupSpec,
    StepConfig,
    TestConfig,
)
from master.config.steps import (
    DFC_KEYS,
    EDIT_ROLLUP_KEYS,
    MEASURE_KEYS,
    STEP_KEYS,
    StepContext,
    parse_steps,
)
from master.config.thresholds import THRESHOLD_KEYS, parse_thresholds
from master.config.units import parse_bytes, parse_fraction
from master.config.verify import VERIFY_KEYS, check_verifiable, parse_verify
from master.config.workloads import (
    WORKLOAD_KEYS,
    WorkloadContext,
    parse_attribute_value,
    substitute,
)
from master.config.yamlnodes import Collected, Cursor, compose_text
from protocol.errors import ConfigError

__all__ = ["DEFAULT_OUTPUT_ROOT", "load_config", "parse_config_text"]

logger = logging.getLogger(__name__)

TOP_KEYS: tuple[str, ...] = (
    "test",
    "description",
    "output_root",
    "subinterval_seconds",
    "deadline_fraction",
    "skew_limit_seconds",
    "iops_tolerance_pct",
    "hosts",
    "luns",
    "rollups",
    "gather",
    "steps",
    "thresholds",
    "verify",
    "metrics",
    "connect_back",
)
LUN_KEYS: tuple[str, ...] = (
    "hosts",
    "path",
    "file",
    "size",
    "create",
    "allow_write",
    "engine",
    "allow_engine_fallback",
    "shared",
    "layout",
    *LUN_ATTRIBUTE_KEYS,
)
ROLLUP_KEYS: tuple[str, ...] = ("type", "quantity", "max_droop")

DEFAULT_OUTPUT_ROOT = "./ivypy-output"
#: how a created file LUN is filled before its first step (``luns[].layout``)
LAYOUTS: tuple[str, ...] = ("random", "zero", "none")
DEFAULT_SUBINTERVAL_S = 5.0
DEFAULT_DEADLINE_FRACTION = 0.75
#: ``iops_tolerance_pct``: how far (percent) a paced workload's IOPS over a step's measurement
#: may fall short of its setting before the step is invalid (``master.analysis.verdicts``)
DEFAULT_IOPS_TOLERANCE_PCT = 5.0
#: ``skew_limit_seconds``: a host's clock offset uncertainty, or a boundary's skew bound, past
#: this is warned about (the default, and its range)
DEFAULT_SKEW_LIMIT_S = 0.001
SKEW_LIMIT_RANGE_S: tuple[float, float] = (1e-6, 10.0)
MAX_SUBINTERVAL_S = 3600.0
#: the longest test file, in characters: the example tests are a few KiB, and the YAML parser
#: (pure Python) reads about 1 MiB a second; a file is read no further than this
MAX_FILE_CHARS = 1024 * 1024
# a subinterval carries a boundary (a switch of buffers and a send, 0.3-1 ms in the engine loop)
# and at least a few control polls (every 2 ms): shorter ones measure the tool, not the LUNs
MIN_SUBINTERVAL_S = 0.01

_TEST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ROLLUP_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _resolve_dir(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = base / path
    return Path(os.path.normpath(path))


def _test_name(root: Cursor) -> str:
    cursor = root.require("test")
    name = cursor.string()
    if not _TEST_NAME.match(name):
        raise cursor.error(f"bad test name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def _output_root(root: Cursor, override: str | None, base: Path) -> Path:
    if override is not None:
        if not override:
            raise ConfigError("--output-root must not be empty")
        return _resolve_dir(override, base)
    cursor = root.get("output_root")
    if cursor is None:
        return _resolve_dir(DEFAULT_OUTPUT_ROOT, base)
    text = cursor.string()
    if not text:
        raise cursor.error("must not be empty")
    return _resolve_dir(text, base)


def _subinterval(root: Cursor) -> float:
    return duration_within(root.get("subinterval_seconds"), DEFAULT_SUBINTERVAL_S,
                           MIN_SUBINTERVAL_S, MAX_SUBINTERVAL_S, "at least 10ms and at most 1h")


def _deadline_fraction(root: Cursor) -> float:
    cursor = root.get("deadline_fraction")
    if cursor is None:
        return DEFAULT_DEADLINE_FRACTION
    try:
        value = parse_fraction(cursor.value if cursor.is_scalar else None)
    except ValueError as exc:
        raise cursor.error("must be a fraction or a percentage") from exc
    if not 0 < value < 1:
        raise cursor.error(f"must be between 0 and 1, exclusive (got {cursor.node.text})")
    return value


def _iops_tolerance(root: Cursor) -> float:
    return percent_within(root.get("iops_tolerance_pct"), DEFAULT_IOPS_TOLERANCE_PCT,
                          MAX_IOPS_TOLERANCE_PCT)


def _skew_limit(root: Cursor) -> float:
    return duration_within(root.get("skew_limit_seconds"), DEFAULT_SKEW_LIMIT_S,
                           *SKEW_LIMIT_RANGE_S, "at least 1us and at most 10s")


# ---------------------------------------------------------------- luns


def _selector_hosts(cursor: Cursor | None, hosts: tuple[HostConfig, ...]) -> tuple[str, ...]:
    names = tuple(host.name for host in hosts)
    if cursor is None or (cursor.is_scalar and cursor.value == "all"):
        return names
    items = list(cursor) if cursor.is_seq else [cursor]
    if cursor.is_seq and not items:
        raise cursor.error("must not be empty")
    chosen: list[str] = []
    for item in items:
        if not item.is_scalar or not isinstance(item.value, str):
            raise item.error("must be 'all', a host name or a list of host names")
        try:
            expanded = expand_ranges(item.value)
        except ValueError as exc:
            raise item.error(str(exc)) from exc
        for name in expanded:
            if name not in names:
                raise item.error(f"unknown host {name!r} (hosts: {', '.join(names)})")
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen)


def _lun_selector(
    entry: Cursor, hosts: tuple[HostConfig, ...], output_root: Path
) -> tuple[LunSelector, ...]:
    """One ``luns:`` entry; a file with ``${host}`` becomes one selector per host."""
    entry.expect_map("a mapping with path, file or LUN attributes")
    entry.check_keys(LUN_KEYS)
    host_names = _selector_hosts(entry.get("hosts"), hosts)
    attribute_keys = [key for key in entry.mapping_keys() if key in LUN_ATTRIBUTE_KEYS]
    kinds = [key for key in ("path", "file") if entry.has(key)] + (
        ["attributes"] if attribute_keys else []
    )
    if not kinds:
        raise entry.error(
            f"needs one of path, file or LUN attributes ({', '.join(LUN_ATTRIBUTE_KEYS)})"
        )
    if len(kinds) > 1:
        second = entry.require(kinds[1] if kinds[1] != "attributes" else attribute_keys[0])
        raise second.error(
            f"give only one of path, file or LUN attributes (this entry has {' and '.join(kinds)})"
        )
    for key in ("size", "create", "layout"):
        child = entry.get(key)
        if child is not None and kinds[0] != "file":
            raise child.error("only with file")
    allow_cursor = entry.get("allow_write")
    allow_write = False if allow_cursor is None else allow_cursor.boolean()
    shared_cursor = entry.get("shared")
    shared = False if shared_cursor is None else shared_cursor.boolean()
    engine, fallback = _lun_engine(entry)
    if kinds[0] == "path":
        path_cursor = entry.require("path")
        path = path_cursor.string()
        if not path.startswith("/"):
            raise path_cursor.error(f"must be an absolute device path or glob (got {path!r})")
        return (
            LunSelector(host_names, "path", path=path, allow_write=allow_write, engine=engine,
                        allow_engine_fallback=fallback, shared=shared, line=entry.line),
        )
    if kinds[0] == "file":
        file_cursor = entry.require("file")
        text = file_cursor.string()
        values = {"output_root": str(output_root), "host": "${host}"}
        file = substitute(file_cursor, text, values)
        if not file.startswith("/"):
            raise file_cursor.error(
                f"must be absolute or start with ${{output_root}} (got {file!r})"
            )
        size_cursor, create_cursor = entry.get("size"), entry.get("create")
        size_bytes = None
        if size_cursor is not None:
            try:
                size_bytes = parse_bytes(size_cursor.value if size_cursor.is_scalar else None)
            except ValueError as exc:
                raise size_cursor.error(str(exc)) from exc
            if size_bytes <= 0 or size_bytes % 512:
                raise size_cursor.error(f"must be a positive multiple of 512 (got {size_bytes})")
            bounded(size_cursor, size_bytes, high=MAX_LUN_BYTES, show=show_bytes)
        create = False if create_cursor is None else create_cursor.boolean()
        if create and size_bytes is None:
            raise entry.error("create: true needs size")
        layout = _layout(entry, create)
        # ${host} gives each host its own file: one selector per host
        per_host = "${host}" in file
        groups = [(name,) for name in host_names] if per_host else [host_names]
        return tuple(
            LunSelector(
                group,
                "file",
                file=file.replace("${host}", group[0]) if per_host else file,
                size_bytes=size_bytes,
                create=create,
                layout=layout,
                allow_write=allow_write,
                engine=engine,
                allow_engine_fallback=fallback,
                shared=shared,
                line=entry.line,
            )
            for group in groups
        )
    matches = tuple(
        AttributeMatch(key, parse_attribute_value(entry.require(key), key))
        for key in attribute_keys
    )
    return (
        LunSelector(
            host_names, "attributes", attributes=matches, allow_write=allow_write, engine=engine,
            allow_engine_fallback=fallback, shared=shared, line=entry.line
        ),
    )


def _layout(entry: Cursor, create: bool) -> str:
    """A file entry's ``layout``: how a file the run creates is filled before its first step
    (``random``, the default; ``zero``; ``none``: left sparse)."""
    cursor = entry.get("layout")
    if cursor is None:
        return "random" if create else "none"
    layout = cursor.string()
    if layout not in LAYOUTS:
        raise cursor.error(f"must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    if layout != "none" and not create:
        raise cursor.error("lays out a file the run creates: give create: true with it")
    return layout


def _lun_engine(entry: Cursor) -> tuple[str, bool]:
    """A ``luns:`` entry's ``engine`` (default ``auto``) and ``allow_engine_fallback``."""
    engine_cursor = entry.get("engine")
    engine = "auto" if engine_cursor is None else engine_cursor.string()
    if engine not in LUN_ENGINES:
        assert engine_cursor is not None
        raise engine_cursor.error(f"must be one of {', '.join(LUN_ENGINES)} (got {engine!r})")
    fallback_cursor = entry.get("allow_engine_fallback")
    fallback = False if fallback_cursor is None else fallback_cursor.boolean()
    if fallback and engine != "auto":
        assert fallback_cursor is not None
        raise fallback_cursor.error(f"only with engine: auto (this entry asks for {engine})")
    return engine, fallback


def _luns(
    root: Cursor, hosts: tuple[HostConfig, ...], output_root: Path
) -> tuple[LunSelector, ...]:
    cursor = root.require("luns")
    cursor.expect_seq("a list of LUN selectors")
    if len(cursor) == 0:
        raise cursor.error("must list at least one LUN selector")
    return tuple(
        selector for entry in cursor for selector in _lun_selector(entry, hosts, output_root)
    )


# ---------------------------------------------------------------- rollups


def _rollup_type(cursor: Cursor) -> tuple[str, tuple[str, ...]]:
    text = cursor.string().strip()
    parts = tuple(text.split("+"))
    for part in parts:
        if not _ROLLUP_PART.match(part):
            raise cursor.error(
                f"bad rollup type {text!r}: attribute names joined by '+', like vendor+model"
            )
    for part in parts:
        if part != "all" and part not in ROLLUP_ATTRIBUTES:
            # no workload has it: one instance, named "", would hold every workload
            close = difflib.get_close_matches(part, ROLLUP_ATTRIBUTES, n=1)
            hint = (f"did you mean {close[0]!r}?" if close
                    else f"known: {', '.join(ROLLUP_ATTRIBUTES)}")
            raise cursor.error(f"bad rollup type {text!r}: no LUN or workload has the attribute "
                               f"{part!r} ({hint})")
    if len(set(parts)) != len(parts):
        raise cursor.error(f"bad rollup type {text!r}: an attribute appears twice")
    if "all" in parts and len(parts) > 1:
        raise cursor.error(f"bad rollup type {text!r}: 'all' cannot be combined")
    return text, parts


def _rollups(root: Cursor) -> tuple[RollupSpec, ...]:
    specs: dict[str, RollupSpec] = {
        name: RollupSpec(name, (name,), builtin=True) for name in BUILTIN_ROLLUPS
    }
    cursor = root.get("rollups")
    if cursor is None:
        return tuple(specs.values())
    cursor.expect_seq("a list of rollup types")
    listed: dict[str, int] = {}
    for entry in cursor:
        quantity, max_droop = None, None
        if entry.is_map:
            entry.check_keys(ROLLUP_KEYS)
            name, parts = _rollup_type(entry.require("type"))
            quantity_cursor, droop_cursor = entry.get("quantity"), entry.get("max_droop")
            if quantity_cursor is not None:
                quantity = quantity_cursor.integer(1)
                bounded(quantity_cursor, quantity, high=MAX_ROLLUP_QUANTITY)
            if droop_cursor is not None:
                try:
                    max_droop = parse_fraction(
                        droop_cursor.value if droop_cursor.is_scalar else None
                    )
                except ValueError as exc:
                    raise droop_cursor.error("must be a fraction or a percentage") from exc
                if not 0 < max_droop < 1:
                    raise droop_cursor.error(
                        f"must be between 0 and 1, exclusive (got {droop_cursor.node.text})"
                    )
            if name == "all" and quantity not in (None, 1):
                raise entry.error(
                    "the rollup 'all' always has exactly one instance",
                    path=f"{entry.path}.quantity",
                )
        elif entry.is_scalar:
            name, parts = _rollup_type(entry)
        else:
            raise entry.error("must be a rollup type or a mapping {type, quantity, max_droop}")
        if name in listed:
            raise entry.error(f"duplicate rollup type {name!r} (first at line {listed[name]})")
        listed[name] = entry.line
        specs[name] = RollupSpec(name, parts, quantity, max_droop, builtin=name in BUILTIN_ROLLUPS)
    return tuple(specs.values())


# ---------------------------------------------------------------- entry points


def parse_config_text(
    text: str,
    filename: str,
    output_root_override: str | None = None,
    *,
    cwd: Path | None = None,
) -> TestConfig:
    """Validate a test given as text. ``filename`` is only used in messages and the result.

    ``cwd`` is the directory relative output roots resolve against (default: the current one).
    """
    base = Path.cwd() if cwd is None else cwd
    root = Cursor(compose_text(text, filename), "", filename)
    root.expect_map("a mapping with test, hosts, luns and steps")
    _check_every_key(root)
    root.check_keys(TOP_KEYS)
    # every error at once where the checks do not depend on each other: the top level's
    # values, then hosts, LUNs, rollups and gather sources (each as far as what it needs
    # passed), then the steps once everything they refer to did (an error there is every
    # error of its first step that has one: the steps after it build on what it would have
    # set up) with, when verify is on, every value in any step that verification forbids,
    # then the thresholds
    errors = Collected()
    test, description, output_root = "", "", None
    subinterval_s = deadline_fraction = skew_limit_s = tolerance_pct = None
    with errors.each():
        test = _test_name(root)
    with errors.each():
        description_cursor = root.get("description")
        description = "" if description_cursor is None else description_cursor.string()
    with errors.each():
        output_root = _output_root(root, output_root_override, base)
    with errors.each():
        subinterval_s = _subinterval(root)
    with errors.each():
        deadline_fraction = _deadline_fraction(root)
    with errors.each():
        skew_limit_s = _skew_limit(root)
    with errors.each():
        tolerance_pct = _iops_tolerance(root)
    verify = metrics = None
    with errors.each():
        verify = parse_verify(root.get("verify"))
    connect_back = None
    with errors.each():
        connect_back = parse_connect_back(root.get("connect_back"), base)
    hosts = luns = rollups = gather = None
    with errors.each():
        hosts = parse_hosts(root.require("hosts"))
        _check_connect_back(root, hosts, connect_back)
    if hosts is not None and output_root is not None:
        with errors.each():
            luns = _luns(root, hosts, output_root)
    with errors.each():
        rollups = _rollups(root)
    with errors.each():
        metrics = parse_metrics(root.get("metrics"), base,
                                None if rollups is None else [spec.type for spec in rollups])
    if subinterval_s is not None:
        with errors.each():
            gather = parse_gather(root.get("gather"), subinterval_s)
    errors.raise_any()
    assert output_root is not None and subinterval_s is not None
    assert deadline_fraction is not None and skew_limit_s is not None
    assert tolerance_pct is not None and hosts is not None and luns is not None
    assert rollups is not None and gather is not None
    context = StepContext(
        subinterval_s=subinterval_s,
        rollup_types=tuple(spec.type for spec in rollups),
        iops_tolerance_pct=tolerance_pct,
        workloads=WorkloadContext(tuple(host.name for host in hosts), luns, output_root),
        gather=gather,
    )
    steps = None
    errors = Collected()
    if verify is not None:
        with errors.each():
            check_verifiable(root.get("steps"), root.require("verify"), root.get("luns"))
    with errors.each():
        steps = parse_steps(root.require("steps"), context)
    errors.raise_any()
    assert steps is not None
    thresholds = parse_thresholds(root.get("thresholds"), _step_names(root, steps),
                                  context.rollup_types, gather)
    logger.debug(
        "loaded test %s from %s: %d hosts, %d steps", test, filename, len(hosts), len(steps)
    )
    return TestConfig(
        source_file=filename,
        source_text=text,
        test=test,
        description=description,
        output_root=output_root,
        subinterval_seconds=subinterval_s,
        deadline_fraction=deadline_fraction,
        skew_limit_seconds=skew_limit_s,
        iops_tolerance_pct=tolerance_pct,
        hosts=hosts,
        luns=luns,
        rollups=rollups,
        steps=steps,
        gather=gather,
        thresholds=thresholds,
        verify=verify,
        metrics=metrics,
        connect_back=connect_back,
    )


def _check_connect_back(root: Cursor, hosts: tuple[HostConfig, ...],
                        connect_back: ConnectBackConfig | None) -> None:
    """A host that dials the master needs the test's ``connect_back:``, which needs such a
    host."""
    dialling = [h for h in hosts if h.transport == "connect_back"]
    if dialling and connect_back is None and root.get("connect_back") is None:
        raise root.require("hosts").error(
            f"host {dialling[0].name} dials the master (connect_back), and the test has no "
            "connect_back: {listen: ADDR:PORT, token_file: FILE} to listen with")
    if not dialling and connect_back is not None:
        raise root.require("connect_back").error(
            "no host says connect_back: true: there is nobody to listen for")


def _step_names(root: Cursor, steps: tuple[StepConfig, ...]) -> dict[str, tuple[str, ...]]:
    """Each step's name → itself, and each YAML step's name → every step it made (a ``for:``
    sweep's, an ``iops_curve``'s), for what ``thresholds`` may name."""
    made: dict[int, list[str]] = {}
    for step in steps:
        made.setdefault(step.source_index, []).append(step.name)
    names: dict[str, tuple[str, ...]] = {step.name: (step.name,) for step in steps}
    for index, entry in enumerate(root.require("steps")):
        name = entry.get("name") if entry.is_map else None
        if name is not None and name.is_scalar and isinstance(name.value, str):
            names.setdefault(name.value, tuple(made.get(index, ())))
    return names


def _undecodable(path: str | Path) -> tuple[int | None, int | None]:
    """The line (1-based) and value of the first byte of ``path`` that is not UTF-8, for the
    message: a stray Latin-1 ``µ`` in a comment is easy to fix once its line is known."""
    try:
        with open(path, "rb") as file:
            data = file.read(4 * MAX_FILE_CHARS + 4)  # the most MAX_FILE_CHARS can take
    except OSError:
        return None, None
    try:  # not final: a character the read cut in two is no error
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        # universal newlines, as the text was read: \r\n, \r and \n each end a line
        return before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1, \
            data[exc.start]
    return None, None


#: the keys each mapping of a test file takes, by its key path (``[]`` for a list's items):
#: the same tuples its parser checks them against (tests/master/test_config_reference.py keeps
#: them in step with master/config/keys.py)
KEYS_BY_PATH: dict[str, tuple[str, ...]] = {
    "": TOP_KEYS, "hosts[]": HOST_KEYS, "luns[]": LUN_KEYS, "rollups[]": ROLLUP_KEYS,
    "gather[]": GATHER_KEYS, "gather[].join": GATHER_JOIN_KEYS, "steps[]": STEP_KEYS,
    "steps[].workloads[]": WORKLOAD_KEYS, "steps[].measure": MEASURE_KEYS,
    "steps[].dfc": DFC_KEYS, "steps[].dfc.gains": ("kp", "ki", "kd"),
    "steps[].edit_rollup[]": EDIT_ROLLUP_KEYS, "thresholds[]": THRESHOLD_KEYS,
    "verify": VERIFY_KEYS,
    "metrics": METRICS_KEYS,
    "connect_back": CONNECT_BACK_KEYS,
}


def _check_every_key(root: Cursor) -> None:
    """Every unknown key of the file at once, before any value is read (``ConfigErrors``; one
    alone as it always was): each names its line, its key path and what it likely is."""
    errors = Collected()
    for path, mapping in root.mappings():
        if path in KEYS_BY_PATH:
            for error in mapping.unknown_keys(KEYS_BY_PATH[path]):
                errors.add(error)
    errors.raise_any()


def load_config(path: str | Path, output_root_override: str | None = None) -> TestConfig:
    """Read and validate a test file; raises ``ConfigError`` (``file:line: key.path: message``)."""
    filename = str(path)
    try:
        with open(path, encoding="utf-8") as file:  # universal newlines, as read_text
            text = file.read(MAX_FILE_CHARS + 1)  # a device or FIFO may never end
    except UnicodeDecodeError as exc:
        line, byte = _undecodable(path)
        shown = "" if byte is None else f"byte 0x{byte:02x}: "
        raise ConfigError(f"not UTF-8 text ({shown}{exc.reason})", file=filename,
                          line=line) from exc
    except OSError as exc:
        raise ConfigError(
            f"cannot read the test file: {exc.strerror or exc}", file=filename
        ) from exc
    if len(text) > MAX_FILE_CHARS:
        raise ConfigError(
            f"the test file is longer than {MAX_FILE_CHARS:,} characters", file=filename
        )
    return parse_config_text(text, filename, output_root_override)
