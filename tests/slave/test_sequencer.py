"""Sequencers: ranges, alignment, hot zone, sequential order and wrap, schedules."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from protocol.params import WorkloadParams
from slave.sequencer import Sequencer

GiB = 1 << 30


def seq(lun: int = GiB, lbs: int = 512, **kw: object) -> Sequencer:
    return Sequencer(WorkloadParams(**kw), lun_size_bytes=lun, logical_block_bytes=lbs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw, lbs, lo, hi",
    [
        ({"blocksize_bytes": 4096}, 512, 0, GiB),
        ({"blocksize_bytes": 4096, "range_start_bytes": 1000, "range_end_bytes": 1 << 20}, 512,
         1024, 1 << 20),
        ({"blocksize_bytes": 8192, "range_start_bytes": 4096 * 3, "range_end_bytes": 1 << 24},
         4096, 4096 * 3, 1 << 24),
        ({"blocksize_bytes": 512, "range_end_bytes": 4096}, 512, 0, 4096),
        ({"blocksize_bytes": 65536, "range_start_bytes": 512}, 512, 512, GiB),
        ({"blocksize_bytes": 4096, "iosequencer": "random_independent", "iops": 10.0}, 4096, 0,
         GiB),
    ],
)
def test_random_stays_inside_range_and_aligned(kw: dict[str, object], lbs: int, lo: int,
                                               hi: int) -> None:
    s = seq(lbs=lbs, **kw)  # type: ignore[arg-type]
    ch = s.chunk(20000)
    bs = int(kw["blocksize_bytes"])  # type: ignore[call-overload]
    assert ch.offset_bytes.min() >= lo
    assert (ch.offset_bytes + bs).max() <= hi
    assert np.all(ch.offset_bytes % lbs == 0)
    assert np.all(ch.category == 0)  # random read
    # the whole range is used, not a corner of it
    assert ch.offset_bytes.max() + bs > lo + 0.9 * (hi - lo)


def test_random_blocks_are_uniform() -> None:
    """Every block of a small grid drawn equally often (chi-square, 63 degrees of freedom: the
    0.1 % critical value is 103.4)."""
    s = seq(lun=64 * 4096, blocksize_bytes=4096)
    counts = np.bincount(s.chunk(640_000).offset_bytes // 4096, minlength=64)
    assert counts.size == 64
    chi2 = float(((counts - 10_000.0) ** 2 / 10_000.0).sum())
    assert chi2 < 103.4


class _HighestDraws:
    """A generator whose uniform draws are all the largest double below 1."""

    def random(self, n: int) -> npt.NDArray[np.float64]:
        return np.full(n, np.nextafter(1.0, 0.0))


@pytest.mark.parametrize("n_blocks", [1, 2, 3, 1 << 20, (1 << 20) + 1, (1 << 31) - 1,
                                      (1 << 40) + 1, 3 * (1 << 40) + 7])
def test_a_draw_just_under_one_picks_the_last_block(n_blocks: int) -> None:
    s = Sequencer(WorkloadParams(blocksize_bytes=512), lun_size_bytes=n_blocks * 512,
                  logical_block_bytes=512,
                  rng=(_HighestDraws(), _HighestDraws()))  # type: ignore[arg-type]
    assert s.chunk(4).offset_bytes.tolist() == [(n_blocks - 1) * 512] * 4


def test_range_with_no_whole_block_is_refused() -> None:
    with pytest.raises(ValueError, match="no whole"):
        seq(blocksize_bytes=8192, range_end_bytes=4096)


def test_blocksize_must_be_a_multiple_of_the_logical_block() -> None:
    with pytest.raises(ValueError, match="logical block"):
        seq(lbs=4096, blocksize_bytes=512)


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.9])
def test_hot_zone_gets_its_share(fraction: float) -> None:
    hot = 1 << 20
    s = seq(hot_zone_bytes=hot, hot_zone_fraction=fraction)
    off = s.chunk(40000).offset_bytes
    share = float(np.mean(off < hot))
    cold_share_of_range = hot / GiB  # a cold I/O lands in the hot zone by chance too
    expected = fraction + (1 - fraction) * cold_share_of_range
    assert abs(share - expected) < 0.01


def test_sequential_covers_range_in_order_and_wraps() -> None:
    bs = 4096
    start, end = 1 << 20, (1 << 20) + 10 * bs
    s = seq(iosequencer="sequential", blocksize_bytes=bs, range_start_bytes=start,
            range_end_bytes=end, seq_start_bytes=start + 7 * bs)
    a = s.chunk(5).offset_bytes
    b = s.chunk(20).offset_bytes
    off = np.concatenate([a, b])
    expect = start + ((7 + np.arange(25)) % 10) * bs
    assert off.tolist() == expect.tolist()
    assert np.all(s.chunk(3).category == 2)


def test_sequential_write_category() -> None:
    s = seq(iosequencer="sequential", read_fraction=0.0)
    assert np.all(s.chunk(10).category == 3)


def test_read_fraction_is_drawn_per_io() -> None:
    s = seq(read_fraction=0.7)
    ch = s.chunk(50000)
    assert abs(float(np.mean(~ch.is_write)) - 0.7) < 0.01
    assert np.array_equal(ch.category, ch.is_write.astype(np.int64))
    # not blocks of reads then writes: direction changes often
    assert int(np.sum(ch.is_write[1:] != ch.is_write[:-1])) > 15000


def test_steady_schedule_is_evenly_spaced_across_chunks() -> None:
    s = seq(iops=2000.0)
    s.start(10**12)
    t = np.concatenate([s.chunk(1000).sched_ns, s.chunk(1000).sched_ns])
    assert t[0] == 10**12
    gaps = np.diff(t)
    assert gaps.min() >= 499_999 and gaps.max() <= 500_001
    assert t[-1] - t[0] == 1999 * 500_000


@pytest.mark.parametrize("iosequencer", ["random_steady", "sequential"])
def test_steady_schedules_of_two_workloads_have_their_own_phase(iosequencer: str) -> None:
    # the same rate, started at the same time: each workload's schedule is evenly spaced from
    # its own phase (fixed by its id) within the first period; an edit keeps it
    firsts = []
    for wid in ("h1:/dev/sdb:w", "h1:/dev/sdc:w"):
        s = Sequencer(WorkloadParams(iops=1000.0, iosequencer=iosequencer),  # type: ignore[arg-type]
                      lun_size_bytes=GiB, logical_block_bytes=512, stream=wid)
        s.start(10**12)
        t = s.chunk(100).sched_ns
        assert 10**12 <= t[0] < 10**12 + 1_000_000
        assert np.all(np.diff(t) == 1_000_000)
        e = s.edited(s.params.replace(iops=500.0), at_ns=2 * 10**12)
        assert e.chunk(1).sched_ns[0] == 2 * 10**12 + 2 * (int(t[0]) - 10**12)  # same fraction
        firsts.append(int(t[0]))
    assert abs(firsts[0] - firsts[1]) > 10_000  # not the same instants


def test_poisson_arrivals_have_cv_one_and_the_right_rate() -> None:
    s = seq(iosequencer="random_independent", iops=1000.0)
    s.start(0)
    t = np.concatenate([s.chunk(50000).sched_ns, s.chunk(50000).sched_ns])
    gaps = np.diff(t).astype(np.float64)
    assert t[0] == 0
    assert abs(gaps.mean() - 1e6) / 1e6 < 0.02
    cv = gaps.std() / gaps.mean()
    assert 0.97 < cv < 1.03


def test_poisson_gaps_are_drawn_by_inversion_with_the_c_librarys_log1p() -> None:
    # the definition, one arrival at a time (as ivy_loop.c draws them): a uniform double
    # u each, the gap -log1p(-u) * period (math.log1p: the C library's), the first dropped,
    # each time the last one's plus its gap, truncated; on across calls
    start = 1_382_400_123_456_789
    s = Sequencer(WorkloadParams(iosequencer="random_independent", iops=3333.3),
                  lun_size_bytes=GiB, logical_block_bytes=512,
                  rng=(np.random.default_rng(4), np.random.default_rng(5)))  # the schedule's: 5
    s.start(start)
    got = np.concatenate([s.schedule(1), s.schedule(0), s.schedule(700), s.schedule(299)])
    period = 1e9 / 3333.3
    last, want = float(start), []
    for i, u in enumerate(np.random.default_rng(5).random(1000).tolist()):
        gap = -math.log1p(-u) * period
        last += 0.0 if i == 0 else gap
        want.append(int(last))
    assert got.dtype == np.int64 and got.tolist() == want


def test_a_poisson_schedule_of_no_io_draws_nothing() -> None:
    a, b = (seq(iosequencer="random_independent", iops=100.0) for _ in range(2))
    a.start(7)
    b.start(7)
    assert a.schedule(0).shape == (0,)
    first = a.schedule(3)
    assert first.tolist() == b.schedule(3).tolist()
    assert first[0] == 7  # the first arrival still at the start


def test_max_iops_has_no_schedule() -> None:
    s = seq()
    assert not s.paced
    assert not s.chunk(10).sched_ns.any()


def test_edit_keeps_sequential_position_and_restarts_schedule() -> None:
    s = seq(iosequencer="sequential", iops=100.0)
    s.start(0)
    s.chunk(7)
    e = s.edited(s.params.replace(iops=200.0), at_ns=5_000_000_000)
    ch = e.chunk(2)
    assert ch.offset_bytes.tolist() == [7 * 4096, 8 * 4096]
    assert ch.sched_ns.tolist() == [5_000_000_000, 5_005_000_000]
    # the caller issued only the first 4 of the 7: the edited sequencer resumes at the 5th
    r = s.edited(s.params, at_ns=0, resume_offset_bytes=4 * 4096)
    assert r.chunk(2).offset_bytes.tolist() == [4 * 4096, 5 * 4096]


@pytest.mark.parametrize(
    "kw",
    [
        {"iodepth": 0},
        {"iodepth": 4097},
        {"blocksize_bytes": 1000},
        {"iops": 0.0},
        {"read_fraction": 1.5},
        {"range_start_bytes": 10, "range_end_bytes": 5},
        {"iosequencer": "zigzag"},
        {"write_data": "ones"},
        {"write_data_ratio": 0.5},
    ],
)
def test_params_refuse_bad_values(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WorkloadParams(**kw)  # type: ignore[arg-type]


def test_an_edit_carries_on_the_random_stream() -> None:
    # the edited sequencer draws on from its predecessor's generator (not a new one seeded
    # alike, which would repeat the offsets already issued)
    a, b = seq(iops=100.0), seq(iops=100.0)
    a.start(0)
    b.start(0)
    a.chunk(10)
    b.chunk(10)
    e = a.edited(a.params, at_ns=0)
    assert e.chunk(10).offset_bytes.tolist() == b.chunk(10).offset_bytes.tolist()


@pytest.mark.parametrize(("params", "rng", "draw_first", "continued"), [
    (WorkloadParams(iops=100.0), None, False, True),
    (WorkloadParams(iops=100.0, iosequencer="sequential"), None, False, True),
    (WorkloadParams(iops=None), None, False, True),  # no schedule: times 0, period 0
    (WorkloadParams(iops=100.0, iosequencer="random_independent"), None, False, True),
    (WorkloadParams(iops=100.0, iosequencer="random_independent"), None, True, True),
    (WorkloadParams(iops=100.0), np.random.Generator(np.random.MT19937(1)), False, False),
])
def test_generator_state_only_where_a_compiled_generator_can_go_on(
        params: WorkloadParams, rng: np.random.Generator | None, draw_first: bool,
        continued: bool) -> None:
    seq = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream="s",
                    rng=None if rng is None else (rng, rng))
    seq.start(0)
    if draw_first:  # a Poisson schedule's first arrival, at the start, comes from here
        seq.chunk(1)
    assert (seq.generator_state() is not None) == continued


def test_resume_goes_on_from_the_numbers_given() -> None:
    # a twin elsewhere in the same stream, resumed from the other's numbers (as a compiled
    # generator gives them back), generates what the other generates next
    params = WorkloadParams(iops=500.0, read_fraction=0.5, iosequencer="sequential",
                            range_end_bytes=1 << 20)
    a = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream="a")
    b = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream="a")
    a.start(10)
    b.start(10)
    a.chunk(1000)
    b.chunk(7)
    gs = a.generator_state()
    assert gs is not None
    b.resume(gs.rng_state, gs.sched_rng_state, gs.seq_next, gs.sched_base_ns, gs.sched_k,
             gs.sched_last_ns, gs.first_arrival_due)
    x, y = a.chunk(300), b.chunk(300)
    for field in ("offset_bytes", "is_write", "category", "sched_ns"):
        assert np.array_equal(getattr(x, field), getattr(y, field)), field


@pytest.mark.parametrize("params", [
    WorkloadParams(iops=100.0, read_fraction=0.5, hot_zone_bytes=1 << 20,
                   hot_zone_fraction=0.5),
    WorkloadParams(iops=100.0, iosequencer="sequential", range_end_bytes=1 << 20),
    WorkloadParams(iops=100.0, iosequencer="random_independent"),
])
def test_retime_in_place_is_the_edited_sequencer(params: WorkloadParams) -> None:
    # DFC's edit without a new sequencer: the same schedule, stream and position after it
    a = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream="h:l:w")
    b = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream="h:l:w")
    for s in (a, b):
        s.start(1_000)
        s.chunk(333)
    new = params.replace(iops=317.0)
    a.retime(new, 7_000_000_000)
    b = b.edited(new, at_ns=7_000_000_000)
    assert a.params is new
    x, y = a.chunk(500), b.chunk(500)
    for field in ("offset_bytes", "is_write", "category", "sched_ns"):
        assert np.array_equal(getattr(x, field), getattr(y, field)), field


@pytest.mark.parametrize("change", [{"iops": None}, {"iodepth": 2}, {"blocksize_bytes": 8192},
                                    {"read_fraction": 0.5}])
def test_retime_refuses_more_than_a_new_rate(change: dict[str, object]) -> None:
    seq = Sequencer(WorkloadParams(iops=100.0), lun_size_bytes=1 << 30, logical_block_bytes=512)
    with pytest.raises(ValueError, match="only a new rate"):
        seq.retime(WorkloadParams(iops=100.0).replace(**change), 0)


@pytest.mark.parametrize(("iosequencer", "stream", "iops"), [
    ("random_steady", "h:l:w", 317.0),
    ("sequential", "h:/dev/sdb:w7", 20.0),
    ("random_steady", "", 1e6 / 3),
    ("random_independent", "h:l:w", 50.0),  # no phase
    ("random_steady", "h:l:w", 2e9 / 5),  # a period of 2.5 ns: phases round half to even
])
def test_schedule_starts_are_retime_s_for_many(iosequencer: str, stream: str,
                                               iops: float) -> None:
    params = WorkloadParams(iops=1000.0, iosequencer=iosequencer)  # type: ignore[arg-type]
    seq = Sequencer(params, lun_size_bytes=1 << 30, logical_block_bytes=512, stream=stream)
    seq.retime(params.replace(iops=iops), 5_000_000_123)
    gs = seq.generator_state()
    assert gs is not None
    period, base = Sequencer.schedule_starts(np.array([seq.phase_fraction]),
                                             np.array([iops]), 5_000_000_123)
    assert (period[0], int(base[0])) == (gs.period_ns, gs.sched_base_ns)


@pytest.mark.parametrize(("fraction", "phase"), [(0.2, 0), (0.6, 2), (0.3, 1), (0.9, 2)])
def test_phases_round_half_to_even_both_ways(fraction: float, phase: int) -> None:
    # a period of 2.5 ns: x 0.2 = 0.5 and x 0.6 = 1.5 are ties, to the even neighbour
    assert round(2.5 * fraction) == phase
    got = Sequencer.schedule_starts(np.array([fraction]), np.array([1e9 / 2.5]), 0)[1]
    assert got.tolist() == [phase]


_DRAW_CASES = [
    {"iosequencer": "random_steady"},
    {"iosequencer": "random_steady", "read_fraction": 0.7},
    {"iosequencer": "random_independent", "read_fraction": 0.3, "iops": 2000.0},
    {"iosequencer": "random_steady", "read_fraction": 0.5, "hot_zone_bytes": 1 << 20,
     "hot_zone_fraction": 0.4},
    {"iosequencer": "sequential", "read_fraction": 0.6},
    {"iosequencer": "sequential", "read_fraction": 0.0},
]


@pytest.mark.parametrize("kw", _DRAW_CASES)
def test_the_ios_do_not_depend_on_how_they_are_cut_into_chunks(kw: dict[str, object]) -> None:
    # each I/O takes its draws in turn (offset, hot choice and offset, direction) from the
    # I/O stream and its gap from the schedule's: one chunk of 1,000 is chunks of 1, 7, 300
    # and 692 (the compiled generator and the Python refills cut them differently)
    whole, parts = seq(**kw), seq(**kw)
    whole.start(0)
    parts.start(0)
    a = whole.chunk(1000)
    cut = [parts.chunk(n) for n in (1, 7, 300, 692)]
    for field in ("offset_bytes", "is_write", "category", "sched_ns"):
        assert np.array_equal(getattr(a, field),
                              np.concatenate([getattr(c, field) for c in cut])), field


@pytest.mark.parametrize("kw", _DRAW_CASES)
def test_an_edit_goes_on_at_the_first_io_not_issued(kw: dict[str, object]) -> None:
    # 100 I/Os generated, 37 of them issued, the other 63 dropped by an edit (to another
    # rate, or to max): the edited sequencer's I/Os are the 63 the old one would have
    # issued, and then on, the same offsets and directions
    ref, s = seq(**kw), seq(**kw)
    ref.start(0)
    s.start(0)
    want = ref.chunk(300)
    got = s.chunk(100)
    for iops in (5000.0, None):
        t = seq(**kw)
        t.start(0)
        t.chunk(100)
        edited = t.edited(t.params.replace(iops=iops), at_ns=7,
                          resume_offset_bytes=int(got.offset_bytes[37]), unissued=63)
        after = edited.chunk(263)
        assert np.array_equal(after.offset_bytes, want.offset_bytes[37:]), iops
        assert np.array_equal(after.is_write, want.is_write[37:]), iops


@pytest.mark.parametrize(("iosequencer", "iops", "rewound"), [
    ("random_independent", 1000.0, True),  # Poisson: one draw per arrival, wound back
    ("random_steady", 1000.0, False),  # evenly spaced: no draws
    ("random_independent", None, False),  # max iops: no schedule
])
def test_rewind_schedule_gives_the_last_arrivals_draws_again(
        iosequencer: str, iops: float | None, rewound: bool) -> None:
    seq = Sequencer(WorkloadParams(iosequencer=iosequencer, iops=iops),  # type: ignore[arg-type]
                    lun_size_bytes=1 << 30, logical_block_bytes=512, stream="w")
    twin = Sequencer(WorkloadParams(iosequencer=iosequencer, iops=iops),  # type: ignore[arg-type]
                     lun_size_bytes=1 << 30, logical_block_bytes=512, stream="w")
    seq.start(0)
    twin.start(0)
    drawn = seq.schedule(10)
    assert np.array_equal(drawn, twin.schedule(10))
    seq.rewind_schedule(4)
    again = seq.schedule(4)
    if rewound:  # the gaps of arrivals 6-9 again, after arrival 9
        assert np.array_equal(np.diff(np.concatenate(([drawn[-1]], again))),
                              np.diff(drawn)[-4:])
    else:
        assert np.array_equal(again, twin.schedule(4))
