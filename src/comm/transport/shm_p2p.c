/* shm_p2p.c: send and receive between two ranks through the pair's channel: the sender
 * writes a chunk and posts it, the receiver copies it out and marks it consumed; a send
 * returns once its last chunk is posted. The receiver checks count and type against the
 * sender's call.
 *     sender:   wait consumed == posted | chunk -> channel | posted++
 *     receiver: wait posted > consumed | channel -> buf | consumed++
 * A message larger than a chunk goes direct when both ranks can use cross-memory attach: the
 * sender posts its buffer's address once and waits until the receiver has read the whole
 * message with process_vm_readv.
 *     sender:   wait consumed == posted | address -> channel | posted++ | wait consumed == posted
 *     receiver: wait posted > consumed | sender's buf -> buf | consumed++
 * One handshake whatever the size, and the copy is made by the receiver, the rank that is
 * waiting for the message. Chunk by chunk, each handshake needs a thread of each rank to get a
 * core; on cores busy computing each can wait for the scheduler, which made a 256 KiB
 * activation arrive milliseconds after it was sent (pipeline parallelism, 1 thread per rank). */
#include <string.h>

#include "comm/transport/shm_int.h"

static int direct(shm *s, int peer, size_t bytes)
{
    return bytes > s->ctl->chan_bytes && shm_slot_of(s, s->rank)->cma &&
           shm_slot_of(s, peer)->cma;
}

static coh_status send_direct(shm *s, const coh_op *op, shm_chan *ch, size_t bytes)
{
    uint32_t posted = atomic_load(&ch->posted);
    coh_status st = shm_wait(s, &ch->consumed, posted, op->root, "waiting for the receiver");
    if (st)
        return st;
    ch->len = bytes;
    ch->va = (uint64_t)(uintptr_t)op->send;
    coh_fp_of(op, &ch->fp);
    shm_post(s, &ch->posted);
    return shm_wait(s, &ch->consumed, posted + 1, op->root, "waiting for the receiver to read");
}

coh_status shm_send(shm *s, const coh_op *op)
{
    shm_chan *ch = shm_chan_of(s, s->rank, op->root);
    char *cbuf = shm_chan_buf(s, s->rank, op->root);
    size_t bytes = op->count * coh_dtype_size(op->dtype), cap = s->ctl->chan_bytes;
    size_t chunks = bytes ? (bytes + cap - 1) / cap : 1;
    const char *src = op->send;
    if (direct(s, op->root, bytes))
        return send_direct(s, op, ch, bytes);
    for (size_t c = 0; c < chunks; c++) {
        uint32_t posted = atomic_load(&ch->posted);
        coh_status st = shm_wait(s, &ch->consumed, posted, op->root, "waiting for the receiver");
        if (st)
            return st;
        size_t len = bytes - c * cap < cap ? bytes - c * cap : cap;
        if (len)
            memcpy(cbuf, src + c * cap, len);
        ch->len = len;
        coh_fp_of(op, &ch->fp);
        shm_post(s, &ch->posted);
    }
    return COH_OK;
}

coh_status shm_recv(shm *s, const coh_op *op)
{
    shm_chan *ch = shm_chan_of(s, op->root, s->rank);
    const char *cbuf = shm_chan_buf(s, op->root, s->rank);
    size_t bytes = op->count * coh_dtype_size(op->dtype), cap = s->ctl->chan_bytes;
    size_t chunks = bytes ? (bytes + cap - 1) / cap : 1;
    char *dst = op->recv;
    int whole = direct(s, op->root, bytes);
    if (whole)
        chunks = 1;
    for (size_t c = 0; c < chunks; c++) {
        uint32_t consumed = atomic_load(&ch->consumed);
        coh_status st = shm_wait(s, &ch->posted, consumed + 1, op->root, "waiting for the sender");
        if (st)
            return st;
        if (ch->fp.count != op->count || ch->fp.dtype != (int32_t)op->dtype) {
            char a[160], b[160];
            coh_fp mine;
            coh_fp_of(op, &mine);
            coh_fp_describe(&mine, a, sizeof a);
            coh_fp_describe(&ch->fp, b, sizeof b);
            shm_post(s, &ch->consumed);
            return coh_errf(COH_ERR_MISMATCH, "collective mismatch: rank %d called %s from rank "
                            "%d but rank %d called %s", s->rank, a, op->root, op->root, b);
        }
        if (whole) {
            st = shm_peer_read(s, op->root, dst, ch->va, ch->len);
            shm_post(s, &ch->consumed); /* the sender waits for this even when the read failed */
            return st;
        }
        if (ch->len)
            memcpy(dst + c * cap, cbuf, ch->len);
        shm_post(s, &ch->consumed);
    }
    return COH_OK;
}
