/* hier.c: the hierarchical transport: a shared-memory instance for the ranks of each node and
 * MPI instances across nodes, composed through the transport interface so that fingerprints,
 * deadlines, MISMATCH and PEER_LOST work as in the flat transports. All-reduce
 * (hier_allreduce.c), broadcast (hier_broadcast.c), and on equal nodes all-gather and
 * reduce-scatter (hier_gather.c) are split into node and cross-node steps; every other op runs
 * on the flat MPI instance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/log.h"
#include "comm/reduce.h"
#include "comm/transport/hier_int.h"

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

hier_work hier_work_of(const coh_op *op)
{
    hier_work w = {op->dtype == COH_BF16 || op->dtype == COH_F16, op->dtype, op->redop};
    if (w.half)
        w.t = COH_F32;
    if (w.r == COH_AVG)
        w.r = COH_SUM;
    return w;
}

void hier_finish(hier *h, const coh_op *op, hier_work w, void *recv, void *res, size_t count)
{
    if (op->redop == COH_AVG) {
        const void *src[1] = {res};
        coh_reduce_n(res, src, 1, count, w.t, COH_AVG, h->size);
    }
    if (w.half)
        coh_from_f32(recv, (const float *)res, count, op->dtype);
    else if (recv != res)
        memcpy(recv, res, count * coh_dtype_size(w.t));
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
    coh_fp mine;
    coh_fp_of(op, &mine);
    coh_op o = {COH_OP_ALLGATHER, &mine, h->fps, sizeof mine, COH_U8, COH_SUM, -1, op->seq};
    coh_status st = h->mpi->run(h->flat, &o);
    if (!st)
        st = coh_fp_mismatch(h->fps, h->size);
    if (st == COH_ERR_TIMEOUT) {
        h->abandoned = 1; /* MPI may still write the fingerprints: leave them allocated */
        h->fps = NULL;
    }
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

/* The ops the hierarchy carries, as a function of this group and the op (the same on every
 * rank, so all ranks take the same path); NULL: flat MPI. All-gather and reduce-scatter below
 * split_min bytes go flat: across a shaped link their two steps cost more than they save
 * there (docs/BENCHMARKS.md, cluster). */
static coh_status (*hier_op_of(const hier *h, const coh_op *op))(hier *, const coh_op *)
{
    if (!h->node)
        return NULL;
    uint64_t bytes = (uint64_t)op->count * coh_dtype_size(op->dtype) * (uint64_t)h->size;
    int split = h->equal && bytes >= h->split_min;
    switch (op->kind) {
    case COH_OP_ALLREDUCE: return hier_allreduce;
    case COH_OP_BROADCAST: return hier_broadcast;
    case COH_OP_ALLGATHER: return split ? hier_allgather : NULL;
    case COH_OP_REDUCE_SCATTER: return split ? hier_reduce_scatter : NULL;
    default: return NULL;
    }
}

/* Every hierarchical op first agrees on the call over MPI; an empty one ends there. */
static coh_status hier_run(void *self, const coh_op *op)
{
    hier *h = self;
    coh_status (*run)(hier *, const coh_op *) = hier_op_of(h, op);
    if (!run)
        return h->mpi->run(h->flat, op);
    coh_status st = hier_agree(h, op);
    if (st || !op->count)
        return st;
    return run(h, op);
}

/* ---- lifetime, sub-groups, the arena ------------------------------------------------------- */

void hier_destroy(void *self)
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
    free(h->fps);
    free(h);
}

hier *hier_new(const coh_transport_ops *mpi, void *flat, int rank, int size,
                      double timeout)
{
    hier *h = calloc(1, sizeof *h);
    int *node_of = malloc(sizeof(int) * 2 * (size_t)size); /* node_of, then local_of */
    coh_fp *fps = malloc(sizeof *fps * (size_t)size);
    if (!h || !node_of || !fps) {
        free(h);
        free(node_of);
        free(fps);
        return NULL;
    }
    h->mpi = mpi;
    h->flat = flat;
    h->rank = rank;
    h->size = size;
    h->timeout = timeout;
    h->node_of = node_of;
    h->local_of = node_of + size;
    h->fps = fps;
    return h;
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
    h->split_min = p->split_min;
    /* The members' nodes are known from the parent: renumber them in order of first rank. */
    for (int i = 0, next = 0; i < nmembers; i++) {
        int q = 0;
        while (q < i && p->node_of[members[q]] != p->node_of[members[i]])
            q++;
        h->node_of[i] = q < i ? h->node_of[q] : next++;
    }
    if ((st = hier_build(h))) {
        hier_destroy(h);
        return coh_err_prefix(st, "split (color %d, key %d)", color, key);
    }
    char d[256];
    hier_describe(h, d, sizeof d);
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
