"""``gather:`` command sources through a whole run on a file LUN (in-memory hosts,
``master.hosts.memory``: the gather commands are real processes of the master's, as in any
run; the slave's I/O is synthetic): a script with known
values lands in the right subintervals and files (its counter as a rate), a source that hangs,
one that exits non-zero and one that prints garbage (each ``optional``: their first sample
fails too) are recorded missing with events while the run ends on time, and ``config_command``
output lands in the run's config CSVs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.master.memhosts import MemoryHosts, execute, memory_config, memory_run
from tests.master.runhelp import rows

FIXTURES = Path(__file__).parent / "fixtures" / "gather"
N = 4  # measurement subintervals of 0.5 s

TEST = f"""\
test: gcmd
subinterval_seconds: 0.5
hosts: [localhost]
luns:
  - {{file: "${{output_root}}/lun0", size: 16MiB, create: true}}
gather:
  - {{name: cnt, command: [{sys.executable}, {FIXTURES / 'counting.py'}, STATE],
     counters: [ticks], timeout: 0.45s,
     config_command: [{sys.executable}, {FIXTURES / 'fake_array.py'}, config, "1:a", "2:b"]}}
  - {{name: hang, command: [sleep, "31.25"], timeout: 0.2s, optional: true}}
  - {{name: fail, command: [sh, -c, "echo oops >&2; exit 3"], optional: true}}
  - {{name: junk, command: [sh, -c, "echo 'this is not a 4-tuple'; echo '{{broken json'"],
     optional: true}}
steps:
  - name: s
    workloads:
      - {{name: w, iosequencer: random_steady, iops: 100}}
    warmup_seconds: 0
    measure_seconds: {N * 0.5}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("gcmd")
    t0 = time.monotonic()
    result = execute(memory_run(memory_config(tmp, TEST.replace("STATE", str(tmp / "calls"))),
                                MemoryHosts()), timeout_s=200,
                     warp=False)  # its command counts ticks of the real clock
    assert result.exit_code == 0, result.message
    assert time.monotonic() - t0 < 200
    return Path(result.folder)


LATE = "late: still running when the subinterval was recorded"


def _cnt_statuses(folder: Path) -> dict[int, str]:
    """The ``cnt`` source's status per subinterval: ``ok``, or late. Its script is a Python
    start-up, started twice its longest recent duration before the boundary; a start-up
    slower than that (a busy machine: 60-230 ms seen) is in after the subinterval was
    recorded, a missing cell (the design: a gather never holds up a subinterval)."""
    got = {int(r["subinterval"]): r["gather_status"]
           for r in rows(folder / "step0000-s/interlock.csv") if r["gather_source"] == "cnt"}
    assert sorted(got) == list(range(N))
    assert all(s in ("ok", LATE) for s in got.values()), got
    assert "ok" in got.values(), got  # the source works: some sample landed
    return got


def test_known_values_land_in_their_subintervals(folder: Path) -> None:
    status = _cnt_statuses(folder)
    box = rows(folder / "step0000-s/gather/cnt/box.csv")
    assert list(box[0]) == ["subinterval", "phase", "element_instance", "calls", "ticks"]
    # a late sample is no row: its subinterval has none
    assert [(int(r["subinterval"]), r["element_instance"]) for r in box] == [
        (k, e) for k in range(N) if status[k] == "ok" for e in ("b1", "b2")]
    # when each call read its clock, and when the master took each subinterval's sample
    reads_ns = [int(x) for x in (folder.parents[2] / "calls.reads").read_text().split()]
    at_us = {int(r["subinterval"]): (int(r["subinterval"]) + 1) * 0.5e6
             + float(r["gather_sample_after_boundary_us"])
             for r in rows(folder / "step0000-s/interlock.csv")
             if r["gather_source"] == "cnt" and r["gather_status"] == "ok"}
    for r in box:
        k = int(r["subinterval"])
        # call 1 is the run's first sample (its preflight), call 2 times the source, call 3
        # is the counters' base just before the step's start, call k + 4 ends just before
        # k's end (a late call too: it ran, only after k was recorded)
        want_calls = (k + 4) * (1 if r["element_instance"] == "b1" else 10)
        assert float(r["calls"]) == want_calls and r["phase"] == "measurement"
        # ticks count 500 (b2: 1000) per second of the master's clock: the rate is the ticks
        # between two calls' reads over the master's times of the two samples (each taken at
        # the call's end, a Python exit after its read: tens of ms that vary under load)
        per_s = 500 if r["element_instance"] == "b1" else 1000
        if k == 0:  # its base's sample time is not in interlock.csv
            assert float(r["ticks"]) == pytest.approx(per_s, rel=0.25), r
            continue
        if k - 1 not in at_us:
            # its base is the late sample of k - 1, whose time no row holds: a rate all
            # the same, over however long that late call's exit took
            assert float(r["ticks"]) > 0, r
            continue
        read_s = (reads_ns[k + 3] - reads_ns[k + 2]) / 1e9
        want = per_s * read_s / ((at_us[k] - at_us[k - 1]) / 1e6)
        assert float(r["ticks"]) == pytest.approx(want, rel=1e-4), (r, want)
        assert want == pytest.approx(per_s, rel=0.25)


def test_failures_are_missing_cells_with_events_and_the_run_ends_on_time(folder: Path) -> None:
    il = [r for r in rows(folder / "step0000-s/interlock.csv") if r["gather_source"]]
    by = {(r["gather_source"], int(r["subinterval"])): r for r in il}
    assert sorted(by) == sorted((s, k) for s in ("cnt", "hang", "fail", "junk")
                                for k in range(N))
    for source, why in (("fail", "failed: sh exited with status 3: oops"),
                        ("junk", "failed: gave no readings (line 1")):
        # a sample starts just before the boundary: on a busy machine the shell may not be
        # done when the subinterval is recorded (seen once in the suite's parallel part);
        # that is a missing cell too, named so
        statuses = [by[(source, k)]["gather_status"] for k in range(N)]
        assert all(s.startswith(why) or s == LATE for s in statuses), (source, statuses)
        assert any(s.startswith(why) for s in statuses), (source, statuses)
    cnt = _cnt_statuses(folder)
    for k in range(N):
        if cnt[k] == "ok":
            # taken just before k's end (or just after, before k was recorded): k's, not k+1's
            assert float(by[("cnt", k)]["gather_sample_after_boundary_us"]) < 0.1e6
        hang = by[("hang", k)]["gather_status"]
        assert hang in ("failed: did not finish within its timeout of 0.2s (its process group "
                        "was killed)", LATE)
        if hang.startswith("failed"):
            assert float(by[("hang", k)]["gather_duration_us"]) < 0.2e6 + 0.15e6
    assert not (folder / "step0000-s/gather/hang").exists()
    events = [e for e in rows(folder / "events.csv") if e["kind"] == "gather"]
    for source in ("hang", "fail", "junk"):
        ks = sorted(int(e["subinterval"]) for e in events
                    if f"gather {source}:" in e["message"] and e["subinterval"])
        assert ks == list(range(N)), source
        # and its first sample's, before any step: optional, so the run went on
        (first,) = [e for e in events if e["message"].startswith(
            f"gather {source}: its first sample failed (")]
        assert first["level"] == "WARNING" and first["step"] == ""
        assert first["message"].endswith("); optional, so the run goes on without it")
    # every subinterval recorded on time: the step's rows are whole, no host was late
    assert [int(r["subinterval"]) for r in rows(folder / "step0000-s/all/all.csv")] == list(
        range(N))
    # the hanging source's processes are gone (its group is killed at the timeout)
    left = subprocess.run(["pgrep", "-f", "^sleep 31.25$"], capture_output=True, text=True)
    assert left.stdout.split() == []


def test_config_command_output_is_the_config_csv(folder: Path) -> None:
    got = rows(folder / "gather/cnt/config/LDEV.csv")
    assert got == [
        {"element_instance": "00:01", "lun_name": "a", "pool": "pool1"},
        {"element_instance": "00:02", "lun_name": "b", "pool": "pool0"},
        {"element_instance": "00:99", "lun_name": "not-a-lun", "pool": "pool1"},
    ]
