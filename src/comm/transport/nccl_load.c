/* nccl_load.c: opens the NCCL transport plug-in (libcohort_nccl.so: COHORT_NCCL_PLUGIN, else
 * beside the library or program holding this code, else the install's lib/cohort, else the
 * loader's path) and makes a communicator of it, NCCL's unique id sent from rank 0 over a host
 * communicator (shared memory or MPI) as the launcher's ranks already meet there. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/transport/nccl_plugin.h"

#ifndef COHORT_PLUGIN_RELDIR
#define COHORT_PLUGIN_RELDIR "../lib/cohort"
#endif

#ifdef COHORT_HAVE_NCCL
static void *open_beside(const char *file, const char *suffix)
{
    char real[PATH_MAX], path[PATH_MAX + 128];
    if (!realpath(file, real))
        return NULL;
    snprintf(path, sizeof path, "%s%s/%s", dirname(real), suffix, COH_NCCL_PLUGIN_NAME);
    return access(path, F_OK) ? NULL : dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void *open_plugin(void)
{
    const char *env = getenv("COHORT_NCCL_PLUGIN");
    if (env)
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    Dl_info info;
    void *h = NULL;
    if (dladdr((void *)open_plugin, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
        h = open_beside(info.dli_fname, "");
    if (!h)
        h = open_beside("/proc/self/exe", "");
    if (!h)
        h = open_beside("/proc/self/exe", "/" COHORT_PLUGIN_RELDIR);
    return h ? h : dlopen(COH_NCCL_PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
}

static coh_status boot_bcast(void *ctx, void *buf, size_t bytes)
{
    return coh_broadcast((coh_comm *)ctx, buf, bytes, COH_U8, 0);
}

static int local_rank(void)
{
    const char *s = getenv("LOCAL_RANK");
    return s && *s ? atoi(s) : 0;
}

coh_status coh_comm_create_nccl(coh_comm *boot, coh_comm **out)
{
    *out = NULL;
    void *h = open_plugin();
    if (!h)
        return coh_errf(COH_ERR_UNSUPPORTED, "nccl transport unavailable: %s (set "
                        "COHORT_NCCL_PLUGIN to the plug-in's path)", dlerror());
    coh_nccl_open_fn fn = (coh_nccl_open_fn)dlsym(h, COH_NCCL_PLUGIN_SYMBOL);
    if (!fn)
        return coh_errf(COH_ERR_UNSUPPORTED, "nccl transport unavailable: the plug-in lacks %s",
                        COH_NCCL_PLUGIN_SYMBOL);
    coh_nccl_boot b = {boot->rank, boot->size, local_rank(), boot->timeout_s, boot_bcast, boot};
    const coh_transport_ops *ops;
    void *tp;
    coh_status st = fn(&coh_host, &b, &ops, &tp);
    if (st)
        return st;
    return coh_comm_wrap(ops, tp, boot->rank, boot->size, boot->timeout_s, out);
}
#else
coh_status coh_comm_create_nccl(coh_comm *boot, coh_comm **out)
{
    (void)boot;
    *out = NULL;
    return coh_errf(COH_ERR_UNSUPPORTED, "nccl transport unavailable: this build has no NCCL "
                    "(configure with -DCOHORT_CUDA=ON where NCCL is installed)");
}
#endif
