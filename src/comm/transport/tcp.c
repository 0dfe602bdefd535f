/* tcp.c: the TCP transport's ops over a full mesh of connections (tcp_open.c): every op first
 * exchanges fingerprints with every rank, then moves data in direct phases (reduce-scatter to
 * chunk owners, then all-gather of the reduced chunks), each rank reducing its chunk from all
 * ranks' data in rank order with coh_reduce_n, so results equal the shm transport's bit for bit.
 * One poll() loop drives all transfers of a phase; a closed connection names the dead rank,
 * the deadline names the ranks that never arrived. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cohort/clock.h"
#include "comm/reduce.h"
#include "comm/transport/tcp_int.h"

typedef struct xfer {
    int peer, send;
    char *buf;
    size_t len, done;
} xfer;

/* A phase: the transfers to run together (at most a few per peer, run in order). */
typedef struct phase {
    xfer *x;
    int n, cap;
    struct pollfd *p;
    int *who;
} phase;

static void add(phase *ph, int peer, int send, const void *buf, size_t len)
{
    if (len && ph->n < ph->cap)
        ph->x[ph->n++] = (xfer){peer, send, (char *)buf, len, 0};
}

static coh_status phase_init(phase *ph, int cap)
{
    ph->n = 0;
    ph->cap = cap;
    ph->x = malloc(sizeof *ph->x * (size_t)cap);
    ph->p = malloc(sizeof *ph->p * (size_t)cap);
    ph->who = malloc(sizeof *ph->who * (size_t)cap);
    if (ph->x && ph->p && ph->who)
        return COH_OK;
    free(ph->x), free(ph->p), free(ph->who);
    ph->x = NULL, ph->p = NULL, ph->who = NULL;
    return coh_errf(COH_ERR_NOMEM, "out of memory for a tcp phase");
}

static void phase_free(phase *ph)
{
    free(ph->x), free(ph->p), free(ph->who);
}

static const char *what_of(const coh_op *op, char *buf, size_t n)
{
    coh_fp fp;
    coh_fp_of(op, &fp);
    coh_fp_describe(&fp, buf, n);
    return buf;
}

/* How long a survivor that lost a peer waits for its other connections to end too, before it
 * names the dead. A rank that noticed the death first may end before the dead rank's own
 * sockets close (a killed process closes them last, after unmapping its memory), and this rank
 * may see that survivor's connection end first: waiting names the dead rank as well. Every
 * survivor ends its sending side at once (lost()), so survivors do not wait on each other: the
 * wait ends when every other connection has ended, and only a peer that neither failed nor
 * noticed costs the full grace, once, on a job that is failing anyway. */
#define LOST_GRACE_S 2.0

/* Other ranks whose connections have ended too, "; rank 3's connection ended too" each,
 * waiting for them as LOST_GRACE_S says. Not "died": a survivor ends its connections too. */
static void also_dead(tcp *t, int first, char *buf, size_t n)
{
    buf[0] = '\0';
    struct pollfd *p = malloc(sizeof *p * (size_t)t->size);
    int *who = malloc(sizeof *who * (size_t)t->size);
    char *ended = calloc((size_t)t->size, 1);
    if (!p || !who || !ended) {
        free(p), free(who), free(ended);
        return;
    }
    double deadline = coh_now_s() + LOST_GRACE_S;
    for (;;) {
        int np = 0;
        for (int r = 0; r < t->size; r++)
            if (r != t->rank && r != first && !ended[r]) {
                /* only hang-ups are asked for: a peer still sending does not wake the poll */
                p[np] = (struct pollfd){t->fd[r], POLLRDHUP, 0};
                who[np++] = r;
            }
        double left = deadline - coh_now_s();
        if (np == 0 || left <= 0)
            break;
        if (poll(p, (nfds_t)np, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < np; i++)
            ended[who[i]] |= p[i].revents != 0;
    }
    size_t k = 0;
    for (int r = 0; r < t->size && k < n - 32; r++)
        if (ended[r])
            k += (size_t)snprintf(buf + k, n - k, "; rank %d's connection ended too",
                                  t->world[r]);
    free(p), free(who), free(ended);
}

static coh_status lost(tcp *t, const coh_op *op, int peer, int err)
{
    char d[160], more[400], how[160];
    /* the communicator is broken for good: tell every peer now, by ending what this rank sends */
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            shutdown(t->fd[r], SHUT_WR);
    also_dead(t, peer, more, sizeof more);
    if (!err)
        snprintf(how, sizeof how, "closed");
    else if (err == ECONNRESET)
        snprintf(how, sizeof how, "was reset");
    else
        snprintf(how, sizeof how, "failed: %s", strerror(err));
    t->broken = coh_errf(COH_ERR_PEER_LOST, "%s on rank %d: rank %d died (its connection %s)%s",
                         what_of(op, d, sizeof d), t->world[t->rank], t->world[peer], how, more);
    return t->broken;
}

static coh_status late(tcp *t, const coh_op *op, phase *ph)
{
    char d[160], list[256] = "";
    size_t k = 0;
    for (int r = 0; r < t->size && k < sizeof list - 16; r++) {
        int pending = 0;
        for (int i = 0; i < ph->n; i++)
            pending |= ph->x[i].peer == r && ph->x[i].done < ph->x[i].len;
        if (pending)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", k ? ", " : "", t->world[r]);
    }
    t->broken = coh_errf(COH_ERR_TIMEOUT, "%s on rank %d timed out after %g s: rank %s never "
                         "arrived", what_of(op, d, sizeof d), t->world[t->rank], t->timeout, list);
    return t->broken;
}

/* Moves as much of x as the socket takes now: 0 (done or would block), else errno (-1: closed). */
static int step(tcp *t, xfer *x)
{
    int fd = t->fd[x->peer];
    while (x->done < x->len) {
        ssize_t k = x->send ? send(fd, x->buf + x->done, x->len - x->done, MSG_NOSIGNAL)
                            : recv(fd, x->buf + x->done, x->len - x->done, 0);
        if (k > 0)
            x->done += (size_t)k;
        else if (k == 0)
            return -1;
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        else if (errno != EINTR)
            return errno;
    }
    return 0;
}

/* Runs every transfer of the phase; transfers to one peer in one direction go in order. */
static coh_status pump(tcp *t, phase *ph, const coh_op *op, double deadline)
{
    for (;;) {
        int np = 0;
        for (int i = 0; i < ph->n; i++) {
            xfer *x = &ph->x[i];
            int blocked = 0;
            for (int k = 0; k < np && !blocked; k++) /* an earlier one on this fd and side */
                blocked = ph->who[k] >= 0 && ph->x[ph->who[k]].peer == x->peer &&
                          ph->x[ph->who[k]].send == x->send;
            if (x->done == x->len || blocked)
                continue;
            int e = step(t, x);
            if (e)
                return lost(t, op, x->peer, e < 0 ? 0 : e);
            if (x->done < x->len) {
                ph->p[np] = (struct pollfd){t->fd[x->peer], x->send ? POLLOUT : POLLIN, 0};
                ph->who[np++] = i;
            }
        }
        if (!np)
            return COH_OK;
        double left = deadline - coh_now_s();
        if (left <= 0)
            return late(t, op, ph);
        int r = poll(ph->p, (nfds_t)np, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return coh_errf(COH_ERR_SYSTEM, "tcp transport: poll failed: %s", strerror(errno));
    }
}

static void *scratch(tcp *t, size_t bytes)
{
    if (bytes > t->tmp_bytes) {
        free(t->tmp);
        t->tmp = malloc(bytes);
        t->tmp_bytes = t->tmp ? bytes : 0;
    }
    return t->tmp;
}

static coh_status exchange_fp(tcp *t, const coh_op *op, double deadline)
{
    phase ph;
    coh_status st = phase_init(&ph, 2 * t->size);
    if (st)
        return st;
    coh_fp_of(op, &t->fps[t->rank]);
    for (int j = 0; j < t->size; j++)
        if (j != t->rank) {
            add(&ph, j, 1, &t->fps[t->rank], sizeof(coh_fp));
            add(&ph, j, 0, &t->fps[j], sizeof(coh_fp));
        }
    st = pump(t, &ph, op, deadline);
    phase_free(&ph);
    return st ? st : coh_fp_mismatch(t->fps, t->size);
}

static size_t lo_of(size_t count, int j, int n) { return count * (size_t)j / (size_t)n; }

/* All-reduce (root < 0) or reduce to root: chunk j is reduced by rank j. */
static coh_status reduce_op(tcp *t, const coh_op *op, int root, double deadline)
{
    int n = t->size, me = t->rank;
    size_t esz = coh_dtype_size(op->dtype), c = op->count;
    size_t m0 = lo_of(c, me, n), ml = lo_of(c, me + 1, n) - m0;
    char *tmp = scratch(t, ((size_t)n + 1) * ml * esz + 1);
    phase ph;
    if (!tmp)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a tcp reduction");
    coh_status st = phase_init(&ph, 2 * n);
    const char *send = op->send;
    char *recv = op->recv;
    for (int j = 0; j < n && !st; j++) {
        t->src[j] = j == me ? send + m0 * esz : tmp + (size_t)j * ml * esz;
        if (j != me) {
            size_t o = lo_of(c, j, n);
            add(&ph, j, 1, send + o * esz, (lo_of(c, j + 1, n) - o) * esz);
            add(&ph, j, 0, t->src[j], ml * esz);
        }
    }
    if (!st)
        st = pump(t, &ph, op, deadline);
    char *dst = root < 0 || root == me ? recv + m0 * esz : tmp + (size_t)n * ml * esz;
    if (!st)
        coh_reduce_n(dst, t->src, n, ml, op->dtype, op->redop, op->redop == COH_AVG ? n : 0);
    ph.n = 0;
    for (int j = 0; j < n && !st; j++) {
        size_t o = lo_of(c, j, n), len = (lo_of(c, j + 1, n) - o) * esz;
        if (j == me)
            continue;
        if (root < 0 || root == j)
            add(&ph, j, 1, dst, ml * esz);
        if (root < 0 || root == me)
            add(&ph, j, 0, recv + o * esz, len);
    }
    if (!st)
        st = pump(t, &ph, op, deadline);
    phase_free(&ph);
    return st;
}

/* Broadcast: the root scatters the buffer over the other ranks, which then all-gather it. */
static coh_status bcast(tcp *t, const coh_op *op, double deadline)
{
    int n = t->size, me = t->rank, root = op->root, k = n - 1;
    size_t esz = coh_dtype_size(op->dtype), c = op->count;
    char *buf = op->recv;
    phase ph;
    coh_status st = phase_init(&ph, 2 * n);
    if (st || n == 1)
        return phase_free(&ph), st;
    int q = (me - root - 1 + n) % n; /* my chunk among the k non-roots */
    for (int j = 0; j < n; j++) {
        int qj = (j - root - 1 + n) % n;
        size_t o = lo_of(c, qj, k), len = (lo_of(c, qj + 1, k) - o) * esz;
        if (me == root && j != root)
            add(&ph, j, 1, buf + o * esz, len);
        else if (j == root && me != root)
            add(&ph, j, 0, buf + lo_of(c, q, k) * esz, (lo_of(c, q + 1, k) - lo_of(c, q, k)) * esz);
    }
    st = pump(t, &ph, op, deadline);
    ph.n = 0;
    for (int j = 0; j < n && me != root && !st; j++) {
        if (j == root || j == me)
            continue;
        int qj = (j - root - 1 + n) % n;
        size_t o = lo_of(c, qj, k);
        add(&ph, j, 1, buf + lo_of(c, q, k) * esz, (lo_of(c, q + 1, k) - lo_of(c, q, k)) * esz);
        add(&ph, j, 0, buf + o * esz, (lo_of(c, qj + 1, k) - o) * esz);
    }
    if (!st)
        st = pump(t, &ph, op, deadline);
    phase_free(&ph);
    return st;
}

/* All-gather and all-to-all: block j of rank i goes to rank j (all-to-all) or rank i's only
 * block to everyone (all-gather). */
static coh_status exchange(tcp *t, const coh_op *op, int a2a, double deadline)
{
    int n = t->size, me = t->rank;
    size_t b = op->count * coh_dtype_size(op->dtype);
    const char *send = op->send;
    char *recv = op->recv;
    int inplace = a2a && send == recv;
    char *tmp = inplace ? scratch(t, (size_t)n * b + 1) : NULL;
    phase ph;
    if (inplace && !tmp)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a tcp all-to-all");
    coh_status st = phase_init(&ph, 2 * n);
    for (int j = 0; j < n && !st; j++) {
        if (j == me)
            continue;
        add(&ph, j, 1, a2a ? send + (size_t)j * b : send, b);
        add(&ph, j, 0, (inplace ? tmp : recv) + (size_t)j * b, b);
    }
    if (!st)
        st = pump(t, &ph, op, deadline);
    phase_free(&ph);
    if (st)
        return st;
    if (b)
        memmove(recv + (size_t)me * b, a2a ? send + (size_t)me * b : send, b);
    for (int j = 0; inplace && j < n; j++)
        if (j != me && b)
            memcpy(recv + (size_t)j * b, tmp + (size_t)j * b, b);
    return COH_OK;
}

/* Reduce-scatter: block j of every rank goes to rank j, which reduces them in rank order. */
static coh_status reduce_scatter(tcp *t, const coh_op *op, double deadline)
{
    int n = t->size, me = t->rank;
    size_t b = op->count * coh_dtype_size(op->dtype);
    const char *send = op->send, *mine = send + (size_t)me * b;
    char *recv = op->recv, *tmp = scratch(t, (size_t)n * b + 1);
    phase ph;
    if (!tmp)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a tcp reduce-scatter");
    coh_status st = phase_init(&ph, 2 * n);
    for (int j = 0; j < n && !st; j++) {
        t->src[j] = j == me ? mine : tmp + (size_t)j * b;
        if (j != me) {
            add(&ph, j, 1, send + (size_t)j * b, b);
            add(&ph, j, 0, t->src[j], b);
        }
    }
    if (!st)
        st = pump(t, &ph, op, deadline);
    phase_free(&ph);
    if (st)
        return st;
    /* recv overlapping the send buffer other than at my own block: reduce from a copy */
    if (recv != mine && recv < send + (size_t)n * b && send < recv + b && b) {
        memcpy(tmp + (size_t)me * b, mine, b);
        t->src[me] = tmp + (size_t)me * b;
    }
    coh_reduce_n(recv, t->src, n, op->count, op->dtype, op->redop,
                 op->redop == COH_AVG ? n : 0);
    return COH_OK;
}

/* Point to point: the sender's fingerprint, then the data; a receive that expected another
 * count or type still drains the data, so the stream stays in step. */
static coh_status p2p(tcp *t, const coh_op *op, double deadline)
{
    int peer = op->root;
    size_t bytes = op->count * coh_dtype_size(op->dtype);
    coh_fp mine, theirs;
    coh_fp_of(op, &mine);
    phase ph;
    coh_status st = phase_init(&ph, 2);
    if (st)
        return st;
    if (op->kind == COH_OP_SEND) {
        add(&ph, peer, 1, &mine, sizeof mine);
        add(&ph, peer, 1, op->send, bytes);
        st = pump(t, &ph, op, deadline);
        phase_free(&ph);
        return st;
    }
    add(&ph, peer, 0, &theirs, sizeof theirs);
    st = pump(t, &ph, op, deadline);
    if (!st && theirs.kind != COH_OP_SEND)
        st = t->broken = coh_errf(COH_ERR_MISMATCH, "recv from rank %d on rank %d: it called "
                                  "a collective, not send", t->world[peer], t->world[t->rank]);
    if (st)
        return phase_free(&ph), st;
    int same = theirs.count == mine.count && theirs.dtype == mine.dtype;
    size_t tb = theirs.count * coh_dtype_size((coh_dtype)theirs.dtype);
    void *dst = same ? op->recv : scratch(t, tb + 1);
    ph.n = 0;
    add(&ph, peer, 0, dst, same ? bytes : tb);
    st = dst ? pump(t, &ph, op, deadline) : coh_errf(COH_ERR_NOMEM, "out of memory");
    phase_free(&ph);
    if (st || same)
        return st;
    char a[160], b[160];
    coh_fp_describe(&mine, a, sizeof a);
    coh_fp_describe(&theirs, b, sizeof b);
    return coh_errf(COH_ERR_MISMATCH, "collective mismatch: rank %d called %s from rank %d but "
                    "rank %d called %s", t->world[t->rank], a, t->world[peer],
                    t->world[peer], b);
}

static coh_status tcp_run(void *self, const coh_op *op)
{
    tcp *t = self;
    if (t->broken)
        return coh_errf(t->broken, "tcp transport: this communicator failed earlier");
    double deadline = coh_now_s() + t->timeout;
    if (op->kind == COH_OP_SEND || op->kind == COH_OP_RECV)
        return p2p(t, op, deadline);
    coh_status st = exchange_fp(t, op, deadline);
    if (st)
        return st;
    switch (op->kind) {
    case COH_OP_ALLREDUCE: return reduce_op(t, op, -1, deadline);
    case COH_OP_REDUCE: return reduce_op(t, op, op->root, deadline);
    case COH_OP_BROADCAST: return bcast(t, op, deadline);
    case COH_OP_ALLGATHER: return exchange(t, op, 0, deadline);
    case COH_OP_ALLTOALL: return exchange(t, op, 1, deadline);
    case COH_OP_REDUCE_SCATTER: return reduce_scatter(t, op, deadline);
    default: return COH_OK; /* barrier: the exchange was one */
    }
}

static coh_status tcp_split(void *self, int color, int key, const int *members, int nmembers,
                            int new_rank, uint64_t tag, void **out)
{
    tcp *t = self;
    *out = NULL;
    if (color < 0)
        return COH_OK;
    tcp *c = tcp_new(new_rank, nmembers, tcp_gid_child(t->gid, tag), t->timeout);
    if (!c)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a split");
    for (int i = 0; i < nmembers; i++) {
        c->world[i] = t->world[members[i]];
        c->addr[i] = t->addr[members[i]];
    }
    coh_status st = tcp_mesh(c, coh_now_s() + t->timeout);
    if (st) {
        tcp_free(c);
        return st;
    }
    *out = c;
    return COH_OK;
}

static void *tcp_alloc(void *self, size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) ? NULL : p;
}

static void tcp_release(void *self, void *p) { free(p); }

static void tcp_destroy(void *self) { tcp_free(self); }

const coh_transport_ops coh_tcp_ops = {"tcp", tcp_run, tcp_split, tcp_alloc, tcp_release,
                                       tcp_destroy};
