"""The test file: YAML → frozen dataclasses, validated once, before any host is contacted.

Public API: ``load_config(path, output_root_override=None) -> TestConfig`` and
``parse_config_text(text, filename)``, both raising ``protocol.errors.ConfigError`` whose text is
one line ``file:line: key.path: message``. The schema (every YAML key and its meaning) is
documented in ``master.config.schema``; the fixed vocabularies (metric names, LUN attribute keys,
built-in rollups) in ``master.config.catalog``. This package must not contact hosts, create
files, or import anything from the run loop.

Submodules: ``yamlnodes`` (YAML with line numbers), ``hosts`` (range expansion), ``workloads``
(workload keys, create/edit/delete), ``steps`` (steps, measure, DFC, sweeps), ``verify``
(``verify:`` and what a verified test may not hold), ``loader`` (top level, LUN selectors,
rollups), ``rolluptypes`` (whether a name is one of the test's rollup types, and its wording),
``schema``, ``catalog``, ``keys`` (each mapping's keys as a user reads them) and ``reference``
(renders them into ``docs/config.md``).
"""

from master.config.catalog import BUILTIN_ROLLUPS, FOCUS_METRICS, IOSEQUENCERS, LUN_ATTRIBUTE_KEYS
from master.config.hosts import expand_ranges
from master.config.loader import DEFAULT_OUTPUT_ROOT, load_config, parse_config_text
from master.config.schema import (
    AccuracyCriterion,
    AttributeMatch,
    DfcConfig,
    DfcGains,
    FioCriteria,
    FioCriterion,
    HostConfig,
    IopsCurvePoint,
    Limit,
    LunChoice,
    LunExtent,
    LunSelector,
    MeasureConfig,
    PhaseDuration,
    RollupEdit,
    RollupSpec,
    StepConfig,
    TestConfig,
    VerifyConfig,
    WorkloadChange,
    WorkloadEdit,
    WorkloadSpec,
    WriteData,
)

__all__ = [
    "BUILTIN_ROLLUPS",
    "DEFAULT_OUTPUT_ROOT",
    "FOCUS_METRICS",
    "IOSEQUENCERS",
    "LUN_ATTRIBUTE_KEYS",
    "AccuracyCriterion",
    "AttributeMatch",
    "DfcConfig",
    "DfcGains",
    "FioCriteria",
    "FioCriterion",
    "HostConfig",
    "IopsCurvePoint",
    "Limit",
    "LunChoice",
    "LunExtent",
    "LunSelector",
    "MeasureConfig",
    "PhaseDuration",
    "RollupEdit",
    "RollupSpec",
    "StepConfig",
    "TestConfig",
    "VerifyConfig",
    "WorkloadChange",
    "WorkloadEdit",
    "WorkloadSpec",
    "WriteData",
    "expand_ranges",
    "load_config",
    "parse_config_text",
]
