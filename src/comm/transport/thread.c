/* thread.c: the transport of ranks that are threads of one process (strategy dp's devices): a
 * collective meets at a barrier, one rank (the root, else rank 0) moves all of its data serially,
 * as device 0 of torch.nn.DataParallel copies to and from every device, and a second barrier
 * hands the buffers back. Reductions fold in rank order (coh_reduce_n), so a result does not
 * depend on which thread arrived first. Host memory only, like shm, mpi, hier and self. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "comm/reduce.h"

typedef struct thr_mail { /* a send waiting for its receive (src -> dst) */
    const coh_op *op;
    int taken, refused; /* refused: the receive expected another count or type */
} thr_mail;

typedef struct thr_group {
    int n, refs;
    double timeout_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long gen; /* barrier generations passed */
    int arrived;
    const coh_op **op; /* (n) each rank's collective, valid between its two barriers */
    thr_mail *mail;    /* (n * n) [src * n + dst] */
} thr_group;

typedef struct thr_rank {
    thr_group *g;
    int rank;
    coh_fp *fps;       /* (n) */
    const void **src;  /* (n) the sources of a reduction, in rank order */
} thr_rank;

/* Waits on the group's condition until the deadline; COH_ERR_TIMEOUT past it. mu held. */
static coh_status wait_until(thr_group *g, const struct timespec *dl, const char *what)
{
    int rc = pthread_cond_timedwait(&g->cv, &g->mu, dl);
    if (rc == ETIMEDOUT)
        return coh_errf(COH_ERR_TIMEOUT, "thread transport: %s: the other ranks did not arrive "
                        "within %g s", what, g->timeout_s);
    return COH_OK;
}

static struct timespec deadline(double s)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)s;
    t.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Every rank of the group arrives before any leaves. mu held. */
static coh_status barrier(thr_group *g, const char *what)
{
    unsigned long gen = g->gen;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        return COH_OK;
    }
    struct timespec dl = deadline(g->timeout_s);
    coh_status st = COH_OK;
    while (g->gen == gen && !st)
        st = wait_until(g, &dl, what);
    return st;
}

static size_t op_bytes(const coh_op *op) { return op->count * coh_dtype_size(op->dtype); }

static void reduce_into(thr_rank *r, void *dst, size_t off, const coh_op *op)
{
    thr_group *g = r->g;
    for (int i = 0; i < g->n; i++)
        r->src[i] = (const char *)g->op[i]->send + off;
    coh_reduce_n(dst, r->src, g->n, op->count, op->dtype, op->redop,
                 op->redop == COH_AVG ? g->n : 0);
}

static void copy_to(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

/* recv of rank j, block i = send of rank i, block j, through a copy of every send (in place is
 * allowed). */
static coh_status alltoall(thr_group *g, size_t bytes)
{
    size_t n = (size_t)g->n;
    char *tmp = malloc(n * n * bytes + 1);
    if (!tmp)
        return coh_errf(COH_ERR_NOMEM, "thread transport: out of memory for an alltoall");
    for (size_t i = 0; i < n; i++)
        memcpy(tmp + i * n * bytes, g->op[i]->send, n * bytes);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < n; i++)
            memcpy((char *)g->op[j]->recv + i * bytes, tmp + (i * n + j) * bytes, bytes);
    free(tmp);
    return COH_OK;
}

/* The mover's part: every rank's buffers are posted and stay until the second barrier. */
static coh_status move(thr_rank *r, const coh_op *op)
{
    thr_group *g = r->g;
    size_t bytes = op_bytes(op);
    switch (op->kind) {
    case COH_OP_ALLREDUCE:
        reduce_into(r, g->op[0]->recv, 0, op);
        for (int i = 1; i < g->n; i++)
            copy_to(g->op[i]->recv, g->op[0]->recv, bytes);
        return COH_OK;
    case COH_OP_REDUCE:
        reduce_into(r, g->op[op->root]->recv, 0, op);
        return COH_OK;
    case COH_OP_BROADCAST:
        for (int i = 0; i < g->n; i++)
            copy_to(g->op[i]->recv, g->op[op->root]->send, bytes);
        return COH_OK;
    case COH_OP_ALLGATHER:
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->n; i++)
                copy_to((char *)g->op[j]->recv + (size_t)i * bytes, g->op[i]->send, bytes);
        return COH_OK;
    case COH_OP_REDUCE_SCATTER:
        for (int i = 0; i < g->n; i++)
            reduce_into(r, g->op[i]->recv, (size_t)i * bytes, op);
        return COH_OK;
    case COH_OP_ALLTOALL:
        return alltoall(g, bytes);
    default:
        return COH_OK; /* barrier */
    }
}

static coh_status collective(thr_rank *r, const coh_op *op)
{
    thr_group *g = r->g;
    const char *name = coh_opkind_name(op->kind);
    pthread_mutex_lock(&g->mu);
    g->op[r->rank] = op;
    coh_status st = barrier(g, name);
    pthread_mutex_unlock(&g->mu);
    if (st)
        return st;
    /* every rank checks the fingerprints itself, so each gets the same error */
    int same = 1;
    for (int i = 0; i < g->n; i++) {
        coh_fp_of(g->op[i], &r->fps[i]);
        same &= coh_fp_equal(&r->fps[i], &r->fps[0]);
    }
    coh_status bad = same ? COH_OK : coh_fp_mismatch(r->fps, g->n);
    int mover = op->kind == COH_OP_REDUCE || op->kind == COH_OP_BROADCAST ? op->root : 0;
    if (!bad && r->rank == mover)
        bad = move(r, op);
    pthread_mutex_lock(&g->mu);
    st = barrier(g, name);
    pthread_mutex_unlock(&g->mu);
    return bad ? bad : st;
}

/* A send waits until its receiver has copied it; a receive until its sender posts. */
static coh_status p2p(thr_rank *r, const coh_op *op)
{
    thr_group *g = r->g;
    int send = op->kind == COH_OP_SEND;
    thr_mail *m = &g->mail[send ? r->rank * g->n + op->root : op->root * g->n + r->rank];
    struct timespec dl = deadline(g->timeout_s);
    coh_status st = COH_OK;
    pthread_mutex_lock(&g->mu);
    if (send) {
        m->op = op;
        m->taken = m->refused = 0;
        pthread_cond_broadcast(&g->cv);
        while (!m->taken && !st)
            st = wait_until(g, &dl, "send");
        if (!st && m->refused)
            st = coh_errf(COH_ERR_MISMATCH, "send to rank %d: %llu x %s sent, the receive "
                          "expected another count or type", op->root,
                          (unsigned long long)op->count, coh_dtype_name(op->dtype));
        m->op = NULL;
    } else {
        while ((!m->op || m->taken) && !st)
            st = wait_until(g, &dl, "recv");
        if (!st && (m->op->count != op->count || m->op->dtype != op->dtype)) {
            m->refused = 1;
            st = coh_errf(COH_ERR_MISMATCH, "recv from rank %d: %llu x %s sent, %llu x %s "
                          "expected", op->root, (unsigned long long)m->op->count,
                          coh_dtype_name(m->op->dtype), (unsigned long long)op->count,
                          coh_dtype_name(op->dtype));
        } else if (!st) {
            copy_to(op->recv, m->op->send, op_bytes(op));
        }
        if (m->op) /* the sender is released either way */
            m->taken = 1;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

static coh_status thr_run(void *self, const coh_op *op)
{
    thr_rank *r = self;
    if (op->kind == COH_OP_SEND || op->kind == COH_OP_RECV)
        return p2p(r, op);
    return collective(r, op);
}

static coh_status thr_split(void *self, int color, int key, const int *members, int nmembers,
                            int new_rank, uint64_t tag, void **out)
{
    thr_rank *r = self;
    *out = NULL;
    if (color < 0)
        return COH_OK;
    if (nmembers == 1) /* a group of its own */
        return coh_thread_open(1, r->g->timeout_s, out);
    return coh_errf(COH_ERR_UNSUPPORTED, "split: a thread group splits into single ranks only "
                    "(asked for %d ranks)", nmembers);
}

static void *thr_alloc(void *self, size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) ? NULL : p;
}

static void thr_free(void *self, void *p) { free(p); }

static void group_free(thr_group *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->op);
    free(g->mail);
    free(g);
}

static void thr_destroy(void *self)
{
    thr_rank *r = self;
    if (!r)
        return;
    thr_group *g = r->g;
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last)
        group_free(g);
    free(r->fps);
    free(r->src);
    free(r);
}

coh_status coh_thread_open(int n, double timeout_s, void **ranks)
{
    thr_group *g = calloc(1, sizeof *g);
    if (!g || !(g->op = calloc((size_t)n, sizeof *g->op)) ||
        !(g->mail = calloc((size_t)n * (size_t)n, sizeof *g->mail))) {
        if (g)
            free(g->op);
        free(g);
        return coh_errf(COH_ERR_NOMEM, "out of memory for a thread group");
    }
    g->n = n;
    g->timeout_s = timeout_s;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (int i = 0; i < n; i++) {
        thr_rank *r = calloc(1, sizeof *r);
        if (r) {
            r->fps = calloc((size_t)n, sizeof *r->fps);
            r->src = calloc((size_t)n, sizeof *r->src);
        }
        if (!r || !r->fps || !r->src) {
            if (r) {
                free(r->fps);
                free(r->src);
            }
            free(r);
            for (int k = 0; k < i; k++)
                thr_destroy(ranks[k]);
            if (i == 0)
                group_free(g);
            return coh_errf(COH_ERR_NOMEM, "out of memory for a thread group");
        }
        r->g = g;
        r->rank = i;
        g->refs++;
        ranks[i] = r;
    }
    return COH_OK;
}

const coh_transport_ops coh_thread_ops = {"thread", thr_run, thr_split, thr_alloc, thr_free,
                                          thr_destroy};
