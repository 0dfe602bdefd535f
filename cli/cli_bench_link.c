/* cli_bench_link.c: `cohort bench link`: the link between two ranks measured by ping-pong (the
 * one-way time of each message size, verified byte for byte), its α (latency) and β (bandwidth)
 * for t = α + n/β, and with --calibration FILE those of a link between two nodes merged into a
 * calibration file as "inter_node" for `cohort plan --calibration FILE --nodes N`. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_bench.h"
#include "cohort/clock.h"
#include "cohort/comm.h"
#include "cohort/json_writer.h"
#include "cohort/planner.h"

static const char *const CMD = "bench link";

const char bench_link_summary[] = "a link's latency and bandwidth by ping-pong (alpha, beta)";

/* Round trips of the latency probe (a message of LAT_BYTES), after LAT_WARMUP untimed ones. */
enum { LAT_BYTES = 8, LAT_TRIPS = 200, LAT_WARMUP = 20, MAX_SIZES = 64, HOST_CHARS = 64 };

typedef struct link_bench {
    coh_comm *c;
    int rank, json;
    bench_sweep sw;
    const char *calibration;
} link_bench;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort bench link [options]   (2 ranks: one on each end of the link)\n"
            "   e.g. mpirun -np 2 --host node0,node1 cohort bench link --calibration cal.json\n\n"
            "  --min-bytes SIZE     smallest message of the sweep (default 64K)\n"
            "  --max-bytes SIZE     largest message (default 64M)\n"
            "  --step-factor F      size multiplier between rows (default 4)\n"
            "  --iters N            timed round trips per size (default 5; the median counts)\n"
            "  --warmup N           untimed round trips per size (default 1)\n"
            "  --comm KIND          auto (default), shm, mpi or tcp\n"
            "  --calibration FILE   merge the link into FILE, a calibration file from 'cohort\n"
            "                       bench gemm', as \"inter_node\" (the ranks must run on two\n"
            "                       hosts; rank 0 reads and writes FILE); everything else in\n"
            "                       FILE is kept\n"
            "  --json               one JSON object per row and one for the fit\n\n"
            "Rank 0 sends each message, rank 1 sends it back; the one-way time is half the\n"
            "median round trip. alpha is the one-way time of an %d-byte message (median of %d\n"
            "round trips), beta the least-squares slope of the sweep's times against size\n"
            "(t = alpha + n/beta; the fit's own intercept is printed too: a rate shaper's\n"
            "burst or a NIC's coalescing can pull it below zero). 'cohort plan --calibration\n"
            "FILE --nodes N' then prices the links between nodes with them.\n",
            LAT_BYTES, LAT_TRIPS);
}

static int parse_args(link_bench *b, int argc, char **argv)
{
    static const struct option opts[] = {{"json", 0, 0, 'j'}, {"calibration", 1, 0, 'C'},
                                         {"help", 0, 0, 'h'}, BENCH_SWEEP_OPTIONS, {0, 0, 0, 0}};
    int ch, r;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'C': b->calibration = optarg; break;
        case 'j': b->json = 1; break;
        case 'h': usage(stdout); return -1;
        default:
            if ((r = bench_sweep_option(CMD, ch, optarg, &b->sw)) < 0)
                return cli_bad_option(CMD, argv);
            if (!r)
                return CLI_USAGE;
        }
    }
    if (cli_no_operands(CMD, argc, argv))
        return CLI_USAGE;
    return bench_sweep_check(CMD, &b->sw);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* warmup + trips round trips of `bytes` between ranks 0 and 1; on rank 0 the median one-way
 * time in seconds (*one_way_s) and the bytes of the last echo that differ from what was sent
 * (*wrong). Rank 1 only echoes. */
static coh_status ping_pong(link_bench *b, uint8_t *out, uint8_t *back, size_t bytes, int trips,
                            int warmup, double *times, double *one_way_s, long *wrong)
{
    for (size_t i = 0; i < bytes; i++)
        out[i] = (uint8_t)(i * 131 + bytes);
    memset(back, 0, bytes);
    coh_status st = COH_OK;
    for (int i = 0; i < warmup + trips && !st; i++) {
        if (b->rank == 0) {
            double t0 = coh_now_s();
            st = coh_send(b->c, out, bytes, COH_U8, 1);
            if (!st)
                st = coh_recv(b->c, back, bytes, COH_U8, 1);
            if (i >= warmup)
                times[i - warmup] = (coh_now_s() - t0) / 2;
        } else {
            st = coh_recv(b->c, back, bytes, COH_U8, 0);
            if (!st)
                st = coh_send(b->c, back, bytes, COH_U8, 0);
        }
    }
    if (st || b->rank)
        return st;
    *one_way_s = median(times, trips);
    *wrong = 0;
    for (size_t i = 0; i < bytes; i++)
        *wrong += back[i] != out[i];
    return COH_OK;
}

/* Rank 0's check before any message moves: the calibration file reads (so that a bad one is
 * refused now, not after the sweep), then the two ranks run on different hosts. Both ranks learn
 * the verdict; 0 = go on. */
static int preflight(link_bench *b, coh_hw *cal)
{
    char mine[HOST_CHARS], host[2][HOST_CHARS];
    memset(mine, 0, sizeof mine);
    if (gethostname(mine, HOST_CHARS - 1))
        snprintf(mine, HOST_CHARS, "(unknown)");
    coh_status st = coh_allgather(b->c, mine, host, HOST_CHARS, COH_U8);
    if (st)
        return cli_fail(CMD, st);
    int32_t verdict = CLI_OK;
    if (b->rank == 0 && b->calibration) {
        if ((st = coh_calibration_load(b->calibration, cal)) != COH_OK)
            verdict = cli_fail(CMD, st);
        else if (!strcmp(host[0], host[1]))
            verdict = cli_usage_error(CMD, "rank 0 and rank 1 both run on host '%s': "
                                      "--calibration records the link between two nodes; start "
                                      "one rank on each (mpirun -np 2 --host NODE0,NODE1)",
                                      host[0]);
    }
    if ((st = coh_broadcast(b->c, &verdict, 1, COH_I32, 0)) != COH_OK)
        return cli_fail(CMD, st);
    if (verdict == CLI_OK && b->rank == 0 && !b->json)
        printf("# cohort bench link: rank 0 on %s, rank 1 on %s, transport %s, median of %d "
               "round trips\n# %10s %12s %12s %8s\n# %10s %12s %12s %8s\n", host[0], host[1],
               coh_comm_transport(b->c), b->sw.iters, "size", "one-way", "bandwidth", "#wrong",
               "(B)", "(us)", "(GB/s)", "");
    return verdict;
}

/* Merge the link into the calibration file read by preflight: written beside it, then renamed
 * over it, so that a failed write leaves the old file whole. */
static int merge(const link_bench *b, coh_hw *cal, double alpha_s, double beta)
{
    cal->inter.alpha_s = alpha_s;
    cal->inter.bytes_per_s = beta;
    size_t n = strlen(b->calibration) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return cli_fail(CMD, coh_errf(COH_ERR_NOMEM, "out of memory"));
    snprintf(tmp, n, "%s.tmp%ld", b->calibration, (long)getpid());
    coh_status st = coh_calibration_write(cal, tmp);
    if (st == COH_OK && rename(tmp, b->calibration))
        st = coh_errf(COH_ERR_IO, "cannot replace calibration file '%s'", b->calibration);
    if (st)
        remove(tmp);
    free(tmp);
    return st ? cli_fail(CMD, st) : CLI_OK;
}

int bench_link(int argc, char **argv)
{
    link_bench b = {.sw = {.iters = 5, .warmup = 1, .min_bytes = 64 << 10,
                           .max_bytes = 64 << 20, .factor = 4, .kind = COH_COMM_AUTO}};
    int rc = parse_args(&b, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    coh_status st = coh_comm_create(b.sw.kind, &b.c);
    if (st)
        return cli_fail(CMD, st);
    b.rank = coh_comm_rank(b.c);
    if (coh_comm_size(b.c) != 2) {
        rc = cli_usage_error(CMD, "%d ranks: the link is measured between 2 ranks, one on "
                             "each end (mpirun -np 2 --host NODE0,NODE1)", coh_comm_size(b.c));
        coh_comm_destroy(b.c);
        return rc;
    }
    coh_hw cal;
    memset(&cal, 0, sizeof cal);
    if ((rc = preflight(&b, &cal)) != CLI_OK) {
        coh_comm_destroy(b.c);
        return rc;
    }
    double sizes[MAX_SIZES], secs[MAX_SIZES];
    int rows = 0, trips = b.sw.iters > LAT_TRIPS ? b.sw.iters : LAT_TRIPS;
    size_t cap = b.sw.max_bytes > LAT_BYTES ? (size_t)b.sw.max_bytes : LAT_BYTES;
    uint8_t *out = malloc(cap), *back = malloc(cap);
    double *times = malloc(sizeof(double) * (size_t)trips);
    if (!out || !back || !times)
        st = coh_errf(COH_ERR_NOMEM, "cannot allocate two %zu-byte buffers", cap);
    coh_jw jw;
    coh_jw_init(&jw, stdout, 0);
    long wrong = 0, w = 0;
    double alpha_s = 0, t = 0;
    if (!st)
        st = ping_pong(&b, out, back, LAT_BYTES, LAT_TRIPS, LAT_WARMUP, times, &alpha_s, &w);
    wrong += w;
    int sweep = 0; /* sizes run, on both ranks alike */
    double top = (double)b.sw.max_bytes * 1.0000001;
    for (double sz = (double)b.sw.min_bytes; !st && sz <= top && sweep < MAX_SIZES;
         sz *= b.sw.factor, sweep++) {
        size_t bytes = (size_t)sz;
        st = ping_pong(&b, out, back, bytes, b.sw.iters, b.sw.warmup, times, &t, &w);
        if (st || b.rank)
            continue;
        wrong += w;
        sizes[rows] = (double)bytes;
        secs[rows++] = t;
        if (b.json) {
            coh_jw_object_begin(&jw);
            coh_jw_field_uint(&jw, "size", bytes);
            coh_jw_field_double(&jw, "time_us", t * 1e6);
            coh_jw_field_double(&jw, "gbytes_per_s", (double)bytes / t / 1e9);
            coh_jw_field_int(&jw, "wrong", w);
            coh_jw_object_end(&jw);
            coh_jw_finish(&jw);
        } else {
            printf("%12zu %12.1f %12.4f %8ld\n", bytes, t * 1e6, (double)bytes / t / 1e9, w);
        }
        fflush(stdout);
    }
    free(out);
    free(back);
    free(times);
    coh_comm_destroy(b.c);
    if (st)
        return cli_fail(CMD, st);
    if (b.rank)
        return CLI_OK;
    if (wrong) {
        fprintf(stderr, "cohort %s: error: %ld bytes came back different from what was sent\n",
                CMD, wrong);
        return CLI_FAILED;
    }
    /* least squares of t = a + n s over the sweep: beta = 1/s */
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < rows; i++)
        mx += sizes[i] / rows, my += secs[i] / rows;
    for (int i = 0; i < rows; i++) {
        sxx += (sizes[i] - mx) * (sizes[i] - mx);
        sxy += (sizes[i] - mx) * (secs[i] - my);
    }
    if (rows < 2 || !(sxx > 0) || !(sxy > 0))
        return cli_fail(CMD, coh_errf(COH_ERR_INVALID, "%d message sizes whose times do not "
                                      "grow with the size: no bandwidth to fit (widen "
                                      "--min-bytes..--max-bytes)", rows));
    double slope = sxy / sxx, beta = 1 / slope, intercept = my - slope * mx;
    /* the calibration file's ranges (src/plan/hw.c): 1e-6 to 1e6 GB/s, 0 to 1e7 us */
    if (!(beta >= 1e3 && beta <= 1e15) || !(alpha_s > 0 && alpha_s <= 10))
        return cli_fail(CMD, coh_errf(COH_ERR_INVALID, "measured alpha %g us and beta %g GB/s: "
                                      "outside 0 to 1e7 us and 1e-6 to 1e6 GB/s", alpha_s * 1e6,
                                      beta / 1e9));
    if (b.json) {
        coh_jw_object_begin(&jw);
        coh_jw_field_double(&jw, "alpha_us", alpha_s * 1e6);
        coh_jw_field_double(&jw, "beta_gbytes_per_s", beta / 1e9);
        coh_jw_field_double(&jw, "intercept_us", intercept * 1e6);
        coh_jw_field_int(&jw, "sizes", rows);
        coh_jw_object_end(&jw);
        coh_jw_finish(&jw);
    } else {
        printf("# link: alpha %.2f us (one-way, %d-byte message), beta %.4f GB/s (least squares "
               "over %d sizes from %.0f to %.0f bytes; intercept %.1f us)\n", alpha_s * 1e6,
               LAT_BYTES, beta / 1e9, rows, sizes[0], sizes[rows - 1], intercept * 1e6);
    }
    if (b.calibration) {
        if ((rc = merge(&b, &cal, alpha_s, beta)) != CLI_OK)
            return rc;
        if (!b.json)
            printf("# wrote \"inter_node\": {\"latency_us\": %.6g, \"gbytes_per_s\": %.6g} into "
                   "%s\n", alpha_s * 1e6, beta / 1e9, b.calibration);
    }
    fflush(stdout);
    return CLI_OK;
}
