"""Workload parameters, one frozen value both sides share: the master resolves them to bytes and
holds those in force (``master.run.settings``), the slave runs them.

Owns the frozen ``WorkloadParams`` dataclass and the small checks that protect the slave's own
invariants (alignment, iodepth range). It must not read files, open LUNs or keep time: the
master has already validated the user's YAML; a violation here is a bug on the master's side and
raises ``ValueError`` with the field named.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Literal

IoSequencerName = Literal["random_steady", "random_independent", "sequential"]
WriteDataKind = Literal["random", "zeros", "compressible", "dedupable"]

IOSEQUENCERS: Final = ("random_steady", "random_independent", "sequential")
WRITE_DATA_KINDS: Final = ("random", "zeros", "compressible", "dedupable")
MAX_IODEPTH: Final = 4096


@dataclass(frozen=True)
class WorkloadParams:
    """One workload's I/O parameters, in bytes and plain numbers.

    ``iops`` is ``None`` for ``max`` (keep ``iodepth`` I/Os in flight). ``range_end_bytes`` is
    exclusive and ``0`` means "the end of the LUN". ``hot_zone_fraction`` of the I/Os go to the
    first ``hot_zone_bytes`` of the range (random sequencers only). ``write_data_ratio`` is the
    compression or dedup ratio for ``compressible`` / ``dedupable`` write data.
    ``skew_weight`` is carried for the master (it splits total IOPS by it); the slave ignores it.
    """

    iosequencer: IoSequencerName = "random_steady"
    blocksize_bytes: int = 4096
    iodepth: int = 1
    iops: float | None = None
    read_fraction: float = 1.0
    range_start_bytes: int = 0
    range_end_bytes: int = 0
    seq_start_bytes: int = 0
    hot_zone_bytes: int = 0
    hot_zone_fraction: float = 0.0
    skew_weight: float = 1.0
    write_data: WriteDataKind = "random"
    write_data_ratio: float = 1.0
    busy_poll: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iosequencer not in IOSEQUENCERS:
            raise ValueError(f"iosequencer: {self.iosequencer!r} is not one of {IOSEQUENCERS}")
        if self.blocksize_bytes <= 0 or self.blocksize_bytes % 512:
            raise ValueError(f"blocksize_bytes: {self.blocksize_bytes} is not a multiple of 512")
        if not 1 <= self.iodepth <= MAX_IODEPTH:
            raise ValueError(f"iodepth: {self.iodepth} is outside 1..{MAX_IODEPTH}")
        if self.iops is not None and not self.iops > 0:
            raise ValueError(f"iops: {self.iops} must be > 0 (or None for max)")
        if not 0.0 <= self.read_fraction <= 1.0:
            raise ValueError(f"read_fraction: {self.read_fraction} is outside 0..1")
        if not 0.0 <= self.hot_zone_fraction <= 1.0:
            raise ValueError(f"hot_zone_fraction: {self.hot_zone_fraction} is outside 0..1")
        if self.range_start_bytes < 0 or self.range_end_bytes < 0 or self.hot_zone_bytes < 0:
            raise ValueError("range_start_bytes, range_end_bytes, hot_zone_bytes must be >= 0")
        if self.range_end_bytes and self.range_end_bytes <= self.range_start_bytes:
            raise ValueError(
                f"range_end_bytes {self.range_end_bytes} <= range_start_bytes "
                f"{self.range_start_bytes}"
            )
        if self.write_data not in WRITE_DATA_KINDS:
            raise ValueError(f"write_data: {self.write_data!r} is not one of {WRITE_DATA_KINDS}")
        if not 0.0 < self.skew_weight < math.inf:
            raise ValueError(f"skew_weight: {self.skew_weight} must be > 0 and finite")
        if self.write_data_ratio < 1.0:
            raise ValueError(f"write_data_ratio: {self.write_data_ratio} must be >= 1")

    @property
    def writes(self) -> bool:
        return self.read_fraction < 1.0

    def replace(self, **changes: Any) -> WorkloadParams:
        """A copy with ``changes`` applied (and validated)."""
        return replace(self, **changes)

    def with_rate(self, iops: float) -> WorkloadParams:
        """A copy with ``iops`` (> 0) alone changed, made without ``__init__``: the rest was
        validated when these were made. DFC gives every workload a new rate at every
        boundary: a ``replace`` cost ~3 us per workload there, this ~0.4."""
        if not iops > 0:
            raise ValueError(f"iops: {iops} must be > 0")
        new = object.__new__(WorkloadParams)
        new.__dict__.update(self.__dict__)
        new.__dict__["iops"] = float(iops)
        return new

    def same_but_rate(self, other: WorkloadParams) -> bool:
        """Whether ``other`` differs from these parameters in ``iops`` alone (or not at all):
        every other field read in one ``attrgetter`` call and the tuples compared (a
        ``replace`` to compare cost ~16 us; a generator over the fields ~1 us, called for
        every workload at every DFC boundary)."""
        return _ALL_BUT_RATE(self) == _ALL_BUT_RATE(other)


_ALL_BUT_RATE: Final = operator.attrgetter(
    *(f.name for f in fields(WorkloadParams) if f.name != "iops"))


#: every field's name: what ``CreateWorkload.params`` and an edit may carry
PARAM_NAMES: Final = frozenset(f.name for f in fields(WorkloadParams))


def to_wire(params: WorkloadParams) -> dict[str, Any]:
    """Every field, as ``CreateWorkload.params`` carries them (plain msgpack values)."""
    return dict(params.__dict__)


def changed_fields(old: WorkloadParams, new: WorkloadParams) -> dict[str, Any]:
    """The fields of ``new`` that differ from ``old``, as an edit carries them (empty: none)."""
    a, b = old.__dict__, new.__dict__
    return {k: v for k, v in b.items() if a[k] != v}


def from_wire(raw: dict[str, Any], base: WorkloadParams | None = None) -> WorkloadParams:
    """``raw`` (every field, or an edit's changed ones over ``base``) as checked parameters;
    ``ValueError`` naming an unknown or bad field."""
    unknown = set(raw) - PARAM_NAMES
    if unknown:
        raise ValueError(f"unknown workload parameters {sorted(unknown)}")
    if raw.get("iops") is not None:
        raw = {**raw, "iops": float(raw["iops"])}
    return base.replace(**raw) if base is not None else WorkloadParams(**raw)
