/* test_comm_threads.c: shared-memory ranks as threads of one process, so that the race
 * detectors see both sides of every hand-over (ThreadSanitizer: scripts/test.sh builds this
 * with -DCOHORT_TSAN=ON): the full correctness sweep and async all-reduces on 2 and 3 ranks. */
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm_int.h"
#include "comm_rank.h"

typedef struct rank_arg {
    int rank, n, wrong;
    char job[64];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    coh_comm_env env = {.rank = a->rank, .size = a->n, .local_rank = a->rank,
                        .local_size = a->n, .nnodes = 1, .timeout_s = 120};
    snprintf(env.job, sizeof env.job, "%s", a->job);
    coh_comm *c = calloc(1, sizeof *c);
    if (coh_shm_open(&env, &c->tp)) {
        fprintf(stderr, "rank %d: %s\n", a->rank, coh_last_error());
        a->wrong = 1;
        free(c);
        return NULL;
    }
    c->ops = &coh_shm_ops;
    c->rank = a->rank;
    c->size = a->n;
    c->timeout_s = 120;
    a->wrong = run_cases(c, 0);
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)(a->rank + i);
    coh_comm_req *req;
    if (coh_allreduce_async(c, v, v, 1000, COH_F32, COH_SUM, &req) || coh_comm_wait(req))
        a->wrong++;
    for (int i = 0; i < 1000; i++)
        a->wrong += v[i] != (float)(a->n * (a->n - 1) / 2 + a->n * i);
    coh_comm_destroy(c);
    return NULL;
}

static void ranks_as_threads(int n)
{
    pthread_t th[8];
    rank_arg args[8];
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){.rank = r, .n = n};
        snprintf(args[r].job, sizeof args[r].job, "threads%d-%d-r0", (int)getpid(), n);
        CHECK(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        CHECK_INT(args[r].wrong, 0);
    }
    char path[256];
    struct stat st;
    struct passwd *pw = getpwuid(geteuid());
    snprintf(path, sizeof path, "/dev/shm/cohort-%s-%s", pw ? pw->pw_name : "?", args[0].job);
    CHECK(stat(path, &st) != 0);
}

static void test_two_ranks(void) { ranks_as_threads(2); }
static void test_three_ranks(void) { ranks_as_threads(3); }

int main(void)
{
    RUN(test_two_ranks);
    RUN(test_three_ranks);
    return CHECK_REPORT();
}
