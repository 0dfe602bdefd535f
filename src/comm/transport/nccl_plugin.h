/* nccl_plugin.h: the entry point of libcohort_nccl.so, the NCCL transport built as a plug-in
 * (libcohort never links NCCL or the CUDA runtime), and the communicator it makes over the
 * device memory of a rank's GPU, bootstrapped through a host communicator. */
#ifndef COHORT_NCCL_PLUGIN_H
#define COHORT_NCCL_PLUGIN_H

#include "comm/comm_int.h"

/* What the plug-in needs to join: the rank, the deadline, the rank's CUDA device, and a
 * broadcast from rank 0 over the host communicator that carries NCCL's unique id. */
typedef struct coh_nccl_boot {
    int rank, size, device;
    double timeout_s;
    coh_status (*bcast)(void *ctx, void *buf, size_t bytes);
    void *ctx;
} coh_nccl_boot;

typedef coh_status (*coh_nccl_open_fn)(const coh_transport_host *host, const coh_nccl_boot *boot,
                                       const coh_transport_ops **ops, void **self);
#define COH_NCCL_PLUGIN_SYMBOL "cohort_transport_nccl_open"
#define COH_NCCL_PLUGIN_NAME "libcohort_nccl.so"

/* A communicator of boot's ranks whose collectives run NCCL on device memory (every buffer
 * passed to it must be CUDA device memory of this rank's GPU, LOCAL_RANK). Collective over
 * boot. COH_ERR_UNSUPPORTED naming what is missing (no plug-in in this build, NCCL, a GPU). */
coh_status coh_comm_create_nccl(coh_comm *boot, coh_comm **out);

#endif
