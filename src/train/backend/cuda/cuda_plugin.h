/* cuda_plugin.h: the entry point of libcohort_cuda.so, the CUDA backend built as a plug-in so
 * that libcohort and the cohort binary never link the CUDA runtime, cuBLAS or NCCL: they are
 * loaded when a run asks for --device cuda, and their absence is an error naming them. */
#ifndef COHORT_CUDA_PLUGIN_H
#define COHORT_CUDA_PLUGIN_H

#include <stddef.h>

#include "train/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Services libcohort lends the plug-in (which must not link libcohort: its error state is
 * libcohort's thread-local message). */
typedef struct coh_cuda_host {
    coh_status (*errf)(coh_status s, const char *fmt, ...);
} coh_cuda_host;

/* Opens the backend on CUDA device `device` (an index among the visible devices): creates the
 * rank's stream and cuBLAS handle. desc (n bytes) receives "NVIDIA H100 80GB HBM3 (sm_90,
 * 79.1 GiB)" for the start-up line. COH_ERR_UNSUPPORTED when there is no such device. */
typedef coh_status (*coh_cuda_open_fn)(const coh_cuda_host *host, int device,
                                       const coh_backend **out, char *desc, size_t n);
#define COH_CUDA_PLUGIN_SYMBOL "cohort_cuda_backend_open"
#define COH_CUDA_PLUGIN_NAME "libcohort_cuda.so"

#ifdef __cplusplus
}
#endif
#endif
