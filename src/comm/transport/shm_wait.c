/* shm_wait.c: how shared-memory ranks wait for each other: a brief spin, then a futex sleep
 * in slices of at most 100 ms, between which the deadline and the peers' liveness are
 * checked; a rank that finds a dead peer raises the segment's lost flag and wakes everyone. */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "comm/transport/shm_int.h"
#include "util/proc.h"
#include "util/strutil.h"

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_sleep(_Atomic uint32_t *w, uint32_t seen, double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static int reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void shm_post(shm *s, _Atomic uint32_t *w)
{
    atomic_fetch_add(w, 1);
    if (atomic_load(&s->ctl->sleepers))
        futex_wake_all(w);
}

/* Raise the lost flag (first finder wins) and wake every futex word of the segment. */
static void raise_lost(shm *s, int r)
{
    int32_t none = 0;
    atomic_compare_exchange_strong(&s->ctl->lost, &none, r + 1);
    for (int i = 0; i < s->n; i++) {
        futex_wake_all(&shm_slot_of(s, i)->arrive);
        for (int j = 0; j < s->n; j++) {
            futex_wake_all(&shm_chan_of(s, i, j)->posted);
            futex_wake_all(&shm_chan_of(s, i, j)->consumed);
        }
    }
}

static coh_status lost_error(shm *s, const char *what)
{
    char d[160];
    coh_fp fp;
    coh_fp_of(s->op, &fp);
    coh_fp_describe(&fp, d, sizeof d);
    int r = atomic_load(&s->ctl->lost) - 1;
    return coh_errf(COH_ERR_PEER_LOST, "%s on rank %d: rank %d died (%s)", d, s->rank, r, what);
}

static coh_status timeout_error(shm *s, int peer, const char *what)
{
    char d[160], missing[256] = "";
    coh_fp fp;
    coh_fp_of(s->op, &fp);
    coh_fp_describe(&fp, d, sizeof d);
    if (peer >= 0) {
        snprintf(missing, sizeof missing, "%d", peer);
    } else { /* a sync: every rank behind my own phase */
        size_t k = 0;
        for (int r = 0; r < s->n && k < sizeof missing - 12; r++)
            if (!reached(atomic_load(&shm_slot_of(s, r)->arrive), s->arrived))
                coh_str_append(missing, sizeof missing, &k, "%s%d", k ? ", " : "", r);
    }
    return coh_errf(COH_ERR_TIMEOUT, "%s on rank %d timed out after %g s (%s): rank %s never "
                    "arrived", d, s->rank, s->timeout, what, missing);
}

/* In a sync (peer < 0), the ranks that have not reached this rank's phase yet. A rank that
 * did may have finished its last op and exited: that is no fault. */
static int awaited(shm *s, int r, int peer)
{
    if (r == s->rank)
        return 0;
    if (peer >= 0)
        return r == peer;
    return !reached(atomic_load(&shm_slot_of(s, r)->arrive), s->arrived);
}

/* Rank r is lost when its process is dead and, looked at after its death, it still has not
 * done what this wait needs (moved *w to target, or reached this sync's phase). The looks must
 * come in that order: an awaited rank may arrive, finish its last op and exit between a look at
 * its words and a look at its process, and a rank that did so is no fault. A dead rank moves
 * nothing any more, so the look after its death is final. */
static int rank_lost(shm *s, int r, int peer, _Atomic uint32_t *w, uint32_t target)
{
    if (!awaited(s, r, peer) || !coh_pid_dead((pid_t)atomic_load(&shm_slot_of(s, r)->pid)))
        return 0;
    return peer >= 0 ? !reached(atomic_load(w), target) : awaited(s, r, peer);
}

/* Between sleeps: the lost flag, the deadline, and every 100 ms the awaited peers' pids. */
static coh_status check_faults(shm *s, _Atomic uint32_t *w, uint32_t target, int peer,
                               const char *what, double now)
{
    if (atomic_load(&s->ctl->lost))
        return lost_error(s, what);
    if (now >= s->next_check) {
        s->next_check = now + 0.1;
        for (int r = 0; r < s->n; r++)
            if (rank_lost(s, r, peer, w, target)) {
                raise_lost(s, r);
                return lost_error(s, what);
            }
    }
    if (now >= s->deadline)
        return timeout_error(s, peer, what);
    return COH_OK;
}

/* The spin before sleeping. A sched_yield costs about a microsecond and a futex wake-up some
 * tens of microseconds (more in a virtual machine): a waiter that yields or sleeps sooner than
 * that makes itself late for the next op, its peer waits for it in turn, and both settle into
 * a pattern where every op pays the cost. So with a core per rank a waiter only pauses, for up
 * to s->pure_s (20 us), then yields now and then, and sleeps after s->spin_s (1 ms).
 * But when the scheduler has put the awaited peer on this very core, pausing only delays it:
 * a wait that ends right after a yield that gave the core away (the yield took long) halves
 * the pause budget, down to 1 us; a wait that ends while pausing proves the peer runs
 * elsewhere and restores it. When ranks outnumber cores, yield at every turn. */
#define PURE_SPIN_MAX_S 20e-6
#define PURE_SPIN_MIN_S 1e-6
#define YIELD_RAN_OTHER_S 5e-6 /* a yield this long ran another task */

static int reached_now(_Atomic uint32_t *w, uint32_t target)
{
    return reached(atomic_load_explicit(w, memory_order_acquire), target);
}

static int spin_oversubscribed(shm *s, _Atomic uint32_t *w, uint32_t target)
{
    for (int i = 0; i < s->spin_turns; i++) {
        if (reached_now(w, target))
            return 1;
        sched_yield();
    }
    return 0;
}

static int spin_until(shm *s, _Atomic uint32_t *w, uint32_t target)
{
    if (s->oversubscribed)
        return spin_oversubscribed(s, w, target);
    double start = 0;
    for (unsigned i = 1;; i++) {
        if (reached_now(w, target)) {
            if (i > 64)
                s->pure_s = PURE_SPIN_MAX_S;
            return 1;
        }
        cpu_relax();
        if (i % 64)
            continue;
        double now = coh_now_s();
        if (!start)
            start = now;
        if (now - start >= s->spin_s)
            return 0;
        if (now - start < s->pure_s)
            continue;
        sched_yield();
        if (coh_now_s() - now > YIELD_RAN_OTHER_S && reached_now(w, target)) {
            s->pure_s = s->pure_s / 2 > PURE_SPIN_MIN_S ? s->pure_s / 2 : PURE_SPIN_MIN_S;
            return 1;
        }
    }
}

coh_status shm_wait(shm *s, _Atomic uint32_t *w, uint32_t target, int peer, const char *what)
{
    if (spin_until(s, w, target))
        return COH_OK;
    for (;;) {
        uint32_t v = atomic_load(w);
        if (reached(v, target))
            return COH_OK;
        double now = coh_now_s();
        coh_status st = check_faults(s, w, target, peer, what, now);
        if (st)
            return st;
        double slice = s->deadline - now;
        atomic_fetch_add(&s->ctl->sleepers, 1);
        if (!reached(atomic_load(w), target))
            futex_sleep(w, v, slice < 0.1 ? slice : 0.1);
        atomic_fetch_sub(&s->ctl->sleepers, 1);
    }
}

void shm_sync_arrive(shm *s)
{
    shm_post(s, &shm_slot_of(s, s->rank)->arrive);
    s->arrived++;
}

coh_status shm_sync(shm *s)
{
    shm_sync_arrive(s);
    return shm_sync_wait(s);
}

coh_status shm_sync_wait(shm *s)
{
    for (int r = 0; r < s->n; r++) {
        if (r == s->rank)
            continue;
        coh_status st = shm_wait(s, &shm_slot_of(s, r)->arrive, s->arrived, -1, "in a sync");
        if (st)
            return st;
    }
    return COH_OK;
}

coh_status shm_sync_first(shm *s, const coh_op *op, const void *send, const void *recv,
                          size_t send_bytes, size_t recv_bytes)
{
    shm_slot *me = shm_slot_of(s, s->rank);
    int par = (int)(op->seq & 1);
    coh_fp_of(op, &me->fp[par]);
    me->send_off[par] = send ? shm_arena_off(s, send, send_bytes) : SHM_NONE;
    me->recv_off[par] = recv ? shm_arena_off(s, recv, recv_bytes) : SHM_NONE;
    me->send_va[par] = (uint64_t)(uintptr_t)send;
    me->recv_va[par] = (uint64_t)(uintptr_t)recv;
    coh_status st = shm_sync(s);
    if (st)
        return st;
    coh_fp fps[256];
    int n = s->n < 256 ? s->n : 256;
    for (int r = 0; r < n; r++)
        fps[r] = shm_slot_of(s, r)->fp[par];
    return coh_fp_mismatch(fps, n);
}

coh_status shm_read_failed(shm *s, int peer, int err)
{
    /* A peer that gave up on this op because another rank died may have freed its buffer
     * already: the dead rank is the cause to report. */
    if (atomic_load(&s->ctl->lost))
        return lost_error(s, "reading a peer's buffer");
    if (coh_pid_dead((pid_t)atomic_load(&shm_slot_of(s, peer)->pid)) || err == ESRCH) {
        raise_lost(s, peer);
        return lost_error(s, "reading its buffer");
    }
    return coh_errf(COH_ERR_SYSTEM, "cannot read rank %d's buffer (process_vm_readv): %s", peer,
                    strerror(err));
}

coh_status shm_peer_read(shm *s, int peer, void *dst, uint64_t src_va, size_t bytes)
{
    pid_t pid = atomic_load(&shm_slot_of(s, peer)->pid);
    while (bytes) {
        struct iovec local = {dst, bytes}, remote = {(void *)(uintptr_t)src_va, bytes};
        ssize_t k = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (k <= 0)
            return shm_read_failed(s, peer, k < 0 ? errno : EIO);
        dst = (char *)dst + k;
        src_va += (uint64_t)k;
        bytes -= (size_t)k;
    }
    return COH_OK;
}
