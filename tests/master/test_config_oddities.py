"""Test files that read as something else than the operator meant, or that passed validation
only to fail once the hosts were contacted: YAML 1.1 octal numbers (``iops: 010`` was 8),
``for:`` values written with a blank (``4 KiB`` made a bad step name) or twice under two
spellings, a hot zone in bytes smaller than a block, a file that is not UTF-8 (its error named
no line), a rollup on an attribute no workload has (``blocksize``: one instance, named "",
held every workload), and a LUN selector on an attribute in bytes given with a unit
(``size_bytes: 1GiB``, matched as text against the digits: no LUN, found only at run time).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from master.config import TestConfig, load_config, parse_config_text
from protocol.errors import ConfigError

HEAD = """\
test: t
subinterval_seconds: 1
hosts: [localhost, h1]
luns:
  - {file: /x/lun0, size: 1GiB, create: true}
steps:
"""


def _parse(steps: str) -> TestConfig:
    text = HEAD + textwrap.indent(textwrap.dedent(steps), "  ")
    return parse_config_text(text, "t.yaml", cwd=Path("/x"))


def _error(steps: str) -> str:
    with pytest.raises(ConfigError) as info:
        _parse(steps)
    return str(info.value)


# ---- YAML 1.1 octal: a leading 0 made another number


@pytest.mark.parametrize(("value", "octal", "decimal"), [
    ("010", "8", "10"), ("0100", "64", "100"), ("-010", "-8", "-10"), ("0_10", "8", "10"),
])
def test_a_number_with_a_leading_zero_is_refused_not_read_as_octal(
        value: str, octal: str, decimal: str) -> None:
    message = _error(f"""\
        - name: s
          workloads: [{{name: w, iosequencer: random_steady, iops: {value}}}]
        """)
    assert message == (f"t.yaml:8: bad value {value}: YAML reads a number with a leading 0 as "
                       f"octal ({octal}); write {decimal} without the 0, or quote it "
                       f"(\"{value}\") for text")


def test_an_octal_looking_serial_number_is_refused_where_it_would_never_match() -> None:
    text = ("test: t\nhosts: [localhost]\nluns:\n  - {serial: 0012345}\nsteps:\n"
            "  - name: s\n    workloads: [{name: w, iosequencer: random_steady}]\n")
    with pytest.raises(ConfigError, match=r"^t\.yaml:4: bad value 0012345: YAML reads"):
        parse_config_text(text, "t.yaml", cwd=Path("/x"))


@pytest.mark.parametrize(("written", "iops"), [
    ("0", None), ("10", 10.0), ("0x10", 16.0), ("010.5", 10.5), ('"010"', None),
])
def test_zero_decimal_hex_floats_and_quoted_text_are_read_as_before(
        written: str, iops: float | None) -> None:
    steps = f"""\
        - name: s
          workloads: [{{name: w, iosequencer: random_steady, iops: {written}}}]
        """
    if iops is None:  # 0 and text are no rate: refused by the key, not as octal
        assert "octal" not in _error(steps)
    else:
        assert _parse(steps).steps[0].workloads[0].iops == iops


def test_a_gather_argument_that_looks_octal_can_be_quoted() -> None:
    text = ("test: t\nhosts: [localhost]\nluns:\n  - {path: /dev/loop0}\n"
            "gather:\n  - {name: g, command: [tool, \"0755\"]}\n"
            "steps:\n  - name: s\n    workloads: [{name: w, iosequencer: random_steady}]\n")
    config = parse_config_text(text, "t.yaml", cwd=Path("/x"))
    assert config.gather[0].argv == ("tool", "0755")


# ---- for: values as written, and their duplicates


def test_a_for_value_written_with_a_blank_names_its_step_without_it() -> None:
    config = _parse("""\
        - name: s
          workloads: [{name: w, iosequencer: random_steady}]
          for: {blocksize: [4 KiB, 8KiB], write_data: ["compressible: 2"]}
        """)
    assert [step.name for step in config.steps] == [
        "s-blocksize=4KiB-write_data=compressible:2", "s-blocksize=8KiB-write_data=compressible:2"]
    assert [w.blocksize_bytes for step in config.steps for w in step.workloads] == [4096, 8192]
    assert config.steps[0].for_values == (("blocksize", "4KiB"),
                                          ("write_data", "compressible:2"))


@pytest.mark.parametrize(("key", "values", "line"), [
    ("blocksize", "[4KiB, 4096]", "'4096', the same as '4KiB'"),
    ("iops", "[1000, 1e3]", "'1e3', the same as '1000'"),
    ("read_fraction", "[0.5, 50%]", "'50%', the same as '0.5'"),
    ("iops", "[max, max]", "'max'"),
])
def test_a_for_value_given_twice_is_refused_at_the_second(key: str, values: str,
                                                          line: str) -> None:
    message = _error(f"""\
        - name: s
          workloads: [{{name: w, iosequencer: random_steady}}]
          for: {{{key}: {values}}}
        """)
    assert message == f"t.yaml:9: steps[0].for.{key}[1]: duplicate value {line}"


# ---- a hot zone smaller than one block


def test_a_hot_zone_in_bytes_below_one_block_is_refused_at_its_key() -> None:
    message = _error("""\
        - name: s
          workloads:
            - {name: w, iosequencer: random_steady, hot_zone_size: 2KiB, hot_zone_share: 50%}
        """)
    assert message == ("t.yaml:9: steps[0].workloads[0].hot_zone_size: hot_zone_size 2KiB is "
                       "less than one block of 4KiB (hot_zone_share would have no blocks to go "
                       "to)")


def test_a_later_blocksize_above_the_hot_zone_is_refused_at_the_blocksize() -> None:
    message = _error("""\
        - name: s
          workloads:
            - {name: w, iosequencer: random_steady, hot_zone_size: 4KiB, hot_zone_share: 50%}
        - name: t
          workloads: [{name: w, blocksize: 8KiB}]
        """)
    assert message.startswith("t.yaml:11: steps[1].workloads[0].blocksize: hot_zone_size 4KiB "
                              "is less than one block of 8KiB")


def test_a_hot_zone_of_one_block_or_a_fraction_is_accepted() -> None:
    config = _parse("""\
        - name: s
          workloads:
            - {name: w, iosequencer: random_steady, hot_zone_size: 4KiB, hot_zone_share: 50%}
            - {name: v, iosequencer: random_steady, hot_zone_size: 0.1%, hot_zone_share: 50%}
        """)
    assert [str(w.hot_zone_size) for w in config.steps[0].workloads] == ["4KiB", "0.1%"]


# ---- a file that is not UTF-8: the line of the first bad byte


@pytest.mark.parametrize(("data", "line"), [
    (b"test: t\n# 5\xb5s\nhosts: [localhost]\n", 2),
    (b"test: t\r\n# a\r\n# 5\xb5s\r\n", 3),
    (b"test: t\r# a\r# \xff\r", 3),
    (b"\xfftest: t\n", 1),
])
def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path: Path, data: bytes,
                                                        line: int) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    byte = next(b for b in data if b >= 0x80)
    assert str(info.value) == (f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x}: invalid "
                               "start byte)")


# ---- a rollup on an attribute no workload has: one instance, "", holding everything


@pytest.mark.parametrize(("rollup", "message"), [
    ("blocksize", "bad rollup type 'blocksize': no LUN or workload has the attribute "
                  "'blocksize' (did you mean 'blocksize_bytes'?)"),
    ("vendor+modle", "bad rollup type 'vendor+modle': no LUN or workload has the attribute "
                     "'modle' (did you mean 'model'?)"),
])
def test_a_rollup_on_an_attribute_no_workload_has_is_refused(rollup: str, message: str) -> None:
    text = (f"test: t\nhosts: [localhost]\nrollups: [host, {rollup}]\nluns:\n"
            "  - {path: /dev/loop0}\nsteps:\n"
            "  - name: s\n    workloads: [{name: w, iosequencer: random_steady}]\n")
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "t.yaml", cwd=Path("/x"))
    assert str(info.value) == f"t.yaml:3: rollups[1]: {message}"


def test_a_rollup_may_join_any_attribute_a_workload_instance_has() -> None:
    # the attributes rollup_key reads: the LUN's (from the slave's discovery, and the engine
    # select_luns adds) and the workload's (workload_attributes)
    from master.config.catalog import ROLLUP_ATTRIBUTES
    from master.config.schema import LunChoice, WorkloadSpec
    from master.run.workloads import Lun, workload_attributes
    from slave.lun_info import LunInfo

    info = LunInfo(path="/dev/sdb", kind="disk", name="sdb", size_bytes=2**30)
    lun = Lun("h1", "/dev/sdb", 2**30, 512, {**info.attributes(), "engine": "libaio"}, (), {})
    spec = WorkloadSpec(name="w", luns=LunChoice(), iosequencer="random_steady")
    assert set(workload_attributes("h1:/dev/sdb:w", spec, lun)) == set(ROLLUP_ATTRIBUTES)
    rollups = "+".join(ROLLUP_ATTRIBUTES)
    text = (f"test: t\nhosts: [localhost]\nrollups: [{rollups}]\nluns:\n"
            "  - {path: /dev/loop0}\nsteps:\n"
            "  - name: s\n    workloads: [{name: w, iosequencer: random_steady}]\n")
    config = parse_config_text(text, "t.yaml", cwd=Path("/x"))
    assert config.rollup(rollups).attributes == ROLLUP_ATTRIBUTES


# ---- a selector on an attribute in bytes: matched as its digits, so a unit never matched

SIZE_SELECTOR = """\
test: t
hosts: [h1]
luns:
  - {{hosts: all, {key}: {value}}}
steps:
  - name: s
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 10, luns: {{{key}: {value}}}}}
"""


@pytest.mark.parametrize(("key", "value", "said"), [
    ("size_bytes", "1GiB", "'1GiB' matches no LUN; write 1073741824"),
    ("logical_block_bytes", "4 KiB", "'4 KiB' matches no LUN; write 4096"),
    ("file_size_bytes", "big", "'big' matches no LUN (use digits and the glob characters"),
    ("size_bytes", "1073741824", None),
    ("size_bytes", "10*", None),
    ("physical_block_bytes", '"[45]*"', None),
])
def test_a_size_with_a_unit_in_a_lun_selector_is_refused_saying_the_bytes(
        key: str, value: str, said: str | None) -> None:
    text = SIZE_SELECTOR.format(key=key, value=value)
    if said is None:
        parse_config_text(text, "t.yaml", cwd=Path("/x"))
        return
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "t.yaml", cwd=Path("/x"))
    message = str(info.value)
    assert message.startswith(f"t.yaml:4: luns[0].{key}: {key} is a number of bytes"), message
    assert said in message, message


def test_a_size_with_a_unit_in_a_workloads_luns_is_refused_there() -> None:
    text = SIZE_SELECTOR.format(key="size_bytes", value="1GiB").replace(
        "{hosts: all, size_bytes: 1GiB}", '{hosts: all, path: "/dev/sd*"}')
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "t.yaml", cwd=Path("/x"))
    message = str(info.value)
    assert ".workloads[0].luns.size_bytes: size_bytes is a number of bytes" in message, message
    assert "write 1073741824" in message, message
