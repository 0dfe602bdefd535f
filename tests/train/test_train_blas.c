/* test_train_blas.c: a process whose OpenBLAS picked a weak kernel (forced with
 * OPENBLAS_CORETYPE=Prescott) restarts itself with the right one and says so in one line; one
 * that starts while other work runs on its cpus restarts with libgomp's barrier spin bounded, as
 * libgomp itself reports (OMP_DISPLAY_ENV), unless its user set GOMP_SPINCOUNT, OMP_WAIT_POLICY
 * or COHORT_SPIN_BOUND=0, or it runs under valgrind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cohort/train.h"

/* Run this program as a child with extra env; capture stdout and stderr. */
static int run_child(const char *self, const char *env, char *out, size_t cap, char *err,
                     size_t ecap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env %s '%s' child 2>cohort_blas_err.%d", env, self,
             (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    char path[64];
    snprintf(path, sizeof path, "cohort_blas_err.%d", (int)getpid());
    FILE *f = fopen(path, "r");
    n = f ? fread(err, 1, ecap - 1, f) : 0;
    err[n] = 0;
    if (f)
        fclose(f);
    unlink(path);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static const char *self;
static const char *want;

/* libgomp's OMP_DISPLAY_ENV=verbose blocks in err: how many, and the GOMP_SPINCOUNT of the last. */
static int spin_displays(const char *err, long *last)
{
    int n = 0;
    *last = -1;
    for (const char *p = err; (p = strstr(p, "OPENMP DISPLAY ENVIRONMENT BEGIN")); p++)
        n++;
    for (const char *p = err; (p = strstr(p, "GOMP_SPINCOUNT = '")); p++)
        *last = strtol(p + strlen("GOMP_SPINCOUNT = '"), NULL, 10);
    return n;
}

/* One case: the child under env (GOMP_SPINCOUNT and OMP_WAIT_POLICY removed first), the number
 * of libgomp start-ups it must show (2: restarted), the spin libgomp must report last, and what
 * the start-up line must say. */
static void spin_case(const char *env, int starts, long spin, const char *says)
{
    char cmd_env[512], out[1024], err[16384];
    snprintf(cmd_env, sizeof cmd_env, "-u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "
             "COHORT_BLAS_KEEP=1 %s", env);
    CHECK_INT(run_child(self, cmd_env, out, sizeof out, err, sizeof err), 0);
    long last;
    int n = spin_displays(err, &last);
    CHECK_INT(n, starts);
    CHECK(last == spin);
    CHECK(strstr(out, says) != NULL);
    CHECK(strstr(out, "marker left") == NULL); /* the restart's marker is not passed on */
    if (n != starts || last != spin || !strstr(out, says))
        fprintf(stderr, "env %s: %d start-ups, last spin %ld, said: %s\n", env, n, last, out);
}

/* Two busy loops (children of this test), as another job on the cpus would run. */
static void busy_start(pid_t pids[2])
{
    for (int i = 0; i < 2; i++)
        if ((pids[i] = fork()) == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
            alarm(120);
            for (volatile unsigned long x = 0;; x++)
                ;
        }
    usleep(20000); /* both running before the child looks */
}

static void busy_stop(pid_t pids[2])
{
    for (int i = 0; i < 2; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
}

static void test_bounds_openmp_spin(void)
{
    pid_t busy[2];
    busy_start(busy);
    /* other work on the cpus: the child restarts with the spin bounded, as libgomp reports */
    spin_case("", 2, 1000, "OpenMP barriers spin 1000 turns (");
    spin_case("", 2, 1000, "runnable threads of other work on these cpus at start");
    spin_case("COHORT_SPIN_BOUND=0", 1, 300000,
              "OpenMP barriers spin libgomp's 300000 turns (COHORT_SPIN_BOUND=0)");
    spin_case("GOMP_SPINCOUNT=5000", 1, 5000, "OpenMP GOMP_SPINCOUNT=5000 (yours)");
    spin_case("OMP_WAIT_POLICY=passive", 1, 0, "OpenMP OMP_WAIT_POLICY=passive (yours)");
    /* valgrind's preload named (a path that does not exist: ld.so ignores it): no restart */
    spin_case("LD_PRELOAD=/nonexistent/vgpreload_core-amd64-linux.so", 1, 300000,
              "not bounded under valgrind");
    char out[1024], err[16384]; /* a bad COHORT_SPIN_BOUND is named, and the cpus read */
    CHECK_INT(run_child(self, "-u GOMP_SPINCOUNT -u OMP_WAIT_POLICY COHORT_BLAS_KEEP=1 "
                        "COHORT_SPIN_BOUND=yes", out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(err, "COHORT_SPIN_BOUND='yes' is neither 0 nor 1") != NULL);
    CHECK(strstr(out, "OpenMP barriers spin 1000 turns (") != NULL);
    busy_stop(busy);
    spin_case("COHORT_SPIN_BOUND=1", 2, 1000,
              "OpenMP barriers spin 1000 turns (COHORT_SPIN_BOUND=1; GOMP_SPINCOUNT sets it)");
}

static void test_fixes_weak_kernel(void)
{
    if (!want)
        SKIP_CASE("this cpu has no avx2, so no kernel is better than Prescott");
    char out[1024], err[4096];
    /* COHORT_BLAS_KEEP=1 in the caller's environment would keep the forced kernel */
    CHECK_INT(run_child(self, "-u COHORT_BLAS_KEEP OPENBLAS_CORETYPE=Prescott COHORT_LOG=info", out,
                        sizeof out, err, sizeof err), 0);
    CHECK(strncmp(out, want, strlen(want)) == 0);
    CHECK_INT(count_lines(err), 1); /* exactly one log line */
    CHECK(strstr(err, "'Prescott'") != NULL);
    CHECK(strstr(err, want) != NULL);
    if (strncmp(out, want, strlen(want)))
        fprintf(stderr, "kernel after the fix: %s, log: %s\n", out, err);
}

static void test_keep_opt_out(void)
{
    if (!want)
        SKIP_CASE("this cpu has no avx2: no restart to opt out of");
    char out[1024], err[4096];
    CHECK_INT(run_child(self, "OPENBLAS_CORETYPE=Prescott COHORT_BLAS_KEEP=1", out, sizeof out,
                        err, sizeof err), 0);
    CHECK(strncmp(out, "Prescott", 8) == 0);
    CHECK_INT(count_lines(err), 0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "child")) {
        coh_engine_ensure_environment();
        printf("%s\n%s\n%s\n", coh_blas_kernel(), coh_openmp_spin_text(),
               getenv("COHORT_SPIN_REEXEC") || getenv("COHORT_BLAS_REEXEC") ? "marker left" : "");
        return 0;
    }
    self = argv[0];
    RUN(test_bounds_openmp_spin);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    RUN(test_fixes_weak_kernel);
    RUN(test_keep_opt_out);
    return CHECK_REPORT();
}
