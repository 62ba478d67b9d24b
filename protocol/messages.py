"""The messages master and slave exchange: one frozen dataclass per message.

Owns the vocabulary of the conversation and the type code of every message. Pure data: no
encoding (``protocol.codec``), no legality rules (``protocol.state``), no I/O.

Units live in names: ``_ns`` nanoseconds on the *sender's* monotonic clock unless stated,
``_bytes``, ``_s``. Field types are limited to what msgpack carries natively: ``int``, ``float``,
``str``, ``bool``, ``bytes``, ``None``, lists and string-keyed dicts of those. Arrays travel as
``bytes`` with the dtype stated in the field's documentation (always little-endian).

The conversation (see ``protocol/SPEC.md`` for the full story)::

    master                                   slave
    Hello ─────────────────────────────────►
          ◄───────────────────────────────── HelloReply
    Ping × n ──────────────────────────────►  (clock offset: keep the minimum-RTT sample)
          ◄───────────────────────────────── Pong × n
    DiscoverLuns ──────────────────────────►
          ◄───────────────────────────────── LunList
    CreateWorkload / EditWorkload(s) / DeleteWorkload ─►
          ◄───────────────────────────────── Ack (or Error, e.g. preflight refused)
    Go(start, subinterval, rollup plan) ───►
          ◄───────────────────────────────── SubintervalResult 0, 1, ... (per rollup group)
    Continue(k) / Stop(after=k) / edits ───►
          ◄───────────────────────────────── Stopped
    WindowRequest(first, last) ────────────►
          ◄───────────────────────────────── WindowResult (every workload, added up)
    LoadMap × n, VerifyLun (ivypy verify) ─►
          ◄───────────────────────────────── VerifyFound × n, Ack
    ... next step: edits, Go ...
    Bye ───────────────────────────────────►
          ◄───────────────────────────────── Bye
    Log and Error may come from the slave at any time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final


@dataclass(frozen=True)
class Message:
    """Base of every message; ``CODE`` is the type code on the wire."""

    CODE: ClassVar[int] = 0


# --------------------------------------------------------------------------- handshake
@dataclass(frozen=True)
class Hello(Message):
    """Master → slave, first message. The slave refuses another ``protocol_version``."""

    CODE: ClassVar[int] = 1
    protocol_version: int
    ivypy_version: str
    host: str  # the name the master uses for this host (log prefix, workload ids)
    master_time_ns: int


@dataclass(frozen=True)
class HelloReply(Message):
    """Slave → master: who and what the host is."""

    CODE: ClassVar[int] = 2
    protocol_version: int
    ivypy_version: str
    hostname: str
    kernel: str
    python_version: str
    numpy_version: str
    cores: int
    pid: int
    slave_time_ns: int
    # which loop runs the I/O: "compiled (...)" (slave/engine/compiled_loop), or "python: " and
    # why not (protocol 9; 8 called it paced_loop)
    io_loop: str


# --------------------------------------------------------------------------- clock
@dataclass(frozen=True)
class Ping(Message):
    """Master → slave; answered at once with ``Pong``. ``master_send_ns`` is the master's
    monotonic clock when sent."""

    CODE: ClassVar[int] = 3
    seq: int
    master_send_ns: int


@dataclass(frozen=True)
class Pong(Message):
    """Slave → master: the echoed ping and the slave's monotonic clock when it answered."""

    CODE: ClassVar[int] = 4
    seq: int
    master_send_ns: int
    slave_ns: int


# --------------------------------------------------------------------------- LUNs
@dataclass(frozen=True)
class DiscoverLuns(Message):
    """Master → slave: discover block devices, plus these file LUNs. Each entry of ``files``
    is ``{"path": str, "size_bytes": int | None, "create": bool}``. ``devices``: shell globs
    of the block device paths to describe, ``["*"]`` for every one (a selector by
    attributes); a device no glob matches is neither described nor read."""

    CODE: ClassVar[int] = 5
    seq: int
    files: list[dict[str, Any]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LunList(Message):
    """Slave → master: every LUN found, each ``{"info": LunInfo.to_dict(), "attributes":
    LunInfo.attributes(), "in_use": [reason, ...]}``."""

    CODE: ClassVar[int] = 6
    seq: int
    luns: list[dict[str, Any]]


# --------------------------------------------------------------------------- workloads
#: Workloads one slave runs at most (its shared statistics region has a block pair for each).
MAX_WORKLOADS_PER_HOST: Final = 1024


@dataclass(frozen=True)
class CreateWorkload(Message):
    """Master → slave: create a workload (id ``host:lun:name``) on a LUN. ``params`` holds the
    resolved workload parameters (bytes, fractions, ``iops`` None for max). Effective at the
    next boundary when a step is running, else at ``Go``. Preflight happens here. ``engine``
    is the LUN's engine choice (``auto``, ``libaio`` or ``threadpool``);
    ``allow_engine_fallback`` lets ``auto`` run on the thread pool where libaio cannot be
    had (else the create is refused). The ``Ack`` names the engine in use (``info.engine``).
    ``shared``: another session (ivypy run) may use the LUN too, if it says so as well; else a
    LUN another session holds is refused (protocol 10). ``verify``: the workload's writes are
    stamped and its reads checked against its LUN's map (``protocol.verify.TARGET_KEYS``;
    protocol 11)."""

    CODE: ClassVar[int] = 7
    seq: int
    workload_id: str
    lun_path: str
    params: dict[str, Any]
    allow_write: bool = False
    engine: str = "auto"
    allow_engine_fallback: bool = False
    shared: bool = False
    verify: dict[str, int] | None = None


@dataclass(frozen=True)
class EditWorkload(Message):
    """Master → slave: change some parameters of a workload from the next boundary on."""

    CODE: ClassVar[int] = 8
    seq: int
    workload_id: str
    params: dict[str, Any]


@dataclass(frozen=True)
class EditWorkloads(Message):
    """Master → slave: ``EditWorkload`` for many workloads in one request, all or none:
    ``edits`` is a list of ``[workload_id, params]``. One ``Ack``, or one ``Error`` naming the
    first workload refused, and then no edit of the request holds. DFC edits every workload of
    its instances every subinterval: one request per host, not one per workload."""

    CODE: ClassVar[int] = 21
    seq: int
    edits: list[list[Any]]


@dataclass(frozen=True)
class LoadMap(Message):
    """Master → slave, between steps: part of LUN ``lun``'s map of what a run wrote
    (``protocol.verify``'s map bytes, from block ``first_block`` on), for the LUN's verified
    workloads to check their reads against from their first I/O (a resumed run, ``ivypy
    verify``). Parts of one LUN add up; the first verified create on the LUN takes them (the
    host's own map of the LUN, once it has one, is newer). ``Ack`` (``info.blocks``: the
    LUN's blocks held so far), or ``Error`` (``config``) for a part that does not fit
    (protocol 11). ``crashes``: the attempts of the run that ended without their master
    hearing of every write, each ``[attempt, confirmed serial of writer 0, of writer 1, ...]``
    (-1: none), so that a write its master never heard of is taken into the map, not called
    damage (docs/verify.md) (protocol 12; 11 had one attempt in ``crashed_attempt`` and
    ``confirmed``)."""

    CODE: ClassVar[int] = 22
    seq: int
    lun: int
    first_block: int
    data: bytes
    crashes: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class VerifyLun(Message):
    """Master → slave, between steps, with no workload on the host (``ivypy verify``): read
    back once every block of ``lun_path`` that LUN ``target["lun"]``'s map (its ``LoadMap``
    parts, and the crash they account for) holds, and check each in the compiled loop.
    ``target``: the LUN's ``CreateWorkload.verify`` target (``writer`` unused). ``kept_max``:
    how many damaged blocks travel with their bytes. The slave answers with ``VerifyFound``
    as it goes (at least once a second), then ``Ack`` (``info``: blocks_checked, counts
    [checked, each class], damaged, bytes_read, seconds, direct) or ``Error`` (``config``:
    no map loaded, a LUN that cannot be opened or is too small; ``io``: a read that failed)
    (protocol 12)."""

    CODE: ClassVar[int] = 23
    seq: int
    lun_path: str
    target: dict[str, int]
    kept_max: int = 0


@dataclass(frozen=True)
class VerifyFound(Message):
    """Slave → master, while ``VerifyLun`` ``seq`` reads back: how far it is (map blocks
    checked of those the map holds, bytes read), the damaged extents found since the last
    (``protocol.verify.EXTENT_DTYPE``'s bytes, ascending; an extent may continue the last
    one sent), and the damaged blocks kept whole (``SubintervalResult.verify.findings``'
    form, the first ``kept_max`` of the read-back) (protocol 12)."""

    CODE: ClassVar[int] = 24
    seq: int
    blocks_done: int
    blocks_total: int
    bytes_read: int
    extents: bytes
    kept: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class DeleteWorkload(Message):
    """Master → slave: remove a workload from the next boundary on."""

    CODE: ClassVar[int] = 9
    seq: int
    workload_id: str


@dataclass(frozen=True)
class Ack(Message):
    """Slave → master: request ``seq`` done. ``effective_subinterval`` is the first subinterval
    the change holds for (-1 outside a running step: from the next ``Go``). ``info`` carries
    request-specific facts (e.g. the I/O engine chosen for a created workload)."""

    CODE: ClassVar[int] = 10
    seq: int
    effective_subinterval: int = -1
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- running
@dataclass(frozen=True)
class Go(Message):
    """Master → slave: start the step. Subinterval k runs over
    ``[start_ns + k * subinterval_ns, start_ns + (k + 1) * subinterval_ns)`` on the *slave's*
    monotonic clock (the master translated its start time with the measured offset).
    Subintervals 0 and 1 are granted; each later one needs a ``Continue``."""

    CODE: ClassVar[int] = 11
    step: int
    start_ns: int
    subinterval_ns: int
    #: The rollup plan: one entry per rollup type, ``{"type": str, "groups": [[workload_id,
    #: ...], ...], "histograms": bool}``. Every workload of the host is in exactly one group of
    #: every entry. Each ``SubintervalResult`` carries, per entry and group, the group's added
    #: statistics: with ``histograms`` its merged histograms (the master adds them across
    #: hosts), without them its percentile table (the group is a whole rollup instance).
    rollups: list[dict[str, Any]] = field(default_factory=list)
    #: The subintervals a ``WindowRequest`` may cover, ``keep_from`` .. ``keep_to`` (-1: to
    #: the step's end): the slave keeps every workload's statistics of those, for the window.
    keep_from: int = 0
    keep_to: int = -1
    #: True when the window will be ``keep_from`` .. ``keep_to`` or the step's last
    #: subinterval before it (a fixed-length step): the slave adds them up as they come
    #: instead of keeping each.
    fold: bool = False


@dataclass(frozen=True)
class Continue(Message):
    """Master → slave: subinterval ``subinterval`` may run. It must arrive before that
    subinterval's start boundary, else the slave stops with a 'master late' error."""

    CODE: ClassVar[int] = 12
    subinterval: int


@dataclass(frozen=True)
class Stop(Message):
    """Master → slave: ``after_subinterval`` is the last subinterval of this step (or at once,
    when it is -1 or already past): stop I/O at its end, send its result, then ``Stopped``."""

    CODE: ClassVar[int] = 13
    after_subinterval: int


@dataclass(frozen=True)
class SubintervalResult(Message):
    """Slave → master: one subinterval's statistics, added up by the rollup plan of ``Go``.

    ``workload_ids`` lists the host's workloads. ``rollups`` has one entry per entry of the
    plan, in its order: a ``protocol.batch.GroupStats.to_wire()`` dict over that entry's
    groups (counters and latency side statistics, and either the merged histograms or the
    percentile table). ``start_ns``/``end_ns`` are the scheduled boundaries and ``switch_ns``
    the times each worker actually switched buffers at the end boundary (slave clock). ``cpu`` holds
    ``busy_pct`` (whole host), ``per_core_busy_pct`` (list), ``slave_user_s``,
    ``slave_system_s``. ``interlock`` holds per worker ``switch_delay_ns`` (boundary → switch
    done) and ``handover_delay_ns`` (boundary → results handed to the sender).
    ``io_errors`` lists the first few I/O error descriptions of the subinterval.
    ``devices`` has one ``protocol.devstats.DeviceDelta.to_wire()`` dict per block device
    under the LUNs of the host's workloads, over this subinterval (protocol 7); a device
    without both samples (new in this subinterval, or gone) has no entry.
    ``verify`` (protocol 11; None when no workload verifies): the blocks the host's verified
    writes settled (``journal``: ``protocol.verify.journal_to_wire``), each verified
    workload's counts of blocks checked and damaged by class (``counts``: id -> the
    ``COUNT_NAMES``, only workloads that checked something), the damaged blocks found
    (``found``), the first of them in full (``findings``), and each writer's confirmed serial
    (``confirmed``: every write of it up to that serial is in a journal sent).
    """

    CODE: ClassVar[int] = 14
    step: int
    subinterval: int
    start_ns: int
    end_ns: int
    workload_ids: list[str]
    rollups: list[dict[str, Any]]
    cpu: dict[str, Any]
    interlock: list[dict[str, Any]]
    send_ns: int
    io_errors: list[str] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    verify: dict[str, Any] | None = None


@dataclass(frozen=True)
class Stopped(Message):
    """Slave → master: all I/O of the step has ended; ``last_subinterval`` was the last sent.
    ``verify`` (protocol 11): what data verification found after it, to the end of the
    step's drain (the form of ``SubintervalResult.verify``), or None."""

    CODE: ClassVar[int] = 15
    step: int
    last_subinterval: int
    verify: dict[str, Any] | None = None


@dataclass(frozen=True)
class WindowRequest(Message):
    """Master → slave, after ``Stopped``: every workload's statistics of step ``step`` added up
    over the subintervals ``first`` .. ``last`` (the measurement window), for the summary and
    the histogram files. Answered with ``WindowResult``, or an ``Error`` of kind ``config``
    when the slave did not keep those subintervals."""

    CODE: ClassVar[int] = 19
    seq: int
    step: int
    first: int
    last: int


@dataclass(frozen=True)
class WindowResult(Message):
    """Slave → master: the window asked for by ``seq``; ``stats`` is a
    ``StatsBatch.to_wire()`` dict whose rows follow ``workload_ids``."""

    CODE: ClassVar[int] = 20
    seq: int
    step: int
    first: int
    last: int
    workload_ids: list[str]
    stats: dict[str, Any]


# --------------------------------------------------------------------------- side channel
@dataclass(frozen=True)
class Log(Message):
    """Slave → master: an event worth a line in events.csv (ordinary logging goes to stderr).
    ``level`` is a ``logging`` level name."""

    CODE: ClassVar[int] = 16
    level: str
    message: str
    time_ns: int
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Error(Message):
    """Slave → master: something failed. ``kind`` is one of ``ERROR_KINDS``; ``seq`` names the
    request it answers (-1 if none). A fatal error is the slave's last message."""

    CODE: ClassVar[int] = 17
    kind: str
    message: str
    seq: int = -1
    workload_id: str = ""
    lun: str = ""
    fatal: bool = False


ERROR_KINDS: Final = ("preflight", "config", "io", "late", "protocol", "version", "internal")


@dataclass(frozen=True)
class Bye(Message):
    """Either side: the conversation ends. The master sends it; the slave answers with ``Bye``
    after stopping all I/O, then exits."""

    CODE: ClassVar[int] = 18
    reason: str = ""


MESSAGE_TYPES: Final[tuple[type[Message], ...]] = (
    Hello,
    HelloReply,
    Ping,
    Pong,
    DiscoverLuns,
    LunList,
    CreateWorkload,
    EditWorkload,
    DeleteWorkload,
    Ack,
    Go,
    Continue,
    Stop,
    SubintervalResult,
    Stopped,
    Log,
    Error,
    Bye,
    WindowRequest,
    WindowResult,
    EditWorkloads,
    LoadMap,
    VerifyLun,
    VerifyFound,
)

BY_CODE: Final[dict[int, type[Message]]] = {t.CODE: t for t in MESSAGE_TYPES}
assert len(BY_CODE) == len(MESSAGE_TYPES), "message codes must be unique"
