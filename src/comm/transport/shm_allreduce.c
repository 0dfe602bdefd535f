/* shm_allreduce.c: all-reduce and reduce over shared memory, three algorithms:
 *
 * one phase (up to 16 KiB, 64 KiB with more ranks than cores): every rank reduces every input
 * itself.
 *     rank r:  copy in -> stage[r] | sync | recv = stage[0] op ... op stage[n-1]
 *
 * reduce-scatter + all-gather, staged (plain buffers): the vector is cut into n blocks and
 * each round moves one piece of every block through the staging halves.
 *     rank r:  send pieces -> stage[r] | sync | stage[r].piece[r] = op over stage[*].piece[r]
 *              | sync | recv.piece[b] <- stage[b].piece[b] for every b (reduce: root only)
 *
 * reduce-scatter + all-gather reading private buffers directly: shm_cma.c, used
 * for plain buffers from four staging halves (1 MiB) when every rank may read its peers.
 *
 * reduce-scatter + all-gather in the arena (both buffers of every rank in its arena): no copy
 * in; ranks read each other's inputs directly and write their block of the result straight
 * into every rank's output, a cached piece at a time (one sync after the announce).
 *     rank r:  announce | for each piece p of block r: recv.p = op over send[*].p,
 *                         recv[b].p <- recv.p for b != r | sync
 * In place this is safe because block r of every buffer is read and written by rank r only,
 * each piece read before it is written.
 *
 * Every result is folded in rank order, so all ranks hold bit-identical results. Staging
 * halves alternate between rounds: a rank rewrites a half only after a later sync proved
 * every peer has finished reading it. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport/shm_int.h"

typedef struct range { size_t lo, hi; } range;

static range clip(size_t lo, size_t len, size_t end)
{
    range r = {lo < end ? lo : end, 0};
    r.hi = lo + len < end ? lo + len : end;
    if (r.hi < r.lo)
        r.hi = r.lo;
    return r;
}

/* Elements per block: a multiple of 64 so that blocks start on cache lines. */
static size_t block_elems(size_t count, int n)
{
    size_t b = (count + (size_t)n - 1) / (size_t)n;
    return (b + 63) / 64 * 64;
}

static coh_status one_phase(shm *s, const coh_op *op, int root)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    shm_next_round(s);
    if (bytes)
        memcpy(shm_stage(s, s->rank), op->send, bytes);
    coh_status st = shm_sync_first(s, op, NULL, NULL, 0, 0);
    if (st)
        shm_undo_round(s);
    if (st || (root >= 0 && root != s->rank) || !bytes)
        return st;
    const void *src[256];
    for (int j = 0; j < s->n; j++)
        src[j] = shm_stage(s, j);
    coh_reduce_n(op->recv, src, s->n, op->count, op->dtype, op->redop, s->n);
    return COH_OK;
}

static coh_status staged(shm *s, const coh_op *op, int root)
{
    size_t esz = coh_dtype_size(op->dtype), bc = block_elems(op->count, s->n);
    size_t w = shm_piece(s, esz, s->n), rounds = bc ? (bc + w - 1) / w : 1;
    const char *send = op->send;
    char *recv = op->recv;
    for (size_t k = 0; k < rounds; k++) {
        shm_next_round(s);
        char *mine = shm_stage(s, s->rank);
        for (int b = 0; b < s->n; b++) {
            range r = clip(b * bc + k * w, w, op->count);
            r.hi = r.hi < (b + 1) * bc ? r.hi : (b + 1) * bc;
            if (r.hi > r.lo)
                memcpy(mine + b * w * esz, send + r.lo * esz, (r.hi - r.lo) * esz);
        }
        coh_status st = shm_sync(s);
        if (st)
            return st;
        range me = clip(s->rank * bc + k * w, w, op->count);
        me.hi = me.hi < (s->rank + 1) * bc ? me.hi : (s->rank + 1) * bc;
        if (me.hi > me.lo) {
            const void *src[256];
            for (int j = 0; j < s->n; j++)
                src[j] = shm_stage(s, j) + s->rank * w * esz;
            coh_reduce_n(mine + s->rank * w * esz, src, s->n, me.hi - me.lo, op->dtype,
                         op->redop, s->n);
        }
        if ((st = shm_sync(s)))
            return st;
        if (root >= 0 && root != s->rank)
            continue;
        for (int b = 0; b < s->n; b++) {
            range r = clip(b * bc + k * w, w, op->count);
            r.hi = r.hi < (b + 1) * bc ? r.hi : (b + 1) * bc;
            if (r.hi > r.lo)
                memcpy(recv + r.lo * esz, shm_stage(s, b) + b * w * esz, (r.hi - r.lo) * esz);
        }
    }
    return COH_OK;
}

/* Reduced in pieces small enough to be still cached when they are copied to the peers. */
#define PUSH_PIECE_BYTES (32u << 10)
/* Beyond this the results cannot stay cached: pushed with streaming stores. */
#define PUSH_STREAM_BYTES (16u << 20)

static coh_status in_arena(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bc = block_elems(op->count, s->n);
    size_t step = PUSH_PIECE_BYTES / esz, bytes = op->count * esz;
    int par = (int)(op->seq & 1);
    range me = clip(s->rank * bc, bc, op->count);
    char *recv = op->recv, *dst[256];
    const char *from[256];
    for (int j = 0; j < s->n; j++) {
        from[j] = shm_arena(s, j) + shm_slot_of(s, j)->send_off[par];
        dst[j] = shm_arena(s, j) + shm_slot_of(s, j)->recv_off[par];
    }
    for (size_t lo = me.lo; lo < me.hi; lo += step) {
        size_t len = me.hi - lo < step ? me.hi - lo : step;
        const void *src[256];
        for (int j = 0; j < s->n; j++)
            src[j] = from[j] + lo * esz;
        coh_reduce_n(recv + lo * esz, src, s->n, len, op->dtype, op->redop, s->n);
        for (int k = 1; k < s->n; k++) {
            char *to = dst[(s->rank + k) % s->n] + lo * esz;
            if (bytes >= PUSH_STREAM_BYTES)
                coh_copy_stream(to, recv + lo * esz, len * esz);
            else
                memcpy(to, recv + lo * esz, len * esz);
        }
    }
    /* every block has reached every rank, and no one reads my buffers any more */
    return shm_sync(s);
}

static int all_in_arena(shm *s, const coh_op *op)
{
    int par = (int)(op->seq & 1);
    for (int j = 0; j < s->n; j++)
        if (shm_slot_of(s, j)->send_off[par] == SHM_NONE ||
            shm_slot_of(s, j)->recv_off[par] == SHM_NONE)
            return 0;
    return 1;
}

coh_status shm_allreduce(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    if (bytes <= s->ctl->one_phase && bytes <= s->ctl->half)
        return one_phase(s, op, -1);
    coh_status st = shm_sync_first(s, op, op->send, op->recv, bytes, bytes);
    if (st)
        return st;
    if (all_in_arena(s, op))
        return in_arena(s, op);
    /* below four staging halves (1 MiB by default) a few staged rounds beat the syscalls */
    int cma = bytes >= 4 * s->ctl->half && shm_all_cma(s);
    return cma ? shm_allreduce_cma(s, op) : staged(s, op, -1);
}

coh_status shm_reduce(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    if (bytes <= s->ctl->one_phase && bytes <= s->ctl->half)
        return one_phase(s, op, op->root);
    coh_status st = shm_sync_first(s, op, NULL, NULL, 0, 0);
    return st ? st : staged(s, op, op->root);
}
