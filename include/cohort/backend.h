/* backend.h: which device backend the engine computes on (cpu in this build), and the memory
 * its allocator holds: the figure a GPU user reads as allocated memory. */
#ifndef COHORT_BACKEND_PUBLIC_H
#define COHORT_BACKEND_PUBLIC_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

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

#endif
