"""``master.config.rolluptypes``: the one check that a name is one of the test's rollup types,
its wording, and every place that says it (each with its own key path, file and line).

It also shows why the run has no check of its own: every ``measure`` and ``dfc``
``focus_rollup`` the config lets through (any step, a ``for:`` sweep's, an ``iops_curve``'s)
is one of the rollups the run computes for the step (``Run._focus_instances``), and any other
is refused while the test is loaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config.metrics import check_metric_rollups
from master.config.rolluptypes import rollup_type_problem
from master.live.rows import check_live_rollup
from protocol.errors import ConfigError
from tests.master.memhosts import MemoryHosts, memory_config, memory_run

BUILTIN = ("all", "host", "lun", "workload")
THE_TESTS = "(the test's: all, host, lun, workload)"


@pytest.mark.parametrize(("name", "types", "says"), [
    ("all", BUILTIN, None),
    ("workload", BUILTIN, None),
    ("vendor+model", (*BUILTIN, "vendor+model"), None),
    ("rack", BUILTIN, f"unknown rollup type 'rack' {THE_TESTS}"),
    ("hots", BUILTIN, f"unknown rollup type 'hots': did you mean 'host'? {THE_TESTS}"),
    ("Host", BUILTIN, f"unknown rollup type 'Host': did you mean 'host'? {THE_TESTS}"),
    ("vendor", (*BUILTIN, "vendor+model"), "unknown rollup type 'vendor': did you mean "
     "'vendor+model'? (the test's: all, host, lun, workload, vendor+model)"),
    ("model+vendor", (*BUILTIN, "vendor+model"), "unknown rollup type 'model+vendor' "
     "(the test's: all, host, lun, workload, vendor+model)"),  # the order is the type's
    ("", BUILTIN, f"unknown rollup type '' {THE_TESTS}"),
])
def test_rollup_type_problem(name: str, types: tuple[str, ...], says: str | None) -> None:
    assert rollup_type_problem(name, types) == says


def test_metric_rollups_name_the_first_unknown_type() -> None:
    check_metric_rollups(("host", "all"), BUILTIN)
    check_metric_rollups(("rack",), None)  # the test's types not known: not checked
    with pytest.raises(ValueError, match=r"^unknown rollup type 'rack' \(the test's: "):
        check_metric_rollups(("host", "rack", "row"), BUILTIN)


def test_live_rollup_names_its_option_and_file() -> None:
    check_live_rollup("lun", BUILTIN, "t.yaml")
    with pytest.raises(ConfigError) as err:
        check_live_rollup("rack", BUILTIN, "t.yaml")
    assert str(err.value) == f"t.yaml: --live-rollup: unknown rollup type 'rack' {THE_TESTS}"


HEAD = """\
test: t
subinterval_seconds: 1
hosts: [localhost]
luns:
  - {file: "${output_root}/lun0", size: 1MiB, create: true}
"""
W = "    workloads: [{name: w, iosequencer: random_steady, iops: 100}]\n"
ONE_STEP = HEAD + "steps:\n  - name: s\n" + W
DFC = "{focus_metric: IOPS, target: 50, low_iops: 10, high_iops: 1000, focus_rollup: %s}"

#: a test in which ``%s`` is a rollup type a user names, and where its error is said
PLACES = [
    (ONE_STEP + "    measure: {focus_rollup: %s}\n",
     "9: steps[0].measure.focus_rollup"),
    (ONE_STEP + "    dfc: " + DFC + "\n",
     "9: steps[0].dfc.focus_rollup"),
    (HEAD + "steps:\n  - name: a\n" + W + "  - name: s\n    measure_seconds: 2\n"
     "    dfc: " + DFC + "\n",
     "11: steps[1].dfc.focus_rollup"),
    (ONE_STEP + "    for: {iodepth: [1, 2]}\n"
     "    measure: {focus_rollup: %s}\n",
     "10: steps[0].measure.focus_rollup"),
    (ONE_STEP + "    iops_curve: [50%%]\n"
     "    measure: {focus_rollup: %s}\n",
     "10: steps[0].measure.focus_rollup"),
    (ONE_STEP + "    edit_rollup:\n"
     "      - {instance: '%s=localhost', total_iops: 100}\n",
     "10: steps[0].edit_rollup[0].instance"),
    (ONE_STEP + "thresholds:\n"
     "  - {expr: 'IOPS > 1', rollup: %s}\n",
     "10: thresholds[0].rollup"),
    ("metrics: {listen: '127.0.0.1:0', rollups: [%s]}\n" + ONE_STEP,
     "1: metrics.rollups"),
]


@pytest.mark.parametrize(("text", "where"), PLACES, ids=[where for _, where in PLACES])
def test_each_place_says_the_same_with_its_key_path_and_line(
        tmp_path: Path, text: str, where: str) -> None:
    memory_config(tmp_path, text % "host")  # a rollup type of the test: accepted
    with pytest.raises(ConfigError) as err:
        memory_config(tmp_path, text % "rack")
    assert str(err.value) == (f"{tmp_path / 'test.yaml'}:{where}: unknown rollup type 'rack' "
                              f"{THE_TESTS}")


#: ``rollups:`` and the types it adds to the built-in ones
DECLARED = [("", ()), ("rollups: [host]\n", ()), ("rollups: [engine]\n", ("engine",)),
            ("rollups: [lun, engine+iodepth, {type: host, quantity: 1}]\n", ("engine+iodepth",))]


@pytest.mark.parametrize(("rollups", "declared"), DECLARED, ids=lambda v: str(v).strip())
@pytest.mark.parametrize("text", [text for text, _ in PLACES[:5]],
                         ids=[where for _, where in PLACES[:5]])
def test_every_focus_rollup_the_config_accepts_is_one_the_run_computes(
        tmp_path: Path, rollups: str, declared: tuple[str, ...], text: str) -> None:
    """Why ``Run._focus_instances`` checks no focus rollup: the config accepts only the test's
    rollup types (above), and the run computes every one of them for every step."""
    for name in (*BUILTIN, "engine", "engine+iodepth", "iodepth"):
        if name not in (*BUILTIN, *declared):
            with pytest.raises(ConfigError, match="unknown rollup type"):
                memory_config(tmp_path, rollups + text % name)
            continue
        cfg = memory_config(tmp_path, rollups + text % name)
        run = memory_run(cfg, MemoryHosts())
        assert [r.type for r in run.rollups] == [*BUILTIN, *declared]
        assert {r.type for r in run.rollups} == {r.type for r in cfg.rollups}
        blocks = [(step, block) for step in cfg.steps for block in (step.measure, step.dfc)
                  if block is not None]
        assert blocks
        for step, block in blocks:
            assert block.focus_rollup == name
            assert name in run._focus_instances(step, [])
