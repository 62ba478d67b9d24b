"""One entry per workload in a step's ``workloads:`` list, and per instance in its
``edit_rollup:`` (issue 40, "bounded input": two workloads with one name merged silently).
A name may come back after a ``delete: true`` in the same step, and in any later step (an
edit of the carried-over workload).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from master.config import TestConfig, parse_config_text
from protocol.errors import ConfigError


def _parse(text: str) -> TestConfig:
    return parse_config_text(text, "t.yaml", cwd=Path("/x"))


def _steps(steps: str) -> str:
    return ("test: t\nsubinterval_seconds: 1\nhosts: [localhost]\nluns:\n"
            "  - {file: /x/lun0, size: 1MiB, create: true}\nsteps:\n"
            + textwrap.indent(textwrap.dedent(steps), "  "))


DUPLICATES_ALLOWED = [
    ("delete and create again in one step", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady, seed: 1}]
     - name: two
       workloads:
         - {name: w, delete: true}
         - {name: w, iosequencer: sequential, seed: 2}
     """, [["w"], ["w"]]),
    ("an edit of a carried-over workload", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady}, {name: v, iosequencer: sequential}]
     - name: two
       workloads: [{name: w, iodepth: 4}, {name: v, iodepth: 2}]
     - name: three
       workloads: [{name: w, iodepth: 8}]
     """, [["w", "v"], ["w", "v"], ["w", "v"]]),
    ("the same name in two steps' sweeps", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady}]
       for: {iodepth: [1, 2]}
     - name: two
       workloads: [{name: w}]
       for: {iodepth: [4, 8]}
     """, [["w"]] * 4),
]


@pytest.mark.parametrize(("steps", "names"), [case[1:] for case in DUPLICATES_ALLOWED],
                         ids=[case[0] for case in DUPLICATES_ALLOWED])
def test_a_name_may_return_in_later_steps_or_after_a_delete(steps: str,
                                                            names: list[list[str]]) -> None:
    cfg = _parse(_steps(steps))
    assert [[w.name for w in step.workloads] for step in cfg.steps] == names


DUPLICATES_REFUSED = [
    ("two creates", """\
     - name: one
       workloads:
         - {name: w, iosequencer: random_steady, iops: 100}
         - {name: w, iosequencer: sequential, iops: 200}
     """, "t.yaml:10: steps[0].workloads[1].name: duplicate workload 'w' in this step "
         "(first at line 9)"),
    ("two edits of a carried-over workload", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady}]
     - name: two
       workloads:
         - {name: w, iodepth: 4}
         - {name: v, iosequencer: sequential}
         - {name: w, iops: 10}
     """, "t.yaml:13: steps[1].workloads[2].name: duplicate workload 'w' in this step "
         "(first at line 11)"),
    ("a create, then a delete", """\
     - name: one
       workloads:
         - {name: v, iosequencer: random_steady}
         - {name: w, iosequencer: random_steady}
         - {name: w, delete: true}
     """, "t.yaml:11: steps[0].workloads[2].name: duplicate workload 'w' in this step "
         "(first at line 10)"),
    ("a delete, a create, then an edit", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady}]
     - name: two
       workloads:
         - {name: w, delete: true}
         - {name: w, iosequencer: sequential}
         - name: w
           iodepth: 2
     """, "t.yaml:13: steps[1].workloads[2].name: duplicate workload 'w' in this step "
         "(first at line 12)"),
    ("two edit_rollup entries for one instance", """\
     - name: one
       workloads: [{name: w, iosequencer: random_steady}]
       edit_rollup:
         - {instance: host=localhost, iodepth: 2}
         - {instance: all, iodepth: 4}
         - {instance: "host=localhost", total_iops: 100}
     """, "t.yaml:12: steps[0].edit_rollup[2].instance: duplicate instance 'host=localhost' in "
         "this step's edit_rollup (first at line 10)"),
]


@pytest.mark.parametrize(("steps", "message"), [case[1:] for case in DUPLICATES_REFUSED],
                         ids=[case[0] for case in DUPLICATES_REFUSED])
def test_a_name_repeated_within_one_step_is_refused(steps: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(_steps(steps))
    assert str(info.value) == message
