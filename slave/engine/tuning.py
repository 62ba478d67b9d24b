"""The engine loop's tuning: how many records it buffers, how far ahead it precomputes
I/Os, how long it looks for completions before it sleeps, and which of its loops run compiled.

Each value was measured; the comment above it says on what and what it bought. Nothing here
runs. The loop's code reads every value as ``tuning.NAME`` where it uses it (never a copy taken
at import), so a test or a benchmark that sets one here changes it everywhere.
"""

from __future__ import annotations

from typing import Final

# completion records buffered before binning (a loop takes it when it is made: its record
# buffers are sized by it)
FLUSH_AT: Final = 8192
COMPACT_AT: Final = FLUSH_AT // 2  # records binned one at a time before the rest is moved up
RING_MIN: Final = 2048  # I/Os precomputed per refill of a max-iops workload, at least
# a max-iops workload precomputes RING_PER_DEPTH times its queue depth, up to RING_MAX (41
# bytes each). A refill holds up the loop's I/Os in flight (in the QD32 loop 150-250 us for
# 2,048 I/Os, 450-900 us for 16,384: numpy's code and the memory it writes are cold there), so
# at most one of the workload's I/Os in RING_PER_DEPTH waits one out, beyond the p99; RING_MIN
# alone put 1 in 64 of a QD32 workload's I/Os behind a refill. QD32, median of p99 / fio's p99
# in the same round, three runs of 8-10 rounds: 1.23 -> 1.15, 1.23 -> 1.48, 1.82 -> 1.67 (the
# VM's noise is as large as the effect)
RING_PER_DEPTH: Final = 512
RING_MAX: Final = 16384
# and the max-iops workloads of one loop share this many (10.5 MB of reads; writes carry 24
# more bytes each, their data's plan): 64 workloads of QD32 hold 4,096 each. Its paced
# workloads share as many again, up to RING_MAX each: a paced refill stalls the loop like a
# max-iops one (one workload at 131,000 IOPS: 190 us for 2,048 I/Os, 350 us for 16,384), and
# with at most RING_MIN each (as before) its 64 refills a second put the service-time p99 at
# 1.14x fio's (208 vs 160 us in six interleaved rounds), with RING_MAX 0.89-1.13x (180 us)
RING_BUDGET: Final = 1 << 18
# at least this many for a paced workload (41 bytes each): a refill costs ~70 us however few
# I/Os it makes, and 512 workloads of 78 IOPS each refilled every quarter second spent 30 % of
# their loop's time in it
PACED_RING_MIN: Final = 256
# the compiled paced loop generates a workload's next I/Os itself, this many at a time (at most
# its ring array's rows): 7-24 us each time (warm), against a Python refill's 0.35-1.2 ms
GEN_IOS: Final = 512
POLL_CONTROL_NS: Final = 2_000_000  # how often the loop lets the control look at commands
# a lone max-iops workload of at most this queue depth waits in the compiled loop as soon as its
# I/Os went out (``lone``: see ``paced_kernel.c``'s ``lone_wait``)
LONE_DEPTH_MAX: Final = 2
# busy_poll: check the completion ring without a system call, yielding the core after every
# empty check (the device's kernel worker may need it), for up to BUSY_SPIN_NS after the last
# completion; then block in the engine's reap until the next one. Measured on 2 shared cores:
# pure spinning loses to blocking (it starves the loop device's worker and loses the CPU
# scheduler's wake-up preference); spinning 100 us then blocking beats both. The depth 1-2
# loop's look in C (``scalar_run``; it was Python) took a QD1 busy_poll reader from 47,000 to
# 72,000 IOPS (mean 19.1 -> 13.5 us; fio's polling job 66,700 at 14.4, its blocking job 47,200;
# five interleaved rounds on a tmpfs loop device)
BUSY_SPIN_NS: Final = 100_000
# and for the first BUSY_HOT_NS after a completion the C loop looks again without yielding: a
# fast device's next completion is due then, and a yield per empty look cost it. Five
# interleaved rounds, QD1 on a tmpfs loop device (another host than the line above's): a yield
# after every look 70,000 IOPS, none in the first 20 us 79,000, none ever 79,000 (fio's polling
# job 84,800, which never yields, its blocking job 55,100); two LUNs in two workers, both cores
# spinning: 86,000, 84,000 and 84,000 in all (fio's two polling jobs 50,600, blocking 76,700).
# Past it the yields stay: they let a device's kernel worker that shares the core run
BUSY_HOT_NS: Final = 20_000
# a max-iops loop that finds no completion looks again (yielding the core in between) for this long
# before it blocks in the engine's reap, while its recent waits were shorter than this
# (``waits.Waiter``): on the 2-core VM a blocking wait took ~45 us to return (the sleeping CPU's
# wake-up), by when 7 of 8 I/Os in flight had completed, so a QD8 workload ran at 0.55x fio's IOPS
# (116,000 vs 201,000; fio's one-at-a-time submission seldom finds the ring empty: 0.02 sleeps per
# I/O against ivypy's 0.11). Looking for 50 us first (about the wake-up's cost): QD8 116,000 ->
# 208,000-221,000 IOPS, QD32 258,000 -> 333,000-372,000, QD32 on a device that holds data 215,000
# -> 265,000-282,000 (fio 293,000), user CPU per I/O unchanged (0.6-0.7 at QD32; the spin replaces
# the sleep's system time). Behind the VM's own disk (a direct-I/O loop device: 0.15-0.5 ms per
# wait), looking first whatever the recent waits cost 9 empty looks and 10.8 us of user CPU per I/O
# at QD4 (2.7 at QD32); looking only after short waits, 0.3 looks and 7.1 us (1.2 at QD32)
AWAIT_SPIN_NS: Final = 50_000
# "short waits": a running mean under this. At AWAIT_SPIN_NS itself the gate trapped a loop in
# blocking: a wait that outlasts the look and blocks reads the sleeper's wake-up (~45 us on the
# VM) on top, so the mean, once past the gate, stayed past it. Measured with the compiled ring
# loop (tmpfs loop devices, QD32): two LUNs, a worker each, 631,000 IOPS gated at 50 us against
# 769,000-784,000 at 200 (fio's two jobs: 541,000); one LUN 587,000-698,000 against
# 636,000-707,000. Behind a direct-I/O loop device on the VM's disk (~150 us a read) QD4 read
# 26,000-28,000 IOPS at 1.2-1.8 us of user CPU per I/O gated at 50, 32,000-33,000 at 4.0-4.1 at
# 200; QD32 the same (98,000-100,000 at 0.3 us)
AWAIT_SPIN_GATE_NS: Final = 200_000
# a wait shorter than this is spent looking in the completion ring instead of sleeping: a sleep
# costs about this much in wake-up (measured on the 2-core VM: a bare Python QD1 loop reads
# ~95 us where C reads ~40-70). Paced at 50,000 IOPS (20 us apart) this halved the service-time
# p50 (151 -> 78 us; fio 79 us at the same rate) for 8 % more user CPU per I/O.
SLEEP_MIN_NS: Final = 30_000
# a wait longer than LONG_WAIT_NS for a paced I/O's scheduled time ends WAKE_EARLY_NS before it,
# and a second, short wait covers the rest (``waits.timed_wait_ns``): an idle CPU that stops polling
# sleeps deeper and wakes late. On the 2-core VM (guest halt-polling 200 us) a timed sleep of
# 40-200 us ended 8-12 us late (p50), one of 500 us 31 us and one of 1 ms 42 us (p99 209 and
# 315 us); bare metal's deep C-states cost the same kind of exit latency
LONG_WAIT_NS: Final = 200_000
WAKE_EARLY_NS: Final = 50_000
# the longest a blocking wait for a completion may hold up a control poll (POLL_CONTROL_NS):
# measured on a VM, io_getevents with a 2 ms timeout costs ~1/4 more per I/O than with 10 ms
BLOCK_WAIT_NS: Final = 10_000_000
LOGGED_ERRORS_PER_WORKLOAD: Final = 5
# paced workloads on a libaio or io_uring engine (reads, and writes of every data kind) run in
# compiled C where the host could build it (``slave.engine.paced_kernel``;
# ``loop_native.NativeLoop``), and max-iops workloads with them or without them (a lone
# one too, of any depth); tests and bench_engine switch it off to run the Python loop
COMPILED_PACED = True
