/* hier.c: the hierarchical transport: a shared-memory instance for the ranks of each node and
 * MPI instances across nodes, composed through the transport interface so that fingerprints,
 * deadlines, MISMATCH and PEER_LOST work as in the flat transports. All-reduce is split up
 * (hier_allreduce.c), and so is broadcast (hier_broadcast.c); every other op runs on the flat MPI
 * instance. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cohort/log.h"
#include "comm/transport/hier_int.h"
#include "comm/transport/shm_int.h"

#define NAME_BYTES 64 /* segment names as exchanged over MPI */

/* World rank of the local_index-th rank of node `node`, or -1. */
static int world_rank(const hier *h, int node, int local_index)
{
    for (int r = 0; r < h->size; r++)
        if (h->node_of[r] == node && local_index-- == 0)
            return r;
    return -1;
}

/* An inner instance numbers its ranks its own way: rewrite every "rank N" (and lists
 * "rank N, M") of its message as world ranks, then say where it happened. Node instances
 * number a node's ranks in order; cross instances number nodes. */
static coh_status in_world_ranks(hier *h, coh_status st, int cross, const char *where)
{
    const char *m = coh_last_error();
    char out[1024];
    size_t k = 0;
    int in_list = 0;
    while (*m && k < sizeof out - 24) {
        int x, used = 0, at = !strncmp(m, "rank ", 5) ? 5 : in_list && !strncmp(m, ", ", 2) ? 2 : 0;
        int w = -1;
        if (at && sscanf(m + at, "%d%n", &x, &used) == 1 && x >= 0)
            w = cross ? world_rank(h, x, h->equal ? h->local_rank : 0)
                      : world_rank(h, h->node_of[h->rank], x);
        if (w >= 0) {
            k += (size_t)snprintf(out + k, sizeof out - k, "%.*s%d", at, m, w);
            m += at + used;
            in_list = 1;
        } else {
            out[k++] = *m++;
            in_list = 0;
        }
    }
    out[k] = '\0';
    return coh_errf(st, "%s (hierarchical collective, %s)", out, where);
}

coh_status hier_node_run(hier *h, coh_opkind k, const void *send, void *recv, size_t count,
                         coh_dtype t, coh_redop op, int root)
{
    coh_op o = {k, send, recv, count, t, op, root, ++h->node_seq};
    coh_status st = coh_shm_ops.run(h->node, &o);
    return st ? in_world_ranks(h, st, 0, "shared-memory step inside this node") : st;
}

coh_status hier_cross_run(hier *h, coh_opkind k, const void *send, void *recv, size_t count,
                          coh_dtype t, coh_redop op, int root)
{
    coh_op o = {k, send, recv, count, t, op, root, ++h->cross_seq};
    coh_status st = h->mpi->run(h->cross, &o);
    if (st == COH_ERR_TIMEOUT) /* MPI may still write the buffers: never unmap or reuse them */
        h->abandoned = 1;
    return st ? in_world_ranks(h, st, 1, "mpi step across nodes") : st;
}

void *hier_scratch(hier *h, size_t bytes)
{
    if (h->tmp && h->tmp_bytes >= bytes)
        return h->tmp;
    if (h->tmp_in_arena)
        coh_shm_ops.free(h->node, h->tmp);
    else
        free(h->tmp);
    h->tmp_bytes = bytes < 4096 ? 4096 : bytes;
    h->tmp = coh_shm_ops.alloc(h->node, h->tmp_bytes); /* peers read it without a copy */
    h->tmp_in_arena = h->tmp != NULL;
    if (!h->tmp && posix_memalign(&h->tmp, 64, h->tmp_bytes))
        h->tmp = NULL;
    if (!h->tmp)
        h->tmp_bytes = 0;
    return h->tmp;
}

/* An all-gather of the callers' fingerprints over MPI: the MPI transport's own fingerprint
 * exchange names a rank that never arrives; this names a rank whose call differs. */
coh_status hier_agree(hier *h, const coh_op *op)
{
    coh_fp mine, *all = malloc(sizeof *all * (size_t)h->size);
    if (!all)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_fp_of(op, &mine);
    coh_op o = {COH_OP_ALLGATHER, &mine, all, sizeof mine, COH_U8, COH_SUM, -1, op->seq};
    coh_status st = h->mpi->run(h->flat, &o);
    if (!st)
        st = coh_fp_mismatch(all, h->size);
    if (st == COH_ERR_TIMEOUT)
        h->abandoned = 1; /* MPI may still write `all`: leave it allocated */
    else
        free(all);
    if (st && st != COH_ERR_MISMATCH) { /* name the caller's op, not the all-gather */
        char d[160], rest[512];
        coh_fp_describe(&mine, d, sizeof d);
        const char *m = coh_last_error(), *tail = strstr(m, " timed out");
        snprintf(rest, sizeof rest, "%s", tail ? tail : m);
        st = tail ? coh_errf(st, "%s on rank %d%s", d, h->rank, rest)
                  : coh_err_prefix(st, "%s on rank %d", d, h->rank);
    }
    return st;
}

static coh_status hier_run(void *self, const coh_op *op)
{
    hier *h = self;
    if (h->node && op->kind == COH_OP_ALLREDUCE)
        return hier_allreduce(h, op);
    if (h->node && op->kind == COH_OP_BROADCAST)
        return hier_broadcast(h, op);
    return h->mpi->run(h->flat, op);
}

/* ---- building: nodes, the node's segment, the cross-node groups --------------------------- */

static int env_int(const char *name, int dflt, int lo, int hi, int *out)
{
    const char *s = getenv(name);
    *out = dflt;
    if (!s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
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
    char name[120];   /* host name */
    int32_t per_node; /* its COHORT_COMM_RANKS_PER_NODE, 0 when unset */
    int32_t pad;
} host_id;

/* Every rank sees the same gathered values, so all fail alike: none is left waiting. */
static coh_status check_per_node(const host_id *all, int n)
{
    for (int r = 1; r < n; r++)
        if (all[r].per_node != all[0].per_node)
            return coh_errf(COH_ERR_INVALID, "COHORT_COMM_RANKS_PER_NODE differs between ranks: "
                            "rank 0 has '%d', rank %d has '%d' (0: unset); give every rank the "
                            "same value (mpirun -x COHORT_COMM_RANKS_PER_NODE)",
                            (int)all[0].per_node, r, (int)all[r].per_node);
    return COH_OK;
}

/* Node of every rank: ranks with the same host name share a node, unless
 * COHORT_COMM_RANKS_PER_NODE=k groups them k by k. Node indices count from 0 in order of first
 * rank. Also counts the ranks on this host (several simulated nodes may share it). */
static coh_status find_nodes(hier *h, int per_node)
{
    host_id mine = {.per_node = per_node}, *all = malloc(sizeof *all * (size_t)h->size);
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
    h->local_rank = h->local_size = 0;
    for (int r = 0; r < h->size; r++) {
        h->local_rank += r < h->rank && h->node_of[r] == me;
        h->local_size += h->node_of[r] == me;
    }
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
        s->spin = 100;
        s->yield_every = 1;
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
        int lr = 0;
        for (int q = 0; q < r; q++)
            lr += h->node_of[q] == h->node_of[r];
        if (color >= 0 && lr == color) {
            me = r == h->rank ? m : me;
            members[m++] = r;
        }
    }
    coh_status st = h->mpi->split(h->flat, color, h->node_of[h->rank], members, m, me, 1,
                                  &h->cross);
    free(members);
    return st;
}

static void hier_destroy(void *self)
{
    hier *h = self;
    if (!h)
        return;
    if (h->abandoned) { /* a timed-out MPI step may still write the arena or the scratch */
        h->node = NULL;
        h->tmp = NULL;
        h->tmp_in_arena = 0;
    }
    if (h->tmp_in_arena)
        coh_shm_ops.free(h->node, h->tmp);
    else
        free(h->tmp);
    if (h->node)
        coh_shm_ops.destroy(h->node);
    if (h->cross)
        h->mpi->destroy(h->cross);
    if (h->flat)
        h->mpi->destroy(h->flat);
    free(h->node_of);
    free(h);
}

static hier *hier_new(const coh_transport_ops *mpi, void *flat, int rank, int size,
                      double timeout)
{
    hier *h = calloc(1, sizeof *h);
    int *node_of = malloc(sizeof(int) * (size_t)size);
    if (!h || !node_of) {
        free(h);
        free(node_of);
        return NULL;
    }
    h->mpi = mpi;
    h->flat = flat;
    h->rank = rank;
    h->size = size;
    h->timeout = timeout;
    h->node_of = node_of;
    return h;
}

/* With node_of filled in: the node's segment and the cross groups, when they pay. */
static coh_status build(hier *h)
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

static void describe(const hier *h, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%d ranks on %d nodes (", h->size, h->nnodes);
    for (int node = 0; node < h->nnodes && k < n; node++) {
        int c = 0;
        for (int r = 0; r < h->size; r++)
            c += h->node_of[r] == node;
        k += (size_t)snprintf(buf + k, n - k, "%s%d", node ? "+" : "", c);
    }
    if (k < n)
        snprintf(buf + k, n - k, ")");
}

static coh_status hier_split(void *self, int color, int key, const int *members, int nmembers,
                             int new_rank, uint64_t tag, void **out)
{
    hier *p = self;
    void *flat = NULL;
    *out = NULL;
    coh_status st = p->mpi->split(p->flat, color, key, members, nmembers, new_rank, tag, &flat);
    if (st || !flat)
        return st;
    hier *h = hier_new(p->mpi, flat, new_rank, nmembers, p->timeout);
    if (!h) {
        p->mpi->destroy(flat);
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    h->host_ranks = p->host_ranks;
    /* The members' nodes are known from the parent: renumber them in order of first rank. */
    for (int i = 0, next = 0; i < nmembers; i++) {
        int q = 0;
        while (q < i && p->node_of[members[q]] != p->node_of[members[i]])
            q++;
        h->node_of[i] = q < i ? h->node_of[q] : next++;
    }
    if ((st = build(h))) {
        hier_destroy(h);
        return coh_err_prefix(st, "split (color %d, key %d)", color, key);
    }
    char d[256];
    describe(h, d, sizeof d);
    coh_debug("comm: split (color %d): %s transport: %s", color, h->node ? "hierarchical" : "flat mpi",
              d);
    *out = h;
    return COH_OK;
}

static void *hier_alloc(void *self, size_t bytes)
{
    hier *h = self;
    return h->node ? coh_shm_ops.alloc(h->node, bytes) : h->mpi->alloc(h->flat, bytes);
}

static void hier_free(void *self, void *p)
{
    hier *h = self;
    if (h->node)
        coh_shm_ops.free(h->node, p);
    else
        h->mpi->free(h->flat, p);
}

const coh_transport_ops coh_hier_ops = {"hier", hier_run, hier_split, hier_alloc, hier_free,
                                        hier_destroy};

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
    if (!on || size < 2)
        return COH_OK;
    hier *h = hier_new(*ops, *self, rank, size, timeout_s);
    if (!h)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_status st = find_nodes(h, per_node);
    if (!st)
        st = build(h);
    char d[256];
    describe(h, d, sizeof d);
    if (st || !h->node) {
        if (!st)
            coh_debug("comm: flat mpi transport: %s", d);
        h->flat = NULL; /* still the caller's */
        hier_destroy(h);
        return st;
    }
    coh_debug("comm: hierarchical transport: %s; all-reduce %s; broadcast across nodes, then "
              "inside them", d,
              h->equal ? "as shm reduce-scatter, mpi all-reduce of shards, shm all-gather"
                       : "as shm reduce to node leaders, mpi all-reduce, shm broadcast");
    *ops = &coh_hier_ops;
    *self = h;
    return COH_OK;
}
