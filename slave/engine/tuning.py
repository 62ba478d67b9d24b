"""The engine loop's tuning: how many records it buffers, how far ahead it precomputes
I/Os, how long it looks for completions before it sleeps, and which of its loops run compiled.

The comment above each value says what it controls and why; ``docs/engine.md`` says what it
was measured on and what it bought. Nothing here runs. The loop's code reads every value as
``tuning.NAME`` where it uses it (never a copy taken at import; the compiled loop's are
``loop_native._TUNING_WORDS``), so a test or a benchmark that sets one here changes it
everywhere.
"""

from __future__ import annotations

from typing import Final

# completion records buffered before binning (a loop's record buffers are sized by it when made)
FLUSH_AT: Final = 8192
COMPACT_AT: Final = FLUSH_AT // 2  # records binned one at a time before the rest is moved up
RING_MIN: Final = 2048  # I/Os precomputed per refill of a max-iops workload, at least
# a max-iops workload precomputes RING_PER_DEPTH times its queue depth, up to RING_MAX (41 bytes
# each): a refill holds up its I/Os in flight, so at most one in RING_PER_DEPTH waits one out
RING_PER_DEPTH: Final = 512
RING_MAX: Final = 16384
# and the max-iops workloads of one loop share this many, its paced workloads as many again
# (up to RING_MAX each): a paced refill stalls the loop too, so fewer and larger refills
RING_BUDGET: Final = 1 << 18
# at least this many for a paced workload: a refill costs the same however few I/Os it makes
PACED_RING_MIN: Final = 256
# an edit keeps the I/Os a paced workload's old schedule had due and not issued (no coordinated
# omission): a worker's paced workloads share BACKLOG_BUDGET, each at least BACKLOG_MIN, which
# bounds its memory; of a longer backlog the first are kept, the rest dropped with a warning
BACKLOG_BUDGET: Final = 1 << 16
BACKLOG_MIN: Final = 1 << 12
# the compiled loop generates a workload's next I/Os itself, this many at a time (at most its
# ring array's rows): far cheaper than a refill in Python
GEN_IOS: Final = 512
POLL_CONTROL_NS: Final = 2_000_000  # how often the loop lets the control look at commands
# a lone max-iops workload of at most this queue depth waits in the compiled loop as soon as its
# I/Os went out (``ivy_loop.c: lone_wait``)
LONE_DEPTH_MAX: Final = 2
# busy_poll: look in the completion ring without a system call for up to BUSY_SPIN_NS after the
# last completion, then block in the engine's reap: this beat pure spinning and pure blocking
BUSY_SPIN_NS: Final = 100_000
# for the first BUSY_HOT_NS after a completion the C loop looks again without yielding (a fast
# device's next completion is due then); past it, it yields between looks to a kernel worker
BUSY_HOT_NS: Final = 20_000
# a max-iops loop that finds no completion looks again (yielding the core in between) this long
# before it blocks in the engine's reap, while its recent waits were short (``clock.Waiter``):
# about a sleeping CPU's wake-up, by when most I/Os in flight have completed
AWAIT_SPIN_NS: Final = 50_000
# the compiled loop measures that look first against blocking at once, as the faster differs by
# machine and queue depth: a trial of AWAIT_TRIALS turns of AWAIT_TRIAL_NS, the faster kept for
# AWAIT_HOLD_NS (doubled while trials agree, up to AWAIT_HOLD_MAX_NS), the way kept before
# unless the other is AWAIT_SWITCH_PCT % faster (``ivy_loop.c: await_choose``; 0 trials:
# look first, always)
AWAIT_TRIAL_NS: Final = 50_000_000
AWAIT_TRIALS: Final = 8
AWAIT_HOLD_NS: Final = 2_000_000_000
AWAIT_HOLD_MAX_NS: Final = 60_000_000_000
AWAIT_SWITCH_PCT: Final = 2
# and looking first counts as faster only where it completed AWAIT_LOOK_PCT % more: its looks
# take the core that a blocked loop leaves to the device's kernel worker and the other workers
AWAIT_LOOK_PCT: Final = 5
# "short waits": a running mean under this, well above AWAIT_SPIN_NS: a wait that blocks adds
# the sleeper's wake-up to the mean, which a gate at AWAIT_SPIN_NS would then keep past it
AWAIT_SPIN_GATE_NS: Final = 200_000
# a wait shorter than this is spent looking in the completion ring: a sleep costs about this much
# in wake-up
SLEEP_MIN_NS: Final = 30_000
# a wait longer than LONG_WAIT_NS for a paced I/O's scheduled time ends WAKE_EARLY_NS before it
# and a second, short wait covers the rest (``clock.timed_wait_ns``): an idle CPU that stops
# polling sleeps deeper and wakes late
LONG_WAIT_NS: Final = 200_000
WAKE_EARLY_NS: Final = 50_000
# the most paced I/Os one submission of the compiled loop carries (with every max-iops I/O
# due): a call of more than 2 plugs the block layer, which holds the first until the last is
# in. The Python loop has no limit: its turn costs tens of us
PACED_PER_CALL: Final = 1
PACED_PER_CALL_PYTHON: Final = 1 << 30
# the longest a blocking wait for a completion may hold up a control poll (POLL_CONTROL_NS): a
# far timeout costs less per I/O than a near one
BLOCK_WAIT_NS: Final = 10_000_000
LOGGED_ERRORS_PER_WORKLOAD: Final = 5  # I/O errors logged per workload (all are counted)
# paced and max-iops workloads on a libaio or io_uring engine run in compiled C where the host
# could build it (``compiled_loop``; ``loop_native.NativeLoop``); tests and bench_engine switch
# it off to run the Python loop
COMPILED_LOOP = True
