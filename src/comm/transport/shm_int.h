/* shm_int.h: layout of the shared-memory segment of one communicator and the primitives its
 * algorithm files share (arrive/wait with deadlines and peer-death checks, staging halves). */
#ifndef COHORT_COMM_SHM_INT_H
#define COHORT_COMM_SHM_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_int.h"

#define SHM_MAGIC 0x636f686f72747368ull /* "cohortsh" */
#define SHM_NONE UINT64_MAX            /* "buffer not in the arena" */
/* All-gather blocks up to this size go through the staging halves in one round; larger ones
 * are read from the peers' buffers. All-reduces up to SHM_ONE_PHASE take one phase. With
 * more ranks than cores every sync costs context switches, so there all-gather blocks up to a
 * whole staging half and all-reduces up to SHM_ONE_PHASE_OVER take the one-sync paths. */
#define SHM_SMALL_GATHER (16u << 10)
#define SHM_ONE_PHASE (16u << 10)
#define SHM_ONE_PHASE_OVER (64u << 10)

/* Segment: [ctl][slot x n][chan x n*n][stage 2 halves x n][chan buffers x n*n][arena x n] */
typedef struct shm_ctl {
    _Atomic uint64_t magic; /* set last by the creator */
    uint64_t bytes, half, chan_bytes, arena_bytes;
    /* Decided by the creator so that every rank takes the same path: all-gather blocks and
     * all-reduce vectors up to these sizes take one sync through the staging halves. */
    uint64_t small_gather, one_phase;
    uint32_t n;
    _Atomic uint32_t mapped;   /* ranks that mapped the segment; the last one unlinks it */
    _Atomic uint32_t sleepers; /* waiters in futex_wait: posters wake only when > 0 */
    _Atomic int32_t lost;      /* 1 + rank found dead, 0 while every rank lives */
    /* This run's segment, not one a killed run of the same job id left under the name: the
     * creator's pid (set first) and start time, checked alive by every rank that joins. */
    _Atomic int32_t creator_pid;
    uint64_t creator_start;
    /* A rank that expected another size or rank count refuses the segment: 1 + its rank, and
     * what it expected, so that the creator fails at once too instead of waiting for it. */
    _Atomic int32_t refused;
    uint32_t refused_n;
    uint64_t refused_bytes;
    /* The creator's launch (coh_comm_env.launch), set before the magic: a rank of another live
     * job given the same job id refuses the segment instead of joining it. */
    char launch[96];
    /* A rank found its slot taken by another process (two jobs with the same job id and no
     * launch to tell them apart): 1 + that rank, so that every rank fails at once. */
    _Atomic int32_t doubled;
    int32_t doubled_pids[2]; /* the slot's holder, and the process that found it taken */
    /* 1: the creator holds a shared flock(2) on the segment from its creation until its name
     * is unlinked, so a named segment that nobody holds is a killed run's, which any creator of
     * the user may remove (shm.c, seg_sweep). 0 in segments of versions without the lock: they
     * are left alone. */
    uint32_t creator_locks;
} __attribute__((aligned(128))) shm_ctl;

typedef struct shm_slot {
    _Atomic uint32_t arrive; /* phases this rank has reached (a futex word) */
    _Atomic int32_t pid;     /* 0 until the rank has mapped the segment */
    coh_fp fp[2];            /* fingerprint of op seq, at [seq & 1] */
    uint64_t send_off[2], recv_off[2]; /* arena offsets of the op's buffers, or SHM_NONE */
    uint64_t send_va[2], recv_va[2];   /* the same buffers' addresses in the rank's process */
    int32_t cma;                       /* 1 when the rank can read peers with process_vm_readv */
    int32_t safe[2];                   /* reduce-scatter: my result avoids blocks peers read */
} __attribute__((aligned(128))) shm_slot;

typedef struct shm_chan { /* one direction of one pair, for send/recv */
    _Atomic uint32_t posted, consumed; /* chunks written and read (futex words) */
    uint64_t len;                      /* bytes of the chunk posted last */
    uint64_t va;                       /* a direct send: the sender's buffer (shm_p2p.c) */
    coh_fp fp;                         /* the sender's call (count, type) */
} __attribute__((aligned(128))) shm_chan;

typedef struct shm_extent { uint64_t off, size; int used; } shm_extent;

typedef struct shm {
    char *base;
    size_t bytes;
    shm_ctl *ctl;
    int rank, n;
    char name[240];
    char job[128];    /* the job id the name is made of, for messages */
    char launch[96];  /* this rank's launch (coh_comm_env.launch); "" when unknown */
    int lock_fd;      /* the creator's: holds the segment's shared lock while it is named; -1 */
    double timeout, deadline, next_check;
    uint32_t arrived; /* mirror of my slot's arrive */
    uint64_t round;   /* staging rounds so far: round & 1 picks the half */
    int oversubscribed; /* more ranks than cores: waiters yield at every turn */
    int spin_turns;     /* oversubscribed: yielding turns before sleeping */
    double spin_s;      /* otherwise: seconds of spinning before sleeping */
    double pure_s;      /* of which the first, without yielding (adapts: shm_wait.c) */
    const coh_op *op; /* op in progress, for error messages */
    shm_extent *ext;  /* this rank's arena allocations, sorted by offset */
    size_t next_ext, cap_ext;
} shm;

/* What the environment sets of a segment: COHORT_SHM_STAGE (bytes of each staging half),
 * COHORT_SHM_ARENA (bytes of each rank's arena), both at least 4096 and at most the machine's
 * memory, rounded up to pages; COHORT_SHM_SPIN (microseconds, 0 to SHM_SPIN_MAX_US). */
#define SHM_SPIN_MAX_US 10000000
typedef struct shm_env {
    uint64_t half, arena;
    double spin_s;
    int spin_set; /* COHORT_SHM_SPIN was given (else spin_s is the default) */
} shm_env;
/* The three values (NULL: unset) for a machine of `mem` bytes (0: unknown); COH_ERR_INVALID
 * naming the variable and its value. */
coh_status shm_env_parse(const char *stage, const char *arena, const char *spin, uint64_t mem,
                         shm_env *out);

shm_slot *shm_slot_of(shm *s, int r);
shm_chan *shm_chan_of(shm *s, int from, int to);
char *shm_chan_buf(shm *s, int from, int to);
/* Staging half of rank r for the current round. */
char *shm_stage(shm *s, int r);
/* Start the next staging round (flips the half). An op that writes its half before the
 * announce sync takes the round back when that sync fails, so that every rank keeps the same
 * round (a mismatched peer may not have started one). */
void shm_next_round(shm *s);
void shm_undo_round(shm *s);
char *shm_arena(shm *s, int r);
/* Offset of [p, p + bytes) in this rank's arena, or SHM_NONE. */
uint64_t shm_arena_off(shm *s, const void *p, size_t bytes);

/* Arrive at the next phase and wait for every rank to reach it. */
coh_status shm_sync(shm *s);
/* The same in two halves, so that work which peers do not depend on can fill the wait. */
void shm_sync_arrive(shm *s);
coh_status shm_sync_wait(shm *s);
/* Publish this op's fingerprint and arena offsets, sync, and check every rank's fingerprint:
 * COH_ERR_MISMATCH on all ranks when they differ. */
coh_status shm_sync_first(shm *s, const coh_op *op, const void *send, const void *recv,
                          size_t send_bytes, size_t recv_bytes);
/* Wait until *w reaches target (wrapping compare); `peer` is the rank expected to move it. */
coh_status shm_wait(shm *s, _Atomic uint32_t *w, uint32_t target, int peer, const char *what);
void shm_post(shm *s, _Atomic uint32_t *w);
/* A peer's memory could not be read: PEER_LOST (raising the lost flag) when it is dead, else
 * a system error naming the call. */
coh_status shm_read_failed(shm *s, int peer, int err);
/* Copy bytes from peer's address space (cross-memory attach). */
coh_status shm_peer_read(shm *s, int peer, void *dst, uint64_t src_va, size_t bytes);

/* Algorithms (one file per family). */
coh_status shm_allreduce(shm *s, const coh_op *op);
coh_status shm_allreduce_cma(shm *s, const coh_op *op);
coh_status shm_reduce_scatter_cma(shm *s, const coh_op *op);
coh_status shm_allgather_cma(shm *s, const coh_op *op);
coh_status shm_broadcast_cma(shm *s, const coh_op *op);
/* Every rank may read its peers' memory (decided once per communicator, same on all ranks). */
int shm_all_cma(shm *s);
coh_status shm_reduce(shm *s, const coh_op *op);
coh_status shm_reduce_scatter(shm *s, const coh_op *op);
coh_status shm_allgather(shm *s, const coh_op *op);
coh_status shm_broadcast(shm *s, const coh_op *op);
coh_status shm_alltoall(shm *s, const coh_op *op);
coh_status shm_send(shm *s, const coh_op *op);
coh_status shm_recv(shm *s, const coh_op *op);

/* Elements per block piece in one staging round when `blocks` blocks share a half. */
size_t shm_piece(shm *s, size_t esz, int blocks);

#endif
