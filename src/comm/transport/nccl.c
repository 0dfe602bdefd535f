/* nccl.c: the NCCL transport, built as the plug-in libcohort_nccl.so: collectives on the device
 * memory of the rank's GPU. Each op first all-gathers its fingerprint (so a rank calling
 * something else is reported on all ranks, as the other transports promise), then runs on the
 * transport's stream. Communicators are non-blocking: every wait polls the stream and
 * ncclCommGetAsyncError against the deadline and aborts the communicator (ncclCommAbort) on a
 * timeout or an NCCL error, so a dead peer ends the op with an error instead of a hang. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/transport/nccl_plugin.h"

static const coh_transport_host *H;

typedef struct nccl_tp {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, size, aborted;
    double timeout;
    coh_fp *fps;     /* device: size fingerprints */
    coh_fp *fps_host;
} nccl_tp;

static void nap(void)
{
    struct timespec ts = {0, 50 * 1000}; /* 50 us: ranks may outnumber cores */
    nanosleep(&ts, NULL);
}

static coh_status cuda_err(cudaError_t e, const char *what)
{
    return H->errf(COH_ERR_SYSTEM, "nccl transport: %s: %s", what, cudaGetErrorString(e));
}

/* The communicator's pending work (its init, a split, or the queued op) until done, an error or
 * the deadline: then it is aborted and the op fails naming why. */
static coh_status wait_comm(nccl_tp *t, int stream_too, const char *what)
{
    double deadline = H->now() + t->timeout;
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(t->comm, &async);
        if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            ncclResult_t why = r != ncclSuccess ? r : async;
            coh_status st = H->errf(COH_ERR_PEER_LOST, "nccl %s failed: %s (%s); the "
                                    "communicator is aborted", what, ncclGetErrorString(why),
                                    ncclGetLastError(t->comm));
            ncclCommAbort(t->comm); /* frees it: the message is taken first */
            t->aborted = 1;
            return st;
        }
        int done = async == ncclSuccess;
        if (done && stream_too) {
            cudaError_t e = cudaStreamQuery(t->stream);
            if (e != cudaSuccess && e != cudaErrorNotReady)
                return cuda_err(e, what);
            done = e == cudaSuccess;
        }
        if (done)
            return COH_OK;
        if (H->now() > deadline) {
            ncclCommAbort(t->comm);
            t->aborted = 1;
            return H->errf(COH_ERR_TIMEOUT, "nccl %s: not done after %.0f s (a peer is gone or "
                           "never called it); the communicator is aborted", what, t->timeout);
        }
        nap();
    }
}

static int nccl_type(coh_dtype d, ncclDataType_t *out)
{
    switch (d) {
    case COH_F32: *out = ncclFloat32; return 1;
    case COH_F64: *out = ncclFloat64; return 1;
    case COH_BF16: *out = ncclBfloat16; return 1;
    case COH_F16: *out = ncclFloat16; return 1;
    case COH_I32: *out = ncclInt32; return 1;
    case COH_I64: *out = ncclInt64; return 1;
    case COH_U8: *out = ncclUint8; return 1;
    default: return 0;
    }
}

static ncclRedOp_t nccl_op(coh_redop op)
{
    switch (op) {
    case COH_AVG: return ncclAvg;
    case COH_MIN: return ncclMin;
    case COH_MAX: return ncclMax;
    case COH_PROD: return ncclProd;
    default: return ncclSum;
    }
}

/* Every rank's fingerprint, compared: a different call is COH_ERR_MISMATCH on all ranks. */
static coh_status check_fp(nccl_tp *t, const coh_op *op)
{
    coh_fp mine;
    H->fp_of(op, &mine);
    cudaError_t e = cudaMemcpyAsync(t->fps + t->rank, &mine, sizeof mine, cudaMemcpyHostToDevice,
                                    t->stream);
    if (e != cudaSuccess)
        return cuda_err(e, "fingerprint");
    ncclResult_t r = ncclAllGather(t->fps + t->rank, t->fps, sizeof mine, ncclUint8, t->comm,
                                   t->stream);
    coh_status st = r == ncclSuccess || r == ncclInProgress ? wait_comm(t, 1, "fingerprint")
                                                            : COH_ERR_SYSTEM;
    if (st == COH_ERR_SYSTEM && r != ncclSuccess && r != ncclInProgress)
        return H->errf(st, "nccl fingerprint: %s", ncclGetErrorString(r));
    if (st)
        return st;
    e = cudaMemcpy(t->fps_host, t->fps, (size_t)t->size * sizeof mine, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return cuda_err(e, "fingerprint");
    for (int i = 0; i < t->size; i++)
        if (memcmp(&t->fps_host[i], &t->fps_host[0], sizeof mine))
            return H->fp_mismatch(t->fps_host, t->size);
    return COH_OK;
}

/* Queues the op's NCCL calls on the stream. */
static ncclResult_t enqueue(nccl_tp *t, const coh_op *op, ncclDataType_t ty, void *tmp)
{
    size_t n = op->count, es = H->dtype_size(op->dtype);
    ncclRedOp_t ro = nccl_op(op->redop);
    switch (op->kind) {
    case COH_OP_ALLREDUCE:
        return ncclAllReduce(op->send, op->recv, n, ty, ro, t->comm, t->stream);
    case COH_OP_REDUCE:
        return ncclReduce(op->send, op->recv, n, ty, ro, op->root, t->comm, t->stream);
    case COH_OP_BROADCAST:
        return ncclBroadcast(op->recv, op->recv, n, ty, op->root, t->comm, t->stream);
    case COH_OP_ALLGATHER:
        return ncclAllGather(op->send, op->recv, n, ty, t->comm, t->stream);
    case COH_OP_REDUCE_SCATTER: /* recv == send (result in block 0) goes through tmp */
        return ncclReduceScatter(op->send, tmp ? tmp : op->recv, n, ty, ro, t->comm, t->stream);
    case COH_OP_BARRIER:
        return ncclAllReduce(t->fps, t->fps, 1, ncclInt32, ncclSum, t->comm, t->stream);
    case COH_OP_SEND:
        return ncclSend(op->send, n, ty, op->root, t->comm, t->stream);
    case COH_OP_RECV:
        return ncclRecv(op->recv, n, ty, op->root, t->comm, t->stream);
    case COH_OP_ALLTOALL: {
        ncclResult_t r = ncclGroupStart();
        char *to = tmp ? (char *)tmp : (char *)op->recv;
        for (int p = 0; r == ncclSuccess && p < t->size; p++) {
            r = ncclSend((const char *)op->send + (size_t)p * n * es, n, ty, p, t->comm,
                         t->stream);
            if (r == ncclSuccess)
                r = ncclRecv(to + (size_t)p * n * es, n, ty, p, t->comm, t->stream);
        }
        ncclResult_t g = ncclGroupEnd();
        return r != ncclSuccess ? r : g;
    }
    }
    return ncclInvalidArgument;
}

static coh_status nccl_run(void *self, const coh_op *op)
{
    nccl_tp *t = self;
    ncclDataType_t ty;
    if (t->aborted)
        return H->errf(COH_ERR_PEER_LOST, "nccl communicator aborted by an earlier failure");
    if (!nccl_type(op->dtype, &ty))
        return H->errf(COH_ERR_INVALID, "nccl transport: unsupported type %d", (int)op->dtype);
    /* the backend's kernels run on its own stream: what they wrote must be there first */
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return cuda_err(e, "device sync");
    /* point to point involves two ranks only: no fingerprint round over all of them */
    int p2p = op->kind == COH_OP_SEND || op->kind == COH_OP_RECV;
    coh_status st = p2p ? COH_OK : check_fp(t, op);
    if (st)
        return st;
    /* NCCL has no in-place form of these two: the result goes through a buffer */
    size_t bytes = op->count * H->dtype_size(op->dtype);
    if (op->kind == COH_OP_ALLTOALL)
        bytes *= (size_t)t->size;
    void *tmp = NULL;
    int via_tmp = (op->kind == COH_OP_REDUCE_SCATTER && t->size > 1) ||
                  op->kind == COH_OP_ALLTOALL;
    if (via_tmp && op->recv == op->send &&
        (e = cudaMallocAsync(&tmp, bytes ? bytes : 1, t->stream)) != cudaSuccess)
        return cuda_err(e, "in-place buffer");
    ncclResult_t r = enqueue(t, op, ty, tmp);
    if (r != ncclSuccess && r != ncclInProgress)
        st = H->errf(COH_ERR_SYSTEM, "nccl %s: %s", H->opkind_name(op->kind),
                     ncclGetErrorString(r));
    else
        st = wait_comm(t, 1, H->opkind_name(op->kind));
    if (tmp) {
        if (!st && (e = cudaMemcpy(op->recv, tmp, bytes, cudaMemcpyDeviceToDevice)))
            st = cuda_err(e, "in-place copy");
        cudaFreeAsync(tmp, t->stream);
    }
    return st;
}

static coh_status make(const coh_nccl_boot *b, nccl_tp **out)
{
    nccl_tp *t = calloc(1, sizeof *t);
    if (!t)
        return H->errf(COH_ERR_NOMEM, "out of memory for the nccl transport");
    t->rank = b->rank;
    t->size = b->size;
    t->timeout = b->timeout_s;
    t->fps_host = calloc((size_t)b->size, sizeof *t->fps_host);
    cudaError_t e;
    if (!t->fps_host) {
        free(t);
        return H->errf(COH_ERR_NOMEM, "out of memory for the nccl transport");
    }
    if ((e = cudaSetDevice(b->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&t->fps, (size_t)b->size * sizeof *t->fps)) != cudaSuccess) {
        if (t->stream)
            cudaStreamDestroy(t->stream);
        free(t->fps_host);
        free(t);
        return cuda_err(e, "device");
    }
    *out = t;
    return COH_OK;
}

static void nccl_destroy(void *self)
{
    nccl_tp *t = self;
    if (!t)
        return;
    if (t->comm && !t->aborted) {
        ncclResult_t r = ncclCommFinalize(t->comm); /* non-blocking: wait for it */
        if (r == ncclSuccess || r == ncclInProgress)
            (void)wait_comm(t, 0, "finalize");
        if (!t->aborted) /* wait_comm aborts (and frees) a communicator that fails */
            ncclCommDestroy(t->comm);
    }
    cudaFree(t->fps);
    cudaStreamDestroy(t->stream);
    free(t->fps_host);
    free(t);
}

static coh_status nccl_split(void *self, int color, int key, const int *members, int nmembers,
                             int new_rank, uint64_t tag, void **out);

static void *nccl_alloc(void *self, size_t bytes) { return NULL; } /* callers bring memory */
static void nccl_free(void *self, void *p) {}

static const coh_transport_ops ops = {"nccl", nccl_run, nccl_split, nccl_alloc, nccl_free,
                                      nccl_destroy};

static ncclConfig_t nonblocking(void)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    return c;
}

static coh_status nccl_split(void *self, int color, int key, const int *members, int nmembers,
                             int new_rank, uint64_t tag, void **out)
{
    nccl_tp *p = self, *t;
    coh_nccl_boot b = {new_rank, nmembers, 0, p->timeout, NULL, NULL};
    int dev = 0;
    cudaGetDevice(&dev);
    b.device = dev;
    coh_status st = make(&b, &t);
    if (st)
        return st;
    ncclConfig_t cfg = nonblocking();
    ncclResult_t r = ncclCommSplit(p->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                   &t->comm, &cfg);
    if (r == ncclSuccess || r == ncclInProgress) {
        if ((st = wait_comm(p, 0, "split")) == COH_OK && t->comm)
            st = wait_comm(t, 0, "split");
    } else {
        st = H->errf(COH_ERR_SYSTEM, "nccl split: %s", ncclGetErrorString(r));
    }
    if (st) {
        t->comm = NULL;
        nccl_destroy(t);
        return st;
    }
    *out = t;
    return COH_OK;
}

__attribute__((visibility("default"))) coh_status
cohort_transport_nccl_open(const coh_transport_host *host, const coh_nccl_boot *boot,
                           const coh_transport_ops **out_ops, void **self)
{
    H = host;
    ncclUniqueId id;
    if (boot->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            memset(&id, 0, sizeof id); /* sent anyway, so no rank waits on a broadcast */
    }
    coh_status st = boot->bcast(boot->ctx, &id, sizeof id);
    if (st)
        return st;
    nccl_tp *t;
    if ((st = make(boot, &t)))
        return st;
    ncclConfig_t cfg = nonblocking();
    ncclResult_t r = ncclCommInitRankConfig(&t->comm, boot->size, id, boot->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        st = H->errf(COH_ERR_SYSTEM, "nccl init: %s", ncclGetErrorString(r));
    else
        st = wait_comm(t, 0, "init");
    if (st) {
        if (!t->aborted && t->comm)
            ncclCommAbort(t->comm);
        t->comm = NULL;
        nccl_destroy(t);
        return st;
    }
    *out_ops = &ops;
    *self = t;
    return COH_OK;
}
