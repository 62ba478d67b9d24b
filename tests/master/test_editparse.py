"""master.live.editparse: live-edit instances and key=value settings, good and bad
(table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from master.live.editparse import (
    EDITABLE_KEYS,
    EditChanges,
    EditRefused,
    parse_edit_args,
    parse_instance,
    parse_params,
    split_edit_args,
    unknown_instance,
)
from protocol.errors import ConfigError, IvyError

GOOD_INSTANCES = [
    ("all", ("all", "all")),
    ("  all ", ("all", "all")),
    ("host=h1", ("host", "h1")),
    ("lun=h1:/dev/sdb", ("lun", "h1:/dev/sdb")),
    ("workload=h1:/dev/sdb:rr", ("workload", "h1:/dev/sdb:rr")),
    ("vendor+model=ACME+X1", ("vendor+model", "ACME+X1")),
    ("lun=h1:/dev/shm/a=b", ("lun", "h1:/dev/shm/a=b")),  # only the first '=' separates
    ("serial=ABC 123", ("serial", "ABC 123")),
]

BAD_INSTANCES = [
    ("", "bad instance ''"),
    ("host", "bad instance 'host'"),
    ("host=", "bad instance 'host='"),
    ("=h1", "bad instance '=h1'"),
    ("all=all", "the rollup all has one instance"),
    ("vendor+model=ACME", "vendor+model needs 2 '+'-joined values"),
    ("vendor+model=ACME+X1+Z", "vendor+model needs 2 '+'-joined values"),
    ("vendor+model=ACME+", "vendor+model needs 2 '+'-joined values"),
    ("vendor+=ACME", "bad rollup type 'vendor+'"),
    ("ho st=h1", "bad rollup type 'ho st'"),
]


@pytest.mark.parametrize(("text", "expected"), GOOD_INSTANCES)
def test_parse_instance(text: str, expected: tuple[str, str]) -> None:
    assert parse_instance(text) == expected


@pytest.mark.parametrize(("text", "message"), BAD_INSTANCES)
def test_parse_instance_refuses(text: str, message: str) -> None:
    with pytest.raises(EditRefused) as info:
        parse_instance(text)
    assert message in str(info.value)


GOOD_EDITS: list[tuple[list[str], dict[str, Any], float | str | None]] = [
    (["iops=5000"], {"iops": 5000.0}, None),
    (["iops=max"], {"iops": None}, None),
    (["iops=12.5"], {"iops": 12.5}, None),
    (["iops=1e3"], {"iops": 1000.0}, None),
    (["total_iops=20000"], {}, 20000.0),
    (["total_iops=max"], {}, "max"),
    (["read_fraction=0.7"], {"read_fraction": 0.7}, None),
    (["read_fraction=70%"], {"read_fraction": 0.7}, None),
    (["read_fraction=0"], {"read_fraction": 0.0}, None),
    (["read_fraction=100%"], {"read_fraction": 1.0}, None),
    (["blocksize=8KiB"], {"blocksize_bytes": 8192}, None),
    (["blocksize=512"], {"blocksize_bytes": 512}, None),
    (["blocksize=1MiB"], {"blocksize_bytes": 1048576}, None),
    (["blocksize=1536B"], {"blocksize_bytes": 1536}, None),
    (["iodepth=16"], {"iodepth": 16}, None),
    (["iodepth=1"], {"iodepth": 1}, None),
    (["iodepth=4096"], {"iodepth": 4096}, None),
    (["iosequencer=sequential"], {"iosequencer": "sequential"}, None),
    (["iosequencer=random_independent"], {"iosequencer": "random_independent"}, None),
    (["skew_weight=2"], {"skew_weight": 2.0}, None),
    (["skew_weight=0.25"], {"skew_weight": 0.25}, None),
    (["busy_poll=true"], {"busy_poll": True}, None),
    (["busy_poll=no"], {"busy_poll": False}, None),
    (["busy_poll=OFF"], {"busy_poll": False}, None),
    (["write_data=zeros"], {"write_data": "zeros", "write_data_ratio": 1.0}, None),
    (["write_data=random"], {"write_data": "random", "write_data_ratio": 1.0}, None),
    (["write_data=compressible:2.5"],
     {"write_data": "compressible", "write_data_ratio": 2.5}, None),
    (["write_data=dedupable:3"], {"write_data": "dedupable", "write_data_ratio": 3.0}, None),
    (["iops=5000", "read_fraction=0.7"], {"iops": 5000.0, "read_fraction": 0.7}, None),
    (["total_iops=100", "blocksize=4KiB", "iodepth=8"],
     {"blocksize_bytes": 4096, "iodepth": 8}, 100.0),
    ([" iops = 7 "], {"iops": 7.0}, None),
]


@pytest.mark.parametrize(("words", "params", "total"), GOOD_EDITS)
def test_parse_edit_args(words: list[str], params: dict[str, Any],
                         total: float | str | None) -> None:
    changes = parse_edit_args(words)
    assert changes == EditChanges(params, total)
    # describe() writes words that parse back to the same changes
    assert parse_edit_args(changes.describe().split()) == changes


BAD_EDITS = [
    ([], "the edit changes nothing"),
    (["iops"], "bad setting 'iops': write key=value"),
    (["=5"], "bad setting '=5'"),
    (["iops="], "iops=: the value is empty"),
    (["iops=0"], "iops=0: must be a number > 0 or max"),
    (["iops=-5"], "iops=-5: must be a number > 0 or max"),
    (["iops=fast"], "iops=fast: must be a number > 0 or max"),
    (["iops=nan"], "iops=nan: must be a number > 0 or max"),
    (["iops=inf"], "iops=inf: must be a number > 0 or max"),
    (["iops=MAX"], "iops=MAX: must be a number > 0 or max"),
    (["total_iops=0"], "total_iops=0: must be a number > 0 or max"),
    (["total_iops=lots"], "total_iops=lots: must be a number > 0 or max"),
    (["iops=5", "total_iops=10"], "iops and total_iops exclude each other"),
    (["iops=5", "iops=6"], "iops is given twice"),
    (["read_fraction=1.5"], "read_fraction=1.5: must be between 0 and 1"),
    (["read_fraction=-0.1"], "read_fraction=-0.1: must be between 0 and 1"),
    (["read_fraction=150%"], "read_fraction=150%: must be between 0 and 1"),
    (["read_fraction=half"], "read_fraction=half: must be a fraction 0..1 or a percentage"),
    (["blocksize=1000"], "blocksize=1000: must be a positive multiple of 512"),
    (["blocksize=0"], "blocksize=0: must be a positive multiple of 512"),
    (["blocksize=4k"], "blocksize=4k: ambiguous unit"),
    (["blocksize=4XB"], "blocksize=4XB: unknown byte unit"),
    (["blocksize=big"], "blocksize=big: not a byte size"),
    (["iodepth=0"], "iodepth=0: must be an integer 1..4096"),
    (["iodepth=4097"], "iodepth=4097: must be an integer 1..4096"),
    (["iodepth=2.5"], "iodepth=2.5: must be an integer 1..4096"),
    (["iodepth=-1"], "iodepth=-1: must be an integer 1..4096"),
    (["iosequencer=random"], "iosequencer=random: must be one of random_steady"),
    (["skew_weight=0"], "skew_weight=0: must be a number > 0"),
    (["skew_weight=-2"], "skew_weight=-2: must be a number > 0"),
    (["busy_poll=maybe"], "busy_poll=maybe: must be true or false"),
    (["write_data=ones"], "write_data=ones: must be random, zeros"),
    (["write_data=compressible"], "write_data=compressible: must be random, zeros"),
    (["write_data=compressible:0.5"], "write_data=compressible:0.5: must be random, zeros"),
    (["write_data=dedupable:x"], "write_data=dedupable:x: must be random, zeros"),
    (["write_data=dedupable:inf"], "write_data=dedupable:inf: must be random, zeros"),
    (["qd=4"], "qd=4: unknown key 'qd' (editable: iops"),
    (["range_start=0.5"], "range_start=0.5: range_start cannot be edited live"),
    (["seed=3"], "seed=3: seed cannot be edited live"),
    (["name=x"], "name=x: name cannot be edited live"),
    (["iops=5", "read_fraction=2"], "read_fraction=2: must be between 0 and 1"),
    (["dfc.target=0"], "dfc.target=0: must be a number > 0"),
    (["dfc.target=fast"], "dfc.target=fast: must be a number > 0"),
    (["dfc.high_iops=1e11"], "dfc.high_iops=1e11: must be at most 10,000,000,000"),
    (["dfc.low_iops=500", "dfc.high_iops=500"],
     "dfc.low_iops=500: must be less than dfc.high_iops (500)"),
    (["dfc.target=2", "iops=5"], "dfc.* keys change the step's DFC, not its workloads: give "
                                 "them in an edit of their own"),
    (["dfc.gains=1"], "dfc.gains=1: unknown key 'dfc.gains'"),
]


@pytest.mark.parametrize(("words", "message"), BAD_EDITS)
def test_parse_edit_args_refuses(words: list[str], message: str) -> None:
    with pytest.raises(EditRefused) as info:
        parse_edit_args(words)
    assert message in str(info.value)


GOOD_MAPPINGS: list[tuple[dict[str, Any], EditChanges]] = [
    ({"iops": 5000, "read_fraction": 0.7}, EditChanges({"iops": 5000.0, "read_fraction": 0.7})),
    ({"iops": None}, EditChanges({"iops": None})),
    ({"total_iops": 2.5e4}, EditChanges({}, 25000.0)),
    ({"blocksize": 8192, "iodepth": 16}, EditChanges({"blocksize_bytes": 8192, "iodepth": 16})),
    ({"busy_poll": True}, EditChanges({"busy_poll": True})),
    ({"read_fraction": "70%"}, EditChanges({"read_fraction": 0.7})),
]


@pytest.mark.parametrize(("params", "expected"), GOOD_MAPPINGS)
def test_parse_params_json_values(params: dict[str, Any], expected: EditChanges) -> None:
    assert parse_params(params) == expected


BAD_MAPPINGS: list[tuple[dict[Any, Any], str]] = [
    ({}, "changes nothing"),
    ({"iops": True}, "iops=true: must be a number > 0 or max"),
    ({"iops": [1]}, "iops=[1]: must be a number > 0 or max"),
    ({"iodepth": 2.0}, "iodepth=2.0: must be an integer 1..4096"),
    ({"iodepth": True}, "iodepth=true: must be an integer 1..4096"),
    ({"busy_poll": 1}, "busy_poll=1: must be true or false"),
    ({"blocksize": 1000.5}, "blocksize=1000.5: not a whole number of bytes"),
    ({"iosequencer": 3}, "iosequencer=3: must be one of"),
    ({"write_data": {"compressible": 2}}, "write_data={'compressible': 2}: must be random"),
    ({"read_fraction": float("nan")}, "read_fraction=nan: must be a fraction"),
    ({5: 1}, "bad key 5"),
]


@pytest.mark.parametrize(("params", "message"), BAD_MAPPINGS)
def test_parse_params_refuses(params: dict[Any, Any], message: str) -> None:
    with pytest.raises(EditRefused) as info:
        parse_params(params)
    assert message in str(info.value)


def test_refusal_is_a_config_error_with_the_plain_message() -> None:
    with pytest.raises(EditRefused) as info:
        parse_edit_args(["read_fraction=1.5"])
    assert isinstance(info.value, ConfigError) and isinstance(info.value, IvyError)
    assert str(info.value) == "read_fraction=1.5: must be between 0 and 1"


def test_split_edit_args_keeps_raw_values() -> None:
    assert split_edit_args(["iops=5000", "write_data=compressible:2.5", "x=a=b"]) == {
        "iops": "5000", "write_data": "compressible:2.5", "x": "a=b"}


def test_every_editable_key_parses() -> None:
    samples = {"iops": "10", "total_iops": "10", "read_fraction": "0.5", "blocksize": "4KiB",
               "iodepth": "2", "iosequencer": "random_steady", "skew_weight": "1",
               "busy_poll": "false", "write_data": "zeros", "dfc.target": "2",
               "dfc.low_iops": "10", "dfc.high_iops": "1e4"}
    assert set(samples) == set(EDITABLE_KEYS)
    for key, value in samples.items():
        parse_params({key: value})


def test_describe_names_every_change() -> None:
    changes = parse_edit_args(["iops=max", "blocksize=8KiB", "read_fraction=0.7",
                               "write_data=dedupable:3", "busy_poll=1", "skew_weight=2",
                               "iodepth=4", "iosequencer=sequential"])
    assert changes.describe() == ("iops=max read_fraction=70% blocksize=8KiB iodepth=4 "
                                  "iosequencer=sequential skew_weight=2 busy_poll=true "
                                  "write_data=dedupable:3")
    dfc = parse_edit_args(["dfc.high_iops=9000", "dfc.target=1.5"])
    assert dfc == EditChanges({}, None, {"high_iops": 9000.0, "target": 1.5})
    assert dfc.describe() == "dfc.target=1.5 dfc.high_iops=9000"


WORKLOAD_IDS = [f"h1:/dev/sd{d}:w{i:02d}" for d in "ab" for i in range(8)]
UNKNOWN_INSTANCES = [
    # rollup type, typed instance, known instances, whole message (after "... in step s.")
    ("workload", "w03", WORKLOAD_IDS,
     " Did you mean workload=h1:/dev/sda:w03 or workload=h1:/dev/sdb:w03? Instances (16 in all;"
     " the first 10): " + ", ".join(WORKLOAD_IDS[:10])),
    ("host", "localhots", ["localhost", "h1"],
     " Did you mean host=localhost? Instances: h1, localhost"),
    ("host", "zz", ["localhost", "h1"], " Instances: h1, localhost"),
    ("vendor", "ACME", [], " The vendor rollup has no instances."),
    ("workload", "w03", [f"h{i:02d}:/l:w03" for i in range(12)],
     " Did you mean " + ", ".join(f"workload=h{i:02d}:/l:w03" for i in range(9))
     + ", workload=h09:/l:w03 or 2 more? Instances (12 in all; the first 10): "
     + ", ".join(f"h{i:02d}:/l:w03" for i in range(10))),
]


@pytest.mark.parametrize("rtype, typed, known, rest", UNKNOWN_INSTANCES)
def test_unknown_instance_suggests_and_lists(rtype: str, typed: str, known: list[str],
                                             rest: str) -> None:
    err = unknown_instance(rtype, typed, "s", known)
    assert isinstance(err, EditRefused)
    assert str(err) == f"{rtype}={typed} has no workloads in step s.{rest}"


# ---------------------------------------------------------------- the test file's bounds

#: values a test file refuses (master.config.limits), refused live with the same bound: the
#: slave took ``iops=1e-12`` and its scheduler died of an OverflowError; ``blocksize=1GiB``
#: made it allocate iodepth GiB
OUT_OF_BOUNDS = [
    (["iops=0.0001"], "iops=0.0001: must be at least 0.001"),
    (["iops=1e-12"], "iops=1e-12: must be at least 0.001"),
    (["iops=2e8"], "iops=2e8: must be at most 100,000,000"),
    (["total_iops=0.0005"], "total_iops=0.0005: must be at least 0.001"),
    (["total_iops=1e30"], "total_iops=1e30: must be at most 10,000,000,000"),
    (["blocksize=128MiB"], "blocksize=128MiB: must be at most 64MiB (got 134217728)"),
    (["skew_weight=1e-9"], "skew_weight=1e-9: must be at least 1e-06"),
    (["skew_weight=1e9"], "skew_weight=1e9: must be at most 1,000,000"),
    (["write_data=compressible:1e9"],
     "write_data=compressible:1e9: must be random, zeros, compressible:<ratio> or "
     "dedupable:<ratio> (ratio 1 to 1,000)"),
]


@pytest.mark.parametrize(("words", "message"), OUT_OF_BOUNDS)
def test_values_a_test_file_refuses_are_refused_live(words: list[str], message: str) -> None:
    with pytest.raises(EditRefused) as info:
        parse_edit_args(words)
    assert str(info.value) == message


def test_the_bounds_themselves_are_taken() -> None:
    assert parse_edit_args(["iops=0.001", "blocksize=64MiB", "skew_weight=1e6",
                            "write_data=dedupable:1000"]) == EditChanges({
        "iops": 0.001, "blocksize_bytes": 64 * 1024**2, "skew_weight": 1e6,
        "write_data": "dedupable", "write_data_ratio": 1000.0})
    assert parse_edit_args(["iops=1e8"]).params == {"iops": 1e8}
    assert parse_edit_args(["total_iops=1e10"]).total_iops == 1e10
    assert parse_edit_args(["skew_weight=1e-6"]).params == {"skew_weight": 1e-6}


@pytest.mark.parametrize(("params", "message"), [
    ({"iops": 10**400}, ": must be at most 100,000,000"),
    ({"iops": -(10**400)}, ": must be a number > 0 or max"),
    ({"total_iops": 10**400}, ": must be at most 10,000,000,000"),
    ({"skew_weight": 10**400}, ": must be at most 1,000,000"),
    ({"read_fraction": 10**400}, ": must be a fraction 0..1 or a percentage like 70%"),
])
def test_json_integers_beyond_a_float_are_refused_not_an_internal_error(
        params: dict[str, Any], message: str) -> None:
    # a control-socket client's JSON integer; float() of it raised OverflowError
    ((key, value),) = params.items()
    with pytest.raises(EditRefused) as info:
        parse_params(params)
    assert str(info.value) == f"{key}={value}{message}"


@pytest.mark.parametrize(("rtype", "known", "what"), [
    ("hots", ["", ""], "the attribute hots"),
    ("vendor+modle", ["+", "+"], "any of the attributes vendor, modle"),
])
def test_unknown_instance_of_an_attribute_no_workload_has(rtype: str, known: list[str],
                                                          what: str) -> None:
    # a mistyped rollup type (an attribute no workload has): every workload's instance name is
    # empty; this said "hots=h1 has no workloads in step s. Instances: " and listed nothing
    err = unknown_instance(rtype, "h1", "s", known)
    assert str(err) == (f"{rtype}=h1 has no workloads in step s: no workload there has "
                        f"{what}. A rollup type is all, host, lun, workload, or LUN attributes "
                        "(vendor, model, ...) joined by +.")


def test_unknown_instance_lists_no_empty_names() -> None:
    # workloads without the attribute have no instance one can type: not listed as ""
    err = unknown_instance("vendor", "ACNE", "s", ["", "ACME", ""])
    assert str(err) == ("vendor=ACNE has no workloads in step s. Did you mean vendor=ACME? "
                        "Instances: ACME")


@pytest.mark.parametrize(("words", "described"), [
    (["iops=1234567"], "iops=1234567"),
    (["total_iops=123456789"], "total_iops=123456789"),
    (["total_iops=0.0012345678"], "total_iops=0.0012345678"),
    (["skew_weight=1.0000001"], "skew_weight=1.0000001"),
    (["write_data=compressible:2.1234567"], "write_data=compressible:2.1234567"),
    (["iops=1.5e6"], "iops=1.5e+06"),
])
def test_describe_keeps_every_digit(words: list[str], described: str) -> None:
    # events.csv recorded "live edit all iops=1.23457e+06" for an edit to 1,234,567 IOPS
    changes = parse_edit_args(words)
    assert changes.describe() == described
    assert parse_edit_args(described.split()) == changes
