/* comm_int.h: private core of the comm layer: the operation descriptor, its fingerprint, the
 * transport interface (a struct of function pointers) and the communicator behind coh_comm. */
#ifndef COHORT_COMM_INT_H
#define COHORT_COMM_INT_H

#include <pthread.h>
#include <stdint.h>

#include "cohort/comm.h"

/* What a rank asked for. The fingerprint of a collective is (seq, kind, type, count, op,
 * root): every rank must agree on it, which each transport checks before moving data. */
typedef enum coh_opkind {
    COH_OP_ALLREDUCE = 1,
    COH_OP_REDUCE,
    COH_OP_BROADCAST,
    COH_OP_ALLGATHER,
    COH_OP_REDUCE_SCATTER,
    COH_OP_ALLTOALL,
    COH_OP_BARRIER,
    COH_OP_SEND,
    COH_OP_RECV,
} coh_opkind;

typedef struct coh_op {
    coh_opkind kind;
    const void *send;
    void *recv;
    uint64_t count;
    coh_dtype dtype;
    coh_redop redop;
    int root; /* root, or peer for send/recv; -1 when unused */
    uint64_t seq;
} coh_op;

/* Fixed-size, position-independent fingerprint, as stored in shared control blocks and sent
 * over MPI. */
typedef struct coh_fp {
    uint64_t seq;
    uint64_t count;
    int32_t kind, dtype, redop, root;
} coh_fp;

void coh_fp_of(const coh_op *op, coh_fp *fp);
int coh_fp_equal(const coh_fp *a, const coh_fp *b);
/* "allreduce(count=10, f32, sum) #3" */
void coh_fp_describe(const coh_fp *fp, char *buf, size_t n);
const char *coh_opkind_name(coh_opkind k);
/* Sets COH_ERR_MISMATCH describing rank 0's call and the first different rank's call; the
 * same text on every rank because every rank sees the same fingerprints. */
coh_status coh_fp_mismatch(const coh_fp *fps, int n);

/* Services libcohort lends to a transport plugin (which must not link libcohort itself). */
typedef struct coh_transport_host {
    coh_status (*errf)(coh_status s, const char *fmt, ...);
    void (*reduce)(void *dst, const void *const *src, int nsrc, size_t count, coh_dtype t,
                   coh_redop op, int avg_div);
    void (*to_f32)(float *dst, const void *src, size_t count, coh_dtype t);
    void (*from_f32)(void *dst, const float *src, size_t count, coh_dtype t);
    coh_status (*fp_mismatch)(const coh_fp *fps, int n);
    void (*fp_of)(const coh_op *op, coh_fp *fp);
    void (*fp_describe)(const coh_fp *fp, char *buf, size_t n);
    const char *(*opkind_name)(coh_opkind k);
    size_t (*dtype_size)(coh_dtype t);
    double (*now)(void);
    /* 1 once any communicator of this process has failed (a lost peer or a timeout): MPI
     * must then not be finalised, as MPI_Finalize would wait for the peer that failed. */
    int (*comm_failed)(void);
} coh_transport_host;

/* A transport: one instance per communicator. run() executes one op (blocking, honouring the
 * deadline) and reports errors through coh_errf. split() makes the instance for the group of
 * parent ranks `members` (in new-rank order) that this rank joins as new_rank; `tag` is equal
 * on all members and unique per split of this parent. An NCCL transport plugs in here. */
typedef struct coh_transport_ops {
    const char *name;
    coh_status (*run)(void *self, const coh_op *op);
    coh_status (*split)(void *self, int color, int key, const int *members, int nmembers,
                        int new_rank, uint64_t tag, void **out);
    void *(*alloc)(void *self, size_t bytes);
    void (*free)(void *self, void *p);
    void (*destroy)(void *self);
} coh_transport_ops;

/* Entry point a transport plugin exports (see transport/mpi.c). */
typedef coh_status (*coh_transport_plugin_fn)(const coh_transport_host *host, double timeout_s,
                                               const coh_transport_ops **ops, void **self,
                                               int *rank, int *size);
#define COH_MPI_PLUGIN_SYMBOL "cohort_transport_mpi_open"

typedef struct coh_async coh_async;

struct coh_comm {
    const coh_transport_ops *ops;
    void *tp;          /* transport instance */
    int rank, size;
    double timeout_s;
    uint64_t seq;      /* collectives issued so far */
    uint64_t nsplits;
    coh_status sticky; /* PEER_LOST or TIMEOUT make the communicator unusable */
    char sticky_msg[512];
    coh_async *async;  /* progress thread, started on first async call */
};

/* Run one op now (after validation), updating seq and the sticky error. */
coh_status coh_comm_run(coh_comm *c, coh_op *op);
/* A communicator over transport state tp (ops); on failure tp is destroyed (group.c). */
coh_status coh_comm_wrap(const coh_transport_ops *ops, void *tp, int rank, int size,
                         double timeout_s, coh_comm **out);
/* Queue an op on the progress thread. */
coh_status coh_async_submit(coh_comm *c, const coh_op *op, coh_comm_req **req);
/* Wait for every queued op of c; the first error is returned. */
coh_status coh_async_drain(coh_comm *c);
void coh_async_stop(coh_comm *c);

/* Environment of this rank, from the launcher API (coh_launch_env_read). */
typedef struct coh_comm_env {
    int launcher;      /* coh_launcher_kind */
    int rank, size, local_rank, local_size;
    int nnodes;        /* -1 when the launcher does not say */
    char job[128];     /* the launcher's job id (or COHORT_JOB_ID) + "-r<restart>"; "" when
                          the launcher gives none */
    char launch[96];   /* this launch of the job on this node, which COHORT_JOB_ID does not
                          override (cohort run's pid and start time, or the launcher's own job
                          id): two live jobs given the same job id differ here; "" when the
                          launcher says nothing that tells launches apart */
    double timeout_s;
} coh_comm_env;
coh_status coh_comm_env_read(coh_comm_env *env);
/* The launch key (coh_comm_env.launch) of the ranks that `cohort run`'s process launcher_pid
 * starts: its pid and start time. */
void coh_comm_launch_key(long launcher_pid, char *buf, size_t n);
/* COH_ERR_INVALID saying that env has no job id and how to give one. */
coh_status coh_comm_env_no_job(const coh_comm_env *env);

extern const coh_transport_host coh_host;

/* Transports. */
coh_status coh_shm_open(const coh_comm_env *env, void **self);
/* Unlinks this user's shared-memory segments that ranks of the launch `launch` created and
 * left: a segment is unlinked once every rank has mapped it, so one is left only when ranks
 * were killed before all had joined (the launcher's teardown after a rank failed early).
 * The launcher calls it once its ranks are down. Returns how many it removed. */
int coh_shm_remove_launch(const char *launch);
extern const coh_transport_ops coh_shm_ops;
coh_status coh_self_open(void **self);
extern const coh_transport_ops coh_self_ops;
/* n instances of one thread group (ranks[i] is rank i), each used by its own thread; every
 * wait gives up after timeout_s. */
coh_status coh_thread_open(int n, double timeout_s, void **ranks);
extern const coh_transport_ops coh_thread_ops;
/* Load the MPI plugin and initialise MPI. pmi: the job was started by a PMI launcher (MPICH's
 * Hydra, srun --mpi=pmi2), whose MPI is MPICH: libcohort_mpich.so is tried first. */
coh_status coh_mpi_load(double timeout_s, int pmi, const coh_transport_ops **ops, void **self,
                        int *rank, int *size);
/* Put the hierarchical transport (shared memory inside a node, MPI across nodes) in front of
 * the MPI instance *self when ranks share nodes and the job spans several (COHORT_COMM_HIER,
 * COHORT_COMM_RANKS_PER_NODE); otherwise leave *ops and *self as they are. On error the MPI
 * instance is still the caller's. */
coh_status coh_hier_wrap(double timeout_s, int rank, int size, const coh_transport_ops **ops,
                         void **self);
extern const coh_transport_ops coh_hier_ops;
/* The TCP transport (transport/tcp*.c): rendezvous at MASTER_ADDR, a full mesh of connections
 * authenticated with COHORT_COMM_KEY; for jobs that `cohort run` or torchrun spread over
 * nodes. */
coh_status coh_tcp_open(const coh_comm_env *env, void **self);
extern const coh_transport_ops coh_tcp_ops;

#endif
