/* comm_rank.c: one rank of the multi-process comm tests, started N times by the launcher.
 * usage: comm_rank MODE [ARG]; modes:
 *   sweep       every op x type x size class, checked element by element
 *   allreduce C,C,...  every all-reduce variant at the given counts, checked likewise
 *   split       sub-groups by parity (reversed keys, one rank without color) working beside
 *               the parent
 *   reorder     one sub-group of all ranks, even ranks first: nodes of consecutive ranks end
 *               up interleaved in it; the sweep on it
 *   async       overlapping async all-reduces, test() polling, then a blocking op
 *   rounding    bf16/f16 sums are reduced in f32 and rounded once, to nearest even
 *   kill FILE   all-reduce in a loop; the last rank writes its pid to FILE to be killed;
 *               survivors must fail with PEER_LOST naming it (prints the wall time), and fail
 *               after 120 s if it never died
 *   stop FILE   as kill, but the last rank is stopped (kill -STOP): survivors must time out
 *   leave       ranks 1.. end without a word, 0.5 s apart, while rank 0 is in an all-reduce:
 *               rank 0 must name every one of them, the first and the later ones alike
 *   mismatch    the last rank calls with another count, then another type: MISMATCH on all
 *   silent [DIR]  the last rank never calls: the others time out naming it
 *   absent [DIR]  the last rank exits before joining: the others' create times out naming it
 *               (with DIR, the ranks of `cohort run` start their create together: see
 *               start_together)
 *   digest      every op on values whose sums round (f32, f64, bf16, f16; sum, avg, prod,
 *               max), then a hash of all results per rank: equal on every transport that
 *               reduces in rank order (the tcp test compares it with shm's)
 *   isa         no communicator: prints the reduction kernels this process uses (scalar, avx2,
 *               avx512), COHORT_COMM_ISA applied; a kernel the cpu lacks gives the best it has
 * Exit 0 when every check on this rank passed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/reduce.h"
#include "comm_rank.h"
#include "rank_expect.h"

static int bad;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int mode_split(coh_comm *c, int rank, int n)
{
    int color = n > 2 && rank == n - 1 ? COH_COMM_NO_COLOR : rank % 2;
    coh_comm *sub = NULL;
    coh_status st = coh_comm_split(c, color, -rank, &sub);
    EXPECT(st == COH_OK, "split: %s", coh_last_error());
    if (st)
        return 1;
    if (color == COH_COMM_NO_COLOR) {
        EXPECT(sub == NULL, "a rank without color got a communicator");
    } else {
        int members = 0, above = 0; /* key -rank: higher parent ranks come first */
        for (int r = 0; r < n; r++)
            if (r % 2 == color && !(n > 2 && r == n - 1)) {
                members++;
                above += r > rank;
            }
        EXPECT(coh_comm_size(sub) == members, "size %d, want %d", coh_comm_size(sub), members);
        EXPECT(coh_comm_rank(sub) == above, "rank %d, want %d", coh_comm_rank(sub), above);
        int64_t v = rank, sum = -1;
        st = coh_allreduce(sub, &v, &sum, 1, COH_I64, COH_SUM);
        int64_t want = 0;
        for (int r = 0; r < n; r++)
            if (r % 2 == color && !(n > 2 && r == n - 1))
                want += r;
        EXPECT(st == COH_OK && sum == want, "sub-group sum %lld, want %lld: %s", (long long)sum,
               (long long)want, coh_last_error());
        bad += run_cases(sub, 0);
    }
    int64_t one = 1, total = 0; /* the parent still works after the split */
    st = coh_allreduce(c, &one, &total, 1, COH_I64, COH_SUM);
    EXPECT(st == COH_OK && total == n, "parent sum %lld after split, want %d: %s",
           (long long)total, n, st ? coh_last_error() : "ok");
    coh_comm_destroy(sub);
    return 0;
}

static int mode_reorder(coh_comm *c, int rank, int n)
{
    coh_comm *sub = NULL;
    coh_status st = coh_comm_split(c, 0, (rank % 2) * n + rank, &sub);
    EXPECT(st == COH_OK, "split: %s", coh_last_error());
    if (st)
        return 1;
    int want = rank % 2 ? (n + 1) / 2 + rank / 2 : rank / 2;
    EXPECT(coh_comm_rank(sub) == want, "sub rank %d, want %d", coh_comm_rank(sub), want);
    bad += run_cases(sub, 0);
    coh_comm_destroy(sub);
    return 0;
}

static int mode_async(coh_comm *c, int rank, int n)
{
    enum { K = 6, COUNT = 50021 };
    float *buf[K];
    coh_comm_req *req[K];
    for (int k = 0; k < K; k++) {
        buf[k] = malloc(sizeof(float) * COUNT);
        for (int i = 0; i < COUNT; i++)
            buf[k][i] = (float)(rank + k + i % 7);
        coh_status st = coh_allreduce_async(c, buf[k], buf[k], COUNT, COH_F32, COH_SUM, &req[k]);
        EXPECT(st == COH_OK, "allreduce_async: %s", coh_last_error());
    }
    int done = 0, polls = 0;
    while (!done && polls++ < 100000) {
        EXPECT(coh_comm_test(req[K - 1], &done) == COH_OK, "test");
        if (!done)
            usleep(100);
    }
    EXPECT(done, "the last request never finished");
    for (int k = 0; k < K; k++) {
        EXPECT(coh_comm_wait(req[k]) == COH_OK, "wait %d: %s", k, coh_last_error());
        for (int i = 0; i < COUNT; i++) {
            float want = (float)(n * (n - 1) / 2 + n * (k + i % 7));
            if (buf[k][i] != want) {
                EXPECT(buf[k][i] == want, "request %d element %d: %g, want %g", k, i,
                       buf[k][i], want);
                break;
            }
        }
        free(buf[k]);
    }
    int32_t x = rank, mx = -1; /* a blocking op after async ones keeps the order */
    coh_status st = coh_allreduce(c, &x, &mx, 1, COH_I32, COH_MAX);
    EXPECT(st == COH_OK, "max after the async ops: %s", coh_last_error());
    EXPECT(st || mx == n - 1, "max after the async ops: %d, want %d", (int)mx, n - 1);
    return 0;
}

/* Rank 0 gives 256, every other rank 1: a sum rounded once is RNE(256 + n - 1), whereas
 * rounding after each step would stick at 256 in bf16. */
static int mode_rounding(coh_comm *c, int rank, int n)
{
    for (int bf = 0; bf < 2; bf++) {
        coh_dtype t = bf ? COH_BF16 : COH_F16;
        float base = bf ? 256.0f : 2048.0f; /* the first value whose unit in the last place is 2 */
        uint16_t in[3], out[3];
        in[0] = rank ? (bf ? 0x3f80 : 0x3c00) : (bf ? 0x4380 : 0x6800); /* 1.0 or base */
        in[1] = bf ? 0x7fc1 : 0x7e01;                                    /* NaN */
        in[2] = in[0];
        coh_status st = coh_allreduce(c, in, out, 3, t, COH_SUM);
        EXPECT(st == COH_OK, "allreduce: %s", coh_last_error());
        double exact = (double)base + (n - 1);
        /* nearest representable with step 2 above base, ties to even mantissa */
        double lo = base + 2 * (double)(long)((exact - base) / 2), hi = lo + 2;
        double want = exact - lo < hi - exact ? lo : hi - exact < exact - lo ? hi
                      : ((long)((lo - base) / 2) % 2 == 0 ? lo : hi);
        float got = bf ? coh_bf16_to_f32(out[0]) : coh_f16_to_f32(out[0]);
        EXPECT(got == (float)want, "%s sum of 256-style inputs: got %g, want %g",
               coh_dtype_name(t), got, want);
        float nan = bf ? coh_bf16_to_f32(out[1]) : coh_f16_to_f32(out[1]);
        EXPECT(nan != nan, "%s NaN lost in the sum", coh_dtype_name(t));
    }
    return 0;
}

/* stop: the last rank is stopped (kill -STOP) instead, and never dies: the others time out. */
static int mode_kill(coh_comm *c, int rank, int n, const char *pidfile, int stop)
{
    /* A launcher tears the job down when a rank dies: survivors finish their checks first. */
    if (!stop)
        signal(SIGTERM, SIG_IGN);
    size_t count = 1 << 20;
    float *buf = malloc(count * sizeof *buf);
    for (size_t i = 0; i < count; i++)
        buf[i] = 1;
    if (rank == n - 1) {
        FILE *f = fopen(pidfile, "w");
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
    }
    /* a survivor that never learns of the death gives up, so that no rank loops for ever when
     * the test's kill never came */
    double deadline = wall() + 120;
    for (long it = 0;; it++) {
        if (wall() > deadline) {
            EXPECT(0, "rank %d: no peer died within 120 s (%ld ops)", rank, it);
            break;
        }
        coh_status st = coh_allreduce(c, buf, buf, count, COH_F32, COH_MAX);
        if (st) {
            double when = wall();
            /* the killed rank is named: as the one that died, or, when a survivor that saw the
             * death first closed its own connection sooner, as one whose connection ended too */
            char want[64], also[64];
            snprintf(want, sizeof want, stop ? "timed out after" : "rank %d died", n - 1);
            snprintf(also, sizeof also, stop ? "timed out after" : "rank %d's connection ended too",
                     n - 1);
            coh_status lost = stop ? COH_ERR_TIMEOUT : COH_ERR_PEER_LOST;
            EXPECT(st == lost, "got %s: %s", coh_status_name(st), coh_last_error());
            EXPECT(strstr(coh_last_error(), want) || strstr(coh_last_error(), also),
                   "message '%s' lacks '%s'", coh_last_error(), want);
            /* tcp says how the connection ended in words, not "its connection Connection ..." */
            const char *conn = strstr(coh_last_error(), "(its connection ");
            EXPECT(!conn || !strncmp(conn, "(its connection closed)", 23) ||
                   !strncmp(conn, "(its connection was reset)", 26) ||
                   !strncmp(conn, "(its connection failed: ", 24),
                   "message '%s' says oddly how the connection ended", coh_last_error());
            printf("rank %d: peer lost at %.3f after %ld ops: %s\n", rank, when, it, coh_last_error());
            /* the communicator stays failed */
            EXPECT(coh_barrier(c) == lost, "barrier after a lost peer");
            break;
        }
    }
    free(buf);
    return 0;
}

/* Rank 0 sees rank 1's connection end first; the others end later, when rank 0 is already
 * failing: the message must name them too (the tcp transport waits a little for them). */
static int mode_leave(coh_comm *c, int rank, int n)
{
    if (rank > 0) {
        long ms = 500L * (rank - 1);
        nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
        _exit(0);
    }
    int32_t x = 1, y;
    coh_status st = coh_allreduce(c, &x, &y, 1, COH_I32, COH_SUM);
    EXPECT(st == COH_ERR_PEER_LOST, "got %s: %s", coh_status_name(st), coh_last_error());
    for (int r = 1; r < n; r++) {
        char want[64];
        snprintf(want, sizeof want, r == 1 ? "rank %d died" : "rank %d's connection ended too", r);
        EXPECT(strstr(coh_last_error(), want), "message '%s' lacks '%s'", coh_last_error(), want);
    }
    printf("rank %d: %s\n", rank, coh_last_error());
    return 0;
}

/* The last rank calls all-reduce (gather 0) or all-gather with 5 elements, the others with
 * many; then a matching all-reduce large enough for several staging rounds is checked. */
static int mismatch_small_large(coh_comm *c, int rank, int n, int gather)
{
    enum { BIG = 200003 };
    int fails = 0, last = rank == n - 1;
    float *big = malloc(sizeof(float) * BIG), *sum = malloc(sizeof(float) * BIG);
    for (int i = 0; i < BIG; i++)
        big[i] = (float)(rank + i % 5);
    coh_status st = gather ? coh_allgather(c, big, sum, last ? 5 : BIG / n, COH_F32)
                           : coh_allreduce(c, big, sum, last ? 5 : BIG, COH_F32, COH_SUM);
    if (st != COH_ERR_MISMATCH) {
        fprintf(stderr, "rank %d: %s small beside large: got %s\n", rank,
                gather ? "all-gather" : "all-reduce", coh_status_name(st));
        fails++;
    }
    st = coh_allreduce(c, big, sum, BIG, COH_F32, COH_SUM);
    for (int i = 0; i < BIG && !fails; i++)
        if (st || sum[i] != (float)(n * (n - 1) / 2 + n * (i % 5))) {
            fprintf(stderr, "rank %d: all-reduce after a small-beside-large mismatch: element %d "
                    "is %g: %s\n", rank, i, sum[i], st ? coh_last_error() : "wrong");
            fails++;
        }
    free(big);
    free(sum);
    return fails;
}

static int mode_mismatch(coh_comm *c, int rank, int n)
{
    float x[4] = {1, 2, 3, 4}, y[4];
    int last = rank == n - 1;
    coh_status st = coh_allreduce(c, x, y, last ? 3 : 4, COH_F32, COH_SUM);
    EXPECT(st == COH_ERR_MISMATCH, "count: got %s", coh_status_name(st));
    const char *m = coh_last_error();
    char who[64];
    snprintf(who, sizeof who, "rank %d called allreduce(count=3", n - 1);
    EXPECT(strstr(m, "rank 0 called allreduce(count=4, f32, sum) #1") && strstr(m, who),
           "message '%s'", m);
    st = coh_allreduce(c, x, y, 2, last ? COH_I32 : COH_F32, COH_SUM);
    EXPECT(st == COH_ERR_MISMATCH && strstr(coh_last_error(), "i32") &&
           strstr(coh_last_error(), "f32"), "type: %s: '%s'", coh_status_name(st), coh_last_error());
    printf("rank %d: %s\n", rank, coh_last_error());
    /* a mismatch is reported, not fatal: the next matching call works */
    st = coh_allreduce(c, x, y, 4, COH_F32, COH_SUM);
    EXPECT(st == COH_OK && y[3] == 4.0f * n, "after mismatch: %s", coh_last_error());
    /* a small call beside large ones: the ranks take different paths up to the check, and
     * the next large call (several staging rounds) must still see the right halves */
    bad += mismatch_small_large(c, rank, n, 0);
    bad += mismatch_small_large(c, rank, n, 1);
    /* point to point: the receiver learns that the sender's count differs */
    if (rank == 0)
        EXPECT(coh_send(c, x, 4, COH_F32, 1) == COH_OK, "send: %s", coh_last_error());
    if (rank == 1) {
        st = coh_recv(c, y, 3, COH_F32, 0);
        EXPECT(st == COH_ERR_MISMATCH && strstr(coh_last_error(), "recv(count=3, f32)") &&
               strstr(coh_last_error(), "rank 0 called send(count=4, f32)"),
               "recv: %s: '%s'", coh_status_name(st), coh_last_error());
    }
    EXPECT(coh_barrier(c) == COH_OK, "barrier after p2p mismatch: %s", coh_last_error());
    return 0;
}

static int mode_silent(coh_comm *c, int rank, int n)
{
    if (rank == n - 1) {
        sleep((unsigned)(coh_comm_timeout(c) * 2 + 1));
        return 0;
    }
    int32_t x = 1, y;
    coh_status st = coh_allreduce(c, &x, &y, 1, COH_I32, COH_SUM);
    char want[64];
    snprintf(want, sizeof want, "rank %d never arrived", n - 1);
    EXPECT(st == COH_ERR_TIMEOUT && strstr(coh_last_error(), want) &&
           strstr(coh_last_error(), "allreduce(count=1, i32, sum) #1"),
           "got %s: '%s'", coh_status_name(st), coh_last_error());
    printf("rank %d: %s\n", rank, coh_last_error());
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* Values in [0.1, 2) that differ per rank and element, in type t. */
static void digest_fill(void *buf, size_t count, coh_dtype t, int rank)
{
    for (size_t i = 0; i < count; i++) {
        double v = 0.1 + (double)((rank * 7919 + (long)i * 104729) % 1901) / 1000.0;
        if (t == COH_F64)
            ((double *)buf)[i] = v / 3.0;
        else if (t == COH_F32)
            ((float *)buf)[i] = (float)(v / 3.0);
        else {
            float f = (float)(v / 3.0);
            coh_from_f32((char *)buf + i * coh_dtype_size(t), &f, 1, t);
        }
    }
}

static int mode_digest(coh_comm *c, int rank, int n)
{
    static const coh_dtype types[] = {COH_F32, COH_F64, COH_BF16, COH_F16};
    static const coh_redop ops[] = {COH_SUM, COH_AVG, COH_PROD, COH_MAX};
    size_t count = 4099, all = count * (size_t)n;
    char *in = malloc(all * 8), *out = malloc(all * 8);
    uint64_t h = 1469598103934665603ull;
    for (int ti = 0; ti < 4; ti++) {
        coh_dtype t = types[ti];
        size_t esz = coh_dtype_size(t);
        digest_fill(in, all, t, rank);
        for (int oi = 0; oi < 4; oi++) {
            coh_redop op = ops[oi];
            EXPECT(coh_allreduce(c, in, out, count, t, op) == COH_OK, "%s", coh_last_error());
            h = fnv(h, out, count * esz);
            EXPECT(coh_reduce(c, in, out, count, t, op, n - 1) == COH_OK, "%s", coh_last_error());
            if (rank == n - 1)
                h = fnv(h, out, count * esz);
            EXPECT(coh_reduce_scatter(c, in, out, count, t, op) == COH_OK, "%s",
                   coh_last_error());
            h = fnv(h, out, count * esz);
        }
        EXPECT(coh_allgather(c, in, out, count, t) == COH_OK, "%s", coh_last_error());
        h = fnv(h, out, all * esz);
        EXPECT(coh_alltoall(c, in, out, count / (size_t)n, t) == COH_OK, "%s", coh_last_error());
        h = fnv(h, out, count / (size_t)n * (size_t)n * esz);
        memcpy(out, in, count * esz);
        EXPECT(coh_broadcast(c, out, count, t, n / 2) == COH_OK, "%s", coh_last_error());
        h = fnv(h, out, count * esz);
    }
    printf("rank %d digest %016llx\n", rank, (unsigned long long)h);

    free(in);
    free(out);
    return 0;
}

/* DIR: every rank touches DIR/ready.RANK and waits (up to 100 s) until WORLD_SIZE of them
 * exist. The silent and absent modes run with a 1 s COHORT_COMM_TIMEOUT, which also bounds the
 * create: a rank a loaded machine started a second late would be the one named, not the last. */
static int start_together(const char *dir)
{
    int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    int n = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
    char path[4096];
    snprintf(path, sizeof path, "%s/ready.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f) != 0) {
        fprintf(stderr, "comm_rank: cannot create '%s'\n", path);
        return 1;
    }
    for (int i = 0; i < 10000; i++) {
        int k = 0;
        for (int r = 0; r < n; r++) {
            snprintf(path, sizeof path, "%s/ready.%d", dir, r);
            k += access(path, F_OK) == 0;
        }
        if (k == n)
            return 0;
        usleep(10000);
    }
    fprintf(stderr, "comm_rank: rank %d: not all %d ranks started within 100 s\n", rank, n);
    return 1;
}

static int mode_absent(void)
{
    int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    int n = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
    if (rank == n - 1)
        return 0;
    coh_comm *c = NULL;
    coh_status st = coh_comm_create(COH_COMM_AUTO, &c);
    char want[64];
    snprintf(want, sizeof want, "rank %d never joined", n - 1);
    EXPECT(st == COH_ERR_TIMEOUT && strstr(coh_last_error(), want), "got %s: '%s'",
           coh_status_name(st), coh_last_error());
    printf("rank %d: %s\n", rank, coh_last_error());
    coh_comm_destroy(c);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sweep";
    if ((!strcmp(mode, "absent") || !strcmp(mode, "silent")) && argc > 2 && start_together(argv[2]))
        return 1;
    if (!strcmp(mode, "absent"))
        return mode_absent();
    if (!strcmp(mode, "isa"))
        return printf("%s\n", coh_isa_name(coh_reduce_isa())) < 0;
    coh_comm *c;
    coh_status st = coh_comm_create(COH_COMM_AUTO, &c);
    if (st) {
        fprintf(stderr, "comm_rank: %s\n", coh_last_error());
        return 1;
    }
    int rank = coh_comm_rank(c), n = coh_comm_size(c);
    if (getenv("COHORT_COMM_ISA")) /* a forced kernel: say which one this rank really uses */
        printf("rank %d: %s kernels\n", rank, coh_isa_name(coh_reduce_isa()));
    if (!strcmp(mode, "sweep"))
        bad += run_cases(c, 1);
    else if (!strcmp(mode, "allreduce") && argc > 2) {
        size_t counts[16];
        int k = 0;
        for (char *p = argv[2]; *p && k < 16; p += *p == ',')
            counts[k++] = strtoull(p, &p, 10);
        bad += run_allreduce_cases(c, counts, k, 1);
    } else if (!strcmp(mode, "split"))
        mode_split(c, rank, n);
    else if (!strcmp(mode, "reorder"))
        mode_reorder(c, rank, n);
    else if (!strcmp(mode, "async"))
        mode_async(c, rank, n);
    else if (!strcmp(mode, "rounding"))
        mode_rounding(c, rank, n);
    else if (!strcmp(mode, "kill") && argc > 2)
        mode_kill(c, rank, n, argv[2], 0);
    else if (!strcmp(mode, "stop") && argc > 2)
        mode_kill(c, rank, n, argv[2], 1);
    else if (!strcmp(mode, "leave"))
        mode_leave(c, rank, n);
    else if (!strcmp(mode, "mismatch"))
        mode_mismatch(c, rank, n);
    else if (!strcmp(mode, "silent"))
        mode_silent(c, rank, n);
    else if (!strcmp(mode, "digest"))
        mode_digest(c, rank, n);
    else {
        fprintf(stderr, "comm_rank: unknown mode '%s'\n", mode);
        bad++;
    }
    char transport[16];
    snprintf(transport, sizeof transport, "%s", coh_comm_transport(c));
    coh_comm_destroy(c);
    if (!bad)
        printf("rank %d of %d (%s): %s passed\n", rank, n, transport, mode);
    return bad ? 1 : 0;
}
