/* hier_int.h: the hierarchical transport's instance (shared memory inside a node, MPI across
 * nodes) and the algorithm files' view of it. */
#ifndef COHORT_COMM_HIER_INT_H
#define COHORT_COMM_HIER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm_int.h"

/* All-gather and reduce-scatter run in two steps from this many bytes (gathered or sent
 * buffer) up; COHORT_COMM_HIER_MIN_BYTES overrides it. Measured across a shaped link between
 * namespaces (docs/BENCHMARKS.md, cluster): the two steps lose below 1 MiB, win above. */
#define HIER_SPLIT_MIN_DEFAULT (1u << 20)

typedef struct hier {
    const coh_transport_ops *mpi; /* ops of flat and cross */
    void *flat;   /* every rank of the group, over MPI: agreement and the ops not split up */
    void *node;   /* shm instance of the ranks on this node; NULL: every op goes flat */
    void *cross;  /* equal nodes: the ranks with my local rank, one per node; unequal nodes:
                     the node leaders (NULL on other ranks) */
    int rank, size, local_rank, local_size, nnodes, equal;
    int host_ranks; /* ranks on this host (simulated nodes may share one) */
    uint64_t split_min; /* all-gather and reduce-scatter of fewer bytes (the gathered or the
                           sent buffer) run flat: COHORT_COMM_HIER_MIN_BYTES */
    int *node_of;  /* node index of every rank of the group, for split */
    int *local_of; /* local index of every rank on its node (set by hier_build) */
    coh_fp *fps;   /* every rank's fingerprint, for hier_agree */
    double timeout;
    uint64_t node_seq, cross_seq; /* inner ops so far: shm needs them numbered in turn */
    void *tmp;                    /* scratch for padded or f32 copies */
    size_t tmp_bytes;
    int tmp_in_arena;
    int abandoned; /* an MPI step timed out: its buffers are left mapped at destroy */
} hier;

hier *hier_new(const coh_transport_ops *mpi, void *flat, int rank, int size, double timeout);
void hier_destroy(void *self);
/* With node_of filled in: open the node's segment and the cross groups when they pay (else
 * h->node stays NULL and every op goes flat). Collective over the group. */
coh_status hier_build(hier *h);
/* "4 ranks on 2 nodes (2+2)" */
void hier_describe(const hier *h, char *buf, size_t n);

/* Run one inner op on the node (shm) or cross (MPI) instance, numbered in turn. */
coh_status hier_node_run(hier *h, coh_opkind k, const void *send, void *recv, size_t count,
                         coh_dtype t, coh_redop op, int root);
coh_status hier_cross_run(hier *h, coh_opkind k, const void *send, void *recv, size_t count,
                          coh_dtype t, coh_redop op, int root);
/* Scratch of at least `bytes`, in the node's shared arena when it fits there. */
void *hier_scratch(hier *h, size_t bytes);
/* Every rank of the group checks that all ranks made the same call (as the flat transports
 * do): COH_ERR_MISMATCH describing rank 0's and the first different rank's call. */
coh_status hier_agree(hier *h, const coh_op *op);

/* How a reduction travels: bf16/f16 as f32 (rounded once at the end), avg as a sum divided at
 * the end, so that the hierarchy gives what a flat reduction gives. */
typedef struct hier_work {
    int half;    /* op->dtype is bf16 or f16 */
    coh_dtype t; /* the type on the wire */
    coh_redop r; /* the reduction on the wire */
} hier_work;
hier_work hier_work_of(const coh_op *op);
/* The last step: divides an avg, then writes count elements of res (the wire type) to recv in
 * op->dtype (res may be recv itself when no conversion is needed). */
void hier_finish(hier *h, const coh_op *op, hier_work w, void *recv, void *res, size_t count);

/* The hierarchical ops, called by hier_run after the ranks agreed on a non-empty call. */
coh_status hier_allreduce(hier *h, const coh_op *op);
coh_status hier_broadcast(hier *h, const coh_op *op);
coh_status hier_allgather(hier *h, const coh_op *op);      /* equal nodes only */
coh_status hier_reduce_scatter(hier *h, const coh_op *op); /* equal nodes only */

#endif
