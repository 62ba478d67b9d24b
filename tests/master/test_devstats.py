"""Device-side columns on the master (``master.analysis.devstats``) and in the recorder's files: the
metric arithmetic per device and over a set of devices (rates add, the service time weighted
by I/O count, busy % the mean), the rollup rule over distinct devices (a device under two LUNs
of an instance counted once; a device under LUNs of two instances shown whole in each; a
rollup whose instances split a LUN's workloads has empty columns), a device missing from a
subinterval or a window, the host-versus-device event, and the columns in instance rows,
summaries and devices.csv; a host's bad device counters fail that host before anything of
the subinterval is written."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from master.analysis import spans
from master.analysis.devstats import (
    DEVICE_COLUMNS,
    MAX_SPANS,
    DeviceKey,
    DeviceRollups,
    _Differed,
    _Seen,
    device_metrics,
)
from master.analysis.rollup import Grouping
from master.results.output import RunOutput
from master.results.schema import DEVICE_FILE_COLUMNS, INSTANCE_COLUMNS, SUMMARY_COLUMNS
from master.run.hostrows import HostResult
from master.run.recorder import StepRecorder
from protocol.devstats import DeviceDelta
from protocol.errors import HostError
from tests.master.test_recorder import (
    ROLLUPS,
    _assert_no_rows,
    _host_result,
    _read,
    _Slaves,
    settings_of,
)
from tests.master.test_recorder import _workloads as _recorder_workloads

NAN = math.nan
#        read_ios write_ios read_sect write_sect read_ticks write_ticks io_ticks queue
LOOP = (1000, 0, 8000, 0, 500, 0, 900, 2000)
DISK = (100, 300, 800, 2400, 100, 900, 500, 1000)
IDLE = (0, 0, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("counters, interval_s, want", [
    # 1,000 4 KiB reads in 1 s: 0.5 ms each, 90 % busy, 2 in flight on average
    ([LOOP], [1.0], [1000, 1000, 0, 4.096, 0.5, 90, 2]),
    # the same counts over half the time: twice the rates, the same time per I/O; busy
    # at most 100 % (io_ticks past the time between the samples: a jiffy's granularity)
    ([LOOP], [0.5], [2000, 2000, 0, 8.192, 0.5, 100, 4]),
    ([LOOP], [0.9], [1000 / 0.9, 1000 / 0.9, 0, 4.096 / 0.9, 0.5, 100, 2 / 0.9]),
    ([LOOP], [0.91], [1000 / 0.91, 1000 / 0.91, 0, 4.096 / 0.91, 0.5, 90 / 0.91, 2 / 0.91]),
    ([DISK], [2.0], [200, 50, 150, 0.8192, 2.5, 25, 0.5]),
    # no I/O: rates 0, no time per I/O
    ([IDLE], [1.0], [0, 0, 0, 0, NAN, 0, 0]),
])
def test_one_device(counters: list[tuple[int, ...]], interval_s: list[float],
                    want: list[float]) -> None:
    got = device_metrics(np.array(counters, dtype=np.int64), np.array(interval_s),
                         np.zeros(1, np.intp), np.zeros(1, np.intp), np.ones(1, bool), 1)
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_a_set_of_devices_and_instances_without_one() -> None:
    """Instance 0 has both devices: IOPS, MB/s and queue depth add, the service time is
    weighted by I/O count ((500 + 1000) ms over 1,400 I/Os), busy % is their mean; instance 1
    has none; instance 2 has a device that sent no delta: all empty."""
    counters = np.array([LOOP, DISK, LOOP], dtype=np.int64)
    got = device_metrics(counters, np.array([1.0, 1.0, 1.0]), np.array([0, 0, 2], np.intp),
                         np.array([0, 1, 2], np.intp), np.array([True, True, False]), 3)
    np.testing.assert_allclose(got[0], [1400, 1100, 300, 4.096 + 1.6384, 1500 / 1400, 70, 3],
                               rtol=1e-12)
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all()


# ---------------------------------------------------------------------- the rollup rule
# workloads, in plan order: two on h1's loop device, one on each of two files of one h1 file
# system, one on h2's loop device (another device: another host), one on a tmpfs file of h2
LUNS: list[DeviceKey] = [("h1", "/dev/loop0"), ("h1", "/dev/loop0"), ("h1", "/fs/x"),
                         ("h1", "/fs/y"), ("h2", "/dev/loop0"), ("h2", "/shm/z")]
KEYS = {
    "all": ["all"] * 6,
    "host": ["h1", "h1", "h1", "h1", "h2", "h2"],
    "lun": [f"{h}:{p}" for h, p in LUNS],
    "workload": [f"w{i}" for i in range(6)],
    "kind": ["block", "block", "file", "file", "block", "file"],  # a LUN attribute
    "name": ["a", "b", "a", "a", "a", "a"],  # a workload attribute: splits h1's loop0
}


def _rollups() -> DeviceRollups:
    return DeviceRollups(LUNS, {t: Grouping.from_keys(t, keys) for t, keys in KEYS.items()},
                         1.0)


def _delta(device: str, luns: tuple[str, ...], ivypy: int, counters: tuple[int, ...],
           interval_ns: int = 10**9, name: str = "") -> DeviceDelta:
    return DeviceDelta(device, name or f"dev{device}", luns, ivypy, 4096 * ivypy, interval_ns,
                       10_000, 20_000, counters)


def _subinterval(h2_reads: int = 2000, ivypy_h2: int = 2000, disk: bool = True,
                 h2_sectors: int | None = None) -> list[tuple[str, list[DeviceDelta]]]:
    h1 = [_delta("7:0", ("/dev/loop0",), 1000, LOOP)]
    if disk:
        h1.append(_delta("8:1", ("/fs/x", "/fs/y"), 400, DISK))
    h2 = [_delta("7:0", ("/dev/loop0",), ivypy_h2,
                 (h2_reads, 0, 8 * h2_reads if h2_sectors is None else h2_sectors, 0, 400, 0,
                  450, 1000), interval_ns=500_000_000)]
    return [("h1", h1), ("h2", h2)]


def test_rollup_over_distinct_devices() -> None:
    dr = _rollups()
    assert [t for t in KEYS if dr.lun_based(t)] == ["all", "host", "lun", "kind"]
    cols = dr.record(0, _subinterval())
    iops = {t: cols[t][:, 0].tolist() for t in KEYS}
    # all: h1's loop0 and its file system's disk (once, though two LUNs are on it), h2's loop0
    assert iops["all"] == [1000 + 400 + 4000]
    assert iops["host"] == [1400, 4000]
    # the two file LUNs on one disk each show the disk whole; the tmpfs file has no device
    assert iops["lun"][:3] == [1000, 400, 400] and iops["lun"][3] == 4000
    assert math.isnan(iops["lun"][4])
    assert iops["kind"] == [5000, 400]  # the tmpfs file adds no device to "file"
    # workload and name split h1's loop0 between instances: their columns are empty
    assert np.isnan(cols["workload"]).all() and np.isnan(cols["name"]).all()
    a = dict(zip(DEVICE_COLUMNS, cols["all"][0].tolist(), strict=True))
    assert a["device_service_time_ms"] == pytest.approx((500 + 1000 + 400) / 3400)
    assert a["device_util_pct"] == pytest.approx((90 + 50 + 90) / 3)
    assert a["device_queue_depth"] == pytest.approx(2 + 1 + 2)
    assert a["device_MB_per_s"] == pytest.approx((8000 + 3200) * 512 / 1e6 + 16000 * 512 / 5e5)


def test_workload_rollup_has_columns_where_no_lun_is_split() -> None:
    luns: list[DeviceKey] = [("h1", "/dev/loop0"), ("h1", "/dev/loop1")]
    dr = DeviceRollups(luns, {"workload": Grouping.from_keys("workload", ["w0", "w1"])}, 1.0)
    assert dr.lun_based("workload")
    cols = dr.record(0, [("h1", [_delta("7:0", ("/dev/loop0",), 1000, LOOP),
                                 _delta("7:1", ("/dev/loop1",), 400, DISK)])])
    assert cols["workload"][:, 0].tolist() == [1000, 400]


def test_missing_device_empties_its_instances_and_windows_add_deltas() -> None:
    dr = _rollups()
    dr.record(0, _subinterval())
    cols = dr.record(1, _subinterval(disk=False))  # h1's disk sent nothing (gone)
    assert math.isnan(cols["all"][0, 0]) and math.isnan(cols["host"][0, 0])
    assert cols["host"][1, 0] == 4000 and cols["lun"][0, 0] == 1000
    assert np.isnan(cols["lun"][1:3]).all()
    win = dr.window([0, 1])
    assert win["lun"][0, 0] == 1000 and win["host"][1, 0] == 4000  # 2 × counts over 2 × time
    assert np.isnan(win["lun"][1:3]).all() and math.isnan(win["all"][0, 0])
    whole = dr.window([0])
    assert whole["all"][0, 0] == 5400
    assert dr.disagreements() == []


def test_disagreement_is_one_per_device_per_step() -> None:
    dr = _rollups()
    dr.record(0, _subinterval())
    for k in (1, 2, 4):  # h2's device does none of ivypy's 2,000 reads (the page cache)
        dr.record(k, _subinterval(h2_reads=10))
    dr.record(3, _subinterval(h2_reads=1750))  # 12.5 % fewer: within the tolerance
    dr.record(5, _subinterval(h2_reads=2400))  # 20 % more: another tenant
    # the block layer merged ivypy's 2,000 reads of 4 KiB into 400 of 20 KiB: the same bytes
    dr.record(6, _subinterval(h2_reads=400, h2_sectors=8 * 2000))
    # (h2's samples are 0.5 s apart: 2,430 of its I/Os over 2 s)
    (event,) = dr.disagreements()
    assert (event.host, event.device) == ("h2", ("h2", "7:0"))
    assert event.off == pytest.approx(1 - 1215 / 2000)
    assert event.message == (
        "host h2 LUN /dev/loop0: ivypy's IOPS and MB/s and the device's differ by more than "
        "15% (ivypy 2000 IOPS 8.192 MB/s, device dev7:0 (7:0) 1215 IOPS 4.97664 MB/s) in "
        "subintervals 1-2, 4-5: a file LUN served from the page cache, or another tenant on "
        "the device?")


def test_a_folded_window_is_the_kept_one_and_keeps_nothing_per_subinterval() -> None:
    """A fixed-length step's window added up as it comes (``fold``) gives the columns of one
    added up at the end from every subinterval kept, also when a device is missing from one
    subinterval or comes only later; nothing is kept per subinterval (a day-long step of 5 s
    subintervals kept ~700 bytes per device each: 12 MB a day at 1 device, 4 on the
    soak's test bed)."""
    kept, folded = _rollups(), DeviceRollups(LUNS, _rollups().groupings, 1.0, fold=True)
    feeds = [_subinterval(), _subinterval(disk=False), _subinterval(h2_reads=10),
             _subinterval(h2_reads=2400)]
    for k, feed in enumerate(feeds):
        measured = k >= 1  # subinterval 0 is the warmup's
        a, b = kept.record(k, feed, measured=measured), folded.record(k, feed, measured=measured)
        assert all(np.array_equal(a[t], b[t], equal_nan=True) for t in KEYS)
    for window in ([1, 2, 3], [2, 3]):
        w_kept = kept.window(window)
        w_folded = (folded if window == [1, 2, 3] else _fold(feeds[2:])).window(window)
        assert all(np.array_equal(w_kept[t], w_folded[t], equal_nan=True) for t in KEYS)
    assert not folded.kept and len(kept.kept) == 3
    assert folded.disagreements() == kept.disagreements()
    assert str(folded.file_rows(3, "measurement", {})) == str(
        kept.file_rows(3, "measurement", {}))  # NaN cells: compared as text


def _fold(feeds: list[list[tuple[str, list[DeviceDelta]]]]) -> DeviceRollups:
    dr = DeviceRollups(LUNS, _rollups().groupings, 1.0, fold=True)
    for k, feed in enumerate(feeds, start=2):
        dr.record(k, feed)
    return dr


def test_differing_subintervals_are_runs_as_they_come_and_bounded() -> None:
    rng = np.random.default_rng(7)
    ks = [k for k in range(400) if rng.random() < 0.6]
    d = _Differed()
    seen = _subinterval()[0][1][0]
    s = _Seen(seen.counters, seen.interval_ns, seen.ivypy_ops, seen.ivypy_bytes)
    for k in ks:
        d.add(k, s)
    assert d.text() == spans.text(spans.of(ks)) and d.n == len(ks) and d.more == 0
    many = _Differed()
    for k in range(0, 4 * MAX_SPANS, 2):  # every other subinterval differs
        many.add(k, s)
    assert len(many.spans) == MAX_SPANS and many.more == MAX_SPANS
    assert many.text().endswith(f"{2 * MAX_SPANS - 2} and {MAX_SPANS} more")


@pytest.mark.parametrize("ks, text", [([0], "0"), ([0, 1, 2, 5, 7, 8], "0-2, 5, 7-8"),
                                      ([], "")])
def test_spans(ks: list[int], text: str) -> None:
    assert spans.text(spans.of(ks)) == text


# ---------------------------------------------------------------------- in the recorder
def _with_devices(h: HostResult, devices: list[dict[str, Any]]) -> HostResult:
    return dataclasses.replace(h, result=dataclasses.replace(h.result, devices=devices))


def test_recorder_writes_device_columns_everywhere(tmp_path: Path) -> None:
    """Instance rows and summaries of every rollup carry the device columns (empty for
    ``workload``, whose instances split a LUN), and devices.csv has every device."""
    wl = _recorder_workloads()
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl))
    sim = _Slaves(rec)
    rng = np.random.default_rng(4)
    ids = {h: [w for w in wl if w.startswith(h + ":")] for h in ("h1", "h2")}
    for k in range(2):
        got = []
        for host in ("h1", "h2"):
            r, _ = _host_result(sim, host, ids[host], k, rng, 10.0)
            sd0 = _delta("8:0", ("/dev/sd0",), 1000, LOOP, name="sd0").to_wire()
            sd1 = _delta("8:16", ("/dev/sd1",), 400, DISK, name="sd1").to_wire()
            got.append(_with_devices(r, [sd0, sd1] if host == "h1" else [sd0]))
        rec.record(k, "measurement", got, (k + 1) * 10**9)
    valid, rows, _ = rec.summarise([0, 1], sim.window(0, 1))
    out.close()
    assert valid
    step = tmp_path / "step0000-s"
    lun = _read(step / "lun" / "h1_dev_sd1.csv")
    assert lun[0] == INSTANCE_COLUMNS and len(lun) == 3
    row = dict(zip(lun[0], lun[2], strict=True))
    assert [row[c] for c in DEVICE_COLUMNS] == ["400", "100", "300", "1.6384", "2.5", "50",
                                                "1"]
    h2 = dict(zip(*_read(step / "host" / "h2.csv")[:2], strict=True))
    assert h2["device_IOPS"] == "1000" and h2["device_util_pct"] == "90"
    # h2's sd1 has no device delta: its lun instance's columns are empty
    assert dict(zip(*_read(step / "lun" / "h2_dev_sd1.csv")[:2], strict=True))[
        "device_IOPS"] == ""
    wrow = dict(zip(*_read(step / "workload" / "h1_dev_sd0_a.csv")[:2], strict=True))
    assert all(wrow[c] == "" for c in DEVICE_COLUMNS)
    devices = _read(step / "devices.csv")
    assert devices[0] == DEVICE_FILE_COLUMNS and len(devices) == 1 + 2 * 3
    d = dict(zip(devices[0], devices[1], strict=True))
    assert (d["host"], d["device"], d["device_name"], d["luns"]) == ("h1", "8:0", "sd0",
                                                                    "/dev/sd0")
    assert d["ivypy_IOPS"] == "1000" and d["device_IOPS"] == "1000"
    assert d["start_sample_late_us"] == "10" and d["end_sample_late_us"] == "20"
    # summaries: the window's counters added up
    assert set(DEVICE_COLUMNS) <= set(SUMMARY_COLUMNS)
    by = {(r["rollup_type"], r["rollup_instance"]): r for r in rows}
    assert by[("all", "all")]["device_IOPS"] == pytest.approx(1000 + 400 + 1000)
    assert by[("lun", "h1:/dev/sd1")]["device_service_time_ms"] == pytest.approx(2.5)
    assert math.isnan(by[("workload", "h1:/dev/sd0:a")]["device_IOPS"])


def test_bad_device_counters_fail_the_host_by_name(tmp_path: Path) -> None:
    wl = _recorder_workloads()
    out = RunOutput(tmp_path)
    rec = StepRecorder(out, 0, "s", ROLLUPS, 1.0, wl, settings_of(wl))
    sim = _Slaves(rec)
    rng = np.random.default_rng(1)
    good, _ = _host_result(sim, "h1", [w for w in wl if w.startswith("h1:")], 0, rng, 1.0)
    bad, _ = _host_result(sim, "h2", [w for w in wl if w.startswith("h2:")], 0, rng, 1.0)
    wire = _delta("8:0", ("/dev/sd0",), 1000, LOOP).to_wire()
    bad = _with_devices(bad, [{**wire, "counters": [1, 2, 3]}])
    with pytest.raises(HostError, match="bad device counters: device 8:0: counters must be 8"
                       ) as err:
        rec.record(0, "measurement", [good, bad], 10**9)
    assert err.value.host == "h2"
    out.close()
    _assert_no_rows(tmp_path)
