/* comm.h: communicators and collectives (all-reduce, broadcast, all-gather, ...) between the
 * ranks of a job, over shared memory on one node or MPI across nodes. */
#ifndef COHORT_COMM_H
#define COHORT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. bf16 and f16 are reduced in f32 and rounded once to nearest even (NaN stays
 * NaN). */
typedef enum coh_dtype {
    COH_F32 = 0,
    COH_F64,
    COH_BF16,
    COH_F16,
    COH_I32,
    COH_I64,
    COH_U8,
    COH_DTYPE_COUNT
} coh_dtype;

/* Reductions. AVG is SUM divided by the group size (integer types divide and truncate).
 * MIN and MAX keep the earlier operand (lower rank) unless the later one compares strictly
 * smaller (greater), so a NaN in lower ranks wins and results are identical on every rank. */
typedef enum coh_redop { COH_SUM = 0, COH_AVG, COH_MIN, COH_MAX, COH_PROD, COH_REDOP_COUNT } coh_redop;

/* Size in bytes of one element; 0 for an invalid type. */
size_t coh_dtype_size(coh_dtype t);
/* Lower-case names ("f32", "sum"); parse returns COH_ERR_INVALID naming the bad value. */
const char *coh_dtype_name(coh_dtype t);
const char *coh_redop_name(coh_redop op);
coh_status coh_dtype_parse(const char *s, coh_dtype *out);
coh_status coh_redop_parse(const char *s, coh_redop *out);

/* Element i of a typed array as a double, and back (floats round to nearest even, integers
 * convert like C casts). For filling and checking buffers; not for bulk work. */
double coh_dtype_get(const void *p, size_t i, coh_dtype t);
void coh_dtype_set(void *p, size_t i, coh_dtype t, double v);

typedef struct coh_comm coh_comm;
typedef struct coh_comm_req coh_comm_req;

/* Which transport carries the world communicator. AUTO follows COHORT_COMM (shm, mpi, tcp);
 * unset or auto: MPI when an MPI launcher started the job (mpirun, PMI, srun across nodes), TCP
 * when cohort run or torchrun spread it over nodes, shared memory otherwise (docs/comm.md). */
typedef enum coh_comm_kind {
    COH_COMM_AUTO = 0,
    COH_COMM_SHM,
    COH_COMM_MPI,
    COH_COMM_TCP
} coh_comm_kind;

/* Create the world communicator from the environment the launcher set: RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, COHORT_JOB_ID, COHORT_RESTART_COUNT (or, under mpirun,
 * OMPI_COMM_WORLD_*). Every rank must call it. Operations time out after COHORT_COMM_TIMEOUT
 * seconds (default 300). Errors: COH_ERR_INVALID for a missing or malformed variable (named;
 * COHORT_COMM_ISA too, which every communicator below checks as well),
 * COH_ERR_UNSUPPORTED when the ranks span nodes and shared memory is forced or MPI
 * unavailable, COH_ERR_TIMEOUT when peers do not join in time. The caller owns *out (coh_comm_destroy). */
coh_status coh_comm_create(coh_comm_kind kind, coh_comm **out);

/* A communicator of one rank, for single-process runs (every collective is a copy). */
coh_status coh_comm_create_self(coh_comm **out);

/* Most ranks of a thread group. */
#define COH_COMM_THREADS_MAX 4096
/* n communicators of one group whose ranks are threads of this process (transport "thread"):
 * out[i] is rank i, to be used by one thread at a time, each destroyed by coh_comm_destroy.
 * Collectives meet at a barrier and one rank (the root, else rank 0) moves every rank's data,
 * as DataParallel's device 0 does; a collective gives COH_ERR_TIMEOUT after timeout_s seconds
 * (<= 0: 300) without its peers. COH_ERR_INVALID for n outside 1..COH_COMM_THREADS_MAX. */
coh_status coh_comm_create_threads(int n, double timeout_s, coh_comm **out);

/* Split into groups of ranks that pass the same color; ranks in a group are ordered by key,
 * then by rank in c. A rank passing COH_COMM_NO_COLOR gets *out = NULL. Collective over c. */
#define COH_COMM_NO_COLOR (-1)
coh_status coh_comm_split(coh_comm *c, int color, int key, coh_comm **out);

/* Waits for this rank's pending async ops, then frees everything. NULL-safe. Not collective:
 * shared segments are already unlinked, each rank unmaps its own view. */
void coh_comm_destroy(coh_comm *c);

int coh_comm_rank(const coh_comm *c);
int coh_comm_size(const coh_comm *c);
/* Transport name: "self", "shm", "mpi", "hier" or "thread". */
const char *coh_comm_transport(const coh_comm *c);
/* Deadline of each blocking operation, seconds (from COHORT_COMM_TIMEOUT). */
double coh_comm_timeout(const coh_comm *c);

/* Memory in the transport's shared arena: collectives whose buffers live there need no
 * copy-in (the fast path). Returns NULL when the arena is full (then use malloc: collectives
 * accept any memory). 64-byte aligned. Free with coh_comm_free on the same communicator. */
void *coh_comm_alloc(coh_comm *c, size_t bytes);
void coh_comm_free(coh_comm *c, void *p);

/* Collectives. Every rank of c calls the same sequence of collectives with the same count,
 * type, op and root, else all ranks get COH_ERR_MISMATCH describing both calls. `send` may
 * equal `recv` (in place). A dead peer gives COH_ERR_PEER_LOST naming it, a peer that never
 * arrives COH_ERR_TIMEOUT naming it; both leave c unusable (every later call fails the same
 * way). Not thread-safe per communicator: call from one thread at a time. */
coh_status coh_allreduce(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t,
                         coh_redop op);
/* Result only on root; recv is ignored elsewhere (may be NULL). */
coh_status coh_reduce(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t,
                      coh_redop op, int root);
coh_status coh_broadcast(coh_comm *c, void *buf, size_t count, coh_dtype t, int root);
/* recv holds size*count elements, rank r's block at r*count. */
coh_status coh_allgather(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t);
/* send holds size*count elements; rank r receives the reduction of block r (count elements).
 * In place: recv == send + rank*count elements, or recv == send (result in block 0). */
coh_status coh_reduce_scatter(coh_comm *c, const void *send, void *recv, size_t count,
                              coh_dtype t, coh_redop op);
/* Block j (count elements) of send goes to rank j, arriving at block r of j's recv. */
coh_status coh_alltoall(coh_comm *c, const void *send, void *recv, size_t count, coh_dtype t);
coh_status coh_barrier(coh_comm *c);
/* Point to point: messages between a pair arrive in order; count and type must match
 * (COH_ERR_MISMATCH otherwise). */
coh_status coh_send(coh_comm *c, const void *buf, size_t count, coh_dtype t, int peer);
coh_status coh_recv(coh_comm *c, void *buf, size_t count, coh_dtype t, int peer);

/* Asynchronous all-reduce, reduce-scatter, all-gather and broadcast: queued in call order on
 * the communicator's progress thread; buffers must stay untouched until the request is done.
 * Blocking calls on c first wait for every pending request. */
coh_status coh_allreduce_async(coh_comm *c, const void *send, void *recv, size_t count,
                               coh_dtype t, coh_redop op, coh_comm_req **req);
coh_status coh_reduce_scatter_async(coh_comm *c, const void *send, void *recv, size_t count,
                                    coh_dtype t, coh_redop op, coh_comm_req **req);
coh_status coh_allgather_async(coh_comm *c, const void *send, void *recv, size_t count,
                               coh_dtype t, coh_comm_req **req);
coh_status coh_broadcast_async(coh_comm *c, void *buf, size_t count, coh_dtype t, int root,
                               coh_comm_req **req);
/* Wait for the request, free it and return the operation's status (and its message). */
coh_status coh_comm_wait(coh_comm_req *req);
/* *done = 1 when finished (then call coh_comm_wait to collect it); never blocks. */
coh_status coh_comm_test(coh_comm_req *req, int *done);

#ifdef __cplusplus
}
#endif
#endif
