"""Fuzzing the slave's stdin: byte streams built from a valid conversation (mutated, cut,
reordered, with huge length headers), messages with random field values, and garbage are fed in
random pieces to a ``SlaveSession`` (fake backend, fake clock, no disk) as ``slave.main`` feeds
it, then EOF. Whatever comes in, the session must not raise, hang or hold more memory than a
bound; it must end; its output must be whole frames in a legal order with nothing after its
last word; and a stream that breaks the framing must end in a fatal ``Error`` of kind
``protocol`` or ``version`` (unless the slave said ``Bye`` before it got there).

Each example runs under a wall-clock alarm (a hang fails it), and the process's peak RSS in it
(VmHWM, reset before it) may not rise more than 32 MiB above its RSS at the start
(``tracemalloc`` would slow the examples fourfold: it traces the huge-header case alone). The
whole file takes about ten seconds."""

from __future__ import annotations

import errno
import re
import signal
import struct
import tracemalloc
from collections.abc import Iterator
from types import FrameType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import FRAME_HEADER_BYTES, FrameDecoder, encode
from protocol.errors import ProtocolError
from protocol.messages import (
    Ack,
    Bye,
    Continue,
    CreateWorkload,
    DeleteWorkload,
    DiscoverLuns,
    EditWorkload,
    EditWorkloads,
    Error,
    Go,
    Hello,
    LunList,
    Message,
    Ping,
    Pong,
    Stop,
    SubintervalResult,
    WindowRequest,
)
from protocol.stats import WorkloadStats
from protocol.version import PROTOCOL_VERSION
from slave import luns as lunmod
from slave.luns import LunInfo
from slave.session import Collected, SlaveSession
from tests.protocol.strategies import message_strategy
from tests.slave.test_session import FakeBackend

SUB = 1_000_000_000
A, B = "h1:/dev/fake0:a", "h1:/dev/fake0:b"
READ = {"iodepth": 4, "iops": 100.0, "read_fraction": 1.0}
#: a whole valid conversation, as the master would send it
SCRIPT: list[Message] = [
    Hello(PROTOCOL_VERSION, "0.1.0", "h1", 0),
    Ping(1, 5),
    DiscoverLuns(2, []),
    CreateWorkload(3, A, "/dev/fake0", READ),
    CreateWorkload(4, B, "/dev/fake0", {**READ, "iops": 300.0}),
    EditWorkload(5, A, {"iops": 200.0}),
    GO := Go(0, SUB, SUB, [{"type": "workload", "groups": [[A], [B]], "histograms": True},
                           {"type": "all", "groups": [[A, B]], "histograms": False}],
             keep_from=0, keep_to=-1),
    Continue(2),
    EditWorkloads(6, [[A, {"iops": 50.0}], [B, {"iops": 60.0}]]),
    Continue(3),
    Stop(3),
    WindowRequest(7, 0, 0, 2),
    DeleteWorkload(8, B),
    Ping(9, 10),
    Bye("run finished"),
]
FRAMES = [encode(m) for m in SCRIPT]
#: the message types either side sends, with random field values
MESSAGE_TYPES = [Hello, Ping, DiscoverLuns, CreateWorkload, EditWorkload, EditWorkloads,
                 DeleteWorkload, Go, Continue, Stop, WindowRequest, Bye, Pong, Ack, LunList,
                 Error, SubintervalResult]
HUGE_LENGTHS = [2**32 - 1, 2**31, 256 * 2**20 + 1, 200 * 2**20, 70_000]
EXAMPLE_LIMIT_S = 3.0
#: how far the process's peak RSS may rise in one example (a frame buffered whole would be
#: 200 MiB)
PEAK_GROWTH_BYTES = 32 * 2**20


class BoundedBackend(FakeBackend):
    """The fake backend, recording at most 1,000 I/Os per workload and subinterval (a fuzzed
    rate of 1e18 IOPS must not make the test itself allocate without bound)."""

    def collect(self, subinterval: int, deadline_ns: int) -> Collected:
        ids = sorted(self.workloads)
        stats = []
        for i, _wid in enumerate(ids):
            s = WorkloadStats()
            s.record(0, np.full(1000, 100_000 + i), np.full(1000, 150_000 + i), 4096)
            stats.append(s)
        return Collected(ids, stats, [0], [{"switch_delay_ns": 10}])


LUNS = {p: LunInfo(path=p, kind="block", name=p[5:], size_bytes=1 << 30,
                   logical_block_bytes=512, physical_block_bytes=4096)
        for p in ("/dev/fake0", "/dev/fake1")}


def describe_error(path: str, size_bytes: int | None = None, **_: Any) -> LunInfo:
    try:
        return LUNS[path]
    except KeyError:
        raise FileNotFoundError(errno.ENOENT, "no such LUN here", path) from None


def _no_file_luns(path: str, *args: Any, **kwargs: Any) -> LunInfo:
    raise FileNotFoundError(errno.ENOENT, "the fuzz makes no file LUNs", path)


@pytest.fixture(scope="module", autouse=True)
def _no_disk() -> Iterator[None]:
    """Discovery finds no block device and makes no file LUN; no child process is looked up."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lunmod, "discover_block_devices", lambda **_: [])
        mp.setattr(lunmod, "file_lun", _no_file_luns)
        mp.setattr(SlaveSession, "_child_pids", staticmethod(lambda: []))
        yield


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"an example ran longer than {EXAMPLE_LIMIT_S} s")


# ------------------------------------------------------------------------------ the streams
_fraction = st.floats(min_value=0, max_value=1, exclude_max=True)
_mutation = st.one_of(
    st.tuples(st.just("flip"), _fraction, _fraction, st.integers(0, 255)),
    st.tuples(st.just("insert"), _fraction, _fraction, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), _fraction, _fraction, st.integers(1, 16)),
    st.tuples(st.just("truncate"), _fraction, _fraction, st.just(0)),
)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """One stdin as the reads that bring it: frames of the script (a prefix, with a part left
    out, or chosen and reordered), messages with random field values, or garbage; maybe a huge
    length header; grouped into reads at frame boundaries (several messages in one read, or
    one each); then byte mutations, and reads cut inside frames."""
    kind = draw(st.sampled_from(["script", "skip", "reordered", "random messages", "garbage"]))
    frames: list[bytes]
    if kind == "script":
        frames = FRAMES[:draw(st.integers(1, len(FRAMES)))]
    elif kind == "skip":  # a part left out: Hello then Bye, a Go without its workloads, ...
        cut = draw(st.integers(1, len(FRAMES) - 2))
        frames = FRAMES[:cut] + FRAMES[draw(st.integers(cut + 1, len(FRAMES) - 1)):]
    elif kind == "reordered":
        frames = [FRAMES[i] for i in draw(st.lists(st.integers(0, len(FRAMES) - 1),
                                                   max_size=20))]
    elif kind == "random messages":
        msgs = draw(st.lists(st.sampled_from(MESSAGE_TYPES).flatmap(message_strategy),
                             max_size=6))
        frames = [FRAMES[0]] * draw(st.booleans())
        for msg in msgs:
            try:
                frames.append(encode(msg))
            except ProtocolError:  # a value msgpack cannot hold
                continue
    else:
        frames = [draw(st.binary(max_size=400))]
    if frames and draw(st.integers(0, 3)) == 0:  # a frame whose header claims a huge length
        i = draw(st.integers(0, len(frames) - 1))
        length = draw(st.sampled_from(HUGE_LENGTHS))
        frames[i] = frames[i][:2] + struct.pack("<I", length) + frames[i][FRAME_HEADER_BYTES:]
    ends = draw(st.lists(st.booleans(), min_size=len(frames), max_size=len(frames)))
    pieces = [bytearray()]
    for frame, end in zip(frames, ends, strict=True):
        pieces[-1] += frame
        if end:
            pieces.append(bytearray())
    for op, which, where, arg in draw(st.just([]) | st.lists(_mutation, min_size=1,
                                                               max_size=3)):
        piece = pieces[int(which * len(pieces))]
        at = int(where * len(piece))
        if op == "flip" and piece:
            piece[at] = arg
        elif op == "insert":
            piece[at:at] = arg
        elif op == "delete":
            del piece[at:at + arg]
        elif op == "truncate":
            del piece[at:]
    for which, where in draw(st.lists(st.tuples(_fraction, _fraction), max_size=3)):
        k = int(which * len(pieces))
        at = int(where * len(pieces[k]))
        pieces[k:k + 1] = [pieces[k][:at], pieces[k][at:]]
    return [bytes(p) for p in pieces if p]  # an empty read would be EOF


# ------------------------------------------------------------------------------ the test
def _feed(pieces: list[bytes], ticks_ns: list[int]) -> tuple[SlaveSession, bytes]:
    """Feed ``pieces`` as ``slave.main.serve`` does (each piece, then the clock moves on by
    the next of ``ticks_ns`` and the session ticks), stop once the session is closed, else
    EOF at the end. Returns the session and what it wrote."""
    now = [0]
    out = bytearray()
    session = SlaveSession(BoundedBackend(), out.extend, lambda: now[0], describe=describe_error)
    session.luns.update(LUNS)
    for i, piece in enumerate(pieces):
        if session.closed:
            break
        session.on_bytes(piece)
        if not session.closed:
            now[0] += ticks_ns[i % len(ticks_ns)]
            session.on_tick()
    if not session.closed:
        session.on_eof()
    return session, bytes(out)


def _judge(pieces: list[bytes], session: SlaveSession, out: bytes) -> None:
    assert session.closed
    dec = FrameDecoder()
    said = dec.feed(out)
    assert dec.at_frame_boundary(), "the slave wrote a partial frame"
    last_words = [i for i, m in enumerate(said)
                  if isinstance(m, Bye) or (isinstance(m, Error) and m.fatal)]
    assert last_words in ([], [len(said) - 1]), f"messages after the last word: {said}"
    fatal = said[-1] if last_words and isinstance(said[-1], Error) else None
    if fatal is not None:
        assert fatal.kind in ("protocol", "version"), fatal
        assert session.failure == f"{fatal.kind}: {fatal.message}"
    else:
        assert session.failure is None
    # what a reader of the same pieces makes of the stream: a framing error, or a cut frame
    ref, got, broken = FrameDecoder(), [], False
    for piece in pieces:
        try:
            got += ref.feed(piece)
        except ProtocolError:
            broken = True
            break
    if broken or not ref.at_frame_boundary():
        assert last_words, f"a stream that breaks the framing went unanswered: {said}"
    if last_words and fatal is None:
        assert Bye in map(type, got), "the slave said Bye to a master that did not"


def _status_bytes(field: str) -> int:
    """A ``VmRSS``-style field of /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    assert match is not None, field
    return int(match.group(1)) * 1024


def _reset_peak_rss() -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now (Linux >= 4.0); return that."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_bytes("VmRSS")


@settings(max_examples=1500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pieces=streams(), ticks_ns=st.lists(st.integers(0, 2 * SUB), min_size=1, max_size=4))
def test_any_stdin_ends_in_bye_or_a_fatal_error_or_a_clean_stop(
        pieces: list[bytes], ticks_ns: list[int]) -> None:
    rss_before = _reset_peak_rss()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_LIMIT_S)
    try:
        session, out = _feed(pieces, ticks_ns)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    grown = _status_bytes("VmHWM") - rss_before
    assert grown < PEAK_GROWTH_BYTES, f"peak RSS {grown} bytes above the start"
    _judge(pieces, session, out)


def test_the_valid_script_runs_to_bye() -> None:
    """The fuzz's seed is a whole legal conversation: fed a frame at a time with the clock
    moving as a master's would (a step of four subintervals), it ends with the slave's Bye
    having answered everything without an error."""
    ticks = [0] * len(FRAMES)
    ticks[SCRIPT.index(GO)] = 2 * SUB  # to the end of subinterval 0
    ticks[SCRIPT.index(GO) + 2] = SUB  # after the edits, the end of 1
    ticks[SCRIPT.index(Stop(3))] = 2 * SUB  # the ends of 2 and 3: Stopped
    session, out = _feed(FRAMES, ticks)
    said = FrameDecoder().feed(out)
    assert isinstance(said[-1], Bye) and session.failure is None
    assert [type(m).__name__ for m in said] == [
        "HelloReply", "Pong", "LunList", "Ack", "Ack", "Ack", "SubintervalResult", "Ack",
        "SubintervalResult", "SubintervalResult", "SubintervalResult", "Stopped",
        "WindowResult", "Ack", "Pong", "Bye"]


def test_a_huge_length_header_is_refused_or_waits_without_buffering_it() -> None:
    """A header claiming more than the maximum is refused at once; one below it holds only
    the bytes that came (traced: well under a MiB), and EOF then is a fatal protocol error."""
    head = encode(SCRIPT[0])
    for length, text in ((2**32 - 1, "exceeds"), (200 * 2**20, "inside a frame")):
        big = b"IV" + struct.pack("<I", length) + b"\x00" * 1000
        tracemalloc.start()
        try:
            _, out = _feed([head, big[:3], big[3:]], [0])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2**20, peak
        said = FrameDecoder().feed(out)
        assert isinstance(said[-1], Error) and said[-1].kind == "protocol", said
        assert text in said[-1].message


def test_the_judge_refuses_an_unanswered_framing_error() -> None:
    """The judge can fail: a slave that took EOF inside a frame for a clean stop (as before
    6e90bd3) is refused."""
    session = SlaveSession(BoundedBackend(), lambda b: None, lambda: 0)
    session.closed = True
    with pytest.raises(AssertionError, match="went unanswered"):
        _judge([encode(SCRIPT[0])[:9]], session, b"")
