"""Device counters on the slave (``slave.devstats``) and in the session's results: the stat
line parsed, the differences of two samples (a device that goes back or disappears has
none), the device found under a block LUN and a file LUN (none under tmpfs, said once), and a
session that samples at the step's start and at each end boundary and sends the deltas with
ivypy's own I/O count in ``SubintervalResult.devices``. A fake ``/sys`` in a temporary folder
stands in for the kernel's: the same files, counters the test sets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from protocol.devstats import COUNTERS, DeviceDelta
from protocol.messages import Continue, Go, Log, SubintervalResult
from slave.devstats import DeviceSampler, Sample, counter_delta, deltas, parse_stat
from slave.lun_info import LunInfo
from slave.session import SlaveSession
from tests.slave.test_session import SUB, Harness, _create

# a kernel 6.x line: 17 fields (reads, merges, sectors, ticks; writes ...; in flight, io_ticks,
# time_in_queue; discards ...; flushes ...)
LINE = "  100  5  800  40  20  1  160  8  3  50  70  0 0 0 0  2 1\n"


@pytest.mark.parametrize("text, want", [
    (LINE, (100, 20, 800, 160, 40, 8, 50, 70)),
    ("1 2 3 4 5 6 7 8 9 10 11", (1, 5, 3, 7, 4, 8, 10, 11)),  # an old kernel's 11 fields
])
def test_parse_stat_takes_the_counters_in_wire_order(text: str, want: tuple[int, ...]) -> None:
    assert parse_stat(text) == want and len(want) == len(COUNTERS)


@pytest.mark.parametrize("text", ["", "1 2 3", "1 2 3 4 5 6 7 8 9 10 x", "-1 " * 11])
def test_parse_stat_refuses_what_is_not_a_stat_line(text: str) -> None:
    with pytest.raises(ValueError, match="not a block device stat line"):
        parse_stat(text)


@pytest.mark.parametrize("before, after, want", [
    ((0,) * 8, (0,) * 8, (0,) * 8),
    ((1, 2, 3, 4, 5, 6, 7, 8), (11, 2, 83, 4, 9, 6, 17, 98), (10, 0, 80, 0, 4, 0, 10, 90)),
    ((2**62,) * 8, (2**62 + 5,) * 8, (5,) * 8),  # 64-bit counters: no wrap to think of
    ((10, 0, 0, 0, 0, 0, 0, 0), (3, 0, 0, 0, 0, 0, 0, 0), None),  # another device's numbers
])
def test_counter_delta(before: tuple[int, ...], after: tuple[int, ...],
                       want: tuple[int, ...] | None) -> None:
    assert counter_delta(before, after) == want


def _fake_sys(root: Path, devno: str, name: str, text: str = LINE) -> Path:
    """``<root>/dev/block/<devno>`` → ``<root>/devices/<name>`` holding ``stat``."""
    dev = root / "devices" / name
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "stat").write_text(text)
    (root / "dev" / "block").mkdir(parents=True, exist_ok=True)
    link = root / "dev" / "block" / devno
    if not link.exists():
        link.symlink_to(dev)
    return dev / "stat"


def _set(stat: Path, reads: int, writes: int = 0, ticks_ms: int = 0, io_ticks_ms: int = 0,
         queue_ms: int = 0) -> None:
    stat.write_text(f"{reads} 0 {reads * 8} {ticks_ms} {writes} 0 {writes * 8} 0 0 "
                    f"{io_ticks_ms} {queue_ms}\n")


def _lun(path: str, kind: str = "block", dev: str = "", fs_type: str = "") -> LunInfo:
    return LunInfo(path=path, kind=kind, name=os.path.basename(path), size_bytes=1 << 30,
                   dev=dev, fs_type=fs_type)


def test_sampler_finds_devices_under_block_and_file_luns(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    _fake_sys(sys_root, "7:3", "loop3")
    _fake_sys(sys_root, "8:1", "sda1")
    files = tmp_path / "files"
    files.mkdir()
    st_devs = {str(files / "a"): os.makedev(8, 1), str(files / "b"): os.makedev(8, 1),
               str(files / "shm"): os.makedev(0, 44)}

    def fake_stat(path: str) -> Any:
        if path not in st_devs:
            raise FileNotFoundError(2, "No such file or directory")
        return os.stat_result((0o100644, 1, st_devs[path], 1, 0, 0, 0, 0, 0, 0))

    sampler = DeviceSampler(str(sys_root), stat=fake_stat)
    luns = [_lun("/dev/loop3", dev="7:3"), _lun(str(files / "a"), "file"),
            _lun(str(files / "b"), "file"), _lun(str(files / "shm"), "file", fs_type="tmpfs"),
            _lun(str(files / "gone"), "file"), _lun("/dev/nodev")]
    none = dict(sampler.resolve(luns))
    assert set(none) == {str(files / "shm"), str(files / "gone"), "/dev/nodev"}
    assert "device 0:44 (tmpfs) has no kernel counters" in none[str(files / "shm")]
    assert "No such file" in none[str(files / "gone")]
    assert sampler.resolve(luns) == []  # said once
    # two file LUNs on one file system: one device, serving both
    assert sampler.devices(lun.path for lun in luns) == {
        "7:3": ["/dev/loop3"], "8:1": [str(files / "a"), str(files / "b")]}
    assert sampler.name("8:1") == "sda1" and sampler.name("7:3") == "loop3"


def test_deltas_of_two_samples_and_a_device_that_disappears(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    loop = _fake_sys(sys_root, "7:0", "loop0")
    sda = _fake_sys(sys_root, "8:0", "sda")
    sampler = DeviceSampler(str(sys_root))
    sampler.resolve([_lun("/dev/loop0", dev="7:0"), _lun("/dev/sda", dev="8:0")])
    luns_of = sampler.devices(["/dev/loop0", "/dev/sda"])
    now = [1_000_250]
    _set(loop, 100, 10, ticks_ms=5, io_ticks_ms=7, queue_ms=9)
    _set(sda, 5)
    first = sampler.take(luns_of, 1_000_000, lambda: now[0])
    assert first.late_ns == 250 and first.failed == {}
    _set(loop, 1100, 30, ticks_ms=65, io_ticks_ms=507, queue_ms=4009)
    sda.unlink()  # the disk went away
    now[0] = 2_000_100
    second = sampler.take(luns_of, 2_000_000, lambda: now[0])
    assert "cannot be read" in second.failed["8:0"]
    got, why = deltas(first, second, luns_of, {"/dev/loop0": (1010, 1010 * 4096),
                                               "/dev/sda": (3, 3 * 8192)}, sampler.name)
    assert got == [DeviceDelta("7:0", "loop0", ("/dev/loop0",), 1010, 1010 * 4096, 999_850,
                               250, 100,
                               (1000, 20, 8000, 160, 60, 0, 500, 4000))]
    assert set(why) == {"8:0"} and "gone?" in why["8:0"]
    # counters that went back are not one device's: no delta, and why
    back, why = deltas(second, first, {"7:0": ["/dev/loop0"]}, {}, sampler.name)
    assert back == [] and "went back" in why["7:0"]
    # a device read in neither sample (new) has no delta and nothing to say
    assert deltas(Sample(0, 0, {}), Sample(5, 0, {}), {"9:9": ["/x"]}, {}, str) == ([], {})


def _sampled_harness(tmp_path: Path) -> tuple[Harness, Path]:
    sys_root = tmp_path / "sys"
    stat = _fake_sys(sys_root, "7:0", "fake0")
    h = Harness()
    h.session = SlaveSession(h.backend, h.out.extend, lambda: h.now, describe=h.describe_error,
                             devices=DeviceSampler(str(sys_root)))
    h.session.luns["/dev/fake0"] = h.found["/dev/fake0"] = _lun("/dev/fake0", dev="7:0")
    h.session.luns["/dev/nodev0"] = h.found["/dev/nodev0"] = _lun("/dev/nodev0")
    return h, stat


def test_session_sends_the_deltas_between_boundaries(tmp_path: Path) -> None:
    """Sampled when the loop wakes at the start boundary and at each end boundary (before
    collecting); the result carries the delta with the workloads' own I/O count; a LUN with no
    device is said once, when the step starts."""
    h, stat = _sampled_harness(tmp_path)
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a", iops=300.0)
    _create(h, 2, "h1:/dev/fake0:b", iops=200.0)
    _create(h, 3, "h1:/dev/nodev0:c", "/dev/nodev0", iops=50.0)
    _set(stat, 7)
    start = 10 * SUB
    told = h.send(Go(0, start, SUB, [{"type": "all", "groups": [sorted(h.session.params)],
                                      "histograms": True}]))
    assert [m.message for m in told if isinstance(m, Log)] == [
        "LUN /dev/nodev0 has no device counters: its device number is not known; its device "
        "columns stay empty"]
    assert h.session.next_wakeup_ns() == start  # the devices' first sample is due
    assert h.tick(start + 40_000) == []
    assert h.session.next_wakeup_ns() == start + SUB
    _set(stat, 7 + 480, ticks_ms=96, io_ticks_ms=500, queue_ms=1000)
    (r0,) = h.tick(start + SUB + 30_000)
    assert isinstance(r0, SubintervalResult)
    (dev,) = [DeviceDelta.from_wire(d) for d in r0.devices]
    assert dev == DeviceDelta("7:0", "fake0", ("/dev/fake0",), 500, 500 * 4096, SUB - 10_000,
                              40_000, 30_000, (480, 0, 3840, 0, 96, 0, 500, 1000))
    h.send(Continue(2))
    _set(stat, 7 + 480 + 500, ticks_ms=96, io_ticks_ms=500, queue_ms=1000)
    (r1,) = h.tick(start + 2 * SUB)
    assert [DeviceDelta.from_wire(d).counters[0] for d in r1.devices] == [500]
    assert not [m for m in h.take() if isinstance(m, Log)]  # said once, not every subinterval
    # the device disappears: said once for the step, and the results go on without it
    stat.unlink()
    h.send(Continue(3))
    msgs = h.tick(start + 3 * SUB)
    (gone,) = [m for m in msgs if isinstance(m, Log)]
    assert "device fake0 (7:0) under LUNs /dev/fake0: its counters cannot be read" in gone.message
    assert gone.context == {"kind": "device", "lun": "/dev/fake0"}
    (r2,) = [m for m in msgs if isinstance(m, SubintervalResult)]
    assert r2.devices == []
    h.send(Continue(4))
    assert [type(m) for m in h.tick(start + 4 * SUB)] == [SubintervalResult]


def test_session_without_a_sampler_sends_no_device_counters() -> None:
    h = Harness()
    h.hello()
    _create(h, 1, "h1:/dev/fake0:a")
    h.send(Go(0, 10 * SUB, SUB, [{"type": "all", "groups": [list(h.session.params)],
                                  "histograms": True}]))
    assert h.session.next_wakeup_ns() == 11 * SUB
    (r0,) = h.tick(11 * SUB)
    assert isinstance(r0, SubintervalResult) and r0.devices == []


@pytest.mark.parametrize("left_ns, want_s", [
    (5_700_000, 0.005),  # the whole milliseconds before the boundary: select rounds up
    (999_999, 0.0),  # under a millisecond: spin to the boundary
    (0, 0.0), (-3_000_000, 0.0),  # due or past
    (900_000_000, 0.2),  # never longer than 0.2 s (signals, the watchdog)
])
def test_the_slave_loop_wakes_before_a_boundary_not_after(left_ns: int, want_s: float) -> None:
    from slave.main import _timeout_s

    assert _timeout_s(left_ns) == want_s
