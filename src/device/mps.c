/* mps.c: the one Apple MPS device of a Mac with Apple silicon (nothing elsewhere: MPS exists
 * only on macOS). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"

#if defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>

/* Apple silicon, and not switched off with Lightning's DISABLE_MPS=1. */
static int mps_present(uint64_t *mem_bytes, char *name, size_t cap)
{
    int arm64 = 0;
    size_t len = sizeof arm64;
    const char *off = getenv("DISABLE_MPS");
    if (off && !strcmp(off, "1"))
        return 0;
    if (sysctlbyname("hw.optional.arm64", &arm64, &len, NULL, 0) != 0 || !arm64)
        return 0;
    len = sizeof *mem_bytes;
    if (sysctlbyname("hw.memsize", mem_bytes, &len, NULL, 0) != 0)
        *mem_bytes = 0;
    len = cap;
    if (sysctlbyname("machdep.cpu.brand_string", name, &len, NULL, 0) != 0)
        snprintf(name, cap, "Apple silicon");
    return 1;
}
#else
static int mps_present(uint64_t *mem_bytes, char *name, size_t cap)
{
    (void)mem_bytes;
    (void)name;
    (void)cap;
    return 0;
}
#endif

coh_status mps_probe(coh_inventory *inv)
{
    uint64_t mem = 0;
    char name[COH_DEV_NAME_MAX] = "";
    if (!mps_present(&mem, name, sizeof name))
        return COH_OK;
    coh_gpu *g = realloc(inv->gpus, (size_t)(inv->ngpus + 1) * sizeof *g);
    if (!g)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    inv->gpus = g;
    g = &inv->gpus[inv->ngpus++];
    memset(g, 0, sizeof *g);
    g->vendor = COH_VENDOR_APPLE;
    g->tiles = 1;
    g->module_id = -1;
    snprintf(g->name, sizeof g->name, "%.80s (MPS)", name);
    snprintf(g->uuid, sizeof g->uuid, "mps-0");
    g->memory_total_mib = mem >> 20 ? mem >> 20 : 1; /* unified memory, shared with the CPU */
    return COH_OK;
}
