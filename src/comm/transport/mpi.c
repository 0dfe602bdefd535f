/* mpi.c: the MPI transport, built as the plugin libcohort_mpi.so (libcohort never links
 * libmpi; mpi_load.c opens this when the job was started by mpirun or COHORT_COMM=mpi).
 * Every op first exchanges fingerprints point to point with every rank (so a rank that never
 * arrives is named on timeout and a different call is reported on all ranks), then runs the
 * nonblocking MPI collective, polled against the deadline. bf16/f16 travel as f32 and are
 * rounded once at the end. */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"

#define FP_TAG 7001
#define P2P_TAG 7002

static const coh_transport_host *H;

typedef struct mpi_tp {
    MPI_Comm comm, fp_comm; /* data, and fingerprints (kept apart from user traffic) */
    int rank, size;
    double timeout;
} mpi_tp;

static coh_status mpi_fail(int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    return H->errf(COH_ERR_SYSTEM, "%s failed: %s", what, msg);
}

static MPI_Datatype mpi_type(coh_dtype t)
{
    switch (t) {
    case COH_F64: return MPI_DOUBLE;
    case COH_I32: return MPI_INT32_T;
    case COH_I64: return MPI_INT64_T;
    case COH_U8: return MPI_UINT8_T;
    default: return MPI_FLOAT; /* f32, and bf16/f16 carried as f32 */
    }
}

static MPI_Op mpi_op(coh_redop op)
{
    return op == COH_MIN ? MPI_MIN : op == COH_MAX ? MPI_MAX : op == COH_PROD ? MPI_PROD : MPI_SUM;
}

/* Poll requests until done or the deadline; on timeout name the peers still pending
 * (peers[i] is who completes reqs[i], or -1 when unknown). */
static coh_status wait_all(mpi_tp *m, MPI_Request *reqs, const int *peers, int n,
                           const coh_op *op, double deadline, const char *phase)
{
    for (long spins = 0;; spins++) {
        int done = 0, err = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS)
            return mpi_fail(err, phase);
        if (done)
            return COH_OK;
        if (spins > 1000)
            sched_yield();
        if (spins % 64 || H->now() < deadline)
            continue;
        char d[160], missing[256] = "";
        size_t k = 0;
        coh_fp fp;
        H->fp_of(op, &fp);
        H->fp_describe(&fp, d, sizeof d);
        for (int i = 0; i < n && k < sizeof missing - 12; i++) {
            int flag = 1;
            if (reqs[i] != MPI_REQUEST_NULL)
                MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            if (!flag && peers && peers[i] >= 0)
                k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "",
                                      peers[i]);
        }
        /* inside an MPI collective no request belongs to one peer: MPI cannot say who */
        if (!k)
            return H->errf(COH_ERR_TIMEOUT, "%s on rank %d timed out after %g s (%s): a rank "
                           "never arrived (MPI does not say which)", d, m->rank, m->timeout, phase);
        return H->errf(COH_ERR_TIMEOUT, "%s on rank %d timed out after %g s (%s): rank %s never "
                       "arrived", d, m->rank, m->timeout, phase, missing);
    }
}

/* Send my fingerprint to every rank, receive theirs, compare (a barrier as well). */
static coh_status exchange_fp(mpi_tp *m, const coh_op *op, double deadline)
{
    int n = m->size;
    coh_fp *fps = calloc((size_t)n, sizeof *fps);
    MPI_Request *reqs = calloc(2 * (size_t)n, sizeof *reqs);
    int *peers = calloc(2 * (size_t)n, sizeof *peers);
    if (!fps || !reqs || !peers) {
        free(fps), free(reqs), free(peers);
        return H->errf(COH_ERR_NOMEM, "out of memory");
    }
    H->fp_of(op, &fps[m->rank]);
    int k = 0;
    for (int r = 0; r < n; r++) {
        if (r == m->rank)
            continue;
        peers[k] = r;
        MPI_Irecv(&fps[r], (int)sizeof *fps, MPI_BYTE, r, FP_TAG, m->fp_comm, &reqs[k++]);
        peers[k] = -1;
        MPI_Isend(&fps[m->rank], (int)sizeof *fps, MPI_BYTE, r, FP_TAG, m->fp_comm, &reqs[k++]);
    }
    coh_status st = wait_all(m, reqs, peers, k, op, deadline, "exchanging fingerprints");
    if (st == COH_ERR_TIMEOUT)
        return st; /* requests still pending may write fps later: leave it allocated */
    if (!st)
        st = H->fp_mismatch(fps, n);
    free(fps), free(reqs), free(peers);
    return st;
}

/* Start the nonblocking MPI call for op on buffers s -> r holding `count` elements of the MPI
 * type (f32 for bf16/f16). */
static int start(mpi_tp *m, const coh_op *op, const void *s, void *r, int count, MPI_Request *q)
{
    MPI_Datatype t = mpi_type(op->dtype);
    MPI_Op o = mpi_op(op->redop);
    const void *in = s == r ? MPI_IN_PLACE : s;
    switch (op->kind) {
    case COH_OP_ALLREDUCE: return MPI_Iallreduce(in, r, count, t, o, m->comm, q);
    case COH_OP_REDUCE:
        if (m->rank != op->root)
            return MPI_Ireduce(s, NULL, count, t, o, op->root, m->comm, q);
        return MPI_Ireduce(in, r, count, t, o, op->root, m->comm, q);
    case COH_OP_BROADCAST: return MPI_Ibcast(r, count, t, op->root, m->comm, q);
    case COH_OP_ALLGATHER: return MPI_Iallgather(s, count, t, r, count, t, m->comm, q);
    case COH_OP_REDUCE_SCATTER:
        return MPI_Ireduce_scatter_block(in, r, count, t, o, m->comm, q);
    default: return MPI_Ialltoall(s, count, t, r, count, t, m->comm, q);
    }
}

/* Sizes in elements of the send and receive sides of op. */
static void sides(const mpi_tp *m, const coh_op *op, size_t *ns, size_t *nr)
{
    size_t n = (size_t)m->size, c = op->count;
    switch (op->kind) {
    case COH_OP_ALLGATHER: *ns = c, *nr = c * n; break;
    case COH_OP_REDUCE_SCATTER: *ns = c * n, *nr = c; break;
    case COH_OP_ALLTOALL: *ns = *nr = c * n; break;
    default: *ns = *nr = c; break;
    }
}

/* Private copies where MPI's in-place rules differ from cohort's, or where bf16/f16 travel as
 * f32: returns the buffers to hand to MPI (tmp_s/tmp_r are freed by the caller). */
static coh_status stage_in(mpi_tp *m, const coh_op *op, const void **s, void **r, void **tmp_s,
                           void **tmp_r)
{
    size_t ns, nr, esz = H->dtype_size(op->dtype);
    sides(m, op, &ns, &nr);
    int half = op->dtype == COH_BF16 || op->dtype == COH_F16;
    const char *send = op->send;
    char *recv = op->recv;
    int alias = op->kind == COH_OP_ALLTOALL ? send == recv
                : op->kind == COH_OP_REDUCE_SCATTER ? send != recv && recv == send + (size_t)m->rank * op->count * esz
                : op->kind == COH_OP_ALLGATHER ? send == recv + (size_t)m->rank * op->count * esz
                : 0;
    *s = send;
    *r = recv;
    if (op->kind == COH_OP_BROADCAST)
        *s = recv;
    if (!half && !alias)
        return COH_OK;
    size_t cs = half ? 4 : esz;
    *tmp_s = malloc(ns * cs + 64);
    *tmp_r = malloc(nr * cs + 64);
    if (!*tmp_s || !*tmp_r)
        return H->errf(COH_ERR_NOMEM, "out of memory for %zu elements", ns + nr);
    const void *src = op->kind == COH_OP_BROADCAST ? recv : send;
    if (src && ns && (op->kind != COH_OP_BROADCAST || m->rank == op->root)) {
        if (half)
            H->to_f32(*tmp_s, src, ns, op->dtype);
        else
            memcpy(*tmp_s, src, ns * esz);
    }
    *s = *tmp_s;
    *r = op->kind == COH_OP_BROADCAST ? *tmp_s : *tmp_r;
    return COH_OK;
}

static void stage_out(mpi_tp *m, const coh_op *op, void *r, size_t nr)
{
    if (op->kind == COH_OP_REDUCE && m->rank != op->root)
        return;
    int half = op->dtype == COH_BF16 || op->dtype == COH_F16;
    if (op->redop == COH_AVG && op->kind != COH_OP_BROADCAST && op->kind != COH_OP_ALLGATHER &&
        op->kind != COH_OP_ALLTOALL) {
        const void *src[1] = {r};
        H->reduce(r, src, 1, nr, half ? COH_F32 : op->dtype, COH_AVG, m->size);
    }
    if (r == op->recv)
        return;
    if (half)
        H->from_f32(op->recv, r, nr, op->dtype);
    else
        memcpy(op->recv, r, nr * H->dtype_size(op->dtype));
}

static coh_status collective(mpi_tp *m, const coh_op *op, double deadline)
{
    size_t ns, nr;
    sides(m, op, &ns, &nr);
    if (ns > INT_MAX || nr > INT_MAX)
        return H->errf(COH_ERR_UNSUPPORTED, "%s of %llu elements: the mpi transport takes at "
                       "most %d per call", H->opkind_name(op->kind),
                       (unsigned long long)op->count, INT_MAX);
    const void *s;
    void *r, *tmp_s = NULL, *tmp_r = NULL;
    coh_status st = stage_in(m, op, &s, &r, &tmp_s, &tmp_r);
    MPI_Request q = MPI_REQUEST_NULL;
    if (!st) {
        int err = start(m, op, s, r, (int)op->count, &q);
        st = err == MPI_SUCCESS ? wait_all(m, &q, NULL, 1, op, deadline, "moving data")
                                : mpi_fail(err, H->opkind_name(op->kind));
    }
    if (st == COH_ERR_TIMEOUT)
        return st; /* MPI may still write the staging buffers */
    if (!st)
        stage_out(m, op, r, nr);
    free(tmp_s);
    free(tmp_r);
    return st;
}

/* Point to point: the sender's fingerprint goes first, so the receiver can check count and
 * type; on a mismatch the data is still received (into scratch) to keep the pair in step. */
static coh_status p2p(mpi_tp *m, const coh_op *op, double deadline)
{
    size_t bytes = op->count * H->dtype_size(op->dtype);
    if (bytes > INT_MAX)
        return H->errf(COH_ERR_UNSUPPORTED, "%s of %zu bytes: the mpi transport takes at most "
                       "%d", H->opkind_name(op->kind), bytes, INT_MAX);
    coh_fp mine, theirs;
    H->fp_of(op, &mine);
    MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int peers[2] = {op->root, op->root};
    if (op->kind == COH_OP_SEND) {
        MPI_Isend(&mine, (int)sizeof mine, MPI_BYTE, op->root, P2P_TAG, m->fp_comm, &q[0]);
        MPI_Isend(op->send, (int)bytes, MPI_BYTE, op->root, P2P_TAG, m->comm, &q[1]);
        return wait_all(m, q, peers, 2, op, deadline, "waiting for the receiver");
    }
    MPI_Irecv(&theirs, (int)sizeof theirs, MPI_BYTE, op->root, P2P_TAG, m->fp_comm, &q[0]);
    coh_status st = wait_all(m, q, peers, 1, op, deadline, "waiting for the sender");
    if (st)
        return st;
    int same = theirs.count == mine.count && theirs.dtype == mine.dtype;
    MPI_Status status;
    MPI_Message msg;
    MPI_Mprobe(op->root, P2P_TAG, m->comm, &msg, &status);
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    void *dst = same ? op->recv : malloc((size_t)got + 1);
    MPI_Mrecv(dst, got, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (same)
        return COH_OK;
    free(dst);
    char a[160], b[160];
    H->fp_describe(&mine, a, sizeof a);
    H->fp_describe(&theirs, b, sizeof b);
    return H->errf(COH_ERR_MISMATCH, "collective mismatch: rank %d called %s from rank %d but "
                   "rank %d called %s", m->rank, a, op->root, op->root, b);
}

static coh_status mpi_run(void *self, const coh_op *op)
{
    mpi_tp *m = self;
    double deadline = H->now() + m->timeout;
    if (op->kind == COH_OP_SEND || op->kind == COH_OP_RECV)
        return p2p(m, op, deadline);
    coh_status st = exchange_fp(m, op, deadline);
    if (st || op->kind == COH_OP_BARRIER) /* the exchange itself was the barrier */
        return st;
    return collective(m, op, deadline);
}

static coh_status wrap(MPI_Comm comm, double timeout, void **out)
{
    mpi_tp *m = calloc(1, sizeof *m);
    if (!m)
        return H->errf(COH_ERR_NOMEM, "out of memory");
    m->comm = comm;
    m->timeout = timeout;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_dup(comm, &m->fp_comm);
    MPI_Comm_rank(comm, &m->rank);
    MPI_Comm_size(comm, &m->size);
    *out = m;
    return COH_OK;
}

static coh_status mpi_split(void *self, int color, int key, const int *members, int nmembers,
                            int new_rank, uint64_t tag, void **out)
{
    mpi_tp *m = self;
    MPI_Comm sub;
    *out = NULL;
    int err = MPI_Comm_split(m->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Comm_split");
    return sub == MPI_COMM_NULL ? COH_OK : wrap(sub, m->timeout, out);
}

static void *mpi_alloc(void *self, size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) ? NULL : p;
}

static void mpi_free(void *self, void *p) { free(p); }

static void mpi_destroy(void *self)
{
    mpi_tp *m = self;
    MPI_Comm_free(&m->fp_comm);
    MPI_Comm_free(&m->comm);
    free(m);
}

static const coh_transport_ops mpi_ops = {"mpi", mpi_run, mpi_split, mpi_alloc, mpi_free,
                                          mpi_destroy};

/* MPI is finalised at exit, after every communicator is gone. After a failed communicator
 * (a timeout, a lost peer) MPI_Finalize would wait for the stuck peer forever, and mpirun with
 * it: abort instead, which ends the whole job (the error was printed already). */
static void finalize(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (done)
        return;
    if (H->comm_failed())
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
}

__attribute__((visibility("default"))) coh_status cohort_transport_mpi_open(
    const coh_transport_host *host, double timeout_s, const coh_transport_ops **ops, void **self,
    int *rank, int *size)
{
    H = host;
    int inited = 0, provided;
    MPI_Initialized(&inited);
    if (!inited) {
        /* the async progress thread calls MPI, never at the same time as the caller on the
         * same communicator; a pipeline's sender thread calls it on other communicators while
         * the caller receives: that needs MPI_THREAD_MULTIPLE */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return H->errf(COH_ERR_SYSTEM, "MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED)
            return H->errf(COH_ERR_UNSUPPORTED, "this MPI provides thread level %d: cohort needs "
                           "MPI_THREAD_SERIALIZED (and MPI_THREAD_MULTIPLE for pipelines)",
                           provided);
        atexit(finalize);
    }
    MPI_Comm world;
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    coh_status st = wrap(world, timeout_s, self);
    if (st)
        return st;
    *ops = &mpi_ops;
    *rank = ((mpi_tp *)*self)->rank;
    *size = ((mpi_tp *)*self)->size;
    return COH_OK;
}
