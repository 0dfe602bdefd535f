/* test_backend_guard.c: the cpu-guarded test device is not a no-op: host code that reads or
 * writes its device memory outside a backend call faults, an op given a host buffer where the
 * table says device aborts naming it, and between the guards every op and copy computes as the
 * CPU backend does. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "check.h"
#include "train/backend/backend.h"

/* Runs fn in a child; the status it ended with. The child _exit(42)s when fn returns. */
static int in_child(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY); /* the expected abort message stays out of the log */
        if (null >= 0)
            dup2(null, 2);
        fn(arg);
        _exit(42);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static int returned(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 42; }

static void host_read(void *p) { (void)*(volatile float *)p; }
static void host_write(void *p) { *(volatile float *)p = 1.0f; }

static void op_on_host(void *p)
{
    float host[4] = {0};
    coh_backend_guarded()->add(host, p, 4); /* y must be device memory */
}

static void copy_wrong_kind(void *p)
{
    float host[4] = {0};
    coh_backend_guarded()->copy(p, host, sizeof host, COH_COPY_D2D); /* host as a device source */
}

static void test_host_access_faults(void)
{
    const coh_backend *be = coh_backend_guarded();
    float *p = be->alloc(1 << 16);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK(!returned(in_child(host_read, p)));
    CHECK(!returned(in_child(host_write, p + 1000)));
    CHECK(!returned(in_child(op_on_host, p)));
    CHECK(!returned(in_child(copy_wrong_kind, p)));
    be->free(p, 1 << 16);
}

static void test_ops_compute(void)
{
    const coh_backend *be = coh_backend_guarded(), *cpu = coh_backend_cpu();
    enum { N = 5000 };
    float x[N], y[N], out[N], want[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 17) * 0.25f - 2.0f, y[i] = (float)(i % 5) * 0.5f;
    float *dx = be->alloc(sizeof x), *dy = be->alloc(sizeof y);
    CHECK(dx && dy);
    if (!dx || !dy)
        return;
    be->copy(dx, x, sizeof x, COH_COPY_H2D);
    be->copy(dy, y, sizeof y, COH_COPY_H2D);
    be->add(dy, dx, N);
    be->scale(dy, N, 3.0f);
    be->copy(out, dy, sizeof out, COH_COPY_D2H);
    memcpy(want, y, sizeof y);
    cpu->add(want, x, N);
    cpu->scale(want, N, 3.0f);
    CHECK(!memcmp(out, want, sizeof out));
    CHECK(be->sumsq(dx, N) == cpu->sumsq(x, N));
    be->set(dx, 0, sizeof x);
    be->copy(out, dx, sizeof out, COH_COPY_D2H);
    CHECK(out[0] == 0.0f && out[N - 1] == 0.0f);
    CHECK(!returned(in_child(host_read, dx))); /* still closed after the calls */
    be->free(dx, sizeof x);
    be->free(dy, sizeof y);
}

/* The table's bare product on the CPU and the guarded device: every transpose, strided rows and
 * beta against a product summed in double (bound: 1e-5 of the sum of the terms' magnitudes) */
static void gemm_on(const coh_backend *be, const char *name)
{
    enum { M = 9, NN = 13, K = 11, LD = 16 };
    float a[LD * LD], b[LD * LD], c0[M * LD], got[M * LD];
    for (int i = 0; i < LD * LD; i++)
        a[i] = (float)((i * 7) % 23) * 0.125f - 1.25f, b[i] = (float)((i * 5) % 19) * 0.1f - 0.9f;
    for (int i = 0; i < M * LD; i++)
        c0[i] = (float)(i % 11) - 5.0f;
    float *da = be->alloc(sizeof a), *db = be->alloc(sizeof b), *dc = be->alloc(sizeof c0);
    CHECK(da && db && dc);
    if (!da || !db || !dc)
        return;
    be->copy(da, a, sizeof a, COH_COPY_H2D);
    be->copy(db, b, sizeof b, COH_COPY_H2D);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            be->copy(dc, c0, sizeof c0, COH_COPY_H2D);
            CHECK_OK(be->gemm(0, ta, tb, M, NN, K, da, LD, db, LD, 0.5f, dc, LD));
            CHECK_OK(be->sync());
            be->copy(got, dc, sizeof got, COH_COPY_D2H);
            double worst = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < LD; j++) {
                    double want = c0[i * LD + j], mag = fabs(want);
                    if (j < NN) {
                        want *= 0.5, mag *= 0.5;
                        for (int k = 0; k < K; k++) {
                            double t = (double)(ta ? a[k * LD + i] : a[i * LD + k]) *
                                       (tb ? b[j * LD + k] : b[k * LD + j]);
                            want += t, mag += fabs(t);
                        }
                    } /* columns past N untouched */
                    worst = fmax(worst, fabs(got[i * LD + j] - want) / (mag > 0 ? mag : 1));
                }
            printf("  %s gemm ta %d tb %d: worst error %.2e of the terms' sum\n", name, ta, tb,
                   worst);
            CHECK(worst <= 1e-5);
        }
    be->free(da, sizeof a), be->free(db, sizeof b), be->free(dc, sizeof c0);
}

/* an operand that runs past its allocation aborts, naming the op */
static void gemm_past_end(void *p)
{
    float *d = p; /* 64 floats: a 9 x 16 operand does not fit */
    coh_backend_guarded()->gemm(0, 0, 0, 9, 4, 16, d, 16, d, 4, 0.0f, d, 4);
}

static void test_gemm(void)
{
    gemm_on(coh_backend_cpu(), "cpu");
    gemm_on(coh_backend_guarded(), "cpu-guarded");
    const coh_backend *be = coh_backend_guarded();
    float *d = be->alloc(64 * sizeof(float));
    CHECK(d != NULL);
    if (d) {
        /* inside the allocation's page, so only the check can stop it: abort, not a fault */
        int st = in_child(gemm_past_end, d);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
        be->free(d, 64 * sizeof(float));
    }
}

int main(void)
{
    RUN(test_host_access_faults);
    RUN(test_ops_compute);
    RUN(test_gemm);
    return CHECK_REPORT();
}
