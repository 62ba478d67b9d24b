"""Tests for master/config: what valid test files become (errors: test_config_errors.py)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from master.config import (
    FOCUS_METRICS,
    AccuracyCriterion,
    AttributeMatch,
    FioCriteria,
    LunChoice,
    LunExtent,
    PhaseDuration,
    TestConfig,
    WriteData,
    expand_ranges,
    load_config,
    parse_config_text,
)
from protocol.errors import ConfigError

ISSUE_EXAMPLE = """\
test: mixed_sweep                  # output goes to <output_root>/<test>/<YYYYmmdd-HHMMSS>/
output_root: ./ivypy-output
subinterval_seconds: 1             # default 5
hosts:
  - localhost                      # local transport, no SSH
  - {name: h1, address: 10.0.0.11, user: root, port: 22}
  - "cb[08-11]"                    # range expansion
luns:
  - {hosts: all, path: "/dev/loop*"}                 # block devices by glob or attribute
  - {hosts: [localhost], file: /var/tmp/lun0, size: 4GiB, create: true}
  - {hosts: [h1], path: /dev/sdb, allow_write: true} # preflight override for this LUN
rollups: [host, lun, "vendor+model"]                 # all and workload always exist
steps:
  - name: randread
    workloads:
      - {name: rr, luns: all, iosequencer: random_independent, blocksize: 4KiB,
         iodepth: 32, iops: max, read_fraction: 1.0}
    warmup_seconds: 5
    measure_seconds: 30
    cooldown_seconds: 0
  - name: mixed
    workloads:
      - {name: rr, delete: true}
      - {name: mix, luns: {host: localhost}, iosequencer: random_steady, blocksize: 8KiB,
         iodepth: 16, iops: 2000, read_fraction: 0.7}
"""

HEAD = """\
test: t
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {file: "${output_root}/lun0", size: 16MiB, create: true, allow_write: true}
"""


def parse(text: str, **kwargs: object) -> TestConfig:
    return parse_config_text(textwrap.dedent(text), "test.yaml", cwd=Path("/base"), **kwargs)  # type: ignore[arg-type]


def parse_steps(steps_yaml: str) -> TestConfig:
    return parse(HEAD + "steps:\n" + textwrap.indent(textwrap.dedent(steps_yaml), "  "))


def test_issue_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(ISSUE_EXAMPLE)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path)
    assert cfg.test == "mixed_sweep"
    assert cfg.source_file == str(path)
    assert cfg.source_text == ISSUE_EXAMPLE
    assert cfg.output_root == tmp_path / "ivypy-output"
    assert cfg.subinterval_seconds == 1.0
    assert cfg.deadline_fraction == 0.75
    assert [host.name for host in cfg.hosts] == ["localhost", "h1", "cb08", "cb09", "cb10", "cb11"]
    assert [host.transport for host in cfg.hosts] == ["local"] + ["ssh"] * 5
    h1 = cfg.host("h1")
    assert (h1.address, h1.user, h1.port, h1.python, h1.line) == (
        "10.0.0.11",
        "root",
        22,
        "python3",
        6,
    )
    assert cfg.host("cb10").address == "cb10"
    assert [lun.kind for lun in cfg.luns] == ["path", "file", "path"]
    assert cfg.luns[0].hosts == tuple(host.name for host in cfg.hosts)
    assert cfg.luns[1].size_bytes == 4 * 1024**3 and cfg.luns[1].create
    assert cfg.luns[2].allow_write and cfg.luns[2].hosts == ("h1",)
    assert [rollup.type for rollup in cfg.rollups] == [
        "all",
        "host",
        "lun",
        "workload",
        "vendor+model",
    ]
    assert cfg.rollup("vendor+model").attributes == ("vendor", "model")
    first, second = cfg.steps
    assert first.name == "randread" and first.index == 0 and first.line == 14
    (rr,) = first.workloads
    assert (rr.name, rr.iosequencer, rr.blocksize_bytes, rr.iodepth, rr.iops, rr.read_fraction) == (
        "rr",
        "random_independent",
        4096,
        32,
        "max",
        1.0,
    )
    assert rr.luns == LunChoice()
    assert first.measure_time == PhaseDuration(30.0, 30, 30.0)
    assert first.warmup == PhaseDuration(5.0, 5, 5.0)
    assert first.cooldown == PhaseDuration(0.0, 0, 0.0)
    (mix,) = second.workloads
    assert mix.name == "mix" and mix.iops == 2000.0 and mix.read_fraction == 0.7
    assert mix.luns == LunChoice(every=False, attributes=(AttributeMatch("host", "localhost"),))
    assert [(c.action, c.name) for c in second.changes] == [("delete", "rr"), ("create", "mix")]
    # durations carry over from the previous step
    assert second.warmup.requested_s == 5.0 and second.measure_time is not None
    assert second.measure_time.requested_s == 30.0


def test_config_is_frozen() -> None:
    cfg = parse_steps("- {name: s, workloads: [{name: w, iosequencer: sequential}]}\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.test = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps[0].workloads[0].iodepth = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("h1", ["h1"]),
        ("cb[08-11]", ["cb08", "cb09", "cb10", "cb11"]),
        ("h[1-3]", ["h1", "h2", "h3"]),
        ("h[8-10]", ["h8", "h9", "h10"]),
        ("n[001-003]", ["n001", "n002", "n003"]),
        ("n[1,4,7-8]", ["n1", "n4", "n7", "n8"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("[1-2].lab", ["1.lab", "2.lab"]),
        ("10.0.0.[11-13]", ["10.0.0.11", "10.0.0.12", "10.0.0.13"]),
        ("h[5]", ["h5"]),
    ],
)
def test_expand_ranges(text: str, names: list[str]) -> None:
    assert expand_ranges(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h[3-1]", "bad range [3-1] in 'h[3-1]': 3 > 1"),
        ("h[1-3", "unclosed '[' in 'h[1-3'"),
        ("h1-3]", "unmatched ']' in 'h1-3]'"),
        ("h[]", "empty range [] in 'h[]'"),
        ("h[a-b]", "bad range [a-b] in 'h[a-b]': expected numbers like [08-11] or [1,3,5-7]"),
        ("h[1-99999]", "range [1-99999] in 'h[1-99999]' expands to more than 10000 names"),
        ("a[1-200]b[1-200]", "'a[1-200]b[1-200]' expands to more than 10000 names"),
    ],
)
def test_expand_ranges_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        expand_ranges(text)
    assert str(info.value) == message


def test_host_mappings() -> None:
    cfg = parse(
        """\
        test: t
        hosts:
          - name: "ivy-h[1-3]"
            address: "10.77.0.[11-13]"
            user: root
            python: /usr/bin/python3
            identity_file: /run/key
            known_hosts: /run/known_hosts
            ssh_config: /run/ssh_config
          - {name: localhost, transport: ssh, port: 2222}
          - {name: lab1, transport: local}
        luns: [{path: /dev/loop0}]
        steps: [{name: s, workloads: [{name: w, iosequencer: sequential}]}]
        """
    )
    h2 = cfg.host("ivy-h2")
    assert (h2.address, h2.user, h2.python, h2.transport) == (
        "10.77.0.12",
        "root",
        "/usr/bin/python3",
        "ssh",
    )
    assert (h2.identity_file, h2.known_hosts, h2.ssh_config) == (
        "/run/key",
        "/run/known_hosts",
        "/run/ssh_config",
    )
    assert cfg.host("ivy-h3").address == "10.77.0.13"
    assert (cfg.host("localhost").transport, cfg.host("localhost").port) == ("ssh", 2222)
    assert cfg.host("lab1").transport == "local"


@pytest.mark.parametrize(("entry", "prefix"), [
    ("{name: 'pod[1-2]', exec: 'kubectl exec -i -n lab {name} --'}",
     ("kubectl", "exec", "-i", "-n", "lab", "pod2", "--")),
    ("{name: 'pod[1-2]', exec: [ip, netns, exec, 'ns-{name}'], transport: exec}",
     ("ip", "netns", "exec", "ns-pod2")),
    ("{name: 'pod[1-2]', exec: \"docker exec -i 'my box'\"}",
     ("docker", "exec", "-i", "my box")),
])
def test_host_exec_prefixes(entry: str, prefix: tuple[str, ...]) -> None:
    cfg = parse(
        f"""\
        test: t
        hosts:
          - {entry}
        luns: [{{path: /dev/loop0}}]
        steps: [{{name: s, workloads: [{{name: w, iosequencer: sequential}}]}}]
        """
    )
    host = cfg.host("pod2")
    assert (host.transport, host.exec, host.address) == ("exec", prefix, "pod2")
    assert cfg.host("pod1").exec[:2] == prefix[:2]


@pytest.mark.parametrize(
    ("entry", "setting"),
    [
        ("localhost", "auto"),
        ("{name: localhost}", "auto"),
        ("{name: localhost, worker_cpus: auto}", "auto"),
        ("{name: localhost, worker_cpus: Unpinned}", "unpinned"),
        ("{name: localhost, worker_cpus: 3}", "3"),
        ("{name: localhost, worker_cpus: '8,0-3'}", "0-3,8"),
        ("{name: localhost, worker_cpus: 2-3}", "2-3"),
    ],
)
def test_host_worker_cpus(entry: str, setting: str) -> None:
    cfg = parse(
        f"""\
        test: t
        hosts: [{entry}]
        luns: [{{path: /dev/loop0}}]
        steps: [{{name: s, workloads: [{{name: w, iosequencer: sequential}}]}}]
        """
    )
    assert cfg.host("localhost").worker_cpus == setting


def test_defaults() -> None:
    cfg = parse(
        """\
        test: t
        hosts: [localhost]
        luns: [{path: /dev/loop0}]
        steps: [{name: s, workloads: [{name: w, iosequencer: random_steady}]}]
        """
    )
    assert cfg.output_root == Path("/base/ivypy-output")
    assert cfg.subinterval_seconds == 5.0
    assert cfg.description == ""
    step = cfg.steps[0]
    assert (step.warmup.requested_s, step.cooldown.requested_s) == (0.0, 0.0)
    assert step.measure_time is not None and step.measure_time.requested_s == 60.0
    assert step.measure_time.subintervals == 12
    spec = step.workloads[0]
    assert (spec.blocksize_bytes, spec.iodepth, spec.iops, spec.read_fraction) == (
        4096,
        1,
        "max",
        1.0,
    )
    assert (spec.range_start, spec.range_end) == (
        LunExtent(0.0, "fraction"),
        LunExtent(1.0, "fraction"),
    )
    assert (spec.seq_start, spec.hot_zone_size, spec.hot_zone_share, spec.seed) == (
        None,
        None,
        None,
        None,
    )
    assert (spec.skew_weight, spec.write_data, spec.busy_poll) == (1.0, WriteData(), False)
    assert [rollup.type for rollup in cfg.rollups] == ["all", "host", "lun", "workload"]


def test_output_root_resolution() -> None:
    text = HEAD.replace("test: t", "test: t\noutput_root: results/x") + (
        "steps: [{name: s, workloads: [{name: w, iosequencer: sequential}]}]\n"
    )
    cfg = parse(text)
    assert cfg.output_root == Path("/base/results/x")
    assert cfg.luns[0].file == "/base/results/x/lun0"
    cfg = parse(text, output_root_override="/elsewhere/out")
    assert cfg.output_root == Path("/elsewhere/out")
    assert cfg.luns[0].file == "/elsewhere/out/lun0"
    cfg = parse(text, output_root_override="rel/../out2")
    assert cfg.output_root == Path("/base/out2")
    with pytest.raises(ConfigError, match="--output-root must not be empty"):
        parse(text, output_root_override="")


def test_durations_with_units_round_up_to_subintervals() -> None:
    cfg = parse(
        """\
        test: t
        subinterval_seconds: 2
        hosts: [localhost]
        luns: [{path: /dev/loop0}]
        steps:
          - name: s
            workloads: [{name: w, iosequencer: sequential}]
            warmup_seconds: 3
            measure_seconds: 1m
            cooldown_seconds: 500ms
        """
    )
    step = cfg.steps[0]
    assert (step.warmup.requested_s, step.warmup.subintervals, step.warmup.rounded_s) == (
        3.0,
        2,
        4.0,
    )
    assert step.measure_time is not None
    assert (step.measure_time.subintervals, step.measure_time.rounded_s) == (30, 60.0)
    assert (step.cooldown.requested_s, step.cooldown.subintervals, step.cooldown.rounded_s) == (
        0.5,
        1,
        2.0,
    )


def test_fractional_subinterval_rounding_is_exact() -> None:
    cfg = parse(
        """\
        test: t
        subinterval_seconds: 100ms
        hosts: [localhost]
        luns: [{path: /dev/loop0}]
        steps: [{name: s, workloads: [{name: w, iosequencer: sequential}], measure_seconds: 0.3,
                 warmup_seconds: 0.7}]
        """
    )
    step = cfg.steps[0]
    assert cfg.subinterval_seconds == 0.1
    assert step.measure_time is not None and step.measure_time.subintervals == 3
    assert step.warmup.subintervals == 7


def test_workload_create_edit_delete_persist() -> None:
    cfg = parse_steps(
        """\
        - name: one
          workloads:
            - {name: a, iosequencer: random_steady, blocksize: 8KiB, iodepth: 4, seed: 7}
            - {name: b, iosequencer: sequential, blocksize: 128KiB, seq_start: 10%}
          measure_seconds: 2
        - name: two
          workloads:
            - {name: a, iodepth: 16}
        - name: three
          workloads:
            - {name: b, delete: true}
            - {name: b, iosequencer: random_independent, read_fraction: 50%}
        - name: four
          workloads:
            - {name: a, delete: true}
        """
    )
    one, two, three, four = cfg.steps
    assert [w.name for w in one.workloads] == ["a", "b"]
    a1, b1 = one.workloads
    assert (a1.blocksize_bytes, a1.iodepth, a1.seed) == (8192, 4, 7)
    assert b1.seq_start == LunExtent(0.1, "fraction")
    a2 = two.workloads[0]
    assert a2 == dataclasses.replace(a1, iodepth=16)  # only the given key changed
    assert two.workloads[1] == b1  # untouched workloads persist
    assert [(c.action, c.name, c.keys) for c in two.changes] == [("edit", "a", ("iodepth",))]
    b3 = three.workloads[1]
    assert (b3.iosequencer, b3.read_fraction, b3.blocksize_bytes, b3.seq_start) == (
        "random_independent", 0.5, 4096, None,
    )  # fmt: skip
    assert [w.name for w in four.workloads] == ["b"]
    assert all(
        step.measure_time is not None and step.measure_time.requested_s == 2 for step in cfg.steps
    )


def test_workload_value_forms() -> None:
    cfg = parse_steps(
        """\
        - name: s
          workloads:
            - {name: a, iosequencer: random_steady, blocksize: 1.5KiB, iops: 2500.5,
               range_start: 1GiB, range_end: 75%, hot_zone_size: 10%, hot_zone_share: 0.9,
               skew_weight: 2, write_data: "compressible:2.5", busy_poll: true}
            - {name: b, iosequencer: sequential, write_data: {dedupable: 3}, range_end: 8GiB,
               range_start: 0B, seq_start: 4GiB}
            - {name: c, iosequencer: sequential, write_data: zeros, luns: ["${output_root}/lun0"]}
            - {name: d, iosequencer: sequential, luns: {lun: "/base/*", rotational: false}}
            - {name: e, iosequencer: sequential, luns: "${output_root}/lun0"}
        """
    )
    a, b, c, d, e = cfg.steps[0].workloads
    assert e.luns == c.luns
    assert (a.blocksize_bytes, a.iops, a.skew_weight, a.busy_poll) == (1536, 2500.5, 2.0, True)
    assert a.range_start == LunExtent(1024.0**3, "bytes") and a.range_end == LunExtent(
        0.75, "fraction"
    )
    assert (a.hot_zone_size, a.hot_zone_share) == (LunExtent(0.1, "fraction"), 0.9)
    assert a.write_data == WriteData("compressible", 2.5)
    assert b.write_data == WriteData("dedupable", 3.0)
    assert b.seq_start == LunExtent(4.0 * 1024**3, "bytes")
    assert c.write_data == WriteData("zeros")
    assert c.luns == LunChoice(every=False, paths=("/base/ivypy-output/lun0",))
    assert d.luns.attributes == (
        AttributeMatch("lun", "/base/*"),
        AttributeMatch("rotational", False),
    )


def test_yaml_anchors_and_merge_keys() -> None:
    cfg = parse_steps(
        """\
        - name: s
          workloads:
            - &base {name: a, iosequencer: random_steady, blocksize: 8KiB, iodepth: 8}
            - {<<: *base, name: b, iodepth: 2}
        """
    )
    a, b = cfg.steps[0].workloads
    assert (a.name, a.iodepth, a.blocksize_bytes) == ("a", 8, 8192)
    assert (b.name, b.iodepth, b.blocksize_bytes) == ("b", 2, 8192)


def test_for_expansion() -> None:
    cfg = parse_steps(
        """\
        - name: base
          workloads: [{name: other, iosequencer: sequential}]
          measure_seconds: 3
        - name: sweep
          workloads: [{name: w, iosequencer: random_steady}]
          for: {blocksize: [4KiB, 64KiB], iodepth: [1, 32]}
        - name: all
          for: {read_fraction: [0%, 100%]}
        """
    )
    names = [step.name for step in cfg.steps]
    assert names == [
        "base",
        "sweep-blocksize=4KiB-iodepth=1",
        "sweep-blocksize=4KiB-iodepth=32",
        "sweep-blocksize=64KiB-iodepth=1",
        "sweep-blocksize=64KiB-iodepth=32",
        "all-read_fraction=0%",
        "all-read_fraction=100%",
    ]
    assert [step.index for step in cfg.steps] == list(range(7))
    assert {step.source_index for step in cfg.steps[1:5]} == {1}
    sweep = cfg.steps[1:5]
    got = [(s.workloads[1].blocksize_bytes, s.workloads[1].iodepth) for s in sweep]
    assert got == [(4096, 1), (4096, 32), (65536, 1), (65536, 32)]
    # the sweep edits only the workload the step names; 'other' is untouched
    assert all(s.workloads[0] == cfg.steps[0].workloads[0] for s in sweep)
    assert sweep[0].for_values == (("blocksize", "4KiB"), ("iodepth", "1"))
    assert [c.action for c in sweep[0].changes] == ["create", "edit"]
    assert [(c.action, c.source) for c in sweep[1].changes] == [("edit", "for")]
    # without entries, the sweep applies to every workload in force
    last = cfg.steps[6]
    assert [w.read_fraction for w in last.workloads] == [1.0, 1.0]
    assert [w.read_fraction for w in cfg.steps[5].workloads] == [0.0, 0.0]
    # the last combination persists
    assert (last.workloads[1].blocksize_bytes, last.workloads[1].iodepth) == (65536, 32)


def test_for_with_name_only_entry_targets_that_workload() -> None:
    cfg = parse_steps(
        """\
        - name: make
          workloads:
            - {name: a, iosequencer: sequential}
            - {name: b, iosequencer: sequential}
        - name: sw
          workloads: [{name: b}]
          for: {iops: [100, max]}
        """
    )
    step = cfg.steps[1]
    assert step.name == "sw-iops=100"
    assert [w.iops for w in step.workloads] == ["max", 100.0]
    assert [w.iops for w in cfg.steps[2].workloads] == ["max", "max"]


def test_iops_curve_expansion() -> None:
    cfg = parse_steps(
        """\
        - name: curve
          workloads: [{name: w, iosequencer: random_steady, iops: 500}]
          iops_curve: [10%, 0.5, 90%]
          measure: {focus_rollup: host}
        """
    )
    assert [step.name for step in cfg.steps] == [
        "curve-iops=max", "curve-iops=10%", "curve-iops=50%", "curve-iops=90%",
    ]  # fmt: skip
    first = cfg.steps[0]
    assert first.iops_curve is not None and first.iops_curve.fraction is None
    assert first.workloads[0].iops == "max"
    assert [c.source for c in first.changes] == ["workloads", "iops_curve"]
    points = [step.iops_curve for step in cfg.steps[1:]]
    assert [p.fraction for p in points if p] == [0.1, 0.5, 0.9]
    assert {(p.max_step, p.rollup) for p in points if p} == {("curve-iops=max", "host")}


def test_measure_accuracy_defaults_and_values() -> None:
    cfg = parse_steps(
        """\
        - name: a
          workloads: [{name: w, iosequencer: random_steady}]
          measure: {}
        - name: b
          measure:
            focus_metric: service_time_p99_9_ms
            accuracy: 2%
            confidence: 0.99
            min_measure_seconds: 10
            ramp_seconds: 4
            autocorrelation: 2
            timeout_seconds: 5m
        """
    )
    a, b = (step.measure for step in cfg.steps)
    assert a is not None and b is not None
    assert (a.focus_rollup, a.focus_metric, a.timeout.requested_s) == ("all", "IOPS", 600.0)
    assert a.criterion == AccuracyCriterion(0.05, 0.95, a.criterion.min_measure)  # type: ignore[union-attr]
    assert isinstance(a.criterion, AccuracyCriterion) and a.criterion.min_measure.subintervals == 60
    assert (a.criterion.ramp.subintervals, a.criterion.autocorrelation) == (0, "estimate")
    assert cfg.steps[0].measure_time is None
    assert isinstance(b.criterion, AccuracyCriterion)
    assert (b.criterion.accuracy, b.criterion.confidence) == (0.02, 0.99)
    assert (b.criterion.min_measure.subintervals, b.timeout.subintervals) == (10, 300)
    assert (b.criterion.ramp.subintervals, b.criterion.autocorrelation) == (4, 2.0)


def test_measure_fio_criteria() -> None:
    cfg = parse_steps(
        """\
        - name: a
          workloads: [{name: w, iosequencer: random_steady}]
          measure:
            focus_metric: read_response_time_p99_ms
            criterion: fio
            criteria: ["iops_slope:0.5%", {type: deviation, limit: 0.2}, "bw:5%"]
            window_seconds: 30
            ramp_seconds: 2.5
        """
    )
    measure = cfg.steps[0].measure
    assert measure is not None and isinstance(measure.criterion, FioCriteria)
    kinds = [(c.type, c.metric, c.check, str(c.limit)) for c in measure.criterion.criteria]
    assert kinds == [
        ("iops_slope", "IOPS", "slope", "0.5%"),
        ("deviation", "read_response_time_p99_ms", "deviation", "0.2"),
        ("bw", "MB_per_s", "deviation", "5%"),
    ]
    assert (measure.criterion.window.subintervals, measure.criterion.ramp.subintervals) == (30, 3)


def test_dfc_and_edit_rollup() -> None:
    text = HEAD.replace(
        "luns:", "rollups: [{type: host, quantity: 1, max_droop: 10%}, vendor+model]\nluns:"
    )
    cfg = parse(
        text
        + textwrap.dedent(
            """\
            steps:
              - name: s
                workloads: [{name: w, iosequencer: random_steady}]
                dfc: {focus_rollup: host, focus_metric: service_time_p99_ms, target: 2,
                      low_iops: 100, high_iops: 1e5, gains: {kp: 0.5, ki: 0.1}}
                edit_rollup:
                  - {instance: "host=localhost", total_iops: 5000, blocksize: 8KiB}
                  - {instance: "vendor+model=ACME+X1", iodepth: 8}
                  - {instance: all, total_iops: max}
            """
        )
    )
    assert cfg.rollup("host").quantity == 1 and cfg.rollup("host").max_droop == pytest.approx(0.1)
    step = cfg.steps[0]
    assert step.dfc is not None
    assert (step.dfc.focus_rollup, step.dfc.target, step.dfc.low_iops, step.dfc.high_iops) == (
        "host", 2.0, 100.0, 100000.0,
    )  # fmt: skip
    assert (step.dfc.gains.kp, step.dfc.gains.ki, step.dfc.gains.kd) == (0.5, 0.1, None)
    assert step.dfc.window is None  # the controller acts every subinterval
    first, second, third = step.edit_rollup
    assert (first.instance, first.total_iops, first.settings.blocksize_bytes) == (
        "host=localhost",
        5000.0,
        8192,
    )
    assert (second.rollup, second.value, second.settings.iodepth) == (
        "vendor+model",
        ("ACME", "X1"),
        8,
    )
    assert (third.instance, third.total_iops) == ("all", "max")


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("ATA*", "ATA", True),
        ("ATA*", "ATAx", True),
        ("ATA", "SCSI", False),
        ("/dev/loop*", "/dev/loop3", True),
        ("*", None, False),
        (False, False, True),
        (False, 0, True),
        (False, "0", True),
        (True, "0", False),
        (True, 1, True),
        (512, 512, True),
        (512, "512", True),
        (512, True, False),
    ],
)
def test_attribute_match(pattern: str | int | bool, value: object, expected: bool) -> None:
    assert AttributeMatch("k", pattern).matches(value) is expected


def test_lun_choice_and_extent() -> None:
    lun = {"host": "h1", "lun": "/dev/sdb", "vendor": "ACME"}
    assert LunChoice().matches(lun)
    assert LunChoice(every=False, paths=("/dev/sd*",)).matches(lun)
    assert not LunChoice(every=False, paths=("/dev/loop*",)).matches(lun)
    both = (AttributeMatch("host", "h*"), AttributeMatch("vendor", "ACME"))
    assert LunChoice(every=False, attributes=both).matches(lun)
    assert not LunChoice(every=False, attributes=(AttributeMatch("model", "*"),)).matches(lun)
    assert str(LunExtent(0.5, "fraction")) == "50%"
    assert str(LunExtent(4096.0, "bytes")) == "4KiB"


def test_error_is_one_line_with_file_line_and_key_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_steps(
            """\
            - name: s
              workloads:
                - {name: w, iosequencer: random_steady}
            - name: t
              workloads:
                - {name: w, blocksize: 1000}
            """
        )
    error = info.value
    assert str(error) == (
        "test.yaml:12: steps[1].workloads[0].blocksize: "
        "must be a positive multiple of 512 (got 1000)"
    )
    assert (error.file, error.line, error.key_path) == (
        "test.yaml",
        12,
        "steps[1].workloads[0].blocksize",
    )


def test_file_lun_per_host_placeholder() -> None:
    cfg = parse(
        """\
        test: t
        hosts: ["h[1-2]", localhost]
        luns:
          - {hosts: "h[1-2]", file: "/dev/shm/x-${host}.lun", size: 1MiB, create: true}
          - {hosts: localhost, file: "${output_root}/shared.lun"}
        steps: [{name: s, workloads: [{name: w, iosequencer: sequential}]}]
        """
    )
    assert [(lun.hosts, lun.file) for lun in cfg.luns] == [
        (("h1",), "/dev/shm/x-h1.lun"),
        (("h2",), "/dev/shm/x-h2.lun"),
        (("localhost",), "/base/ivypy-output/shared.lun"),
    ]
    assert all(lun.line == 4 for lun in cfg.luns[:2])


def test_focus_metric_catalog() -> None:
    expected = {
        "IOPS",
        "MB_per_s",
        "service_time_mean_ms",
        "service_time_p99_ms",
        "response_time_p99_ms",
        "service_time_p99_9_ms",
        "read_IOPS",
        "write_MB_per_s",
        "write_service_time_p99_ms",
        "random_response_time_max_ms",
        "sequential_IOPS",
    }
    assert expected <= FOCUS_METRICS
    assert "service_time_p99.9_ms" not in FOCUS_METRICS
    assert "iops" not in FOCUS_METRICS


def test_dfc_window_is_rounded_up_to_whole_subintervals() -> None:
    cfg = parse(HEAD + textwrap.dedent(
        """\
        steps:
          - name: s
            workloads: [{name: w, iosequencer: random_steady}]
            dfc: {focus_metric: service_time_p99_ms, target: 2, low_iops: 100,
                  high_iops: 1e5, window_seconds: 2500ms}
        """))
    window = cfg.steps[0].dfc.window  # type: ignore[union-attr]
    assert cfg.subinterval_seconds == 1.0
    assert window is not None and window.requested_s == 2.5
    assert (window.subintervals, window.rounded_s) == (3, 3.0)
