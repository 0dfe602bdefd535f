/* shm_copy.c: the collectives that only move data: broadcast, all-gather, all-to-all.
 *
 * broadcast   arena:  announce | non-roots copy root's buffer | sync
 *             staged: root piece -> stage[root] | sync | non-roots copy it out
 * all-gather  small:  send -> stage[r] | announce | recv.block[j] <- stage[j] (one sync), or
 *                     from the sends as below when every send is in the arena
 *             arena:  announce | recv.block[j] <- send[j] for j != r | arrive
 *                     | recv.block[r] <- send | wait
 *             staged: send piece -> stage[r] | sync | recv.block[j].piece <- stage[j]
 * all-to-all  staged: send.block[b].piece -> stage[r].slot[b] | sync
 *                     | recv.block[j].piece <- stage[j].slot[r]
 * Plain buffers larger than a staging half (all-gather: larger than ctl->small_gather) are
 * read directly with cross-memory attach instead (shm_cma.c). Staging halves alternate between
 * rounds, so one sync per round suffices. */
#include <string.h>

#include "comm/transport/shm_int.h"

static size_t rounds_of(size_t count, size_t w) { return count ? (count + w - 1) / w : 1; }
static size_t piece_len(size_t count, size_t k, size_t w)
{
    return count > k * w ? (count - k * w < w ? count - k * w : w) : 0;
}

coh_status shm_broadcast(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bytes = op->count * esz;
    int root = op->root, par = (int)(op->seq & 1);
    char *buf = op->recv;
    coh_status st = shm_sync_first(s, op, s->rank == root ? buf : NULL, NULL, bytes, 0);
    if (st)
        return st;
    uint64_t off = shm_slot_of(s, root)->send_off[par];
    if (off != SHM_NONE) {
        if (s->rank != root && bytes)
            memcpy(buf, shm_arena(s, root) + off, bytes);
        return shm_sync(s);
    }
    if (bytes > s->ctl->half && shm_all_cma(s))
        return shm_broadcast_cma(s, op);
    size_t w = shm_piece(s, esz, 1);
    for (size_t k = 0; k < rounds_of(op->count, w); k++) {
        size_t len = piece_len(op->count, k, w) * esz;
        shm_next_round(s);
        if (s->rank == root && len)
            memcpy(shm_stage(s, root), buf + k * w * esz, len);
        if ((st = shm_sync(s)))
            return st;
        if (s->rank != root && len)
            memcpy(buf + k * w * esz, shm_stage(s, root), len);
    }
    return COH_OK;
}

static int all_sends_in_arena(shm *s, const coh_op *op)
{
    for (int j = 0; j < s->n; j++)
        if (shm_slot_of(s, j)->send_off[op->seq & 1] == SHM_NONE)
            return 0;
    return 1;
}

/* Every send in the arena: copy the peers' blocks straight from their buffers. */
static coh_status allgather_arena(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    const char *send = op->send;
    char *recv = op->recv;
    int par = (int)(op->seq & 1);
    for (int k = 1; k < s->n && bytes; k++) {
        int j = (s->rank + k) % s->n;
        memcpy(recv + (size_t)j * bytes, shm_arena(s, j) + shm_slot_of(s, j)->send_off[par],
               bytes);
    }
    /* done with the peers' buffers: the own block's copy can overlap the wait for them */
    shm_sync_arrive(s);
    char *own = recv + (size_t)s->rank * bytes;
    int apart = own + bytes <= send || own >= send + bytes;
    if (apart)
        memcpy(own, send, bytes);
    coh_status st = shm_sync_wait(s);
    if (!st && !apart && own != send) /* overlapping: once no peer reads send any more */
        memmove(own, send, bytes);
    return st;
}

/* Small blocks in one round: the copy into the staging half goes before the announce sync,
 * which then also publishes the data (one sync per op). When every send turns out to be in
 * the arena, the blocks are read from there instead: those reads need a closing sync, but
 * an input that has not just been rewritten is often still in the reader's cache. */
static coh_status allgather_small(shm *s, const coh_op *op)
{
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    char *recv = op->recv;
    shm_next_round(s);
    if (bytes)
        memcpy(shm_stage(s, s->rank), op->send, bytes);
    coh_status st = shm_sync_first(s, op, op->send, NULL, bytes, 0);
    if (st) {
        shm_undo_round(s);
        return st;
    }
    if (all_sends_in_arena(s, op))
        return allgather_arena(s, op);
    for (int k = 0; k < s->n && bytes; k++) {
        int j = (s->rank + k) % s->n;
        memcpy(recv + (size_t)j * bytes, shm_stage(s, j), bytes);
    }
    return COH_OK;
}

coh_status shm_allgather(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bytes = op->count * esz;
    const char *send = op->send;
    char *recv = op->recv;
    if (bytes <= s->ctl->small_gather && bytes <= s->ctl->half)
        return allgather_small(s, op);
    coh_status st = shm_sync_first(s, op, send, NULL, bytes, 0);
    if (st)
        return st;
    if (all_sends_in_arena(s, op))
        return allgather_arena(s, op);
    if (shm_all_cma(s))
        return shm_allgather_cma(s, op);
    size_t w = shm_piece(s, esz, 1);
    for (size_t k = 0; k < rounds_of(op->count, w); k++) {
        size_t len = piece_len(op->count, k, w) * esz, at = k * w * esz;
        shm_next_round(s);
        if (len)
            memcpy(shm_stage(s, s->rank), send + at, len);
        if ((st = shm_sync(s)))
            return st;
        for (int j = 0; j < s->n && len; j++)
            memcpy(recv + (size_t)j * bytes + at, shm_stage(s, j), len);
    }
    return COH_OK;
}

coh_status shm_alltoall(shm *s, const coh_op *op)
{
    size_t esz = coh_dtype_size(op->dtype), bytes = op->count * esz;
    const char *send = op->send;
    char *recv = op->recv;
    coh_status st = shm_sync_first(s, op, NULL, NULL, 0, 0);
    if (st)
        return st;
    size_t w = shm_piece(s, esz, s->n);
    for (size_t k = 0; k < rounds_of(op->count, w); k++) {
        size_t len = piece_len(op->count, k, w) * esz, at = k * w * esz;
        shm_next_round(s);
        char *mine = shm_stage(s, s->rank);
        for (int b = 0; b < s->n && len; b++)
            memcpy(mine + b * w * esz, send + (size_t)b * bytes + at, len);
        if ((st = shm_sync(s)))
            return st;
        for (int j = 0; j < s->n && len; j++)
            memcpy(recv + (size_t)j * bytes + at, shm_stage(s, j) + s->rank * w * esz, len);
    }
    return COH_OK;
}
