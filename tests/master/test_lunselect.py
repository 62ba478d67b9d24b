"""master.run.workloads: ``edit_rollup`` entries applied to a step's workloads, good and bad; a
``total_iops`` split by skew weight; ranges, hot zones and sequential starts turned into bytes
for a LUN (table-driven, on LUNs as discovery describes them; no hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config.loader import parse_config_text
from master.config.schema import TestConfig
from master.run.workloads import (
    Lun,
    WorkloadInstance,
    apply_rollup_edits,
    check_rollup_keys,
    device_globs,
    expand_step,
    select_luns,
)
from protocol.errors import ConfigError
from protocol.params import WorkloadParams

TEST = """\
test: edits
hosts: [h1, h2]
luns:
  - {{hosts: all, path: "/dev/sd*"}}
rollups: [vendor]
steps:
  - name: s
    workloads:
      - {{name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100}}
      - {{name: small, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100,
         range_end: 16KiB}}
    edit_rollup: [{edit}]
"""


def _lun(host: str, path: str, vendor: str, logical: int = 512) -> Lun:
    return Lun(host, path, 1 << 30, logical, {"vendor": vendor}, (), {})


DISCOVERED = {
    "h1": [_lun("h1", "/dev/sda", "ACME"), _lun("h1", "/dev/sdb", "OTHER", logical=4096)],
    "h2": [_lun("h2", "/dev/sda", "ACME")],
}


def _setup(edit: str) -> tuple[TestConfig, list[WorkloadInstance]]:
    cfg = parse_config_text(TEST.format(edit=edit), "edits.yaml", cwd=Path("/"))
    instances = expand_step(cfg.steps[0], select_luns(cfg, DISCOVERED))
    return cfg, instances


GOOD = [
    # edit, {workload id: (iops, iodepth)} for those changed
    ("{instance: all, iodepth: 8}",
     {f"{h}:{p}:{w}": (100.0, 8) for h, p in (("h1", "/dev/sda"), ("h1", "/dev/sdb"),
                                               ("h2", "/dev/sda")) for w in ("rr", "small")}),
    ("{instance: host=h2, iops: 250}", {"h2:/dev/sda:rr": (250.0, 4),
                                         "h2:/dev/sda:small": (250.0, 4)}),
    ("{instance: vendor=OTHER, total_iops: 1000}", {"h1:/dev/sdb:rr": (500.0, 4),
                                                     "h1:/dev/sdb:small": (500.0, 4)}),
    ("{instance: \"workload=h1:/dev/sda:rr\", iops: 7}", {"h1:/dev/sda:rr": (7.0, 4)}),
]


@pytest.mark.parametrize("edit, changed", GOOD)
def test_edit_rollup_changes_exactly_its_instances_workloads(
        edit: str, changed: dict[str, tuple[float, int]]) -> None:
    cfg, instances = _setup(edit)
    apply_rollup_edits(cfg.steps[0].edit_rollup, instances, cfg.rollups)
    for inst in instances:
        want = changed.get(inst.id, (100.0, 4))
        assert (inst.params.iops, inst.params.iodepth) == want, inst.id


BAD = [
    # edit, key path, words the message must contain
    ("{instance: \"workload=h2:/dev/sdb:rr\", iops: 5}", "steps[0].edit_rollup[0].instance",
     ["workload=h2:/dev/sdb:rr has no workloads", "h2:/dev/sda:rr"]),
    ("{instance: vendor=ACMEE, iops: 5}", "steps[0].edit_rollup[0].instance",
     ["vendor=ACMEE", "ACME, OTHER"]),
    ("{instance: \"lun=h1:/dev/sdc\", iops: 5}", "steps[0].edit_rollup[0].instance",
     ["h1:/dev/sda, h1:/dev/sdb, h2:/dev/sda"]),
    # 512 bytes on the 4 KiB-sector LUN
    ("{instance: vendor=OTHER, blocksize: 512}", "steps[0].edit_rollup[0].blocksize",
     ["blocksize 512", "h1:/dev/sdb:rr", "logical block 4096"]),
    # larger than the small workload's 16 KiB range
    ("{instance: host=h2, blocksize: 64KiB}", "steps[0].edit_rollup[0].blocksize",
     ["blocksize 65536", "h2:/dev/sda:small", "range 16384"]),
]


@pytest.mark.parametrize("edit, key_path, words", BAD)
def test_edit_rollup_refusals_name_the_key_and_instance(edit: str, key_path: str,
                                                        words: list[str]) -> None:
    cfg, instances = _setup(edit)
    step = cfg.steps[0]
    with pytest.raises(ConfigError) as err:
        apply_rollup_edits(step.edit_rollup, instances, cfg.rollups,
                           key_path="steps[0].edit_rollup", file="edits.yaml", line=step.line)
    text = str(err.value)
    assert text.startswith(f"edits.yaml:{step.line}: {key_path}: "), text
    for w in words:
        assert w in text, (w, text)
    assert "\n" not in text


@pytest.mark.parametrize("edit, words", [
    ("{instance: host=h9, iops: 5}", ["'host=h9'", "no host 'h9'", "h1, h2"]),
    ("{instance: \"lun=/dev/sdb\", iops: 5}", ["'lun=/dev/sdb'", "<host>:<path>", "h1:/dev/sdb"]),
    ("{instance: workload=rr, iops: 5}", ["'workload=rr'", "<host>:<path>:<workload>"]),
    ("{instance: \"workload=h9:/dev/sda:rr\", iops: 5}", ["no host 'h9'"]),
])
def test_an_edit_rollup_instance_on_a_host_the_test_lacks_is_refused_at_load(
        edit: str, words: list[str]) -> None:
    # once refused only after discovery: created file LUNs were laid out first
    with pytest.raises(ConfigError) as err:
        parse_config_text(TEST.format(edit=edit), "edits.yaml", cwd=Path("/"))
    text = str(err.value)
    assert text.startswith("edits.yaml:12: steps[0].edit_rollup[0].instance: "), text
    for w in words:
        assert w in text, (w, text)


# --------------------------------------------------------------------------- skew weights
SKEW_TEST = """\
test: skew
hosts: [h1]
luns:
  - {{hosts: all, path: "/dev/sd*"}}
steps:
  - name: s
    workloads:
{workloads}
    edit_rollup: [{edit}]
"""
SKEW_LUNS = {"h1": DISCOVERED["h1"]}  # /dev/sda (512-byte sectors) and /dev/sdb (4 KiB)


def _skew_workloads(weights: list[tuple[str, float]]) -> str:
    """YAML entries ``w0``, ``w1``... of 4 KiB random reads at 100 IOPS, each on its LUN with
    its skew weight."""
    return "\n".join(
        f"      - {{name: w{i}, luns: {lun}, iosequencer: random_steady, iops: 100, "
        f"skew_weight: {weight}}}"
        for i, (lun, weight) in enumerate(weights)
    )


def _split(weights: list[tuple[str, float]], edit: str) -> list[float | None]:
    """Each workload's IOPS after ``edit`` (an ``edit_rollup`` entry), in order w0, w1..."""
    text = SKEW_TEST.format(workloads=_skew_workloads(weights), edit=edit)
    cfg = parse_config_text(text, "skew.yaml", cwd=Path("/"))
    instances = expand_step(cfg.steps[0], select_luns(cfg, SKEW_LUNS))
    apply_rollup_edits(cfg.steps[0].edit_rollup, instances, cfg.rollups)
    by_name = {inst.name: inst.params.iops for inst in instances}
    assert len(by_name) == len(instances) == len(weights)
    return [by_name[f"w{i}"] for i in range(len(weights))]


SPLITS = [
    # (LUN, skew weight) per workload, the edit_rollup entry, each workload's IOPS after it
    pytest.param([("/dev/sda", 1), ("/dev/sda", 3)], "{instance: all, total_iops: 1200}",
                 [300.0, 900.0], id="1:3 of 1200"),
    pytest.param([("/dev/sda", 1), ("/dev/sda", 2), ("/dev/sda", 3)],
                 "{instance: all, total_iops: 1200}", [200.0, 400.0, 600.0], id="1:2:3 of 1200"),
    pytest.param([("/dev/sda", 0.5), ("/dev/sda", 1.5)], "{instance: all, total_iops: 1200}",
                 [300.0, 900.0], id="fractional weights"),
    # IOPS are not rounded to whole numbers: each gets its exact share
    pytest.param([("/dev/sda", 1), ("/dev/sda", 1), ("/dev/sda", 1)],
                 "{instance: all, total_iops: 1000}", [1000 / 3] * 3, id="thirds unrounded"),
    pytest.param([("/dev/sda", 1), ("/dev/sda", 2)], "{instance: all, total_iops: 1}",
                 [1 / 3, 2 / 3], id="below one IOPS"),
    # equally over the LUNs first, then by weight within each LUN (ivy's rule)
    pytest.param([("/dev/sda", 1), ("/dev/sdb", 3)], "{instance: all, total_iops: 1200}",
                 [600.0, 600.0], id="one per LUN: weights do not matter"),
    pytest.param([("/dev/sda", 1), ("/dev/sda", 3), ("/dev/sdb", 5)],
                 "{instance: all, total_iops: 1200}", [150.0, 450.0, 600.0],
                 id="LUNs first, then weights"),
    # the entry's own skew_weight is applied before its total is split
    pytest.param([("/dev/sda", 1), ("/dev/sda", 3)],
                 "{instance: all, skew_weight: 2, total_iops: 1200}", [600.0, 600.0],
                 id="weights edited in the same entry"),
    pytest.param([("/dev/sda", 1), ("/dev/sda", 3)], "{instance: all, total_iops: max}",
                 [None, None], id="max"),
    # a total for one LUN's instance leaves the other LUN's workload alone
    pytest.param([("/dev/sda", 1), ("/dev/sda", 3), ("/dev/sdb", 5)],
                 "{instance: \"lun=h1:/dev/sda\", total_iops: 400}", [100.0, 300.0, 100.0],
                 id="one LUN's instance"),
]


@pytest.mark.parametrize(("weights", "edit", "want"), SPLITS)
def test_total_iops_is_split_by_skew_weight(weights: list[tuple[str, float]], edit: str,
                                            want: list[float | None]) -> None:
    got = _split(weights, edit)
    assert got == want
    if "total_iops: max" not in edit and "lun=" not in edit:
        total = float(edit.rsplit("total_iops: ", 1)[1].rstrip("}"))
        assert sum(g for g in got if g is not None) == pytest.approx(total, rel=1e-12)


SKEW_REFUSALS = [
    # weights, edit, key path, reason: a weight must be > 0, in a workload or in an edit
    ([("/dev/sda", 1), ("/dev/sda", 0)], "{instance: all, total_iops: 100}",
     "steps[0].workloads[1].skew_weight", "must be greater than 0 (got 0)"),
    ([("/dev/sda", -1)], "{instance: all, total_iops: 100}",
     "steps[0].workloads[0].skew_weight", "must be greater than 0 (got -1)"),
    ([("/dev/sda", 1)], "{instance: all, skew_weight: 0, total_iops: 100}",
     "steps[0].edit_rollup[0].skew_weight", "must be greater than 0 (got 0)"),
]


@pytest.mark.parametrize(("weights", "edit", "key_path", "reason"), SKEW_REFUSALS)
def test_a_skew_weight_of_zero_or_less_is_refused_naming_its_key(
        weights: list[tuple[str, float]], edit: str, key_path: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _split(weights, edit)
    assert (err.value.key_path, err.value.reason) == (key_path, reason)
    assert str(err.value).startswith("skew.yaml:"), str(err.value)


# --------------------------------------------------------------------------- extents in bytes
GIB = 1 << 30
MIB = 1 << 20
EXTENT_TEST = """\
test: extents
hosts: [h1]
luns:
  - {{hosts: all, path: /dev/sda}}
steps:
  - name: s
    workloads:
      - {{name: w, {keys}}}
"""


def _resolved(keys: str, size_bytes: int, logical_block_bytes: int) -> WorkloadParams:
    """The parameters workload ``w`` (``keys`` its YAML keys) gets on a LUN of ``size_bytes``
    with ``logical_block_bytes`` sectors."""
    cfg = parse_config_text(EXTENT_TEST.format(keys=keys), "extents.yaml", cwd=Path("/"))
    lun = Lun("h1", "/dev/sda", size_bytes, logical_block_bytes, {}, (), {})
    (inst,) = expand_step(cfg.steps[0], select_luns(cfg, {"h1": [lun]}), cfg.source_file)
    return inst.params


RANDOM = "iosequencer: random_steady"
SEQUENTIAL = "iosequencer: sequential"
EXTENTS = [
    # YAML keys, logical block bytes (LUN of 1 GiB), (range_start, range_end, hot_zone,
    # seq_start) in bytes
    pytest.param(RANDOM, 512, (0, GIB, 0, 0), id="defaults: the whole LUN"),
    pytest.param(f"{RANDOM}, range_start: 0.25, range_end: 0.75", 512,
                 (GIB // 4, 3 * GIB // 4, 0, GIB // 4), id="fractions"),
    pytest.param(f"{RANDOM}, range_start: '25%', range_end: '75%'", 512,
                 (GIB // 4, 3 * GIB // 4, 0, GIB // 4), id="percentages"),
    pytest.param(f"{RANDOM}, range_start: 1MiB, range_end: 3MiB", 4096,
                 (MIB, 3 * MIB, 0, MIB), id="bytes"),
    pytest.param(f"{RANDOM}, range_end: 1GiB", 4096, (0, GIB, 0, 0),
                 id="an end at the LUN's end"),
    # 0.1 GiB = 107374182.4 bytes and 0.9 GiB = 966367641.6, rounded down to whole sectors
    pytest.param(f"{RANDOM}, range_start: 0.1, range_end: 0.9", 512,
                 (107374080, 966367232, 0, 107374080), id="fractions onto 512-byte sectors"),
    pytest.param(f"{RANDOM}, range_start: 0.1, range_end: 0.9", 4096,
                 (107372544, 966365184, 0, 107372544), id="fractions onto 4 KiB sectors"),
    pytest.param(f"{RANDOM}, range_start: 1000B, range_end: 1000000B", 512,
                 (512, 999936, 0, 512), id="bytes onto 512-byte sectors"),
    pytest.param(f"{RANDOM}, range_start: 1000B, range_end: 1000000B", 4096,
                 (0, 999424, 0, 0), id="bytes onto 4 KiB sectors"),
    # an end less than a sector past the LUN's end is rounded down onto it, not refused
    pytest.param(f"{RANDOM}, range_end: {GIB + 100}B", 512, (0, GIB, 0, 0),
                 id="an end a part-sector past the LUN"),
    # a hot zone's fraction is of the workload's range, not of the LUN: 0.1 of 512 MiB
    pytest.param(f"{RANDOM}, range_start: 0.5, hot_zone_size: 0.1, hot_zone_share: 0.9", 512,
                 (GIB // 2, GIB, 53686784, GIB // 2), id="hot zone fraction of the range"),
    pytest.param(f"{RANDOM}, range_end: 50%, hot_zone_size: '10%', hot_zone_share: 0.9", 512,
                 (0, GIB // 2, 53686784, 0), id="hot zone percentage"),
    pytest.param(f"{RANDOM}, hot_zone_size: 64MiB, hot_zone_share: 0.5", 4096,
                 (0, GIB, 64 * MIB, 0), id="hot zone bytes"),
    pytest.param(f"{RANDOM}, hot_zone_size: 5000B, hot_zone_share: 0.5", 512,
                 (0, GIB, 4608, 0), id="hot zone bytes onto sectors"),
    # a sequential start defaults to the range's start (the range starting at 0 here, where
    # seq_start as a place on the LUN and as an offset in the range agree: see below)
    pytest.param(f"{SEQUENTIAL}, range_start: 1MiB", 4096, (MIB, GIB, 0, MIB),
                 id="seq_start defaults to range_start"),
    pytest.param(f"{SEQUENTIAL}, seq_start: 0.25", 512, (0, GIB, 0, GIB // 4),
                 id="seq_start fraction"),
    pytest.param(f"{SEQUENTIAL}, seq_start: 1000B", 512, (0, GIB, 0, 512),
                 id="seq_start bytes onto sectors"),
]


@pytest.mark.parametrize(("keys", "logical", "want"), EXTENTS)
def test_extents_become_sector_aligned_bytes_of_the_lun(
        keys: str, logical: int, want: tuple[int, int, int, int]) -> None:
    p = _resolved(keys, GIB, logical)
    got = (p.range_start_bytes, p.range_end_bytes, p.hot_zone_bytes,
           p.seq_start_bytes)
    assert got == want
    assert all(isinstance(v, int) and v % logical == 0 for v in got), got


EXTENT_REFUSALS = [
    # YAML keys, LUN size, logical block bytes, the whole message (it names the workload and
    # its host:LUN)
    (f"{RANDOM}, range_end: 2GiB", GIB, 512,
     f"workload w on h1:/dev/sda: range_end {2 * GIB} is beyond the LUN's {GIB} bytes"),
    (f"{RANDOM}, range_end: {GIB + 512}B", GIB, 512,
     f"workload w on h1:/dev/sda: range_end {GIB + 512} is beyond the LUN's {GIB} bytes"),
    (f"{RANDOM}, range_end: 32MiB", 16 * MIB, 4096,
     f"workload w on h1:/dev/sda: range_end {32 * MIB} is beyond the LUN's {16 * MIB} bytes"),
    # the default end is the LUN's end: a start at or beyond it is named as such
    (f"{RANDOM}, range_start: 2GiB", GIB, 512,
     f"workload w on h1:/dev/sda: range_start {2 * GIB} is at or beyond the LUN's end "
     f"({GIB} bytes)"),
    (f"{RANDOM}, range_start: 1GiB", GIB, 512,
     f"workload w on h1:/dev/sda: range_start {GIB} is at or beyond the LUN's end "
     f"({GIB} bytes)"),
    # a start inside the LUN but within a block of its end leaves no whole block
    (f"{RANDOM}, range_start: {GIB - 1024}B", GIB, 512,
     f"workload w on h1:/dev/sda: the range [{GIB - 1024}, {GIB}) is smaller than one block "
     "of 4096 bytes"),
    # bytes and a fraction are compared only once the LUN's size is known
    (f"{RANDOM}, range_start: 900MiB, range_end: 0.5", GIB, 512,
     f"workload w on h1:/dev/sda: the range [{900 * MIB}, {GIB // 2}) is smaller than one "
     "block of 4096 bytes"),
    (f"{RANDOM}, range_end: 2KiB", GIB, 512,
     "workload w on h1:/dev/sda: the range [0, 2048) is smaller than one block of 4096 bytes"),
    (f"{RANDOM}, blocksize: 512", GIB, 4096,
     "workload w on h1:/dev/sda: blocksize 512 is not a multiple of the LUN's logical block "
     "size 4096"),
]


@pytest.mark.parametrize(("keys", "size", "logical", "message"), EXTENT_REFUSALS)
def test_extents_that_do_not_fit_the_lun_are_refused_naming_workload_and_lun(
        keys: str, size: int, logical: int, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _resolved(keys, size, logical)
    # and where in the test file: the step's workloads (line 6: its "- name: s")
    assert err.value.reason == message
    assert str(err.value) == f"extents.yaml:6: steps[0].workloads: {message}"


EXTENT_KEY_REFUSALS = [
    # YAML keys, key path, reason: what needs no LUN size is refused when the file is read
    (f"{RANDOM}, range_start: 1.5", "steps[0].workloads[0].range_start",
     "must be between 0 and 1 (got 1.5)"),
    (f"{RANDOM}, range_end: '150%'", "steps[0].workloads[0].range_end",
     "must be between 0 and 1 (got 150%)"),
    (f"{RANDOM}, range_start: 0.5, range_end: 25%", "steps[0].workloads[0].range_start",
     "must be less than range_end (50% >= 25%)"),
    (f"{RANDOM}, range_end: 1000", "steps[0].workloads[0].range_end",
     "must be between 0 and 1 (got 1000)"),
    (f"{RANDOM}, hot_zone_size: 0B, hot_zone_share: 0.5", "steps[0].workloads[0].hot_zone_size",
     "must be greater than 0"),
]


@pytest.mark.parametrize(("keys", "key_path", "reason"), EXTENT_KEY_REFUSALS)
def test_extents_refused_when_read_name_their_key_path(keys: str, key_path: str,
                                                       reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _resolved(keys, GIB, 512)
    assert (err.value.key_path, err.value.reason) == (key_path, reason)
    assert str(err.value).startswith("extents.yaml:8: "), str(err.value)


# seq_start is a place on the LUN, as the config check and the schema take it; it was once
# resolved as an offset from range_start (and a fraction of the range): 3 MiB, 0.875 GiB and
# 1.25 GiB (past the LUN, unrefused) for these
@pytest.mark.parametrize(("keys", "want"), [
    ("range_start: 1MiB, seq_start: 2MiB", 2 * MIB),
    ("range_start: 0.5, seq_start: 0.75", 3 * GIB // 4),
    ("range_start: 512MiB, seq_start: 768MiB", 768 * MIB),
    ("range_start: 0.25, seq_start: 256MiB", 256 * MIB),  # kinds mixed: checked in bytes
])
def test_seq_start_is_the_place_on_the_lun_the_config_check_took_it_for(keys: str,
                                                                       want: int) -> None:
    assert _resolved(f"{SEQUENTIAL}, {keys}", GIB, 512).seq_start_bytes == want


@pytest.mark.parametrize("keys", [
    "range_start: 0.5, seq_start: 1MiB",  # before the range (kinds mixed: known at run time)
    "range_end: 256MiB, seq_start: 0.5",  # at or past its end
    "range_end: 0.25, seq_start: 256MiB",  # exactly at its end
])
def test_seq_start_outside_the_range_is_refused_naming_workload_and_lun(keys: str) -> None:
    with pytest.raises(ConfigError, match=r"workload w on h1:/dev/sda: seq_start \d+ is "
                                          r"outside the range \[\d+, \d+\)"):
        _resolved(f"{SEQUENTIAL}, {keys}", GIB, 512)


def test_a_hot_zone_smaller_than_a_block_is_refused() -> None:
    with pytest.raises(ConfigError, match="hot_zone_size"):
        _resolved(f"{RANDOM}, hot_zone_size: 2KiB, hot_zone_share: 0.5", GIB, 512)


ENGINES = """\
test: engines
hosts: [h1]
luns:
{entries}
steps:
  - name: s
    workloads: [{{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100}}]
"""


@pytest.mark.parametrize(("entries", "want"), [
    # (engine, fallback, engine attribute) of /dev/sda
    ('  - {path: "/dev/sd*"}', ("auto", False, "libaio")),
    ('  - {path: "/dev/sd*", engine: threadpool}', ("threadpool", False, "threadpool")),
    ('  - {path: "/dev/sd*", engine: io_uring}', ("io_uring", False, "io_uring")),
    ('  - {path: "/dev/sd*", allow_engine_fallback: true}', ("auto", True, "libaio")),
    ('  - {path: /dev/sda, engine: libaio}\n  - {vendor: ACME}', ("libaio", False, "libaio")),
    ('  - {vendor: ACME, allow_engine_fallback: true}\n  - {path: /dev/sda, engine: libaio}',
     ("libaio", False, "libaio")),  # an engine named wins: no fallback from it
])
def test_a_luns_engine_is_what_its_entries_ask_for(entries: str, want: tuple[str, bool, str]
                                                    ) -> None:
    cfg = parse_config_text(ENGINES.format(entries=entries), "e.yaml", cwd=Path("/"))
    discovered = {"h1": [Lun("h1", "/dev/sda", 1 << 30, 512,
                             {"vendor": "ACME", "engine": "libaio"}, (), {})]}
    (sel,) = select_luns(cfg, discovered)["h1"]
    assert (sel.engine, sel.allow_engine_fallback, sel.lun.attributes["engine"]) == want
    (inst,) = expand_step(cfg.steps[0], {"h1": [sel]})
    assert inst.attributes["engine"] == want[2]  # the rollup key, before any create answers


def test_two_entries_naming_different_engines_for_one_lun_are_refused() -> None:
    entries = '  - {path: /dev/sda, engine: libaio}\n  - {vendor: ACME, engine: threadpool}'
    cfg = parse_config_text(ENGINES.format(entries=entries), "e.yaml", cwd=Path("/"))
    discovered = {"h1": [Lun("h1", "/dev/sda", 1 << 30, 512, {"vendor": "ACME"}, (), {})]}
    with pytest.raises(ConfigError) as info:
        select_luns(cfg, discovered)
    text = str(info.value)
    assert "e.yaml:5: luns[1].engine:" in text
    assert "LUN /dev/sda on host h1" in text and "luns[0] with engine libaio" in text


DEVICES = """\
test: devices
hosts: [h1, h2]
luns:
{entries}
steps:
  - name: s
    workloads: [{{name: r, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100}}]
"""


@pytest.mark.parametrize(("entries", "h1", "h2"), [
    # the block devices each host describes (and reads for a signature) at discovery
    ("  - {file: /tmp/a, size: 1MiB, create: true}", [], []),
    ('  - {path: "/dev/sd*"}', ["/dev/sd*"], ["/dev/sd*"]),
    ('  - {hosts: h2, path: /dev/sdb}\n  - {file: /tmp/a}', [], ["/dev/sdb"]),
    ('  - {path: /dev/sdb}\n  - {path: "/dev/nvme*"}\n  - {hosts: h1, path: /dev/sdb}',
     ["/dev/sdb", "/dev/nvme*"], ["/dev/sdb", "/dev/nvme*"]),
    ('  - {path: /dev/sdb}\n  - {hosts: h1, vendor: ACME}', ["*"], ["/dev/sdb"]),
    ("  - {file: /tmp/a}\n  - {rotational: false}", ["*"], ["*"]),
])
def test_discovery_describes_the_devices_the_luns_entries_can_select(
        entries: str, h1: list[str], h2: list[str]) -> None:
    cfg = parse_config_text(DEVICES.format(entries=entries), "d.yaml", cwd=Path("/"))
    assert (device_globs(cfg, "h1"), device_globs(cfg, "h2")) == (h1, h2)


KEYS_TEST = """\
test: keys
hosts: [h1]
luns:
  - {hosts: all, path: "/dev/sd*"}
rollups: [host, vendor+model]
steps:
  - name: s
    workloads:
      - {name: rr, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 100}
"""


def _model_lun(path: str, vendor: str, model: str) -> Lun:
    return Lun("h1", path, 1 << 30, 512, {"vendor": vendor, "model": model}, (), {})


@pytest.mark.parametrize("luns, refused", [
    # (vendor, model) of /dev/sda, /dev/sdb; whether the rollup's instances are ambiguous
    ([("ACME", "X1"), ("ACME", "X2")], False),
    ([("A+B", "C"), ("A+B", "C")], False),  # one combination, two LUNs: one instance
    ([("A+B", "C"), ("X", "Y+Z")], False),  # values with '+', names still apart
    ([("A+B", "C"), ("A", "B+C")], True),
    ([("A+", "B"), ("A", "+B")], True),
])
def test_a_rollup_instance_that_would_stand_for_two_combinations_is_refused(
        luns: list[tuple[str, str]], refused: bool) -> None:
    cfg = parse_config_text(KEYS_TEST, "keys.yaml", cwd=Path("/"))
    found = {"h1": [_model_lun(f"/dev/sd{c}", v, m) for c, (v, m) in zip("ab", luns, strict=True)]}
    instances = expand_step(cfg.steps[0], select_luns(cfg, found))
    if not refused:
        check_rollup_keys(cfg.rollups, instances, file="keys.yaml")
        return
    with pytest.raises(ConfigError) as exc:
        check_rollup_keys(cfg.rollups, instances, file="keys.yaml")
    text = str(exc.value)
    assert exc.value.key_path == "rollups" and "rollup vendor+model" in text, text
    (va, ma), (vb, mb) = luns
    for words in ([f"vendor={va!r}", f"model={ma!r}", "h1:/dev/sda"],
                  [f"vendor={vb!r}", f"model={mb!r}", "h1:/dev/sdb"]):
        assert all(w in text for w in words), (words, text)
