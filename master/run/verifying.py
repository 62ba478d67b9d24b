"""A run's data verification on the master (docs/verify.md): the numbers its stamps carry, the
map it keeps in the run folder, and what the hosts' reports say.

Owns ``RunVerification``: the run's key, each LUN's number in the map (by host and path, in the
order the run first creates a workload on it) and each workload's writer number (by id), the
target every create of a verified workload carries (``target``), the map
(``master.verify.mapstore.VerifyMap``: extended before a step's creates, each subinterval's
journals applied, a snapshot at each step's end), each workload's counts over the run, and the
damaged blocks found: the first few in ``events.csv`` (host, LUN, offset, expected generation,
found stamp) and the first ``findings_kept`` in full in ``verify/`` (the block as read and what
was expected of it). It decides nothing about steps: ``stop_wanted`` says when ``on_error:
stop`` wants the step ended, and the step loop ends it. It must not talk to hosts.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from master.analysis.rollup import Grouping
from master.config.schema import VerifyConfig
from master.results.schema import VERIFY_COLUMNS
from master.run.workloads import WorkloadInstance
from master.verify.damaged import expected_words, keep, stamp_words
from master.verify.mapstore import MapLun, MapWriter, VerifyMap
from protocol import verify as pv
from protocol.messages import Stopped, SubintervalResult
from protocol.params import WorkloadParams

#: damaged blocks told one by one in events.csv per run (the rest are counted)
EVENTS_MAX: Final = 20

Event = Callable[..., None]


class RunVerification:
    """The verification of one run folder (``run_dir``), under ``config``; ``event`` writes
    to events.csv as the run's own ``event`` does."""

    def __init__(self, config: VerifyConfig, run_dir: Path, event: Event,
                 run_key: int | None = None) -> None:
        self.config = config
        self.run_dir = run_dir
        self.event = event
        self.run_key = secrets.randbits(32) if run_key is None else run_key
        self.lun_numbers: dict[tuple[str, str], int] = {}
        self.lun_names: dict[int, tuple[str, str]] = {}
        self.writers: dict[str, int] = {}
        #: each writer number's workload (numbers are dense: the next is its length)
        self.writer_ids: list[str] = []
        self.map: VerifyMap | None = None
        #: per workload over the run: blocks checked, then each class's damaged blocks
        self.counts: dict[str, np.ndarray] = {}
        self.found = 0  # damaged blocks found in the run
        self._told = 0  # of them in events.csv
        self._kept = 0  # of them in verify/
        self._found_at_step = 0  # ``found`` when the step running started
        #: a LUN's number by its identity (the slave's: one LUN that several hosts reach)
        self.by_identity: dict[str, int] = {}
        #: per LUN number, the hosts whose own map of it is the master's (as of the step's
        #: start): any other host that runs on it is given the master's before its I/O
        self.synced: dict[int, set[str]] = {}
        #: per LUN number, the hosts whose writes the step running settled on it
        self._wrote: dict[int, set[str]] = {}
        #: a resumed run's: the attempts before it, each with its writers' confirmed serials
        #: there (``LoadMap.crashes``' rows)
        self.crashes: list[list[int]] = []

    @classmethod
    def resumed(cls, config: VerifyConfig, run_dir: Path, event: Event) -> RunVerification:
        """The verification of a run continued (``--resume``): its map loaded from the folder,
        one more attempt (a stamp of the new attempt tells itself from the old), its numbers
        kept; each LUN's map goes to its host before the LUN's first create (``to_load``),
        with the attempts before and their writers' confirmed serials (``crashes``): a write
        such an attempt's master never heard of is taken into the map where it is found."""
        vm = VerifyMap.load(run_dir)
        vm.next_attempt()  # whatever ended the last: its unconfirmed writes are taken, not blamed
        v = cls(config, run_dir, event, run_key=vm.run_key)
        v.map = vm
        for x in vm.luns:  # no host has a map of any (``synced`` empty): each is given it
            for key in ((x.host, x.lun), *x.also):
                v.lun_numbers[key] = x.number
            v.lun_names[x.number] = (x.host, x.lun)
            if x.identity:
                v.by_identity[x.identity] = x.number
        for w in sorted(vm.writers, key=lambda w: w.number):
            if v._writer(w.workload) != w.number:  # this class numbers them 0, 1, 2 ...
                raise ValueError(f"{run_dir}: the map's writer numbers are not 0 to "
                                 f"{len(vm.writers) - 1}")
        v.crashes = vm.crash_rows()
        return v

    def to_load(self, instances: Sequence[WorkloadInstance]) -> list[tuple[str, int, bytes]]:
        """The maps the hosts of ``instances`` must be given before the step's I/O (host, LUN
        number, map bytes): each host that runs on a LUN whose map it does not hold as the
        master does (a resumed run's every host; a host that reaches a LUN another host
        wrote), once; from then on it holds it."""
        out = []
        assert self.map is not None
        for inst in instances:
            number = self.lun_numbers.get(inst.lun_key)
            if number is None:
                continue
            synced = self.synced.setdefault(number, set())
            if inst.host not in synced:
                synced.add(inst.host)
                out.append((inst.host, number, self.map.map_of(number).tobytes()))
        return out

    # ------------------------------------------------------------------ before a step
    def prepare(self, instances: Sequence[WorkloadInstance]) -> None:
        """Number the LUNs and writers of ``instances`` the map does not know yet, and extend
        the map (made at the first step) with them before any of them is created."""
        luns: list[MapLun] = []
        writers: list[MapWriter] = []
        also: list[tuple[int, str, str]] = []
        for inst in instances:
            key = inst.lun_key
            if key not in self.lun_numbers:
                identity = str(inst.lun.lun.info.get("identity") or "")
                size = inst.lun.lun.size_bytes // pv.MAP_BLOCK_BYTES * pv.MAP_BLOCK_BYTES
                number = self.by_identity.get(identity) if identity else None
                if number is not None:  # another host's way to a LUN the map has
                    also.append((number, *key))
                else:
                    number = len(self.lun_names)
                    self.lun_names[number] = key
                    if identity:
                        self.by_identity[identity] = number
                    luns.append(MapLun(number, key[0], key[1], 0, size, identity))
                    self.synced[number] = {key[0]}  # its first host's map is empty, as is
                    # the master's
                self.lun_numbers[key] = number
            if inst.id not in self.writers:
                writers.append(MapWriter(self._writer(inst.id), inst.host, inst.id))
        if self.map is None:
            self.map = VerifyMap.create(self.run_dir, self.run_key, luns, writers)
        elif luns or writers:
            self.map.extend(luns, writers)
        for number, host, path in also:
            self.map.reached_by(number, host, path)
        self._found_at_step = self.found
        self._wrote = {}

    def _writer(self, workload_id: str) -> int:
        """The next writer number, for ``workload_id``."""
        number = self.writers[workload_id] = len(self.writer_ids)
        self.writer_ids.append(workload_id)
        return number

    def target(self, inst: WorkloadInstance) -> dict[str, int]:
        """The ``CreateWorkload.verify`` of ``inst`` (``prepare`` numbered it)."""
        assert self.map is not None
        number = self.lun_numbers[inst.lun_key]
        lun = self.map.lun(number)
        return {"lun": number, "first_bytes": lun.first_bytes, "size_bytes": lun.size_bytes,
                "run_key": self.run_key, "attempt": self.map.attempt,
                "writer": self.writers[inst.id]}

    # ------------------------------------------------------------------ each subinterval
    def record(self, step: int, k: int,
               results: Sequence[tuple[str, SubintervalResult | Stopped]]
               ) -> dict[str, npt.NDArray[np.int64]]:
        """Subinterval ``k``'s reports, host by host: the journals into the map (one record),
        the counts added up, the damaged blocks told. Returns its counts by workload."""
        assert self.map is not None
        luns, blocks, bytes_ = [], [], []
        confirmed: dict[int, int] = {}
        found = 0
        now: dict[str, npt.NDArray[np.int64]] = {}
        for host, res in results:
            rep = res.verify
            if rep is None:
                continue
            lun, block, byte = pv.journal_from_wire(rep["journal"])
            for number in np.unique(lun).tolist():
                self._wrote.setdefault(int(number), set()).add(host)
            luns.append(lun)
            blocks.append(block)
            bytes_.append(byte)
            confirmed.update({int(w): int(s) for w, s in rep.get("confirmed", {}).items()})
            for wid, counts in rep["counts"].items():
                got = np.asarray(counts, dtype=np.int64)
                now[wid] = got
                mine = self.counts.setdefault(wid, np.zeros(len(pv.COUNT_NAMES), np.int64))
                mine += got
            found += int(rep["found"])
            for f in rep["findings"]:
                self._finding(step, k, host, f)
        if luns:
            self.map.apply(k, np.concatenate(luns), np.concatenate(blocks),
                           np.concatenate(bytes_), confirmed)
        self.found += found
        return now

    @staticmethod
    def columns(counts: Mapping[str, npt.NDArray[np.int64]], ids: Sequence[str],
                groupings: Mapping[str, Grouping]) -> dict[str, dict[str, npt.NDArray[np.float64]]]:
        """The ``verify_*`` columns of a subinterval (``counts`` by workload: ``record``'s)
        per rollup type and instance (``groupings``, of the workloads ``ids`` in plan order):
        sums of blocks checked, damaged, and damaged of each class (0 where none)."""
        per = np.zeros((len(ids), len(pv.COUNT_NAMES)), dtype=np.float64)
        for i, wid in enumerate(ids):
            got = counts.get(wid)
            if got is not None:
                per[i] = got
        cols = np.column_stack([per[:, 0], per[:, 1:].sum(axis=1), per[:, 1:]])
        out = {}
        for t, g in groupings.items():
            summed = np.zeros((g.n, cols.shape[1]))
            np.add.at(summed, g.of_workload, cols)
            out[t] = dict(zip(VERIFY_COLUMNS, summed.T, strict=True))
        return out

    def _finding(self, step: int, k: int, host: str, f: dict[str, Any]) -> None:
        """A damaged block in events.csv (the first ``EVENTS_MAX``) and in ``verify/`` (the
        first ``findings_kept``)."""
        number = int(f["lun"])
        # the LUN as the host that read it reaches it (a LUN several hosts reach: its path there)
        lun_host, path = next(((h, p) for (h, p), n in self.lun_numbers.items()
                               if h == host and n == number),
                              self.lun_names.get(number, (host, "?")))
        expected = int(f["expected"])
        got = f["found"]
        w = int(got["writer"])
        writer = self.writer_ids[w] if w < len(self.writer_ids) else "?"
        found_lun = ":".join(self.lun_names.get(int(got["lun"]), ("?", "?")))
        text = (f"verify: {f['class']} block at offset {f['offset_bytes']} of LUN {path} "
                f"(workload {f['workload_id']}): expected {expected_words(expected)}, found "
                f"{stamp_words(got, self.run_key, writer, found_lun)} (sector {f['sector']})")
        if self._told < EVENTS_MAX:
            self.event("ERROR", text, host=lun_host, kind="verify", step=step, subinterval=k)
        elif self._told == EVENTS_MAX:
            self.event("ERROR", f"verify: more damaged blocks than {EVENTS_MAX}: the rest are "
                       "counted in the verify columns, not told one by one", host=lun_host,
                       kind="verify", step=step, subinterval=k)
        self._told += 1
        if self._kept < self.config.findings_kept:
            self._kept += 1
            keep(self.run_dir / "verify" / "damaged", f"{self._kept:04d}-step{step:04d}-sub{k:04d}",
                 f, host=lun_host, lun=path, run_key=self.run_key, writer=writer,
                 found_lun=found_lun, context={"step": step, "subinterval": k})

    def stop_wanted(self) -> bool:
        """Whether ``on_error: stop`` ends the step running now: it found damage."""
        return self.config.on_error == "stop" and self.found > self._found_at_step

    # ------------------------------------------------------------------ after a step
    def step_done(self) -> None:
        """The map as it stands, snapshot whole (the journal starts over); a host's own map
        of a LUN another host wrote in the step is behind the master's from now on."""
        for number, wrote in self._wrote.items():
            synced = self.synced.get(number, set())
            self.synced[number] = {h for h in synced if wrote <= {h}}
        self._wrote = {}
        if self.map is not None:
            self.map.snapshot()

    def close(self) -> None:
        if self.map is not None:
            self.map.close()

    def summary(self) -> dict[str, Any]:
        """The run's verification in numbers: blocks checked and damaged by class."""
        total = (np.sum(list(self.counts.values()), axis=0) if self.counts
                 else np.zeros(len(pv.COUNT_NAMES), np.int64))
        return {"blocks_checked": int(total[0]), "damaged_blocks": self.found,
                **{name: int(total[1 + i]) for i, name in enumerate(pv.CLASSES)}}


def verify_misfit(inst: WorkloadInstance, params: WorkloadParams) -> str | None:
    """Why ``params`` (``inst``'s after a live edit) cannot be verified, or None: a blocksize
    of whole map blocks, and no dedupable data (``master.config.verify``'s rules)."""
    if params.blocksize_bytes % pv.MAP_BLOCK_BYTES:
        return (f"verify: every workload's blocksize must be a multiple of "
                f"{pv.MAP_BLOCK_BYTES} bytes (the map's block): {inst.id} would take "
                f"{params.blocksize_bytes}")
    if params.write_data == "dedupable" and params.writes:
        return (f"verify: dedupable data cannot be verified (each verified block carries its "
                f"own offset, so no block repeats): {inst.id}")
    return None


def shared_overlap(instances: Sequence[WorkloadInstance],
                   params: Mapping[str, WorkloadParams] | None = None) -> str | None:
    """Why two hosts' workloads in ``instances`` (with ``params`` by id where given, else
    their own) could write one block of a verified LUN at once, or a host read blocks another
    host writes meanwhile, or None: on a LUN several hosts reach (one identity), different
    hosts' workloads keep to separate byte ranges wherever one of them writes."""
    by_lun: dict[str, list[tuple[WorkloadInstance, WorkloadParams]]] = {}
    for inst in instances:
        identity = str(inst.lun.lun.info.get("identity") or "")
        if identity:
            p = inst.params if params is None else params.get(inst.id, inst.params)
            by_lun.setdefault(identity, []).append((inst, p))
    for members in by_lun.values():
        for i, (a, pa) in enumerate(members):
            for b, pb in members[i + 1:]:
                if a.host == b.host or not (pa.writes or pb.writes):
                    continue
                ra, rb = _bytes(a, pa), _bytes(b, pb)
                if ra[0] < rb[1] and rb[0] < ra[1]:
                    return (f"verify: {a.id} and {b.id} reach one LUN from two hosts "
                            f"({a.lun.lun.path} on {a.host}, {b.lun.lun.path} on {b.host}: "
                            f"{a.lun.lun.info.get('identity')}), and {_says(a, pa, ra)} meet "
                            f"{_says(b, pb, rb)}: on a verified LUN two hosts keep to separate "
                            "ranges wherever one writes (range_start, range_end), so that no "
                            "block is written by one while the other uses it; from step to "
                            "step each host may use any block")
    return None


def _bytes(inst: WorkloadInstance, p: WorkloadParams) -> tuple[int, int]:
    return p.range_start_bytes, p.range_end_bytes or inst.lun.lun.size_bytes


def _says(inst: WorkloadInstance, p: WorkloadParams, r: tuple[int, int]) -> str:
    return f"{inst.name}'s {'writes' if p.writes else 'reads'} in bytes {r[0]:,}-{r[1]:,}"
