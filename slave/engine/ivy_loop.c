/* The engine loop's turn in C: see slave/engine/compiled_loop.py, which owns this file,
 * compiles it with the host's C compiler and prepends the #defines it uses (the result codes
 * R_*, the stats layout; the structs are ivy_loop.h's). One function, paced_run, over one
 * struct ivy_loop (ivy_loop.h: its arguments and its state across runs): record what
 * completed and free its slots, submit the due I/Os of the workloads with a free slot in one
 * submission, every max-iops one and per_call paced ones, the earliest (a write with its
 * data put in its buffer first: put_write_data, from its offset and serial alone), wait or
 * bin one record at a time when nothing is due. The engine under it is libaio's or
 * io_uring's (backend): the loop reaches it through be_take, be_ready, be_wait and be_submit
 * alone. A max-iops workload's I/Os have no time (0, but those an edit kept from its paced
 * schedule): they are due at once, so its freed slots go out in the turn that freed them,
 * each I/O timed at its submission; with one in flight, a wait looks in the ring before it
 * blocks or blocks at once, whichever the loop measured to complete more (await_events,
 * await_choose), or, alone at depth 1-2, waits at once (lone_wait). A workload whose
 * precomputed I/Os ran out gets its next ones from generate(), which goes on with its
 * Sequencer's stream (its struct ivy_gen). It returns to Python (an R_* code) for a boundary
 * crossed, a flush, an I/O error, a submission taken in part, and a control poll; for the
 * poll only when the control's descriptor (control_fd) has something, or when it has none.
 * paced_retime makes an edit of workloads' rates in its arrays between runs, paced_generate
 * (a used-up ring's next I/Os; the tests' too) and paced_extend (more of them after its rows)
 * before it, and paced_write_data serves the tests.
 * It allocates nothing. At its end, the native engines' own calls (slave.engine.native): a
 * backend set up and down (ivy_aio_setup, ivy_uring_setup, ...) in a struct ivy_loop of the
 * engine's, and the general Python loop's submit and reap through the same backend functions
 * (ivy_submit, ivy_submit_rest, ivy_reap); ivy_await_choose and ivy_await_resume serve the
 * tests. After them, the slave's rollup (ivy_group_bounds, ivy_group_pass), which has nothing
 * to do with the loop but ships with it.
 */
#include <math.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include "ivy_loop.h"

/* each struct's layout as compiled: its size, then each field's offset and size, in order;
 * and the fields' names, each followed by a space (slave.engine.layout checks its mirrors
 * against them) */
#define IVY_NAME(type, name) #name " "
#define IVY_LAYOUT(type, name) \
    (int64_t)offsetof(IVY_S, name), (int64_t)sizeof(((IVY_S *)0)->name),
#define IVY_EXPORT(s, FIELDS) \
    const int64_t ivy_##s##_layout[] = {(int64_t)sizeof(IVY_S), FIELDS(IVY_LAYOUT)}; \
    const char ivy_##s##_names[] = FIELDS(IVY_NAME);
/* IVY_S: the struct being exported (IVY_LAYOUT reads it where it expands) */
#define IVY_S struct ivy_loop
IVY_EXPORT(loop, IVY_LOOP_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_gen
IVY_EXPORT(gen, IVY_GEN_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_data
IVY_EXPORT(data, IVY_DATA_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_row
IVY_EXPORT(row, IVY_ROW_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_io
IVY_EXPORT(io, IVY_IO_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_script
IVY_EXPORT(script, IVY_SCRIPT_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_pend
IVY_EXPORT(pend, IVY_PEND_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_log
IVY_EXPORT(log, IVY_LOG_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_vlun
IVY_EXPORT(vlun, IVY_VLUN_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_vfind
IVY_EXPORT(vfind, IVY_VFIND_FIELDS)
#undef IVY_S
#define IVY_S struct ivy_grp
IVY_EXPORT(grp, IVY_GRP_FIELDS)
#undef IVY_S
#undef IVY_LAYOUT
#undef IVY_EXPORT
#undef IVY_NAME

/* a small function of the hot path, inlined into every caller: with the engines' own calls
 * (at the end) as more callers, the compiler put some out of line in the loop */
#define IVY_HOT static inline __attribute__((always_inline))

/* the loop's time: the monotonic clock's, or the scripted engine's virtual clock (a branch
 * that goes one way for the whole run) */
static inline int64_t now_ns(const struct ivy_loop *L)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0))
        return *L->vclock;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* whether the control's descriptor has something for its poll (or an error or hang-up, which
 * its poll must see too) */
static int control_waiting(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0; /* not when the poll failed (a signal): looked at again later */
}

/* the binary min-heap of (time, workload), ties by workload (as Python's tuples) */
static inline int before(int64_t t1, int64_t k1, int64_t t2, int64_t k2)
{
    return t1 < t2 || (t1 == t2 && k1 < k2);
}

static inline void heap_put(int64_t *ht, int64_t *hk, int64_t i, int64_t t, int64_t k)
{
    ht[i] = t;
    hk[i] = k;
}

static int64_t heap_push(int64_t *ht, int64_t *hk, int64_t n, int64_t t, int64_t k)
{
    int64_t i = n;
    while (i > 0) {
        int64_t up = (i - 1) >> 1;
        if (before(ht[up], hk[up], t, k))
            break;
        heap_put(ht, hk, i, ht[up], hk[up]);
        i = up;
    }
    heap_put(ht, hk, i, t, k);
    return n + 1;
}

static int64_t heap_pop(int64_t *ht, int64_t *hk, int64_t n)
{
    n -= 1;
    int64_t t = ht[n], k = hk[n], i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(ht[c + 1], hk[c + 1], ht[c], hk[c]))
            c += 1;
        if (before(t, k, ht[c], hk[c]))
            break;
        heap_put(ht, hk, i, ht[c], hk[c]);
        i = c;
    }
    heap_put(ht, hk, i, t, k);
    return n;
}

/* the completions in the kernel's mapped completion ring (hdr: its header words id, nr, head,
 * tail, ...; ring_ev: its events, 4 words each) moved into ev, at most ev_cap, with no system
 * call (as fio's userspace_reap); how many */
IVY_HOT int64_t ring_take(volatile uint32_t *hdr, const int64_t *ring_ev, int64_t *ev,
                          int64_t ev_cap)
{
    const int64_t nr = hdr[1], head = hdr[2], tail = hdr[3];
    int64_t n;
    if (head == tail)
        return 0;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the events after the tail */
    if (tail > head) {
        n = tail - head < ev_cap ? tail - head : ev_cap;
        for (int64_t i = 0; i < 4 * n; i++)
            ev[i] = ring_ev[4 * head + i];
    } else {
        int64_t first = nr - head < ev_cap ? nr - head : ev_cap;
        for (int64_t i = 0; i < 4 * first; i++)
            ev[i] = ring_ev[4 * head + i];
        n = first + (tail < ev_cap - first ? tail : ev_cap - first);
        for (int64_t i = 0; i < 4 * (n - first); i++)
            ev[4 * first + i] = ring_ev[i];
    }
    __atomic_thread_fence(__ATOMIC_RELEASE); /* copied before the head moves */
    hdr[2] = (uint32_t)((head + n) % nr);
    return n;
}

/* io_uring's ABI (linux/io_uring.h), the parts the loop uses, spelled out here: a host may
 * lack the header. A submission entry (64 bytes), a completion entry (16), the wait's
 * argument (IORING_ENTER_EXT_ARG: a timeout with the wait) */
struct ivy_sqe {
    uint8_t opcode, flags;
    uint16_t ioprio;
    int32_t fd;
    uint64_t off, addr;
    uint32_t len, rw_flags;
    uint64_t user_data;
    uint16_t buf_index, personality;
    int32_t file_index;
    uint64_t pad[2];
};
struct ivy_cqe {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
};
struct ivy_getevents_arg {
    uint64_t sigmask;
    uint32_t sigmask_sz, min_wait_usec;
    uint64_t ts;
};
#define IVY_OP_READ_FIXED 4
#define IVY_OP_WRITE_FIXED 5
#define IVY_SQE_FIXED_FILE 1
#define IVY_ENTER_GETEVENTS 1
#define IVY_ENTER_EXT_ARG 8
#define IVY_SQ_TASKRUN (1u << 2) /* IORING_SQ_TASKRUN: completions wait for the task to enter */
#ifndef SYS_io_uring_enter
#define SYS_io_uring_enter 426
#endif

/* the completions in io_uring's completion ring moved into ev as libaio's events (the slot,
 * 0, the result, 0), at most cap, with no system call but where the ring says completions
 * wait for this task to post them (IORING_SQ_TASKRUN: the ring is set up with
 * IORING_SETUP_DEFER_TASKRUN or COOP_TASKRUN, which do not interrupt the task for them); how
 * many */
IVY_HOT int64_t cq_take(const struct ivy_loop *L, int64_t *ev, int64_t cap)
{
    const uint32_t head = *L->cq_head;
    uint32_t tail = __atomic_load_n(L->cq_tail, __ATOMIC_ACQUIRE);
    if (tail == head && (*L->sq_flags & IVY_SQ_TASKRUN)) {
        syscall(SYS_io_uring_enter, (int)L->uring_fd, 0, 0, IVY_ENTER_GETEVENTS, NULL, 0);
        tail = __atomic_load_n(L->cq_tail, __ATOMIC_ACQUIRE);
    }
    int64_t n = (uint32_t)(tail - head);
    if (n == 0)
        return 0;
    if (n > cap)
        n = cap;
    const struct ivy_cqe *cqes = (const struct ivy_cqe *)L->cqes;
    const uint32_t mask = (uint32_t)L->cq_mask;
    for (int64_t i = 0; i < n; i++) {
        const struct ivy_cqe *c = &cqes[(head + (uint32_t)i) & mask];
        ev[4 * i] = (int64_t)c->user_data;
        ev[4 * i + 1] = 0;
        ev[4 * i + 2] = c->res;
        ev[4 * i + 3] = 0;
    }
    __atomic_store_n(L->cq_head, head + (uint32_t)n, __ATOMIC_RELEASE); /* copied first */
    return n;
}

/* the scripted engine (backend BACKEND_SCRIPTED: slave.engine.fake.FakeEngine's script, on
 * the structs its Python shares, struct ivy_script, ivy_pend and ivy_log): no I/O; each
 * submission completes at its submit time plus the script's latency for its number among its
 * descriptor's submissions, with its byte count, half of it every short_every-th submission of
 * the descriptor, -error_errno every error_every-th (as FakeEngine.submit makes it: a
 * workload's I/Os, each on its own descriptor, take the same latencies whatever the order of
 * several workloads' I/Os in one submission, on which the loops need not agree). Its
 * time is virtual: only a wait moves it (fk_advance), to the wait's end or to the next
 * completion's due time, whichever is sooner, so every completion is reaped at its due time
 * and the run is a function of the script. The completions due now moved into ev as libaio's
 * events, in order of due time (ties: submission order), at most cap; how many */
static int64_t fk_take(const struct ivy_loop *L, int64_t *ev, int64_t cap)
{
    struct ivy_script *st = L->fake_state;
    struct ivy_pend *pend = L->fake_pend;
    const int64_t now = *L->vclock, n = st->pending;
    int64_t j = 0;
    for (; j < n && j < cap; j++) {
        if (pend[j].due_ns > now)
            break;
        ev[4 * j] = pend[j].slot;
        ev[4 * j + 1] = 0;
        ev[4 * j + 2] = pend[j].res;
        ev[4 * j + 3] = 0;
    }
    if (j) {
        memmove(pend, pend + j, (size_t)(n - j) * sizeof *pend);
        st->pending = n - j;
    }
    return j;
}

/* the virtual clock moved on to until, or to the next completion's due time if sooner (never
 * back) */
static void fk_advance(const struct ivy_loop *L, int64_t until)
{
    if (L->fake_state->pending > 0 && L->fake_pend[0].due_ns < until)
        until = L->fake_pend[0].due_ns;
    if (until > *L->vclock)
        *L->vclock = until;
}

/* the m slots in out submitted to the script, each logged while the log has room; how many it
 * took: fewer than m when its pending completions have no room left, none when the script or
 * the descriptors' counts are empty (Python's FakeEngine never makes either: its finish_submit
 * then names the shortfall) */
static long fk_submit(const struct ivy_loop *L, const struct ivy_row *rows, const int64_t *out,
                      int64_t m)
{
    struct ivy_script *st = L->fake_state;
    struct ivy_pend *pend = L->fake_pend;
    const int64_t now = *L->vclock;
    const int64_t room = st->script_n > 0 && st->fds > 0 ? st->pend_cap - st->pending : 0;
    if (m > room)
        m = room > 0 ? room : 0;
    for (int64_t q = 0; q < m; q++) {
        const struct ivy_row *row = &rows[out[q]];
        const int64_t serial = st->count, n = st->pending;
        int64_t *fd_count = &L->fake_fd_counts[(row->opcode_fd >> 32) % st->fds];
        const int64_t mine = *fd_count; /* its number among its descriptor's submissions */
        *fd_count = mine + 1;
        int64_t res = (int64_t)row->nbytes;
        if (st->short_every && (mine + 1) % st->short_every == 0)
            res /= 2;
        if (st->error_every && (mine + 1) % st->error_every == 0)
            res = -st->error_errno;
        const int64_t due = now + L->fake_script[mine % st->script_n];
        int64_t i = n; /* after every pending completion due no later */
        while (i > 0 && pend[i - 1].due_ns > due)
            i--;
        memmove(pend + i + 1, pend + i, (size_t)(n - i) * sizeof *pend);
        pend[i] = (struct ivy_pend){due, out[q], res};
        st->pending = n + 1;
        if (serial < st->log_cap)
            L->fake_log[serial] = (struct ivy_log){
                row->offset, row->opcode_fd & 0xffff, now, row->opcode_fd >> 32,
                row->sched_ns ? row->sched_ns : now, /* max iops: its submission */
                (int64_t)row->nbytes};
        st->count = serial + 1;
    }
    st->calls += 1;
    if (m > st->call_max)
        st->call_max = m;
    return m;
}

/* the backend's four calls, the one place the loop tells libaio (backend 0) from io_uring:
 * the completions there now, taken without a system call (be_take) or only looked at
 * (be_ready); a block for one for ns at most (be_wait: how many it took, 0 at the timeout or
 * when interrupted, -errno when it failed: paced_run returns R_WAIT with it, ivy_reap gives
 * it to Python); the submission of the m slots in out (be_submit: libaio's io_submit of
 * their iocbs, in ptrs; io_uring's entries made from their rows, each slot's registered file
 * and buffer, then io_uring_enter; how many the kernel took, -1 none) */
IVY_HOT int64_t be_take(const struct ivy_loop *L, int64_t *ev, int64_t cap)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0))
        return fk_take(L, ev, cap);
    if (L->backend)
        return cq_take(L, ev, cap);
    return ring_take(L->ring_header, L->ring_events, ev, cap);
}

static inline int be_ready(const struct ivy_loop *L)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0))
        return L->fake_state->pending > 0 && L->fake_pend[0].due_ns <= *L->vclock;
    if (L->backend)
        return *L->cq_head != *L->cq_tail || (*L->sq_flags & IVY_SQ_TASKRUN);
    return L->ring_header[2] != L->ring_header[3];
}

static inline int64_t be_wait(const struct ivy_loop *L, int64_t *ev, int64_t cap, int64_t ns)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0)) {
        fk_advance(L, *L->vclock + ns);
        return fk_take(L, ev, cap);
    }
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    long rc;
    if (!L->backend) {
        rc = syscall(SYS_io_getevents, (unsigned long)L->ctx, 1L, (long)cap, (void *)ev, &ts);
        if (rc >= 0)
            return rc;
    } else {
        struct ivy_getevents_arg arg = {0, 8, 0, (uint64_t)(uintptr_t)&ts};
        rc = syscall(SYS_io_uring_enter, (int)L->uring_fd, 0, 1,
                     IVY_ENTER_GETEVENTS | IVY_ENTER_EXT_ARG, &arg, sizeof arg);
        if (rc >= 0 || errno == ETIME)
            return cq_take(L, ev, cap);
    }
    return errno == EINTR ? 0 : -errno;
}

IVY_HOT long be_submit(const struct ivy_loop *L, const struct ivy_row *rows,
                       const int64_t *out, int64_t m)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0))
        return fk_submit(L, rows, out, m);
    if (!L->backend)
        return syscall(SYS_io_submit, (unsigned long)L->ctx, (long)m, (void *)L->ptrs);
    struct ivy_sqe *sqes = (struct ivy_sqe *)L->sqes;
    const uint32_t tail = *L->sq_tail, mask = (uint32_t)L->sq_mask;
    for (int64_t q = 0; q < m; q++) {
        const int64_t slot = out[q];
        const struct ivy_row *row = &rows[slot];
        const int64_t w = row->opcode_fd;
        struct ivy_sqe *e = &sqes[(tail + (uint32_t)q) & mask];
        memset(e, 0, sizeof *e);
        e->opcode = (w & 0xffff) == IOCB_CMD_PWRITE ? IVY_OP_WRITE_FIXED : IVY_OP_READ_FIXED;
        e->flags = IVY_SQE_FIXED_FILE;
        e->fd = (int32_t)(w >> 32); /* the file registered at its descriptor's index */
        e->off = (uint64_t)row->offset;
        e->addr = row->buf;
        e->len = (uint32_t)row->nbytes;
        e->user_data = (uint64_t)slot;
        e->buf_index = (uint16_t)slot; /* the buffer registered at its slot's index */
    }
    __atomic_store_n(L->sq_tail, tail + (uint32_t)m, __ATOMIC_RELEASE); /* entries first */
    return syscall(SYS_io_uring_enter, (int)L->uring_fd, (unsigned)m, 0, 0, NULL, 0);
}

/* nothing to do before until but look again: yield the core (the device's worker may need
 * it); in virtual time, where a look finds nothing new until time moves, move it on */
static inline void be_idle(const struct ivy_loop *L, int64_t until)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0))
        fk_advance(L, until);
    else
        syscall(SYS_sched_yield);
}

/* a wait for completions when a look found none: look again until spin_until, and while
 * until is nearer than sleep_min, yielding the core between looks from yield_from on (the
 * device's kernel worker may need it); block (be_wait) for the rest, up to block_until.
 * In virtual time, which a look never moves, the wait moves it to until or the next
 * completion. How many completions it moved into ev (0: until came) */
static int64_t look_then_block(const struct ivy_loop *L, int64_t *ev, int64_t cap,
                               int64_t until, int64_t block_until, int64_t spin_until,
                               int64_t yield_from, int64_t sleep_min)
{
    if (__builtin_expect(L->backend == BACKEND_SCRIPTED, 0)) {
        fk_advance(L, until);
        return fk_take(L, ev, cap);
    }
    int64_t n = 0, now = now_ns(L);
    for (;;) {
        if (now >= until)
            break;
        if (now < spin_until || until - now < sleep_min || block_until <= now) {
            if (now >= yield_from)
                syscall(SYS_sched_yield);
            n = be_take(L, ev, cap);
        } else {
            n = be_wait(L, ev, cap, block_until - now);
        }
        if (n)
            break;
        now = now_ns(L);
    }
    return n;
}

/* how the max-iops waits wait, from now on: 1 block at once, 0 look first. Which completes
 * more I/Os differs by machine and queue depth (docs/engine.md, "Looking or blocking,
 * measured"), so the loop measures it: a trial runs the two in turn, await_trial_ns each, in
 * the order look, block, block, look, ... (a drift weighs on both alike), await_trials turns
 * in all, counting the completions reaped in each; the way that completed more per ns
 * (looking: await_look_pct % more than blocking) is kept for await_hold_ns (the way kept
 * before, or blocking at first, which leaves the CPU to others, unless the other completed
 * await_switch_pct % more), twice as long each time the next trial chooses the same, up to
 * await_hold_max_ns; then a trial again.
 * Called at a wait's start: a turn ends at the first wait past its time. */
static __attribute__((noinline)) int64_t await_rechoose(struct ivy_loop *L, int64_t now)
{
    const int64_t trials = L->await_trials;
    if (trials <= 0) { /* no trials (tuning.AWAIT_TRIALS 0): look first, always */
        L->await_until = INT64_MAX;
        return L->await_block = 0;
    }
    int64_t turn = L->await_turn;
    if (turn < trials && L->await_until) { /* the turn that ends: its way's count */
        const int64_t did = L->done - L->await_done, took = now - L->await_from;
        if (L->await_block) {
            L->block_done += did;
            L->block_ns += took;
        } else {
            L->look_done += did;
            L->look_ns += took;
        }
        turn++;
    } else { /* a trial starts (the first, or a hold ended) */
        turn = 0;
        L->look_done = L->look_ns = L->block_done = L->block_ns = 0;
    }
    if (turn < trials) {
        L->await_block = (turn + 1) >> 1 & 1;
        L->await_until = now + L->await_trial_ns;
    } else {
        /* more per ns: block_done / block_ns against look_done / look_ns, multiplied out,
         * looking's less await_look_pct % (it takes the core, which blocking leaves to the
         * device's worker and the other workers); the way kept so far stays unless the other
         * completed await_switch_pct % more */
        const int64_t held = L->await_held, kept = held ? L->await_kept : 1;
        const __int128 by_block = (__int128)L->block_done * L->look_ns * (100 + L->await_look_pct),
                       by_look = (__int128)L->look_done * L->block_ns * 100;
        const __int128 other = kept ? by_look : by_block, same = kept ? by_block : by_look;
        const int64_t block = kept ^ (other * 100 > same * (100 + L->await_switch_pct));
        L->await_held = !held || block != L->await_kept ? L->await_hold_ns
                        : held * 2 < L->await_hold_max_ns ? held * 2 : L->await_hold_max_ns;
        L->await_block = L->await_kept = block;
        L->await_until = now + L->await_held;
    }
    L->await_turn = turn;
    L->await_from = now;
    L->await_done = L->done;
    return L->await_block;
}

IVY_HOT int64_t await_choose(struct ivy_loop *L, int64_t now)
{
    return now < L->await_until ? L->await_block : await_rechoose(L, now);
}

/* a run starts at now: the time since the last returned (returned_ns), spent in Python,
 * counts in no turn of await_choose's trial and holds nothing */
static void await_resume(struct ivy_loop *L, int64_t now)
{
    if (L->returned_ns && L->await_until && L->await_until != INT64_MAX) {
        L->await_from += now - L->returned_ns;
        L->await_until += now - L->returned_ns;
    }
}

/* await_choose and await_resume, for the tests: the way chosen at now */
int64_t ivy_await_choose(struct ivy_loop *L, int64_t now)
{
    return await_choose(L, now);
}

void ivy_await_resume(struct ivy_loop *L, int64_t now)
{
    await_resume(L, now);
}

/* the max-iops loops' wait: look_then_block, looking first (for spin ns, yielding after every
 * look) only when await_choose says so and the recent waits (their running mean, mean_ns)
 * were shorter than gate; the Python loop's (slave.engine.clock.Waiter) always looks first */
static int64_t await_events(struct ivy_loop *L, int64_t *ev, int64_t cap, int64_t until,
                            int64_t block_until, int64_t spin, int64_t gate, int64_t sleep_min)
{
    const int64_t t0 = now_ns(L);
    const int64_t look = !await_choose(L, t0) && L->mean_ns < gate;
    int64_t n = look_then_block(L, ev, cap, until, block_until, look ? t0 + spin : t0, t0,
                                sleep_min);
    L->mean_ns += (now_ns(L) - t0 - L->mean_ns) >> 3; /* a running mean over ~8 waits */
    return n;
}

/* a completion's record: its slot's row whole, then the event's result and the reap time */
static inline void record_slot(struct ivy_row *rec, const struct ivy_row *row,
                               const int64_t *event, int64_t t)
{
    *rec = *row;
    rec->res = event[2];
    rec->done_ns = t;
}

/* numpy's PCG64 (XSL-RR 128/64) and its doubles (Generator.random): bit for bit, so a
 * workload's stream goes on here as it would in its Sequencer */
static inline double pcg_double(__uint128_t *state, __uint128_t inc)
{
    const __uint128_t mult = ((__uint128_t)2549297995355413924ULL << 64) | 4865540595714422341ULL;
    __uint128_t s = *state * mult + inc;
    *state = s;
    uint64_t x = (uint64_t)(s >> 64) ^ (uint64_t)s;
    unsigned r = (unsigned)(s >> 122);
    uint64_t v = (x >> r) | (x << ((-r) & 63));
    return (double)(v >> 11) * (1.0 / 9007199254740992.0);
}

/* PCG64's state moved back by n steps (numpy's PCG64.advance of 2^128 - n: the LCG jumped by
 * squaring, bit by bit of the distance) */
static __uint128_t pcg_rewind(__uint128_t state, __uint128_t inc, uint64_t n)
{
    __uint128_t mult = ((__uint128_t)2549297995355413924ULL << 64) | 4865540595714422341ULL;
    __uint128_t plus = inc, acc_mult = 1, acc_plus = 0, delta = -(__uint128_t)n;
    while (delta) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
        delta >>= 1;
    }
    return acc_mult * state + acc_plus;
}

/* a 128-bit value kept in two 64-bit halves, high first */
static inline __uint128_t pair(uint64_t hi, uint64_t lo)
{
    return ((__uint128_t)hi << 64) | lo;
}

/* the I/O stream's state back into the generator */
static inline void put_state(struct ivy_gen *g, __uint128_t v)
{
    g->state_hi = (uint64_t)(v >> 64);
    g->state_lo = (uint64_t)v;
}

/* the scheduled times of m I/Os at ring as Sequencer._sched makes them, bit
 * for bit: evenly spaced, base + round(k * period) as numpy rounds (half to even); or Poisson
 * (Sequencer._poisson), each gap drawn by inversion, -log1p(-u) * period, with the C library's
 * log1p (math.log1p calls the same), and added to the last time in turn. A Poisson schedule's
 * first arrival (first_due) is at its start: its gap is drawn and dropped, as in Python */
static void schedule(struct ivy_gen *g, struct ivy_io *ring, int64_t m)
{
    const double period = g->period_ns;
    if (!(period > 0.0)) { /* max iops: no schedule (0: the submit time), no draw, as in Python */
        for (int64_t i = 0; i < m; i++)
            ring[i].sched_ns = 0;
        return;
    }
    if (g->poisson) {
        __uint128_t st = pair(g->sched_state_hi, g->sched_state_lo);
        const __uint128_t inc = pair(g->sched_inc_hi, g->sched_inc_lo);
        double last = g->sched_last_ns;
        for (int64_t i = 0; i < m; i++) {
            /* volatile: the product is rounded before the sum, as numpy rounds it; a compiler
             * may otherwise fuse the two into one multiply-add, rounded once (GCC does by
             * default where the CPU has one, as every aarch64 does) */
            volatile double gap = -log1p(-pcg_double(&st, inc)) * period;
            if (g->first_due) {
                gap = 0.0;
                g->first_due = 0;
            }
            last += gap;
            ring[i].sched_ns = (int64_t)last;
        }
        g->sched_last_ns = last;
        g->sched_state_hi = (uint64_t)(st >> 64);
        g->sched_state_lo = (uint64_t)st;
    } else {
        const int64_t base = g->sched_base_ns, k0 = g->sched_k;
        for (int64_t i = 0; i < m; i++)
            ring[i].sched_ns = base + (int64_t)nearbyint((double)(k0 + i) * period);
        g->sched_k = k0 + m;
    }
}

/* workload k's next m I/Os into ring[0..m), as Sequencer.chunk(m) and LoopWorkload.refill
 * make them (the same draws, I/O by I/O: its offset, the hot zone's choice and offset, its
 * direction; the Poisson gaps from the schedule's own stream) */
static void draw(struct ivy_loop *L, int64_t k, struct ivy_io *ring, int64_t m)
{
    struct ivy_gen *g = &L->gen[k];
    __uint128_t st = pair(g->state_hi, g->state_lo);
    const __uint128_t inc = pair(g->inc_hi, g->inc_lo);
    const int64_t first = g->first_bytes, nb = g->n_blocks, bs = g->blocksize_bytes;
    const int64_t nhot = g->n_hot;
    const double share = g->hot_share, rf = g->read_fraction;
    const int64_t mixed = rf > 0.0 && rf < 1.0, all_write = rf <= 0.0;
    const int64_t seq_cat = g->sequential ? 2 : 0;
    int64_t next = g->seq_next;
    for (int64_t i = 0; i < m; i++) {
        int64_t block;
        if (g->sequential) {
            block = next;
            next = next + 1 == nb ? 0 : next + 1;
        } else {
            block = (int64_t)(pcg_double(&st, inc) * (double)nb);
            if (nhot) { /* both drawn, whatever the choice */
                int hot = pcg_double(&st, inc) < share;
                int64_t hot_block = (int64_t)(pcg_double(&st, inc) * (double)nhot);
                if (hot)
                    block = hot_block;
            }
        }
        int64_t w = mixed ? pcg_double(&st, inc) >= rf : all_write;
        ring[i].offset = first + block * bs;
        ring[i].opcode_fd = w ? g->op_write : g->op_read;
        ring[i].cat = w + seq_cat;
        ring[i].submit_ns = 0;
    }
    g->seq_next = next;
    schedule(g, ring, m);
    put_state(g, st);
    g->made += m;
}

/* workload k's next m I/Os into its ring from the top, their serials (its write data's)
 * following the old ring's, whose I/Os they replace (all issued) */
static void generate(struct ivy_loop *L, int64_t k, int64_t m)
{
    draw(L, k, (struct ivy_io *)(intptr_t)L->rings[k], m);
    if (L->data) /* every I/O took a serial */
        L->data[k].ring_serial += L->rlen[k];
    L->rlen[k] = m;
    L->cur[k] = 0;
}

/* generate(): a ring all issued, before paced_retime; and for the tests */
void paced_generate(struct ivy_loop *L, int64_t k, int64_t m)
{
    generate(L, k, m);
}

/* workload k's next m I/Os after the rlen in its ring (the caller keeps rlen + m within its
 * capacity, rcap), before paced_retime: its backlog made whole where the ring did not reach
 * the edit */
void paced_extend(struct ivy_loop *L, int64_t k, int64_t m)
{
    draw(L, k, (struct ivy_io *)(intptr_t)L->rings[k] + L->rlen[k], m);
    L->rlen[k] += m;
}

/* an edit of the rates of workloads ks[0..n) at time at, in place (NativeLoop.retime_loaded:
 * each one's generator holds its new period and schedule start, sched_k 0, sched_last_ns at
 * and, for a Poisson schedule, first_due): the first cap I/Os in its ring that were due
 * before at and are not issued yet keep their times (the backlog), the rest take the new
 * schedule's, as Workloads._retime gives them. resync: its Sequencer takes the state back */
void paced_retime(struct ivy_loop *L, int64_t at, const int64_t *ks, int64_t n, int64_t cap)
{
    for (int64_t x = 0; x < n; x++) {
        const int64_t k = ks[x];
        struct ivy_gen *g = &L->gen[k];
        struct ivy_io *ring = (struct ivy_io *)(intptr_t)L->rings[k];
        int64_t j = L->cur[k];
        const int64_t end = L->rlen[k], kept = end - j > cap ? j + cap : end;
        while (j < kept && ring[j].sched_ns < at) /* in time order */
            j++;
        if (g->poisson && end > j) { /* their arrivals drawn again from where theirs were */
            __uint128_t st = pcg_rewind(pair(g->sched_state_hi, g->sched_state_lo),
                                        pair(g->sched_inc_hi, g->sched_inc_lo),
                                        (uint64_t)(end - j));
            g->sched_state_hi = (uint64_t)(st >> 64);
            g->sched_state_lo = (uint64_t)st;
        }
        schedule(g, ring + j, end - j);
        g->resync = 1;
    }
}

/* SplitMix64's output function (slave.datapattern.splitmix64) */
static inline uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* the data of ring I/O i of a workload whose write data is d, a write at byte offset off,
 * into its buffer at dst, as WritePattern defines it from its serial (ring_serial + i):
 * zeros (the buffer holds what the slot last read or wrote: they are written); dedupable's
 * duplicate block where the serial's mix says so; else its pool block, stamped (the sector's
 * offset on the LUN, the serial) at the head of every sector, or of the first
 * (compressible) */
static void put_write_data(const struct ivy_data *d, int64_t i, int64_t off, char *dst)
{
    const int64_t bs = d->block_bytes, serial = d->ring_serial + i;
    int64_t stamped = bs / SECTOR_BYTES;
    switch (d->kind) {
    case DATA_ZEROS:
        memset(dst, 0, (size_t)bs);
        return;
    case DATA_DEDUPABLE: {
        const uint64_t x = mix64(d->dedup_key + (uint64_t)serial);
        if ((x >> 11) >= (uint64_t)d->unique_below) {
            memcpy(dst, d->dups + (x % (uint64_t)d->dup_blocks) * (uint64_t)bs, (size_t)bs);
            return;
        }
        break;
    }
    case DATA_COMPRESSIBLE:
        stamped = 1;
        break;
    default:
        break;
    }
    memcpy(dst, d->pool + (serial % d->pool_blocks) * bs, (size_t)bs);
    for (int64_t sec = 0; sec < stamped; sec++) {
        int64_t *head = (int64_t *)(dst + SECTOR_BYTES * sec);
        head[0] = off + SECTOR_BYTES * sec;
        head[1] = serial;
    }
}

/* put_write_data, for the tests: workload k's ring I/O i, a write at off, into dst */
void paced_write_data(const struct ivy_loop *L, int64_t k, int64_t i, int64_t off, char *dst)
{
    put_write_data(&L->data[k], i, off, dst);
}

/* ------------------------------------------------------------------------ data verification
 * protocol/verify.py owns the stamp (32 bytes at the head of every 512-byte sector of a
 * verified write), the map byte (generation, UNSETTLED) and the classes; these functions are
 * its compiled twin, checked against it by tests/slave/test_engine_verify.py. A write takes
 * each of its 4 KiB blocks' next generation at its submission (verify_write: the map holds it
 * from then on); a read is checked at its completion (verify_read_done) against the map as it
 * is then, leniently where a write of the block was in flight at any time during the read
 * (the table of blocks in flight: any generation from the oldest it may find on, a mix of
 * them, and nothing of this run where the block was never written). A write's completion
 * settles its blocks (journaled for Python, which tells the master); two writes of a block in
 * flight at once, or one that failed, leave it UNSETTLED: the generation before is accepted
 * too. Defines from compiled_loop.source: V_MAP_BLOCK, V_STAMP, V_GEN_MASK, V_GEN_MAX,
 * V_UNSETTLED, V_CORRUPT, V_MISPLACED, V_STALE, V_TORN, V_MISSING. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the stamps are little-endian words: a big-endian host would write other bytes"
#endif
#define V_SPB (V_MAP_BLOCK / SECTOR_BYTES)
#define V_OVERLAP 1 /* entry flags: two writes in flight at once; */
#define V_FAILED 2  /* a write that failed or was short; */
#define V_CONFLICT 4 /* a read and a write of the block were in flight at once */
#define V_LO 8       /* lo holds the oldest generation a read may find */

struct v_stamp {
    uint64_t offset_bytes, serial;
    uint32_t run_key;
    uint16_t lun, writer;
    uint8_t gen, attempt;
    uint16_t zero;
    uint32_t crc;
};
_Static_assert(sizeof(struct v_stamp) == V_STAMP, "the stamp is 32 bytes");

struct v_ent { /* a block with I/O in flight (2 words of vtab) */
    int64_t key;
    int32_t reads;
    int16_t writes;
    uint8_t lo, flags;
};
_Static_assert(sizeof(struct v_ent) == 16, "a table entry is 2 words");

static uint32_t crc_table[256];
static int crc_way; /* 2: the CPU's crc32 instruction (SSE 4.2), 1: the table */

__attribute__((constructor)) static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_way = __builtin_cpu_supports("sse4.2") ? 2 : 1;
#else
    crc_way = 1;
#endif
}

static inline uint32_t crc_bytes(uint32_t c, const uint8_t *p, int64_t n)
{
    while (n-- > 0)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

/* the stamp's CRC-32C of n sectors at s (each of its bytes but the CRC's, 28-31) into out */
static void crc_sectors_table(const uint8_t *s, int64_t n, uint32_t *out)
{
    for (int64_t i = 0; i < n; i++, s += SECTOR_BYTES)
        out[i] = ~crc_bytes(crc_bytes(~0u, s, 28), s + V_STAMP, SECTOR_BYTES - V_STAMP);
}

#if defined(__x86_64__)
/* the same with the crc32 instruction, four sectors at once: four chains of independent
 * CRCs keep the instruction's pipeline full (its latency is three of its throughput) */
__attribute__((target("sse4.2"))) static void crc_sectors_hw(const uint8_t *s, int64_t n,
                                                              uint32_t *out)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint8_t *a = s + i * SECTOR_BYTES;
        uint64_t c[4] = {~0u, ~0u, ~0u, ~0u};
        uint64_t w;
        uint32_t h;
        for (int o = 0; o < 24; o += 8)
            for (int q = 0; q < 4; q++) {
                memcpy(&w, a + q * SECTOR_BYTES + o, 8);
                c[q] = __builtin_ia32_crc32di(c[q], w);
            }
        for (int q = 0; q < 4; q++) {
            memcpy(&h, a + q * SECTOR_BYTES + 24, 4);
            c[q] = __builtin_ia32_crc32si((uint32_t)c[q], h);
        }
        for (int o = V_STAMP; o < SECTOR_BYTES; o += 8)
            for (int q = 0; q < 4; q++) {
                memcpy(&w, a + q * SECTOR_BYTES + o, 8);
                c[q] = __builtin_ia32_crc32di(c[q], w);
            }
        for (int q = 0; q < 4; q++)
            out[i + q] = ~(uint32_t)c[q];
    }
    if (i < n)
        crc_sectors_table(s + i * SECTOR_BYTES, n - i, out + i);
}
#endif

static inline void crc_sectors(const uint8_t *s, int64_t n, uint32_t *out)
{
#if defined(__x86_64__)
    if (crc_way == 2) {
        crc_sectors_hw(s, n, out);
        return;
    }
#endif
    crc_sectors_table(s, n, out);
}

/* the stamps' CRCs of n sectors at s, for the tests: how they were made (2 the CPU's
 * instruction, 1 the table; force: 1 the table whatever the CPU has) */
int64_t ivy_verify_crc(const uint8_t *s, int64_t n, uint32_t *out, int64_t force)
{
    if (force == 1) {
        crc_sectors_table(s, n, out);
        return 1;
    }
    crc_sectors(s, n, out);
    return crc_way;
}

static inline uint8_t v_next(uint8_t gen) { return (uint8_t)(gen % V_GEN_MAX + 1); }
static inline uint8_t v_prev(uint8_t gen) { return (uint8_t)((gen + V_GEN_MAX - 2) % V_GEN_MAX + 1); }

/* the table's entry of block b of LUN lun: found, or made (make; NULL when the table is
 * full, which Python's sizing never lets happen), or NULL */
static struct v_ent *vt_find(struct ivy_loop *L, int64_t lun, int64_t b, int make)
{
    struct v_ent *t = (struct v_ent *)L->vtab;
    const uint64_t mask = (uint64_t)L->vtab_mask;
    const int64_t key = (lun << 40 | b) + 1;
    for (uint64_t i = mix64((uint64_t)key) & mask;; i = (i + 1) & mask) {
        if (t[i].key == key)
            return &t[i];
        if (t[i].key == 0) {
            if (!make || (uint64_t)L->vn[0] >= mask)
                return NULL;
            t[i] = (struct v_ent){.key = key};
            L->vn[0]++;
            return &t[i];
        }
    }
}

/* entry e out of the table, the entries after it moved back into the gap where their own
 * place allows (linear probing's deletion: no tombstones) */
static void vt_drop(struct ivy_loop *L, struct v_ent *e)
{
    struct v_ent *t = (struct v_ent *)L->vtab;
    const uint64_t mask = (uint64_t)L->vtab_mask;
    uint64_t i = (uint64_t)(e - t), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t[j].key == 0)
            break;
        uint64_t h = mix64((uint64_t)t[j].key) & mask;
        /* t[j] may move to i unless its home h lies cyclically in (i, j] */
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) {
            t[i] = t[j];
            i = j;
        }
    }
    t[i].key = 0;
    L->vn[0]--;
}

/* a write of workload d's at off (nbytes, serial) goes out, its data in buf: each of its
 * blocks takes its next generation (the map holds it from now), and every sector its stamp */
static void verify_write(struct ivy_loop *L, const struct ivy_data *d, int64_t off,
                         int64_t nbytes, int64_t serial, uint8_t *buf)
{
    struct ivy_vlun *v = d->vlun;
    const int64_t b0 = (off - v->first_bytes) / V_MAP_BLOCK, nb = nbytes / V_MAP_BLOCK;
    struct v_stamp st = {.serial = (uint64_t)serial, .run_key = (uint32_t)v->run_key,
                         .lun = (uint16_t)v->lun, .writer = (uint16_t)d->writer,
                         .attempt = (uint8_t)v->attempt};
    uint32_t crc[V_SPB];
    for (int64_t j = 0; j < nb; j++) {
        const int64_t b = b0 + j;
        uint8_t *blk = buf + j * V_MAP_BLOCK;
        st.gen = 0;
        if (b >= 0 && b < v->n_blocks) {
            const uint8_t m = v->map[b], g = m & V_GEN_MASK;
            struct v_ent *e = vt_find(L, v->lun, b, 1);
            if (e) {
                if (!(e->flags & V_LO)) {
                    e->lo = g == 0 ? 0 : (m & V_UNSETTLED ? v_prev(g) : g);
                    e->flags |= V_LO;
                }
                if (e->writes > 0)
                    e->flags |= V_OVERLAP;
                if (e->reads > 0)
                    e->flags |= V_CONFLICT;
                e->writes++;
            }
            st.gen = v_next(g);
            v->map[b] = st.gen;
        }
        for (int s = 0; s < V_SPB; s++) {
            st.offset_bytes = (uint64_t)(off + j * V_MAP_BLOCK + s * SECTOR_BYTES);
            memcpy(blk + s * SECTOR_BYTES, &st, V_STAMP - 4);
        }
        crc_sectors(blk, V_SPB, crc);
        for (int s = 0; s < V_SPB; s++)
            memcpy(blk + s * SECTOR_BYTES + V_STAMP - 4, &crc[s], 4);
    }
}

/* a write of workload d's at off (nbytes) completed with result res: its blocks with no
 * other write in flight are settled (UNSETTLED where two were in flight at once or this one
 * failed) and journaled */
static void verify_write_done(struct ivy_loop *L, const struct ivy_data *d, int64_t off,
                              int64_t nbytes, int64_t res)
{
    struct ivy_vlun *v = d->vlun;
    const int64_t b0 = (off - v->first_bytes) / V_MAP_BLOCK, nb = nbytes / V_MAP_BLOCK;
    for (int64_t b = b0 < 0 ? 0 : b0; b < b0 + nb && b < v->n_blocks; b++) {
        struct v_ent *e = vt_find(L, v->lun, b, 0);
        if (e == NULL)
            continue;
        if (res != nbytes)
            e->flags |= V_FAILED;
        if (--e->writes > 0)
            continue;
        if (e->flags & (V_OVERLAP | V_FAILED))
            v->map[b] |= V_UNSETTLED;
        e->flags &= (uint8_t)~(V_OVERLAP | V_FAILED);
        if (L->vn[1] < L->vjournal_cap)
            L->vjournal[L->vn[1]++] = v->lun << 48 | b << 8 | v->map[b];
        if (e->reads == 0)
            vt_drop(L, e);
    }
}

/* a read of workload d's at off (nbytes) goes out: its blocks are in flight */
static void verify_read(struct ivy_loop *L, const struct ivy_data *d, int64_t off,
                        int64_t nbytes)
{
    struct ivy_vlun *v = d->vlun;
    const int64_t b0 = (off - v->first_bytes) / V_MAP_BLOCK, nb = nbytes / V_MAP_BLOCK;
    for (int64_t b = b0 < 0 ? 0 : b0; b < b0 + nb && b < v->n_blocks; b++) {
        struct v_ent *e = vt_find(L, v->lun, b, 1);
        if (e) {
            if (e->writes > 0) /* the device may read it before or after the write lands, */
                e->flags |= V_CONFLICT; /* whichever completes first */
            e->reads++;
        }
    }
}

/* whether generation g is one a read may find: in the lenient range from lo to hi (lo 0:
 * from 1), else hi or, unsettled, the one before */
static inline int v_accepts(uint8_t g, uint8_t lo, uint8_t hi, int lenient, int unsettled)
{
    if (g < 1 || g > V_GEN_MAX)
        return 0;
    if (lenient) {
        const uint8_t from = lo ? lo : 1;
        return (g + V_GEN_MAX - from) % V_GEN_MAX <= (hi + V_GEN_MAX - from) % V_GEN_MAX;
    }
    return g == hi || (unsettled && g == v_prev(hi));
}

/* block blk read from off (its map byte m; lenient: a write was in flight, lo the oldest
 * generation it may hold): its verdict (0 clean), the first sector out of line in *bad */
/* whether a valid stamp in its place is a write of an attempt that crashed that its master
 * never heard of: above its writer's confirmed serial there (ivy_vlun.crash_attempts,
 * confirmed), and ahead of the map's generation hi by at most V_AHEAD_MAX generations (the few
 * writes of a block after its last record; a stamp behind the map's, as a lost write of a later
 * attempt leaves, is not one) */
#define V_AHEAD_MAX 63
static inline int v_unconfirmed(const struct ivy_vlun *v, const struct v_stamp *st, uint8_t hi)
{
    const int64_t ahead = ((int64_t)st->gen - (int64_t)hi + V_GEN_MAX) % V_GEN_MAX;
    if (ahead < 1 || ahead > V_AHEAD_MAX || (int64_t)st->writer >= v->n_writers)
        return 0;
    for (int64_t i = 0; i < v->n_crashes; i++)
        if (v->crash_attempts[i] == (int64_t)st->attempt)
            return (int64_t)st->serial > v->confirmed[i * v->n_writers + st->writer];
    return 0;
}

/* block blk read from off (its map byte m; lenient: a write was in flight, lo the oldest
 * generation it may hold): its verdict (0 clean), the first sector out of line in *bad; in
 * *adopt the map byte to take where it holds a write the crashed attempt's master never heard
 * of (0: none; UNSETTLED where that write is there in part, or beside another); each
 * sector's CRC as computed in crc */
static int64_t verify_block(const struct ivy_vlun *v, const uint8_t *blk, int64_t off,
                            uint8_t m, int lenient, uint8_t lo, int *bad, uint8_t *adopt,
                            uint32_t *crc)
{
    uint64_t adopt_serial = 0;
    int adopt_mixed = 0, current = 0;
    *adopt = 0;
    crc_sectors(blk, V_SPB, crc); /* the caller's: a finding tells whether its sector's held */
    const uint8_t hi = m & V_GEN_MASK;
    const int unsettled = (m & V_UNSETTLED) != 0, may_lack = lenient && lo == 0;
    int first[V_MISSING + 1];
    for (int c = 0; c <= V_MISSING; c++)
        first[c] = -1;
    uint8_t g0 = 0;
    int mixed = 0, wrong_gen = 0;
    for (int s = 0; s < V_SPB; s++) {
        struct v_stamp st;
        memcpy(&st, blk + s * SECTOR_BYTES, V_STAMP);
        int c = 0;
        if (st.run_key != (uint32_t)v->run_key) {
            if (!may_lack)
                c = V_MISSING;
        } else if (st.crc != crc[s]) {
            c = V_CORRUPT;
        } else if (st.lun != (uint16_t)v->lun
                   || st.offset_bytes != (uint64_t)(off + s * SECTOR_BYTES)) {
            c = V_MISPLACED;
        } else {
            if (s > 0 && g0 && st.gen != g0)
                mixed = 1;
            if (!g0)
                g0 = st.gen;
            if (v_accepts(st.gen, lo, hi, lenient, unsettled)) {
                current = 1;
            } else if (lenient && v_unconfirmed(v, &st, lo)) {
                /* what the block held before the write in flight: a crashed attempt's write
                 * its master never heard of, ahead of the map's generation then (lo); not
                 * taken, as the write in flight settles the block */
                current = 1;
            } else if (!lenient && v_unconfirmed(v, &st, hi)) {
                if (*adopt && (st.gen != *adopt))
                    adopt_mixed = 1;
                if (!*adopt || st.serial > adopt_serial) {
                    *adopt = st.gen;
                    adopt_serial = st.serial;
                }
            } else {
                wrong_gen = 1;
                if (first[V_STALE] < 0)
                    first[V_STALE] = s;
            }
        }
        if (c && first[c] < 0)
            first[c] = s;
    }
    static const int order[] = {V_CORRUPT, V_MISPLACED, V_MISSING};
    for (int i = 0; i < 3; i++)
        if (first[order[i]] >= 0) {
            *bad = first[order[i]];
            return order[i];
        }
    if (wrong_gen) {
        *adopt = 0;
        *bad = first[V_STALE];
        return mixed ? V_TORN : V_STALE;
    }
    if (*adopt && (adopt_mixed || current))
        *adopt |= V_UNSETTLED;
    return 0;
}

/* a read of workload d's (its stats' owner) at off (nbytes, result res, its data in buf)
 * completed at t: each block the map holds checked, counted for owner, and each damaged one
 * found (the first vfind_cap kept, with their bytes); its blocks are out of flight. The
 * worst verdict (by protocol.verify.PRECEDENCE; 0 clean or nothing checked) */
static int64_t verify_read_done(struct ivy_loop *L, const struct ivy_data *d, int64_t owner,
                                int64_t off, int64_t nbytes, int64_t res, const uint8_t *buf,
                                int64_t t)
{
    static const int rank[V_MISSING + 1] = {
        [V_CORRUPT] = 5, [V_MISPLACED] = 4, [V_MISSING] = 3, [V_TORN] = 2, [V_STALE] = 1};
    struct ivy_vlun *v = d->vlun;
    const int64_t b0 = (off - v->first_bytes) / V_MAP_BLOCK, nb = nbytes / V_MAP_BLOCK;
    int64_t *count = owner >= 0 && owner < L->n_owners ? L->vcount + 8 * owner : NULL;
    int64_t worst = 0;
    for (int64_t j = 0; j < nb; j++) {
        const int64_t b = b0 + j;
        if (b < 0 || b >= v->n_blocks)
            continue;
        struct v_ent *e = vt_find(L, v->lun, b, 0);
        int lenient = 0;
        uint8_t lo = 0;
        if (e) {
            lenient = e->writes > 0 || (e->flags & V_CONFLICT);
            lo = e->lo;
            if (--e->reads <= 0 && e->writes == 0)
                vt_drop(L, e);
        }
        const uint8_t m = v->map[b];
        if (res != nbytes || (m & V_GEN_MASK) == 0)
            continue; /* a failed read is counted as an error; an unwritten block expects nothing */
        int bad = 0;
        uint8_t adopt = 0;
        const uint8_t *blk = buf + j * V_MAP_BLOCK;
        const int64_t at = off + j * V_MAP_BLOCK;
        uint32_t crc[V_SPB];
        const int64_t verdict = verify_block(v, blk, at, m, lenient, lo, &bad, &adopt, crc);
        if (adopt && v->map[b] == m) { /* no write of it since: the map takes what is there */
            v->map[b] = adopt;
            if (L->vn[1] < L->vjournal_cap)
                L->vjournal[L->vn[1]++] = v->lun << 48 | b << 8 | adopt;
        }
        if (count) {
            count[0] += 1;
            count[verdict] += verdict > 0;
        }
        if (verdict == 0)
            continue;
        if (rank[verdict] > rank[worst])
            worst = verdict;
        if (L->vn[2] < L->vfind_cap) {
            struct v_stamp st;
            memcpy(&st, blk + bad * SECTOR_BYTES, V_STAMP);
            L->vfind[L->vn[2]] = (struct ivy_vfind){
                .owner = owner, .lun = v->lun, .offset_bytes = at, .verdict = verdict,
                .expected = m, .sector = bad, .found_offset_bytes = st.offset_bytes,
                .found_serial = st.serial, .found_run_key = st.run_key, .found_lun = st.lun,
                .found_writer = st.writer, .found_gen = st.gen, .found_attempt = st.attempt,
                .crc_ok = st.crc == crc[bad], .done_ns = t};
            if (L->vfind_bytes)
                memcpy(L->vfind_bytes + L->vn[2] * V_MAP_BLOCK, blk, V_MAP_BLOCK);
        }
        L->vn[2]++;
    }
    return worst;
}

/* verify_write, verify_write_done, verify_read and verify_read_done of workload k, for the
 * general Python loop's I/Os and the tests */
void ivy_verify_write(struct ivy_loop *L, int64_t k, int64_t off, int64_t nbytes,
                      int64_t serial, uint8_t *buf)
{
    verify_write(L, &L->data[k], off, nbytes, serial, buf);
}

void ivy_verify_write_done(struct ivy_loop *L, int64_t k, int64_t off, int64_t nbytes,
                           int64_t res)
{
    verify_write_done(L, &L->data[k], off, nbytes, res);
}

void ivy_verify_read(struct ivy_loop *L, int64_t k, int64_t off, int64_t nbytes)
{
    verify_read(L, &L->data[k], off, nbytes);
}

int64_t ivy_verify_read_done(struct ivy_loop *L, int64_t k, int64_t owner, int64_t off,
                             int64_t nbytes, int64_t res, const uint8_t *buf, int64_t t)
{
    return verify_read_done(L, &L->data[k], owner, off, nbytes, res, buf, t);
}

/* put workload k (which has a free slot) in the heap at its next I/O's time; when its
 * precomputed I/Os ran out, generate the next ones (a loaded ring has a row at least) */
static void arm(struct ivy_loop *L, int64_t k)
{
    int64_t c = L->cur[k];
    if (c >= L->rlen[k]) {
        generate(L, k, L->rcap[k] < L->gen_ios ? L->rcap[k] : L->gen_ios);
        c = 0;
    }
    const struct ivy_io *ring = (const struct ivy_io *)(intptr_t)L->rings[k];
    L->heap_n = heap_push(L->heap_t, L->heap_k, L->heap_n, ring[c].sched_ns, k);
    L->armed[k] = 1;
}

/* WorkloadStats.record_one for record row (a success), into its owner's block in root */
static void bin_one(const struct ivy_row *row, int64_t *root, const int64_t *stat_off,
                    const int64_t *fixcat, int64_t n_owners)
{
    int64_t owner = row->owner;
    if (owner < 0 || owner >= n_owners || stat_off[owner] < 0)
        return; /* deleted: its last I/Os are not counted */
    int64_t off = stat_off[owner];
    int64_t cat = fixcat[owner] >= 0 ? fixcat[owner] : row->cat;
    int64_t done = row->done_ns;
    root[off + 3 * cat] += 1;
    root[off + 3 * cat + 1] += row->size_bytes;
    int64_t lat = off + N_COUNTERS + N_KINDS * 3 * cat;
    int64_t hist = off + N_COUNTERS + N_LAT + N_KINDS * N_BUCKETS * cat;
    for (int kind = 0; kind < 2; kind++) { /* service, then response: next triple and row */
        int64_t v = done - (kind == 0 ? row->submit_ns : row->sched_ns);
        if (v < 0)
            v = 0;
        root[lat] += v;
        if (v < root[lat + 1])
            root[lat + 1] = v;
        if (v > root[lat + 2])
            root[lat + 2] = v;
        if (v < ONE_PER_VALUE) {
            root[hist + v] += 1;
        } else if (v < OVERFLOW_LOWER_NS) {
            int64_t e = (64 - __builtin_clzll((uint64_t)v)) - PLAT_SHIFT;
            root[hist + ((e + 1) << PLAT_BITS) + ((v >> e) & PLAT_MASK)] += 1;
        } else {
            root[hist + OVERFLOW_INDEX] += 1;
        }
        lat += 3;
        hist += N_BUCKETS;
    }
}

/* the wait of a lone max-iops workload of queue depth 1-2 (lone), taken as soon as its I/Os
 * went out, with no code between io_submit and io_getevents: a device whose completion needs
 * a kernel worker (a loop device's) has it woken by the submission, often onto this CPU, where
 * it waits for the submitter to sleep (docs/engine.md, "The lone QD1-2 wait"). Blocking: in
 * io_getevents until until (the next due I/O or the boundary), for block_wait_ns at most: a
 * control poll (wake) waits for the next completion, as a far timeout costs less per I/O than
 * a near one (slave.engine.tuning: BLOCK_WAIT_NS). With busy_poll: looking in the mapped ring
 * until busy_spin_ns after the last completion (last_done), yielding the core between looks
 * from busy_hot_ns after it on, until wake, then blocking. How many completions it moved into
 * events (0: the time came, or interrupted) */
static int64_t lone_wait(const struct ivy_loop *L, int64_t now, int64_t until, int64_t wake,
                         int64_t last_done)
{
    const int64_t left = until - now < L->block_wait_ns ? until - now : L->block_wait_ns;
    if (L->busy_poll) {
        int64_t n = be_take(L, L->events, L->events_cap);
        if (n)
            return n;
        return look_then_block(L, L->events, L->events_cap, wake < until ? wake : until,
                               now + left, last_done + L->busy_spin_ns,
                               last_done + L->busy_hot_ns, 0);
    }
    if (left <= 0)
        return 0;
    return be_wait(L, L->events, L->events_cap, left);
}

static int64_t run_set(struct ivy_loop *L);

/* one run of the loop (run_set), for Python */
int64_t paced_run(struct ivy_loop *L)
{
    await_resume(L, now_ns(L));
    const int64_t r = run_set(L);
    L->returned_ns = now_ns(L);
    return r;
}

static int64_t run_set(struct ivy_loop *L)
{
    int64_t *ev = L->events;
    struct ivy_row *rows = L->rows, *pend = L->pend;
    const int64_t *iocb_addr = L->iocb_addr;
    int64_t *ptrs = L->ptrs, *out = L->out;
    int64_t *free_buf = L->free_buf, *free_off = L->free_off, *free_n = L->free_n;
    const int64_t *slot_pos = L->slot_pos;
    int64_t *root = L->root;
    const int64_t *stat_off = L->stat_off, *fixcat = L->fixcat;
    uint8_t *armed = L->armed;
    int64_t *heap_t = L->heap_t, *heap_k = L->heap_k, *cur = L->cur;
    const int64_t *rings = L->rings, *rlen = L->rlen;
    const int64_t ev_cap = L->events_cap, nk = L->n_workloads;
    const int64_t n_owners = L->n_owners, flush_at = L->flush_at;
    const int64_t compact_at = L->compact_at, discard = L->discard;
    const int64_t boundary = L->boundary_ns, sleep_min = L->sleep_min_ns;
    const int64_t control_fd = L->control_fd, poll_ns = L->poll_ns;
    const int64_t busy_poll = L->busy_poll;
    int64_t wake = L->wake_ns;
    const int64_t long_wait = L->long_wait_ns, wake_early = L->wake_early_ns;
    const int64_t n_slots = L->n_slots, n_max = L->n_max;
    const int64_t spin = L->spin_ns, gate = L->spin_gate_ns, lone = L->lone;
    const int64_t per_call = L->paced_per_call;
    struct ivy_data *data = L->data;
    const int64_t *vtab = L->vtab;
    int64_t last_done = now_ns(L); /* when the last completion was reaped (lone_wait) */

    for (int64_t k = 0; k < nk; k++) /* slots freed outside (a late reap, a start) */
        if (free_n[k] > 0 && !armed[k])
            arm(L, k);
    /* completions reaped past the last boundary, left in ev for this run to record */
    int64_t n = L->n, t_reaped = n ? L->t_ns : 0, now;
    L->n = 0;
    for (;;) {
        if (__builtin_expect(n < 0, 0)) { /* a wait failed: its errno, for Python to raise */
            L->n = -n;
            return R_WAIT;
        }
        if (n == 0) /* look in the ring */
            n = be_take(L, ev, ev_cap);
        if (n) {
            int64_t t = t_reaped ? t_reaped : now_ns(L);
            t_reaped = 0;
            if (t >= boundary) {
                L->n = n;
                L->t_ns = t;
                return R_LATE;
            }
            for (int64_t i = 0; i < n; i++) { /* every slot one of ours, or nothing is done */
                int64_t slot = ev[4 * i];
                if (slot < 0 || slot >= n_slots || slot_pos[slot] < 0) {
                    L->n = slot;
                    return R_STRAY;
                }
            }
            int64_t p = L->p;
            for (int64_t i = 0; i < n; i++) {
                int64_t slot = ev[4 * i];
                record_slot(&pend[p], &rows[slot], ev + 4 * i, t);
                p += 1;
                int64_t k = slot_pos[slot];
                if (data && data[k].vlun) {
                    const struct ivy_row *row = &rows[slot];
                    if ((row->opcode_fd & 0xffff) == IOCB_CMD_PWRITE)
                        verify_write_done(L, &data[k], row->offset, (int64_t)row->nbytes,
                                          ev[4 * i + 2]);
                    else
                        verify_read_done(L, &data[k], row->owner, row->offset,
                                         (int64_t)row->nbytes, ev[4 * i + 2],
                                         (const uint8_t *)(intptr_t)row->buf, t);
                }
                free_buf[free_off[k] + free_n[k]] = slot;
                free_n[k] += 1;
                if (armed[k] == 0)
                    arm(L, k);
            }
            L->p = p;
            L->in_flight -= n;
            L->done += n;
            last_done = t;
            n = 0;
            if (p >= flush_at || (vtab && L->vn[1] + L->vjournal_room > L->vjournal_cap))
                return R_FLUSH;
            now = t;
        } else {
            now = now_ns(L);
        }
        if (now >= wake) { /* the boundary, or the control's poll: unless nothing waits for it */
            if (control_fd < 0 || wake >= boundary || control_waiting((int)control_fd))
                return R_WAKE;
            wake = now + poll_ns < boundary ? now + poll_ns : boundary;
        }
        /* the I/Os due: every max-iops one (heap time 0), and the scheduled ones earliest
         * first, per_call of them at most (a paced loop that woke late has many due: one
         * call of them all plugs the block layer, which holds the first until the last is
         * in; completions are looked for before the next) */
        int64_t m = 0, sched_m = 0;
        while (L->heap_n > 0 && heap_t[0] <= now && (heap_t[0] == 0 || sched_m < per_call)) {
            int64_t k = heap_k[0];
            L->heap_n = heap_pop(heap_t, heap_k, L->heap_n);
            armed[k] = 0;
            const struct ivy_io *ring = (const struct ivy_io *)(intptr_t)rings[k];
            int64_t c = cur[k], fn = free_n[k];
            int64_t lim = fn < rlen[k] - c ? fn : rlen[k] - c;
            int64_t j = 0;
            while (j < lim && ring[c + j].sched_ns <= now) {
                if (ring[c + j].sched_ns) {
                    if (sched_m == per_call)
                        break;
                    sched_m++;
                }
                j++;
            }
            int64_t base = free_off[k] + fn - j;
            for (int64_t q = 0; q < j; q++) {
                int64_t slot = free_buf[base + q];
                struct ivy_row *row = &rows[slot];
                const struct ivy_io *io = &ring[c + q];
                if ((io->opcode_fd & 0xffff) == IOCB_CMD_PWRITE) {
                    put_write_data(&data[k], c + q, io->offset, (char *)(intptr_t)row->buf);
                    if (data[k].vlun) {
                        row->serial = data[k].ring_serial + c + q;
                        verify_write(L, &data[k], io->offset, (int64_t)row->nbytes,
                                     row->serial, (uint8_t *)(intptr_t)row->buf);
                    }
                } else if (data && data[k].vlun) {
                    row->serial = data[k].ring_serial + c + q;
                    verify_read(L, &data[k], io->offset, (int64_t)row->nbytes);
                }
                row->opcode_fd = io->opcode_fd;
                row->offset = io->offset;
                row->cat = io->cat;
                row->sched_ns = io->sched_ns;
                ptrs[m] = iocb_addr[slot];
                out[m] = slot;
                m++;
            }
            free_n[k] = fn - j;
            cur[k] = c + j;
            if (fn - j > 0)
                arm(L, k); /* its next I/O (due now too when the ring ran out: popped again) */
        }
        if (m) {
            int64_t t_sub = now_ns(L);
            long done = be_submit(L, rows, out, m);
            for (int64_t q = 0; q < m; q++) {
                struct ivy_row *row = &rows[out[q]];
                row->submit_ns = t_sub;
                if (row->sched_ns == 0) /* a max-iops I/O: scheduled as it goes out */
                    row->sched_ns = t_sub;
            }
            L->in_flight += m;
            if (done != m) {
                L->sub_done = done;
                L->sub_n = m;
                return R_SUBMIT;
            }
            if (lone) { /* wait at once, before anything else (lone_wait) */
                int64_t due = L->heap_n > 0 ? heap_t[0] : INF_NS;
                n = lone_wait(L, now, boundary < due ? boundary : due, wake, last_done);
            }
            continue; /* look for completions at once */
        }
        int64_t due = L->heap_n > 0 ? heap_t[0] : INF_NS;
        int64_t until = wake < due ? wake : due;
        if (lone && L->in_flight > 0) { /* its records are binned by Python, at flush_at */
            n = lone_wait(L, now_ns(L), boundary < due ? boundary : due, wake, last_done);
            continue;
        }
        int64_t b = L->binned, p = L->p;
        if (b < p) { /* nothing to do but bin: bin until something is */
            while (b < p) {
                const struct ivy_row *rec = &pend[b];
                if (rec->res != rec->size_bytes) {
                    L->binned = b;
                    return R_ERROR; /* Python counts it (flush) */
                }
                if (!discard)
                    bin_one(rec, root, stat_off, fixcat, n_owners);
                b++;
                if (now_ns(L) >= until || be_ready(L))
                    break;
            }
            if (b == p) {
                L->p = 0;
                L->binned = 0;
            } else if (b >= compact_at) { /* move the few left to the front */
                int64_t left = p - b;
                for (int64_t i = 0; i < left; i++)
                    pend[i] = pend[b + i];
                L->p = left;
                L->binned = 0;
            } else {
                L->binned = b;
            }
            continue;
        }
        const int64_t left_ns = until - now;
        int64_t wait = 0; /* 0: too near to sleep, look again */
        if (n_max && !busy_poll && L->in_flight > 0) {
            /* max-iops I/O in flight: look a while before blocking, as the lone loops do (a
             * wait for a paced I/O's time ends WAKE_EARLY before it, and looks for the rest) */
            n = await_events(L, ev, ev_cap, until,
                             left_ns > long_wait ? until - wake_early : until, spin, gate,
                             sleep_min);
            continue;
        }
        if (busy_poll) { /* look again at once while I/O is in flight or the next is near */
            if (L->in_flight == 0 && left_ns >= long_wait)
                wait = left_ns - wake_early;
        } else if (left_ns >= sleep_min) {
            wait = left_ns > long_wait ? left_ns - wake_early : left_ns;
        }
        if (wait > 0) {
            n = be_wait(L, ev, ev_cap, wait);
        } else {
            be_idle(L, until); /* too near to sleep: let the device's worker run */
        }
    }
}

/* The native engines' own calls, for Python (slave.engine.native), on a struct ivy_loop that
 * holds only the engine's fields (the loop's set copies them): setting a backend up and down,
 * and the submit and reap of the general loop, through the backend functions above. Each
 * returns what it did, or -errno. */

#define IVY_AIO_RING_MAGIC 0xa10a10a1u
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_io_uring_register
#define SYS_io_uring_register 427
#endif

/* an AIO context of nr events, its mapped completion ring in ring_header and ring_events;
 * -EPROTO where the ring's layout is not the one ring_take reads (nothing kept) */
int64_t ivy_aio_setup(struct ivy_loop *L, int64_t nr)
{
    unsigned long ctx = 0;
    if (syscall(SYS_io_setup, (unsigned)nr, &ctx) < 0)
        return -errno;
    const uint32_t *hdr = (const uint32_t *)ctx; /* id, nr, head, tail, magic, compat, ... */
    if (hdr[4] != IVY_AIO_RING_MAGIC || hdr[6] != 0 || hdr[7] != 32) {
        syscall(SYS_io_destroy, ctx);
        return -EPROTO;
    }
    L->ctx = (int64_t)ctx;
    L->ring_header = (volatile uint32_t *)ctx;
    L->ring_events = (const int64_t *)(ctx + 32);
    return 0;
}

int64_t ivy_aio_destroy(int64_t ctx)
{
    return syscall(SYS_io_destroy, (unsigned long)ctx) < 0 ? -errno : 0;
}

/* io_uring's struct io_uring_params, and struct io_uring_rsrc_register / _update2 */
struct ivy_uring_params {
    uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd;
    uint32_t resv[3];
    uint32_t sq_off[8]; /* head, tail, ring_mask, ring_entries, flags, dropped, array, resv1 */
    uint64_t sq_user_addr;
    uint32_t cq_off[8]; /* head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1 */
    uint64_t cq_user_addr;
};
struct ivy_rsrc {
    uint32_t a, b;
    uint64_t c, d;
    uint32_t e, f;
};
#define IVY_FEATURES ((1u << 0) | (1u << 1) | (1u << 8)) /* SINGLE_MMAP, NODROP, EXT_ARG */
/* DEFER_TASKRUN | SINGLE_ISSUER | TASKRUN_FLAG (6.1); on an older kernel COOP_TASKRUN |
 * TASKRUN_FLAG (5.19); then none */
#define IVY_UR_SETUP_FLAGS ((1u << 13) | (1u << 12) | (1u << 9))
#define IVY_UR_SETUP_FLAGS_OLD ((1u << 8) | (1u << 9))
#define IVY_UR_OFF_SQES 0x10000000LL
enum { IVY_UR_FILES2 = 13, IVY_UR_FILES_UPDATE2 = 14, IVY_UR_BUFFERS2 = 15,
       IVY_UR_BUFFERS_UPDATE = 16 };

/* a ring of entries submission entries, mapped into L (uring_fd, sq_*, cq_*); n_files sparse
 * registered files and n_buffers sparse registered buffers; maps: the two mappings' addresses
 * and sizes (for ivy_uring_close). The newest set-up flags the kernel takes: DEFER_TASKRUN
 * (completions posted only when this task enters the kernel for them), else COOP_TASKRUN,
 * with TASKRUN_FLAG (cq_take enters when some wait). -errno with *stage: 1 the set-up, 2 the
 * features (-ENOTSUP), 3 the mapping, 4 the files, 5 the buffers; nothing kept */
int64_t ivy_uring_setup(struct ivy_loop *L, int64_t entries, int64_t n_files,
                        int64_t n_buffers, int64_t *maps, int64_t *stage)
{
    struct ivy_uring_params p;
    long fd = -1;
    int64_t err = 0;
    void *rings = MAP_FAILED, *sqes = MAP_FAILED;
    size_t rings_bytes = 0, sqes_bytes = 0;
    const uint32_t flags[3] = {IVY_UR_SETUP_FLAGS, IVY_UR_SETUP_FLAGS_OLD, 0};
    for (int i = 0; i < 3 && fd < 0; i++) {
        memset(&p, 0, sizeof p);
        p.flags = flags[i];
        fd = syscall(SYS_io_uring_setup, (unsigned)entries, &p);
        if (fd < 0 && errno != EINVAL)
            break;
    }
    *stage = 1;
    if (fd < 0)
        return -errno;
    *stage = 2;
    if ((p.features & IVY_FEATURES) != IVY_FEATURES) {
        err = -ENOTSUP;
        goto fail;
    }
    *stage = 3;
    rings_bytes = p.sq_off[6] + 4 * (size_t)p.sq_entries;
    if (p.cq_off[5] + 16 * (size_t)p.cq_entries > rings_bytes)
        rings_bytes = p.cq_off[5] + 16 * (size_t)p.cq_entries;
    sqes_bytes = 64 * (size_t)p.sq_entries;
    rings = mmap(NULL, rings_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, (int)fd, 0);
    if (rings == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    sqes = mmap(NULL, sqes_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, (int)fd,
                IVY_UR_OFF_SQES);
    if (sqes == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    const int64_t want[2][2] = {{IVY_UR_FILES2, n_files}, {IVY_UR_BUFFERS2, n_buffers}};
    for (int i = 0; i < 2; i++) {
        *stage = 4 + i;
        struct ivy_rsrc r = {(uint32_t)want[i][1], 1 /* SPARSE */, 0, 0, 0, 0};
        if (syscall(SYS_io_uring_register, (int)fd, (unsigned)want[i][0], &r, sizeof r) < 0) {
            err = -errno;
            goto fail;
        }
    }
    char *base = rings;
    uint32_t *array = (uint32_t *)(base + p.sq_off[6]);
    for (uint32_t i = 0; i < p.sq_entries; i++)
        array[i] = i; /* entry i is the ring's i, for good */
    L->backend = 1;
    L->uring_fd = fd;
    L->sq_tail = (volatile uint32_t *)(base + p.sq_off[1]);
    L->sq_head = (volatile uint32_t *)(base + p.sq_off[0]);
    L->sq_flags = (volatile uint32_t *)(base + p.sq_off[4]);
    L->sq_mask = *(uint32_t *)(base + p.sq_off[2]);
    L->sqes = sqes;
    L->cq_head = (volatile uint32_t *)(base + p.cq_off[0]);
    L->cq_tail = (volatile uint32_t *)(base + p.cq_off[1]);
    L->cq_mask = *(uint32_t *)(base + p.cq_off[2]);
    L->cqes = base + p.cq_off[5];
    maps[0] = (int64_t)(uintptr_t)rings;
    maps[1] = (int64_t)rings_bytes;
    maps[2] = (int64_t)(uintptr_t)sqes;
    maps[3] = (int64_t)sqes_bytes;
    return fd;
fail:
    if (sqes != MAP_FAILED)
        munmap(sqes, sqes_bytes);
    if (rings != MAP_FAILED)
        munmap(rings, rings_bytes);
    close((int)fd);
    return err;
}

/* the entries of the submission ring the kernel has not taken dropped (a submission given up:
 * none of them may go out with a later one); the kernel takes entries only in io_uring_enter */
void ivy_uring_unqueue(const struct ivy_loop *L)
{
    __atomic_store_n(L->sq_tail, __atomic_load_n(L->sq_head, __ATOMIC_ACQUIRE),
                     __ATOMIC_RELEASE);
}

/* the ring's mappings (maps: ivy_uring_setup's) undone and its descriptor closed, which drops
 * its registrations */
void ivy_uring_close(struct ivy_loop *L, const int64_t *maps)
{
    munmap((void *)(uintptr_t)maps[2], (size_t)maps[3]);
    munmap((void *)(uintptr_t)maps[0], (size_t)maps[1]);
    close((int)L->uring_fd);
    L->uring_fd = -1;
}

/* n files (int32 descriptors; -1: none) or buffers (iovecs) registered from index offset */
int64_t ivy_uring_register(const struct ivy_loop *L, int64_t files, int64_t offset,
                           const void *data, int64_t n)
{
    struct ivy_rsrc r = {(uint32_t)offset, 0, (uint64_t)(uintptr_t)data, 0, (uint32_t)n, 0};
    long rc = syscall(SYS_io_uring_register, (int)L->uring_fd,
                      files ? IVY_UR_FILES_UPDATE2 : IVY_UR_BUFFERS_UPDATE, &r, sizeof r);
    return rc < 0 ? -errno : rc;
}

/* the n slots submitted (their rows' iocbs, or entries made from them); how many the kernel
 * took */
int64_t ivy_submit(struct ivy_loop *L, const int64_t *slots, int64_t n)
{
    if (!L->backend)
        for (int64_t q = 0; q < n; q++)
            L->ptrs[q] = L->iocb_addr[slots[q]];
    long rc = be_submit(L, L->rows, slots, n);
    return rc < 0 ? -errno : rc;
}

/* a submission of n that the kernel took done of: the rest offered again (libaio's iocb
 * addresses from ptrs[done], io_uring's entries still in its ring); how many it took */
int64_t ivy_submit_rest(struct ivy_loop *L, int64_t done, int64_t n)
{
    long rc = L->backend
        ? syscall(SYS_io_uring_enter, (int)L->uring_fd, (unsigned)(n - done), 0, 0, NULL, 0)
        : syscall(SYS_io_submit, (unsigned long)L->ctx, (long)(n - done),
                  (void *)(L->ptrs + done));
    return rc < 0 ? -errno : rc;
}

/* the completions there now moved into events (no system call, as be_take), else, with
 * timeout_ns, a wait of that long at most for one; how many (0: none came, or interrupted;
 * -errno: the wait failed) */
int64_t ivy_reap(struct ivy_loop *L, int64_t timeout_ns)
{
    int64_t n = be_take(L, L->events, L->events_cap);
    if (n || timeout_ns <= 0)
        return n;
    return be_wait(L, L->events, L->events_cap, timeout_ns);
}

/* ------------------------------------------------------------------- the rollup's grouping
 * protocol.grouping's group_batch and view_percentiles for the slave's rollup, bit for bit
 * (slave.engine.compiled_group calls them; its numpy path is the reference and the fallback).
 * A batch's histogram coordinates are sorted by (row, bucket), row = workload * G_ROWS +
 * category * N_KINDS + kind: ivy_group_bounds finds where each row starts, once per batch.
 * ivy_group_pass then reads each workload's coordinates once for several rollup entries
 * (struct ivy_grp: the one whose groups it goes through in turn, those with few groups held
 * in cells all along, each workload's own percentiles): at 10,000 workloads a pass over the
 * batch's 127 MB cost 25-30 ms on the development VM, its memory more than its arithmetic.
 * A group's histograms are added up in dense rows of N_BUCKETS cells, and its coordinates
 * and its percentile table are read from them. The integers are added as numpy adds int64
 * (wrapping); the percentiles take numpy's exact ranks and its float operations in its order
 * (the object is compiled with -ffp-contract=off: no fused multiply-add). An input that numpy
 * would read otherwise than a valid batch is refused (G_REFUSED: rows out of order or of
 * range, a row's buckets not rising or out of range, a count <= 0, a latency maximum below
 * -1, a group whose rows do not add up to its operations), and the caller lets numpy do it;
 * a refusal leaves the cells dirty. */

#define G_ROWS (N_CATEGORIES * N_KINDS)
#define G_TABLE (N_VIEWS * N_KINDS * N_PCT) /* a group's percentile table */
#define G_REFUSED (-1)
#define G_OPS 0 /* a counter's: ops, bytes, errors */
#define G_SUM 0 /* a latency's: sum, min, max */
#define G_MIN 1
#define G_MAX 2

/* a group's (or a workload's) rows: each one's lowest and highest bucket (N_BUCKETS and -1:
 * none) and its total (struct ivy_grp's acc holds one per group) */
struct g_acc {
    int64_t lo[G_ROWS], hi[G_ROWS];
    uint64_t total[G_ROWS];
};

/* where a table's rows are: dense (cells: G_ROWS x N_BUCKETS), else a workload's own
 * coordinates (row r at at[r] .. at[r + 1] - 1); view: a row of N_BUCKETS zeros to add a
 * view's rows up in, left zero */
struct g_src {
    const int64_t *cells;
    const uint16_t *buckets;
    const int64_t *counts;
    const int64_t *at;
    const struct g_acc *acc;
    int64_t *view;
};

/* a view's percentiles as ranks among its I/Os (protocol.grouping._targets): exact, and the
 * count the bucket holding each must reach */
struct g_rank {
    double rank[N_PCT];
    int64_t target[N_PCT];
};

/* where each of n_rows histogram rows starts among the batch's nnz coordinates (bounds:
 * n_rows + 1, the last nnz); G_REFUSED when the rows do not rise or pass n_rows */
int64_t ivy_group_bounds(const uint32_t *rows, int64_t nnz, int64_t n_rows, int64_t *bounds)
{
    int64_t next = 0; /* the first row whose start is not set: the current row is next - 1 */
    for (int64_t i = 0; i < nnz; i++) {
        uint32_t same = 0, cur = (uint32_t)(next - 1);
        if (next && !(i & 15) && i + 16 <= nnz) { /* 16 of the current row: one look */
            __builtin_prefetch(rows + i + 512);
            for (int j = 0; j < 16; j++)
                same |= rows[i + j] ^ cur;
            if (!same) {
                i += 15;
                continue;
            }
        }
        int64_t r = rows[i];
        if (r >= next) { /* rows next..r start here (those before r are empty) */
            if (r >= n_rows)
                return G_REFUSED;
            while (next <= r)
                bounds[next++] = i;
        } else if (r != next - 1) {
            return G_REFUSED;
        }
    }
    while (next <= n_rows)
        bounds[next++] = nnz;
    return 0;
}

static void acc_reset(struct g_acc *a)
{
    for (int r = 0; r < G_ROWS; r++) {
        a->lo[r] = N_BUCKETS;
        a->hi[r] = -1;
        a->total[r] = 0;
    }
}

/* one workload's counters c and latencies l added into a group's gc and gl, which start as
 * an empty group's: as numpy's reductions, for a workload whose maxima are not below -1 */
static void fold_sides(const int64_t *c, const int64_t *l, int64_t *gc, int64_t *gl)
{
    for (int i = 0; i < N_COUNTERS; i++)
        gc[i] = (int64_t)((uint64_t)gc[i] + (uint64_t)c[i]);
    for (int i = 0; i < N_LAT; i += 3) {
        gl[i + G_SUM] = (int64_t)((uint64_t)gl[i + G_SUM] + (uint64_t)l[i + G_SUM]);
        if (l[i + G_MIN] < gl[i + G_MIN])
            gl[i + G_MIN] = l[i + G_MIN];
        if (l[i + G_MAX] > gl[i + G_MAX])
            gl[i + G_MAX] = l[i + G_MAX];
    }
}

/* the master's _emit (protocol.grouping._interpolate): the value of the rank offset off past
 * the count before bucket b, which holds count; numpy's operations in its order */
static inline double g_interpolate(const double *edges, int64_t b, uint64_t count, double off,
                                   double mn, double mx)
{
    double frac = off / (double)(int64_t)count;
    frac = frac < 0.0 ? 0.0 : frac; /* np.clip: a maximum, then a minimum */
    frac = frac > 1.0 ? 1.0 : frac;
    double low = edges[b] > mn ? edges[b] : mn;
    double top = edges[N_BUCKETS + b];
    double high = b == OVERFLOW_INDEX ? mx : (top < mx ? top : mx);
    double v = low + frac * (high - low);
    v = v < mn ? mn : v;
    return v > mx ? mx : v;
}

/* the percentiles (out) of a dense row's buckets lo..hi: the first bucket whose cumulative
 * count reaches each target, interpolated inside it */
static void walk_dense(const int64_t *row, int64_t lo, int64_t hi, const struct g_rank *t,
                       double mn, double mx, const double *edges, double *out)
{
    uint64_t cum = 0;
    int j = 0;
    for (int64_t b = lo; b <= hi; b++) {
        uint64_t x = (uint64_t)row[b];
        cum += x;
        if (cum < (uint64_t)t->target[j])
            continue;
        for (; j < N_PCT && cum >= (uint64_t)t->target[j]; j++)
            out[j] = g_interpolate(edges, b, x, t->rank[j] - (double)(int64_t)(cum - x), mn, mx);
        if (j == N_PCT)
            return;
    }
}

/* walk_dense over a workload's row of coordinates s .. e - 1 */
static void walk_sparse(const uint16_t *buckets, const int64_t *counts, int64_t s, int64_t e,
                        const struct g_rank *t, double mn, double mx, const double *edges,
                        double *out)
{
    uint64_t cum = 0;
    int j = 0;
    for (int64_t i = s; i < e; i++) {
        uint64_t x = (uint64_t)counts[i];
        cum += x;
        if (cum < (uint64_t)t->target[j])
            continue;
        for (; j < N_PCT && cum >= (uint64_t)t->target[j]; j++)
            out[j] = g_interpolate(edges, buckets[i], x,
                                   t->rank[j] - (double)(int64_t)(cum - x), mn, mx);
        if (j == N_PCT)
            return;
    }
}

/* the percentiles (out) of the histogram adding up kind k's rows of the categories in mask:
 * one row is walked where it is, several are added up in src's view row first */
static void walk_view(const struct g_src *src, int64_t mask, int k, const struct g_rank *t,
                      double mn, double mx, const double *edges, double *out)
{
    const struct g_acc *a = src->acc;
    if (!(mask & (mask - 1))) {
        int r = __builtin_ctzll((unsigned long long)mask) * N_KINDS + k;
        if (src->cells)
            walk_dense(src->cells + r * N_BUCKETS, a->lo[r], a->hi[r], t, mn, mx, edges, out);
        else
            walk_sparse(src->buckets, src->counts, src->at[r], src->at[r + 1], t, mn, mx,
                        edges, out);
        return;
    }
    int64_t lo = N_BUCKETS, hi = -1, *view = src->view;
    for (int c = 0; c < N_CATEGORIES; c++) {
        int r = c * N_KINDS + k;
        if (!((mask >> c) & 1))
            continue;
        lo = a->lo[r] < lo ? a->lo[r] : lo;
        hi = a->hi[r] > hi ? a->hi[r] : hi;
        if (src->cells) {
            const int64_t *row = src->cells + r * N_BUCKETS;
            for (int64_t b = a->lo[r], top = a->hi[r]; b <= top; b++)
                view[b] = (int64_t)((uint64_t)view[b] + (uint64_t)row[b]);
        } else {
            const uint16_t *bk = src->buckets;
            const int64_t *ct = src->counts;
            for (int64_t i = src->at[r], e = src->at[r + 1]; i < e; i++)
                view[bk[i]] = (int64_t)((uint64_t)view[bk[i]] + (uint64_t)ct[i]);
        }
    }
    walk_dense(view, lo, hi, t, mn, mx, edges, out);
    if (hi >= lo)
        memset(view + lo, 0, sizeof(int64_t) * (size_t)(hi - lo + 1));
}

/* a view's ranks among its n I/Os; views: each view's categories (a bit each), then the
 * percentiles' numerators over RANK_SCALE */
static void view_ranks(int64_t n, const int64_t *views, struct g_rank *t)
{
    int64_t q = n / RANK_SCALE, r = n - q * RANK_SCALE;
    for (int j = 0; j < N_PCT; j++) {
        int64_t whole = q * views[N_VIEWS + j], part = r * views[N_VIEWS + j];
        t->rank[j] = (double)whole + (double)part / (double)RANK_SCALE;
        t->target[j] = whole + (part + RANK_SCALE - 1) / RANK_SCALE;
    }
}

/* one group's (or workload's) percentile table (out: NaN left where a view has no I/O) from
 * its counters gc, latencies gl and rows src: a view whose categories with I/O are an
 * earlier view's takes that view's values. G_REFUSED for a group whose rows do not add up to
 * its operations */
static int64_t group_table(const int64_t *gc, const int64_t *gl, const struct g_src *src,
                           const int64_t *views, const double *edges, double *out)
{
    int64_t has = 0, seen[N_VIEWS];
    for (int c = 0; c < N_CATEGORIES; c++) {
        int64_t ops = gc[c * 3 + G_OPS];
        const uint64_t *total = src->acc->total + c * N_KINDS;
        if (ops < 0 || (ops > 0 && (total[0] != (uint64_t)ops || total[1] != (uint64_t)ops)))
            return G_REFUSED;
        has |= (int64_t)(ops > 0) << c;
    }
    for (int v = 0; v < N_VIEWS; v++) {
        int64_t mask = views[v] & has;
        int u = 0;
        seen[v] = mask;
        while (seen[u] != mask)
            u++;
        if (!mask)
            continue;
        if (u < v) {
            memcpy(out + v * N_KINDS * N_PCT, out + u * N_KINDS * N_PCT,
                   sizeof(double) * N_KINDS * N_PCT);
            continue;
        }
        uint64_t n = 0;
        for (int c = 0; c < N_CATEGORIES; c++)
            n += (views[v] >> c) & 1 ? (uint64_t)gc[c * 3 + G_OPS] : 0;
        if (n > (uint64_t)INT64_MAX)
            return G_REFUSED;
        struct g_rank t;
        view_ranks((int64_t)n, views, &t);
        for (int k = 0; k < N_KINDS; k++) {
            int64_t mn = INT64_MAX, mx = -1;
            for (int c = 0; c < N_CATEGORIES; c++) {
                if (!((views[v] >> c) & 1))
                    continue;
                const int64_t *l = gl + (c * N_KINDS + k) * 3;
                mn = l[G_MIN] < mn ? l[G_MIN] : mn;
                mx = l[G_MAX] > mx ? l[G_MAX] : mx;
            }
            walk_view(src, mask, k, &t, (double)mn, (double)mx, edges,
                      out + (v * N_KINDS + k) * N_PCT);
        }
    }
    return 0;
}

/* group g's cells (with its acc) as coordinates from rows, buckets, counts (in (row, bucket)
 * order), the cells left zero; how many */
static int64_t group_emit(int64_t *cells, const struct g_acc *a, int64_t g, uint32_t *rows,
                          uint16_t *buckets, int64_t *counts)
{
    int64_t n = 0;
    for (int r = 0; r < G_ROWS; r++) {
        int64_t *row = cells + r * N_BUCKETS;
        for (int64_t b = a->lo[r], top = a->hi[r]; b <= top; b++) {
            if (!row[b])
                continue;
            rows[n] = (uint32_t)(g * G_ROWS + r);
            buckets[n] = (uint16_t)b;
            counts[n++] = row[b];
            row[b] = 0;
        }
    }
    return n;
}

/* group g of e, whose cells and acc these are, finished: its table and coordinates, its
 * cells left zero */
static int64_t group_finish(struct ivy_grp *e, int64_t g, int64_t *cells,
                            const struct g_acc *a, int64_t *view, const int64_t *views,
                            const double *edges)
{
    struct g_src src = {cells, NULL, NULL, NULL, a, view};
    if (e->pct && group_table(e->counters + g * N_COUNTERS, e->lat + g * N_LAT, &src, views,
                              edges, e->pct + g * G_TABLE) < 0)
        return G_REFUSED;
    if (e->rows) {
        e->n_coords += group_emit(cells, a, g, e->rows + e->n_coords,
                                  e->buckets + e->n_coords, e->counts + e->n_coords);
        return 0;
    }
    for (int r = 0; r < G_ROWS; r++)
        if (a->hi[r] >= a->lo[r])
            memset(cells + r * N_BUCKETS + a->lo[r], 0,
                   sizeof(int64_t) * (size_t)(a->hi[r] - a->lo[r] + 1));
    return 0;
}

/* the driver's group g (its sides gc and gl, cells and acc a) added into its group of each
 * held entry that takes the driver's groups whole */
static void take_driver_group(struct ivy_grp *grp, int64_t n_grp, int64_t g, const int64_t *gc,
                              const int64_t *gl, const int64_t *cells, const struct g_acc *a)
{
    for (int64_t i = 0; i < n_grp; i++) {
        struct ivy_grp *e = grp + i;
        if (e->role != GRP_HELD || !e->of_driver)
            continue;
        int64_t h = e->of_driver[g];
        struct g_acc *to = (struct g_acc *)e->acc + h;
        fold_sides(gc, gl, e->counters + h * N_COUNTERS, e->lat + h * N_LAT);
        for (int r = 0; r < G_ROWS; r++) {
            const int64_t *row = cells + r * N_BUCKETS;
            int64_t *cell = e->cells + (h * G_ROWS + r) * N_BUCKETS, lo = a->lo[r], hi = a->hi[r];
            for (int64_t b = lo; b <= hi; b++)
                cell[b] = (int64_t)((uint64_t)cell[b] + (uint64_t)row[b]);
            to->lo[r] = lo < to->lo[r] ? lo : to->lo[r];
            to->hi[r] = hi > to->hi[r] ? hi : to->hi[r];
            to->total[r] += a->total[r];
        }
    }
}

/* a pass's destinations for one workload's rows: the cells and acc of its group in each
 * entry that adds rows up (the driver's group, its group in each held entry) */
struct g_dst {
    int n;
    int64_t *cells[1 + GRP_HELD_MAX];
    struct g_acc *acc[1 + GRP_HELD_MAX];
};

/* the next workload's coordinates (its bucket and count bytes) asked from memory while this
 * one's are read: as many lines of them as this one's row spans */
struct g_ahead {
    const char *c, *c_end, *b, *b_end;
};

static inline void ask_ahead(struct g_ahead *ahead, int64_t n)
{
    for (const char *end = ahead->c + 8 * n; ahead->c < end && ahead->c < ahead->c_end;
         ahead->c += 64)
        __builtin_prefetch(ahead->c);
    for (const char *end = ahead->b + 2 * n; ahead->b < end && ahead->b < ahead->b_end;
         ahead->b += 64)
        __builtin_prefetch(ahead->b);
}

/* workload w's rows (at: where each starts) added into dst, checked (its own extents and
 * totals into own); the next workload's asked for on the way */
static int64_t add_rows(const uint16_t *buckets, const int64_t *counts, const int64_t *at,
                        struct g_dst *dst, struct g_acc *own, struct g_ahead *ahead)
{
    acc_reset(own);
    for (int r = 0; r < G_ROWS; r++) {
        int64_t s = at[r], e = at[r + 1], prev = -1;
        uint64_t sum = 0, bad = 0; /* its top bit: a bucket not above the one before, a count
                                    * <= 0 */
        if (s == e)
            continue;
        ask_ahead(ahead, e - s);
        if (dst->n) { /* checked while added to the first: a refusal leaves cells dirty */
            int64_t *cell = dst->cells[0] + r * N_BUCKETS;
            for (int64_t i = s; i < e; i++) {
                int64_t b = buckets[i], c = counts[i];
                if (__builtin_expect(b >= N_BUCKETS, 0))
                    return G_REFUSED;
                bad |= ~(uint64_t)(prev - b) | (uint64_t)c | ((uint64_t)c - 1);
                prev = b;
                sum += (uint64_t)c;
                cell[b] = (int64_t)((uint64_t)cell[b] + (uint64_t)c);
            }
        } else {
            for (int64_t i = s; i < e; i++) {
                int64_t b = buckets[i], c = counts[i];
                bad |= ~(uint64_t)(prev - b) | (uint64_t)c | ((uint64_t)c - 1);
                prev = b;
                sum += (uint64_t)c;
            }
        }
        if ((int64_t)bad < 0 || prev >= N_BUCKETS)
            return G_REFUSED;
        own->lo[r] = buckets[s];
        own->hi[r] = prev;
        own->total[r] = sum;
        for (int d = 1; d < dst->n; d++) {
            int64_t *cell = dst->cells[d] + r * N_BUCKETS;
            for (int64_t i = s; i < e; i++)
                cell[buckets[i]] = (int64_t)((uint64_t)cell[buckets[i]] + (uint64_t)counts[i]);
        }
        for (int d = 0; d < dst->n; d++) {
            struct g_acc *a = dst->acc[d];
            a->lo[r] = own->lo[r] < a->lo[r] ? own->lo[r] : a->lo[r];
            a->hi[r] = prev > a->hi[r] ? prev : a->hi[r];
            a->total[r] += sum;
        }
    }
    return 0;
}

/* a batch as a pass reads it: its arrays (bounds: ivy_group_bounds'), views (each view's
 * categories, a bit each, then the percentiles' numerators over RANK_SCALE), edges (each
 * bucket's lowest value, then its highest, as doubles) and a view row of N_BUCKETS zeros */
struct g_batch {
    const int64_t *counters, *lat;
    const uint16_t *buckets;
    const int64_t *counts, *bounds, *views;
    const double *edges;
    int64_t *view;
};

/* workload w of the pass (in the driver's group g, if any: its cells and acc), the next
 * one's asked from memory: its sides and rows added into each of its groups, its own
 * percentiles */
static int64_t pass_workload(const struct g_batch *in, struct ivy_grp *grp, int64_t n_grp,
                             struct ivy_grp *drv, int64_t g, int64_t *cells, struct g_acc *acc,
                             int64_t w, int64_t next)
{
    const int64_t *c = in->counters + w * N_COUNTERS, *l = in->lat + w * N_LAT;
    const int64_t *at = in->bounds + w * G_ROWS, *at_next = in->bounds + next * G_ROWS;
    struct g_ahead ahead = {(const char *)(in->counts + at_next[0]),
                            (const char *)(in->counts + at_next[G_ROWS]),
                            (const char *)(in->buckets + at_next[0]),
                            (const char *)(in->buckets + at_next[G_ROWS])};
    struct g_acc own;
    struct g_dst dst = {0, {NULL}, {NULL}};
    for (int i = 0; i < N_LAT; i += 8)
        __builtin_prefetch(in->lat + next * N_LAT + i);
    __builtin_prefetch(in->counters + next * N_COUNTERS);
    for (int i = G_MAX; i < N_LAT; i += 3)
        if (l[i] < -1)
            return G_REFUSED;
    if (drv) {
        fold_sides(c, l, drv->counters + g * N_COUNTERS, drv->lat + g * N_LAT);
        dst.cells[dst.n] = cells;
        dst.acc[dst.n++] = acc;
    }
    for (int64_t i = 0; i < n_grp; i++) {
        struct ivy_grp *e = grp + i;
        if (e->role != GRP_HELD || (drv && e->of_driver))
            continue;
        int64_t h = e->of[w];
        fold_sides(c, l, e->counters + h * N_COUNTERS, e->lat + h * N_LAT);
        dst.cells[dst.n] = e->cells + h * G_ROWS * N_BUCKETS;
        dst.acc[dst.n++] = (struct g_acc *)e->acc + h;
    }
    if (add_rows(in->buckets, in->counts, at, &dst, &own, &ahead) < 0)
        return G_REFUSED;
    struct g_src src = {NULL, in->buckets, in->counts, at, &own, in->view};
    for (int64_t i = 0; i < n_grp; i++)
        if (grp[i].role == GRP_SINGLE && grp[i].pct
                && group_table(c, l, &src, in->views, in->edges, grp[i].pct + w * G_TABLE) < 0)
            return G_REFUSED;
    return 0;
}

/* a batch's n workloads (counters, lat, buckets, counts; bounds: ivy_group_bounds') read once
 * for the n_grp entries grp (struct ivy_grp): at most one GRP_DRIVER, whose groups the pass
 * goes through in turn (else the workloads in order), at most GRP_HELD_MAX GRP_HELD (those
 * with of_driver added up from the driver's groups, the others from the workloads); views,
 * edges: struct g_batch's; cells: (G_ROWS + 1) x N_BUCKETS zeros, left zero. 0, or
 * G_REFUSED */
int64_t ivy_group_pass(const int64_t *counters, const int64_t *lat, const uint16_t *buckets,
                       const int64_t *counts, const int64_t *bounds, int64_t n,
                       struct ivy_grp *grp, int64_t n_grp, const int64_t *views,
                       const double *edges, int64_t *cells)
{
    struct g_batch in = {counters, lat, buckets, counts, bounds, views, edges,
                         cells + G_ROWS * N_BUCKETS};
    struct ivy_grp *drv = NULL;
    struct g_acc acc;
    int64_t n_held = 0;
    for (int64_t i = 0; i < n_grp; i++) {
        grp[i].n_coords = 0;
        n_held += grp[i].role == GRP_HELD;
        if (grp[i].role == GRP_DRIVER)
            drv = grp + i;
        for (int64_t g = 0; grp[i].role == GRP_HELD && g < grp[i].n_groups; g++)
            acc_reset((struct g_acc *)grp[i].acc + g);
    }
    if (n_held > GRP_HELD_MAX)
        return G_REFUSED;
    const int64_t *order = drv ? drv->members + drv->n_groups + 1 : NULL;
    for (int64_t g = 0; g < (drv ? drv->n_groups : 1); g++) {
        acc_reset(&acc);
        for (int64_t m = drv ? drv->members[g] : 0; m < (drv ? drv->members[g + 1] : n); m++) {
            int64_t w = order ? order[m] : m;
            int64_t next = m + 1 == n ? w : order ? order[m + 1] : m + 1;
            if (pass_workload(&in, grp, n_grp, drv, g, cells, &acc, w, next) < 0)
                return G_REFUSED;
        }
        if (!drv)
            continue;
        take_driver_group(grp, n_grp, g, drv->counters + g * N_COUNTERS, drv->lat + g * N_LAT,
                          cells, &acc);
        if (group_finish(drv, g, cells, &acc, in.view, views, edges) < 0)
            return G_REFUSED;
    }
    for (int64_t i = 0; i < n_grp; i++)
        for (int64_t g = 0; grp[i].role == GRP_HELD && g < grp[i].n_groups; g++)
            if (group_finish(grp + i, g, grp[i].cells + g * G_ROWS * N_BUCKETS,
                             (struct g_acc *)grp[i].acc + g, in.view, views, edges) < 0)
                return G_REFUSED;
    return 0;
}
