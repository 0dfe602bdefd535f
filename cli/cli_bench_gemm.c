/* cli_bench_gemm.c: `cohort bench gemm`: this machine's rate table for the planner (sgemm
 * throughput over sizes, elementwise bandwidth, op overhead, for 1 thread and all cores),
 * printed and written as a calibration file for `cohort plan --calibration`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_bench.h"
#include "cohort/planner.h"
#include "cohort/train.h" /* coh_engine_ensure_environment */

const char bench_gemm_summary[] = "measure GEMM and memory rates, write a calibration file";

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort bench gemm [--out FILE] [--quick] [--threads-max N]\n"
               "                         [--link-latency-us US --link-gbytes-per-s GB]\n"
               "       cohort bench gemm --device cuda [--out FILE] [--quick]\n\n"
               "Measures sgemm (row-major, 4n x n x n) throughput over sizes, elementwise\n"
               "bandwidth and the cost of one op, for 1 thread and for all cores, and writes\n"
               "them as a calibration file for 'cohort plan --calibration FILE'. The link\n"
               "between ranks comes from 'cohort bench comm' (an α-β fit of its all-reduce\n"
               "times; bench/plan/run.sh does it) or is estimated from the copy bandwidth;\n"
               "the link between nodes from 'cohort bench link --calibration FILE' (one rank\n"
               "on each of two nodes), which adds it to the file.\n\n"
               "With --device, the device's products are timed through the engine's backend\n"
               "table (bf16 on a GPU) at square sizes and at transformer layer shapes, each\n"
               "beside the planner's price for it; on a GPU --out writes its measured GEMM\n"
               "efficiency, stream bandwidth and op overhead over the matching preset.\n");
}

int bench_gemm(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", 1, 0, 'o'}, {"quick", 0, 0, 'q'}, {"threads-max", 1, 0, 't'},
        {"link-latency-us", 1, 0, 'l'}, {"link-gbytes-per-s", 1, 0, 'g'},
        {"device", 1, 0, 'd'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL, *device = NULL;
    int quick = 0, threads = 0, ch;
    double lat = -1, gb = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'q': quick = 1; break;
        case 'd': device = optarg; break;
        case 't':
            if (!cli_parse_int("bench gemm", "--threads-max", optarg, 1, 4096, &threads))
                return CLI_USAGE;
            break;
        case 'l':
            if (!cli_parse_double("bench gemm", "--link-latency-us", optarg, 0, 1e7, &lat))
                return CLI_USAGE;
            break;
        case 'g':
            if (!cli_parse_double("bench gemm", "--link-gbytes-per-s", optarg, 1e-6, 1e6, &gb))
                return CLI_USAGE;
            break;
        case 'h': usage(stdout); return CLI_OK;
        default: return cli_bad_option("bench gemm", argv);
        }
    }
    if (cli_no_operands("bench gemm", argc, argv))
        return CLI_USAGE;
    if (device && strcmp(device, "cpu")) {
        if (threads || lat >= 0 || gb >= 0)
            return cli_usage_error("bench gemm", "--threads-max and the link flags describe this "
                                   "machine's CPU: not with --device %s", device);
        return bench_gemm_device(device, out, quick);
    }
    if ((lat < 0) != (gb < 0))
        return cli_usage_error("bench gemm", "--link-latency-us and --link-gbytes-per-s go "
                                             "together");
    coh_engine_ensure_environment(); /* the kernel and spin cohort train runs with */
    coh_hw hw;
    coh_status st = coh_calibration_measure(quick, threads, &hw);
    if (st != COH_OK)
        return cli_fail("bench gemm", st);
    if (gb > 0) {
        hw.intra.alpha_s = lat * 1e-6;
        hw.intra.bytes_per_s = gb * 1e9;
    }
    printf("# cohort bench gemm: %s\n# threads %12s %14s\n", hw.name, "work (MNK)", "GFLOP/s");
    for (int i = 0; i < hw.nrates; i++) {
        const coh_device_rates *r = &hw.rates[i];
        for (int k = 0; k < r->gemm.n; k++)
            printf("%9d %12.4g %14.2f\n", r->threads, r->gemm.work[k], r->gemm.flops[k] / 1e9);
        printf("%9d elementwise %.2f GB/s, op overhead %.2f us\n", r->threads,
               r->elementwise_bytes_per_s / 1e9, r->op_overhead_s * 1e6);
    }
    printf("# link between ranks: %.2f GB/s, %.1f us\n", hw.intra.bytes_per_s / 1e9,
           hw.intra.alpha_s * 1e6);
    if (out) {
        if ((st = coh_calibration_write(&hw, out)) != COH_OK)
            return cli_fail("bench gemm", st);
        printf("# wrote %s\n", out);
    }
    return CLI_OK;
}
