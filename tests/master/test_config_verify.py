"""``verify:`` (issue #62, data verification): its values into ``VerifyConfig``, its wrong
values with their messages, and what a verified test may not hold (a blocksize or a
``range_start`` in bytes off the map's 4 KiB blocks, ``dedupable`` data), every such value at
once, in every step, sweep and ``edit_rollup``; the plan's line. One error alone through
``ivypy run`` is in bad_configs/verify_*.yaml."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from master.config import TestConfig, VerifyConfig, parse_config_text
from master.config.keys import section
from master.config.limits import MAX_FINDINGS_KEPT
from master.config.resolved import format_plan, resolved_dict
from master.config.verify import DEDUPABLE, VERIFY_BLOCK_BYTES
from protocol.errors import ConfigError, ConfigErrors
from protocol.verify import MAP_BLOCK_BYTES

HEAD = """\
test: t
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {file: /var/tmp/ivypy-lun, size: 1GiB, create: true}
"""


def _text(verify: str | None, steps: str) -> str:
    """A test with ``verify: <verify>`` at line 6 (none when None) and ``steps`` after it."""
    line = "" if verify is None else f"verify: {verify}\n"
    return HEAD + line + "steps:\n" + textwrap.indent(textwrap.dedent(steps), "  ")


ONE_STEP = """\
- name: s
  workloads:
    - {name: w, iosequencer: random_steady}
"""


def _parse(text: str) -> TestConfig:
    return parse_config_text(text, "t.yaml", cwd=Path("/x"))


def _errors(text: str) -> list[str]:
    """Every error the test has, each as its one line."""
    with pytest.raises(ConfigError) as info:
        _parse(text)
    errors = info.value.errors if isinstance(info.value, ConfigErrors) else [info.value]
    return [str(error) for error in errors]


def test_the_block_is_the_maps() -> None:
    # the config does not import numpy (a bad test is refused before it is): its own constant
    assert VERIFY_BLOCK_BYTES == MAP_BLOCK_BYTES == 4096


@pytest.mark.parametrize(("verify", "want"), [
    (None, None),
    ("false", None),
    ("true", VerifyConfig("stop", 64)),
    ("{}", VerifyConfig("stop", 64)),
    ("{on_error: stop}", VerifyConfig("stop", 64)),
    ("{on_error: continue}", VerifyConfig("continue", 64)),
    ("{findings_kept: 0}", VerifyConfig("stop", 0)),
    (f"{{findings_kept: {MAX_FINDINGS_KEPT}}}", VerifyConfig("stop", 4096)),
    ("{on_error: continue, findings_kept: 10}", VerifyConfig("continue", 10)),
    ("\n  on_error: continue\n  findings_kept: 1_000", VerifyConfig("continue", 1000)),
])
def test_good_values(verify: str | None, want: VerifyConfig | None) -> None:
    assert _parse(_text(verify, ONE_STEP)).verify == want


@pytest.mark.parametrize(("verify", "want"), [
    ("1", "verify: must be true, false or a mapping {on_error, findings_kept} (got 1)"),
    ("yes please", "verify: must be true, false or a mapping {on_error, findings_kept} "
     "(got yes please)"),
    ("[true]", "verify: must be true, false or a mapping {on_error, findings_kept} "
     "(got None)"),
    ("{on_error: maybe}", "verify.on_error: must be stop or continue (got maybe)"),
    ("{on_error: true}", "verify.on_error: must be stop or continue (got true)"),
    ("{on_error: Stop}", "verify.on_error: must be stop or continue (got Stop)"),
    ("{findings_kept: -1}", "verify.findings_kept: must be between 0 and 4096 (got -1)"),
    ("{findings_kept: 5000}", "verify.findings_kept: must be between 0 and 4096 (got 5000)"),
    ("{findings_kept: 4097}", "verify.findings_kept: must be between 0 and 4096 (got 4097)"),
    ('{findings_kept: "x"}', "verify.findings_kept: must be an integer"),
    ("{findings_kept: 64.5}", "verify.findings_kept: must be an integer"),
    ("{on_eror: stop}", "verify.on_eror: unknown key (did you mean 'on_error'?)"),
    ("{stop: true}", "verify.stop: unknown key"),
])
def test_bad_values(verify: str, want: str) -> None:
    assert _errors(_text(verify, ONE_STEP)) == [f"t.yaml:6: {want}"]


def test_both_keys_wrong_at_once() -> None:
    assert _errors(_text("{on_error: maybe, findings_kept: -1}", ONE_STEP)) == [
        "t.yaml:6: verify.on_error: must be stop or continue (got maybe)",
        "t.yaml:6: verify.findings_kept: must be between 0 and 4096 (got -1)",
    ]


def _blocksize(where: str, written: str) -> str:
    return (f"t.yaml:{where}: verify (line 6) needs every workload's blocksize to be a "
            f"multiple of 4096 bytes (the map's block), not {written}")


# (the steps, the errors with verify on: each the file's line and key path, then what it is)
REFUSED: list[tuple[str, str, list[str]]] = [
    ("blocksize 512", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady, blocksize: 512}
     """, [_blocksize("10: steps[0].workloads[0].blocksize", "512")]),
    ("blocksize 6KiB, edited in a later step", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady}
     - name: t
       workloads:
         - {name: w, blocksize: 6KiB}
     """, [_blocksize("13: steps[1].workloads[0].blocksize", "6144 (6KiB)")]),
    ("a sweep's values", """\
     - name: s
       workloads:
         - {name: w, iosequencer: sequential}
     - name: t
       for: {blocksize: [4KiB, 512, 12KiB, 6144]}
     """, [_blocksize("12: steps[1].for.blocksize[1]", "512"),
           _blocksize("12: steps[1].for.blocksize[3]", "6144")]),
    ("an edit_rollup entry's", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady}
       edit_rollup:
         - {instance: all, blocksize: 2KiB}
     """, [_blocksize("12: steps[0].edit_rollup[0].blocksize", "2048 (2KiB)")]),
    ("an iops curve's step", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady, blocksize: 1536}
       iops_curve: [50%, 90%]
     """, [_blocksize("10: steps[0].workloads[0].blocksize", "1536")]),
    ("range_start in bytes", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady, range_start: 1000B}
     """, ["t.yaml:10: steps[0].workloads[0].range_start: verify (line 6) needs range_start on "
           "a 4096-byte boundary (the map's block: the I/Os lie on a grid of blocksize steps "
           "from it), not 1000 (1000B)"]),
    ("range_start swept", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady}
       for: {range_start: [0B, 1KiB]}
     """, ["t.yaml:11: steps[0].for.range_start[1]: verify (line 6) needs range_start on a "
           "4096-byte boundary (the map's block: the I/Os lie on a grid of blocksize steps "
           "from it), not 1024 (1KiB)"]),
    ("dedupable", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady, read_fraction: 0, write_data: "dedupable:3"}
     """, [f"t.yaml:10: steps[0].workloads[0].write_data: {DEDUPABLE}"]),
    ("dedupable as a mapping, edited in", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady}
       edit_rollup:
         - instance: all
           write_data: {dedupable: 2}
     """, [f"t.yaml:13: steps[0].edit_rollup[0].write_data: {DEDUPABLE}"]),
    ("dedupable swept", """\
     - name: s
       workloads:
         - {name: w, iosequencer: random_steady}
       for: {write_data: [random, "dedupable:2"]}
     """, [f"t.yaml:11: steps[0].for.write_data[1]: {DEDUPABLE}"]),
]


@pytest.mark.parametrize(("steps", "want"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_refused_with_verify_accepted_without(steps: str, want: list[str]) -> None:
    assert _errors(_text("true", steps)) == want
    assert _parse(_text(None, steps)).verify is None
    assert _parse(_text("false", steps)).verify is None


def test_the_messages_as_the_issue_words_them() -> None:
    assert DEDUPABLE == ("dedupable data cannot be verified: each verified block carries its own "
                         "offset, so no block repeats (docs/verify.md)")


ALLOWED = """\
- name: s
  workloads:
    - {name: w, iosequencer: sequential, blocksize: 8KiB, range_start: 64KiB,
       range_end: 1000000B, seq_start: 100000B, write_data: zeros}
- name: t
  workloads:
    - {name: w, delete: true}
    - {name: r, iosequencer: random_independent, range_start: 30%, range_end: 999999B,
       hot_zone_size: 50000B, hot_zone_share: 50%}
  for: {blocksize: [4KiB, 12KiB], write_data: ["compressible:4", random, zeros]}
- name: u
  edit_rollup:
    - {instance: all, blocksize: 16KiB, range_start: 1GiB, write_data: zeros}
"""


def test_what_a_verified_test_may_hold() -> None:
    # whole map blocks; a range_start as a fraction (bytes only once the LUN is known);
    # range_end, seq_start and hot_zone_size anywhere: the I/Os lie on the grid from
    # range_start (seq_start is rounded down onto it, the range and hot zone taken in
    # whole blocks); compressible and zeros data
    cfg = _parse(_text("{on_error: continue}", ALLOWED))
    assert cfg.verify == VerifyConfig("continue", 64)
    assert len(cfg.steps) == 1 + 6 + 1


SEVERAL = """\
- name: s
  workloads:
    - {name: a, iosequencer: random_steady, blocksize: 512}
    - {name: b, iosequencer: random_steady, write_data: "dedupable:2"}
- name: t
  workloads:
    - {name: a, range_start: 2047B}
  for: {blocksize: [1024, 8192]}
- name: u
  workloads:
    - {name: b, iodepth: 0}
"""


def test_every_error_at_once_with_the_steps_own() -> None:
    # every step's forbidden values, whichever step they are in, with the step errors the
    # test has (the steps' own: every error of the first step with one)
    assert _errors(_text("true", SEVERAL)) == [
        _blocksize("10: steps[0].workloads[0].blocksize", "512"),
        f"t.yaml:11: steps[0].workloads[1].write_data: {DEDUPABLE}",
        "t.yaml:14: steps[1].workloads[0].range_start: verify (line 6) needs range_start on a "
        "4096-byte boundary (the map's block: the I/Os lie on a grid of blocksize steps from "
        "it), not 2047 (2047B)",
        _blocksize("15: steps[1].for.blocksize[0]", "1024"),
        "t.yaml:18: steps[2].workloads[0].iodepth: must be between 1 and 4096 (got 0)",
    ]
    # without verify (a line less), the step's error alone
    assert _errors(_text(None, SEVERAL)) == [
        "t.yaml:17: steps[2].workloads[0].iodepth: must be between 1 and 4096 (got 0)"]


def test_a_wrong_verify_waits_for_nothing_in_the_steps() -> None:
    # verify's own error is the top level's: with the others there, before the steps
    text = _text("{on_error: maybe}", SEVERAL).replace("subinterval_seconds: 1",
                                                        "subinterval_seconds: 0")
    assert _errors(text) == [
        "t.yaml:2: subinterval_seconds: must be at least 10ms and at most 1h (got 0)",
        "t.yaml:6: verify.on_error: must be stop or continue (got maybe)",
    ]


def test_a_value_that_is_no_value_is_named_once_by_the_steps() -> None:
    steps = """\
    - name: s
      workloads:
        - {name: w, iosequencer: random_steady, blocksize: 1000, write_data: dedupable}
    """
    assert _errors(_text("true", steps)) == [
        "t.yaml:10: steps[0].workloads[0].blocksize: must be a positive multiple of 512 "
        "(got 1000)",
        "t.yaml:10: steps[0].workloads[0].write_data: must be random, zeros, "
        "'compressible:<ratio>', 'dedupable:<ratio>' or a mapping",
    ]


def test_a_merged_template_is_named_where_it_is_used() -> None:
    text = HEAD + textwrap.dedent("""\
        verify: true
        templates:
          - &small {iosequencer: random_steady, blocksize: 512}
        steps:
          - name: s
            workloads:
              - {<<: *small, name: w}
        """)
    # ``templates`` is no key of a test: the one error then is that; without it, the
    # merged value is the workload's, at the template's line
    assert _errors(text) == ["t.yaml:7: templates: unknown key"]
    text = HEAD + textwrap.dedent("""\
        verify: true
        steps:
          - name: s
            workloads:
              - &small {name: w, iosequencer: random_steady, blocksize: 8KiB}
          - name: t
            workloads:
              - {name: w, delete: true}
              - {<<: *small, name: v, blocksize: 1KiB}
        """)
    assert _errors(text) == [_blocksize("14: steps[1].workloads[1].blocksize", "1024 (1KiB)")]


def test_the_plan_says_it_when_on() -> None:
    plan = format_plan(_parse(_text("true", ONE_STEP)))
    assert ("validity     a step is invalid when a paced workload's IOPS falls more than 5% "
            "short of its setting (iops_tolerance_pct)\n"
            "verify       data verification: on (on_error stop, 64 findings kept)\n\n"
            "hosts (1)\n") in plan
    plan = format_plan(_parse(_text("{on_error: continue, findings_kept: 0}", ONE_STEP)))
    assert "verify       data verification: on (on_error continue, 0 findings kept)\n" in plan
    for off in (None, "false"):
        assert "verification" not in format_plan(_parse(_text(off, ONE_STEP)))


def test_resolved_json_holds_it() -> None:
    assert resolved_dict(_parse(_text("true", ONE_STEP)))["verify"] == {
        "on_error": "stop", "findings_kept": 64}
    assert resolved_dict(_parse(_text(None, ONE_STEP)))["verify"] is None


def test_the_reference_states_the_defaults() -> None:
    rows = {key.names[0]: key for key in section("verify").keys}
    assert rows["on_error"].default.strip("`") == VerifyConfig().on_error
    assert int(rows["findings_kept"].default) == VerifyConfig().findings_kept
    assert f"0 to {MAX_FINDINGS_KEPT:,}" in rows["findings_kept"].form
    (top,) = [key for key in section("").keys if key.names == ("verify",)]
    assert top.default == "false" and "docs/verify.md" in top.meaning
