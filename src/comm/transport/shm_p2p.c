/* shm_p2p.c: send and receive between two ranks through the pair's channel: the sender
 * writes a chunk and posts it, the receiver copies it out and marks it consumed; a send
 * returns once its last chunk is posted. The receiver checks count and type against the
 * sender's call.
 *     sender:   wait consumed == posted | chunk -> channel | posted++
 *     receiver: wait posted > consumed | channel -> buf | consumed++ */
#include <string.h>

#include "comm/transport/shm_int.h"

coh_status shm_send(shm *s, const coh_op *op)
{
    shm_chan *ch = shm_chan_of(s, s->rank, op->root);
    char *cbuf = shm_chan_buf(s, s->rank, op->root);
    size_t bytes = op->count * coh_dtype_size(op->dtype), cap = s->ctl->chan_bytes;
    size_t chunks = bytes ? (bytes + cap - 1) / cap : 1;
    const char *src = op->send;
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
        if (ch->len)
            memcpy(dst + c * cap, cbuf, ch->len);
        shm_post(s, &ch->consumed);
    }
    return COH_OK;
}
