"""``ivypy run`` ended from outside: a slave killed mid-step, the master killed, Ctrl-C. Each is a
run of the real CLI as a subprocess against a local slave, made once a session and shared with
other test files (tests/master/sharedruns.py), which puts the files that use them on one
xdist worker (tests/conftest.py); the other failures of a run are
tests/master/test_run_failures.py's, free to run on any."""

from __future__ import annotations

from tests.master.runhelp import rows
from tests.master.sharedruns import FAULT_ROWS, SLAVE_GONE_S, FaultRun


def test_slave_killed_mid_step_fails_the_step_naming_the_host(slave_killed_run: FaultRun
                                                              ) -> None:
    run = slave_killed_run
    assert run.returncode == 3, run.stderr
    assert "localhost" in run.stderr
    assert run.took_s < 1 + 0.75 + 2.0, f"detected after {run.took_s:.1f} s"
    kept = rows(run.folder / FAULT_ROWS)
    events = (run.folder / "events.csv").read_text()
    # CI once read 2 rows here after the fixture had seen 3 (not seen in 53 runs here, 23 of
    # them under load): what the run said is in the message
    assert len(kept) >= run.rows_before and all(float(r["IOPS"]) > 0 for r in kept), (
        [(r["subinterval"], r["phase"], r["IOPS"]) for r in kept], run.stderr, events)
    assert "localhost" in events


def test_master_killed_stops_every_slave_within_2s(master_killed_run: FaultRun) -> None:
    run = master_killed_run
    assert len(run.slave_tree) >= 2, "the slave and its worker processes"
    assert SLAVE_GONE_S == 2.0  # the fixture's wait for the slave's end: the 2 s named here
    assert run.slave_gone, [p.pid for p in run.slave_tree if p.is_running()]


def test_ctrl_c_stops_cleanly_keeps_output_exit_130(interrupted_run: FaultRun) -> None:
    run = interrupted_run
    assert run.returncode == 130, run.stderr
    assert run.slave_gone
    assert len(rows(run.folder / FAULT_ROWS)) >= run.rows_before
    assert "interrupted" in (run.folder / "events.csv").read_text()
    # the step ran short of its measurement: its summary says so
    for r in rows(run.folder / "summary.csv"):
        assert r["valid"] == "false" and "interrupted after subinterval" in r["invalid_reason"]
    assert rows(run.folder / "summary.csv")
