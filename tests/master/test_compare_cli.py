"""``ivypy compare`` through the command line on written run folders: the exit codes (0 no
condition holds, 1 one holds, 2 wrong arguments or runs that do not match), what stdout and
stderr name, and the csv and json formats read back."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from master.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
HEADER = ("step_number,step_name,rollup_type,rollup_instance,IOPS,MB_per_s,service_time_p50_ms,"
          "service_time_p99_ms,response_time_p99_ms,valid,invalid_reason")
BASE = ["0,rand,all,all,1000,4.096,0.1,0.5,0.9,true,",
        "0,rand,host,h1,1000,4.096,0.1,0.5,0.9,true,",
        "1,seq,all,all,200,25.6,0.2,1.0,1.5,true,"]
NEW = ["0,rand,all,all,500,2.048,0.1,0.55,2.5,false,IOPS 50 % below its setting",
       "0,rand,host,h1,500,2.048,0.1,0.55,2.5,true,",
       "1,seq,all,all,200,25.6,0.2,1.0,1.5,true,",
       "2,extra,all,all,9,1,1,1,1,true,"]


def folder(root: Path, name: str, rows: list[str], header: str = HEADER) -> Path:
    path = root / name
    path.mkdir()
    (path / "summary.csv").write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return folder(tmp_path, "base", BASE), folder(tmp_path, "new", NEW)


def compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        status = cli.main(["compare", *args])
    except SystemExit as exc:  # argparse's own refusals
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("conditions, status, named", [
    ([], 0, []),
    (["IOPS < -10%"], 1, ["FAIL IOPS < -10%: step rand, all all: 1,000 -> 500 (-50.0 %)"]),
    (["IOPS < -60%"], 0, []),
    (["IOPS <= -50%"], 1, ["FAIL IOPS <= -50%: step rand"]),
    (["service_time_p99_ms > +5%"], 1, ["FAIL service_time_p99_ms > +5%: step rand, all all"]),
    (["service_time_p99_ms > +10%"], 0, []),  # exactly +10 %
    (["response_time_p99_ms > 2"], 1, ["FAIL response_time_p99_ms > 2: step rand, all all: "
                                       "0.9 -> 2.5 (+177.8 %)"]),
    (["service_time_p99_ms > 2"], 0, []),  # new values 0.55 and 1.0 ms
    (["MB_per_s < -10%", "IOPS > +1%"], 1, ["FAIL MB_per_s < -10%: step rand, all all"]),
    (["errors > 0"], 2, []),  # a metric the runs do not have
])
def test_exit_codes_of_conditions(capsys: pytest.CaptureFixture[str], runs: tuple[Path, Path],
                                  conditions: list[str], status: int, named: list[str]) -> None:
    args = [f"--fail-if={c}" for c in conditions]
    got, out, err = compare(capsys, str(runs[0]), str(runs[1]), *args)
    assert got == status, out + err
    failing = [line for line in err.splitlines() if "FAIL" in line]
    assert len(failing) == len(named)
    for line, text in zip(failing, named, strict=True):
        assert line.startswith(f"ivypy compare: {text}") and text in out


@pytest.mark.parametrize("args, why", [
    (["--fail-if", "IOPS < 10%"], "a relative change needs its sign"),
    (["--fail-if", "IOPS"], "no comparison"),
    (["--format", "xml"], "invalid choice: 'xml'"),
    (["--rollup", "lun"], "neither run has rollup type 'lun' (they have: all, host)"),
    (["--metric", "IOPs"], "the base run has no metric 'IOPs'"),
    (["--metric", " , "], "no metric named in ' , '"),
    (["--metric", "invalid_reason"], "the base run has no metric 'invalid_reason'"),
    (["--fail-if", "p99 > 2"], "the base run has no metric 'p99'"),
])
def test_wrong_arguments_exit_2_naming_what(capsys: pytest.CaptureFixture[str],
                                            runs: tuple[Path, Path], args: list[str],
                                            why: str) -> None:
    status, out, err = compare(capsys, str(runs[0]), str(runs[1]), *args)
    assert status == 2 and why in err and out == "", err


def test_runs_that_do_not_match_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       runs: tuple[Path, Path]) -> None:
    other = folder(tmp_path, "other", ["0,else,all,all,1,1,1,1,1,true,"])
    status, _, err = compare(capsys, str(runs[0]), str(other))
    assert status == 2 and "no step and all instance is in both runs" in err
    status, _, err = compare(capsys, str(runs[0]), str(tmp_path / "missing"))
    assert status == 2 and "missing: no such run folder" in err
    status, _, err = compare(capsys, str(runs[0]), str(runs[1]), "--rollup", "host",
                             "--fail-if", "IOPS < -10%")
    assert status == 1 and "FAIL IOPS < -10%: step rand, host h1" in err


def test_text_table(capsys: pytest.CaptureFixture[str], runs: tuple[Path, Path]) -> None:
    status, out, _ = compare(capsys, str(runs[0]), str(runs[1]), "--metric", "IOPS,MB_per_s",
                             "--fail-if", "IOPS < -10%")
    assert status == 1
    lines = out.splitlines()
    assert lines[:3] == [f"base:   {runs[0]}", f"new:    {runs[1]}", "rollup: all"]
    table = lines[4:9]
    assert table[0].split() == ["step", "instance", "valid", "b/n", "metric", "base", "new",
                                "change", "change", "%"]
    assert table[1].split() == ["rand", "all", "yes/NO", "IOPS", "1,000", "500", "-500",
                                "-50.0", "%", "FAIL", "IOPS", "<", "-10%"]
    assert table[2].split() == ["MB_per_s", "4.096", "2.048", "-2.048", "-50.0", "%"]
    assert table[3].split() == ["seq", "all", "yes/yes", "IOPS", "200", "200", "+0", "+0.0",
                                "%"]
    # the columns line up: each change in % ends where its header does
    assert {line.index(" %") for line in table[1:]} == {table[0].index("change %") + 6}
    assert ("invalid in the new run: step rand, all all: IOPS 50 % below its setting"
            in lines)
    assert "only in the new run: step extra" in lines
    status, out, _ = compare(capsys, str(runs[0]), str(runs[1]), "--fail-if", "IOPS < -60%")
    assert status == 0 and out.splitlines()[-1] == (
        "ok: no --fail-if condition holds (1 condition over 2 all instances)")


def test_csv_and_json(capsys: pytest.CaptureFixture[str], runs: tuple[Path, Path]) -> None:
    args = [str(runs[0]), str(runs[1]), "--fail-if", "IOPS < -10%", "--fail-if",
            "service_time_p99_ms > 0.52"]
    status, out, _ = compare(capsys, *args, "--format", "csv")
    assert status == 1
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["step_name"] for r in rows] == ["rand", "seq"]
    rand = rows[0]
    assert (rand["IOPS_base"], rand["IOPS_new"], rand["IOPS_change"],
            rand["IOPS_change_pct"]) == ("1000", "500", "-500", "-50")
    assert rand["service_time_p99_ms_change"] == "0.05"
    assert (rand["base_valid"], rand["new_valid"]) == ("true", "false")
    assert rand["failed"] == "IOPS < -10%; service_time_p99_ms > 0.52"
    assert rows[1]["failed"] == "service_time_p99_ms > 0.52"
    status, out, _ = compare(capsys, *args, "--format", "json")
    doc = json.loads(out)
    assert status == 1 and doc["failed"] is True and doc["only_in_new"] == ["step extra"]
    assert doc["rows"][0]["metrics"]["IOPS"] == {"base": 1000.0, "new": 500.0,
                                                 "change": -500.0, "change_pct": -50.0,
                                                 "note": ""}
    assert [(f["condition"], f["step_name"], f["rollup_instance"]) for f in doc["failures"]] == [
        ("IOPS < -10%", "rand", "all"), ("service_time_p99_ms > 0.52", "rand", "all"),
        ("service_time_p99_ms > 0.52", "seq", "all")]


def test_empty_cells_and_base_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = folder(tmp_path, "b", ["0,s,all,all,0,0,,,,true,", "1,t,all,all,10,1,1,1,1,true,"])
    new = folder(tmp_path, "n", ["0,s,all,all,50,1,0.1,0.2,0.3,true,",
                                 "1,t,all,all,10,1,1,,1,true,"])
    args = [str(base), str(new), "--fail-if", "IOPS > +5%", "--fail-if",
            "service_time_p99_ms > 0.1"]
    status, out, err = compare(capsys, *args)
    assert status == 1
    assert "FAIL IOPS > +5%: step s, all all: 0 -> 50 (base is 0)" in err
    assert "FAIL service_time_p99_ms > 0.1: step s" in err  # absolute: the base is not needed
    assert "cannot tell service_time_p99_ms > 0.1: step t, all all: no new value" in out
    status, out, _ = compare(capsys, *args, "--format", "json")
    s = json.loads(out)["rows"][0]["metrics"]
    assert s["IOPS"] == {"base": 0.0, "new": 50.0, "change": 50.0, "change_pct": None,
                         "note": "base is 0"}
    assert s["service_time_p99_ms"]["note"] == "no base value"


def test_help_explains_expressions() -> None:
    proc = subprocess.run([sys.executable, "-m", "master", "compare", "--help"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0
    assert '"IOPS < -10%"                 new IOPS more than 10 % below the base\'s' in proc.stdout
    assert "above 2 ms, whatever the base's" in proc.stdout
    assert "2: wrong arguments" in proc.stdout


def test_compare_does_not_load_the_run_loop() -> None:
    code = ("import sys\nfrom master.cli import main as cli\n"
            "try:\n    cli.main(['compare', '--help'])"
            "\nexcept SystemExit:\n    pass\nprint('asyncssh' in sys.modules, "
            "'master.run.lifecycle' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.stdout.strip().splitlines()[-1] == "False False", proc.stdout + proc.stderr


def test_invalid_reason_on_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = folder(tmp_path, "b", ["0,s,all,all,1,1,1,1,1,true,"])
    new = folder(tmp_path, "n", ['0,s,all,all,1,1,1,1,1,false,"measure timed out\nafter 60 s"'])
    status, out, _ = compare(capsys, str(base), str(new))
    assert status == 0
    assert "invalid in the new run: step s, all all: measure timed out after 60 s" in out


def test_a_large_limit_is_named_as_given(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    base = folder(tmp_path, "b", ["0,s,all,all,1234567,1,1,1,1,true,"])
    new = folder(tmp_path, "n", ["0,s,all,all,1234566,1,1,1,1,true,"])
    status, out, err = compare(capsys, str(base), str(new), "--fail-if", "IOPS < 1234567")
    assert status == 1
    assert err == ("ivypy compare: FAIL IOPS < 1234567: step s, all all: 1,234,567 -> "
                   "1,234,566 (-0.0 %)\n") and "1.23457e+06" not in out


def test_a_garbled_or_kept_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                   runs: tuple[Path, Path]) -> None:
    garbled = folder(tmp_path, "g", [BASE[0], '1,seq,all,all,"200' + ",9" * 70000])
    status, out, err = compare(capsys, str(runs[0]), str(garbled))
    assert status == 2 and out == ""
    assert err == f"ivypy: error: {garbled}/summary.csv:3: a garbled row: field larger than " \
        "field limit (131072)\n"
    kept = tmp_path / "base-summary.csv"
    kept.write_bytes((runs[0] / "summary.csv").read_bytes())
    status, out, err = compare(capsys, str(kept), str(runs[1]), "--fail-if", "IOPS < -10%")
    assert status == 1 and out.startswith(f"base:   {kept}\n")
