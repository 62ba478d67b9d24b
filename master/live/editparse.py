"""Live edits typed by the operator: ``host=h1 iops=5000 read_fraction=70%`` → validated changes.

Owns the syntax of ``ivypy edit`` (and of the control socket's ``edit`` request): the rollup
instance to edit and the ``key=value`` settings, checked and converted into ``EditChanges`` whose
``params`` use the slave's ``WorkloadParams`` field names. It is the one place that decides what
may be edited live and which values are valid, so the CLI (before it connects) and the control
server (for whatever arrives on the socket) apply the same rules.

Must not: know which rollup instances or workloads exist (the run loop answers that and refuses
an unknown instance), divide a ``total_iops`` (``master.run.settings.split_total`` does), or
do any I/O.

Instance syntax (``parse_instance``)
    ``all``; or ``<rollup type>=<instance>``: ``host=h1``, ``lun=h1:/dev/sdb``,
    ``workload=h1:/dev/sdb:rr``, ``vendor+model=ACME+X1`` (an attribute rollup needs as many
    ``+``-joined values as it has attributes, as in ``edit_rollup``). Returns
    ``(rollup_type, instance_name)`` with ``instance_name`` as ``master.run.workloads.rollup_key``
    spells it (``("all", "all")``, ``("host", "h1")``, ``("vendor+model", "ACME+X1")``).

Settings (``parse_edit_args`` for ``key=value`` strings, ``parse_params`` for a mapping)
    ==============  ===============================================  ========================
    key             value                                            ``params`` field(s)
    ==============  ===============================================  ========================
    iops            0.001 .. 10**8, or ``max`` (per workload)        ``iops`` (None for max)
    total_iops      0.001 .. 10**10, or ``max`` (split over the       ``EditChanges.total_iops``
                    instance's LUNs, then by skew weight)
    read_fraction   0..1, or a percentage (``70%``)                  ``read_fraction``
    blocksize       bytes with a unit (``8KiB``), multiple of 512,   ``blocksize_bytes``
                    at most 64MiB
    iodepth         an integer 1..4096                               ``iodepth``
    iosequencer     random_steady | random_independent | sequential  ``iosequencer``
    skew_weight     10**-6 .. 10**6                                  ``skew_weight``
    busy_poll       true | false (also yes/no, on/off, 1/0)          ``busy_poll``
    write_data      zeros | random | compressible:R | dedupable:R    ``write_data``,
                    (1 ≤ R ≤ 1000)                                   ``write_data_ratio``
    ==============  ===============================================  ========================

    The bounds are the test file's (``master.config.limits``): a live edit takes no value a
    test file would refuse.

    ``dfc.target``, ``dfc.low_iops``, ``dfc.high_iops`` (numbers > 0; the bounds 0.001 ..
    10**10) change the running step's DFC (``EditChanges.dfc``), not its workloads: the run
    takes them for ``all`` alone, and not beside workload keys.

    ``iops`` and ``total_iops`` exclude each other; an edit must change something; a key may
    appear once. Keys that need the LUN's size (``range_start`` ...) or that identify a workload
    (``name``, ``luns``, ``seed``) are refused as not editable live. Values in a mapping may be
    JSON numbers and booleans (``null`` for ``iops`` is max) or the same strings the command line
    takes.

Every refusal is an ``EditRefused`` naming the key and the bad value, e.g.
``read_fraction=1.5: must be between 0 and 1``. The run loop applies an ``EditChanges`` to the
instance's workloads as ``params.replace(**changes.params)`` followed, when ``total_iops`` is
set, by ``split_total(changes.total_iops, ...)``; combinations that only the workload's other
settings can rule out (a hot zone with ``iosequencer=sequential``) are the run loop's to refuse.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from master.config.catalog import BUILTIN_ROLLUPS, IOSEQUENCERS
from master.config.limits import (
    MAX_BLOCKSIZE_BYTES,
    MAX_IODEPTH,
    MAX_IOPS,
    MAX_SKEW_WEIGHT,
    MAX_TOTAL_IOPS,
    MAX_WRITE_DATA_RATIO,
    MIN_IOPS,
    MIN_SKEW_WEIGHT,
    format_number,
    show_bytes,
)
from master.config.units import (
    format_bytes,
    format_exact,
    format_fraction,
    parse_bytes,
    parse_fraction,
)
from protocol.errors import ConfigError

__all__ = [
    "EDITABLE_KEYS",
    "EditChanges",
    "EditRefused",
    "parse_edit_args",
    "parse_instance",
    "parse_params",
]

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_ATTRIBUTE = re.compile(r"^[A-Za-z0-9_.-]+$")
#: Keys a test file knows but that cannot change while a step runs, and why.
_NOT_LIVE: dict[str, str] = {
    "range_start": "needs the LUN size; change it in the test file",
    "range_end": "needs the LUN size; change it in the test file",
    "seq_start": "needs the LUN size; change it in the test file",
    "hot_zone_size": "needs the LUN size; change it in the test file",
    "hot_zone_share": "goes with hot_zone_size; change it in the test file",
    "name": "identifies the workload",
    "luns": "chooses where the workload runs",
    "seed": "is fixed when the workload is created",
    "delete": "workloads are deleted by the test file's steps",
}


class EditRefused(ConfigError):
    """A live edit (or stop) was refused; the message says why and nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


#: instances an unknown-instance refusal lists at most
LISTED_INSTANCES = 10


def unknown_instance(rollup_type: str, instance: str, step_name: str,
                     known: Sequence[str]) -> EditRefused:
    """The refusal of a live edit for an instance with no workloads in the running step."""
    return EditRefused(unknown_instance_text(rollup_type, instance, step_name, known))


def unknown_instance_text(rollup_type: str, instance: str, step_name: str,
                          known: Sequence[str]) -> str:
    """Why an instance (of a live edit or an ``edit_rollup``) has no workloads in a step,
    given the instances that do (``known``): it suggests the likely ones (a workload instance
    named ``host:lun:name`` ends with the bare name the operator may have typed; otherwise the
    closest spellings) and lists the instances, saying how many there are in all. An
    attribute rollup that no workload has a value for (a mistyped rollup type: ``hots=h1``)
    is said to be that."""
    where = f"step {step_name}" if step_name else "this step"
    text = f"{rollup_type}={instance} has no workloads in {where}."
    # an attribute instance without any value (``""``, ``"+"``) is no name one can type
    valued = {k for k in known if k.replace("+", "")} if rollup_type not in BUILTIN_ROLLUPS \
        else set(known)
    if known and not valued:
        attributes = rollup_type.split("+")
        what = (f"the attribute {attributes[0]}" if len(attributes) == 1
                else f"any of the attributes {', '.join(attributes)}")
        return (f"{text[:-1]}: no workload there has {what}. A rollup type is all, host, lun, "
                "workload, or LUN attributes (vendor, model, ...) joined by +.")
    names = sorted(valued)
    tail = instance.rsplit(":", 1)[-1]
    likely = [k for k in names if k.rsplit(":", 1)[-1] == tail and k != instance]
    if not likely:
        likely = difflib.get_close_matches(instance, names, n=3, cutoff=0.6)
    if likely:
        shown = [f"{rollup_type}={k}" for k in likely[:LISTED_INSTANCES]]
        if len(likely) > LISTED_INSTANCES:
            shown.append(f"{len(likely) - LISTED_INSTANCES} more")
        alts = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
        text += f" Did you mean {alts}?"
    if not names:
        return f"{text} The {rollup_type} rollup has no instances."
    if len(names) > LISTED_INSTANCES:
        head = f"Instances ({len(names)} in all; the first {LISTED_INSTANCES}):"
    else:
        head = "Instances:"
    return f"{text} {head} {', '.join(names[:LISTED_INSTANCES])}"


@dataclass(frozen=True)
class EditChanges:
    """Validated changes for the workloads of one rollup instance.

    ``params``: ``WorkloadParams`` field names → new values (``iops`` is ``None`` for max).
    ``total_iops``: a number or ``"max"`` to split over the instance, or ``None``.
    """

    params: dict[str, Any] = field(default_factory=dict)
    total_iops: float | str | None = None
    #: the running step's DFC: ``target``, ``low_iops``, ``high_iops`` → new values
    dfc: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """The changes as ``key=value`` words the command line takes back (for events.csv)."""
        words = []
        p = self.params
        for key in ("iops", "read_fraction", "blocksize_bytes", "iodepth", "iosequencer",
                    "skew_weight", "busy_poll", "write_data"):
            if key not in p:
                continue
            value = p[key]
            if key == "iops":
                words.append("iops=max" if value is None else f"iops={format_exact(value)}")
            elif key == "read_fraction":
                words.append(f"read_fraction={format_fraction(value)}")
            elif key == "blocksize_bytes":
                words.append(f"blocksize={format_bytes(value)}")
            elif key == "busy_poll":
                words.append(f"busy_poll={'true' if value else 'false'}")
            elif key == "write_data":
                ratio = p.get("write_data_ratio", 1.0)
                kind = value if value in ("random", "zeros") else f"{value}:{format_exact(ratio)}"
                words.append(f"write_data={kind}")
            elif key == "skew_weight":
                words.append(f"skew_weight={format_exact(value)}")
            else:
                words.append(f"{key}={value}")
        if self.total_iops is not None:
            total = self.total_iops
            words.append(f"total_iops={total if isinstance(total, str) else format_exact(total)}")
        words += [f"dfc.{key}={format_exact(self.dfc[key])}" for key in _DFC_KEYS
                  if key in self.dfc]
        return " ".join(words)


# ---------------------------------------------------------------- instance


def parse_instance(text: str) -> tuple[str, str]:
    """``"all"`` → ``("all", "all")``; ``"host=h1"`` → ``("host", "h1")``; ``"vendor+model=A+B"``
    → ``("vendor+model", "A+B")``. Raises ``EditRefused`` for anything else."""
    usage = "use all or <rollup type>=<instance>, like host=h1 or lun=h1:/dev/sdb"
    stripped = text.strip()
    if stripped == "all":
        return "all", "all"
    rollup, equals, value = stripped.partition("=")
    rollup = rollup.strip()
    if not equals or not rollup or not value:
        raise EditRefused(f"bad instance {text!r}: {usage}")
    if rollup == "all":
        raise EditRefused(f"bad instance {text!r}: the rollup all has one instance; write all")
    attributes = rollup.split("+")
    if not all(_ATTRIBUTE.match(a) for a in attributes):
        raise EditRefused(f"bad instance {text!r}: bad rollup type {rollup!r}; {usage}")
    if len(attributes) > 1:
        parts = value.split("+")
        if len(parts) != len(attributes) or not all(parts):
            raise EditRefused(
                f"bad instance {text!r}: {rollup} needs {len(attributes)} '+'-joined values"
            )
    return rollup, value


# ---------------------------------------------------------------- settings


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: object, what: str) -> float:
    if _is_number(value):
        assert isinstance(value, (int, float))
        try:
            number = float(value)
        except OverflowError:  # a JSON integer beyond any float: past every bound
            number = sys.float_info.max if value > 0 else -sys.float_info.max
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError(f"must be {what}") from None
    else:
        raise ValueError(f"must be {what}")
    if not math.isfinite(number):
        raise ValueError(f"must be {what}")
    return number


def _positive(value: object) -> float:
    number = _number(value, "a number > 0")
    if not number > 0:
        raise ValueError("must be a number > 0")
    return number


def _within(number: float, low: float, high: float) -> float:
    """``number`` if ``low <= number <= high``, refused as the test file refuses it."""
    if number < low:
        raise ValueError(f"must be at least {format_number(low)}")
    if number > high:
        raise ValueError(f"must be at most {format_number(high)}")
    return number


def _iops(value: object) -> dict[str, Any]:
    if isinstance(value, str) and value.strip() == "max":
        return {"iops": None}
    if value is None:
        return {"iops": None}
    return {"iops": _within(_positive_or_max(value), MIN_IOPS, MAX_IOPS)}


def _positive_or_max(value: object) -> float:
    try:
        return _positive(value)
    except ValueError:
        raise ValueError("must be a number > 0 or max") from None


def _read_fraction(value: object) -> dict[str, Any]:
    try:
        fraction = parse_fraction(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise ValueError("must be a fraction 0..1 or a percentage like 70%") from None
    if not 0.0 <= fraction <= 1.0:
        raise ValueError("must be between 0 and 1")
    return {"read_fraction": fraction}


def _blocksize(value: object) -> dict[str, Any]:
    try:
        size = parse_bytes(value.strip() if isinstance(value, str) else value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if size <= 0 or size % 512:
        raise ValueError(f"must be a positive multiple of 512 bytes (got {size})")
    if size > MAX_BLOCKSIZE_BYTES:
        raise ValueError(f"must be at most {show_bytes(MAX_BLOCKSIZE_BYTES)} (got {size})")
    return {"blocksize_bytes": size}


def _iodepth(value: object) -> dict[str, Any]:
    if isinstance(value, int) and not isinstance(value, bool):
        depth = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        depth = int(value)
    else:
        raise ValueError(f"must be an integer 1..{MAX_IODEPTH}")
    if not 1 <= depth <= MAX_IODEPTH:
        raise ValueError(f"must be an integer 1..{MAX_IODEPTH}")
    return {"iodepth": depth}


def _iosequencer(value: object) -> dict[str, Any]:
    if not isinstance(value, str) or value.strip() not in IOSEQUENCERS:
        raise ValueError(f"must be one of {', '.join(IOSEQUENCERS)}")
    return {"iosequencer": value.strip()}


def _skew_weight(value: object) -> dict[str, Any]:
    return {"skew_weight": _within(_positive(value), MIN_SKEW_WEIGHT, MAX_SKEW_WEIGHT)}


def _busy_poll(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"busy_poll": value}
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return {"busy_poll": value.strip().lower() in _TRUE}
    raise ValueError("must be true or false")


def _write_data(value: object) -> dict[str, Any]:
    usage = ("must be random, zeros, compressible:<ratio> or dedupable:<ratio> "
             f"(ratio 1 to {format_number(MAX_WRITE_DATA_RATIO)})")
    if not isinstance(value, str):
        raise ValueError(usage)
    text = value.strip()
    if text in ("random", "zeros"):
        return {"write_data": text, "write_data_ratio": 1.0}
    kind, colon, ratio_text = text.partition(":")
    if kind not in ("compressible", "dedupable") or not colon:
        raise ValueError(usage)
    try:
        ratio = _number(ratio_text, "a ratio >= 1")
    except ValueError:
        raise ValueError(usage) from None
    if not 1.0 <= ratio <= MAX_WRITE_DATA_RATIO:
        raise ValueError(usage)
    return {"write_data": kind, "write_data_ratio": ratio}


_PARSERS: dict[str, Callable[[object], dict[str, Any]]] = {
    "iops": _iops,
    "read_fraction": _read_fraction,
    "blocksize": _blocksize,
    "iodepth": _iodepth,
    "iosequencer": _iosequencer,
    "skew_weight": _skew_weight,
    "busy_poll": _busy_poll,
    "write_data": _write_data,
}
#: the running step's DFC settings an edit may change (``dfc.<key>``)
_DFC_KEYS: tuple[str, ...] = ("target", "low_iops", "high_iops")
#: Every key an edit may carry.
EDITABLE_KEYS: tuple[str, ...] = (*_PARSERS, "total_iops", *(f"dfc.{k}" for k in _DFC_KEYS))


def _dfc_value(key: str, value: object) -> float:
    number = _positive(value)
    return number if key == "target" else _within(number, MIN_IOPS, MAX_TOTAL_IOPS)


def _show(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if not _is_number(value) else f"{value}"


def parse_params(params: Mapping[str, object]) -> EditChanges:
    """A mapping of edit keys to values (strings as typed, or JSON numbers/booleans) →
    ``EditChanges``. Raises ``EditRefused`` naming the first bad key and value."""
    if not params:
        raise EditRefused(
            f"the edit changes nothing: give one or more of {', '.join(EDITABLE_KEYS)} "
            "as key=value"
        )
    out: dict[str, Any] = {}
    total: float | str | None = None
    dfc: dict[str, float] = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise EditRefused(f"bad key {key!r}: keys are strings")
        shown = f"{key}={_show(value)}"
        if isinstance(value, str) and not value.strip():
            raise EditRefused(f"{shown}: the value is empty")
        if key in _NOT_LIVE:
            raise EditRefused(f"{shown}: {key} cannot be edited live ({_NOT_LIVE[key]})")
        if key.startswith("dfc.") and key[4:] in _DFC_KEYS:
            try:
                dfc[key[4:]] = _dfc_value(key[4:], value)
            except ValueError as exc:
                raise EditRefused(f"{shown}: {exc}") from None
            continue
        if key == "total_iops":
            if isinstance(value, str) and value.strip() == "max":
                total = "max"
                continue
            try:
                total = _within(_positive_or_max(value), MIN_IOPS, MAX_TOTAL_IOPS)
            except ValueError as exc:
                raise EditRefused(f"{shown}: {exc}") from None
            continue
        parser = _PARSERS.get(key)
        if parser is None:
            raise EditRefused(
                f"{shown}: unknown key {key!r} (editable: {', '.join(EDITABLE_KEYS)})"
            )
        try:
            out.update(parser(value))
        except ValueError as exc:
            raise EditRefused(f"{shown}: {exc}") from None
    if total is not None and "iops" in out:
        raise EditRefused(
            "iops and total_iops exclude each other: iops sets every workload, total_iops "
            "the instance's sum"
        )
    if dfc and (out or total is not None):
        raise EditRefused("dfc.* keys change the step's DFC, not its workloads: give them in "
                          "an edit of their own")
    if "low_iops" in dfc and "high_iops" in dfc and not dfc["low_iops"] < dfc["high_iops"]:
        raise EditRefused(f"dfc.low_iops={format_exact(dfc['low_iops'])}: must be less than "
                          f"dfc.high_iops ({format_exact(dfc['high_iops'])})")
    return EditChanges(out, total, dfc)


def split_edit_args(words: Sequence[str]) -> dict[str, str]:
    """``["iops=5000", "read_fraction=70%"]`` → ``{"iops": "5000", "read_fraction": "70%"}``,
    refusing words without ``=`` and repeated keys (values are not checked here)."""
    raw: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        key = key.strip()
        if not equals or not key:
            raise EditRefused(f"bad setting {word!r}: write key=value, like iops=5000")
        if key in raw:
            raise EditRefused(f"{key} is given twice ({key}={raw[key]} and {word})")
        raw[key] = value.strip()
    return raw


def parse_edit_args(words: Sequence[str]) -> EditChanges:
    """``key=value`` words from the command line → ``EditChanges`` (see the module docstring)."""
    return parse_params(split_edit_args(words))
