"""Adapts ``slave.worker.WorkerPool`` to the ``Backend`` the protocol session drives.

Owns the bookkeeping between the master's grants (``Continue(k)``) and the pool's
``keep_going`` (which readies the buffer collected last for the subinterval after next): a
collected buffer is handed back for reuse only once the master has granted the subinterval it
would run (``protocol.credit.reusable``). Nothing else: no protocol, no I/O.

Each workload runs on the engine its LUN's entry in the test asks for (``auto`` by default).
``IVYPY_SLAVE_ENGINE`` (``libaio``, ``threadpool`` or ``fake[...]``; ``auto`` or unset: the
test's choice) forces the engine of every workload, for diagnostics and tests.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import Any

from protocol import credit
from protocol.errors import IoEngineError
from protocol.params import WorkloadParams
from slave.engine import choose_engine
from slave.engine.verify_state import LoadedMap
from slave.luns import LunInfo
from slave.session import Collected
from slave.worker import WorkerPool


class WorkerBackend:
    """The production backend: worker processes running engine loops."""

    def __init__(
        self,
        n_workers: int | None = None,
        engine: str | None = None,
        cpus: list[int | None] | None = None,
    ) -> None:
        forced = engine or os.environ.get("IVYPY_SLAVE_ENGINE", "auto")
        #: the engine of every workload whatever the test asks, or None
        self.forced: str | None = None if forced == "auto" else forced
        self.pool = WorkerPool(n_workers, cpus=cpus)
        self.granted = -1
        self._collected: collections.deque[int] = collections.deque()
        self._running = False

    def create(self, workload_id: str, lun: LunInfo, params: WorkloadParams,
               engine: str = "auto", fallback: bool = False,
               verify: dict[str, int] | None = None,
               verify_map: LoadedMap | None = None) -> dict[str, Any]:
        info = self.pool.create_workload(
            workload_id,
            lun.path,
            self.forced or engine,
            params,
            logical_block_bytes=lun.logical_block_bytes,
            lun_size_bytes=lun.size_bytes,
            fallback=fallback,
            verify=verify,
            verify_map=verify_map,
        )
        out: dict[str, Any] = {"engine": info.engine, "worker": info.worker, "cpu": info.cpu}
        if info.warning:
            out["warning"] = info.warning
        return out

    def engine_for(self, lun: LunInfo) -> str:
        """As ``create`` would choose for ``auto``: an O_DIRECT read of the LUN's first block;
        ``unavailable`` where no engine could open it (the thread-pool engine opens it without
        O_DIRECT), or a LUN that O_DIRECT serves cannot have libaio (the create says why)."""
        try:
            kind = choose_engine(self.forced or "auto", lun.path, lun.logical_block_bytes).kind
        except IoEngineError:  # libaio asked for and not available here (create says why)
            return "unavailable"
        if kind == "threadpool":
            try:
                os.close(os.open(lun.path, os.O_RDONLY | os.O_CLOEXEC))
            except OSError:  # create says why
                return "unavailable"
        return kind

    def edit(self, workload_id: str, params: WorkloadParams) -> None:
        self.pool.edit_workload(workload_id, params)

    def edit_many(self, edits: Sequence[tuple[str, WorkloadParams]]) -> None:
        self.pool.edit_workloads(edits)

    def delete(self, workload_id: str) -> None:
        self.pool.delete_workload(workload_id)

    def go(self, start_ns: int, subinterval_ns: int, granted: int) -> None:
        self.granted = granted
        self._collected.clear()
        self.pool.go(start_ns, subinterval_ns)
        self._running = True

    def grant(self, subinterval: int) -> None:
        self.granted = max(self.granted, subinterval)
        self._hand_back()

    def stop_after(self, subinterval: int) -> None:
        """The step ends with ``subinterval``: the session halts right after collecting it.
        The following buffer is readied anyway so that the boundary at the end of
        ``subinterval`` is an ordinary switch, not a 'master late' (the few ms of I/O it runs
        before the halt are discarded)."""
        self.grant(subinterval + 1)

    def _hand_back(self) -> None:
        while self._running and self._collected and credit.reusable(self._collected[0],
                                                                     self.granted):
            self._collected.popleft()
            self.pool.keep_going()

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        res = self.pool.collect(subinterval, deadline_ns)  # a WorkerLateError is the session's
        ids = list(res.workload_ids)
        errors = [
            f"{wid}: {kind} x{count}"
            for wid, kinds in res.io_errors.items()
            for kind, count in kinds.items()
        ]
        return Collected(
            workload_ids=ids,
            stats=res.batch,
            switch_ns=[il.switch_done_ns for il in res.interlock],
            interlock=[
                {"worker": il.worker, "switch_delay_ns": il.switch_done_ns,
                 "handover_delay_ns": il.handed_over_ns}
                for il in res.interlock
            ],
            io_errors=errors,
            verify=res.verify,
        )

    def release(self, subinterval: int) -> None:
        self._collected.append(subinterval)
        self._hand_back()

    def halt(self) -> None:
        self._running = False
        self._collected.clear()
        self.pool.stop()

    def final_verify(self) -> dict[str, Any] | None:
        return self.pool.take_final_verify()

    def load_map_part(self, lun: int, first_block: int, data: bytes) -> bool:
        return self.pool.load_map_part(lun, first_block, data)

    def close(self) -> None:
        self.pool.close()
