/* mpi_load.c: finds and opens the MPI transport plugin (libcohort_mpi.so), so that libcohort
 * itself never links libmpi: COHORT_MPI_PLUGIN names it, else it is looked for next to the
 * library or program holding this code, else on the loader's search path. A job started by a
 * PMI launcher (MPICH's Hydra, srun --mpi=pmi2) tries MPICH's build, libcohort_mpich.so, first. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"

#define PLUGIN_NAME "libcohort_mpi.so"     /* built on the default MPI (Open MPI on Debian) */
#define MPICH_PLUGIN "libcohort_mpich.so"  /* built on MPICH, when it is installed */

/* NAME in the directory of the library or program holding this code, or NULL. */
static void *open_beside(const char *name)
{
    Dl_info info;
    if (!dladdr((void *)open_beside, &info) || !info.dli_fname)
        return NULL;
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    snprintf(path, sizeof path, "%s/%s", dirname(dir), name);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void *open_plugin(int pmi, char *tried, size_t n)
{
    const char *env = getenv("COHORT_MPI_PLUGIN");
    if (env) {
        snprintf(tried, n, "'%s' (COHORT_MPI_PLUGIN)", env);
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    }
    void *h = pmi ? open_beside(MPICH_PLUGIN) : NULL;
    if (!h)
        h = open_beside(PLUGIN_NAME);
    if (h)
        return h;
    snprintf(tried, n, "'%s' next to the cohort library and on the library path", PLUGIN_NAME);
    return dlopen(PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
}

coh_status coh_mpi_load(double timeout_s, int pmi, const coh_transport_ops **ops, void **self,
                        int *rank, int *size)
{
    char tried[4400];
    void *h = open_plugin(pmi, tried, sizeof tried);
    if (!h)
        return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: cannot load %s: %s "
                        "(build cohort with MPI installed)", tried, dlerror());
    coh_transport_plugin_fn fn = (coh_transport_plugin_fn)dlsym(h, COH_MPI_PLUGIN_SYMBOL);
    if (!fn)
        return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: %s lacks %s", tried,
                        COH_MPI_PLUGIN_SYMBOL);
    /* The plugin stays loaded for the life of the process: MPI cannot be initialised twice. */
    return fn(&coh_host, timeout_s, ops, self, rank, size);
}
