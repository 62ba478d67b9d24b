"""``ivypy verify RUN_DIR`` (``master.cli.verify``, ``master.run.readback``) through the CLI
in this process, its hosts in memory (a real ``SlaveSession`` over an in-memory pipe, which
reads a real file back): a run folder made as a verified run leaves it (its test, state and
map), the LUN file written with the reference stamps, then damaged. What is tested is what
the command decides: the rows of verify.csv, verify.json, damaged/, the console, the exit
status, the refusals, a host lost; the run's own files untouched. The device, the slave's
process and the compiled loop on real I/O are ``test_run_verify.py``'s."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import master.run.lifecycle
import master.run.readback
from master.cli.main import main
from master.hosts.memory import MemoryHosts
from master.results.runstate import new_state, write_state
from master.verify.mapstore import MapLun, MapWriter, VerifyMap
from protocol import verify as pv
from protocol.version import __version__

pytestmark = pytest.mark.skipif(shutil.which("cc") is None,
                                reason="no C compiler (cc): the compiled loop cannot be built")

BLOCK = pv.MAP_BLOCK_BYTES
N = 96
KEY = 0xABCD0123
TEST = """\
test: vr
hosts: [h1, h2]
verify: {{findings_kept: 2}}
luns:
  - {{hosts: h1, file: "{a}", allow_write: true}}
  - {{hosts: h2, file: "{b}", allow_write: true}}
steps:
  - name: write
    workloads:
      - {{name: w, iosequencer: sequential, blocksize: 4KiB, iops: 100, read_fraction: 0%}}
    measure_seconds: 1
"""


def _stamped(n: int, gen: int, lun: int, writer: int, attempt: int = 0, serial0: int = 0
             ) -> npt.NDArray[np.uint8]:
    data = np.random.default_rng(lun).integers(0, 256, n * BLOCK, dtype=np.uint8)
    for b in range(n):
        pv.stamp(data[b * BLOCK:(b + 1) * BLOCK], b * BLOCK, serial0 + b, [gen], KEY, lun,
                 writer, attempt)
    return data


def _folder(tmp: Path, *, gen: int = 2, state: str = "complete", confirmed: int = 10**6,
            resumed: int = 0) -> tuple[Path, Path, Path]:
    """A run folder of two hosts' file LUNs (``a`` on h1, ``b`` on h2), each written whole at
    generation ``gen`` by writer 0 (LUN 0) and 1 (LUN 1) in attempt 0, whose writers'
    confirmed serial was ``confirmed``; their map says so; then resumed ``resumed`` times
    (attempts that wrote nothing)."""
    a, b = tmp / "lun-a", tmp / "lun-b"
    a.write_bytes(_stamped(N, gen, 0, 0).tobytes())
    b.write_bytes(_stamped(N, gen, 1, 1).tobytes())
    run = tmp / "out" / "vr" / "20261129-000000"
    run.mkdir(parents=True)
    text = TEST.format(a=a, b=b)
    (run / "test.yaml").write_text(text)
    (run / "resolved.json").write_text(json.dumps({"output_root": str(tmp / "out")}))
    st = new_state("vr", 1, text, __version__)
    st.state = state
    if state != "running":
        st.pid = 2**22 + 1  # no such process
    write_state(run, st)
    vm = VerifyMap.create(run, KEY, [MapLun(0, "h1", str(a), 0, N * BLOCK),
                                     MapLun(1, "h2", str(b), 0, N * BLOCK)],
                          [MapWriter(0, "h1", f"h1:{a}:w"), MapWriter(1, "h2", f"h2:{b}:w")])
    blocks = np.arange(N, dtype=np.int64)
    vm.apply(0, np.concatenate([blocks * 0, blocks * 0 + 1]), np.concatenate([blocks, blocks]),
             np.full(2 * N, gen, dtype=np.uint8), {0: confirmed, 1: confirmed})
    vm.snapshot()
    for _ in range(resumed):
        vm.next_attempt()
    vm.close()
    return run, a, b


def _verify(run: Path, monkeypatch: pytest.MonkeyPatch, hosts: MemoryHosts | None = None
            ) -> tuple[int, Path | None]:
    on = MemoryHosts() if hosts is None else hosts
    monkeypatch.setattr(master.run.lifecycle, "default_connect", on.connect)
    code = main(["verify", str(run), "--plain"])
    made = sorted(run.glob("verify-*"))
    return code, made[-1] if made else None


def _csv(folder: Path) -> list[dict[str, str]]:
    with open(folder / "verify.csv", newline="") as f:
        return list(csv.DictReader(f))


def _digests(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file() and "verify-" not in str(p)}


def _put(path: Path, block: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(block * BLOCK)
        f.write(data)


def test_a_clean_run_reads_back_every_block_and_writes_the_header_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, _, _ = _folder(tmp_path)
    before = _digests(run)
    code, out = _verify(run, monkeypatch)
    said = capsys.readouterr().out
    assert code == 0, said
    assert out is not None and _csv(out) == []
    assert (out / "verify.csv").read_text().splitlines() == [",".join(
        master.run.readback.COLUMNS)]
    doc = json.loads((out / "verify.json").read_text())
    assert doc["exit_code"] == 0 and doc["run_key"] == KEY
    assert [(x["host"], x["blocks_checked"], x["damaged_blocks"]) for x in doc["luns"]] == [
        ("h1", N, 0), ("h2", N, 0)]
    assert f"no damaged block in {2 * N} blocks checked" in said
    assert "h1]" in said and "100 %" in said  # a progress line per LUN
    assert not (out / "damaged").exists()
    assert _digests(run) == before  # the run's own files untouched


def test_damage_on_two_hosts_is_named_block_by_block_with_its_class(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, a, b = _folder(tmp_path)
    older = _stamped(N, 1, 0, 0)
    now_a = np.frombuffer(a.read_bytes(), dtype=np.uint8).reshape(N, BLOCK).copy()
    flipped = now_a[5].copy()
    flipped[3 * 512 + 40] ^= 1
    _put(a, 5, flipped.tobytes())  # corrupt
    _put(a, 10, now_a[12].tobytes())  # misplaced: block 12's data
    _put(a, 20, older[20 * BLOCK:21 * BLOCK].tobytes())  # stale
    _put(a, 30, older[30 * BLOCK:30 * BLOCK + 2048].tobytes())  # torn
    _put(b, 40, bytes(3 * BLOCK))  # missing, three blocks: one row
    code, out = _verify(run, monkeypatch)
    said = capsys.readouterr().out
    assert code == 5, said
    assert out is not None
    rows = [(r["host"], r["lun"], int(r["offset_bytes"]) // BLOCK,
             int(r["length_bytes"]) // BLOCK, r["class"], r["expected_generation"],
             r["found_generation"], r["found_lun"], r["found_offset_bytes"], r["writer"])
            for r in _csv(out)]
    w0 = f"h1:{a}:w"
    assert rows == [
        ("h1", str(a), 5, 1, "corrupt", "2", "2", str(a), str(5 * BLOCK), w0),
        ("h1", str(a), 10, 1, "misplaced", "2", "2", str(a), str(12 * BLOCK), w0),
        ("h1", str(a), 20, 1, "stale", "2", "1", str(a), str(20 * BLOCK), w0),
        ("h1", str(a), 30, 1, "torn", "2", "1", str(a), str(30 * BLOCK), w0),
        ("h2", str(b), 40, 3, "missing", "2", "", "", "", ""),
    ]
    assert ("data verification found 7 damaged blocks (1 corrupt, 1 misplaced, 1 stale, "
            "1 torn, 3 missing)") in said
    # findings_kept: 2 of the run's verify: the first two blocks kept whole
    kept = sorted((out / "damaged").glob("*.json"))
    assert [p.name for p in kept] == ["0001.json", "0002.json"]
    first = json.loads(kept[0].read_text())
    assert (first["host"], first["offset_bytes"], first["class"]) == ("h1", 5 * BLOCK, "corrupt")
    assert (out / "damaged" / first["found_bytes"]).read_bytes() == flipped.tobytes()
    doc = json.loads((out / "verify.json").read_text())
    assert doc["exit_code"] == 5
    assert [(x["corrupt"], x["missing"], x["damaged_extents"]) for x in doc["luns"]] == [
        (1, 0, 4), (0, 3, 1)]


@pytest.mark.parametrize("resumed", [0, 2])
def test_writes_the_master_never_heard_of_are_taken_not_blamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resumed: int) -> None:
    # the map says generation 1 (the master's last record), the LUNs hold generation 2 of the
    # attempt 0 (serials 0-95) where the writers' confirmed serial was 49: blocks 50 on are
    # writes that attempt's master never heard of (taken), blocks 0-49 damage; also where the
    # run was resumed twice since, its later attempts never touching these blocks
    run, _, _ = _folder(tmp_path, gen=1, state="failed", confirmed=49, resumed=resumed)
    for lun, path in enumerate((tmp_path / "lun-a", tmp_path / "lun-b")):
        path.write_bytes(_stamped(N, 2, lun, lun).tobytes())
    code, out = _verify(run, monkeypatch)
    assert code == 5 and out is not None
    assert {(r["host"], int(r["offset_bytes"]), int(r["length_bytes"]), r["class"])
            for r in _csv(out)} == {("h1", 0, 50 * BLOCK, "stale"), ("h2", 0, 50 * BLOCK,
                                                                     "stale")}
    doc = json.loads((out / "verify.json").read_text())
    assert [x["adopted_blocks"] for x in doc["luns"]] == [N - 50, N - 50]
    assert "blocks held writes the run's master never heard of" in doc["message"]


@pytest.mark.parametrize(("make", "says"), [
    (lambda run: shutil.rmtree(run / "verify"), "the run was not verified"),
    (lambda run: (run / "state.json").unlink(), "not a run folder of this ivypy"),
    (lambda run: (run / "verify" / "map.json").write_text("{"), "the run's map"),
    (lambda run: _running(run), "the run is still running"),
])
def test_a_folder_that_cannot_be_verified_is_refused_before_any_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        make: object, says: str) -> None:
    run, _, _ = _folder(tmp_path)
    make(run)  # type: ignore[operator]
    hosts = MemoryHosts()
    code, out = _verify(run, monkeypatch, hosts)
    err = capsys.readouterr().err
    assert code == 2 and says in err, err
    assert out is None and not hosts.hosts


def _running(run: Path) -> None:
    st = new_state("vr", 1, (run / "test.yaml").read_text(), __version__)
    st.controller = "another-controller"  # whose processes cannot be looked at: alive
    write_state(run, st)


def test_a_lun_gone_or_too_small_is_refused_naming_host_and_lun(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, a, b = _folder(tmp_path)
    b.write_bytes(bytes(8 * BLOCK))
    code, out = _verify(run, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"host h2: LUN {b} has {8 * BLOCK} bytes, less than the map's range" in err
    assert out is not None and json.loads((out / "verify.json").read_text())["exit_code"] == 2
    a.unlink()
    code, _ = _verify(run, monkeypatch)
    assert code == 2 and f"LUN {a} cannot be opened for reading" in capsys.readouterr().err


def test_a_host_that_cannot_be_reached_is_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, _, _ = _folder(tmp_path)
    code, out = _verify(run, monkeypatch, MemoryHosts(unreachable={"h2": "no route to host"}))
    assert code == 3 and "no route to host" in capsys.readouterr().err
    assert out is not None and json.loads((out / "verify.json").read_text())["exit_code"] == 3


def test_damage_found_before_a_host_is_lost_is_still_exit_5(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # h1's read-back finds a zeroed block; h2 dies as its read-back is answered
    run, a, _ = _folder(tmp_path)
    _put(a, 7, bytes(BLOCK))
    hosts = MemoryHosts()
    died: list[str] = []

    def watch(host: str, m: object) -> bool:
        if host == "h2" and type(m).__name__ == "VerifyFound":
            died.append(host)
            hosts["h2"].die()
            return False
        return True

    hosts.watch = watch
    code, out = _verify(run, monkeypatch, hosts)
    said = capsys.readouterr()
    assert died and code == 5, said.out + said.err
    assert out is not None
    assert [(int(r["offset_bytes"]) // BLOCK, r["class"]) for r in _csv(out)] == [(7, "missing")]
    assert "then: " in json.loads((out / "verify.json").read_text())["message"]


def test_an_output_folder_that_cannot_be_made_is_exit_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run, _, _ = _folder(tmp_path)

    def full(run_dir: Path, now: float | None = None) -> Path:
        raise OSError(28, "No space left on device", str(run_dir / "verify-x"))

    monkeypatch.setattr(master.run.readback, "out_folder", full)
    hosts = MemoryHosts()
    code, _ = _verify(run, monkeypatch, hosts)
    assert code == 4 and "No space left on device" in capsys.readouterr().err
    assert not hosts.hosts  # no host was reached
