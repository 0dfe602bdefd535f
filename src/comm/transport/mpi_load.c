/* mpi_load.c: finds and opens the MPI transport plugin (libcohort_mpi.so), so that libcohort
 * itself never links libmpi: COHORT_MPI_PLUGIN names it, else it is looked for beside the
 * shared library holding this code and beside the program (the build tree), in the install
 * layout (PREFIX/lib/cohort/ for PREFIX/bin/cohort and PREFIX/lib/libcohort.so), else on the
 * loader's search path. A job started by a PMI launcher (MPICH's Hydra, srun --mpi=pmi2)
 * tries MPICH's build, libcohort_mpich.so, first. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_int.h"

#define PLUGIN_NAME "libcohort_mpi.so"     /* built on the default MPI (Open MPI on Debian) */
#define MPICH_PLUGIN "libcohort_mpich.so"  /* built on MPICH, when it is installed */
#ifndef COHORT_PLUGIN_RELDIR
#define COHORT_PLUGIN_RELDIR "../lib/cohort" /* the install's plug-in dir from its bin dir */
#endif

#define MAX_DIRS 4

typedef struct search {
    char dirs[MAX_DIRS][PATH_MAX];
    int ndirs;
    char tried[2048];   /* the directories, quoted, for the error */
    char failed[2600];  /* a plug-in that exists but did not load, and why (dlerror) */
} search;

static void add_dir(search *s, const char *dir)
{
    for (int i = 0; i < s->ndirs; i++)
        if (!strcmp(s->dirs[i], dir))
            return;
    if (s->ndirs == MAX_DIRS)
        return;
    snprintf(s->dirs[s->ndirs++], PATH_MAX, "%.4000s", dir); /* longer: not a real dir */
    size_t k = strlen(s->tried);
    snprintf(s->tried + k, sizeof s->tried - k, "%s'%s'", k ? ", " : "", dir);
}

/* FILE's real directory (symlinks resolved), with SUFFIX ("", "/cohort", "/../lib/cohort"). */
static void add_beside(search *s, const char *file, const char *suffix)
{
    char real[PATH_MAX], dir[PATH_MAX + 64];
    if (!realpath(file, real))
        return;
    snprintf(dir, sizeof dir, "%s%s", dirname(real), suffix);
    char clean[PATH_MAX];
    add_dir(s, realpath(dir, clean) ? clean : dir);
}

/* Where the plug-ins may lie. dladdr names the file holding this code: the shared library, or
 * for the program itself only what argv[0] said (a bare "cohort" found on PATH names nothing),
 * so the program is found through /proc/self/exe instead. */
static void search_dirs(search *s)
{
    Dl_info info;
    if (dladdr((void *)search_dirs, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
        add_beside(s, info.dli_fname, "");
        add_beside(s, info.dli_fname, "/cohort");
    }
    add_beside(s, "/proc/self/exe", "");
    add_beside(s, "/proc/self/exe", "/" COHORT_PLUGIN_RELDIR);
}

static void *open_in(search *s, const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, F_OK))
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && !s->failed[0]) {
        const char *e = dlerror();
        snprintf(s->failed, sizeof s->failed, "'%.1500s' exists but did not load: %.1000s", path,
                 e ? e : "unknown error");
    }
    return h;
}

static void *open_plugin(int pmi, search *s)
{
    search_dirs(s);
    for (int pass = pmi ? 0 : 1; pass < 2; pass++)
        for (int i = 0; i < s->ndirs; i++) {
            void *h = open_in(s, s->dirs[i], pass ? PLUGIN_NAME : MPICH_PLUGIN);
            if (h)
                return h;
        }
    return dlopen(PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
}

static coh_status load_failed(const search *s, const char *loader_error)
{
#ifdef COHORT_HAVE_MPI_PLUGIN
    const char *advice = "this cohort was built with MPI: set COHORT_MPI_PLUGIN to the plug-in's "
                         "path, or install cohort with 'cmake --install' so that the plug-ins "
                         "lie in PREFIX/lib/cohort beside PREFIX/bin/cohort";
#else
    const char *advice = "this cohort was built without MPI: install an MPI (Open MPI's or "
                         "MPICH's development package) and build cohort again";
#endif
    if (s->failed[0])
        return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: %s", s->failed);
    return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: no '%s' in %s nor on the "
                    "loader's search path (%s); %s", PLUGIN_NAME, s->tried[0] ? s->tried : "-",
                    loader_error ? loader_error : "not found", advice);
}

coh_status coh_mpi_load(double timeout_s, int pmi, const coh_transport_ops **ops, void **self,
                        int *rank, int *size)
{
    static search s; /* large; the load runs once per process */
    memset(&s, 0, sizeof s);
    const char *env = getenv("COHORT_MPI_PLUGIN");
    void *h = env ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : open_plugin(pmi, &s);
    if (!h && env)
        return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: cannot load '%s' "
                        "(COHORT_MPI_PLUGIN): %s", env, dlerror());
    if (!h)
        return load_failed(&s, dlerror());
    coh_transport_plugin_fn fn = (coh_transport_plugin_fn)dlsym(h, COH_MPI_PLUGIN_SYMBOL);
    if (!fn)
        return coh_errf(COH_ERR_UNSUPPORTED, "mpi transport unavailable: the plug-in lacks %s",
                        COH_MPI_PLUGIN_SYMBOL);
    /* The plugin stays loaded for the life of the process: MPI cannot be initialised twice. */
    return fn(&coh_host, timeout_s, ops, self, rank, size);
}
