"""The engine loop's tuning: how many records it buffers, how far ahead it precomputes
I/Os, how long it looks for completions before it sleeps, and which of its loops run compiled.

Each value was measured: the comment above it says what it controls and why, and
``docs/engine.md`` keeps on what it was measured and what it bought. Nothing here runs. The
loop's code reads every value as ``tuning.NAME`` where it uses it (never a copy taken at
import), so a test or a benchmark that sets one here changes it everywhere.
"""

from __future__ import annotations

from typing import Final

# completion records buffered before binning (a loop takes it when it is made: its record
# buffers are sized by it)
FLUSH_AT: Final = 8192
# records binned one at a time before the rest is moved up (read by name, as every value the
# compiled loop takes: ``loop_native._TUNING_WORDS``)
COMPACT_AT: Final = FLUSH_AT // 2
RING_MIN: Final = 2048  # I/Os precomputed per refill of a max-iops workload, at least
# a max-iops workload precomputes RING_PER_DEPTH times its queue depth, up to RING_MAX (41
# bytes each): a refill holds up the loop's I/Os in flight, so at most one of the workload's
# I/Os in RING_PER_DEPTH waits one out, beyond the p99 (docs/engine.md)
RING_PER_DEPTH: Final = 512
RING_MAX: Final = 16384
# and the max-iops workloads of one loop share this many, its paced workloads as many again
# (up to RING_MAX each): a paced refill stalls the loop like a max-iops one, so fewer and
# larger refills (docs/engine.md)
RING_BUDGET: Final = 1 << 18
# at least this many for a paced workload (41 bytes each): a refill costs the same however few
# I/Os it makes (docs/engine.md)
PACED_RING_MIN: Final = 256
# an edit keeps the I/Os a paced workload's old schedule had due and not issued (the backlog:
# no coordinated omission), precomputing them where its ring did not reach the edit. A worker
# keeps this many at most, shared by its paced workloads (41 bytes each: 2.7 MB), but each
# at least BACKLOG_MIN (64 workloads far behind: 10.7 MB); of a longer backlog the first are
# kept, the rest of the old schedule dropped with a warning
BACKLOG_BUDGET: Final = 1 << 16
BACKLOG_MIN: Final = 1 << 12
# the compiled paced loop generates a workload's next I/Os itself, this many at a time (at most
# its ring array's rows): far cheaper than a refill in Python (docs/engine.md)
GEN_IOS: Final = 512
POLL_CONTROL_NS: Final = 2_000_000  # how often the loop lets the control look at commands
# a lone max-iops workload of at most this queue depth waits in the compiled loop as soon as its
# I/Os went out (``lone``: see ``paced_kernel.c``'s ``lone_wait``; docs/engine.md)
LONE_DEPTH_MAX: Final = 2
# busy_poll: check the completion ring without a system call for up to BUSY_SPIN_NS after the
# last completion, then block in the engine's reap until the next one: a while of spinning,
# then blocking, beat both pure spinning and pure blocking (docs/engine.md)
BUSY_SPIN_NS: Final = 100_000
# and for the first BUSY_HOT_NS after a completion the C loop looks again without yielding (a
# fast device's next completion is due then); past it it yields the core between looks, for a
# device's kernel worker that shares the core (docs/engine.md)
BUSY_HOT_NS: Final = 20_000
# a max-iops loop that finds no completion looks again (yielding the core in between) for this
# long before it blocks in the engine's reap, while its recent waits were short (``clock.Waiter``):
# about a sleeping CPU's wake-up, by when most I/Os in flight had completed (docs/engine.md)
AWAIT_SPIN_NS: Final = 50_000
# the compiled loop chooses between that look first and blocking at once by measuring both: a
# trial of AWAIT_TRIALS turns of AWAIT_TRIAL_NS, the faster kept for AWAIT_HOLD_NS (the way
# kept before unless the other is AWAIT_SWITCH_PCT % faster), doubled while the trials agree,
# up to AWAIT_HOLD_MAX_NS (``paced_kernel.c: await_choose``; 0 trials: look first, always).
# Which is faster differs by machine and queue depth (docs/engine.md)
AWAIT_TRIAL_NS: Final = 50_000_000
AWAIT_TRIALS: Final = 8
AWAIT_HOLD_NS: Final = 2_000_000_000
AWAIT_HOLD_MAX_NS: Final = 60_000_000_000
AWAIT_SWITCH_PCT: Final = 2
# and looking first counts as faster only where it completed AWAIT_LOOK_PCT % more than
# blocking: its looks take the core that a blocked loop leaves to the device's kernel worker
# and the other workers (docs/engine.md)
AWAIT_LOOK_PCT: Final = 5
# "short waits": a running mean under this; at AWAIT_SPIN_NS itself the gate trapped a loop in
# blocking, as a wait that blocks adds the sleeper's wake-up to the mean (docs/engine.md)
AWAIT_SPIN_GATE_NS: Final = 200_000
# a wait shorter than this is spent looking in the completion ring instead of sleeping: a sleep
# costs about this much in wake-up (docs/engine.md)
SLEEP_MIN_NS: Final = 30_000
# a wait longer than LONG_WAIT_NS for a paced I/O's scheduled time ends WAKE_EARLY_NS before it,
# and a second, short wait covers the rest (``clock.timed_wait_ns``): an idle CPU that stops
# polling sleeps deeper and wakes late (docs/engine.md)
LONG_WAIT_NS: Final = 200_000
WAKE_EARLY_NS: Final = 50_000
# the most paced I/Os one submission of the compiled loop carries (with every max-iops I/O
# due): a loop that woke late has many due, and a call of more than 2 plugs the block layer,
# which holds the first until the last is in; the loop looks for completions before the next.
# The Python loop's: no limit, its turn costs tens of us (docs/engine.md)
PACED_PER_CALL: Final = 1
PACED_PER_CALL_PYTHON: Final = 1 << 30
# the longest a blocking wait for a completion may hold up a control poll (POLL_CONTROL_NS): a
# far timeout costs less per I/O than a near one (docs/engine.md)
BLOCK_WAIT_NS: Final = 10_000_000
LOGGED_ERRORS_PER_WORKLOAD: Final = 5  # I/O errors logged per workload (all are counted)
# paced and max-iops workloads on a libaio or io_uring engine run in compiled C where the host
# could build it (``slave.engine.paced_kernel``; ``loop_native.NativeLoop``); tests and
# bench_engine switch it off to run the Python loop
COMPILED_PACED = True
