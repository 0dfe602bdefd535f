/* hier_gather.c: all-gather and reduce-scatter over nodes with equal rank counts (L ranks on
 * each of N nodes; unequal nodes run them flat). Inside the scratch buffer the blocks are kept
 * by (local rank l, node j), so that the blocks of one local rank are contiguous; block
 * (l, j) belongs to the world rank that is local rank l of node j.
 *     all-gather:      MPI all-gather of my block among local rank l of every node -> segment l
 *                      | shm all-gather of the segments | blocks to world order
 *     reduce-scatter:  blocks to (l, j) order | shm reduce-scatter: segment l summed over the
 *                      node | MPI reduce-scatter of segment l among local rank l of every node
 * Each byte crosses the network once per node. bf16/f16 are reduced in f32 and rounded once;
 * avg is a sum divided at the end. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport/hier_int.h"

/* dst[(l, j)] = src[r] when to_local, the reverse otherwise, for every world rank r (local
 * rank l of node j); blocks of c elements. */
static void permute(const hier *h, char *dst, const char *src, size_t c, size_t esz, int to_local)
{
    size_t N = (size_t)h->nnodes, b = c * esz;
    for (int r = 0; r < h->size; r++) {
        size_t local = ((size_t)h->local_of[r] * N + (size_t)h->node_of[r]) * b, world = (size_t)r * b;
        memcpy(dst + (to_local ? local : world), src + (to_local ? world : local), b);
    }
}

coh_status hier_allgather(hier *h, const coh_op *op)
{
    coh_status st;
    size_t c = op->count, esz = coh_dtype_size(op->dtype), N = (size_t)h->nnodes;
    char *s = hier_scratch(h, c * (size_t)h->size * esz);
    if (!s)
        return coh_errf(COH_ERR_NOMEM, "out of memory for %zu elements", c * (size_t)h->size);
    char *seg = s + (size_t)h->local_rank * N * c * esz;
    if ((st = hier_cross_run(h, COH_OP_ALLGATHER, op->send, seg, c, op->dtype, COH_SUM, -1)) ||
        (st = hier_node_run(h, COH_OP_ALLGATHER, seg, s, N * c, op->dtype, COH_SUM, -1)))
        return st;
    permute(h, op->recv, s, c, esz, 0);
    return COH_OK;
}

coh_status hier_reduce_scatter(hier *h, const coh_op *op)
{
    coh_status st;
    hier_work hw = hier_work_of(op);
    int half = hw.half;
    coh_dtype w = hw.t;
    coh_redop r = hw.r;
    size_t c = op->count, nc = (size_t)h->size * c, N = (size_t)h->nnodes, wsz = coh_dtype_size(w);
    /* scratch: [f32 copy of send, for bf16/f16] [blocks in (l, j) order] [my result] */
    char *s = hier_scratch(h, ((half ? 2 : 1) * nc + c) * wsz);
    if (!s)
        return coh_errf(COH_ERR_NOMEM, "out of memory for %zu elements", 2 * nc + c);
    const char *src = op->send;
    if (half) {
        coh_to_f32((float *)s, op->send, nc, op->dtype);
        src = s;
        s += nc * wsz;
    }
    char *seg = s + (size_t)h->local_rank * N * c * wsz, *mine = s + nc * wsz;
    permute(h, s, src, c, wsz, 1);
    if ((st = hier_node_run(h, COH_OP_REDUCE_SCATTER, s, seg, N * c, w, r, -1)) ||
        (st = hier_cross_run(h, COH_OP_REDUCE_SCATTER, seg, mine, c, w, r, -1)))
        return st;
    hier_finish(h, op, hw, op->recv, mine, c);
    return COH_OK;
}
