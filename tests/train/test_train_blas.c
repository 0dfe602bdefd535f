/* test_train_blas.c: a process whose OpenBLAS picked a weak kernel (forced with
 * OPENBLAS_CORETYPE=Prescott) restarts itself with the right one and says so in one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void test_fixes_weak_kernel(void)
{
    char out[256], err[4096];
    CHECK_INT(run_child(self, "OPENBLAS_CORETYPE=Prescott COHORT_LOG=info", out, sizeof out, err,
                        sizeof err), 0);
    CHECK(strncmp(out, want, strlen(want)) == 0);
    CHECK_INT(count_lines(err), 1); /* exactly one log line */
    CHECK(strstr(err, "'Prescott'") != NULL);
    CHECK(strstr(err, want) != NULL);
    if (strncmp(out, want, strlen(want)))
        fprintf(stderr, "kernel after the fix: %s, log: %s\n", out, err);
}

static void test_keep_opt_out(void)
{
    char out[256], err[4096];
    CHECK_INT(run_child(self, "OPENBLAS_CORETYPE=Prescott COHORT_BLAS_KEEP=1", out, sizeof out,
                        err, sizeof err), 0);
    CHECK(strncmp(out, "Prescott", 8) == 0);
    CHECK_INT(count_lines(err), 0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "child")) {
        coh_blas_ensure_best_kernel();
        printf("%s\n", coh_blas_kernel());
        return 0;
    }
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    else {
        printf("skipped: this cpu has no avx2, so no kernel is better than Prescott\n");
        return 77;
    }
    self = argv[0];
    RUN(test_fixes_weak_kernel);
    RUN(test_keep_opt_out);
    return CHECK_REPORT();
}
