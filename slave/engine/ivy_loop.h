/* The compiled loop's structs, each declared once here as a list of (type, name) and mirrored
 * field for field, in order, in Python: its state and arguments, struct ivy_loop
 * (IVY_LOOP_FIELDS), by slave.engine.layout.LoopArgs (a ctypes.Structure); each workload's
 * generator and write data, struct ivy_gen and struct ivy_data (IVY_GEN_FIELDS,
 * IVY_DATA_FIELDS), by the numpy dtypes layout.GEN_DTYPE and DATA_DTYPE; a slot's
 * row and a precomputed I/O, struct ivy_row and struct ivy_io (IVY_ROW_FIELDS, IVY_IO_FIELDS),
 * by the numpy dtypes slave.engine.layout.ROW_DTYPE and IO_DTYPE; the scripted engine's state,
 * pending completions and log, struct ivy_script, ivy_pend and ivy_log, by layout.SCRIPT_DTYPE,
 * PEND_DTYPE and LOG_DTYPE; a rollup entry's part in the grouping's pass, struct ivy_grp
 * (IVY_GRP_FIELDS), by slave.engine.compiled_group.GRP_DTYPE. The compiled object tells
 * their layouts (ivy_<struct>_layout: the struct's size, then each field's offset and size;
 * ivy_<struct>_names: the fields' names, a space after each), which the loader and a test
 * compare with the Python mirrors'. Python reads the field lists from this file
 * (slave.engine.layout.header_fields): a field is declared here only, as X(type, name), its
 * type int64_t, uint64_t, double or a pointer. Owns the names, types and order of the fields;
 * it must not hold code. Pointers are the addresses of arrays Python owns and keeps alive; "of
 * addresses" means an array of one address per workload. Units are in the names (_ns, _bytes).
 * compiled_loop.py includes this file in the source it compiles (and in the source's hash), in
 * place of its #include. */
#include <stddef.h>
#include <stdint.h>

#define IVY_FIELD(type, name) type name;

/* a slot's row (struct ivy_row, mirrored by slave.engine.layout.ROW_DTYPE): the kernel's struct
 * iocb first, byte for byte (linux/aio_abi.h; io_submit reads it at the row's address): aio_data
 * (the slot's number, back in the completion's event), aio_key and aio_rw_flags (0),
 * aio_lio_opcode, aio_reqprio and aio_fildes in one word (opcode | fd << 32: opcode_fd),
 * aio_buf, aio_nbytes, aio_offset, aio_reserved2, aio_flags and aio_resfd (0); then the loop's
 * bookkeeping: the owning workload (its index), the I/O's category, its submit and scheduled
 * times, the bytes it must transfer, its buffer's row in the workload's buffers, and in a
 * record (a row copied at completion) the result and the reap time; a verified workload's
 * I/O's serial (its write data's, and its stamps') */
#define IVY_ROW_FIELDS(X) \
    X(uint64_t, data) \
    X(uint64_t, key_rw_flags) \
    X(int64_t, opcode_fd) \
    X(uint64_t, buf) \
    X(uint64_t, nbytes) \
    X(int64_t, offset) \
    X(uint64_t, reserved2) \
    X(uint64_t, flags_resfd) \
    X(int64_t, owner) \
    X(int64_t, cat) \
    X(int64_t, submit_ns) \
    X(int64_t, sched_ns) \
    X(int64_t, size_bytes) \
    X(int64_t, buf_row) \
    X(int64_t, res) \
    X(int64_t, done_ns) \
    X(int64_t, serial)

struct ivy_row {
    IVY_ROW_FIELDS(IVY_FIELD)
};

/* a precomputed I/O in a workload's ring (struct ivy_io, mirrored by layout.IO_DTYPE): the
 * fields of its row that it sets, under the row's names (its submit time 0: stamped at the
 * submission; its scheduled time 0 at max iops: the submission's) */
#define IVY_IO_FIELDS(X) \
    X(int64_t, opcode_fd) \
    X(int64_t, offset) \
    X(int64_t, cat) \
    X(int64_t, submit_ns) \
    X(int64_t, sched_ns)

struct ivy_io {
    IVY_IO_FIELDS(IVY_FIELD)
};

/* a workload's generator (struct ivy_gen, mirrored by layout.GEN_DTYPE): its Sequencer's two
 * streams as Sequencer.generator_state gives them (numpy's PCG64 state and increment in
 * 64-bit halves, high first: the I/Os', then the schedule's; the block range, the hot zone,
 * the read fraction, the sequential position; the schedule: Poisson or even, its period,
 * start, index and last arrival, whether the first arrival is still due), the opcode-and-
 * descriptor words of a read and a write, how many I/Os the loop generated since the row was
 * written (made: 0, none to give back) and whether it moved the stream or the schedule
 * otherwise (resync: a retime) */
#define IVY_GEN_FIELDS(X) \
    X(uint64_t, state_hi) \
    X(uint64_t, state_lo) \
    X(uint64_t, inc_hi) \
    X(uint64_t, inc_lo) \
    X(uint64_t, sched_state_hi) \
    X(uint64_t, sched_state_lo) \
    X(uint64_t, sched_inc_hi) \
    X(uint64_t, sched_inc_lo) \
    X(int64_t, first_bytes) \
    X(int64_t, n_blocks) \
    X(int64_t, blocksize_bytes) \
    X(int64_t, n_hot) \
    X(double, hot_share) \
    X(double, read_fraction) \
    X(int64_t, sequential) \
    X(int64_t, seq_next) \
    X(int64_t, poisson) \
    X(double, period_ns) \
    X(int64_t, sched_base_ns) \
    X(int64_t, sched_k) \
    X(double, sched_last_ns) \
    X(int64_t, first_due) \
    X(int64_t, op_read) \
    X(int64_t, op_write) \
    X(int64_t, made) \
    X(int64_t, resync)

struct ivy_gen {
    IVY_GEN_FIELDS(IVY_FIELD)
};

/* a workload's write data (struct ivy_data, mirrored by layout.DATA_DTYPE), as
 * slave.datapattern.WritePattern defines it: its kind (0: it does not write; else
 * datapattern.KIND_CODES, DATA_*), its block's bytes, its pool of pool_blocks blocks and
 * dedupable's dup_blocks duplicates (addresses of arrays of blocks; NULL where the kind has
 * none), dedupable's key and unique bound; and the serial of its ring's first I/O (ring I/O
 * i's is ring_serial + i: every I/O takes one, read or write) */
#define IVY_DATA_FIELDS(X) \
    X(int64_t, kind) \
    X(int64_t, block_bytes) \
    X(const uint8_t *, pool) \
    X(int64_t, pool_blocks) \
    X(const uint8_t *, dups) \
    X(int64_t, dup_blocks) \
    X(uint64_t, dedup_key) \
    X(int64_t, unique_below) \
    X(int64_t, ring_serial) \
    /* data verification (protocol/verify.py, docs/verify.md): the LUN's state (NULL: the \
     * workload's I/Os are neither stamped nor checked) and the workload's number in the \
     * run's map, which its stamps carry */ \
    X(struct ivy_vlun *, vlun) \
    X(int64_t, writer)

/* a LUN's data verification (struct ivy_vlun, mirrored by layout.VLUN_DTYPE; protocol/verify.py
 * owns the stamp and the map byte): its map, a byte per 4 KiB block of the range from
 * first_bytes on, n_blocks of them (the block's generation, bit 7 UNSETTLED), and what the
 * stamps of this run carry for it: the run's key, the LUN's number, the run's attempt; and the
 * attempts before it that ended without their master hearing of every write (n_crashes of
 * them, in crash_attempts), with each writer's confirmed serial in each (confirmed: a row of
 * n_writers per crash, by writer number; -1 none): a stamp of such an attempt, by a writer above
 * its confirmed serial there, a generation ahead of the map's, is a write the master never
 * heard of, taken into the map (adopted), not damage */
#define IVY_VLUN_FIELDS(X) \
    X(uint8_t *, map) \
    X(int64_t, first_bytes) \
    X(int64_t, n_blocks) \
    X(int64_t, run_key) \
    X(int64_t, lun) \
    X(int64_t, attempt) \
    X(int64_t, n_crashes) \
    X(const int64_t *, crash_attempts) \
    X(const int64_t *, confirmed) \
    X(int64_t, n_writers)

struct ivy_vlun {
    IVY_VLUN_FIELDS(IVY_FIELD)
};

/* a damaged block the loop found (struct ivy_vfind, layout.VFIND_DTYPE): the owner (its stats'
 * workload), the LUN's number, the block's byte offset on the LUN, its class (protocol.verify
 * CODES), the map byte it was checked against, the first sector out of line (its index in the
 * block) and that sector's stamp as read (offset, serial, key, LUN, writer, generation,
 * attempt; crc_ok: whether its CRC held), and when the read completed */
#define IVY_VFIND_FIELDS(X) \
    X(int64_t, owner) \
    X(int64_t, lun) \
    X(int64_t, offset_bytes) \
    X(int64_t, verdict) \
    X(int64_t, expected) \
    X(int64_t, sector) \
    X(uint64_t, found_offset_bytes) \
    X(uint64_t, found_serial) \
    X(int64_t, found_run_key) \
    X(int64_t, found_lun) \
    X(int64_t, found_writer) \
    X(int64_t, found_gen) \
    X(int64_t, found_attempt) \
    X(int64_t, crc_ok) \
    X(int64_t, done_ns)

struct ivy_vfind {
    IVY_VFIND_FIELDS(IVY_FIELD)
};

struct ivy_data {
    IVY_DATA_FIELDS(IVY_FIELD)
};

/* the scripted engine (backend 2: slave.engine.fake.FakeEngine with a script; no I/O), whose
 * Python and the compiled loop share these: its state (struct ivy_script, mirrored by
 * layout.SCRIPT_DTYPE): how many completions are pending, how many I/Os were submitted, an
 * error every error_every-th submission of a descriptor (with error_errno) and a short transfer
 * every short_every-th (0: none), the script's length, the log's capacity in submissions, the
 * room for pending completions (fake_pend's length), how many descriptors have a count of their
 * own (fake_fd_counts; others share them, modulo), how many submit calls came and the most I/Os
 * one carried */
#define IVY_SCRIPT_FIELDS(X) \
    X(int64_t, pending) \
    X(int64_t, count) \
    X(int64_t, error_every) \
    X(int64_t, error_errno) \
    X(int64_t, short_every) \
    X(int64_t, script_n) \
    X(int64_t, log_cap) \
    X(int64_t, pend_cap) \
    X(int64_t, fds) \
    X(int64_t, calls) \
    X(int64_t, call_max)

struct ivy_script {
    IVY_SCRIPT_FIELDS(IVY_FIELD)
};

/* a pending completion of the scripted engine (struct ivy_pend, layout.PEND_DTYPE): when it is
 * due, its slot, its result */
#define IVY_PEND_FIELDS(X) \
    X(int64_t, due_ns) \
    X(int64_t, slot) \
    X(int64_t, res)

struct ivy_pend {
    IVY_PEND_FIELDS(IVY_FIELD)
};

/* a submission in the scripted engine's log (struct ivy_log, layout.LOG_DTYPE): its offset,
 * opcode, submit time, descriptor, scheduled time (max iops: the submission's) and bytes */
#define IVY_LOG_FIELDS(X) \
    X(int64_t, offset) \
    X(int64_t, opcode) \
    X(int64_t, submit_ns) \
    X(int64_t, fd) \
    X(int64_t, sched_ns) \
    X(int64_t, nbytes)

struct ivy_log {
    IVY_LOG_FIELDS(IVY_FIELD)
};

/* one rollup entry's part in a pass of the rollup's grouping over a batch (struct ivy_grp,
 * mirrored by slave.engine.compiled_group.GRP_DTYPE; ivy_loop.c's ivy_group_pass says the
 * pass): its role, GRP_DRIVER (the pass goes through its groups one after the other;
 * members: where each group's workloads start, n_groups + 1 of them, then the workloads in
 * group order), GRP_HELD (its groups' cells are held through the pass; of: each workload's
 * group; cells: n_groups x the rows' N_BUCKETS cells, zeros; acc: n_groups x 3 x the rows,
 * the rows' extents and totals; of_driver: where each of the driver's groups lies in one of
 * its own, that group, whose sums it then takes whole, else NULL) or GRP_SINGLE (each
 * workload its own group, its percentiles alone); out: the groups' counters and latencies
 * (set to empty groups' by the caller), their coordinates (rows, buckets, counts: NULL for
 * none, else room for as many as the batch's) and how many (n_coords), their percentile
 * tables (pct, NaN put there by the caller; NULL for none) */
#define IVY_GRP_FIELDS(X) \
    X(int64_t, role) \
    X(int64_t, n_groups) \
    X(const int64_t *, members) \
    X(const int64_t *, of) \
    X(const int64_t *, of_driver) \
    X(int64_t *, cells) \
    X(int64_t *, acc) \
    X(int64_t *, counters) \
    X(int64_t *, lat) \
    X(uint32_t *, rows) \
    X(uint16_t *, buckets) \
    X(int64_t *, counts) \
    X(int64_t, n_coords) \
    X(double *, pct)

struct ivy_grp {
    IVY_GRP_FIELDS(IVY_FIELD)
};

#define IVY_LOOP_FIELDS(X) \
    /* the engine: the kernel's mapped completion ring (its header words and events), the \
     * events a reap fills (4 words each, libaio's struct io_event, whichever the backend) \
     * and their capacity, the AIO context */ \
    X(volatile uint32_t *, ring_header) \
    X(const int64_t *, ring_events) \
    X(int64_t *, events) \
    X(int64_t, events_cap) \
    X(int64_t, ctx) \
    /* the backend: 0 libaio (ctx, the mapped ring, iocb_addr and ptrs), 1 io_uring: its \
     * descriptor, its submission ring's tail, head, flags, mask and entries, its completion \
     * ring's head, tail, mask and entries (files registered at their descriptor's index, \
     * buffers at their slot's) */ \
    X(int64_t, backend) \
    X(int64_t, uring_fd) \
    X(volatile uint32_t *, sq_tail) \
    X(volatile uint32_t *, sq_head) \
    X(volatile uint32_t *, sq_flags) \
    X(int64_t, sq_mask) \
    X(void *, sqes) \
    X(volatile uint32_t *, cq_head) \
    X(volatile uint32_t *, cq_tail) \
    X(int64_t, cq_mask) \
    X(const void *, cqes) \
    /* 2 scripted (struct ivy_script): the virtual clock's word, which only the loop's waits \
     * move (now_ns reads it); the script's state; its pending completions in order of due \
     * time, ties in submission order; its latencies by submission number (wrapping round); \
     * its log of submissions; each descriptor's count of submissions (fd % fds) */ \
    X(int64_t *, vclock) \
    X(struct ivy_script *, fake_state) \
    X(struct ivy_pend *, fake_pend) \
    X(const int64_t *, fake_script) \
    X(struct ivy_log *, fake_log) \
    X(int64_t *, fake_fd_counts) \
    /* the slot table: its rows, each slot's iocb address, a submission's iocb addresses and \
     * slots */ \
    X(struct ivy_row *, rows) \
    X(const int64_t *, iocb_addr) \
    X(int64_t *, ptrs) \
    X(int64_t *, out) \
    /* per workload: its precomputed ring (of addresses of struct ivy_io), cursor and length; \
     * its free slots (a stack at free_off, free_n deep, in free_buf); each slot's workload \
     * (-1: none of this set's) */ \
    X(int64_t *, rings) \
    X(int64_t *, cur) \
    X(int64_t *, rlen) \
    X(int64_t *, free_buf) \
    X(int64_t *, free_off) \
    X(int64_t *, free_n) \
    X(const int64_t *, slot_pos) \
    X(int64_t, n_slots) \
    /* the heap of armed workloads (time, workload) and each one's mark (1 in the heap) */ \
    X(int64_t *, heap_t) \
    X(int64_t *, heap_k) \
    X(uint8_t *, armed) \
    X(int64_t, n_workloads) \
    /* each workload's write data (put into a write's buffer as it goes out) */ \
    X(struct ivy_data *, data) \
    /* the records (rows): a return to flush at flush_at, the binned moved to the front past \
     * compact_at */ \
    X(struct ivy_row *, pend) \
    X(int64_t, flush_at) \
    X(int64_t, compact_at) \
    /* binning: the stats region, each owner's block in the running buffer (-1: deleted), \
     * its fixed category (-1: the record's), how many owners; discard: bin nothing */ \
    X(int64_t *, root) \
    X(const int64_t *, stat_off) \
    X(const int64_t *, fixcat) \
    X(int64_t, n_owners) \
    X(int64_t, discard) \
    /* time: the boundary, the next return (the boundary or a control poll), the waits' \
     * knobs (slave.engine.tuning) */ \
    X(int64_t, boundary_ns) \
    X(int64_t, wake_ns) \
    X(int64_t, sleep_min_ns) \
    X(int64_t, long_wait_ns) \
    X(int64_t, wake_early_ns) \
    /* the most paced I/Os one submission carries (tuning.PACED_PER_CALL) */ \
    X(int64_t, paced_per_call) \
    X(int64_t, control_fd) \
    X(int64_t, poll_ns) \
    /* each workload's generator, its ring's capacity, how many I/Os a refill makes */ \
    X(struct ivy_gen *, gen) \
    X(const int64_t *, rcap) \
    X(int64_t, gen_ios) \
    /* the max-iops workloads' waits; lone: the set is one max-iops workload of queue depth \
     * 1-2, which waits as soon as its I/Os went out (lone_wait: blocking for block_wait_ns \
     * at most; busy_poll's look for busy_spin_ns after a completion, yielding from \
     * busy_hot_ns on) */ \
    X(int64_t, busy_poll) \
    X(int64_t, n_max) \
    X(int64_t, spin_ns) \
    X(int64_t, spin_gate_ns) \
    X(int64_t, lone) \
    X(int64_t, busy_spin_ns) \
    X(int64_t, busy_hot_ns) \
    X(int64_t, block_wait_ns) \
    /* the max-iops waits' way, chosen by measuring (await_choose): a trial runs looking \
     * first and blocking at once in turn, await_trial_ns each, await_trials times in all; \
     * the one that completed more I/Os per ns (looking: await_look_pct % more than blocking, \
     * as it takes the core; await_switch_pct % more to change) is kept for await_hold_ns, \
     * doubled while the trials choose the same, up to await_hold_max_ns */ \
    X(int64_t, await_trial_ns) \
    X(int64_t, await_trials) \
    X(int64_t, await_hold_ns) \
    X(int64_t, await_hold_max_ns) \
    X(int64_t, await_switch_pct) \
    X(int64_t, await_look_pct) \
    /* state, across runs: the records' count and how many are binned, I/Os in flight, the \
     * heap's size; completions reaped past the boundary (n at t_ns, in events) or the stray \
     * slot (R_STRAY); a submission taken in part (sub_done of sub_n); the running mean of \
     * the max-iops waits; the completions reaped; \
     * the waits' way (await_block: 1 block at once, 0 look first), the trial's turn \
     * (await_turn; await_trials: holding), when the turn or hold ends (await_until), the \
     * turn's start (its time, the completions then, await_from and await_done), the hold's \
     * length and way, each way's completions and time in the trial, and when the last run \
     * returned (the time in Python between runs counts in no turn) */ \
    X(int64_t, p) \
    X(int64_t, binned) \
    X(int64_t, in_flight) \
    X(int64_t, heap_n) \
    X(int64_t, n) \
    X(int64_t, t_ns) \
    X(int64_t, sub_done) \
    X(int64_t, sub_n) \
    X(int64_t, mean_ns) \
    X(int64_t, done) \
    X(int64_t, await_block) \
    X(int64_t, await_turn) \
    X(int64_t, await_until) \
    X(int64_t, await_from) \
    X(int64_t, await_done) \
    X(int64_t, await_held) \
    X(int64_t, await_kept) \
    X(int64_t, look_done) \
    X(int64_t, look_ns) \
    X(int64_t, block_done) \
    X(int64_t, block_ns) \
    X(int64_t, returned_ns) \
    /* data verification (each workload's vlun; none: vtab NULL), in arrays that the general \
     * loop's calls share (slave.engine.verify_state): the blocks with I/O in flight (an \
     * open-addressed table of vtab_mask + 1 entries of 2 words: the key, LUN << 40 | block, \
     * plus 1, 0 free; reads, writes, the oldest generation a read may find, flags); the \
     * journal of blocks settled by a write (LUN << 48 | block << 8 | map byte), of capacity \
     * vjournal_cap (a run returns R_FLUSH when fewer than vjournal_room are left); the \
     * damaged blocks found (the first vfind_cap of them, their bytes in vfind_bytes, 4 KiB \
     * each); the counts, vn[0] blocks in the table, vn[1] the journal's length, vn[2] \
     * damaged blocks found; the blocks checked and each class's count per owner (8 words an \
     * owner: checked, then by class code) */ \
    X(int64_t *, vtab) \
    X(int64_t, vtab_mask) \
    X(int64_t *, vjournal) \
    X(int64_t, vjournal_cap) \
    X(int64_t, vjournal_room) \
    X(struct ivy_vfind *, vfind) \
    X(int64_t, vfind_cap) \
    X(uint8_t *, vfind_bytes) \
    X(int64_t *, vn) \
    X(int64_t *, vcount)

struct ivy_loop {
    IVY_LOOP_FIELDS(IVY_FIELD)
};
#undef IVY_FIELD
