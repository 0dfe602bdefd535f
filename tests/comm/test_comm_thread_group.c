/* test_comm_thread_group.c: the thread transport (coh_comm_create_threads, the devices of
 * strategy dp): the full correctness sweep on 1, 2 and 3 ranks, reductions folded in rank order
 * whichever thread arrives first, a mismatch reported on every rank (collectives and send/recv),
 * bad sizes refused. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm_rank.h"

typedef struct rank_arg {
    coh_comm *c;
    int wrong, mismatch;
    coh_status st;
    char err[256];
} rank_arg;

static void *sweep(void *p)
{
    rank_arg *a = p;
    a->wrong = run_cases(a->c, 0);
    return NULL;
}

static void run_threads(int n, void *(*fn)(void *), rank_arg *args)
{
    coh_comm *c[4];
    pthread_t th[4];
    CHECK_OK(coh_comm_create_threads(n, 60, c));
    for (int r = 0; r < n; r++) {
        CHECK_STR(coh_comm_transport(c[r]), "thread");
        CHECK_INT(coh_comm_rank(c[r]), r);
        CHECK_INT(coh_comm_size(c[r]), n);
        args[r] = (rank_arg){.c = c[r]};
        CHECK(pthread_create(&th[r], NULL, fn, &args[r]) == 0);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        coh_comm_destroy(c[r]);
    }
}

static void sweep_on(int n)
{
    rank_arg a[4];
    run_threads(n, sweep, a);
    for (int r = 0; r < n; r++)
        CHECK_INT(a[r].wrong, 0);
}

static void test_one_rank(void) { sweep_on(1); }
static void test_two_ranks(void) { sweep_on(2); }
static void test_three_ranks(void) { sweep_on(3); }

/* 1 + 2^-24 + 2^-24 in float: folded in rank order it is 1 (each 2^-24 rounds away), any other
 * order (2^-24 + 2^-24 first) gives 1 + 2^-23. Rank 0 arrives last, so an order by arrival
 * would put it last. */
static void *order(void *p)
{
    rank_arg *a = p;
    int r = coh_comm_rank(a->c);
    float v = r == 0 ? 1.0f : 0x1p-24f, out = -1.0f;
    if (r == 0)
        usleep(50000);
    a->st = coh_reduce(a->c, &v, r == 2 ? &out : NULL, 1, COH_F32, COH_SUM, 2);
    a->wrong = r == 2 && out != 1.0f;
    return NULL;
}

static void test_rank_order(void)
{
    rank_arg a[3];
    run_threads(3, order, a);
    for (int r = 0; r < 3; r++) {
        CHECK_INT(a[r].st, COH_OK);
        CHECK_INT(a[r].wrong, 0);
    }
}

static void *mismatch(void *p)
{
    rank_arg *a = p;
    float v[8] = {0};
    int r = coh_comm_rank(a->c);
    a->st = coh_allreduce(a->c, v, v, r == 1 ? 8 : 4, COH_F32, COH_SUM);
    snprintf(a->err, sizeof a->err, "%s", a->st ? coh_last_error() : "");
    /* the group is still usable: the mismatch was found before any data moved */
    a->wrong = coh_barrier(a->c) != COH_OK;
    return NULL;
}

static void test_mismatch_on_every_rank(void)
{
    rank_arg a[3];
    run_threads(3, mismatch, a);
    for (int r = 0; r < 3; r++) {
        CHECK_INT(a[r].st, COH_ERR_MISMATCH);
        CHECK(strstr(a[r].err, "count=8") != NULL);
        CHECK_INT(a[r].wrong, 0);
    }
}

/* A receive that expects more than was sent fails on both sides, and neither waits. */
static void *p2p_mismatch(void *p)
{
    rank_arg *a = p;
    float v[8] = {0};
    a->st = coh_comm_rank(a->c) == 0 ? coh_send(a->c, v, 4, COH_F32, 1)
                                     : coh_recv(a->c, v, 8, COH_F32, 0);
    snprintf(a->err, sizeof a->err, "%s", a->st ? coh_last_error() : "");
    return NULL;
}

static void test_p2p_mismatch(void)
{
    rank_arg a[2];
    run_threads(2, p2p_mismatch, a);
    CHECK_INT(a[0].st, COH_ERR_MISMATCH);
    CHECK(strstr(a[0].err, "send to rank 1: 4 x f32") != NULL);
    CHECK_INT(a[1].st, COH_ERR_MISMATCH);
    CHECK(strstr(a[1].err, "recv from rank 0: 4 x f32 sent, 8 x f32 expected") != NULL);
}

static void test_bad_size(void)
{
    coh_comm *c[1] = {(coh_comm *)&c};
    CHECK_FAILS(coh_comm_create_threads(0, 1, c), COH_ERR_INVALID,
                "invalid thread group size '0': must be 1..4096");
    CHECK_FAILS(coh_comm_create_threads(4097, 1, c), COH_ERR_INVALID, "'4097'");
}

int main(void)
{
    RUN(test_one_rank);
    RUN(test_two_ranks);
    RUN(test_three_ranks);
    RUN(test_rank_order);
    RUN(test_mismatch_on_every_rank);
    RUN(test_p2p_mismatch);
    RUN(test_bad_size);
    return CHECK_REPORT();
}
