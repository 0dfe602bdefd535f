/* hier_broadcast.c: broadcast over nodes that hold several ranks each: the data crosses the
 * network once per node, then spreads inside each node through shared memory.
 *     root r on node R, local index lr:  agree (MPI, all ranks)
 *     equal nodes:    local rank lr of every node: MPI broadcast from node R
 *                     | every node: shm broadcast from local rank lr
 *     unequal nodes:  node R: shm broadcast from lr (when lr is not the leader)
 *                     | leaders: MPI broadcast from node R
 *                     | every node that lacks it: shm broadcast from the leader */
#include "comm/transport/hier_int.h"

coh_status hier_broadcast(hier *h, const coh_op *op)
{
    coh_status st = COH_OK;
    int node = h->node_of[op->root], lr = h->local_of[op->root], mine = h->node_of[h->rank] == node;
    int from = h->equal ? lr : 0; /* the local rank that carries the data across */
    if (!h->equal && mine && lr != 0)
        st = hier_node_run(h, COH_OP_BROADCAST, op->recv, op->recv, op->count, op->dtype,
                           COH_SUM, lr);
    if (!st && h->local_rank == from)
        st = hier_cross_run(h, COH_OP_BROADCAST, op->recv, op->recv, op->count, op->dtype,
                            COH_SUM, node);
    if (!st && (h->equal || !mine || lr == 0))
        st = hier_node_run(h, COH_OP_BROADCAST, op->recv, op->recv, op->count, op->dtype,
                           COH_SUM, from);
    return st;
}
