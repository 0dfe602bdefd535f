/* gpu_nccl_rank.c: one rank of the NCCL test (tests/gpu/test_gpu_nccl.sh), started by cohort
 * run: "sweep" runs every collective x type x size class on device memory and checks each
 * result on the host; "kill" has the last rank die before an all-reduce, which the others must
 * end with an error within the deadline instead of hanging. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/comm.h"
#include "comm/transport/nccl_plugin.h"
#include "train/backend/backend.h"

static const coh_backend *be;
static int rank, size, bad, cases;

/* The value rank r holds at i: small integers, exact in every type. */
static double val(int r, size_t i) { return (double)(r + 1) + (double)(i % 7); }

static void *dev_fill(coh_dtype t, size_t n, int r)
{
    size_t es = coh_dtype_size(t);
    char *h = malloc(n * es);
    for (size_t i = 0; i < n; i++)
        coh_dtype_set(h, i, t, val(r, i));
    void *d = be->alloc(n * es);
    if (d)
        be->copy(d, h, n * es, COH_COPY_H2D);
    free(h);
    return d;
}

/* recv (n elements of t, device) against want(i); the first wrong element printed. */
static void expect(const char *what, coh_dtype t, const void *d, size_t n,
                   double (*want)(size_t i, int root), int root)
{
    size_t es = coh_dtype_size(t);
    char *h = malloc(n * es);
    be->copy(h, d, n * es, COH_COPY_D2H);
    cases++;
    for (size_t i = 0; i < n; i++)
        if (coh_dtype_get(h, i, t) != want(i, root)) {
            fprintf(stderr, "rank %d: %s %s n=%zu: element %zu is %g, expected %g\n", rank, what,
                    coh_dtype_name(t), n, i, coh_dtype_get(h, i, t), want(i, root));
            bad++;
            break;
        }
    free(h);
}

static double want_sum(size_t i, int root)
{
    return (double)size * (size + 1) / 2 + (double)size * (double)(i % 7);
}
static double want_max(size_t i, int root) { return val(size - 1, i); }
static double want_root(size_t i, int root) { return val(root, i); }
static double want_gather(size_t i, int root) { return val((int)(i / (size_t)root), i % root); }
static double want_scatter(size_t i, int root) /* block `rank` of the summed vectors */
{
    return want_sum(i + (size_t)rank * root, 0);
}

static void report(coh_status st, const char *what)
{
    if (st) {
        fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, coh_last_error());
        bad++;
    }
}

static void sweep_one(coh_comm *c, coh_dtype t, size_t n)
{
    size_t es = coh_dtype_size(t);
    void *a = dev_fill(t, n, rank), *g = be->alloc(n * size * es), *s = dev_fill(t, n * size, rank);
    if (!a || !g || !s) {
        fprintf(stderr, "rank %d: out of device memory for n=%zu\n", rank, n);
        bad++;
        return;
    }
    report(coh_allgather(c, a, g, n, t), "allgather");
    expect("allgather", t, g, n * size, want_gather, (int)n);
    report(coh_allreduce(c, a, a, n, t, COH_SUM), "allreduce sum");
    expect("allreduce sum", t, a, n, want_sum, 0);
    be->free(a, n * es);
    a = dev_fill(t, n, rank);
    report(coh_allreduce(c, a, a, n, t, COH_MAX), "allreduce max");
    expect("allreduce max", t, a, n, want_max, 0);
    be->free(a, n * es);
    a = dev_fill(t, n, rank);
    report(coh_broadcast(c, a, n, t, size - 1), "broadcast");
    expect("broadcast", t, a, n, want_root, size - 1);
    report(coh_reduce_scatter(c, s, (char *)s + (size_t)rank * n * es, n, t, COH_SUM),
           "reduce_scatter");
    expect("reduce_scatter", t, (char *)s + (size_t)rank * n * es, n, want_scatter, (int)n);
    be->free(a, n * es), be->free(g, n * size * es), be->free(s, n * size * es);
}

static int sweep(coh_comm *c)
{
    coh_dtype types[] = {COH_F32, COH_BF16, COH_F64, COH_I32, COH_I64, COH_U8};
    size_t sizes[] = {1, 1000, (1u << 20) + 3}; /* one element, small, large and odd */
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t si = 0; si < 3; si++)
            sweep_one(c, types[ti], types[ti] == COH_U8 ? (sizes[si] < 8 ? sizes[si] : 8) : sizes[si]);
    report(coh_barrier(c), "barrier");
    printf("rank %d of %d: %d nccl cases, %d wrong\n", rank, size, cases, bad);
    return bad ? 1 : 0;
}

/* The last rank dies; the others' all-reduce must end with an error, not hang. */
static int kill_mode(coh_comm *c)
{
    if (rank == size - 1) {
        fprintf(stderr, "rank %d: exiting before the all-reduce\n", rank);
        _exit(3);
    }
    signal(SIGTERM, SIG_IGN); /* the launcher's teardown: the survivor reports first */
    void *a = dev_fill(COH_F32, 1000, rank);
    coh_status st = coh_allreduce(c, a, a, 1000, COH_F32, COH_SUM);
    printf("rank %d: all-reduce with a dead peer returned '%s': %s\n", rank, coh_status_name(st),
           coh_last_error());
    return st == COH_ERR_PEER_LOST || st == COH_ERR_TIMEOUT ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sweep";
    coh_comm *world = NULL, *nc = NULL;
    coh_status st = coh_comm_create(COH_COMM_AUTO, &world);
    if (!st)
        st = coh_backend_find("cuda", &be);
    if (!st)
        st = coh_comm_create_nccl(world, &nc);
    if (st) {
        fprintf(stderr, "gpu_nccl_rank: %s\n", coh_last_error());
        return 1;
    }
    rank = coh_comm_rank(nc);
    size = coh_comm_size(nc);
    if (strcmp(coh_comm_transport(nc), "nccl")) {
        fprintf(stderr, "transport is '%s', not nccl\n", coh_comm_transport(nc));
        return 1;
    }
    int rc = !strcmp(mode, "kill") ? kill_mode(nc) : sweep(nc);
    if (strcmp(mode, "kill"))
        coh_comm_destroy(nc);
    coh_comm_destroy(world);
    return rc;
}
