/* backend.h: which device backend the engine computes on (cpu in this build), and the memory
 * its allocator holds: the figure a GPU user reads as allocated memory. */
#ifndef COHORT_BACKEND_PUBLIC_H
#define COHORT_BACKEND_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct coh_backend coh_backend;

/* The backend called `name`: "cpu", "cpu-guarded" (the CPU's with device memory closed to the
 * host outside backend calls: a test device that finds host code a GPU would fault on), "cuda"
 * where built. A device kind this build has no backend for ("cuda") is
 * COH_ERR_UNSUPPORTED, anything else COH_ERR_INVALID, both naming the value. */
coh_status coh_backend_find(const char *name, const coh_backend **out);
/* Models and optimizers created from now on in this process use the backend called `name`
 * (coh_backend_find's errors); "cpu" until then. */
coh_status coh_backend_select(const char *name);
const coh_backend *coh_backend_current(void);
const char *coh_backend_name(const coh_backend *be);

/* Bytes the backend's allocator holds for this process (a rank) now, the most it held since the
 * last reset, and the live allocations. Buffers given back (ZeRO, pipeline stages) are not held
 * until written again. */
typedef struct coh_dev_memory {
    uint64_t held, peak;
    uint64_t allocations;
} coh_dev_memory;
void coh_dev_memory_get(coh_dev_memory *out);
/* The peak restarts from what is held now. */
void coh_dev_memory_reset_peak(void);
/* Bytes of the live allocation that starts at p, as the allocator recorded it (0: none). */
size_t coh_dev_size(const void *p);

/* The device a backend opened, for output: "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, device 0)"
 * for cuda once opened; "" for the CPU's backends. */
const char *coh_backend_device_desc(const coh_backend *be);

/* ---- measuring a device through its table (backend_measure.c) ---- */
/* One product's shape, C (M x N) = A (M x K) B (K x N) row-major, and its measured time. */
typedef struct coh_gemm_timing {
    int M, N, K;
    double seconds; /* the median of 5 rounds, each at least min_s / 5, per product */
} coh_gemm_timing;
/* Times each shape's bare product (bf16 operands with fp32 accumulation, or fp32) on the backend
 * called `name`, on random operands. coh_backend_find's errors, COH_ERR_UNSUPPORTED without bf16
 * products, COH_ERR_NOMEM, COH_ERR_INVALID for a side below 1, or the device's error. */
coh_status coh_backend_time_gemms(const char *name, int bf16, coh_gemm_timing *shapes, int n,
                                  double min_s);
/* The elementwise stream y += x over n floats (bytes read and written per second) and the time
 * one small queued op costs (the per-op overhead a model pays on short kernels). */
coh_status coh_backend_time_stream(const char *name, size_t n, double min_s, double *bytes_per_s,
                                   double *op_s);

#ifdef __cplusplus
}
#endif
#endif
