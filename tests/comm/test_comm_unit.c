/* test_comm_unit.c: the comm layer in one process: bf16/f16 rounding against independent
 * references, every reduction kernel (avx512, avx2) against the scalar one, names and
 * environment errors, a one-rank communicator, async requests, and the shared-memory
 * segment's name, mode and arena allocator. */
#include <cpuid.h>
#include <fcntl.h>
#include <immintrin.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm_env_clear.h"
#include "cohort/comm.h"
#include "comm/comm_int.h"
#include "comm/reduce.h"
#include "comm/transport/shm_int.h"

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 by the definition: the nearer of the two neighbours, ties to the even one. */
static uint16_t bf16_ref(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (x != x)
        return 0; /* checked separately */
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double vlo = f_of((uint32_t)lo << 16), vhi;
    if ((hi & 0x7f80) == 0x7f80 && (lo & 0x7fff) == 0x7f7f) /* above the largest finite */
        vhi = (x < 0 ? -1 : 1) * 0x1p128;
    else
        vhi = f_of((uint32_t)hi << 16);
    double dlo = fabs((double)x - vlo), dhi = fabs((double)x - vhi);
    return dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1) ? hi : lo;
}

static void test_bf16_rounding(void)
{
    int bad = 0;
    for (uint32_t k = 0; k < 2000000; k++) {
        uint32_t u = k < 1000000 ? k * 4294u + (k & 0xffff) : next();
        float x = f_of(u);
        uint16_t got = coh_f32_to_bf16(x);
        if (x != x)
            bad += !((got & 0x7f80) == 0x7f80 && (got & 0x7f) && (got & 0x40) &&
                     (got & 0x8000) == ((u >> 16) & 0x8000));
        else
            bad += got != bf16_ref(x);
    }
    CHECK_INT(bad, 0);
    CHECK_INT(coh_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);              /* tie to even: down */
    CHECK_INT(coh_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);          /* tie to even: up */
    CHECK(coh_bf16_to_f32(coh_f32_to_bf16(3.4e38f)) == f_of(0x7f800000)); /* overflow: inf */
}

__attribute__((target("f16c"))) static uint16_t f16_hw(float x)
{
    return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

__attribute__((target("f16c"))) static float f16_hw_back(uint16_t h) { return _cvtsh_ss(h); }

/* F16C itself, not a feature that usually comes with it. GCC tests it by name; clang 14 does not
 * know the name, so there it is CPUID.1:ECX bit 29 (its VEX instructions need the AVX state the
 * "avx" test includes). */
static int cpu_has_f16c(void)
{
    __builtin_cpu_init();
#if defined(__clang__)
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
    return __builtin_cpu_supports("f16c");
#endif
}

/* The cpu's F16C conversion is the reference for f16, both ways. */
static void test_f16_rounding(void)
{
    if (!cpu_has_f16c())
        SKIP_CASE("this cpu has no F16C to compare with");
    int bad = 0;
    for (uint32_t k = 0; k < 2000000; k++) {
        uint32_t u = k < 1000000 ? k * 4294u + (k & 0xffff) : next();
        if (coh_f32_to_f16(f_of(u)) != f16_hw(f_of(u)) && bad++ < 5)
            fprintf(stderr, "  f16 of %08x: %04x, cpu %04x\n", u, coh_f32_to_f16(f_of(u)),
                    f16_hw(f_of(u)));
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float a = coh_f16_to_f32((uint16_t)h), b = f16_hw_back((uint16_t)h);
        bad += memcmp(&a, &b, 4) != 0;
    }
    CHECK_INT(bad, 0);
    printf("  2000000 f32 -> f16 and 65536 f16 -> f32 conversions compared with the cpu's F16C\n");
}

/* Inputs with NaN, infinities, signed zeros and wide ranges, per type. */
static void random_fill(void *p, size_t n, coh_dtype t)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t r = next();
        switch (t) {
        case COH_F32: ((float *)p)[i] = r % 97 == 0 ? f_of(0x7fc00000) : (float)((int)(r % 2001) - 1000) / 8; break;
        case COH_F64: ((double *)p)[i] = r % 89 == 0 ? -0.0 : (double)((int)(r % 2001) - 1000) / 3; break;
        case COH_BF16:
        case COH_F16: ((uint16_t *)p)[i] = (uint16_t)(r % 61 == 0 ? (t == COH_BF16 ? 0x7fc1 : 0x7e01) : (r >> 7) & 0x7bff); break;
        case COH_I32: ((int32_t *)p)[i] = (int32_t)r; break;
        case COH_I64: ((int64_t *)p)[i] = (int64_t)((uint64_t)r * 2654435761u); break;
        default: ((uint8_t *)p)[i] = (uint8_t)r; break;
        }
    }
}

static void test_kernels_agree(void)
{
    static const size_t counts[] = {0, 1, 15, 16, 17, 63, 64, 65, 1000};
    static const int nsrcs[] = {1, 2, 3, 8};
    enum { MAXN = 1000 };
    char *src[8], *want = malloc(MAXN * 8), *got = malloc(MAXN * 8);
    for (int j = 0; j < 8; j++)
        src[j] = malloc(MAXN * 8);
    int compared = 0;
    for (int isa = COH_ISA_AVX2; isa <= COH_ISA_AVX512; isa++) {
        if (coh_reduce_isa_set((coh_isa)isa) != COH_OK)
            continue;
        for (int t = 0; t < COH_DTYPE_COUNT; t++)
            for (int op = 0; op < COH_REDOP_COUNT; op++)
                for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
                    for (size_t k = 0; k < sizeof nsrcs / sizeof *nsrcs; k++) {
                        size_t n = counts[c], esz = coh_dtype_size((coh_dtype)t);
                        int ns = nsrcs[k];
                        for (int j = 0; j < ns; j++)
                            random_fill(src[j], n, (coh_dtype)t);
                        coh_reduce_isa_set(COH_ISA_SCALAR);
                        coh_reduce_n(want, (const void *const *)src, ns, n, (coh_dtype)t, (coh_redop)op, ns);
                        coh_reduce_isa_set((coh_isa)isa);
                        coh_reduce_n(got, (const void *const *)src, ns, n, (coh_dtype)t, (coh_redop)op, ns);
                        compared++;
                        if (memcmp(want, got, n * esz)) {
                            CHECK(!"vector and scalar kernels differ");
                            fprintf(stderr, "  isa %s type %s op %s count %zu sources %d\n",
                                    coh_isa_name((coh_isa)isa), coh_dtype_name((coh_dtype)t),
                                    coh_redop_name((coh_redop)op), n, ns);
                        }
                    }
    }
    coh_reduce_isa_set(COH_ISA_SCALAR);
    printf("  %d kernel cases compared with the scalar kernel\n", compared);
    for (int j = 0; j < 8; j++)
        free(src[j]);
    free(want);
    free(got);
}

/* The scalar kernel against plain arithmetic, in place (dst aliases a source). */
static void test_scalar_kernel_values(void)
{
    for (int isa = COH_ISA_SCALAR; isa <= COH_ISA_AVX512; isa++) {
        if (coh_reduce_isa_set((coh_isa)isa) != COH_OK)
            continue;
        float a[40], b[40], c[40];
        for (int i = 0; i < 40; i++)
            a[i] = (float)i, b[i] = (float)(2 * i - 7), c[i] = 3;
        const void *s[3] = {a, b, c};
        float out[40];
        coh_reduce_n(out, s, 3, 40, COH_F32, COH_MAX, 0);
        CHECK(out[0] == 3 && out[39] == 71);
        coh_reduce_n(out, s, 3, 40, COH_F32, COH_MIN, 0);
        CHECK(out[0] == -7 && out[39] == 3);
        coh_reduce_n(out, s, 3, 40, COH_F32, COH_PROD, 0);
        CHECK(out[1] == -15 && out[39] == 39 * 71 * 3);
        coh_reduce_n(a, s, 3, 40, COH_F32, COH_AVG, 3); /* in place */
        CHECK(a[1] == -1.0f / 3 && a[39] == (39 + 71 + 3) / 3.0f);
        int32_t x[17], y[17];
        for (int i = 0; i < 17; i++)
            x[i] = -i, y[i] = 2;
        const void *si[2] = {x, y};
        coh_reduce_n(x, si, 2, 17, COH_I32, COH_AVG, 2);
        CHECK(x[16] == -7 && x[3] == 0); /* (-16 + 2) / 2, (-3 + 2) / 2 truncated */
    }
    coh_reduce_isa_set(COH_ISA_SCALAR);
}

static void test_names(void)
{
    coh_dtype t;
    coh_redop op;
    CHECK_OK(coh_dtype_parse("bf16", &t));
    CHECK_INT(t, COH_BF16);
    CHECK_OK(coh_redop_parse("prod", &op));
    CHECK_INT(op, COH_PROD);
    CHECK_FAILS(coh_dtype_parse("f8", &t), COH_ERR_INVALID, "invalid type 'f8': expected f32");
    CHECK_FAILS(coh_redop_parse("mean", &op), COH_ERR_INVALID, "invalid reduction 'mean'");
    CHECK_INT(coh_dtype_size(COH_I64), 8);
    CHECK_INT(coh_dtype_size((coh_dtype)99), 0);
}

static void test_env_errors(void)
{
    coh_comm *c = NULL;
    clear_env();
    setenv("COHORT_COMM_TIMEOUT", "soon", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "invalid COHORT_COMM_TIMEOUT 'soon': expected seconds greater than 0");
    clear_env();
    setenv("RANK", "1", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "RANK is set but WORLD_SIZE is not");
    setenv("WORLD_SIZE", "x2", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "invalid WORLD_SIZE 'x2': expected a non-negative integer");
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "2", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID, "invalid RANK '2'");
    setenv("RANK", "1", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "the launcher (torchrun) gives no job id (TORCHELASTIC_RUN_ID is not set)");
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID, "set COHORT_JOB_ID");
    setenv("COHORT_JOB_ID", "a/b", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID, "invalid COHORT_JOB_ID 'a/b'");
    setenv("COHORT_JOB_ID", "job1", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_SHM, &c), COH_ERR_UNSUPPORTED, "spans 2 nodes");
    /* auto: torchrun spreading ranks over nodes means tcp, whose rendezvous is MASTER_ADDR */
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "tcp transport: MASTER_ADDR is not set");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "65534", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "invalid MASTER_PORT '65534': expected a port 1..65533");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    clear_env();
    setenv("COHORT_COMM", "nccl", 1);
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID,
                "invalid COHORT_COMM 'nccl': expected shm, mpi, tcp or auto");
    /* a typo in the kernels' name is refused by every communicator, not taken as the best */
    static const char *const isa_typos[] = {"avx3", "AVX2", "", " avx2", "sse"};
    for (size_t i = 0; i < sizeof isa_typos / sizeof *isa_typos; i++) {
        char want[96];
        snprintf(want, sizeof want, "invalid COHORT_COMM_ISA '%s': expected scalar, avx2 or "
                 "avx512", isa_typos[i]);
        clear_env();
        setenv("COHORT_COMM_ISA", isa_typos[i], 1);
        CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID, want);
        CHECK_FAILS(coh_comm_create_self(&c), COH_ERR_INVALID, want);
        coh_comm *two[2] = {NULL, NULL};
        CHECK_FAILS(coh_comm_create_threads(2, 1, two), COH_ERR_INVALID, want);
        CHECK(!two[0] && !two[1]);
    }
    clear_env();
    setenv("COHORT_COMM_ISA", "scalar", 1); /* every cpu has it */
    CHECK_OK(coh_comm_create_self(&c));
    coh_comm_destroy(c);
    c = NULL;
    /* ports and the hierarchy's numbers are digits alone, as every other number cohort reads */
    static const char *const ports[][3] = {
        {"MASTER_PORT", " 29500", "invalid MASTER_PORT ' 29500': expected a port 1..65533"},
        {"MASTER_PORT", "+29500", "invalid MASTER_PORT '+29500': expected a port 1..65533"},
        {"COHORT_COMM_PORT", "+29502", "invalid COHORT_COMM_PORT '+29502': expected a port "
                                       "1..65535"},
        {"COHORT_COMM_PORT", " 29502", "invalid COHORT_COMM_PORT ' 29502'"},
    };
    for (size_t i = 0; i < sizeof ports / sizeof *ports; i++) {
        clear_env();
        setenv("RANK", "1", 1);
        setenv("WORLD_SIZE", "2", 1);
        setenv("LOCAL_WORLD_SIZE", "1", 1);
        setenv("COHORT_JOB_ID", "job1", 1);
        setenv("COHORT_COMM_TIMEOUT", "2", 1); /* a port taken would wait for rank 0 */
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv(ports[i][0], ports[i][1], 1);
        CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_INVALID, ports[i][2]);
    }
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    static const char *const hier[][3] = {
        {"COHORT_COMM_RANKS_PER_NODE", " 2", "invalid COHORT_COMM_RANKS_PER_NODE ' 2'"},
        {"COHORT_COMM_RANKS_PER_NODE", "+2", "invalid COHORT_COMM_RANKS_PER_NODE '+2'"},
        {"COHORT_COMM_HIER", "+1", "invalid COHORT_COMM_HIER '+1'"},
        {"COHORT_COMM_HIER", " 0", "invalid COHORT_COMM_HIER ' 0'"},
    };
    for (size_t i = 0; i < sizeof hier / sizeof *hier; i++) {
        clear_env();
        setenv(hier[i][0], hier[i][1], 1);
        /* the variables are read before the transport is touched: self stands in for it */
        const coh_transport_ops *ops = &coh_self_ops;
        void *tp = NULL;
        CHECK_FAILS(coh_hier_wrap(1, 0, 2, &ops, &tp), COH_ERR_INVALID, hier[i][2]);
        CHECK(ops == &coh_self_ops && tp == NULL);
    }
    clear_env();
    CHECK(c == NULL);
    CHECK_OK(coh_comm_create(COH_COMM_AUTO, &c)); /* no launcher: a one-rank communicator */
    CHECK(c && coh_comm_size(c) == 1 && !strcmp(coh_comm_transport(c), "self"));
    CHECK(c && coh_comm_timeout(c) == 300);
    coh_comm_destroy(c);
}

static void test_self_comm(void)
{
    coh_comm *c;
    CHECK_OK(coh_comm_create_self(&c));
    double a[3] = {1, 2, 3}, b[3] = {0};
    CHECK_OK(coh_allreduce(c, a, b, 3, COH_F64, COH_AVG));
    CHECK(b[2] == 3);
    CHECK_OK(coh_allgather(c, a, b, 3, COH_F64));
    CHECK(b[1] == 2);
    CHECK_OK(coh_barrier(c));
    CHECK_FAILS(coh_send(c, a, 3, COH_F64, 0), COH_ERR_INVALID, "invalid peer '0': that is this rank");
    CHECK_FAILS(coh_broadcast(c, a, 3, COH_F64, 1), COH_ERR_INVALID, "invalid root '1': expected 0 to 0");
    CHECK_FAILS(coh_allreduce(c, NULL, b, 3, COH_F64, COH_SUM), COH_ERR_INVALID, "null send buffer");
    CHECK_FAILS(coh_allreduce(c, a, b, 3, (coh_dtype)42, COH_SUM), COH_ERR_INVALID, "invalid type '42'");
    CHECK_OK(coh_allreduce(c, NULL, NULL, 0, COH_F64, COH_SUM)); /* count 0 needs no buffers */
    coh_comm_req *r1, *r2;
    CHECK_OK(coh_allreduce_async(c, a, b, 3, COH_F64, COH_SUM, &r1));
    CHECK_OK(coh_broadcast_async(c, b, 3, COH_F64, 0, &r2));
    int done = 0;
    CHECK_OK(coh_comm_test(r1, &done));
    CHECK_OK(coh_comm_wait(r1));
    CHECK_OK(coh_comm_wait(r2));
    CHECK(b[0] == 1 && b[2] == 3);
    coh_comm *sub = NULL;
    CHECK_OK(coh_comm_split(c, 7, 0, &sub));
    CHECK(sub && coh_comm_size(sub) == 1);
    coh_comm_destroy(sub);
    CHECK_OK(coh_comm_split(c, COH_COMM_NO_COLOR, 0, &sub));
    CHECK(sub == NULL);
    CHECK_FAILS(coh_comm_split(c, -5, 0, &sub), COH_ERR_INVALID, "split: invalid color '-5'");
    coh_comm_destroy(c);
    coh_comm_destroy(NULL);
}

/* A two-rank segment whose second rank never comes: while rank 0 waits for it the segment is
 * visible (mode 0600, named after the user and the job); then rank 0 times out naming rank 1
 * and removes it. A one-rank segment is unlinked at once. */
typedef struct open_arg { coh_comm_env env; coh_status st; char msg[512]; } open_arg;

static void *open_rank0(void *p)
{
    open_arg *a = p;
    void *tp = NULL;
    a->st = coh_shm_open(&a->env, &tp);
    snprintf(a->msg, sizeof a->msg, "%s", coh_last_error());
    if (!a->st)
        coh_shm_ops.destroy(tp);
    return NULL;
}

static void test_shm_segment(void)
{
    clear_env();
    open_arg oa = {.env = {.rank = 0, .size = 2, .local_size = 2, .nnodes = 1, .timeout_s = 1.5}};
    coh_comm_env env = oa.env;
    snprintf(oa.env.job, sizeof oa.env.job, "unit%d-r0", (int)getpid());
    snprintf(env.job, sizeof env.job, "%s", oa.env.job);
    struct passwd *pw = getpwuid(geteuid());
    char path[512];
    snprintf(path, sizeof path, "/dev/shm/cohort-%s-%s", pw ? pw->pw_name : "?", env.job);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, open_rank0, &oa) == 0);
    struct stat st;
    int seen = 0;
    for (int i = 0; i < 20000 && !seen; i++) { /* a loaded machine may start the thread late */
        seen = stat(path, &st) == 0;
        if (!seen)
            usleep(1000);
    }
    CHECK(seen && (st.st_mode & 0777) == 0600);
    pthread_join(th, NULL);
    CHECK_INT(oa.st, COH_ERR_TIMEOUT);
    CHECK(strstr(oa.msg, "rank 1 never joined shared memory"));
    CHECK(stat(path, &st) != 0);

    void *tp;
    env.size = 1;
    env.local_size = 1;
    CHECK_OK(coh_shm_open(&env, &tp));
    CHECK(stat(path, &st) != 0); /* every rank (the only one) mapped it: unlinked */
    shm *s = tp;
    size_t cap = s->ctl->arena_bytes;
    char *a = coh_shm_ops.alloc(tp, 1000), *b = coh_shm_ops.alloc(tp, 5000);
    char *c = coh_shm_ops.alloc(tp, 100);
    CHECK(a && b && c && ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    CHECK(shm_arena_off(s, a, 1000) == 0 && shm_arena_off(s, b, 5000) == 1024);
    CHECK(shm_arena_off(s, path, 10) == SHM_NONE);
    CHECK(coh_shm_ops.alloc(tp, cap) == NULL); /* no room */
    coh_shm_ops.free(tp, a);
    coh_shm_ops.free(tp, b); /* merges with a's extent */
    char *d = coh_shm_ops.alloc(tp, 6000);
    CHECK(d == a);
    coh_shm_ops.free(tp, c);
    coh_shm_ops.free(tp, d);
    char *all = coh_shm_ops.alloc(tp, cap); /* everything merged back into one extent */
    CHECK(all == a);
    coh_shm_ops.free(tp, all);
    coh_shm_ops.destroy(tp);
}

/* The streaming copy equals memcpy for every alignment of both ends and every tail length,
 * and writes nothing outside the destination. */
static void test_copy_stream(void)
{
    enum { MAX = 1000, PAD = 128 };
    unsigned char *src = malloc(MAX + PAD), *dst = malloc(MAX + 2 * PAD);
    for (int i = 0; i < MAX + PAD; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    int bad = 0;
    for (size_t so = 0; so < 64; so += 5)
        for (size_t d = 0; d < 64; d += 3)
            for (size_t len = 0; len < MAX; len += len < 140 ? 1 : 97) {
                memset(dst, 0xee, MAX + 2 * PAD);
                coh_copy_stream(dst + PAD + d, src + so, len);
                bad += memcmp(dst + PAD + d, src + so, len) != 0;
                for (size_t i = 0; i < MAX + 2 * PAD; i++)
                    if ((i < PAD + d || i >= PAD + d + len) && dst[i] != 0xee) {
                        bad++;
                        break;
                    }
            }
    CHECK_INT(bad, 0);
    free(src);
    free(dst);
}

int main(void)
{
    RUN(test_bf16_rounding);
    RUN(test_f16_rounding);
    RUN(test_kernels_agree);
    RUN(test_scalar_kernel_values);
    RUN(test_names);
    RUN(test_env_errors);
    RUN(test_self_comm);
    RUN(test_shm_segment);
    RUN(test_copy_stream);
    return CHECK_REPORT();
}
