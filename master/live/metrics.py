"""Live metrics for Prometheus while a run goes (``ivypy run --metrics ADDR:PORT``, the test's
``metrics: {listen: ADDR:PORT, token_file: FILE}``; docs/metrics.md).

Owns ``RunMetrics``: per step and rollup instance, by ``op`` (read, write), the I/Os, bytes and
errors, and the service and response times as classic histograms whose ``le`` bounds are
bounds of ivypy's own bucket ladder (``LE_NS``: about 40 from 1 us to 10 s, each the upper end
of a ladder bucket, so every count is exact: sums over hosts and ``histogram_quantile`` are
exact to the coarse bucket), cumulative over the run, advancing once per subinterval; gauges of
the step running, its subinterval, each instance's IOPS setting and its hosts' CPU, DFC's
setting, focus value and target, and each finished step's validity. A finished step's
series are served until ``KEPT_FINISHED_STEPS`` later steps have started, then dropped, so
that what a scrape holds does not grow with the steps. ``MetricsServer`` serves
them (``GET /metrics``, OpenMetrics or Prometheus text as the scraper asks, through
``prometheus_client``'s encoders, from a copy rendered on a thread), with a bearer token when
one is set (else 401). It is fed
by the run (``master.run``) and decides nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from protocol.batch import StatsBatch
from protocol.buckets import OVERFLOW_INDEX, UPPER_NS
from protocol.stats import BYTES, ERRORS, OPS, ROWS_PER_WORKLOAD, SUM

log = logging.getLogger(__name__)


def _le_ns() -> npt.NDArray[np.int64]:
    """About 40 bounds from 1 us to 10 s, each the largest value (ns) a ladder bucket holds:
    a coarse bucket is a whole number of the ladder's."""
    tops = UPPER_NS[:OVERFLOW_INDEX].astype(np.int64) - 1
    want = np.geomspace(1e3, 1e10, 40)
    picked = {int(tops[int(np.argmin(np.abs(tops - t)))]) for t in want}
    return np.array(sorted(picked), dtype=np.int64)


#: the histograms' bounds in ns (each a ladder bucket's top), and every ladder bucket's coarse
#: bucket (``len(LE_NS)``: +Inf, past the last bound and the overflow bucket)
LE_NS: Final = _le_ns()
_COARSE: Final = np.append(
    np.searchsorted(LE_NS, UPPER_NS[:OVERFLOW_INDEX].astype(np.int64) - 1, side="left"),
    LE_NS.size).astype(np.intp)
#: a finished step's series are served while this many later steps start, then dropped (its
#: validity is served to the run's end)
KEPT_FINISHED_STEPS: Final = 2
OPS_LABELS: Final = ("read", "write")
KINDS: Final = ("service", "response")


@dataclass
class _Series:
    """One step's and rollup type's instances, cumulative: ``counters`` (I, op, ops/bytes/
    errors), ``sums_s`` (I, op, kind) and ``hist`` (I, op, kind, coarse bucket)."""

    names: tuple[str, ...]
    counters: npt.NDArray[np.int64]
    sums_s: npt.NDArray[np.float64]
    hist: npt.NDArray[np.int64]
    iops_setting: npt.NDArray[np.float64]
    cpu_busy: npt.NDArray[np.float64]

    @classmethod
    def empty(cls, names: Sequence[str]) -> _Series:
        n = len(names)
        return cls(tuple(names), np.zeros((n, 2, 3), np.int64), np.zeros((n, 2, 2)),
                   np.zeros((n, 2, 2, LE_NS.size + 1), np.int64), np.full(n, np.nan),
                   np.full(n, np.nan))


#: The lines a scrape holds per rollup instance of a step (two ``op``s of three counters and
#: two histograms of 43 lines, two gauges) ...
LINES_PER_INSTANCE = 180
#: ... and the instances of one step served past which the run says, once, that a scrape is
#: larger than a Prometheus server is meant to take from one target (1.8 million lines a
#: step; the two steps before it are served too)
WARN_INSTANCES = 10_000


@dataclass(eq=False)  # a collector is registered by identity
class RunMetrics(Collector):
    """What the scrapes of one run read; see the module docstring. ``warn`` is told, once,
    of a step whose instances served pass ``WARN_INSTANCES`` (the message, the step)."""

    test: str
    series: dict[tuple[int, str, str], _Series] = field(default_factory=dict)
    #: the rollup types served (None: every one)
    rollups: frozenset[str] | None = None
    step: tuple[int, str] | None = None
    subinterval: int = -1
    valid: dict[tuple[int, str], bool] = field(default_factory=dict)
    dfc: dict[tuple[int, str, str], tuple[float, float, float]] = field(default_factory=dict)
    warn: Callable[[str, int], None] | None = None
    _warned: bool = False

    def add(self, step: int, step_name: str, rollup: str, names: Sequence[str],
            of_group: npt.NDArray[np.intp], batch: StatsBatch,
            columns: Mapping[str, npt.NDArray[np.float64]] | None = None) -> None:
        """One subinterval of rollup type ``rollup``: ``batch`` holds its groups (with their
        histograms), ``of_group`` each group's instance among ``names``; ``columns`` the
        instances' row columns (``iops_setting``, ``cpu_busy_pct``) for the gauges."""
        s = self.series.get((step, step_name, rollup))
        if s is None or s.names != tuple(names):
            s = self.series[(step, step_name, rollup)] = _Series.empty(names)
            self._check_size(step, step_name)
        self.step = (step, step_name)
        of = np.asarray(of_group, dtype=np.intp)
        counters = batch.counters.reshape(-1, 2, 2, 3).sum(axis=1)  # cat = 2*seq + write
        np.add.at(s.counters, of, counters)
        sums = batch.lat[..., SUM].reshape(-1, 2, 2, 2).sum(axis=1)  # (G, op, kind) ns
        np.add.at(s.sums_s, of, sums / 1e9)
        if batch.rows.size:
            rows = batch.rows.astype(np.int64)
            group, within = np.divmod(rows, ROWS_PER_WORKLOAD)
            op, kind = (within // 2) % 2, within % 2
            np.add.at(s.hist, (of[group], op, kind, _COARSE[batch.buckets.astype(np.intp)]),
                      batch.counts)
        if columns is not None:
            for name, into in (("iops_setting", s.iops_setting), ("cpu_busy_pct", s.cpu_busy)):
                if name in columns:
                    into[:] = columns[name]

    def _check_size(self, step: int, step_name: str) -> None:
        """``warn`` once a step's instances served pass ``WARN_INSTANCES``."""
        if self.warn is None or self._warned:
            return
        n = sum(len(s.names) for (st, name, _), s in self.series.items()
                if (st, name) == (step, step_name))
        if n > WARN_INSTANCES:
            self._warned = True
            served = ("every rollup type" if self.rollups is None
                      else "rollups " + ", ".join(sorted(self.rollups)))
            self.warn(f"live metrics: step {step_name} serves {n:,} rollup instances "
                      f"({served}), about {n * LINES_PER_INSTANCE:,} lines a scrape for it "
                      "alone: more than a Prometheus server is meant to take from one "
                      "target; name fewer rollup types to serve (metrics: {listen: ..., "
                      "rollups: [all, host]}, or --metrics-rollups all,host)", step)

    def serves(self, rollup: str) -> bool:
        """Whether rollup type ``rollup``'s instances are served (``metrics: rollups``)."""
        return self.rollups is None or rollup in self.rollups

    def start_step(self, step: int, name: str) -> None:
        """Step ``step`` starts: the series (and DFC's gauges) of the steps numbered below
        ``step - KEPT_FINISHED_STEPS`` are dropped. Served on to the run's end, every step's
        instances were held and rendered at every scrape (at 10,000 workloads about 17 MB a
        step and 2 million lines a scrape a step)."""
        for key in [k for k in self.series if k[0] < step - KEPT_FINISHED_STEPS]:
            del self.series[key]
        for key in [k for k in self.dfc if k[0] < step - KEPT_FINISHED_STEPS]:
            del self.dfc[key]
        self.step, self.subinterval = (step, name), -1

    def snapshot(self) -> RunMetrics:
        """A copy of what a scrape reads now (its arrays copied): rendered away from the run's
        event loop while the run goes on adding to this one."""
        return RunMetrics(
            self.test,
            {k: _Series(s.names, s.counters.copy(), s.sums_s.copy(), s.hist.copy(),
                        s.iops_setting.copy(), s.cpu_busy.copy())
             for k, s in self.series.items()},
            rollups=self.rollups, step=self.step, subinterval=self.subinterval,
            valid=dict(self.valid), dfc=dict(self.dfc))

    def set_step(self, step: int, name: str, subinterval: int) -> None:
        self.step, self.subinterval = (step, name), subinterval

    def set_valid(self, step: int, name: str, valid: bool) -> None:
        self.valid[(step, name)] = valid

    def set_dfc(self, step: int, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """DFC's moves (their dfc.csv rows): per focus instance, the IOPS it set, the focus
        metric as measured, and its target."""
        def number(row: Mapping[str, Any], key: str) -> float:
            try:
                return float(row.get(key))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return float("nan")

        for row in rows:
            self.dfc[(step, name, str(row.get("instance", "")))] = (
                number(row, "new_iops"), number(row, "measured"), number(row, "target"))

    # ------------------------------------------------------------------ exposition
    def collect(self) -> Iterator[Metric]:
        base = ["test", "step", "rollup", "instance", "op"]
        ios = CounterMetricFamily("ivypy_ios", "I/Os completed", labels=base)
        nbytes = CounterMetricFamily("ivypy_bytes", "bytes transferred", labels=base)
        errors = CounterMetricFamily("ivypy_io_errors", "I/Os failed or short", labels=base)
        hists = {k: HistogramMetricFamily(f"ivypy_{k}_time_seconds",
                                          f"{k} time of each I/O", labels=base, unit="seconds")
                 for k in KINDS}
        setting = GaugeMetricFamily("ivypy_iops_setting", "the IOPS the instance's workloads "
                                    "are set to (absent: max)", labels=base[:4])
        cpu = GaugeMetricFamily("ivypy_host_cpu_busy_ratio", "its hosts' CPU busy, 0-1",
                                labels=base[:4])
        les = [f"{ns / 1e9:.9g}" for ns in LE_NS] + ["+Inf"]
        for (step, step_name, rollup), s in self.series.items():
            st = f"{step}:{step_name}"
            for i, inst in enumerate(s.names):
                for o, op in enumerate(OPS_LABELS):
                    labels = [self.test, st, rollup, inst, op]
                    ios.add_metric(labels, float(s.counters[i, o, OPS]))
                    nbytes.add_metric(labels, float(s.counters[i, o, BYTES]))
                    errors.add_metric(labels, float(s.counters[i, o, ERRORS]))
                    for k, kind in enumerate(KINDS):
                        cum = np.cumsum(s.hist[i, o, k]).tolist()
                        hists[kind].add_metric(labels, list(zip(les, map(float, cum),
                                                                strict=True)),
                                               sum_value=float(s.sums_s[i, o, k]))
                if math.isfinite(s.iops_setting[i]):
                    setting.add_metric([self.test, st, rollup, inst], float(s.iops_setting[i]))
                if math.isfinite(s.cpu_busy[i]):
                    cpu.add_metric([self.test, st, rollup, inst], float(s.cpu_busy[i]) / 100)
        yield from (ios, nbytes, errors, *hists.values(), setting, cpu)
        now = GaugeMetricFamily("ivypy_step", "the step running (its number)",
                                labels=["test", "step"])
        sub = GaugeMetricFamily("ivypy_subinterval", "the last subinterval recorded",
                                labels=["test", "step"])
        if self.step is not None:
            label = [self.test, f"{self.step[0]}:{self.step[1]}"]
            now.add_metric(label, float(self.step[0]))
            sub.add_metric(label, float(self.subinterval))
        valid = GaugeMetricFamily("ivypy_step_valid", "1 where the step's measurement was "
                                  "valid, 0 where not (once it has ended)",
                                  labels=["test", "step"])
        for (step, name), ok in self.valid.items():
            valid.add_metric([self.test, f"{step}:{name}"], 1.0 if ok else 0.0)
        dfc = {n: GaugeMetricFamily(f"ivypy_dfc_{n}", text,
                                    labels=["test", "step", "instance"])
               for n, text in (("iops", "the total IOPS DFC set its focus instance to"),
                               ("focus", "the focus metric DFC holds, as last measured"),
                               ("target", "the focus metric's target"))}
        for (step, name, inst), values in self.dfc.items():
            for fam, value in zip(dfc.values(), values, strict=True):
                if math.isfinite(value):
                    fam.add_metric([self.test, f"{step}:{name}", inst], value)
        yield from (now, sub, valid, *dfc.values())


class MetricsUnavailable(Exception):
    """The metrics address cannot be listened on."""


class MetricsServer:
    """``GET /metrics`` of ``metrics`` on ``host:port`` (0: any free port; ``port`` says which
    once started), a bearer ``token`` required where one is given."""

    def __init__(self, metrics: RunMetrics, host: str, port: int, token: str | None = None
                 ) -> None:
        self.metrics = metrics
        self.host, self.port, self.token = host, port, token
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:
            raise MetricsUnavailable(f"metrics: cannot listen on {self.host}:{self.port}: "
                                     f"{exc.strerror or exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, *_ = [*lines[0].split(), "", ""][:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (x.partition(":") for x in lines[1:] if x)}
            await self._answer(writer, method, path, headers)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, writer: asyncio.StreamWriter, method: str, path: str,
                      headers: Mapping[str, str]) -> None:
        if path.split("?")[0] != "/metrics":
            self._reply(writer, "404 Not Found", "text/plain", b"only /metrics is here\n")
        elif method not in ("GET", "HEAD"):
            self._reply(writer, "405 Method Not Allowed", "text/plain", b"GET /metrics\n")
        elif self.token is not None and not hmac.compare_digest(
                headers.get("authorization", ""), f"Bearer {self.token}"):
            self._reply(writer, "401 Unauthorized", "text/plain",
                        b"a bearer token is required\n",
                        extra={"WWW-Authenticate": 'Bearer realm="ivypy"'})
        else:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            # a copy taken here, between two of the run's steps of work, rendered on a thread:
            # a scrape of many instances does not hold the run's loop for its whole text
            registry = CollectorRegistry(auto_describe=False)
            registry.register(self.metrics.snapshot())
            body = await asyncio.to_thread(encoder, registry)
            self._reply(writer, "200 OK", content_type, b"" if method == "HEAD" else body)
        await writer.drain()

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: str, content_type: str, body: bytes,
               extra: Mapping[str, Any] | None = None) -> None:
        head = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}", "Connection: close",
                *(f"{k}: {v}" for k, v in (extra or {}).items())]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
