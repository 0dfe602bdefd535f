/* cuda_load.c: finds and opens the CUDA backend plug-in (libcohort_cuda.so) when a run asks for
 * --device cuda, so that libcohort and the cohort binary start and run every CPU command on a
 * machine without a GPU, a driver or the CUDA libraries. COHORT_CUDA_PLUGIN names the plug-in,
 * else it is looked for beside the library or program holding this code, in the install
 * layout (PREFIX/lib/cohort/), else on the loader's search path. Builds without COHORT_CUDA
 * refuse the device as they always did. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/log.h"
#include "train/backend/backend.h"
#include "train/backend/cuda/cuda_plugin.h"

#ifndef COHORT_PLUGIN_RELDIR
#define COHORT_PLUGIN_RELDIR "../lib/cohort"
#endif

#ifdef COHORT_HAVE_CUDA
static char gpu_desc[256];

/* dir/name opened when it exists; the first loader error kept in err (a library the plug-in
 * needs, libcudart or libcublas, missing is named there). */
static void *open_in(const char *file, const char *suffix, char *err, size_t n)
{
    char real[PATH_MAX], path[PATH_MAX + 128];
    if (!realpath(file, real))
        return NULL;
    snprintf(path, sizeof path, "%s%s/%s", dirname(real), suffix, COH_CUDA_PLUGIN_NAME);
    if (access(path, F_OK))
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && !err[0])
        snprintf(err, n, "'%.1500s' did not load: %.1000s", path, dlerror());
    return h;
}

static void *open_plugin(char *err, size_t n)
{
    const char *env = getenv("COHORT_CUDA_PLUGIN");
    if (env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(err, n, "'%.1500s' (COHORT_CUDA_PLUGIN) did not load: %.1000s", env,
                     dlerror());
        return h;
    }
    Dl_info info;
    void *h = NULL;
    if (dladdr((void *)open_plugin, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
        h = open_in(info.dli_fname, "", err, n);
    if (!h)
        h = open_in("/proc/self/exe", "", err, n);
    if (!h)
        h = open_in("/proc/self/exe", "/" COHORT_PLUGIN_RELDIR, err, n);
    if (!h && !err[0] && !(h = dlopen(COH_CUDA_PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL)))
        snprintf(err, n, "no '%s' beside the program nor on the loader's search path: %.1000s",
                 COH_CUDA_PLUGIN_NAME, dlerror());
    return h;
}

/* The rank's device: LOCAL_RANK among the devices visible to it (what cohort run, torchrun
 * and the MPI launchers set), 0 without a launcher. */
static int rank_device(void)
{
    const char *lr = getenv("LOCAL_RANK");
    char *end;
    long v = lr && *lr ? strtol(lr, &end, 10) : 0;
    return lr && *lr && (*end || v < 0 || v > 4096) ? -1 : (int)v;
}

coh_status coh_backend_cuda(const char *name, const coh_backend **out)
{
    static const coh_backend *opened;
    static const coh_cuda_host host = {coh_errf};
    char err[2600] = "";
    *out = NULL;
    if (opened) {
        *out = opened;
        return COH_OK;
    }
    void *h = open_plugin(err, sizeof err);
    if (!h)
        return coh_errf(COH_ERR_UNSUPPORTED, "device '%s': the CUDA backend is unavailable: %s",
                        name, err);
    coh_cuda_open_fn fn = (coh_cuda_open_fn)dlsym(h, COH_CUDA_PLUGIN_SYMBOL);
    if (!fn)
        return coh_errf(COH_ERR_UNSUPPORTED, "device '%s': the CUDA plug-in lacks %s", name,
                        COH_CUDA_PLUGIN_SYMBOL);
    int dev = rank_device();
    if (dev < 0)
        return coh_errf(COH_ERR_INVALID, "device '%s': invalid LOCAL_RANK '%s' (valid: a "
                        "non-negative integer)", name, getenv("LOCAL_RANK"));
    coh_status st = fn(&host, dev, out, gpu_desc, sizeof gpu_desc);
    if (st)
        return coh_err_prefix(st, "device '%s'", name);
    opened = *out; /* the plug-in stays loaded: its stream and memory live with the process */
    coh_info("device cuda: %s", gpu_desc); /* the start-up line names the GPU */
    return COH_OK;
}

const char *coh_backend_cuda_desc(void) { return gpu_desc; }
#else
coh_status coh_backend_cuda(const char *name, const coh_backend **out)
{
    *out = NULL;
    return coh_errf(COH_ERR_UNSUPPORTED, "device '%s': this build has no CUDA backend "
                    "(valid: cpu)", name);
}

const char *coh_backend_cuda_desc(void) { return ""; }
#endif
