/* cli_bench_comm.c: `cohort bench comm`: an nccl-tests-style table (size, count, type, op,
 * time, algbw, busbw, #wrong) for a sweep of message sizes over the job's communicator;
 * every row is verified element by element. Start it under `cohort run` or mpirun. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "cli_bench.h"
#include "cohort/clock.h"
#include "cohort/comm.h"
#include "cohort/json_writer.h"

static const char *const CMD = "bench comm";

const char bench_comm_summary[] = "collectives: time, algbw, busbw and #wrong per size";

typedef enum { B_ALLREDUCE, B_REDUCE, B_BROADCAST, B_ALLGATHER, B_REDUCE_SCATTER, B_ALLTOALL } bop;
static const char *const bop_names[] = {"allreduce", "reduce", "broadcast", "allgather",
                                        "reduce_scatter", "alltoall"};

typedef struct bench {
    coh_comm *c;
    int n, rank, arena, json;
    long wrong; /* wrong elements over all rows and ranks */
    bop op;
    coh_dtype t;
    coh_redop redop;
    bench_sweep sw;
} bench;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort bench comm [options]   (every rank of a job runs it)\n\n"
            "  --op NAME          allreduce (default), reduce, broadcast, allgather,\n"
            "                     reduce_scatter or alltoall\n"
            "  --dtype TYPE       f32 (default), f64, bf16, f16, i32, i64 or u8\n"
            "  --redop OP         sum (default), avg, min, max or prod\n"
            "  --min-bytes SIZE   smallest message (default 4K)\n"
            "  --max-bytes SIZE   largest message (default 256M)\n"
            "  --step-factor F    size multiplier between rows (default 2)\n"
            "  --iters N          timed iterations per size (default 20)\n"
            "  --warmup N         untimed iterations per size (default 5)\n"
            "  --buffers KIND     arena (default: buffers in the transport's shared memory)\n"
            "                     or plain (malloc)\n"
            "  --comm KIND        auto (default), shm, mpi or tcp\n"
            "  --json             one JSON object per row instead of the table\n\n"
            "size is the message in bytes as in nccl-tests (all-gather: the gathered buffer;\n"
            "reduce-scatter and all-to-all: the send buffer), rounded down to whole blocks of\n"
            "the ranks for these three: the size that ran. busbw = algbw x 2(n-1)/n for\n"
            "all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 else.\n");
}

static double input(const bench *b, int r, size_t i)
{
    return b->redop == COH_PROD ? 1 + ((size_t)r + i) % 3 / 2 : (double)(((size_t)r + i) % 5);
}

static double fold(const bench *b, size_t i)
{
    double acc = input(b, 0, i);
    for (int r = 1; r < b->n; r++) {
        double x = input(b, r, i);
        acc = b->redop == COH_MIN ? fmin(acc, x) : b->redop == COH_MAX ? fmax(acc, x)
              : b->redop == COH_PROD ? acc * x : acc + x;
    }
    if (b->redop == COH_AVG)
        acc = b->t >= COH_I32 ? floor(acc / b->n) : acc / b->n;
    return acc;
}

/* Relative tolerance of one rounding in the type (exact for integers). */
static double tolerance(coh_dtype t)
{
    return t == COH_BF16 ? 1.0 / 128 : t == COH_F16 ? 1.0 / 1024 : t == COH_F32 ? 1e-6
           : t == COH_F64 ? 1e-12 : 0;
}

static long count_wrong(const bench *b, const void *out, size_t count, size_t per)
{
    long wrong = 0;
    double tol = tolerance(b->t);
    for (size_t i = 0; i < count; i++) {
        double want;
        size_t blk = per ? i / per : 0, j = per ? i % per : i;
        switch (b->op) {
        case B_ALLREDUCE:
        case B_REDUCE: want = fold(b, i); break;
        case B_BROADCAST: want = input(b, 0, i); break;
        case B_ALLGATHER: want = input(b, (int)blk, j); break;
        case B_REDUCE_SCATTER: want = fold(b, (size_t)b->rank * count + i); break;
        default: want = input(b, (int)blk, (size_t)b->rank * per + j); break;
        }
        double got = coh_dtype_get(out, i, b->t);
        wrong += !(fabs(got - want) <= tol * fmax(1, fabs(want)));
    }
    return wrong;
}

static coh_status run_op(const bench *b, const void *s, void *r, size_t per)
{
    switch (b->op) {
    case B_ALLREDUCE: return coh_allreduce(b->c, s, r, per, b->t, b->redop);
    case B_REDUCE: return coh_reduce(b->c, s, r, per, b->t, b->redop, 0);
    case B_BROADCAST: return coh_broadcast(b->c, r, per, b->t, 0);
    case B_ALLGATHER: return coh_allgather(b->c, s, r, per, b->t);
    case B_REDUCE_SCATTER: return coh_reduce_scatter(b->c, s, r, per, b->t, b->redop);
    default: return coh_alltoall(b->c, s, r, per, b->t);
    }
}

static double bus_factor(const bench *b)
{
    double n = b->n;
    if (b->op == B_ALLREDUCE)
        return 2 * (n - 1) / n;
    if (b->op == B_ALLGATHER || b->op == B_REDUCE_SCATTER || b->op == B_ALLTOALL)
        return (n - 1) / n;
    return 1;
}

static void *buffer(bench *b, size_t bytes)
{
    return b->arena ? coh_comm_alloc(b->c, bytes ? bytes : 64) : malloc(bytes ? bytes : 64);
}

static void release(bench *b, void *p)
{
    if (b->arena)
        coh_comm_free(b->c, p);
    else
        free(p);
}

/* Elements per rank's call, and the send/recv element counts, for a message of `bytes`. */
static void shape(const bench *b, uint64_t bytes, size_t *per, size_t *ns, size_t *nr)
{
    size_t esz = coh_dtype_size(b->t), all = (size_t)(bytes / esz), n = (size_t)b->n;
    int blocked = b->op == B_ALLGATHER || b->op == B_REDUCE_SCATTER || b->op == B_ALLTOALL;
    *per = blocked ? all / n : all;
    *ns = b->op == B_ALLGATHER ? *per : blocked ? *per * n : *per;
    *nr = b->op == B_REDUCE_SCATTER ? *per : blocked ? *per * n : *per;
}

static coh_status one_size(bench *b, uint64_t bytes, coh_jw *jw)
{
    size_t per, ns, nr, esz = coh_dtype_size(b->t);
    shape(b, bytes, &per, &ns, &nr);
    void *s = buffer(b, ns * esz), *r = buffer(b, nr * esz);
    if (!s || !r) {
        release(b, s);
        release(b, r);
        return coh_errf(COH_ERR_NOMEM, "cannot allocate %llu-byte buffers%s",
                        (unsigned long long)bytes,
                        b->arena ? " in the arena (raise COHORT_SHM_ARENA)" : "");
    }
    int blocked = b->op == B_ALLGATHER || b->op == B_ALLTOALL || b->op == B_REDUCE_SCATTER;
    for (size_t i = 0; i < ns; i++)
        coh_dtype_set(s, i, b->t, input(b, b->rank, i));
    memset(r, 0, nr * esz);
    coh_status st = COH_OK;
    for (int i = 0; i < b->sw.warmup && !st; i++)
        st = run_op(b, s, r, per);
    if (!st)
        st = coh_barrier(b->c);
    double t0 = coh_now_s();
    for (int i = 0; i < b->sw.iters && !st; i++)
        st = run_op(b, s, r, per);
    double us = (coh_now_s() - t0) / b->sw.iters * 1e6;
    /* the verified run: fresh inputs, one op, every element checked */
    for (size_t i = 0; i < ns; i++)
        coh_dtype_set(s, i, b->t, input(b, b->rank, i));
    if (b->op == B_BROADCAST)
        for (size_t i = 0; i < nr; i++)
            coh_dtype_set(r, i, b->t, b->rank == 0 ? input(b, 0, i) : -1);
    else
        memset(r, 0, nr * esz);
    if (!st)
        st = run_op(b, s, r, per);
    int64_t wrong = 0;
    if (!st && (b->op != B_REDUCE || b->rank == 0))
        wrong = count_wrong(b, r, nr, b->op == B_REDUCE_SCATTER ? 0 : blocked ? per : 0);
    double us_max = us;
    if (!st)
        st = coh_allreduce(b->c, &us, &us_max, 1, COH_F64, COH_MAX);
    if (!st)
        st = coh_allreduce(b->c, &wrong, &wrong, 1, COH_I64, COH_SUM);
    release(b, s);
    release(b, r);
    b->wrong += wrong;
    if (st || b->rank)
        return st;
    /* The size that ran, as nccl-tests prints it: blocked ops move whole blocks, so a count
     * that does not divide by the ranks is rounded down, and the bandwidths are of that. */
    uint64_t ran = (uint64_t)(ns > nr ? ns : nr) * esz;
    double algbw = (double)ran / (us_max * 1e-6) / 1e9, busbw = algbw * bus_factor(b);
    if (jw) {
        coh_jw_object_begin(jw);
        coh_jw_key(jw, "size"), coh_jw_uint(jw, ran);
        coh_jw_key(jw, "count"), coh_jw_uint(jw, per);
        coh_jw_key(jw, "type"), coh_jw_string(jw, coh_dtype_name(b->t));
        coh_jw_key(jw, "op"), coh_jw_string(jw, bop_names[b->op]);
        coh_jw_key(jw, "redop"), coh_jw_string(jw, coh_redop_name(b->redop));
        coh_jw_key(jw, "ranks"), coh_jw_int(jw, b->n);
        coh_jw_key(jw, "transport"), coh_jw_string(jw, coh_comm_transport(b->c));
        coh_jw_key(jw, "buffers"), coh_jw_string(jw, b->arena ? "arena" : "plain");
        coh_jw_key(jw, "time_us"), coh_jw_double(jw, us_max);
        coh_jw_key(jw, "algbw_gbs"), coh_jw_double(jw, algbw);
        coh_jw_key(jw, "busbw_gbs"), coh_jw_double(jw, busbw);
        coh_jw_key(jw, "wrong"), coh_jw_int(jw, wrong);
        coh_jw_object_end(jw);
        coh_jw_finish(jw);
    } else {
        printf("%12llu %12zu %6s %14s %6s %10.1f %8.2f %8.2f %8lld\n", (unsigned long long)ran,
               per, coh_dtype_name(b->t), bop_names[b->op], coh_redop_name(b->redop), us_max,
               algbw, busbw, (long long)wrong);
    }
    fflush(stdout);
    return COH_OK;
}

/* The arena is a shared-memory segment whose pages come into being as they are written: both
 * buffers of the largest row, on each of `ranks` ranks of this machine, must fit its memory
 * and (when the segment lives there) the free space of /dev/shm, or writing them would fill
 * the machine (or fault) instead of failing. */
static coh_status arena_room(const bench *b, int ranks, int in_dev_shm)
{
    uint64_t per_rank = 2 * b->sw.max_bytes, limit = UINT64_MAX;
    const char *what = "a 64-bit size";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) {
        limit = (uint64_t)pages * (uint64_t)page;
        what = "this machine's memory";
    }
    struct statvfs v;
    if (in_dev_shm && statvfs("/dev/shm", &v) == 0 &&
        (uint64_t)v.f_bavail * v.f_frsize < limit) {
        limit = (uint64_t)v.f_bavail * v.f_frsize;
        what = "the free space of /dev/shm";
    }
    if (per_rank / 2 == b->sw.max_bytes && per_rank <= limit / (uint64_t)ranks)
        return COH_OK;
    char on[48] = "";
    if (ranks > 1)
        snprintf(on, sizeof on, " on each of %d ranks", ranks);
    return coh_errf(COH_ERR_NOMEM, "cannot allocate %llu-byte buffers in the arena: two of "
                    "them%s are more than %s (%llu bytes)", (unsigned long long)b->sw.max_bytes,
                    on, what, (unsigned long long)limit);
}

static int parse_args(bench *b, int argc, char **argv)
{
    static const struct option opts[] = {
        {"op", 1, 0, 'o'},   {"dtype", 1, 0, 't'}, {"redop", 1, 0, 'r'}, {"buffers", 1, 0, 'B'},
        {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'},  BENCH_SWEEP_OPTIONS,  {0, 0, 0, 0}};
    int ch, r;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': {
            size_t k = 0;
            while (k < 6 && strcmp(optarg, bop_names[k]))
                k++;
            if (k == 6)
                return cli_usage_error(CMD, "invalid --op '%s': expected allreduce, "
                                       "reduce, broadcast, allgather, reduce_scatter or alltoall", optarg);
            b->op = (bop)k;
            break;
        }
        case 't':
            if (coh_dtype_parse(optarg, &b->t))
                return cli_fail(CMD, COH_ERR_INVALID);
            break;
        case 'r':
            if (coh_redop_parse(optarg, &b->redop))
                return cli_fail(CMD, COH_ERR_INVALID);
            break;
        case 'B':
            if (strcmp(optarg, "arena") && strcmp(optarg, "plain"))
                return cli_usage_error(CMD, "invalid --buffers '%s': expected arena or "
                                       "plain", optarg);
            b->arena = !strcmp(optarg, "arena");
            break;
        case 'j': b->json = 1; break;
        case 'h': usage(stdout); return -1;
        default:
            if ((r = bench_sweep_option(CMD, ch, optarg, &b->sw)) < 0)
                return cli_bad_option(CMD, argv);
            if (!r)
                return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    return bench_sweep_check(CMD, &b->sw);
}

int bench_comm(int argc, char **argv)
{
    bench b = {.arena = 1, .t = COH_F32, .redop = COH_SUM,
               .sw = {.iters = 20, .warmup = 5, .min_bytes = 4 << 10, .max_bytes = 256 << 20,
                      .factor = 2, .kind = COH_COMM_AUTO}};
    int rc = parse_args(&b, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    coh_status st = COH_OK;
    if (b.arena && !getenv("COHORT_SHM_ARENA")) { /* room for both buffers of the largest row */
        if ((st = arena_room(&b, 1, 0)))
            return cli_fail(CMD, st);
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)(2 * b.sw.max_bytes + (1 << 20)));
        setenv("COHORT_SHM_ARENA", v, 1);
    }
    if ((st = coh_comm_create(b.sw.kind, &b.c)))
        return cli_fail(CMD, st);
    b.n = coh_comm_size(b.c);
    b.rank = coh_comm_rank(b.c);
    /* every rank of a shared-memory job writes its part of the one segment, before any
     * collective: each refuses alike, and none waits for another */
    if (b.arena && !strcmp(coh_comm_transport(b.c), "shm") && (st = arena_room(&b, b.n, 1))) {
        coh_comm_destroy(b.c);
        return cli_fail(CMD, st);
    }
    coh_jw jw;
    if (b.json)
        coh_jw_init(&jw, stdout, 0);
    else if (!b.rank)
        printf("# cohort bench comm: %d ranks, transport %s, %s buffers, %d iters\n"
               "# %10s %12s %6s %14s %6s %10s %8s %8s %8s\n"
               "# %10s %12s %6s %14s %6s %10s %8s %8s %8s\n",
               b.n, coh_comm_transport(b.c), b.arena ? "arena" : "plain", b.sw.iters, "size",
               "count", "type", "op", "redop", "time", "algbw", "busbw", "#wrong", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
    for (double sz = (double)b.sw.min_bytes; sz <= (double)b.sw.max_bytes * 1.0000001 && !st;
         sz *= b.sw.factor) {
        uint64_t bytes = (uint64_t)sz / coh_dtype_size(b.t) * coh_dtype_size(b.t);
        st = one_size(&b, bytes, b.json && !b.rank ? &jw : NULL);
    }
    coh_comm_destroy(b.c);
    if (st)
        return cli_fail(CMD, st);
    if (b.wrong) {
        fprintf(stderr, "cohort bench comm: error: %ld wrong elements\n", b.wrong);
        return CLI_FAILED;
    }
    return CLI_OK;
}
