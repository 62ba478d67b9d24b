"""Every unknown key of a test file at once (``ConfigErrors``), before any value is read: a fio
user's ``runtime``, ``rw`` and ``bs`` took three runs to learn of, one bare "unknown key" each.
At most 20 are listed, then how many more; one alone reads as it always did. Then every wrong
value whose check does not depend on another's: the top level's, hosts', LUNs', rollups' and
gather sources', each workload entry's keys and entries of the first step with an error, and
each threshold."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.cli import main as cli
from master.config import parse_config_text
from master.config.keys import section
from master.config.loader import KEYS_BY_PATH
from protocol.errors import ConfigError, ConfigErrors

FIO_USER = """\
test: t
hosts: [localhost]
luns: [{file: /tmp/x, size: 1MiB, create: true}]
steps:
  - name: s
    runtime: 60
    workloads: [{name: w, rw: randread, bs: 4k, iodepth: 4}]
"""


def test_a_fio_users_three_keys_are_named_at_once(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fio.yaml"
    path.write_text(FIO_USER)
    assert cli.main(["run", str(path), "--dry-run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"ivypy: {path}:6: steps[0].runtime: unknown key (fio's runtime; ivypy's is "
        "measure_seconds, a step's)",
        f"ivypy: {path}:7: steps[0].workloads[0].rw: unknown key (fio's rw; ivypy's is "
        "iosequencer (random_steady, random_independent or sequential) with read_fraction (70% "
        "for randrw with rwmixread=70))",
        f"ivypy: {path}:7: steps[0].workloads[0].bs: unknown key (fio's bs; ivypy's is "
        "blocksize (4KiB))"]


def test_at_most_twenty_then_how_many_more() -> None:
    keys = "\n".join(f"    bogus{i:02d}: 1" for i in range(25))
    text = FIO_USER.replace("    runtime: 60\n", keys + "\n")
    with pytest.raises(ConfigErrors) as info:
        parse_config_text(text, "t.yaml")
    lines = str(info.value).splitlines()
    assert len(lines) == 21 and lines[-1] == "and 7 more"  # 25 + rw, bs: 27 in all
    assert lines[0].startswith("t.yaml:6: steps[0].bogus00: unknown key")
    assert info.value.line == 6 and info.value.key_path == "steps[0].bogus00"


def test_one_alone_reads_as_it_always_did() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(FIO_USER.replace(", rw: randread, bs: 4k", ", iosequencer: "
                                           "sequential"), "t.yaml")
    assert type(info.value) is ConfigError
    assert str(info.value) == ("t.yaml:6: steps[0].runtime: unknown key (fio's runtime; "
                               "ivypy's is measure_seconds, a step's)")


@pytest.mark.parametrize("path", sorted(KEYS_BY_PATH))
def test_the_keys_checked_at_once_are_the_reference_tables(path: str) -> None:
    assert set(KEYS_BY_PATH[path]) == set(section(path).names())


VALUES = """\
test: "my test"
hosts: [localhost]
subinterval_seconds: 0
deadline_fraction: 2
luns: [{path: /dev/null}]
steps:
  - name: a
    workloads:
      - {name: w, iosequencer: random_steady, blocksize: 4kb, iops: "1000"}
      - {name: v, iosequencer: randm, read_fraction: 70}
  - name: b
    workloads:
      - {name: x, iosequencer: sequential, iodepth: 0}
thresholds:
  - "iops > 5"
  - "IOPS < -10%"
"""


@pytest.mark.parametrize(("fix", "want"), [
    # the top level's values: every one (the steps, which need the subinterval, wait)
    ((), [(1, "test"), (3, "subinterval_seconds"), (4, "deadline_fraction")]),
    # those right: every wrong key of each entry of step a (step b builds on what a sets up)
    ((('"my test"', "t"), ("subinterval_seconds: 0", "subinterval_seconds: 1"),
      ("deadline_fraction: 2", "deadline_fraction: 0.5")),
     [(9, "steps[0].workloads[0].blocksize"), (9, "steps[0].workloads[0].iops"),
      (10, "steps[0].workloads[1].iosequencer"), (10, "steps[0].workloads[1].read_fraction")]),
    # step a right too: step b's, then (the steps whole) each threshold's
    ((('"my test"', "t"), ("subinterval_seconds: 0", "subinterval_seconds: 1"),
      ("deadline_fraction: 2", "deadline_fraction: 0.5"), ("blocksize: 4kb", "blocksize: 4KiB"),
      ('iops: "1000"', "iops: 1000"), ("randm", "random_independent"),
      ("read_fraction: 70", "read_fraction: 70%")),
     [(13, "steps[1].workloads[0].iodepth")]),
    ((('"my test"', "t"), ("subinterval_seconds: 0", "subinterval_seconds: 1"),
      ("deadline_fraction: 2", "deadline_fraction: 0.5"), ("blocksize: 4kb", "blocksize: 4KiB"),
      ('iops: "1000"', "iops: 1000"), ("randm", "random_independent"),
      ("read_fraction: 70", "read_fraction: 70%"), ("iodepth: 0", "iodepth: 1")),
     [(15, "thresholds[0]"), (16, "thresholds[1]")]),
])
def test_every_wrong_value_at_once(fix: tuple[tuple[str, str], ...],
                                   want: list[tuple[int, str]]) -> None:
    text = VALUES
    for old, new in fix:
        text = text.replace(old, new)
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "t.yaml")
    errors = info.value.errors if isinstance(info.value, ConfigErrors) else [info.value]
    assert [(e.line, e.key_path) for e in errors] == want, str(info.value)
