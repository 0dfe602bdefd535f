/* shm_cma.c: collectives on plain (private) buffers without copying them into shared memory:
 * ranks read each other's buffers with cross-memory attach (process_vm_readv), as Open MPI's
 * single-copy path does. After the announce sync (addresses published):
 * all-reduce      rank r: for each chunk of block r: peers' send.chunk -> my scratch,
 *                         recv.chunk = op over (send[0..n-1].chunk) in rank order
 *                         | sync | recv.block[b] <- recv[b].block[b] for b != r | sync
 * reduce-scatter  rank r: the same for block r of every send, into recv | sync
 * all-gather      rank r: recv.block[j] <- send[j] for every j | sync
 * broadcast       non-roots: buf <- root's buf | sync
 * The scratch is this rank's own staging area, idle during this op: every peer passed the
 * announce sync, so no one still reads it. In place works as in the arena algorithm: a rank
 * writes only its own block before the first sync. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport/shm_int.h"

static size_t block_elems(size_t count, int n)
{
    size_t b = (count + (size_t)n - 1) / (size_t)n;
    return (b + 63) / 64 * 64;
}

static void block_of(size_t count, size_t bc, int b, size_t *lo, size_t *hi)
{
    *lo = (size_t)b * bc < count ? (size_t)b * bc : count;
    *hi = *lo + bc < count ? *lo + bc : count;
}

/* dst[0, hi - lo) = op over every rank's send[lo, hi). */
static coh_status reduce_range(shm *s, const coh_op *op, size_t lo, size_t hi, char *dst)
{
    size_t esz = coh_dtype_size(op->dtype);
    int par = (int)(op->seq & 1), peers = s->n - 1;
    size_t chunk = peers ? 2 * s->ctl->half / (size_t)peers / esz : hi - lo + 1;
    chunk = chunk > 64 ? chunk / 64 * 64 : chunk; /* >= 4: a half holds at least 4096 bytes */
    char *scratch = shm_stage(s, s->rank) - (s->round & 1) * s->ctl->half; /* both halves */
    for (size_t off = lo; off < hi; off += chunk) {
        size_t len = hi - off < chunk ? hi - off : chunk;
        const void *src[256];
        for (int j = 0, k = 0; j < s->n; j++) {
            if (j == s->rank) {
                src[j] = (const char *)op->send + off * esz;
                continue;
            }
            char *tmp = scratch + (size_t)k++ * chunk * esz;
            coh_status st = shm_peer_read(s, j, tmp, shm_slot_of(s, j)->send_va[par] + off * esz,
                                          len * esz);
            if (st)
                return st;
            src[j] = tmp;
        }
        coh_reduce_n(dst + (off - lo) * esz, src, s->n, len, op->dtype, op->redop, s->n);
    }
    return COH_OK;
}

coh_status shm_allreduce_cma(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bc = block_elems(op->count, s->n), lo, hi;
    int par = (int)(op->seq & 1);
    block_of(op->count, bc, s->rank, &lo, &hi);
    coh_status st = reduce_range(s, op, lo, hi, (char *)op->recv + lo * esz);
    if (st || (st = shm_sync(s)))
        return st;
    for (int b = 0; b < s->n; b++) {
        block_of(op->count, bc, b, &lo, &hi);
        if (b == s->rank || hi == lo)
            continue;
        st = shm_peer_read(s, b, (char *)op->recv + lo * esz,
                           shm_slot_of(s, b)->recv_va[par] + lo * esz, (hi - lo) * esz);
        if (st)
            return st;
    }
    return shm_sync(s); /* peers are done reading my buffers before I return them */
}

coh_status shm_reduce_scatter_cma(shm *s, const coh_op *op)
{
    size_t lo = (size_t)s->rank * op->count;
    coh_status st = reduce_range(s, op, lo, lo + op->count, op->recv);
    return st ? st : shm_sync(s);
}

/* Beyond half the last-level cache the gathered result cannot stay cached: the own block is
 * then copied with streaming stores, which spare reading the destination first. */
#define STREAM_RECV_BYTES (16u << 20)

coh_status shm_allgather_cma(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    int par = (int)(op->seq & 1);
    char *recv = op->recv;
    /* peers first, each rank starting after itself so that no rank is read by all at once */
    for (int k = 1; k < s->n && bytes; k++) {
        int j = (s->rank + k) % s->n;
        coh_status st = shm_peer_read(s, j, recv + (size_t)j * bytes,
                                      shm_slot_of(s, j)->send_va[par], bytes);
        if (st)
            return st;
    }
    /* done with the peers' buffers: the copy of the own block can overlap the wait for them */
    shm_sync_arrive(s);
    char *own = recv + (size_t)s->rank * bytes;
    const char *send = op->send;
    int apart = own + bytes <= send || own >= send + bytes;
    if (apart && bytes * (size_t)s->n >= STREAM_RECV_BYTES)
        coh_copy_stream(own, send, bytes);
    else if (apart)
        memcpy(own, send, bytes);
    coh_status st = shm_sync_wait(s);
    if (!st && !apart && own != send) /* overlapping: only once no peer reads send any more */
        memmove(own, send, bytes);
    return st;
}

coh_status shm_broadcast_cma(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    int par = (int)(op->seq & 1);
    coh_status st = COH_OK;
    if (s->rank != op->root && bytes)
        st = shm_peer_read(s, op->root, op->recv, shm_slot_of(s, op->root)->send_va[par], bytes);
    return st ? st : shm_sync(s);
}

int shm_all_cma(shm *s)
{
    for (int j = 0; j < s->n; j++)
        if (!shm_slot_of(s, j)->cma)
            return 0;
    return 1;
}
