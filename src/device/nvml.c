/* nvml.c: NVIDIA GPUs through NVML, loaded at run time with dlopen so that cohort neither
 * builds nor fails without the driver. The few NVML types used are declared here with the
 * layout of nvml.h (NVML API version 11/12). */
#include <dlfcn.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device/device_int.h"
#include "util/strutil.h"

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7
};
enum { NVML_CLOCK_SM = 1 };
enum { NVML_COMPUTEMODE_DEFAULT = 0, NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
       NVML_COMPUTEMODE_PROHIBITED = 2, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3 };
enum { NVML_DEVICE_MIG_ENABLE = 1 };

typedef struct nvmlPciInfo_t {      /* nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 */
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct nvmlMemory_t {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct nvmlUtilization_t {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct nvmlProcessInfo_t {  /* as filled by nvmlDeviceGetComputeRunningProcesses_v3 */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct nvmlDeviceAttributes_t {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct nvml_api {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    /* optional: a missing symbol or NOT_SUPPORTED leaves the field at its default */
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*mode)(nvmlDevice_t, int *);
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*attrs)(nvmlDevice_t, nvmlDeviceAttributes_t *);
    nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*mig_max)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*mig_handle)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*gi_id)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*ci_id)(nvmlDevice_t, unsigned int *);
} nvml_api;

#define SYM(field, name) (*(void **)&api->field = dlsym(api->lib, name))

/* Resolve the symbols; returns the first missing required one, or NULL. */
static const char *nvml_bind(nvml_api *api)
{
    if (!SYM(init, "nvmlInit_v2")) return "nvmlInit_v2";
    if (!SYM(shutdown, "nvmlShutdown")) return "nvmlShutdown";
    if (!SYM(error_string, "nvmlErrorString")) return "nvmlErrorString";
    if (!SYM(count, "nvmlDeviceGetCount_v2")) return "nvmlDeviceGetCount_v2";
    if (!SYM(handle, "nvmlDeviceGetHandleByIndex_v2")) return "nvmlDeviceGetHandleByIndex_v2";
    if (!SYM(name, "nvmlDeviceGetName")) return "nvmlDeviceGetName";
    if (!SYM(uuid, "nvmlDeviceGetUUID")) return "nvmlDeviceGetUUID";
    if (!SYM(pci, "nvmlDeviceGetPciInfo_v3")) return "nvmlDeviceGetPciInfo_v3";
    if (!SYM(memory, "nvmlDeviceGetMemoryInfo")) return "nvmlDeviceGetMemoryInfo";
    SYM(util, "nvmlDeviceGetUtilizationRates");
    SYM(mode, "nvmlDeviceGetComputeMode");
    SYM(procs, "nvmlDeviceGetComputeRunningProcesses_v3");
    SYM(cc, "nvmlDeviceGetCudaComputeCapability");
    SYM(attrs, "nvmlDeviceGetAttributes_v2");
    SYM(max_clock, "nvmlDeviceGetMaxClockInfo");
    SYM(mig_mode, "nvmlDeviceGetMigMode");
    SYM(mig_max, "nvmlDeviceGetMaxMigDeviceCount");
    SYM(mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex");
    SYM(gi_id, "nvmlDeviceGetGpuInstanceId");
    SYM(ci_id, "nvmlDeviceGetComputeInstanceId");
    return NULL;
}

static coh_status nvml_fail(const nvml_api *api, const char *fn, int index, nvmlReturn_t r)
{
    return coh_errf(COH_ERR_SYSTEM, "nvml: gpu %d: %s: %s", index, fn, api->error_string(r));
}

/* Owner names of the processes, deduplicated, where /proc shows them. */
static void add_owner(char *owners, size_t cap, unsigned int pid)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof path, "/proc/%u", pid);
    if (stat(path, &sb) != 0)
        return;
    struct passwd pw, *res = NULL;
    char buf[1024], name[64];
    if (getpwuid_r(sb.st_uid, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(name, sizeof name, "%s", res->pw_name);
    else
        snprintf(name, sizeof name, "uid %u", (unsigned)sb.st_uid);
    size_t nl = strlen(name);
    for (const char *p = owners; (p = strstr(p, name)); p += nl)
        if ((p == owners || p[-1] == ',') && (p[nl] == ',' || p[nl] == '\0'))
            return;
    size_t len = strlen(owners);
    coh_str_append(owners, cap, &len, "%s%s", len ? "," : "", name);
}

/* Number of compute processes (and owners into owners[] when not NULL). */
static int nvml_processes(const nvml_api *api, nvmlDevice_t h, char *owners, size_t cap)
{
    if (!api->procs)
        return 0;
    unsigned int n = 0;
    nvmlReturn_t r = api->procs(h, &n, NULL);
    if (r == NVML_SUCCESS || r != NVML_ERROR_INSUFFICIENT_SIZE)
        return 0;
    unsigned int room = n + 8; /* processes may start between the two calls */
    /* Twice the declared entry size: a library with a larger entry cannot overflow. */
    nvmlProcessInfo_t *info = calloc((size_t)room * 2, sizeof *info);
    if (!info)
        return (int)n;
    unsigned int got = room;
    if (api->procs(h, &got, info) == NVML_SUCCESS) {
        n = got;
        for (unsigned int i = 0; owners && i < got; i++)
            add_owner(owners, cap, info[i].pid);
    }
    free(info);
    return (int)n;
}

static coh_status nvml_mig(const nvml_api *api, nvmlDevice_t h, coh_gpu *g)
{
    unsigned int cur = 0, pend = 0, max = 0;
    if (!api->mig_mode || !api->mig_max || !api->mig_handle ||
        api->mig_mode(h, &cur, &pend) != NVML_SUCCESS || cur != NVML_DEVICE_MIG_ENABLE ||
        api->mig_max(h, &max) != NVML_SUCCESS || max == 0)
        return COH_OK;
    g->mig = calloc(max, sizeof *g->mig);
    if (!g->mig)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (unsigned int i = 0; i < max; i++) {
        nvmlDevice_t m;
        if (api->mig_handle(h, i, &m) != NVML_SUCCESS)
            continue; /* NOT_FOUND: no instance in this slot */
        coh_mig *mi = &g->mig[g->nmig];
        unsigned int gi = 0, ci = 0;
        nvmlMemory_t mem = {0, 0, 0};
        if (api->uuid(m, mi->uuid, sizeof mi->uuid) != NVML_SUCCESS)
            continue;
        if (api->gi_id)
            api->gi_id(m, &gi);
        if (api->ci_id)
            api->ci_id(m, &ci);
        api->memory(m, &mem);
        mi->gpu_instance = (int)gi;
        mi->compute_instance = (int)ci;
        mi->memory_total_mib = mem.total >> 20;
        mi->memory_used_mib = mem.used >> 20;
        mi->processes = nvml_processes(api, m, NULL, 0);
        g->nmig++;
    }
    return COH_OK;
}

static void nvml_optional(const nvml_api *api, nvmlDevice_t h, coh_gpu *g)
{
    nvmlUtilization_t u = {0, 0};
    int mode = NVML_COMPUTEMODE_DEFAULT, maj = 0, min = 0;
    nvmlDeviceAttributes_t at;
    unsigned int clock = 0;
    memset(&at, 0, sizeof at);
    if (api->util && api->util(h, &u) == NVML_SUCCESS)
        g->utilization_pct = u.gpu > 100 ? 100 : (int)u.gpu;
    if (api->mode && api->mode(h, &mode) == NVML_SUCCESS)
        g->compute_mode = mode == NVML_COMPUTEMODE_PROHIBITED ? COH_COMPUTE_PROHIBITED
                          : mode == NVML_COMPUTEMODE_EXCLUSIVE_PROCESS ||
                                  mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD
                              ? COH_COMPUTE_EXCLUSIVE_PROCESS
                              : COH_COMPUTE_DEFAULT;
    if (api->cc && api->cc(h, &maj, &min) == NVML_SUCCESS) {
        g->cc_major = maj;
        g->cc_minor = min;
    }
    if (api->attrs && api->attrs(h, &at) == NVML_SUCCESS)
        g->multiprocessors = (int)at.multiprocessorCount;
    if (api->max_clock && api->max_clock(h, NVML_CLOCK_SM, &clock) == NVML_SUCCESS)
        g->clock_mhz = (int)clock;
    g->processes = nvml_processes(api, h, g->owners, sizeof g->owners);
}

static coh_status nvml_device(const nvml_api *api, unsigned int i, coh_gpu *g)
{
    nvmlDevice_t h;
    nvmlReturn_t r;
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    memset(&pci, 0, sizeof pci);
    if ((r = api->handle(i, &h)) != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetHandleByIndex_v2", (int)i, r);
    if ((r = api->name(h, g->name, sizeof g->name)) != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetName", (int)i, r);
    if ((r = api->uuid(h, g->uuid, sizeof g->uuid)) != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetUUID", (int)i, r);
    if ((r = api->pci(h, &pci)) != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetPciInfo_v3", (int)i, r);
    if ((r = api->memory(h, &mem)) != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetMemoryInfo", (int)i, r);
    g->vendor = COH_VENDOR_NVIDIA;
    g->physical_index = (int)i; /* NVML enumerates in PCI bus order, as nvidia-smi shows */
    g->tiles = 1;
    g->module_id = -1;
    snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%.31s", pci.busId);
    g->memory_total_mib = mem.total >> 20;
    g->memory_used_mib = mem.used >> 20;
    nvml_optional(api, h, g);
    return nvml_mig(api, h, g);
}

static coh_status nvml_devices(const nvml_api *api, coh_inventory *inv)
{
    unsigned int n = 0;
    nvmlReturn_t r = api->count(&n);
    if (r != NVML_SUCCESS)
        return nvml_fail(api, "nvmlDeviceGetCount_v2", -1, r);
    coh_gpu *gpus = realloc(inv->gpus, (size_t)(inv->ngpus + (int)n + 1) * sizeof *gpus);
    if (!gpus)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    inv->gpus = gpus;
    for (unsigned int i = 0; i < n; i++) {
        coh_gpu *g = &inv->gpus[inv->ngpus];
        memset(g, 0, sizeof *g);
        coh_status st = nvml_device(api, i, g);
        if (st == COH_ERR_NOMEM) {
            free(g->mig);
            return st;
        }
        if (st != COH_OK) {
            /* A GPU this process may not use (no permission, fallen off the bus) is left out,
             * as CUDA leaves it out; the note says which and why. */
            size_t len = strlen(inv->note);
            coh_str_append(inv->note, sizeof inv->note, &len, "%sskipped %s", len ? "; " : "",
                       coh_last_error() + strlen("nvml: "));
            free(g->mig);
            continue;
        }
        inv->ngpus++;
    }
    return COH_OK;
}

coh_status nvml_probe(coh_inventory *inv)
{
    const char *path = getenv("COHORT_NVML_LIB");
    if (!path || !*path)
        path = "libnvidia-ml.so.1";
    nvml_api api;
    memset(&api, 0, sizeof api);
    api.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api.lib) {
        const char *e = dlerror();
        snprintf(inv->note, sizeof inv->note, "no NVIDIA driver found (%s)",
                 e ? e : "cannot load libnvidia-ml.so.1");
        return COH_OK;
    }
    const char *missing = nvml_bind(&api);
    if (missing) {
        snprintf(inv->note, sizeof inv->note, "no usable NVIDIA driver: %s lacks %s", path,
                 missing);
        dlclose(api.lib);
        return COH_OK;
    }
    nvmlReturn_t r = api.init();
    if (r != NVML_SUCCESS) {
        snprintf(inv->note, sizeof inv->note, "no NVIDIA driver loaded: nvmlInit_v2: %s",
                 api.error_string(r));
        dlclose(api.lib);
        return COH_OK;
    }
    coh_status st = nvml_devices(&api, inv);
    api.shutdown();
    dlclose(api.lib);
    return st;
}

coh_status coh_inventory_probe(coh_inventory **out)
{
    *out = NULL;
    coh_inventory *inv = inv_alloc();
    if (!inv)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_status st = coh_cpu_probe(&inv->cpu);
    if (st == COH_OK)
        st = nvml_probe(inv);
    if (st == COH_OK)
        st = mps_probe(inv);
    if (st != COH_OK) {
        coh_inventory_destroy(inv);
        return st;
    }
    snprintf(inv->source, sizeof inv->source, "%s", inv->ngpus || !inv->note[0] ? "nvml"
                                                                                 : "probe");
    *out = inv;
    return COH_OK;
}
