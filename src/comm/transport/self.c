/* self.c: the transport of a one-rank communicator: every collective is a local copy. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"

static coh_status self_run(void *self, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    switch (op->kind) {
    case COH_OP_ALLREDUCE:
    case COH_OP_REDUCE:
    case COH_OP_ALLGATHER:
    case COH_OP_REDUCE_SCATTER:
    case COH_OP_ALLTOALL:
        if (bytes && op->recv != op->send)
            memmove(op->recv, op->send, bytes);
        return COH_OK;
    case COH_OP_BROADCAST:
    case COH_OP_BARRIER:
        return COH_OK;
    default:
        return coh_errf(COH_ERR_INVALID, "%s: a one-rank communicator has no peer",
                        coh_opkind_name(op->kind));
    }
}

static coh_status self_split(void *self, int color, int key, const int *members, int nmembers,
                             int new_rank, uint64_t tag, void **out)
{
    *out = NULL;
    return color < 0 ? COH_OK : coh_self_open(out);
}

static void *self_alloc(void *self, size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) ? NULL : p;
}

static void self_free(void *self, void *p) { free(p); }
static void self_destroy(void *self) { free(self); }

coh_status coh_self_open(void **self)
{
    *self = malloc(1);
    return *self ? COH_OK : coh_errf(COH_ERR_NOMEM, "out of memory");
}

const coh_transport_ops coh_self_ops = {"self", self_run, self_split, self_alloc, self_free,
                                        self_destroy};
