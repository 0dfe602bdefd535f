/* backend.c: choosing the process's device backend by name, and the counting allocator every
 * buffer of a rank goes through: bytes held now and their peak, what a GPU user reads as
 * allocated memory (resident pages stay a second, process-level figure). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend/backend.h"

static const coh_backend *current;

coh_status coh_backend_find(const char *name, const coh_backend **out)
{
    *out = NULL;
    if (name && !strcmp(name, "cpu")) {
        *out = coh_backend_cpu();
        return COH_OK;
    }
    if (name && !strcmp(name, "cpu-guarded")) {
        *out = coh_backend_guarded();
        return COH_OK;
    }
    if (name && (!strcmp(name, "cuda") || !strcmp(name, "gpu")))
        return coh_backend_cuda(name, out); /* cuda_load.c */
    return coh_errf(COH_ERR_INVALID, "invalid device '%s': valid: cpu, cuda, cpu-guarded", name ? name : "");
}

coh_status coh_backend_select(const char *name)
{
    const coh_backend *be;
    coh_status st = coh_backend_find(name, &be);
    if (!st)
        __atomic_store_n(&current, be, __ATOMIC_RELEASE);
    return st;
}

const coh_backend *coh_backend_current(void)
{
    const coh_backend *be = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
    return be ? be : coh_backend_cpu();
}

const char *coh_backend_name(const coh_backend *be) { return be ? be->name : "none"; }

const char *coh_backend_device_desc(const coh_backend *be)
{
    return be && !strcmp(be->name, "cuda") ? coh_backend_cuda_desc() : "";
}

/* ---- the counting allocator: a registry of live allocations (tens per rank), so that free
 * needs no size and a device pointer needs no header ---- */
typedef struct dev_block {
    void *p;
    size_t bytes;
} dev_block;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_block *blocks;
static size_t nblocks, capblocks;
static uint64_t held, peak;

static void count_locked(int64_t delta)
{
    if (delta < 0 && (uint64_t)-delta > held)
        held = 0; /* a retake/release pair out of step never wraps the figure */
    else
        held += (uint64_t)delta;
    peak = held > peak ? held : peak;
}

void *coh_dev_alloc(const coh_backend *be, size_t bytes)
{
    void *p = be->alloc(bytes ? bytes : 1);
    if (!p)
        return NULL;
    pthread_mutex_lock(&mem_lock);
    if (nblocks == capblocks) {
        size_t cap = capblocks ? 2 * capblocks : 64;
        dev_block *nb = realloc(blocks, cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&mem_lock);
            be->free(p, bytes ? bytes : 1);
            return NULL;
        }
        blocks = nb;
        capblocks = cap;
    }
    blocks[nblocks++] = (dev_block){p, bytes};
    count_locked((int64_t)bytes);
    pthread_mutex_unlock(&mem_lock);
    return p;
}

void coh_dev_free(const coh_backend *be, void *p)
{
    if (!p)
        return;
    size_t bytes = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = nblocks; i-- > 0;)
        if (blocks[i].p == p) {
            bytes = blocks[i].bytes;
            blocks[i] = blocks[--nblocks];
            count_locked(-(int64_t)bytes);
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    be->free(p, bytes ? bytes : 1);
}

static void count(int64_t delta)
{
    pthread_mutex_lock(&mem_lock);
    count_locked(delta);
    pthread_mutex_unlock(&mem_lock);
}

/* A registry entry with no backend memory behind it: freed by untrack, never by the backend. */
void coh_dev_track(const coh_backend *be, void *p, size_t bytes)
{
    (void)be;
    pthread_mutex_lock(&mem_lock);
    if (nblocks == capblocks) {
        size_t cap = capblocks ? 2 * capblocks : 64;
        dev_block *nb = realloc(blocks, cap * sizeof *nb);
        if (!nb) { /* the figure is then short by these bytes; nothing else depends on it */
            pthread_mutex_unlock(&mem_lock);
            return;
        }
        blocks = nb;
        capblocks = cap;
    }
    blocks[nblocks++] = (dev_block){p, bytes};
    count_locked((int64_t)bytes);
    pthread_mutex_unlock(&mem_lock);
}

void coh_dev_untrack(const coh_backend *be, void *p)
{
    (void)be;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = nblocks; p && i-- > 0;)
        if (blocks[i].p == p) {
            count_locked(-(int64_t)blocks[i].bytes);
            blocks[i] = blocks[--nblocks];
            break;
        }
    pthread_mutex_unlock(&mem_lock);
}

void coh_dev_zero_release(const coh_backend *be, void *p, size_t bytes)
{
    if (p && bytes)
        be->release(p, bytes);
}

void coh_dev_release(const coh_backend *be, void *p, size_t bytes)
{
    coh_dev_zero_release(be, p, bytes);
    count(-(int64_t)bytes);
}

void coh_dev_retake(const coh_backend *be, size_t bytes)
{
    (void)be;
    count((int64_t)bytes);
}

void coh_dev_forget(const coh_backend *be, size_t bytes)
{
    (void)be;
    count(-(int64_t)bytes);
}

void coh_dev_memory_get(coh_dev_memory *out)
{
    pthread_mutex_lock(&mem_lock);
    *out = (coh_dev_memory){held, peak, nblocks};
    pthread_mutex_unlock(&mem_lock);
}

size_t coh_dev_size(const void *p)
{
    size_t bytes = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; p && i < nblocks; i++)
        if (blocks[i].p == p)
            bytes = blocks[i].bytes;
    pthread_mutex_unlock(&mem_lock);
    return bytes;
}

void coh_dev_memory_reset_peak(void)
{
    pthread_mutex_lock(&mem_lock);
    peak = held;
    pthread_mutex_unlock(&mem_lock);
}
