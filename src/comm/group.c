/* group.c: the public communicator API: choosing a transport, argument checks, sequence
 * numbers, sticky errors after a lost peer or a timeout, and split into sub-groups. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "cohort/launch.h"
#include "cohort/log.h"
#include "comm/comm_int.h"
#include "comm/reduce.h"

static volatile int any_comm_failed; /* set by the first sticky error, read at exit */

static int comm_failed(void) { return any_comm_failed; }

const coh_transport_host coh_host = {coh_errf,        coh_reduce_n,    coh_to_f32,
                                     coh_from_f32,    coh_fp_mismatch, coh_fp_of,
                                     coh_fp_describe, coh_opkind_name, coh_dtype_size,
                                     coh_now_s,       comm_failed};

coh_status coh_comm_wrap(const coh_transport_ops *ops, void *tp, int rank, int size,
                         double timeout_s, coh_comm **out)
{
    coh_comm *c = calloc(1, sizeof *c);
    if (!c) {
        ops->destroy(tp);
        return coh_errf(COH_ERR_NOMEM, "out of memory for a communicator");
    }
    c->ops = ops;
    c->tp = tp;
    c->rank = rank;
    c->size = size;
    c->timeout_s = timeout_s;
    *out = c;
    return COH_OK;
}

/* Which transport carries the world. COHORT_COMM=shm|mpi|tcp forces one; auto (the default)
 * picks MPI when an MPI launcher started the job, or when srun started one that spans nodes;
 * TCP when `cohort run` or torchrun started a job that spans nodes (its rendezvous is theirs:
 * MASTER_ADDR); shared memory (or self for one rank) otherwise. */
static coh_status pick(coh_comm_kind kind, const coh_comm_env *env, coh_comm_kind *out)
{
    const char *s = getenv("COHORT_COMM");
    *out = kind;
    if (kind != COH_COMM_AUTO)
        return COH_OK;
    if (s && strcmp(s, "mpi") && strcmp(s, "shm") && strcmp(s, "tcp") && strcmp(s, "auto"))
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM '%s': expected shm, mpi, tcp or "
                        "auto", s);
    if (s && strcmp(s, "auto")) {
        *out = !strcmp(s, "mpi") ? COH_COMM_MPI : !strcmp(s, "tcp") ? COH_COMM_TCP : COH_COMM_SHM;
        return COH_OK;
    }
    int spans = env->local_size != env->size || env->nnodes > 1;
    int mpi_launcher = env->launcher == COH_LAUNCHER_OPENMPI || env->launcher == COH_LAUNCHER_PMI ||
                       (env->launcher == COH_LAUNCHER_SLURM && spans);
    int tcp_launcher = env->launcher == COH_LAUNCHER_COHORT ||
                       env->launcher == COH_LAUNCHER_TORCHRUN;
    *out = mpi_launcher ? COH_COMM_MPI : spans && tcp_launcher ? COH_COMM_TCP : COH_COMM_SHM;
    return COH_OK;
}

/* TCP between nodes, wrapped by the hierarchy (shared memory inside each node) when ranks
 * share nodes. */
static coh_status open_tcp(const coh_comm_env *env, const coh_transport_ops **ops, void **tp)
{
    coh_status st = coh_tcp_open(env, tp);
    if (st)
        return st;
    *ops = &coh_tcp_ops;
    if ((st = coh_hier_wrap(env->timeout_s, env->rank, env->size, ops, tp)))
        (*ops)->destroy(*tp);
    return st;
}

/* An MPI library that does not know the launcher initialises alone (rank 0 of 1): refuse that
 * rather than let every rank run by itself. */
static coh_status open_mpi(const coh_comm_env *env, const coh_transport_ops **ops, void **tp,
                           int *rank, int *size)
{
    /* srun without an MPI plug-in gives MPI nothing to start from (Open MPI then aborts the
     * process in MPI_Init): say how to start it instead */
    if (env->launcher == COH_LAUNCHER_SLURM && !getenv("PMIX_RANK") && !getenv("PMI_FD") &&
        !getenv("OMPI_COMM_WORLD_SIZE"))
        return coh_errf(COH_ERR_UNSUPPORTED,
                        "srun started %d ranks%s without an MPI plug-in (no PMIX_RANK or PMI_FD): "
                        "start them with 'srun --mpi=pmix' (Open MPI) or 'srun --mpi=pmi2' "
                        "(MPICH), or set MpiDefault in slurm.conf",
                        env->size, env->nnodes > 1 ? " on several nodes" : "");
    coh_status st = coh_mpi_load(env->timeout_s, env->launcher == COH_LAUNCHER_PMI, ops, tp,
                                 rank, size);
    if (st)
        return st;
    if (*size != env->size)
        st = coh_errf(COH_ERR_INVALID, "mpi sees %d rank(s) but the launcher (%s) started %d: "
                      "start the job with the mpirun of the MPI that libcohort_mpi.so was built "
                      "with (MPICH's mpiexec and srun --mpi=pmi2 need libcohort_mpich.so, "
                      "Open MPI's mpirun and srun --mpi=pmix libcohort_mpi.so; COHORT_MPI_PLUGIN "
                      "names one), or use COHORT_COMM=shm on one node",
                      *size, coh_launcher_name((coh_launcher_kind)env->launcher), env->size);
    else
        st = coh_hier_wrap(env->timeout_s, *rank, *size, ops, tp);
    if (st)
        (*ops)->destroy(*tp);
    return st;
}

coh_status coh_comm_create(coh_comm_kind kind, coh_comm **out)
{
    *out = NULL;
    coh_comm_env env;
    coh_comm_kind which;
    coh_status st;
    if ((st = coh_reduce_isa_env_check()) || (st = coh_comm_env_read(&env)) ||
        (st = pick(kind, &env, &which)))
        return st;
    const coh_transport_ops *ops;
    void *tp;
    int rank = env.rank, size = env.size;
    if (which == COH_COMM_MPI) {
        if ((st = open_mpi(&env, &ops, &tp, &rank, &size)))
            return st;
    } else if (env.size == 1) {
        ops = &coh_self_ops;
        if ((st = coh_self_open(&tp)))
            return st;
    } else if (which == COH_COMM_TCP) {
        if ((st = open_tcp(&env, &ops, &tp)))
            return st;
    } else if (env.nnodes > 1 || env.local_size != env.size) {
        const char *forced = getenv("COHORT_COMM");
        return coh_errf(COH_ERR_UNSUPPORTED,
                        "the job spans %d nodes but shared memory reaches one node%s: start it "
                        "with cohort run, torchrun, mpirun or srun, or set COHORT_COMM=tcp or mpi",
                        env.nnodes > 1 ? env.nnodes : 2,
                        forced && !strcmp(forced, "shm") ? " (COHORT_COMM=shm forces it)" : "");
    } else if (!env.job[0]) {
        return coh_comm_env_no_job(&env);
    } else {
        ops = &coh_shm_ops;
        if ((st = coh_shm_open(&env, &tp)))
            return st;
    }
    if ((st = coh_comm_wrap(ops, tp, rank, size, env.timeout_s, out)))
        return st;
    coh_debug("comm: rank %d of %d (launcher %s) on transport %s", rank, size,
              coh_launcher_name((coh_launcher_kind)env.launcher), ops->name);
    return COH_OK;
}

coh_status coh_comm_create_self(coh_comm **out)
{
    void *tp;
    coh_status st = coh_reduce_isa_env_check();
    if (st || (st = coh_self_open(&tp)))
        return st;
    return coh_comm_wrap(&coh_self_ops, tp, 0, 1, 300, out);
}

coh_status coh_comm_create_threads(int n, double timeout_s, coh_comm **out)
{
    if (n < 1 || n > COH_COMM_THREADS_MAX)
        return coh_errf(COH_ERR_INVALID, "invalid thread group size '%d': must be 1..%d", n,
                        COH_COMM_THREADS_MAX);
    timeout_s = timeout_s > 0 ? timeout_s : 300;
    void **tp = calloc((size_t)n, sizeof *tp);
    coh_status st = coh_reduce_isa_env_check();
    if (!st)
        st = tp ? coh_thread_open(n, timeout_s, tp)
                : coh_errf(COH_ERR_NOMEM, "out of memory for a thread group");
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    for (int i = 0; !st && i < n; i++) {
        /* on failure coh_comm_wrap freed tp[i]; the rest are unwrapped */
        if ((st = coh_comm_wrap(&coh_thread_ops, tp[i], i, n, timeout_s, &out[i])))
            for (int k = i + 1; k < n; k++)
                coh_thread_ops.destroy(tp[k]);
    }
    for (int i = 0; st && i < n; i++) {
        coh_comm_destroy(out[i]);
        out[i] = NULL;
    }
    free(tp);
    return st;
}

void coh_comm_destroy(coh_comm *c)
{
    if (!c)
        return;
    coh_async_stop(c);
    c->ops->destroy(c->tp);
    free(c);
}

int coh_comm_rank(const coh_comm *c) { return c->rank; }
int coh_comm_size(const coh_comm *c) { return c->size; }
const char *coh_comm_transport(const coh_comm *c) { return c->ops->name; }
double coh_comm_timeout(const coh_comm *c) { return c->timeout_s; }
void *coh_comm_alloc(coh_comm *c, size_t bytes) { return c->ops->alloc(c->tp, bytes); }
void coh_comm_free(coh_comm *c, void *p)
{
    if (p)
        c->ops->free(c->tp, p);
}

coh_status coh_comm_run(coh_comm *c, coh_op *op)
{
    if (c->sticky)
        return coh_errf(c->sticky, "%s", c->sticky_msg);
    coh_status st = c->ops->run(c->tp, op);
    if (st == COH_ERR_PEER_LOST || st == COH_ERR_TIMEOUT) {
        c->sticky = st;
        any_comm_failed = 1;
        snprintf(c->sticky_msg, sizeof c->sticky_msg, "communicator unusable after: %s",
                 coh_last_error());
    }
    return st;
}

/* Bad arguments are caught here, on the calling rank, before any peer waits on it. */
static coh_status check_op(const coh_comm *c, const coh_op *op)
{
    const char *name = coh_opkind_name(op->kind);
    if ((unsigned)op->dtype >= COH_DTYPE_COUNT)
        return coh_errf(COH_ERR_INVALID, "%s: invalid type '%d': expected a coh_dtype", name,
                        (int)op->dtype);
    if ((unsigned)op->redop >= COH_REDOP_COUNT)
        return coh_errf(COH_ERR_INVALID, "%s: invalid reduction '%d': expected a coh_redop",
                        name, (int)op->redop);
    int blocks = op->kind == COH_OP_ALLGATHER || op->kind == COH_OP_REDUCE_SCATTER ||
                 op->kind == COH_OP_ALLTOALL ? c->size : 1;
    if (op->count > (SIZE_MAX / 8) / (size_t)blocks)
        return coh_errf(COH_ERR_INVALID, "%s: invalid count '%llu': too large", name,
                        (unsigned long long)op->count);
    int root_used = op->kind == COH_OP_REDUCE || op->kind == COH_OP_BROADCAST ||
                    op->kind == COH_OP_SEND || op->kind == COH_OP_RECV;
    if (root_used && (op->root < 0 || op->root >= c->size))
        return coh_errf(COH_ERR_INVALID, "%s: invalid %s '%d': expected 0 to %d", name,
                        op->kind >= COH_OP_SEND ? "peer" : "root", op->root, c->size - 1);
    if (op->kind >= COH_OP_SEND && op->root == c->rank)
        return coh_errf(COH_ERR_INVALID, "%s: invalid peer '%d': that is this rank", name,
                        op->root);
    int needs_recv = op->kind != COH_OP_BROADCAST && op->kind != COH_OP_SEND &&
                     op->kind != COH_OP_BARRIER && (op->kind != COH_OP_REDUCE || op->root == c->rank);
    int needs_send = op->kind != COH_OP_BROADCAST && op->kind != COH_OP_RECV &&
                     op->kind != COH_OP_BARRIER;
    if (op->count && ((needs_send && !op->send) || (needs_recv && !op->recv)))
        return coh_errf(COH_ERR_INVALID, "%s: null %s buffer for count %llu", name,
                        needs_send && !op->send ? "send" : "receive", (unsigned long long)op->count);
    return COH_OK;
}

static coh_status issue(coh_comm *c, coh_op *op, coh_comm_req **req)
{
    coh_status st = check_op(c, op);
    if (st)
        return st;
    if (op->kind < COH_OP_SEND)
        op->seq = ++c->seq;
    if (req)
        return coh_async_submit(c, op, req);
    if ((st = coh_async_drain(c)))
        return st;
    return coh_comm_run(c, op);
}

#define OP(...) (&(coh_op){__VA_ARGS__})

coh_status coh_allreduce(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t,
                         coh_redop op)
{
    return issue(c, OP(COH_OP_ALLREDUCE, send, recv, count, t, op, -1, 0), NULL);
}

coh_status coh_reduce(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t,
                      coh_redop op, int root)
{
    return issue(c, OP(COH_OP_REDUCE, send, recv, count, t, op, root, 0), NULL);
}

coh_status coh_broadcast(coh_comm *c, void *buf, size_t count, coh_dtype t, int root)
{
    return issue(c, OP(COH_OP_BROADCAST, buf, buf, count, t, COH_SUM, root, 0), NULL);
}

coh_status coh_allgather(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t)
{
    return issue(c, OP(COH_OP_ALLGATHER, send, recv, count, t, COH_SUM, -1, 0), NULL);
}

coh_status coh_reduce_scatter(coh_comm *c, const void *send, void *recv, size_t count,
                              coh_dtype t, coh_redop op)
{
    return issue(c, OP(COH_OP_REDUCE_SCATTER, send, recv, count, t, op, -1, 0), NULL);
}

coh_status coh_alltoall(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t)
{
    return issue(c, OP(COH_OP_ALLTOALL, send, recv, count, t, COH_SUM, -1, 0), NULL);
}

coh_status coh_barrier(coh_comm *c)
{
    return issue(c, OP(COH_OP_BARRIER, NULL, NULL, 0, COH_U8, COH_SUM, -1, 0), NULL);
}

coh_status coh_send(coh_comm *c, const void *buf, size_t count, coh_dtype t, int peer)
{
    return issue(c, OP(COH_OP_SEND, buf, NULL, count, t, COH_SUM, peer, 0), NULL);
}

coh_status coh_recv(coh_comm *c, void *buf, size_t count, coh_dtype t, int peer)
{
    return issue(c, OP(COH_OP_RECV, NULL, buf, count, t, COH_SUM, peer, 0), NULL);
}

coh_status coh_allreduce_async(coh_comm *c, const void *send, void *recv, size_t count,
                               coh_dtype t, coh_redop op, coh_comm_req **req)
{
    return issue(c, OP(COH_OP_ALLREDUCE, send, recv, count, t, op, -1, 0), req);
}

coh_status coh_reduce_scatter_async(coh_comm *c, const void *send, void *recv, size_t count,
                                    coh_dtype t, coh_redop op, coh_comm_req **req)
{
    return issue(c, OP(COH_OP_REDUCE_SCATTER, send, recv, count, t, op, -1, 0), req);
}

coh_status coh_allgather_async(coh_comm *c, const void *send, void *recv, size_t count,
                               coh_dtype t, coh_comm_req **req)
{
    return issue(c, OP(COH_OP_ALLGATHER, send, recv, count, t, COH_SUM, -1, 0), req);
}

coh_status coh_broadcast_async(coh_comm *c, void *buf, size_t count, coh_dtype t, int root,
                               coh_comm_req **req)
{
    return issue(c, OP(COH_OP_BROADCAST, buf, buf, count, t, COH_SUM, root, 0), req);
}

/* Members of this rank's color, ordered by (key, parent rank). */
static int split_members(const int32_t *ck, int n, int color, int key, int rank, int *members,
                         int *new_rank)
{
    int m = 0;
    for (int r = 0; r < n; r++) {
        if (ck[2 * r] != color)
            continue;
        int at = m++;
        while (at > 0 && (ck[2 * members[at - 1] + 1] > ck[2 * r + 1]))
            members[at] = members[at - 1], at--;
        members[at] = r;
    }
    for (int i = 0; i < m; i++)
        if (members[i] == rank)
            *new_rank = i;
    (void)key;
    return m;
}

coh_status coh_comm_split(coh_comm *c, int color, int key, coh_comm **out)
{
    *out = NULL;
    if (color < 0 && color != COH_COMM_NO_COLOR)
        return coh_errf(COH_ERR_INVALID, "split: invalid color '%d': expected >= 0 or "
                        "COH_COMM_NO_COLOR", color);
    int32_t mine[2] = {color, key};
    int32_t *ck = malloc(sizeof(int32_t) * 2 * (size_t)c->size);
    int *members = malloc(sizeof(int) * (size_t)c->size);
    coh_status st = ck && members ? COH_OK : coh_errf(COH_ERR_NOMEM, "split: out of memory");
    if (!st)
        st = coh_allgather(c, mine, ck, 2, COH_I32);
    int m = 0, new_rank = -1;
    if (!st && color >= 0)
        m = split_members(ck, c->size, color, key, c->rank, members, &new_rank);
    void *tp = NULL;
    uint64_t tag = ++c->nsplits;
    if (!st)
        st = c->ops->split(c->tp, color, key, color >= 0 ? members : NULL, m, new_rank, tag, &tp);
    free(ck);
    free(members);
    if (st || color < 0)
        return st;
    return coh_comm_wrap(c->ops, tp, new_rank, m, c->timeout_s, out);
}
