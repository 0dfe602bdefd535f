/* shm_reduce_scatter.c: reduce-scatter over shared memory: block r of the reduction goes to
 * rank r.
 *
 * arena (every rank's send buffer in its arena): read peers' blocks directly.
 *     rank r:  announce | recv = op over send[*].block[r] | sync
 * staged: each round moves one piece of every block through the staging halves.
 *     rank r:  send.block[b].piece -> stage[r].slot[b] | sync
 *              | recv.piece = op over stage[*].slot[r]
 * Staging halves alternate, so the next round's sync protects this round's reads. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport/shm_int.h"

static coh_status in_arena(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype);
    int par = (int)(op->seq & 1);
    if (op->count) {
        const void *src[256];
        for (int j = 0; j < s->n; j++)
            src[j] = shm_arena(s, j) + shm_slot_of(s, j)->send_off[par] +
                     (size_t)s->rank * op->count * esz;
        coh_reduce_n(op->recv, src, s->n, op->count, op->dtype, op->redop, s->n);
    }
    return shm_sync(s);
}

static coh_status staged(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), w = shm_piece(s, esz, s->n);
    size_t rounds = op->count ? (op->count + w - 1) / w : 1;
    const char *send = op->send;
    char *recv = op->recv;
    for (size_t k = 0; k < rounds; k++) {
        size_t lo = k * w, len = op->count - lo < w ? op->count - lo : w;
        if (!op->count)
            len = 0;
        shm_next_round(s);
        char *mine = shm_stage(s, s->rank);
        for (int b = 0; b < s->n && len; b++)
            memcpy(mine + b * w * esz, send + (b * op->count + lo) * esz, len * esz);
        coh_status st = shm_sync(s);
        if (st)
            return st;
        if (!len)
            continue;
        const void *src[256];
        for (int j = 0; j < s->n; j++)
            src[j] = shm_stage(s, j) + s->rank * w * esz;
        coh_reduce_n(recv + lo * esz, src, s->n, len, op->dtype, op->redop, s->n);
    }
    return COH_OK;
}

coh_status shm_reduce_scatter(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bytes = op->count * esz;
    const char *send = op->send, *recv = op->recv;
    /* Peers read every block of my send but mine: my result may only land in my own block. */
    int safe = !bytes || recv == send + (size_t)s->rank * bytes ||
               recv + bytes <= send || recv >= send + (size_t)s->n * bytes;
    coh_status st = shm_sync_first(s, op, safe ? send : NULL, NULL, bytes * (size_t)s->n, 0);
    if (st)
        return st;
    int par = (int)(op->seq & 1);
    for (int j = 0; j < s->n; j++)
        if (shm_slot_of(s, j)->send_off[par] == SHM_NONE)
            return staged(s, op);
    return in_arena(s, op);
}
