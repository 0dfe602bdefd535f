/* engine_env.c: what the engine's libraries read only at load, set by re-executing the command
 * once: OPENBLAS_CORETYPE when OpenBLAS chose a kernel weaker than the CPU supports, and
 * GOMP_SPINCOUNT bounding OpenMP's barrier spin when other work runs on the cpus at start
 * (docs/train.md, "BLAS kernel check" and "Two jobs on the same CPUs"). */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <dirent.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/log.h"
#include "cohort/train.h"
#include "train/threads.h"
#include "util/proc.h"

#define REEXEC_ENV "COHORT_BLAS_REEXEC"
#define SPIN_REEXEC_ENV "COHORT_SPIN_REEXEC"
/* The barrier spin cohort gives libgomp when other work runs on its cpus at start, in turns of
 * libgomp's wait loop: its own figure for threads that outnumber their cpus with
 * OMP_WAIT_POLICY=active (libgomp's GOMP_SPINCOUNT documentation), microseconds. Its default,
 * 300000 turns, makes a barrier whose partner thread is not running burn a whole time slice: two
 * small trainings each as wide as the machine ran up to 1000x slower side by side than alone,
 * and 2.0-2.7 s for both instead of up to 281 s with both bounded (docs/train.md, "Two jobs on
 * the same CPUs"). */
#define SPIN_TURNS "1000"

/* 3: AVX-512, 2: AVX2+FMA, 1: AVX, 0: older. */
static int kernel_level(const char *k)
{
    static const char *const l3[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const l2[] = {"haswell", "zen", "skylake"};
    static const char *const l1[] = {"sandybridge"};
    char low[64];
    size_t i = 0;
    for (; k[i] && i + 1 < sizeof low; i++)
        low[i] = (char)(k[i] >= 'A' && k[i] <= 'Z' ? k[i] - 'A' + 'a' : k[i]);
    low[i] = 0;
    for (i = 0; i < sizeof l3 / sizeof *l3; i++)
        if (!strcmp(low, l3[i]))
            return 3;
    for (i = 0; i < sizeof l2 / sizeof *l2; i++)
        if (!strcmp(low, l2[i]))
            return 2;
    return !strcmp(low, l1[0]) ? 1 : 0;
}

static int cpu_level(const char **kernel)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
        *kernel = "SkylakeX";
        return 3;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *kernel = "Haswell";
        return 2;
    }
    if (__builtin_cpu_supports("avx")) {
        *kernel = "Sandybridge";
        return 1;
    }
    *kernel = NULL;
    return 0;
}

/* argv of this process as the kernel started it, from /proc/self/cmdline. */
static char **self_argv(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    if (n == 0 || n >= cap - 1)
        return NULL;
    buf[n] = 0;
    size_t argc = 0;
    for (size_t i = 0; i < n; i++)
        argc += buf[i] == 0;
    char **argv = calloc(argc + 1, sizeof *argv);
    if (!argv)
        return NULL;
    char *p = buf;
    for (size_t i = 0; i < argc; i++, p += strlen(p) + 1)
        argv[i] = p;
    return argv;
}

/* Whether libgomp (GCC's OpenMP runtime, the one GOMP_SPINCOUNT speaks to) is in this process. */
static int has_libgomp(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name ? info->dlpi_name : "";
    return !strncmp(base, "libgomp.so", 10);
}

/* Under valgrind a re-exec would run the new image natively, outside the tool, unless the user
 * gave --trace-children=yes: stay in this process. */
static int under_valgrind(void)
{
    const char *pre = getenv("LD_PRELOAD");
    return pre && strstr(pre, "vgpreload") != NULL;
}

static char spin_text[200];
static char spin_reason[96]; /* why the spin is bounded or not, passed on through the restart */

const char *coh_openmp_spin_text(void)
{
    return spin_text;
}

/* Threads of this process that are runnable now (state R in /proc/self/task/N/stat): this one,
 * and any library's worker still polling after its start (OpenBLAS's do, for a while). */
static int my_runnable_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        n += coh_proc_stat_state(path) == 'R';
    }
    if (d)
        closedir(d);
    return n > 0 ? n : 1;
}

/* Whether other threads will want this process's cpus: 1, with the reason in spin_reason, when
 * the launcher's local ranks share this process's cpus and their teams (this one's size each,
 * as they run the same command) outnumber them, or when other work is runnable on them now:
 * the least of four readings over 6 ms (a job's threads are runnable in every one, a shell's
 * fork in one) of /proc/loadavg's runnable count less this process's own, less what the cpus
 * outside this process's mask can hold, less the other local ranks' teams. A reading that
 * misses a job counts as free. */
static int cpus_contended(void)
{
    coh_cpu_budget b;
    coh_cpu_budget_read(&b);
    int mask = b.mask_cpus > 0 ? b.mask_cpus : 1, team = coh_get_threads();
    int shared = b.local_ranks > 1 && !(b.node_cpus > 0 && mask < b.node_cpus);
    if (shared && (long)b.local_ranks * team > mask) {
        snprintf(spin_reason, sizeof spin_reason, "%d local ranks x %d threads on %d cpus",
                 b.local_ranks, team, mask);
        return 1;
    }
    int least = -1;
    for (int k = 0; k < 4; k++) {
        FILE *f = fopen("/proc/loadavg", "r");
        int running = 0, total = 0;
        double l1, l5, l15;
        if (f && fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5) {
            running -= my_runnable_threads();
            if (least < 0 || running < least)
                least = running;
        }
        if (f)
            fclose(f);
        if (k < 3)
            usleep(2000);
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int outside = online > mask ? (int)online - mask : 0;
    int siblings = shared ? (b.local_ranks - 1) * team : 0;
    int others = least - outside - siblings;
    others = others > 0 ? others : 0;
    snprintf(spin_reason, sizeof spin_reason, "%d runnable thread%s of other work on these cpus "
             "at start", others, others == 1 ? "" : "s");
    return others > 0;
}

/* What the start-up line says of the spin, and whether cohort should set it: 1 when libgomp is
 * here, the user set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY, and this process's cpus are
 * contended (COHORT_SPIN_BOUND=1: as if they were, =0: as if they were not). */
static int spin_wanted(void)
{
    const char *count = getenv("GOMP_SPINCOUNT"), *policy = getenv("OMP_WAIT_POLICY");
    if (!dl_iterate_phdr(has_libgomp, NULL)) {
        spin_text[0] = 0;
        return 0;
    }
    if (count || policy) {
        snprintf(spin_text, sizeof spin_text, "OpenMP %s=%s (yours)",
                 count ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", count ? count : policy);
        return 0;
    }
    const char *force = getenv("COHORT_SPIN_BOUND");
    int forced = force && (!strcmp(force, "0") || !strcmp(force, "1"));
    if (force && !forced)
        coh_warn("COHORT_SPIN_BOUND='%s' is neither 0 nor 1: ignored (the cpus are read)", force);
    int contended = forced ? force[0] == '1' : cpus_contended();
    if (forced)
        snprintf(spin_reason, sizeof spin_reason, "COHORT_SPIN_BOUND=%s", force);
    snprintf(spin_text, sizeof spin_text, "OpenMP barriers spin libgomp's 300000 turns (%s%s)",
             spin_reason, contended && under_valgrind() ? "; not bounded under valgrind" : "");
    return contended;
}

void coh_engine_ensure_environment(void)
{
    const char *now = coh_blas_kernel(), *want = NULL, *marked = getenv(REEXEC_ENV);
    const char *spin_marked = getenv(SPIN_REEXEC_ENV);
    if (marked || spin_marked) { /* the restarted process: say what changed, never again */
        char was[64], spin_restarted[96] = "";
        snprintf(was, sizeof was, "%s", marked ? marked : "");
        if (spin_marked)
            snprintf(spin_restarted, sizeof spin_restarted, "%s", *spin_marked ? spin_marked : "?");
        unsetenv(REEXEC_ENV);
        unsetenv(SPIN_REEXEC_ENV);
        if (*spin_restarted)
            snprintf(spin_text, sizeof spin_text, "OpenMP barriers spin %s turns (%s; "
                     "GOMP_SPINCOUNT sets it)", SPIN_TURNS, spin_restarted);
        else
            spin_wanted();
        if (!*was)
            return;
        const char *set = getenv("OPENBLAS_CORETYPE");
        if (cpu_level(&want) > kernel_level(now))
            coh_warn("openblas still uses the '%s' kernel after a restart with "
                     "OPENBLAS_CORETYPE=%s; matrix products will be slow", now, set ? set : "");
        else
            coh_info("openblas chose the '%s' kernel on a cpu that supports more; restarted "
                     "with OPENBLAS_CORETYPE=%s, now using '%s' (COHORT_BLAS_KEEP=1 keeps the "
                     "library's choice)", was, set ? set : "", now);
        return;
    }
    const char *keep = getenv("COHORT_BLAS_KEEP");
    int fix_kernel = !(keep && !strcmp(keep, "1")) && cpu_level(&want) > kernel_level(now) &&
                     want;
    int fix_spin = spin_wanted();
    if ((!fix_kernel && !fix_spin) || under_valgrind())
        return;
    static char buf[1 << 16];
    char **argv = self_argv(buf, sizeof buf);
    if (!argv || (fix_kernel && (setenv("OPENBLAS_CORETYPE", want, 1) ||
                                 setenv(REEXEC_ENV, now, 1))) ||
        (fix_spin && (setenv("GOMP_SPINCOUNT", SPIN_TURNS, 1) ||
                      setenv(SPIN_REEXEC_ENV, spin_reason, 1)))) {
        if (fix_kernel)
            coh_warn("openblas uses the slow '%s' kernel; could not restart with "
                     "OPENBLAS_CORETYPE=%s", now, want);
    } else {
        fflush(stdout);
        fflush(stderr);
        execv("/proc/self/exe", argv);
        if (fix_kernel)
            coh_warn("openblas uses the slow '%s' kernel; restart with OPENBLAS_CORETYPE=%s "
                     "failed: %s", now, want, strerror(errno));
    }
    /* not restarted: run on as started (libgomp has read its environment already) */
    if (fix_spin)
        unsetenv("GOMP_SPINCOUNT");
    unsetenv(REEXEC_ENV);
    unsetenv(SPIN_REEXEC_ENV);
    free(argv);
}
