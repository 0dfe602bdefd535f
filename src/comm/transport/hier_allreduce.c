/* hier_allreduce.c: all-reduce over nodes that hold several ranks each.
 *
 * equal nodes (L ranks on each of N nodes), bandwidth-optimal: every byte crosses the network
 * once per node, split over the L ranks of a node.
 *     rank (node n, local l):  agree (MPI, all ranks)
 *         | shm reduce-scatter: shard l of the node's sum          (block b = ceil(count / L))
 *         | MPI all-reduce of shard l with local rank l of every other node
 *         | shm all-gather of the shards
 * unequal nodes: the node leader (local rank 0) carries the whole buffer.
 *     rank:  agree | shm reduce to the leader | leaders: MPI all-reduce | shm broadcast
 * bf16/f16 travel as f32 and are rounded once at the end; avg is a sum divided at the end, so
 * both give what a flat all-reduce gives. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport/hier_int.h"

/* Padded or f32 copies are needed unless the type is its own working type and the count
 * splits evenly into the node's shards. */
static coh_status equal_nodes(hier *h, const coh_op *op, hier_work hw)
{
    coh_dtype w = hw.t;
    coh_redop r = hw.r;
    int half = hw.half;
    size_t L = (size_t)h->local_size, wsz = coh_dtype_size(w);
    size_t b = (op->count + L - 1) / L;
    int direct = !half && op->count % L == 0;
    char *buf = direct ? op->recv : hier_scratch(h, b * L * wsz);
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "out of memory for %zu elements", b * L);
    const void *send = op->send;
    if (!direct) {
        if (half)
            coh_to_f32((float *)buf, op->send, op->count, op->dtype);
        else
            memcpy(buf, op->send, op->count * wsz);
        memset(buf + op->count * wsz, 0, (b * L - op->count) * wsz);
        send = buf;
    }
    char *shard = buf + (size_t)h->local_rank * b * wsz;
    coh_status st;
    if ((st = hier_node_run(h, COH_OP_REDUCE_SCATTER, send, shard, b, w, r, -1)) ||
        (st = hier_cross_run(h, COH_OP_ALLREDUCE, shard, shard, b, w, r, -1)) ||
        (st = hier_node_run(h, COH_OP_ALLGATHER, shard, buf, b, w, r, -1)))
        return st;
    hier_finish(h, op, hw, op->recv, buf, op->count);
    return COH_OK;
}

static coh_status unequal_nodes(hier *h, const coh_op *op, hier_work hw)
{
    coh_dtype w = hw.t;
    coh_redop r = hw.r;
    int half = hw.half;
    size_t wsz = coh_dtype_size(w);
    char *buf = half ? hier_scratch(h, op->count * wsz) : op->recv;
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "out of memory for %llu elements",
                        (unsigned long long)op->count);
    const void *send = op->send;
    if (half) {
        coh_to_f32((float *)buf, op->send, op->count, op->dtype);
        send = buf;
    }
    coh_status st = hier_node_run(h, COH_OP_REDUCE, send, buf, op->count, w, r, 0);
    if (!st && h->local_rank == 0)
        st = hier_cross_run(h, COH_OP_ALLREDUCE, buf, buf, op->count, w, r, -1);
    if (!st)
        st = hier_node_run(h, COH_OP_BROADCAST, buf, buf, op->count, w, COH_SUM, 0);
    if (st)
        return st;
    hier_finish(h, op, hw, op->recv, buf, op->count);
    return COH_OK;
}

coh_status hier_allreduce(hier *h, const coh_op *op)
{
    hier_work w = hier_work_of(op);
    return h->equal ? equal_nodes(h, op, w) : unequal_nodes(h, op, w);
}
