/* fake_nvml.c: a stand-in libnvidia-ml.so.1 for tests. It exports the real NVML symbol names
 * with the real signatures, serves the devices described in the file named by
 * COHORT_FAKE_NVML, appends each call's name to COHORT_FAKE_NVML_LOG, and refuses calls made
 * before nvmlInit_v2 or after nvmlShutdown, as the real library does.
 * Device file: one GPU per line,
 *   name|uuid|bus id|total MiB|used MiB|util %|mode|processes|cc|SMs|clock MHz|mig
 * mode is the NVML number (0 default, 2 prohibited, 3 exclusive process), cc "8.0", mig ""
 * or "uuid/gi/ci/MiB;..." (MIG mode enabled). COHORT_FAKE_NVML_INIT=N makes nvmlInit_v2
 * return N; COHORT_FAKE_NVML_DENY=I refuses the handle of GPU I (no permission). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct fake_dev {
    int is_mig;
    char name[96], uuid[96], bus[32];
    unsigned long long total, used;
    unsigned util, mode, procs, ccmaj, ccmin, sms, clock, gi, ci;
    int nmig;
    struct fake_dev *mig;
} fake_dev;

static fake_dev devs[16];
static int ndevs, initialized;

static void log_call(const char *name)
{
    const char *path = getenv("COHORT_FAKE_NVML_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", name);
        fclose(f);
    }
}

static void parse_mig(fake_dev *d, char *text)
{
    d->mig = calloc(8, sizeof *d->mig);
    for (char *tok = strtok(text, ";"); tok && d->mig && d->nmig < 8; tok = strtok(NULL, ";")) {
        fake_dev *m = &d->mig[d->nmig];
        unsigned long long mib;
        char uuid[96];
        if (sscanf(tok, "%95[^/]/%u/%u/%llu", uuid, &m->gi, &m->ci, &mib) != 4)
            continue;
        m->is_mig = 1;
        snprintf(m->uuid, sizeof m->uuid, "%s", uuid);
        m->total = mib << 20;
        d->nmig++;
    }
}

static void load(void)
{
    const char *path = getenv("COHORT_FAKE_NVML");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[1024];
    ndevs = 0;
    while (f && ndevs < 16 && fgets(line, sizeof line, f)) {
        fake_dev *d = &devs[ndevs];
        char mig[512] = "";
        unsigned long long total, used;
        line[strcspn(line, "\n")] = '\0';
        memset(d, 0, sizeof *d);
        int n = sscanf(line, "%95[^|]|%95[^|]|%31[^|]|%llu|%llu|%u|%u|%u|%u.%u|%u|%u|%511[^\n]",
                       d->name, d->uuid, d->bus, &total, &used, &d->util, &d->mode, &d->procs,
                       &d->ccmaj, &d->ccmin, &d->sms, &d->clock, mig);
        if (n < 12)
            continue;
        d->total = total << 20;
        d->used = used << 20;
        if (n == 13 && mig[0])
            parse_mig(d, mig);
        ndevs++;
    }
    if (f)
        fclose(f);
}

#define GUARD(name)                                                                            \
    do {                                                                                       \
        log_call(initialized ? name : "refused before nvmlInit_v2: " name);                    \
        if (!initialized)                                                                      \
            return 1; /* NVML_ERROR_UNINITIALIZED */                                           \
    } while (0)

EXPORT int nvmlInit_v2(void)
{
    log_call("nvmlInit_v2");
    const char *fail = getenv("COHORT_FAKE_NVML_INIT");
    if (fail && atoi(fail))
        return atoi(fail);
    load();
    initialized = 1;
    return 0;
}

EXPORT int nvmlShutdown(void)
{
    GUARD("nvmlShutdown");
    for (int i = 0; i < ndevs; i++)
        free(devs[i].mig);
    ndevs = 0;
    initialized = 0;
    return 0;
}

EXPORT const char *nvmlErrorString(int r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

EXPORT int nvmlDeviceGetCount_v2(unsigned int *n)
{
    GUARD("nvmlDeviceGetCount_v2");
    *n = (unsigned)ndevs;
    return 0;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int i, fake_dev **h)
{
    GUARD("nvmlDeviceGetHandleByIndex_v2");
    const char *deny = getenv("COHORT_FAKE_NVML_DENY");
    if (deny && *deny && (unsigned)atoi(deny) == i)
        return 4; /* NVML_ERROR_NO_PERMISSION */
    if (i >= (unsigned)ndevs)
        return 2;
    *h = &devs[i];
    return 0;
}

static int copy_str(char *dst, unsigned int len, const char *src)
{
    if (strlen(src) + 1 > len)
        return 7;
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

EXPORT int nvmlDeviceGetName(fake_dev *d, char *name, unsigned int len)
{
    GUARD("nvmlDeviceGetName");
    return copy_str(name, len, d->name);
}

EXPORT int nvmlDeviceGetUUID(fake_dev *d, char *uuid, unsigned int len)
{
    GUARD("nvmlDeviceGetUUID");
    return copy_str(uuid, len, d->uuid);
}

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info;

EXPORT int nvmlDeviceGetPciInfo_v3(fake_dev *d, pci_info *p)
{
    GUARD("nvmlDeviceGetPciInfo_v3");
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", d->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", d->bus + 4);
    return 0;
}

EXPORT int nvmlDeviceGetMemoryInfo(fake_dev *d, unsigned long long *mem /* total free used */)
{
    GUARD("nvmlDeviceGetMemoryInfo");
    mem[0] = d->total;
    mem[1] = d->total - d->used;
    mem[2] = d->used;
    return 0;
}

EXPORT int nvmlDeviceGetUtilizationRates(fake_dev *d, unsigned int *u /* gpu memory */)
{
    GUARD("nvmlDeviceGetUtilizationRates");
    u[0] = d->util;
    u[1] = 0;
    return 0;
}

EXPORT int nvmlDeviceGetComputeMode(fake_dev *d, int *mode)
{
    GUARD("nvmlDeviceGetComputeMode");
    *mode = (int)d->mode;
    return 0;
}

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} proc_info;

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(fake_dev *d, unsigned int *count,
                                                   proc_info *infos)
{
    GUARD("nvmlDeviceGetComputeRunningProcesses_v3");
    unsigned n = d->is_mig ? 0 : d->procs;
    if (*count < n) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    for (unsigned i = 0; i < n; i++)
        infos[i] = (proc_info){(unsigned)getpid(), 1 << 20, 0xFFFFFFFFu, 0xFFFFFFFFu};
    *count = n;
    return 0;
}

EXPORT int nvmlDeviceGetCudaComputeCapability(fake_dev *d, int *maj, int *min)
{
    GUARD("nvmlDeviceGetCudaComputeCapability");
    *maj = (int)d->ccmaj;
    *min = (int)d->ccmin;
    return 0;
}

typedef struct {
    unsigned int sms, copy, dec, enc, jpeg, ofa, gi_slices, ci_slices;
    unsigned long long mem_mb;
} attrs;

EXPORT int nvmlDeviceGetAttributes_v2(fake_dev *d, attrs *a)
{
    GUARD("nvmlDeviceGetAttributes_v2");
    memset(a, 0, sizeof *a);
    a->sms = d->sms;
    a->mem_mb = d->total >> 20;
    return 0;
}

EXPORT int nvmlDeviceGetMaxClockInfo(fake_dev *d, int type, unsigned int *clock)
{
    GUARD("nvmlDeviceGetMaxClockInfo");
    if (type != 1) /* only NVML_CLOCK_SM is served */
        return 3;
    *clock = d->clock;
    return 0;
}

EXPORT int nvmlDeviceGetMigMode(fake_dev *d, unsigned int *cur, unsigned int *pending)
{
    GUARD("nvmlDeviceGetMigMode");
    *cur = *pending = d->nmig > 0;
    return 0;
}

EXPORT int nvmlDeviceGetMaxMigDeviceCount(fake_dev *d, unsigned int *count)
{
    GUARD("nvmlDeviceGetMaxMigDeviceCount");
    *count = d->nmig ? 7 : 0;
    return 0;
}

EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(fake_dev *d, unsigned int i, fake_dev **m)
{
    GUARD("nvmlDeviceGetMigDeviceHandleByIndex");
    if (i >= (unsigned)d->nmig)
        return 6; /* NVML_ERROR_NOT_FOUND: an empty slot */
    *m = &d->mig[i];
    return 0;
}

EXPORT int nvmlDeviceGetGpuInstanceId(fake_dev *m, unsigned int *id)
{
    GUARD("nvmlDeviceGetGpuInstanceId");
    *id = m->gi;
    return 0;
}

EXPORT int nvmlDeviceGetComputeInstanceId(fake_dev *m, unsigned int *id)
{
    GUARD("nvmlDeviceGetComputeInstanceId");
    *id = m->ci;
    return 0;
}
