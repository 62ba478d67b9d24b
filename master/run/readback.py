"""``ivypy verify RUN_DIR``: every block a verified run's map holds, read back once on the host
that wrote it and checked there, every damaged one named.

Owns ``ReadBack``: the run folder's map loaded (read only: the run's own files are not
touched), a folder of its own (``verify-YYYYmmdd-HHMMSS``), each host of the map's LUNs
reached as the run reached it (its test's ``hosts:``), each LUN's map handed over with the
crashes it must account for (every attempt that ended, the last included, with its writers'
confirmed serials: the crash rule of ``--resume``, docs/verify.md) and read back
(``VerifyLun``) on the LUN's first host (a LUN several hosts reach), its progress on the
console, and what was found written as it comes: ``verify.csv`` (a row per damaged extent),
``damaged/`` (the first blocks whole), ``verify.json`` (the totals and how it ended). Exit 0
clean, 5 damaged, 2 a folder or LUN that cannot be verified, 3 a host lost, 4 the folder not
written, 130 interrupted. It must not write to a LUN or to the run's own files.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import functools
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import numpy as np

from master.config import TestConfig
from master.hosts.connection import Connector
from master.hosts.session import HostSession, SlaveEvent
from master.run.fleet import INTERRUPT_WAIT_S, Fleet, Interrupted
from master.run.outcome import (
    EXIT_CONFIG,
    EXIT_DAMAGED,
    EXIT_HOST,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT,
)
from master.verify.damaged import keep
from master.verify.mapstore import MapLun, VerifyMap
from protocol import verify as pv
from protocol.errors import HostError, IvyError, OutputError, ProtocolError
from protocol.messages import Ack, Error, VerifyFound

#: verify.csv's columns: one row per damaged extent (consecutive blocks alike)
COLUMNS: Final = ("host", "lun", "offset_bytes", "length_bytes", "class", "expected_generation",
                  "found_generation", "found_lun", "found_offset_bytes", "writer")
#: a LUN's progress on the console at most this often (plain lines)
PROGRESS_EVERY_S: Final = 2.0
#: damaged blocks kept whole in ``damaged/`` (the run's ``findings_kept`` when it has one)
KEPT_DEFAULT: Final = 64


@dataclass
class LunDone:
    """One LUN's read-back: where, what the map holds, and what came of it."""

    lun: MapLun
    blocks_total: int
    blocks_done: int = 0
    bytes_read: int = 0
    extents: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    told_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        counts = self.info.get("counts") or [self.blocks_done] + [0] * len(pv.CLASSES)
        return {"host": self.lun.host, "lun": self.lun.lun, "number": self.lun.number,
                "blocks_in_map": self.blocks_total, "blocks_checked": int(counts[0]),
                "damaged_blocks": int(sum(counts[1:])), "damaged_extents": self.extents,
                **{c: int(counts[1 + i]) for i, c in enumerate(pv.CLASSES)},
                "adopted_blocks": int(self.info.get("adopted", 0)),
                "bytes_read": self.bytes_read, "seconds": self.info.get("seconds"),
                "direct_io": self.info.get("direct"), "error": self.error}


def out_folder(run_dir: Path, now: float | None = None) -> Path:
    """A new folder ``verify-YYYYmmdd-HHMMSS`` in ``run_dir`` (``-2``, ``-3`` ... when that
    second's is taken), made here."""
    stem = "verify-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1, 1000):
        path = run_dir / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(str(run_dir / stem))


class ReadBack:
    """The read-back of one run folder (``run_dir``, its test ``cfg``, its map ``vm``);
    ``connect`` starts a host's slave as the run does; ``say`` prints a console line."""

    def __init__(self, run_dir: Path, cfg: TestConfig, vm: VerifyMap, *, connect: Connector,
                 say: Callable[[str], None], live: bool = False,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.run_dir = run_dir
        self.cfg = cfg
        self.vm = vm
        self.connect = connect
        self.say = say
        self.live = live  # one line rewritten in place (a terminal), else a line each
        self.clock = clock
        self.fleet = Fleet(clock)
        self.kept_max = cfg.verify.findings_kept if cfg.verify is not None else KEPT_DEFAULT
        self.kept = 0
        self.luns = [LunDone(x, int(np.count_nonzero(vm.map_of(x.number) & pv.GEN_MASK)))
                     for x in vm.luns]
        self.writers = {w.number: w.workload for w in vm.writers}
        self.folder: Path | None = None
        self._csv: IO[str] | None = None
        self._rows: Any = None
        self.started = time.time()
        #: a failure of this side's while a host's words were taken (the folder not written,
        #: a garbled message): the read-back ends on it
        self.failure: IvyError | None = None

    # ------------------------------------------------------------------ the whole of it
    async def execute(self) -> tuple[int, str]:
        """Read every LUN back; the exit status and the last word."""
        try:
            self.folder = out_folder(self.run_dir)
            self._csv = open(self.folder / "verify.csv", "w", newline="",  # noqa: SIM115
                             encoding="utf-8")  # closed by _finish
            self._rows = csv.writer(self._csv)
            self._rows.writerow(COLUMNS)
            self._csv.flush()
        except OSError as exc:
            return EXIT_OUTPUT, str(OutputError(exc.filename or str(self.run_dir), exc))
        self.say(f"ivypy: verify: reading back {sum(x.blocks_total for x in self.luns):,} "
                 f"blocks of {len(self.luns)} LUN(s) into {self.folder}")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._interrupt)
        code, message = EXIT_OK, ""
        try:
            await self.fleet.or_interrupted(self._start_hosts(), "starting hosts")
            await self.fleet.or_interrupted(asyncio.gather(*(
                self._host(name) for name in self.fleet.sessions)), "reading back")
        except Interrupted as exc:
            code, message = EXIT_INTERRUPTED, str(exc)
        except HostError as exc:
            code, message = EXIT_HOST, str(exc)
            if isinstance(self.failure, OutputError):
                code, message = EXIT_OUTPUT, str(self.failure)
            elif self.failure is not None:
                message = str(self.failure)
        except _Refused as exc:
            code, message = EXIT_CONFIG, str(exc)
        except ProtocolError as exc:
            code, message = EXIT_HOST, str(exc)
        finally:
            await self.fleet.close_all(INTERRUPT_WAIT_S / 2 if self.fleet.interrupted.is_set()
                                       else 2.0)
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
        if self.live:
            self.say("")
        damaged = sum(x.summary()["damaged_blocks"] for x in self.luns)
        if code == EXIT_OK and damaged:
            code = EXIT_DAMAGED
        if code in (EXIT_OK, EXIT_DAMAGED):
            message = self._verdict()
        elif damaged:  # what was found before it ended is the first news
            code, message = EXIT_DAMAGED, f"{self._verdict()}; then: {message}"
        try:
            self._finish(code, message)
        except OSError as exc:
            if code in (EXIT_OK, EXIT_DAMAGED):
                code, message = EXIT_OUTPUT, str(OutputError(exc.filename or "", exc))
        return code, message

    def _interrupt(self) -> None:
        if not self.fleet.interrupted.is_set():
            self.say("ivypy: verify: interrupted: stopping the read-back (what was found is "
                     "kept)")
            self.fleet.interrupt()

    def _verdict(self) -> str:
        checked = sum(x.summary()["blocks_checked"] for x in self.luns)
        by = {c: sum(x.summary()[c] for x in self.luns) for c in pv.CLASSES}
        damaged = sum(by.values())
        adopted = sum(x.summary()["adopted_blocks"] for x in self.luns)
        taken = (f"; {adopted:,} blocks held writes the run's master never heard of (taken "
                 "as written)" if adopted else "")
        if not damaged:
            return f"no damaged block in {checked:,} blocks checked{taken}"
        classes = ", ".join(f"{n:,} {c}" for c, n in by.items() if n)
        return (f"data verification found {damaged:,} damaged blocks ({classes}) in "
                f"{checked:,} checked{taken}: {self.folder}/verify.csv")

    def _finish(self, code: int, message: str) -> None:
        assert self.folder is not None
        if self._csv is not None:
            self._csv.close()
        doc = {"run": str(self.run_dir), "started": time.strftime(
                   "%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
               "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "exit_code": code,
               "message": message, "run_key": self.vm.run_key, "attempt": self.vm.attempt,
               "luns": [x.summary() for x in self.luns]}
        path = self.folder / "verify.json"
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------ hosts
    async def _start_hosts(self) -> None:
        names = list(dict.fromkeys(x.host for x in self.vm.luns))
        missing = [n for n in names if n not in {h.name for h in self.cfg.hosts}]
        if missing:
            raise _Refused(f"the map's host {missing[0]} is not in the run's test.yaml")

        async def start(name: str) -> None:
            host = self.cfg.host(name)
            conn = await self.connect(host)
            hs = HostSession(conn, name, clock=self.clock, on_event=self._event,
                             watchdog_s=host.watchdog_seconds)
            self.fleet.sessions[name] = hs
            await hs.start()

        results = await asyncio.gather(*(start(n) for n in names), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        self.fleet.sessions = {n: self.fleet.sessions[n] for n in names}

    def _event(self, ev: SlaveEvent) -> None:
        self.say(f"ivypy: [{ev.host}] {ev.level}: {ev.message}")

    async def _host(self, name: str) -> None:
        hs = self.fleet.sessions[name]
        crashes = self.vm.crash_rows(with_last=True)
        for done in (x for x in self.luns if x.lun.host == name):
            lun = done.lun
            if done.blocks_total == 0:
                continue
            refused = await hs.load_map(lun.number, self.vm.map_of(lun.number).tobytes(),
                                        crashes)
            if refused is None:
                target = {"lun": lun.number, "first_bytes": lun.first_bytes,
                          "size_bytes": lun.size_bytes, "run_key": self.vm.run_key,
                          "attempt": self.vm.attempt, "writer": 0}
                answer = await hs.verify_lun(lun.lun, target, self.kept_max - self.kept,
                                             functools.partial(self._found, done))
            if refused is not None or isinstance(answer, Error):
                err = refused if refused is not None else answer
                assert isinstance(err, Error)
                done.error = f"{err.kind}: {err.message}"
                # the slave's refusal names its host and the LUN
                raise _Refused(err.message) if err.kind in ("config", "preflight") else \
                    HostError(err.message, host=name)
            assert isinstance(answer, Ack)
            done.info = dict(answer.info)
            self._progress(done, end=True)

    # ------------------------------------------------------------------ what comes back
    def _found(self, done: LunDone, msg: VerifyFound) -> None:
        """A host's word of its read-back (from its reader): a failure here ends the host's
        read-back (``failure`` says why)."""
        if self.failure is not None:
            return
        try:
            extents = pv.extents_from_wire(msg.extents)
            done.blocks_done, done.bytes_read = msg.blocks_done, msg.bytes_read
            self._write(done, extents)
            for f in msg.kept:
                self._keep(done, f)
        except ValueError as exc:
            self.failure = HostError(f"read-back of {done.lun.lun}: {exc}", host=done.lun.host)
        except OSError as exc:
            self.failure = OutputError(exc.filename or str(self.folder), exc)
        if self.failure is not None:
            self.fleet.sessions[done.lun.host].mark_failed(str(self.failure))
            return
        self._progress(done)

    def _write(self, done: LunDone, extents: np.ndarray) -> None:
        """Extents as rows (an extent that continues the last row sent is its own row: the
        slave joins what one message holds)."""
        lun = done.lun
        for e in extents:
            stamped = int(e["stamp"]) != pv.STAMP_NONE
            found_lun = ""
            if stamped:
                try:
                    other = self.vm.lun(int(e["found_lun"]))
                    found_lun = other.lun if other.host == lun.host else f"{other.host}:{other.lun}"
                except KeyError:
                    found_lun = f"#{int(e['found_lun'])}"
            self._rows.writerow((
                lun.host, lun.lun, int(e["offset_bytes"]), int(e["length_bytes"]),
                pv.CLASSES[int(e["cls"]) - 1], pv.gen_of(int(e["expected"])),
                int(e["found_gen"]) if stamped else "", found_lun,
                int(e["found_offset_bytes"]) if stamped else "",
                self.writers.get(int(e["found_writer"]), f"#{int(e['found_writer'])}")
                if stamped else ""))
        done.extents += len(extents)
        if len(extents) and self._csv is not None:
            self._csv.flush()

    def _keep(self, done: LunDone, f: dict[str, Any]) -> None:
        if self.kept >= self.kept_max or self.folder is None:
            return
        self.kept += 1
        got = f["found"]
        try:
            other = self.vm.lun(int(got["lun"]))
            found_lun = f"{other.host}:{other.lun}"
        except KeyError:
            found_lun = "?"
        keep(self.folder / "damaged", f"{self.kept:04d}", {**f, "workload_id": "verify"},
             host=done.lun.host, lun=done.lun.lun, run_key=self.vm.run_key,
             writer=self.writers.get(int(got["writer"]), "?"), found_lun=found_lun,
             context={"read_back": self.folder.name})

    def _progress(self, done: LunDone, end: bool = False) -> None:
        now = time.monotonic()
        if not end and now - done.told_s < (0.25 if self.live else PROGRESS_EVERY_S):
            return
        done.told_s = now
        if self.live:
            total = sum(x.blocks_total for x in self.luns)
            got = sum(x.blocks_done for x in self.luns)
            damaged = sum(x.extents for x in self.luns)
            self.say(f"\r\x1b[Kverify: {100 * got / max(total, 1):.0f} % ({got:,} of "
                     f"{total:,} blocks), {damaged:,} damaged extents")
            return
        gib = done.bytes_read / 2**30
        secs = done.info.get("seconds")
        rate = f", {done.bytes_read / secs / 1e6:.0f} MB/s" if end and secs else ""
        self.say(f"ivypy: verify: [{done.lun.host}] {done.lun.lun}: "
                 f"{100 * done.blocks_done / max(done.blocks_total, 1):.0f} % "
                 f"({done.blocks_done:,} of {done.blocks_total:,} blocks, {gib:.2f} GiB"
                 f"{rate}), {done.extents:,} damaged extents" + (" - done" if end else ""))


class _Refused(IvyError):
    """A LUN or host that cannot be read back (exit 2)."""


def run_read_back(run_dir: Path, cfg: TestConfig, vm: VerifyMap, *, connect: Connector,
                  plain: bool) -> tuple[int, str]:
    """``ReadBack.execute`` to its end (blocking), printing to stdout."""
    live = not plain and sys.stdout.isatty()

    def say(line: str) -> None:
        if live and not line.startswith("\r"):
            line = "\r\x1b[K" + line + "\n"
        elif not live:
            line += "\n"
        sys.stdout.write(line)
        sys.stdout.flush()

    rb = ReadBack(run_dir, cfg, vm, connect=connect, say=say, live=live)
    return asyncio.run(rb.execute())

