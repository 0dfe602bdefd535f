/* test_backend_guard.c: the cpu-guarded test device is not a no-op: host code that reads or
 * writes its device memory outside a backend call faults, an op given a host buffer where the
 * table says device aborts naming it, and between the guards every op and copy computes as the
 * CPU backend does. */
#include <signal.h>
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

int main(void)
{
    RUN(test_host_access_faults);
    RUN(test_ops_compute);
    return CHECK_REPORT();
}
