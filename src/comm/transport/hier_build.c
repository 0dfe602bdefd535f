/* hier_build.c: setting up the hierarchical transport: which node each rank is on (host
 * names gathered over MPI, or COHORT_COMM_RANKS_PER_NODE), the node's shared-memory segment
 * (named by its first rank), and the MPI groups across nodes. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cohort/log.h"
#include "cohort/size.h"
#include "comm/transport/hier_int.h"
#include "comm/transport/shm_int.h"
#include "util/strutil.h"

#define NAME_BYTES 64 /* segment names as exchanged over MPI */

static int env_int(const char *name, int dflt, int lo, int hi, int *out)
{
    const char *s = getenv(name);
    *out = dflt;
    if (!s)
        return 0;
    long v;
    if (!coh_str_uint(s, hi, &v) || v < lo) /* " 2" and "+2" are typos too */
        return -1;
    *out = (int)v;
    return 0;
}

/* Run op on the flat instance with a private sequence number (set-up ops). */
static coh_status flat_run(hier *h, coh_opkind k, const void *send, void *recv, size_t count,
                           coh_dtype t, coh_redop op)
{
    coh_op o = {k, send, recv, count, t, op, -1, 0};
    return h->mpi->run(h->flat, &o);
}

/* What each rank says about where it is, gathered over MPI. */
typedef struct host_id {
    char name[120];     /* host name */
    int32_t per_node;   /* its COHORT_COMM_RANKS_PER_NODE, 0 when unset */
    int32_t pad;
    uint64_t split_min; /* its COHORT_COMM_HIER_MIN_BYTES (or the default) */
} host_id;

/* Every rank sees the same gathered values, so all fail alike: none is left waiting. */
static coh_status check_per_node(const host_id *all, int n)
{
    for (int r = 1; r < n; r++) {
        if (all[r].per_node != all[0].per_node)
            return coh_errf(COH_ERR_INVALID, "COHORT_COMM_RANKS_PER_NODE differs between ranks: "
                            "rank 0 has '%d', rank %d has '%d' (0: unset); give every rank the "
                            "same value (mpirun -x COHORT_COMM_RANKS_PER_NODE)",
                            (int)all[0].per_node, r, (int)all[r].per_node);
        if (all[r].split_min != all[0].split_min)
            return coh_errf(COH_ERR_INVALID, "COHORT_COMM_HIER_MIN_BYTES differs between ranks: "
                            "rank 0 has %llu bytes, rank %d has %llu; give every rank the same "
                            "value (mpirun -x COHORT_COMM_HIER_MIN_BYTES)",
                            (unsigned long long)all[0].split_min, r,
                            (unsigned long long)all[r].split_min);
    }
    return COH_OK;
}

/* Node of every rank: ranks with the same host name share a node, unless
 * COHORT_COMM_RANKS_PER_NODE=k groups them k by k. Node indices count from 0 in order of first
 * rank. Also counts the ranks on this host (several simulated nodes may share it). */
static coh_status find_nodes(hier *h, int per_node)
{
    host_id mine = {.per_node = per_node, .split_min = h->split_min}, *all = malloc(sizeof *all * (size_t)h->size);
    if (!all)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    gethostname(mine.name, sizeof mine.name - 1);
    coh_status st = flat_run(h, COH_OP_ALLGATHER, &mine, all, sizeof mine, COH_U8, COH_SUM);
    if (!st)
        st = check_per_node(all, h->size);
    int next = 0;
    h->host_ranks = 0;
    for (int r = 0; !st && r < h->size; r++) {
        int q = 0;
        while (q < r && strcmp(all[q].name, all[r].name))
            q++;
        h->node_of[r] = per_node > 0 ? r / per_node : q < r ? h->node_of[q] : next++;
        h->host_ranks += !strcmp(all[r].name, mine.name);
    }
    free(all);
    return st;
}

/* Local rank, ranks per node; the hierarchy pays only when some node holds several ranks and
 * there are several nodes. */
static int layout(hier *h)
{
    int me = h->node_of[h->rank], most = 0, least = h->size;
    h->nnodes = 0;
    for (int r = 0; r < h->size; r++)
        if (h->node_of[r] + 1 > h->nnodes)
            h->nnodes = h->node_of[r] + 1;
    h->local_size = 0;
    for (int r = 0; r < h->size; r++) { /* quadratic, once: the ops index local_of */
        h->local_of[r] = 0;
        for (int q = 0; q < r; q++)
            h->local_of[r] += h->node_of[q] == h->node_of[r];
        h->local_size += h->node_of[r] == me;
    }
    h->local_rank = h->local_of[h->rank];
    for (int n = 0; n < h->nnodes; n++) {
        int k = 0;
        for (int r = 0; r < h->size; r++)
            k += h->node_of[r] == n;
        most = k > most ? k : most;
        least = k < least ? k : least;
    }
    h->equal = most == least;
    return h->nnodes >= 2 && most >= 2;
}

/* The node's instance sizes its busy-wait by its own ranks; when simulated nodes share a host
 * with more ranks than cpus, waiters must yield at every turn as shm does when oversubscribed
 * (COHORT_SHM_SPIN, when set, still rules). */
static void wait_politely(hier *h)
{
    shm *s = h->node;
    if (h->host_ranks > sysconf(_SC_NPROCESSORS_ONLN) && !getenv("COHORT_SHM_SPIN")) {
        s->oversubscribed = 1;
        s->spin_turns = 100;
    }
}

/* The node's first rank picks a name unique on its host (pid, a counter, the clock); an
 * all-gather over MPI hands every rank its leader's pick. */
static coh_status open_node(hier *h)
{
    static _Atomic unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char mine[NAME_BYTES] = "", *all = malloc((size_t)h->size * NAME_BYTES);
    if (!all)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    snprintf(mine, sizeof mine, "hier-%ld-%u-%llx", (long)getpid(), counter++,
             (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    coh_status st = flat_run(h, COH_OP_ALLGATHER, mine, all, NAME_BYTES, COH_U8, COH_SUM);
    if (!st) {
        int leader = 0;
        while (h->node_of[leader] != h->node_of[h->rank])
            leader++;
        coh_comm_env ne = {.rank = h->local_rank, .size = h->local_size,
                           .local_rank = h->local_rank, .local_size = h->local_size, .nnodes = 1,
                           .timeout_s = h->timeout};
        snprintf(ne.job, sizeof ne.job, "%.*s", NAME_BYTES - 1, all + (size_t)leader * NAME_BYTES);
        st = coh_shm_open(&ne, &h->node);
    }
    free(all);
    if (!st)
        wait_politely(h);
    /* A node that failed must not leave the others waiting in the splits that follow. */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? coh_last_error() : "");
    int32_t failed = st != COH_OK, any = 0;
    coh_status agree = flat_run(h, COH_OP_ALLREDUCE, &failed, &any, 1, COH_I32, COH_MAX);
    if (!st && !agree && any)
        st = coh_errf(COH_ERR_SYSTEM, "shared memory failed on another node's rank");
    else if (st)
        st = coh_errf(st, "%s", msg);
    else
        st = agree;
    if (st && h->node) {
        coh_shm_ops.destroy(h->node);
        h->node = NULL;
    }
    return st;
}

/* Equal nodes: one group per local rank, ordered by node; unequal: the leaders only. */
static coh_status open_cross(hier *h)
{
    int color = h->equal ? h->local_rank : h->local_rank == 0 ? 0 : -1;
    int *members = malloc(sizeof(int) * (size_t)h->size), m = 0, me = -1;
    if (!members)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (int r = 0; r < h->size; r++) {
        if (color >= 0 && h->local_of[r] == color) {
            me = r == h->rank ? m : me;
            members[m++] = r;
        }
    }
    coh_status st = h->mpi->split(h->flat, color, h->node_of[h->rank], members, m, me, 1,
                                  &h->cross);
    free(members);
    return st;
}

/* With node_of filled in: the node's segment and the cross groups, when they pay. */
coh_status hier_build(hier *h)
{
    if (!layout(h))
        return COH_OK;
    coh_status st = open_node(h);
    if (!st)
        st = open_cross(h);
    if (st && h->node) {
        coh_shm_ops.destroy(h->node);
        h->node = NULL;
    }
    return st;
}

void hier_describe(const hier *h, char *buf, size_t n)
{
    size_t k = 0;
    coh_str_append(buf, n, &k, "%d ranks on %d nodes (", h->size, h->nnodes);
    for (int node = 0; node < h->nnodes; node++) {
        int c = 0;
        for (int r = 0; r < h->size; r++)
            c += h->node_of[r] == node;
        coh_str_append(buf, n, &k, "%s%d", node ? "+" : "", c);
    }
    coh_str_append(buf, n, &k, ")");
}

static const char *hier_min_text(uint64_t bytes, char *buf, size_t n)
{
    snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
    return buf;
}

coh_status coh_hier_wrap(double timeout_s, int rank, int size, const coh_transport_ops **ops,
                         void **self)
{
    int on, per_node;
    if (env_int("COHORT_COMM_HIER", 1, 0, 1, &on))
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_HIER '%s': expected 0 (flat MPI) "
                        "or 1 (shared memory inside nodes when ranks share them)",
                        getenv("COHORT_COMM_HIER"));
    if (env_int("COHORT_COMM_RANKS_PER_NODE", 0, 1, 1 << 20, &per_node))
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_RANKS_PER_NODE '%s': expected a "
                        "number of ranks from 1", getenv("COHORT_COMM_RANKS_PER_NODE"));
    uint64_t split_min = HIER_SPLIT_MIN_DEFAULT;
    const char *sm = getenv("COHORT_COMM_HIER_MIN_BYTES");
    if (sm && coh_size_parse(sm, &split_min))
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_HIER_MIN_BYTES '%s': expected a "
                        "size in bytes (e.g. 0, 65536, 1M): all-gather and reduce-scatter this "
                        "large and larger run in two steps", sm);
    if (!on || size < 2)
        return COH_OK;
    hier *h = hier_new(*ops, *self, rank, size, timeout_s);
    if (!h)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    h->split_min = split_min;
    coh_status st = find_nodes(h, per_node);
    if (!st)
        st = hier_build(h);
    char d[256];
    hier_describe(h, d, sizeof d);
    if (st || !h->node) {
        if (!st)
            coh_debug("comm: flat %s transport: %s", h->mpi->name, d);
        h->flat = NULL; /* still the caller's */
        hier_destroy(h);
        return st;
    }
    char mt[48];
    coh_debug("comm: hierarchical transport: %s; all-reduce %s%s%s; broadcast across nodes, "
              "then inside them%s%s", d,
              h->equal ? "as shm reduce-scatter, " : "as shm reduce to node leaders, ",
              h->mpi->name,
              h->equal ? " all-reduce of shards, shm all-gather" : " all-reduce, shm broadcast",
              h->equal ? "; all-gather and reduce-scatter in two steps from " : "",
              h->equal ? hier_min_text(h->split_min, mt, sizeof mt) : "");
    *ops = &coh_hier_ops;
    *self = h;
    return COH_OK;
}
