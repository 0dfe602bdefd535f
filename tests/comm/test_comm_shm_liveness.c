/* test_comm_shm_liveness.c: when a shared-memory rank waits for a peer whose process is dead,
 * it reports the peer lost only if the peer, looked at after its death, has not done what the
 * wait needs. A peer may arrive, finish its last op and exit between the waiter's look at its
 * words and its look at the process (seen on 5 ranks on 2 cores beside other work: one job in
 * several hundred failed with "rank 0 died" although rank 0 had passed). This test makes that
 * happen every time: it replaces kill() for the whole executable (this file's definition wins
 * over the C library's when the static library is linked), and the probe of the peer's process
 * first does what the peer would have done (arrive, or post) and then answers that the process
 * is gone. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "comm_env_clear.h"
#include "cohort/clock.h"
#include "comm/comm_int.h"
#include "comm/transport/shm_int.h"

/* What the next liveness probe (kill(pid, 0)) does before answering "no such process". */
typedef enum { PROBE_REAL, PROBE_DEAD, PROBE_MOVE_THEN_DEAD } probe_mode;
static probe_mode mode = PROBE_REAL;
static _Atomic uint32_t *moved_word; /* PROBE_MOVE_THEN_DEAD: the word the "peer" moves */
static int probes;                    /* probes answered "dead" */

int kill(pid_t pid, int sig)
{
    if (sig == 0 && mode != PROBE_REAL) {
        if (mode == PROBE_MOVE_THEN_DEAD)
            atomic_fetch_add(moved_word, 1);
        probes++;
        errno = ESRCH;
        return -1;
    }
    return (int)syscall(SYS_kill, pid, sig);
}

typedef struct opened { coh_comm_env env; void *tp; coh_status st; } opened;

static void *open_rank(void *p)
{
    opened *o = p;
    o->st = coh_shm_open(&o->env, &o->tp);
    return NULL;
}

/* Ranks 0 and 1 of one segment, both in this process (each open waits for the other). */
static int open_pair(shm **r0, shm **r1, int tag)
{
    clear_env();
    opened o[2];
    pthread_t th;
    for (int r = 0; r < 2; r++) {
        o[r] = (opened){
            .env = {.rank = r, .size = 2, .local_size = 2, .nnodes = 1, .timeout_s = 10}};
        snprintf(o[r].env.job, sizeof o[r].env.job, "live%d-%d", (int)getpid(), tag);
    }
    CHECK(pthread_create(&th, NULL, open_rank, &o[0]) == 0);
    open_rank(&o[1]);
    pthread_join(th, NULL);
    CHECK_OK(o[0].st);
    CHECK_OK(o[1].st);
    *r0 = o[0].tp;
    *r1 = o[1].tp;
    return !o[0].st && !o[1].st;
}

static const coh_op barrier_op = {.kind = COH_OP_BARRIER, .root = -1, .seq = 1};

/* Rank 0 arrives at a sync; rank 1 is behind, and the probe of rank 1's process finds it
 * arrived and gone: the sync completes. Without the arrival the same probe is a lost peer. */
static void test_sync_peer_arrived_then_exited(void)
{
    shm *a, *b;
    if (!open_pair(&a, &b, 1))
        return;
    a->op = &barrier_op;
    a->deadline = coh_now_s() + 10;
    moved_word = &shm_slot_of(a, 1)->arrive;
    probes = 0;
    mode = PROBE_MOVE_THEN_DEAD;
    coh_status st = shm_sync(a);
    mode = PROBE_REAL;
    CHECK_INT(probes, 1);
    CHECK_OK(st);
    CHECK_INT(atomic_load(&a->ctl->lost), 0);

    /* the next sync: rank 1 dead without arriving */
    a->deadline = coh_now_s() + 10;
    a->next_check = 0;
    probes = 0;
    mode = PROBE_DEAD;
    st = shm_sync(a);
    mode = PROBE_REAL;
    CHECK_INT(st, COH_ERR_PEER_LOST);
    CHECK(strstr(coh_last_error(), "rank 1 died"));
    CHECK_INT(atomic_load(&a->ctl->lost), 2); /* 1 + the rank found dead */
    coh_shm_ops.destroy(a);
    coh_shm_ops.destroy(b);
}

/* The same for a wait on one peer's word (a receive waits for the sender's post). */
static void test_peer_posted_then_exited(void)
{
    shm *a, *b;
    if (!open_pair(&a, &b, 2))
        return;
    a->op = &barrier_op;
    a->deadline = coh_now_s() + 10;
    _Atomic uint32_t *posted = &shm_chan_of(a, 1, 0)->posted;
    moved_word = posted;
    probes = 0;
    mode = PROBE_MOVE_THEN_DEAD;
    coh_status st = shm_wait(a, posted, 1, 1, "receiving");
    mode = PROBE_REAL;
    CHECK_INT(probes, 1);
    CHECK_OK(st);

    a->next_check = 0;
    mode = PROBE_DEAD;
    st = shm_wait(a, posted, 2, 1, "receiving");
    mode = PROBE_REAL;
    CHECK_INT(st, COH_ERR_PEER_LOST);
    CHECK(strstr(coh_last_error(), "rank 1 died (receiving)"));
    coh_shm_ops.destroy(a);
    coh_shm_ops.destroy(b);
}

int main(void)
{
    RUN(test_sync_peer_arrived_then_exited);
    RUN(test_peer_posted_then_exited);
    return CHECK_REPORT();
}
