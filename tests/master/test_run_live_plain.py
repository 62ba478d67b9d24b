"""``ivypy run --plain --live-rollup TYPE``: the lines each subinterval (total row, the chosen
rollup's rows, DFC's moves), the end-of-run table, their numbers against the run's CSV files;
and an unknown rollup type refused before any host. The CLI runs in this process on in-memory
hosts: what is tested is what the console shows of the run (a terminal's live view is
tests/master/test_run_live_terminal.py's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.master.memhosts import MemoryHosts, run_cli
from tests.master.runhelp import rows, write_config

TEST = """\
test: liveplain
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {hosts: localhost, file: "${output_root}/lun-p", size: 16MiB, create: true,
     allow_write: true}
steps:
  - name: fixed
    workloads:
      - {name: a, iosequencer: random_steady, blocksize: 4KiB, iodepth: 4, iops: 400,
         read_fraction: 100%}
      - {name: b, iosequencer: random_steady, blocksize: 8KiB, iodepth: 4, iops: 200,
         read_fraction: 100%}
    warmup_seconds: 0.5
    measure_seconds: 1.5
  - name: held
    dfc: {focus_rollup: host, focus_metric: service_time_p99_ms, target: 10000,
          low_iops: 100, high_iops: 2000}
    warmup_seconds: 0
    measure_seconds: 1.5
"""
NUMBER = r"[\d,.]+|-"
ROW = (rf"({NUMBER}) IOPS ({NUMBER}) MB/s service p50 ({NUMBER}) p99 ({NUMBER}) ms response "
       rf"p50 ({NUMBER}) p99 ({NUMBER}) ms host CPU ({NUMBER})% ivypy CPU ({NUMBER})%")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _shows(text: str, value: float) -> bool:
    """``text`` is ``value`` as shown: within half its last digit (and what the CSV file's
    own rounding of ``value`` may add)."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(_f(text) - value) <= 0.5 * 10.0 ** -decimals + 1e-6 * max(1.0, abs(value))


def _run_plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str], text: str, status: int) -> list[str]:
    """``ivypy run --plain --live-rollup workload`` of the test ``text``, which must exit with
    ``status``: the lines it printed."""
    cfg = write_config(tmp_path, text)
    got = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--plain",
                   "--live-rollup", "workload"], monkeypatch)
    stdout, stderr = capsys.readouterr()
    assert got == status, stdout[-3000:] + stderr[-3000:]
    return stdout.splitlines()


def test_plain_lines_and_the_end_of_run_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # step 1's DFC cannot reach its 10 s target: pinned at high_iops, it is invalid (exit 1)
    out = _run_plain(tmp_path, monkeypatch, capsys, TEST, 1)
    (folder,) = (tmp_path / "liveplain").iterdir()

    # step 0: a total line per subinterval, then a line per workload
    totals = [m for x in out if (m := re.match(
        rf"  \[subinterval (\d+) of (\d+), (\w+), \d+ s left\] total: {ROW}$", x))]
    # subinterval k as the CSV files number it (from 0), of the step's 4
    assert [(m[1], m[2], m[3]) for m in totals[:4]] == [
        ("0", "4", "warmup"), ("1", "4", "measurement"), ("2", "4", "measurement"),
        ("3", "4", "measurement")]
    first = out.index(totals[0][0])
    for i, name in enumerate(("a", "b")):
        # the LUN by its file's name (the CSV files keep its path)
        m = re.match(rf"    workload=localhost:lun-p:{name}: {ROW}$", out[first + 1 + i])
        assert m, out[first: first + 3]
    # the total line's numbers are the all rollup's row and cpu.csv of that subinterval
    step0 = folder / "step0000-fixed"
    all_rows = rows(step0 / "all" / "all.csv")
    cpu = rows(step0 / "cpu.csv")
    for m, row, c in zip(totals[:4], all_rows, cpu, strict=False):
        assert _shows(m[4], float(row["IOPS"]))
        assert _shows(m[8], float(row["response_time_p50_ms"]))
        assert _shows(m[10], float(c["busy_pct"]))  # host CPU: the host's busy %
        cores = len(c["per_core_busy_pct"].split())
        ivypy = 100 * (float(c["slave_user_s"]) + float(c["slave_system_s"])) / (0.5 * cores)
        assert _shows(m[11], ivypy)  # ivypy CPU: the slave's seconds on all cores
        # (not compared with the host's: the kernel charges a process its exact run time but
        # a CPU's busy time by the tick, so over half a second at a few % busy the slave's
        # share read 13 % against the host's 4.4 % once)

    # step 1 runs DFC: its move after each subinterval, by focus instance
    dfc = [x for x in out if x.startswith("    DFC localhost: service_time_p99_ms ")]
    moves = rows(folder / "step0001-held" / "dfc.csv")
    assert len(dfc) == len(moves) > 0
    m = re.fullmatch(r"    DFC localhost: service_time_p99_ms ([\d,.]+) \(target 10,000\.000\) "
                     r"at ([\d,]+) IOPS, set ([\d,]+) IOPS", dfc[0])
    assert m, dfc[0]
    assert _shows(m[2], float(moves[0]["iops_in_force"]))
    assert _shows(m[3], float(moves[0]["new_iops"]))

    # the end-of-run table: each step's total and its workloads, with valid
    top = out.index("== all steps")
    table = [x.split() for x in out[top + 2:] if not x.startswith("ivypy:")]
    summary = {(r["step_name"], r["rollup_type"], r["rollup_instance"]): r
               for r in rows(folder / "summary.csv")}
    assert [(t[1], t[2]) for t in table] == [
        ("fixed", "total"), ("fixed", "workload=localhost:lun-p:a"),
        ("fixed", "workload=localhost:lun-p:b"),
        ("held", "total"), ("held", "workload=localhost:lun-p:a"),
        ("held", "workload=localhost:lun-p:b")]
    for t in table:
        key = (t[1], "all", "all") if t[2] == "total" else (
            t[1], "workload", _wid(summary, t[1], t[2][-1]))
        s = summary[key]
        assert _shows(t[3], float(s["IOPS"]))
        assert _shows(t[7], float(s["response_time_p50_ms"]))
        assert _shows(t[8], float(s["response_time_p99_ms"]))
        assert t[9] == ("yes" if t[1] == "fixed" else "NO")
        if t[1] == "held":  # the reason, as summary.csv has it
            assert "pinned at high_iops" in s["invalid_reason"]
            assert " ".join(t[10:]) == s["invalid_reason"]


def test_a_rollup_of_more_instances_than_shown_is_summarised_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Twelve workloads by workload: each subinterval the highest, mean and lowest of all
    twelve (their rows in the CSV files), then the first eight, then how many more."""
    out = _run_plain(tmp_path, monkeypatch, capsys, TEST.split("steps:")[0].replace(
        "liveplain", "many") + "steps:\n  - name: many\n    workloads:\n" + "".join(
            f"      - {{name: w{i:02d}, iosequencer: random_steady, iops: {50 * (i + 1)}}}\n"
            for i in range(12)) + "    warmup_seconds: 0\n    measure_seconds: 1\n", 0)
    (folder,) = (tmp_path / "many").iterdir()
    per_k: dict[int, list[float]] = {}
    for f in (folder / "step0000-many" / "workload").glob("*.csv"):
        if f.name != "summary.csv":
            for r in rows(f):
                per_k.setdefault(int(r["subinterval"]), []).append(float(r["IOPS"]))
    heads = [i for i, x in enumerate(out) if x.startswith("  [subinterval ")]
    assert len(heads) == len(per_k) == 2
    for k, at in enumerate(heads):
        got = [re.match(rf"    workload (\w+) of 12: {ROW}$", x) for x in out[at + 1:at + 4]]
        assert [m[1] for m in got if m] == ["highest", "mean", "lowest"], out[at:at + 4]
        iops = per_k[k]
        for m, want in zip(got, (max(iops), sum(iops) / len(iops), min(iops)), strict=True):
            assert m is not None and _shows(m[2], want), (m, want)
        assert [x.split(":")[2] for x in out[at + 4:at + 12]] == [
            f"w{i:02d}" for i in range(8)], out[at + 4:at + 12]
        assert out[at + 12] == "    (+4 more workload)"


def _wid(summary: dict[tuple[str, str, str], dict[str, str]], step: str, name: str) -> str:
    (wid,) = [k[2] for k in summary if k[:2] == (step, "workload") and k[2].endswith(":" + name)]
    return wid


def test_an_unknown_live_rollup_is_refused_before_any_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, TEST)
    hosts = MemoryHosts()
    status = run_cli(["run", str(cfg), "--output-root", str(tmp_path), "--live-rollup",
                      "vendor"], monkeypatch, hosts)
    out, err = capsys.readouterr()
    assert status == 2
    assert err.strip() == (f"ivypy: {cfg}: --live-rollup: unknown rollup type 'vendor' "
                           "(the test's: all, host, lun, workload)")
    assert out == ""
    assert not (tmp_path / "liveplain").exists() and not hosts.hosts  # no host contacted
